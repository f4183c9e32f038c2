/* cuda_tool.cuh: what the standalone CUDA programs in tools/ share
 * (cuda_probe.cu, cuda_persist_probe.cu, cuda_mmv_bench.cu): CK(x) prints a
 * failed CUDA call and exits with status 1 (from main or from any
 * function); graph_median_ms times a graph. */
#ifndef MTPLX_CUDA_TOOL_CUH
#define MTPLX_CUDA_TOOL_CUH

#include <algorithm>
#include <cstdio>
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

/* The median ms of reps launches of ge on st (events around each), after
 * warm launches that are not timed. */
static inline double graph_median_ms(cudaStream_t st, cudaGraphExec_t ge, int reps, int warm) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < warm; i++) CK(cudaGraphLaunch(ge, st));
    std::vector<float> ts;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(a, st));
        CK(cudaGraphLaunch(ge, st));
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

#endif
