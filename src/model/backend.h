/* backend.h: the compute interface the model code runs on.
 *
 * Model code never calls kernels directly: it calls these ops through a
 * backend, so a CUDA backend can be added later without touching model code.
 * Tensors handed to a backend are weights (mtplx_weight, placed by the
 * backend that owns them) and activation buffers the backend allocated
 * (buf_alloc), so device placement stays explicit.
 * Backends: the CPU (backend_cpu.c) and CUDA (src/cuda/backend_cuda.c). */
#ifndef MTPLX_BACKEND_H
#define MTPLX_BACKEND_H

#include "core/core.h"

#include <string.h>

/* A weight matrix of m rows x k columns in one of the GGUF types. */
typedef struct mtplx_weight {
    int type;
    int64_t m, k;
    const void *data; /* row-major, row stride mtplx_row_size(type, k) */
    /* The same weights in the CPU kernels' prepared layout
     * (mtplx_weight_prepare), owned by the model, or NULL. Matmuls read this
     * when set; row lookups (get_row) read data. */
    const void *prep;
} mtplx_weight;

typedef struct mtplx_backend mtplx_backend;

/* One row of a device sampling call (backend's sample_rows). */
#define MTPLX_DEV_TOPK_MAX 1024   /* the largest top-k sampled on the device */
#define MTPLX_DEV_SAMPLE_ROWS 16  /* rows per call */
typedef struct mtplx_dev_sample {
    int32_t draft;             /* in: the draft token tested at this row, or -1 */
    double u_accept, u_sample; /* in: the test's and the draw's uniforms */
    int32_t id;                /* out: the accepted draft or the token drawn */
    bool accepted;             /* out */
    float logprob;             /* out: log softmax of the row at id */
} mtplx_dev_sample;
/* Whether sample_rows does sampling under sp on a vocabulary of V
 * (temperature > 0, no penalties, top-k in 1..min(MTPLX_DEV_TOPK_MAX, V - 1));
 * engine/sampler.c. */
bool mtplx_dev_sample_takes(const mtplx_sampler_params *sp, int64_t V);

/* What a whole forward is, for capturing it once and replaying it (CUDA
 * graphs): the buffers and weights it touches and its row count. Two
 * forwards with equal keys issue the same ops on the same buffers and differ
 * only in their token ids and their position. */
typedef struct mtplx_graph_key {
    const void *ptr[4]; /* model, cache, activations, input (or NULL): buffer addresses */
    int64_t n;          /* rows */
    int32_t kind;       /* 0: trunk, last logits; 1: trunk, all logits; 2 + h: MTP head h */
} mtplx_graph_key;

enum {
    MTPLX_GRAPH_NONE = 0, /* issue the ops as usual */
    MTPLX_GRAPH_CAPTURE,  /* issue the ops, then graph_end (which runs them) */
    MTPLX_GRAPH_REPLAYED, /* done: a captured forward ran with these tokens / position */
};

struct mtplx_backend {
    const char *name;
    int n_threads;
    /* y[n][w->m] = x[n][w->k] . W^T (+ bias[m] if bias) */
    void (*matmul)(mtplx_backend *be, const mtplx_weight *w, const float *bias, const float *x,
                   int64_t n, float *y);
    void (*rmsnorm)(mtplx_backend *be, const float *x, const float *w, float *out, int64_t n,
                    int64_t d, float eps);
    /* Rotate n rows of n_head heads of head_dim at positions pos0.. by inv_freq
     * [head_dim/2]; neox: pairs (i, i+hd/2), else (2i, 2i+1). */
    void (*rope)(mtplx_backend *be, float *x, int64_t n, int n_head, int head_dim, int64_t pos0,
                 const float *inv_freq, bool neox);
    void (*silu_mul)(mtplx_backend *be, const float *gate, const float *up, float *out, int64_t n);
    void (*add)(mtplx_backend *be, float *y, const float *x, int64_t n);
    /* Write n rows of d floats at row `row` of a KV buffer of kv_type. */
    void (*kv_store)(mtplx_backend *be, int kv_type, void *kv, int64_t row, const float *src,
                     int64_t n, int64_t d);
    void (*attention)(mtplx_backend *be, const float *q, int64_t n_tok, int n_head, int n_head_kv,
                      int head_dim, const void *k, const void *v, int kv_type, int64_t pos0,
                      float scale, float *out);
    /* Row `id` of an embedding weight, as f32 [w->k]. */
    void (*get_row)(mtplx_backend *be, const mtplx_weight *w, int64_t id, float *out);
    void *(*buf_alloc)(mtplx_backend *be, size_t bytes);
    void (*buf_free)(mtplx_backend *be, void *p);
    void (*free)(mtplx_backend *be);
    /* ---- optional: NULL when buf_alloc hands out host memory (the CPU) ----
     * Copies between host memory and this backend's buffers, or between two
     * of its buffers. download returns once dst_host holds the bytes; the
     * others may still be in flight (ordered before the next op). Use the
     * mtplx_be_* wrappers below, which fall back to memcpy. */
    void (*upload)(mtplx_backend *be, void *dst, const void *src_host, size_t bytes);
    void (*download)(mtplx_backend *be, void *dst_host, const void *src, size_t bytes);
    void (*copy)(mtplx_backend *be, void *dst, const void *src, size_t bytes);
    /* ---- optional (NULL on the CPU) ----
     * Rows ids[0..n) of an embedding weight into out [n][w->k]
     * (mtplx_be_get_rows falls back to get_row). */
    void (*get_rows)(mtplx_backend *be, const mtplx_weight *w, const int32_t *ids, int64_t n,
                     float *out);
    /* A forward of n rows of tokens at position pos0 (model/forward.c):
     * returns MTPLX_GRAPH_*. While capturing, every position argument of an
     * op is pos0 + a constant and every get_rows ids array lies inside
     * tokens[0..n); the backend replays later steps with their own values.
     * graph_end returns false if the capture failed: nothing ran, and the
     * caller issues the ops again without capture. */
    int (*graph_begin)(mtplx_backend *be, const mtplx_graph_key *key, const int32_t *tokens,
                       int64_t n, int64_t pos0);
    bool (*graph_end)(mtplx_backend *be);
    /* ---- optional (the CPU has it too) ----
     * Greedy pick of n rows of logits [n][V] (a buffer of this backend):
     * ids[i] = the first index of row i's largest value (the sampler's rule
     * at temperature 0), logprob[i] = its log-softmax (logprob NULL: the ids
     * alone, which spares the CPU a log-sum-exp a row). Returns once both are
     * in host memory: only 8 bytes a row cross to the host (on the CPU: no
     * dense one-hot distribution is built, engine/generate.c's pick_dev). */
    void (*argmax_rows)(mtplx_backend *be, const float *logits, int64_t n, int64_t V, int32_t *ids,
                        float *logprob);
    /* Sampling on the device (optional; NULL on the CPU): for row i < n
     * (<= MTPLX_DEV_SAMPLE_ROWS) of logits [n][V] (this backend's buffer),
     * p_i = mtplx_sampler_dist's distribution of the row under sp; then with
     * rows[i].draft < 0 rows[i].id = mtplx_sample_dist(p_i, u_sample), else
     * spec.c's Leviathan-Chen test of the draft against test row i (a
     * distribution kept by an earlier call) with u_accept: accepted, or id
     * drawn from the residual with u_sample. keep (or NULL): p_i is kept in
     * keep row i. Rows of keep / test are dist_bytes apart, in buffers of
     * this backend. Returns once rows[] is in host memory (a few bytes a row
     * cross), or false, having done nothing, for sampling it does not do on
     * the device (!mtplx_dev_sample_takes: temperature 0 is argmax_rows'). */
    bool (*sample_rows)(mtplx_backend *be, const float *logits, int64_t n, int64_t V,
                        const mtplx_sampler_params *sp, void *keep, const void *test,
                        mtplx_dev_sample *rows);
    size_t dist_bytes;
    /* ---- optional fusions (NULL on the CPU): fewer launches per step ----
     * Each returns false, having issued nothing, when it does not take these
     * arguments (too many rows, mixed types); the caller then issues the
     * plain ops, whose results these equal bit for bit.
     * matmul_multi: y[j] = x . W_j^T (+ bias[j] if set) for nw <= 3 weights of
     *   one type and k (attention's Q, K, V from one read of x).
     * matmul_swiglu: out[n][m] = silu(x . G^T) * (x . U^T), G and U of one
     *   type and shape (matmul, matmul, silu_mul).
     * For both, norm [k] (or NULL) asks for rmsnorm(x, norm, eps) first, in
     *   the same op; that equals rmsnorm then the op up to f32 rounding, and
     *   a backend that does not fuse it returns false for a norm.
     * matmul_add: y[n][m] += x . W^T (matmul, then add: a residual). */
    bool (*matmul_multi)(mtplx_backend *be, int nw, const mtplx_weight *const *w,
                         const float *const *bias, const float *x, const float *norm, float eps,
                         int64_t n, float *const *y);
    bool (*matmul_swiglu)(mtplx_backend *be, const mtplx_weight *gate, const mtplx_weight *up,
                          const float *x, const float *norm, float eps, int64_t n, float *out);
    bool (*matmul_add)(mtplx_backend *be, const mtplx_weight *w, const float *x, int64_t n,
                       float *y);
    /* For n rows of one sequence at pos0, after the Q/K/V projections: q and
     * k heads RMS-normed by q_norm / k_norm (either may be NULL: none), RoPE
     * on both, and the K and V rows stored at row pos0 of the caches kc / vc:
     * rmsnorm, rmsnorm, rope, rope, kv_store, kv_store in one (equal to them
     * up to f32 rounding). */
    bool (*qk_norm_rope_store)(mtplx_backend *be, float *q, float *k, const float *v, int64_t n,
                               int n_head, int n_head_kv, int head_dim, const float *q_norm,
                               const float *k_norm, float eps, int64_t pos0, const float *inv_freq,
                               bool neox, int kv_type, void *kc, void *vc);
};

static inline void mtplx_be_get_rows(mtplx_backend *be, const mtplx_weight *w, const int32_t *ids,
                                     int64_t n, float *out) {
    if (be->get_rows) be->get_rows(be, w, ids, n, out);
    else
        for (int64_t i = 0; i < n; i++) be->get_row(be, w, ids[i], out + i * w->k);
}

static inline void mtplx_be_upload(mtplx_backend *be, void *dst, const void *src_host, size_t n) {
    if (be->upload) be->upload(be, dst, src_host, n);
    else memcpy(dst, src_host, n);
}
static inline void mtplx_be_download(mtplx_backend *be, void *dst_host, const void *src, size_t n) {
    if (be->download) be->download(be, dst_host, src, n);
    else memcpy(dst_host, src, n);
}
static inline void mtplx_be_copy(mtplx_backend *be, void *dst, const void *src, size_t n) {
    if (be->copy) be->copy(be, dst, src, n);
    else memcpy(dst, src, n);
}

/* CPU backend with its own thread pool; scratch sized for matmuls of up to
 * max_k columns and max_n rows, attention over up to n_ctx positions. */
mtplx_status mtplx_backend_cpu_new(int n_threads, int64_t max_k, int64_t max_n, int64_t n_ctx,
                                   mtplx_backend **out);

/* CUDA backend on GPU `device` (src/cuda): weights uploaded on first use, all
 * buffers in device memory. MTPLX_ERR_UNSUPPORTED without a usable GPU or in
 * a build without CUDA. Arguments as mtplx_backend_cpu_new's. */
mtplx_status mtplx_backend_cuda_new(int device, int64_t max_k, int64_t max_n, int64_t n_ctx,
                                    mtplx_backend **out);

#endif
