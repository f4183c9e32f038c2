/* mmv_tc.cu: the small-n GEMV on tensor cores (decode and verify, n <= 16
 * rows of x) for BF16, Q8_0 and Q4_K weights; mmv.cu's mtplx_cuda_mmv hands a
 * job here when job.mma is set and mtplx_cuda_mmv_tc_ok says yes.
 *
 * Why: mmv.cu's f32 kernel spends n FMAs and n x loads per weight, so a
 * 4-row verify step cost 1.7x (BF16) to 2.5x (Q8_0) a decode step on the
 * H200; the weights are read once either way. Here one mma.sync
 * (m16n8k16, bf16 in, f32 out) multiplies 16 weight rows by 16 k by all 8
 * x rows, so the arithmetic of an n-row step is that of a 1-row step and
 * the weights' bytes set the time.
 *
 * Accuracy: the weights are exact in bf16 (BF16 itself; Q8_0's int8
 * quants, with the block scale applied in f32 afterwards; Q4_K's 4-bit
 * quants, each 32-element sub-block's d * sc applied in f32 and its
 * dmin * m times the sub-block's sum of x subtracted, that sum made by an
 * mma of the same x against ones). Each x value is
 * split into two bf16, hi = bf16(x) and lo = bf16(x - hi), and both are
 * multiplied (an mma each): x keeps about 16 bits, an error of
 * about 2^-17 of |x| against f32's 2^-24, well inside the GEMV's tolerance
 * against exact products (test_cuda's TOL_MM_EXACT).
 *
 * Layout of a warp's work: lane l is in group g = l / 4 (the rows g and
 * g + 8 of an m-tile of 16 weight rows, and x row g of an n-tile of 8) and
 * holds quad position q = l % 4. A k step covers 32 elements: the lane
 * loads elements [8 q, 8 q + 8) of its two weight rows (16 bytes of BF16,
 * 8 of Q8_0) and of its x row. Q4_K's step covers 64 (two sub-blocks whose
 * nibbles share bytes): elements [8 q, 8 q + 8) of each, 8 bytes a row. mma's fragments want k
 * columns 2q, 2q+1, 2q+8, 2q+9 from each lane; since a dot product does not care which physical k a
 * logical k column is, the first mma takes the lane's elements 0-3 as those four columns and the
 * second its elements 4-7, for weights and x alike (quantized weights pair
 * them (0, 2) (1, 3), as their bits convert most cheaply). So every load is 8 or 16 contiguous bytes.
 *
 * A block's W warps (4; 8 for BF16 weights of few rows, bf16_warps) split
 * k for the block's MT m-tiles and all n-tiles: runs of 4 consecutive k
 * steps go to warps 0, 1, 2, 3, 0, ... (a warp reads 256 contiguous bytes
 * of each row at a time, BF16; 128 for Q8_0), and the warps sum their
 * partials through shared memory in warp order.
 * Determinism: a row's result depends on its weights, its x row and k
 * alone (W is a function of the weight and the GPU), never on n, MT, U or the other
 * rows (mma's columns are independent), so decode and verify rows are
 * equal bit for bit (greedy MTP == AR rests on it), and the fused modes
 * equal the plain ones, since both run this code. With job.norm set the
 * rmsnorm before the GEMV is fused in (norm_x).
 *
 * Needs sm_80 or newer (mma.sync with bf16); mtplx_cuda_mmv_tc_ok checks
 * the device. */

#define _Noreturn [[noreturn]]
extern "C" {
#include "kernels/kernels.h"
}
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_util.cuh"
#include "cuda/mmv_tile.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

namespace {

constexpr int TC_WARPS = 4; /* the k split but for bf16_warps' weights */
/* elements of k per step */
template <int T> __host__ __device__ constexpr int kstep() {
    return T == MTPLX_TYPE_Q4_K ? 64 : 32;
}
/* float4s of x a lane loads per step and n-tile */
template <int T> __host__ __device__ constexpr int xq() {
    return T == MTPLX_TYPE_Q4_K ? 4 : 2;
}
constexpr uint32_t BF16_ONES = 0x3F803F80u; /* (1, 1) */

/* d += a . b for one 16x8x16 tile (bf16 in, f32 accumulate) */
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __trap(); /* mtplx_cuda_mmv_tc_ok keeps older GPUs off this path */
#endif
}

__device__ __forceinline__ uint32_t bf2_bits(__nv_bfloat162 v) {
    return *reinterpret_cast<uint32_t *>(&v);
}

/* (a, b) as bf16 pairs hi and lo with hi + lo = (a, b) to about 16 bits;
 * a goes to the low half (the lower k). */
__device__ __forceinline__ void split_x(float a, float b, uint32_t &hi, uint32_t &lo) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    float2 hf = __bfloat1622float2(h);
    hi = bf2_bits(h);
    lo = bf2_bits(__floats2bfloat162_rn(a - hf.x, b - hf.y));
}

/* a + c on bf16 pairs (one fma by 1), exact wherever the sum is */
__device__ __forceinline__ uint32_t bf2_add(uint32_t a, uint32_t c) {
    uint32_t d;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(0x3F803F80u), "r"(c));
#else
    d = a, (void)c;
    __trap();
#endif
    return d;
}

/* The weights as exact bf16 pairs straight from their bits, with no trip
 * through f32 (bench/RESULTS.md section 38): 0x4300 is bf16 128, whose
 * 7 mantissa bits count units, so OR-ing a value v < 128 into them gives
 * 128 + v, and one add takes the offset off. A pair is bytes 0 and 2 of a
 * word (p02) or 1 and 3 (p13): the lane's elements (0, 2) and (1, 3) of
 * four, so x is paired the same way (split_x8p).
 * Q4_K: the nibbles at bits 0-3 and 16-19 of w. */
__device__ __forceinline__ uint32_t q4_pair(uint32_t w) {
    return bf2_add((w & 0x000F000Fu) | 0x43004300u, 0xC300C300u);
}
/* 4 nibbles of w (bits sh..sh+3 of each byte) as pairs (0, 2) and (1, 3) */
__device__ __forceinline__ void q4_to_bf16(uint32_t w, int sh, uint32_t &p02, uint32_t &p13) {
    p02 = q4_pair(w >> sh);
    p13 = q4_pair(w >> (sh + 8));
}
/* Q8_0: signed bytes 0 and 2 of w. With u = q + 128 = 128 b + a (a the low
 * 7 bits, shared by q and u; b = 1 exactly when q >= 0): q = (128 + a) -
 * (b ? 128 : 256), and -128 and -256 differ in one bit of bf16 (0xC300,
 * 0xC380), q's sign bit. */
__device__ __forceinline__ uint32_t q8_pair(uint32_t w) {
    return bf2_add((w & 0x007F007Fu) | 0x43004300u, (w & 0x00800080u) ^ 0xC300C300u);
}
/* 4 int8 quants (one 32-bit word) as pairs (0, 2) and (1, 3) */
__device__ __forceinline__ void q8_to_bf16(uint32_t w, uint32_t &p02, uint32_t &p13) {
    p02 = q8_pair(w);
    p13 = q8_pair(w >> 8);
}

/* One k step's weights of a lane's two rows: BF16 8 elements = 4 words a
 * row; Q8_0 8 quants = 2 words a row, plus the rows' block scales; Q4_K 8
 * bytes (16 nibbles) a row, plus the rows' block headers. */
template <int T> struct wstep {
    uint32_t lo[T == MTPLX_TYPE_BF16 ? 4 : 2], hi[T == MTPLX_TYPE_BF16 ? 4 : 2];
    float dlo, dhi;
};
template <> struct wstep<MTPLX_TYPE_Q4_K> {
    uint32_t lo[2], hi[2];
    uint4 hlo, hhi;
};

/* TL: BF16 in the tiled layout (tile_rows' pointers; a k step is 1 KB of
 * the tile, the quad position 16 bytes) */
template <int T, bool TL>
__device__ __forceinline__ void load_step(const uint8_t *rlo, const uint8_t *rhi, int64_t k,
                                          int64_t e, wstep<T> &s) {
    if constexpr (T == MTPLX_TYPE_BF16) {
        const int64_t off = TL ? ((e >> 5) << 10) + 2 * (e & 31) : 2 * e;
        uint4 a = ld_stream16(rlo + off), b = ld_stream16(rhi + off);
        s.lo[0] = a.x, s.lo[1] = a.y, s.lo[2] = a.z, s.lo[3] = a.w;
        s.hi[0] = b.x, s.hi[1] = b.y, s.hi[2] = b.z, s.hi[3] = b.w;
    } else if constexpr (T == MTPLX_TYPE_Q4_K) {
        /* e = 64 j + 8 q inside block e / 256: bytes 32 j + 8 q of its qs
         * hold those elements (low nibbles) and the next sub-block's (high) */
        int64_t off = (e >> 8) * (int64_t)sizeof(block_q4_K);
        int64_t qoff = off + 16 + 32 * ((e & 255) >> 6) + (e & 63);
        uint2 a = ld_stream8(rlo + qoff), b = ld_stream8(rhi + qoff);
        s.lo[0] = a.x, s.lo[1] = a.y, s.hi[0] = b.x, s.hi[1] = b.y;
        s.hlo = __ldg((const uint4 *)(rlo + off)); /* the 4 lanes of a quad share it: L1 */
        s.hhi = __ldg((const uint4 *)(rhi + off));
    } else {
        uint2 a = ld_stream8(rlo + e), b = ld_stream8(rhi + e);
        s.lo[0] = a.x, s.lo[1] = a.y, s.hi[0] = b.x, s.hi[1] = b.y;
        int64_t blk = e / QK8_0;
        s.dlo = h2f(__ldg((const unsigned short *)(rlo + k) + blk));
        s.dhi = h2f(__ldg((const unsigned short *)(rhi + k) + blk));
    }
}

/* The k split: warp w's i-th k step. Runs of TC_RUN consecutive steps go
 * to warps 0, 1, 2, 3, 0, ... in turn, whatever U, so a row's sum order
 * depends on k alone. */
constexpr int TC_RUN = 4;
template <int W> __device__ __forceinline__ int64_t step_of(int64_t i, int warp) {
    return ((i / TC_RUN) * W + warp) * TC_RUN + i % TC_RUN;
}

/* Elements [e, e + 8) of the lane's x row in each n-tile (zeros when out),
 * and for Q4_K also [e + 32, e + 40) (XQ = 4). Through L2 (.cg), not the
 * read-only path: with a dependent launch x was written while this kernel
 * ran, and ld.global.nc promises nothing about such data. */
template <int NT, int XQ>
__device__ __forceinline__ void load_x(const float *const (&xr)[NT], const bool (&xlive)[NT],
                                       bool in, int64_t e, float4 (&v)[NT][XQ]) {
#pragma unroll
    for (int u = 0; u < NT; u++)
#pragma unroll
        for (int h = 0; h < XQ; h++) {
            v[u][h] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (in && xlive[u])
                v[u][h] = __ldcg((const float4 *)(xr[u] + e + 32 * (h >> 1) + 4 * (h & 1)));
        }
}

/* The fused rmsnorm (job.norm): y = W (x * norm) / rms(x). A block's warps
 * between them load every element of each x row once, so each lane adds
 * the squares of the x values it loads to ss (steps in order, whatever U)
 * before it multiplies them by the norm's weights (gsm, staged in shared
 * memory before the wait), and the epilogue scales each sum by 1 / rms
 * (norm_scale of the quads' and then the warps' shares, in that order). A
 * row's result so still depends on its x row, k and W alone (decode ==
 * verify, bit for bit); it equals rmsnorm, then the GEMV, up to f32
 * rounding (the product's factors in another order). Norms of at most
 * MTPLX_CUDA_TC_NORM_MAX_K elements; wider ones take rmsnorm_kernel, then
 * the GEMV (the backend's norm_ok). */
template <int NT, int XQ>
__device__ __forceinline__ void norm_x(float4 (&v)[NT][XQ], const float *gs, float (&ss)[NT]) {
#pragma unroll
    for (int h = 0; h < XQ; h++) {
        const float4 gv = *(const float4 *)(gs + 32 * (h >> 1) + 4 * (h & 1));
#pragma unroll
        for (int u = 0; u < NT; u++) {
            float4 &a = v[u][h];
            ss[u] = fmaf(a.w, a.w, fmaf(a.z, a.z, fmaf(a.y, a.y, fmaf(a.x, a.x, ss[u]))));
            a.x *= gv.x, a.y *= gv.y, a.z *= gv.z, a.w *= gv.w;
        }
    }
}

/* The 8 x values of float4s v0, v1 as bf16 pairs: b[0..3] the hi of
 * elements (0,1) (2,3) (4,5) (6,7), b[4..7] the lo. */
__device__ __forceinline__ void split_x8(const float4 &v0, const float4 &v1, uint32_t (&b)[8]) {
    split_x(v0.x, v0.y, b[0], b[4]);
    split_x(v0.z, v0.w, b[1], b[5]);
    split_x(v1.x, v1.y, b[2], b[6]);
    split_x(v1.z, v1.w, b[3], b[7]);
}
/* the same, paired as q4_to_bf16 / q8_to_bf16 pair the weights: (0,2)
 * (1,3) (4,6) (5,7) */
__device__ __forceinline__ void split_x8p(const float4 &v0, const float4 &v1, uint32_t (&b)[8]) {
    split_x(v0.x, v0.z, b[0], b[4]);
    split_x(v0.y, v0.w, b[1], b[5]);
    split_x(v1.x, v1.z, b[2], b[6]);
    split_x(v1.y, v1.w, b[3], b[7]);
}

/* d += the lane's two rows (a: elements 0-7 of row g in a[0..3], of row
 * g + 8 in a[4..7], as pairs) times x (b, split_x8 or split_x8p: paired
 * as a is), hi and lo: the first
 * mma of each pair takes elements 0-3, the second 4-7. */
__device__ __forceinline__ void mma_rows_x(float (&d)[4], const uint32_t (&a)[8],
                                           const uint32_t (&b)[8]) {
    mma_bf16(d, a[0], a[4], a[1], a[5], b[0], b[1]);
    mma_bf16(d, a[0], a[4], a[1], a[5], b[4], b[5]);
    mma_bf16(d, a[2], a[6], a[3], a[7], b[2], b[3]);
    mma_bf16(d, a[2], a[6], a[3], a[7], b[6], b[7]);
}

/* U: k steps whose weights and x are all loaded before any is multiplied,
 * so that a warp's loads overlap one another and no x load waits inside
 * the arithmetic (see tc_u).
 *   Launched as a programmatic dependent (job.pdl, cuda_util.cuh's
 * launch_k), the kernel starts while the one before it (an rmsnorm, the
 * attention, another GEMV's epilogue) still runs: each warp issues its
 * first U steps' weight loads, then waits for x. It lets the next kernel
 * start once its k loop is done, or as it starts when it reads 32 MiB or
 * more (job.trig_start). None of this changes which values are summed in
 * which order. (Prefetching more weights into L2 before the wait made 0.6B
 * BF16 decode slower, 0.984 -> 1.029 ms, per-lane prefetches of 8 KB a
 * warp, and again as one bulk prefetch of the block's tile, 0.842 -> 0.90
 * ms, 8B 4.57 -> 5.46 at 512 KB a block; working out a fused rmsnorm's
 * scale in rmsnorm_kernel's order here, for the same bits with one launch
 * fewer, 0.997 -> 1.458 ms: bench/RESULTS.md sections 21 and 28. The
 * fused norm now sums the squares of the x values the block loads anyway:
 * norm_x.) */
template <int T, int MT, int NT, int U, bool TL, int W, bool NORM>
__device__ __forceinline__ void mmv_tc_body(const mtplx_cuda_mmv_job &job, int64_t k, int64_t rb,
                                            const float *__restrict__ x, int64_t n) {
    __shared__ float red[W][16 * MT][8 * NT];
    /* NORM: the norm's weights (k floats of dynamic shared memory), and
     * each warp's sums of squares of the x rows (norm_x) */
    extern __shared__ __align__(16) float gsm[];
    __shared__ float ssq[W][NORM ? 8 * NT : 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, q = lane & 3;
    const int64_t blk = blockIdx.x;

    const uint8_t *rlo[MT], *rhi[MT];
    tile_rows<MT>(job, blk, g, rb, rlo, rhi, TL);
    /* x row of this lane in each n-tile; none past n (its column is zero
     * and dropped) */
    const float *xr[NT];
    bool xlive[NT];
#pragma unroll
    for (int u = 0; u < NT; u++) {
        int64_t i = 8 * u + g;
        xlive[u] = i < n;
        xr[u] = x + (xlive[u] ? i : 0) * k;
    }

    if (job.trig_start) pdl_trigger(); /* (trig_start_bytes) */
    /* the norm's weights are parameters, not the kernel before's output:
     * they go to shared memory before the wait */
    if constexpr (NORM) {
        for (int64_t c = threadIdx.x; c < k / 4; c += W * 32)
            cp_async16(gsm + 4 * c, job.norm + 4 * c);
        cp_async_commit();
    }
    float ss[NT]; /* NORM: the lane's share of each x row's sum of squares */
#pragma unroll
    for (int u = 0; u < NT; u++)
        ss[u] = 0.f;
    float acc[MT][NT][4];
#pragma unroll
    for (int t = 0; t < MT; t++)
#pragma unroll
        for (int u = 0; u < NT; u++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                acc[t][u][c] = 0.f;

    constexpr int KS = kstep<T>(), XQ = xq<T>();
    const int64_t nks = (k + KS - 1) / KS;
    /* every warp runs the first batch, even with no k step of its own (it
     * adds nothing then): the wait is there */
    for (int64_t i0 = 0; i0 == 0 || step_of<W>(i0, warp) < nks; i0 += U) {
        wstep<T> w[U][MT];
        float4 xv[U][NT][XQ];
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int64_t st = step_of<W>(i0 + j, warp), e = st * KS + 8 * q;
            bool in = st < nks && e < k;
#pragma unroll
            for (int t = 0; t < MT; t++) {
                if (in)
                    load_step<T, TL>(rlo[t], rhi[t], k, e, w[j][t]);
                else
                    w[j][t] = {};
            }
        }
        /* the first batch's weights are on their way: they need nothing of
         * the kernel before; x (it wrote it) only after the wait */
        if (i0 == 0) {
            pdl_wait();
            if constexpr (NORM) {
                cp_async_wait<0>();
                __syncthreads(); /* every thread runs the first batch */
            }
        }
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int64_t st = step_of<W>(i0 + j, warp), e = st * KS + 8 * q;
            load_x<NT, XQ>(xr, xlive, st < nks && e < k, e, xv[j]);
        }
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int64_t st = step_of<W>(i0 + j, warp);
            if (st >= nks) break;
            if constexpr (NORM) {
                const int64_t e = st * KS + 8 * q;
                if (e < k) norm_x<NT, XQ>(xv[j], gsm + e, ss);
            }
            if constexpr (T == MTPLX_TYPE_Q4_K) {
                /* sub-blocks 2 c (low nibbles) and 2 c + 1 (high) of the block */
                const int c = (int)(st & 3);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    uint32_t b[NT][8];
                    float xs[NT][4]; /* the sub-block's sum of x, per x column */
                    const uint32_t ones[8] = {BF16_ONES, BF16_ONES, BF16_ONES, BF16_ONES,
                                              BF16_ONES, BF16_ONES, BF16_ONES, BF16_ONES};
#pragma unroll
                    for (int u = 0; u < NT; u++) {
                        split_x8p(xv[j][u][2 * h], xv[j][u][2 * h + 1], b[u]);
                        xs[u][0] = xs[u][1] = xs[u][2] = xs[u][3] = 0.f;
                        mma_rows_x(xs[u], ones, b[u]);
                    }
#pragma unroll
                    for (int t = 0; t < MT; t++) {
                        uint32_t a[8];
                        const int sh = 4 * h;
                        q4_to_bf16(w[j][t].lo[0], sh, a[0], a[1]);
                        q4_to_bf16(w[j][t].lo[1], sh, a[2], a[3]);
                        q4_to_bf16(w[j][t].hi[0], sh, a[4], a[5]);
                        q4_to_bf16(w[j][t].hi[1], sh, a[6], a[7]);
                        float slo, mlo, shi, mhi;
                        q4k_sub_scales(w[j][t].hlo, 2 * c + h, slo, mlo);
                        q4k_sub_scales(w[j][t].hhi, 2 * c + h, shi, mhi);
#pragma unroll
                        for (int u = 0; u < NT; u++) {
                            float d[4] = {0.f, 0.f, 0.f, 0.f};
                            mma_rows_x(d, a, b[u]);
                            acc[t][u][0] = fmaf(-mlo, xs[u][0], fmaf(slo, d[0], acc[t][u][0]));
                            acc[t][u][1] = fmaf(-mlo, xs[u][1], fmaf(slo, d[1], acc[t][u][1]));
                            acc[t][u][2] = fmaf(-mhi, xs[u][2], fmaf(shi, d[2], acc[t][u][2]));
                            acc[t][u][3] = fmaf(-mhi, xs[u][3], fmaf(shi, d[3], acc[t][u][3]));
                        }
                    }
                }
            } else {
                /* x as hi/lo pairs */
                uint32_t b[NT][8];
#pragma unroll
                for (int u = 0; u < NT; u++) {
                    if constexpr (T == MTPLX_TYPE_BF16)
                        split_x8(xv[j][u][0], xv[j][u][1], b[u]);
                    else
                        split_x8p(xv[j][u][0], xv[j][u][1], b[u]);
                }
#pragma unroll
                for (int t = 0; t < MT; t++) {
                    uint32_t a[8]; /* the lane's elements 0-7 of rows g (a[0..3]) and g + 8
                                      (a[4..7]) as pairs */
                    if constexpr (T == MTPLX_TYPE_BF16) {
#pragma unroll
                        for (int c = 0; c < 4; c++)
                            a[c] = w[j][t].lo[c], a[4 + c] = w[j][t].hi[c];
                    } else {
                        q8_to_bf16(w[j][t].lo[0], a[0], a[1]);
                        q8_to_bf16(w[j][t].lo[1], a[2], a[3]);
                        q8_to_bf16(w[j][t].hi[0], a[4], a[5]);
                        q8_to_bf16(w[j][t].hi[1], a[6], a[7]);
                    }
#pragma unroll
                    for (int u = 0; u < NT; u++) {
                        float c4[4] = {0.f, 0.f, 0.f, 0.f};
                        float(&d)[4] = T == MTPLX_TYPE_BF16 ? acc[t][u] : c4;
                        mma_rows_x(d, a, b[u]);
                        if constexpr (T == MTPLX_TYPE_Q8_0) {
                            acc[t][u][0] = fmaf(w[j][t].dlo, c4[0], acc[t][u][0]);
                            acc[t][u][1] = fmaf(w[j][t].dlo, c4[1], acc[t][u][1]);
                            acc[t][u][2] = fmaf(w[j][t].dhi, c4[2], acc[t][u][2]);
                            acc[t][u][3] = fmaf(w[j][t].dhi, c4[3], acc[t][u][3]);
                        }
                    }
                }
            }
        }
    }

    pdl_trigger();           /* the next kernel may start: only the epilogue is left */
    partials_to_shared(red, acc, warp, g, q);
    if constexpr (NORM) {
        /* the quad's four shares, then (in the epilogue) the warps' in order */
#pragma unroll
        for (int u = 0; u < NT; u++) {
            ss[u] += __shfl_xor_sync(0xffffffffu, ss[u], 1);
            ss[u] += __shfl_xor_sync(0xffffffffu, ss[u], 2);
            if (q == 0) ssq[warp][8 * u + g] = ss[u];
        }
    }
    __syncthreads();

    /* the epilogue: one thread per (x row, row slot), the warps summed in
     * order (store_result: the store by mode) */
    const bool swiglu = job.mode == MTPLX_MMV_SWIGLU;
    const int slots = swiglu ? 8 * MT : 16 * MT;
    const int nn = n < 8 * NT ? (int)n : 8 * NT;
    for (int o = threadIdx.x; o < slots * nn; o += W * 32) {
        int i = o / slots, r = o % slots;
        int seg;
        int64_t row;
        if (!slot_row(job, MT, blk, r, seg, row)) continue;
        float sc = 1.f; /* NORM: x row i's 1 / rms */
        if constexpr (NORM) {
            float s2 = ssq[0][i];
#pragma unroll
            for (int w = 1; w < W; w++) s2 += ssq[w][i];
            sc = norm_scale(s2, k, job.eps);
        }
        auto total = [&](int rr) {
            float t = red[0][rr][i];
#pragma unroll
            for (int w = 1; w < W; w++) t += red[w][rr][i];
            return NORM ? t * sc : t;
        };
        store_result(job, seg, row, i, total(r), [&] { return total(r + 8 * MT); });
    }
}

/* 4 warps a block; 8 (BF16 weights of few rows: bf16_warps) with two
 * blocks an SM, 128 registers a thread. Two kernels, since even a minimum
 * of 1 block in __launch_bounds__ changes the 4-warp kernel's register
 * allocation. */
template <int T, int MT, int NT, int U, bool TL, bool NORM>
__global__ void __launch_bounds__(TC_WARPS * 32)
    mmv_tc_kernel(mtplx_cuda_mmv_job job, int64_t k, int64_t rb, const float *__restrict__ x,
                  int64_t n) {
    mmv_tc_body<T, MT, NT, U, TL, TC_WARPS, NORM>(job, k, rb, x, n);
}
/* The fused norm's 4-warp kernel where it fits three blocks an SM, as the
 * plain one does, with no spill (MT + NT = 3: 8B's gate/up): 186 registers
 * otherwise, two blocks an SM, and 8B BF16 decode 4.75 ms instead of 4.46
 * (bench/RESULTS.md section 41) */
template <int T, int MT, int NT, int U, bool TL>
__global__ void __launch_bounds__(TC_WARPS * 32, 3)
    mmv_tc_kernel_n3(mtplx_cuda_mmv_job job, int64_t k, int64_t rb, const float *__restrict__ x,
                     int64_t n) {
    mmv_tc_body<T, MT, NT, U, TL, TC_WARPS, true>(job, k, rb, x, n);
}
template <int T, int MT, int NT, int U, bool TL, bool NORM>
__global__ void __launch_bounds__(8 * 32, 2)
    mmv_tc_kernel8(mtplx_cuda_mmv_job job, int64_t k, int64_t rb, const float *__restrict__ x,
                   int64_t n) {
    mmv_tc_body<T, MT, NT, U, TL, 8, NORM>(job, k, rb, x, n);
}

int n_sm_cached = -1, cc_major_cached = -1;

void device_props() {
    if (n_sm_cached >= 0) return;
    int dev = 0, sm = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
        sm = 0, major = 0;
    n_sm_cached = sm, cc_major_cached = major;
}

/* the GPU's SM count after device_props (an H200's 132 where it is unknown) */
int64_t n_sm() {
    return n_sm_cached > 0 ? n_sm_cached : 132;
}

/* k steps in flight: registers a lane for the weights (BF16: 8 a row-tile
 * and step, Q8_0: 6) and x (8 an n-tile and step): about 128 for BF16,
 * 96 for Q8_0. H200, random-weight Qwen3 shapes (tools/cuda_bench.sh): a
 * third more steps than the 96-register count took 8B BF16 decode from
 * 5.41 to 5.15 ms and 0.6B from 1.15 to 1.09, but 8B Q8_0 from 5.23 to
 * 5.51; loading x only when it is multiplied (L1 keeps it) was 15-40%
 * slower everywhere. */
constexpr int tc_u(int T, int MT, int NT) {
    return T == MTPLX_TYPE_Q4_K
               ? 96 / (12 * MT + 16 * NT) /* 2 + 8 header words a row; 16 x */
               : (T == MTPLX_TYPE_BF16 ? 128 : 96) / ((T == MTPLX_TYPE_BF16 ? 8 : 6) * MT + 8 * NT);
}

/* with 8 warps: two blocks an SM fit in 128 registers a thread; a step
 * fewer with the fused norm (norm_x), which spilled otherwise */
constexpr int tc_u_w8(int MT, int NT, bool NORM) {
    return 96 / (8 * MT + 8 * NT) - (NORM ? 1 : 0);
}

/* The k split of a BF16 weight of m rows (tiled or not): 8 warps a block
 * when its 16-row tiles number at most two an SM, else 4. A grid that
 * small leaves most of an SM's slots empty with 4 warps, and its 8-warp
 * blocks keep half again as many k steps in flight (2 blocks x 8 warps x 6
 * steps against 2 x 4 x 8). The count sets a row's sum order, so it is a
 * function of the weight alone, never of n or of the other weights of a
 * fused job (the backend fuses only weights that agree:
 * mtplx_cuda_mmv_tc_warps). MTPLX_CUDA_TC_WARPS=4 / 8 (read once) forces
 * one count for measurements. */
int tc_warps_forced = -1;
int bf16_warps(int64_t m) {
    device_props();
    if (tc_warps_forced < 0) {
        const char *w = getenv("MTPLX_CUDA_TC_WARPS");
        tc_warps_forced = w && strcmp(w, "8") == 0 ? 8 : w && strcmp(w, "4") == 0 ? 4 : 0;
    }
    if (tc_warps_forced) return tc_warps_forced;
    return (m + 15) / 16 <= 2 * n_sm() ? 8 : TC_WARPS;
}

template <int T, int MT, int NT, bool TL, bool NORM>
cudaError_t launch_w(cudaStream_t st, const mtplx_cuda_mmv_job *job, int W, unsigned grid, int64_t k,
                     int64_t rb, const float *x, int64_t n) {
    const size_t smem = NORM ? (size_t)k * sizeof(float) : 0;
    if constexpr (T == MTPLX_TYPE_BF16)
        if (W == 8)
            return launch_k(job->pdl, mmv_tc_kernel8<T, MT, NT, tc_u_w8(MT, NT, NORM), TL, NORM>, dim3(grid),
                            dim3(8 * 32), smem, st, *job, k, rb, x, n);
    /* (Q8_0 and Q4_K launched plainly instead: 8B decode 4-5% faster, 0.6B
     * 10-13% slower; kept as dependents, bench/RESULTS.md section 38) */
    if constexpr (NORM && MT + NT == 3)
        return launch_k(job->pdl, mmv_tc_kernel_n3<T, MT, NT, tc_u(T, MT, NT), TL>, dim3(grid),
                        dim3(TC_WARPS * 32), smem, st, *job, k, rb, x, n);
    return launch_k(job->pdl, mmv_tc_kernel<T, MT, NT, tc_u(T, MT, NT), TL, NORM>, dim3(grid),
                    dim3(TC_WARPS * 32), smem, st, *job, k, rb, x, n);
}
template <int T, int MT, int NT, bool TL>
cudaError_t launch_norm(cudaStream_t st, const mtplx_cuda_mmv_job *job, int W, unsigned grid, int64_t k,
                        int64_t rb, const float *x, int64_t n) {
    if (job->norm) return launch_w<T, MT, NT, TL, true>(st, job, W, grid, k, rb, x, n);
    return launch_w<T, MT, NT, TL, false>(st, job, W, grid, k, rb, x, n);
}

template <int T, int MT, int NT>
cudaError_t launch_mt(cudaStream_t st, const mtplx_cuda_mmv_job *job, int W, int64_t slots, int64_t k,
                      const float *x, int64_t n) {
    int64_t per_block = job->mode == MTPLX_MMV_SWIGLU ? 8 * MT : 16 * MT;
    unsigned grid = (unsigned)((slots + per_block - 1) / per_block);
    /* rb: bytes a row, in mmv.cu's layouts (Q8_0 repacked) */
    int64_t rb = T == MTPLX_TYPE_BF16   ? 2 * k
                 : T == MTPLX_TYPE_Q4_K ? k / QK_K * (int64_t)sizeof(block_q4_K)
                                        : (int64_t)mtplx_cuda_q8_0_packed_row(k);
    mtplx_cuda_mmv_job j = with_trig_start(*job, rb);
    if constexpr (T == MTPLX_TYPE_BF16)
        if (job->tiled) return launch_norm<T, MT, NT, true>(st, &j, W, grid, k, rb, x, n);
    return launch_norm<T, MT, NT, false>(st, &j, W, grid, k, rb, x, n);
}

/* mtplx_cuda_tile_bf16: 16-byte chunk c of the tiled output (one thread
 * each; HD so that mtplx_cuda_tile_bf16_host runs the same code) */
HD void tile_bf16_chunk(const uint8_t *raw, uint4 *out, int64_t m, int64_t k, int64_t c) {
    const int64_t per_tile = k / 32 * 64; /* chunks a tile: 64 a k step */
    int64_t tile = c / per_tile, rem = c % per_tile, st = rem >> 6;
    int h = (int)(rem >> 5) & 1, l = (int)rem & 31;
    int64_t row = tile * 16 + 8 * h + (l >> 2), e = st * 32 + 8 * (l & 3);
    out[c] = row < m ? *(const uint4 *)(raw + (row * k + e) * 2) : make_uint4(0, 0, 0, 0);
}
__global__ void tile_bf16_kernel(const uint8_t *__restrict__ raw, uint4 *__restrict__ out, int64_t m,
                                 int64_t k, int64_t chunks) {
    int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c < chunks) tile_bf16_chunk(raw, out, m, k, c);
}

/* MT (m-tiles a block) changes speed only, never a result: 2 while the
 * blocks still number 4 per SM or more (x read once for 32 rows), or
 * always for SwiGLU (a gate and an up tile), or where 8-warp blocks
 * (bf16_warps), two an SM, would otherwise need a second wave (8B's fused
 * QKV: 384 blocks of 16 rows on 132 SMs, 192 of 32); else 1. */
template <int T, int NT>
cudaError_t launch_nt(cudaStream_t st, const mtplx_cuda_mmv_job *job, int64_t k, const float *x,
                      int64_t n) {
    bool swiglu = job->mode == MTPLX_MMV_SWIGLU;
    int64_t slots = swiglu ? job->m[0] : job->m[0] + job->m[1] + job->m[2];
    int64_t sm = n_sm();
    int W = T == MTPLX_TYPE_BF16 ? bf16_warps(job->m[0]) : TC_WARPS;
    if (swiglu || slots / 32 >= 4 * sm || (W == 8 && (slots + 15) / 16 > 2 * sm))
        return launch_mt<T, 2, NT>(st, job, W, slots, k, x, n);
    return launch_mt<T, 1, NT>(st, job, W, slots, k, x, n);
}

template <int T>
cudaError_t launch_type(cudaStream_t st, const mtplx_cuda_mmv_job *job, int64_t k, const float *x,
                        int64_t n) {
    if (n <= 8) return launch_nt<T, 1>(st, job, k, x, n);
    return launch_nt<T, 2>(st, job, k, x, n);
}

} // namespace

extern "C" {

bool mtplx_cuda_bf16_tiled_ok(int64_t k) {
    return k > 0 && k % 32 == 0;
}

size_t mtplx_cuda_bf16_tiled_bytes(int64_t m, int64_t k) {
    return (size_t)((m + 15) / 16) * 16 * (size_t)k * 2;
}

cudaError_t mtplx_cuda_tile_bf16(cudaStream_t s, const void *raw, void *out, int64_t m, int64_t k) {
    if (!mtplx_cuda_bf16_tiled_ok(k) || m < 0) return cudaErrorInvalidValue;
    int64_t chunks = (int64_t)(mtplx_cuda_bf16_tiled_bytes(m, k) / 16);
    if (chunks == 0) return cudaSuccess;
    tile_bf16_kernel<<<(unsigned)((chunks + 255) / 256), 256, 0, s>>>((const uint8_t *)raw, (uint4 *)out,
                                                                       m, k, chunks);
    return cudaGetLastError();
}

int mtplx_cuda_tile_bf16_host(const void *raw, void *out, int64_t m, int64_t k) {
    if (!mtplx_cuda_bf16_tiled_ok(k) || m < 0) return -1;
    int64_t chunks = (int64_t)(mtplx_cuda_bf16_tiled_bytes(m, k) / 16);
    for (int64_t c = 0; c < chunks; c++)
        tile_bf16_chunk((const uint8_t *)raw, (uint4 *)out, m, k, c);
    return 0;
}

bool mtplx_cuda_trig_start(int64_t bytes) {
    return trig_start_bytes(bytes);
}

int mtplx_cuda_mmv_tc_warps(int type, int64_t m) {
    return type == MTPLX_TYPE_BF16 ? bf16_warps(m) : TC_WARPS;
}

bool mtplx_cuda_mmv_tc_ok(int type, int64_t k, const mtplx_cuda_mmv_job *job) {
    device_props();
    if (cc_major_cached < 8 || (job->norm && k > MTPLX_CUDA_TC_NORM_MAX_K)) return false;
    if (job->tiled) return type == MTPLX_TYPE_BF16 && mtplx_cuda_bf16_tiled_ok(k);
    if (type == MTPLX_TYPE_BF16) return k % 8 == 0;
    if (type == MTPLX_TYPE_Q8_0) return k % QK8_0 == 0;
    if (type == MTPLX_TYPE_Q4_K) return job->mma_q4k && k % QK_K == 0;
    return false;
}

cudaError_t mtplx_cuda_mmv_tc(cudaStream_t s, int type, const mtplx_cuda_mmv_job *job, int64_t k,
                              const float *x, int64_t n) {
    if ((uintptr_t)job->norm & 15) return cudaErrorInvalidValue; /* staged 16 bytes at a time */
    switch (type) {
    case MTPLX_TYPE_BF16: return launch_type<MTPLX_TYPE_BF16>(s, job, k, x, n);
    case MTPLX_TYPE_Q8_0: return launch_type<MTPLX_TYPE_Q8_0>(s, job, k, x, n);
    case MTPLX_TYPE_Q4_K: return launch_type<MTPLX_TYPE_Q4_K>(s, job, k, x, n);
    default: return cudaErrorInvalidValue;
    }
}

} // extern "C"
