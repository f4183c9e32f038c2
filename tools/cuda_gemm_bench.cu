/* cuda_gemm_bench.cu: the prefill GEMM alone for BF16 weights (issue 10):
 * gemm_bf16.cu's pipelined kernel, x staged in f32 (no scratch) and in
 * bf16 (x rounded once into a scratch, as the backend runs it), against
 * kernels.cu's tc_mm_kernel on the same tiled weights
 * (mtplx_cuda_tile_bf16), Qwen3 0.6B and 8B matrix shapes, n activation
 * rows. Prints ms (median of 20 launches after 3 warm, the bf16 one with
 * its conversion kernel), TFLOP/s (2 n m k / time), max |new - old| over
 * max |old| (the two round their operands the same way, so that is f32
 * summation order only) and whether the two stagings agree bit for bit
 * (they must: the same values in the same order). Then, where
 * mtplx_cuda_gemm_wgmma_ok says yes (gemm_wgmma.cu built for sm_90a, an
 * H100 / H200), the same GEMM on wgmma with blocks of 128 and 256 weight
 * rows (wg128, wg256; x in bf16 as bf16x): ms, TFLOP/s and max |wg - bf16x|
 * over max |bf16x| (the same roundings, the tensor core's own sum order).
 *   tools/cuda_gemm_bench.sh    (builds and runs; output to $OUT)
 *   ./cuda_gemm_bench [n,n,...]   (default 128,512,2048) */
#define _Noreturn [[noreturn]] /* core.h is C11; this file is C++ */
extern "C" {
#include "kernels/kernels.h"
}
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_layout.h"

#include <cmath>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "cuda_tool.cuh" /* CK, launch_median_ms, tool_hash */

__global__ void fill_bf16(uint16_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float f = ((float)(tool_hash(i, seed) & 0xFFFF) / 32768.f - 1.f) * 0.05f;
        uint32_t u;
        memcpy(&u, &f, 4);
        p[i] = (uint16_t)(u >> 16);
    }
}
__global__ void fill_f32(float *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (float)(tool_hash(i, seed) & 0xFFFF) / 32768.f - 1.f;
}

int main(int argc, char **argv) {
    std::vector<long> ns;
    for (char *s = strtok(argc > 1 ? argv[1] : strdup("128,512,2048"), ","); s; s = strtok(NULL, ","))
        ns.push_back(atol(s));
    struct Shape {
        const char *name;
        long m, k;
    } shapes[] = {{"0.6b qkv", 4096, 1024}, {"0.6b o", 1024, 2048},  {"0.6b gate", 3072, 1024},
                  {"0.6b down", 1024, 3072}, {"8b qkv", 6144, 4096},   {"8b o", 4096, 4096},
                  {"8b gate", 12288, 4096},  {"8b down", 4096, 12288}};
    long nmax = 0;
    for (long n : ns) nmax = std::max(nmax, n);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    mtplx_cuda_tc_split sp = {NULL, (size_t)8 << 20, sms}; /* the backend's scratch size (TC_SPLIT_BYTES) */
    CK(cudaMalloc(&sp.buf, sp.bytes));
    CK(mtplx_cuda_gemm_bf16_init());
    printf("GPU SMs %d; BF16 tiled weights, x f32; ms = median of 20; gemm_bf16 with x staged in f32 (f32x) "
           "and in bf16 (bf16x)\n", sms);
    const bool wg = mtplx_cuda_gemm_wgmma_ok(MTPLX_TYPE_BF16, MTPLX_CUDA_W_BF16_TILED, 64);
    if (wg) CK(mtplx_cuda_gemm_wgmma_init());
    printf("%-10s %6s %6s %6s  %8s %8s %8s  %8s %8s %8s  %6s %6s  %-9s %s", "shape", "m", "k", "n", "old ms",
           "f32x ms", "bf16x ms", "old TF/s", "f32x", "bf16x", "x f32x", "x bf16x", "same bits", "max|diff| rel");
    if (wg) printf("  %8s %8s %8s %8s  %9s %9s", "wg128 ms", "wg256 ms", "wg128", "wg256", "wg128 rel", "wg256 rel");
    printf("\n");
    for (auto &S : shapes) {
        uint16_t *raw;
        void *W, *xb;
        float *x, *y0, *y1, *y2;
        const size_t xb_bytes = (size_t)nmax * S.k * 2;
        CK(cudaMalloc(&raw, (size_t)S.m * S.k * 2));
        CK(cudaMalloc(&W, mtplx_cuda_bf16_tiled_bytes(S.m, S.k)));
        CK(cudaMalloc(&x, (size_t)nmax * S.k * 4));
        CK(cudaMalloc(&xb, xb_bytes));
        CK(cudaMalloc(&y0, (size_t)nmax * S.m * 4));
        CK(cudaMalloc(&y1, (size_t)nmax * S.m * 4));
        CK(cudaMalloc(&y2, (size_t)nmax * S.m * 4));
        fill_bf16<<<1024, 256, 0, st>>>(raw, (size_t)S.m * S.k, 17u);
        fill_f32<<<1024, 256, 0, st>>>(x, (size_t)nmax * S.k, 29u);
        CK(mtplx_cuda_tile_bf16(st, raw, W, S.m, S.k));
        for (long n : ns) {
            double t0 = launch_median_ms(st, [&] {
                CK(mtplx_cuda_matmul_tc(st, MTPLX_TYPE_BF16, W, (size_t)S.k * 2, MTPLX_CUDA_W_BF16_TILED, S.m, S.k, x,
                                        n, y0, NULL, &sp));
            }, 20, 3);
            double t1 = launch_median_ms(st, [&] {
                CK(mtplx_cuda_gemm_bf16(st, MTPLX_TYPE_BF16, MTPLX_CUDA_W_BF16_TILED, W, (size_t)S.k * 2, S.m, S.k, x,
                                        n, y1, NULL, NULL, &sp, NULL, 0, 0, false));
            }, 20, 3);
            double t2 = launch_median_ms(st, [&] {
                CK(mtplx_cuda_gemm_bf16(st, MTPLX_TYPE_BF16, MTPLX_CUDA_W_BF16_TILED, W, (size_t)S.k * 2, S.m, S.k, x,
                                        n, y2, NULL, NULL, &sp, xb, xb_bytes, 0, false));
            }, 20, 3);
            std::vector<float> a((size_t)n * S.m), b((size_t)n * S.m), c((size_t)n * S.m);
            CK(cudaStreamSynchronize(st));
            CK(cudaMemcpy(a.data(), y0, a.size() * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(b.data(), y1, b.size() * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(c.data(), y2, c.size() * 4, cudaMemcpyDeviceToHost));
            double dm = 0, am = 0;
            for (size_t i = 0; i < a.size(); i++)
                dm = std::max(dm, (double)fabsf(a[i] - b[i])), am = std::max(am, (double)fabsf(a[i]));
            const bool same = memcmp(b.data(), c.data(), b.size() * 4) == 0;
            const double fl = 2.0 * n * S.m * S.k;
            printf("%-10s %6ld %6ld %6ld  %8.4f %8.4f %8.4f  %8.1f %8.1f %8.1f  %5.2fx %5.2fx  %-9s %.2e", S.name, S.m,
                   S.k, n, t0, t1, t2, fl / t0 / 1e9, fl / t1 / 1e9, fl / t2 / 1e9, t0 / t1, t0 / t2,
                   same ? "yes" : "NO", am > 0 ? dm / am : dm);
            if (wg) {
                double tw[2], rel[2];
                for (int b = 0; b < 2; b++) {
                    CK(cudaMemsetAsync(y0, 0xFF, (size_t)n * S.m * 4, st)); /* NaN until written */
                    tw[b] = launch_median_ms(st, [&] {
                        CK(mtplx_cuda_gemm_bf16(st, MTPLX_TYPE_BF16, MTPLX_CUDA_W_BF16_TILED, W, (size_t)S.k * 2, S.m,
                                                S.k, x, n, y0, NULL, NULL, &sp, xb, xb_bytes, 128 * (b + 1), false));
                    }, 20, 3);
                    CK(cudaStreamSynchronize(st));
                    CK(cudaMemcpy(a.data(), y0, a.size() * 4, cudaMemcpyDeviceToHost));
                    double d = 0, mx = 0;
                    for (size_t i = 0; i < a.size(); i++) {
                        const double e = fabs((double)a[i] - (double)c[i]);
                        if (!(e <= d)) d = std::isnan(e) ? INFINITY : e; /* a NaN: never written */
                        mx = std::max(mx, (double)fabsf(c[i]));
                    }
                    rel[b] = mx > 0 ? d / mx : d;
                }
                printf("  %8.4f %8.4f %8.1f %8.1f  %9.2e %9.2e", tw[0], tw[1], fl / tw[0] / 1e9, fl / tw[1] / 1e9,
                       rel[0], rel[1]);
            }
            printf("\n");
            fflush(stdout);
        }
        cudaFree(raw), cudaFree(W), cudaFree(x), cudaFree(xb), cudaFree(y0), cudaFree(y1), cudaFree(y2);
    }
    return 0;
}
