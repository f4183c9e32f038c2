/* bench_models.c: model-level throughput on random-weight models with real
 * shapes (Qwen3-0.6B, Qwen3-1.7B), in standard GGUF so that llama.cpp's
 * llama-bench can run the very same files (bench/run.sh does both).
 *
 *   bench_models gen --vocab VOCAB.gguf --out DIR [--size 0.6b|1.7b|8b] [--types f32,bf16,...]
 *       writes DIR/qwen3-<size>-<type>.gguf; tokenizer keys come from VOCAB
 *       (a vocab-only GGUF), its token list padded to the embedding rows.
 *   bench_models bw [--gib 2]
 *       memory bandwidth: sum of a 2 GiB array on 1 and 2 threads (JSON).
 *   bench_models run MODEL [--threads T] [--reps R] [--prefill N] [--device cpu|cuda] [--graphs 0|1]
 *                          [--cpu-clock] [--pos P]
 *       decode (n = 1), verify (n = 2, 4, 8 at the same position P, after a
 *       context of P tokens; default 16) and
 *       prefill (n = N) times, medians of R rounds, as one JSON line. On
 *       cuda every forward is timed to its end (the stream synchronised);
 *       --graphs 0 turns CUDA graphs off.
 *       --cpu-clock (1 thread only): time is the thread's CPU time, so that
 *       on a shared machine the time the thread was not running is not
 *       counted (memory contention from others still is).
 * A benchmark, not a test: nothing here asserts a speed. Weight values are
 * a few random rows repeated: throughput does not depend on them. */
#define BENCH_NAME "bench_models"
#include "bench_util.h"
#include "cuda/cuda_backend.h"
#include "formats/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool cpu_clock; /* run --cpu-clock: CLOCK_THREAD_CPUTIME_ID */
static double now(void) {
    struct timespec ts;
    clock_gettime(cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- gen ---- */
typedef struct shape {
    const char *name;
    int dim, layers, heads, kv_heads, head_dim, ff, vocab;
    bool tied; /* output head = token embedding (Qwen3 up to 4B), or its own output.weight */
} shape;
static const shape shapes[] = {
    {"0.6b", 1024, 28, 16, 8, 128, 3072, 151936, true},
    {"1.7b", 2048, 28, 16, 8, 128, 6144, 151936, true},
    {"8b", 4096, 36, 32, 8, 128, 12288, 151936, false},
};

static uint64_t rng_state = 0x1234567;
static float gauss(void) {
    double s = 0; /* Irwin-Hall: sum of 12 uniforms, good enough for weights */
    for (int i = 0; i < 12; i++) {
        rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
        s += (double)(rng_state >> 11) * 0x1.0p-53;
    }
    return (float)(s - 6);
}

/* rows x k of type: 61 distinct random rows repeated. */
static void *random_matrix(int type, int64_t rows, int64_t k, float sigma) {
    size_t rs = mtplx_row_size(type, k);
    uint8_t *w = malloc(rs * (size_t)rows);
    float *f = malloc((size_t)k * sizeof(float));
    if (!w || !f) exit(1);
    int64_t distinct = rows < 61 ? rows : 61;
    for (int64_t r = 0; r < distinct; r++) {
        for (int64_t j = 0; j < k; j++) f[j] = sigma * gauss();
        mtplx_quantize_row(type, f, w + (size_t)r * rs, k);
    }
    for (int64_t r = distinct; r < rows; r++) memcpy(w + (size_t)r * rs, w + (size_t)(r % distinct) * rs, rs);
    free(f);
    return w;
}

static void add_matrix(mtplx_gguf *g, const char *name, int type, int64_t k, int64_t rows) {
    int64_t ne[2] = {k, rows};
    CHECK(mtplx_gguf_add_tensor(g, name, type, 2, ne, random_matrix(type, rows, k, 0.02f), true));
}

static void add_ones(mtplx_gguf *g, const char *name, int64_t n) {
    float *v = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) v[i] = 1.0f;
    int64_t ne[1] = {n};
    CHECK(mtplx_gguf_add_tensor(g, name, MTPLX_TYPE_F32, 1, ne, v, true));
}

/* tokenizer.* keys of vocab, the token list padded (or cut) to n_vocab. */
static void copy_tokenizer(mtplx_gguf *g, const mtplx_gguf *vocab, int n_vocab) {
    for (int64_t i = 0; i < vocab->n_kv; i++) {
        const mtplx_gguf_kv *kv = &vocab->kv[i];
        if (strncmp(kv->key, "tokenizer.", 10)) continue;
        if (!strcmp(kv->key, "tokenizer.ggml.tokens")) {
            const mtplx_gguf_str *s = kv->arr_data;
            const char **t = malloc((size_t)n_vocab * sizeof *t);
            char **pad = calloc((size_t)n_vocab, sizeof *pad);
            for (int j = 0; j < n_vocab; j++) {
                if ((uint64_t)j < kv->arr_n) {
                    t[j] = s[j].data;
                } else {
                    pad[j] = malloc(32);
                    snprintf(pad[j], 32, "[PAD%d]", j);
                    t[j] = pad[j];
                }
            }
            CHECK(mtplx_gguf_set_arr(g, kv->key, GGUF_TYPE_STRING, t, (uint64_t)n_vocab));
            for (int j = 0; j < n_vocab; j++) free(pad[j]);
            free(pad), free(t);
        } else if (!strcmp(kv->key, "tokenizer.ggml.token_type") ||
                   !strcmp(kv->key, "tokenizer.ggml.scores")) {
            size_t es = mtplx_gguf_type_size(kv->arr_type);
            uint8_t *d = calloc((size_t)n_vocab, es);
            uint64_t n = kv->arr_n < (uint64_t)n_vocab ? kv->arr_n : (uint64_t)n_vocab;
            memcpy(d, kv->arr_data, n * es);
            if (kv->arr_type == GGUF_TYPE_INT32)
                for (int j = (int)n; j < n_vocab; j++) ((int32_t *)d)[j] = 5; /* unused */
            CHECK(mtplx_gguf_set_arr(g, kv->key, kv->arr_type, d, (uint64_t)n_vocab));
            free(d);
        } else {
            CHECK(mtplx_gguf_copy_kv(g, kv));
        }
    }
}

static void gen_one(const shape *s, int type, const mtplx_gguf *vocab, const char *path) {
    mtplx_gguf *g = mtplx_gguf_new();
    CHECK(mtplx_gguf_set_str(g, "general.architecture", "qwen3"));
    char name[64];
    snprintf(name, sizeof name, "random Qwen3-%s %s", s->name, mtplx_type_info(type)->name);
    CHECK(mtplx_gguf_set_str(g, "general.name", name));
    CHECK(mtplx_gguf_set_u32(g, "qwen3.block_count", (uint32_t)s->layers));
    CHECK(mtplx_gguf_set_u32(g, "qwen3.context_length", 40960));
    CHECK(mtplx_gguf_set_u32(g, "qwen3.embedding_length", (uint32_t)s->dim));
    CHECK(mtplx_gguf_set_u32(g, "qwen3.feed_forward_length", (uint32_t)s->ff));
    CHECK(mtplx_gguf_set_u32(g, "qwen3.attention.head_count", (uint32_t)s->heads));
    CHECK(mtplx_gguf_set_u32(g, "qwen3.attention.head_count_kv", (uint32_t)s->kv_heads));
    CHECK(mtplx_gguf_set_u32(g, "qwen3.attention.key_length", (uint32_t)s->head_dim));
    CHECK(mtplx_gguf_set_u32(g, "qwen3.attention.value_length", (uint32_t)s->head_dim));
    CHECK(mtplx_gguf_set_f32(g, "qwen3.rope.freq_base", 1000000.f));
    CHECK(mtplx_gguf_set_f32(g, "qwen3.attention.layer_norm_rms_epsilon", 1e-6f));
    CHECK(mtplx_gguf_set_u32(g, "general.file_type", 0));
    copy_tokenizer(g, vocab, s->vocab);
    const int qd = s->heads * s->head_dim, kvd = s->kv_heads * s->head_dim;
    add_matrix(g, "token_embd.weight", type, s->dim, s->vocab);
    if (!s->tied) add_matrix(g, "output.weight", type, s->dim, s->vocab);
    add_ones(g, "output_norm.weight", s->dim);
    for (int l = 0; l < s->layers; l++) {
        char n[64];
#define T(x) (snprintf(n, sizeof n, "blk.%d." x, l), n)
        add_ones(g, T("attn_norm.weight"), s->dim);
        add_matrix(g, T("attn_q.weight"), type, s->dim, qd);
        add_matrix(g, T("attn_k.weight"), type, s->dim, kvd);
        add_matrix(g, T("attn_v.weight"), type, s->dim, kvd);
        add_matrix(g, T("attn_output.weight"), type, qd, s->dim);
        add_ones(g, T("attn_q_norm.weight"), s->head_dim);
        add_ones(g, T("attn_k_norm.weight"), s->head_dim);
        add_ones(g, T("ffn_norm.weight"), s->dim);
        add_matrix(g, T("ffn_gate.weight"), type, s->dim, s->ff);
        add_matrix(g, T("ffn_up.weight"), type, s->dim, s->ff);
        add_matrix(g, T("ffn_down.weight"), type, s->ff, s->dim);
#undef T
    }
    CHECK(mtplx_gguf_write(g, path));
    mtplx_gguf_free(g);
}

static int cmd_gen(int argc, char **argv) {
    const char *vocab_path = arg(argc, argv, "--vocab", NULL), *out = arg(argc, argv, "--out", "bench/models");
    const char *size = arg(argc, argv, "--size", "0.6b");
    char types[256];
    snprintf(types, sizeof types, "%s", arg(argc, argv, "--types", "f32,bf16,q8_0,q4_0,q4_k"));
    if (!vocab_path) {
        fprintf(stderr, "bench_models gen: --vocab VOCAB.gguf is required\n");
        return 2;
    }
    const shape *s = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        if (!strcmp(shapes[i].name, size)) s = &shapes[i];
    if (!s) {
        fprintf(stderr, "bench_models gen: unknown size %s\n", size);
        return 2;
    }
    mtplx_gguf *vocab;
    CHECK(mtplx_gguf_open(vocab_path, &vocab));
    for (char *tok = strtok(types, ","); tok; tok = strtok(NULL, ",")) {
        int type = mtplx_type_from_name(tok);
        if (type < 0) {
            fprintf(stderr, "bench_models gen: unknown type %s\n", tok);
            return 2;
        }
        char path[1024];
        snprintf(path, sizeof path, "%s/qwen3-%s-%s.gguf", out, s->name, tok);
        FILE *f = fopen(path, "rb");
        if (f) { /* made by an earlier run: same shapes, values do not matter */
            fclose(f);
            printf("%s (kept)\n", path);
            continue;
        }
        double t0 = now();
        gen_one(s, type, vocab, path);
        printf("%s (%.1f s)\n", path, now() - t0);
        fflush(stdout);
    }
    mtplx_gguf_free(vocab);
    return 0;
}

/* ---- bw ---- */
typedef struct bw_task {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_task;

static void *bw_sum(void *arg) {
    bw_task *t = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= t->n; i += 4) s0 += t->p[i], s1 += t->p[i + 1], s2 += t->p[i + 2], s3 += t->p[i + 3];
    t->sum = s0 + s1 + s2 + s3;
    return NULL;
}

static double bw_once(const uint64_t *p, size_t n, int nth) {
    pthread_t th[8];
    bw_task t[8];
    double t0 = now();
    for (int i = 0; i < nth; i++) {
        t[i] = (bw_task){p + n / (size_t)nth * (size_t)i, n / (size_t)nth, 0};
        pthread_create(&th[i], NULL, bw_sum, &t[i]);
    }
    uint64_t s = 0;
    for (int i = 0; i < nth; i++) pthread_join(th[i], NULL), s += t[i].sum;
    double dt = now() - t0;
    if (s == 42) printf(" ");
    return (double)(n * sizeof *p) / dt / 1e9;
}

static int cmd_bw(int argc, char **argv) {
    size_t bytes = (size_t)(atof(arg(argc, argv, "--gib", "2")) * (double)(1ull << 30));
    int reps = atoi(arg(argc, argv, "--reps", "5"));
    size_t n = bytes / sizeof(uint64_t);
    uint64_t *p = mtplx_aligned_alloc(64, n * sizeof *p);
    if (!p) return 1;
    for (size_t i = 0; i < n; i++) p[i] = i;
    printf("{\"bytes\": %zu", bytes);
    for (int nth = 1; nth <= 2; nth++) {
        double v[32];
        for (int r = 0; r < reps && r < 32; r++) v[r] = bw_once(p, n, nth);
        double best = 0;
        for (int r = 0; r < reps; r++) best = v[r] > best ? v[r] : best;
        printf(", \"gbps_t%d\": %.2f, \"gbps_t%d_max\": %.2f", nth, median(v, reps), nth, best);
    }
    printf("}\n");
    free(p);
    return 0;
}

/* ---- run ---- */
static bool on_gpu;

static double time_forward(const mtplx_model *m, mtplx_backend *be, mtplx_kv *kv, mtplx_acts *a,
                           const int32_t *tok, int64_t n, int64_t pos0, bool all) {
    double t0 = now();
    mtplx_model_forward(m, be, kv, a, tok, n, pos0, all);
    if (on_gpu) mtplx_cuda_synchronize(be);
    return now() - t0;
}

static int cmd_run(int argc, char **argv) {
    if (argc < 1) return 2;
    const char *path = argv[0];
    int threads = atoi(arg(argc, argv, "--threads", "1"));
    int reps = atoi(arg(argc, argv, "--reps", "7"));
    int prefill = atoi(arg(argc, argv, "--prefill", "512"));
    int prefill_reps = atoi(arg(argc, argv, "--prefill-reps", "2"));
    int64_t pos = atoll(arg(argc, argv, "--pos", "16"));
    if (pos < 1) {
        fprintf(stderr, "bench_models run: --pos must be at least 1\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) cpu_clock |= !strcmp(argv[i], "--cpu-clock");
    if (cpu_clock && threads != 1) {
        fprintf(stderr, "bench_models run: --cpu-clock needs --threads 1\n");
        return 2;
    }
    mtplx_model_params mp = mtplx_model_default_params();
    mtplx_model *m;
    double tl = now();
    CHECK(mtplx_model_load(path, &mp, &m));
    tl = now() - tl;
    const mtplx_hparams *hp = &m->hp;
    /* tok[pos..pos+8): verify rows */
    int64_t n_max = prefill > 24 ? prefill : 24, n_ctx = (pos + 8 > n_max ? pos + 8 : n_max) + 64;
    int64_t max_k = hp->n_ff;
    if (hp->n_embd > max_k) max_k = hp->n_embd;
    if ((int64_t)hp->n_head * hp->head_dim > max_k) max_k = (int64_t)hp->n_head * hp->head_dim;
    mtplx_backend *be;
    const char *device = arg(argc, argv, "--device", "cpu");
    on_gpu = !strcmp(device, "cuda");
    bool graphs = atoi(arg(argc, argv, "--graphs", "1")) != 0;
    char where[256];
    snprintf(where, sizeof where, "%s", mtplx_kernels_isa());
    if (on_gpu) {
        CHECK(mtplx_backend_cuda_new(0, max_k, n_max, n_ctx, &be));
        mtplx_cuda_set_graphs(be, graphs);
        CHECK(mtplx_cuda_device_name(0, where, sizeof where, NULL));
    } else {
        CHECK(mtplx_backend_cpu_new(threads, max_k, n_max, n_ctx, &be));
    }
    mtplx_kv kv;
    mtplx_acts acts;
    CHECK(mtplx_kv_init(&kv, be, hp, hp->n_layer, n_ctx, MTPLX_TYPE_F16));
    CHECK(mtplx_acts_init(&acts, be, hp, n_max));
    int32_t *tok = malloc((size_t)n_ctx * sizeof *tok);
    for (int64_t i = 0; i < n_ctx; i++) tok[i] = (int32_t)(1000 + 37 * i % 50000);
    /* weight bytes one decode step reads: every matrix once (a tied
     * embedding as the output head; with a separate output.weight the
     * embedding contributes one row per token, not counted) */
    double wbytes = 0;
    bool untied = false;
    for (int64_t i = 0; i < m->g->n_tensors; i++) untied |= !strcmp(m->g->tensors[i].name, "output.weight");
    for (int64_t i = 0; i < m->g->n_tensors; i++)
        if (!untied || strcmp(m->g->tensors[i].name, "token_embd.weight"))
            wbytes += (double)m->g->tensors[i].nbytes;
    /* a context of pos tokens (--pos, default 16; in chunks of at most
     * n_max), then n tokens at position pos again and again */
    for (int64_t p = 0; p < pos; p += n_max)
        mtplx_model_forward(m, be, &kv, &acts, tok + p, pos - p < n_max ? pos - p : n_max, p, false);
    time_forward(m, be, &kv, &acts, tok, 1, pos, true); /* warm */
    static const int ns[] = {1, 2, 4, 8};
    double t[4][64];
    if (reps > 64) reps = 64;
    if (reps < 0) reps = 0;
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < 4; i++) t[i][r] = time_forward(m, be, &kv, &acts, tok + pos, ns[i], pos, true);
    /* --reps 0: no steps (a prefill alone, e.g. under a profiler); their figures print as 0 */
    double med[4] = {0, 0, 0, 0}, d = 1;
    for (int i = 0; i < 4 && reps > 0; i++) med[i] = median(t[i], reps);
    if (med[0] > 0) d = med[0];
    double tp[16];
    if (prefill_reps > 16) prefill_reps = 16;
    for (int r = 0; r < prefill_reps; r++) tp[r] = time_forward(m, be, &kv, &acts, tok, prefill, 0, false);
    double pf = prefill_reps > 0 ? median(tp, prefill_reps) : 0;
    printf("{\"model\": \"%s\", \"type\": \"%s\", \"threads\": %d, \"device\": \"%s\", \"pos\": %lld, "
           "\"graphs\": %s, \"isa\": \"%s\", \"load_s\": %.2f, "
           "\"weight_bytes\": %.0f, \"decode_ms\": %.3f, \"decode_tok_s\": %.2f, \"decode_gbps\": %.2f, "
           "\"verify_ms\": {\"2\": %.3f, \"4\": %.3f, \"8\": %.3f}, "
           "\"verify_ratio\": {\"2\": %.3f, \"4\": %.3f, \"8\": %.3f}, "
           "\"prefill_n\": %d, \"prefill_tok_s\": %.2f, \"reps\": %d, \"clock\": \"%s\"}\n",
           path, mtplx_type_info(m->tok_embd.type)->name, threads, device, (long long)pos,
           on_gpu ? (graphs ? "true" : "false") : "null", where, tl, wbytes,
           1e3 * med[0], med[0] > 0 ? 1 / d : 0, med[0] > 0 ? wbytes / d / 1e9 : 0, 1e3 * med[1], 1e3 * med[2],
           1e3 * med[3], med[1] / d, med[2] / d, med[3] / d, prefill, pf > 0 ? prefill / pf : 0, reps,
           cpu_clock ? "thread-cpu" : "wall");
    free(tok);
    mtplx_acts_free(&acts, be);
    mtplx_kv_free(&kv, be);
    be->free(be);
    mtplx_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "gen")) return cmd_gen(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "bw")) return cmd_bw(argc - 2, argv + 2);
    if (argc >= 3 && !strcmp(argv[1], "run")) return cmd_run(argc - 2, argv + 2);
    fprintf(stderr, "usage: bench_models gen --vocab VOCAB.gguf [--out DIR] [--size 0.6b|1.7b|8b] [--types LIST]\n"
                    "       bench_models bw [--gib 2]\n"
                    "       bench_models run MODEL.gguf [--threads T] [--reps R] [--prefill N]\n"
                    "                            [--device cpu|cuda] [--graphs 0|1] [--cpu-clock] [--pos P]\n");
    return 2;
}
