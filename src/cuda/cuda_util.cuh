/* cuda_util.cuh: the small helpers every .cu file of the CUDA backend uses
 * (kernels.cu, attention.cu, mmv.cu, mmv_tc.cu, attn_prep.cu). Each file includes it inside nothing
 * else: the helpers sit in an anonymous namespace, one copy per file.
 *
 * The scalar ones are __host__ __device__ so that a host build of the
 * dequantisers can be checked against the CPU's reference without a GPU
 * (mtplx_cuda_deq_row_host, mtplx_cuda_mmv_deq_row_host). block_sum keeps
 * the one reduction order that rmsnorm_kernel and attn_prep.cu's per-head
 * norm share, so the fused op matches the plain ones.
 *
 * pdl_trigger, pdl_wait and launch_k are programmatic dependent launch
 * (PDL, sm_90): see launch_k. The cp_async*, ldsm_x4* and pack2 helpers are
 * the shared-memory staging and tensor-core operand pieces that
 * attention.cu, gemm_bf16.cu and kernels.cu share. */
#ifndef MTPLX_CUDA_UTIL_CUH
#define MTPLX_CUDA_UTIL_CUH

#include "cuda/cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HD __host__ __device__ __forceinline__

namespace {

HD float u2f(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}
/* a read-only load (__ldg on the device) */
template <typename V> HD V ldg(const V *p) {
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}
HD float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
HD float bf2f(uint16_t h) { return u2f((uint32_t)h << 16); }
HD uint16_t ld16(const uint8_t *p) { return *(const uint16_t *)p; }

/* Where row r of a weight in a 16-row tiled layout (mtplx_cuda_tile_bf16's)
 * starts its first k step: its tile (16 rb bytes, rb the row's bytes), its
 * half of the tile (512) and its place in the half (64 bytes a row); each
 * later k step of 32 is 1 KB further. The GEMV (mmv_tile.cuh's tile_rows)
 * and the prefill GEMMs (kernels.cu's tiled_group, gemm_bf16.cu's and
 * gemm_wgmma.cu's loaders) read the layout through it. */
HD int64_t tiled_row_off(int64_t r, int64_t rb) {
    return (r >> 4) * 16 * rb + ((r >> 3) & 1) * 512 + (r & 7) * 64;
}

/* Where element e of a row sits in the interleaved layout that Q8_0
 * weights (mtplx_cuda_repack_q8_0_i8) and x's pieces (mmv_i8.cu) share: in
 * each run of 64 elements (two 32-element blocks), bytes [16 q, 16 q + 8)
 * hold elements [8 q, 8 q + 8) of the first block and [16 q + 8, 16 q + 16)
 * those of the second, so that one 16-byte load gives a lane (quad
 * position q) its share of both blocks' mma fragments. An aligned group of
 * 8 elements stays 8 contiguous bytes. */
HD int64_t ipos(int64_t e) {
    int64_t o = e & 63, b = o >> 5, w = o & 31;
    return (e - o) + 16 * (w >> 3) + 8 * b + (w & 7);
}

/* Q4_K sub-block j (0..7) of a block whose 16-byte header (d, dmin, the 12
 * scale bytes; kernels/ref has the 6-bit packing) is h: its scale d * sc and
 * its min dmin * m. */
HD void q4k_sub_scales(const uint4 &h, int j, float &scale, float &min) {
    float d = h2f((uint16_t)h.x), dmin = h2f((uint16_t)(h.x >> 16));
    int sh = 8 * (j & 3);
    uint32_t A = (h.y >> sh) & 0xFF, B = (h.z >> sh) & 0xFF, C = (h.w >> sh) & 0xFF;
    uint32_t s, m;
    if (j < 4) {
        s = A & 63;
        m = B & 63;
    } else {
        s = (C & 0xF) | ((A >> 6) << 4);
        m = (C >> 4) | ((B >> 6) << 4);
    }
    /* s, m < 64 as floats by their bits (no int-to-float conversion,
     * a slower unit): 2^23 + v - 2^23 */
    scale = d * (u2f(0x4B000000u | s) - 8388608.0f);
    min = dmin * (u2f(0x4B000000u | m) - 8388608.0f);
}

/* Asynchronous copies of 16 bytes global -> shared (cp.async.cg; dst a
 * shared address, or a generic pointer into shared memory). The z form
 * copies 16 bytes where ok and writes 16 zeros otherwise (src then need
 * not be readable, only a valid address). */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    cp_async16((uint32_t)__cvta_generic_to_shared(dst), src);
}
__device__ __forceinline__ void cp_async16z(uint32_t dst, const void *src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async16z(void *dst, const void *src, bool ok) {
    cp_async16z((uint32_t)__cvta_generic_to_shared(dst), src, ok);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* until at most N of this thread's committed groups are in flight */
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* silu(g) u, silu_mul_kernel's arithmetic, which the GEMMs' SwiGLU
 * epilogue (gemm_store2's gate) repeats for the same bits */
HD float silu_mul1(float g, float u) {
    return g / (1.f + expf(-g)) * u;
}

/* The prefill GEMMs' store of two neighbouring results, y[i][r] and
 * y[i][r + 1] of y[n][m] (those below m): with split-k (part) into this
 * block's slice of the partial sums (blockIdx.z); else with gate (an up
 * projection's SwiGLU, gate [n][m] the gate projection's results, which
 * may be y itself: each element is read, then written, by one thread) y =
 * silu(gate) (v + 0), as matmul, then silu_mul would make it down to the
 * sign of a zero; else into y plus bias. */
__device__ __forceinline__ void gemm_store2(float *y, float *part, const float *bias, const float *gate,
                                            int64_t n, int64_t m, int64_t i, int64_t r, float v0, float v1) {
    if (part) {
        float *o = part + ((size_t)blockIdx.z * n + i) * m + r;
        if (r < m) o[0] = v0;
        if (r + 1 < m) o[1] = v1;
    } else if (gate) {
        const size_t at = (size_t)i * m + r;
        if (r < m) y[at] = silu_mul1(gate[at], v0 + 0.f);
        if (r + 1 < m) y[at + 1] = silu_mul1(gate[at + 1], v1 + 0.f);
    } else {
        float *o = y + (size_t)i * m + r;
        if (r < m) o[0] = v0 + (bias ? bias[r] : 0.f);
        if (r + 1 < m) o[1] = v1 + (bias ? bias[r + 1] : 0.f);
    }
}

/* ldmatrix of four 8 x 8 b16 matrices (each lane gives one row's address,
 * shared), plain or transposed */
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    ldsm_x4(r, (uint32_t)__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *p) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* (a, b) rounded to nearest as a pair of E (bf16 or f16), a in the low
 * half (the lower address): a tensor-core operand register */
template <typename E> __device__ __forceinline__ uint32_t pack2(float a, float b);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float a, float b) {
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float a, float b) {
    __half2 v = __floats2half2_rn(a, b);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

/* the step block's position (CUDA graphs: cuda_kernels.h's mtplx_cuda_step), 0 without one */
__device__ __forceinline__ int64_t dyn_pos(const mtplx_cuda_step *dyn) { return dyn ? dyn->pos0 : 0; }

/* an RMS norm's scale 1 / rms from the sum of squares ss of k values */
HD float norm_scale(float ss, int64_t k, float eps) {
    return 1.0f / sqrtf(ss / (float)k + eps);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v;
}

/* One of three kernel parameters by a runtime index, without indexing the
 * parameter block dynamically (which would copy it to local memory). */
template <typename P> __device__ __forceinline__ P pick3(int s, P a, P b, P c) {
    return s == 0 ? a : s == 1 ? b : c;
}

/* Row g of up to three weights stacked in one job (nseg of them, m0, m1,
 * m2 rows) as its segment and its row there; false past the last row. */
__device__ __forceinline__ bool stacked_row(int64_t m0, int64_t m1, int64_t m2, int nseg,
                                            int64_t g, int &seg, int64_t &row) {
    int sg = 0;
    while (sg < nseg - 1 && g >= pick3(sg, m0, m1, m2)) {
        g -= pick3(sg, m0, m1, m2);
        sg++;
    }
    seg = sg, row = g;
    return g < pick3(sg, m0, m1, m2);
}

/* The sum of v over the block (at most 1024 threads), in every thread:
 * warp sums, then warp 0 sums those. A second call in the same block needs
 * a barrier of the caller's in between: its first write to part could
 * overtake a thread still reading this call's part[0]. */
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[32];
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        float w = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.f;
        w = warp_sum(w);
        if (threadIdx.x == 0) part[0] = w;
    }
    __syncthreads();
    return part[0];
}

/* A row of d floats spread over the block's registers: element tid + j *
 * blockDim.x in slot j < R, 0 past d (rmsnorm_kernel and qk_prep_kernel
 * hold short rows so, the weights loaded before their PDL wait). */
template <int R> __device__ __forceinline__ void row_to_regs(const float *p, int64_t d, float (&v)[R]) {
    const int64_t tid = threadIdx.x, bd = blockDim.x;
#pragma unroll
    for (int j = 0; j < R; j++) v[j] = tid + j * bd < d ? p[tid + j * bd] : 0.f;
}

/* o = x * w / rms(x) for a row held as row_to_regs holds it (x in xv, w in
 * wv), the sum of squares in the order of rmsnorm_kernel's loop over
 * tid, tid + blockDim.x, ...; o may be where x came from (each thread
 * writes only its own elements). A barrier of the block's (block_sum). */
template <int R>
__device__ __forceinline__ void rmsnorm_regs(const float (&xv)[R], const float (&wv)[R], float *o,
                                             int64_t d, float eps) {
    const int64_t tid = threadIdx.x, bd = blockDim.x;
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < R; j++)
        if (tid + j * bd < d) ss += xv[j] * xv[j];
    float scale = norm_scale(block_sum(ss), d, eps);
#pragma unroll
    for (int j = 0; j < R; j++)
        if (tid + j * bd < d) o[tid + j * bd] = xv[j] * scale * wv[j];
}

/* Programmatic dependent launch. A kernel launched by launch_k with pdl set
 * may start while the kernel before it on the stream still runs: as soon as
 * every block of that one has called pdl_trigger (or ended). Before
 * pdl_wait it may only do what needs nothing of its predecessors (index
 * setup, loads of weights, which no kernel writes); pdl_wait returns once
 * the predecessor has completed and its writes are visible. Every block
 * waits before it reads what an earlier kernel wrote or writes what one may
 * still read; and since a kernel completes only after its own wait, "the
 * predecessor completed" covers every kernel before it too. Without pdl
 * both are no-ops (the launch is ordered as usual), so the same kernel
 * computes the same bits either way. */
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Whether a GEMV (mmv_tc.cu, mmv_i8.cu) that reads this many weight bytes
 * lets the next kernel launch as its blocks start (job.trig_start) rather
 * than after their k loop: at 32 MiB or more. The next kernel's blocks then
 * get resident while the GEMV still streams (where SM slots are free: the
 * last wave, a grid that leaves some) and wait at their pdl_wait, so the
 * launch gap after the GEMV closes. Measured on an H200 (bench/RESULTS.md
 * section 28), same runs: 8B BF16 decode 4.55 -> 4.41 ms (every matrix is
 * 32 MiB or more), 8B Q8_0 3.41 -> 3.36; at 16 MiB 1.7B Q8_0 got 3% slower
 * (its 27 MiB gate/up), and for 0.6B's layer matrices (all under 12 MiB)
 * the trigger on every GEMV was 2% slower. Only when the next kernel starts
 * changes, never what it computes: every kernel waits before it reads what
 * a kernel of the step wrote. MTPLX_CUDA_TRIG_MB=N (read once per file)
 * moves the threshold, for measurements. */
inline bool trig_start_bytes(int64_t bytes) {
    static int64_t min_bytes = -1;
    if (min_bytes < 0) {
        const char *e = getenv("MTPLX_CUDA_TRIG_MB");
        min_bytes = (e && *e ? (int64_t)atoll(e) : 32) << 20;
    }
    return bytes >= min_bytes;
}

/* Whether the current device has PDL (sm_90 or newer); asked once. */
inline bool pdl_device() {
    static int major = -1;
    if (major < 0) {
        int dev = 0, m = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
            m = 0;
        major = m;
    }
    return major >= 9;
}

/* kernel<<<grid, block, smem, st>>>(args...), as a programmatic dependent
 * of the kernel before it on st when pdl is set and the device has PDL. In
 * a CUDA graph capture the dependency becomes a programmatic edge. */
template <typename... P, typename... A>
cudaError_t launch_k(bool pdl, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                     cudaStream_t st, A... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at, cfg.numAttrs = pdl && pdl_device() ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, args...);
}

} // namespace

#endif
