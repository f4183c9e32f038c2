/* mmv.cu: the small-n GEMV of the CUDA backend (decode and verify: n <= 16
 * rows of activations), cuda_kernels.h's mtplx_cuda_mmv.
 *
 * Why not kernels.cu's mm_kernel: one warp per weight row there re-reads x
 * (f32, 4 bytes an element) for every row, so L1 traffic for x is 2x (BF16)
 * to 7x (Q4_K) the HBM traffic for the weights, and Q8_0's 34-byte blocks
 * allow only 2-byte loads. Here:
 *  - a warp takes R weight rows at once and loads each x element once for
 *    all of them;
 *  - every lane reads its rows in 16-byte units (UNIT_E elements) and keeps
 *    U units per row in flight before it computes;
 *  - Q8_0 is repacked at upload (mtplx_cuda_repack_q8_0: each row its k
 *    int8 quants, then its f16 scales, padded to 16 bytes); Q4_K is read as it is (144-byte
 *    blocks are 16-byte aligned): a lane takes one 16-byte slice of a
 *    block's nibbles and the block's 16-byte header (scales).
 *  - integers become floats with the 2^23 trick (a byte under the exponent of
 *    2^23, minus 2^23): exact, and two full-rate instructions instead of a
 *    quarter-rate conversion.
 * One launch also serves several weights of one type and k (Q, K and V), the
 * FFN's gate and up with SiLU(gate) * up applied on the way out, or a
 * projection added into the residual (MTPLX_MMV_*): fewer launches per
 * step, which is what a small model's step time is made of. With job.norm
 * set, x rows are RMS-normed on the way in (each warp works out its rows'
 * scales), so the rmsnorm before Q/K/V or gate/up needs no launch either.
 *
 * Determinism: lane l takes units l, l+32, l+64, ... in that order, whatever
 * R, U, the number of x rows or the fused mode; the warp sum is a fixed
 * butterfly. So a row's result is the same bit for bit at every n (decode
 * and verify agree, as greedy MTP == AR needs) and fused == unfused.
 * All math is f32; no atomics.
 *
 * Left out: Q4_0 and Q6_K (kernels.cu's mm_kernel serves them), int8
 * activations with dp4a (the tests ask for f32 accuracy against exact
 * products), tensor cores (prefill's GEMM, elsewhere). */

/* core.h is C11; this file is C++. */
#define _Noreturn [[noreturn]]
extern "C" {
#include "kernels/kernels.h"
}
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_util.cuh"

#include <cuda_fp16.h>
#include <stdlib.h>
#include <string.h>

namespace {

/* u2f, ldg, h2f, warp_sum: cuda_util.cuh (host-callable, so that
 * mtplx_cuda_mmv_deq_row_host runs the device dequantisers without a GPU). */

/* 2^23 + byte j of t, as a float: exactly representable, and subtracting
 * 2^23 afterwards gives the byte's value. */
HD float magic_byte(uint32_t t, int j) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(__byte_perm(t, 0x4B000000u, 0x7540u + (uint32_t)j));
#else
    return u2f(0x4B000000u | ((t >> (8 * j)) & 0xFF));
#endif
}
constexpr float TWO23 = 8388608.0f;

HD uint32_t word(const uint4 &q, int i) {
    return i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w;
}

/* One 16-byte unit of a weight row and what scales it: h is Q4_K's block
 * header (d, dmin, 12 scale bytes) or Q8_0's f16 scale in h.x. */
struct unit {
    uint4 q, h;
};

template <int T> struct traits;
template <> struct traits<MTPLX_TYPE_F32> { static constexpr int E = 4; };
template <> struct traits<MTPLX_TYPE_F16> { static constexpr int E = 8; };
template <> struct traits<MTPLX_TYPE_BF16> { static constexpr int E = 8; };
template <> struct traits<MTPLX_TYPE_Q8_0> { static constexpr int E = 16; };
template <> struct traits<MTPLX_TYPE_Q4_K> { static constexpr int E = 32; };

/* Bytes of one weight row in the layout the kernel reads. */
HD int64_t row_bytes(int T, int64_t k) {
    switch (T) {
    case MTPLX_TYPE_F32: return 4 * k;
    case MTPLX_TYPE_F16:
    case MTPLX_TYPE_BF16: return 2 * k;
    case MTPLX_TYPE_Q8_0: return (k + 2 * (k / QK8_0) + 15) / 16 * 16; /* quants, scales, pad */
    default: return k / QK_K * (int64_t)sizeof(block_q4_K);
    }
}

/* Unit u of a row (aux: Q8_0's scales of that row). */
template <int T> HD void load_unit(const uint8_t *row, const uint8_t *aux, int64_t u, unit &o) {
    if constexpr (T == MTPLX_TYPE_Q4_K) {
        const uint8_t *b = row + (u >> 3) * (int64_t)sizeof(block_q4_K);
        o.h = ldg((const uint4 *)b);
        o.q = ldg((const uint4 *)(b + 16) + (u & 7));
    } else {
        o.q = ldg((const uint4 *)row + u);
        if constexpr (T == MTPLX_TYPE_Q8_0) o.h.x = ldg((const unsigned short *)aux + (u >> 1));
    }
}

/* The first element of sub-group g (4 elements) of unit u. Q4_K: unit u is
 * bytes [16 (u&7), +16) of block u>>3's nibbles: 64-element chunk (u&7)>>1,
 * low nibbles its elements 16 (u&1) + [0,16), high nibbles 32 more. */
template <int T> HD int64_t elem_of(int64_t u, int g) {
    if constexpr (T == MTPLX_TYPE_Q4_K)
        return (u >> 3) * QK_K + 64 * ((u & 7) >> 1) + 16 * (u & 1) + (g >= 4 ? 32 : 0) +
               4 * (g & 3);
    else
        return u * traits<T>::E + 4 * g;
}

/* Per-unit scales: Q8_0 {d}; Q4_K {d*sc, dmin*m} of the low-nibble
 * sub-block (2c) then of the high one (2c+1); see kernels/ref for the 6-bit
 * packing of block_q4_K's scales. */
template <int T> HD void unit_scales(const unit &t, int64_t u, float sc[4]) {
    if constexpr (T == MTPLX_TYPE_Q8_0) {
        sc[0] = h2f((uint16_t)t.h.x);
    } else if constexpr (T == MTPLX_TYPE_Q4_K) {
        int c = (int)((u & 7) >> 1); /* sub-blocks 2c and 2c+1 */
        q4k_sub_scales(t.h, 2 * c, sc[0], sc[1]);
        q4k_sub_scales(t.h, 2 * c + 1, sc[2], sc[3]);
    }
}

/* Sub-group g of a unit as 4 floats (the CPU reference's values exactly). */
template <int T> HD void deq4(const unit &t, const float sc[4], int g, float w[4]) {
    if constexpr (T == MTPLX_TYPE_F32) {
#pragma unroll
        for (int j = 0; j < 4; j++)
            w[j] = u2f(word(t.q, j));
    } else if constexpr (T == MTPLX_TYPE_BF16) {
        uint32_t a = word(t.q, 2 * g), b = word(t.q, 2 * g + 1);
        w[0] = u2f(a << 16), w[1] = u2f(a & 0xFFFF0000u);
        w[2] = u2f(b << 16), w[3] = u2f(b & 0xFFFF0000u);
    } else if constexpr (T == MTPLX_TYPE_F16) {
        uint32_t a = word(t.q, 2 * g), b = word(t.q, 2 * g + 1);
        w[0] = h2f((uint16_t)a), w[1] = h2f((uint16_t)(a >> 16));
        w[2] = h2f((uint16_t)b), w[3] = h2f((uint16_t)(b >> 16));
    } else if constexpr (T == MTPLX_TYPE_Q8_0) {
        uint32_t v = word(t.q, g) ^ 0x80808080u; /* int8 + 128 in each byte */
#pragma unroll
        for (int j = 0; j < 4; j++)
            w[j] = sc[0] * (magic_byte(v, j) - (TWO23 + 128.0f));
    } else {
        uint32_t v = (word(t.q, g & 3) >> (g >= 4 ? 4 : 0)) & 0x0F0F0F0Fu;
        float d = sc[g >= 4 ? 2 : 0], m = sc[g >= 4 ? 3 : 1];
#pragma unroll
        for (int j = 0; j < 4; j++)
            w[j] = fmaf(d, magic_byte(v, j) - TWO23, -m);
    }
}

/* Q8_0 / Q4_K: sub-group g's quants as exact floats (q, not d * q - m): the
 * scales are applied once per sub-block in dot_unit. */
template <int T> HD void quant4(const unit &t, int g, float q[4]) {
    if constexpr (T == MTPLX_TYPE_Q8_0) {
        uint32_t v = word(t.q, g) ^ 0x80808080u; /* int8 + 128 in each byte */
#pragma unroll
        for (int j = 0; j < 4; j++)
            q[j] = magic_byte(v, j) - (TWO23 + 128.0f);
    } else {
        uint32_t v = (word(t.q, g & 3) >> (g >= 4 ? 4 : 0)) & 0x0F0F0F0Fu;
#pragma unroll
        for (int j = 0; j < 4; j++)
            q[j] = magic_byte(v, j) - TWO23;
    }
}

HD float dot4_acc(const float w[4], float4 a, float acc) {
    return fmaf(w[3], a.w, fmaf(w[2], a.z, fmaf(w[1], a.y, fmaf(w[0], a.x, acc))));
}

/* acc[s][i] += unit u of row s . x row i, for R rows and x rows [0, nr).
 * The float types multiply dequantised weights; Q8_0 and Q4_K sum q * x
 * over each 16-element sub-block run first and scale once:
 * sum (d q - m) x = d sum q x - m sum x (sum x shared by the R rows), one
 * multiply per weight fewer where the instruction budget is tight. The
 * order of every sum is fixed by u alone. */
/* x row i's 4 elements at xg (+ i k), RMS-normed on the way when NORM:
 * (x * scale_i) * norm, rmsnorm_kernel's order of the two products. */
/* One lane's share of sum x^2 over an x row of k (k % 4 == 0): elements
 * [4 j, 4 j + 4) for j = lane, lane + 32, ..., in that order. */
HD float sumsq_part(const float *xr, int64_t k, int lane) {
    float ss = 0.f;
    for (int64_t j = lane; j < k / 4; j += 32) {
        float4 a = ldg((const float4 *)xr + j);
        ss = fmaf(a.w, a.w, fmaf(a.z, a.z, fmaf(a.y, a.y, fmaf(a.x, a.x, ss))));
    }
    return ss;
}

template <bool NORM>
HD float4 load_x(const float *xg, const float *ng, const float *xs, int i, int64_t k) {
    float4 a = ldg((const float4 *)(xg + i * k));
    if constexpr (NORM) {
        float4 w = ldg((const float4 *)ng);
        a.x = a.x * xs[i] * w.x, a.y = a.y * xs[i] * w.y;
        a.z = a.z * xs[i] * w.z, a.w = a.w * xs[i] * w.w;
    }
    return a;
}

template <int T, int R, int NR, bool NORM>
HD void dot_unit(const unit (&t)[R], int64_t u, const float *xb, const float *nw, const float *xs,
                 int64_t k, int nr, float (&acc)[R][NR]) {
    constexpr int E = traits<T>::E;
    float sc[R][4];
#pragma unroll
    for (int s = 0; s < R; s++)
        unit_scales<T>(t[s], u, sc[s]);
    if constexpr (T == MTPLX_TYPE_Q8_0 || T == MTPLX_TYPE_Q4_K) {
#pragma unroll
        for (int run = 0; run < E / 16; run++) { /* Q8_0: 1 run of 16; Q4_K: low, high */
            float sq[R][NR], sx[NR];
#pragma unroll
            for (int i = 0; i < NR; i++) {
                sx[i] = 0.f;
#pragma unroll
                for (int s = 0; s < R; s++)
                    sq[s][i] = 0.f;
            }
#pragma unroll
            for (int g = 4 * run; g < 4 * run + 4; g++) {
                float q[R][4];
#pragma unroll
                for (int s = 0; s < R; s++)
                    quant4<T>(t[s], g, q[s]);
                const int64_t e = elem_of<T>(u, g);
#pragma unroll
                for (int i = 0; i < NR; i++) {
                    if (i < nr) {
                        float4 a = load_x<NORM>(xb + e, nw + e, xs, i, k);
                        if constexpr (T == MTPLX_TYPE_Q4_K)
                            sx[i] = (((sx[i] + a.x) + a.y) + a.z) + a.w;
#pragma unroll
                        for (int s = 0; s < R; s++)
                            sq[s][i] = dot4_acc(q[s], a, sq[s][i]);
                    }
                }
            }
#pragma unroll
            for (int s = 0; s < R; s++)
#pragma unroll
                for (int i = 0; i < NR; i++) {
                    if constexpr (T == MTPLX_TYPE_Q8_0)
                        acc[s][i] = fmaf(sc[s][0], sq[s][i], acc[s][i]);
                    else
                        acc[s][i] += fmaf(sc[s][2 * run], sq[s][i], -(sc[s][2 * run + 1] * sx[i]));
                }
        }
    } else {
#pragma unroll
        for (int g = 0; g < E / 4; g++) {
            float w[R][4];
#pragma unroll
            for (int s = 0; s < R; s++)
                deq4<T>(t[s], sc[s], g, w[s]);
            const int64_t e = elem_of<T>(u, g);
#pragma unroll
            for (int i = 0; i < NR; i++) {
                if (i < nr) {
                    float4 a = load_x<NORM>(xb + e, nw + e, xs, i, k);
#pragma unroll
                    for (int s = 0; s < R; s++)
                        acc[s][i] = dot4_acc(w[s], a, acc[s][i]);
                }
            }
        }
    }
}

constexpr int MMV_WARPS = 4;

/* Block: MMV_WARPS warps; warp w of block b takes R row slots (in SWIGLU
 * mode R/2 gate rows and the same R/2 up rows); x rows [NR * blockIdx.y, +NR). */
template <int T, int R, int NR, int U, bool NORM>
__global__ void __launch_bounds__(MMV_WARPS * 32)
    mmv_kernel(mtplx_cuda_mmv_job job, int64_t k, const float *__restrict__ x, int64_t n) {
    constexpr int E = traits<T>::E;
    const int lane = threadIdx.x & 31;
    const int64_t wg = (int64_t)blockIdx.x * MMV_WARPS + (threadIdx.x >> 5);
    const bool swiglu = job.mode == MTPLX_MMV_SWIGLU;
    const int64_t i0 = (int64_t)blockIdx.y * NR;
    const int nr = n - i0 < NR ? (int)(n - i0) : NR;
    const int64_t rb = row_bytes(T, k);

    const uint8_t *wp[R], *ap[R];
    int64_t row[R];
    int seg[R];
    bool live[R];
    bool any = false;
#pragma unroll
    for (int s = 0; s < R; s++) {
        int64_t g;
        int sg;
        if (swiglu) {
            g = wg * (R / 2) + s % (R / 2);
            sg = s < R / 2 ? 0 : 1;
        } else {
            stacked_row(job.m[0], job.m[1], job.m[2], job.nseg, wg * R + s, sg, g);
        }
        live[s] = g < pick3(sg, job.m[0], job.m[1], job.m[2]);
        any |= live[s];
        if (!live[s]) g = 0; /* a real row to read; its result is dropped */
        row[s] = g, seg[s] = sg;
        const uint8_t *base = (const uint8_t *)pick3(sg, job.w[0], job.w[1], job.w[2]);
        wp[s] = base + g * rb;
        ap[s] = wp[s] + k; /* Q8_0's scales (unused otherwise) */
    }
    if (!any) return;
    const float *xb = x + i0 * k;

    /* RMS norm of the x rows (NORM): every warp works out the scales of its
     * x rows itself (cheap next to the weights; no launch, no sync) */
    float xs[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) {
        xs[i] = 0.f;
        if (NORM && i < nr)
            xs[i] = norm_scale(warp_sum(sumsq_part(xb + i * k, k, lane)), k, job.eps);
    }

    float acc[R][NR];
#pragma unroll
    for (int s = 0; s < R; s++)
#pragma unroll
        for (int i = 0; i < NR; i++)
            acc[s][i] = 0.f;
    const int64_t nu = k / E;
    for (int64_t u0 = lane; u0 < nu; u0 += 32 * U) {
        unit t[U][R] = {};
#pragma unroll
        for (int j = 0; j < U; j++) {
            int64_t u = u0 + 32 * j;
            if (u < nu) {
#pragma unroll
                for (int s = 0; s < R; s++)
                    load_unit<T>(wp[s], ap[s], u, t[j][s]);
            }
        }
#pragma unroll
        for (int j = 0; j < U; j++) {
            int64_t u = u0 + 32 * j;
            if (u >= nu) break;
            dot_unit<T, R, NR, NORM>(t[j], u, xb, job.norm, xs, k, nr, acc);
        }
    }
#pragma unroll
    for (int s = 0; s < R; s++)
#pragma unroll
        for (int i = 0; i < NR; i++)
            acc[s][i] = i < nr ? warp_sum(acc[s][i]) : 0.f;

            /* every lane holds every sum: lane (s * NR + i) % 32 writes (s, i). The
             * "+ 0" terms keep the fused results equal to matmul (+ no bias) then
             * add / silu_mul, down to the sign of a zero. */
#pragma unroll
    for (int s = 0; s < R; s++) {
        if (!live[s] || (swiglu && s >= R / 2)) continue;
        const int64_t ms = pick3(seg[s], job.m[0], job.m[1], job.m[2]);
        float *y = pick3(seg[s], job.y[0], job.y[1], job.y[2]);
        const float *bias = pick3(seg[s], job.bias[0], job.bias[1], job.bias[2]);
        const float b = bias ? bias[row[s]] : 0.f;
#pragma unroll
        for (int i = 0; i < NR; i++) {
            if (i >= nr || lane != ((s * NR + i) & 31)) continue;
            float *out = y + (i0 + i) * ms + row[s];
            if (job.mode == MTPLX_MMV_STORE) {
                *out = acc[s][i] + b;
            } else if (job.mode == MTPLX_MMV_ADD) {
                *out = *out + (acc[s][i] + 0.f);
            } else {
                float gt = acc[s][i] + 0.f, up = acc[s + R / 2][i] + 0.f;
                *out = gt / (1.f + expf(-gt)) * up;
            }
        }
    }
}

/* U: units in flight per row and lane, so about 64-128 bytes per lane are
 * loading, fewer at large NR where registers run short (ptxas -v: up to
 * ~200). */
template <int T, int R, int NR>
cudaError_t launch_r(cudaStream_t st, const mtplx_cuda_mmv_job *job, int64_t rows, int64_t k,
                     const float *x, int64_t n) {
    constexpr int U = NR >= 16                        ? (traits<T>::E >= 16 ? 1 : 2)
                      : traits<T>::E >= 32 || NR >= 8 ? 2
                                                      : 4;
    int64_t per_block = (int64_t)MMV_WARPS * (job->mode == MTPLX_MMV_SWIGLU ? R / 2 : R);
    dim3 grid((unsigned)((rows + per_block - 1) / per_block), (unsigned)((n + NR - 1) / NR));
    if (job->norm)
        mmv_kernel<T, R, NR, U, true><<<grid, MMV_WARPS * 32, 0, st>>>(*job, k, x, n);
    else
        mmv_kernel<T, R, NR, U, false><<<grid, MMV_WARPS * 32, 0, st>>>(*job, k, x, n);
    return cudaGetLastError();
}

/* R rows per warp: 4 while x is 1-2 rows and the weight has rows enough to
 * fill the GPU in blocks of 16 (x reuse matters most, registers are
 * plenty), else 2 (more blocks; and the accumulators R * NR grow with NR).
 * R changes speed only, never a result. */
template <int T, int NR>
cudaError_t launch_nr(cudaStream_t st, const mtplx_cuda_mmv_job *job, int64_t k, const float *x,
                      int64_t n) {
    bool swiglu = job->mode == MTPLX_MMV_SWIGLU;
    int64_t rows = swiglu ? job->m[0] : job->m[0] + job->m[1] + job->m[2];
    if constexpr (NR <= 2)
        if ((swiglu ? 2 * rows : rows) >= 4096) return launch_r<T, 4, NR>(st, job, rows, k, x, n);
    return launch_r<T, 2, NR>(st, job, rows, k, x, n);
}

template <int T>
cudaError_t launch_type(cudaStream_t st, const mtplx_cuda_mmv_job *job, int64_t k, const float *x,
                        int64_t n) {
    if (n <= 1) return launch_nr<T, 1>(st, job, k, x, n);
    if (n <= 2) return launch_nr<T, 2>(st, job, k, x, n);
    if (n <= 4) return launch_nr<T, 4>(st, job, k, x, n);
    if (n <= 8) return launch_nr<T, 8>(st, job, k, x, n);
    return launch_nr<T, 16>(st, job, k, x, n);
}

int unit_elems(int type) {
    switch (type) {
    case MTPLX_TYPE_F32: return traits<MTPLX_TYPE_F32>::E;
    case MTPLX_TYPE_F16: return traits<MTPLX_TYPE_F16>::E;
    case MTPLX_TYPE_BF16: return traits<MTPLX_TYPE_BF16>::E;
    case MTPLX_TYPE_Q8_0: return traits<MTPLX_TYPE_Q8_0>::E;
    case MTPLX_TYPE_Q4_K: return traits<MTPLX_TYPE_Q4_K>::E;
    default: return 0;
    }
}

/* Block j of row r (b = r * nb + j): quants to the row's bytes [32 j, +32),
 * the scale to f16 slot j after the k quants. */
HD void repack_block(const uint8_t *raw, uint8_t *out, int64_t k, int64_t b) {
    int64_t nb = k / QK8_0, r = b / nb, j = b % nb;
    const uint8_t *src = raw + b * (int64_t)sizeof(block_q8_0);
    uint8_t *q = out + r * row_bytes(MTPLX_TYPE_Q8_0, k);
    q[k + 2 * j] = src[0], q[k + 2 * j + 1] = src[1];
    for (int i = 0; i < QK8_0; i++)
        q[j * QK8_0 + i] = src[2 + i];
}

__global__ void repack_q8_0_kernel(const uint8_t *__restrict__ raw, uint8_t *__restrict__ out,
                                   int64_t m, int64_t k) {
    int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b < m * (k / QK8_0)) repack_block(raw, out, k, b);
}

template <int T> void deq_row_host(const uint8_t *row, const uint8_t *aux, int64_t k, float *out) {
    for (int64_t u = 0; u < k / traits<T>::E; u++) {
        unit t = {};
        float sc[4] = {0, 0, 0, 0};
        load_unit<T>(row, aux, u, t);
        unit_scales<T>(t, u, sc);
        for (int g = 0; g < traits<T>::E / 4; g++)
            deq4<T>(t, sc, g, out + elem_of<T>(u, g));
    }
}

/* The kernel's arithmetic for one weight row against n <= 16 x rows, on
 * the host: 32 lanes' partial sums, then the warp's butterfly. */
/* The warp butterfly (v += shfl_xor(v, o), all lanes at once) on the host. */
void butterfly_host(float (*lanes)[MTPLX_CUDA_MMV_ROWS]) {
    for (int o = 16; o > 0; o >>= 1) {
        float nx[32][MTPLX_CUDA_MMV_ROWS];
        for (int l = 0; l < 32; l++)
            for (int i = 0; i < MTPLX_CUDA_MMV_ROWS; i++)
                nx[l][i] = lanes[l][i] + lanes[l ^ o][i];
        memcpy(lanes, nx, sizeof nx);
    }
}

template <int T>
void row_host(const uint8_t *row, const uint8_t *aux, int64_t k, const float *x, int nr,
              const float *norm, float eps, float *out) {
    float xs[MTPLX_CUDA_MMV_ROWS] = {0};
    if (norm) {
        float lanes[32][MTPLX_CUDA_MMV_ROWS] = {};
        for (int l = 0; l < 32; l++)
            for (int i = 0; i < nr; i++)
                lanes[l][i] = sumsq_part(x + i * k, k, l);
        butterfly_host(lanes);
        for (int i = 0; i < nr; i++)
            xs[i] = norm_scale(lanes[0][i], k, eps);
    }
    float lanes[32][MTPLX_CUDA_MMV_ROWS];
    for (int l = 0; l < 32; l++) {
        float acc[1][MTPLX_CUDA_MMV_ROWS] = {};
        for (int64_t u = l; u < k / traits<T>::E; u += 32) {
            unit t[1] = {};
            load_unit<T>(row, aux, u, t[0]);
            if (norm)
                dot_unit<T, 1, MTPLX_CUDA_MMV_ROWS, true>(t, u, x, norm, xs, k, nr, acc);
            else
                dot_unit<T, 1, MTPLX_CUDA_MMV_ROWS, false>(t, u, x, norm, xs, k, nr, acc);
        }
        memcpy(lanes[l], acc[0], sizeof lanes[l]);
    }
    butterfly_host(lanes);
    for (int i = 0; i < nr; i++)
        out[i] = lanes[0][i];
}

} // namespace

extern "C" {

size_t mtplx_cuda_q8_0_packed_row(int64_t k) {
    return (size_t)row_bytes(MTPLX_TYPE_Q8_0, k);
}

bool mtplx_cuda_mmv_ok(int type, int64_t k, const float *x, int64_t n) {
    int e = unit_elems(type);
    return e > 0 && n >= 1 && n <= MTPLX_CUDA_MMV_ROWS && k > 0 && k % e == 0 &&
           ((uintptr_t)x & 15) == 0;
}

cudaError_t mtplx_cuda_mmv(cudaStream_t s, int type, const mtplx_cuda_mmv_job *job, int64_t k,
                           const float *x, int64_t n) {
    if (!mtplx_cuda_mmv_ok(type, k, x, n) || job->nseg < 1 || job->nseg > 3 ||
        (job->mode == MTPLX_MMV_SWIGLU && (job->nseg != 2 || job->m[0] != job->m[1])))
        return cudaErrorInvalidValue;
    mtplx_cuda_mmv_job j = *job;
    for (int i = j.nseg; i < 3; i++)
        j.m[i] = 0, j.w[i] = NULL, j.bias[i] = NULL, j.y[i] = NULL;
    if (j.mma && mtplx_cuda_mmv_i8_ok(type, k, &j)) return mtplx_cuda_mmv_i8(s, type, &j, k, x, n);
    if (j.mma && mtplx_cuda_mmv_tc_ok(type, k, &j)) return mtplx_cuda_mmv_tc(s, type, &j, k, x, n);
    if (j.tiled) return cudaErrorInvalidValue; /* only mmv_tc.cu reads tiled weights */
    switch (type) {
    case MTPLX_TYPE_F32: return launch_type<MTPLX_TYPE_F32>(s, &j, k, x, n);
    case MTPLX_TYPE_F16: return launch_type<MTPLX_TYPE_F16>(s, &j, k, x, n);
    case MTPLX_TYPE_BF16: return launch_type<MTPLX_TYPE_BF16>(s, &j, k, x, n);
    case MTPLX_TYPE_Q8_0: return launch_type<MTPLX_TYPE_Q8_0>(s, &j, k, x, n);
    case MTPLX_TYPE_Q4_K: return launch_type<MTPLX_TYPE_Q4_K>(s, &j, k, x, n);
    default: return cudaErrorInvalidValue;
    }
}

int mtplx_cuda_repack_q8_0_host(const void *raw, void *out, int64_t m, int64_t k, int layout) {
    if (k <= 0 || k % 64 || m < 0) return -1;
    if (layout == MTPLX_CUDA_W_Q8_I8) {
        mtplx_cuda_repack_q8_0_i8_host(raw, out, m, k);
        return 0;
    }
    if (layout != MTPLX_CUDA_W_Q8_PACKED) return -1;
    for (int64_t b = 0; b < m * (k / QK8_0); b++)
        repack_block((const uint8_t *)raw, (uint8_t *)out, k, b);
    return 0;
}

cudaError_t mtplx_cuda_repack_q8_0(cudaStream_t s, const void *raw, void *out, int64_t m,
                                   int64_t k) {
    int64_t nb = m * (k / QK8_0);
    if (nb == 0) return cudaSuccess;
    repack_q8_0_kernel<<<(unsigned)((nb + 255) / 256), 256, 0, s>>>((const uint8_t *)raw,
                                                                    (uint8_t *)out, m, k);
    return cudaGetLastError();
}

int mtplx_cuda_mmv_row_host(int type, const void *row, int64_t k, const float *x, int64_t n,
                            const float *norm, float eps, float *out) {
    const uint8_t *r = (const uint8_t *)row;
    if (n < 1 || n > MTPLX_CUDA_MMV_ROWS || k % 32) return -1;
    int nr = (int)n;
    switch (type) {
    case MTPLX_TYPE_F32: row_host<MTPLX_TYPE_F32>(r, NULL, k, x, nr, norm, eps, out); return 0;
    case MTPLX_TYPE_F16: row_host<MTPLX_TYPE_F16>(r, NULL, k, x, nr, norm, eps, out); return 0;
    case MTPLX_TYPE_BF16: row_host<MTPLX_TYPE_BF16>(r, NULL, k, x, nr, norm, eps, out); return 0;
    case MTPLX_TYPE_Q4_K: row_host<MTPLX_TYPE_Q4_K>(r, NULL, k, x, nr, norm, eps, out); return 0;
    case MTPLX_TYPE_Q8_0: {
        uint8_t *p = (uint8_t *)malloc((size_t)row_bytes(MTPLX_TYPE_Q8_0, k));
        if (!p) return -1;
        for (int64_t b = 0; b < k / QK8_0; b++)
            repack_block(r, p, k, b);
        row_host<MTPLX_TYPE_Q8_0>(p, p + k, k, x, nr, norm, eps, out);
        free(p);
        return 0;
    }
    default: return -1;
    }
}

int mtplx_cuda_mmv_deq_row_host(int type, const void *row, int64_t k, float *out) {
    const uint8_t *r = (const uint8_t *)row;
    switch (type) {
    case MTPLX_TYPE_F32: deq_row_host<MTPLX_TYPE_F32>(r, NULL, k, out); return 0;
    case MTPLX_TYPE_F16: deq_row_host<MTPLX_TYPE_F16>(r, NULL, k, out); return 0;
    case MTPLX_TYPE_BF16: deq_row_host<MTPLX_TYPE_BF16>(r, NULL, k, out); return 0;
    case MTPLX_TYPE_Q4_K: deq_row_host<MTPLX_TYPE_Q4_K>(r, NULL, k, out); return 0;
    case MTPLX_TYPE_Q8_0: {
        /* repacked as the upload does it, one row */
        uint8_t *p = (uint8_t *)malloc((size_t)row_bytes(MTPLX_TYPE_Q8_0, k));
        if (!p) return -1;
        for (int64_t b = 0; b < k / QK8_0; b++)
            repack_block(r, p, k, b);
        deq_row_host<MTPLX_TYPE_Q8_0>(p, p + k, k, out);
        free(p);
        return 0;
    }
    default: return -1;
    }
}

} // extern "C"
