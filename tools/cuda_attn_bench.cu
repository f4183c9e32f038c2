/* cuda_attn_bench.cu: the step attention alone (attention.cu's
 * mtplx_cuda_attention), decode and verify steps at long contexts, on
 * Qwen3 head shapes with an F16 cache. What the whole-model bench cannot
 * say: the attention's own time a layer and its bandwidth against the
 * card's (bench/RESULTS.md section 36).
 *
 *   nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc tools/cuda_attn_bench.cu \
 *        src/cuda/attention.cu -o cuda_attn_bench
 *   ./cuda_attn_bench [shape [positions [rows]]]
 *     shape: 0.6b (16 query heads, 8 KV, head_dim 128; default) or 8b (32, 8, 128)
 *     positions: a comma list (default 1024,4096,16384); rows: a comma list (1,4,8)
 *   environment: LAYERS (28: caches of that many layers, each read in turn,
 *   so that a step finds none of them in L2), PER_SM (the split's blocks a
 *   SM, 2) and CHUNK (a run's fewest positions, 64): comma lists, a table each, KERNELS (a comma
 * list of mma, group, head; all three), ONE=P,N,K (ncu: no graph, ten plain launches of position P,
 * N rows, kernel K), NODYN=1 (no step block: attn_mma_kernel's loads all after its PDL wait)
 *
 * Per (position, rows, kernel): one CUDA graph of LAYERS attention calls
 * (programmatic dependent launch, as the backend), replayed 20 times; us a
 * call (median / LAYERS) and the cache's bytes a call (K and V of every
 * position the step's last row sees, read once) over that time. The
 * kernels: mma (attn_mma_kernel), group (attn_group_kernel), head
 * (attn_kernel). Each kernel's rows are checked against the first one's
 * (max |diff| over max |out|). */
#define _Noreturn [[noreturn]] /* core.h is C11; this file is C++ */
extern "C" {
#include "kernels/kernels.h"
}
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_layout.h"

#include <cmath>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

#include "cuda_tool.cuh" /* CK, graph_median_ms, tool_hash */

__global__ void fill_half(__half *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const uint32_t h = tool_hash((size_t)i, seed);
        p[i] = __float2half(((float)(h & 0xFFFF) / 32768.f - 1.f));
    }
}
__global__ void fill_float(float *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2246822519u ^ seed;
        h ^= h >> 13, h *= 2654435761u, h ^= h >> 16;
        p[i] = (float)(h & 0xFFFF) / 16384.f - 2.f;
    }
}

/* attention.cu built with -DMTPLX_ATTN_TRACE has it (attn_mma_kernel's
 * per-block stamps, 8 a block, of its last launch) */
extern "C" __attribute__((weak)) int mtplx_cuda_attn_trace(unsigned long long *host, int blocks);

/* READ=P: the cache's bytes alone at P positions, two ways (no attention):
 * strided, block (KV head, run) reads its head's 16-byte chunks of each
 * position as attn_mma_kernel stages them; rows, block (run, KV head) reads
 * the same number of positions' whole rows (all heads, contiguous). Each
 * thread keeps 8 16-byte loads in flight and XORs them into a sink. */
__global__ void read_strided(const uint4 *K, const uint4 *V, int n_kv, int hd_units, int pos,
                             unsigned *sink) {
    const int g = blockIdx.x, runs = gridDim.y, sp = blockIdx.y, len = (pos + runs - 1) / runs;
    const int p0 = sp * len, p1 = min(pos, p0 + len), row = n_kv * hd_units;
    uint4 x = make_uint4(0, 0, 0, 0);
    for (int idx = threadIdx.x; idx < (p1 - p0) * hd_units; idx += blockDim.x * 4) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int k = idx + u * blockDim.x, p = p0 + k / hd_units, c = k % hd_units;
            bool ok = k < (p1 - p0) * hd_units;
            v[2 * u] = ok ? __ldcg(K + (size_t)p * row + g * hd_units + c) : make_uint4(0, 0, 0, 0);
            v[2 * u + 1] =
                ok ? __ldcg(V + (size_t)p * row + g * hd_units + c) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < 8; u++)
            x.x ^= v[u].x, x.y ^= v[u].y, x.z ^= v[u].z, x.w ^= v[u].w;
    }
    if ((x.x ^ x.y ^ x.z ^ x.w) == 0x12345678u) *sink = 1;
}
__global__ void read_rows(const uint4 *K, const uint4 *V, int n_kv, int hd_units, int pos,
                          unsigned *sink) {
    const int blocks = gridDim.x * gridDim.y, b = blockIdx.y * gridDim.x + blockIdx.x;
    const int len = (pos + blocks - 1) / blocks, p0 = b * len, p1 = min(pos, p0 + len),
              row = n_kv * hd_units;
    uint4 x = make_uint4(0, 0, 0, 0);
    for (int idx = threadIdx.x; idx < (p1 - p0) * row; idx += blockDim.x * 4) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int k = idx + u * blockDim.x;
            bool ok = k < (p1 - p0) * row;
            v[2 * u] = ok ? __ldcg(K + (size_t)p0 * row + k) : make_uint4(0, 0, 0, 0);
            v[2 * u + 1] = ok ? __ldcg(V + (size_t)p0 * row + k) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < 8; u++)
            x.x ^= v[u].x, x.y ^= v[u].y, x.z ^= v[u].z, x.w ^= v[u].w;
    }
    if ((x.x ^ x.y ^ x.z ^ x.w) == 0x12345678u) *sink = 1;
}

/* the attention's own loads without its arithmetic: block (KV head, run) of
 * 4 warps, warp w takes sub-tiles of 16 positions j = w mod 4 through two
 * stages of shared memory, K and V rows of 16-byte units hu (+1 pad), by
 * cp.async (16 bytes a lane, as attn_mma_kernel) or tma (one bulk copy of a
 * row's 16 hu units a lane, an mbarrier a stage) */
template <bool TMA>
__global__ void __launch_bounds__(128)
    read_staged(const uint4 *K, const uint4 *V, int n_kv, int pos, unsigned *sink) {
    constexpr int HU = 16, RS = HU + 1, T = 16, W = 4;
    extern __shared__ uint4 sm[];
    __shared__ __align__(8) unsigned long long bar[W][2];
    const int g = blockIdx.x, runs = gridDim.y, sp = blockIdx.y, len = (pos + runs - 1) / runs;
    const int u0 = sp * len, u1 = min(pos, u0 + len), warp = threadIdx.x >> 5,
              lane = threadIdx.x & 31;
    const size_t row = (size_t)n_kv * HU;
    uint4 *ws = sm + (size_t)warp * 2 * 2 * T * RS;
    unsigned ba[2] = {(unsigned)__cvta_generic_to_shared(&bar[warp][0]),
                      (unsigned)__cvta_generic_to_shared(&bar[warp][1])};
    if (TMA && lane == 0) {
        for (int k = 0; k < 2; k++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(ba[k]) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
    auto issue = [&](int j, int st) {
        uint4 *ks = ws + st * 2 * T * RS, *vs = ks + T * RS;
        if (TMA) {
            int r = lane & 15, p = j * T + r;
            bool ok = p >= u0 && p < u1;
            unsigned nb = 0;
            for (int r2 = 0; r2 < T; r2++)
                nb += (j * T + r2 >= u0 && j * T + r2 < u1) ? 2 * HU * 16 : 0;
            if (lane == 0)
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(ba[st]),
                             "r"(nb)
                             : "memory");
            __syncwarp();
            if (ok) {
                const uint4 *src = (lane < 16 ? K : V) + (size_t)p * row + g * HU;
                unsigned dst = (unsigned)__cvta_generic_to_shared((lane < 16 ? ks : vs) + r * RS);
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                             "[%0], [%1], %2, [%3];" ::"r"(dst),
                             "l"(src), "r"(HU * 16), "r"(ba[st])
                             : "memory");
            }
        } else {
            for (int k = 0; k < T * HU / 32; k++) {
                int idx = lane + 32 * k, r = idx / HU, c = idx % HU, p = j * T + r;
                bool ok = p >= u0 && p < u1;
                size_t at = (size_t)(ok ? p : u0) * row + g * HU + c;
                unsigned d1 = (unsigned)__cvta_generic_to_shared(ks + r * RS + c),
                         d2 = (unsigned)__cvta_generic_to_shared(vs + r * RS + c);
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d1), "l"(K + at),
                             "r"(ok ? 16 : 0)
                             : "memory");
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d2), "l"(V + at),
                             "r"(ok ? 16 : 0)
                             : "memory");
            }
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
    };
    unsigned x = 0, ph[2] = {0, 0};
    const int j0 = u0 / T, j1 = (u1 - 1) / T, jf = j0 + (warp - j0 % W + W) % W;
    if (u1 > u0 && jf <= j1) issue(jf, 0);
    for (int j = jf, st = 0; u1 > u0 && j <= j1; j += W, st ^= 1) {
        if (j + W <= j1) issue(j + W, st ^ 1);
        if (TMA) {
            asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], "
                         "%1;\n @!p bra W;\n}" ::"r"(ba[st]),
                         "r"(ph[st])
                         : "memory");
            ph[st] ^= 1;
        } else if (j + W <= j1) {
            asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncwarp();
        const uint4 *ks = ws + st * 2 * T * RS;
        x ^= ks[(lane & 15) * RS + (lane >> 4)].x ^ ks[T * RS + (lane & 15) * RS].y;
        __syncwarp();
    }
    if (x == 0x12345678u) *sink = 1;
}

static std::vector<long> list(const char *s) {
    std::vector<long> v;
    for (const char *p = s; *p;) {
        v.push_back(strtol(p, (char **)&p, 10));
        if (*p == ',') p++;
    }
    return v;
}

int main(int argc, char **argv) {
    std::string shape = argc > 1 ? argv[1] : "0.6b";
    std::vector<long> positions = list(argc > 2 ? argv[2] : "1024,4096,16384");
    std::vector<long> rows = list(argc > 3 ? argv[3] : "1,4,8");
    const int n_head = shape == "8b" ? 32 : 16, n_kv = 8, hd = 128;
    const int layers = getenv("LAYERS") ? atoi(getenv("LAYERS")) : 28;
    std::vector<long> per_sms = list(getenv("PER_SM") ? getenv("PER_SM") : "2");
    std::vector<long> chunks = list(getenv("CHUNK") ? getenv("CHUNK") : "64");
    int per_sm = (int)per_sms[0];
    std::string which = getenv("KERNELS") ? getenv("KERNELS") : "mma,group,head";
    const char *one = getenv("ONE");
    long ctx = 0;
    for (long p : positions)
        ctx = std::max(ctx, p + 16);
    if (one) ctx = std::max(ctx, atol(one) + 16);

    int dev, n_sm;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    CK(mtplx_cuda_attention_init());
    size_t kv_elems = (size_t)ctx * n_kv * hd;
    std::vector<__half *> K(layers), V(layers);
    for (int l = 0; l < layers; l++) {
        CK(cudaMalloc(&K[l], kv_elems * 2));
        CK(cudaMalloc(&V[l], kv_elems * 2));
        fill_half<<<1024, 256>>>(K[l], kv_elems, 2 * l + 1);
        fill_half<<<1024, 256>>>(V[l], kv_elems, 2 * l + 2);
    }
    size_t qn = (size_t)MTPLX_CUDA_STEP_ROWS * n_head * hd;
    float *q, *out[4], *out1;
    CK(cudaMalloc(&q, qn * 4));
    fill_float<<<256, 256>>>(q, qn, 7);
    for (int k = 0; k < 4; k++)
        CK(cudaMalloc(&out[k], qn * 4));
    CK(cudaMalloc(&out1, qn * 4));
    mtplx_cuda_attn_scratch scr;
    memset(&scr, 0, sizeof scr);
    scr.n_sm = n_sm, scr.per_sm = per_sm, scr.slots = 4 * per_sm * n_sm, scr.tile = 0;
    scr.chunk = (int)chunks[0];
    CK(cudaMalloc(&scr.part, mtplx_cuda_attn_part_bytes(4 * 8 * n_sm)));
    size_t cnt_bytes = (size_t)MTPLX_CUDA_STEP_ROWS * MTPLX_CUDA_ATTN_MAX_HEADS * sizeof(int);
    CK(cudaMalloc(&scr.cnt, cnt_bytes));
    CK(cudaMemset(scr.cnt, 0, cnt_bytes));
    CK(cudaDeviceSynchronize());
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const float scale = 1.f / sqrtf((float)hd);
    /* kinds: 0 attn_mma_kernel (cp.async), 1 attn_group_kernel, 2 attn_kernel, 3
     * attn_mma_kernel (TMA) */
    /* the step block (pos0 0), as a captured step passes it: attn_mma_kernel
     * then stages rows before the step's position ahead of its PDL wait;
     * NODYN=1 passes none (plain launches: everything after the wait) */
    mtplx_cuda_step *dyn = NULL;
    if (!getenv("NODYN") || !atoi(getenv("NODYN"))) {
        CK(cudaMalloc(&dyn, sizeof *dyn));
        CK(cudaMemset(dyn, 0, sizeof *dyn));
    }
    auto call = [&](int l, long pos, long n, int kind, float *o) {
        int64_t from = kind != 2 ? 1 : MTPLX_CUDA_ATTN_GROUP_NEVER;
        scr.group_kind = kind == 1, scr.tma = kind == 3;
        CK(mtplx_cuda_attention(st, q, n, n_head, n_kv, hd, K[l], V[l], MTPLX_TYPE_F16, pos, scale,
                                o, dyn, true, &scr, from, pos));
    };
    /* us a call: one CUDA graph of issue(l) for every layer l, median of 20 */
    auto time_layers = [&](auto issue) {
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        for (int l = 0; l < layers; l++)
            issue(l);
        CK(cudaStreamEndCapture(st, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        double ms = graph_median_ms(st, ge, 20, 3);
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
        return ms * 1e3 / layers;
    };
    const char *kname[4] = {"mma", "group", "head", "tma"};
    std::vector<int> kinds;
    for (int k = 0; k < 4; k++)
        if (("," + which + ",").find("," + std::string(kname[k]) + ",") != std::string::npos)
            kinds.push_back(k);

    if (getenv("TRACE") && mtplx_cuda_attn_trace) { /* TRACE=P,N: attn_mma_kernel's phases */
        long pos = 0, n = 1;
        sscanf(getenv("TRACE"), "%ld,%ld", &pos, &n);
        for (int i = 0; i < 4; i++)
            call(i % layers, pos, n, 0, out[0]);
        CK(cudaStreamSynchronize(st));
        std::vector<unsigned long long> tr(4096 * 8);
        int nb = mtplx_cuda_attn_trace(tr.data(), 4096);
        unsigned long long t1 = ~0ull;
        int used = 0;
        for (int b = 0; b < nb; b++)
            if (tr[b * 8 + 1] && tr[b * 8 + 7] >= tr[b * 8 + 1] &&
                tr[b * 8 + 7] - tr[b * 8 + 1] < 1000000) {
                t1 = std::min(t1, tr[b * 8 + 1]);
                used++;
            }
        const char *ph[8] = {"entry",          "after PDL wait",   "setup done", "warp 0 loop done",
                             "all warps done", "partials written", "(unused)",   "end (thread 0)"};
        printf(
            "TRACE %s pos %ld rows %ld: %d blocks stamped; us after the first block's PDL wait\n",
            shape.c_str(), pos, n, used);
        printf("%-18s %8s %8s %8s %8s %8s\n", "stamp", "min", "p10", "p50", "p90", "max");
        for (int k = 0; k < 8; k++) {
            std::vector<double> v;
            for (int b = 0; b < nb; b++)
                if (tr[b * 8 + 1] >= t1 && tr[b * 8 + 7] >= tr[b * 8 + 1] &&
                    tr[b * 8 + 7] - tr[b * 8 + 1] < 1000000 && tr[b * 8 + k])
                    v.push_back(((double)tr[b * 8 + k] - (double)t1) / 1e3);
            if (v.empty()) continue;
            std::sort(v.begin(), v.end());
            auto at = [&](double f) { return v[(size_t)(f * (v.size() - 1))]; };
            printf("%-18s %8.2f %8.2f %8.2f %8.2f %8.2f\n", ph[k], v[0], at(.1), at(.5), at(.9),
                   v.back());
        }
        return 0;
    }
    if (getenv("READ")) {
        unsigned *sink;
        CK(cudaMalloc(&sink, 4));
        for (long pos : list(getenv("READ")))
            for (int runs : {16, 32, 48, 64}) {
                for (int rows = 0; rows < 2; rows++)
                    for (int threads : {128, 256}) {
                        double us = time_layers([&](int l) {
                            auto kern = rows ? read_rows : read_strided;
                            kern<<<dim3(n_kv, runs), threads, 0, st>>>((const uint4 *)K[l],
                                                                       (const uint4 *)V[l], n_kv,
                                                                       hd / 8, (int)pos, sink);
                        });
                        printf("READ pos %-6ld %-8s %3d runs x %d KV heads, %3d threads: %7.2f us  "
                               "%6.0f GB/s\n",
                               pos, rows ? "rows" : "strided", runs, n_kv, threads, us,
                               2.0 * n_kv * hd * 2 * pos / (us * 1e3));
                    }
                /* the attention's staging alone: cp.async, then TMA */
                for (int tma = 0; tma < 2; tma++) {
                    size_t smem = 4 * 2 * 2 * 16 * 17 * 16;
                    CK(cudaFuncSetAttribute(read_staged<false>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)smem));
                    CK(cudaFuncSetAttribute(
                        read_staged<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
                    double us = time_layers([&](int l) {
                        (tma ? read_staged<true>
                             : read_staged<false>)<<<dim3(n_kv, runs), 128, smem, st>>>(
                            (const uint4 *)K[l], (const uint4 *)V[l], n_kv, (int)pos, sink);
                    });
                    printf("READ pos %-6ld %-8s %3d runs x %d KV heads, 128 threads: %7.2f us  "
                           "%6.0f GB/s\n",
                           pos, tma ? "tma" : "cp.async", runs, n_kv, us,
                           2.0 * n_kv * hd * 2 * pos / (us * 1e3));
                }
            }
        return 0;
    }
    if (one) { /* for ncu: plain launches of one configuration */
        long pos = 0, n = 1;
        char kn[16] = "mma";
        sscanf(one, "%ld,%ld,%15s", &pos, &n, kn);
        int kind = !strcmp(kn, "head") ? 2 : !strcmp(kn, "group") ? 1 : !strcmp(kn, "tma") ? 3 : 0;
        for (int i = 0; i < 10; i++)
            call(i % layers, pos, n, kind, out[0]);
        CK(cudaStreamSynchronize(st));
        printf("ONE %s pos %ld rows %ld kernel %s: done\n", shape.c_str(), pos, n, kname[kind]);
        return 0;
    }

    for (long ps : per_sms)
        for (long ch : chunks) {
            per_sm = (int)ps;
            scr.per_sm = per_sm, scr.slots = 4 * per_sm * n_sm, scr.chunk = (int)ch;
            printf(
                "GPU SMs %d, shape %s (%d heads, %d KV heads, head_dim %d), F16 cache, %d layers, "
                "split aims at %d blocks a SM\n",
                n_sm, shape.c_str(), n_head, n_kv, hd, layers, per_sm);
            printf("(runs a split: at least %d positions)\n", scr.chunk);
            printf("%-6s %-5s %-6s %10s %9s %8s %12s\n", "pos", "rows", "kernel", "us a call",
                   "GB/s", "x n=1", "|diff| rel");
            for (long pos : positions) {
                double base[4] = {0, 0, 0, 0};
                for (long n : rows) {
                    for (int kind : kinds) {
                        double us = time_layers([&](int l) { call(l, pos, n, kind, out[kind]); });
                        double bytes = 2.0 * n_kv * hd * 2 * (double)(pos + n);
                        if (n == rows[0]) base[kind] = us;
                        char diff[32] = "";
                        if (kind != kinds[0]) { /* against the first kernel's rows */
                            std::vector<float> a((size_t)n * n_head * hd), b(a.size());
                            CK(cudaMemcpy(a.data(), out[kinds[0]], a.size() * 4,
                                          cudaMemcpyDeviceToHost));
                            CK(cudaMemcpy(b.data(), out[kind], b.size() * 4,
                                          cudaMemcpyDeviceToHost));
                            double md = 0, mx = 0;
                            for (size_t i = 0; i < a.size(); i++) {
                                md = std::max(md, (double)fabsf(a[i] - b[i]));
                                mx = std::max(mx, (double)fabsf(b[i]));
                            }
                            snprintf(diff, sizeof diff, "%.2e", mx > 0 ? md / mx : md);
                        }
                        /* the step's last row alone (a decode step at its position):
                         * the same bits as its row of the step? */
                        const char *same = "";
                        if (n > 1) {
                            size_t rn = (size_t)n_head * hd;
                            std::vector<float> a(rn), b(rn);
                            CK(cudaMemcpy(a.data(), out[kind] + (n - 1) * rn, rn * 4,
                                          cudaMemcpyDeviceToHost));
                            CK(mtplx_cuda_attention(
                                st, q + (n - 1) * rn, 1, n_head, n_kv, hd, K[layers - 1],
                                V[layers - 1], MTPLX_TYPE_F16, pos + n - 1, scale, out1, NULL, true,
                                &scr, kind != 2 ? 1 : MTPLX_CUDA_ATTN_GROUP_NEVER, pos + n - 1));
                            CK(cudaStreamSynchronize(st));
                            CK(cudaMemcpy(b.data(), out1, rn * 4, cudaMemcpyDeviceToHost));
                            same = memcmp(a.data(), b.data(), rn * 4) ? "  last row alone DIFFERS"
                                                                      : "  last row alone ==";
                        }
                        printf("%-6ld %-5ld %-6s %10.2f %9.0f %8.2f %12s%s\n", pos, n, kname[kind],
                               us, bytes / (us * 1e3), us / base[kind], diff, same);
                        fflush(stdout);
                    }
                }
            }
        }
    return 0;
}
