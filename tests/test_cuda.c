/* test_cuda.c: the CUDA backend against the CPU, on a GPU.
 *
 * Every op of the backend interface on random inputs (shapes that are not
 * multiples of the kernels' tiles), each with a named tolerance; whole-model
 * logits of the CUDA backend against the CPU backend (the HF qwen3 fixture
 * and the default GGUF); greedy MTP text == greedy AR text on the GPU;
 * CUDA graphs on vs off bit-identical; a model too big for the GPU refused.
 * The prefill kernels (tensor-core GEMM: from 33 rows in the backend, from
 * 17 here; flash attention: n > 16 rows) are
 * checked beside the step kernels on the same inputs, and each line names
 * the path it ran, so a failure says which switch (MTPLX_CUDA_TC,
 * MTPLX_CUDA_FLASH) to turn off.
 * Prints one line per check and a summary; exits non-zero on any failure.
 *
 * Without a GPU (or in a build without CUDA) it prints SKIP and exits 0, so
 * CI, which compiles the CUDA code but has no GPU, runs it harmlessly.
 * Plain C with its own tiny check macro: the summary is the point here.
 * The token-pick checks are in cuda_sample_checks.c, the whole-model ones in
 * cuda_model_checks.c (cuda_checks.h). */
#include "cuda_checks.h"

#include "cuda/cuda_backend.h"
#include "engine/engine.h"
#include "kernels/kernels.h"
#include "model/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_pass, n_fail;

void report(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "  ok  " : "  FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) n_pass++;
    else n_fail++;
}

/* ---- random data ---- */
static uint64_t rng_s = 0x1234567;
double urand(void) {
    uint64_t z = (rng_s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}
float grand(void) {
    double u1 = urand(), u2 = urand();
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}
float *rand_vec(int64_t n, float sigma) {
    MTPLX_ASSERT(n >= 0 && n < ((int64_t)1 << 40));
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    MTPLX_ASSERT(x != NULL);
    for (int64_t i = 0; i < n; i++) x[i] = sigma * grand();
    return x;
}

mtplx_backend *gpu;
static mtplx_backend *cpu;

/* host -> a fresh device buffer */
void *to_dev(const void *h, size_t bytes) {
    void *d = gpu->buf_alloc(gpu, bytes);
    if (!d) {
        fprintf(stderr, "test_cuda: out of GPU memory\n");
        exit(1);
    }
    gpu->upload(gpu, d, h, bytes);
    return d;
}
static float *from_dev(const void *d, size_t n_floats) {
    float *h = malloc(n_floats * sizeof(float));
    gpu->download(gpu, h, d, n_floats * sizeof(float));
    return h;
}

double rel_err(const float *a, const float *b, int64_t n, double floor) {
    double mx = floor, e = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs(b[i]) > mx) mx = fabs(b[i]);
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d; /* NaN counts as an error */
    }
    return e / mx;
}

/* ---- matmul and get_row ---- */
/* Tolerances. vs_exact: the GPU against W dequantised on the host times x
 * in double (the GPU does the same math in f32). vs_cpu: against the CPU
 * backend, which turns x into the weight type's dot partner (Q8_0 / Q8_K /
 * F16 / BF16), so it carries that rounding too. Both relative to max |y|. */
#define TOL_MM_EXACT 2e-5
static double tol_mm_cpu(int type) {
    switch (type) {
    case MTPLX_TYPE_F32: return 1e-5;
    case MTPLX_TYPE_F16: return 3e-3;
    case MTPLX_TYPE_BF16: return 2e-2;
    default: return 3e-2; /* activations in 8 bits on the CPU */
    }
}
/* The tensor-core GEMM (prefill) multiplies x and W rounded to
 * bf16 (f16 for F16 weights), products exact, f32 sums. vs emu: against
 * that rounding emulated on the host (x and W rounded the same way, summed
 * in double): only the f32 summation differs, so this catches any tile or
 * indexing error. vs exact: what the rounding costs (bf16's 8 bits on both
 * operands: about 3e-3 of max |y| expected). vs cpu: as the GEMV's, except
 * F32 weights (opt-in, MTPLX_CUDA_TC=all), whose CPU product is f32. The
 * emulation starts from the GPU's own dequantised rows (get_row, the same
 * deq8 code), since an FMA-contracted d * q - m may differ from the host's by
 * one f32 ulp, and that can move the bf16 rounding of a weight by a whole
 * bf16 step. Expected vs emu: ~1e-6; a tile or indexing error: > 1e-2. */
#define TOL_MM_TC_EMU 5e-4
#define TOL_MM_TC_EXACT 1e-2
static double tol_mm_tc_cpu(int type) { return type == MTPLX_TYPE_F32 ? 1e-2 : tol_mm_cpu(type); }

/* v rounded as the tensor-core kernel rounds its operands for weight type */
static float tc_round(int type, float v) {
    if (type == MTPLX_TYPE_F16) return mtplx_fp16_to_fp32(mtplx_fp32_to_fp16(v));
    return mtplx_bf16_to_fp32(mtplx_fp32_to_bf16(v));
}

/* y[n][m] = bias + x . deq^T in double, with x and deq first passed through
 * tc_round for weight type `type`, or as they are when emu_type < 0. */
static void ref_matmul(int emu_type, const float *deq, const float *x, const float *bias, int64_t m,
                       int64_t k, int64_t n, float *y) {
    float *wr = NULL, *xr = NULL;
    if (emu_type >= 0) {
        wr = malloc((size_t)(m * k) * sizeof(float));
        xr = malloc((size_t)(n * k) * sizeof(float));
        MTPLX_ASSERT(wr != NULL && xr != NULL);
        for (int64_t j = 0; j < m * k; j++) wr[j] = tc_round(emu_type, deq[j]);
        for (int64_t j = 0; j < n * k; j++) xr[j] = tc_round(emu_type, x[j]);
        deq = wr, x = xr;
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t r = 0; r < m; r++) {
            double s = bias ? bias[r] : 0;
            for (int64_t j = 0; j < k; j++) s += (double)deq[r * k + j] * x[i * k + j];
            y[i * m + r] = (float)s;
        }
    free(wr), free(xr);
}

/* What the tensor-core GEMM should give for w and x: ref_matmul's
 * emulation of its rounding over the GPU's own dequantised rows (all m
 * gathered at once: one launch, quick under memcheck). */
static float *tc_emulated(const mtplx_weight *w, const float *x, const float *bias, int64_t n) {
    int64_t m = w->m, k = w->k;
    float *emu = malloc((size_t)(n * m) * sizeof(float));
    int32_t *all = malloc((size_t)m * sizeof(int32_t));
    float *rowsd = gpu->buf_alloc(gpu, (size_t)(m * k) * sizeof(float));
    MTPLX_ASSERT(emu != NULL && all != NULL && rowsd != NULL);
    for (int64_t r = 0; r < m; r++) all[r] = (int32_t)r;
    gpu->get_rows(gpu, w, all, m, rowsd);
    float *gdeq = from_dev(rowsd, (size_t)(m * k));
    ref_matmul(w->type, gdeq, x, bias, m, k, n, emu);
    gpu->buf_free(gpu, rowsd);
    free(gdeq), free(all);
    return emu;
}

/* The int8 GEMV (mmv_i8.cu) carries x in two int8 pieces by default, to
 * 2^-16 of the max of each 128 of its values (three pieces: 2^-24, f32's
 * accuracy), so against exact products its tolerance is 1e-4 of max |y|
 * (2e-5 with MTPLX_CUDA_I8_PIECES=3). Whether a case without the
 * prefill GEMM takes that GEMV (16 rows at a time past 16): */
static bool takes_i8(int type, int64_t k, mtplx_cuda_paths p) {
    return p.mma && !p.mma_q4k &&
           ((type == MTPLX_TYPE_Q8_0 && k % 64 == 0) || type == MTPLX_TYPE_Q4_K);
}
static double tol_exact(int type, int64_t k, mtplx_cuda_paths p) {
    return takes_i8(type, k, p) ? (p.i8_pieces == 3 ? 2e-5 : 1e-4) : TOL_MM_EXACT;
}

/* the types the decode / verify GEMV runs on tensor cores (mmv_tc.cu) */
static bool mma_type(int type, mtplx_cuda_paths p) {
    return p.mma && (type == MTPLX_TYPE_BF16 || type == MTPLX_TYPE_Q8_0 || (type == MTPLX_TYPE_Q4_K && p.mma_q4k));
}

static void test_matmul_case(int type, int64_t m, int64_t k, int64_t n, bool with_bias) {
    size_t rs = mtplx_row_size(type, k);
    uint8_t *W = malloc(rs * (size_t)m);
    float *wf = rand_vec(k, 1.0f), *deq = malloc((size_t)k * m * sizeof(float));
    for (int64_t r = 0; r < m; r++) {
        for (int64_t j = 0; j < k; j++) wf[j] = grand();
        mtplx_quantize_row(type, wf, W + (size_t)r * rs, k);
        mtplx_dequantize_row(type, W + (size_t)r * rs, deq + r * k, k);
    }
    float *x = rand_vec(n * k, 1.0f), *bias = with_bias ? rand_vec(m, 1.0f) : NULL;
    float *exf = malloc((size_t)(n * m) * sizeof(float));
    ref_matmul(-1, deq, x, bias, m, k, n, exf);
    mtplx_weight w = {.type = type, .m = m, .k = k, .data = W};
    float *ycpu = malloc((size_t)(n * m) * sizeof(float));
    cpu->matmul(cpu, &w, bias, x, n, ycpu);
    float *xd = to_dev(x, (size_t)(n * k) * sizeof(float));
    float *yd = gpu->buf_alloc(gpu, (size_t)(n * m) * sizeof(float));
    /* the GEMV always; for n > 16 also the tensor-core GEMM (where k allows
     * it: k % 8 == 0), without (tc 1) and with (tc 2) split-k; these small m
     * leave SMs idle, so split-k does split here. BF16 weights in the tiled
     * layout (k % 32 == 0) take gemm_bf16.cu's GEMM there, and tc_mm_kernel
     * as well (tc 3: MTPLX_CUDA_GEMM_BF16=0). A path the environment
     * turned off is not run (a crashing kernel must not stop the rest). */
    mtplx_cuda_paths saved = mtplx_cuda_get_paths(gpu);
    bool tc_too = n > 16 && k % 8 == 0 && saved.tc;
    /* (Q8_0 in the int8-interleaved copy needs k % 64 == 0; else tc_mm_kernel
     * runs in both, and both are checked the same way) */
    bool bf16_gemm = tc_too && saved.gemm_bf16 && k % 32 == 0 &&
                     ((type == MTPLX_TYPE_BF16 && saved.tile) ||
                      ((type == MTPLX_TYPE_Q8_0 || type == MTPLX_TYPE_Q4_K) && saved.gemm_q8));
    float *y = NULL, *emu = tc_too ? tc_emulated(&w, x, bias, n) : NULL;
    for (int tc = 0; tc <= (tc_too ? (bf16_gemm ? 3 : saved.tc_split ? 2 : 1) : 0); tc++) {
        if (tc == 2 && !saved.tc_split) continue;
        mtplx_cuda_paths p = saved;
        p.tc = p.tc_f32 = tc > 0;
        p.tc_split = tc == 2;
        p.gemm_bf16 = tc != 3;
        p.tc_min_rows = 17; /* the backend's default starts at 33: test from 17 */
        mtplx_cuda_set_paths(gpu, p);
        gpu->matmul(gpu, &w, bias, xd, n, yd);
        free(y);
        y = from_dev(yd, (size_t)(n * m));
        double e1 = rel_err(y, exf, n * m, 1e-3), e2 = rel_err(y, ycpu, n * m, 1e-3);
        const char *name = mtplx_type_info(type)->name;
        if (!tc) {
            report(e1 <= tol_exact(type, k, saved) && e2 <= tol_mm_cpu(type),
                   "matmul %-4s m=%-4lld k=%-5lld n=%-3lld%s  vs exact %.2e (tol %.0e)  vs cpu %.2e (tol %.0e)%s",
                   name, (long long)m, (long long)k, (long long)n, with_bias ? " +bias" : "      ", e1,
                   tol_exact(type, k, saved), e2, tol_mm_cpu(type), n <= 16 && mma_type(type, saved) ? "  (tensor cores)" : "");
            /* BF16 / Q8_0 / Q4_K at n <= 16 took the tensor-core GEMV: the f32 one too */
            if (n <= 16 && mma_type(type, saved)) {
                p.mma = false;
                mtplx_cuda_set_paths(gpu, p);
                gpu->matmul(gpu, &w, bias, xd, n, yd);
                float *yf = from_dev(yd, (size_t)(n * m));
                e1 = rel_err(yf, exf, n * m, 1e-3), e2 = rel_err(yf, ycpu, n * m, 1e-3);
                report(e1 <= TOL_MM_EXACT && e2 <= tol_mm_cpu(type),
                       "matmul %-4s m=%-4lld k=%-5lld n=%-3lld%s  vs exact %.2e (tol %.0e)  vs cpu %.2e (tol %.0e)  (f32 GEMV, MTPLX_CUDA_MMA=0)",
                       name, (long long)m, (long long)k, (long long)n, with_bias ? " +bias" : "      ", e1,
                       TOL_MM_EXACT, e2, tol_mm_cpu(type));
                free(yf);
            }
            /* Q8_0 / Q4_K with mma_q4k off (a context whose rows come one at
             * a time): the int8 tensor cores (mmv_i8.cu; Q8_0 where k % 64 == 0),
             * x in two int8 pieces (the default) and in three */
            for (int pc = 2; pc <= 3 && n <= 16 && saved.mma &&
                             (type == MTPLX_TYPE_Q8_0 || type == MTPLX_TYPE_Q4_K);
                 pc++) {
                if (pc == 3 && !takes_i8(type, k, (mtplx_cuda_paths){.mma = true})) break;
                mtplx_cuda_paths pi = p;
                pi.mma = true, pi.mma_q4k = false, pi.i8_pieces = pc;
                mtplx_cuda_set_paths(gpu, pi);
                gpu->matmul(gpu, &w, bias, xd, n, yd);
                float *yi = from_dev(yd, (size_t)(n * m));
                e1 = rel_err(yi, exf, n * m, 1e-3), e2 = rel_err(yi, ycpu, n * m, 1e-3);
                report(e1 <= tol_exact(type, k, pi) && e2 <= tol_mm_cpu(type),
                       "matmul %-4s m=%-4lld k=%-5lld n=%-3lld%s  vs exact %.2e (tol %.0e)  vs cpu %.2e (tol %.0e)  (mma_q4k off: %s)",
                       name, (long long)m, (long long)k, (long long)n, with_bias ? " +bias" : "      ", e1,
                       tol_exact(type, k, pi), e2, tol_mm_cpu(type),
                       type == MTPLX_TYPE_Q8_0 && k % 64 ? "bf16 tensor cores, k % 64 != 0"
                       : pc == 2                          ? "int8 tensor cores, x in 2 pieces"
                                                          : "int8 tensor cores, x in 3 pieces");
                free(yi);
            }
            continue;
        }
        double e0 = rel_err(y, emu, n * m, 1e-3);
        report(e0 <= TOL_MM_TC_EMU && e1 <= TOL_MM_TC_EXACT && e2 <= tol_mm_tc_cpu(type),
               "matmul %-4s m=%-4lld k=%-5lld n=%-3lld%s tensor cores%s: vs emu %.2e (tol "
               "%.0e)  vs exact %.2e (tol %.0e)  vs cpu %.2e (tol %.0e)",
               name, (long long)m, (long long)k, (long long)n, with_bias ? " +bias" : "",
               tc == 3                 ? " (tc_mm_kernel: MTPLX_CUDA_GEMM_BF16=0)"
               : bf16_gemm && tc == 2 ? " (gemm_bf16) + split-k (MTPLX_CUDA_TC_SPLIT)"
               : bf16_gemm            ? " (gemm_bf16)"
               : tc == 2              ? " + split-k (MTPLX_CUDA_TC_SPLIT)"
                                      : " (MTPLX_CUDA_TC)",
               e0,
               TOL_MM_TC_EMU, e1, TOL_MM_TC_EXACT, e2, tol_mm_tc_cpu(type));
    }
    mtplx_cuda_set_paths(gpu, saved);

    /* get_row of a few rows: exact up to f32 rounding of the scale products */
    double eg = 0;
    float *rd = gpu->buf_alloc(gpu, (size_t)k * sizeof(float));
    int64_t ids[3] = {0, m / 2, m - 1};
    for (int t = 0; t < 3; t++) {
        gpu->get_row(gpu, &w, ids[t], rd);
        float *row = from_dev(rd, (size_t)k);
        double e = rel_err(row, deq + ids[t] * k, k, 1e-6);
        if (!(e <= eg)) eg = e;
        free(row);
    }
    report(eg <= 1e-6, "get_row %-4s k=%-5lld  %.2e (tol 1e-6)", mtplx_type_info(type)->name,
           (long long)k, eg);
    gpu->buf_free(gpu, rd);
    gpu->buf_free(gpu, xd);
    gpu->buf_free(gpu, yd);
    mtplx_cuda_forget_params(gpu); /* W's address may come back for another weight */
    free(W), free(wf), free(deq), free(x), free(bias), free(exf), free(ycpu), free(y), free(emu);
}

static void test_matmul(void) {
    static const int types[] = {MTPLX_TYPE_F32,  MTPLX_TYPE_F16,  MTPLX_TYPE_BF16, MTPLX_TYPE_Q8_0,
                                MTPLX_TYPE_Q4_0, MTPLX_TYPE_Q4_K, MTPLX_TYPE_Q6_K};
    /* n > 16: the tensor-core GEMM as well; 17, 40 and 130 rows are not
     * multiples of its 64-row tile, nor m = 37, 301 of its 64-column one */
    static const int64_t ns[] = {1, 2, 3, 5, 9, 16, 17, 40, 130};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        int type = types[t];
        int64_t bs = mtplx_type_info(type)->block_size;
        /* float types: a k that is not a multiple of 8 takes the slow path */
        int64_t ks[2] = {bs == 1 ? 1000 : (bs == 32 ? 416 : 768), bs == 1 ? 203 : bs * 3};
        for (int ki = 0; ki < 2; ki++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
                if (ki == 1 && ns[ni] != 3) continue;
                test_matmul_case(type, ni % 2 ? 37 : 301, ks[ki], ns[ni], ni == 2);
            }
    }
    /* the tensor-core GEMV with k steps enough for every warp of its k split,
     * a k tail (BF16: k % 32 != 0) and rows past a 16-row tile */
    test_matmul_case(MTPLX_TYPE_BF16, 53, 2056, 4, false);
    test_matmul_case(MTPLX_TYPE_Q8_0, 53, 2080, 16, true);
    test_matmul_case(MTPLX_TYPE_BF16, 1030, 512, 11, false);
    test_matmul_case(MTPLX_TYPE_Q4_K, 53, 2048, 4, false);
    test_matmul_case(MTPLX_TYPE_Q4_K, 301, 3072, 16, true);
    /* gemm_bf16.cu (BF16 tiled, k % 32 == 0): its 128 x 128 tiles partly
     * filled in both directions (m 301, 1030, 4100; n 33, 130, 300), one k
     * step (32) up to many, split-k or not, against the emulation; x staged
     * in f32 (paths.gemm_xb off) and in bf16 (on; where the backend's
     * scratch, 64 rows x 4096 here, holds n k values: the n = 300, k = 2048
     * cases stay in f32) */
    mtplx_cuda_paths s0 = mtplx_cuda_get_paths(gpu);
    for (int xb = 0; xb <= 1; xb++) {
        mtplx_cuda_paths px = s0;
        px.gemm_xb = xb;
        px.gemm_wgmma = 0; /* the mma.sync kernel here; wgmma's cases below */
        mtplx_cuda_set_paths(gpu, px);
        if (xb) printf("  info  the prefill GEMM's cases again with x staged in bf16 (the default; above: f32, MTPLX_CUDA_GEMM_XB=0)\n");
        test_matmul_case(MTPLX_TYPE_BF16, 301, 416, 130, true);
        test_matmul_case(MTPLX_TYPE_BF16, 1030, 32, 33, false);
        test_matmul_case(MTPLX_TYPE_BF16, 37, 2048, 300, false);
        test_matmul_case(MTPLX_TYPE_BF16, 4100, 256, 40, true);
        /* and its Q8_0 (paths.gemm_q8): the packed copy (mma_q4k on:
         * mmv_tc.cu's layout) and the int8-interleaved one (off: mmv_i8.cu's,
         * k % 64 == 0) */
        for (int q4k = 1; q4k >= 0 && s0.mma && s0.gemm_bf16; q4k--) {
            mtplx_cuda_paths p = px;
            p.mma_q4k = q4k, p.gemm_q8 = true;
            mtplx_cuda_set_paths(gpu, p);
            test_matmul_case(MTPLX_TYPE_Q8_0, 301, 448, 130, true);
            test_matmul_case(MTPLX_TYPE_Q8_0, 37, 2048, 300, false);
            test_matmul_case(MTPLX_TYPE_Q8_0, 1030, 512, 40, false);
            if (q4k) { /* Q4_K (file layout) in the same kernel: blocks of 256, sub-blocks as k steps */
                test_matmul_case(MTPLX_TYPE_Q4_K, 301, 768, 130, true);
                test_matmul_case(MTPLX_TYPE_Q4_K, 37, 2048, 300, false);
            }
        }
    }
    /* gemm_wgmma.cu (BF16 tiled, x in bf16, k % 64 == 0, an sm_90a build
     * on a compute capability 9.0 GPU): blocks of 128 and 256 weight rows,
     * tiles partly filled (m 37, 301, 1030, 4100; n 17-64), one k step (64)
     * up to 16, split-k or not, against the same emulation (not with
     * MTPLX_CUDA_GEMM_WGMMA=0 set: a crashing kernel must not stop the rest) */
    const char *wgv = getenv("MTPLX_CUDA_GEMM_WGMMA");
    for (int bn = 128; bn <= 256 && s0.gemm_bf16 && s0.tile && !(wgv && strcmp(wgv, "0") == 0); bn += 128) {
        if (!mtplx_cuda_wgmma_ready()) {
            printf("  skip  the prefill GEMM on wgmma: not built for sm_90a, or not a compute capability 9.0 GPU\n");
            break;
        }
        mtplx_cuda_paths px = s0;
        px.gemm_xb = true, px.gemm_wgmma = bn;
        mtplx_cuda_set_paths(gpu, px);
        printf("  info  the prefill GEMM's BF16 cases on wgmma (MTPLX_CUDA_GEMM_WGMMA=%d)\n", bn);
        test_matmul_case(MTPLX_TYPE_BF16, 4100, 256, 40, true);
        test_matmul_case(MTPLX_TYPE_BF16, 301, 448, 40, true);
        test_matmul_case(MTPLX_TYPE_BF16, 1030, 1024, 64, false);
        test_matmul_case(MTPLX_TYPE_BF16, 37, 64, 33, false);
        test_matmul_case(MTPLX_TYPE_BF16, 4100, 192, 17, false);
    }
    mtplx_cuda_set_paths(gpu, s0);
    /* the int8 GEMV's Q8_0 (k % 64 == 0): a part x chunk (448), k steps
     * for every warp with a tail (2112) */
    static const int64_t n8[] = {1, 3, 9, 16};
    for (size_t i = 0; i < sizeof n8 / sizeof *n8; i++) {
        test_matmul_case(MTPLX_TYPE_Q8_0, 301, 448, n8[i], i == 1);
        test_matmul_case(MTPLX_TYPE_Q8_0, 53, 2112, n8[i], false);
    }
}

/* The tensor-core GEMM reading x through scalar loads (x not 16-byte
 * aligned) must give the very bits of its vector loads: the values rounded
 * to the operand type are the same, only the load instructions differ. */
static void test_matmul_tc_unaligned(int type) {
    if (!mtplx_cuda_get_paths(gpu).tc) return;
    int64_t m = 50, k = 256, n = 33;
    size_t rs = mtplx_row_size(type, k);
    uint8_t *W = malloc(rs * (size_t)m);
    float *wf = rand_vec(k, 1.0f), *x = rand_vec(n * k, 1.0f);
    for (int64_t r = 0; r < m; r++) {
        for (int64_t j = 0; j < k; j++) wf[j] = grand();
        mtplx_quantize_row(type, wf, W + (size_t)r * rs, k);
    }
    mtplx_weight w = {.type = type, .m = m, .k = k, .data = W};
    mtplx_cuda_paths saved = mtplx_cuda_get_paths(gpu), p = saved;
    p.tc = p.tc_f32 = true;
    p.tc_min_rows = 17;
    mtplx_cuda_set_paths(gpu, p);
    float *xd = gpu->buf_alloc(gpu, (size_t)(n * k + 1) * sizeof(float));
    float *yd = gpu->buf_alloc(gpu, (size_t)(n * m) * sizeof(float));
    gpu->upload(gpu, xd + 1, x, (size_t)(n * k) * sizeof(float));
    gpu->matmul(gpu, &w, NULL, xd + 1, n, yd);
    float *y1 = from_dev(yd, (size_t)(n * m));
    gpu->upload(gpu, xd, x, (size_t)(n * k) * sizeof(float));
    gpu->matmul(gpu, &w, NULL, xd, n, yd);
    float *y0 = from_dev(yd, (size_t)(n * m));
    bool same = memcmp(y0, y1, (size_t)(n * m) * sizeof(float)) == 0;
    report(same,
           "matmul %-4s m=%lld k=%lld n=%lld tensor cores (MTPLX_CUDA_TC): x unaligned == aligned, "
           "bit for bit",
           mtplx_type_info(type)->name, (long long)m, (long long)k, (long long)n);
    mtplx_cuda_set_paths(gpu, saved);
    gpu->buf_free(gpu, xd), gpu->buf_free(gpu, yd);
    mtplx_cuda_forget_params(gpu);
    free(W), free(wf), free(x), free(y0), free(y1);
}

/* ---- the small-n GEMV's fused ops and its row independence ---- */
static uint8_t *rand_weight(int type, int64_t m, int64_t k) {
    size_t rs = mtplx_row_size(type, k);
    uint8_t *W = malloc(rs * (size_t)m);
    float *wf = rand_vec(k, 1.0f);
    for (int64_t r = 0; r < m; r++) {
        for (int64_t j = 0; j < k; j++)
            wf[j] = grand();
        mtplx_quantize_row(type, wf, W + (size_t)r * rs, k);
    }
    free(wf);
    return W;
}

static bool same_dev(const float *a, const float *b, int64_t n) {
    float *ha = from_dev(a, (size_t)n), *hb = from_dev(b, (size_t)n);
    bool same = memcmp(ha, hb, (size_t)n * sizeof(float)) == 0;
    free(ha), free(hb);
    return same;
}

/* matmul_multi / _swiglu / _add against the plain ops they replace: equal
 * bit for bit (forward.c switches between them freely); and each row of an
 * n-row matmul equal to the same row alone (decode vs verify: greedy MTP ==
 * AR rests on it). */
static void test_fused_case(int type, int64_t k, int64_t n) {
    const char *tn = mtplx_type_info(type)->name;
    int64_t ms[3] = {96, 37, 64}; /* not multiples of a block's rows */
    uint8_t *W[3];
    mtplx_weight w[3];
    for (int j = 0; j < 3; j++) {
        W[j] = rand_weight(type, ms[j], k);
        w[j] = (mtplx_weight){.type = type, .m = ms[j], .k = k, .data = W[j]};
    }
    float *x = rand_vec(n * k, 1.0f), *bias = rand_vec(ms[1], 1.0f);
    float *xd = to_dev(x, (size_t)(n * k) * sizeof(float));
    float *ya[3], *yb[3];
    for (int j = 0; j < 3; j++) {
        ya[j] = gpu->buf_alloc(gpu, (size_t)(n * ms[j]) * sizeof(float));
        yb[j] = gpu->buf_alloc(gpu, (size_t)(n * ms[j]) * sizeof(float));
    }
    /* Q, K, V */
    const mtplx_weight *wp[3] = {&w[0], &w[1], &w[2]};
    const float *bs[3] = {NULL, bias, NULL};
    bool took = gpu->matmul_multi && gpu->matmul_multi(gpu, 3, wp, bs, xd, NULL, 0.f, n, ya);
    for (int j = 0; j < 3; j++)
        gpu->matmul(gpu, wp[j], bs[j], xd, n, yb[j]);
    bool same = took;
    for (int j = 0; j < 3; j++)
        same = same && same_dev(ya[j], yb[j], n * ms[j]);
    report(same,
           "matmul_multi %-4s k=%-5lld n=%-2lld (3 weights, a bias) == 3 matmuls, bit for bit%s",
           tn, (long long)k, (long long)n, took ? "" : " (not taken)");
    /* gate / up: w[0] with w[2]'s first 96 rows? shapes must match: w[0] twice
     * would hide a mix-up, so a second 96-row weight */
    uint8_t *W3 = rand_weight(type, ms[0], k);
    mtplx_weight up = {.type = type, .m = ms[0], .k = k, .data = W3};
    float *h2 = gpu->buf_alloc(gpu, (size_t)(n * ms[0]) * sizeof(float));
    took = gpu->matmul_swiglu && gpu->matmul_swiglu(gpu, &w[0], &up, xd, NULL, 0.f, n, ya[0]);
    gpu->matmul(gpu, &w[0], NULL, xd, n, yb[0]);
    gpu->matmul(gpu, &up, NULL, xd, n, h2);
    gpu->silu_mul(gpu, yb[0], h2, yb[0], n * ms[0]);
    report(took && same_dev(ya[0], yb[0], n * ms[0]),
           "matmul_swiglu %-4s k=%-5lld n=%-2lld == matmul, matmul, silu_mul, bit for bit", tn,
           (long long)k, (long long)n);
    /* the rmsnorm fused in (main turns MTPLX_CUDA_FUSE_NORM on for the op
     * checks) against rmsnorm, then the op: equal up to f32 rounding */
    float *nw = rand_vec(k, 1.0f);
    float *xn = gpu->buf_alloc(gpu, (size_t)(n * k) * sizeof(float));
    gpu->rmsnorm(gpu, xd, nw, xn, n, k, 1e-6f);
    took = gpu->matmul_multi(gpu, 3, wp, bs, xd, nw, 1e-6f, n, ya) &&
           gpu->matmul_swiglu(gpu, &w[0], &up, xd, nw, 1e-6f, n, h2);
    for (int j = 0; j < 3; j++)
        gpu->matmul(gpu, wp[j], bs[j], xn, n, yb[j]);
    double en = 0;
    for (int j = 0; j < 3; j++) {
        float *ha = from_dev(ya[j], (size_t)(n * ms[j])),
              *hb = from_dev(yb[j], (size_t)(n * ms[j]));
        en = fmax(en, rel_err(ha, hb, n * ms[j], 1e-3));
        free(ha), free(hb);
    }
    gpu->matmul_swiglu(gpu, &w[0], &up, xn, NULL, 0.f, n, yb[0]);
    float *ha = from_dev(h2, (size_t)(n * ms[0])), *hb = from_dev(yb[0], (size_t)(n * ms[0]));
    en = fmax(en, rel_err(ha, hb, n * ms[0], 1e-3));
    free(ha), free(hb);
    /* tiled BF16 past mmv_tc.cu's norm (MTPLX_CUDA_TC_NORM_MAX_K elements)
     * has no GEMV that takes a fused norm: the backend declines */
    mtplx_cuda_paths cp = mtplx_cuda_get_paths(gpu);
    if (type == MTPLX_TYPE_BF16 && cp.mma && cp.tile && k % 32 == 0 && k > MTPLX_CUDA_TC_NORM_MAX_K) {
        report(!took, "matmul_multi / _swiglu %-4s k=%-5lld n=%-2lld with a fused rmsnorm: declined "
                      "for tiled BF16 past %d%s", tn, (long long)k, (long long)n, MTPLX_CUDA_TC_NORM_MAX_K,
               took ? " (taken)" : "");
    } else {
        report(took && en <= 1e-5,
               "matmul_multi / _swiglu %-4s k=%-5lld n=%-2lld with the rmsnorm fused == rmsnorm, then "
               "the op  %.2e (tol 1e-5)%s",
               tn, (long long)k, (long long)n, en, took ? "" : " (not taken)");
        /* and each row of the fused ops equal to it alone, bit for bit (the
         * norm's sum of squares must not depend on n or the other rows) */
        bool nrows = took;
        for (int64_t i = 0; nrows && i < n; i++) {
            float *yr[3] = {yb[0], yb[1], yb[2]};
            nrows = gpu->matmul_multi(gpu, 3, wp, bs, xd + i * k, nw, 1e-6f, 1, yr) &&
                    gpu->matmul_swiglu(gpu, &w[0], &up, xd + i * k, nw, 1e-6f, 1, xn);
            for (int j = 0; j < 3; j++)
                nrows = nrows && same_dev(ya[j] + i * ms[j], yb[j], ms[j]);
            nrows = nrows && same_dev(h2 + i * ms[0], xn, ms[0]);
        }
        report(nrows,
               "matmul_multi / _swiglu %-4s k=%-5lld n=%-2lld with the rmsnorm fused: every row "
               "equals it computed alone, bit for bit",
               tn, (long long)k, (long long)n);
    }
    gpu->buf_free(gpu, xn);
    free(nw);
    /* residual: y starts equal in both */
    float *y0 = rand_vec(n * ms[1], 1.0f);
    gpu->upload(gpu, ya[1], y0, (size_t)(n * ms[1]) * sizeof(float));
    gpu->upload(gpu, yb[1], y0, (size_t)(n * ms[1]) * sizeof(float));
    took = gpu->matmul_add && gpu->matmul_add(gpu, &w[1], xd, n, ya[1]);
    gpu->matmul(gpu, &w[1], NULL, xd, n, h2);
    gpu->add(gpu, yb[1], h2, n * ms[1]);
    report(took && same_dev(ya[1], yb[1], n * ms[1]),
           "matmul_add %-4s k=%-5lld n=%-2lld == matmul, add, bit for bit", tn, (long long)k,
           (long long)n);
    /* each row alone */
    gpu->matmul(gpu, &w[1], bias, xd, n, ya[1]);
    bool rows_same = true;
    for (int64_t i = 0; i < n; i++) {
        gpu->matmul(gpu, &w[1], bias, xd + i * k, 1, yb[1]);
        rows_same = rows_same && same_dev(ya[1] + i * ms[1], yb[1], ms[1]);
    }
    report(rows_same,
           "matmul %-4s k=%-5lld n=%-2lld: every row equals it computed alone, bit for bit", tn,
           (long long)k, (long long)n);
    mtplx_cuda_synchronize(gpu);
    for (int j = 0; j < 3; j++)
        gpu->buf_free(gpu, ya[j]), gpu->buf_free(gpu, yb[j]), free(W[j]);
    gpu->buf_free(gpu, h2);
    gpu->buf_free(gpu, xd);
    mtplx_cuda_forget_params(gpu);
    free(W3), free(x), free(bias), free(y0);
}

/* A prefill's fused GEMM groups (paths.gemm_fuse): matmul_multi (three
 * weights, a bias) and matmul_swiglu of more rows than the GEMV takes ==
 * 3 matmuls, and matmul, matmul, silu_mul, bit for bit, for BF16, Q8_0 and
 * Q4_K, m not a multiple of a tile, with split-k (few tiles: the partials'
 * sum applies the SwiGLU) and without (many); declined with the switch
 * off. */
static void test_gemm_fuse(void) {
    mtplx_cuda_paths saved = mtplx_cuda_get_paths(gpu);
    if (!saved.tc || !saved.gemm_bf16 || !gpu->matmul_swiglu || !gpu->matmul_multi) return;
    static const int types[] = {MTPLX_TYPE_BF16, MTPLX_TYPE_Q8_0, MTPLX_TYPE_Q4_K};
    static const int64_t shapes[][2] = {{200, 40}, {4100, 600}}; /* m, n */
    const int64_t k = 512;
    for (size_t t = 0; t < 3; t++)
        for (size_t si = 0; si < 2; si++) {
            int type = types[t];
            /* where matmul itself takes the pipelined GEMM: BF16 tiled, the
             * others with gemm_q8 */
            if (type == MTPLX_TYPE_BF16 ? !(saved.mma && saved.tile) : !saved.gemm_q8) continue;
            int64_t m = shapes[si][0], n = shapes[si][1];
            /* gate (also Q), up, K, V */
            int64_t ms[4] = {m, m, m / 4 + 3, m / 4 + 3};
            uint8_t *W[4];
            mtplx_weight w[4];
            for (int j = 0; j < 4; j++) {
                W[j] = rand_weight(type, ms[j], k);
                w[j] = (mtplx_weight){.type = type, .m = ms[j], .k = k, .data = W[j]};
            }
            const mtplx_weight *qkv[3] = {&w[0], &w[2], &w[3]};
            float *x = rand_vec(n * k, 1.0f), *bias = rand_vec(ms[2], 1.0f);
            const float *bs[3] = {NULL, bias, NULL};
            float *xd = to_dev(x, (size_t)(n * k) * sizeof(float));
            float *ya[3], *yb[3];
            for (int j = 0; j < 3; j++) {
                ya[j] = gpu->buf_alloc(gpu, (size_t)(n * m) * sizeof(float));
                yb[j] = gpu->buf_alloc(gpu, (size_t)(n * m) * sizeof(float));
            }
            mtplx_cuda_paths p = saved;
            p.gemm_fuse = false;
            mtplx_cuda_set_paths(gpu, p);
            bool declined = !gpu->matmul_swiglu(gpu, &w[0], &w[1], xd, NULL, 0.f, n, ya[0]) &&
                            !gpu->matmul_multi(gpu, 3, qkv, bs, xd, NULL, 0.f, n, ya);
            p.gemm_fuse = true;
            mtplx_cuda_set_paths(gpu, p);
            /* gate / up */
            bool took = gpu->matmul_swiglu(gpu, &w[0], &w[1], xd, NULL, 0.f, n, ya[0]);
            gpu->matmul(gpu, &w[0], NULL, xd, n, yb[0]);
            gpu->matmul(gpu, &w[1], NULL, xd, n, yb[1]);
            gpu->silu_mul(gpu, yb[0], yb[1], yb[0], n * m);
            report(declined && took && same_dev(ya[0], yb[0], n * m),
                   "matmul_swiglu %-4s m=%-4lld k=%lld n=%-3lld in the prefill GEMM (MTPLX_CUDA_GEMM_FUSE) == "
                   "matmul, matmul, silu_mul, bit for bit%s%s",
                   mtplx_type_info(type)->name, (long long)m, (long long)k, (long long)n,
                   declined ? "" : " (taken with the switch off)", took ? "" : " (not taken)");
            /* Q, K (a bias), V */
            took = gpu->matmul_multi(gpu, 3, qkv, bs, xd, NULL, 0.f, n, ya);
            bool same = took;
            for (int j = 0; j < 3; j++) {
                gpu->matmul(gpu, qkv[j], bs[j], xd, n, yb[j]);
                same = same && same_dev(ya[j], yb[j], n * qkv[j]->m);
            }
            report(declined && same,
                   "matmul_multi %-4s m=%-4lld k=%lld n=%-3lld (3 weights, a bias) in the prefill GEMM "
                   "(MTPLX_CUDA_GEMM_FUSE) == 3 matmuls, bit for bit%s%s",
                   mtplx_type_info(type)->name, (long long)m, (long long)k, (long long)n,
                   declined ? "" : " (taken with the switch off)", took ? "" : " (not taken)");
            mtplx_cuda_set_paths(gpu, saved);
            gpu->buf_free(gpu, xd);
            for (int j = 0; j < 3; j++)
                gpu->buf_free(gpu, ya[j]), gpu->buf_free(gpu, yb[j]);
            mtplx_cuda_forget_params(gpu);
            for (int j = 0; j < 4; j++)
                free(W[j]);
            free(x), free(bias);
        }
}

static void test_qk_prep_case(int kv_type, bool norms);

static void test_fused(void) {
    static const int types[] = {MTPLX_TYPE_F32, MTPLX_TYPE_F16, MTPLX_TYPE_BF16, MTPLX_TYPE_Q8_0,
                                MTPLX_TYPE_Q4_K};
    static const int64_t ns[] = {1, 3, 9};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
            test_fused_case(types[t], types[t] == MTPLX_TYPE_Q4_K ? 512 : 416, ns[i]);
    /* an 8B model's hidden size, and one past mmv_tc.cu's fused norm
     * (MTPLX_CUDA_TC_NORM_MAX_K: tiled BF16 then takes rmsnorm, then the
     * GEMV) */
    test_fused_case(MTPLX_TYPE_BF16, 4096, 4);
    test_fused_case(MTPLX_TYPE_BF16, 4104, 2);
    test_fused_case(MTPLX_TYPE_BF16, 6400, 2);
    /* BF16, Q8_0 and Q4_K ran on tensor cores above: the f32 GEMV's fused modes too */
    mtplx_cuda_paths saved = mtplx_cuda_get_paths(gpu), p = saved;
    if (saved.mma) {
        p.mma = false;
        mtplx_cuda_set_paths(gpu, p);
        printf("  info  fused ops of BF16, Q8_0 and Q4_K again with MTPLX_CUDA_MMA=0 (f32 GEMV)\n");
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            test_fused_case(MTPLX_TYPE_BF16, 416, ns[i]);
            test_fused_case(MTPLX_TYPE_Q8_0, 416, ns[i]);
            test_fused_case(MTPLX_TYPE_Q4_K, 512, ns[i]);
        }
        /* and on the int8 tensor cores (mma_q4k off: mmv_i8.cu) */
        p = saved;
        p.mma_q4k = false;
        mtplx_cuda_set_paths(gpu, p);
        printf("  info  fused ops of Q8_0 and Q4_K again with mma_q4k off (int8 tensor cores)\n");
        for (size_t i = 0; i < sizeof ns / sizeof *ns; i++) {
            test_fused_case(MTPLX_TYPE_Q8_0, 448, ns[i]);
            test_fused_case(MTPLX_TYPE_Q4_K, 512, ns[i]);
        }
        mtplx_cuda_set_paths(gpu, saved);
    }
    for (int norms = 0; norms < 2; norms++) {
        test_qk_prep_case(MTPLX_TYPE_F16, norms);
        test_qk_prep_case(MTPLX_TYPE_F32, norms);
    }
}

/* BF16 weights tiled for the tensor-core GEMV (paths.tile, on by default)
 * against the row-major layout: the same bits for every mode at 1, 4 and 16
 * rows (matmul + bias, QKV, gate/up + SwiGLU, add) and for the prefill
 * GEMM (40 rows), m not a multiple of a 16-row tile; 20 rows (the GEMV 16
 * at a time when tiled, the f32 GEMM when not): every row equal to it
 * computed alone, and within TOL_MM_EXACT of the row-major result; then
 * get_row of the tiled weight (read from the GGUF copy) exact. The prefill
 * GEMM here is tc_mm_kernel for both layouts (gemm_bf16 off): gemm_bf16.cu
 * reads only the tiled one and splits k its own way, so its bits are not
 * the row-major GEMM's; test_matmul checks it against the emulation. */
static void test_tiled(void) {
    mtplx_cuda_paths saved = mtplx_cuda_get_paths(gpu);
    if (!saved.mma) return;
    static const int64_t ks[] = {416, 4096};
    static const int64_t ns[] = {1, 4, 16, 20, 40};
    for (size_t ki = 0; ki < 2; ki++)
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
            int64_t k = ks[ki], n = ns[ni], ms[3] = {301, 37, 64};
            int64_t tot = n * (2 * ms[0] + ms[0] + ms[1] + ms[2] + ms[1]);
            uint8_t *W[4];
            mtplx_weight w[4];
            for (int j = 0; j < 4; j++) {
                W[j] = rand_weight(MTPLX_TYPE_BF16, ms[j < 3 ? j : 0], k);
                w[j] = (mtplx_weight){.type = MTPLX_TYPE_BF16, .m = ms[j < 3 ? j : 0], .k = k, .data = W[j]};
            }
            const mtplx_weight *wp[3] = {&w[0], &w[1], &w[2]};
            float *x = rand_vec(n * k, 1.0f), *bias = rand_vec(ms[0], 1.0f), *y0 = rand_vec(n * ms[1], 1.0f);
            const float *bs[3] = {bias, NULL, NULL};
            float *xd = to_dev(x, (size_t)(n * k) * sizeof(float));
            float *yd = gpu->buf_alloc(gpu, (size_t)tot * sizeof(float)), *got[2];
            bool fused = n <= 16, took = true; /* the GEMV's rows */
            for (int tile = 0; tile < 2; tile++) {
                mtplx_cuda_paths p = saved;
                p.mma = true, p.tile = tile, p.gemm_bf16 = false;
                mtplx_cuda_set_paths(gpu, p);
                float *y = yd, *qkv[3] = {yd + n * ms[0]};
                qkv[1] = qkv[0] + n * ms[0], qkv[2] = qkv[1] + n * ms[1];
                float *h = qkv[2] + n * ms[2], *ya = h + n * ms[0];
                gpu->matmul(gpu, &w[0], bias, xd, n, y);
                if (fused) {
                    took = took && gpu->matmul_multi(gpu, 3, wp, bs, xd, NULL, 0.f, n, qkv);
                    took = took && gpu->matmul_swiglu(gpu, &w[0], &w[3], xd, NULL, 0.f, n, h);
                    gpu->upload(gpu, ya, y0, (size_t)(n * ms[1]) * sizeof(float));
                    took = took && gpu->matmul_add(gpu, &w[1], xd, n, ya);
                }
                got[tile] = from_dev(yd, (size_t)(fused ? tot : n * ms[0]));
            }
            if (n != 20) {
                report(took && memcmp(got[0], got[1], (size_t)(fused ? tot : n * ms[0]) * sizeof(float)) == 0,
                       "BF16 k=%-4lld n=%-2lld tiled (MTPLX_CUDA_TILE) == row-major, bit for bit: %s%s", (long long)k,
                       (long long)n, fused ? "matmul + bias, QKV, SwiGLU, add" : "matmul + bias (prefill GEMM)",
                       took ? "" : " (a fused op not taken)");
            } else {
                /* tiled (the current paths): each row alone */
                float *yr = gpu->buf_alloc(gpu, (size_t)ms[0] * sizeof(float));
                bool rows = true;
                for (int64_t i = 0; i < n; i++) {
                    gpu->matmul(gpu, &w[0], bias, xd + i * k, 1, yr);
                    float *r = from_dev(yr, (size_t)ms[0]);
                    rows = rows && memcmp(r, got[1] + i * ms[0], (size_t)ms[0] * sizeof(float)) == 0;
                    free(r);
                }
                gpu->buf_free(gpu, yr);
                double e = rel_err(got[1], got[0], n * ms[0], 1e-3);
                report(rows && e <= TOL_MM_EXACT,
                       "BF16 k=%-4lld n=%-2lld tiled: the GEMV 16 rows at a time, every row == it alone%s; "
                       "vs row-major's f32 GEMM %.2e (tol %.0e)",
                       (long long)k, (long long)n, rows ? "" : " (NOT)", e, TOL_MM_EXACT);
            }
            if (n == 1) { /* get_row of a tiled weight */
                float *rd = gpu->buf_alloc(gpu, (size_t)k * sizeof(float)), *want = malloc((size_t)k * sizeof(float));
                mtplx_dequantize_row(MTPLX_TYPE_BF16, W[0] + 2 * k * 300, want, k);
                gpu->get_row(gpu, &w[0], 300, rd);
                float *row = from_dev(rd, (size_t)k);
                report(memcmp(row, want, (size_t)k * sizeof(float)) == 0, "BF16 k=%-4lld get_row of a tiled weight, exact",
                       (long long)k);
                gpu->buf_free(gpu, rd);
                free(row), free(want);
            }
            mtplx_cuda_set_paths(gpu, saved);
            gpu->buf_free(gpu, xd), gpu->buf_free(gpu, yd);
            mtplx_cuda_forget_params(gpu);
            for (int j = 0; j < 4; j++)
                free(W[j]);
            free(x), free(bias), free(y0), free(got[0]), free(got[1]);
        }
}

/* BF16 weights of few rows take 8 warps a block (mmv_tc.cu's bf16_warps),
 * and a fused QKV of such weights too large for one wave of those blocks
 * takes two row tiles a block: its rows must still equal the three plain
 * matmuls' (one tile a block), bit for bit, at every n. The same for a
 * SwiGLU of such weights (two or three tiles a block). */
static void test_w8_tiles(void) {
    if (!mtplx_cuda_get_paths(gpu).mma) return;
    const int64_t k = 416, ms[3] = {2048, 1536, 1040}; /* 4624 rows: 289 tiles of 16 */
    uint8_t *W[3];
    mtplx_weight w[3];
    const mtplx_weight *wp[3];
    for (int j = 0; j < 3; j++) {
        W[j] = rand_weight(MTPLX_TYPE_BF16, ms[j], k);
        w[j] = (mtplx_weight){.type = MTPLX_TYPE_BF16, .m = ms[j], .k = k, .data = W[j]};
        wp[j] = &w[j];
    }
    uint8_t *Wg = rand_weight(MTPLX_TYPE_BF16, 2600, k), *Wu = rand_weight(MTPLX_TYPE_BF16, 2600, k);
    const mtplx_weight gate = {.type = MTPLX_TYPE_BF16, .m = 2600, .k = k, .data = Wg};
    const mtplx_weight up = {.type = MTPLX_TYPE_BF16, .m = 2600, .k = k, .data = Wu};
    static const int64_t ns[] = {1, 4, 16};
    for (size_t ni = 0; ni < 3; ni++) {
        int64_t n = ns[ni];
        float *x = rand_vec(n * k, 1.0f), *ya[3], *yb[3];
        float *xd = to_dev(x, (size_t)(n * k) * sizeof(float));
        for (int j = 0; j < 3; j++) {
            ya[j] = gpu->buf_alloc(gpu, (size_t)(n * ms[j]) * sizeof(float));
            yb[j] = gpu->buf_alloc(gpu, (size_t)(n * ms[j]) * sizeof(float));
        }
        const float *bs[3] = {NULL, NULL, NULL};
        bool took = gpu->matmul_multi && gpu->matmul_multi(gpu, 3, wp, bs, xd, NULL, 0.f, n, ya);
        bool same = took;
        for (int j = 0; j < 3; j++) {
            gpu->matmul(gpu, wp[j], NULL, xd, n, yb[j]);
            same = same && same_dev(ya[j], yb[j], n * ms[j]);
        }
        report(same,
               "BF16 k=%lld n=%-2lld QKV of 4624 rows (8 warps, 2 tiles a block on a GPU of at most 144 SMs) "
               "== 3 matmuls (1 tile), bit for bit%s",
               (long long)k, (long long)n, took ? "" : " (not taken)");
        /* gate / up of 2600 rows: 8 warps; 2 m-tiles a block as SwiGLU
         * always takes, 1 for the plain matmuls */
        const int64_t mg = gate.m;
        float *h = gpu->buf_alloc(gpu, (size_t)(n * mg) * sizeof(float));
        float *hu = gpu->buf_alloc(gpu, (size_t)(n * mg) * sizeof(float));
        float *hs = gpu->buf_alloc(gpu, (size_t)(n * mg) * sizeof(float));
        took = gpu->matmul_swiglu && gpu->matmul_swiglu(gpu, &gate, &up, xd, NULL, 0.f, n, hs);
        gpu->matmul(gpu, &gate, NULL, xd, n, h);
        gpu->matmul(gpu, &up, NULL, xd, n, hu);
        gpu->silu_mul(gpu, h, hu, h, n * mg);
        report(took && same_dev(hs, h, n * mg),
               "BF16 k=%lld n=%-2lld SwiGLU of 2 x 2600 rows (8 warps, 2 tiles a block) == matmul, "
               "matmul, silu_mul, bit for bit%s",
               (long long)k, (long long)n, took ? "" : " (not taken)");
        gpu->buf_free(gpu, h), gpu->buf_free(gpu, hu), gpu->buf_free(gpu, hs);
        gpu->buf_free(gpu, xd);
        for (int j = 0; j < 3; j++) gpu->buf_free(gpu, ya[j]), gpu->buf_free(gpu, yb[j]);
        free(x);
    }
    mtplx_cuda_forget_params(gpu);
    for (int j = 0; j < 3; j++) free(W[j]);
    free(Wg), free(Wu);
}

/* Q8_0's prefill GEMM reads the GEMV's own copy (cuda_layout.h): the int8
 * GEMV's interleaved layout (mma_q4k off) and the packed one of mmv_tc.cu
 * (mma_q4k on) hold the same values, so the GEMM gives the same bits from
 * either, within the emulation of its rounding; 20 rows go through the
 * GEMV 16 at a time, each row equal to it computed alone. */
static void test_q8_layouts(void) {
    mtplx_cuda_paths saved = mtplx_cuda_get_paths(gpu);
    if (!saved.mma || !saved.tc) return;
    static const int64_t ks[] = {448, 4096}, ns[] = {20, 40};
    const int64_t m = 301;
    for (size_t ki = 0; ki < 2; ki++)
        for (size_t ni = 0; ni < 2; ni++) {
            int64_t k = ks[ki], n = ns[ni];
            uint8_t *W = rand_weight(MTPLX_TYPE_Q8_0, m, k);
            mtplx_weight w = {.type = MTPLX_TYPE_Q8_0, .m = m, .k = k, .data = W};
            float *x = rand_vec(n * k, 1.0f), *bias = rand_vec(m, 1.0f), *got[2];
            float *xd = to_dev(x, (size_t)(n * k) * sizeof(float));
            float *yd = gpu->buf_alloc(gpu, (size_t)(n * m) * sizeof(float));
            float *yr = gpu->buf_alloc(gpu, (size_t)m * sizeof(float));
            bool rows = true;
            for (int v = 0; v < 2; v++) {
                mtplx_cuda_paths p = saved;
                p.mma = true, p.mma_q4k = v == 1, p.mma_q4k_auto = false;
                p.tc_min_rows = MTPLX_CUDA_TC_MIN_ROWS;
                mtplx_cuda_set_paths(gpu, p);
                gpu->matmul(gpu, &w, bias, xd, n, yd);
                got[v] = from_dev(yd, (size_t)(n * m));
                for (int64_t i = 0; n < MTPLX_CUDA_TC_MIN_ROWS && i < n; i++) {
                    gpu->matmul(gpu, &w, bias, xd + i * k, 1, yr);
                    float *r = from_dev(yr, (size_t)m);
                    rows = rows && memcmp(r, got[v] + i * m, (size_t)m * sizeof(float)) == 0;
                    free(r);
                }
            }
            mtplx_cuda_set_paths(gpu, saved);
            if (n >= MTPLX_CUDA_TC_MIN_ROWS) {
                float *emu = tc_emulated(&w, x, bias, n);
                double e = rel_err(got[0], emu, n * m, 1e-3);
                bool same = memcmp(got[0], got[1], (size_t)(n * m) * sizeof(float)) == 0;
                report(same && e <= TOL_MM_TC_EMU,
                       "Q8_0 k=%-4lld n=%-2lld prefill GEMM from the GEMV's copy: int8-interleaved == "
                       "packed, bit for bit%s; vs emu %.2e (tol %.0e)",
                       (long long)k, (long long)n, same ? "" : " (NOT)", e, TOL_MM_TC_EMU);
                free(emu);
            } else {
                report(rows, "Q8_0 k=%-4lld n=%-2lld the GEMV 16 rows at a time (int8 and bf16 tensor "
                             "cores): every row == it alone",
                       (long long)k, (long long)n);
            }
            gpu->buf_free(gpu, xd), gpu->buf_free(gpu, yd), gpu->buf_free(gpu, yr);
            mtplx_cuda_forget_params(gpu);
            free(W), free(x), free(bias), free(got[0]), free(got[1]);
        }
}

/* The tensor-core GEMVs launched as programmatic dependents (paths.pdl, on
 * by default; sm_90) against plain launches: the same bits for every mode
 * (matmul + bias, QKV, gate/up + SwiGLU, matmul_add), 1, 4 and 16 rows, on
 * mmv_i8.cu (Q8_0, Q4_K) and on mmv_tc.cu (BF16, Q8_0 with mma_q4k), the
 * rmsnorm fused into QKV and gate/up. A GEMV that read x, the norm, the
 * scales or y before its wait would differ here (or under memcheck). */
static void test_i8_pdl(void) {
    mtplx_cuda_paths saved = mtplx_cuda_get_paths(gpu);
    if (!saved.mma) return;
    static const int types[] = {MTPLX_TYPE_Q8_0, MTPLX_TYPE_Q4_K, MTPLX_TYPE_BF16, MTPLX_TYPE_Q8_0};
    static const int64_t ns[] = {1, 4, 16};
    for (size_t t = 0; t < 4; t++)
        for (size_t ni = 0; ni < 3; ni++) {
            int type = types[t];
            bool tc = t >= 2; /* mmv_tc.cu */
            int64_t k = type == MTPLX_TYPE_Q4_K ? 3072 : type == MTPLX_TYPE_BF16 ? 1032 : 2112, n = ns[ni];
            int64_t ms[3] = {301, 37, 64}, tot = n * (2 * ms[0] + ms[0] + ms[1] + ms[2] + ms[1]);
            uint8_t *W[4];
            mtplx_weight w[4];
            for (int j = 0; j < 4; j++) {
                int64_t m = ms[j < 3 ? j : 0];
                W[j] = rand_weight(type, m, k);
                w[j] = (mtplx_weight){.type = type, .m = m, .k = k, .data = W[j]};
            }
            const mtplx_weight *wp[3] = {&w[0], &w[1], &w[2]};
            float *x = rand_vec(n * k, 1.0f), *bias = rand_vec(ms[0], 1.0f);
            float *nw = rand_vec(k, 1.0f), *y0 = rand_vec(n * ms[1], 1.0f);
            const float *bs[3] = {bias, NULL, NULL};
            float *xd = to_dev(x, (size_t)(n * k) * sizeof(float));
            float *yd = gpu->buf_alloc(gpu, (size_t)tot * sizeof(float)), *got[2];
            bool took = true;
            for (int pdl = 0; pdl < 2; pdl++) {
                mtplx_cuda_paths p = saved;
                p.mma = true, p.mma_q4k = tc, p.pdl = pdl;
                mtplx_cuda_set_paths(gpu, p);
                /* [matmul][QKV][SwiGLU][add], each [n][m] */
                float *y = yd, *qkv[3] = {yd + n * ms[0]};
                qkv[1] = qkv[0] + n * ms[0], qkv[2] = qkv[1] + n * ms[1];
                float *h = qkv[2] + n * ms[2], *ya = h + n * ms[0];
                gpu->matmul(gpu, &w[0], bias, xd, n, y);
                took = took && gpu->matmul_multi(gpu, 3, wp, bs, xd, nw, 1e-6f, n, qkv);
                took = took && gpu->matmul_swiglu(gpu, &w[0], &w[3], xd, nw, 1e-6f, n, h);
                gpu->upload(gpu, ya, y0, (size_t)(n * ms[1]) * sizeof(float));
                took = took && gpu->matmul_add(gpu, &w[1], xd, n, ya);
                got[pdl] = from_dev(yd, (size_t)tot);
            }
            report(took && memcmp(got[0], got[1], (size_t)tot * sizeof(float)) == 0,
                   "%s GEMV %-4s k=%lld n=%-2lld with PDL (MTPLX_CUDA_PDL) == without, bit for "
                   "bit: matmul + bias, QKV + norm, SwiGLU + norm, add%s",
                   tc ? "tensor-core" : "int8", mtplx_type_info(type)->name, (long long)k,
                   (long long)n, took ? "" : " (a fused op not taken)");
            mtplx_cuda_set_paths(gpu, saved);
            gpu->buf_free(gpu, xd), gpu->buf_free(gpu, yd);
            mtplx_cuda_forget_params(gpu);
            for (int j = 0; j < 4; j++)
                free(W[j]);
            free(x), free(bias), free(nw), free(y0), free(got[0]), free(got[1]);
        }
}

/* qk_norm_rope_store against the six ops it replaces (F16 and F32 caches,
 * with and without the q/k norms). */
static void test_qk_prep_case(int kv_type, bool norms) {
    const int nh = 4, nkv = 2, hd = 128;
    const int64_t n = 3, pos0 = 37, ctx = 64, qd = nh * hd, kvd = nkv * hd;
    float *q = rand_vec(n * qd, 1.0f), *k = rand_vec(n * kvd, 1.0f), *v = rand_vec(n * kvd, 1.0f);
    float *qn = norms ? rand_vec(hd, 1.0f) : NULL, *kn = norms ? rand_vec(hd, 1.0f) : NULL;
    float *freq = malloc((size_t)(hd / 2) * sizeof(float));
    for (int i = 0; i < hd / 2; i++)
        freq[i] = powf(1e6f, -2.0f * (float)i / (float)hd);
    size_t cb = (size_t)ctx * mtplx_row_size(kv_type, kvd);
    float *qa = to_dev(q, (size_t)(n * qd) * 4), *qb = to_dev(q, (size_t)(n * qd) * 4);
    float *ka = to_dev(k, (size_t)(n * kvd) * 4), *kb = to_dev(k, (size_t)(n * kvd) * 4);
    float *vd = to_dev(v, (size_t)(n * kvd) * 4);
    void *kca = gpu->buf_alloc(gpu, cb), *kcb = gpu->buf_alloc(gpu, cb);
    void *vca = gpu->buf_alloc(gpu, cb), *vcb = gpu->buf_alloc(gpu, cb);
    bool took = gpu->qk_norm_rope_store &&
                gpu->qk_norm_rope_store(gpu, qa, ka, vd, n, nh, nkv, hd, qn, kn, 1e-6f, pos0, freq,
                                        true, kv_type, kca, vca);
    if (qn) gpu->rmsnorm(gpu, qb, qn, qb, n * nh, hd, 1e-6f);
    if (kn) gpu->rmsnorm(gpu, kb, kn, kb, n * nkv, hd, 1e-6f);
    gpu->rope(gpu, qb, n, nh, hd, pos0, freq, true);
    gpu->rope(gpu, kb, n, nkv, hd, pos0, freq, true);
    gpu->kv_store(gpu, kv_type, kcb, pos0, kb, n, kvd);
    gpu->kv_store(gpu, kv_type, vcb, pos0, vd, n, kvd);
    float *h[4] = {from_dev(qa, (size_t)(n * qd)), from_dev(qb, (size_t)(n * qd)),
                   from_dev(ka, (size_t)(n * kvd)), from_dev(kb, (size_t)(n * kvd))};
    double e = fmax(rel_err(h[0], h[1], n * qd, 1.0), rel_err(h[2], h[3], n * kvd, 1.0));
    /* the caches as f32 (F16: converted on the host) */
    size_t cf = (size_t)ctx * (size_t)kvd;
    void *hc[4];
    void *dc[4] = {kca, kcb, vca, vcb};
    for (int i = 0; i < 4; i++) {
        hc[i] = malloc(cb);
        gpu->download(gpu, hc[i], dc[i], cb);
    }
    float *fa = malloc(cf * 4), *fb = malloc(cf * 4);
    for (int i = 0; i < 4; i += 2) {
        mtplx_dequantize_row(kv_type, hc[i], fa, (int64_t)cf);
        mtplx_dequantize_row(kv_type, hc[i + 1], fb, (int64_t)cf);
        e = fmax(e, rel_err(fa, fb, (int64_t)cf, 1.0));
    }
    report(took && e <= 1e-6,
           "qk_norm_rope_store %s cache%s == rmsnorm x2, rope x2, kv_store x2  %.2e (tol 1e-6)",
           kv_type == MTPLX_TYPE_F16 ? "F16" : "F32", norms ? ", q/k norms" : "", e);
    for (int i = 0; i < 4; i++)
        free(h[i]), free(hc[i]), gpu->buf_free(gpu, dc[i]);
    gpu->buf_free(gpu, qa), gpu->buf_free(gpu, qb), gpu->buf_free(gpu, ka), gpu->buf_free(gpu, kb);
    gpu->buf_free(gpu, vd);
    mtplx_cuda_forget_params(gpu);
    free(q), free(k), free(v), free(qn), free(kn), free(freq), free(fa), free(fb);
}

/* ---- small ops ---- */
static void test_small_ops(void) {
    /* rmsnorm: rows of odd sizes, out of place and in place */
    static const int64_t ds[] = {1, 7, 100, 1000, 3001};
    for (size_t i = 0; i < sizeof ds / sizeof *ds; i++) {
        int64_t d = ds[i], n = 5;
        float *x = rand_vec(n * d, 2.0f), *w = rand_vec(d, 1.0f), *ref = malloc((size_t)(n * d) * 4);
        cpu->rmsnorm(cpu, x, w, ref, n, d, 1e-6f);
        float *xd = to_dev(x, (size_t)(n * d) * 4), *od = gpu->buf_alloc(gpu, (size_t)(n * d) * 4);
        gpu->rmsnorm(gpu, xd, w, od, n, d, 1e-6f);
        gpu->rmsnorm(gpu, xd, w, xd, n, d, 1e-6f);
        float *o = from_dev(od, (size_t)(n * d)), *o2 = from_dev(xd, (size_t)(n * d));
        double e = fmax(rel_err(o, ref, n * d, 1e-6), rel_err(o2, ref, n * d, 1e-6));
        report(e <= 1e-5, "rmsnorm d=%-5lld (and in place)  %.2e (tol 1e-5)", (long long)d, e);
        gpu->buf_free(gpu, xd), gpu->buf_free(gpu, od);
        mtplx_cuda_forget_params(gpu);
        free(x), free(w), free(ref), free(o), free(o2);
    }
    /* rope: both pairings, an odd head count, far positions */
    for (int neox = 0; neox < 2; neox++) {
        int64_t n = 3, nh = 5, hd = 64, pos0 = 3000;
        float *x = rand_vec(n * nh * hd, 1.0f), *inv = malloc((size_t)(hd / 2) * 4);
        for (int i = 0; i < hd / 2; i++) inv[i] = powf(10000.f, -2.f * i / (float)hd);
        float *xd = to_dev(x, (size_t)(n * nh * hd) * 4);
        cpu->rope(cpu, x, n, (int)nh, (int)hd, pos0, inv, neox);
        gpu->rope(gpu, xd, n, (int)nh, (int)hd, pos0, inv, neox);
        float *o = from_dev(xd, (size_t)(n * nh * hd));
        double e = rel_err(o, x, n * nh * hd, 1e-6);
        report(e <= 2e-5, "rope %s pos0=%lld  %.2e (tol 2e-5)", neox ? "neox" : "gptj", (long long)pos0, e);
        gpu->buf_free(gpu, xd);
        mtplx_cuda_forget_params(gpu);
        free(x), free(inv), free(o);
    }
    /* silu_mul and add over an odd length */
    {
        int64_t n = 100003;
        float *g = rand_vec(n, 3.0f), *u = rand_vec(n, 1.0f), *ref = malloc((size_t)n * 4);
        cpu->silu_mul(cpu, g, u, ref, n);
        float *gd = to_dev(g, (size_t)n * 4), *ud = to_dev(u, (size_t)n * 4);
        gpu->silu_mul(gpu, gd, ud, gd, n);
        float *o = from_dev(gd, (size_t)n);
        double e = rel_err(o, ref, n, 1e-6);
        report(e <= 1e-6, "silu_mul n=%lld  %.2e (tol 1e-6)", (long long)n, e);
        cpu->add(cpu, ref, u, n);
        gpu->add(gpu, gd, ud, n);
        free(o);
        o = from_dev(gd, (size_t)n);
        e = rel_err(o, ref, n, 1e-6);
        report(e <= 1e-6, "add n=%lld  %.2e (tol 1e-6)", (long long)n, e);
        gpu->buf_free(gpu, gd), gpu->buf_free(gpu, ud);
        free(g), free(u), free(ref), free(o);
    }
}

/* ---- kv_store + attention ---- */
static void test_attention_case(int kv_type, int64_t n_tok, int nh, int nkv, int hd, int64_t pos0) {
    int64_t n_ctx = pos0 + n_tok + 3, row = (int64_t)nkv * hd;
    size_t es = kv_type == MTPLX_TYPE_F32 ? 4 : 2, kvb = (size_t)(n_ctx * row) * es;
    /* fill the cache through kv_store on both backends (rows 0..pos0+n_tok) */
    float *kin = rand_vec((pos0 + n_tok) * row, 1.0f), *vin = rand_vec((pos0 + n_tok) * row, 1.0f);
    void *kc = calloc(1, kvb), *vc = calloc(1, kvb);
    void *kd = gpu->buf_alloc(gpu, kvb), *vd = gpu->buf_alloc(gpu, kvb);
    float *kind = to_dev(kin, (size_t)((pos0 + n_tok) * row) * 4);
    float *vind = to_dev(vin, (size_t)((pos0 + n_tok) * row) * 4);
    /* two stores: the prefix, then the new tokens at row pos0 */
    cpu->kv_store(cpu, kv_type, kc, 0, kin, pos0, row);
    cpu->kv_store(cpu, kv_type, vc, 0, vin, pos0, row);
    cpu->kv_store(cpu, kv_type, kc, pos0, kin + pos0 * row, n_tok, row);
    cpu->kv_store(cpu, kv_type, vc, pos0, vin + pos0 * row, n_tok, row);
    if (pos0) {
        gpu->kv_store(gpu, kv_type, kd, 0, kind, pos0, row);
        gpu->kv_store(gpu, kv_type, vd, 0, vind, pos0, row);
    }
    gpu->kv_store(gpu, kv_type, kd, pos0, kind + pos0 * row, n_tok, row);
    gpu->kv_store(gpu, kv_type, vd, pos0, vind + pos0 * row, n_tok, row);
    void *kback = malloc(kvb);
    gpu->download(gpu, kback, kd, kvb);
    bool same = memcmp(kback, kc, kvb) == 0;
    report(same, "kv_store %s rows=%lld  bit-identical to the CPU's", kv_type == MTPLX_TYPE_F32 ? "F32" : "F16",
           (long long)(pos0 + n_tok));

    float *q = rand_vec(n_tok * nh * hd, 1.0f), *ref = malloc((size_t)(n_tok * nh * hd) * 4);
    float scale = 1.0f / sqrtf((float)hd);
    cpu->attention(cpu, q, n_tok, nh, nkv, hd, kc, vc, kv_type, pos0, scale, ref);
    float *qd = to_dev(q, (size_t)(n_tok * nh * hd) * 4), *od = gpu->buf_alloc(gpu, (size_t)(n_tok * nh * hd) * 4);
    /* n_tok > 16 (prefill): the flash-style kernel too, same tolerance (f32
     * math, only the summation order differs from the CPU's) */
    mtplx_cuda_paths saved = mtplx_cuda_get_paths(gpu);
    float *o = NULL;
    bool fm = kv_type == MTPLX_TYPE_F16 && (hd == 64 || hd == 128) && saved.flash_mma;
    for (int fl = 0; fl <= (n_tok > 16 && saved.flash ? (fm ? 2 : 1) : 0); fl++) {
        mtplx_cuda_paths p = saved;
        p.flash = fl > 0;
        p.flash_mma = fl == 1; /* 2: fa_kernel's f32 loops where the tensor cores would run */
        mtplx_cuda_set_paths(gpu, p);
        gpu->attention(gpu, qd, n_tok, nh, nkv, hd, kd, vd, kv_type, pos0, scale, od);
        free(o);
        o = from_dev(od, (size_t)(n_tok * nh * hd));
        double e = rel_err(o, ref, n_tok * nh * hd, 1e-3);
        report(e <= 1e-5, "attention %s n_tok=%-3lld heads=%d/%d hd=%-3d pos0=%-4lld%s  %.2e (tol 1e-5)",
               kv_type == MTPLX_TYPE_F32 ? "F32" : "F16", (long long)n_tok, nh, nkv, hd, (long long)pos0,
               fl == 2 ? " flash, f32 (MTPLX_CUDA_FLASH_MMA=0)"
               : fl && fm ? " flash, tensor cores"
               : fl      ? " flash (MTPLX_CUDA_FLASH)"
                         : "",
               e);
    }
    mtplx_cuda_set_paths(gpu, saved);
    if (n_tok <= 16 && saved.attn_split) {
        /* A step's attention (n_tok <= 16): a block per query head
         * (attn_kernel) or a block per KV head (attn_group_kernel) for
         * every row, or each by the row's position (the rows of at least
         * `from` positions by KV head: this step's second half), a token's
         * positions split over blocks from 65 on or not
         * (MTPLX_CUDA_ATTN_SPLIT=0): each against the CPU (the one the
         * environment picked is checked above). And each row alone (a
         * decode step) == its row of the n-row step (verify), bit for bit,
         * which greedy MTP == AR needs. */
        const int64_t never = MTPLX_CUDA_ATTN_GROUP_NEVER, half = pos0 + n_tok / 2 + 1;
        const struct { bool split; int64_t from; const char *name; } vs[] = {
            {true, never, "a block per query head"},
            {false, never, "a block per query head, unsplit"},
            {true, 1, "a block per KV head (MTPLX_CUDA_ATTN_GROUP=1)"},
            {false, 1, "a block per KV head, unsplit"},
            {true, half, "by KV head from the step's second half on"},
            {false, half, "by KV head from the step's second half on, unsplit"},
        };
        const char *kvn = kv_type == MTPLX_TYPE_F32 ? "F32" : "F16";
        for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; vi++) {
            if (vs[vi].from == half && n_tok < 2) continue;
            mtplx_cuda_paths p = saved;
            p.attn_split = vs[vi].split, p.attn_group_from = vs[vi].from;
            mtplx_cuda_set_paths(gpu, p);
            gpu->attention(gpu, qd, n_tok, nh, nkv, hd, kd, vd, kv_type, pos0, scale, od);
            float *os = from_dev(od, (size_t)(n_tok * nh * hd)), *o1 = NULL;
            double e = rel_err(os, ref, n_tok * nh * hd, 1e-3);
            if (vs[vi].split != saved.attn_split || vs[vi].from != saved.attn_group_from)
                report(e <= 1e-5, "attention %s n_tok=%-3lld heads=%d/%d hd=%-3d pos0=%-4lld %s  %.2e (tol 1e-5)",
                       kvn, (long long)n_tok, nh, nkv, hd, (long long)pos0, vs[vi].name, e);
            bool same = true;
            for (int64_t t = 0; t < n_tok; t++) {
                size_t at = (size_t)(t * nh * hd);
                gpu->attention(gpu, qd + at, 1, nh, nkv, hd, kd, vd, kv_type, pos0 + t, scale, od);
                free(o1);
                o1 = from_dev(od, (size_t)(nh * hd));
                same &= memcmp(o1, os + at, (size_t)(nh * hd) * sizeof(float)) == 0;
            }
            report(same, "attention %s n_tok=%-3lld heads=%d/%d hd=%-3d pos0=%-4lld %s: every row alone == its row of the step, bit for bit",
                   kvn, (long long)n_tok, nh, nkv, hd, (long long)pos0, vs[vi].name);
            free(os), free(o1);
        }
        mtplx_cuda_set_paths(gpu, saved);
    }
    gpu->buf_free(gpu, kd), gpu->buf_free(gpu, vd), gpu->buf_free(gpu, kind), gpu->buf_free(gpu, vind);
    gpu->buf_free(gpu, qd), gpu->buf_free(gpu, od);
    free(kin), free(vin), free(kc), free(vc), free(kback), free(q), free(ref), free(o);
}

static void test_attention(void) {
    test_attention_case(MTPLX_TYPE_F16, 1, 4, 2, 64, 0);
    test_attention_case(MTPLX_TYPE_F16, 1, 16, 8, 128, 700);
    test_attention_case(MTPLX_TYPE_F16, 5, 6, 2, 40, 37);
    test_attention_case(MTPLX_TYPE_F16, 9, 4, 4, 128, 300);
    test_attention_case(MTPLX_TYPE_F32, 3, 8, 1, 64, 129);
    test_attention_case(MTPLX_TYPE_F32, 17, 2, 2, 256, 5);
    test_attention_case(MTPLX_TYPE_F16, 100, 4, 2, 64, 0); /* prefill-sized */
    /* flash tiles: 16 queries, 32 keys; none of these is a multiple */
    test_attention_case(MTPLX_TYPE_F16, 50, 6, 2, 40, 70);  /* a chunk after a prefix */
    test_attention_case(MTPLX_TYPE_F16, 33, 8, 2, 128, 0);
    test_attention_case(MTPLX_TYPE_F32, 70, 4, 1, 256, 45); /* 82 KB of shared memory */
    /* the tensor-core flash kernel (F16, head_dim 64 / 128): 64-query,
     * 64-key tiles, partly filled, after a prefix, GQA 2 and 4 */
    test_attention_case(MTPLX_TYPE_F16, 200, 8, 4, 128, 70);
    test_attention_case(MTPLX_TYPE_F16, 130, 16, 4, 64, 300);
    /* long contexts: a token's positions split over blocks (attn_kernel) */
    test_attention_case(MTPLX_TYPE_F16, 3, 14, 2, 64, 62); /* 63, 64, 65 positions: 1, 1, 2 splits */
    test_attention_case(MTPLX_TYPE_F16, 1, 16, 8, 128, 2000);
    test_attention_case(MTPLX_TYPE_F16, 4, 32, 8, 128, 1500);
    test_attention_case(MTPLX_TYPE_F32, 16, 16, 8, 128, 999);
    test_attention_case(MTPLX_TYPE_F16, 2, 40, 8, 128, 5000);
    test_attention_case(MTPLX_TYPE_F16, 5, 2, 1, 256, 3000); /* the most splits (32) */
    /* attn_kernel's wide instance (head_dim over 128: 8 elements a lane)
     * at short and split contexts */
    test_attention_case(MTPLX_TYPE_F16, 4, 4, 2, 256, 40);
    test_attention_case(MTPLX_TYPE_F32, 2, 4, 1, 160, 300);
    /* a block per KV head: 64 queries of a KV head (4 chunks of 16), runs of
     * several tiles; F32 head_dim 256 (32-position tiles); head_dim 36 (not
     * a multiple of 8: attn_kernel instead) */
    test_attention_case(MTPLX_TYPE_F16, 16, 32, 8, 128, 3000);
    test_attention_case(MTPLX_TYPE_F32, 7, 8, 2, 256, 1100);
    test_attention_case(MTPLX_TYPE_F16, 3, 6, 3, 36, 130);
}

/* The device dequantisers, run on the host, against the CPU reference:
 * checks every block layout even where there is no GPU (CI). */
static bool test_deq_host(void) {
    static const int types[] = {MTPLX_TYPE_F32,  MTPLX_TYPE_F16,  MTPLX_TYPE_BF16, MTPLX_TYPE_Q8_0,
                                MTPLX_TYPE_Q4_0, MTPLX_TYPE_Q4_K, MTPLX_TYPE_Q6_K};
    int64_t k = 1024;
    float *x = rand_vec(k, 1.0f), *ref = malloc((size_t)k * 4), *got = malloc((size_t)k * 4);
    void *row = mtplx_aligned_alloc(64, (size_t)k * 4);
    bool built = true;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        mtplx_quantize_row(types[t], x, row, k);
        mtplx_dequantize_row(types[t], row, ref, k);
        int rc = mtplx_cuda_deq_row_host(types[t], row, k, got);
        if (rc == -2) {
            built = false;
            break;
        }
        double e = rc ? INFINITY : rel_err(got, ref, k, 1e-6);
        report(e <= 1e-6, "dequant layout %-4s (device code on the host)  %.2e (tol 1e-6)",
               mtplx_type_info(types[t])->name, e);
    }
    /* BF16 tiled (mtplx_cuda_tile_bf16's code) and read back as the prefill
     * GEMM reads it: every row, m = 37 not a multiple of a tile */
    if (built) {
        int64_t tm = 37, tk = 96;
        size_t rs = mtplx_row_size(MTPLX_TYPE_BF16, tk);
        uint8_t *rows = malloc(rs * (size_t)tm), *tiled = calloc(48, rs);
        float *wf = rand_vec(tk, 1.0f), *want = malloc((size_t)tk * 4), *row_got = malloc((size_t)tk * 4);
        for (int64_t r = 0; r < tm; r++) {
            for (int64_t j = 0; j < tk; j++) wf[j] = grand();
            mtplx_quantize_row(MTPLX_TYPE_BF16, wf, rows + (size_t)r * rs, tk);
        }
        bool same = mtplx_cuda_tile_bf16_host(rows, tiled, tm, tk) == 0;
        for (int64_t r = 0; same && r < tm; r++) {
            mtplx_dequantize_row(MTPLX_TYPE_BF16, rows + (size_t)r * rs, want, tk);
            same = mtplx_cuda_deq_layout_row_host(MTPLX_TYPE_BF16, MTPLX_CUDA_W_BF16_TILED, tiled, tk,
                                                  r, row_got) == 0 &&
                   memcmp(want, row_got, (size_t)tk * 4) == 0;
        }
        report(same, "BF16 tiled for the GEMV (m=37, k=96) and read back by the prefill GEMM: every "
                     "row exact (device code on the host)");
        free(rows), free(tiled), free(wf), free(want), free(row_got);
    }
    /* Q8_0 repacked for each GEMV (the upload's per-block code) and read
     * back as the prefill GEMM reads that copy: every row equal to the GGUF
     * row's dequantisation by the same device code */
    static const int q8_layouts[] = {MTPLX_CUDA_W_Q8_PACKED, MTPLX_CUDA_W_Q8_I8};
    for (size_t li = 0; built && li < 2; li++) {
        int64_t tm = 37, tk = 192;
        /* a packed row is the GGUF row's bytes, padded to 16 */
        size_t rs = mtplx_row_size(MTPLX_TYPE_Q8_0, tk);
        uint8_t *rows = malloc(rs * (size_t)tm), *packed = calloc((size_t)tm, rs + 16);
        float *wf = rand_vec(tk, 1.0f), *want = malloc((size_t)tk * 4), *row_got = malloc((size_t)tk * 4);
        for (int64_t r = 0; r < tm; r++) {
            for (int64_t j = 0; j < tk; j++) wf[j] = grand();
            mtplx_quantize_row(MTPLX_TYPE_Q8_0, wf, rows + (size_t)r * rs, tk);
        }
        bool same = mtplx_cuda_repack_q8_0_host(rows, packed, tm, tk, q8_layouts[li]) == 0;
        for (int64_t r = 0; same && r < tm; r++) {
            same = mtplx_cuda_deq_row_host(MTPLX_TYPE_Q8_0, rows + (size_t)r * rs, tk, want) == 0 &&
                   mtplx_cuda_deq_layout_row_host(MTPLX_TYPE_Q8_0, q8_layouts[li], packed, tk, r,
                                                  row_got) == 0 &&
                   memcmp(want, row_got, (size_t)tk * 4) == 0;
        }
        report(same, "Q8_0 repacked for the %s GEMV (m=37, k=192) and read back by the prefill GEMM: "
                     "every row exact (device code on the host)",
               li ? "int8" : "bf16 / f32");
        free(rows), free(packed), free(wf), free(want), free(row_got);
    }
    /* the small-n GEMV's own dequantisers (mmv.cu) */
    static const int mtypes[] = {MTPLX_TYPE_F32, MTPLX_TYPE_F16, MTPLX_TYPE_BF16, MTPLX_TYPE_Q8_0,
                                 MTPLX_TYPE_Q4_K};
    for (size_t t = 0; built && t < sizeof mtypes / sizeof *mtypes; t++) {
        mtplx_quantize_row(mtypes[t], x, row, k);
        mtplx_dequantize_row(mtypes[t], row, ref, k);
        memset(got, 0xFF, (size_t)k * 4); /* NaN: an element never written fails */
        int rc = mtplx_cuda_mmv_deq_row_host(mtypes[t], row, k, got);
        double e = rc ? INFINITY : rel_err(got, ref, k, 1e-6);
        report(e <= 1e-6, "mmv dequant layout %-4s (device code on the host)  %.2e (tol 1e-6)",
               mtplx_type_info(mtypes[t])->name, e);
        /* the kernel's sums (scales applied per sub-block for Q8_0 / Q4_K)
         * against the exact products, for 1 and 5 rows of x, and with x
         * RMS-normed in the kernel (the fused norm) */
        float *nw = rand_vec(k, 1.0f);
        for (int64_t n = 1; n <= 5; n += 4)
            for (int normed = 0; normed < 2; normed++) {
                float *xs = rand_vec(n * k, 2.0f), dot[5] = {0}, exact[5] = {0};
                for (int64_t i = 0; i < n; i++) {
                    double ss = 0, acc = 0;
                    for (int64_t j = 0; j < k; j++)
                        ss += (double)xs[i * k + j] * xs[i * k + j];
                    double sc = normed ? 1.0 / sqrt(ss / (double)k + 1e-6) : 1.0;
                    for (int64_t j = 0; j < k; j++)
                        acc += (double)ref[j] * xs[i * k + j] * sc * (normed ? nw[j] : 1.0f);
                    exact[i] = (float)acc;
                }
                rc = mtplx_cuda_mmv_row_host(mtypes[t], row, k, xs, n, normed ? nw : NULL, 1e-6f,
                                             dot);
                e = rc ? INFINITY : rel_err(dot, exact, n, 1e-3);
                report(e <= TOL_MM_EXACT,
                       "mmv row sums %-4s n=%lld%s (device code on the host)  %.2e (tol %.0e)",
                       mtplx_type_info(mtypes[t])->name, (long long)n, normed ? " x normed" : "", e,
                       TOL_MM_EXACT);
                free(xs);
            }
        free(nw);
    }
    free(x), free(ref), free(got), free(row);
    return built;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (test_deq_host() && n_fail) {
        printf("test_cuda: %d passed, %d failed (host checks of the device code)\n", n_pass, n_fail);
        return 1;
    }
    /* the op checks cover the opt-in fused rmsnorm too; the model checks
     * run as configured (MTPLX_CUDA_FUSE_NORM=1 in the environment: with it) */
    bool norm_env = getenv("MTPLX_CUDA_FUSE_NORM") != NULL;
    if (!norm_env) setenv("MTPLX_CUDA_FUSE_NORM", "1", 1);
    mtplx_status gst = mtplx_backend_cuda_new(0, 4096, 64, 4096, &gpu);
    if (!norm_env) unsetenv("MTPLX_CUDA_FUSE_NORM");
    if (gst != MTPLX_OK) {
        printf("SKIP test_cuda: %s\n", mtplx_last_error());
        return 0;
    }
    char name[256];
    mtplx_cuda_device_name(0, name, sizeof name, NULL);
    printf("test_cuda on %s\n", name);
    mtplx_cuda_paths env = mtplx_cuda_get_paths(gpu);
    /* Q4_K's tensor-core GEMV is on where a context drafts; the op checks
     * run it unless MTPLX_CUDA_MMA_Q4K=0 */
    if (env.mma_q4k_auto) {
        env.mma_q4k = true;
        mtplx_cuda_set_paths(gpu, env);
    }
    if (!env.tc || !env.tc_split || !env.flash)
        printf("  info  prefill paths off by the environment, not checked:%s%s%s\n",
               env.tc ? "" : " tensor cores (MTPLX_CUDA_TC=0)",
               env.tc && !env.tc_split ? " split-k (MTPLX_CUDA_TC_SPLIT=0)" : "",
               env.flash ? "" : " flash (MTPLX_CUDA_FLASH=0)");
    if (mtplx_backend_cpu_new(0, 4096, 512, 4096, &cpu) != MTPLX_OK) {
        printf("FAIL cpu backend: %s\n", mtplx_last_error());
        return 1;
    }
    /* MTPLX_CUDA_TEST_OPS_ONLY=1: the op checks only (for compute-sanitizer);
     * =prefill: a few small cases of the prefill kernels and the step
     * attention only (for its racecheck, which is slow: they share tiles
     * through shared memory) */
    const char *only = getenv("MTPLX_CUDA_TEST_OPS_ONLY");
    if (only && strcmp(only, "prefill") == 0) {
        test_matmul_case(MTPLX_TYPE_BF16, 70, 200, 40, true);
        test_matmul_case(MTPLX_TYPE_F16, 37, 72, 17, false);
        test_matmul_case(MTPLX_TYPE_Q4_K, 65, 256, 20, false);
        test_matmul_case(MTPLX_TYPE_Q4_K, 37, 512, 3, false); /* the GEMVs' reductions */
        test_attention_case(MTPLX_TYPE_F16, 40, 2, 1, 64, 10);
        test_attention_case(MTPLX_TYPE_F32, 20, 2, 2, 256, 3);
        /* the step attention's staged tiles (attn_group_kernel) */
        test_attention_case(MTPLX_TYPE_F16, 4, 8, 2, 128, 300);
        test_attention_case(MTPLX_TYPE_F32, 3, 6, 3, 40, 70);
        if (gpu->sample_rows) { /* the sampler's shared-memory sorts */
            mtplx_sampler_params sp = mtplx_sampler_default_params();
            test_sample_case(&sp, 8192, 1);
        }
    } else {
        test_matmul();
        test_matmul_tc_unaligned(MTPLX_TYPE_BF16);
        test_matmul_tc_unaligned(MTPLX_TYPE_Q4_K);
        test_fused();
        test_gemm_fuse();
        test_i8_pdl();
        test_tiled();
        test_w8_tiles();
        test_q8_layouts();
        test_small_ops();
        test_attention();
        test_argmax();
        test_sample();
    }
    gpu->free(gpu);
    cpu->free(cpu);
    if (!only) {
        test_model(MTPLX_SOURCE_DIR "/tests/fixtures/models/qwen3", 2e-3, false, false, false);
        test_model(MTPLX_SOURCE_DIR "/models/default.gguf", 3e-2, true, false, false);
        test_model(MTPLX_SOURCE_DIR "/models/default.gguf", 3e-2, true, true, false);
        /* the default model (Q8_0) as a context without a head runs it:
         * int8 GEMV, PDL and fused norms (greedy MTP == AR there too) */
        test_model(MTPLX_SOURCE_DIR "/models/default.gguf", 3e-2, true, false, true);
        test_graphs(MTPLX_SOURCE_DIR "/models/default.gguf", false, 0);
        test_graphs(MTPLX_SOURCE_DIR "/models/default.gguf", true, 0);
        /* decode steps of 21-28 positions (by query head), verify steps at
         * 28, 30, 32, ... (rows of 29-32 positions: by query head, run
         * plain, the key's first sight; 31-34: both kernels, captured;
         * 33-36 on: by KV head, captured again), generations of 20 + 64
         * tokens (decode crosses 33) */
        test_graphs(MTPLX_SOURCE_DIR "/models/default.gguf", false, 33);
        test_sampled_gen(MTPLX_SOURCE_DIR "/models/default.gguf");
        test_fit(MTPLX_SOURCE_DIR "/models/default.gguf");
        /* a BF16 model (tools/cuda_test.sh converts the built-in one): its
         * GEMV weights tiled, logits against the CPU, greedy MTP == AR */
        const char *bf16 = getenv("MTPLX_CUDA_TEST_BF16_MODEL");
        if (bf16 && *bf16) {
            test_model(bf16, 3e-2, true, false, false);
            test_graphs(bf16, false, 0);
        }
    }
    printf("test_cuda: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
