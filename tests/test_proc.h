/* test_proc.h: run a shell command the way the CLI tests do: its stdout
 * into out (NUL-terminated, at most cap - 1 bytes), its exit status back
 * (-1 when it did not exit normally). Include after cmocka.h. */
#ifndef MTPLX_TEST_PROC_H
#define MTPLX_TEST_PROC_H

#include <stdio.h>
#include <sys/wait.h>

static inline int tu_capture(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif
