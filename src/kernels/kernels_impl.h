/* kernels_impl.h: what the kernel variants share and what the dispatcher
 * calls. Not a public header: model code uses kernels.h only.
 *
 * A variant (ref, avx2, avx512) is a table of function pointers. Entries a
 * variant leaves NULL are filled from the next simpler variant (avx512 ->
 * avx2 -> ref), so a SIMD file implements only what pays.
 *
 * Quantized activations live in the matmul scratch as planes, not GGML blocks,
 * so that SIMD loads of one token's values are contiguous and aligned:
 *   xq [n][k]        int8 values
 *   xd [n][k / bs]   float scales (bs = 32 for Q8_0, 256 for Q8_K); for Q8_0
 *                    the scale is rounded through fp16 exactly as a block_q8_0
 *                    stores it, so dot products equal GGML's bit for bit.
 *   xs [n][k / 16]   int16 sums of 16 values (Q8_K only, GGML's bsums)
 * The values are those of mtplx_quantize_row(Q8_0 / Q8_K). */
#ifndef MTPLX_KERNELS_IMPL_H
#define MTPLX_KERNELS_IMPL_H

#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

#define MTPLX_CACHE_LINE 64

/* Everything one matmul call needs; variants compute rows [r0, r1) of W for
 * all n tokens. */
typedef struct mm_args {
    int type;
    const uint8_t *W; /* [m] rows of w_stride bytes */
    size_t w_stride;
    int64_t m, k, n;
    const float *x;    /* [n][k] f32 activations (float weight types) */
    const int8_t *xq;  /* [n][k] quantized activations */
    const float *xd;   /* [n][k / bs] scales */
    const int16_t *xs; /* [n][k / 16] sums (Q8_K) */
    float *y;          /* [n][m] */
} mm_args;

typedef void (*mm_fn)(const mm_args *a, int64_t r0, int64_t r1);

typedef struct attn_args {
    const float *q; /* [n_tok][n_head][head_dim] */
    int64_t n_tok;
    int n_head, n_head_kv, head_dim;
    const void *k, *v; /* [n_ctx][n_head_kv][head_dim] kv_type */
    int kv_type;
    int64_t pos0;
    float scale;
    float *out; /* [n_tok][n_head][head_dim] */
} attn_args;

/* One (token, head) of attention; scores has room for pos0 + n_tok floats. */
typedef void (*attn_fn)(const attn_args *a, int64_t tok, int head, float *scores);

typedef struct kernel_ops {
    const char *name;
    mm_fn mm[MTPLX_TYPE_COUNT]; /* indexed by weight type */
    /* n floats (a multiple of 32 / 256) into planes as described above */
    void (*quant_q8_0)(const float *x, int64_t n, int8_t *q, float *d);
    void (*quant_q8_K)(const float *x, int64_t n, int8_t *q, float *d, int16_t *s);
    void (*rmsnorm_row)(const float *x, const float *w, float *out, int64_t d, float eps);
    void (*silu_mul)(const float *gate, const float *up, float *out, int64_t n);
    void (*add)(float *y, const float *x, int64_t n);
    void (*softmax)(float *x, int64_t n);
    void (*f32_to_f16)(const float *x, uint16_t *y, int64_t n);
    attn_fn attn;
} kernel_ops;

extern const kernel_ops mtplx_kernels_ref_ops;
/* Defined only where the compiler builds the ISA file (always on x86-64). */
extern const kernel_ops mtplx_kernels_avx2_ops;
extern const kernel_ops mtplx_kernels_avx512_ops;

/* The table in use (filled, no NULL entries). */
const kernel_ops *mtplx_kernels_ops(void);

/* Which activation format a weight type's dot product wants. */
static inline int mm_partner(int type) {
    switch (type) {
    case MTPLX_TYPE_Q8_0:
    case MTPLX_TYPE_Q4_0: return MTPLX_TYPE_Q8_0;
    case MTPLX_TYPE_Q4_K:
    case MTPLX_TYPE_Q6_K: return MTPLX_TYPE_Q8_K;
    default: return MTPLX_TYPE_F32;
    }
}

/* llama.cpp's nearest_int: round half to even through the 1.5 * 2^23 trick,
 * valid for |f| <= 2^22. Quantizers must use exactly this to match GGML. */
static inline int mtplx_nearest_int(float f) {
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* Q4_K packs 8 six-bit scales and 8 six-bit mins in 12 bytes. */
static inline void mtplx_q4k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Reference quantizers of activations into planes (also used by tests). */
void mtplx_quant_q8_0_ref(const float *x, int64_t n, int8_t *q, float *d);
void mtplx_quant_q8_K_ref(const float *x, int64_t n, int8_t *q, float *d, int16_t *s);

#endif
