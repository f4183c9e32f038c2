/* kernels.cu: the CUDA kernels behind the CUDA backend (cuda_kernels.h).
 *
 * Decode and verification are memory bound, so the matmul is a GEMV that
 * keeps up to 16 rows of activations in registers: one warp per output row
 * walks the weight row once, dequantising 8 elements at a time, and applies
 * them to every activation row. Larger n (prefill) can run the same kernel
 * per 16 rows (re-reading the weights n/16 times), but normally takes the
 * tensor-core GEMM below (tc_mm_kernel: 64 x 64 tiles, operands rounded to
 * bf16 / f16), or for BF16 weights in the GEMV's tiled copy gemm_bf16.cu's
 * pipelined one (the same rounding, 3-5x faster on 8B shapes). Attention
 * is attention.cu's. Apart from the tensor-core
 * operands, all math is f32; no fast-math, so RoPE's angles stay accurate.
 *
 * Kernels whose work depends on the position (RoPE, the KV store, attention)
 * and the embedding gather take an optional `dyn` pointer to a step block in
 * device memory (cuda_kernels.h): a forward captured as a CUDA graph reads
 * the step's position and token ids there, so one capture replays for every
 * step. With dyn NULL they use the by-value arguments alone; both ways do the
 * same integer arithmetic, so the float results are bit-identical.
 *
 * The step's small kernels (get_row_kernel, rmsnorm_kernel; attention.cu's)
 * take part in programmatic dependent launch (cuda_util.cuh's launch_k, the
 * launchers' pdl): each lets the next kernel start at once and waits for the
 * one before it before touching memory, so the GEMV after it is resident
 * and loading its weights while it runs. Data a predecessor wrote is read
 * through L2 (__ldcg) or with plain loads, never the read-only path. */

/* core.h is C11; this file is C++. */
#define _Noreturn [[noreturn]]
extern "C" {
#include "kernels/kernels.h"
}
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_util.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>
#include <math.h>
#include <mma.h>
#include <string.h>

namespace {

namespace wmma = nvcuda::wmma;

/* u2f, ldg, h2f, bf2f, ld16, warp_sum, block_sum: cuda_util.cuh. The
 * dequantisers are __host__ __device__ so that a host build of them can be
 * checked against the CPU's reference without a GPU (mtplx_cuda_deq_row_host). */

/* Dequantise elements [8g, 8g+8) of one weight row. Groups of 8 never cross
 * a quant block, and their bytes are contiguous in every GGML layout. */
template <int T> HD void deq8(const uint8_t *row, int64_t g, float w[8]);

template <> HD void deq8<MTPLX_TYPE_F32>(const uint8_t *row, int64_t g, float w[8]) {
    const float4 *p = (const float4 *)(row + g * 32);
    float4 a = ldg(p), b = ldg(p + 1);
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}

template <> HD void deq8<MTPLX_TYPE_F16>(const uint8_t *row, int64_t g, float w[8]) {
    uint4 u = ldg((const uint4 *)(row + g * 16));
    const uint32_t v[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        w[2 * i] = h2f((uint16_t)(v[i] & 0xFFFF));
        w[2 * i + 1] = h2f((uint16_t)(v[i] >> 16));
    }
}

template <> HD void deq8<MTPLX_TYPE_BF16>(const uint8_t *row, int64_t g, float w[8]) {
    uint4 u = ldg((const uint4 *)(row + g * 16));
    const uint32_t v[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        w[2 * i] = u2f(v[i] << 16);
        w[2 * i + 1] = u2f(v[i] & 0xFFFF0000u);
    }
}

/* block_q8_0: d (f16) + 32 int8; 34-byte blocks are only 2-byte aligned. */
template <> HD void deq8<MTPLX_TYPE_Q8_0>(const uint8_t *row, int64_t g, float w[8]) {
    const uint8_t *b = row + (g >> 2) * sizeof(block_q8_0);
    float d = h2f(ld16(b));
    const uint8_t *q = b + 2 + (g & 3) * 8;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint16_t u = ld16(q + 2 * i);
        w[2 * i] = d * (float)(int8_t)(u & 0xFF);
        w[2 * i + 1] = d * (float)(int8_t)(u >> 8);
    }
}

/* block_q4_0: d + 16 bytes; element j < 16 is the low nibble of qs[j],
 * element j + 16 the high nibble; value d * (q - 8). */
template <> HD void deq8<MTPLX_TYPE_Q4_0>(const uint8_t *row, int64_t g, float w[8]) {
    const uint8_t *b = row + (g >> 2) * sizeof(block_q4_0);
    float d = h2f(ld16(b));
    int sub = (int)(g & 3), sh = sub >= 2 ? 4 : 0;
    const uint8_t *q = b + 2 + (sub & 1) * 8;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint16_t u = ld16(q + 2 * i);
        w[2 * i] = d * (float)((int)((u >> sh) & 0xF) - 8);
        w[2 * i + 1] = d * (float)((int)((u >> (8 + sh)) & 0xF) - 8);
    }
}

HD void q4k_scale_min(int j, const uint8_t *q, int *sc, int *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* block_q4_K (144 bytes): 4 chunks of 64; chunk c's qs[32c..32c+32) hold
 * elements 0..31 in low nibbles (sub-block 2c) and 32..63 in high nibbles
 * (sub-block 2c+1); value d * sc * q - dmin * m. */
template <> HD void deq8<MTPLX_TYPE_Q4_K>(const uint8_t *row, int64_t g, float w[8]) {
    const uint8_t *b = row + (g >> 5) * sizeof(block_q4_K);
    int e0 = (int)(g & 31) * 8, c = e0 >> 6, r = e0 & 63, hi = r >= 32;
    int sc, mn;
    q4k_scale_min(2 * c + hi, b + 4, &sc, &mn);
    float d = h2f(ld16(b)) * (float)sc, m = h2f(ld16(b + 2)) * (float)mn;
    uint2 u = *(const uint2 *)(b + 16 + 32 * c + (r & 31)); /* 8-byte aligned */
    const uint32_t v[2] = {u.x, u.y};
#pragma unroll
    for (int i = 0; i < 8; i++) {
        uint32_t byte = (v[i >> 2] >> (8 * (i & 3))) & 0xFF;
        w[i] = d * (float)(hi ? byte >> 4 : byte & 0xF) - m;
    }
}

/* block_q6_K (210 bytes): two halves of 128; in half h, element l + 32 grp
 * (grp 0..3) takes 4 bits of ql[64h + l + 32 (grp & 1)] (high nibble when
 * grp >= 2) and 2 bits of qh[32h + l] at 2 grp; scale sc[8h + l/16 + 2 grp]. */
template <> HD void deq8<MTPLX_TYPE_Q6_K>(const uint8_t *row, int64_t g, float w[8]) {
    const uint8_t *b = row + (g >> 5) * sizeof(block_q6_K);
    int e0 = (int)(g & 31) * 8, h = e0 >> 7, e = e0 & 127, grp = e >> 5, l0 = e & 31;
    const uint8_t *ql = b + 64 * h + l0 + 32 * (grp & 1);
    const uint8_t *qh = b + 128 + 32 * h + l0;
    float d = h2f(ld16(b + 208)) * (float)((const int8_t *)(b + 192))[8 * h + l0 / 16 + 2 * grp];
    int lsh = grp >= 2 ? 4 : 0, hsh = 2 * grp;
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
        uint16_t l = ld16(ql + i), hh = ld16(qh + i);
        int q0 = (((l >> lsh) & 0xF) | (((hh >> hsh) & 3) << 4)) - 32;
        int q1 = (((l >> (8 + lsh)) & 0xF) | (((hh >> (8 + hsh)) & 3) << 4)) - 32;
        w[i] = d * (float)q0;
        w[i + 1] = d * (float)q1;
    }
}


constexpr int MM_WARPS = 4; /* output rows per block */

/* One warp per output row r, activation rows [NR * blockIdx.y, + NR).
 * Needs k % 8 == 0; xvec: x rows 16-byte aligned (float4 loads). */
template <int T, int NR>
__global__ void __launch_bounds__(MM_WARPS * 32)
    mm_kernel(const uint8_t *__restrict__ W, size_t rb, int64_t m, int64_t k,
              const float *__restrict__ x, int64_t n, float *__restrict__ y,
              const float *__restrict__ bias, bool xvec) {
    int lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    if (r >= m) return;
    int64_t i0 = (int64_t)blockIdx.y * NR;
    int nr = n - i0 < NR ? (int)(n - i0) : NR;
    const uint8_t *row = W + (size_t)r * rb;
    const float *xb = x + (size_t)i0 * k;
    float acc[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) acc[i] = 0.f;
    int64_t ng = k / 8;
#pragma unroll 2
    for (int64_t g = lane; g < ng; g += 32) {
        float w[8];
        deq8<T>(row, g, w);
#pragma unroll
        for (int i = 0; i < NR; i++) {
            if (i < nr) {
                const float *xp = xb + (size_t)i * k + g * 8;
                float s;
                if (xvec) {
                    float4 a = __ldg((const float4 *)xp), c = __ldg((const float4 *)xp + 1);
                    s = w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * c.x +
                        w[5] * c.y + w[6] * c.z + w[7] * c.w;
                } else {
                    s = 0.f;
#pragma unroll
                    for (int j = 0; j < 8; j++) s += w[j] * __ldg(xp + j);
                }
                acc[i] += s;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < NR; i++) {
        if (i < nr) {
            float v = warp_sum(acc[i]);
            if (lane == 0) y[(size_t)(i0 + i) * m + r] = v + (bias ? bias[r] : 0.f);
        }
    }
}

__device__ __forceinline__ float load_float(int type, const uint8_t *row, int64_t j) {
    uint16_t h = type == MTPLX_TYPE_F32 ? 0 : ((const uint16_t *)row)[j];
    return type == MTPLX_TYPE_F32 ? ((const float *)row)[j] : type == MTPLX_TYPE_F16 ? h2f(h) : bf2f(h);
}

/* F32 / F16 / BF16 of any k (rows not 16-byte aligned): one warp per output
 * row, one activation row per blockIdx.y. Slow path, correct for all shapes. */
__global__ void mm_float_any(int type, const uint8_t *__restrict__ W, size_t rb, int64_t m,
                             int64_t k, const float *__restrict__ x, float *__restrict__ y,
                             const float *__restrict__ bias) {
    int lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    if (r >= m) return;
    int64_t i = blockIdx.y;
    const uint8_t *row = W + (size_t)r * rb;
    float acc = 0.f;
    for (int64_t j = lane; j < k; j += 32) acc += load_float(type, row, j) * x[(size_t)i * k + j];
    acc = warp_sum(acc);
    if (lane == 0) y[(size_t)i * m + r] = acc + (bias ? bias[r] : 0.f);
}

template <int T>
cudaError_t launch_mm(cudaStream_t s, const void *W, size_t rb, int64_t m, int64_t k,
                      const float *x, int64_t n, float *y, const float *bias, bool xvec) {
    const uint8_t *w = (const uint8_t *)W;
    dim3 blk(MM_WARPS * 32);
    unsigned gx = (unsigned)((m + MM_WARPS - 1) / MM_WARPS);
#define MM_LAUNCH(NR)                                                                          \
    mm_kernel<T, NR><<<dim3(gx, (unsigned)((n + NR - 1) / NR)), blk, 0, s>>>(w, rb, m, k, x, n, y, \
                                                                             bias, xvec)
    if (n <= 1) MM_LAUNCH(1);
    else if (n <= 2) MM_LAUNCH(2);
    else if (n <= 4) MM_LAUNCH(4);
    else if (n <= 8) MM_LAUNCH(8);
    else MM_LAUNCH(16);
#undef MM_LAUNCH
    return cudaGetLastError();
}

/* ---- prefill GEMM on tensor cores (the backend decides from how many rows) ----
 * A block computes a TC_BM x TC_BN tile of y (activation rows x weight rows),
 * four warps of 32 x 32, with WMMA 16x16x16 fragments and f32 accumulators.
 * Each TC_BK step dequantises the weight tile with the GEMV's deq8 and
 * rounds both tiles to the operand type E in shared memory: __half for F16
 * weights (the CPU's dot partner for F16 is f16 activations too), bf16 for
 * everything else (the range of f32, so activations cannot overflow; the
 * CPU's partner for quantised weights is 8 bits, coarser than bf16). Products
 * of two E values are exact in f32, so the only rounding against f32 math is
 * that of the operands (tests/test_cuda.c checks the tile against a host
 * emulation of exactly this rounding). Tails of m, n and k are zero-filled in
 * shared memory; k must be a multiple of 8 (deq8's group). While the warps
 * multiply one tile, the next tile's global loads are in flight in registers
 * (one stage, no cp.async: simple first).
 *   Split-k: a short prefill of a small matrix makes fewer 64 x 64 tiles than
 * the GPU has SMs (m = 1024, n = 64: 16 blocks on 132 SMs), and a few busy
 * SMs cannot pull the weights at the GPU's bandwidth. Then blockIdx.z splits
 * k into equal runs of whole TC_BK steps; each writes its partial tile to a
 * scratch [splits][n][m], and tc_reduce_kernel sums the splits in a fixed
 * order (no atomics: the same inputs give the same bits on every run, which
 * greedy MTP == AR relies on when both prefill the same prompt). */
constexpr int TC_BM = 64, TC_BN = 64, TC_BK = 64;
constexpr int TC_THREADS = 128;
/* shared row stride in elements: 144 bytes, so WMMA's 16-row steps stay
 * 32-byte aligned and the 8 rows of an ldmatrix hit distinct banks */
constexpr int TC_LD = TC_BK + 8;
constexpr int TC_LDC = TC_BN + 4; /* the f32 output tile's stride */
/* 8-element groups per tile row, per operand tile, and per thread */
constexpr int TC_GPR = TC_BK / 8, TC_GROUPS = TC_BM * TC_GPR,
              TC_PER_THREAD = TC_GROUPS / TC_THREADS;
static_assert(TC_BM == TC_BN, "one loader indexing serves both operand tiles");
static_assert(TC_GROUPS % TC_THREADS == 0, "every thread loads the same number of groups");

/* (pack2: cuda_util.cuh) */
template <typename E> __device__ __forceinline__ uint4 pack8(const float v[8]) {
    return make_uint4(pack2<E>(v[0], v[1]), pack2<E>(v[2], v[3]), pack2<E>(v[4], v[5]),
                      pack2<E>(v[6], v[7]));
}

/* Group gk (elements [8 gk, 8 gk + 8)) of row r of a BF16 weight in
 * mtplx_cuda_tile_bf16's layout (rb = 2 k): 16 contiguous bytes of its
 * 16-row tile's k step gk / 4 */
HD const uint8_t *tiled_group(const uint8_t *W, size_t rb, int64_t r, int64_t gk) {
    return W + tiled_row_off(r, (int64_t)rb) + (gk >> 2) * 1024 + (gk & 3) * 16;
}

/* Group gk of a Q8_0 row in a GEMV's layout (mtplx_cuda_repack_q8_0: the
 * k quants, then the k / 32 f16 scales; i8: the quants at ipos), with
 * deq8<Q8_0>'s arithmetic, so every layout gives the same values. */
HD void deq8_q8_packed(const uint8_t *row, int64_t k, int64_t g, bool i8, float w[8]) {
    float d = h2f(ld16(row + k + 2 * (g >> 2)));
    int64_t e = 8 * g;
    uint2 u = ldg((const uint2 *)(row + (i8 ? ipos(e) : e)));
#pragma unroll
    for (int i = 0; i < 8; i++)
        w[i] = d * (float)(int8_t)(((i < 4 ? u.x : u.y) >> (8 * (i & 3))) & 0xFF);
}

/* Whether a weight of this type and k can be in this layout (cuda_layout.h):
 * what deq8_layout reads; the file's layout takes every type. */
bool layout_takes(int type, int layout, int64_t k) {
    switch (layout) {
    case MTPLX_CUDA_W_GGUF: return true;
    case MTPLX_CUDA_W_BF16_TILED: return type == MTPLX_TYPE_BF16 && mtplx_cuda_bf16_tiled_ok(k);
    case MTPLX_CUDA_W_Q8_PACKED: return type == MTPLX_TYPE_Q8_0 && k % 32 == 0;
    case MTPLX_CUDA_W_Q8_I8: return type == MTPLX_TYPE_Q8_0 && k % 64 == 0;
    default: return false;
    }
}

/* Group gk (elements [8 gk, 8 gk + 8)) of row r of a weight of type T in
 * `layout` (cuda_layout.h), rb bytes a row: what the prefill GEMM reads. */
template <int T>
HD void deq8_layout(const uint8_t *W, size_t rb, int layout, int64_t k, int64_t r, int64_t gk, float v[8]) {
    if (T == MTPLX_TYPE_BF16 && layout == MTPLX_CUDA_W_BF16_TILED)
        deq8<T>(tiled_group(W, rb, r, gk), 0, v);
    else if (T == MTPLX_TYPE_Q8_0 && layout != MTPLX_CUDA_W_GGUF)
        deq8_q8_packed(W + (size_t)r * rb, k, gk, layout == MTPLX_CUDA_W_Q8_I8, v);
    else
        deq8<T>(W + (size_t)r * rb, gk, v);
}

/* The k-step at k0 of both operand tiles, packed to E, into registers:
 * thread tid's groups g = tid + TC_THREADS * h, each (tile row g / TC_GPR,
 * k group g % TC_GPR). Rows past m or n and groups past k are zeros.
 * layout: W's (deq8_layout). */
template <int T, typename E>
__device__ __forceinline__ void tc_fetch(const uint8_t *__restrict__ W, size_t rb, int layout,
                                         int64_t m, int64_t k, int64_t k_hi, const float *__restrict__ x,
                                         int64_t n, bool xvec, int64_t r0, int64_t i0, int64_t k0,
                                         uint4 wreg[TC_PER_THREAD], uint4 xreg[TC_PER_THREAD]) {
#pragma unroll
    for (int h = 0; h < TC_PER_THREAD; h++) {
        int g = (int)threadIdx.x + TC_THREADS * h, row = g / TC_GPR;
        int64_t gk = k0 / 8 + g % TC_GPR;
        float v[8];
        bool in_k = gk < k_hi / 8; /* k_hi: the end of this block's k run */
        if (in_k && r0 + row < m) {
            deq8_layout<T>(W, rb, layout, k, r0 + row, gk, v);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = 0.f;
        }
        wreg[h] = pack8<E>(v);
        if (in_k && i0 + row < n) {
            const float *xp = x + (size_t)(i0 + row) * k + gk * 8;
            if (xvec) {
                float4 a = __ldg((const float4 *)xp), b = __ldg((const float4 *)xp + 1);
                v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z,
                v[7] = b.w;
            } else {
#pragma unroll
                for (int j = 0; j < 8; j++) v[j] = __ldg(xp + j);
            }
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = 0.f;
        }
        xreg[h] = pack8<E>(v);
    }
}

template <int T, typename E>
__global__ void __launch_bounds__(TC_THREADS)
    tc_mm_kernel(const uint8_t *__restrict__ W, size_t rb, int layout, int64_t m, int64_t k,
                 const float *__restrict__ x, int64_t n, float *__restrict__ y,
                 const float *__restrict__ bias, bool xvec, int64_t kchunk,
                 float *__restrict__ part) {
    __shared__ __align__(32) E xs[TC_BM][TC_LD]; /* activation rows x k */
    __shared__ __align__(32) E ws[TC_BN][TC_LD]; /* weight rows x k */
    __shared__ __align__(32) float cs[TC_BM][TC_LDC];
    int warp = threadIdx.x >> 5;
    int64_t i0 = (int64_t)blockIdx.y * TC_BM, r0 = (int64_t)blockIdx.x * TC_BN;
    int wi = (warp >> 1) * 32, wr = (warp & 1) * 32; /* this warp's 32 x 32 corner */
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 2; b++) wmma::fill_fragment(acc[a][b], 0.f);
    /* this block's k run: all of k, or split blockIdx.z's (kchunk: whole TC_BK steps) */
    int64_t k_lo = (int64_t)blockIdx.z * kchunk, k_hi = k_lo + kchunk < k ? k_lo + kchunk : k;
    uint4 wreg[TC_PER_THREAD], xreg[TC_PER_THREAD];
    tc_fetch<T, E>(W, rb, layout, m, k, k_hi, x, n, xvec, r0, i0, k_lo, wreg, xreg);
    for (int64_t k0 = k_lo; k0 < k_hi; k0 += TC_BK) {
#pragma unroll
        for (int h = 0; h < TC_PER_THREAD; h++) {
            int g = (int)threadIdx.x + TC_THREADS * h;
            *(uint4 *)&ws[g / TC_GPR][(g % TC_GPR) * 8] = wreg[h];
            *(uint4 *)&xs[g / TC_GPR][(g % TC_GPR) * 8] = xreg[h];
        }
        __syncthreads();
        if (k0 + TC_BK < k_hi)
            tc_fetch<T, E>(W, rb, layout, m, k, k_hi, x, n, xvec, r0, i0, k0 + TC_BK, wreg, xreg);
#pragma unroll
        for (int kk = 0; kk < TC_BK; kk += 16) {
            /* A = activations (row major, k contiguous); B = W^T, whose
             * column r is weight row r: col major over the same layout */
            wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::col_major> fb[2];
#pragma unroll
            for (int a = 0; a < 2; a++) wmma::load_matrix_sync(fa[a], &xs[wi + 16 * a][kk], TC_LD);
#pragma unroll
            for (int b = 0; b < 2; b++) wmma::load_matrix_sync(fb[b], &ws[wr + 16 * b][kk], TC_LD);
#pragma unroll
            for (int a = 0; a < 2; a++)
#pragma unroll
                for (int b = 0; b < 2; b++) wmma::mma_sync(acc[a][b], fa[a], fb[b], acc[a][b]);
        }
        __syncthreads(); /* the tiles are read: the next step may overwrite them */
    }
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 2; b++)
            wmma::store_matrix_sync(&cs[wi + 16 * a][wr + 16 * b], acc[a][b], TC_LDC,
                                    wmma::mem_row_major);
    __syncthreads();
    /* consecutive threads write consecutive outputs of one activation row;
     * a split writes its partial sums, without the bias, to part */
    for (int e = threadIdx.x; e < TC_BM * TC_BN; e += TC_THREADS) {
        int row = e / TC_BN, col = e % TC_BN;
        int64_t i = i0 + row, r = r0 + col;
        if (i >= n || r >= m) continue;
        if (part) part[((size_t)blockIdx.z * n + i) * m + r] = cs[row][col];
        else y[(size_t)i * m + r] = cs[row][col] + (bias ? bias[r] : 0.f);
    }
}

/* y[i] = part[0][i] + part[1][i] + ... (in that order) + bias, over n m
 * outputs; with gate (no bias): silu(gate[i]) (that sum + 0), gemm_store2's
 * SwiGLU (gate may be y) */
__global__ void tc_reduce_kernel(const float *__restrict__ part, int splits, int64_t nm, int64_t m,
                                 float *y, const float *__restrict__ bias, const float *gate) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nm) return;
    float v = part[i];
    for (int s = 1; s < splits; s++) v += part[(size_t)s * nm + i];
    y[i] = gate ? silu_mul1(gate[i], v + 0.f) : v + (bias ? bias[i % m] : 0.f);
}

constexpr int TC_MAX_SPLITS = 8;

} // namespace (reopened below)

extern "C" int mtplx_cuda_tc_split_k(const mtplx_cuda_tc_split *sp, int64_t blocks, int64_t n, int64_t m,
                                     int64_t k, int bk, int min_steps, int64_t *kchunk) {
    int64_t steps = (k + bk - 1) / bk, want = 1;
    if (sp && sp->buf && sp->n_sm > 0 && blocks < sp->n_sm) {
        int64_t fit = (int64_t)(sp->bytes / ((size_t)(n * m) * sizeof(float)));
        want = (2 * (int64_t)sp->n_sm + blocks - 1) / blocks;
        if (want > TC_MAX_SPLITS) want = TC_MAX_SPLITS;
        if (want > steps / min_steps) want = steps / min_steps;
        if (want > fit) want = fit;
        if (want < 2) want = 1;
    }
    /* whole steps a run; the runs recounted so that none is empty */
    *kchunk = (steps + want - 1) / want * bk;
    return (int)((k + *kchunk - 1) / *kchunk);
}

extern "C" cudaError_t mtplx_cuda_tc_reduce(cudaStream_t s, const float *part, int splits, int64_t nm, int64_t m,
                                            float *y, const float *bias, const float *gate) {
    if (nm <= 0) return cudaSuccess;
    tc_reduce_kernel<<<(unsigned)((nm + 255) / 256), 256, 0, s>>>(part, splits, nm, m, y, bias, gate);
    return cudaGetLastError();
}

namespace {

template <int T, typename E>
cudaError_t launch_tc(cudaStream_t s, const void *W, size_t rb, int layout, int64_t m, int64_t k,
                      const float *x, int64_t n, float *y, const float *bias, bool xvec,
                      const mtplx_cuda_tc_split *sp) {
    int64_t gx = (m + TC_BN - 1) / TC_BN, gy = (n + TC_BM - 1) / TC_BM, kchunk;
    int splits = mtplx_cuda_tc_split_k(sp, gx * gy, n, m, k, TC_BK, 2, &kchunk);
    float *part = splits > 1 ? sp->buf : NULL;
    dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)splits);
    tc_mm_kernel<T, E>
        <<<grid, TC_THREADS, 0, s>>>((const uint8_t *)W, rb, layout, m, k, x, n, y, bias, xvec, kchunk, part);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || !part) return e;
    return mtplx_cuda_tc_reduce(s, part, splits, n * m, m, y, bias, NULL);
}

/* ---- get_rows: out row i = W row ids[i] (ids in device memory) or, with
 * ids NULL, W row id0 (one row). blockIdx.y = i. ---- */
__device__ __forceinline__ int64_t row_id(const int32_t *ids, int64_t id0) {
    return ids ? (int64_t)ids[blockIdx.y] : id0;
}

template <int T>
__global__ void get_row_kernel(const uint8_t *__restrict__ W, size_t rb, int64_t k,
                               const int32_t *__restrict__ ids, int64_t id0, float *__restrict__ out) {
    pdl_trigger(), pdl_wait(); /* (launch_k) */
    int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= k / 8) return;
    const uint8_t *row = W + (size_t)row_id(ids, id0) * rb;
    float *o = out + (size_t)blockIdx.y * k;
    float w[8];
    deq8<T>(row, g, w);
#pragma unroll
    for (int j = 0; j < 8; j++) o[g * 8 + j] = w[j];
}

__global__ void get_row_float_any(int type, const uint8_t *__restrict__ W, size_t rb, int64_t k,
                                  const int32_t *__restrict__ ids, int64_t id0,
                                  float *__restrict__ out) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < k) out[(size_t)blockIdx.y * k + j] = load_float(type, W + (size_t)row_id(ids, id0) * rb, j);
}

/* The step block's position (0 without one). */

__global__ void set_step_kernel(mtplx_cuda_step *dst, mtplx_cuda_step v) { *dst = v; }

/* ---- small ops ---- */
/* A thread's elements i = tid + j * blockDim of a row, held in registers
 * by rmsnorm_kernel when there are at most NORM_REG of them. */
constexpr int NORM_REG = 8;

__global__ void rmsnorm_kernel(const float *x, const float *__restrict__ w, float *out, int64_t d,
                               float eps) {
    const float *xr = x + (size_t)blockIdx.x * d;
    float *o = out + (size_t)blockIdx.x * d;
    const int64_t tid = threadIdx.x, bd = blockDim.x;
    pdl_trigger(); /* (launch_k) */
    if (d > NORM_REG * bd) {
        pdl_wait();
        float ss = 0.f;
        for (int64_t i = tid; i < d; i += bd) ss += xr[i] * xr[i];
        float scale = norm_scale(block_sum(ss), d, eps);
        /* out may alias x: each thread rewrites only the elements it read */
        for (int64_t i = tid; i < d; i += bd) o[i] = xr[i] * scale * w[i];
        return;
    }
    /* the weights need nothing of the kernel before: loaded while it ends;
     * the same sums and products as the loop above, in the same order */
    float wv[NORM_REG], xv[NORM_REG];
    row_to_regs(w, d, wv);
    pdl_wait();
    row_to_regs(xr, d, xv);
    rmsnorm_regs(xv, wv, o, d, eps);
}

__global__ void rope_kernel(float *x, int64_t n, int n_head, int head_dim, int64_t pos0,
                            const float *__restrict__ inv_freq, bool neox,
                            const mtplx_cuda_step *__restrict__ dyn) {
    int half = head_dim / 2;
    pos0 += dyn_pos(dyn);
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n * n_head * half) return;
    int i = (int)(idx % half);
    int64_t th_ = idx / half;
    int h = (int)(th_ % n_head);
    int64_t t = th_ / n_head;
    float th = (float)(pos0 + t) * inv_freq[i];
    float sn, cs;
    sincosf(th, &sn, &cs);
    float *v = x + (t * n_head + h) * head_dim;
    int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    float x0 = v[a], x1 = v[b];
    v[a] = x0 * cs - x1 * sn;
    v[b] = x0 * sn + x1 * cs;
}

__global__ void silu_mul_kernel(const float *g, const float *u, float *out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = silu_mul1(g[i], u[i]);
}

__global__ void add_kernel(float *y, const float *x, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

/* n floats into the KV buffer at row (row0 + step position) of d elements. */
template <bool F16>
__global__ void store_kernel(const float *x, void *kv, int64_t row0, int64_t d, int64_t n,
                             const mtplx_cuda_step *__restrict__ dyn) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t at = (size_t)(row0 + dyn_pos(dyn)) * (size_t)d + (size_t)i;
    if (F16) ((__half *)kv)[at] = __float2half_rn(x[i]);
    else ((float *)kv)[at] = x[i];
}

/* ---- greedy pick: one block per logits row ---- */
constexpr int AM_THREADS = 1024;

/* Row blockIdx.x of logits [n][V]: the first index of the largest value (the
 * CPU sampler's rule: strict >, so ties go to the lower id; NaN never wins)
 * and its log-softmax, log(1 / sum exp(l - max)), summed in double like
 * mtplx_logprob. */
__global__ void __launch_bounds__(AM_THREADS)
    argmax_kernel(const float *__restrict__ logits, int64_t V, mtplx_cuda_pick *__restrict__ out) {
    const float *l = logits + (size_t)blockIdx.x * V;
    __shared__ float s_v[AM_THREADS / 32];
    __shared__ int64_t s_i[AM_THREADS / 32];
    __shared__ double s_sum[AM_THREADS / 32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float bv = -INFINITY;
    int64_t bi = -1;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
        float v = l[i]; /* i grows: strict > keeps the lowest index of a tie */
        if (v > bv || (bi < 0 && v == v)) bv = v, bi = i;
    }
    /* reduce (value desc, index asc); bi < 0 = nothing (all NaN) */
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xFFFFFFFFu, bv, o);
        int64_t oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
        if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
    }
    if (lane == 0) s_v[warp] = bv, s_i[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < nw; w++)
            if (s_i[w] >= 0 && (bi < 0 || s_v[w] > bv || (s_v[w] == bv && s_i[w] < bi)))
                bv = s_v[w], bi = s_i[w];
        s_v[0] = bv, s_i[0] = bi < 0 ? 0 : bi;
    }
    __syncthreads();
    float mx = s_v[0];
    double sum = 0;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) sum += exp((double)l[i] - (double)mx);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
    if (lane == 0) s_sum[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0;
        for (int w = 0; w < nw; w++) t += s_sum[w];
        int64_t id = s_i[0];
        out[blockIdx.x].id = (int32_t)id;
        out[blockIdx.x].logprob = t > 0 ? (float)((double)l[id] - (double)mx - log(t)) : -INFINITY;
    }
}

unsigned blocks_for(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

} // namespace

extern "C" {

int mtplx_cuda_deq_layout_row_host(int type, int layout, const void *W, int64_t k, int64_t r,
                                   float *out) {
    if (k <= 0 || k % 32 || r < 0 || layout == MTPLX_CUDA_W_GGUF || !layout_takes(type, layout, k))
        return -1;
    bool bf16 = layout == MTPLX_CUDA_W_BF16_TILED;
    size_t rb = bf16 ? (size_t)(2 * k) : mtplx_cuda_q8_0_packed_row(k);
    float w[8];
    for (int64_t g = 0; g < k / 8; g++) {
        if (bf16) deq8_layout<MTPLX_TYPE_BF16>((const uint8_t *)W, rb, layout, k, r, g, w);
        else deq8_layout<MTPLX_TYPE_Q8_0>((const uint8_t *)W, rb, layout, k, r, g, w);
        memcpy(out + g * 8, w, sizeof w);
    }
    return 0;
}

int mtplx_cuda_deq_row_host(int type, const void *row, int64_t k, float *out) {
    const uint8_t *r = (const uint8_t *)row;
    float w[8];
    for (int64_t g = 0; g < k / 8; g++) {
        switch (type) {
        case MTPLX_TYPE_F32: deq8<MTPLX_TYPE_F32>(r, g, w); break;
        case MTPLX_TYPE_F16: deq8<MTPLX_TYPE_F16>(r, g, w); break;
        case MTPLX_TYPE_BF16: deq8<MTPLX_TYPE_BF16>(r, g, w); break;
        case MTPLX_TYPE_Q8_0: deq8<MTPLX_TYPE_Q8_0>(r, g, w); break;
        case MTPLX_TYPE_Q4_0: deq8<MTPLX_TYPE_Q4_0>(r, g, w); break;
        case MTPLX_TYPE_Q4_K: deq8<MTPLX_TYPE_Q4_K>(r, g, w); break;
        case MTPLX_TYPE_Q6_K: deq8<MTPLX_TYPE_Q6_K>(r, g, w); break;
        default: return -1;
        }
        memcpy(out + g * 8, w, sizeof w);
    }
    return 0;
}

cudaError_t mtplx_cuda_matmul(cudaStream_t s, int type, const void *W, size_t rb, int64_t m,
                              int64_t k, const float *x, int64_t n, float *y, const float *bias) {
    bool is_float = type == MTPLX_TYPE_F32 || type == MTPLX_TYPE_F16 || type == MTPLX_TYPE_BF16;
    bool xvec = k % 4 == 0 && ((uintptr_t)x & 15) == 0;
    if (is_float && (k % 8 != 0 || ((uintptr_t)W & 15) != 0)) {
        mm_float_any<<<dim3((unsigned)((m + MM_WARPS - 1) / MM_WARPS), (unsigned)n), MM_WARPS * 32, 0,
                       s>>>(type, (const uint8_t *)W, rb, m, k, x, y, bias);
        return cudaGetLastError();
    }
    switch (type) {
    case MTPLX_TYPE_F32: return launch_mm<MTPLX_TYPE_F32>(s, W, rb, m, k, x, n, y, bias, xvec);
    case MTPLX_TYPE_F16: return launch_mm<MTPLX_TYPE_F16>(s, W, rb, m, k, x, n, y, bias, xvec);
    case MTPLX_TYPE_BF16: return launch_mm<MTPLX_TYPE_BF16>(s, W, rb, m, k, x, n, y, bias, xvec);
    case MTPLX_TYPE_Q8_0: return launch_mm<MTPLX_TYPE_Q8_0>(s, W, rb, m, k, x, n, y, bias, xvec);
    case MTPLX_TYPE_Q4_0: return launch_mm<MTPLX_TYPE_Q4_0>(s, W, rb, m, k, x, n, y, bias, xvec);
    case MTPLX_TYPE_Q4_K: return launch_mm<MTPLX_TYPE_Q4_K>(s, W, rb, m, k, x, n, y, bias, xvec);
    case MTPLX_TYPE_Q6_K: return launch_mm<MTPLX_TYPE_Q6_K>(s, W, rb, m, k, x, n, y, bias, xvec);
    default: return cudaErrorInvalidValue;
    }
}

bool mtplx_cuda_matmul_tc_ok(int type, const void *W, size_t rb, int64_t k) {
    bool is_float = type == MTPLX_TYPE_F32 || type == MTPLX_TYPE_F16 || type == MTPLX_TYPE_BF16;
    bool known = is_float || type == MTPLX_TYPE_Q8_0 || type == MTPLX_TYPE_Q4_0 ||
                 type == MTPLX_TYPE_Q4_K || type == MTPLX_TYPE_Q6_K;
    /* deq8's vector loads of float rows want them 16-byte aligned (as the GEMV) */
    return known && k % 8 == 0 && (!is_float || (((uintptr_t)W & 15) == 0 && rb % 16 == 0));
}

cudaError_t mtplx_cuda_matmul_tc(cudaStream_t s, int type, const void *W, size_t rb, int layout,
                                 int64_t m, int64_t k, const float *x, int64_t n, float *y,
                                 const float *bias, const mtplx_cuda_tc_split *split) {
    bool q8p = layout == MTPLX_CUDA_W_Q8_PACKED || layout == MTPLX_CUDA_W_Q8_I8;
    if (!mtplx_cuda_matmul_tc_ok(type, W, rb, k) || !layout_takes(type, layout, k) ||
        (q8p && (rb != mtplx_cuda_q8_0_packed_row(k) || ((uintptr_t)W & 15))))
        return cudaErrorInvalidValue;
    if (n <= 0 || m <= 0) return cudaSuccess;
    bool xvec = ((uintptr_t)x & 15) == 0; /* k % 8 == 0: every row is then aligned */
    typedef __nv_bfloat16 B;
#define TC_CASE(TY, E)                                                                             \
    case TY: return launch_tc<TY, E>(s, W, rb, layout, m, k, x, n, y, bias, xvec, split)
    switch (type) {
        TC_CASE(MTPLX_TYPE_F32, B);
        TC_CASE(MTPLX_TYPE_F16, __half);
        TC_CASE(MTPLX_TYPE_BF16, B);
        TC_CASE(MTPLX_TYPE_Q8_0, B);
        TC_CASE(MTPLX_TYPE_Q4_0, B);
        TC_CASE(MTPLX_TYPE_Q4_K, B);
        TC_CASE(MTPLX_TYPE_Q6_K, B);
#undef TC_CASE
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t mtplx_cuda_get_rows(cudaStream_t s, int type, const void *W, size_t rb, int64_t k,
                                const int32_t *ids, int64_t id0, int64_t n, float *out, bool pdl) {
    const uint8_t *w = (const uint8_t *)W;
    if (n <= 0) return cudaSuccess;
    for (; n > 65535; n -= 65535, ids += 65535, out += (size_t)65535 * k) { /* gridDim.y limit */
        cudaError_t e = mtplx_cuda_get_rows(s, type, W, rb, k, ids, id0, 65535, out, pdl);
        if (e != cudaSuccess) return e;
    }
    bool is_float = type == MTPLX_TYPE_F32 || type == MTPLX_TYPE_F16 || type == MTPLX_TYPE_BF16;
    /* rows 16-byte aligned: W is (cudaMalloc) and so is every row when rb is */
    if (is_float && (k % 8 != 0 || ((uintptr_t)w & 15) != 0 || rb % 16 != 0)) {
        get_row_float_any<<<dim3(blocks_for(k, 256), (unsigned)n), 256, 0, s>>>(type, w, rb, k, ids,
                                                                                 id0, out);
        return cudaGetLastError();
    }
    dim3 g(blocks_for(k / 8, 128), (unsigned)n);
#define GR_CASE(TY)                                                                                \
    case TY: return launch_k(pdl, get_row_kernel<TY>, g, dim3(128), 0, s, w, rb, k, ids, id0, out)
    switch (type) {
        GR_CASE(MTPLX_TYPE_F32);
        GR_CASE(MTPLX_TYPE_F16);
        GR_CASE(MTPLX_TYPE_BF16);
        GR_CASE(MTPLX_TYPE_Q8_0);
        GR_CASE(MTPLX_TYPE_Q4_0);
        GR_CASE(MTPLX_TYPE_Q4_K);
        GR_CASE(MTPLX_TYPE_Q6_K);
#undef GR_CASE
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t mtplx_cuda_argmax_rows(cudaStream_t s, const float *logits, int64_t n, int64_t V,
                                   mtplx_cuda_pick *out) {
    if (n <= 0) return cudaSuccess;
    argmax_kernel<<<(unsigned)n, AM_THREADS, 0, s>>>(logits, V, out);
    return cudaGetLastError();
}

cudaError_t mtplx_cuda_set_step(cudaStream_t s, mtplx_cuda_step *dst, const mtplx_cuda_step *v) {
    set_step_kernel<<<1, 1, 0, s>>>(dst, *v);
    return cudaGetLastError();
}

cudaError_t mtplx_cuda_rmsnorm(cudaStream_t s, const float *x, const float *w, float *out, int64_t n,
                               int64_t d, float eps, bool pdl) {
    int threads = d >= 1024 ? 1024 : d >= 256 ? 256 : 64;
    return launch_k(pdl, rmsnorm_kernel, dim3((unsigned)n), dim3(threads), 0, s, x, w, out, d, eps);
}

cudaError_t mtplx_cuda_rope(cudaStream_t s, float *x, int64_t n, int n_head, int head_dim,
                            int64_t pos0, const float *inv_freq, bool neox,
                            const mtplx_cuda_step *dyn) {
    int64_t total = n * n_head * (head_dim / 2);
    if (total == 0) return cudaSuccess;
    rope_kernel<<<blocks_for(total, 256), 256, 0, s>>>(x, n, n_head, head_dim, pos0, inv_freq, neox,
                                                       dyn);
    return cudaGetLastError();
}

cudaError_t mtplx_cuda_silu_mul(cudaStream_t s, const float *gate, const float *up, float *out,
                                int64_t n) {
    if (n == 0) return cudaSuccess;
    silu_mul_kernel<<<blocks_for(n, 256), 256, 0, s>>>(gate, up, out, n);
    return cudaGetLastError();
}

cudaError_t mtplx_cuda_add(cudaStream_t s, float *y, const float *x, int64_t n) {
    if (n == 0) return cudaSuccess;
    add_kernel<<<blocks_for(n, 256), 256, 0, s>>>(y, x, n);
    return cudaGetLastError();
}

cudaError_t mtplx_cuda_store_rows(cudaStream_t s, int kv_type, const float *src, void *kv,
                                  int64_t row0, int64_t n, int64_t d, const mtplx_cuda_step *dyn) {
    if (n * d == 0) return cudaSuccess;
    if (kv_type == MTPLX_TYPE_F32 && !dyn)
        return cudaMemcpyAsync((float *)kv + (size_t)row0 * (size_t)d, src,
                               (size_t)(n * d) * sizeof(float), cudaMemcpyDeviceToDevice, s);
    if (kv_type == MTPLX_TYPE_F32)
        store_kernel<false><<<blocks_for(n * d, 256), 256, 0, s>>>(src, kv, row0, d, n * d, dyn);
    else
        store_kernel<true><<<blocks_for(n * d, 256), 256, 0, s>>>(src, kv, row0, d, n * d, dyn);
    return cudaGetLastError();
}

} // extern "C"
