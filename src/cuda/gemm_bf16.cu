/* gemm_bf16.cu: the pipelined prefill GEMM, y[n][m] = x[n][k] W[m][k]^T
 * (+ bias), for forwards of many rows: BF16 weights in the GEMV's tiled
 * copy (mtplx_cuda_tile_bf16's 16-row tiles) by default; Q8_0 in its
 * repacked copies and Q4_K in the file's layout (paths.gemm_q8, the
 * backend's matmul_pipelined). The other types and layouts keep
 * kernels.cu's tc_mm_kernel.
 *
 * Why: kernels.cu's tc_mm_kernel serves every weight type through one
 * loader (dequantise 8 elements in registers, round x and W, store both to
 * shared memory, one stage) and WMMA 64 x 64 tiles; on an H200 an 8B BF16
 * prefill of 512 tokens ran ~2.7k tok/s, about 45 TFLOP/s. Here:
 *  - a block is a 128 x 128 tile of y (activation rows x weight rows), 8
 *    warps of 64 x 32, mma.sync m16n8k16 bf16 with f32 sums;
 *  - the operands stream through GB_ST shared-memory stages by cp.async:
 *    a stage is 32 k (one k step of the tiled copy, so each 16-row tile's
 *    part is 1 KB of contiguous bytes) of 128 weight rows and of 128 x rows
 *    in f32, while the warps multiply the stages before it;
 *  - x is staged in f32 and rounded to bf16 as the warps build their A
 *    fragments (two values a cvt); W's B fragments come by ldmatrix from
 *    rows whose 16-byte chunks are swizzled (chunk c of row r at
 *    c ^ ((r >> 1) & 3)), so 8 rows hit 8 different bank groups;
 *  - or (XB: the caller passes a scratch large enough, which the backend
 *    does unless MTPLX_CUDA_GEMM_XB=0) x is rounded to bf16 once, by x_bf16_kernel into
 *    that scratch, staged as bf16 rows swizzled as W's and read by
 *    ldmatrix too: half the shared-memory bytes for x, no conversion per
 *    use, 4 stages of 16 KB instead of 3 of 28. The same bits either way.
 * The rounding is tc_mm_kernel's (x and W to bf16, products exact in f32),
 * so test_cuda's emulation of it checks both; only the order of the f32
 * sums differs. Split-k (kchunk, part) as tc_mm_kernel's: a run of k steps
 * a blockIdx.z, partials summed in a fixed order by tc_reduce_kernel.
 * H200 (tools/cuda_gemm_bench.sh, bench/RESULTS.md sections 37, 39): 8B
 * BF16 matrices at 195-320 TFLOP/s from 512 rows on with x staged in bf16,
 * 150-220 in f32, against 34-49 on tc_mm_kernel. */

#define _Noreturn [[noreturn]]
extern "C" {
#include "kernels/kernels.h"
}
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_layout.h"
#include "cuda/cuda_util.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <string.h>

namespace {

constexpr int GB_BM = 128, GB_BN = 128, GB_BK = 32, GB_THREADS = 256;
constexpr int GB_XLD = GB_BK + 8; /* floats a staged f32 x row: lds.64 of a fragment conflict-free */
constexpr int GB_WBYTES = GB_BN * GB_BK * 2;
/* a stage's bytes of x (bf16 rows of 64 bytes, as W's; or f32 rows of
 * GB_XLD), of x and W, and the stages: 4 of 16 KB or 3 of 28 */
template <bool XB> __host__ __device__ constexpr int gb_xbytes() { return XB ? GB_BM * GB_BK * 2 : GB_BM * GB_XLD * 4; }
template <bool XB> __host__ __device__ constexpr int gb_stage() { return gb_xbytes<XB>() + GB_WBYTES; }
template <bool XB> __host__ __device__ constexpr int gb_stages() { return XB ? 4 : 3; }
template <bool XB> __host__ __device__ constexpr int gb_smem() { return gb_stages<XB>() * gb_stage<XB>(); }

/* (cp_async16z, cp_async_commit, cp_async_wait, ldsm_x4, pack2: cuda_util.cuh) */
/* Byte offset of 16-byte chunk c (0-3) of staged bf16 row r (64 bytes a
 * row, W's and x's alike): swizzled, chunk c at c ^ ((r >> 1) & 3), so an
 * ldmatrix of 8 consecutive rows hits 8 different bank groups. */
__device__ __forceinline__ uint32_t gb_swz(int r, int c) {
    return (uint32_t)(r * 64 + ((c ^ ((r >> 1) & 3)) << 4));
}
template <int N> __device__ __forceinline__ void cp_small(uint32_t dst, const void *src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(dst), "l"(src), "n"(N), "r"(ok ? N : 0)
                 : "memory");
}

/* The weights the kernel reads: BF16 tiled, Q8_0 packed / int8-
 * interleaved (cuda_layout.h; rb bytes a row: the k quants, at e or at
 * ipos(e), then the k / 32 f16 scales), or Q4_K as in the file (144-byte
 * blocks of 256: a 16-byte header, d, dmin and the 6-bit scales, then qs,
 * whose bytes [32 c, 32 c + 32) hold sub-block 2 c in their low nibbles and
 * 2 c + 1 in their high ones). A quantised stage holds each row's 32 bytes
 * of the step's quants (GB_QLD bytes a row: Q8_0's in element order, Q4_K's
 * sub-block pair) and at GB_QS Q8_0's f16 scales of the step's block and
 * its pair (4 bytes a row) or Q4_K's block header (16 bytes a row). */
enum { WL_BF16 = 0, WL_Q8 = 1, WL_Q8I = 2, WL_Q4K = 3 };
constexpr int GB_QLD = 48, GB_QS = GB_BN * GB_QLD;
static_assert(GB_QS + 16 * GB_BN <= GB_WBYTES, "a quantised stage fits BF16's");
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Stage st of the block: k step ks (elements [32 ks, 32 ks + 32)) of its
 * x rows i0.. (bf16 from xb, or f32 from x; rows past n zero) and weight
 * rows r0.. (tiles past the padded m zero). 256 threads: 2 x chunks (4 in
 * f32) and 2 W chunks each. */
template <int WL, bool XB>
__device__ __forceinline__ void gb_load(uint32_t sbase, int st, const uint8_t *__restrict__ W, size_t rb,
                                        int64_t k, int64_t m_tiles, const float *__restrict__ x,
                                        const uint16_t *__restrict__ xb, int64_t n, int64_t i0, int64_t r0,
                                        int64_t ks) {
    const uint32_t xs = sbase + st * gb_stage<XB>(), ws = xs + gb_xbytes<XB>();
    const int tid = threadIdx.x;
    if constexpr (XB) {
#pragma unroll
        for (int h = 0; h < 2; h++) { /* 128 rows x 4 chunks of 8 bf16, swizzled as W's */
            const int p = tid + GB_THREADS * h, row = p >> 2, c = p & 3;
            const bool ok = i0 + row < n;
            const uint16_t *src = xb + (size_t)(ok ? i0 + row : 0) * k + ks * GB_BK + 8 * c;
            cp_async16z(xs + gb_swz(row, c), src, ok);
        }
    } else {
#pragma unroll
        for (int h = 0; h < 4; h++) { /* 128 rows x 8 chunks of 4 floats */
            const int p = tid + GB_THREADS * h, row = p >> 3, c = p & 7;
            const bool ok = i0 + row < n;
            const float *src = x + (size_t)(ok ? i0 + row : 0) * k + ks * GB_BK + 4 * c;
            cp_async16z(xs + (row * GB_XLD + 4 * c) * 4, src, ok);
        }
    }
    if constexpr (WL == WL_BF16) {
#pragma unroll
        for (int h = 0; h < 2; h++) { /* 8 tiles x 16 rows x 4 chunks of 8 bf16 */
            const int p = tid + GB_THREADS * h, t = p >> 6, r = 16 * t + ((p >> 2) & 15), c = p & 3;
            const bool ok = r0 / 16 + t < m_tiles;
            cp_async16z(ws + gb_swz(r, c), W + tiled_row_off(ok ? r0 + r : 0, 2 * k) + ks * 1024 + c * 16, ok);
        }
    } else if constexpr (WL == WL_Q4K) { /* 128 rows x (2 chunks of qs, the header); m_tiles is m */
        const int row = tid >> 1, c = tid & 1;
        const bool ok = r0 + row < m_tiles;
        const uint8_t *blk = W + (size_t)(ok ? r0 + row : 0) * rb + (ks >> 3) * 144;
        cp_async16z(ws + row * GB_QLD + 16 * c, blk + 16 + 32 * ((ks & 7) >> 1) + 16 * c, ok);
        if (tid < GB_BN) {
            const bool okh = r0 + tid < m_tiles;
            cp_async16z(ws + GB_QS + 16 * tid, W + (size_t)(okh ? r0 + tid : 0) * rb + (ks >> 3) * 144, okh);
        }
    } else { /* Q8_0; m_tiles is m: rows past it are zeros */
        if constexpr (WL == WL_Q8) { /* 128 rows x 2 chunks of 16 quants */
            const int row = tid >> 1, c = tid & 1;
            const bool ok = r0 + row < m_tiles;
            cp_async16z(ws + row * GB_QLD + 16 * c, W + (size_t)(ok ? r0 + row : 0) * rb + ks * 32 + 16 * c, ok);
        } else { /* 128 rows x 4 pieces of 8 quants: piece q of block b at 16 q + 8 b of its 64 */
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int p = tid + GB_THREADS * h, row = p >> 2, q = p & 3;
                const bool ok = r0 + row < m_tiles;
                cp_small<8>(ws + row * GB_QLD + 8 * q,
                            W + (size_t)(ok ? r0 + row : 0) * rb + (ks >> 1) * 64 + 16 * q + 8 * (ks & 1), ok);
            }
        }
        if (tid < GB_BN) { /* the scales of blocks 2 (ks / 2) and + 1 */
            const bool ok = r0 + tid < m_tiles;
            cp_small<4>(ws + GB_QS + 4 * tid, W + (size_t)(ok ? r0 + tid : 0) * rb + k + 4 * (ks >> 1), ok);
        }
    }
}

template <int WL, bool XB>
__global__ void __launch_bounds__(GB_THREADS, 2)
    gemm_bf16_kernel(const uint8_t *__restrict__ W, size_t rb, int64_t m, int64_t k, const float *__restrict__ x,
                     const uint16_t *__restrict__ xb, int64_t n, float *y, const float *__restrict__ bias,
                     const float *gate, int64_t kchunk, float *__restrict__ part) {
    constexpr int GB_ST = gb_stages<XB>(), GB_STAGE = gb_stage<XB>(), GB_XBYTES = gb_xbytes<XB>();
    extern __shared__ __align__(16) uint8_t gb_sm[];
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(gb_sm);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int wm = (warp >> 2) * 64, wn = (warp & 3) * 32; /* this warp's 64 x rows, 32 weight rows */
    const int64_t i0 = (int64_t)blockIdx.y * GB_BM, r0 = (int64_t)blockIdx.x * GB_BN;
    const int64_t m_tiles = WL == WL_BF16 ? (m + 15) / 16 : m; /* (gb_load's bound) */
    const int64_t k_lo = (int64_t)blockIdx.z * kchunk, k_hi = k_lo + kchunk < k ? k_lo + kchunk : k;
    const int64_t ks0 = k_lo / GB_BK, nk = (k_hi - k_lo) / GB_BK;

    float acc[4][4][4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 4; b++) acc[a][b][0] = acc[a][b][1] = acc[a][b][2] = acc[a][b][3] = 0.f;

#pragma unroll
    for (int s = 0; s < GB_ST - 1; s++) {
        if (s < nk) gb_load<WL, XB>(sbase, s, W, rb, k, m_tiles, x, xb, n, i0, r0, ks0 + s);
        cp_async_commit();
    }
    /* ldmatrix: lane l gives row (l & 7) + 8 (l >> 4) of its 16, chunk (l >> 3) & 1 of the k half
     * (W: matrices rows 0-7 k 0-7, rows 0-7 k 8-15, rows 8-15 ...); for x's
     * A fragment row l & 15, chunk l >> 4 (rows 0-7 k 0-7, rows 8-15 k 0-7,
     * rows 0-7 k 8-15, rows 8-15 k 8-15: mma's a0..a3) */
    const int lrow = (lane & 7) + 8 * (lane >> 4), lch = (lane >> 3) & 1;
    const int arow = lane & 15, ach = lane >> 4;
    for (int64_t kb = 0; kb < nk; kb++) {
        cp_async_wait<GB_ST - 2>();
        __syncthreads(); /* stage kb is in, and stage kb - 1 is read by every warp */
        if (kb + GB_ST - 1 < nk)
            gb_load<WL, XB>(sbase, (int)((kb + GB_ST - 1) % GB_ST), W, rb, k, m_tiles, x, xb, n, i0, r0,
                            ks0 + kb + GB_ST - 1);
        cp_async_commit();
        const int st = (int)(kb % GB_ST);
        const float *xs = (const float *)(gb_sm + st * GB_STAGE);
        const uint32_t xsa = sbase + st * GB_STAGE, ws = xsa + GB_XBYTES;
        const uint8_t *wq = gb_sm + st * GB_STAGE + GB_XBYTES; /* (Q8_0) */
        /* rows wn + 8 nj + g: Q8_0 the scale of this step's block; Q4_K the
         * scale and min of its sub-block (q4k_sub_scales, as deq8's) */
        float dq[4], mq[4];
        if constexpr (WL == WL_Q8 || WL == WL_Q8I)
#pragma unroll
            for (int nj = 0; nj < 4; nj++)
                dq[nj] = __half2float(
                    *(const __half *)(wq + GB_QS + 4 * (wn + 8 * nj + g) + 2 * ((ks0 + kb) & 1)));
        if constexpr (WL == WL_Q4K)
#pragma unroll
            for (int nj = 0; nj < 4; nj++)
                q4k_sub_scales(*(const uint4 *)(wq + GB_QS + 16 * (wn + 8 * nj + g)), (int)((ks0 + kb) & 7), dq[nj],
                               mq[nj]);
#pragma unroll
        for (int kk = 0; kk < GB_BK; kk += 16) {
            uint32_t a[4][4], b[4][2];
#pragma unroll
            for (int mi = 0; mi < 4; mi++) {
                if constexpr (XB) {
                    const int r = wm + 16 * mi + arow, c = kk / 8 + ach;
                    ldsm_x4(a[mi], xsa + gb_swz(r, c));
                } else {
                    const float *p0 = xs + (wm + 16 * mi + g) * GB_XLD + kk + 2 * t, *p1 = p0 + 8 * GB_XLD;
                    const float2 v0 = *(const float2 *)p0, v1 = *(const float2 *)p1;
                    const float2 v2 = *(const float2 *)(p0 + 8), v3 = *(const float2 *)(p1 + 8);
                    a[mi][0] = pack2<__nv_bfloat16>(v0.x, v0.y), a[mi][1] = pack2<__nv_bfloat16>(v1.x, v1.y);
                    a[mi][2] = pack2<__nv_bfloat16>(v2.x, v2.y), a[mi][3] = pack2<__nv_bfloat16>(v3.x, v3.y);
                }
            }
            if constexpr (WL == WL_BF16) {
#pragma unroll
                for (int nb = 0; nb < 2; nb++) { /* weight rows wn + 16 nb .. + 16: n blocks 2 nb, 2 nb + 1 */
                    const int r = wn + 16 * nb + lrow, c = kk / 8 + lch;
                    uint32_t q4[4];
                    ldsm_x4(q4, ws + gb_swz(r, c));
                    b[2 * nb][0] = q4[0], b[2 * nb][1] = q4[1], b[2 * nb + 1][0] = q4[2], b[2 * nb + 1][1] = q4[3];
                }
            } else {
                /* b0: row g, k 2t, 2t + 1; b1: k 2t + 8, 2t + 9; each value d q
                 * in f32, then bf16 (deq8's and tc_fetch's rounding) */
#pragma unroll
                for (int nj = 0; nj < 4; nj++) {
                    const uint8_t *qr = wq + (wn + 8 * nj + g) * GB_QLD + kk + 2 * t;
#pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        const uint16_t u = *(const uint16_t *)(qr + 8 * hh);
                        if constexpr (WL == WL_Q4K) { /* d sc q - dmin m, deq8's expression */
                            const int sh = (int)((ks0 + kb) & 1) * 4;
                            const float q0 = (float)((u >> sh) & 0xF), q1 = (float)((u >> (8 + sh)) & 0xF);
                            b[nj][hh] = pack2<__nv_bfloat16>(dq[nj] * q0 - mq[nj], dq[nj] * q1 - mq[nj]);
                        } else {
                            b[nj][hh] =
                                pack2<__nv_bfloat16>(dq[nj] * (float)(int8_t)(u & 0xFF), dq[nj] * (float)(int8_t)(u >> 8));
                        }
                    }
                }
            }
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
#pragma unroll
                for (int nj = 0; nj < 4; nj++) mma_bf16(acc[mi][nj], a[mi], b[nj][0], b[nj][1]);
        }
    }

    /* c0, c1: x row g, weight rows 2t, 2t + 1 of the n block; c2, c3: x row g + 8 */
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t i = i0 + wm + 16 * mi + g + 8 * h;
            if (i >= n) continue;
#pragma unroll
            for (int nj = 0; nj < 4; nj++) {
                gemm_store2(y, part, bias, gate, n, m, i, r0 + wn + 8 * nj + 2 * t, acc[mi][nj][2 * h],
                            acc[mi][nj][2 * h + 1]);
            }
        }
}

/* xb = x rounded to bf16 as pack2 rounds (round to nearest even), 8 values
 * a thread and step; x read in 16-byte loads where it is 16-byte aligned,
 * else one value a load (the same bits) */
__global__ void x_bf16_kernel(const float *__restrict__ x, uint4 *__restrict__ xb, int64_t n8) {
    const bool vec = ((uintptr_t)x & 15) == 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8; i += (int64_t)gridDim.x * blockDim.x) {
        float4 a, b;
        if (vec) {
            a = ((const float4 *)x)[2 * i], b = ((const float4 *)x)[2 * i + 1];
        } else {
            const float *p = x + 8 * i;
            a = make_float4(p[0], p[1], p[2], p[3]), b = make_float4(p[4], p[5], p[6], p[7]);
        }
        xb[i] = make_uint4(pack2<__nv_bfloat16>(a.x, a.y), pack2<__nv_bfloat16>(a.z, a.w),
                           pack2<__nv_bfloat16>(b.x, b.y), pack2<__nv_bfloat16>(b.z, b.w));
    }
}

template <bool XB>
cudaError_t gb_launch(cudaStream_t s, int kind, dim3 grid, const uint8_t *W, size_t rb, int64_t m, int64_t k,
                      const float *x, const uint16_t *xb, int64_t n, float *y, const float *bias,
                      const float *gate, int64_t kchunk, float *part) {
    auto kern = kind == WL_BF16 ? gemm_bf16_kernel<WL_BF16, XB>
                : kind == WL_Q8 ? gemm_bf16_kernel<WL_Q8, XB>
                : kind == WL_Q8I ? gemm_bf16_kernel<WL_Q8I, XB>
                                 : gemm_bf16_kernel<WL_Q4K, XB>;
    kern<<<grid, GB_THREADS, gb_smem<XB>(), s>>>(W, rb, m, k, x, xb, n, y, bias, gate, kchunk, part);
    return cudaGetLastError();
}

template <bool XB> cudaError_t gb_init() {
    cudaError_t e = cudaSuccess;
    for (auto kern : {gemm_bf16_kernel<WL_BF16, XB>, gemm_bf16_kernel<WL_Q8, XB>, gemm_bf16_kernel<WL_Q8I, XB>,
                      gemm_bf16_kernel<WL_Q4K, XB>})
        if (e == cudaSuccess) e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, gb_smem<XB>());
    return e;
}

} // namespace

extern "C" {

/* the kernel for a weight of this type in this layout, or -1 */
static int gb_kind(int type, int layout, int64_t k) {
    if (type == MTPLX_TYPE_BF16 && layout == MTPLX_CUDA_W_BF16_TILED) return WL_BF16;
    if (type == MTPLX_TYPE_Q8_0 && layout == MTPLX_CUDA_W_Q8_PACKED) return WL_Q8;
    if (type == MTPLX_TYPE_Q8_0 && layout == MTPLX_CUDA_W_Q8_I8 && k % 64 == 0) return WL_Q8I;
    if (type == MTPLX_TYPE_Q4_K && layout == MTPLX_CUDA_W_GGUF && k % 256 == 0) return WL_Q4K;
    return -1;
}

cudaError_t mtplx_cuda_gemm_bf16_init(void) {
    cudaError_t e = gb_init<true>();
    return e == cudaSuccess ? gb_init<false>() : e;
}

/* whether x goes through the bf16 scratch xb (else it is staged as f32) */
static bool xb_fits(const void *xb, size_t xb_bytes, int64_t n, int64_t k) {
    return xb && ((uintptr_t)xb & 15) == 0 && (size_t)n * (size_t)k * 2 <= xb_bytes;
}

bool mtplx_cuda_gemm_bf16_ok(int type, int layout, int64_t k, const float *x, int64_t n, const void *xb,
                             size_t xb_bytes) {
    return gb_kind(type, layout, k) >= 0 && k > 0 && k % GB_BK == 0 &&
           (((uintptr_t)x & 15) == 0 || xb_fits(xb, xb_bytes, n, k));
}

cudaError_t mtplx_cuda_gemm_bf16(cudaStream_t s, int type, int layout, const void *W, size_t rb, int64_t m,
                                 int64_t k, const float *x, int64_t n, float *y, const float *bias,
                                 const float *gate, const mtplx_cuda_tc_split *sp, void *xb, size_t xb_bytes,
                                 int wgmma, bool xb_ready) {
    if (!mtplx_cuda_gemm_bf16_ok(type, layout, k, x, n, xb, xb_bytes) || ((uintptr_t)W & 15) || rb % 16 ||
        (gate && bias))
        return cudaErrorInvalidValue;
    if (n <= 0 || m <= 0) return cudaSuccess;
    const bool use_xb = xb_fits(xb, xb_bytes, n, k);
    if (use_xb) {
        if (!xb_ready) {
            const int64_t n8 = n * k / 8; /* k % 32 == 0 */
            const int64_t blocks = (n8 + 255) / 256;
            x_bf16_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, s>>>(x, (uint4 *)xb, n8);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) return e;
        }
        if (wgmma && mtplx_cuda_gemm_wgmma_ok(type, layout, k))
            return mtplx_cuda_gemm_wgmma(s, W, m, k, xb, n, y, bias, gate, sp, wgmma);
    }
    const int64_t gx = (m + GB_BN - 1) / GB_BN, gy = (n + GB_BM - 1) / GB_BM;
    int64_t kchunk; /* split-k as tc_mm_kernel's, runs of at least four 32-element steps */
    const int splits = mtplx_cuda_tc_split_k(sp, gx * gy, n, m, k, GB_BK, 4, &kchunk);
    float *part = splits > 1 ? sp->buf : NULL;
    dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)splits);
    const int kind = gb_kind(type, layout, k);
    cudaError_t e = use_xb ? gb_launch<true>(s, kind, grid, (const uint8_t *)W, rb, m, k, x, (const uint16_t *)xb,
                                             n, y, bias, gate, kchunk, part)
                           : gb_launch<false>(s, kind, grid, (const uint8_t *)W, rb, m, k, x, NULL, n, y, bias,
                                              gate, kchunk, part);
    if (e != cudaSuccess || !part) return e;
    return mtplx_cuda_tc_reduce(s, part, splits, n * m, m, y, bias, gate);
}

} // extern "C"
