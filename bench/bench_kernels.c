/* bench_kernels.c: matmul throughput at Qwen3-0.6B shapes, per weight type.
 *
 * Reports, for 1 and 2 threads, the n = 1 weight bandwidth (GB/s of W read)
 * and the cost ratio time(n) / time(1) for n = 2, 4, 8, 16 tokens: the number
 * that says how much an MTP verification of n-1 drafts costs over a decode
 * step. Weights are spread over many copies of the matrix (>= 4x a 32 MB L3)
 * and visited round-robin, so the numbers are DRAM numbers, not cache ones.
 * Prints a table and writes JSON (--json PATH, default bench/out/kernels.json).
 * A benchmark, not a test: nothing here asserts a speed.
 *
 *   bench_kernels [--quick] [--cached] [--prepared] [--json PATH] [--types q8_0,q4_k]
 *                 [--threads 1,2]
 * --cached reuses one matrix (in L2/L3): compute throughput, not DRAM.
 * --prepared times mtplx_matmul_prepared on mtplx_weight_prepare'd weights
 * (what the model runs for Q8_0, Q4_0, Q4_K) instead of the plain rows. */
#include "kernels/kernels.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define WORKING_SET (160.0 * 1024 * 1024) /* bytes of weights cycled through */

typedef struct shape {
    const char *name;
    int64_t m, k;
} shape;

/* Qwen3-0.6B: hidden 1024, FFN 3072, 16 q heads x 128, 8 kv heads x 128 */
static const shape shapes[] = {
    {"ffn_up", 3072, 1024},
    {"ffn_down", 1024, 3072},
};
#define N_SHAPES 2
static const int all_types[] = {MTPLX_TYPE_F32,  MTPLX_TYPE_F16,  MTPLX_TYPE_BF16, MTPLX_TYPE_Q8_0,
                                MTPLX_TYPE_Q4_0, MTPLX_TYPE_Q4_K, MTPLX_TYPE_Q6_K};
static const int64_t ns[] = {1, 2, 4, 8, 16};
#define N_NS 5

static uint64_t rs = 88172645463325252ull;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((rs >> 11) * 0x1.0p-53) * 2 - 1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Seconds per matmul, cycling through n_mat copies of W for about min_s.
 * Each call is timed alone and the 20th percentile is reported: on a shared
 * machine the calls that were preempted or competed for DRAM are the slow
 * tail, and a low percentile is still a DRAM number (every call reads a matrix
 * not in cache). */
#define MAX_SAMPLES 20000
/* With one thread, time is the thread's CPU time: a call that was preempted
 * by another process is not charged for the time it did not run. */
static bool use_cpu_clock;
static double now_s(void) {
    if (!use_cpu_clock) return mtplx_time_ms() / 1e3;
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static double samples[MAX_SAMPLES];
static bool use_prepared;
static void matmul(mtplx_threadpool *tp, int type, const void *W, const shape *sh, const float *x,
                   int64_t n, float *y, void *scratch) {
    if (use_prepared) mtplx_matmul_prepared(tp, type, W, sh->m, sh->k, x, n, y, scratch);
    else mtplx_matmul(tp, type, W, sh->m, sh->k, x, n, y, scratch);
}
static double time_matmul(mtplx_threadpool *tp, int type, uint8_t *W, size_t mat_bytes, int n_mat,
                          const shape *sh, const float *x, int64_t n, float *y, void *scratch,
                          double min_s) {
    for (int i = 0; i < n_mat; i++) /* warm up: page in, spin up threads */
        matmul(tp, type, W + (size_t)i * mat_bytes, sh, x, n, y, scratch);
    int ns_ = 0;
    double start = mtplx_time_ms();
    while (ns_ < MAX_SAMPLES && (mtplx_time_ms() - start) / 1e3 < min_s) {
        for (int i = 0; i < n_mat && ns_ < MAX_SAMPLES; i++) {
            double t0 = now_s();
            matmul(tp, type, W + (size_t)i * mat_bytes, sh, x, n, y, scratch);
            samples[ns_++] = now_s() - t0;
        }
    }
    qsort(samples, (size_t)ns_, sizeof(double), cmp_double);
    return samples[ns_ / 5];
}

static bool in_list(const char *list, const char *name) {
    if (!list) return true;
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == len && !strncasecmp(p, name, l)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

int main(int argc, char **argv) {
    const char *json_path = "bench/out/kernels.json", *types_arg = NULL, *threads_arg = "1,2";
    double min_s = 0.6;
    bool cached = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) min_s = 0.15;
        else if (!strcmp(argv[i], "--cached")) cached = true;
        else if (!strcmp(argv[i], "--prepared")) use_prepared = true;
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) types_arg = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads_arg = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--quick] [--cached] [--prepared] [--json PATH] [--types LIST] "
                            "[--threads LIST]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!strncmp(json_path, "bench/out/", 10)) mkdir("bench/out", 0777);
    FILE *js = fopen(json_path, "w");
    if (!js) fprintf(stderr, "cannot write %s: %s\n", json_path, strerror(errno));
    if (js)
        fprintf(js, "{\n  \"isa\": \"%s\",\n  \"cached\": %s,\n  \"prepared\": %s,\n  \"results\": [\n",
                mtplx_kernels_isa(), cached ? "true" : "false", use_prepared ? "true" : "false");
    printf("kernels: %s   (GB/s = weight bytes read per second at n=1; r(n) = time(n)/time(1))\n",
           mtplx_kernels_isa());
    printf("%-5s %-9s %3s %8s %8s %6s %6s %6s %6s\n", "type", "shape", "thr", "us(n=1)", "GB/s",
           "r(2)", "r(4)", "r(8)", "r(16)");
    bool first = true;
    for (int th = 1; th <= 64; th++) {
        char tn[8];
        snprintf(tn, sizeof tn, "%d", th);
        if (!in_list(threads_arg, tn)) continue;
        mtplx_threadpool *tp;
        if (mtplx_threadpool_new(th, &tp) != MTPLX_OK) return 1;
        use_cpu_clock = th == 1;
        for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
            int type = all_types[ti];
            const char *tname = mtplx_type_info(type)->name;
            if (!in_list(types_arg, tname)) continue;
            if (use_prepared && !mtplx_weight_prepared_size(type, 8, 256)) continue;
            for (int s = 0; s < N_SHAPES; s++) {
                const shape *sh = &shapes[s];
                size_t row = mtplx_row_size(type, sh->k), mat = row * (size_t)sh->m;
                size_t prep = use_prepared ? mtplx_weight_prepared_size(type, sh->m, sh->k) : 0;
                if (prep > mat) mat = prep;
                int n_mat = cached ? 1 : (int)(WORKING_SET / (double)mat) + 1;
                uint8_t *W = mtplx_aligned_alloc(64, mat * (size_t)n_mat);
                float *tmp = malloc((size_t)sh->k * sizeof(float));
                float *x = malloc((size_t)(16 * sh->k) * sizeof(float));
                float *y = mtplx_aligned_alloc(64, (size_t)(16 * sh->m) * sizeof(float));
                void *scratch = mtplx_aligned_alloc(64, mtplx_matmul_scratch_size(type, sh->k, 16));
                if (!W || !tmp || !x || !y || !scratch) return 1;
                /* quantize one matrix, copy it: values do not change the speed */
                for (int64_t r = 0; r < sh->m; r++) {
                    for (int64_t j = 0; j < sh->k; j++) tmp[j] = frand() * 0.05f;
                    mtplx_quantize_row(type, tmp, W + r * row, sh->k);
                }
                if (prep) { /* relayout copy 0 through a plain buffer */
                    uint8_t *plain = malloc(row * (size_t)sh->m);
                    if (!plain) return 1;
                    memcpy(plain, W, row * (size_t)sh->m);
                    mtplx_weight_prepare(type, plain, sh->m, sh->k, W);
                    free(plain);
                }
                for (int i = 1; i < n_mat; i++) memcpy(W + (size_t)i * mat, W, mat);
                for (int64_t j = 0; j < 16 * sh->k; j++) x[j] = frand();
                double t[N_NS];
                for (int ni = 0; ni < N_NS; ni++)
                    t[ni] = time_matmul(tp, type, W, mat, n_mat, sh, x, ns[ni], y, scratch, min_s);
                double gbs = (double)mat / t[0] / 1e9;
                printf("%-5s %-9s %3d %8.1f %8.2f %6.2f %6.2f %6.2f %6.2f\n", tname, sh->name, th,
                       t[0] * 1e6, gbs, t[1] / t[0], t[2] / t[0], t[3] / t[0], t[4] / t[0]);
                fflush(stdout);
                if (js) {
                    fprintf(js, "%s    {\"type\": \"%s\", \"shape\": \"%s\", \"m\": %lld, \"k\": %lld, "
                                "\"threads\": %d, \"us_n1\": %.2f, \"gbps_n1\": %.3f, \"ratio\": {",
                            first ? "" : ",\n", tname, sh->name, (long long)sh->m, (long long)sh->k, th,
                            t[0] * 1e6, gbs);
                    for (int ni = 1; ni < N_NS; ni++)
                        fprintf(js, "%s\"%lld\": %.3f", ni > 1 ? ", " : "", (long long)ns[ni], t[ni] / t[0]);
                    fprintf(js, "}}");
                    first = false;
                }
                free(W), free(tmp), free(x), free(y), free(scratch);
            }
        }
        mtplx_threadpool_free(tp);
    }
    if (js) {
        fprintf(js, "\n  ]\n}\n");
        fclose(js);
        printf("wrote %s\n", json_path);
    }
    return 0;
}
