/* gemm_wgmma.cu: the prefill GEMM on Hopper's warpgroup tensor cores
 * (wgmma), y[n][m] = x[n][k] W[m][k]^T (+ bias), for BF16 weights in the
 * GEMV's tiled copy (mtplx_cuda_tile_bf16) and x already rounded to bf16
 * (gemm_bf16.cu's scratch). gemm_bf16.cu hands a GEMM here when its caller
 * asks (paths.gemm_wgmma: MTPLX_CUDA_GEMM_WGMMA=128, the default, or 256;
 * 0: never) and mtplx_cuda_gemm_wgmma_ok says yes.
 *
 * Why: gemm_bf16.cu's mma.sync kernel reaches 200-320 TFLOP/s on 8B
 * matrices, and neither larger tiles nor another raster moved it
 * (bench/RESULTS.md section 39); llama.cpp's CUDA build prefills 8B BF16
 * 1.5x faster. mma.sync feeds each warp's tensor core from registers; wgmma
 * reads both operands from shared memory, a warpgroup (4 warps) at a time,
 * asynchronously, which is how Hopper reaches its rated rate. On an H200
 * (section 40) BN 128 runs 8B matrices of 2048 rows at 385-452 TFLOP/s
 * (283-415 at 512), 1.2-1.8x the mma.sync kernel, and an 8B BF16 prefill
 * 1.23x faster; BN 256 is slower than 128 on every shape measured.
 *
 * The kernel:
 *  - a block is a 128 x BN tile of y (x rows x weight rows; BN 128 or 256),
 *    two warpgroups of 64 x rows each, wgmma m64n128k16 (bf16 in, f32
 *    sums; BN 256: two of them a k16 step);
 *  - the operands stream through ST shared-memory stages by cp.async, 64 k
 *    a stage (128 bytes a row), in the 128-byte swizzled K-major layout
 *    wgmma's descriptors name (16-byte chunk c of row r at c ^ (r & 7),
 *    8-row atoms of 1024 bytes);
 *  - per stage: wait for its copies, make them visible to the async proxy
 *    (fence.proxy.async), one block barrier, issue the copies of the stage
 *    ST - 2 ahead (into the slot whose wgmma finished: each warpgroup keeps
 *    at most one stage's wgmma in flight), then the stage's 4 (8) wgmma,
 *    committed as one group;
 *  - split-k, bias and the partial sums as gemm_bf16.cu's (tc_reduce).
 * The operands are rounded as gemm_bf16.cu rounds them (x and W to bf16,
 * products exact in f32), so test_cuda's emulation checks it; the order of
 * the f32 sums inside the tensor core differs, so its bits may differ from
 * the mma.sync kernel's.
 *
 * Built for sm_90a only (wgmma is Hopper's own instruction): CMake compiles
 * this file alone with arch=compute_90a,code=sm_90a and MTPLX_SM90A; without
 * them (an nvcc before 12, or another GPU) the host functions say "not
 * available" and the kernel is a trap. */

#define _Noreturn [[noreturn]]
extern "C" {
#include "kernels/kernels.h"
}
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_layout.h"
#include "cuda/cuda_util.cuh"

#include <cuda_runtime.h>

#if defined(MTPLX_SM90A) && (!defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL))
#define WG_HAVE 1 /* the host pass, and the device pass for sm_90a */
#else
#define WG_HAVE 0
#endif

#ifdef MTPLX_SM90A
namespace {

constexpr int WG_BM = 128, WG_BK = 64, WG_THREADS = 256;
/* a stage: x's 128 rows then W's BN, 128 bytes each; the stages, and 1 KB
 * to align the first to a swizzle atom */
template <int BN> __host__ __device__ constexpr int wg_stage() { return (WG_BM + BN) * WG_BK * 2; }
template <int BN, int ST> __host__ __device__ constexpr int wg_smem() { return ST * wg_stage<BN>() + 1024; }

/* byte offset of 16-byte chunk c (0-7) of staged row r: 128-byte swizzle */
__device__ __forceinline__ uint32_t wg_swz(int r, int c) {
    return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4));
}

/* A wgmma shared-memory descriptor for a K-major operand in the 128-byte
 * swizzle at shared address a (inside a 1024-byte-aligned atom; a k16 step
 * further is a + 32): start address >> 4 (bits 0-13), leading byte offset
 * 1 (unused for this layout, bits 16-29), stride byte offset 1024 >> 4
 * (the next 8 rows, bits 32-45), base offset 0, layout 1 = 128-byte
 * swizzle (bits 62-63). */
__device__ __forceinline__ uint64_t wg_desc(uint32_t a) {
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

#if WG_HAVE
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* cp.async's (generic proxy) writes to shared memory seen by wgmma's reads (async proxy) */
__device__ __forceinline__ void wg_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
/* keep the compiler from moving accumulator reads or writes across a wgmma in flight */
__device__ __forceinline__ void wg_reg_fence(float &r) { asm volatile("" : "+f"(r)::"memory"); }

/* d (64 f32 of this thread) += A (64 x 16, descriptor da) B (128 x 16, db)^T */
__device__ __forceinline__ void wgmma_128(float (&d)[64], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(1));
}
#endif

/* Stage st: k step kb (elements [64 kb, 64 kb + 64)) of x rows i0.. (bf16
 * rows of k; past n zeros) and weight rows r0.. (16-row tiles of the tiled
 * copy, whose 32-k steps are 1 KB each; tiles past the padded m zeros).
 * 256 threads: 4 x chunks and BN / 32 W chunks each, consecutive threads on
 * consecutive 16 bytes of the source. */
template <int BN>
__device__ __forceinline__ void wg_load(uint32_t xs, const uint8_t *__restrict__ W, int64_t k, int64_t m_tiles,
                                        const uint16_t *__restrict__ xb, int64_t n, int64_t i0, int64_t r0,
                                        int64_t kb) {
    const uint32_t ws = xs + WG_BM * 128;
    const int tid = threadIdx.x;
#pragma unroll
    for (int h = 0; h < 4; h++) { /* 128 rows x 8 chunks of 8 bf16 */
        const int p = tid + WG_THREADS * h, row = p >> 3, c = p & 7;
        const bool ok = i0 + row < n;
        cp_async16z(xs + wg_swz(row, c), xb + (size_t)(ok ? i0 + row : 0) * k + kb * WG_BK + 8 * c, ok);
    }
#pragma unroll
    for (int h = 0; h < BN / 32; h++) { /* BN / 16 tiles x 2 k halves x 16 rows x 4 chunks */
        const int p = tid + WG_THREADS * h, t = p >> 7, half = (p >> 6) & 1, r = 16 * t + ((p >> 2) & 15), cc = p & 3;
        const bool ok = r0 / 16 + t < m_tiles;
        const uint8_t *src = W + tiled_row_off(ok ? r0 + r : 0, 2 * k) + (2 * kb + half) * 1024 + cc * 16;
        cp_async16z(ws + wg_swz(r, 4 * half + cc), src, ok);
    }
}

template <int BN, int ST>
__global__ void __launch_bounds__(WG_THREADS, 1)
    gemm_wgmma_kernel(const uint8_t *__restrict__ W, int64_t m, int64_t k, const uint16_t *__restrict__ xb,
                      int64_t n, float *y, const float *__restrict__ bias, const float *gate, int64_t kchunk,
                      float *__restrict__ part) {
#if WG_HAVE
    static_assert(BN == 128 || BN == 256, "BN: one or two wgmma n128");
    static_assert(ST >= 3, "a stage computed, one in flight, one loading");
    constexpr int STAGE = wg_stage<BN>(), NH = BN / 128;
    extern __shared__ __align__(16) uint8_t wg_sm[];
    const uint32_t sbase = ((uint32_t)__cvta_generic_to_shared(wg_sm) + 1023u) & ~1023u;
    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int64_t i0 = (int64_t)blockIdx.y * WG_BM, r0 = (int64_t)blockIdx.x * BN;
    const int64_t m_tiles = (m + 15) / 16;
    const int64_t k_lo = (int64_t)blockIdx.z * kchunk, k_hi = k_lo + kchunk < k ? k_lo + kchunk : k;
    const int64_t kb0 = k_lo / WG_BK, nk = (k_hi - k_lo) / WG_BK;

    float acc[NH][64];
#pragma unroll
    for (int h = 0; h < NH; h++)
#pragma unroll
        for (int i = 0; i < 64; i++) acc[h][i] = 0.f;

#pragma unroll
    for (int s = 0; s < ST - 2; s++) {
        if (s < nk) wg_load<BN>(sbase + s * STAGE, W, k, m_tiles, xb, n, i0, r0, kb0 + s);
        cp_async_commit();
    }
    for (int64_t kb = 0; kb < nk; kb++) {
        cp_async_wait<ST - 3>(); /* this thread's copies of stage kb are in */
        wg_proxy_fence();
        __syncthreads(); /* everyone's are, and every warpgroup's wgmma of stage kb - 2 is done */
        if (kb + ST - 2 < nk)
            wg_load<BN>(sbase + (int)((kb + ST - 2) % ST) * STAGE, W, k, m_tiles, xb, n, i0, r0, kb0 + kb + ST - 2);
        cp_async_commit();
        const uint32_t xs = sbase + (int)(kb % ST) * STAGE, ws = xs + WG_BM * 128;
#pragma unroll
        for (int h = 0; h < NH; h++)
#pragma unroll
            for (int i = 0; i < 64; i++) wg_reg_fence(acc[h][i]);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < WG_BK / 16; kk++) {
            const uint64_t da = wg_desc(xs + wg * 64 * 128 + 32 * kk);
#pragma unroll
            for (int h = 0; h < NH; h++) wgmma_128(acc[h], da, wg_desc(ws + h * 128 * 128 + 32 * kk));
        }
        wg_commit();
#pragma unroll
        for (int h = 0; h < NH; h++)
#pragma unroll
            for (int i = 0; i < 64; i++) wg_reg_fence(acc[h][i]);
        wg_wait<1>(); /* at most this stage's group in flight */
    }
    wg_wait<0>();
#pragma unroll
    for (int h = 0; h < NH; h++)
#pragma unroll
        for (int i = 0; i < 64; i++) wg_reg_fence(acc[h][i]);

    /* acc[h][4 j + 2 q + e]: x row 64 wg + 16 warp + lane / 4 + 8 q, weight
     * row 128 h + 8 j + 2 (lane % 4) + e */
#pragma unroll
    for (int q = 0; q < 2; q++) {
        const int64_t i = i0 + 64 * wg + 16 * warp + (lane >> 2) + 8 * q;
        if (i >= n) continue;
#pragma unroll
        for (int h = 0; h < NH; h++)
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const int64_t r = r0 + 128 * h + 8 * j + 2 * (lane & 3);
                gemm_store2(y, part, bias, gate, n, m, i, r, acc[h][4 * j + 2 * q], acc[h][4 * j + 2 * q + 1]);
            }
    }
#else
    __trap();
#endif
}

/* the stages of each width: 4 of 48 KB (BN 256) or 6 of 32 KB (BN 128) */
constexpr int WG_ST256 = 4, WG_ST128 = 6;

} // namespace
#endif /* MTPLX_SM90A */

extern "C" {

bool mtplx_cuda_gemm_wgmma_ok(int type, int layout, int64_t k) {
#if WG_HAVE
    static int cc = -1; /* the device's compute capability, once */
    if (cc < 0) {
        int dev = 0, major = 0, minor = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
            major = minor = 0;
        cc = 10 * major + minor;
    }
    return cc == 90 && type == MTPLX_TYPE_BF16 && layout == MTPLX_CUDA_W_BF16_TILED && k > 0 && k % WG_BK == 0;
#else
    (void)type, (void)layout, (void)k;
    return false;
#endif
}

cudaError_t mtplx_cuda_gemm_wgmma_init(void) {
#if WG_HAVE
    if (!mtplx_cuda_gemm_wgmma_ok(MTPLX_TYPE_BF16, MTPLX_CUDA_W_BF16_TILED, WG_BK)) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(gemm_wgmma_kernel<256, WG_ST256>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         wg_smem<256, WG_ST256>());
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(gemm_wgmma_kernel<128, WG_ST128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 wg_smem<128, WG_ST128>());
    return e;
#else
    return cudaSuccess;
#endif
}

cudaError_t mtplx_cuda_gemm_wgmma(cudaStream_t s, const void *W, int64_t m, int64_t k, const void *xb, int64_t n,
                                  float *y, const float *bias, const float *gate, const mtplx_cuda_tc_split *sp,
                                  int bn) {
#if WG_HAVE
    if (!mtplx_cuda_gemm_wgmma_ok(MTPLX_TYPE_BF16, MTPLX_CUDA_W_BF16_TILED, k) || ((uintptr_t)W & 15) ||
        ((uintptr_t)xb & 15) || (bn != 128 && bn != 256) || (gate && bias))
        return cudaErrorInvalidValue;
    if (n <= 0 || m <= 0) return cudaSuccess;
    const int64_t gx = (m + bn - 1) / bn, gy = (n + WG_BM - 1) / WG_BM;
    int64_t kchunk; /* split-k as gemm_bf16.cu's (one block an SM here: counted twice), 4 steps a run at least */
    const int splits = mtplx_cuda_tc_split_k(sp, 2 * gx * gy, n, m, k, WG_BK, 4, &kchunk);
    float *part = splits > 1 ? sp->buf : NULL;
    const dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)splits);
    if (bn == 256)
        gemm_wgmma_kernel<256, WG_ST256><<<grid, WG_THREADS, wg_smem<256, WG_ST256>(), s>>>(
            (const uint8_t *)W, m, k, (const uint16_t *)xb, n, y, bias, gate, kchunk, part);
    else
        gemm_wgmma_kernel<128, WG_ST128><<<grid, WG_THREADS, wg_smem<128, WG_ST128>(), s>>>(
            (const uint8_t *)W, m, k, (const uint16_t *)xb, n, y, bias, gate, kchunk, part);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || !part) return e;
    return mtplx_cuda_tc_reduce(s, part, splits, n * m, m, y, bias, gate);
#else
    (void)s, (void)W, (void)m, (void)k, (void)xb, (void)n, (void)y, (void)bias, (void)gate, (void)sp, (void)bn;
    return cudaErrorNotSupported;
#endif
}

} // extern "C"
