/* test_run_cli.c: the `mtplx run` program end to end:
 *  - stories260K (llama2.c's TinyStories 260K checkpoint) greedily prints
 *    llama2.c's published sample;
 *  - the default model's greedy text is the same with and without MTP;
 *  - bad input gives exit 1 (runtime) or 2 (usage) with a one-line message;
 *  - --device on run, bench, tune and forge verify;
 *  - forge verify's sampled mode (--temp). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "test_proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int run(const char *args, char *out, size_t cap) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s 2>/tmp/mtplx_test_run_cli.err", MTPLX_BIN, args);
    return tu_capture(cmd, out, cap);
}

static void stories260k(void **s) {
    (void)s;
    static char out[1 << 16];
    int rc = run("run -m " MTPLX_SHARED_DIR "/models/stories260K/stories260K.bin --temp 0 -n 256", out, sizeof out);
    assert_int_equal(rc, 0);
    const char *want = "Once upon a time, there was a little girl named Lily. She loved to play outside in "
                       "the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.";
    if (strncmp(out, want, strlen(want))) fail_msg("got: %.300s", out);
}

static void default_mtp_equals_ar(void **s) {
    (void)s;
    if (access(MTPLX_SOURCE_DIR "/models/default.gguf", R_OK)) skip();
    static char ar[1 << 16], sp[1 << 16];
    assert_int_equal(run("run -p 'The old man looked at the sea and' --temp 0 -n 120 --no-mtp", ar, sizeof ar), 0);
    for (int d = 1; d <= 3; d++) {
        char args[256];
        snprintf(args, sizeof args, "run -p 'The old man looked at the sea and' --temp 0 -n 120 --draft-depth %d", d);
        assert_int_equal(run(args, sp, sizeof sp), 0);
        assert_string_equal(ar, sp);
    }
    /* the head's draft copy in Q8_0 instead of the default Q4_0, and its
     * own float weights: other drafts, the same text */
    const char *copies[] = {"--no-draft-q4", "--draft-q4", "--no-draft-q8"};
    for (int i = 0; i < 3; i++) {
        char args[256];
        snprintf(args, sizeof args, "run -p 'The old man looked at the sea and' --temp 0 -n 120 %s", copies[i]);
        assert_int_equal(run(args, sp, sizeof sp), 0);
        assert_string_equal(ar, sp);
    }
}

static void bad_input(void **s) {
    (void)s;
    char out[4096], err[4096] = {0};
    assert_int_equal(run("run -m /nonexistent/model.gguf", out, sizeof out), 1);
    FILE *f = fopen("/tmp/mtplx_test_run_cli.err", "r");
    assert_non_null(f);
    size_t n = fread(err, 1, sizeof err - 1, f);
    fclose(f);
    err[n] = 0;
    assert_non_null(strstr(err, "/nonexistent/model.gguf"));
    assert_int_equal(run("run --temp banana", out, sizeof out), 2);
    assert_int_equal(run("run --draft-depth 99", out, sizeof out), 2);
    assert_int_equal(run("nosuchcommand", out, sizeof out), 2);
    /* an empty file and a text file given as the model */
    assert_int_equal(run("run -m " MTPLX_SOURCE_DIR "/README.md", out, sizeof out), 1);
    /* the llama2.c model has no MTP head: asking for a depth is a usage error */
    assert_int_equal(run("run -m " MTPLX_SHARED_DIR "/models/stories260K/stories260K.bin --draft-depth 2 -n 4", out, sizeof out), 2);
}

/* --device on every command that makes a context: a bad value is a usage
 * error (2); cuda without a usable GPU or CUDA build is a runtime error (1)
 * whose message names cuda (0 where a GPU answers); auto runs (0). */
static void device_option(void **s) {
    (void)s;
    if (access(MTPLX_SOURCE_DIR "/models/default.gguf", R_OK)) skip();
    static const char *cmds[] = {
        "run -p hi -n 2", "bench --quick -n 8 --reps 1 --max-depth 1", "tune --quick --retune --max-depth 1",
        "forge verify " MTPLX_SOURCE_DIR "/models/default.gguf -n 4 --prompts 1"};
    static char out[1 << 16];
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        char args[512], err[4096] = {0};
        snprintf(args, sizeof args, "%s --device gpu", cmds[i]);
        if (run(args, out, sizeof out) != 2) fail_msg("%s: expected exit 2", args);
        snprintf(args, sizeof args, "%s --device cuda", cmds[i]);
        int rc = run(args, out, sizeof out);
        FILE *f = fopen("/tmp/mtplx_test_run_cli.err", "r");
        assert_non_null(f);
        size_t n = fread(err, 1, sizeof err - 1, f);
        fclose(f);
        err[n] = 0;
        if (!(rc == 0 || (rc == 1 && strstr(err, "cuda")))) fail_msg("%s: exit %d, stderr: %.300s", args, rc, err);
        /* auto: the GPU when one answers, else the CPU; it always runs */
        snprintf(args, sizeof args, "%s --device auto", cmds[i]);
        if ((rc = run(args, out, sizeof out)) != 0) fail_msg("%s: exit %d", args, rc);
    }
}

/* forge verify --temp: sampled acceptance, no identity verdict, exit 0; the
 * greedy default still checks identity; a bad temperature is a usage error */
static void verify_sampled(void **s) {
    (void)s;
    if (access(MTPLX_SOURCE_DIR "/models/default.gguf", R_OK)) skip();
    static char out[1 << 16];
    const char *m = "forge verify " MTPLX_SOURCE_DIR "/models/default.gguf -n 24 --prompts 2 -j 1";
    char args[512];
    snprintf(args, sizeof args, "%s --temp 0.7 --seed 5", m);
    assert_int_equal(run(args, out, sizeof out), 0);
    if (!strstr(out, "sampled:            temperature 0.70") || strstr(out, "greedy identity") ||
        !strstr(out, "tokens per forward") || !strstr(out, "pos3"))
        fail_msg("sampled verify printed: %.600s", out);
    assert_int_equal(run(m, out, sizeof out), 0);
    if (!strstr(out, "greedy identity:    2/2 prompts identical")) fail_msg("greedy verify printed: %.600s", out);
    snprintf(args, sizeof args, "%s --temp -1", m);
    assert_int_equal(run(args, out, sizeof out), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stories260k),
        cmocka_unit_test(default_mtp_equals_ar),
        cmocka_unit_test(bad_input),
        cmocka_unit_test(device_option),
        cmocka_unit_test(verify_sampled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
