/* cuda_mmv_bench.cu: the decode / verify GEMVs alone (no attention, no
 * norms, no launches but theirs) on Qwen3-8B shapes, each path on the same
 * weights: mmv.cu's f32 GEMV, mmv_tc.cu (bf16 tensor cores), mmv_i8.cu
 * (int8 tensor cores). What the whole-model bench (tools/cuda_bench.sh)
 * cannot say: how much of a step the matmuls take, and how close each is
 * to the card's copy bandwidth.
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc tools/cuda_mmv_bench.cu \
 *        src/cuda/mmv.cu src/cuda/mmv_tc.cu src/cuda/mmv_i8.cu -o cuda_mmv_bench
 *   ./cuda_mmv_bench [layers [types]]  (default 36 layers, every type; types: any of Q8_0, Q4_K, BF16, e.g. Q8_0,Q4_K)
 *
 * Per type and path: one CUDA graph of `layers` x {QKV (3 weights, one
 * launch), O (+= residual), gate/up + SwiGLU, down (+= residual)}, as
 * backend_cuda.c issues them, replayed 20 times; the median's GB/s counts
 * the weights' bytes once. Then each matmul kind alone at n = 1. BF16 runs
 * row-major and tiled (mtplx_cuda_tile_bf16's layout; the random bytes are
 * simply read as tiles). MTPLX_CUDA_TC_WARPS=4 / 8: one k split for every
 * BF16 weight (by default 8 warps where mmv_tc.cu's bf16_warps says). */
#define _Noreturn [[noreturn]] /* core.h is C11; this file is C++ */
extern "C" {
#include "kernels/kernels.h"
}
#include "cuda/cuda_kernels.h"

#include <algorithm>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "cuda_tool.cuh" /* CK, graph_median_ms, tool_hash */

__global__ void fill_kernel(uint32_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const uint32_t h = tool_hash((size_t)i, seed);
        /* keep f16 scales finite: clear bit 14 of every half (exponent < 16) */
        p[i] = h & 0xBFFFBFFFu;
    }
}
__global__ void fillx_kernel(float *p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
}
__global__ void empty_kernel() {}

static void *dev_rand(size_t bytes, uint32_t seed) {
    void *p;
    CK(cudaMalloc(&p, bytes));
    fill_kernel<<<1024, 256>>>((uint32_t *)p, bytes / 4, seed);
    CK(cudaGetLastError());
    return p;
}

static size_t row_bytes(int type, int64_t k) {
    if (type == MTPLX_TYPE_Q8_0) return mtplx_cuda_q8_0_packed_row(k);
    if (type == MTPLX_TYPE_Q4_K) return (size_t)(k / 256 * 144);
    return (size_t)(2 * k);
}

struct layer {
    void *qkv[3], *o, *gate, *up, *down;
};

enum { D = 4096, DKV = 1024, FF = 12288 };

/* which of the layer's matmuls to issue: bit 0 QKV, 1 O, 2 gate/up, 3 down */
static void issue(cudaStream_t st, int type, const std::vector<layer> &L, int what, bool mma,
                  void *xq, bool pdl, bool tiled, const float *x, float *y, float *yff, int64_t n) {
    /* a job of nseg weights in mode, the settings of this variant */
    auto job = [&](int nseg, int mode) {
        mtplx_cuda_mmv_job j;
        memset(&j, 0, sizeof j);
        j.nseg = nseg, j.mode = mode, j.mma = mma, j.mma_q4k = !xq, j.xq = xq, j.pdl = pdl;
        j.tiled = tiled;
        return j;
    };
    for (const layer &l : L) {
        if (what & 1) {
            mtplx_cuda_mmv_job j = job(3, MTPLX_MMV_STORE);
            for (int s = 0; s < 3; s++)
                j.w[s] = l.qkv[s], j.y[s] = y + s * 16 * D;
            j.m[0] = D, j.m[1] = DKV, j.m[2] = DKV;
            CK(mtplx_cuda_mmv(st, type, &j, D, x, n));
        }
        if (what & 2) {
            mtplx_cuda_mmv_job j = job(1, MTPLX_MMV_ADD);
            j.w[0] = l.o, j.y[0] = y, j.m[0] = D;
            CK(mtplx_cuda_mmv(st, type, &j, D, x, n));
        }
        if (what & 4) {
            mtplx_cuda_mmv_job j = job(2, MTPLX_MMV_SWIGLU);
            j.w[0] = l.gate, j.w[1] = l.up, j.y[0] = yff, j.m[0] = FF, j.m[1] = FF;
            CK(mtplx_cuda_mmv(st, type, &j, D, x, n));
        }
        if (what & 8) {
            mtplx_cuda_mmv_job j = job(1, MTPLX_MMV_ADD);
            j.w[0] = l.down, j.y[0] = y, j.m[0] = D;
            CK(mtplx_cuda_mmv(st, type, &j, FF, x, n));
        }
    }
}

template <typename F> static double time_captured(cudaStream_t st, F f, int reps = 20) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    f();
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    double ms = graph_median_ms(st, ge, reps, 3);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return ms;
}

int main(int argc, char **argv) {
    int nl = argc > 1 ? atoi(argv[1]) : 36;
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, 0));
    printf("%s, %d SMs, L2 %d MB\n", pr.name, pr.multiProcessorCount, pr.l2CacheSize >> 20);

    /* copy bandwidth: 2 x bytes / time, 4 GiB, median of 10 */
    {
        size_t cb = (size_t)4 << 30;
        void *a, *b;
        CK(cudaMalloc(&a, cb));
        CK(cudaMalloc(&b, cb));
        double ms = time_captured(
            st, [&] { CK(cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice, st)); }, 10);
        printf("copy bandwidth: %.0f GB/s\n", 2.0 * cb / ms / 1e6);
        cudaFree(a), cudaFree(b);
    }
    /* a graph node's own cost: 144 empty kernels */
    {
        double ms = time_captured(st, [&] {
            for (int i = 0; i < 144; i++)
                empty_kernel<<<132, 128, 0, st>>>();
        });
        printf("empty kernel in a graph: %.2f us each (144 in a row)\n", ms * 1e3 / 144);
    }

    float *x, *y, *yff;
    CK(cudaMalloc(&x, 16 * FF * sizeof(float)));
    CK(cudaMalloc(&y, 3 * 16 * D * sizeof(float)));
    CK(cudaMalloc(&yff, 16 * FF * sizeof(float)));
    fillx_kernel<<<256, 256>>>(x, 16 * FF);
    CK(cudaMemset(y, 0, 3 * 16 * D * sizeof(float)));
    void *xq;
    CK(cudaMalloc(&xq, mtplx_cuda_mmv_i8_scratch()));
    CK(cudaMemset(xq, 0, mtplx_cuda_mmv_i8_scratch()));

    const int types[] = {MTPLX_TYPE_Q8_0, MTPLX_TYPE_Q4_K, MTPLX_TYPE_BF16};
    const char *tname[] = {"Q8_0", "Q4_K", "BF16"};
    for (int ti = 0; ti < 3; ti++) {
        int type = types[ti];
        if (argc > 2 && !strstr(argv[2], tname[ti])) continue; /* e.g. "Q8_0,Q4_K" */
        std::vector<layer> L(nl);
        uint32_t seed = 1;
        size_t bytes = 0;
        auto mk = [&](int64_t m, int64_t k) {
            size_t b = row_bytes(type, k) * (size_t)m;
            bytes += b;
            return dev_rand(b, seed++);
        };
        for (layer &l : L) {
            l.qkv[0] = mk(D, D), l.qkv[1] = mk(DKV, D), l.qkv[2] = mk(DKV, D);
            l.o = mk(D, D), l.gate = mk(FF, D), l.up = mk(FF, D), l.down = mk(D, FF);
        }
        CK(cudaDeviceSynchronize());
        printf("\n%s: %d layers, %.2f GB of weights\n", tname[ti], nl, bytes / 1e9);
        struct path {
            const char *name;
            bool mma;
            void *xq;
            bool pdl, tiled;
        } paths[] = {{"f32", false, NULL, false, false},
                     {"tc bf16", true, NULL, false, false},
                     {"tc pdl", true, NULL, true, false},
                     {"tiled", true, NULL, false, true},
                     {"tiled pdl", true, NULL, true, true},
                     {"i8", true, xq, false, false},
                     {"i8 pdl", true, xq, true, false}};
        for (const path &p : paths) {
            if (type == MTPLX_TYPE_BF16 && p.xq) continue;
            if (type != MTPLX_TYPE_BF16 && p.tiled) continue;
            double t1 = 0;
            printf("  %-8s", p.name);
            for (int64_t n : {1, 2, 3, 4, 8, 16}) {
                double ms = time_captured(
                    st, [&] { issue(st, type, L, 15, p.mma, p.xq, p.pdl, p.tiled, x, y, yff, n); });
                if (n == 1) {
                    t1 = ms;
                    printf(" n=1 %.3f ms %5.0f GB/s |", ms, bytes / ms / 1e6);
                } else {
                    printf(" n=%lld %.2fx", (long long)n, ms / t1);
                }
            }
            printf("\n           n=1 by kind:");
            const char *kn[] = {"qkv", "o", "gate/up", "down"};
            double share[] = {6144.0 * D, 1.0 * D * D, 2.0 * FF * D, 1.0 * D * FF};
            double tot = 6144.0 * D + D * D + 2.0 * FF * D + D * FF;
            for (int w = 0; w < 4; w++) {
                double ms = time_captured(
                    st, [&] { issue(st, type, L, 1 << w, p.mma, p.xq, p.pdl, p.tiled, x, y, yff, 1); });
                printf("  %s %.0f GB/s (%.1f us)", kn[w], bytes * share[w] / tot / ms / 1e6,
                       ms * 1e3 / nl);
            }
            printf("\n");
            fflush(stdout);
        }
        for (layer &l : L) {
            for (int s = 0; s < 3; s++)
                cudaFree(l.qkv[s]);
            cudaFree(l.o), cudaFree(l.gate), cudaFree(l.up), cudaFree(l.down);
        }
    }
    return 0;
}
