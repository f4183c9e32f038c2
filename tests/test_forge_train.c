/* test_forge_train.c: `forge train-mtp`'s head.
 *  - the hand-written backward pass against central finite differences on a
 *    tiny random head (qk-norm, biases, GQA, NeoX RoPE, depth 2 unrolled);
 *  - a bounded train-mtp run on the tiny HF Qwen3 fixture: held-out KL falls
 *    at every depth, greedy MTP == AR, acceptance beats a random head's;
 *  - checkpoint + resume gives the same head as an uninterrupted run, and
 *    2 threads the same as 1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "forge/forge.h"
#include "forge/mtp_head.h"
#include "formats/formats.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FIXTURE MTPLX_SOURCE_DIR "/tests/fixtures/models/qwen3"
#define TEXT MTPLX_SOURCE_DIR "/README.md"

static uint64_t rng = 0x243f6a8885a308d3ull;
static float randn(void) {
    double u[2];
    for (int i = 0; i < 2; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        u[i] = ((rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    }
    return (float)(sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]));
}

/* ---- gradient check ---- */

enum { E = 16, H = 4, KVH = 2, D = 8, F = 24, V = 40, T = 6, K = 2 };
static float emb_table[V * E];
static void embed(void *user, int32_t id, float *out) { memcpy(out, emb_table + id * E, E * sizeof(float)); }

typedef struct gc {
    head_layout L;
    head_frozen fz;
    head_work wk;
    head_stream st[K];
    float dg[T * E];
    int32_t tok[T + K];
    float h[T * E], p[(T + K) * V], logits[(T + K) * V];
    double negent[T + K];
    int32_t top[T + K];
} gc;

static double loss_of(gc *g, const float *w) {
    double tot = 0;
    for (int d = 1; d <= K; d++) {
        g->st[d - 1].tok = g->tok + d;
        g->st[d - 1].g_in = d == 1 ? g->h : g->st[d - 2].x2;
        head_target tg = {g->p + d * V, g->negent + d, g->top + d};
        head_forward(&g->L, w, &g->fz, &g->wk, &g->st[d - 1], &tg, 1.0f / (T * K));
        tot += g->st[d - 1].loss / (T * K);
    }
    return tot;
}

static void test_gradient_check(void **state) {
    (void)state;
    static float inv_freq[D / 2];
    for (int i = 0; i < D / 2; i++) inv_freq[i] = powf(10000.0f, -2.0f * i / D);
    head_shape s = {.E = E, .H = H, .KVH = KVH, .D = D, .F = F, .V = V, .eps = 1e-6f, .neox = true,
                    .qk_norm = true, .bias = true, .inv_freq = inv_freq};
    gc *g = calloc(1, sizeof *g);
    assert_non_null(g);
    head_layout_init(&g->L, &s);
    mtplx_threadpool *tp = NULL;
    assert_int_equal(mtplx_threadpool_new(1, &tp), MTPLX_OK);
    assert_int_equal(head_work_init(&g->wk, &s, T, tp), MTPLX_OK);
    for (int d = 0; d < K; d++) assert_int_equal(head_stream_init(&g->st[d], &s, T), MTPLX_OK);
    float *wout = malloc(V * E * sizeof(float)), *woutT = malloc(V * E * sizeof(float));
    for (int i = 0; i < V * E; i++) wout[i] = randn(), emb_table[i] = randn();
    for (int r = 0; r < V; r++)
        for (int c = 0; c < E; c++) woutT[c * V + r] = wout[r * E + c];
    g->fz = (head_frozen){.wout = wout, .woutT = woutT, .embed = embed};
    for (int i = 0; i < T + K; i++) g->tok[i] = (int32_t)(fabsf(randn()) * 97) % V;
    for (int i = 0; i < T * E; i++) g->h[i] = 3 * randn();
    for (int i = 0; i < (T + K) * V; i++) g->logits[i] = 2 * randn(); /* random targets */
    head_targets(tp, g->logits, T + K, V, g->p, g->negent, g->top);
    for (int r = 0; r < T + K; r++) { /* negent = sum p log p, computed here the slow way */
        double ne = 0;
        for (int c = 0; c < V; c++) ne += g->p[r * V + c] * log(g->p[r * V + c]);
        assert_float_equal(g->negent[r], ne, 1e-5);
    }
    size_t n = g->L.n;
    float *w = malloc(n * sizeof(float)), *grad = calloc(n, sizeof(float));
    for (int t = 0; t < HP_COUNT; t++) {
        const head_tensor *ht = &g->L.t[t];
        if (!ht->present) continue;
        for (int64_t i = 0; i < ht->ne0 * ht->ne1; i++)
            w[ht->off + i] = ht->ne1 == 1 ? 1.0f + 0.3f * randn() : randn() / sqrtf((float)ht->ne0);
    }
    loss_of(g, w);
    for (int d = K; d >= 1; d--)
        head_backward(&g->L, w, grad, &g->fz, &g->wk, &g->st[d - 1], d < K ? g->dg : NULL,
                      d > 1 ? g->dg : NULL);
    /* every parameter, central differences in float with a step of 1e-3 */
    const float h = 1e-3f;
    for (int t = 0; t < HP_COUNT; t++) {
        const head_tensor *ht = &g->L.t[t];
        if (!ht->present) continue;
        double num2 = 0, ana2 = 0, diff2 = 0;
        for (int64_t i = 0; i < ht->ne0 * ht->ne1; i++) {
            float *x = &w[ht->off + i], x0 = *x;
            *x = x0 + h;
            double lp = loss_of(g, w);
            *x = x0 - h;
            double lm = loss_of(g, w);
            *x = x0;
            double num = (lp - lm) / (2 * h), ana = grad[ht->off + i];
            num2 += num * num;
            ana2 += ana * ana;
            diff2 += (num - ana) * (num - ana);
        }
        double rel = sqrt(diff2) / (sqrt(num2) + sqrt(ana2) + 1e-12);
        if (rel > 1e-2 || ana2 == 0)
            fprintf(stderr, "%s: |num| %.4g |ana| %.4g rel err %.3g\n", ht->name, sqrt(num2),
                    sqrt(ana2), rel);
        assert_true(ana2 > 0);   /* every tensor gets a gradient */
        assert_true(rel < 1e-2); /* named tolerance: 1% of the gradient's norm */
    }
    free(w);
    free(grad);
    free(wout);
    free(woutT);
    for (int d = 0; d < K; d++) head_stream_free(&g->st[d]);
    head_work_free(&g->wk);
    mtplx_threadpool_free(tp);
    free(g);
}

/* ---- bounded training on the tiny fixture ---- */

static mtplx_train_params tiny_params(const char *out) {
    mtplx_train_params p = mtplx_train_default_params();
    p.data_path = TEXT;
    p.out_path = out;
    p.depth = 2;
    p.seq = 32;
    p.steps = 120;
    p.lr = 3e-3f;
    p.n_threads = 1;
    p.seed = 7;
    return p;
}

static double accept1(const char *model) {
    mtplx_verify_params vp = mtplx_verify_default_params();
    vp.data_path = TEXT;
    vp.depth = 1;
    vp.n_tokens = 48;
    vp.n_prompts = 6;
    vp.prompt_len = 16;
    vp.n_threads = 1;
    mtplx_verify_result r;
    mtplx_status st = mtplx_forge_verify(model, &vp, &r);
    if (st != MTPLX_OK) fprintf(stderr, "verify: %s\n", mtplx_last_error());
    assert_int_equal(st, MTPLX_OK);
    assert_true(r.has_mtp);
    assert_int_equal(r.identical, r.n_prompts); /* greedy MTP == greedy AR */
    assert_true(r.drafted[0] > 0);
    return (double)r.accepted[0] / (double)r.drafted[0];
}

static void test_train_tiny(void **state) {
    (void)state;
    char dir[] = "/tmp/mtplx_forge_train_XXXXXX", out[256], rnd[256];
    assert_non_null(mkdtemp(dir));
    snprintf(out, sizeof out, "%s/trained.gguf", dir);
    snprintf(rnd, sizeof rnd, "%s/random.gguf", dir);
    mtplx_train_params p = tiny_params(out);
    mtplx_train_result r;
    mtplx_status st = mtplx_forge_train_mtp(FIXTURE, &p, &r);
    if (st != MTPLX_OK) fprintf(stderr, "train: %s\n", mtplx_last_error());
    assert_int_equal(st, MTPLX_OK);
    assert_int_equal(r.steps_done, 120);
    for (int d = 0; d < 2; d++) {
        fprintf(stderr, "depth %d: held-out KL %.3f -> %.3f, agree %.3f -> %.3f\n", d + 1,
                r.eval_loss0[d], r.eval_loss1[d], r.eval_agree0[d], r.eval_agree1[d]);
        assert_true(r.eval_loss1[d] < 0.8 * r.eval_loss0[d]); /* the loss falls */
    }
    /* the output is a model with one head of the documented layout */
    mtplx_gguf *g = NULL;
    assert_int_equal(mtplx_gguf_open(out, &g), MTPLX_OK);
    assert_int_equal(mtplx_gguf_get_arch_int(g, "nextn_predict_layers", 0), 1);
    assert_int_equal(mtplx_gguf_get_arch_int(g, "block_count", 0), 3);
    assert_string_equal(mtplx_gguf_get_str(g, "mtplx.nextn.layout"), "qwen3-next");
    assert_int_equal(mtplx_gguf_get_int(g, "mtplx.nextn.depth_trained", 0), 2);
    assert_non_null(mtplx_gguf_find_tensor(g, "blk.2.nextn.eh_proj.weight"));
    assert_non_null(mtplx_gguf_find_tensor(g, "blk.2.ffn_down.weight"));
    mtplx_gguf_free(g);
    /* a random head (same trunk, no training) as the baseline */
    mtplx_train_params pr = tiny_params(rnd);
    pr.steps = 0;
    pr.init_random = true;
    assert_int_equal(mtplx_forge_train_mtp(FIXTURE, &pr, NULL), MTPLX_OK);
    double a_tr = accept1(out), a_rnd = accept1(rnd);
    fprintf(stderr, "acceptance at position 1: trained %.3f, random head %.3f\n", a_tr, a_rnd);
    assert_true(a_tr > a_rnd + 0.05);
    unlink(out);
    unlink(rnd);
    rmdir(dir);
}

static bool same_head(const char *a, const char *b) {
    mtplx_gguf *ga = NULL, *gb = NULL;
    assert_int_equal(mtplx_gguf_open(a, &ga), MTPLX_OK);
    assert_int_equal(mtplx_gguf_open(b, &gb), MTPLX_OK);
    bool same = ga->n_tensors == gb->n_tensors;
    for (int64_t i = 0; same && i < ga->n_tensors; i++) {
        const mtplx_gguf_tensor *x = &ga->tensors[i], *y = mtplx_gguf_find_tensor(gb, x->name);
        same = y && x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes);
    }
    mtplx_gguf_free(ga);
    mtplx_gguf_free(gb);
    return same;
}

/* The files of an interrupted and resumed run, in a fresh directory: an
 * uninterrupted run (full), the run checkpointed (part, its checkpoint ck and
 * optimizer state opt), the resumed run (res), and one more output (other). */
typedef struct {
    char dir[64], full[256], part[256], res[256], other[256], ck[300], opt[320];
} run_files;

static void run_files_make(run_files *f) {
    snprintf(f->dir, sizeof f->dir, "/tmp/mtplx_forge_run_XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->full, sizeof f->full, "%s/full.gguf", f->dir);
    snprintf(f->part, sizeof f->part, "%s/part.gguf", f->dir);
    snprintf(f->res, sizeof f->res, "%s/resumed.gguf", f->dir);
    snprintf(f->other, sizeof f->other, "%s/other.gguf", f->dir);
    snprintf(f->ck, sizeof f->ck, "%s.ckpt.gguf", f->part);
    snprintf(f->opt, sizeof f->opt, "%s.opt", f->ck);
}

static void run_files_remove(const run_files *f) {
    const char *files[] = {f->full, f->part, f->res, f->other, f->ck, f->opt};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) unlink(files[i]);
    rmdir(f->dir);
}

static void test_checkpoint_resume(void **state) {
    (void)state;
    run_files rf;
    run_files_make(&rf);
    const char *full = rf.full, *part = rf.part, *res = rf.res, *ck = rf.ck, *opt = rf.opt;
    mtplx_train_params p = tiny_params(full);
    p.depth = 1;
    p.steps = 40;
    assert_int_equal(mtplx_forge_train_mtp(FIXTURE, &p, NULL), MTPLX_OK);
    p.out_path = part;
    p.checkpoint_every = 20;
    assert_int_equal(mtplx_forge_train_mtp(FIXTURE, &p, NULL), MTPLX_OK);
    assert_true(access(ck, F_OK) == 0 && access(opt, F_OK) == 0);
    assert_true(same_head(full, part)); /* checkpointing changes nothing */
    p.checkpoint_every = 0;
    p.n_threads = 2;
    assert_int_equal(mtplx_forge_train_mtp(FIXTURE, &p, NULL), MTPLX_OK);
    assert_true(same_head(full, part)); /* nor does the thread count */
    p.n_threads = 1;
    p.out_path = res;
    p.checkpoint_every = 0;
    p.resume = ck;
    mtplx_train_result r;
    assert_int_equal(mtplx_forge_train_mtp(FIXTURE, &p, &r), MTPLX_OK);
    assert_int_equal(r.steps_done, 40);
    assert_int_equal(r.tokens, 20 * 32); /* only the remaining 20 steps ran */
    assert_true(same_head(full, res));   /* resumed == uninterrupted */
    /* a resume file for another head is refused */
    FILE *f = fopen(opt, "r+b");
    assert_non_null(f);
    uint64_t bad = 12345;
    fseek(f, 16, SEEK_SET);
    fwrite(&bad, sizeof bad, 1, f);
    fclose(f);
    assert_int_equal(mtplx_forge_train_mtp(FIXTURE, &p, NULL), MTPLX_ERR_FORMAT);
    run_files_remove(&rf);
}

/* --on-policy: part of the steps on the trunk's own greedy text. The loss
 * still falls; the option changes the head (a run without it differs); the
 * pool is rebuilt the same on --resume (resumed == uninterrupted); a share
 * outside 0..1 is refused. */
static void test_on_policy(void **state) {
    (void)state;
    run_files rf;
    run_files_make(&rf);
    const char *full = rf.full, *plain = rf.other, *part = rf.part, *res = rf.res;
    mtplx_train_params p = tiny_params(full);
    p.depth = 1;
    p.steps = 40;
    p.on_policy = 0.5f;
    p.pool_windows = 4;
    mtplx_train_result r;
    mtplx_status st = mtplx_forge_train_mtp(FIXTURE, &p, &r);
    if (st != MTPLX_OK) fprintf(stderr, "train: %s\n", mtplx_last_error());
    assert_int_equal(st, MTPLX_OK);
    fprintf(stderr, "on-policy 0.5: held-out KL %.3f -> %.3f\n", r.eval_loss0[0], r.eval_loss1[0]);
    assert_true(r.eval_loss1[0] < 0.9 * r.eval_loss0[0]); /* (held out: book text) */
    mtplx_train_params q = p;
    q.out_path = plain;
    q.on_policy = 0.f;
    assert_int_equal(mtplx_forge_train_mtp(FIXTURE, &q, NULL), MTPLX_OK);
    assert_false(same_head(full, plain));
    p.out_path = part;
    p.checkpoint_every = 20;
    assert_int_equal(mtplx_forge_train_mtp(FIXTURE, &p, NULL), MTPLX_OK);
    assert_true(same_head(full, part));
    p.checkpoint_every = 0;
    p.out_path = res;
    p.resume = rf.ck;
    assert_int_equal(mtplx_forge_train_mtp(FIXTURE, &p, NULL), MTPLX_OK);
    assert_true(same_head(full, res));
    p.resume = NULL;
    p.on_policy = 1.5f;
    assert_int_equal(mtplx_forge_train_mtp(FIXTURE, &p, NULL), MTPLX_ERR_ARG);
    run_files_remove(&rf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradient_check),
        cmocka_unit_test(test_train_tiny),
        cmocka_unit_test(test_checkpoint_resume),
        cmocka_unit_test(test_on_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
