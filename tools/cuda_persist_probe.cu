/* cuda_persist_probe.cu: what a decode step's chain of GEMVs costs as one
 * kernel a matrix (a CUDA graph with programmatic dependent launch, as the
 * backend runs it) against one persistent kernel that runs the whole chain
 * with a grid-wide barrier between matrices (issue 10: the 0.6B goal is a
 * matter of what each kernel boundary costs). Not part of the build:
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc tools/cuda_persist_probe.cu -o persist_probe
 *   ./persist_probe [0.6b|1.7b] [head 0|1] [blocks an SM 1|2] [staged blocks an SM 1|2]
 *
 * The chain is a Qwen3 decode step's four BF16 matrices a layer (fused QKV,
 * o-proj, gate + up as one matrix, down; random weights) times its layers,
 * and the output head when asked. Each matrix is multiplied by the output of
 * the one before (its first k values), through global memory, as in the
 * real step; no norms, attention or SwiGLU (the matrices are what both
 * shapes share). Both variants run the same GEMV code on the same grid (two
 * blocks of 8 warps an SM): a warp takes one row at a time, its lanes 16
 * bytes of weights each per 256 elements of k; before it waits for x (PDL's
 * wait, or the barrier) each warp loads its first row's weights, as
 * mmv_tc.cu does. The persistent kernel's barrier is either a counter in
 * global memory (each block adds one after a fence and spins until the
 * count of its round is reached) or a flag a block (each block stores its
 * round; each block's first warp reads all flags until they reach it).
 * Two more variants are a kernel a matrix with each block's rows (a run
 * of whole rows, contiguous bytes) staged in shared memory before the wait,
 * by cp.async or by the tensor memory accelerator (cp.async.bulk), one
 * block an SM so that the next matrix's block fits beside it and stages
 * its rows while this one runs (or two an SM, the last argument).
 * The outputs of all variants must be equal bit for bit (the same
 * arithmetic in the same order); the probe says so. H200, 0.6B, ms:
 * kernel a matrix 0.547, persistent 0.675 / 0.93, staged 0.703 (cp.async)
 * and 0.716 (TMA) at one block an SM (bench/RESULTS.md sections 28, 29).
 * Prints ms a step (median of 50 graph launches) and GB/s of weights. */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <vector>

#define _Noreturn [[noreturn]]
extern "C" {
#include "kernels/kernels.h"
}
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_util.cuh"
#include "cuda/mmv_tile.cuh" /* ld_stream16: the GEMVs' weight load */

#include "cuda_tool.cuh" /* CK */

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

__device__ __forceinline__ void x_to_shared(float *xs, const float *x, int k) {
    for (int i = threadIdx.x; i < k; i += blockDim.x) xs[i] = __ldcg(x + i);
    __syncthreads();
}

constexpr int KMAX = 8192;

/* one matrix: a programmatic dependent of the kernel before */
__global__ void __launch_bounds__(WARPS * 32, 2) gemv_kernel(Mat M, const float *x, float *y) {
    __shared__ float xs[KMAX];
    pdl_trigger();
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
    for (int i = threadIdx.x; i < M.k; i += blockDim.x) xs[i] = __ldcg(x + i);
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    staged_rows(M, ws, xs, rows, r0, y);
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
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(ba) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(ba), "r"(bytes)
                     : "memory");
        for (unsigned off = 0; off < bytes; off += 16384) {
            const unsigned nb = min(16384u, bytes - off);
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         ::"r"(wa + off), "l"(src + off), "r"(nb), "r"(ba) : "memory");
        }
    }
    pdl_wait();
    for (int i = threadIdx.x; i < M.k; i += blockDim.x) xs[i] = __ldcg(x + i);
    __syncthreads();
    asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n @!p bra W;\n}"
                 ::"r"(ba) : "memory");
    staged_rows(M, ws, xs, rows, r0, y);
}

__device__ __forceinline__ void grid_barrier(unsigned *count, unsigned target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(count, 1u);
        unsigned v;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(count) : "memory");
        } while (v < target);
    }
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

__global__ void fill_bf16(uint16_t *p, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
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
                        (const float *)buf[i % 2], buf[(i + 1) % 2]));
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
    const std::vector<float> ya = output(ga), yb = output(gb), yc = output(gc);
    const std::vector<float> yd = staged_fit ? output(gd) : ya, ye = staged_fit ? output(ge) : ya;
    const int mlast = mats.back().m;
    const bool same = memcmp(ya.data(), yb.data(), (size_t)mlast * 4) == 0 &&
                      memcmp(ya.data(), yd.data(), (size_t)mlast * 4) == 0 &&
                      memcmp(ya.data(), ye.data(), (size_t)mlast * 4) == 0 &&
                      memcmp(ya.data(), yc.data(), (size_t)mlast * 4) == 0;

    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double med[5];
    for (int v = 0; v < (staged_fit ? 5 : 3); v++) {
        std::vector<float> t;
        for (int rep = 0; rep < 60; rep++) {
            CK(cudaEventRecord(e0, st));
            CK(cudaGraphLaunch(v == 4 ? ge : v == 3 ? gd : v == 2 ? gc : v ? gb : ga, st));
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (rep >= 10) t.push_back(ms);
        }
        std::sort(t.begin(), t.end());
        med[v] = t[t.size() / 2];
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
    return same ? 0 : 1;
}
