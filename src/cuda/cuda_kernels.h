/* cuda_kernels.h: the CUDA kernels of the CUDA backend, as plain C entry
 * points (kernels.cu, attention.cu, mmv*.cu, attn_prep.cu, sample.cu) that
 * the C glue (backend_cuda.c) calls.
 *
 * Every launcher is asynchronous on `stream`, takes device pointers only and
 * returns the launch's cudaError_t (0 = cudaSuccess). Layouts and meanings are
 * the CPU kernels' (kernels/kernels.h): the CUDA backend must agree with them
 * to a named tolerance (tests/test_cuda.c). Nothing here allocates. */
#ifndef MTPLX_CUDA_KERNELS_H
#define MTPLX_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/cuda_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows a captured step can have (the verify step is k + 1 <= 9 rows). */
#define MTPLX_CUDA_STEP_ROWS 16

/* The step block: what a forward captured as a CUDA graph reads at replay
 * (backend_cuda.c). Kernels given a `dyn` pointer to it add pos0 to their
 * position argument; the gather reads its row ids from tok. NULL: the
 * by-value arguments alone. */
typedef struct mtplx_cuda_step {
    int64_t pos0;
    int32_t tok[MTPLX_CUDA_STEP_ROWS];
} mtplx_cuda_step;

/* Greedy pick of each of n logits rows [n][V]: the first index of the
 * largest value (as the CPU sampler at temperature 0) and its log-softmax. */
typedef struct mtplx_cuda_pick {
    int32_t id;
    float logprob;
} mtplx_cuda_pick;
cudaError_t mtplx_cuda_argmax_rows(cudaStream_t s, const float *logits, int64_t n, int64_t V,
                                   mtplx_cuda_pick *out);

/* Sampling on the GPU (sample.cu): for row i < n of logits [n][V], engine/
 * sampler.c's top-k distribution p_i (temperature, top-k in 1..TOPK_MAX,
 * top-p, min-p; no penalties, no mask), then
 *   draft[i] < 0: a draw from p_i with u_sample[i] (mtplx_sample_dist);
 *   draft[i] >= 0: spec.c's test of draft[i] against test[i] (a distribution
 *     an earlier call kept) with u_accept[i]; accepted, or a draw from the
 *     residual with u_sample[i].
 * keep (or NULL): p_i into keep[i]. out[i]: the token, whether the draft was
 * accepted, log softmax(row i)[token], p_i's support size. */
#define MTPLX_CUDA_TOPK_MAX 1024
#define MTPLX_CUDA_SAMPLE_ROWS 16
/* A distribution over at most TOPK_MAX tokens, ids ascending. */
typedef struct mtplx_cuda_dist {
    int32_t n;
    int32_t id[MTPLX_CUDA_TOPK_MAX];
    float p[MTPLX_CUDA_TOPK_MAX];
} mtplx_cuda_dist;
typedef struct mtplx_cuda_sample_args {
    int32_t n, top_k;
    float inv_t, top_p, min_p; /* inv_t = 1.0f / temperature, as sampler.c */
    int32_t draft[MTPLX_CUDA_SAMPLE_ROWS];
    double u_accept[MTPLX_CUDA_SAMPLE_ROWS], u_sample[MTPLX_CUDA_SAMPLE_ROWS];
} mtplx_cuda_sample_args;
typedef struct mtplx_cuda_sample_out {
    int32_t id, accepted;
    float logprob;
    int32_t n_kept;
} mtplx_cuda_sample_out;
cudaError_t mtplx_cuda_sample_rows(cudaStream_t s, const float *logits, int64_t V,
                                   const mtplx_cuda_sample_args *a, mtplx_cuda_dist *keep,
                                   const mtplx_cuda_dist *test, mtplx_cuda_sample_out *out);

/* *dst = *v, as a kernel on s (so it is ordered with the launches around it
 * and v is copied at launch: the host may reuse it at once). */
cudaError_t mtplx_cuda_set_step(cudaStream_t s, mtplx_cuda_step *dst, const mtplx_cuda_step *v);

/* y[n][m] = x[n][k] . W^T (+ bias[m]); W: m rows of k elements of `type`,
 * row stride row_bytes. Each weight is read once per 16 rows of x, so the
 * verify step (n <= 16) costs about one decode step. */
cudaError_t mtplx_cuda_matmul(cudaStream_t s, int type, const void *W, size_t row_bytes, int64_t m,
                              int64_t k, const float *x, int64_t n, float *y, const float *bias);
/* The same product on tensor cores, for prefill (many rows of x): tiles of
 * W dequantised and x rounded to bf16 (__half for F16 weights) in shared
 * memory, f32 accumulation (kernels.cu says why those operand types). Not
 * bit-identical to mtplx_cuda_matmul; the backend uses it only for n of at
 * least MTPLX_CUDA_TC_MIN_ROWS (cuda_backend.h), so a decode / verify step
 * never sees it.
 * mtplx_cuda_matmul_tc_ok: whether it takes this type and layout (k % 8 ==
 * 0; float rows 16-byte aligned); otherwise it returns cudaErrorInvalidValue. */
/* split (may be NULL: never split k): device scratch for split-k partial
 * sums (kernels.cu says when k is split), and the GPU's SM count. The result
 * does not depend on the scratch's address, only on the split count, which
 * depends on (m, n, k, bytes, n_sm). */
typedef struct mtplx_cuda_tc_split {
    float *buf;
    size_t bytes;
    int n_sm;
} mtplx_cuda_tc_split;
bool mtplx_cuda_matmul_tc_ok(int type, const void *W, size_t row_bytes, int64_t k);
/* layout (cuda_layout.h): W as in the file, or a GEMV's copy: BF16 tiled
 * (row_bytes 2 k), Q8_0 packed or int8-interleaved (row_bytes
 * mtplx_cuda_q8_0_packed_row(k); the results are the same bits as from the
 * file's layout, since every layout dequantises to the same values). */
cudaError_t mtplx_cuda_matmul_tc(cudaStream_t s, int type, const void *W, size_t row_bytes,
                                 int layout, int64_t m, int64_t k, const float *x, int64_t n,
                                 float *y, const float *bias, const mtplx_cuda_tc_split *split);
/* Split-k for a GEMM of `blocks` output tiles: while the tiles leave SMs
 * idle, about two blocks an SM, at most 8 runs, each of whole bk-element
 * steps and at least min_steps of them, the n x m partials within sp's
 * scratch (sp NULL or sp->buf NULL: no split). Returns the runs
 * (blockIdx.z) and sets *kchunk, the elements of k a run takes. */
int mtplx_cuda_tc_split_k(const mtplx_cuda_tc_split *sp, int64_t blocks, int64_t n, int64_t m, int64_t k, int bk,
                          int min_steps, int64_t *kchunk);
/* y[i] = part[0][i] + ... + part[splits - 1][i] (in that order) + bias[i % m]
 * over nm outputs: the split-k GEMMs' sum of their partials; with gate
 * (and no bias) silu(gate[i]) times that sum, as mtplx_cuda_silu_mul would
 * make it (gate may be y) */
cudaError_t mtplx_cuda_tc_reduce(cudaStream_t s, const float *part, int splits, int64_t nm, int64_t m,
                                 float *y, const float *bias, const float *gate);
/* The pipelined prefill GEMM (gemm_bf16.cu): BF16 in mtplx_cuda_tile_bf16's
 * layout, Q8_0 packed / int8-interleaved (row_bytes
 * mtplx_cuda_q8_0_packed_row(k)) or Q4_K in the file's layout. y[n][m] =
 * x W^T (+ bias), x and W rounded to bf16 as mtplx_cuda_matmul_tc rounds
 * them; k % 32 == 0 (64 for int8-interleaved Q8_0) (mtplx_cuda_gemm_bf16_ok).
 * split: as mtplx_cuda_matmul_tc's (buf NULL: no split). xb: scratch for x
 * in bf16 (16-byte aligned); where it holds n k of them, x is rounded once
 * into it and staged as bf16 (x aligned or not), else (NULL, too small)
 * staged as f32 and rounded at each use (x 16-byte aligned): the same bits
 * either way, on the mma.sync kernel. With wgmma (128 / 256) and x in xb,
 * BF16 tiled weights go to gemm_wgmma.cu where it takes them: other sums'
 * order, other bits. gate (no bias; may be y): the up projection of a
 * SwiGLU, y = silu(gate) (x W^T), the bits of the GEMM, then
 * mtplx_cuda_silu_mul. xb_ready: xb already holds this x in bf16 (the GEMM
 * before, of the same x, n and k, staged it there and nothing wrote x
 * since): not rounded again. */
bool mtplx_cuda_gemm_bf16_ok(int type, int layout, int64_t k, const float *x, int64_t n, const void *xb,
                             size_t xb_bytes);
/* Once per device, before the first mtplx_cuda_gemm_bf16: its stages take
 * more than 48 KB of shared memory. */
cudaError_t mtplx_cuda_gemm_bf16_init(void);
cudaError_t mtplx_cuda_gemm_bf16(cudaStream_t s, int type, int layout, const void *W, size_t row_bytes,
                                 int64_t m, int64_t k, const float *x, int64_t n, float *y, const float *bias,
                                 const float *gate, const mtplx_cuda_tc_split *split, void *xb, size_t xb_bytes,
                                 int wgmma, bool xb_ready);
/* The same GEMM on Hopper's warpgroup tensor cores (gemm_wgmma.cu), for
 * BF16 tiled weights with x already in bf16 (xb: n rows of k, 16-byte
 * aligned), k % 64 == 0, on a compute capability 9.0 GPU with the file
 * built for sm_90a (mtplx_cuda_gemm_wgmma_ok). bn: weight rows a block,
 * 128 or 256. mtplx_cuda_gemm_bf16 hands its BF16 GEMMs here with wgmma =
 * that bn where this says yes (0: never). Init once per device. */
bool mtplx_cuda_gemm_wgmma_ok(int type, int layout, int64_t k);
cudaError_t mtplx_cuda_gemm_wgmma_init(void);
cudaError_t mtplx_cuda_gemm_wgmma(cudaStream_t s, const void *W, int64_t m, int64_t k, const void *xb, int64_t n,
                                  float *y, const float *bias, const float *gate, const mtplx_cuda_tc_split *split,
                                  int bn);
/* ---- the small-n GEMV (mmv, kernels.cu): n <= MTPLX_CUDA_MMV_ROWS rows of
 * x against up to three weights of one type and one k, in one launch. Each
 * warp takes a few weight rows and reads x once for all of them, with 16-byte
 * weight loads; a row's arithmetic does not depend on n or on its neighbours,
 * so decode and verify rows come out bit-identical. Q8_0 weights must be in
 * the repacked layout (mtplx_cuda_repack_q8_0); the other types are GGUF's. */
#define MTPLX_CUDA_MMV_ROWS 16
enum {
    MTPLX_MMV_STORE = 0,  /* y_s[i][r] = x_i . W_s[r] (+ bias_s[r]) for every segment s */
    MTPLX_MMV_ADD = 1,    /* y_s[i][r] += x_i . W_s[r] (a residual add, fused) */
    MTPLX_MMV_SWIGLU = 2, /* y_0[i][r] = silu(x_i . W_0[r]) * (x_i . W_1[r]); m[0] == m[1] */
};
typedef struct mtplx_cuda_mmv_job {
    int nseg;             /* 1..3 weights (SWIGLU: 2) */
    int mode;             /* MTPLX_MMV_* */
    const void *w[3];     /* device weights [m[s]][k] */
    const float *bias[3]; /* [m[s]] or NULL (STORE only) */
    float *y[3];          /* [n][m[s]] (SWIGLU: y[0] only) */
    int64_t m[3];
    /* with norm [k] set, each x row is RMS-normed first, x / rms(x) * norm
     * (eps): rmsnorm fused into the matmul (the sum of squares in another
     * order than mtplx_cuda_rmsnorm's, so equal to it up to f32 rounding) */
    const float *norm;
    float eps;
    /* tensor cores (mmv_tc.cu) where they apply: BF16, Q8_0 and Q4_K (a
     * fused norm of at most MTPLX_CUDA_TC_NORM_MAX_K elements), sm_80 or
     * newer. A weight takes the same path at every n, so rows stay
     * independent of n either way. Q4_K only with mma_q4k. */
    bool mma, mma_q4k;
    /* Q8_0 and Q4_K (with mma; Q4_K with mma_q4k) on the int8 tensor cores
     * (mmv_i8.cu) instead of mmv_tc.cu when set: device scratch of
     * mtplx_cuda_mmv_i8_scratch() bytes for x in integer pieces, used by one
     * launch pair at a time (the backend's one stream); NULL: not used */
    void *xq;
    /* int8 pieces of each x value there: 2 or 3 (0: mmv_i8.cu's default, 2) */
    int xq_pieces;
    /* programmatic dependent launch (sm_90; elsewhere ignored: cuda_util.cuh's
     * launch_k): mmv_tc.cu's GEMV, and mmv_i8.cu's x kernel and GEMV, each
     * launched as a dependent of the kernel before it, so that the GEMV
     * loads its first weights while that one (or its x kernel) still runs.
     * The caller sets it only where the op before on the stream was a
     * kernel. */
    bool pdl;
    /* BF16 weights in mtplx_cuda_tile_bf16's layout (mmv_tc.cu only;
     * mtplx_cuda_mmv refuses the job on any other path) */
    bool tiled;
    /* set by the GEMV's own launcher, not the caller: its blocks let the
     * next kernel launch as they start, not after their k loop
     * (cuda_util.cuh's trig_start_bytes) */
    bool trig_start;
} mtplx_cuda_mmv_job;
/* Whether the mmv kernel takes this type, k and x (alignment); if not, use
 * mtplx_cuda_matmul. */
bool mtplx_cuda_mmv_ok(int type, int64_t k, const float *x, int64_t n);
cudaError_t mtplx_cuda_mmv(cudaStream_t s, int type, const mtplx_cuda_mmv_job *job, int64_t k,
                           const float *x, int64_t n);
/* mmv_tc.cu: the same job on tensor cores (its header comment); _ok says
 * whether this type, k, job and GPU take it. */
bool mtplx_cuda_mmv_tc_ok(int type, int64_t k, const mtplx_cuda_mmv_job *job);
cudaError_t mtplx_cuda_mmv_tc(cudaStream_t s, int type, const mtplx_cuda_mmv_job *job, int64_t k,
                              const float *x, int64_t n);
/* The warps that split k for a weight of this type and m rows on mmv_tc.cu
 * (4, or 8 for a BF16 weight of few rows). It sets a row's sum order, so a
 * fused job must only hold weights that agree. */
int mtplx_cuda_mmv_tc_warps(int type, int64_t m);
/* Whether a GEMV that reads this many weight bytes lets the next kernel
 * launch as its blocks start (cuda_util.cuh's trig_start_bytes) */
bool mtplx_cuda_trig_start(int64_t bytes);
/* BF16 [m][k] (row-major) into the tiled layout mmv_tc.cu reads fastest:
 * per 16-row tile (rows past m zero) and 32-element k step, 1 KB in the
 * order a warp's lanes load it: lane l = 4 g + q's 16 bytes of row g at
 * 16 l, of row g + 8 at 512 + 16 l, elements [8 q, 8 q + 8) of the step.
 * Every load instruction then reads 512 contiguous bytes, where the row-
 * major layout has a warp read 64 bytes from each of 8 rows (on an H200
 * 2.8 against 4.1-4.3 TB/s for gate/up-sized matrices in a read-only probe,
 * tools/cuda_probe.cu). The values and their order in each lane's registers
 * are the same, so results are bit-identical to the row-major layout's.
 * _ok: k % 32 == 0; _bytes: the tiled size. */
bool mtplx_cuda_bf16_tiled_ok(int64_t k);
size_t mtplx_cuda_bf16_tiled_bytes(int64_t m, int64_t k);
cudaError_t mtplx_cuda_tile_bf16(cudaStream_t s, const void *raw, void *out, int64_t m, int64_t k);
/* mmv_i8.cu: the same job for Q8_0 / Q4_K on the int8 tensor cores (its
 * header comment), k <= MTPLX_CUDA_I8_KMAX; two launches (x to pieces,
 * then the GEMV). _ok says whether this type, k, job and GPU take it. */
#define MTPLX_CUDA_I8_KMAX 65536
size_t mtplx_cuda_mmv_i8_scratch(void);
/* Q8_0 [m][k] (GGUF blocks) into the layout mmv_i8.cu reads: rows as
 * mtplx_cuda_repack_q8_0's (same size, scales after the quants) but the
 * quants of each pair of blocks interleaved (mmv_i8.cu's ipos); k % 64 == 0.
 * mmv.cu and mmv_tc.cu do not read it: the backend packs a weight for the
 * path its jobs take (mtplx_cuda_mmv_i8_ok). */
cudaError_t mtplx_cuda_repack_q8_0_i8(cudaStream_t s, const void *raw, void *out, int64_t m,
                                      int64_t k);
/* the same on the host, with the kernel's per-block code (host checks) */
void mtplx_cuda_repack_q8_0_i8_host(const void *raw, void *out, int64_t m, int64_t k);
bool mtplx_cuda_mmv_i8_ok(int type, int64_t k, const mtplx_cuda_mmv_job *job);
cudaError_t mtplx_cuda_mmv_i8(cudaStream_t s, int type, const mtplx_cuda_mmv_job *job, int64_t k,
                              const float *x, int64_t n);
/* Q8_0 [m][k] (34-byte GGUF blocks) into the mmv layout at out: each row
 * its k int8 quants, then its k/32 f16 scales, padded to
 * mtplx_cuda_q8_0_packed_row(k) bytes (16-byte aligned rows; a prefix of
 * the rows is itself a valid weight, as the MTP head's vocabulary cut needs). */
size_t mtplx_cuda_q8_0_packed_row(int64_t k);
cudaError_t mtplx_cuda_repack_q8_0(cudaStream_t s, const void *raw, void *out, int64_t m,
                                   int64_t k);

/* attn_prep.cu: for n rows of one sequence, q and k heads RMS-normed by
 * q_norm / k_norm [head_dim] (each may be NULL: none), RoPE at positions
 * pos0 (+ dyn->pos0).., then the K and V rows stored at those rows of the
 * caches kc / vc (F16 or F32): rmsnorm, rmsnorm, rope, rope, store_rows,
 * store_rows in one launch. q [n][n_head*hd], k and v [n][n_head_kv*hd];
 * q and k are rewritten in place. */
cudaError_t mtplx_cuda_qk_norm_rope_store(cudaStream_t s, float *q, float *k, const float *v,
                                          int64_t n, int n_head, int n_head_kv, int head_dim,
                                          const float *q_norm, const float *k_norm, float eps,
                                          int64_t pos0, const float *inv_freq, bool neox,
                                          int kv_type, void *kc, void *vc,
                                          const mtplx_cuda_step *dyn, bool pdl);
/* Whether mtplx_cuda_qk_norm_rope_store takes this head size, n and cache
 * type (if not, the plain ops do the work). */
bool mtplx_cuda_qk_norm_rope_store_ok(int head_dim, int64_t n, int kv_type);

/* pdl, on the step's small ops (get_rows, rmsnorm, qk_norm_rope_store,
 * attention): launched as a programmatic dependent of the kernel before
 * (cuda_util.cuh's launch_k); they let the next kernel start at once and
 * wait for theirs before touching memory. Set only where the op before on
 * the stream was a kernel. */

/* out[i] = row ids[i] of W (as above) dequantised to f32 [k], i < n; with
 * ids NULL (device pointer, else) the one row id0 (n must be 1). */
cudaError_t mtplx_cuda_get_rows(cudaStream_t s, int type, const void *W, size_t row_bytes, int64_t k,
                                const int32_t *ids, int64_t id0, int64_t n, float *out, bool pdl);
cudaError_t mtplx_cuda_rmsnorm(cudaStream_t s, const float *x, const float *w, float *out, int64_t n,
                               int64_t d, float eps, bool pdl);
cudaError_t mtplx_cuda_rope(cudaStream_t s, float *x, int64_t n, int n_head, int head_dim,
                            int64_t pos0, const float *inv_freq, bool neox,
                            const mtplx_cuda_step *dyn);
cudaError_t mtplx_cuda_silu_mul(cudaStream_t s, const float *gate, const float *up, float *out,
                                int64_t n);
cudaError_t mtplx_cuda_add(cudaStream_t s, float *y, const float *x, int64_t n);
/* n rows of d floats to F16 (round to nearest even) or F32 at row
 * row0 (+ dyn->pos0) of the KV buffer kv. */
cudaError_t mtplx_cuda_store_rows(cudaStream_t s, int kv_type, const float *src, void *kv,
                                  int64_t row0, int64_t n, int64_t d, const mtplx_cuda_step *dyn);
/* The scratch of the attention's split over positions (attention.cu,
 * attn_kernel and attn_group_kernel), one a backend: part holds
 * MTPLX_CUDA_STEP_ROWS x slots partials of 2 + 256 floats, cnt
 * MTPLX_CUDA_STEP_ROWS x MTPLX_CUDA_ATTN_MAX_HEADS counters, zeroed once. A
 * token's most splits: about per_sm blocks a SM (n_sm) over the launch's
 * blocks a split, at most slots / n_head, 16 per_sm,
 * MTPLX_CUDA_ATTN_MAX_SPLIT and chunk; a split takes at least chunk
 * positions. */
#define MTPLX_CUDA_ATTN_MAX_SPLIT 64
#define MTPLX_CUDA_ATTN_MAX_HEADS 1024
typedef struct {
    float *part;
    int *cnt;
    int slots, chunk, n_sm;
    int per_sm; /* blocks a SM the split aims at (2; MTPLX_CUDA_ATTN_SPLITS, measurements) */
    int tile; /* attn_group_kernel's positions a tile: 16, 32, 64 or 0 (its choice) */
    /* a KV-head step's kernel: 0 attn_mma_kernel where it runs (F16 cache,
     * head_dim 64 or 128; tensor cores), else attn_group_kernel; 1
     * attn_group_kernel always (MTPLX_CUDA_ATTN_MMA=0) */
    int group_kind;
    int tma; /* attn_mma_kernel's stages filled by bulk copies (MTPLX_CUDA_ATTN_TMA=1), else cp.async */
    /* 1: attn_mma_kernel stages nothing before its PDL wait, even in a
     * captured step (MTPLX_CUDA_ATTN_EARLY=0; measurements) */
    int late;
    /* 1: attn_kernel loads a captured step's cache rows before the step's
     * position ahead of its PDL wait; set by the backend for each launch
     * (backend_cuda.c's cu_attention) */
    int head_early;
} mtplx_cuda_attn_scratch;
size_t mtplx_cuda_attn_part_bytes(int slots);
/* what attn_kernel is given: the scratch, this launch's splits (and
 * attn_group_kernel its tile) */
typedef struct {
    float *part;
    int *cnt;
    int splits, chunk, tile;
    /* the rows of at least `from` positions go to attn_group_kernel, the
     * others to attn_kernel (each kernel leaves the other's rows alone) */
    int64_t from;
    /* attn_mma_kernel, in a captured step (dyn set): stage cache rows
     * before the step's position ahead of the PDL wait */
    int early;
    /* attn_kernel, in a captured step: the same for its first pass of
     * positions a warp (scratch's head_early) */
    int head_early;
} mtplx_cuda_attn_split;

/* Causal GQA attention, kernels.h's mtplx_attention contract; head_dim <= 256.
 * scr NULL (or n_tok > MTPLX_CUDA_STEP_ROWS): no split over positions.
 * A row that attends to group_from positions or more (pos0 + t + 1 >=
 * group_from) takes a block per KV head that serves all its query heads
 * and the step's tokens (attn_mma_kernel or attn_group_kernel, see group_kind), where
 * mtplx_cuda_attention_group_from allows it; the others a block per token
 * and query head (attn_kernel). A step that straddles group_from launches
 * both, each for its rows. Which kernel a row takes depends on its own
 * position alone, and neither kernel's row depends on the other rows of the
 * step, so a token's row is the same bits in a decode step and in a verify
 * step (greedy MTP == AR). at: the step's first position, pos0 itself
 * without dyn, the captured step's (dyn's position + pos0) while capturing:
 * it picks the kernels launched, so a graph replays its launches only where
 * at would pick the same ones (mtplx_cuda_attention_group_from). */
cudaError_t mtplx_cuda_attention(cudaStream_t s, const float *q, int64_t n_tok, int n_head,
                                 int n_head_kv, int head_dim, const void *k, const void *v,
                                 int kv_type, int64_t pos0, float scale, float *out,
                                 const mtplx_cuda_step *dyn, bool pdl,
                                 const mtplx_cuda_attn_scratch *scr, int64_t group_from,
                                 int64_t at);
/* The group_from that mtplx_cuda_attention applies: group_from itself where
 * attn_group_kernel takes this step (n_tok <= MTPLX_CUDA_STEP_ROWS; head_dim
 * a multiple of 8 for F16, 4 for F32; 16-byte aligned K and V), else
 * MTPLX_CUDA_ATTN_GROUP_NEVER. A step of n_tok rows at position at then
 * launches attn_kernel where its first row is short of from
 * (mtplx_cuda_attn_by_head) and attn_group_kernel where its last reaches it
 * (mtplx_cuda_attn_by_group): the backend's graphs follow the same rule. */
int64_t mtplx_cuda_attention_group_from(int64_t group_from, int64_t n_tok, int head_dim, int kv_type,
                                        const void *k, const void *v);
static inline bool mtplx_cuda_attn_by_head(int64_t at, int64_t from) { return at + 1 < from; }
static inline bool mtplx_cuda_attn_by_group(int64_t at, int64_t n_tok, int64_t from) {
    return at + n_tok >= from;
}
/* Once per device, before the first attention: lets the kernels that need
 * it (attn_group_kernel, attn_mma_kernel, fa_kernel at head_dim 256,
 * fa_mma_kernel) take more than 48 KB of shared memory. */
cudaError_t mtplx_cuda_attention_init(void);

/* The same attention tiled for many query tokens (prefill): 16 queries of a
 * head per block share each K/V tile in shared memory. f32 math as the one
 * above, but not bit-identical to it (another summation order); the backend
 * uses it only for n_tok above MTPLX_CUDA_STEP_ROWS. F16 / F32 KV. */
/* mma: an F16 cache with head_dim 64 or 128 on tensor cores (fa_mma_kernel),
 * else (and for other shapes) fa_kernel's f32 loops */
cudaError_t mtplx_cuda_attention_flash(cudaStream_t s, const float *q, int64_t n_tok, int n_head,
                                       int n_head_kv, int head_dim, const void *k, const void *v,
                                       int kv_type, int64_t pos0, float scale, float *out,
                                       const mtplx_cuda_step *dyn, bool mma);

#ifdef __cplusplus
}
#endif
#endif
