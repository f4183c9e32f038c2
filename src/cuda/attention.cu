/* attention.cu: the attention kernels of the CUDA backend
 * (cuda_kernels.h's mtplx_cuda_attention, mtplx_cuda_attention_flash).
 *
 * A step (decode, or a verify step of at most MTPLX_CUDA_STEP_ROWS rows):
 * one block per (token, head) with an online softmax per warp (attn_kernel),
 * or for a row of 1024 positions or more one per KV head serving all the
 * step's queries of its group (attn_group_kernel; MTPLX_CUDA_ATTN_GROUP=N
 * moves the threshold); both split a long context over blocks
 * (flash-decoding) and merge the runs in a fixed order, so a row is the same
 * bits in a decode step and in a verify step. For a prefill, fa_kernel tiles
 * queries and keys through shared memory. All math is f32, as the CPU's.
 *
 * Positions come from the step block when dyn is set (CUDA graphs), as in
 * kernels.cu; the step kernels take part in programmatic dependent launch
 * (cuda_util.cuh's launch_k) and read what a predecessor wrote through L2
 * (__ldcg). */

/* core.h is C11; this file is C++. */
#define _Noreturn [[noreturn]]
extern "C" {
#include "kernels/kernels.h"
}
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_util.cuh"

#include <cuda_fp16.h>
#include <limits.h>
#include <math.h>

namespace {

/* ---- attention ---- */
constexpr int ATT_WARPS = 8;
constexpr int ATT_MAXE = 8; /* head_dim <= 32 * ATT_MAXE */

/* Through L2 (.cg), as q: the kernel before (launch_k's dependent launch)
 * wrote both, and the read-only path (__restrict__ lets the compiler pick
 * it) promises nothing about data written while a kernel runs. */
template <bool F16>
__device__ __forceinline__ float kv_load(const void *base, size_t idx) {
    if (F16) return __half2float(__ldcg((const __half *)base + idx));
    return __ldcg((const float *)base + idx);
}

/* Block (head h, token t, split sp): warps take cache positions round-robin,
 * each with its own running max / sum / output (online softmax); lanes split
 * head_dim (element lane + 32 e). The warps' partial results are merged at
 * the end.
 *
 * Long contexts: one block a (token, head) is 16 blocks for a 0.6B decode
 * step, each walking every cached position, a dependent load or two a
 * position per warp. So a token's n_kv positions are split into
 * ns = attn_splits(n_kv) runs of equal length, one block each (split-k,
 * "flash-decoding"); each writes its run's max, sum and unnormalised output
 * to sa.part, and the last of them to finish (a counter per token and head,
 * left at 0 again) merges the runs in order. ns and the runs depend on n_kv
 * alone, never on how many tokens the step has, so a token's output is the
 * same bits in a decode step and in a verify step (greedy MTP == AR). At
 * ns == 1 (n_kv <= sa.chunk, or splitting off) the block is the plain
 * kernel: same arithmetic, same bits as before splitting existed. */
__device__ __forceinline__ int attn_splits(int64_t n_kv, const mtplx_cuda_attn_split &sa) {
    int64_t ns = (n_kv + sa.chunk - 1) / sa.chunk;
    return ns < sa.splits ? (int)ns : sa.splits;
}

/* The last block to finish a (token, head) merges its ns <= 64 runs'
 * partials (max, sum, output relative to the max; stride floats apart)
 * into op[0, hd), one warp, through L2 (other blocks wrote them). Lane l
 * holds runs l and l + 32 and their factors exp(m_i - M); the sum of
 * s_i f_i is a butterfly (every lane the same bits); each output sums its
 * runs in order, U runs' loads for all its dims at a time. The loop
 * before was a serial chain of L2 loads (three a run and dim): 0.6B's step
 * attention at 4096 positions is 7 us a layer faster this way
 * (bench/RESULTS.md section 35). The arithmetic
 * depends on ns and the partials alone, so a row is the same bits in a
 * decode step and in a verify step. */
template <int U = 4>
__device__ __forceinline__ void attn_merge_warp(const float *part, int ns, size_t stride, int hd,
                                                float *op, int lane) {
    const int r1 = lane + 32;
    float m0 = lane < ns ? __ldcg(part + (size_t)lane * stride) : -INFINITY;
    float m1 = r1 < ns ? __ldcg(part + (size_t)r1 * stride) : -INFINITY;
    float s0 = lane < ns ? __ldcg(part + (size_t)lane * stride + 1) : 0.f;
    float s1 = r1 < ns ? __ldcg(part + (size_t)r1 * stride + 1) : 0.f;
    float Mx = fmaxf(m0, m1);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) Mx = fmaxf(Mx, __shfl_xor_sync(0xFFFFFFFFu, Mx, o));
    const float f0 = lane < ns ? expf(m0 - Mx) : 0.f, f1 = r1 < ns ? expf(m1 - Mx) : 0.f;
    const float inv = 1.f / warp_sum(s0 * f0 + s1 * f1);
    constexpr int D = ATT_MAXE; /* dims a lane (hd <= 32 D); U: runs a batch */
    float v[D];
#pragma unroll
    for (int d = 0; d < D; d++) v[d] = 0.f;
    for (int i0 = 0; i0 < ns; i0 += U) {
        float x[U][D];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int d = 0; d < D; d++) {
                int j = lane + 32 * d;
                x[u][d] = i0 + u < ns && j < hd ? __ldcg(part + (size_t)(i0 + u) * stride + 2 + j) : 0.f;
            }
#pragma unroll
        for (int u = 0; u < U; u++) {
            int i = i0 + u; /* (uniform across the warp) */
            float f = __shfl_sync(0xFFFFFFFFu, i < 32 ? f0 : f1, i & 31);
            if (i < ns)
#pragma unroll
                for (int d = 0; d < D; d++) v[d] += x[u][d] * f;
        }
    }
#pragma unroll
    for (int d = 0; d < D; d++)
        if (lane + 32 * d < hd) op[lane + 32 * d] = v[d] * inv;
}

template <bool F16>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_kernel(const float *__restrict__ q, int n_head, int n_head_kv, int hd,
                const void *__restrict__ K, const void *__restrict__ V, int64_t pos0, float scale,
                float *__restrict__ out, const mtplx_cuda_step *__restrict__ dyn,
                mtplx_cuda_attn_split sa) {
    pdl_trigger(), pdl_wait(); /* (launch_k) */
    pos0 += dyn_pos(dyn);
    int h = blockIdx.x, sp = blockIdx.z;
    int64_t t = blockIdx.y;
    int64_t n_kv = pos0 + t + 1;
    int ns = attn_splits(n_kv, sa);
    if (sp >= ns || n_kv >= sa.from) return; /* (the latter: attn_group_kernel's row) */
    /* runs of len = ceil(n_kv / ns) positions; none is empty: n_kv >
     * chunk (ns - 1) and chunk >= ns (the launcher caps the splits at the
     * chunk) give n_kv > (ns - 1)^2, so (ns - 1) len < n_kv */
    int64_t len = (n_kv + ns - 1) / ns, p_end = min(n_kv, (int64_t)(sp + 1) * len);
    int kvh = h / (n_head / n_head_kv), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float *qp = q + ((size_t)t * n_head + h) * hd;
    float qr[ATT_MAXE], acc[ATT_MAXE];
#pragma unroll
    for (int e = 0; e < ATT_MAXE; e++) {
        int j = lane + 32 * e;
        qr[e] = j < hd ? __ldcg(qp + j) : 0.f;
        acc[e] = 0.f;
    }
    float mx = -INFINITY, sum = 0.f;
    size_t row = (size_t)n_head_kv * hd, off = (size_t)kvh * hd;
    for (int64_t p = sp * len + warp; p < p_end; p += ATT_WARPS) {
        size_t base = (size_t)p * row + off;
        float s = 0.f;
#pragma unroll
        for (int e = 0; e < ATT_MAXE; e++) {
            int j = lane + 32 * e;
            if (j < hd) s += qr[e] * kv_load<F16>(K, base + j);
        }
        s = warp_sum(s) * scale;
        float mn = fmaxf(mx, s), c = expf(mx - mn), pw = expf(s - mn);
        sum = sum * c + pw;
#pragma unroll
        for (int e = 0; e < ATT_MAXE; e++) {
            int j = lane + 32 * e;
            if (j < hd) acc[e] = acc[e] * c + pw * kv_load<F16>(V, base + j);
        }
        mx = mn;
    }
    __shared__ float s_mx[ATT_WARPS], s_sum[ATT_WARPS];
    __shared__ float s_acc[ATT_WARPS][32 * ATT_MAXE];
    __shared__ bool s_last;
    if (lane == 0) {
        s_mx[warp] = mx;
        s_sum[warp] = sum;
    }
#pragma unroll
    for (int e = 0; e < ATT_MAXE; e++) s_acc[warp][lane + 32 * e] = acc[e];
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, s_mx[w]);
    float f[ATT_WARPS], tot = 0.f;
#pragma unroll
    for (int w = 0; w < ATT_WARPS; w++) {
        f[w] = s_sum[w] > 0.f ? expf(s_mx[w] - M) : 0.f;
        tot += s_sum[w] * f[w];
    }
    float *op = out + ((size_t)t * n_head + h) * hd;
    /* ns == 1: the output; else this run's partial (max, sum, output
     * relative to the max) at mine */
    size_t stride = (size_t)hd + 2;
    float *part = ns == 1 ? nullptr : sa.part + ((size_t)t * n_head + h) * (size_t)sa.splits * stride;
    float *mine = ns == 1 ? nullptr : part + (size_t)sp * stride;
    const float inv = 1.f / tot;
    for (int j = threadIdx.x; j < hd; j += blockDim.x) {
        float v = 0.f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) v += s_acc[w][j] * f[w];
        if (ns == 1) op[j] = v * inv;
        else mine[2 + j] = v;
    }
    if (ns == 1) return;
    if (threadIdx.x == 0) mine[0] = M, mine[1] = tot;
    __threadfence();
    __syncthreads();
    int *cnt = sa.cnt + t * n_head + h;
    if (threadIdx.x == 0) s_last = atomicAdd(cnt, 1) == ns - 1;
    __syncthreads();
    if (!s_last || warp != 0) return;
    __threadfence();
    attn_merge_warp<2>(part, ns, stride, hd, op, lane); /* (2: the kernel's registers stay <= 64) */
    if (lane == 0) *cnt = 0; /* for the next launch */
}

/* ---- step attention by KV head (attn_group_kernel) ----
 * attn_kernel's block per (token, query head) reads that token's K/V rows
 * for itself: a verify step of n tokens, with g query heads to a KV head,
 * reads each row n g times, and each warp waits on one position's loads at
 * a time. Here block (KV head, run sp, chunk of GA_RC queries) serves every
 * query of the step (a token and a head of the group: a "qv") that has a
 * run sp. It stages the union of their runs through shared memory in tiles
 * of T positions (cp.async, two stages), and per tile:
 *   scores: lane = position, GA_QB qvs at a time; head_dim in GA_NP
 *     parts (a warp each), each a sequential dot product, the parts summed
 *     in order, times scale;
 *   factors: per qv, over its run's positions in the tile, the running max
 *     M (a warp's prefix max, carried from tile to tile) and
 *     c = exp(M_prev - M), w = exp(s - M);
 *   P.V: a warp per qv and 64 dims, position by position in order:
 *     sum = sum c + w, acc = acc c + w v.
 * So a qv's numbers are the sequential online softmax over its run, the
 * same bits whatever the tile edges, the other qvs or their number: a
 * token's output in a decode step equals its row of a verify step. Runs
 * and their merge are attn_kernel's (attn_splits; a counter per token and
 * head, the last block merges in order). Needs head_dim a multiple of a
 * 16-byte chunk's elements and 16-byte aligned K and V
 * (mtplx_cuda_attention_group_ok). */
constexpr int GA_WARPS = 8, GA_RC = 16, GA_QB = 4, GA_NP = 4, GA_SLICES = 4 /* of 64 dims */;
constexpr int GA_MI = GA_RC * GA_SLICES / GA_WARPS; /* the most P.V items a warp holds */

/* 16-byte chunks between staged rows: odd, so that 8 lanes reading chunk c
 * of 8 rows hit 8 different bank groups */
__host__ __device__ __forceinline__ int ga_row_chunks(int hd, bool f16) { return (hd / (f16 ? 8 : 4)) | 1; }
size_t ga_smem_bytes(int hd, bool f16, int T) {
    size_t rs = (size_t)ga_row_chunks(hd, f16);
    return 2 * 2 * (size_t)T * rs * 16 + (size_t)GA_RC * hd * 4 + (2 + GA_NP) * (size_t)GA_RC * T * 4;
}
constexpr size_t GA_MAX_SMEM = 160 * 1024;
/* positions a tile: want (0: 64, or 32 where a row is over 256 bytes),
 * halved down to 16 while the block's shared memory is over GA_MAX_SMEM */
int ga_tile(int hd, bool f16, int want) {
    int T = want == 16 || want == 32 || want == 64 ? want : hd * (f16 ? 2 : 4) <= 256 ? 64 : 32;
    while (T > 16 && ga_smem_bytes(hd, f16, T) > GA_MAX_SMEM) T /= 2;
    return T;
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

template <bool F16> __device__ __forceinline__ void ga_unpack(uint4 u, float *f) {
    if (F16) {
        const __half2 *h = (const __half2 *)&u;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 t = __half22float2(h[k]);
            f[2 * k] = t.x, f[2 * k + 1] = t.y;
        }
    } else {
        f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y);
        f[2] = __uint_as_float(u.z), f[3] = __uint_as_float(u.w);
    }
}

/* elements d, d + 1 of a staged V row */
template <bool F16> __device__ __forceinline__ float2 ga_v2(const uint4 *row, int d) {
    if (F16) return __half22float2(((const __half2 *)row)[d >> 1]);
    return ((const float2 *)row)[d >> 1];
}

template <bool F16>
__global__ void __launch_bounds__(GA_WARPS * 32)
    attn_group_kernel(const float *__restrict__ q, int n_tok, int n_head, int n_head_kv, int hd,
                      const void *__restrict__ K, const void *__restrict__ V, int64_t pos0,
                      float scale, float *__restrict__ out,
                      const mtplx_cuda_step *__restrict__ dyn, mtplx_cuda_attn_split sa) {
    constexpr int EPC = F16 ? 8 : 4, ES = F16 ? 2 : 4; /* elements a chunk; bytes one */
    extern __shared__ uint4 ga_sm[];
    __shared__ int s_lo[GA_RC], s_hi[GA_RC], s_ns[GA_RC], s_u0, s_u1;
    __shared__ float s_m[GA_RC];
    __shared__ bool s_last[GA_RC];
    pdl_trigger(), pdl_wait(); /* (launch_k) */
    pos0 += dyn_pos(dyn);
    const int g = blockIdx.x, sp = blockIdx.y, grp = n_head / n_head_kv;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int i0 = blockIdx.z * GA_RC, nq = min(GA_RC, n_tok * grp - i0);
    const int cpc = hd / EPC, rs = ga_row_chunks(hd, F16), T = sa.tile;
    const int slices = (hd + 63) >> 6;
    float *qs = (float *)(ga_sm + 4 * T * rs);    /* [GA_RC][hd] */
    float *cf = qs + GA_RC * hd, *wf = cf + GA_RC * T; /* [GA_RC][T]: c, w */
    float *sc = wf + GA_RC * T; /* [GA_NP][GA_RC][T]: the scores' parts */
    /* qv i0 + i is token qv / grp, head g grp + qv % grp: t n_head + h */
    auto tok_head = [&](int i) { return (i0 + i) / grp * n_head + g * grp + (i0 + i) % grp; };

    /* each qv's run [lo, hi) of this split (empty past its ns), their union */
    if (threadIdx.x == 0) s_u0 = INT_MAX, s_u1 = 0;
    __syncthreads();
    if (threadIdx.x < nq) {
        int i = threadIdx.x, t = (i0 + i) / grp;
        int64_t n_kv = pos0 + t + 1;
        int ns = attn_splits(n_kv, sa), lo = 0, hi = 0;
        if (sp < ns && n_kv >= sa.from) { /* (else no run here: attn_kernel's row) */
            int64_t len = (n_kv + ns - 1) / ns;
            lo = (int)(sp * len), hi = (int)min(n_kv, (int64_t)(sp + 1) * len);
            atomicMin(&s_u0, lo), atomicMax(&s_u1, hi);
        }
        s_lo[i] = lo, s_hi[i] = hi, s_ns[i] = ns, s_m[i] = -INFINITY, s_last[i] = false;
    }
    /* whether a qv here has a run and others: then the partials and merge */
    const bool merging = __syncthreads_or(threadIdx.x < nq && s_ns[threadIdx.x] > 1 &&
                                          s_lo[threadIdx.x] < s_hi[threadIdx.x]);
    const int u0 = s_u0, u1 = s_u1;
    if (u1 <= u0) return;

    const size_t prow = (size_t)n_head_kv * hd * ES; /* bytes from one position to the next */
    const char *kb = (const char *)K + (size_t)g * hd * ES, *vb = (const char *)V + (size_t)g * hd * ES;
    auto issue = [&](int p0, int st) {
        int rows = min(T, u1 - p0);
        uint4 *ks = ga_sm + (size_t)(2 * st) * T * rs, *vs = ks + T * rs;
        for (int idx = threadIdx.x; idx < rows * cpc; idx += GA_WARPS * 32) {
            int r = idx / cpc, c = idx - r * cpc;
            size_t at = (size_t)(p0 + r) * prow + (size_t)c * 16;
            cp_async16(ks + r * rs + c, kb + at);
            cp_async16(vs + r * rs + c, vb + at);
        }
        cp_async_commit();
    };
    issue(u0, 0);
    for (int idx = threadIdx.x; idx < nq * hd; idx += GA_WARPS * 32) {
        int i = idx / hd, j = idx - i * hd;
        qs[idx] = __ldcg(q + (size_t)tok_head(i) * hd + j);
    }

    float acc[GA_MI][2], sum[GA_MI];
#pragma unroll
    for (int m = 0; m < GA_MI; m++) acc[m][0] = acc[m][1] = sum[m] = 0.f;
    const int ntiles = (u1 - u0 + T - 1) / T, pgs = (T + 31) / 32, nqb = (nq + GA_QB - 1) / GA_QB;
    for (int k = 0; k < ntiles; k++) {
        const int p0 = u0 + k * T, rows = min(T, u1 - p0);
        if (k + 1 < ntiles) {
            issue(p0 + T, (k + 1) & 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* tile k staged (and qs, the first time) */
        const uint4 *ks = ga_sm + (size_t)(2 * (k & 1)) * T * rs, *vs = ks + T * rs;

        for (int it = warp; it < nqb * pgs * GA_NP; it += GA_WARPS) {
            int part = it % GA_NP, qb = it / (GA_NP * pgs);
            int r = (it / GA_NP - qb * pgs) * 32 + lane;
            if (r >= rows) continue;
            float d[GA_QB];
#pragma unroll
            for (int j = 0; j < GA_QB; j++) d[j] = 0.f;
            const uint4 *kr = ks + r * rs;
            for (int c = part * cpc / GA_NP; c < (part + 1) * cpc / GA_NP; c++) {
                float kf[EPC];
                ga_unpack<F16>(kr[c], kf);
#pragma unroll
                for (int j = 0; j < GA_QB; j++) {
                    int i = qb * GA_QB + j;
                    if (i < nq) {
                        const float4 *qq = (const float4 *)(qs + i * hd + c * EPC);
#pragma unroll
                        for (int e = 0; e < EPC / 4; e++) {
                            float4 qv = qq[e];
                            d[j] = fmaf(qv.x, kf[4 * e], d[j]);
                            d[j] = fmaf(qv.y, kf[4 * e + 1], d[j]);
                            d[j] = fmaf(qv.z, kf[4 * e + 2], d[j]);
                            d[j] = fmaf(qv.w, kf[4 * e + 3], d[j]);
                        }
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < GA_QB; j++)
                if (qb * GA_QB + j < nq) sc[(part * GA_RC + qb * GA_QB + j) * T + r] = d[j];
        }
        __syncthreads();

        for (int i = warp; i < nq; i += GA_WARPS) {
            int a = max(s_lo[i], p0) - p0, b = min(s_hi[i], p0 + rows) - p0;
            float carry = s_m[i];
            for (int r0 = a; r0 < b; r0 += 32) {
                int r = r0 + lane;
                bool ok = r < b;
                float s = -INFINITY;
                if (ok) {
                    s = sc[i * T + r];
#pragma unroll
                    for (int part = 1; part < GA_NP; part++) s += sc[(part * GA_RC + i) * T + r];
                    s *= scale;
                }
                float x = s;
#pragma unroll
                for (int o = 1; o < 32; o <<= 1) {
                    float y = __shfl_up_sync(0xFFFFFFFFu, x, o);
                    if (lane >= o) x = fmaxf(x, y);
                }
                float M = fmaxf(carry, x), Mp = __shfl_up_sync(0xFFFFFFFFu, M, 1);
                if (lane == 0) Mp = carry;
                if (ok) cf[i * T + r] = expf(Mp - M), wf[i * T + r] = expf(s - M);
                carry = __shfl_sync(0xFFFFFFFFu, M, 31);
            }
            __syncwarp(); /* every lane has read s_m[i] */
            if (lane == 0) s_m[i] = carry;
        }
        __syncthreads();

#pragma unroll
        for (int m = 0; m < GA_MI; m++) {
            int it = warp + GA_WARPS * m, i = it / slices, d0 = (it - i * slices) * 64 + 2 * lane;
            if (i >= nq) continue;
            int a = max(s_lo[i], p0) - p0, b = min(s_hi[i], p0 + rows) - p0;
            /* four positions' loads ahead of their arithmetic, which stays
             * in position order */
            const uint4 *vr = vs + (size_t)a * rs;
            int r = a;
            for (; r + 4 <= b; r += 4, vr += 4 * rs) {
                float c[4], w[4];
                float2 v[4];
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    c[u] = cf[i * T + r + u], w[u] = wf[i * T + r + u];
                    v[u] = d0 < hd ? ga_v2<F16>(vr + u * rs, d0) : make_float2(0.f, 0.f);
                }
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    sum[m] = fmaf(sum[m], c[u], w[u]);
                    acc[m][0] = fmaf(acc[m][0], c[u], w[u] * v[u].x);
                    acc[m][1] = fmaf(acc[m][1], c[u], w[u] * v[u].y);
                }
            }
            for (; r < b; r++, vr += rs) {
                float c = cf[i * T + r], w = wf[i * T + r];
                float2 v = d0 < hd ? ga_v2<F16>(vr, d0) : make_float2(0.f, 0.f);
                sum[m] = fmaf(sum[m], c, w);
                acc[m][0] = fmaf(acc[m][0], c, w * v.x);
                acc[m][1] = fmaf(acc[m][1], c, w * v.y);
            }
        }
        __syncthreads(); /* the stage is free for tile k + 2 */
    }

    /* a qv whose run is its whole context writes its output; else the run's
     * partial (max, sum, output relative to the max) at its split's slot */
    const size_t stride = (size_t)hd + 2;
#pragma unroll
    for (int m = 0; m < GA_MI; m++) {
        int it = warp + GA_WARPS * m, i = it / slices, sl = it - i * slices, d0 = sl * 64 + 2 * lane;
        if (i >= nq || s_lo[i] >= s_hi[i]) continue;
        int th = tok_head(i);
        if (s_ns[i] == 1) {
            float inv = 1.f / sum[m], *op = out + (size_t)th * hd;
            if (d0 < hd) op[d0] = acc[m][0] * inv, op[d0 + 1] = acc[m][1] * inv;
        } else {
            float *mine = sa.part + ((size_t)th * sa.splits + sp) * stride;
            if (d0 < hd) mine[2 + d0] = acc[m][0], mine[3 + d0] = acc[m][1];
            if (sl == 0 && lane == 0) mine[0] = s_m[i], mine[1] = sum[m];
        }
    }
    if (!merging) return;
    __threadfence();
    __syncthreads();
    if (threadIdx.x < nq && s_ns[threadIdx.x] > 1 && s_lo[threadIdx.x] < s_hi[threadIdx.x]) {
        int i = threadIdx.x;
        s_last[i] = atomicAdd(sa.cnt + tok_head(i), 1) == s_ns[i] - 1;
    }
    __syncthreads();
    __threadfence();
    /* the last block of a qv merges its runs, a warp each */
    for (int i = warp; i < nq; i += GA_WARPS) {
        if (!s_last[i]) continue;
        int th = tok_head(i);
        attn_merge_warp(sa.part + (size_t)th * sa.splits * stride, s_ns[i], stride, hd,
                        out + (size_t)th * hd, lane);
        if (lane == 0) sa.cnt[th] = 0; /* for the next launch */
    }
}

/* ---- flash-style attention for prefill (n_tok > MTPLX_CUDA_STEP_ROWS) ----
 * attn_kernel reads the whole causal prefix once per (token, head): fine for
 * a step of a few rows, n_tok times the K/V traffic for a prefill. Here a
 * block takes FA_QT query tokens of one head and walks the keys in tiles of
 * FA_KT positions staged in shared memory (as f32), so each K/V row is read
 * once per FA_QT queries (FlashAttention, Dao et al. 2022, without tensor
 * cores: f32 throughout, to agree with the CPU as attn_kernel does).
 * Warp w owns queries FA_QW w .. FA_QW w + FA_QW - 1 of the tile. Scores: lane
 * l takes key l of the tile against the warp's queries (K rows padded to
 * hd + 1 floats, so the 32 lanes read 32 banks). Then per query an online
 * softmax update (running max, sum, rescaled output) and P.V with lanes
 * splitting head_dim (element lane + 32 e, as attn_kernel). Every query sees
 * key 0, so a running max is finite from the first tile on, and keys it must
 * not see (the causal mask, positions past the block's last query) weigh
 * exactly 0. */
constexpr int FA_WARPS = 4, FA_QW = 4, FA_QT = FA_WARPS * FA_QW, FA_KT = 32;
static_assert(FA_KT == 32, "a tile's keys are a warp's lanes");

size_t fa_smem_bytes(int hd) {
    return sizeof(float) * ((size_t)FA_QT * hd + (size_t)FA_KT * (hd + 1) + (size_t)FA_KT * hd);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
}

template <bool F16>
__global__ void __launch_bounds__(FA_WARPS * 32)
    fa_kernel(const float *__restrict__ q, int64_t n_tok, int n_head, int n_head_kv, int hd,
              const void *__restrict__ K, const void *__restrict__ V, int64_t pos0, float scale,
              float *__restrict__ out, const mtplx_cuda_step *__restrict__ dyn) {
    extern __shared__ float fa_sm[];
    float *qs = fa_sm;                 /* [FA_QT][hd] */
    float *ks = qs + FA_QT * hd;       /* [FA_KT][hd + 1] */
    float *vs = ks + FA_KT * (hd + 1); /* [FA_KT][hd] */
    pos0 += dyn_pos(dyn);
    int h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t t0 = (int64_t)blockIdx.x * FA_QT;
    int kvh = h / (n_head / n_head_kv);
    for (int idx = threadIdx.x; idx < FA_QT * hd; idx += blockDim.x) {
        int64_t t = t0 + idx / hd;
        qs[idx] = t < n_tok ? q[((size_t)t * n_head + h) * hd + idx % hd] : 0.f;
    }
    float acc[FA_QW][ATT_MAXE], mx[FA_QW], sum[FA_QW];
#pragma unroll
    for (int i = 0; i < FA_QW; i++) {
        mx[i] = -INFINITY;
        sum[i] = 0.f;
#pragma unroll
        for (int e = 0; e < ATT_MAXE; e++) acc[i][e] = 0.f;
    }
    int64_t t_end = t0 + FA_QT < n_tok ? t0 + FA_QT : n_tok;
    int64_t kend = pos0 + t_end; /* keys [0, kend) serve this block's queries */
    int64_t tq0 = t0 + warp * FA_QW; /* the warp's first query */
    size_t row = (size_t)n_head_kv * hd, off = (size_t)kvh * hd;
    const float *qw = qs + warp * FA_QW * hd;
    for (int64_t p0 = 0; p0 < kend; p0 += FA_KT) {
        __syncthreads(); /* qs written (first tile); the previous tile consumed */
        for (int idx = threadIdx.x; idx < FA_KT * hd; idx += blockDim.x) {
            int kk = idx / hd, j = idx % hd;
            int64_t p = p0 + kk;
            float kv_k = 0.f, kv_v = 0.f;
            if (p < kend) {
                size_t at = (size_t)p * row + off + (size_t)j;
                kv_k = kv_load<F16>(K, at);
                kv_v = kv_load<F16>(V, at);
            }
            ks[kk * (hd + 1) + j] = kv_k;
            vs[kk * hd + j] = kv_v;
        }
        __syncthreads();
        int64_t p = p0 + lane; /* this lane's key */
        float s[FA_QW];
#pragma unroll
        for (int i = 0; i < FA_QW; i++) s[i] = 0.f;
        const float *kr = ks + lane * (hd + 1);
        for (int j = 0; j < hd; j++) {
            float kj = kr[j];
#pragma unroll
            for (int i = 0; i < FA_QW; i++) s[i] += qw[i * hd + j] * kj;
        }
        float pw[FA_QW];
#pragma unroll
        for (int i = 0; i < FA_QW; i++) {
            bool see = p < kend && p <= pos0 + tq0 + i;
            float sv = see ? s[i] * scale : -INFINITY;
            float mn = fmaxf(mx[i], warp_max(sv)); /* finite: key 0 is in the first tile */
            float c = expf(mx[i] - mn);
            pw[i] = see ? expf(sv - mn) : 0.f;
            sum[i] = sum[i] * c + warp_sum(pw[i]);
            mx[i] = mn;
#pragma unroll
            for (int e = 0; e < ATT_MAXE; e++) acc[i][e] *= c;
        }
        for (int kk = 0; kk < FA_KT; kk++) {
            const float *vr = vs + kk * hd;
            float pk[FA_QW];
#pragma unroll
            for (int i = 0; i < FA_QW; i++) pk[i] = __shfl_sync(0xFFFFFFFFu, pw[i], kk);
#pragma unroll
            for (int e = 0; e < ATT_MAXE; e++) {
                int j = lane + 32 * e;
                if (j < hd) {
                    float v = vr[j];
#pragma unroll
                    for (int i = 0; i < FA_QW; i++) acc[i][e] += pk[i] * v;
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < FA_QW; i++) {
        int64_t t = tq0 + i;
        if (t >= n_tok) continue;
        float inv = 1.f / sum[i];
        float *op = out + ((size_t)t * n_head + h) * hd;
#pragma unroll
        for (int e = 0; e < ATT_MAXE; e++) {
            int j = lane + 32 * e;
            if (j < hd) op[j] = acc[i][e] * inv;
        }
    }
}

template <bool F16>
cudaError_t launch_fa(cudaStream_t s, const float *q, int64_t n_tok, int n_head, int n_head_kv,
                      int hd, const void *k, const void *v, int64_t pos0, float scale, float *out,
                      const mtplx_cuda_step *dyn) {
    size_t smem = fa_smem_bytes(hd);
    if (smem > 48 * 1024) { /* above the default limit: opt in (hd 256 needs 82 KB) */
        cudaError_t e = cudaFuncSetAttribute(
            fa_kernel<F16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    dim3 grid((unsigned)((n_tok + FA_QT - 1) / FA_QT), (unsigned)n_head);
    fa_kernel<F16><<<grid, FA_WARPS * 32, smem, s>>>(q, n_tok, n_head, n_head_kv, hd, k, v, pos0,
                                                      scale, out, dyn);
    return cudaGetLastError();
}

} // namespace

extern "C" {

size_t mtplx_cuda_attn_part_bytes(int slots) {
    return (size_t)MTPLX_CUDA_STEP_ROWS * (size_t)slots * (2 + 32 * ATT_MAXE) * sizeof(float);
}

int64_t mtplx_cuda_attention_group_from(int64_t group_from, int64_t n_tok, int head_dim, int kv_type,
                                        const void *k, const void *v) {
    int epc = kv_type == MTPLX_TYPE_F16 ? 8 : 4;
    bool ok = n_tok <= MTPLX_CUDA_STEP_ROWS &&
              (kv_type == MTPLX_TYPE_F16 || kv_type == MTPLX_TYPE_F32) && head_dim % epc == 0 &&
              head_dim <= 32 * ATT_MAXE && (((uintptr_t)k | (uintptr_t)v) & 15) == 0;
    return ok ? group_from : MTPLX_CUDA_ATTN_GROUP_NEVER;
}

cudaError_t mtplx_cuda_attention_init(void) {
    /* the most shared memory attn_group_kernel takes (ga_tile) */
    int most = (int)GA_MAX_SMEM;
    cudaError_t e = cudaFuncSetAttribute(attn_group_kernel<false>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, most);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(attn_group_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 most);
    return e;
}

cudaError_t mtplx_cuda_attention(cudaStream_t s, const float *q, int64_t n_tok, int n_head,
                                 int n_head_kv, int head_dim, const void *k, const void *v,
                                 int kv_type, int64_t pos0, float scale, float *out,
                                 const mtplx_cuda_step *dyn, bool pdl,
                                 const mtplx_cuda_attn_scratch *scr, int64_t group_from,
                                 int64_t at) {
    if (head_dim > 32 * ATT_MAXE || n_head % n_head_kv != 0) return cudaErrorInvalidValue;
    if (n_tok <= 0) return cudaSuccess;
    const int64_t from = mtplx_cuda_attention_group_from(group_from, n_tok, head_dim, kv_type, k, v);
    const bool by_head = mtplx_cuda_attn_by_head(at, from), by_group = mtplx_cuda_attn_by_group(at, n_tok, from);
    /* splits: about two blocks a SM at long contexts (the blocks are per
     * KV head with group, per query head without), fixed by the model's
     * head counts (never by n_tok: see attn_kernel) and the scratch */
    auto split = [&](bool group) {
        mtplx_cuda_attn_split sa = {NULL, NULL, 1, 1 << 30, 0, from};
        int most = scr && scr->part ? scr->per_sm * scr->n_sm / (group ? n_head_kv : n_head) : 1;
        if (scr && most > scr->slots / n_head) most = scr->slots / n_head;
        /* no run is empty while a split takes at least as many positions
         * as there are splits (attn_kernel's note) */
        if (scr && most > scr->chunk) most = scr->chunk;
        if (most >= 2 && n_tok <= MTPLX_CUDA_STEP_ROWS && n_head <= MTPLX_CUDA_ATTN_MAX_HEADS) {
            int cap = 16 * scr->per_sm < MTPLX_CUDA_ATTN_MAX_SPLIT ? 16 * scr->per_sm : MTPLX_CUDA_ATTN_MAX_SPLIT;
            sa.splits = most > cap ? cap : most;
            sa.part = scr->part, sa.cnt = scr->cnt, sa.chunk = scr->chunk;
        }
        return sa;
    };
    cudaError_t e = cudaSuccess;
    /* both: the second is a dependent of the first (and waits for it before
     * it touches the scratch, which they share with other strides); at
     * least one (a row short of from is by head, else the last reaches it) */
    if (by_head) {
        mtplx_cuda_attn_split sa = split(false);
        dim3 grid((unsigned)n_head, (unsigned)n_tok, (unsigned)sa.splits);
        e = launch_k(pdl, kv_type == MTPLX_TYPE_F16 ? attn_kernel<true> : attn_kernel<false>, grid,
                     dim3(ATT_WARPS * 32), 0, s, q, n_head, n_head_kv, head_dim, k, v, pos0, scale,
                     out, dyn, sa);
        pdl = true;
    }
    if (by_group && e == cudaSuccess) {
        mtplx_cuda_attn_split sa = split(true);
        bool f16 = kv_type == MTPLX_TYPE_F16;
        sa.tile = ga_tile(head_dim, f16, scr ? scr->tile : 0);
        int64_t chunks = (n_tok * (n_head / n_head_kv) + GA_RC - 1) / GA_RC;
        dim3 grid((unsigned)n_head_kv, (unsigned)sa.splits, (unsigned)chunks);
        e = launch_k(pdl, f16 ? attn_group_kernel<true> : attn_group_kernel<false>, grid,
                     dim3(GA_WARPS * 32), ga_smem_bytes(head_dim, f16, sa.tile), s, q, (int)n_tok,
                     n_head, n_head_kv, head_dim, k, v, pos0, scale, out, dyn, sa);
    }
    return e;
}

cudaError_t mtplx_cuda_attention_flash(cudaStream_t s, const float *q, int64_t n_tok, int n_head,
                                       int n_head_kv, int head_dim, const void *k, const void *v,
                                       int kv_type, int64_t pos0, float scale, float *out,
                                       const mtplx_cuda_step *dyn) {
    if (head_dim > 32 * ATT_MAXE || n_head % n_head_kv != 0 ||
        (kv_type != MTPLX_TYPE_F16 && kv_type != MTPLX_TYPE_F32))
        return cudaErrorInvalidValue;
    if (n_tok <= 0) return cudaSuccess;
    if (kv_type == MTPLX_TYPE_F16)
        return launch_fa<true>(s, q, n_tok, n_head, n_head_kv, head_dim, k, v, pos0, scale, out, dyn);
    return launch_fa<false>(s, q, n_tok, n_head, n_head_kv, head_dim, k, v, pos0, scale, out, dyn);
}

} // extern "C"
