/* core.h: the small pieces every layer uses: errors, logging, allocation,
 * timing, file mapping, CPU features and the thread pool.
 * Deliberately no general containers: each layer keeps its own simple arrays. */
#ifndef MTPLX_CORE_H
#define MTPLX_CORE_H

#include "mtplx.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- errors ---- */
/* Record a message for mtplx_last_error() and return st (for `return mtplx_fail(...)`). */
mtplx_status mtplx_fail(mtplx_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefix the current message with "prefix: " and return st. */
mtplx_status mtplx_fail_prefix(mtplx_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void mtplx_clear_error(void);

#define MTPLX_ASSERT(cond)                                                                   \
    do {                                                                                     \
        if (!(cond)) mtplx_assert_fail(__FILE__, __LINE__, #cond);                           \
    } while (0)
_Noreturn void mtplx_assert_fail(const char *file, int line, const char *cond);

#define MTPLX_TRY(expr)                                                                      \
    do {                                                                                     \
        mtplx_status st_ = (expr);                                                           \
        if (st_ != MTPLX_OK) return st_;                                                     \
    } while (0)

/* ---- logging (stderr; level from MTPLX_LOG=debug|info|warn|error, default warn) ---- */
enum { MTPLX_LOG_DEBUG = 0, MTPLX_LOG_INFO = 1, MTPLX_LOG_WARN = 2, MTPLX_LOG_ERROR = 3 };
void mtplx_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mtplx_log_set_level(int level);

/* ---- allocation: NULL on failure, callers turn that into MTPLX_ERR_NOMEM ---- */
void *mtplx_aligned_alloc(size_t align, size_t size); /* free with free() */
char *mtplx_strdup(const char *s);
char *mtplx_strndup(const char *s, size_t n);

/* ---- time ---- */
double mtplx_time_ms(void); /* monotonic */

/* ---- files ---- */
typedef struct mtplx_mmap {
    void *data;
    size_t size;
} mtplx_mmap;
mtplx_status mtplx_mmap_open(const char *path, mtplx_mmap *out); /* read-only */
void mtplx_mmap_close(mtplx_mmap *m);
/* Whole file into memory, NUL terminated. *out: caller frees. */
mtplx_status mtplx_read_file(const char *path, char **out, size_t *len);
bool mtplx_is_dir(const char *path);
bool mtplx_file_exists(const char *path);
/* Join dir and name into buf (truncation reported as MTPLX_ERR_ARG). */
mtplx_status mtplx_path_join(char *buf, size_t cap, const char *dir, const char *name);

/* ---- CPU features ---- */
typedef struct mtplx_cpu {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16;
    bool amx_tile, amx_bf16, amx_int8;
    int n_cores; /* online logical CPUs */
} mtplx_cpu;
const mtplx_cpu *mtplx_cpu_features(void); /* detected once */

/* ---- thread pool ----
 * run() calls fn(arg, ith, nth) on nth threads (the caller is thread 0) and
 * returns when all are done. Workers spin briefly then sleep, so back-to-back
 * ops in a forward pass do not pay a wake-up each. */
typedef struct mtplx_threadpool mtplx_threadpool;
typedef void (*mtplx_task_fn)(void *arg, int ith, int nth);
mtplx_status mtplx_threadpool_new(int n_threads, mtplx_threadpool **out);
void mtplx_threadpool_free(mtplx_threadpool *tp);
int mtplx_threadpool_size(const mtplx_threadpool *tp);
void mtplx_threadpool_run(mtplx_threadpool *tp, mtplx_task_fn fn, void *arg);

/* pthread_create with every signal blocked in the new thread: a library
 * thread must never take the program's SIGINT (the terminal chat relies on
 * Ctrl-C interrupting the main thread's read). Returns pthread_create's code. */
int mtplx_thread_create(pthread_t *th, void *(*fn)(void *), void *arg);
/* Split [0, n) into nth near-equal ranges; range of thread ith. */
static inline void mtplx_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t per = (n + nth - 1) / nth;
    *lo = per * ith < n ? per * ith : n;
    *hi = *lo + per < n ? *lo + per : n;
}

#endif
