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
 * Positions come from the step block when dyn is set (CUDA graphs; dyn_pos),
 * as in kernels.cu. F16 and F32 caches only (the CUDA backend has no Q8_0 cache). */

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

/* A thread's elements of a head: i = threadIdx.x + j * blockDim.x, j <
 * PREP_REG (the block sizes below give at most 4: head_dim <= 4 x threads,
 * and at most 2 rotation pairs). */
constexpr int PREP_REG = 4;

template <bool F16>
__global__ void qk_prep_kernel(float *q, float *k, const float *v, int n_head, int n_head_kv,
                               int hd, const float *__restrict__ qn, const float *__restrict__ kn,
                               float eps, int64_t pos0, const float *__restrict__ inv_freq,
                               bool neox, void *kc, void *vc,
                               const mtplx_cuda_step *__restrict__ dyn) {
    pdl_trigger(); /* (cuda_util.cuh's launch_k) */
    const int h = blockIdx.x, tid = threadIdx.x, bd = blockDim.x, half = hd / 2;
    const int64_t t = blockIdx.y, kvd = (int64_t)n_head_kv * hd;
    /* the step block (set before the graph is launched: no kernel of the
     * step writes it), the norm weights and the rotation angles (uploaded
     * before the first kernel of the chain of dependents started) are read
     * and the sines worked out while the kernel before ends; q, k and v,
     * which kernels of the step write, only after the wait */
    const int64_t pos = pos0 + dyn_pos(dyn);
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
        pdl_wait();
        for (int i = tid; i < hd; i += bd) {
            if (F16)
                ((__half *)vc)[at + i] = __float2half_rn(src[i]);
            else
                ((float *)vc)[at + i] = src[i];
        }
        return;
    }
    float wv[PREP_REG], sn[PREP_REG / 2], cs[PREP_REG / 2];
    if (w) row_to_regs(w, hd, wv);
#pragma unroll
    for (int j = 0; j < PREP_REG / 2; j++) {
        sn[j] = 0.f, cs[j] = 1.f;
        if (tid + j * bd < half) sincosf((float)(pos + t) * inv_freq[tid + j * bd], &sn[j], &cs[j]);
    }
    pdl_wait();
    if (w) { /* x *= w / rms(x), in place (rmsnorm_kernel's order) */
        float xv[PREP_REG];
        row_to_regs(x, hd, xv);
        rmsnorm_regs(xv, wv, x, hd, eps);
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < PREP_REG / 2; j++) {
        int i = tid + j * bd;
        if (i >= half) break;
        int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * cs[j] - x1 * sn[j];
        x[b] = x0 * sn[j] + x1 * cs[j];
    }
    if (!cache) return;
    __syncthreads();
    for (int i = tid; i < hd; i += bd) {
        if (F16)
            ((__half *)cache)[at + i] = __float2half_rn(x[i]);
        else
            ((float *)cache)[at + i] = x[i];
    }
}

/* rmsnorm_kernel's block size for rows of head_dim */
int prep_threads(int head_dim) {
    return head_dim >= 1024 ? 1024 : head_dim >= 256 ? 256 : 64;
}

} // namespace

/* at most PREP_REG elements a thread: head_dim up to 4096 */
extern "C" bool mtplx_cuda_qk_norm_rope_store_ok(int head_dim, int64_t n, int kv_type) {
    return head_dim % 2 == 0 && head_dim <= PREP_REG * prep_threads(head_dim) &&
           n <= 65535 && (kv_type == MTPLX_TYPE_F16 || kv_type == MTPLX_TYPE_F32);
}

extern "C" cudaError_t mtplx_cuda_qk_norm_rope_store(
    cudaStream_t s, float *q, float *k, const float *v, int64_t n, int n_head, int n_head_kv,
    int head_dim, const float *q_norm, const float *k_norm, float eps, int64_t pos0,
    const float *inv_freq, bool neox, int kv_type, void *kc, void *vc, const mtplx_cuda_step *dyn,
    bool pdl) {
    if (n <= 0) return cudaSuccess;
    if (!mtplx_cuda_qk_norm_rope_store_ok(head_dim, n, kv_type)) return cudaErrorInvalidValue;
    const int threads = prep_threads(head_dim);
    dim3 grid((unsigned)(n_head + 2 * n_head_kv), (unsigned)n);
    return launch_k(pdl, kv_type == MTPLX_TYPE_F16 ? qk_prep_kernel<true> : qk_prep_kernel<false>,
                    grid, dim3(threads), 0, s, q, k, v, n_head, n_head_kv, head_dim, q_norm, k_norm,
                    eps, pos0, inv_freq, neox, kc, vc, dyn);
}
