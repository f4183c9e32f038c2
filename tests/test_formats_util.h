/* test_formats_util.h: helpers shared by the tests/test_formats_*.c programs:
 * a scratch folder per test program, files written from memory, a growable
 * byte buffer to craft (bad) binary files, and the check that a failure
 * message names the file. Header-only so that each test stays one program. */
#ifndef TEST_FORMATS_UTIL_H
#define TEST_FORMATS_UTIL_H

/* not every test program uses every helper */
#pragma GCC diagnostic ignored "-Wunused-function"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "formats/formats.h"
#include "kernels/kernels.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tf_root[PATH_MAX];

/* A fresh scratch folder, removed by tf_cleanup (registered with atexit). */
static void tf_rm_rf(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            tf_rm_rf(p);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}
static void tf_cleanup(void) {
    if (tf_root[0] && !getenv("MTPLX_KEEP_TMP")) tf_rm_rf(tf_root);
}
static const char *tf_dir(void) {
    if (!tf_root[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(tf_root, sizeof tf_root, "%s/mtplx-formats-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tf_root)) abort();
        atexit(tf_cleanup);
    }
    return tf_root;
}
/* Path of name inside the scratch folder (static buffer rotation of 8). */
static const char *tf_path(const char *fmt, ...) {
    static char bufs[8][PATH_MAX];
    static int k;
    char name[PATH_MAX / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    char *b = bufs[k++ & 7];
    size_t dl = strlen(tf_dir()), nl = strlen(name);
    if (dl + 1 + nl >= PATH_MAX) abort();
    memcpy(b, tf_dir(), dl);
    b[dl] = '/';
    memcpy(b + dl + 1, name, nl + 1);
    return b;
}
static void tf_mkdir(const char *path) { mkdir(path, 0755); }

static void tf_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}
static void tf_write_str(const char *path, const char *s) { tf_write(path, s, strlen(s)); }

/* Whole file into memory (caller frees). */
static uint8_t *tf_read(const char *path, size_t *n) {
    char *p;
    assert_int_equal(mtplx_read_file(path, &p, n), MTPLX_OK);
    return (uint8_t *)p;
}

/* ---- byte buffer ---- */
typedef struct tf_buf {
    uint8_t *p;
    size_t n, cap;
} tf_buf;
static void bb_raw(tf_buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void bb_u32(tf_buf *b, uint32_t v) { bb_raw(b, &v, 4); }
static void bb_u64(tf_buf *b, uint64_t v) { bb_raw(b, &v, 8); }
static void bb_str(tf_buf *b, const char *s) {
    bb_u64(b, strlen(s));
    bb_raw(b, s, strlen(s));
}
static void bb_pad(tf_buf *b, size_t align) {
    static const uint8_t z[64];
    while (b->n % align) bb_raw(b, z, 1);
}

/* The last error message names the file (path or its base name) and contains
 * every given fragment. */
static void tf_assert_msg(const char *path, const char *frag1, const char *frag2) {
    const char *m = mtplx_last_error();
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (!strstr(m, base) || (frag1 && !strstr(m, frag1)) || (frag2 && !strstr(m, frag2)))
        fail_msg("message \"%s\" should name \"%s\" and contain \"%s\" \"%s\"", m, base,
                 frag1 ? frag1 : "", frag2 ? frag2 : "");
}

/* ---- safetensors writer ---- */
typedef struct tf_st {
    const char *name, *dtype;
    int rank;
    int64_t shape[4];
    const void *data;
    size_t nbytes;
} tf_st;

/* Write tensors back to back; the header is padded with spaces to 8 bytes. */
static void tf_write_safetensors(const char *path, const tf_st *ts, int n) {
    size_t cap = 4096 + (size_t)n * 256, len = 0, off = 0;
    char *h = malloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                                ts[i].name, ts[i].dtype);
        for (int d = 0; d < ts[i].rank; d++)
            len += (size_t)snprintf(h + len, cap - len, "%s%lld", d ? "," : "",
                                    (long long)ts[i].shape[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%zu,%zu]}", off,
                                off + ts[i].nbytes);
        off += ts[i].nbytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8) h[len++] = ' ';
    tf_buf b = {0};
    bb_u64(&b, len);
    bb_raw(&b, h, len);
    for (int i = 0; i < n; i++) bb_raw(&b, ts[i].data, ts[i].nbytes);
    tf_write(path, b.p, b.n);
    free(b.p);
    free(h);
}

/* Raw header + data (for bad files). */
static void tf_write_st_raw(const char *path, const char *json, const void *data, size_t n) {
    tf_buf b = {0};
    bb_u64(&b, strlen(json));
    bb_raw(&b, json, strlen(json));
    if (n) bb_raw(&b, data, n);
    tf_write(path, b.p, b.n);
    free(b.p);
}

#endif
