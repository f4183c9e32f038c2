/* attention.cu: the attention kernels of the CUDA backend
 * (cuda_kernels.h's mtplx_cuda_attention, mtplx_cuda_attention_flash).
 *
 * A step (decode, or a verify step of at most MTPLX_CUDA_STEP_ROWS rows):
 * one block per (token, head) with an online softmax per warp (attn_kernel),
 * or for a row of 768 positions or more one per KV head serving all the
 * step's queries of its group (MTPLX_CUDA_ATTN_GROUP=N moves the threshold):
 * attn_mma_kernel on tensor cores for an F16 cache and head_dim 64 or 128,
 * attn_group_kernel otherwise; all split a long context over blocks
 * (flash-decoding) and merge the runs in a fixed order, so a row is the same
 * bits in a decode step and in a verify step. For a prefill, fa_mma_kernel
 * (F16 cache, head_dim 64 or 128, tensor cores) or fa_kernel tiles queries
 * and keys through shared memory. All math is f32, as the CPU's, or f16
 * mmas of hi + lo halves with f32 sums, which keep f32's accuracy.
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
#include <type_traits>
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
 * a few at once, each warp with its own running max / sum / output (online
 * softmax); lanes split head_dim (element pairs). The warps' partial results
 * are merged at the end.
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
template <int U = 4, int D = ATT_MAXE /* dims a lane: hd <= 32 D */>
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
    /* U: runs a batch (their loads in flight together) */
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

/* qv's run [lo, hi) of split sp (token qv / grp of a step at pos0) and its
 * ns, for the KV-head kernels: empty past its ns and where its row is
 * attn_kernel's (short of sa.from); a run is taken into the block's union
 * [*u0, *u1) (shared memory). */
__device__ __forceinline__ void attn_qv_run(int64_t pos0, int qv, int grp, int sp,
                                            const mtplx_cuda_attn_split &sa, int &lo, int &hi,
                                            int &ns, int *u0, int *u1) {
    int64_t n_kv = pos0 + qv / grp + 1;
    ns = attn_splits(n_kv, sa), lo = 0, hi = 0;
    if (sp < ns && n_kv >= sa.from) {
        int64_t len = (n_kv + ns - 1) / ns;
        lo = (int)(sp * len), hi = (int)min(n_kv, (int64_t)(sp + 1) * len);
        atomicMin(u0, lo), atomicMax(u1, hi);
    }
}

/* The end of a KV-head block (attn_group_kernel, attn_mma_kernel), its
 * runs' partials written: for each of its nq qvs with other runs a counter,
 * and the last block of a qv merges the qv's runs, a warp each; tok_head(i)
 * is qv i's token and head (t n_head + h). */
template <int WARPS, int U, int D, typename TokHead>
__device__ __forceinline__ void attn_runs_merge(const mtplx_cuda_attn_split &sa, int nq, int hd,
                                                const int *s_lo, const int *s_hi, const int *s_ns,
                                                bool *s_last, TokHead tok_head, float *out) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const size_t stride = (size_t)hd + 2;
    __threadfence();
    __syncthreads();
    if (threadIdx.x < nq && s_ns[threadIdx.x] > 1 && s_lo[threadIdx.x] < s_hi[threadIdx.x]) {
        int i = threadIdx.x;
        s_last[i] = atomicAdd(sa.cnt + tok_head(i), 1) == s_ns[i] - 1;
    }
    __syncthreads();
    __threadfence();
    for (int i = warp; i < nq; i += WARPS) {
        if (!s_last[i]) continue;
        int th = tok_head(i);
        attn_merge_warp<U, D>(sa.part + (size_t)th * sa.splits * stride, s_ns[i], stride, hd,
                        out + (size_t)th * hd, lane);
        if (lane == 0) sa.cnt[th] = 0; /* for the next launch */
    }
}

/* An element pair of a K / V row as it is stored (F16: one __half2, F32:
 * one float2; the pair starts at an even element, so the load is aligned),
 * and as floats */
template <bool F16> using kv_pair = typename std::conditional<F16, __half2, float2>::type;
template <bool F16> __device__ __forceinline__ kv_pair<F16> kv_load2(const void *base, size_t idx) {
    if constexpr (F16) return __ldcg((const __half2 *)((const __half *)base + idx));
    else return __ldcg((const float2 *)((const float *)base + idx));
}
__device__ __forceinline__ float2 kv_f2(__half2 h) { return __half22float2(h); }
__device__ __forceinline__ float2 kv_f2(float2 f) { return f; }

/* attn_kernel's positions a warp takes at once: PQ independent scores (their
 * loads in flight together, their warp sums interleaved), then one online
 * softmax update for all of them. Fewer registers a position where a lane
 * holds 8 elements of a row. */
template <int E> __host__ __device__ constexpr int attn_pq() { return E <= 4 ? 4 : 2; }

template <bool F16, bool EARLY, int E>
__global__ void __launch_bounds__(ATT_WARPS * 32, F16 ? 4 : 1) /* (F16: 4 blocks an SM) */
    attn_kernel(const float *__restrict__ q, int n_head, int n_head_kv, int hd,
                const void *__restrict__ K, const void *__restrict__ V, int64_t pos0, float scale,
                float *__restrict__ out, const mtplx_cuda_step *__restrict__ dyn,
                mtplx_cuda_attn_split sa) {
    /* Warp w takes positions w, w + 8, w + 16, ... of its run, PQ at a time;
     * a lane holds the element pairs 2 lane + 64 i (i < E / 2) of q, of its
     * output and of each K / V row (head_dim is even: the launcher).
     *
     * EARLY (sa.head_early), in a captured step (dyn set): each warp loads
     * the K and V rows of its first PQ positions before the PDL wait where
     * they come before the step's first position. As in attn_mma_kernel, a
     * graph's kernels start after the step block was set by a plain launch,
     * so those rows were written by kernels that have completed; q and the
     * step's own rows (the q/k prep's) only after the wait. The arithmetic
     * is the same on the same values either way: the same bits. */
    constexpr int PQ = attn_pq<E>(), EP = E / 2; /* positions at once, pairs a lane */
    pdl_trigger(); /* (launch_k) */
    if constexpr (!EARLY) pdl_wait();
    const bool early = EARLY && dyn != nullptr;
    pos0 += dyn_pos(dyn);
    int h = blockIdx.x, sp = blockIdx.z;
    int64_t t = blockIdx.y;
    int64_t n_kv = pos0 + t + 1;
    int ns = attn_splits(n_kv, sa);
    if (sp >= ns || n_kv >= sa.from) { /* (the latter: attn_group_kernel's row) */
        if constexpr (EARLY) pdl_wait(); /* (the wait keeps "completed" transitive) */
        return;
    }
    /* runs of len = ceil(n_kv / ns) positions; none is empty: n_kv >
     * chunk (ns - 1) and chunk >= ns (the launcher caps the splits at the
     * chunk) give n_kv > (ns - 1)^2, so (ns - 1) len < n_kv */
    int64_t len = (n_kv + ns - 1) / ns, p_end = min(n_kv, (int64_t)(sp + 1) * len);
    int kvh = h / (n_head / n_head_kv), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    size_t row = (size_t)n_head_kv * hd, off = (size_t)kvh * hd;
    int64_t p = sp * len + warp;
    /* the K and V pairs of positions p + 8 i (i < PQ) that pass ok(i) */
    kv_pair<F16> kf[PQ][EP] = {}, vf[PQ][EP] = {};
    auto load = [&](int64_t p0, auto ok) {
#pragma unroll
        for (int i = 0; i < PQ; i++) {
            size_t base = (size_t)(p0 + (int64_t)ATT_WARPS * i) * row + off;
#pragma unroll
            for (int e = 0; e < EP; e++) {
                int j = 2 * lane + 64 * e;
                if (ok(i) && j < hd) kf[i][e] = kv_load2<F16>(K, base + j), vf[i][e] = kv_load2<F16>(V, base + j);
            }
        }
    };
    auto in_run = [&](int64_t p0, int i) { return p0 + (int64_t)ATT_WARPS * i < p_end; };
    bool pre[PQ] = {};
    if constexpr (EARLY) {
#pragma unroll
        for (int i = 0; i < PQ; i++) pre[i] = early && in_run(p, i) && p + (int64_t)ATT_WARPS * i < pos0;
        load(p, [&](int i) { return pre[i]; });
        pdl_wait();
    }
    const float *qp = q + ((size_t)t * n_head + h) * hd;
    float2 qr[EP], acc[EP];
#pragma unroll
    for (int e = 0; e < EP; e++) {
        int j = 2 * lane + 64 * e;
        qr[e] = j < hd ? make_float2(__ldcg(qp + j), __ldcg(qp + j + 1)) : make_float2(0.f, 0.f);
        acc[e] = make_float2(0.f, 0.f);
    }
    float mx = -INFINITY, sum = 0.f;
    /* PQ positions from p (the first in the run, the rest where they are):
     * their scores, then the online softmax update in position order */
    auto visit = [&](int64_t p0) {
        float s[PQ];
#pragma unroll
        for (int i = 0; i < PQ; i++) {
            s[i] = 0.f;
#pragma unroll
            for (int e = 0; e < EP; e++)
                if (2 * lane + 64 * e < hd) {
                    float2 k = kv_f2(kf[i][e]);
                    s[i] += qr[e].x * k.x + qr[e].y * k.y;
                }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int i = 0; i < PQ; i++) s[i] += __shfl_xor_sync(0xFFFFFFFFu, s[i], o);
        float mn = mx;
#pragma unroll
        for (int i = 0; i < PQ; i++) {
            s[i] *= scale;
            if (in_run(p0, i)) mn = fmaxf(mn, s[i]);
        }
        const float c = expf(mx - mn); /* (0 at the run's first visit: mx is -inf) */
        sum *= c;
#pragma unroll
        for (int e = 0; e < EP; e++) acc[e].x *= c, acc[e].y *= c;
#pragma unroll
        for (int i = 0; i < PQ; i++) {
            if (!in_run(p0, i)) continue;
            const float pw = expf(s[i] - mn);
            sum += pw;
#pragma unroll
            for (int e = 0; e < EP; e++) {
                float2 v = kv_f2(vf[i][e]);
                acc[e].x += pw * v.x, acc[e].y += pw * v.y;
            }
        }
        mx = mn;
    };
    /* the first PQ positions: preloaded, or loaded now */
    if (p < p_end) { /* (a short run leaves the last warps without one) */
        load(p, [&](int i) { return !pre[i] && in_run(p, i); });
        visit(p);
    }
    for (p += (int64_t)ATT_WARPS * PQ; p < p_end; p += (int64_t)ATT_WARPS * PQ) {
        load(p, [&](int i) { return in_run(p, i); });
        visit(p);
    }
    __shared__ float s_mx[ATT_WARPS], s_sum[ATT_WARPS];
    __shared__ float s_acc[ATT_WARPS][32 * E];
    __shared__ bool s_last;
    if (lane == 0) {
        s_mx[warp] = mx;
        s_sum[warp] = sum;
    }
#pragma unroll
    for (int e = 0; e < EP; e++) s_acc[warp][2 * lane + 64 * e] = acc[e].x, s_acc[warp][2 * lane + 64 * e + 1] = acc[e].y;
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

/* attn_kernel's instance for E elements a lane, an F16 or F32 cache, early
 * loads or not */
template <int E> auto attn_kernel_for(bool f16, bool early) {
    return f16 ? (early ? attn_kernel<true, true, E> : attn_kernel<true, false, E>)
               : (early ? attn_kernel<false, true, E> : attn_kernel<false, false, E>);
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
        int i = threadIdx.x, lo, hi, ns;
        attn_qv_run(pos0, i0 + i, grp, sp, sa, lo, hi, ns, &s_u0, &s_u1);
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
    if (merging) attn_runs_merge<GA_WARPS, 4, ATT_MAXE>(sa, nq, hd, s_lo, s_hi, s_ns, s_last, tok_head, out);
}

/* ---- step attention by KV head on tensor cores (attn_mma_kernel) ----
 * attn_group_kernel's block walks its tiles in three phases a tile (scores,
 * factors, P.V) between barriers, on CUDA cores, with much index arithmetic:
 * ncu at 4096 positions (0.6B decode) counted ~250 warp instructions for
 * each position and KV head, 30% of issue slots busy and 4 warps a
 * scheduler waiting at barriers; 23 us a layer for 16.8 MB of cache. Here
 * (~80 instructions, 19 us; 35 against 53 at 16384 positions, and a verify
 * step of 8 rows 1.6x a decode step instead of 3.5x: bench/RESULTS.md
 * section 36) block (KV head g, run sp, chunk of AM_RC qvs, as
 * attn_group_kernel) is AM_WARPS warps, each streaming its own sub-tiles of
 * AM_T positions through its own two shared-memory stages (cp.async, or
 * TMA bulk copies under MTPLX_CUDA_ATTN_TMA=1: the same bits, a little
 * slower; no block barrier in the loop). Sub-tile j holds positions
 * [AM_T j, AM_T j + AM_T) and belongs to warp j % AM_WARPS, so which warp
 * sees a position depends on the position alone. A sub-tile is
 *   S = Q K^T  (mma m16n8k16, f16 in, f32 out: the block's 16 qvs x 16
 *               positions; Q in registers as f16 hi + lo of q scale 2^e,
 *               e a qv's own exponent that puts its largest |value| at
 *               2^13..2^14, so that both halves keep their bits),
 *   per qv: the sub-tile's max over its run's positions, M = max(M, that),
 *   c = exp(M_old - M), w = exp(s - M), l = l c + the w's (a fixed tree),
 *   O = O c + P V  (P = w 2^12 as f16 hi + lo, V straight from the stage by
 *                   ldmatrix.trans).
 * Each of those is per qv (an mma row's result does not depend on the other
 * rows), so a qv's numbers depend on its run alone: a token's row is the
 * same bits in a decode step and in a verify step. The warps' (M, l, O) are
 * merged in warp order, then the runs as attn_group_kernel's (partials, the
 * last block merges). F16 cache and head_dim 64 or 128 only
 * (mtplx_cuda_attention picks attn_group_kernel otherwise). */
constexpr int AM_WARPS = 4, AM_T = 16, AM_RC = 16;
/* The last block's merge of a row's runs takes AM_MERGE_U runs' loads at a
 * time (attn_merge_warp): each batch is an L2 round trip after the one
 * before, and the kernel's registers are free by then (its loop is over). */
#ifndef MTPLX_AM_MERGE_U
#define MTPLX_AM_MERGE_U 16
#endif
constexpr int AM_MERGE_U = MTPLX_AM_MERGE_U;
constexpr float AM_PSCALE = 4096.f; /* 2^12: P's hi / lo stay clear of f16's subnormals */
__host__ __device__ constexpr int am_rs(int hd) {
    return hd / 8 + 1;
} /* 16-byte units a staged row (odd: ldmatrix's 8 rows hit 8 bank groups) */
size_t am_smem_bytes(int hd) {
    size_t stages = (size_t)AM_WARPS * 2 * 2 * AM_T * am_rs(hd) * 16;
    size_t merge = (size_t)AM_WARPS * AM_RC * (hd + 2) * 4;
    return stages > merge ? stages : merge;
}
/* the caches and head sizes the tensor-core kernels take (attn_mma_kernel,
 * fa_mma_kernel): F16, head_dim 64 or 128 */
bool am_ok(int hd, bool f16) {
    return f16 && (hd == 64 || hd == 128);
}

/* MTPLX_ATTN_TRACE (tools/cuda_attn_bench.sh builds a variant with it):
 * thread 0 of each block of attn_mma_kernel stamps the global timer at its
 * phases into am_trace[block][AM_TRACE_N]; mtplx_cuda_attn_trace reads them. */
#ifdef MTPLX_ATTN_TRACE
constexpr int AM_TRACE_N = 8, AM_TRACE_BLOCKS = 4096;
__device__ unsigned long long am_trace[AM_TRACE_BLOCKS][AM_TRACE_N];
__device__ __forceinline__ void am_stamp(int k) {
    unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (threadIdx.x == 0 && b < AM_TRACE_BLOCKS) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        am_trace[b][k] = t;
    }
}
#else
__device__ __forceinline__ void am_stamp(int) {}
#endif
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* (a, b) as f16 pairs hi + lo (a in the low half, as mma's fragments) */
__device__ __forceinline__ void split_h2(float a, float b, uint32_t &hi, uint32_t &lo) {
    __half2 h = __floats2half2_rn(a, b);
    float2 f = __half22float2(h);
    __half2 l = __floats2half2_rn(__fsub_rn(a, f.x), __fsub_rn(b, f.y));
    hi = *(const uint32_t *)&h, lo = *(const uint32_t *)&l;
}

/* The tensor-core pieces attn_mma_kernel and fa_mma_kernel share (a lane's
 * mma rows gq and gq + 8 are its rows r = 0, 1; tq its quad position).
 *
 * Row r's q (HDIM floats at qp, zeros where !live) times scale as A
 * fragments, f16 hi and lo of q scale 2^e, e putting the row's largest
 * |value| in [2^13, 2^14) (the row's 4 lanes tq hold all of it); einv =
 * 2^-e undoes it on the scores. */
template <int KS>
__device__ __forceinline__ void mma_q_frags(const float *qp, bool live, float scale, int tq, int r,
                                            uint32_t (&qh)[KS][4], uint32_t (&ql)[KS][4], float &einv) {
    float2 x[KS][2];
    float mx = 0.f;
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            x[ks][h] = live ? __ldcg((const float2 *)(qp + 16 * ks + 2 * tq + 8 * h)) : make_float2(0.f, 0.f);
            x[ks][h].x *= scale, x[ks][h].y *= scale;
            mx = fmaxf(mx, fmaxf(fabsf(x[ks][h].x), fabsf(x[ks][h].y)));
        }
    mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
    int ex = 0;
    if (mx > 0.f && mx <= 3.0e38f) frexpf(mx, &ex);
    const int e = mx > 0.f && mx <= 3.0e38f ? 14 - ex : 0;
    const float f = ldexpf(1.f, e);
    einv = ldexpf(1.f, -e);
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            split_h2(x[ks][h].x * f, x[ks][h].y * f, qh[ks][2 * h + r], ql[ks][2 * h + r]);
}

/* S for 16 staged positions (K rows at ks, RS units a row): s0 positions
 * 0-7, s1 8-15 ([c0 row gq pos 2 tq, c1 +1, c2 row gq + 8, c3]) */
template <int KS, int RS>
__device__ __forceinline__ void mma_qk16(const uint4 *ks, const uint32_t (&qh)[KS][4], const uint32_t (&ql)[KS][4],
                                         int mi, int rr, float (&s0)[4], float (&s1)[4]) {
#pragma unroll
    for (int k = 0; k < KS; k++) {
        uint32_t b[4]; /* (positions 0-7, dims lo), (0-7, hi), (8-15, lo), (8-15, hi) */
        ldsm_x4(b, ks + (8 * (mi >> 1) + rr) * RS + 2 * k + (mi & 1));
        mma_f16(s0, qh[k], b[0], b[1]);
        mma_f16(s0, ql[k], b[0], b[1]);
        mma_f16(s1, qh[k], b[2], b[3]);
        mma_f16(s1, ql[k], b[2], b[3]);
    }
}

/* The online softmax over one tile of NS x 8 positions (s[nt][2 r + e] is
 * position pb + 8 nt + 2 tq + e of row r): the scores row r may not see
 * (sees(r, p) false) drop out, the rest times einv[r]; the row's max M
 * becomes max(M, the tile's), c = exp(M_old - M), s becomes the weights
 * w = exp(s - M), l = l c + their sum (a fixed tree), and acc is scaled by
 * c. A row's numbers depend on its own scores alone. */
template <int NS, int NT, typename Pos /* int or int64_t */, typename Sees>
__device__ __forceinline__ void mma_softmax_tile(float (&s)[NS][4], Pos pb, int tq, const float (&einv)[2],
                                                 Sees sees, float (&m_r)[2], float (&l_r)[2], float (&acc)[NT][4]) {
    float c_r[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NS; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float v = sees(r, pb + 8 * nt + 2 * tq + e) ? s[nt][2 * r + e] * einv[r] : -INFINITY;
                s[nt][2 * r + e] = v;
                mx = fmaxf(mx, v);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
        const float mn = fmaxf(m_r[r], mx);
        c_r[r] = mn == -INFINITY ? 1.f : expf(m_r[r] - mn);
#pragma unroll
        for (int nt = 0; nt < NS; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float v = s[nt][2 * r + e];
                s[nt][2 * r + e] = v == -INFINITY ? 0.f : expf(v - mn);
            }
        float t = __fadd_rn(s[0][2 * r], s[0][2 * r + 1]);
#pragma unroll
        for (int nt = 1; nt < NS; nt++) t = __fadd_rn(t, __fadd_rn(s[nt][2 * r], s[nt][2 * r + 1]));
        t = __fadd_rn(t, __shfl_xor_sync(0xFFFFFFFFu, t, 1));
        t = __fadd_rn(t, __shfl_xor_sync(0xFFFFFFFFu, t, 2));
        l_r[r] = __fadd_rn(__fmul_rn(l_r[r], c_r[r]), t);
        m_r[r] = mn;
    }
#pragma unroll
    for (int n = 0; n < NT; n++) {
        acc[n][0] = __fmul_rn(acc[n][0], c_r[0]), acc[n][1] = __fmul_rn(acc[n][1], c_r[0]);
        acc[n][2] = __fmul_rn(acc[n][2], c_r[1]), acc[n][3] = __fmul_rn(acc[n][3], c_r[1]);
    }
}

/* acc += P V for 16 positions: the weights w0 (positions 0-7) and w1 (8-15)
 * as P's A fragment, w 2^12 in f16 hi + lo, and V's staged rows at vs */
template <int NT, int RS>
__device__ __forceinline__ void mma_pv16(const float (&w0)[4], const float (&w1)[4], const uint4 *vs, int mi, int rr,
                                         float (&acc)[NT][4]) {
    /* a0 (row gq, positions 2 tq..), a1 (row gq + 8), a2, a3 (positions 8 + 2 tq..) */
    uint32_t ph[4], pl[4];
    split_h2(w0[0] * AM_PSCALE, w0[1] * AM_PSCALE, ph[0], pl[0]);
    split_h2(w0[2] * AM_PSCALE, w0[3] * AM_PSCALE, ph[1], pl[1]);
    split_h2(w1[0] * AM_PSCALE, w1[1] * AM_PSCALE, ph[2], pl[2]);
    split_h2(w1[2] * AM_PSCALE, w1[3] * AM_PSCALE, ph[3], pl[3]);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
        uint32_t b[4]; /* V^T: (positions 0-7, dims 8n..), (8-15, 8n..), (0-7, 8n + 8..), (8-15, 8n + 8..) */
        ldsm_x4_t(b, vs + (8 * (mi & 1) + rr) * RS + n + (mi >> 1));
        mma_f16(acc[n], ph, b[0], b[1]);
        mma_f16(acc[n], pl, b[0], b[1]);
        mma_f16(acc[n + 1], ph, b[2], b[3]);
        mma_f16(acc[n + 1], pl, b[2], b[3]);
    }
}

template <int HDIM, bool TMA /* the stages filled by bulk copies instead of cp.async */>
__global__ void __launch_bounds__(AM_WARPS * 32, 3)
    attn_mma_kernel(const float *__restrict__ q, int n_tok, int n_head, int n_head_kv,
                    const __half *__restrict__ K, const __half *__restrict__ V, int64_t pos0,
                    float scale, float *__restrict__ out, const mtplx_cuda_step *__restrict__ dyn,
                    mtplx_cuda_attn_split sa) {
    constexpr int KS = HDIM / 16, NT = HDIM / 8, RS = am_rs(HDIM),
                  CPR = HDIM / 8; /* k steps, n tiles, units */
    extern __shared__ uint4 am_sm[];
    __shared__ int s_lo[AM_RC], s_hi[AM_RC], s_ns[AM_RC], s_u0, s_u1;
    __shared__ float s_f[AM_RC][AM_WARPS + 2]; /* a qv's warp factors, then M and l */
    __shared__ bool s_last[AM_RC];
    am_stamp(0);
    /* Before the PDL wait: the runs (they need the step's position and the
     * split alone) and, in a captured step (dyn set), the first stages of
     * cache rows before the step's first position. A graph's kernels start
     * after the step block was set by a plain launch (mtplx_cuda_set_step),
     * so every row before pos0 was written by kernels that have completed;
     * the step's own rows (from pos0 on) are the q/k prep's, read after the
     * wait. Without dyn (plain launches, whose predecessors may still run)
     * everything waits. Only where the block is its run's one reader (one
     * chunk of qvs): with two chunks (8B, 8 rows) the early copies made the
     * step slower (bench/RESULTS.md section 37). */
    pdl_trigger();
    const bool early = dyn != nullptr && sa.early && gridDim.z == 1;
    pos0 += dyn_pos(dyn);
    const int g = blockIdx.x, sp = blockIdx.y, grp = n_head / n_head_kv;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    const int i0 = blockIdx.z * AM_RC, nq = min(AM_RC, n_tok * grp - i0);
    auto tok_head = [&](int i) { return (i0 + i) / grp * n_head + g * grp + (i0 + i) % grp; };

    /* each qv's run [lo, hi) of this split (empty past its ns), their union */
    if (threadIdx.x == 0) s_u0 = INT_MAX, s_u1 = 0;
    __syncthreads();
    if (threadIdx.x < AM_RC) { /* (past nq: no run, for the mma rows there) */
        int i = threadIdx.x, lo = 0, hi = 0, ns = 1;
        if (i < nq) attn_qv_run(pos0, i0 + i, grp, sp, sa, lo, hi, ns, &s_u0, &s_u1);
        s_lo[i] = lo, s_hi[i] = hi, s_ns[i] = ns, s_last[i] = false;
    }
    const bool merging = __syncthreads_or(threadIdx.x < AM_RC && s_ns[threadIdx.x] > 1 &&
                                          s_lo[threadIdx.x] < s_hi[threadIdx.x]);
    const int u0 = s_u0, u1 = s_u1;
    if (u1 <= u0) {
        pdl_wait(); /* (nothing to do; the wait keeps "completed" transitive) */
        return;
    }

    const size_t prow = (size_t)n_head_kv * HDIM * 2; /* bytes from one position to the next */
    const char *kb = (const char *)K + (size_t)g * HDIM * 2,
               *vb = (const char *)V + (size_t)g * HDIM * 2;
    uint4 *wsm = am_sm + (size_t)warp * 2 * 2 * AM_T * RS; /* [stage][K, V][AM_T][RS] */
    /* TMA: a barrier a stage, par bit st the phase stage st's is in */
    __shared__ __align__(8) unsigned long long s_bar[AM_WARPS][2];
    const unsigned bar0 = (unsigned)__cvta_generic_to_shared(&s_bar[warp][0]), bar1 = bar0 + 8;
    unsigned par = 0;
    if (TMA && lane == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar0) : "memory");
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar1) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
    /* sub-tile j's rows of [u0, u1) into stage st (zeros elsewhere: past u1
     * the cache may not exist, and V's zeros keep P V finite) */
    auto issue = [&](int j, int st) {
        uint4 *ks = wsm + (size_t)st * 2 * AM_T * RS, *vs = ks + AM_T * RS;
        if constexpr (TMA) {
            /* lane r < 16: K row r, lane 16 + r: V row r, one bulk copy each */
            const int r = lane & 15, p = j * AM_T + r;
            const bool ok = p >= u0 && p < u1;
            const unsigned bar = st ? bar1 : bar0;
            const unsigned rows = __popc(__ballot_sync(0xFFFFFFFFu, ok && lane < 16));
            uint4 *dst = (lane < 16 ? ks : vs) + r * RS;
            if (!ok)
                for (int c = 0; c < CPR; c++)
                    dst[c] = make_uint4(0, 0, 0, 0);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            if (lane == 0)
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                             "r"(rows * 2 * HDIM * 2)
                             : "memory");
            __syncwarp();
            if (ok)
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                             "[%0], [%1], %2, [%3];" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
                             "l"((lane < 16 ? kb : vb) + (size_t)p * prow), "r"(HDIM * 2), "r"(bar)
                             : "memory");
        } else {
#pragma unroll
            for (int k = 0; k < AM_T * CPR / 32; k++) {
                int idx = lane + 32 * k, r = idx / CPR, c = idx % CPR, p = j * AM_T + r;
                bool ok = p >= u0 && p < u1;
                size_t at = (size_t)(ok ? p : u0) * prow + (size_t)c * 16;
                cp_async16z(ks + r * RS + c, kb + at, ok);
                cp_async16z(vs + r * RS + c, vb + at, ok);
            }
            cp_async_commit();
        }
    };

    const int j0 = u0 / AM_T, j1 = (u1 - 1) / AM_T;
    const int jf = j0 + (warp - j0 % AM_WARPS + AM_WARPS) % AM_WARPS; /* this warp's first */
    /* the stages that hold rows before pos0 alone go out before the wait
     * (early: see the top); the loop issues the others as before */
    const bool pre0 = early && jf <= j1 && (int64_t)(jf + 1) * AM_T <= pos0;
    const bool pre1 = pre0 && jf + AM_WARPS <= j1 && (int64_t)(jf + AM_WARPS + 1) * AM_T <= pos0;
    if (pre0) issue(jf, 0);
    if (pre1) issue(jf + AM_WARPS, 1);
    pdl_wait(); /* (launch_k) */
    am_stamp(1);

    /* this lane's rows of Q (qvs gq, gq + 8) as mma A fragments */
    uint32_t qh[KS][4], ql[KS][4];
    int lo_r[2], hi_r[2];
    float einv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int i = gq + 8 * r;
        const bool live = i < nq && s_lo[i] < s_hi[i];
        lo_r[r] = s_lo[i], hi_r[r] = s_hi[i];
        mma_q_frags<KS>(q + (size_t)(live ? tok_head(i) : 0) * HDIM, live, scale, tq, r, qh, ql, einv[r]);
    }

    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++)
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};
    const int mi = lane >> 3, rr = lane & 7; /* ldmatrix: this lane's matrix and row */
    am_stamp(2);
    if (jf <= j1 && !pre0) issue(jf, 0);
    for (int j = jf, st = 0; j <= j1; j += AM_WARPS, st ^= 1) {
        const bool next = j + AM_WARPS <= j1 && !(pre1 && j == jf); /* (pre1: out already) */
        if constexpr (TMA) {
            if (next) issue(j + AM_WARPS, st ^ 1);
            asm volatile(
                "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                " @!p bra W;\n}" ::"r"(st ? bar1 : bar0),
                "r"((par >> st) & 1)
                : "memory");
            par ^= 1u << st;
        } else if (j + AM_WARPS <= j1) {
            if (next) issue(j + AM_WARPS, st ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncwarp();
        const uint4 *ks = wsm + (size_t)st * 2 * AM_T * RS, *vs = ks + AM_T * RS;

        float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        mma_qk16<KS, RS>(ks, qh, ql, mi, rr, s[0], s[1]);
        /* per qv row: the run's positions, the sub-tile max, c, w, l */
        mma_softmax_tile<2, NT>(
            s, j * AM_T, tq, einv, [&](int r, int p) { return p >= lo_r[r] && p < hi_r[r]; }, m_r, l_r,
            acc);
        mma_pv16<NT, RS>(s[0], s[1], vs, mi, rr, acc);
        __syncwarp(); /* the stage is read before it is refilled */
    }

    /* the warps' (M, l, O 2^12) through shared memory, merged in warp order */
    am_stamp(3);     /* (warp 0's loop) */
    __syncthreads(); /* every warp is done with its stages */
    am_stamp(4);
    float *mb = (float *)am_sm; /* [AM_WARPS][AM_RC][HDIM + 2] */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float *row = mb + ((size_t)warp * AM_RC + gq + 8 * r) * (HDIM + 2);
        if (tq == 0) row[0] = m_r[r], row[1] = l_r[r];
#pragma unroll
        for (int n = 0; n < NT; n++)
            row[2 + 8 * n + 2 * tq] = acc[n][2 * r], row[3 + 8 * n + 2 * tq] = acc[n][2 * r + 1];
    }
    __syncthreads();
    if (threadIdx.x < nq) {
        const int i = threadIdx.x;
        float M = -INFINITY, L = 0.f;
#pragma unroll
        for (int w = 0; w < AM_WARPS; w++)
            M = fmaxf(M, mb[((size_t)w * AM_RC + i) * (HDIM + 2)]);
#pragma unroll
        for (int w = 0; w < AM_WARPS; w++) {
            const float *row = mb + ((size_t)w * AM_RC + i) * (HDIM + 2);
            float f = row[1] > 0.f ? expf(row[0] - M) : 0.f;
            s_f[i][w] = f;
            L = __fadd_rn(L, __fmul_rn(row[1], f));
        }
        s_f[i][AM_WARPS] = M, s_f[i][AM_WARPS + 1] = L;
    }
    __syncthreads();
    const size_t stride = (size_t)HDIM + 2;
    for (int idx = threadIdx.x; idx < nq * HDIM; idx += AM_WARPS * 32) {
        const int i = idx / HDIM, d = idx % HDIM;
        if (s_lo[i] >= s_hi[i]) continue;
        float o = 0.f;
#pragma unroll
        for (int w = 0; w < AM_WARPS; w++)
            o = __fadd_rn(o,
                          __fmul_rn(mb[((size_t)w * AM_RC + i) * (HDIM + 2) + 2 + d], s_f[i][w]));
        o = __fmul_rn(o, 1.f / AM_PSCALE);
        const int th = tok_head(i);
        if (s_ns[i] == 1) {
            out[(size_t)th * HDIM + d] = o / s_f[i][AM_WARPS + 1];
        } else {
            float *mine = sa.part + ((size_t)th * sa.splits + sp) * stride;
            mine[2 + d] = o;
            if (d == 0) mine[0] = s_f[i][AM_WARPS], mine[1] = s_f[i][AM_WARPS + 1];
        }
    }
    am_stamp(5);
    if (merging) attn_runs_merge<AM_WARPS, AM_MERGE_U, HDIM / 32>(sa, nq, HDIM, s_lo, s_hi, s_ns, s_last, tok_head, out);
    am_stamp(7); /* (thread 0: its own merges done) */
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
 * splitting head_dim (element lane + 32 e). Every query sees
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

/* ---- flash attention for prefill on tensor cores (fa_mma_kernel) ----
 * fa_kernel's f32 loops run a prefill's attention at a few TFLOP/s; at
 * 2048 tokens of an 8B model that is as long as all its GEMMs. Here, for an
 * F16 cache and head_dim 64 or 128, block (query tile of FM_QT tokens, query
 * head) is FM_WARPS warps of 16 query rows each, and the block walks the
 * keys in tiles of FM_KT positions that it stages in shared memory (two
 * stages, cp.async; the last tile's loads of the causal limit and past are
 * zeros). Each warp does attn_mma_kernel's arithmetic on its rows:
 *   S = Q K^T (m16n8k16 f16, f32 sums; q as f16 hi + lo of q scale 2^e, e
 *   the row's own exponent), the causal mask, the row's max over the tile,
 *   c = exp(M_old - M), w = exp(s - M), l = l c + the w's (a fixed tree),
 *   O = O c + P V (P = w 2^12 as f16 hi + lo; V by ldmatrix.trans),
 * so the result is f32-accurate (test_cuda: within 1e-5 of the CPU, as
 * fa_kernel). A warp whose rows see none of a tile's keys skips it. Heavy
 * query tiles (late tokens, more keys) are launched first. */
constexpr int FM_WARPS = 4, FM_QT = 16 * FM_WARPS, FM_KT = 64;
size_t fm_smem_bytes(int hd) {
    return (size_t)2 * 2 * FM_KT * am_rs(hd) * 16;
}

template <int HDIM>
__global__ void __launch_bounds__(FM_WARPS * 32, 2)
    fa_mma_kernel(const float *__restrict__ q, int64_t n_tok, int n_head, int n_head_kv,
                  const __half *__restrict__ K, const __half *__restrict__ V, int64_t pos0, float scale,
                  float *__restrict__ out, const mtplx_cuda_step *__restrict__ dyn) {
    constexpr int KS = HDIM / 16, NT = HDIM / 8, RS = am_rs(HDIM), CPR = HDIM / 8;
    extern __shared__ uint4 fm_sm[]; /* [stage][K, V][FM_KT][RS] */
    pos0 += dyn_pos(dyn);
    const int h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    const int64_t t0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * FM_QT; /* heavy tiles first */
    const int kvh = h / (n_head / n_head_kv);
    const int64_t t_end = t0 + FM_QT < n_tok ? t0 + FM_QT : n_tok;
    const int64_t kend = pos0 + t_end; /* keys [0, kend) serve this block */
    const int64_t tw = t0 + 16 * warp;  /* the warp's first query row */

    /* the warp's rows of Q (tokens tw + gq, tw + gq + 8) as A fragments */
    uint32_t qh[KS][4], ql[KS][4];
    int64_t lim[2]; /* a row sees keys p <= lim (-1: a row past n_tok) */
    float einv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t t = tw + gq + 8 * r;
        const bool live = t < n_tok;
        lim[r] = live ? pos0 + t : -1;
        mma_q_frags<KS>(q + ((size_t)(live ? t : 0) * n_head + h) * HDIM, live, scale, tq, r, qh, ql, einv[r]);
    }
    const int64_t wlim = lim[0] > lim[1] ? lim[0] : lim[1]; /* (per lane; the warp's max below) */
    int64_t warp_lim = wlim;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        long long other = __shfl_xor_sync(0xFFFFFFFFu, (long long)warp_lim, o);
        warp_lim = other > warp_lim ? other : warp_lim;
    }

    const size_t prow = (size_t)n_head_kv * HDIM * 2;
    const char *kb = (const char *)K + (size_t)kvh * HDIM * 2, *vb = (const char *)V + (size_t)kvh * HDIM * 2;
    auto issue = [&](int64_t j, int st) { /* key tile j into stage st, all threads */
        uint4 *ks = fm_sm + (size_t)st * 2 * FM_KT * RS, *vs = ks + FM_KT * RS;
#pragma unroll
        for (int u = 0; u < FM_KT * CPR / (FM_WARPS * 32); u++) {
            const int idx = threadIdx.x + FM_WARPS * 32 * u, r = idx / CPR, c = idx % CPR;
            const int64_t p = j * FM_KT + r;
            const bool ok = p < kend;
            const size_t at = (size_t)(ok ? p : 0) * prow + (size_t)c * 16;
            cp_async16z(ks + r * RS + c, kb + at, ok);
            cp_async16z(vs + r * RS + c, vb + at, ok);
        }
        cp_async_commit();
    };

    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.f, 0.f};
    const int mi = lane >> 3, rr = lane & 7;
    const int64_t nkt = (kend + FM_KT - 1) / FM_KT;
    issue(0, 0);
    for (int64_t j = 0; j < nkt; j++) {
        const int st = (int)(j & 1);
        if (j + 1 < nkt) {
            issue(j + 1, st ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* tile j is in for every warp */
        if (j * FM_KT <= warp_lim) { /* some row of the warp sees a key of the tile */
            const uint4 *ks = fm_sm + (size_t)st * 2 * FM_KT * RS, *vs = ks + FM_KT * RS;
            float s[FM_KT / 8][4];
#pragma unroll
            for (int nt = 0; nt < FM_KT / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
            for (int pr = 0; pr < FM_KT / 16; pr++)
                mma_qk16<KS, RS>(ks + 16 * pr * RS, qh, ql, mi, rr, s[2 * pr], s[2 * pr + 1]);
            mma_softmax_tile<FM_KT / 8, NT>(
                s, j * FM_KT, tq, einv, [&](int r, int64_t p) { return p <= lim[r]; }, m_r, l_r, acc);
#pragma unroll
            for (int kk = 0; kk < FM_KT / 16; kk++)
                mma_pv16<NT, RS>(s[2 * kk], s[2 * kk + 1], vs + 16 * kk * RS, mi, rr, acc);
        }
        __syncthreads(); /* stage st is read before the next issue refills it */
    }
    /* out = O / l (O carried 2^12 P's scale) */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t t = tw + gq + 8 * r;
        if (t >= n_tok) continue;
        const float inv = 1.f / (l_r[r] * AM_PSCALE);
        float *op = out + ((size_t)t * n_head + h) * HDIM;
#pragma unroll
        for (int n = 0; n < NT; n++)
            *(float2 *)(op + 8 * n + 2 * tq) = make_float2(acc[n][2 * r] * inv, acc[n][2 * r + 1] * inv);
    }
}

template <bool F16>
cudaError_t launch_fa(cudaStream_t s, const float *q, int64_t n_tok, int n_head, int n_head_kv,
                      int hd, const void *k, const void *v, int64_t pos0, float scale, float *out,
                      const mtplx_cuda_step *dyn) {
    size_t smem = fa_smem_bytes(hd); /* (above 48 KB for hd 256: mtplx_cuda_attention_init opted in) */
    dim3 grid((unsigned)((n_tok + FA_QT - 1) / FA_QT), (unsigned)n_head);
    fa_kernel<F16><<<grid, FA_WARPS * 32, smem, s>>>(q, n_tok, n_head, n_head_kv, hd, k, v, pos0,
                                                      scale, out, dyn);
    return cudaGetLastError();
}

} // namespace

extern "C" {

#ifdef MTPLX_ATTN_TRACE
/* attn_mma_kernel's stamps of the last launch (MTPLX_ATTN_TRACE builds) */
int mtplx_cuda_attn_trace(unsigned long long *host, int blocks) {
    if (blocks > AM_TRACE_BLOCKS) blocks = AM_TRACE_BLOCKS;
    return cudaMemcpyFromSymbol(host, am_trace, sizeof(unsigned long long) * AM_TRACE_N * blocks) == cudaSuccess
               ? blocks
               : -1;
}
#endif

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
    auto set = [&](auto kern, size_t bytes) {
        if (e == cudaSuccess) e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    };
    set(attn_mma_kernel<64, false>, am_smem_bytes(64)), set(attn_mma_kernel<64, true>, am_smem_bytes(64));
    set(attn_mma_kernel<128, false>, am_smem_bytes(128)), set(attn_mma_kernel<128, true>, am_smem_bytes(128));
    /* the prefill kernels: fa_kernel's most (head_dim 256: 82 KB), fa_mma_kernel's */
    set(fa_kernel<true>, fa_smem_bytes(32 * ATT_MAXE)), set(fa_kernel<false>, fa_smem_bytes(32 * ATT_MAXE));
    set(fa_mma_kernel<64>, fm_smem_bytes(64)), set(fa_mma_kernel<128>, fm_smem_bytes(128));
    return e;
}

cudaError_t mtplx_cuda_attention(cudaStream_t s, const float *q, int64_t n_tok, int n_head,
                                 int n_head_kv, int head_dim, const void *k, const void *v,
                                 int kv_type, int64_t pos0, float scale, float *out,
                                 const mtplx_cuda_step *dyn, bool pdl,
                                 const mtplx_cuda_attn_scratch *scr, int64_t group_from,
                                 int64_t at) {
    /* (attn_kernel takes element pairs; a rotary model's head_dim is even) */
    if (head_dim > 32 * ATT_MAXE || head_dim % 2 || n_head % n_head_kv != 0) return cudaErrorInvalidValue;
    if (n_tok <= 0) return cudaSuccess;
    const int64_t from = mtplx_cuda_attention_group_from(group_from, n_tok, head_dim, kv_type, k, v);
    const bool by_head = mtplx_cuda_attn_by_head(at, from), by_group = mtplx_cuda_attn_by_group(at, n_tok, from);
    /* splits: about two blocks a SM at long contexts (the blocks are per
     * KV head with group, per query head without), fixed by the model's
     * head counts (never by n_tok: see attn_kernel) and the scratch */
    auto split = [&](bool group) {
        mtplx_cuda_attn_split sa = {NULL, NULL, 1, 1 << 30, 0, from, !(scr && scr->late),
                                    scr && scr->head_early};
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
        const bool f16 = kv_type == MTPLX_TYPE_F16, early = sa.head_early;
        /* E = 4 where head_dim allows: fewer registers, more blocks an SM,
         * 4 positions a warp at once (E = 8: 2) */
        auto kern = head_dim <= 32 * 4 ? attn_kernel_for<4>(f16, early) : attn_kernel_for<ATT_MAXE>(f16, early);
        e = launch_k(pdl, kern, grid,
                     dim3(ATT_WARPS * 32), 0, s, q, n_head, n_head_kv, head_dim, k, v, pos0, scale,
                     out, dyn, sa);
        pdl = true;
    }
    if (by_group && e == cudaSuccess && am_ok(head_dim, kv_type == MTPLX_TYPE_F16) &&
        !(scr && scr->group_kind == 1)) {
        mtplx_cuda_attn_split sa = split(true);
        int64_t chunks = (n_tok * (n_head / n_head_kv) + AM_RC - 1) / AM_RC;
        dim3 grid((unsigned)n_head_kv, (unsigned)sa.splits, (unsigned)chunks);
        const bool tma = scr && scr->tma;
        auto kern = head_dim == 64 ? (tma ? attn_mma_kernel<64, true> : attn_mma_kernel<64, false>)
                                   : (tma ? attn_mma_kernel<128, true> : attn_mma_kernel<128, false>);
        e = launch_k(pdl, kern, grid,
                     dim3(AM_WARPS * 32), am_smem_bytes(head_dim), s, q, (int)n_tok, n_head,
                     n_head_kv, (const __half *)k, (const __half *)v, pos0, scale, out, dyn, sa);
    } else if (by_group && e == cudaSuccess) {
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
                                       const mtplx_cuda_step *dyn, bool mma) {
    if (head_dim > 32 * ATT_MAXE || n_head % n_head_kv != 0 ||
        (kv_type != MTPLX_TYPE_F16 && kv_type != MTPLX_TYPE_F32))
        return cudaErrorInvalidValue;
    if (n_tok <= 0) return cudaSuccess;
    if (mma && am_ok(head_dim, kv_type == MTPLX_TYPE_F16) && ((uintptr_t)q & 7) == 0 &&
        (((uintptr_t)k | (uintptr_t)v) & 15) == 0) {
        dim3 grid((unsigned)((n_tok + FM_QT - 1) / FM_QT), (unsigned)n_head);
        auto kern = head_dim == 64 ? fa_mma_kernel<64> : fa_mma_kernel<128>;
        kern<<<grid, FM_WARPS * 32, fm_smem_bytes(head_dim), s>>>(q, n_tok, n_head, n_head_kv, (const __half *)k,
                                                                  (const __half *)v, pos0, scale, out, dyn);
        return cudaGetLastError();
    }
    if (kv_type == MTPLX_TYPE_F16)
        return launch_fa<true>(s, q, n_tok, n_head, n_head_kv, head_dim, k, v, pos0, scale, out, dyn);
    return launch_fa<false>(s, q, n_tok, n_head, n_head_kv, head_dim, k, v, pos0, scale, out, dyn);
}

} // extern "C"
