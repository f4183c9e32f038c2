/* cuda_backend.h: what the CUDA backend offers beyond model/backend.h's
 * interface (whose constructor, mtplx_backend_cuda_new, is declared there).
 *
 * In a build without CUDA (MTPLX_CUDA=OFF) these exist as stubs
 * (model/backend_cuda_stub.c): no devices, MTPLX_ERR_UNSUPPORTED. */
#ifndef MTPLX_CUDA_BACKEND_H
#define MTPLX_CUDA_BACKEND_H

#include "cuda/cuda_layout.h"
#include "model/backend.h"

/* GPUs the CUDA runtime sees (0 without a GPU, a driver or CUDA support). */
int mtplx_cuda_device_count(void);
/* "NVIDIA H200 (sm_90, 132 SMs, 150.0 GB)" into buf; *mem_bytes (may be
 * NULL) gets the device's memory. */
mtplx_status mtplx_cuda_device_name(int device, char *buf, size_t cap, size_t *mem_bytes);

/* The GPU kernels' dequantisation of one row (k % 8 == 0, 16-byte aligned),
 * compiled for and run on the HOST, so tests check the device code's block
 * layouts without a GPU. 0; -1 for an unsupported type; -2 without CUDA. */
int mtplx_cuda_deq_row_host(int type, const void *row, int64_t k, float *out);
/* The GEMVs' own copies of a weight (cuda_layout.h), made and read with
 * the device code on the host: BF16 rows [m][k] into mtplx_cuda_tile_bf16's
 * layout (out: its mtplx_cuda_bf16_tiled_bytes; k % 32 == 0); Q8_0 GGUF
 * rows into MTPLX_CUDA_W_Q8_PACKED or _Q8_I8 (out: m *
 * mtplx_cuda_q8_0_packed_row(k) bytes; k % 64 == 0); and row r of such a
 * copy as the prefill GEMM reads it. Return as mtplx_cuda_deq_row_host. */
int mtplx_cuda_tile_bf16_host(const void *raw, void *out, int64_t m, int64_t k);
int mtplx_cuda_repack_q8_0_host(const void *raw, void *out, int64_t m, int64_t k, int layout);
int mtplx_cuda_deq_layout_row_host(int type, int layout, const void *W, int64_t k, int64_t r,
                                   float *out);
/* The same for the small-n GEMV's dequantisers (mmv.cu), from a GGUF row
 * (Q8_0 is repacked on the host first, as the upload does on the GPU).
 * k a multiple of 32 (F32: 4); 0, -1 for a type mmv does not read, -2
 * without CUDA. */
int mtplx_cuda_mmv_deq_row_host(int type, const void *row, int64_t k, float *out);
/* The mmv kernel's arithmetic (per-lane sums, warp butterfly) for one GGUF
 * row against n <= 16 rows of x [n][k] into out[n], on the host; with norm
 * [k] set, x rows RMS-normed first (eps) as the kernel's fused norm does. k
 * a multiple of 32; returns as mtplx_cuda_mmv_deq_row_host. */
int mtplx_cuda_mmv_row_host(int type, const void *row, int64_t k, const float *x, int64_t n,
                            const float *norm, float eps, float *out);

/* The following take a backend made by mtplx_backend_cuda_new. */
/* Free every uploaded weight / vector and forget the host addresses they came
 * from (for callers that reuse host memory for different weights: tests). */
void mtplx_cuda_forget_params(mtplx_backend *be);
/* Bytes of weights uploaded so far. */
size_t mtplx_cuda_param_bytes(const mtplx_backend *be);
/* Wait for every op issued so far (timing). */
void mtplx_cuda_synchronize(mtplx_backend *be);
/* CUDA graphs for the decode / verify forwards (backend_cuda.c): on by
 * default, off when MTPLX_CUDA_GRAPHS=0 was set when the backend was made.
 * Turning them off drops every capture. */
void mtplx_cuda_set_graphs(mtplx_backend *be, bool on);
typedef struct mtplx_cuda_graph_stats {
    int64_t captured; /* forwards captured (each then ran as its graph) */
    int64_t replayed; /* forwards run as a graph, captures included */
    int64_t plain;    /* eligible forwards run op by op (first sight of a key, failed keys) */
    int64_t failed;   /* captures that failed (their keys stay plain) */
} mtplx_cuda_graph_stats;
mtplx_cuda_graph_stats mtplx_cuda_get_graph_stats(const mtplx_backend *be);
/* The prefill kernels (backend_cuda.c): the tensor-core GEMM (tc; tc_f32:
 * F32 weights too, in bf16; tc_split: k split over more blocks when the
 * tiles leave SMs idle), for forwards of at least tc_min_rows rows, and the
 * flash-style attention (flash), for a sequence of more than
 * MTPLX_CUDA_STEP_ROWS tokens. Set from MTPLX_CUDA_TC (0 / all),
 * MTPLX_CUDA_TC_SPLIT (0) and MTPLX_CUDA_FLASH (0) when the backend is made:
 * all on but tc_f32, tc_min_rows = MTPLX_CUDA_TC_MIN_ROWS. And the decode /
 * verify GEMV on tensor cores for BF16, Q8_0 and Q4_K (mma, mmv_tc.cu; off with
 * MTPLX_CUDA_MMA=0). Q8_0 and Q4_K there verify 4 rows at the cost of 1
 * but decode 1 row 1.6-1.9x slower than the int8 GEMV below, so they have
 * their own switch, mma_q4k: MTPLX_CUDA_MMA_Q4K=1 / 0 sets it, and unset
 * (mma_q4k_auto) a context turns it on only for a backend several contexts
 * share (engine/context.c), whose batched rows near 16. With mma_q4k off
 * (the default, a model with an MTP head included), Q8_0 and Q4_K decode
 * and verify on the int8 tensor cores (mmv_i8.cu: 4 rows 1.05-1.08x one
 * with x in two int8 pieces, i8_pieces; bench/RESULTS.md sections 18, 39,
 * 40; MTPLX_CUDA_I8=0: not), whose GEMV is launched
 * as a programmatic dependent of its x kernel on sm_90 (pdl; off with
 * MTPLX_CUDA_PDL=0: bench/RESULTS.md section 18a). pdl now covers the whole
 * step (backend_cuda.c's header: the GEMVs, norms, attention prep and
 * attention each a dependent of the kernel before). tile: BF16 weights of
 * the tensor-core GEMV (k % 32 == 0) kept in mtplx_cuda_tile_bf16's layout,
 * which the prefill GEMM reads too (MTPLX_CUDA_TILE=0: row-major; the same
 * bits, 8B BF16 decode 10% slower: bench/RESULTS.md section 26). Changing a
 * path drops the captured graphs (and Q8_0's packing, BF16's tiling, where
 * the kernel changes). */
typedef struct mtplx_cuda_paths {
    bool tc, tc_f32, tc_split, flash, mma, mma_q4k, mma_q4k_auto, pdl, tile;
    bool attn_split; /* a step's attention split over positions (MTPLX_CUDA_ATTN_SPLIT) */
    /* a prefill's BF16 tiled weights through gemm_bf16.cu's pipelined GEMM
     * (MTPLX_CUDA_GEMM_BF16=0: kernels.cu's tc_mm_kernel, as other types);
     * gemm_q8 sends Q8_0's repacked copies and Q4_K there too
     * (MTPLX_CUDA_GEMM_Q8=0: tc_mm_kernel; bench/RESULTS.md section 38);
     * gemm_xb has that GEMM round x to bf16 once into a scratch and stage
     * it as bf16 instead of staging f32 (on unless MTPLX_CUDA_GEMM_XB=0;
     * the same bits, 1.2-1.4x faster at 8B: section 39) */
    bool gemm_bf16, gemm_q8, gemm_xb;
    /* that GEMM's BF16 cases (x in bf16) on Hopper's wgmma (gemm_wgmma.cu,
     * where built for sm_90a and on a compute capability 9.0 GPU) with
     * blocks of this many weight rows: 128 (the default: 8B prefill 1.23x
     * the mma.sync kernel's, bench/RESULTS.md section 40) or 256; 0: never
     * (MTPLX_CUDA_GEMM_WGMMA=0 / 128 / 256) */
    int gemm_wgmma;
    /* a prefill's Q, K and V GEMMs (matmul_multi) read one bf16 copy of
     * x, and its gate and up GEMMs (matmul_swiglu) too, the up GEMM
     * applying SwiGLU to the gate's results as it stores: the same bits as
     * the plain matmuls (and silu_mul), three x conversions, a launch and
     * two passes over n x ffn floats a layer fewer: 2048-token prefill
     * 0.7% (8B BF16) to 1.3% (0.6B) faster on an H200 (bench/RESULTS.md
     * section 42). On by default; MTPLX_CUDA_GEMM_FUSE=0 turns it off. */
    bool gemm_fuse;
    /* mmv_i8.cu's int8 pieces of each x value: 2 (unset) or 3
     * (MTPLX_CUDA_I8_PIECES); 0: the kernel's default, 2 */
    int i8_pieces;
    /* a prefill's attention (flash) on tensor cores for an F16 cache with
     * head_dim 64 or 128 (attention.cu's fa_mma_kernel; MTPLX_CUDA_FLASH_MMA=0:
     * fa_kernel's f32 loops, as other shapes) */
    bool flash_mma;
    /* a step's rows of at least this many positions: a block per KV head
     * (attn_group_kernel; MTPLX_CUDA_ATTN_GROUP=N, 0: never, 1: always) */
    int64_t attn_group_from;
    int64_t tc_min_rows;
} mtplx_cuda_paths;
/* The default attn_group_from: about where a block per KV head (on tensor
 * cores, attn_mma_kernel) starts to win on an H200 (bench/RESULTS.md
 * section 45: below 768 positions attn_kernel's decode and verify steps are
 * cheaper at 0.6B and 8B BF16; from 768 on its decode steps still are, by
 * 1.5-5.5%, but its 8-row steps cost 2-8% more and its 4-row steps about
 * the same) */
#define MTPLX_CUDA_ATTN_GROUP_FROM 768
/* A batched verification step of several generations (mtplx_gen_step_many)
 * keeps all its logits, so it has at most MTPLX_LOGITS_ROWS (32) rows: from
 * 33 rows on a forward is a prefill chunk. Below that every matmul takes the
 * GEMV, whose rows do not depend on the batch they came in, so a greedy
 * generation's text does not depend on what else was batched with it. */
#define MTPLX_CUDA_TC_MIN_ROWS 33
mtplx_cuda_paths mtplx_cuda_get_paths(const mtplx_backend *be);
void mtplx_cuda_set_paths(mtplx_backend *be, mtplx_cuda_paths p);
/* Whether paths.gemm_wgmma can take effect: gemm_wgmma.cu built for
 * sm_90a and the GPU of compute capability 9.0. */
bool mtplx_cuda_wgmma_ready(void);
/* Free and total bytes of GPU `device` (cudaMemGetInfo). */
mtplx_status mtplx_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes);

#endif
