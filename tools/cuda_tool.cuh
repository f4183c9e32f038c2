/* cuda_tool.cuh: what the standalone CUDA probes in tools/ share
 * (cuda_probe.cu, cuda_persist_probe.cu): CK(x) prints a failed CUDA call
 * and exits with status 1 (from main or from any function). */
#ifndef MTPLX_CUDA_TOOL_CUH
#define MTPLX_CUDA_TOOL_CUH

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x)                                                                                \
    do {                                                                                     \
        cudaError_t e_ = (x);                                                                \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                         \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

#endif
