/* cuda_kernels.h: the CUDA kernels of the CUDA backend, as plain C entry
 * points (kernels.cu) that the C glue (backend_cuda.c) calls.
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

#ifdef __cplusplus
extern "C" {
#endif

/* y[n][m] = x[n][k] . W^T (+ bias[m]); W: m rows of k elements of `type`,
 * row stride row_bytes. Each weight is read once per 16 rows of x, so the
 * verify step (n <= 16) costs about one decode step. */
cudaError_t mtplx_cuda_matmul(cudaStream_t s, int type, const void *W, size_t row_bytes, int64_t m,
                              int64_t k, const float *x, int64_t n, float *y, const float *bias);
/* Row `id` of W (as above) dequantised to f32 [k]. */
cudaError_t mtplx_cuda_get_row(cudaStream_t s, int type, const void *W, size_t row_bytes, int64_t k,
                               int64_t id, float *out);
cudaError_t mtplx_cuda_rmsnorm(cudaStream_t s, const float *x, const float *w, float *out, int64_t n,
                               int64_t d, float eps);
cudaError_t mtplx_cuda_rope(cudaStream_t s, float *x, int64_t n, int n_head, int head_dim,
                            int64_t pos0, const float *inv_freq, bool neox);
cudaError_t mtplx_cuda_silu_mul(cudaStream_t s, const float *gate, const float *up, float *out,
                                int64_t n);
cudaError_t mtplx_cuda_add(cudaStream_t s, float *y, const float *x, int64_t n);
/* n*d floats to F16 (round to nearest even) or F32 at dst. */
cudaError_t mtplx_cuda_store_rows(cudaStream_t s, int kv_type, const float *src, void *dst,
                                  int64_t n, int64_t d);
/* Causal GQA attention, kernels.h's mtplx_attention contract; head_dim <= 256. */
cudaError_t mtplx_cuda_attention(cudaStream_t s, const float *q, int64_t n_tok, int n_head,
                                 int n_head_kv, int head_dim, const void *k, const void *v,
                                 int kv_type, int64_t pos0, float scale, float *out);

#ifdef __cplusplus
}
#endif
#endif
