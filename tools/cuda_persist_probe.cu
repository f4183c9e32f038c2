/* cuda_persist_probe.cu: what a decode step's chain of GEMVs costs when
 * each matrix is a kernel (a CUDA graph with programmatic dependent launch,
 * as the backend runs it) against other ways of running the chain (issue
 * 10: the 0.6B goal is a matter of what each dependent step costs). Not
 * part of the build:
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc tools/cuda_persist_probe.cu -o persist_probe
 *   ./persist_probe [0.6b|1.7b] [head 0|1] [blocks an SM 1|2] [staged blocks an SM 1|2]
 *   environment: STAGE_KB (f32 stream's ring stage, 32), CW (its consumer
 *   warps, 8 or 16), TAGGED (0: a counter barrier instead of tags), TC_MODE
 *   (tensor-core stream: 1 no arithmetic, 2 an accumulator a k step, 3
 *   weights not read from the ring, 4 nor x from shared memory),
 *   TRACE_F (trace the f32 stream instead of the tensor-core one)
 *
 * The chain is a Qwen3 decode step's four BF16 matrices a layer (fused QKV,
 * o-proj, gate + up as one matrix, down; random weights) times its layers,
 * and the output head when asked. Each matrix is multiplied by the output of
 * the one before (its first k values), through global memory, as in the
 * real step; no norms, attention or SwiGLU. The variants:
 * - A: a kernel a matrix (graph, PDL), two blocks of 8 warps an SM; a warp
 *   a row, each warp's first row loaded before its wait (as mmv_tc.cu).
 * - B, C: one persistent kernel, a grid barrier between matrices (one
 *   counter; a flag a block).
 * - D, E: a kernel a matrix whose blocks stage their rows (contiguous
 *   bytes) in shared memory before the wait, by cp.async or TMA.
 * - F: one persistent kernel, one block an SM, whose weights never wait
 *   for the matrix before: a producer thread streams the block's rows of
 *   every matrix in turn through a ring of shared-memory stages by TMA,
 *   while the consumer warps wait for x, multiply the stages as they fill
 *   and write y. x is complete when every value carries its round's tag
 *   (one 8-byte word: value and tag; no fence, counter or barrier) or, with
 *   TAGGED=0, after a counter barrier.
 * - G: F over 16-row tiles in mmv_tc's layout, multiplied on tensor cores
 *   (x split into bf16 hi and lo, as mmv_tc), tiles spread over the blocks
 *   so that each streams about the same bytes a layer.
 * - H: A, each kernel first prefetching its share of matrix i + 1 (or + 2,
 *   + 3: all three run) into L2 (cp.async.bulk.prefetch.L2, nothing waits
 *   for it).
 * - I: A over a chain whose layers all reuse layer 0's matrices (L2-
 *   resident): what A costs when no weight comes from HBM.
 * A to F and H give the same bits (the same f32 sums in the same order); G is
 * checked against the tiled f32 chain (max |diff| <= 1e-3 of max |ref|).
 * It traces one launch of G (or F): per matrix kind, the spread of the
 * blocks' ends, how long after the last end the median block has x, and
 * each block's stage waits and arithmetic (block 0's stages in cycles).
 * H200, 0.6B chain, ms (bench/RESULTS.md sections 28, 29, 31): A 0.547;
 * B 0.687, C 0.935; D 0.704, E 0.717 (one block an SM); F 0.469-0.478
 * (tags) and 0.518 (counter); G 0.611-0.695, 0.408 with no arithmetic;
 * H 0.553-0.561 (A 0.545 in that run), I 0.490 (section 34).
 * Prints ms a step (median of 50 graph launches) and GB/s of weights. */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <vector>

#define _Noreturn [[noreturn]]
extern "C" {
#include "kernels/kernels.h"
}
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_util.cuh"
#include "cuda/mmv_tile.cuh" /* ld_stream16: the GEMVs' weight load */

#include "cuda_tool.cuh" /* CK, graph_median_ms, tool_hash */

namespace {

struct Mat {
    const uint4 *w; /* bf16 rows of k */
    int m, k;
};

constexpr int WARPS = 8, G = 8; /* warps a block; 16-byte chunks a lane loads at once */


__device__ __forceinline__ float dot8(uint4 w, const float *x) {
    const uint32_t a[4] = {w.x, w.y, w.z, w.w};
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s = fmaf(__uint_as_float(a[i] << 16), x[2 * i], s);
        s = fmaf(__uint_as_float(a[i] & 0xFFFF0000u), x[2 * i + 1], s);
    }
    return s;
}

/* chunks [c0, c0 + G) of row r's lane share (chunk j of a lane is lane + 32 j) */
__device__ __forceinline__ void load_group(const Mat &M, int r, int c0, int lane, uint4 (&w)[G]) {
    const int nc = M.k / 256; /* chunks a lane */
#pragma unroll
    for (int j = 0; j < G; j++)
        w[j] = c0 + j < nc ? ld_stream16(M.w + (int64_t)r * (M.k / 8) + (c0 + j) * 32 + lane)
                           : make_uint4(0, 0, 0, 0);
}

/* y = M x for the rows of this warp (r = gw, gw + nw, ...); w holds row gw's
 * first group already (when gw < m). x is in shared memory. */
__device__ __forceinline__ void gemv_rows(const Mat &M, const float *xs, float *y, int gw, int nw,
                                          int lane, uint4 (&w)[G]) {
    const int nc = M.k / 256;
    for (int r = gw; r < M.m; r += nw) {
        if (r != gw) load_group(M, r, 0, lane, w);
        float s = 0.f;
        for (int c0 = 0; c0 < nc; c0 += G) {
            if (c0) load_group(M, r, c0, lane, w);
#pragma unroll
            for (int j = 0; j < G; j++)
                if (c0 + j < nc) s += dot8(w[j], xs + 8 * ((c0 + j) * 32 + lane));
        }
#pragma unroll
        for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) y[r] = s;
    }
}

/* x (k floats) into shared memory by the block's first nt threads, through
 * L2 (a kernel before, or another block, wrote it); no barrier */
__device__ __forceinline__ void x_load(float *xs, const float *x, int k, int nt) {
    for (int i = threadIdx.x; i < k; i += nt) xs[i] = __ldcg(x + i);
}

__device__ __forceinline__ void x_to_shared(float *xs, const float *x, int k) {
    x_load(xs, x, k, blockDim.x);
    __syncthreads();
}

constexpr int KMAX = 8192;

/* one matrix: a programmatic dependent of the kernel before. pf.w set
 * (variant H): block b first issues one bulk L2 prefetch of its share
 * (1/grid) of matrix pf's bytes, so that they stream in while this matrix
 * (and the boundary) runs and the next kernel's loads hit L2; nothing waits
 * for it. */
__global__ void __launch_bounds__(WARPS * 32, 2) gemv_kernel(Mat M, const float *x, float *y, Mat pf) {
    __shared__ float xs[KMAX];
    pdl_trigger();
    if (threadIdx.x == 0 && pf.w) {
        const size_t nb = (size_t)pf.m * pf.k * 2, share = ((nb / gridDim.x) + 15) & ~(size_t)15;
        const size_t o = (size_t)blockIdx.x * share;
        if (o < nb) {
            const unsigned len = (unsigned)min(share, nb - o);
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"((const char *)pf.w + o), "r"(len)
                         : "memory");
        }
    }
    const int lane = threadIdx.x & 31, nw = gridDim.x * WARPS;
    const int gw = blockIdx.x * WARPS + (threadIdx.x >> 5);
    uint4 w[G];
    if (gw < M.m) load_group(M, gw, 0, lane, w);
    pdl_wait();
    x_to_shared(xs, x, M.k);
    gemv_rows(M, xs, y, gw, nw, lane, w);
}

/* y[r0 + r] for the block's rows r < rows staged at ws (kc 16-byte chunks
 * a row), x at xs, in gemv_rows' order: a warp a row */
__device__ __forceinline__ void staged_rows(const Mat &M, const uint4 *ws, const float *xs, int rows,
                                            int r0, float *y) {
    const int lane = threadIdx.x & 31, nc = M.k / 256, kc = M.k / 8;
    for (int r = threadIdx.x >> 5; r < rows; r += WARPS) {
        float s = 0.f;
        for (int c = 0; c < nc; c++) s += dot8(ws[r * kc + c * 32 + lane], xs + 8 * (c * 32 + lane));
#pragma unroll
        for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) y[r0 + r] = s;
    }
}

/* one matrix, staged: each block takes a run of whole rows (contiguous
 * bytes), copies all of them into shared memory with cp.async before it
 * waits (no registers held, every load in flight at once), then
 * multiplies from there in gemv_rows' order (the same bits). With one
 * block an SM, the next matrix's block fits beside it and stages its rows
 * while this one runs. Dynamic shared memory: x (k floats), then the rows. */
__global__ void __launch_bounds__(WARPS * 32, 2) gemv_staged_kernel(Mat M, const float *x, float *y) {
    extern __shared__ uint4 dyn[];
    pdl_trigger();
    const int per = (M.m + gridDim.x - 1) / gridDim.x, r0 = blockIdx.x * per;
    const int rows = max(0, min(per, M.m - r0));
    float *xs = (float *)dyn;
    uint4 *ws = dyn + M.k / 4;
    const int kc = M.k / 8; /* 16-byte chunks a row */
    const uint4 *src = M.w + (int64_t)r0 * kc;
    for (int c = threadIdx.x; c < rows * kc; c += blockDim.x) {
        const unsigned a = (unsigned)__cvta_generic_to_shared(ws + c);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(src + c) : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    pdl_wait();
    x_load(xs, x, M.k, blockDim.x);
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    staged_rows(M, ws, xs, rows, r0, y);
}

/* mbarriers and TMA copies (the staged and streamed kernels); gtime, the
 * global timer in ns (the traces) */
__device__ __forceinline__ uint64_t gtime() {
    uint64_t t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void mbar_init(unsigned a, unsigned n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned a, unsigned parity) {
    asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}"
                 ::"r"(a), "r"(parity) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned a) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(a) : "memory");
}
/* the barrier at a expects nb more bytes (and this arrival) */
__device__ __forceinline__ void mbar_expect(unsigned a, unsigned nb) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(nb) : "memory");
}
/* nb bytes from global src to shared dst by TMA, counted on the barrier at a */
__device__ __forceinline__ void tma_copy(unsigned dst, const void *src, unsigned nb, unsigned a) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(nb), "r"(a) : "memory");
}

/* the same, the rows copied by the tensor memory accelerator instead
 * (cp.async.bulk, one thread, 16 KB a copy, completion counted on an
 * mbarrier) */
__global__ void __launch_bounds__(WARPS * 32, 2) gemv_tma_kernel(Mat M, const float *x, float *y) {
    extern __shared__ __align__(128) uint4 dyn[];
    __shared__ __align__(8) uint64_t bar;
    pdl_trigger();
    const int per = (M.m + gridDim.x - 1) / gridDim.x, r0 = blockIdx.x * per;
    const int rows = max(0, min(per, M.m - r0));
    float *xs = (float *)dyn;
    uint4 *ws = dyn + M.k / 4;
    const int kc = M.k / 8;
    const unsigned ba = (unsigned)__cvta_generic_to_shared(&bar);
    if (threadIdx.x == 0) {
        const unsigned bytes = (unsigned)rows * kc * 16, wa = (unsigned)__cvta_generic_to_shared(ws);
        const char *src = (const char *)(M.w + (int64_t)r0 * kc);
        mbar_init(ba, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        mbar_expect(ba, bytes);
        for (unsigned off = 0; off < bytes; off += 16384) tma_copy(wa + off, src + off, min(16384u, bytes - off), ba);
    }
    pdl_wait();
    x_load(xs, x, M.k, blockDim.x);
    __syncthreads();
    mbar_wait(ba, 0);
    staged_rows(M, ws, xs, rows, r0, y);
}

/* A grid barrier on one counter, in halves: a block's arrival (one
 * thread, after the block's writes), and the wait until target arrivals */
__device__ __forceinline__ void grid_arrive(unsigned *count) {
    __threadfence();
    atomicAdd(count, 1u);
}
__device__ __forceinline__ void grid_wait(const unsigned *count, unsigned target) {
    unsigned v;
    do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
    } while (v < target);
}
__device__ __forceinline__ void grid_barrier(unsigned *count, unsigned target) {
    __syncthreads();
    if (threadIdx.x == 0) grid_arrive(count), grid_wait(count, target);
    __syncthreads();
}

/* the same with a flag a block: a block stores its round (release) and its
 * first warp reads every block's flag (acquire) until all have reached it;
 * no atomics, no one address that all blocks write */
__device__ __forceinline__ void flag_barrier(unsigned *flags, unsigned round) {
    __syncthreads();
    if (threadIdx.x < 32) {
        if (threadIdx.x == 0)
            asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flags + blockIdx.x), "r"(round)
                         : "memory");
        for (unsigned b = threadIdx.x; b < gridDim.x; b += 32) {
            unsigned v;
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(flags + b) : "memory");
            } while (v < round);
        }
        __syncwarp();
    }
    __syncthreads();
}

/* the whole chain: matrix i reads buf[i % 2], writes buf[(i + 1) % 2];
 * count: one counter (flags == NULL) or a flag a block */
__global__ void __launch_bounds__(WARPS * 32, 2)
    persist_kernel(const Mat *mats, int nm, float *b0, float *b1, unsigned *count, unsigned *flags) {
    __shared__ float xs[KMAX];
    const int lane = threadIdx.x & 31, nw = gridDim.x * WARPS;
    const int gw = blockIdx.x * WARPS + (threadIdx.x >> 5);
    for (int i = 0; i < nm; i++) {
        const Mat M = mats[i];
        uint4 w[G];
        if (gw < M.m) load_group(M, gw, 0, lane, w);
        if (i && flags) flag_barrier(flags, (unsigned)i);
        else if (i) grid_barrier(count, (unsigned)i * gridDim.x);
        const float *x = i % 2 ? b1 : b0;
        float *y = i % 2 ? b0 : b1;
        x_to_shared(xs, x, M.k);
        gemv_rows(M, xs, y, gw, nw, lane, w);
        __syncthreads(); /* xs is read by all warps before the next x goes in */
    }
}


template <int N> __device__ __forceinline__ void consumers_sync_n() {
    asm volatile("bar.sync 1, %0;" ::"n"(N) : "memory");
}

/* a block's share of matrix M: a run of whole rows, and how many rows a
 * ring stage holds */
struct Span {
    int r0, rows, per_stage;
};
__device__ __forceinline__ Span span_of(const Mat &M, int stage_bytes) {
    const int per = (M.m + gridDim.x - 1) / gridDim.x, r0 = blockIdx.x * per;
    return {r0, max(0, min(per, M.m - r0)), max(1, stage_bytes / (M.k * 2))};
}

/* rows [0, rows) of a stage, R rows a warp at a time sharing each x load
 * (each row's sum in staged_rows' order: the same bits); y through put */
template <int CW, int R, class Put>
__device__ __forceinline__ void stage_rows(const Mat &M, const uint4 *ws, const float *xs, int rows,
                                           Put put) {
    const int lane = threadIdx.x & 31, nc = M.k / 256, kc = M.k / 8;
    for (int g = (threadIdx.x >> 5) * R; g < rows; g += CW * R) {
        float s[R];
#pragma unroll
        for (int q = 0; q < R; q++) s[q] = 0.f;
        for (int c = 0; c < nc; c++) {
            float xv[8];
            const float4 a = *(const float4 *)(xs + 8 * (c * 32 + lane));
            const float4 b = *(const float4 *)(xs + 8 * (c * 32 + lane) + 4);
            xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w, xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
#pragma unroll
            for (int q = 0; q < R; q++)
                if (g + q < rows) s[q] += dot8(ws[(g + q) * kc + c * 32 + lane], xv);
        }
#pragma unroll
        for (int q = 0; q < R; q++) {
#pragma unroll
            for (int o = 16; o; o >>= 1) s[q] += __shfl_xor_sync(0xffffffffu, s[q], o);
            if (lane == 0 && g + q < rows) put(g + q, s[q]);
        }
    }
}

/* a value and the round that wrote it, in one 8-byte word (single-copy
 * atomic): the reader knows the value is there by its tag, so no fence,
 * counter or barrier stands between a writer and its readers */
__device__ __forceinline__ void put_tagged(unsigned long long *p, float v, unsigned tag) {
    const unsigned long long w = (unsigned long long)tag << 32 | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}

/* x of round tag (k floats) from its tagged words into shared memory: each
 * thread's pairs read again until all carry the tag (all loads of a pass in
 * flight at once) */
template <int NT>
__device__ __forceinline__ void tagged_to_shared(float *xs, const unsigned long long *src, int k,
                                                 unsigned tag) {
    constexpr int MAXP = 12; /* pairs a thread: k <= 2 * NT * MAXP */
    unsigned pending = 0;
#pragma unroll
    for (int p = 0; p < MAXP; p++)
        if ((threadIdx.x + p * NT) * 2 < k) pending |= 1u << p;
    while (pending) {
        unsigned long long u[MAXP][2];
#pragma unroll
        for (int p = 0; p < MAXP; p++)
            if (pending >> p & 1)
                asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"
                             : "=l"(u[p][0]), "=l"(u[p][1])
                             : "l"(src + (threadIdx.x + p * NT) * 2));
#pragma unroll
        for (int p = 0; p < MAXP; p++)
            if ((pending >> p & 1) && (unsigned)(u[p][0] >> 32) == tag && (unsigned)(u[p][1] >> 32) == tag) {
                const int e0 = (threadIdx.x + p * NT) * 2;
                xs[e0] = __uint_as_float((unsigned)u[p][0]);
                xs[e0 + 1] = __uint_as_float((unsigned)u[p][1]);
                pending &= ~(1u << p);
            }
    }
}

/* A traced launch's global-timer stamps, a block and matrix: x is in shared
 * memory; its first ring stage is ready; the block's rows are done; its
 * arrival at the counter barrier is out (== done with tags) */
constexpr int TRACE_SLOTS = 4;

/* A ring of nst stages of shared memory, filled by TMA (cp.async.bulk) from
 * one producer thread and emptied by cw consumer warps: stage t % nst holds
 * the t-th copy; full[s] completes when its bytes have landed, empty[s]
 * when every consumer warp has let it go. st4 (block 0, or null): clock64
 * at each copy's issue, and at a consumer's wait, ready and release. */
struct Ring {
    uint64_t *full, *empty;
    const uint8_t *base;
    int stage, nst;
    long long *st4;
    __device__ void init(int cw) const { /* thread 0; the block syncs after */
        for (int s = 0; s < nst; s++) {
            mbar_init((unsigned)__cvta_generic_to_shared(full + s), 1);
            mbar_init((unsigned)__cvta_generic_to_shared(empty + s), cw);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __device__ void put(int t, const void *src, unsigned nb) const { /* the producer */
        const int s = t % nst;
        const unsigned fa = (unsigned)__cvta_generic_to_shared(full + s);
        mbar_wait((unsigned)__cvta_generic_to_shared(empty + s), ((t / nst) & 1) ^ 1);
        if (st4) st4[t * 4] = clock64();
        const unsigned dst = (unsigned)__cvta_generic_to_shared(base) + s * stage;
        mbar_expect(fa, nb);
        tma_copy(dst, src, nb, fa);
    }
    __device__ const uint8_t *get(int t) const { /* every consumer thread */
        const int s = t % nst;
        if (st4 && threadIdx.x == 0) st4[t * 4 + 1] = clock64();
        mbar_wait((unsigned)__cvta_generic_to_shared(full + s), (t / nst) & 1);
        if (st4 && threadIdx.x == 0) st4[t * 4 + 2] = clock64();
        return base + (size_t)s * stage;
    }
    __device__ void release(int t) const { /* every consumer warp, when done with stage t */
        __syncwarp();
        if ((threadIdx.x & 31) == 0) mbar_arrive((unsigned)__cvta_generic_to_shared(empty + t % nst));
        if (st4 && threadIdx.x == 0) st4[t * 4 + 3] = clock64();
    }
};

/* The whole chain as one persistent kernel (one block an SM) whose weights
 * never wait for the matrix before: warp CW (the producer, one thread)
 * copies the block's rows of every matrix in turn, a ring stage at a time,
 * by TMA (cp.async.bulk), as fast as stages come free; the CW consumer
 * warps wait until x is complete, take it into shared memory and multiply
 * the stages as they fill. x complete: TAGGED, every value of x carries
 * its round (put_tagged; the reader spins until each tag is right), else a
 * grid barrier on one counter. So HBM streams weights across the matrix
 * boundaries while the dependency's trip through L2 is paid. */
template <int CW, bool TAGGED>
__global__ void __launch_bounds__((CW + 1) * 32, 1)
    stream_kernel(const Mat *mats, int nm, float *b0, float *b1, unsigned long long *t0,
                  unsigned long long *t1, unsigned *count, int stage_bytes, int nst, int kmax,
                  uint64_t *trace, long long *st4) {
    extern __shared__ __align__(128) uint4 dyn[];
    __shared__ __align__(8) uint64_t full[16], empty[16];
    float *xs = (float *)dyn;
    const Ring ring{full, empty, (const uint8_t *)(dyn + kmax / 4), stage_bytes, nst,
                    blockIdx.x ? nullptr : st4};
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) ring.init(CW);
    __syncthreads();
    if (warp == CW) { /* producer */
        if (lane) return;
        int t = 0;
        for (int i = 0; i < nm; i++) {
            const Mat M = mats[i];
            const Span sp = span_of(M, stage_bytes);
            for (int j = 0; j < sp.rows; j += sp.per_stage, t++)
                ring.put(t, M.w + (int64_t)(sp.r0 + j) * (M.k / 8),
                         (unsigned)min(sp.per_stage, sp.rows - j) * M.k * 2);
        }
        return;
    }
    constexpr int NT = CW * 32;
    int t = 0;
    for (int i = 0; i < nm; i++) {
        const Mat M = mats[i];
        const Span sp = span_of(M, stage_bytes);
        uint64_t *tr = trace ? trace + ((int64_t)i * gridDim.x + blockIdx.x) * TRACE_SLOTS : nullptr;
        if (i == 0) {
            x_load(xs, b0, M.k, NT);
        } else if (TAGGED) {
            tagged_to_shared<NT>(xs, i % 2 ? t1 : t0, M.k, (unsigned)i); /* x of matrix i: tag i */
        } else {
            if (threadIdx.x == 0) grid_wait(count, (unsigned)i * gridDim.x);
            consumers_sync_n<NT>();
            x_load(xs, i % 2 ? b1 : b0, M.k, NT);
        }
        consumers_sync_n<NT>();
        if (tr && threadIdx.x == 0) tr[0] = gtime();
        float *y = (i + 1) % 2 ? b1 : b0; /* plain y: the last matrix (and every one untagged) */
        unsigned long long *yt = (i + 1) % 2 ? t1 : t0;
        const bool plain = !TAGGED || i == nm - 1;
        for (int j = 0; j < sp.rows; j += sp.per_stage, t++) {
            const uint4 *ws = (const uint4 *)ring.get(t);
            if (tr && threadIdx.x == 0 && j == 0) tr[1] = gtime();
            const int nr = min(sp.per_stage, sp.rows - j), r0 = sp.r0 + j;
            auto put = [&](int r, float v) {
                if (plain) y[r0 + r] = v;
                else put_tagged(yt + r0 + r, v, (unsigned)i + 1);
            };
            if (nr > 2 * CW) stage_rows<CW, 4>(M, ws, xs, nr, put);
            else if (nr > CW) stage_rows<CW, 2>(M, ws, xs, nr, put);
            else stage_rows<CW, 1>(M, ws, xs, nr, put);
            ring.release(t);
        }
        consumers_sync_n<NT>(); /* every y of the block written, xs free */
        if (threadIdx.x == 0) {
            if (tr) tr[2] = gtime();
            if (!TAGGED) grid_arrive(count);
            if (tr) tr[3] = gtime();
        }
    }
}


/* ---- the same stream with a tensor-core consumer ----
 * Weights in 16-row tiles (mmv_tc's load-order layout): a tile's k step of
 * 32 elements is 1 KB, row slot j's 64 bytes at 64 j, quad q's 16 bytes
 * at 16 q; a tile is contiguous (16 k 2 bytes). Tile j of matrix i goes to
 * block (base_i + j) % grid, base_i the tiles of the matrices before, so
 * every block streams about the same bytes a layer. A ring stage is 32 k
 * steps of one tile (32 KB); warp w of 8 takes the stage's run of 4 steps
 * w, as mmv_tc's k split with 8 warps; x is split into bf16 hi and lo and
 * both are multiplied (mmv_tc's arithmetic); the warps' partials are summed
 * in warp order. */
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
/* (a, b) as bf16 pairs hi and lo, hi + lo = (a, b) to about 16 bits; a in
 * the low half (mmv_tc.cu's split_x) */
__device__ __forceinline__ void split2(float a, float b, uint32_t &hi, uint32_t &lo) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    const float2 hf = __bfloat1622float2(h);
    const __nv_bfloat162 l = __floats2bfloat162_rn(a - hf.x, b - hf.y);
    hi = *reinterpret_cast<const uint32_t *>(&h);
    lo = *reinterpret_cast<const uint32_t *>(&l);
}

struct TileSpan {
    int first, count, stride; /* the block's tiles of a matrix: first, first + stride, ... */
};
__device__ __forceinline__ TileSpan tiles_of(int m, int base) {
    const int nt = (m + 15) / 16, G = gridDim.x;
    const int first = ((int)blockIdx.x - base % G + G) % G;
    return {first, first < nt ? (nt - first + G - 1) / G : 0, G};
}

__global__ void __launch_bounds__((WARPS + 1) * 32, 1)
    tc_stream_kernel(const Mat *mats, const int *bases, int nm, const float *x0, float *yout,
                     unsigned long long *t0, unsigned long long *t1, int nst, int kmax, uint64_t *trace,
                     long long *st4, int mode) {
    constexpr int CW = WARPS, NT = CW * 32, STAGE = 32 << 10;
    extern __shared__ __align__(128) uint4 dyn[];
    __shared__ __align__(8) uint64_t full[16], empty[16];
    __shared__ float red[CW][16];
    float *xs = (float *)dyn;
    const Ring ring{full, empty, (const uint8_t *)(dyn + kmax / 4), STAGE, nst, blockIdx.x ? nullptr : st4};
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    if (threadIdx.x == 0) ring.init(CW);
    __syncthreads();
    if (warp == CW) { /* producer: the block's tiles of every matrix, 32 KB at a time */
        if (lane) return;
        int t = 0;
        for (int i = 0; i < nm; i++) {
            const Mat M = mats[i];
            const TileSpan ts = tiles_of(M.m, bases[i]);
            const int64_t tb = (int64_t)16 * M.k * 2; /* a tile's bytes */
            for (int c = 0; c < ts.count; c++) {
                const char *tile = (const char *)M.w + (int64_t)(ts.first + c * ts.stride) * tb;
                for (int64_t off = 0; off < tb; off += STAGE, t++)
                    ring.put(t, tile + off, (unsigned)min((int64_t)STAGE, tb - off));
            }
        }
        return;
    }
    int t = 0;
    for (int i = 0; i < nm; i++) {
        const Mat M = mats[i];
        const TileSpan ts = tiles_of(M.m, bases[i]);
        uint64_t *tr = trace ? trace + ((int64_t)i * gridDim.x + blockIdx.x) * TRACE_SLOTS : nullptr;
        if (ts.count) {
            if (i == 0)
                x_load(xs, x0, M.k, NT);
            else
                tagged_to_shared<NT>(xs, i % 2 ? t1 : t0, M.k, (unsigned)i);
        }
        consumers_sync_n<NT>();
        if (tr && threadIdx.x == 0) tr[0] = tr[1] = gtime(); /* (x and its first stage at once) */
        unsigned long long *yt = (i + 1) % 2 ? t1 : t0;
        const int nks = M.k / 32;
        for (int c = 0; c < ts.count; c++) {
            float acc[4] = {0.f, 0.f, 0.f, 0.f};
            for (int s0 = 0; s0 < nks; s0 += 32, t++) {
                const uint8_t *ws = ring.get(t);
            /* mode 1: no arithmetic (the stream alone); mode 2: an
             * accumulator a step, summed after (short mma chains) */
            float acc4[4][4] = {};
            if (mode != 1) {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int st = s0 + 4 * warp + j;
                    if (st < nks) {
                        /* modes 3, 4 (timing only): weights not read from
                         * the ring; 4: nor x from shared memory */
                        const uint4 wlo = mode >= 3 ? make_uint4(lane, st, 1, 2)
                                                    : *(const uint4 *)(ws + (st - s0) * 1024 + g * 64 + q * 16);
                        const uint4 whi = mode >= 3 ? make_uint4(st, lane, 3, 4)
                                                    : *(const uint4 *)(ws + (st - s0) * 1024 + (g + 8) * 64 + q * 16);
                        uint32_t b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                        if (mode == 4) {
                            b[0] = b[1] = b[4] = b[5] = st;
                        } else if (g == 0) {
                            const float4 v0 = *(const float4 *)(xs + st * 32 + 8 * q);
                            const float4 v1 = *(const float4 *)(xs + st * 32 + 8 * q + 4);
                            split2(v0.x, v0.y, b[0], b[4]);
                            split2(v0.z, v0.w, b[1], b[5]);
                            split2(v1.x, v1.y, b[2], b[6]);
                            split2(v1.z, v1.w, b[3], b[7]);
                        }
                        float (&d)[4] = mode == 2 ? acc4[j] : acc;
                        mma16816(d, wlo.x, whi.x, wlo.y, whi.y, b[0], b[1]);
                        mma16816(d, wlo.x, whi.x, wlo.y, whi.y, b[4], b[5]);
                        mma16816(d, wlo.z, whi.z, wlo.w, whi.w, b[2], b[3]);
                        mma16816(d, wlo.z, whi.z, wlo.w, whi.w, b[6], b[7]);
                    }
                }
                if (mode == 2)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[e] += (acc4[0][e] + acc4[1][e]) + (acc4[2][e] + acc4[3][e]);
            } else if (lane == 0) {
                acc[0] += __uint_as_float(*(const unsigned *)(ws + warp * 4096)) * 1e-30f;
            }
                ring.release(t);
            }
            if (q == 0) red[warp][g] = acc[0], red[warp][g + 8] = acc[2];
            consumers_sync_n<NT>();
            if (threadIdx.x < 16) {
                float v = 0.f;
#pragma unroll
                for (int w = 0; w < CW; w++) v += red[w][threadIdx.x];
                const int r = (ts.first + c * ts.stride) * 16 + threadIdx.x;
                if (r < M.m) {
                    if (i == nm - 1) yout[r] = v;
                    else put_tagged(yt + r, v, (unsigned)i + 1);
                }
            }
            consumers_sync_n<NT>(); /* red free again */
        }
        if (tr && threadIdx.x == 0) tr[2] = tr[3] = gtime();
    }
}

/* the reference: y = W x over the tiled layout in f32, a warp a row */
__global__ void tiled_ref_kernel(Mat M, const float *x, float *y) {
    const int r = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= M.m) return;
    const uint16_t *w = (const uint16_t *)M.w;
    const int64_t tile = r / 16, j = r % 16;
    float s = 0.f;
    for (int e = lane; e < M.k; e += 32) {
        const int64_t off = tile * 16 * M.k + (e / 32) * 512 + j * 32 + e % 32;
        s = fmaf(__uint_as_float((uint32_t)w[off] << 16), x[e], s);
    }
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) y[r] = s;
}

__global__ void fill_bf16(uint16_t *p, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const uint32_t h = tool_hash((size_t)i, seed);
        float f = ((int)(h & 0xFFFF) - 32768) * (1.f / 32768.f) * 0.05f;
        p[i] = (uint16_t)(__float_as_uint(f) >> 16);
    }
}

} // namespace

int main(int argc, char **argv) {
    const char *size = argc > 1 ? argv[1] : "0.6b";
    const bool head = argc > 2 && atoi(argv[2]);
    /* 2 blocks an SM (default) fill every slot the GEMV's registers allow,
     * so a matrix's blocks get resident only as the one before's end; with
     * 1, each SM has room for the next matrix's block (launched at once:
     * gemv_kernel triggers first thing), which loads its first weights
     * while the current one runs: 0.641 ms against 0.547 at 2 (0.6B; bench/RESULTS.md section 29). */
    const int blocks_sm = argc > 3 ? std::max(1, std::min(2, atoi(argv[3]))) : 2;
    int d, q, kv, ff, L;
    if (!strcmp(size, "1.7b")) d = 2048, q = 2048, kv = 1024, ff = 6144, L = 28;
    else d = 1024, q = 2048, kv = 1024, ff = 3072, L = 28;
    std::vector<Mat> mats;
    std::vector<std::pair<int, int>> shapes;
    for (int l = 0; l < L; l++) {
        shapes.push_back({q + 2 * kv, d});
        shapes.push_back({d, q});
        shapes.push_back({2 * ff, d});
        shapes.push_back({d, ff});
    }
    if (head) shapes.push_back({151936, d});
    int64_t bytes = 0;
    for (auto [m, k] : shapes) {
        void *p;
        CK(cudaMalloc(&p, (size_t)m * k * 2));
        fill_bf16<<<1024, 256>>>((uint16_t *)p, (int64_t)m * k, (uint32_t)mats.size() * 7919u);
        mats.push_back({(const uint4 *)p, m, k});
        bytes += (int64_t)m * k * 2;
    }
    int64_t maxm = 0;
    for (auto &M : mats) maxm = std::max<int64_t>(maxm, std::max(M.m, M.k));
    float *buf[2];
    unsigned *count, *flags;
    Mat *dm;
    CK(cudaMalloc(&buf[0], maxm * 4));
    CK(cudaMalloc(&buf[1], maxm * 4));
    CK(cudaMalloc(&count, 4));
    CK(cudaMalloc(&flags, 4096 * 4));
    CK(cudaMalloc(&dm, mats.size() * sizeof(Mat)));
    CK(cudaMemcpy(dm, mats.data(), mats.size() * sizeof(Mat), cudaMemcpyHostToDevice));
    std::vector<float> x0(maxm);
    for (int64_t i = 0; i < maxm; i++) x0[i] = (float)((i * 37) % 101) / 101.f - 0.5f;
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persist_kernel, WARPS * 32, 0));
    const int grid = sms * std::min(per_sm, blocks_sm);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const int nm = (int)mats.size();

    /* a graph of the chain: x0 into buf[0], then what body launches */
    auto capture = [&](auto body) {
        cudaGraph_t g;
        cudaGraphExec_t gx;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        CK(cudaMemcpyAsync(buf[0], x0.data(), maxm * 4, cudaMemcpyHostToDevice, st));
        body();
        CK(cudaStreamEndCapture(st, &g));
        CK(cudaGraphInstantiate(&gx, g, 0));
        return gx;
    };
    /* A, one kernel a matrix; B and C, the persistent kernel (one counter,
     * a flag a block) */
    const cudaGraphExec_t ga = capture([&] {
        for (int i = 0; i < nm; i++)
            CK(launch_k(i > 0, gemv_kernel, dim3(grid), dim3(WARPS * 32), 0, st, mats[i],
                        (const float *)buf[i % 2], buf[(i + 1) % 2], Mat{nullptr, 0, 0}));
    });
    const cudaGraphExec_t gb = capture([&] {
        CK(cudaMemsetAsync(count, 0, 4, st));
        persist_kernel<<<grid, WARPS * 32, 0, st>>>(dm, nm, buf[0], buf[1], count, nullptr);
    });
    const cudaGraphExec_t gc = capture([&] {
        CK(cudaMemsetAsync(flags, 0, 4096 * 4, st));
        persist_kernel<<<grid, WARPS * 32, 0, st>>>(dm, nm, buf[0], buf[1], count, flags);
    });
    /* D and E, one staged kernel a matrix (cp.async, TMA): one block an SM
     * unless some block's rows do not fit in half an SM's shared memory;
     * left out where they do not fit at two (the output head) */
    auto stage_bytes = [](const Mat &M, int blocks) {
        return (size_t)M.k * 4 + (size_t)((M.m + blocks - 1) / blocks) * M.k * 2;
    };
    size_t stage_max = 0;
    for (auto &M : mats) stage_max = std::max(stage_max, stage_bytes(M, sms));
    const int dyn_max = (227 - 1) << 10; /* (the TMA kernel's mbarrier is static) */
    CK(cudaFuncSetAttribute(gemv_staged_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            dyn_max));
    CK(cudaFuncSetAttribute(gemv_tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            dyn_max));
    /* the SM's shared memory at its largest for every staged launch: a
     * block of another size of carve-out cannot join an SM until it drains */
    if (!getenv("NO_CARVEOUT"))
        CK(cudaFuncSetAttribute(gemv_staged_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                (int)cudaSharedmemCarveoutMaxShared));
    const int staged_sm = argc > 4 ? atoi(argv[4]) : 1; /* staged blocks an SM asked for */
    const int sgrid = stage_max <= (113 << 10) && staged_sm == 1 ? sms : 2 * sms;
    bool staged_fit = true;
    for (auto &M : mats) staged_fit = staged_fit && stage_bytes(M, sgrid) <= (size_t)dyn_max;
    auto staged_graph = [&](void (*kern)(Mat, const float *, float *)) {
        return capture([&] {
            for (int i = 0; i < nm; i++)
                CK(launch_k(i > 0, kern, dim3(sgrid), dim3(WARPS * 32), stage_bytes(mats[i], sgrid), st,
                            mats[i], (const float *)buf[i % 2], buf[(i + 1) % 2]));
        });
    };
    const cudaGraphExec_t gd = staged_fit ? staged_graph(gemv_staged_kernel) : nullptr;
    const cudaGraphExec_t ge = staged_fit ? staged_graph(gemv_tma_kernel) : nullptr;
    /* F, the streamed persistent kernel: one block an SM, the ring filling
     * what shared memory x leaves (STAGE_KB, 32 by default) */
    int kmax = 0, maxmid = 0;
    for (auto &M : mats) kmax = std::max(kmax, M.k);
    for (int i = 0; i + 1 < nm; i++) maxmid = std::max(maxmid, mats[i].m);
    const int stage_kb = getenv("STAGE_KB") ? atoi(getenv("STAGE_KB")) : 32;
    /* ring stages of stage bytes beside x (at most 16: the kernels' mbarriers) */
    auto ring_stages = [&](int stage) { return std::min(16, (dyn_max - kmax * 4) / stage); };
    const int stage = stage_kb << 10, nst = ring_stages(stage);
    /* CW=16 for 16 consumer warps; TAGGED=0 for the counter */
    const int cw = getenv("CW") ? atoi(getenv("CW")) : 8;
    const bool tagged = !getenv("TAGGED") || atoi(getenv("TAGGED"));
    auto sk = cw == 16 ? (tagged ? stream_kernel<16, true> : stream_kernel<16, false>)
                       : (tagged ? stream_kernel<8, true> : stream_kernel<8, false>);
    CK(cudaFuncSetAttribute(sk, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn_max));
    uint64_t *trace = nullptr;
    CK(cudaMalloc(&trace, (size_t)nm * sms * TRACE_SLOTS * 8));
    long long *st4 = nullptr;
    CK(cudaMalloc(&st4, (size_t)nm * 64 * 4 * 8));
    unsigned long long *tg[2];
    CK(cudaMalloc(&tg[0], maxm * 8));
    CK(cudaMalloc(&tg[1], maxm * 8));
    auto stream_graph = [&](uint64_t *tr) {
        return capture([&] {
            if (tagged) {
                CK(cudaMemsetAsync(tg[0], 0, maxmid * 8, st));
                CK(cudaMemsetAsync(tg[1], 0, maxmid * 8, st));
            } else {
                CK(cudaMemsetAsync(count, 0, 4, st));
            }
            sk<<<sms, (cw + 1) * 32, kmax * 4 + nst * stage, st>>>(dm, nm, buf[0], buf[1], tg[0], tg[1], count,
                                                                   stage, nst, kmax, tr, tr ? st4 : nullptr);
            CK(cudaGetLastError());
        });
    };
    const cudaGraphExec_t gf = stream_graph(nullptr), gt = stream_graph(trace);
    /* G, the tensor-core stream; its reference, the tiled f32 chain */
    std::vector<int> bases(nm);
    for (int i = 0, b = 0; i < nm; i++) bases[i] = b, b += (mats[i].m + 15) / 16;
    int *dbases;
    CK(cudaMalloc(&dbases, nm * 4));
    CK(cudaMemcpy(dbases, bases.data(), nm * 4, cudaMemcpyHostToDevice));
    const int tc_mode = getenv("TC_MODE") ? atoi(getenv("TC_MODE")) : 0;
    const int tc_nst = ring_stages(32 << 10);
    CK(cudaFuncSetAttribute(tc_stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn_max));
    float *tc_out;
    CK(cudaMalloc(&tc_out, maxm * 4));
    auto tc_graph = [&](uint64_t *tr) {
        return capture([&] {
            CK(cudaMemsetAsync(tg[0], 0, maxmid * 8, st));
            CK(cudaMemsetAsync(tg[1], 0, maxmid * 8, st));
            tc_stream_kernel<<<sms, (WARPS + 1) * 32, kmax * 4 + tc_nst * (32 << 10), st>>>(
                dm, dbases, nm, buf[0], tc_out, tg[0], tg[1], tc_nst, kmax, tr, tr ? st4 : nullptr, tc_mode);
            CK(cudaGetLastError());
        });
    };
    const cudaGraphExec_t gg = tc_graph(nullptr), ggt = tc_graph(trace);
    const cudaGraphExec_t gref = capture([&] {
        for (int i = 0; i < nm; i++)
            tiled_ref_kernel<<<(mats[i].m + 7) / 8, 256, 0, st>>>(mats[i], buf[i % 2], buf[(i + 1) % 2]);
    });
    /* same bits: each graph's output, the buffer cleared before */
    const int last = nm % 2;
    auto output = [&](cudaGraphExec_t gx) {
        std::vector<float> y(maxm);
        CK(cudaMemset(buf[last], 0, maxm * 4));
        CK(cudaGraphLaunch(gx, st));
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(y.data(), buf[last], maxm * 4, cudaMemcpyDeviceToHost));
        return y;
    };
    const std::vector<float> ya = output(ga), yb = output(gb), yc = output(gc), yf = output(gf);
    const std::vector<float> yd = staged_fit ? output(gd) : ya, ye = staged_fit ? output(ge) : ya;
    const int mlast = mats.back().m;
    const bool same = memcmp(ya.data(), yb.data(), (size_t)mlast * 4) == 0 &&
                      memcmp(ya.data(), yd.data(), (size_t)mlast * 4) == 0 &&
                      memcmp(ya.data(), ye.data(), (size_t)mlast * 4) == 0 &&
                      memcmp(ya.data(), yc.data(), (size_t)mlast * 4) == 0;
    const bool same_f = memcmp(ya.data(), yf.data(), (size_t)mlast * 4) == 0;
    /* the tensor-core stream against the tiled f32 chain: max |diff| over max |ref| */
    const std::vector<float> yref = output(gref);
    std::vector<float> ytc(mlast);
    CK(cudaGraphLaunch(gg, st));
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(ytc.data(), tc_out, (size_t)mlast * 4, cudaMemcpyDeviceToHost));
    double dmax = 0, rmax = 0;
    for (int r = 0; r < mlast; r++)
        dmax = std::max(dmax, (double)fabsf(ytc[r] - yref[r])), rmax = std::max(rmax, (double)fabsf(yref[r]));
    const bool tc_ok = tc_mode == 1 || tc_mode >= 3 || (dmax <= 1e-3 * rmax && rmax > 0);

    double med[7];
    for (int v = 0; v < 7; v++) {
        if (!staged_fit && (v == 3 || v == 4)) continue;
        med[v] = graph_median_ms(st, v == 6 ? gg : v == 5 ? gf : v == 4 ? ge : v == 3 ? gd : v == 2 ? gc : v ? gb : ga,
                                 50, 10);
    }
    printf("persist_probe %s%s: %d matrices, %.3f GB, grid %d x %d threads; outputs %s\n", size,
           head ? " + head" : "", nm, bytes / 1e9, grid, WARPS * 32,
           same ? "equal bit for bit" : "DIFFER");
    printf("  kernel a matrix (graph, PDL): %.3f ms  %.0f GB/s\n", med[0], bytes / med[0] / 1e6);
    printf("  persistent, one counter:      %.3f ms  %.0f GB/s\n", med[1], bytes / med[1] / 1e6);
    printf("  persistent, a flag a block:   %.3f ms  %.0f GB/s\n", med[2], bytes / med[2] / 1e6);
    if (!staged_fit) {
        printf("  kernel a matrix, staged: not run (a block's rows do not fit in shared memory)\n");
    } else {
        printf("  kernel a matrix, staged (%d blocks): %.3f ms  %.0f GB/s\n", sgrid, med[3],
               bytes / med[3] / 1e6);
        printf("  kernel a matrix, staged by TMA (%d blocks): %.3f ms  %.0f GB/s\n", sgrid, med[4],
               bytes / med[4] / 1e6);
    }
    printf("  persistent, weights streamed (%d x %d KB ring, %d warps, %s): %.3f ms  %.0f GB/s  outputs %s\n", nst,
           stage_kb, cw, tagged ? "tagged x" : "counter", med[5], bytes / med[5] / 1e6, same_f ? "equal" : "DIFFER");
    printf("  persistent, streamed, tensor cores mode %d (%d x 32 KB ring, tiles spread): %.3f ms  %.0f GB/s  "
           "max |diff| %.2e of max |ref| %.2e: %s\n", tc_mode, tc_nst, med[6], bytes / med[6] / 1e6, dmax, rmax,
           tc_ok ? "ok" : "WRONG");
    /* where a streamed matrix's time goes: one traced launch (after a warm one) */
    const bool tct = !getenv("TRACE_F");
    printf("  traced: %s\n", tct ? "tensor-core stream" : "f32 stream");
    for (int w = 0; w < 2; w++) CK(cudaGraphLaunch(tct ? ggt : gt, st));
    CK(cudaStreamSynchronize(st));
    std::vector<uint64_t> tr((size_t)nm * sms * TRACE_SLOTS);
    CK(cudaMemcpy(tr.data(), trace, tr.size() * 8, cudaMemcpyDeviceToHost));
    auto T = [&](int i, int b, int e) { return (double)tr[((size_t)i * sms + b) * TRACE_SLOTS + e]; };
    auto md = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v.empty() ? 0. : v[v.size() / 2]; };
    /* per matrix kind (i % 4), medians over layers of: spread of the blocks'
     * ends; last end -> the median block has the next x; x -> first stage
     * ready; first stage -> end; the arrival; last end to last end */
    const char *kinds[4] = {"qkv", "o", "gate_up", "down"};
    printf("  trace (us, medians over layers): kind  end-spread  x-ready-after-last-end  stage-wait  compute  arrive  step\n");
    for (int kd = 0; kd < 4; kd++) {
        std::vector<double> c[6];
        for (int i = 4 + kd; i + 1 < nm; i += 4) {
            double amin = 1e30, amax = 0, pmax = 0;
            std::vector<double> seen, sw, cp, at;
            for (int b = 0; b < sms; b++) {
                amin = std::min(amin, T(i, b, 2)), amax = std::max(amax, T(i, b, 2));
                pmax = std::max(pmax, T(i - 1, b, 2));
                sw.push_back(T(i, b, 1) - T(i, b, 0));
                cp.push_back(T(i, b, 2) - T(i, b, 1));
                at.push_back(T(i, b, 3) - T(i, b, 2));
            }
            for (int b = 0; b < sms; b++) seen.push_back(T(i + 1, b, 0) - amax);
            c[0].push_back(amax - amin), c[1].push_back(md(seen)), c[2].push_back(md(sw));
            c[3].push_back(md(cp)), c[4].push_back(md(at)), c[5].push_back(amax - pmax);
        }
        printf("  trace %-8s %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f\n", kinds[kd], md(c[0]) / 1e3, md(c[1]) / 1e3,
               md(c[2]) / 1e3, md(c[3]) / 1e3, md(c[4]) / 1e3, md(c[5]) / 1e3);
    }
    /* block 0's stages, cycles: issue -> consumer starts waiting; wait;
     * compute (ready -> done), per matrix kind, medians over layers */
    {
        std::vector<long long> e((size_t)nm * 64 * 4);
        CK(cudaMemcpy(e.data(), st4, e.size() * 8, cudaMemcpyDeviceToHost));
        std::vector<int> first(nm + 1, 0);
        for (int i = 0; i < nm; i++) {
            const int per = (mats[i].m + sms - 1) / sms, rows = std::min(per, mats[i].m);
            const int ps = std::max(1, stage / (mats[i].k * 2));
            const int nt = (mats[i].m + 15) / 16, f0 = (0 - bases[i] % sms + sms) % sms;
            const int tiles0 = f0 < nt ? (nt - f0 + sms - 1) / sms : 0;
            first[i + 1] = first[i] + (tct ? tiles0 * ((mats[i].k / 32 + 31) / 32) : (rows + ps - 1) / ps);
        }
        printf("  block 0 stages (cycles; medians over layers): kind stages  issue->need  wait  compute  need->need\n");
        for (int kd = 0; kd < 4; kd++) {
            std::vector<double> a, w, c, g;
            for (int i = 4 + kd; i + 1 < nm; i += 4)
                for (int t = first[i]; t < first[i + 1]; t++) {
                    a.push_back((double)(e[t * 4 + 1] - e[t * 4]));
                    w.push_back((double)(e[t * 4 + 2] - e[t * 4 + 1]));
                    c.push_back((double)(e[t * 4 + 3] - e[t * 4 + 2]));
                    if (t) g.push_back((double)(e[t * 4 + 1] - e[(t - 1) * 4 + 3]));
                }
            printf("  stages %-8s %d  %8.0f %8.0f %8.0f %8.0f\n", kinds[kd], first[5 + kd] - first[4 + kd], md(a), md(w), md(c), md(g));
        }
    }
    /* H: A with matrix i + PF_AHEAD prefetched into L2 by kernel i
     * (PF_AHEAD 1 by default; 1, 2, 3 all run); I: A over a chain whose
     * layers all reuse layer 0's four matrices (30 MB at 0.6B: they stay in
     * L2), what A would cost if every weight came from L2 */
    {
        auto timed = [&](cudaGraphExec_t gx) { return graph_median_ms(st, gx, 50, 10); };
        for (int ahead = 1; ahead <= 3; ahead++) {
            const cudaGraphExec_t gh = capture([&] {
                for (int i = 0; i < nm; i++) {
                    const Mat none = {nullptr, 0, 0};
                    CK(launch_k(i > 0, gemv_kernel, dim3(grid), dim3(WARPS * 32), 0, st, mats[i],
                                (const float *)buf[i % 2], buf[(i + 1) % 2], i + ahead < nm ? mats[i + ahead] : none));
                }
            });
            const std::vector<float> yh = output(gh);
            const bool same_h = memcmp(ya.data(), yh.data(), (size_t)mlast * 4) == 0;
            const double mh = timed(gh);
            printf("  H kernel a matrix, matrix i+%d prefetched to L2: %.3f ms  %.0f GB/s  outputs %s  (A again: %.3f)\n",
                   ahead, mh, bytes / mh / 1e6, same_h ? "equal" : "DIFFER", timed(ga));
        }
        const cudaGraphExec_t gi = capture([&] {
            for (int i = 0; i < nm; i++) {
                const Mat M = i < nm - (head ? 1 : 0) ? mats[i % 4] : mats[i];
                CK(launch_k(i > 0, gemv_kernel, dim3(grid), dim3(WARPS * 32), 0, st, M,
                            (const float *)buf[i % 2], buf[(i + 1) % 2], Mat{nullptr, 0, 0}));
            }
        });
        const double mi = timed(gi);
        printf("  I kernel a matrix, every layer = layer 0 (L2-resident): %.3f ms  (%.0f GB/s of weights read)\n", mi,
               bytes / mi / 1e6);
    }
    return same && same_f && tc_ok ? 0 : 1;
}
