/* mmv_i8.cu: the small-n GEMV (decode and verify, n <= 16 rows of x) for
 * Q8_0 and Q4_K weights on the int8 tensor cores; mmv.cu's mtplx_cuda_mmv
 * hands a job here when job.mma and job.xq are set, job.mma_q4k is not
 * (the backend's "rows come several at a time": then mmv_tc.cu, whose
 * verify step costs what a decode step does) and mtplx_cuda_mmv_i8_ok says
 * yes.
 *
 * Why: mmv_tc.cu turns every int8 / 4-bit quant into a bf16 and splits x
 * into bf16 hi + lo at every k step of every warp; on the H200 that work,
 * not the loads, set its 8B decode time (bench/RESULTS.md sections 13, 16).
 * Here the weights go into mma.sync.m16n8k32 (s8 x s8, s32 sums) as they
 * are in memory: Q8_0's quants are the A fragment's bytes, Q4_K's nibbles
 * after one mask (and a shift for the high ones). x is made integer once
 * per matmul, by a small kernel before the GEMV (xq_kernel):
 *   each x row, split in chunks of XC = 128 elements, gets a scale
 *   s = max|x| / 127 per chunk and NP int8 pieces per element (NP = 2 by
 *   default, 3 with MTPLX_CUDA_I8_PIECES=3),
 *   x = s (p0 + p1 / 254 [+ p2 / 254^2])
 *   (p0 = rint(x / s), each next piece rounds 254 times the remainder),
 * so the integer products are exact and x is off by at most 2^-16 of its
 * chunk's max with two pieces, 2^-24 (f32's accuracy) with three. Two are
 * 256 times finer than the 8-bit x of the CPU's (and llama.cpp's) Q8_0 /
 * Q4_K dot products, and far below the weights' own rounding; test_cuda's
 * tolerance against exact products is 1e-4 of max |y| with two, 2e-5 (the
 * f32 GEMV's) with three. This is not "int8 activations": nothing is
 * rounded to 8 bits. The pieces of x row i are the mma's B columns NP i ..
 * NP i + NP - 1, so one mma serves n <= 4 rows with two pieces (a 4-row
 * verify step costs what a decode step does: bench/RESULTS.md section 40),
 * n <= 2 with three.
 *   A k step is 64 elements: two Q8_0 blocks, or two Q4_K sub-blocks (2c
 * and 2c + 1 share their bytes' nibbles); an mma each.
 *   Q8_0: each block's int32 result times its scale (f32) is summed per x
 * chunk, and the chunk's sum times the piece's scale goes into the row's
 * f32 sum. The quants are repacked at upload (mtplx_cuda_repack_q8_0_i8) so
 * that a lane's 8 quants of each of the step's two blocks are 16 contiguous
 * bytes (ipos); x's pieces are stored the same way. One 16-byte load a row
 * and step instead of two of 8 bytes: the 8-byte version moved 1.7 TB/s
 * on 8B shapes, less than mmv.cu's f32 GEMV (bench/RESULTS.md section 18).
 *   Q4_K: sub-blocks 2c and 2c+1 share their bytes' nibbles. Within an x chunk (half a Q4_K block,
 * 4 sub-blocks) the sums stay integer and exact: sum sc * (q . p) and sum m * (sum of p over the
 * sub-block; made by xq_kernel), so y += s * (d * A - dmin * B) once per chunk; the 6-bit scales
 * are unpacked four at a time. Q4_K is read in its GGUF layout, 8 bytes a row and step: a repack
 * into 16-byte loads like Q8_0's was tried and gained nothing at n = 1 while n = 4 got slower
 * (bench/RESULTS.md section 18a). The xq kernel also applies job.norm (RMSNorm of x on the way
 * in), so the fused norm costs nothing extra here.
 *
 * Layout of a block's work is mmv_tc.cu's: lane l is in group g = l / 4
 * (weight rows g and g + 8 of an m-tile of 16, B column g of an n-tile of
 * 8), quad position q = l % 4; of each 32-element half of a step the lane
 * holds elements [8q, 8q + 8) of its rows and of its column's pieces, the
 * first four as k columns 4q..4q+3 of the mma, the next four as
 * 16+4q..16+4q+3 (the dot product does not care which physical k a
 * logical k column is). I8_WARPS warps
 * split k in runs of one x chunk, round robin; they sum their partials
 * through shared memory in warp order.
 *
 * Determinism: a row's result depends on its weights, its x row and k
 * alone: the pieces of x row i are the same whatever n, its B columns are
 * fixed (NP i ..), integer sums are exact, and every f32 sum has a fixed
 * order. So decode and verify rows agree bit for bit (greedy MTP == AR) and
 * the fused modes equal the plain ones. Needs sm_80 or newer (s8 mma). */

#define _Noreturn [[noreturn]]
extern "C" {
#include "kernels/kernels.h"
}
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_util.cuh"
#include "cuda/mmv_tile.cuh"

#include <cuda_runtime.h>

namespace {

/* The tuning knobs below can be set at compile time for experiments
 * (tools/cuda_mmv_bench.sh builds variants); I8_WARPS changes the bits of
 * a result (the k split), the others only the speed. */
#ifndef MTPLX_I8_WARPS
#define MTPLX_I8_WARPS 8
#endif
#ifndef MTPLX_I8_U_Q8
#define MTPLX_I8_U_Q8 4
#endif
#ifndef MTPLX_I8_U_Q4K
#define MTPLX_I8_U_Q4K 4
#endif
#ifndef MTPLX_I8_MT
#define MTPLX_I8_MT 1
#endif
/* U at two n-tiles (5-8 x rows with two pieces, 3-5 with three), apart
 * from one: Q4_K's at 4 took 170 registers, one block an SM; at 2, 80
 * (with three pieces its n = 4 GEMVs 1.85x n = 1 -> 1.62x; Q8_0's no
 * faster at 2: bench/RESULTS.md section 39; not measured again for two) */
#ifndef MTPLX_I8_U_Q8_2
#define MTPLX_I8_U_Q8_2 MTPLX_I8_U_Q8
#endif
#ifndef MTPLX_I8_U_Q4K_2
#define MTPLX_I8_U_Q4K_2 2
#endif
constexpr int I8_WARPS = MTPLX_I8_WARPS; /* the k split: fixed, since it sets the sum order */
constexpr int XC = 128;                  /* x chunk: elements sharing one scale */
/* int8 pieces of each x value: 2 or 3 (job.xq_pieces; 0: MTPLX_I8_PIECES,
 * bench/RESULTS.md section 40) */
#ifndef MTPLX_I8_PIECES
#define MTPLX_I8_PIECES 2
#endif
constexpr int NPMAX = 3;
constexpr int XCOLS = NPMAX * MTPLX_CUDA_MMV_ROWS; /* B columns at most (48) */
constexpr float PB = 254.0f;                    /* piece base */

/* The scratch at job.xq, for x [n][k] (n <= 16, k <= MTPLX_CUDA_I8_KMAX):
 *   q  int8  [XCOLS][k]           piece p of x row i in row NP i + p
 *   s  float [nchunk][XCOLS]      that piece's scale in chunk c: s / 254^p
 *   z  int32 [nchunk][XCOLS][4]   Q4_K: the sum of the pieces over each
 *                                 32-element sub-block of the chunk */
struct xq_view {
    int8_t *q;
    float *s;
    int32_t *z;
};
HD int64_t nchunk(int64_t k) {
    return (k + XC - 1) / XC;
}
HD xq_view xq_of(void *base, int64_t k) {
    uint8_t *b = (uint8_t *)base;
    int64_t qb = (XCOLS * k + 15) / 16 * 16, sb = nchunk(k) * XCOLS * 4;
    return {(int8_t *)b, (float *)(b + qb), (int32_t *)(b + qb + sb)};
}
size_t xq_bytes(int64_t k) {
    return (size_t)((XCOLS * k + 15) / 16 * 16 + nchunk(k) * XCOLS * 4 + nchunk(k) * XCOLS * 16);
}

/* Programmatic dependent launch (cuda_util.cuh's launch_k, job.pdl): the
 * GEMV is launched while xq_kernel runs and loads its first weights before
 * it waits for xq_kernel's results; xq_kernel itself waits for the kernel
 * before it (whose x it reads, and which may still read the scratch). */

/* ---- xq_kernel: x (RMS-normed when norm) to pieces ----
 * grid (chunks / 4, n), 4 warps, a warp per chunk, a lane per 4 elements
 * (lane l: elements [4l, 4l + 4) of the chunk). With norm, every block
 * sums its row's squares itself in mmv.cu's order (so the scale equals
 * the f32 GEMV's fused norm). */
constexpr int XQ_WARPS = 4;

template <int NP>
__global__ void __launch_bounds__(XQ_WARPS * 32)
    xq_kernel(const float *__restrict__ x, int64_t k, const float *__restrict__ norm, float eps,
              void *out) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t i = blockIdx.y, c = (int64_t)blockIdx.x * XQ_WARPS + warp;
    pdl_trigger(); /* the GEMV may start (its weight loads need nothing of ours) */
    pdl_wait();    /* x and the scratch: only once the kernels before are done */
    const float *xr = x + i * k;
    float ns = 1.f;
    if (norm) {
        __shared__ float part[XQ_WARPS];
        /* mmv.cu's sumsq_part then warp_sum, by warp 0; the others wait */
        if (warp == 0) {
            float ss = 0.f;
            for (int64_t j = lane; j < k / 4; j += 32) {
                float4 a = __ldcg((const float4 *)xr + j); /* .cg: see mmv_tc.cu's load_x */
                ss = fmaf(a.w, a.w, fmaf(a.z, a.z, fmaf(a.y, a.y, fmaf(a.x, a.x, ss))));
            }
            ss = warp_sum(ss);
            if (lane == 0) part[0] = norm_scale(ss, k, eps);
        }
        __syncthreads();
        ns = part[0];
    }
    if (c >= nchunk(k)) return;
    xq_view v = xq_of(out, k);
    const int64_t e = c * XC + 4 * lane;
    const bool in = e < k; /* k % 32 == 0: a lane's 4 are all in or all out */
    float a[4] = {0.f, 0.f, 0.f, 0.f};
    if (in) {
        float4 t = __ldcg((const float4 *)(xr + e));
        a[0] = t.x, a[1] = t.y, a[2] = t.z, a[3] = t.w;
        if (norm) {
            float4 w = __ldg((const float4 *)(norm + e));
            a[0] = a[0] * ns * w.x, a[1] = a[1] * ns * w.y;
            a[2] = a[2] * ns * w.z, a[3] = a[3] * ns * w.w;
        }
    }
    float mx = fmaxf(fmaxf(fabsf(a[0]), fabsf(a[1])), fmaxf(fabsf(a[2]), fabsf(a[3])));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
    /* (below 1e-35 the reciprocal would overflow: such a chunk counts as zeros) */
    const bool live = mx >= 1e-35f;
    const float s = live ? mx / 127.0f : 0.f, inv = live ? 127.0f / mx : 0.f;
    uint32_t w[NP] = {};
    int z[NP] = {};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float t = a[j] * inv;
        float p0 = rintf(t);
        float u = (t - p0) * PB;
        float p1 = rintf(u);
        float p2 = NP == 3 ? rintf((u - p1) * PB) : 0.f;
        const int pi[NPMAX] = {(int)p0, (int)p1, (int)p2};
#pragma unroll
        for (int p = 0; p < NP; p++) {
            w[p] |= ((uint32_t)pi[p] & 0xFFu) << (8 * j);
            z[p] += pi[p];
        }
    }
    /* sub-block sums: the 8 lanes of a sub-block, exact in int */
#pragma unroll
    for (int p = 0; p < NP; p++)
#pragma unroll
        for (int o = 1; o < 8; o <<= 1)
            z[p] += __shfl_xor_sync(0xFFFFFFFFu, z[p], o);
#pragma unroll
    for (int p = 0; p < NP; p++) {
        const int col = NP * (int)i + p;
        if (in) *(uint32_t *)(v.q + col * k + ipos(e)) = w[p];
        if (lane == 0) v.s[c * XCOLS + col] = p == 0 ? s : p == 1 ? s / PB : s / (PB * PB);
        if ((lane & 7) == 0) v.z[(c * XCOLS + col) * 4 + (lane >> 3)] = z[p];
    }
}

/* ---- the GEMV ---- */

/* d (s32) = a . b for one 16x8x32 tile, s8 in */
__device__ __forceinline__ void mma_s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
#else
    __trap(); /* mtplx_cuda_mmv_i8_ok keeps older GPUs off this path */
#endif
}

/* an int of magnitude < 2^22 as a float: exact, an add and a subtract */
__device__ __forceinline__ float i2f_small(int v) {
    return __int_as_float(v + 0x4B400000) - 12582912.0f;
}

/* elements of k per step; steps per run (one x chunk) */
template <int T> __host__ __device__ constexpr int kstep() {
    return 64;
}
template <int T> __host__ __device__ constexpr int run_steps() {
    return XC / kstep<T>();
}

/* One k step (64 elements) of the lane's two rows: Q8_0 16 bytes each
 * (8 quants of each of two blocks) and the two blocks' scales (two f16 in
 * a word); Q4_K 8 bytes each (8 nibbles of each of two sub-blocks; the
 * block header once per run). */
template <int T> struct wstep {
    uint4 lo, hi;
    uint32_t dlo, dhi;
};
template <> struct wstep<MTPLX_TYPE_Q4_K> { uint2 lo, hi; };

/* warp w's i-th step: runs of RUN steps (one x chunk) to warps 0, 1, ... in turn */
template <int RUN> __device__ __forceinline__ int64_t step_of(int64_t i, int warp) {
    return ((i / RUN) * I8_WARPS + warp) * RUN + i % RUN;
}

/* component i (0..3, known at compile time) of v */
__device__ __forceinline__ int comp(const int4 &v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* Q4_K: the 4 sub-blocks' 6-bit scales and mins of half h of a block
 * (sub-blocks 4h .. 4h + 3), a byte each (kernels/ref has the packing). */
__device__ __forceinline__ void q4k_half_scales(const uint4 &hd, int h, uint32_t &sc,
                                                uint32_t &mn) {
    if (h == 0) {
        sc = hd.y & 0x3F3F3F3Fu;
        mn = hd.z & 0x3F3F3F3Fu;
    } else {
        sc = (hd.w & 0x0F0F0F0Fu) | ((hd.y >> 2) & 0x30303030u);
        mn = ((hd.w >> 4) & 0x0F0F0F0Fu) | ((hd.z >> 2) & 0x30303030u);
    }
}

/* U: k steps whose weights and x are all loaded before any is multiplied
 * (a multiple of RUN). NT: n-tiles of 8 B columns (ceil(NP n / 8)). */
template <int T, int MT, int NT, int U, int NP>
__global__ void __launch_bounds__(I8_WARPS * 32)
    mmv_i8_kernel(mtplx_cuda_mmv_job job, int64_t k, int64_t rb, int64_t n) {
    constexpr int KS = kstep<T>(), RUN = run_steps<T>();
    static_assert(U % RUN == 0, "a batch is whole runs");
    __shared__ float red[I8_WARPS][16 * MT][8 * NT];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, q = lane & 3;
    const int64_t blk = blockIdx.x;
    const xq_view xv = xq_of(job.xq, k);

    const uint8_t *rlo[MT], *rhi[MT];
    tile_rows<MT>(job, blk, g, rb, rlo, rhi);
    /* this lane's B column in each n-tile; none past NP n (zeros, dropped) */
    const int8_t *xc[NT];
    bool xlive[NT];
#pragma unroll
    for (int u = 0; u < NT; u++) {
        int col = 8 * u + g;
        xlive[u] = col < NP * n;
        xc[u] = xv.q + (int64_t)(xlive[u] ? col : 0) * k;
    }

    if (job.trig_start) pdl_trigger(); /* (cuda_util.cuh's trig_start_bytes) */
    float acc[MT][NT][4];
#pragma unroll
    for (int t = 0; t < MT; t++)
#pragma unroll
        for (int u = 0; u < NT; u++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                acc[t][u][c] = 0.f;

    const int64_t nks = (k + KS - 1) / KS;
    bool waited = false;
    for (int64_t i0 = 0; step_of<RUN>(i0, warp) < nks; i0 += U) {
        wstep<T> w[U][MT];
        uint4 xb[U][NT];           /* the step's two 32-element halves: .x .y, then .z .w */
        uint4 hdr[U / RUN][MT][2]; /* Q4_K block headers, a run's (rows g, g + 8) */
        float2 xs[U / RUN][NT];    /* the lane's two columns' piece scales, a run's */
        int4 xz[U / RUN][NT][2];   /* Q4_K: their sub-block sums of pieces */
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int64_t st = step_of<RUN>(i0 + j, warp), e = st * KS + 8 * q;
            const bool in = st < nks;
#pragma unroll
            for (int t = 0; t < MT; t++) {
                if (!in) {
                    w[j][t] = {};
                    continue;
                }
                if constexpr (T == MTPLX_TYPE_Q4_K) {
                    /* e = 64 c + 8 q in block e / 256: bytes 32 c + 8 q of
                     * its qs hold elements e.. (low) and e + 32.. (high) */
                    int64_t off = (e >> 8) * (int64_t)sizeof(block_q4_K);
                    int64_t qoff = off + 16 + 32 * ((e & 255) >> 6) + (e & 63);
                    w[j][t].lo = ld_stream8(rlo[t] + qoff);
                    w[j][t].hi = ld_stream8(rhi[t] + qoff);
                    if (j % RUN == 0) {
                        hdr[j / RUN][t][0] = __ldg((const uint4 *)(rlo[t] + off));
                        hdr[j / RUN][t][1] = __ldg((const uint4 *)(rhi[t] + off));
                    }
                } else {
                    /* bytes [16 q, +16) of the step's 64 (ipos), then the
                     * scales of blocks 2 st, 2 st + 1 */
                    const int64_t o = st * KS + 16 * q;
                    w[j][t].lo = ld_stream16(rlo[t] + o);
                    w[j][t].hi = ld_stream16(rhi[t] + o);
                    w[j][t].dlo = __ldg((const uint32_t *)(rlo[t] + k) + st);
                    w[j][t].dhi = __ldg((const uint32_t *)(rhi[t] + k) + st);
                }
            }
        }
        /* x (xq_kernel's) only from here on, and through L2 (.cg): with a
         * dependent launch it was written while this kernel ran */
        if (!waited) pdl_wait(), waited = true;
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int64_t st = step_of<RUN>(i0 + j, warp);
            const bool in = st < nks;
#pragma unroll
            for (int u = 0; u < NT; u++) {
                xb[j][u] = in && xlive[u] ? __ldcg((const uint4 *)(xc[u] + st * KS + 16 * q))
                                          : make_uint4(0, 0, 0, 0);
                if (j % RUN == 0) {
                    const int64_t ch = in ? st * KS / XC : 0;
                    const int col = 8 * u + 2 * q;
                    xs[j / RUN][u] = in ? __ldcg((const float2 *)(xv.s + ch * XCOLS + col))
                                        : make_float2(0.f, 0.f);
                    if constexpr (T == MTPLX_TYPE_Q4_K) {
                        const int4 *zp = (const int4 *)(xv.z + (ch * XCOLS + col) * 4);
                        xz[j / RUN][u][0] = in ? __ldcg(zp) : make_int4(0, 0, 0, 0);
                        xz[j / RUN][u][1] = in ? __ldcg(zp + 1) : make_int4(0, 0, 0, 0);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < U / RUN; r++) {
            if (step_of<RUN>(i0 + r * RUN, warp) >= nks) break;
            if constexpr (T == MTPLX_TYPE_Q4_K) {
                /* one x chunk = half h of one block: 4 sub-blocks, integer sums */
                const int h = (int)((step_of<RUN>(i0 + r * RUN, warp) >> 1) & 1);
#pragma unroll
                for (int t = 0; t < MT; t++) {
                    uint32_t sc[2], mn[2];
                    q4k_half_scales(hdr[r][t][0], h, sc[0], mn[0]);
                    q4k_half_scales(hdr[r][t][1], h, sc[1], mn[1]);
                    int A[NT][4], B[NT][4];
#pragma unroll
                    for (int u = 0; u < NT; u++)
#pragma unroll
                        for (int c = 0; c < 4; c++)
                            A[u][c] = 0, B[u][c] = 0;
#pragma unroll
                    for (int j = 0; j < RUN; j++) {
                        const wstep<T> &ws = w[r * RUN + j][t];
#pragma unroll
                        for (int hl = 0; hl < 2; hl++) { /* low nibbles, then high */
                            const int sb = 2 * j + hl;   /* sub-block within the half */
                            const int sh = 4 * hl;
                            const uint32_t a[4] = {
                                (ws.lo.x >> sh) & 0x0F0F0F0Fu, (ws.hi.x >> sh) & 0x0F0F0F0Fu,
                                (ws.lo.y >> sh) & 0x0F0F0F0Fu, (ws.hi.y >> sh) & 0x0F0F0F0Fu};
                            const int s0 = (int)((sc[0] >> (8 * sb)) & 0xFF),
                                      s1 = (int)((sc[1] >> (8 * sb)) & 0xFF);
                            const int m0 = (int)((mn[0] >> (8 * sb)) & 0xFF),
                                      m1 = (int)((mn[1] >> (8 * sb)) & 0xFF);
#pragma unroll
                            for (int u = 0; u < NT; u++) {
                                int d[4];
                                const uint4 &xx = xb[r * RUN + j][u];
                                mma_s8(d, a, hl ? xx.z : xx.x, hl ? xx.w : xx.y);
                                const int z0 = comp(xz[r][u][0], sb), z1 = comp(xz[r][u][1], sb);
                                A[u][0] += s0 * d[0], A[u][1] += s0 * d[1];
                                A[u][2] += s1 * d[2], A[u][3] += s1 * d[3];
                                B[u][0] += m0 * z0, B[u][1] += m0 * z1;
                                B[u][2] += m1 * z0, B[u][3] += m1 * z1;
                            }
                        }
                    }
                    const uint4 &H0 = hdr[r][t][0], &H1 = hdr[r][t][1];
                    const float d0 = h2f((uint16_t)H0.x), dm0 = h2f((uint16_t)(H0.x >> 16));
                    const float d1 = h2f((uint16_t)H1.x), dm1 = h2f((uint16_t)(H1.x >> 16));
#pragma unroll
                    for (int u = 0; u < NT; u++) {
                        const float sx[2] = {xs[r][u].x, xs[r][u].y};
#pragma unroll
                        for (int c = 0; c < 4; c++) {
                            const float dd = c < 2 ? d0 : d1, mm = c < 2 ? dm0 : dm1;
                            const float v = fmaf(dd, (float)A[u][c], -(mm * (float)B[u][c]));
                            acc[t][u][c] = fmaf(sx[c & 1], v, acc[t][u][c]);
                        }
                    }
                }
            } else {
#pragma unroll
                for (int t = 0; t < MT; t++) {
                    float ch[NT][4];
#pragma unroll
                    for (int u = 0; u < NT; u++)
#pragma unroll
                        for (int c = 0; c < 4; c++)
                            ch[u][c] = 0.f;
#pragma unroll
                    for (int j = 0; j < RUN; j++) {
                        const wstep<T> &ws = w[r * RUN + j][t];
#pragma unroll
                        for (int b = 0; b < 2; b++) { /* the step's two blocks */
                            const uint32_t a[4] = {b ? ws.lo.z : ws.lo.x, b ? ws.hi.z : ws.hi.x,
                                                   b ? ws.lo.w : ws.lo.y, b ? ws.hi.w : ws.hi.y};
                            const float dlo = h2f((uint16_t)(ws.dlo >> (16 * b)));
                            const float dhi = h2f((uint16_t)(ws.dhi >> (16 * b)));
#pragma unroll
                            for (int u = 0; u < NT; u++) {
                                const uint4 &xx = xb[r * RUN + j][u];
                                int d[4];
                                mma_s8(d, a, b ? xx.z : xx.x, b ? xx.w : xx.y);
                                ch[u][0] = fmaf(dlo, i2f_small(d[0]), ch[u][0]);
                                ch[u][1] = fmaf(dlo, i2f_small(d[1]), ch[u][1]);
                                ch[u][2] = fmaf(dhi, i2f_small(d[2]), ch[u][2]);
                                ch[u][3] = fmaf(dhi, i2f_small(d[3]), ch[u][3]);
                            }
                        }
                    }
#pragma unroll
                    for (int u = 0; u < NT; u++) {
                        const float sx[2] = {xs[r][u].x, xs[r][u].y};
#pragma unroll
                        for (int c = 0; c < 4; c++)
                            acc[t][u][c] = fmaf(sx[c & 1], ch[u][c], acc[t][u][c]);
                    }
                }
            }
        }
    }

    if (!waited) pdl_wait(); /* y (ADD reads it) only after the kernels before */
    pdl_trigger();           /* the next kernel may start: only the epilogue is left */
    partials_to_shared(red, acc, warp, g, q);
    __syncthreads();

    /* the epilogue: one thread per (x row, row slot); a row's piece columns
     * summed small to large, then the warps in order (store_result: the
     * store by mode) */
    const bool swiglu = job.mode == MTPLX_MMV_SWIGLU;
    const int slots = swiglu ? 8 * MT : 16 * MT;
    auto total = [&](int r, int i) {
        float v = 0.f;
#pragma unroll
        for (int ww = 0; ww < I8_WARPS; ww++)
            v += NP == 3 ? (red[ww][r][NP * i + 2] + red[ww][r][NP * i + 1]) + red[ww][r][NP * i]
                         : red[ww][r][NP * i + 1] + red[ww][r][NP * i];
        return v;
    };
    for (int o = threadIdx.x; o < slots * n; o += I8_WARPS * 32) {
        int i = o / slots, r = o % slots;
        int seg;
        int64_t row;
        if (!slot_row(job, MT, blk, r, seg, row)) continue;
        store_result(job, seg, row, i, total(r, i), [&] { return total(r + 8 * MT, i); });
    }
}

/* Block j of Q8_0 row r (b = r * nb + j) into the interleaved layout:
 * quants at ipos, the f16 scale to slot j after the k quants (as mmv.cu).
 * HD: mtplx_cuda_repack_q8_0_host runs it too. */
HD void repack_i8_block(const uint8_t *raw, uint8_t *out, int64_t k, int64_t b) {
    int64_t nb = k / QK8_0, r = b / nb, j = b % nb;
    const uint8_t *src = raw + b * (int64_t)sizeof(block_q8_0);
    uint8_t *q = out + r * ((k + 2 * nb + 15) / 16 * 16); /* mtplx_cuda_q8_0_packed_row */
    q[k + 2 * j] = src[0], q[k + 2 * j + 1] = src[1];
    for (int i = 0; i < QK8_0; i++)
        q[ipos(j * QK8_0 + i)] = src[2 + i];
}

__global__ void repack_i8_kernel(const uint8_t *__restrict__ raw, uint8_t *__restrict__ out,
                                 int64_t m, int64_t k) {
    int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b < m * (k / QK8_0)) repack_i8_block(raw, out, k, b);
}

int cc_major_cached = -1;

int cc_major() {
    if (cc_major_cached >= 0) return cc_major_cached;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
        major = 0;
    cc_major_cached = major;
    return major;
}

/* U: k steps in flight a lane: Q8_0 4 of 16 bytes a row, Q4_K 4 of 8;
 * fewer where the x columns take the registers. */
template <int T, int NT> constexpr int i8_u() {
    return T == MTPLX_TYPE_Q4_K ? (NT == 1 ? MTPLX_I8_U_Q4K : NT == 2 ? MTPLX_I8_U_Q4K_2 : 2)
                                : (NT == 1 ? MTPLX_I8_U_Q8 : NT == 2 ? MTPLX_I8_U_Q8_2 : 2);
}

template <int T, int NT, int NP>
cudaError_t launch_nt(cudaStream_t st, const mtplx_cuda_mmv_job *job, int64_t k, int64_t n) {
    constexpr int MT = NT <= 2 ? MTPLX_I8_MT : 1; /* shared memory: red[][16 MT][8 NT] */
    bool swiglu = job->mode == MTPLX_MMV_SWIGLU;
    int64_t slots = swiglu ? job->m[0] : job->m[0] + job->m[1] + job->m[2];
    int64_t per_block = swiglu ? 8 * MT : 16 * MT;
    unsigned grid = (unsigned)((slots + per_block - 1) / per_block);
    int64_t rb = T == MTPLX_TYPE_Q4_K ? k / QK_K * (int64_t)sizeof(block_q4_K)
                                      : (int64_t)mtplx_cuda_q8_0_packed_row(k);
    return launch_k(job->pdl, mmv_i8_kernel<T, MT, NT, i8_u<T, NT>(), NP>, dim3(grid),
                    dim3(I8_WARPS * 32), 0, st, with_trig_start(*job, rb), k, rb, n);
}

/* n-tiles: ceil(NP n / 8), at most NP * MTPLX_CUDA_MMV_ROWS / 8 (4 or 6) */
template <int T, int NP>
cudaError_t launch_np(cudaStream_t st, const mtplx_cuda_mmv_job *job, int64_t k, int64_t n) {
    switch ((NP * n + 7) / 8) {
    case 1: return launch_nt<T, 1, NP>(st, job, k, n);
    case 2: return launch_nt<T, 2, NP>(st, job, k, n);
    case 3: return launch_nt<T, 3, NP>(st, job, k, n);
    case 4: return launch_nt<T, 4, NP>(st, job, k, n);
    }
    if constexpr (NP == 3)
        return (3 * n + 7) / 8 == 5 ? launch_nt<T, 5, 3>(st, job, k, n) : launch_nt<T, 6, 3>(st, job, k, n);
    else
        return cudaErrorInvalidValue; /* n > 16: mtplx_cuda_mmv_i8 refuses it first */
}

template <int T>
cudaError_t launch_type(cudaStream_t st, const mtplx_cuda_mmv_job *job, int64_t k, int64_t n,
                        int np) {
    return np == 2 ? launch_np<T, 2>(st, job, k, n) : launch_np<T, 3>(st, job, k, n);
}

} // namespace

extern "C" {

size_t mtplx_cuda_mmv_i8_scratch(void) {
    return xq_bytes(MTPLX_CUDA_I8_KMAX);
}

bool mtplx_cuda_mmv_i8_ok(int type, int64_t k, const mtplx_cuda_mmv_job *job) {
    if (!job->xq || job->mma_q4k || k > MTPLX_CUDA_I8_KMAX || cc_major() < 8) return false;
    if (type == MTPLX_TYPE_Q8_0) return k % (2 * QK8_0) == 0;
    if (type == MTPLX_TYPE_Q4_K) return k % QK_K == 0;
    return false;
}

void mtplx_cuda_repack_q8_0_i8_host(const void *raw, void *out, int64_t m, int64_t k) {
    for (int64_t b = 0; b < m * (k / QK8_0); b++)
        repack_i8_block((const uint8_t *)raw, (uint8_t *)out, k, b);
}

cudaError_t mtplx_cuda_repack_q8_0_i8(cudaStream_t s, const void *raw, void *out, int64_t m,
                                      int64_t k) {
    int64_t nb = m * (k / QK8_0);
    if (nb == 0) return cudaSuccess;
    repack_i8_kernel<<<(unsigned)((nb + 255) / 256), 256, 0, s>>>((const uint8_t *)raw,
                                                                  (uint8_t *)out, m, k);
    return cudaGetLastError();
}

cudaError_t mtplx_cuda_mmv_i8(cudaStream_t s, int type, const mtplx_cuda_mmv_job *job, int64_t k,
                              const float *x, int64_t n) {
    const int np = job->xq_pieces ? job->xq_pieces : MTPLX_I8_PIECES;
    if (n < 1 || n > MTPLX_CUDA_MMV_ROWS || (np != 2 && np != 3)) return cudaErrorInvalidValue;
    dim3 g((unsigned)((nchunk(k) + XQ_WARPS - 1) / XQ_WARPS), (unsigned)n);
    cudaError_t e = launch_k(job->pdl, np == 2 ? xq_kernel<2> : xq_kernel<3>, g,
                             dim3(XQ_WARPS * 32), 0, s, x, k, job->norm, job->eps, job->xq);
    if (e != cudaSuccess) return e;
    switch (type) {
    case MTPLX_TYPE_Q8_0: return launch_type<MTPLX_TYPE_Q8_0>(s, job, k, n, np);
    case MTPLX_TYPE_Q4_K: return launch_type<MTPLX_TYPE_Q4_K>(s, job, k, n, np);
    default: return cudaErrorInvalidValue;
    }
}

} // extern "C"
