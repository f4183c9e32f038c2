/* cuda_probe.cu: how fast the H200 reads weights in the access patterns a
 * decode GEMV can use (issue 10). Not part of the build: the command below
 * compiles it; bench/RESULTS.md section 26 has a run.
 *
 * Each pattern reads matrices of M rows x K bf16 (no arithmetic beyond an
 * xor of every word, stored once per thread so nothing is dropped):
 *   copy   grid-stride 16-byte loads, consecutive lanes consecutive bytes
 *          (the ceiling any layout can reach);
 *   rows   mmv_tc.cu's pattern: a block of 4 warps takes 16 * MT rows; lane
 *          (g, q) reads 16 bytes at element 8 q of a 32-element k step from
 *          rows g and g + 8 of each m-tile; warps take runs of 4 steps in
 *          turn; U steps are loaded before any is used;
 *   tiled  the same loads from a layout where each m-tile's k step is 1 KB
 *          in load order (lane l's row-g bytes at 16 l, its row-g+8 bytes
 *          at 512 + 16 l), so every load instruction reads 512 contiguous
 *          bytes.
 * Prints one line a (pattern, shape, MT, U): median GB/s of 15 passes over a
 * ring of matrices larger than L2.
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc tools/cuda_probe.cu -o cuda_probe */
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <cuda_runtime.h>

#define _Noreturn [[noreturn]]
extern "C" {
#include "kernels/kernels.h"
}
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_util.cuh"
#include "cuda/mmv_tile.cuh" /* ld_stream16: the GEMVs' weight load */

#include "cuda_tool.cuh" /* CK */

__global__ void copy_k(const uint4 *a, int64_t n, uint32_t *sink) {
    uint32_t s = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint4 v = ld_stream16(a + i);
        s ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (s == 0x12345678u) sink[0] = s;
}

__device__ __forceinline__ int64_t step_of(int64_t i, int warp) {
    return ((i / 4) * 4 + warp) * 4 + i % 4;
}

/* TILED: 0 row-major, 1 tiled; K in elements */
template <int TILED, int MT, int U>
__global__ void __launch_bounds__(128) gemv_k(const uint8_t *w, int64_t M, int64_t K, uint32_t *sink) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const int64_t blk = blockIdx.x, nks = K / 32;
    uint32_t s = 0;
    for (int64_t i0 = 0; step_of(i0, warp) < nks; i0 += U) {
        uint4 v[U][MT][2];
#pragma unroll
        for (int j = 0; j < U; j++) {
            int64_t st = step_of(i0 + j, warp);
#pragma unroll
            for (int t = 0; t < MT; t++) {
                int64_t tile = blk * MT + t;
                if (st >= nks) {
                    v[j][t][0] = v[j][t][1] = make_uint4(0, 0, 0, 0);
                } else if (TILED) {
                    const uint8_t *p = w + ((tile * nks + st) << 10) + 16 * lane;
                    v[j][t][0] = ld_stream16(p), v[j][t][1] = ld_stream16(p + 512);
                } else {
                    const uint8_t *p = w + (tile * 16 + g) * 2 * K + 2 * (st * 32 + 8 * q);
                    v[j][t][0] = ld_stream16(p), v[j][t][1] = ld_stream16(p + 16 * K);
                }
            }
        }
#pragma unroll
        for (int j = 0; j < U; j++)
#pragma unroll
            for (int t = 0; t < MT; t++)
#pragma unroll
                for (int h = 0; h < 2; h++) s ^= v[j][t][h].x ^ v[j][t][h].y ^ v[j][t][h].z ^ v[j][t][h].w;
    }
    if (s == 0x12345678u) sink[0] = s;
}

struct Shape {
    const char *name;
    int64_t M, K;
};

/* the median of 15 timed runs of launch() on st (one untimed first), ms */
template <typename F> float median_ms(cudaStream_t st, F launch) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    std::vector<float> ts;
    for (int rep = 0; rep < 16; rep++) {
        cudaEventRecord(e0, st);
        launch();
        cudaEventRecord(e1, st);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (rep) ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return ts[ts.size() / 2];
}

template <int TILED, int MT, int U>
float run_gemv(const std::vector<uint8_t *> &mats, Shape sh, uint32_t *sink, cudaStream_t st) {
    unsigned grid = (unsigned)(sh.M / (16 * MT));
    float ms = median_ms(st, [&] {
        for (uint8_t *m : mats) gemv_k<TILED, MT, U><<<grid, 128, 0, st>>>(m, sh.M, sh.K, sink);
    });
    double bytes = (double)mats.size() * sh.M * sh.K * 2;
    return (float)(bytes / (ms * 1e-3) / 1e9);
}

template <int TILED, int MT, int U> void row(const std::vector<uint8_t *> &mats, Shape sh, uint32_t *sink, cudaStream_t st) {
    int nb = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, gemv_k<TILED, MT, U>, 128, 0);
    printf("%-6s %-8s MT=%d U=%-2d blocks/SM=%d  %7.0f GB/s\n", TILED ? "tiled" : "rows", sh.name, MT, U, nb,
           run_gemv<TILED, MT, U>(mats, sh, sink, st));
}

int main() {
    /* a ring of matrices: 1.6 GB in all, 32x the L2 */
    const size_t ring = 1600ull << 20;
    uint8_t *buf;
    uint32_t *sink;
    CK(cudaMalloc(&buf, ring));
    CK(cudaMalloc(&sink, 64));
    CK(cudaMemset(buf, 1, ring));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    float cms = median_ms(st, [&] { copy_k<<<132 * 16, 256, 0, st>>>((const uint4 *)buf, ring / 16, sink); });
    printf("copy   1.6 GB read-only stream                 %7.0f GB/s\n", ring / (cms * 1e-3) / 1e9);
    Shape shapes[] = {{"gateup", 24576, 4096}, {"down", 4096, 12288}, {"qkv", 6144, 4096}, {"o", 4096, 4096},
                      {"head", 151936, 4096}, {"s-gu", 6144, 1024}, {"s-down", 1024, 3072}};
    for (Shape sh : shapes) {
        size_t mb = (size_t)sh.M * sh.K * 2;
        std::vector<uint8_t *> mats;
        for (size_t off = 0; off + mb <= ring; off += mb) mats.push_back(buf + off);
        row<0, 1, 8>(mats, sh, sink, st);
        row<1, 1, 8>(mats, sh, sink, st);
        row<0, 2, 5>(mats, sh, sink, st);
        row<1, 2, 5>(mats, sh, sink, st);
        row<1, 1, 4>(mats, sh, sink, st);
        row<1, 1, 12>(mats, sh, sink, st);
        row<1, 2, 8>(mats, sh, sink, st);
    }
    CK(cudaGetLastError());
    return 0;
}
