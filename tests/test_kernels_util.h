/* test_kernels_util.h: helpers shared by the kernel tests: a seeded RNG,
 * random data, the list of kernel variants this CPU can run. */
#ifndef MTPLX_TEST_KERNELS_UTIL_H
#define MTPLX_TEST_KERNELS_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "kernels/kernels_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rng {
    uint64_t s;
} rng;

static inline uint64_t rng_next(rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }
static inline float rng_gauss(rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}
static inline void fill_gauss(rng *r, float *x, int64_t n, float sigma) {
    for (int64_t i = 0; i < n; i++) x[i] = sigma * rng_gauss(r);
}

static const char *const all_isas[] = {"ref", "avx2", "avx512"};
#define N_ISAS 3

/* Force isa if this CPU has it; tests skip variants that cannot run here. */
static inline bool use_isa(const char *isa) { return mtplx_kernels_force(isa); }

static inline void *xalloc(size_t n) {
    void *p = mtplx_aligned_alloc(64, n ? (n + 63) / 64 * 64 : 64);
    assert_non_null(p);
    return p;
}

#endif
