/* cuda_tool.cuh: what the standalone CUDA programs in tools/ share
 * (cuda_probe.cu, cuda_persist_probe.cu, cuda_mmv_bench.cu,
 * cuda_gemm_bench.cu, cuda_attn_bench.cu): CK(x) prints a failed CUDA call
 * and exits with status 1 (from main or from any function);
 * launch_median_ms times launches, graph_median_ms a graph; tool_hash
 * makes the random test data. */
#ifndef MTPLX_CUDA_TOOL_CUH
#define MTPLX_CUDA_TOOL_CUH

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cuda_runtime.h>
#include <vector>

#define CK(x)                                                                                \
    do {                                                                                     \
        cudaError_t e_ = (x);                                                                \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                         \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* The median ms of reps calls of launch() (work put on st; events around
 * each), after warm calls that are not timed. */
template <class Launch> static inline double launch_median_ms(cudaStream_t st, Launch launch, int reps, int warm) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < warm; i++) launch();
    std::vector<float> ts;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(a, st));
        launch();
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    cudaEventDestroy(a), cudaEventDestroy(b);
    return ts[ts.size() / 2];
}
/* ... of launches of the graph ge */
static inline double graph_median_ms(cudaStream_t st, cudaGraphExec_t ge, int reps, int warm) {
    return launch_median_ms(st, [&] { CK(cudaGraphLaunch(ge, st)); }, reps, warm);
}

/* 32 random-looking bits for element i of a buffer filled with seed (the
 * fills of random weights and caches) */
__device__ __forceinline__ uint32_t tool_hash(size_t i, uint32_t seed) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    return h;
}

#endif
