/* attn_prep.cu: what happens to Q, K and V between their projection and
 * attention, as one launch (cuda_kernels.h's mtplx_cuda_qk_norm_rope_store):
 * Qwen3's per-head RMS norm of q and k, RoPE of both, and the K and V rows
 * written into the caches. Six launches of kernels.cu become one, which is
 * what a small model's decode step is short of (each launch costs a few
 * microseconds even inside a CUDA graph).
 *
 * One block per (head, token); heads [0, n_head) are q's, then n_head_kv of
 * k, then n_head_kv of v. The formulas are kernels.cu's rmsnorm_kernel (with
 * the block size it would pick for head_dim, and its reduction order),
 * rope_kernel and store_kernel, so the results match those ops up to how
 * the compiler contracts a*b - c*d (tests/test_cuda.c checks 1e-6).
 * Positions come from the step block when dyn is set (CUDA graphs), as in
 * kernels.cu. F16 and F32 caches only (the CUDA backend has no Q8_0 cache). */

/* core.h is C11; this file is C++. */
#define _Noreturn [[noreturn]]
extern "C" {
#include "kernels/kernels.h"
}
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_util.cuh"

#include <cuda_fp16.h>
#include <math.h>

namespace {

/* x[d] *= w / rms(x), in place, by the whole block (rmsnorm_kernel's order). */
__device__ void head_rmsnorm(float *x, const float *__restrict__ w, int d, float eps) {
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        ss += x[i] * x[i];
    float scale = 1.0f / sqrtf(block_sum(ss) / (float)d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        x[i] = x[i] * scale * w[i];
    __syncthreads();
}

template <bool F16>
__global__ void qk_prep_kernel(float *q, float *k, const float *v, int n_head, int n_head_kv,
                               int hd, const float *__restrict__ qn, const float *__restrict__ kn,
                               float eps, int64_t pos0, const float *__restrict__ inv_freq,
                               bool neox, void *kc, void *vc,
                               const mtplx_cuda_step *__restrict__ dyn) {
    pdl_trigger(), pdl_wait(); /* (cuda_util.cuh's launch_k) */
    const int h = blockIdx.x;
    const int64_t t = blockIdx.y, kvd = (int64_t)n_head_kv * hd;
    const int64_t pos = pos0 + (dyn ? dyn->pos0 : 0);
    float *x;
    const float *w;
    void *cache = NULL;
    int64_t at = 0; /* the head's first element in the cache */
    if (h < n_head) {
        x = q + (t * n_head + h) * hd, w = qn;
    } else if (h < n_head + n_head_kv) {
        int hk = h - n_head;
        x = k + t * kvd + (int64_t)hk * hd, w = kn, cache = kc;
        at = (pos + t) * kvd + (int64_t)hk * hd;
    } else {
        /* v: stored as it is */
        int hv = h - n_head - n_head_kv;
        const float *src = v + t * kvd + (int64_t)hv * hd;
        at = (pos + t) * kvd + (int64_t)hv * hd;
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            if (F16)
                ((__half *)vc)[at + i] = __float2half_rn(src[i]);
            else
                ((float *)vc)[at + i] = src[i];
        }
        return;
    }
    if (w) head_rmsnorm(x, w, hd, eps);
    const int half = hd / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float th = (float)(pos + t) * inv_freq[i];
        float sn, cs;
        sincosf(th, &sn, &cs);
        int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * cs - x1 * sn;
        x[b] = x0 * sn + x1 * cs;
    }
    if (!cache) return;
    __syncthreads();
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        if (F16)
            ((__half *)cache)[at + i] = __float2half_rn(x[i]);
        else
            ((float *)cache)[at + i] = x[i];
    }
}

} // namespace

extern "C" cudaError_t mtplx_cuda_qk_norm_rope_store(
    cudaStream_t s, float *q, float *k, const float *v, int64_t n, int n_head, int n_head_kv,
    int head_dim, const float *q_norm, const float *k_norm, float eps, int64_t pos0,
    const float *inv_freq, bool neox, int kv_type, void *kc, void *vc, const mtplx_cuda_step *dyn,
    bool pdl) {
    if (n <= 0) return cudaSuccess;
    if (head_dim % 2 || n > 65535 || (kv_type != MTPLX_TYPE_F16 && kv_type != MTPLX_TYPE_F32))
        return cudaErrorInvalidValue;
    /* rmsnorm_kernel's block size for rows of head_dim */
    int threads = head_dim >= 1024 ? 1024 : head_dim >= 256 ? 256 : 64;
    dim3 grid((unsigned)(n_head + 2 * n_head_kv), (unsigned)n);
    return launch_k(pdl, kv_type == MTPLX_TYPE_F16 ? qk_prep_kernel<true> : qk_prep_kernel<false>,
                    grid, dim3(threads), 0, s, q, k, v, n_head, n_head_kv, head_dim, q_norm, k_norm,
                    eps, pos0, inv_freq, neox, kc, vc, dyn);
}
