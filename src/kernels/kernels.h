/* kernels.h: tensor types in GGUF's block layouts and the CPU kernels that
 * the model runs on them.
 *
 * Type ids and block layouts are GGML's, bit for bit, so GGUF files move
 * between mtplx and llama.cpp unchanged. Every kernel exists as a scalar
 * reference (kernels/ref, the oracle) and as SIMD variants (kernels/cpu, one
 * file per ISA) picked at run time from CPU features.
 *
 * Kernels never allocate, log or open files; threaded entry points take the
 * context's thread pool and split their work themselves. */
#ifndef MTPLX_KERNELS_H
#define MTPLX_KERNELS_H

#include "core/core.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum mtplx_type {
    MTPLX_TYPE_F32 = 0,
    MTPLX_TYPE_F16 = 1,
    MTPLX_TYPE_Q4_0 = 2,
    MTPLX_TYPE_Q8_0 = 8,
    MTPLX_TYPE_Q4_K = 12,
    MTPLX_TYPE_Q6_K = 14,
    MTPLX_TYPE_Q8_K = 15, /* activations only (dot partner of the K-quants) */
    MTPLX_TYPE_BF16 = 30,
    MTPLX_TYPE_COUNT = 40,
} mtplx_type;

#define QK8_0 32
#define QK4_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

/* GGML block layouts (ggml-common.h facts, written out here). */
typedef struct { uint16_t d; uint8_t qs[QK8_0]; } block_q8_0;            /* d fp16 */
typedef struct { uint16_t d; uint8_t qs[QK4_0 / 2]; } block_q4_0;        /* nibbles, -8 offset */
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } block_q4_K;
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; } block_q6_K;
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;

typedef struct mtplx_type_traits {
    const char *name;   /* "F32", "Q8_0", ... as GGUF tools print them */
    int64_t block_size; /* elements per block (1 for F32/F16/BF16) */
    size_t type_size;   /* bytes per block */
    bool is_quantized;
} mtplx_type_traits;

/* NULL for an id we do not support. */
const mtplx_type_traits *mtplx_type_info(int type);
/* Parse "q8_0", "Q4_K", "bf16", ... ; -1 if unknown. */
int mtplx_type_from_name(const char *name);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size. */
size_t mtplx_row_size(int type, int64_t n);

/* fp16 / bf16 scalar conversions (IEEE half; bf16 rounds to nearest even). */
float mtplx_fp16_to_fp32(uint16_t h);
uint16_t mtplx_fp32_to_fp16(float f);
static inline float mtplx_bf16_to_fp32(uint16_t h) {
    union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
    return v.f;
}
uint16_t mtplx_fp32_to_bf16(float f);

/* n must be a multiple of the type's block size. */
void mtplx_dequantize_row(int type, const void *src, float *dst, int64_t n);
/* Quantize n floats into dst (mtplx_row_size(type, n) bytes), llama.cpp's
 * reference rounding for each type. Returns bytes written. */
size_t mtplx_quantize_row(int type, const float *src, void *dst, int64_t n);

/* ---- matmul: the kernel that decides decode and verify speed ----
 * y[i][r] = sum_j x[i][j] * W[r][j]   for i < n tokens, r < m output rows.
 * W: m rows of k elements of `type`, row stride mtplx_row_size(type, k).
 * x: [n][k] f32, y: [n][m] f32 (row stride m).
 * For small n (decode n = 1, verify n <= 16) each weight block is read once
 * and applied to all n rows, so verifying k+1 tokens costs about one decode.
 * scratch: mtplx_matmul_scratch_size(type, k, n) bytes, 64-byte aligned
 * (x converted to the weight type's dot partner: Q8_0, Q8_K, F16 or BF16). */
size_t mtplx_matmul_scratch_size(int type, int64_t k, int64_t n);
void mtplx_matmul(mtplx_threadpool *tp, int type, const void *W, int64_t m, int64_t k,
                  const float *x, int64_t n, float *y, void *scratch);

/* ---- prepared weights: a load-time relayout that the matmul reads faster ----
 * Q8_0, Q4_0 and Q4_K rows are interleaved 8 at a time (kernels_impl.h says
 * how), so that the int8 dot work of one activation load is shared by 8 rows
 * and small-n verification costs about one decode step. Values and results
 * are those of the plain layout up to the order of float additions; each
 * token's arithmetic is the same whatever n is (batch invariance).
 * mtplx_weight_prepared_size: bytes for m x k of type, 0 if the type has no
 * prepared layout (then use mtplx_matmul on the plain rows).
 * mtplx_weight_prepare: fill dst (that many bytes, 64-byte aligned, caller
 * owns it) from the plain rows W. */
size_t mtplx_weight_prepared_size(int type, int64_t m, int64_t k);
void mtplx_weight_prepare(int type, const void *W, int64_t m, int64_t k, void *dst);
/* mtplx_matmul on prepared weights P (same x, y, scratch contract). */
void mtplx_matmul_prepared(mtplx_threadpool *tp, int type, const void *P, int64_t m, int64_t k,
                           const float *x, int64_t n, float *y, void *scratch);

/* ---- small ops (threaded over rows where it pays) ---- */
/* out[i] = x[i] / rms(x) * w  for each of n rows of size d (out may be x). */
void mtplx_rmsnorm(const float *x, const float *w, float *out, int64_t n, int64_t d, float eps);
/* x[i] = silu(g[i]) * u[i] ... out = silu(gate) * up, n elements. */
void mtplx_silu_mul(const float *gate, const float *up, float *out, int64_t n);
void mtplx_add(float *y, const float *x, int64_t n); /* y += x */
void mtplx_softmax(float *x, int64_t n);               /* in place, max-subtracted */
/* log(sum exp x), max-subtracted, in float (-inf when every x is -inf). */
float mtplx_log_sum_exp(const float *x, int64_t n);
/* The first index of the largest of x[0..n) (n > 0): the sampler's greedy
 * rule, `best = 0; for i: if (x[i] > x[best]) best = i`, NaN included (a NaN
 * is never larger; x[0] NaN gives 0). */
int64_t mtplx_argmax(const float *x, int64_t n);
/* out = exp((x - max x) * s), exactly 0 where x is -inf; returns sum(out)
 * (0 when every x is -inf). The sampler's temperature softmax. */
float mtplx_exp_scaled(const float *x, int64_t n, float s, float *out);

/* Causal attention of n_tok query tokens at positions pos0 .. pos0+n_tok-1
 * against a KV cache holding positions 0 .. pos0+n_tok-1 (the new tokens
 * already written).
 *   q:   [n_tok][n_head][head_dim] f32
 *   k,v: [n_ctx][n_head_kv][head_dim] in kv_type: F16, F32, or Q8_0 (each
 *        position a row of GGUF block_q8_0, head_dim a multiple of 32, so
 *        every block lies inside one head, and at most
 *        MTPLX_KV_Q8_0_MAX_HEAD_DIM). Over Q8_0 the scores use q rounded to
 *        Q8_0 and integer dots, as GGML's CPU path does; values stay float.
 *   out: [n_tok][n_head][head_dim] f32
 * GQA: head h reads kv head h / (n_head / n_head_kv). scale = 1/sqrt(head_dim)
 * normally. scratch: scratch_size bytes, at least mtplx_attention_scratch_size(
 * pos0 + n_tok, threads of tp) (more lets more queries share a K/V read).
 * Each (token, head)'s result is the same bits whatever n_tok, pos0 split and
 * thread count produced it. */
#define MTPLX_KV_Q8_0_MAX_HEAD_DIM 1024
size_t mtplx_attention_scratch_size(int64_t n_ctx, int n_threads);
void mtplx_attention(mtplx_threadpool *tp, const float *q, int64_t n_tok, int n_head,
                     int n_head_kv, int head_dim, const void *k, const void *v, int kv_type,
                     int64_t pos0, float scale, float *out, void *scratch, size_t scratch_size);

/* Store n rows of d floats into a KV cache row block of kv_type (row stride
 * mtplx_row_size(kv_type, d)). Q8_0 rows are quantized one by one with
 * mtplx_quantize_row, so a row's bytes never depend on n. */
void mtplx_store_rows(int kv_type, const float *src, void *dst, int64_t n, int64_t d);

/* ---- variants, for tests and benchmarks ----
 * The ISA in use ("ref", "avx2", "avx512"); MTPLX_KERNELS=ref|avx2|avx512
 * forces one (if the CPU has it). */
const char *mtplx_kernels_isa(void);
/* Force a variant for this process ("ref", "avx2", "avx512"); false if the
 * CPU lacks it. */
bool mtplx_kernels_force(const char *isa);

#endif
