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
    const int16_t *xb; /* [n][k / 32] block sums (Q8_0; filled for prepared Q4_0 only) */
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

/* The query heads [h0, h1) of KV head kvh for tokens [t0, t1): one work item
 * whose queries share each K and V row read. scores: one row of `stride`
 * (>= pos0 + t1) floats per query, token-major ((t - t0) * (h1 - h0) + h - h0),
 * at most ATTN_GROUP_Q rows. A query's result is the same bits in any group. */
#define ATTN_GROUP_Q 16
typedef void (*attn_group_fn)(const attn_args *a, int kvh, int h0, int h1, int64_t t0, int64_t t1,
                              float *scores, size_t stride);

/* A group one query at a time (kernels without a grouped path). */
static inline void attn_group_each(attn_fn fn, const attn_args *a, int h0, int h1, int64_t t0, int64_t t1,
                                   float *scores, size_t stride) {
    for (int64_t t = t0; t < t1; t++)
        for (int h = h0; h < h1; h++) fn(a, t, h, scores + (size_t)((t - t0) * (h1 - h0) + h - h0) * stride);
}

typedef struct kernel_ops {
    const char *name;
    mm_fn mm[MTPLX_TYPE_COUNT]; /* indexed by weight type */
    /* the same on prepared weights (W in the tiled layout below); rows [r0, r1)
     * start at a multiple of PREP_ROWS */
    mm_fn mm_prep[MTPLX_TYPE_COUNT];
    /* n floats (a multiple of 32 / 256) into planes as described above */
    void (*quant_q8_0)(const float *x, int64_t n, int8_t *q, float *d);
    void (*quant_q8_K)(const float *x, int64_t n, int8_t *q, float *d, int16_t *s);
    void (*rmsnorm_row)(const float *x, const float *w, float *out, int64_t d, float eps);
    void (*silu_mul)(const float *gate, const float *up, float *out, int64_t n);
    void (*add)(float *y, const float *x, int64_t n);
    void (*softmax)(float *x, int64_t n);
    /* n > 0; a max of -inf (all masked) gives -inf / all 0, +inf gives +inf */
    float (*log_sum_exp)(const float *x, int64_t n);
    float (*exp_scaled)(const float *x, int64_t n, float s, float *out);
    int64_t (*argmax)(const float *x, int64_t n); /* n > 0 */
    void (*f32_to_f16)(const float *x, uint16_t *y, int64_t n);
    attn_fn attn;
    attn_group_fn attn_group;
} kernel_ops;

extern const kernel_ops mtplx_kernels_ref_ops;
/* Defined only where the compiler builds the ISA file (always on x86-64). */
extern const kernel_ops mtplx_kernels_avx2_ops;
extern const kernel_ops mtplx_kernels_avx512_ops;

/* The table in use (filled, no NULL entries). */
const kernel_ops *mtplx_kernels_ops(void);

/* ---- prepared weights (kernels/repack.c) ----
 * PREP_ROWS consecutive rows are interleaved block by block, so that one
 * 32-bit broadcast of 4 activation bytes meets 4 weights of each of 8 rows in
 * one 256-bit register: the int8 dot of a block ends as one int32 per row,
 * already in the lane of its row, and a block costs one float conversion and
 * one FMA for 8 rows instead of one per row. Rows past m are zero.
 * A group of 8 rows is nb tiles in block order; "byte 4c+e of row i" sits at
 * qs[c][4i+e]. */
#define PREP_ROWS 8
typedef struct { /* Q8_0: 8 rows x 32 values */
    uint16_t d[PREP_ROWS];        /* fp16 scales */
    int8_t qs[8][4 * PREP_ROWS];  /* qs[c][4i+e] = row i value 4c+e */
} tile_q8_0;
typedef struct { /* Q4_0: 8 rows x 32 values */
    uint16_t d[PREP_ROWS];
    uint8_t qs[4][4 * PREP_ROWS]; /* row i GGML byte 4c+e: values 4c+e (low), 16+4c+e (high) */
} tile_q4_0;
typedef struct { /* Q4_K: 8 rows x 256 values */
    uint16_t d[PREP_ROWS], dmin[PREP_ROWS];
    uint8_t sc[8][PREP_ROWS];        /* sc[j][i]: 6-bit scale of sub-block j of row i */
    uint8_t mn[4][2 * PREP_ROWS];    /* mn[p][2i+h]: 6-bit min of sub-block 2p+h of row i */
    uint8_t qs[4][8][4 * PREP_ROWS]; /* row i GGML byte 32j+4c+e at qs[j][c][4i+e] */
} tile_q4_K;

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

/* Scalar kernels on prepared weights (ref/repack_ref.c). */
void mtplx_mm_prep_q8_0_ref(const mm_args *a, int64_t r0, int64_t r1);
void mtplx_mm_prep_q4_0_ref(const mm_args *a, int64_t r0, int64_t r1);
void mtplx_mm_prep_q4_K_ref(const mm_args *a, int64_t r0, int64_t r1);

/* Reference quantizers of activations into planes (also used by tests). */
void mtplx_quant_q8_0_ref(const float *x, int64_t n, int8_t *q, float *d);
void mtplx_quant_q8_K_ref(const float *x, int64_t n, int8_t *q, float *d, int16_t *s);

#endif
