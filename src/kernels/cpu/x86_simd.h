/* x86_simd.h: thin 256-bit primitives shared by the x86 kernel files
 * (x86_avx2.c, x86_avx512.c). Include only from files compiled with at least
 * -mavx2 -mfma -mf16c. No kernels here, only the small pieces they share. */
#ifndef MTPLX_X86_SIMD_H
#define MTPLX_X86_SIMD_H

#include "kernels/kernels_impl.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))
/* -O2 does not unroll; the loops over tokens must be, so that each token's
 * accumulators live in registers rather than on the stack. */
#define UNROLL _Pragma("GCC unroll 8")

/* Rows of W processed together per pass over the tokens: about this many
 * bytes stay in L1/L2 while each group of tokens is applied to them. */
#define ROW_BLOCK_BYTES (16 * 1024)
/* Tokens applied per pass over a weight row (accumulators in registers). */
#define NT_MAX 4

AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Horizontal sums of 4 vectors: lane i of the result is sum(vi). */
AI __m128 hsum8x4(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

AI float f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }

AI int64_t row_block(size_t row_bytes) {
    int64_t rb = (int64_t)(ROW_BLOCK_BYTES / (row_bytes ? row_bytes : 1));
    return rb < 1 ? 1 : rb;
}

/* Run KERNEL(a, r, t0, nt) for rows [r0, r1) and all tokens, tokens in
 * groups of NT_MAX with the rows of a row block hot in cache. nt is a
 * compile-time constant in each call so KERNEL's loops over it unroll. */
#define FOR_ROWS_AND_TOKENS(KERNEL, a, r0, r1)                                               \
    do {                                                                                     \
        int64_t rb_ = row_block((a)->w_stride);                                              \
        for (int64_t rr_ = (r0); rr_ < (r1); rr_ += rb_) {                                   \
            int64_t re_ = rr_ + rb_ < (r1) ? rr_ + rb_ : (r1);                               \
            for (int64_t t0_ = 0; t0_ < (a)->n; t0_ += NT_MAX) {                             \
                int64_t left_ = (a)->n - t0_;                                                \
                for (int64_t r_ = rr_; r_ < re_; r_++) {                                     \
                    switch (left_ >= NT_MAX ? NT_MAX : left_) {                              \
                    case 4: KERNEL(a, r_, t0_, 4); break;                                    \
                    case 3: KERNEL(a, r_, t0_, 3); break;                                    \
                    case 2: KERNEL(a, r_, t0_, 2); break;                                    \
                    default: KERNEL(a, r_, t0_, 1); break;                                   \
                    }                                                                        \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    } while (0)

/* Store the nt row results acc[t] into y[t0 + t][r]. */
AI void store_results(const mm_args *a, int64_t r, int64_t t0, int nt, const __m256 *acc) {
    if (nt == 4) {
        float s[4];
        _mm_storeu_ps(s, hsum8x4(acc[0], acc[1], acc[2], acc[3]));
        UNROLL
        for (int t = 0; t < 4; t++) a->y[(t0 + t) * a->m + r] = s[t];
    } else {
        UNROLL
        for (int t = 0; t < nt; t++) a->y[(t0 + t) * a->m + r] = hsum8(acc[t]);
    }
}

#endif
