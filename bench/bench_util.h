/* bench_util.h: the small helpers the model benchmarks share: medians, a
 * "--flag value" lookup and CHECK, which ends the program with the library's
 * message. Define BENCH_NAME (the program's name) before including. */
#ifndef MTPLX_BENCH_UTIL_H
#define MTPLX_BENCH_UTIL_H

#include "mtplx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int bench_cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v. */
static inline double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The value after flag `name` in argv, or def. */
static inline const char *arg(int argc, char **argv, const char *name, const char *def) {
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return def;
}

#define CHECK(x)                                                                             \
    do {                                                                                     \
        mtplx_status st_ = (x);                                                              \
        if (st_ != MTPLX_OK) {                                                               \
            fprintf(stderr, BENCH_NAME ": %s: %s\n", #x, mtplx_last_error());                \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

#endif
