/* backend_cuda.c: the CUDA backend: the backend interface (model/backend.h)
 * over the kernels in kernels.cu and the other .cu files here, one GPU, one
 * stream.
 *
 * Activations and KV caches come from buf_alloc, so they are device memory.
 * Weights, norm vectors, biases and RoPE frequencies are the model's host
 * memory (the mmap, or model-owned f32 arrays): each is uploaded once, on its
 * first use, and found again through a hash map keyed by its host address.
 * The map assumes those host arrays never change while the backend lives
 * (true of a loaded model); mtplx_cuda_forget_params() empties it.
 *
 * Every op is asynchronous on the backend's stream; download() is the one
 * point where the host waits. A CUDA error inside an op is a bug or a dead
 * GPU: it is logged with the op's name and the process stops (ops return
 * nothing to report it through).
 *
 * CUDA graphs. A small model's step is bound by launch overhead (about 20
 * ops per layer, each a launch), so the decode step (1 row) and the verify
 * step (k+1 <= 16 rows) are captured once and replayed. How the step's
 * changing inputs reach a replay: the kernels that depend on the position or
 * the token ids (RoPE, the KV store, attention, the embedding gather) read
 * them from a step block in device memory (mtplx_cuda_step) when given its
 * address. Each replay is therefore two launches: a one-thread kernel that
 * writes this step's position and ids into the block (its arguments are
 * copied at launch, so no host buffer must outlive it), then the graph.
 * Nothing is re-captured or updated per step.
 *   model/forward.c offers every single-sequence forward of <= 16 rows
 * through graph_begin with a key (model, cache, activations, input buffer,
 * rows, kind); equal keys mean the same ops on the same buffers. A key is
 * captured the second time it is seen (the first run uploads the weights it
 * uses, so a capture never uploads), then replayed. While capturing, op
 * positions become offsets from the captured step's position, and gather ids
 * must point into the step's token array; anything else marks the capture
 * bad, and graph_end then reports failure so forward.c issues the ops again
 * without capture. A key whose capture fails is never tried again. Freeing
 * any buffer (a context going away) or forgetting the weights drops every
 * graph, since their addresses are baked into the captures.
 *   The kernels compute the same integers either way, so logits are
 * bit-identical with graphs on and off (tests/test_cuda.c checks it).
 * Graphs are on by default (tools/cuda_test.sh checked them on an H200:
 * bit-identical logits, AR 2527 tok/s with graphs vs 1279 without on the
 * default model); MTPLX_CUDA_GRAPHS=0 in the environment (or
 * mtplx_cuda_set_graphs()) turns them off.
 *
 * Greedy decoding (argmax_rows): the token ids and their log-probabilities
 * are picked on the GPU, so a greedy step copies back 8 bytes per row
 * instead of whole logits rows (engine/generate.c uses it when the caller
 * does not want logits in its token events). On by default as well;
 * MTPLX_CUDA_ARGMAX=0 picks on the host instead. Sampled decoding
 * (temperature > 0, top-k up to 1024, no penalties) draws its tokens and
 * runs MTP's acceptance test on the GPU the same way (sample_rows,
 * sample.cu; MTPLX_CUDA_SAMPLE=0: on the host).
 *
 * Prefill takes two other kernels: the tensor-core GEMM
 * (mtplx_cuda_matmul_tc, forwards of MTPLX_CUDA_TC_MIN_ROWS = 33 rows or
 * more: a batched verification step of several generations has at most 32,
 * cuda_backend.h says why that matters) and the tiled, flash-style attention
 * (mtplx_cuda_attention_flash, a sequence of more than MTPLX_CUDA_STEP_ROWS
 * tokens). Neither is bit-identical to the step kernels, and neither can
 * meet a captured step (at most MTPLX_CUDA_STEP_ROWS rows), so graph and
 * plain steps still agree bit for bit. Both are on by default (checked on
 * an H200: test_cuda, memcheck and racecheck clean; 512-token prefill of a
 * 0.6B BF16 shape 29.0k tok/s against 4.6k without them); the environment
 * turns them off when the backend is made (MTPLX_CUDA_TC=0,
 * MTPLX_CUDA_FLASH=0), and MTPLX_CUDA_TC=all sends F32 weights to the
 * tensor cores too (in bf16: off by default, since an F32 checkpoint is
 * kept for its precision). The GEMM splits k over more blocks when its tiles
 * leave SMs idle, summing the splits in a fixed order through a scratch made
 * here (TC_SPLIT_BYTES); MTPLX_CUDA_TC_SPLIT=0 turns that off alone.
 * mtplx_cuda_set_paths() does the same at run time. BF16 weights in the
 * GEMV's tiled copy take gemm_bf16.cu's pipelined GEMM instead
 * (paths.gemm_bf16), and an F16 cache with head_dim 64 or 128 the
 * tensor-core flash kernel (paths.flash_mma): a 2048-token prefill of an 8B
 * BF16 shape 12.5k tok/s against 2.5k (bench/RESULTS.md section 37).
 *
 * Small-n matmuls and fused ops. Matmuls of n <= 16 rows (decode, verify)
 * run on mmv.cu's GEMV; the Q8_0 weights it reads are repacked once at
 * upload, into a second map, whose copy a prefill's GEMM reads too (a tied
 * embedding is still read in GGUF layout by get_rows). backend.h's fused ops
 * (matmul_multi, matmul_swiglu and matmul_add are mmv modes;
 * qk_norm_rope_store is attn_prep.cu) take a Qwen3 layer's decode step from
 * 19 launches to 8. On an H200 (tools/cuda_bench.sh, 2026-12-01, random
 * weights): 0.6B decode BF16 1.59 -> 1.02 ms, Q8_0 1.70 -> 1.00, Q4_K 1.89
 * -> 1.00; 8B Q4_K 7.91 -> 4.00 ms; test_cuda 250/250, graphs on/off
 * bit-identical, greedy texts identical. Switches, in the
 * environment: MTPLX_CUDA_MMV=0, kernels.cu's mm_kernel for every matmul and
 * no fused matmuls; MTPLX_CUDA_FUSE=0, mmv but no fused op;
 * MTPLX_CUDA_MMA=0, BF16, Q8_0 and Q4_K on mmv.cu's f32 GEMV instead of
 * mmv_tc.cu's tensor cores (which verify 4 rows at the cost of 1, decode
 * Q8_0 about a quarter slower: bench/RESULTS.md section 13); Q8_0 and Q4_K
 * there go to mmv_i8.cu's int8 tensor cores (x made integer once per matmul
 * into the scratch c->xq) unless MTPLX_CUDA_I8=0 (then mmv_tc.cu's bf16
 * ones, as before: bench/RESULTS.md section 18). There the GEMV is launched
 * as a programmatic dependent of the x kernel (sm_90; MTPLX_CUDA_PDL=0: not),
 * and the layers' rmsnorms are folded into the QKV and gate/up matmuls and
 * the final norm into the output head (6 launches a layer instead of 8; the
 * x kernel applies the norm at no cost). mmv_tc.cu takes a fused norm too,
 * but not by default (no faster there: bench/RESULTS.md section 41;
 * norm_ok). MTPLX_CUDA_FUSE_NORM=1 folds them into
 * every mmv path (on the f32 GEMV it made 0.6B BF16 decode 4% faster but n
 * = 4 worse, bench/RESULTS.md section 16), =0 into none (bench/RESULTS.md
 * section 18a).
 *
 * Programmatic dependent launch (PDL, sm_90; cuda_util.cuh's launch_k). A
 * small model's step is a chain of short kernels (8 a layer for BF16), and
 * the gap between two of them (the next kernel's launch, its blocks getting
 * resident, its first weight loads) was most of a 0.6B step. So the step's
 * kernels (the tensor-core and int8 GEMVs and the int8 x kernel, rmsnorm,
 * qk_norm_rope_store, attention, get_rows) are launched as programmatic
 * dependents of the kernel before them: a GEMV is resident while the kernel
 * before it runs and issues its first weights' loads before it waits for
 * its x. Each kernel waits for its
 * predecessor before it reads or writes activations, so the results are the
 * same bits as with plain launches (tests/test_cuda.c checks PDL on == off
 * with graphs on). PDL is asked only where the op before on the stream was a
 * kernel (after_kernel), not after a copy, an upload or at a capture's start.
 * MTPLX_CUDA_PDL=0 turns all of it off (bench/RESULTS.md section 21).
 *
 * The step's attention takes one kernel for rows of fewer than
 * paths.attn_group_from positions (768 unless MTPLX_CUDA_ATTN_GROUP says
 * otherwise) and another from there on (attention.cu; both where a step
 * straddles it). So a graph captured at one position may launch other
 * kernels than a plain step would at another: each capture keeps the step
 * positions where its launches hold (graph_slot's lo, hi; cap_attn_range),
 * and a key replays only there; elsewhere it is captured again (at once:
 * its weights are on the GPU already). Decode gets two captures, a verify
 * step of n rows three (n - 1 straddling positions share one).
 *
 * Left out for now: several GPUs. */
#include "cuda/cuda_backend.h"
#include "cuda/cuda_kernels.h"
#include "kernels/kernels.h"
#include "model/backend.h"
#include "model/model.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const void *host; /* NULL = empty slot */
    void *dev;
    size_t bytes;
} param_slot;

/* host address -> device copy; open addressing, capacity a power of two */
typedef struct {
    param_slot *slot;
    size_t cap, used;
} param_map;

enum { MAX_GRAPHS = 128, PICK_ROWS = 32 };
/* where the rmsnorm before a matmul is fused into it (norm_ok) */
enum { FUSE_NORM_OFF, FUSE_NORM_I8, FUSE_NORM_ALL };
/* split-k partials of the tensor-core GEMM: it splits only while its tiles
 * number fewer than the SMs, so it needs at most about 3 n_sm tiles of
 * 64 x 64 floats (6.5 MB on 132 SMs); it splits less when this is short */
#define TC_SPLIT_BYTES ((size_t)8 << 20)

typedef struct {
    mtplx_graph_key key;
    int seen;
    bool failed; /* capture impossible: plain launches for this key */
    cudaGraphExec_t exec;
    /* the step positions [lo, hi) at which a plain run would launch the
     * same attention kernels as the capture (cu_attention; the step's
     * attention takes one kernel or another by a row's position) */
    int64_t lo, hi;
} graph_slot;

typedef struct {
    mtplx_backend base;
    int device;
    cudaStream_t stream;
    cudaStream_t side; /* uploads that must not land in a capture */
    param_map params;  /* weights as the host has them */
    param_map packed;  /* Q8_0 weights in the mmv layout, BF16 tiled (a tied embedding has both) */
    size_t param_bytes; /* bytes uploaded so far */
    /* the small-n GEMV (mmv.cu) for n <= 16 rows, and the fused ops built on
     * it; off: kernels.cu's mm_kernel and the plain ops (MTPLX_CUDA_MMV=0,
     * MTPLX_CUDA_FUSE=0) */
    bool mmv, fuse;
    int fuse_norm; /* rmsnorm fused into the matmul after it: FUSE_NORM_* (norm_ok) */
    /* gather ids of plain (uncaptured) multi-row get_rows */
    int32_t *ids_dev;
    int64_t ids_cap;
    mtplx_cuda_pick *picks; /* [PICK_ROWS] argmax_rows results, device memory */
    mtplx_cuda_sample_out *souts; /* [MTPLX_CUDA_SAMPLE_ROWS] sample_rows results, device memory */
    /* CUDA graphs (header comment) */
    bool graphs;            /* enabled */
    mtplx_cuda_step *dstep; /* the step block, device memory */
    graph_slot *gs;         /* [MAX_GRAPHS] */
    int n_gs;
    graph_slot *capturing;  /* the slot being captured, or NULL */
    int64_t cap_pos0, cap_n;
    const int32_t *cap_tok;
    bool cap_bad;
    mtplx_cuda_graph_stats gstats;
    mtplx_cuda_paths paths; /* prefill kernels (header comment) */
    mtplx_cuda_tc_split split; /* split-k scratch and the SM count */
    void *gemm_xb; /* gemm_bf16.cu's x in bf16 (gemm_xb_bytes) */
    size_t gemm_xb_bytes;
    mtplx_cuda_attn_scratch attn; /* the step attention's split over positions */
    /* x in integer pieces for mmv_i8.cu (Q8_0 / Q4_K decode and verify on
     * the int8 tensor cores); NULL with MTPLX_CUDA_I8=0: mmv_tc.cu instead */
    void *xq;
    /* the last thing issued on the stream was a kernel: the next kernel may
     * be launched as its programmatic dependent (pdl_next) */
    bool after_kernel;
    /* attn_kernel's early cache loads (cu_attention): 1 always, 0 never
     * (MTPLX_CUDA_ATTN_HEAD_EARLY=1 / =0), -1 by the step (the default) */
    int head_early;
    /* the last fused GEMV of at most 16 rows (a layer's Q/K/V) let the
     * next kernel launch as its blocks started (mtplx_cuda_trig_start);
     * false after a declined one */
    bool multi_trig;
} cuda_backend;

static void check(cudaError_t e, const char *what, const char *file, int line) {
    if (e == cudaSuccess) return;
    mtplx_log(MTPLX_LOG_ERROR, "cuda: %s failed: %s (%s)", what, cudaGetErrorName(e),
              cudaGetErrorString(e));
    mtplx_assert_fail(file, line, what);
}
#define CK(call, what) check((call), (what), __FILE__, __LINE__)

/* Whether the kernel about to be issued may be a programmatic dependent of
 * the one before it (paths.pdl, header comment): only where that one is a
 * kernel (not a copy, an upload or the start of a capture), which is all
 * PDL orders. Call it after the op's uploads (param), right before the
 * launch; launched() after. */
static bool pdl_next(const cuda_backend *c) {
    return c->paths.pdl && c->after_kernel;
}
static void launched(cuda_backend *c) {
    c->after_kernel = true;
}

/* A measurement switch, never for use: MTPLX_CUDA_BENCH_SKIP names kinds
 * of kernel (any of norm, prep, attn, gemv, joined by +) that steps of at
 * most 16 rows leave out, so that a benchmark shows what the rest of a
 * step costs (bench/RESULTS.md section 28). The results are wrong. */
static bool bench_skip(const char *what, int64_t n) {
    static const char *s = (const char *)1;
    if (s == (const char *)1) s = getenv("MTPLX_CUDA_BENCH_SKIP");
    return s && n <= 16 && strstr(s, what);
}

static size_t slot_of(const void *p, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (size_t)h & (cap - 1);
}

static void map_put(param_map *pm, const void *host, void *dev, size_t bytes) {
    if (2 * (pm->used + 1) > pm->cap) {
        size_t ncap = pm->cap ? 2 * pm->cap : 256;
        param_slot *nm = calloc(ncap, sizeof *nm);
        MTPLX_ASSERT(nm != NULL);
        for (size_t i = 0; i < pm->cap; i++) {
            if (!pm->slot[i].host) continue;
            size_t j = slot_of(pm->slot[i].host, ncap);
            while (nm[j].host) j = (j + 1) & (ncap - 1);
            nm[j] = pm->slot[i];
        }
        free(pm->slot);
        pm->slot = nm;
        pm->cap = ncap;
    }
    size_t j = slot_of(host, pm->cap);
    while (pm->slot[j].host && pm->slot[j].host != host)
        j = (j + 1) & (pm->cap - 1);
    if (!pm->slot[j].host) pm->used++;
    pm->slot[j] = (param_slot){host, dev, bytes};
}

/* The device copy of host with at least `bytes`, or NULL (none yet, or one
 * seen smaller before: the caller uploads again, larger). */
static void *map_get(const param_map *pm, const void *host, size_t bytes) {
    if (!pm->cap) return NULL;
    size_t j = slot_of(host, pm->cap);
    while (pm->slot[j].host) {
        if (pm->slot[j].host == host) return pm->slot[j].bytes >= bytes ? pm->slot[j].dev : NULL;
        j = (j + 1) & (pm->cap - 1);
    }
    return NULL;
}

static void map_free(param_map *pm) {
    for (size_t i = 0; i < pm->cap; i++)
        if (pm->slot[i].host) CK(cudaFree(pm->slot[i].dev), "cudaFree (weights)");
    free(pm->slot);
    memset(pm, 0, sizeof *pm);
}

static size_t weight_bytes(const mtplx_weight *w) {
    return mtplx_row_size(w->type, w->k) * (size_t)w->m;
}

/* A new device buffer holding `bytes` of host memory (the upload may still be
 * in flight on the returned stream). */
static void *upload_new(cuda_backend *c, const void *host, size_t bytes, cudaStream_t *on) {
    void *dev = NULL;
    c->after_kernel = false;
    cudaError_t e = cudaMalloc(&dev, bytes);
    if (e != cudaSuccess) {
        mtplx_log(MTPLX_LOG_ERROR, "cuda: out of GPU memory uploading %.1f MB of weights (%.1f MB so far)",
                  (double)bytes / 1e6, (double)c->param_bytes / 1e6);
        CK(e, "cudaMalloc (weights)");
    }
    if (c->capturing) {
        /* never expected (a key is captured on its second run): upload
         * beside the capture, and let the capture fail */
        c->cap_bad = true;
        CK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, c->side), "weight upload");
        CK(cudaStreamSynchronize(c->side), "weight upload (synchronize)");
        *on = c->side;
    } else {
        CK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, c->stream), "weight upload");
        *on = c->stream;
    }
    return dev;
}

/* The device copy of a read-only host array of at least `bytes`. */
static const void *param(cuda_backend *c, const void *host, size_t bytes) {
    if (!host) return NULL;
    void *dev = map_get(&c->params, host, bytes);
    if (dev) return dev;
    cudaStream_t on;
    dev = upload_new(c, host, bytes, &on);
    c->param_bytes += bytes;
    map_put(&c->params, host, dev, bytes);
    return dev;
}

/* Whether weights of this type and k go to mmv_i8.cu with the current
 * paths, which reads its own packing of Q8_0 (mtplx_cuda_repack_q8_0_i8). */
static bool takes_i8(const cuda_backend *c, int type, int64_t k) {
    mtplx_cuda_mmv_job j = {.mma = c->paths.mma, .mma_q4k = c->paths.mma_q4k, .xq = c->xq};
    return c->paths.mma && mtplx_cuda_mmv_i8_ok(type, k, &j);
}

/* Whether a BF16 weight's GEMV jobs go to mmv_tc.cu with the current paths
 * and read it tiled (paths.tile; mtplx_cuda_tile_bf16: 512 contiguous bytes
 * a load). */
static bool tiles_bf16(const cuda_backend *c, const mtplx_weight *w) {
    mtplx_cuda_mmv_job j = {.mma = true, .tiled = true};
    return c->paths.tile && c->mmv && c->paths.mma && w->type == MTPLX_TYPE_BF16 &&
           mtplx_cuda_mmv_tc_ok(w->type, w->k, &j);
}

/* The layout (cuda_layout.h) of a weight's GEMV copy (mmv_weight) under
 * the current paths; MTPLX_CUDA_W_GGUF: the GEMV reads the file's bytes. */
static int mmv_layout(const cuda_backend *c, const mtplx_weight *w) {
    if (tiles_bf16(c, w)) return MTPLX_CUDA_W_BF16_TILED;
    if (w->type != MTPLX_TYPE_Q8_0) return MTPLX_CUDA_W_GGUF;
    return takes_i8(c, w->type, w->k) ? MTPLX_CUDA_W_Q8_I8 : MTPLX_CUDA_W_Q8_PACKED;
}

/* A weight as the mmv kernel reads it: Q8_0 repacked on the GPU (the GGUF
 * bytes go up to a scratch buffer, which is freed once repacked; in the
 * layout of the kernel the current paths send it to), BF16 tiled where
 * tiles_bf16 says so (the same way), the other types as they are. The
 * prefill GEMM reads the same copy (cu_matmul); only get_rows reads the
 * GGUF layout (param), so a tied embedding is on the GPU twice
 * (check_gpu_fit in engine/context.c counts it). */
static const void *mmv_weight(cuda_backend *c, const mtplx_weight *w) {
    bool tiled = tiles_bf16(c, w);
    if (w->type != MTPLX_TYPE_Q8_0 && !tiled) return param(c, w->data, weight_bytes(w));
    size_t bytes = tiled ? mtplx_cuda_bf16_tiled_bytes(w->m, w->k)
                         : mtplx_cuda_q8_0_packed_row(w->k) * (size_t)w->m;
    void *dev = map_get(&c->packed, w->data, bytes);
    if (dev) return dev;
    cudaStream_t on;
    void *raw = upload_new(c, w->data, weight_bytes(w), &on);
    if (cudaMalloc(&dev, bytes) != cudaSuccess) {
        mtplx_log(MTPLX_LOG_ERROR, "cuda: out of GPU memory repacking %.1f MB of %s weights",
                  (double)bytes / 1e6, tiled ? "BF16" : "Q8_0");
        CK(cudaErrorMemoryAllocation, "cudaMalloc (weights)");
    }
    CK(tiled                         ? mtplx_cuda_tile_bf16(on, raw, dev, w->m, w->k)
       : takes_i8(c, w->type, w->k) ? mtplx_cuda_repack_q8_0_i8(on, raw, dev, w->m, w->k)
                                     : mtplx_cuda_repack_q8_0(on, raw, dev, w->m, w->k),
       "weight repack");
    CK(cudaStreamSynchronize(on), "weight repack (synchronize)");
    CK(cudaFree(raw), "cudaFree (repack scratch)");
    c->param_bytes += bytes;
    map_put(&c->packed, w->data, dev, bytes);
    return dev;
}

/* An op's position argument while capturing: the step block's position plus
 * the op's offset from the captured step's (*pos becomes the offset). NULL
 * when not capturing: *pos is used as it is. */
static const mtplx_cuda_step *step_pos(cuda_backend *c, int64_t *pos) {
    if (!c->capturing) return NULL;
    *pos -= c->cap_pos0;
    return c->dstep;
}

/* The mmv job of one weight (more are added by the fused ops); the caller
 * sets .pdl (pdl_next) once the weights are uploaded. */
static mtplx_cuda_mmv_job mmv_job1(cuda_backend *c, int mode, const mtplx_weight *w,
                                   const float *bias, float *y) {
    return (mtplx_cuda_mmv_job){.nseg = 1,
                                .mode = mode,
                                .w = {mmv_weight(c, w)},
                                .bias = {param(c, bias, (size_t)w->m * sizeof(float))},
                                .y = {y},
                                .m = {w->m},
                                .mma = c->paths.mma, .mma_q4k = c->paths.mma_q4k,
                                .xq = c->xq, .xq_pieces = c->paths.i8_pieces,
                                .tiled = tiles_bf16(c, w)};
}

/* Tensor cores for a prefill's many rows (header comment); the GEMV for the
 * rest and for what the tensor-core kernel does not take. Never for a step
 * that may be captured (the test on MTPLX_CUDA_STEP_ROWS holds whatever
 * tc_min_rows a caller sets). */
_Static_assert(MTPLX_CUDA_TC_MIN_ROWS > MTPLX_LOGITS_ROWS,
               "a batched verification step must not reach the tensor cores");
static bool use_tc(const cuda_backend *c, const mtplx_weight *w, const void *W, size_t rb,
                   int64_t n) {
    return c->paths.tc && n >= c->paths.tc_min_rows && n > MTPLX_CUDA_STEP_ROWS &&
           (w->type != MTPLX_TYPE_F32 || c->paths.tc_f32) &&
           mtplx_cuda_matmul_tc_ok(w->type, W, rb, w->k);
}

/* Whether matmul_pipelined takes w (W in layout) for x of n rows. */
static bool pipelined_ok(const cuda_backend *c, const mtplx_weight *w, int layout, const void *W,
                         const float *x, int64_t n) {
    return c->paths.gemm_bf16 && (w->type == MTPLX_TYPE_BF16 || c->paths.gemm_q8) && !((uintptr_t)W & 15) &&
           mtplx_cuda_gemm_bf16_ok(w->type, layout, w->k, x, n, c->paths.gemm_xb ? c->gemm_xb : NULL,
                                   c->gemm_xb_bytes);
}

/* A prefill's GEMM of w (W in layout, rb bytes a row) through gemm_bf16.cu's
 * pipelined kernel, where it takes it: BF16 tiled by default
 * (paths.gemm_bf16), Q8_0 and Q4_K with paths.gemm_q8 (both on unless
 * MTPLX_CUDA_GEMM_BF16=0 / MTPLX_CUDA_GEMM_Q8=0); x staged in bf16 from
 * gemm_xb with paths.gemm_xb (on unless MTPLX_CUDA_GEMM_XB=0); gate: the
 * SwiGLU epilogue (mtplx_cuda_gemm_bf16's), b NULL; xb_ready: gemm_xb
 * already holds x (the GEMM before was of the same x, n and k: gemm_group).
 * Returns whether it ran; else the caller's tc_mm_kernel does. */
static bool matmul_pipelined(cuda_backend *c, const mtplx_weight *w, int layout, const void *W, size_t rb,
                             const float *x, int64_t n, float *y, const float *b, const float *gate,
                             bool xb_ready) {
    if (!pipelined_ok(c, w, layout, W, x, n)) return false;
    CK(mtplx_cuda_gemm_bf16(c->stream, w->type, layout, W, rb, w->m, w->k, x, n, y, b, gate,
                            c->paths.tc_split ? &c->split : NULL, c->paths.gemm_xb ? c->gemm_xb : NULL,
                            c->gemm_xb_bytes, c->paths.gemm_wgmma, xb_ready),
       "matmul (pipelined GEMM)");
    return true;
}

/* The copy of w a prefill's GEMM reads (cu_matmul): the GEMV's (BF16
 * tiled, Q8_0 repacked; *layout says which) where there is one, else the
 * file's (MTPLX_CUDA_W_GGUF); *rb its bytes a row. */
static const void *gemm_weight(cuda_backend *c, const mtplx_weight *w, int *layout, size_t *rb) {
    *layout = mmv_layout(c, w);
    if (*layout != MTPLX_CUDA_W_GGUF && c->mmv) {
        *rb = *layout == MTPLX_CUDA_W_BF16_TILED ? mtplx_row_size(w->type, w->k)
                                                  : mtplx_cuda_q8_0_packed_row(w->k);
        return mmv_weight(c, w);
    }
    *layout = MTPLX_CUDA_W_GGUF;
    *rb = mtplx_row_size(w->type, w->k);
    return param(c, w->data, weight_bytes(w));
}

static void cu_matmul(mtplx_backend *be, const mtplx_weight *w, const float *bias, const float *x,
                      int64_t n, float *y) {
    cuda_backend *c = (cuda_backend *)be;
    if (c->mmv && mtplx_cuda_mmv_ok(w->type, w->k, x, n)) {
        mtplx_cuda_mmv_job j = mmv_job1(c, MTPLX_MMV_STORE, w, bias, y);
        j.pdl = pdl_next(c);
        CK(mtplx_cuda_mmv(c->stream, w->type, &j, w->k, x, n), "matmul (mmv)");
        launched(c);
        return;
    }
    const float *b = param(c, bias, (size_t)w->m * sizeof(float));
    size_t rb = mtplx_row_size(w->type, w->k), rbl;
    int layout;
    const bool x_mmv = c->mmv && mtplx_cuda_mmv_ok(w->type, w->k, x, 1);
    const void *Wg = gemm_weight(c, w, &layout, &rbl);
    const void *Wl = layout != MTPLX_CUDA_W_GGUF ? Wg : NULL; /* the GEMV's copy */
    /* the GEMV's copy (BF16 tiled, Q8_0 repacked) is the only one: the
     * prefill GEMM reads it too (x aligned or not: the same kernel, the same
     * bits), and rows the GEMM does not take go through the GEMV 16 at a
     * time, so that no copy in the file's layout is uploaded beside it
     * (only where x is not aligned for the GEMV, which the backend's own
     * buffers always are) */
    if (Wl && use_tc(c, w, Wl, rbl, n)) {
        if (!matmul_pipelined(c, w, layout, Wl, rbl, x, n, y, b, NULL, false))
            CK(mtplx_cuda_matmul_tc(c->stream, w->type, Wl, rbl, layout, w->m, w->k, x, n, y, b,
                                    c->paths.tc_split ? &c->split : NULL),
               "matmul (tensor cores, GEMV layout)");
        return;
    }
    if (Wl && x_mmv) {
        for (int64_t i = 0; i < n; i += MTPLX_CUDA_MMV_ROWS) {
            mtplx_cuda_mmv_job j = mmv_job1(c, MTPLX_MMV_STORE, w, bias, y + i * w->m);
            int64_t r = n - i < MTPLX_CUDA_MMV_ROWS ? n - i : MTPLX_CUDA_MMV_ROWS;
            CK(mtplx_cuda_mmv(c->stream, w->type, &j, w->k, x + i * w->k, r), "matmul (mmv, 16 rows)");
        }
        launched(c);
        return;
    }
    const void *W = param(c, w->data, weight_bytes(w));
    if (use_tc(c, w, W, rb, n)) {
        if (!matmul_pipelined(c, w, MTPLX_CUDA_W_GGUF, W, rb, x, n, y, b, NULL, false))
            CK(mtplx_cuda_matmul_tc(c->stream, w->type, W, rb, MTPLX_CUDA_W_GGUF, w->m, w->k, x, n, y, b,
                                    c->paths.tc_split ? &c->split : NULL),
               "matmul (tensor cores)");
    } else {
        CK(mtplx_cuda_matmul(c->stream, w->type, W, rb, w->m, w->k, x, n, y, b), "matmul");
    }
}

/* ---- fused ops (backend.h): the mmv kernel's multi-weight / SwiGLU / add
 * modes; false (nothing issued) where mmv does not apply ---- */
static bool fusable(cuda_backend *c, const mtplx_weight *w, const float *x, int64_t n) {
    return c->mmv && c->fuse && mtplx_cuda_mmv_ok(w->type, w->k, x, n);
}

/* Weights one fused job may hold: one type and k, and the same k split on
 * the tensor cores (mtplx_cuda_mmv_tc_warps), so that each row's sum is the
 * one its plain matmul makes. */
static bool same_kind(const mtplx_weight *a, const mtplx_weight *b) {
    return a->type == b->type && a->k == b->k &&
           mtplx_cuda_mmv_tc_warps(a->type, a->m) == mtplx_cuda_mmv_tc_warps(b->type, b->m);
}

/* The fused rmsnorm (backend.h's norm argument) for weight w: by default
 * only where w goes to mmv_i8.cu, whose x kernel applies it for free.
 * MTPLX_CUDA_FUSE_NORM=1: on every mmv path but tiled BF16 past mmv_tc.cu's
 * limit (MTPLX_CUDA_TC_NORM_MAX_K); =0 nowhere. mmv_tc.cu's fused norm (norm_x) is
 * as fast as rmsnorm + GEMV, not faster: its registers cost the 8-warp
 * GEMV a k step in flight, and 8B / 1.7B / 0.6B BF16 decode moved -0.6% /
 * +1% / -0.6% (bench/RESULTS.md section 41); the f32 GEMV's made n = 4
 * worse (section 16). */
static bool norm_ok(const cuda_backend *c, const float *norm, const mtplx_weight *w) {
    if (!norm) return true;
    if (c->fuse_norm == FUSE_NORM_OFF) return false;
    if (takes_i8(c, w->type, w->k)) return true;
    if (c->fuse_norm != FUSE_NORM_ALL) return false;
    mtplx_cuda_mmv_job j = {.mma = true, .mma_q4k = c->paths.mma_q4k, .tiled = tiles_bf16(c, w),
                            .norm = norm};
    /* tiled BF16 has no GEMV but mmv_tc.cu's */
    return !j.tiled || mtplx_cuda_mmv_tc_ok(w->type, w->k, &j);
}

static void set_norm(cuda_backend *c, mtplx_cuda_mmv_job *j, const float *norm, float eps,
                     int64_t k) {
    j->norm = param(c, norm, (size_t)k * sizeof(float));
    j->eps = eps;
}

/* A prefill's group of GEMMs of one x (paths.gemm_fuse): Q, K and V
 * (swiglu false: y[i] = x w[i]^T + bias[i]), or gate and up (swiglu: y[0]
 * = silu(x gate^T) (x up^T), the up GEMM's epilogue applying it over the
 * gate GEMM's results in y[0]). x goes to bf16 once, for the first GEMM,
 * and the others read that copy. Only where every weight takes the
 * pipelined GEMM as cu_matmul would run it, so that the results are the
 * bits of the plain matmuls (and silu_mul); else false, no GEMM issued
 * (the weights may be uploaded, as the plain matmuls would upload them). */
static bool gemm_group(cuda_backend *c, int nw, const mtplx_weight *const *w, const float *const *bias,
                       const float *x, int64_t n, float *const *y, bool swiglu) {
    if (!c->fuse || !c->paths.gemm_fuse || n <= MTPLX_CUDA_MMV_ROWS) return false; /* (MTPLX_CUDA_FUSE=0: no fused op) */
    int layout[3];
    size_t rb[3];
    const void *W[3];
    for (int i = 0; i < nw; i++) {
        if (w[i]->type != w[0]->type || w[i]->k != w[0]->k) return false;
        W[i] = gemm_weight(c, w[i], &layout[i], &rb[i]);
        if (!use_tc(c, w[i], W[i], rb[i], n) || !pipelined_ok(c, w[i], layout[i], W[i], x, n)) return false;
    }
    for (int i = 0; i < nw; i++) {
        const float *b = swiglu ? NULL : param(c, bias[i], (size_t)w[i]->m * sizeof(float));
        matmul_pipelined(c, w[i], layout[i], W[i], rb[i], x, n, swiglu ? y[0] : y[i], b,
                         swiglu && i == 1 ? y[0] : NULL, i > 0);
    }
    return true;
}

static bool cu_matmul_multi(mtplx_backend *be, int nw, const mtplx_weight *const *w,
                            const float *const *bias, const float *x, const float *norm, float eps,
                            int64_t n, float *const *y) {
    cuda_backend *c = (cuda_backend *)be;
    c->multi_trig = false;
    if (nw < 1 || nw > 3) return false;
    if (n > MTPLX_CUDA_MMV_ROWS) return !norm && gemm_group(c, nw, w, bias, x, n, y, false);
    if (!fusable(c, w[0], x, n) || !norm_ok(c, norm, w[0])) return false;
    for (int i = 1; i < nw; i++)
        if (!same_kind(w[i], w[0])) return false;
    mtplx_cuda_mmv_job j = {.nseg = nw, .mode = MTPLX_MMV_STORE, .mma = c->paths.mma,
                            .mma_q4k = c->paths.mma_q4k, .xq = c->xq,
                            .xq_pieces = c->paths.i8_pieces, .tiled = tiles_bf16(c, w[0])};
    for (int i = 0; i < nw; i++) {
        j.w[i] = mmv_weight(c, w[i]);
        j.bias[i] = param(c, bias[i], (size_t)w[i]->m * sizeof(float));
        j.y[i] = y[i];
        j.m[i] = w[i]->m;
    }
    set_norm(c, &j, norm, eps, w[0]->k);
    int64_t bytes = 0;
    for (int i = 0; i < nw; i++) bytes += (int64_t)weight_bytes(w[i]);
    c->multi_trig = mtplx_cuda_trig_start(bytes);
    if (bench_skip("gemv", n)) return true;
    j.pdl = pdl_next(c);
    CK(mtplx_cuda_mmv(c->stream, w[0]->type, &j, w[0]->k, x, n), "matmul_multi (mmv)");
    launched(c);
    return true;
}

static bool cu_matmul_swiglu(mtplx_backend *be, const mtplx_weight *gate, const mtplx_weight *up,
                             const float *x, const float *norm, float eps, int64_t n, float *out) {
    cuda_backend *c = (cuda_backend *)be;
    if (n > MTPLX_CUDA_MMV_ROWS) {
        const mtplx_weight *gu[2] = {gate, up};
        return !norm && gate->m == up->m && gemm_group(c, 2, gu, NULL, x, n, &out, true);
    }
    if (!fusable(c, gate, x, n) || !same_kind(gate, up) || gate->m != up->m ||
        !norm_ok(c, norm, gate))
        return false;
    mtplx_cuda_mmv_job j = mmv_job1(c, MTPLX_MMV_SWIGLU, gate, NULL, out);
    j.nseg = 2;
    j.w[1] = mmv_weight(c, up);
    j.m[1] = up->m;
    set_norm(c, &j, norm, eps, gate->k);
    if (bench_skip("gemv", n)) return true;
    j.pdl = pdl_next(c);
    CK(mtplx_cuda_mmv(c->stream, gate->type, &j, gate->k, x, n), "matmul_swiglu (mmv)");
    launched(c);
    return true;
}

static bool cu_matmul_add(mtplx_backend *be, const mtplx_weight *w, const float *x, int64_t n,
                          float *y) {
    cuda_backend *c = (cuda_backend *)be;
    if (!fusable(c, w, x, n)) return false;
    mtplx_cuda_mmv_job j = mmv_job1(c, MTPLX_MMV_ADD, w, NULL, y);
    if (bench_skip("gemv", n)) return true;
    j.pdl = pdl_next(c);
    CK(mtplx_cuda_mmv(c->stream, w->type, &j, w->k, x, n), "matmul_add (mmv)");
    launched(c);
    return true;
}

static bool cu_qk_norm_rope_store(mtplx_backend *be, float *q, float *k, const float *v, int64_t n,
                                  int n_head, int n_head_kv, int head_dim, const float *q_norm,
                                  const float *k_norm, float eps, int64_t pos0,
                                  const float *inv_freq, bool neox, int kv_type, void *kc,
                                  void *vc) {
    cuda_backend *c = (cuda_backend *)be;
    if (!c->fuse || !mtplx_cuda_qk_norm_rope_store_ok(head_dim, n, kv_type)) return false;
    size_t hb = (size_t)head_dim * sizeof(float);
    const float *qn = param(c, q_norm, hb), *kn = param(c, k_norm, hb);
    const float *f = param(c, inv_freq, hb / 2);
    const mtplx_cuda_step *dyn = step_pos(c, &pos0);
    if (bench_skip("prep", n)) return true;
    CK(mtplx_cuda_qk_norm_rope_store(c->stream, q, k, v, n, n_head, n_head_kv, head_dim, qn, kn,
                                     eps, pos0, f, neox, kv_type, kc, vc, dyn, pdl_next(c)),
       "qk_norm_rope_store");
    launched(c);
    return true;
}

static void cu_rmsnorm(mtplx_backend *be, const float *x, const float *w, float *out, int64_t n,
                       int64_t d, float eps) {
    cuda_backend *c = (cuda_backend *)be;
    const float *wd = param(c, w, (size_t)d * sizeof(float));
    if (bench_skip("norm", n)) return;
    CK(mtplx_cuda_rmsnorm(c->stream, x, wd, out, n, d, eps, pdl_next(c)), "rmsnorm");
    launched(c);
}

static void cu_rope(mtplx_backend *be, float *x, int64_t n, int n_head, int head_dim, int64_t pos0,
                    const float *inv_freq, bool neox) {
    cuda_backend *c = (cuda_backend *)be;
    const float *f = param(c, inv_freq, (size_t)(head_dim / 2) * sizeof(float));
    const mtplx_cuda_step *dyn = step_pos(c, &pos0);
    CK(mtplx_cuda_rope(c->stream, x, n, n_head, head_dim, pos0, f, neox, dyn), "rope");
}

static void cu_silu_mul(mtplx_backend *be, const float *gate, const float *up, float *out,
                        int64_t n) {
    CK(mtplx_cuda_silu_mul(((cuda_backend *)be)->stream, gate, up, out, n), "silu_mul");
}

static void cu_add(mtplx_backend *be, float *y, const float *x, int64_t n) {
    CK(mtplx_cuda_add(((cuda_backend *)be)->stream, y, x, n), "add");
}

static void cu_kv_store(mtplx_backend *be, int kv_type, void *kv, int64_t row, const float *src,
                        int64_t n, int64_t d) {
    cuda_backend *c = (cuda_backend *)be;
    const mtplx_cuda_step *dyn = step_pos(c, &row);
    CK(mtplx_cuda_store_rows(c->stream, kv_type, src, kv, row, n, d, dyn), "kv_store");
    c->after_kernel = false; /* (may be a copy) */
}

/* While capturing: narrows the capture's step positions to those at which
 * an attention of n rows at the step position + off launches the same
 * kernels as now (mtplx_cuda_attention_group_from's rule). */
static void cap_attn_range(cuda_backend *c, int64_t off, int64_t n, int64_t from) {
    graph_slot *g = c->capturing;
    if (!g || from == MTPLX_CUDA_ATTN_GROUP_NEVER) return; /* (attn_kernel at every position) */
    /* a replay at step position P runs the op at P + off: attn_kernel while
     * P < head_end, attn_group_kernel from P = group_start on */
    int64_t at = c->cap_pos0 + off, head_end = from - off - 1, group_start = from - off - n;
    if (mtplx_cuda_attn_by_head(at, from)) g->hi = g->hi < head_end ? g->hi : head_end;
    else g->lo = g->lo > head_end ? g->lo : head_end;
    if (mtplx_cuda_attn_by_group(at, n, from)) g->lo = g->lo > group_start ? g->lo : group_start;
    else g->hi = g->hi < group_start ? g->hi : group_start;
}

static void cu_attention(mtplx_backend *be, const float *q, int64_t n_tok, int n_head,
                         int n_head_kv, int head_dim, const void *k, const void *v, int kv_type,
                         int64_t pos0, float scale, float *out) {
    cuda_backend *c = (cuda_backend *)be;
    const int64_t at = pos0; /* the step's position (the captured one while capturing) */
    const mtplx_cuda_step *dyn = step_pos(c, &pos0);
    if (bench_skip("attn", n_tok)) return;
    if (c->paths.flash && n_tok > MTPLX_CUDA_STEP_ROWS) {
        CK(mtplx_cuda_attention_flash(c->stream, q, n_tok, n_head, n_head_kv, head_dim, k, v,
                                      kv_type, pos0, scale, out, dyn, c->paths.flash_mma),
           "attention (flash)");
    } else {
        cap_attn_range(c, pos0, n_tok,
                       mtplx_cuda_attention_group_from(c->paths.attn_group_from, n_tok, head_dim,
                                                       kv_type, k, v));
        /* attn_kernel's early cache loads (a captured step's first pass of
         * positions a warp, before its PDL wait): by default in every
         * decode step, and in a verify step right after a Q/K/V GEMV that
         * let the kernels after it launch at once. On an H200
         * (bench/RESULTS.md section 43) they made decode steps 1.4-4.2%
         * faster (0.6B, 1.7B and 8B; 16 and 512 positions) and 8B verify
         * steps 2% cheaper, but 0.6B and 1.7B verify steps at 512
         * positions 3-6% dearer (their Q/K/V GEMV triggers at its end, and
         * a verify step's split blocks fill the SMs). The loads and the
         * sums are those of the plain kernel: a row is the same bits
         * either way. */
        c->attn.head_early = c->head_early >= 0 ? c->head_early : n_tok == 1 || c->multi_trig;
        CK(mtplx_cuda_attention(c->stream, q, n_tok, n_head, n_head_kv, head_dim, k, v, kv_type,
                                pos0, scale, out, dyn, pdl_next(c),
                                c->paths.attn_split ? &c->attn : NULL, c->paths.attn_group_from, at),
           "attention");
    }
    launched(c);
}

static void cu_get_row(mtplx_backend *be, const mtplx_weight *w, int64_t id, float *out) {
    cuda_backend *c = (cuda_backend *)be;
    const void *W = param(c, w->data, weight_bytes(w));
    CK(mtplx_cuda_get_rows(c->stream, w->type, W, mtplx_row_size(w->type, w->k), w->k, NULL, id, 1,
                           out, pdl_next(c)),
       "get_row");
    launched(c);
}

static void cu_get_rows(mtplx_backend *be, const mtplx_weight *w, const int32_t *ids, int64_t n,
                        float *out) {
    cuda_backend *c = (cuda_backend *)be;
    if (n <= 0) return;
    const void *W = param(c, w->data, weight_bytes(w));
    size_t rb = mtplx_row_size(w->type, w->k);
    const int32_t *dev_ids = NULL;
    if (c->capturing) {
        uintptr_t at = (uintptr_t)ids, lo = (uintptr_t)c->cap_tok;
        if (at >= lo && at + (uintptr_t)n * sizeof *ids <= lo + (uintptr_t)c->cap_n * sizeof *ids &&
            (at - lo) % sizeof *ids == 0) {
            /* the same rows of the step block (address arithmetic only) */
            dev_ids = c->dstep->tok + (at - lo) / sizeof *ids;
        } else {
            c->cap_bad = true; /* ids the replay could not know: give up this capture */
            for (int64_t i = 0; i < n; i++) cu_get_row(be, w, ids[i], out + i * w->k);
            return;
        }
    } else if (n == 1) {
        CK(mtplx_cuda_get_rows(c->stream, w->type, W, rb, w->k, NULL, ids[0], 1, out, pdl_next(c)),
           "get_rows");
        launched(c);
        return;
    } else {
        if (n > c->ids_cap) {
            CK(cudaStreamSynchronize(c->stream), "synchronize");
            CK(cudaFree(c->ids_dev), "cudaFree");
            c->ids_dev = NULL;
            CK(cudaMalloc((void **)&c->ids_dev, (size_t)n * sizeof(int32_t)), "cudaMalloc (ids)");
            c->ids_cap = n;
        }
        /* from pageable memory: staged before this returns, so ids may change */
        CK(cudaMemcpyAsync(c->ids_dev, ids, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice,
                           c->stream),
           "get_rows (ids)");
        c->after_kernel = false;
        dev_ids = c->ids_dev;
    }
    CK(mtplx_cuda_get_rows(c->stream, w->type, W, rb, w->k, dev_ids, 0, n, out, pdl_next(c)),
       "get_rows");
    launched(c);
}

static void cu_download(mtplx_backend *be, void *dst_host, const void *src, size_t bytes);

static void cu_argmax_rows(mtplx_backend *be, const float *logits, int64_t n, int64_t V,
                           int32_t *ids, float *logprob) {
    cuda_backend *c = (cuda_backend *)be;
    mtplx_cuda_pick h[PICK_ROWS];
    for (int64_t i0 = 0; i0 < n; i0 += PICK_ROWS) {
        int64_t r = n - i0 < PICK_ROWS ? n - i0 : PICK_ROWS;
        CK(mtplx_cuda_argmax_rows(c->stream, logits + i0 * V, r, V, c->picks), "argmax_rows");
        cu_download(be, h, c->picks, (size_t)r * sizeof *h);
        for (int64_t i = 0; i < r; i++) {
            ids[i0 + i] = h[i].id;
            if (logprob) logprob[i0 + i] = h[i].logprob;
        }
    }
}

_Static_assert(MTPLX_DEV_TOPK_MAX == MTPLX_CUDA_TOPK_MAX && MTPLX_DEV_SAMPLE_ROWS == MTPLX_CUDA_SAMPLE_ROWS,
               "backend.h and cuda_kernels.h disagree on device sampling sizes");

/* backend.h: sample_rows (sample.cu). The uniforms travel as launch
 * arguments, so the only copy is the results coming back. */
static bool cu_sample_rows(mtplx_backend *be, const float *logits, int64_t n, int64_t V,
                           const mtplx_sampler_params *sp, void *keep, const void *test,
                           mtplx_dev_sample *rows) {
    cuda_backend *c = (cuda_backend *)be;
    if (!mtplx_dev_sample_takes(sp, V)) return false;
    mtplx_cuda_sample_out h[MTPLX_CUDA_SAMPLE_ROWS];
    for (int64_t i0 = 0; i0 < n; i0 += MTPLX_CUDA_SAMPLE_ROWS) {
        int64_t r = n - i0 < MTPLX_CUDA_SAMPLE_ROWS ? n - i0 : MTPLX_CUDA_SAMPLE_ROWS;
        mtplx_cuda_sample_args a = {.n = (int32_t)r, .top_k = sp->top_k,
                                    .inv_t = 1.0f / sp->temperature, .top_p = sp->top_p,
                                    .min_p = sp->min_p};
        for (int64_t i = 0; i < r; i++) {
            a.draft[i] = rows[i0 + i].draft;
            a.u_accept[i] = rows[i0 + i].u_accept;
            a.u_sample[i] = rows[i0 + i].u_sample;
        }
        mtplx_cuda_dist *kp = keep ? (mtplx_cuda_dist *)keep + i0 : NULL;
        const mtplx_cuda_dist *tp = test ? (const mtplx_cuda_dist *)test + i0 : NULL;
        CK(mtplx_cuda_sample_rows(c->stream, logits + i0 * V, V, &a, kp, tp, c->souts), "sample_rows");
        cu_download(be, h, c->souts, (size_t)r * sizeof *h);
        for (int64_t i = 0; i < r; i++) {
            rows[i0 + i].id = h[i].id;
            rows[i0 + i].accepted = h[i].accepted != 0;
            rows[i0 + i].logprob = h[i].logprob;
        }
    }
    return true;
}

/* ---- CUDA graphs (header comment) ---- */

static bool key_eq(const mtplx_graph_key *a, const mtplx_graph_key *b) {
    for (int i = 0; i < 4; i++)
        if (a->ptr[i] != b->ptr[i]) return false;
    return a->n == b->n && a->kind == b->kind;
}

static void drop_graphs(cuda_backend *c) {
    for (int i = 0; i < c->n_gs; i++)
        if (c->gs[i].exec) cudaGraphExecDestroy(c->gs[i].exec);
    c->n_gs = 0;
}

static int cu_graph_begin(mtplx_backend *be, const mtplx_graph_key *key, const int32_t *tokens,
                          int64_t n, int64_t pos0) {
    cuda_backend *c = (cuda_backend *)be;
    if (!c->graphs || n < 1 || n > MTPLX_CUDA_STEP_ROWS || c->capturing) return MTPLX_GRAPH_NONE;
    /* the key's capture for this position (a key has one a set of
     * attention kernels: graph_slot's lo, hi); else its slot not yet
     * captured; else a new slot, captured at once where the key was
     * captured at other positions (its weights are on the GPU) */
    graph_slot *g = NULL;
    bool known = false;
    for (int i = 0; i < c->n_gs && !g; i++) {
        graph_slot *s = &c->gs[i];
        if (!key_eq(&s->key, key)) continue;
        known = true;
        if (s->failed || !s->exec || (pos0 >= s->lo && pos0 < s->hi)) g = s;
    }
    if (!g) {
        if (c->n_gs == MAX_GRAPHS) return MTPLX_GRAPH_NONE;
        g = &c->gs[c->n_gs++];
        *g = (graph_slot){.key = *key, .seen = known ? 2 : 0};
    }
    if (g->failed || (!g->exec && ++g->seen < 2)) {
        c->gstats.plain++;
        return MTPLX_GRAPH_NONE;
    }
    mtplx_cuda_step st = {.pos0 = pos0};
    memcpy(st.tok, tokens, (size_t)n * sizeof(int32_t));
    CK(mtplx_cuda_set_step(c->stream, c->dstep, &st), "graph step");
    c->after_kernel = false; /* a capture's first node, or what follows the replay */
    if (g->exec) {
        CK(cudaGraphLaunch(g->exec, c->stream), "cudaGraphLaunch");
        c->gstats.replayed++;
        return MTPLX_GRAPH_REPLAYED;
    }
    if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        (void)cudaGetLastError();
        g->failed = true;
        c->gstats.failed++;
        return MTPLX_GRAPH_NONE;
    }
    c->capturing = g;
    g->lo = INT64_MIN, g->hi = INT64_MAX;
    c->cap_pos0 = pos0;
    c->cap_tok = tokens;
    c->cap_n = n;
    c->cap_bad = false;
    return MTPLX_GRAPH_CAPTURE;
}

static bool cu_graph_end(mtplx_backend *be) {
    cuda_backend *c = (cuda_backend *)be;
    graph_slot *g = c->capturing;
    MTPLX_ASSERT(g != NULL);
    c->capturing = NULL;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    if (e == cudaSuccess && !c->cap_bad) e = cudaGraphInstantiate(&g->exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess || c->cap_bad) {
        if (e != cudaSuccess)
            mtplx_log(MTPLX_LOG_DEBUG, "cuda: graph capture failed (%s); plain launches for this step",
                      cudaGetErrorString(e));
        (void)cudaGetLastError();
        if (g->exec) cudaGraphExecDestroy(g->exec);
        g->exec = NULL;
        g->failed = true;
        c->gstats.failed++;
        return false;
    }
    c->gstats.captured++;
    c->gstats.replayed++;
    CK(cudaGraphLaunch(g->exec, c->stream), "cudaGraphLaunch");
    c->after_kernel = false;
    return true;
}

void mtplx_cuda_set_graphs(mtplx_backend *be, bool on) {
    cuda_backend *c = (cuda_backend *)be;
    MTPLX_ASSERT(!c->capturing);
    if (!on) {
        CK(cudaStreamSynchronize(c->stream), "synchronize");
        drop_graphs(c);
    }
    c->graphs = on;
}

mtplx_cuda_graph_stats mtplx_cuda_get_graph_stats(const mtplx_backend *be) {
    return ((const cuda_backend *)be)->gstats;
}

mtplx_cuda_paths mtplx_cuda_get_paths(const mtplx_backend *be) {
    return ((const cuda_backend *)be)->paths;
}

bool mtplx_cuda_wgmma_ready(void) {
    return mtplx_cuda_gemm_wgmma_ok(MTPLX_TYPE_BF16, MTPLX_CUDA_W_BF16_TILED, 64);
}

void mtplx_cuda_set_paths(mtplx_backend *be, mtplx_cuda_paths p) {
    cuda_backend *c = (cuda_backend *)be;
    /* Q8_0's packing follows the kernel (takes_i8), BF16's tiling the mma path */
    bool repack = c->packed.cap &&
                  (c->paths.mma != p.mma || c->paths.mma_q4k != p.mma_q4k || c->paths.tile != p.tile);
    if ((memcmp(&c->paths, &p, sizeof p) != 0 && c->n_gs > 0) || repack) {
        CK(cudaStreamSynchronize(c->stream), "synchronize");
        drop_graphs(c); /* captured with the old paths */
    }
    if (repack) {
        /* packed again on next use */
        for (size_t i = 0; i < c->packed.cap; i++)
            if (c->packed.slot[i].host) c->param_bytes -= c->packed.slot[i].bytes;
        map_free(&c->packed);
    }
    c->paths = p;
}

static bool env_is_0(const char *name) {
    const char *v = getenv(name);
    return v && strcmp(v, "0") == 0;
}
static bool env_is_1(const char *name) {
    const char *v = getenv(name);
    return v && strcmp(v, "1") == 0;
}

/* An environment setting that takes one of n values, written as %d
 * writes them: unset or empty, dflt; anything else, a warning and dflt. */
static int env_one_of(const char *name, const int *vals, int n, int dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char num[16], list[64] = "";
    for (int i = 0; i < n; i++) {
        snprintf(num, sizeof num, "%d", vals[i]);
        if (strcmp(v, num) == 0) return vals[i];
        size_t len = strlen(list);
        snprintf(list + len, sizeof list - len, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", num);
    }
    mtplx_log(MTPLX_LOG_WARN, "%s=%s: expected %s; using %d", name, v, list, dflt);
    return dflt;
}

/* MTPLX_CUDA_GEMM_WGMMA: 128 or 256 (weight rows a block), 0 (off);
 * unset, 128 (bench/RESULTS.md section 40) */
static int gemm_wgmma_env(void) {
    static const int vals[] = {0, 128, 256};
    return env_one_of("MTPLX_CUDA_GEMM_WGMMA", vals, 3, 128);
}

/* MTPLX_CUDA_I8_PIECES: 2 or 3; unset, 2 */
static int i8_pieces_env(void) {
    static const int vals[] = {2, 3};
    return env_one_of("MTPLX_CUDA_I8_PIECES", vals, 2, 2);
}

/* MTPLX_CUDA_ATTN_GROUP: 0 never, N >= 1 from N positions on (1: every
 * step); unset, MTPLX_CUDA_ATTN_GROUP_FROM. */
static int64_t attn_group_from_env(void) {
    const char *v = getenv("MTPLX_CUDA_ATTN_GROUP");
    if (!v || !*v) return MTPLX_CUDA_ATTN_GROUP_FROM;
    char *end;
    long long n = strtoll(v, &end, 10);
    if (*end || n < 0) {
        mtplx_log(MTPLX_LOG_WARN, "MTPLX_CUDA_ATTN_GROUP=%s: expected 0 (never) or a number of positions; using %d",
                  v, MTPLX_CUDA_ATTN_GROUP_FROM);
        return MTPLX_CUDA_ATTN_GROUP_FROM;
    }
    return n == 0 ? MTPLX_CUDA_ATTN_GROUP_NEVER : (int64_t)n;
}

/* The prefill kernels from the environment: on unless "0"; MTPLX_CUDA_TC=all
 * adds F32 weights. */
static mtplx_cuda_paths paths_from_env(void) {
    const char *tc = getenv("MTPLX_CUDA_TC"), *fa = getenv("MTPLX_CUDA_FLASH");
    const char *sk = getenv("MTPLX_CUDA_TC_SPLIT"), *mma = getenv("MTPLX_CUDA_MMA");
    const char *q4k = getenv("MTPLX_CUDA_MMA_Q4K"), *pdl = getenv("MTPLX_CUDA_PDL");
    mtplx_cuda_paths p = {.tc = true,
                          .tc_f32 = false,
                          .tc_split = true,
                          .flash = true,
                          .mma = true,
                          .pdl = true,
                          .tile = !env_is_0("MTPLX_CUDA_TILE"),
                          .attn_split = !env_is_0("MTPLX_CUDA_ATTN_SPLIT"),
                          .gemm_bf16 = !env_is_0("MTPLX_CUDA_GEMM_BF16"),
                          .gemm_q8 = !env_is_0("MTPLX_CUDA_GEMM_Q8"),
                          .gemm_xb = !env_is_0("MTPLX_CUDA_GEMM_XB"),
                          .gemm_wgmma = gemm_wgmma_env(),
                          .gemm_fuse = !env_is_0("MTPLX_CUDA_GEMM_FUSE"),
                          .i8_pieces = i8_pieces_env(),
                          .flash_mma = !env_is_0("MTPLX_CUDA_FLASH_MMA"),
                          .attn_group_from = attn_group_from_env(),
                          .tc_min_rows = MTPLX_CUDA_TC_MIN_ROWS};
    if (tc && strcmp(tc, "0") == 0) p.tc = false;
    if (sk && strcmp(sk, "0") == 0) p.tc_split = false;
    if (tc && strcmp(tc, "all") == 0) p.tc_f32 = true;
    if (fa && strcmp(fa, "0") == 0) p.flash = false;
    if (mma && strcmp(mma, "0") == 0) p.mma = false;
    if (pdl && strcmp(pdl, "0") == 0) p.pdl = false;
    p.mma_q4k_auto = !(q4k && (strcmp(q4k, "0") == 0 || strcmp(q4k, "1") == 0));
    p.mma_q4k = q4k && strcmp(q4k, "1") == 0;
    return p;
}

static void *cu_buf_alloc(mtplx_backend *be, size_t bytes) {
    cuda_backend *c = (cuda_backend *)be;
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        return NULL;
    }
    /* zeroed like the CPU backend's buffers */
    CK(cudaMemsetAsync(p, 0, bytes, c->stream), "cudaMemset");
    c->after_kernel = false;
    return p;
}

static void cu_buf_free(mtplx_backend *be, void *p) {
    cuda_backend *c = (cuda_backend *)be;
    if (!p) return;
    CK(cudaStreamSynchronize(c->stream), "synchronize");
    drop_graphs(c); /* a capture may use p */
    CK(cudaFree(p), "cudaFree");
}

static void cu_upload(mtplx_backend *be, void *dst, const void *src_host, size_t bytes) {
    cuda_backend *c = (cuda_backend *)be;
    if (!bytes) return;
    /* from pageable memory this returns once src_host has been staged */
    CK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, c->stream), "upload");
    c->after_kernel = false;
}

static void cu_download(mtplx_backend *be, void *dst_host, const void *src, size_t bytes) {
    cuda_backend *c = (cuda_backend *)be;
    if (!bytes) return;
    CK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, c->stream), "download");
    c->after_kernel = false;
    CK(cudaStreamSynchronize(c->stream), "download (synchronize)");
}

static void cu_copy(mtplx_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_backend *c = (cuda_backend *)be;
    if (!bytes) return;
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream), "copy");
    c->after_kernel = false;
}

void mtplx_cuda_forget_params(mtplx_backend *be) {
    cuda_backend *c = (cuda_backend *)be;
    CK(cudaStreamSynchronize(c->stream), "synchronize");
    drop_graphs(c);
    map_free(&c->params);
    map_free(&c->packed);
    c->param_bytes = 0;
}

size_t mtplx_cuda_param_bytes(const mtplx_backend *be) {
    return ((const cuda_backend *)be)->param_bytes;
}

void mtplx_cuda_synchronize(mtplx_backend *be) {
    CK(cudaStreamSynchronize(((cuda_backend *)be)->stream), "synchronize");
}

/* The backend's own buffers and streams, then c; what a half-made backend
 * has not allocated yet is NULL (calloc), which cudaFree and free accept. */
static void release(cuda_backend *c) {
    cudaFree(c->dstep);
    cudaFree(c->picks);
    cudaFree(c->souts);
    cudaFree(c->ids_dev);
    cudaFree(c->split.buf);
    cudaFree(c->gemm_xb);
    cudaFree(c->attn.part);
    cudaFree(c->attn.cnt);
    cudaFree(c->xq);
    free(c->gs);
    cudaStreamDestroy(c->side);
    cudaStreamDestroy(c->stream);
    free(c);
}

static void cu_free(mtplx_backend *be) {
    if (!be) return;
    cuda_backend *c = (cuda_backend *)be;
    mtplx_log(MTPLX_LOG_INFO,
              "cuda: %.1f MB of weights; CUDA graphs %s: %lld captured, %lld forwards replayed, "
              "%lld plain, %lld failed captures; mmv %s%s, fusions %s%s; prefill: tensor "
              "cores %s%s%s%s, flash attention %s",
              (double)c->param_bytes / 1e6, c->graphs ? "on" : "off", (long long)c->gstats.captured,
              (long long)c->gstats.replayed, (long long)c->gstats.plain, (long long)c->gstats.failed,
              c->mmv ? "on" : "off", c->mmv && c->paths.mma ? (c->paths.mma_q4k ? " (tensor cores for BF16, Q8_0, Q4_K)" : c->xq ? " (tensor cores for BF16; int8 ones for Q8_0, Q4_K)" : " (tensor cores for BF16, Q8_0)") : "",
              c->fuse ? "on" : "off", c->fuse_norm == FUSE_NORM_ALL ? " (norms too)" : c->fuse_norm == FUSE_NORM_I8 ? " (norms too, int8 paths)" : "",
              c->paths.tc ? (c->paths.tc_f32 ? "on (F32 too)" : "on") : "off",
              c->paths.tc && !c->paths.tc_split ? " without split-k" : "",
              c->paths.tc && c->paths.gemm_bf16 && c->paths.gemm_xb && c->paths.gemm_wgmma &&
                      mtplx_cuda_wgmma_ready()
                  ? " (BF16 on wgmma)"
                  : "",
              c->paths.tc && c->paths.gemm_bf16 && c->paths.gemm_fuse ? " (QKV, gate/up fused)" : "",
              c->paths.flash ? "on" : "off");
    mtplx_cuda_forget_params(be);
    release(c);
}

int mtplx_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

mtplx_status mtplx_cuda_device_name(int device, char *buf, size_t cap, size_t *mem_bytes) {
    struct cudaDeviceProp pr;
    cudaError_t e = cudaGetDeviceProperties(&pr, device);
    if (e != cudaSuccess)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "cuda: device %d: %s", device, cudaGetErrorString(e));
    snprintf(buf, cap, "%s (sm_%d%d, %d SMs, %.1f GB)", pr.name, pr.major, pr.minor,
             pr.multiProcessorCount, (double)pr.totalGlobalMem / 1e9);
    if (mem_bytes) *mem_bytes = pr.totalGlobalMem;
    return MTPLX_OK;
}

mtplx_status mtplx_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    int cur = 0;
    cudaError_t e = cudaGetDevice(&cur);
    if (e == cudaSuccess && cur != device) e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaMemGetInfo(free_bytes, total_bytes);
    if (cur != device) (void)cudaSetDevice(cur);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "cuda: device %d: cannot read its memory: %s", device,
                          cudaGetErrorString(e));
    }
    return MTPLX_OK;
}

mtplx_status mtplx_backend_cuda_new(int device, int64_t max_k, int64_t max_n, int64_t n_ctx,
                                    mtplx_backend **out) {
    (void)n_ctx; /* the kernels need no scratch for it */
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "cuda: no usable GPU (%s)",
                          e != cudaSuccess ? cudaGetErrorString(e) : "no devices");
    }
    if (device < 0 || device >= n)
        return mtplx_fail(MTPLX_ERR_ARG, "cuda: device %d does not exist (%d found)", device, n);
    e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "cuda: device %d: %s", device, cudaGetErrorString(e));
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c) return mtplx_fail(MTPLX_ERR_NOMEM, "cuda backend: out of memory");
    c->device = device;
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) {
        e = cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking);
        if (e != cudaSuccess) cudaStreamDestroy(c->stream);
    }
    if (e != cudaSuccess) {
        free(c);
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "cuda: cannot create a stream: %s",
                          cudaGetErrorString(e));
    }
    c->gs = calloc(MAX_GRAPHS, sizeof *c->gs);
    e = cudaMalloc((void **)&c->dstep, sizeof *c->dstep);
    if (e == cudaSuccess) e = cudaMalloc((void **)&c->picks, PICK_ROWS * sizeof *c->picks);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&c->souts, MTPLX_CUDA_SAMPLE_ROWS * sizeof *c->souts);
    if (e == cudaSuccess) e = cudaMalloc((void **)&c->split.buf, TC_SPLIT_BYTES);
    /* the prefill GEMM's x in bf16: a forward's rows (max_n) of the longest k */
    c->gemm_xb_bytes = (size_t)(max_n > 0 ? max_n : 1) * (size_t)(max_k > 0 ? max_k : 1) * 2;
    if (e == cudaSuccess) e = cudaMalloc(&c->gemm_xb, c->gemm_xb_bytes);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&c->split.n_sm, cudaDevAttrMultiProcessorCount, device);
    c->split.bytes = TC_SPLIT_BYTES;
    /* the attention's split: about two blocks a SM (partials for up to 8
     * a SM: a KV head's blocks serve 4-8 query heads); MTPLX_CUDA_ATTN_CHUNK
     * (>= 32, default 64) is the fewest positions a split takes */
    c->attn.n_sm = c->split.n_sm;
    const char *aps = getenv("MTPLX_CUDA_ATTN_SPLITS"); /* (measurements) */
    c->attn.per_sm = aps && atoi(aps) >= 1 && atoi(aps) <= 8 ? atoi(aps) : 2;
    c->attn.slots = 4 * c->attn.per_sm * c->split.n_sm;
    if (e == cudaSuccess) e = mtplx_cuda_attention_init();
    if (e == cudaSuccess) e = mtplx_cuda_gemm_bf16_init();
    if (e == cudaSuccess) e = mtplx_cuda_gemm_wgmma_init();
    const char *ach = getenv("MTPLX_CUDA_ATTN_CHUNK");
    c->attn.chunk = ach && atoi(ach) >= 32 ? atoi(ach) : 64;
    const char *at = getenv("MTPLX_CUDA_ATTN_TILE"); /* (measurements) */
    c->attn.tile = at ? atoi(at) : 0;
    c->attn.group_kind = env_is_0("MTPLX_CUDA_ATTN_MMA"); /* 1: attn_group_kernel, not on tensor cores */
    c->attn.tma = env_is_1("MTPLX_CUDA_ATTN_TMA");
    c->attn.late = env_is_0("MTPLX_CUDA_ATTN_EARLY");
    c->head_early = env_is_1("MTPLX_CUDA_ATTN_HEAD_EARLY") ? 1 : env_is_0("MTPLX_CUDA_ATTN_HEAD_EARLY") ? 0 : -1;
    if (e == cudaSuccess) e = cudaMalloc((void **)&c->attn.part, mtplx_cuda_attn_part_bytes(c->attn.slots));
    if (e == cudaSuccess) {
        size_t cb = (size_t)MTPLX_CUDA_STEP_ROWS * MTPLX_CUDA_ATTN_MAX_HEADS * sizeof(int);
        e = cudaMalloc((void **)&c->attn.cnt, cb);
        if (e == cudaSuccess) e = cudaMemset(c->attn.cnt, 0, cb);
    }
    if (e == cudaSuccess && !env_is_0("MTPLX_CUDA_I8")) {
        size_t xb = mtplx_cuda_mmv_i8_scratch();
        e = cudaMalloc(&c->xq, xb);
        /* zeroed: the GEMV reads the scales of unused columns (and drops them) */
        if (e == cudaSuccess) e = cudaMemset(c->xq, 0, xb);
    }
    if (e != cudaSuccess || !c->gs) {
        (void)cudaGetLastError();
        release(c);
        return mtplx_fail(MTPLX_ERR_NOMEM, "cuda: out of memory creating the backend");
    }
    /* on unless MTPLX_CUDA_GRAPHS=0 (a switch for comparisons and for
     * ruling graphs out when something looks wrong) */
    const char *ge = getenv("MTPLX_CUDA_GRAPHS");
    c->graphs = !(ge && strcmp(ge, "0") == 0);
    c->paths = paths_from_env();
    c->base = (mtplx_backend){
        .name = "cuda",
        .n_threads = 1,
        .matmul = cu_matmul,
        .rmsnorm = cu_rmsnorm,
        .rope = cu_rope,
        .silu_mul = cu_silu_mul,
        .add = cu_add,
        .kv_store = cu_kv_store,
        .attention = cu_attention,
        .get_row = cu_get_row,
        .buf_alloc = cu_buf_alloc,
        .buf_free = cu_buf_free,
        .free = cu_free,
        .upload = cu_upload,
        .download = cu_download,
        .copy = cu_copy,
        .get_rows = cu_get_rows,
        .graph_begin = cu_graph_begin,
        .graph_end = cu_graph_end,
        .argmax_rows = cu_argmax_rows,
        .sample_rows = cu_sample_rows,
        .dist_bytes = sizeof(mtplx_cuda_dist),
        .matmul_multi = cu_matmul_multi,
        .matmul_swiglu = cu_matmul_swiglu,
        .matmul_add = cu_matmul_add,
        .qk_norm_rope_store = cu_qk_norm_rope_store,
    };
    /* MTPLX_CUDA_MMV=0: today's mm_kernel for every matmul and no fused
     * matmuls; MTPLX_CUDA_FUSE=0: no fused ops at all (matmul_* and
     * qk_norm_rope_store): switches for comparisons and for ruling a kernel
     * out when a GPU run looks wrong */
    c->mmv = !env_is_0("MTPLX_CUDA_MMV");
    c->fuse = !env_is_0("MTPLX_CUDA_FUSE");
    /* the layers' rmsnorms inside the QKV and gate/up matmuls and the final
     * norm inside the output head (two launches a layer fewer): by default
     * where those go to mmv_i8.cu (norm_ok); MTPLX_CUDA_FUSE_NORM=1 for every
     * mmv path, =0 for none */
    const char *fn = getenv("MTPLX_CUDA_FUSE_NORM");
    c->fuse_norm = !c->fuse || env_is_0("MTPLX_CUDA_FUSE_NORM") ? FUSE_NORM_OFF
                   : fn && strcmp(fn, "1") == 0                 ? FUSE_NORM_ALL
                                                                : FUSE_NORM_I8;
    /* with MTPLX_CUDA_ARGMAX=0, greedy decoding copies whole logits rows
     * back and picks on the host */
    const char *am = getenv("MTPLX_CUDA_ARGMAX");
    if (am && strcmp(am, "0") == 0) c->base.argmax_rows = NULL;
    /* with MTPLX_CUDA_SAMPLE=0, sampled decoding (temperature > 0) does the
     * same on the host */
    if (env_is_0("MTPLX_CUDA_SAMPLE")) c->base.sample_rows = NULL;
    *out = &c->base;
    return MTPLX_OK;
}
