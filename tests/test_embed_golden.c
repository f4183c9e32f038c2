/* test_embed_golden.c: embeddings and rerank scores against references we
 * did not write: sentence-transformers / transformers on tiny random-weight
 * BERT and Qwen3 models (tools/make_embed_goldens.py, fixtures in
 * tests/fixtures/embed/). Each model is skipped when its folder is absent.
 * Checks: token ids equal HF tokenizers'; each embedding has cosine >= 0.9999
 * and max |diff| <= 1e-4 to the reference (F32); rerank scores within 1e-4;
 * the texts embedded as one batch give the same vectors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mtplx.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FIX MTPLX_SOURCE_DIR "/tests/fixtures/embed/"
#define COS_MIN 0.9999
#define ABS_TOL 1e-4
#define SCORE_TOL 1e-4

static cJSON *golden(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, FIX "%s/golden.json", name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    assert_non_null(j);
    return j;
}

static mtplx_model *load(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, FIX "%s", name);
    mtplx_model *m = NULL;
    mtplx_status st = mtplx_model_load(path, NULL, &m);
    if (st != MTPLX_OK) fprintf(stderr, "%s: %s\n", name, mtplx_last_error());
    assert_int_equal(st, MTPLX_OK);
    return m;
}

static mtplx_ctx *ctx_of(mtplx_model *m) {
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_threads = 2;
    cp.kv_f32 = true; /* F32 end to end: an F16 KV cache alone moves Qwen3 vectors ~2e-4 */
    cp.n_ctx = 512;   /* the reranker prompts (~260 tokens of a tiny byte-level vocab) pass the
                       * toy model's 256 trained positions; HF runs them all the same */
    mtplx_ctx *c = NULL;
    assert_int_equal(mtplx_ctx_new(m, &cp, &c), MTPLX_OK);
    return c;
}

static const char **strings(const cJSON *arr, int *n) {
    *n = cJSON_GetArraySize(arr);
    const char **s = calloc((size_t)*n, sizeof *s);
    assert_non_null(s);
    for (int i = 0; i < *n; i++) s[i] = cJSON_GetArrayItem(arr, i)->valuestring;
    return s;
}

/* Token ids of text (prefix + text) equal the reference's. */
static void check_ids(const mtplx_model *m, const char *prefix, const char *text, const cJSON *ref) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s%s", prefix ? prefix : "", text);
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(mtplx_tokenize(mtplx_model_tokenizer(m), buf, strlen(buf), true, true, &ids, &n),
                     MTPLX_OK);
    bool same = (int)n == cJSON_GetArraySize(ref);
    for (size_t i = 0; same && i < n; i++) same = ids[i] == cJSON_GetArrayItem(ref, (int)i)->valueint;
    if (!same) {
        fprintf(stderr, "ids of \"%s\":", text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
    assert_true(same);
}

static void check_vecs(const float *got, const cJSON *ref, int n, int d, const char *what) {
    assert_int_equal(cJSON_GetArraySize(ref), n);
    for (int i = 0; i < n; i++) {
        const cJSON *r = cJSON_GetArrayItem(ref, i);
        assert_int_equal(cJSON_GetArraySize(r), d);
        double dot = 0, na = 0, nb = 0, mx = 0;
        for (int j = 0; j < d; j++) {
            double a = got[i * d + j], b = cJSON_GetArrayItem(r, j)->valuedouble;
            dot += a * b, na += a * a, nb += b * b, mx = fmax(mx, fabs(a - b));
        }
        double cos = dot / sqrt(na * nb);
        printf("  %s %d: cosine %.8f, max |diff| %.2e\n", what, i, cos, mx);
        assert_true(cos >= COS_MIN);
        assert_true(mx <= ABS_TOL);
    }
}

static void embed_model(const char *name) {
    cJSON *g = golden(name);
    if (!g) skip();
    mtplx_model *m = load(name);
    assert_true(mtplx_model_roles(m) & MTPLX_ROLE_EMBED);
    int d = mtplx_embed_dim(m);
    assert_int_equal(d, cJSON_GetObjectItem(g, "dim")->valueint);
    int n;
    const char **texts = strings(cJSON_GetObjectItem(g, "texts"), &n);
    for (int i = 0; i < n; i++)
        check_ids(m, NULL, texts[i], cJSON_GetArrayItem(cJSON_GetObjectItem(g, "ids"), i));
    mtplx_ctx *c = ctx_of(m);
    float *batch = malloc((size_t)(n * d) * sizeof(float)), *one = malloc((size_t)(n * d) * sizeof(float));
    for (int i = 0; i < n; i++) assert_int_equal(mtplx_embed(c, &texts[i], 1, false, one + i * d, NULL), MTPLX_OK);
    check_vecs(one, cJSON_GetObjectItem(g, "embeddings"), n, d, "single");
    assert_int_equal(mtplx_embed(c, texts, n, false, batch, NULL), MTPLX_OK);
    check_vecs(batch, cJSON_GetObjectItem(g, "embeddings"), n, d, "batch ");
    const cJSON *qs = cJSON_GetObjectItem(g, "queries");
    if (qs) {
        int nq;
        const char **q = strings(qs, &nq);
        const char *prompt = cJSON_GetObjectItem(g, "query_prompt")->valuestring;
        for (int i = 0; i < nq; i++)
            check_ids(m, prompt, q[i], cJSON_GetArrayItem(cJSON_GetObjectItem(g, "query_ids"), i));
        assert_int_equal(mtplx_embed(c, q, nq, true, batch, NULL), MTPLX_OK);
        check_vecs(batch, cJSON_GetObjectItem(g, "query_embeddings"), nq, d, "query ");
        free(q);
    }
    free(batch);
    free(one);
    free(texts);
    mtplx_ctx_free(c);
    mtplx_model_free(m);
    cJSON_Delete(g);
}

static void rerank_model(const char *name) {
    cJSON *g = golden(name);
    if (!g) skip();
    mtplx_model *m = load(name);
    assert_int_equal(mtplx_model_roles(m), MTPLX_ROLE_RERANK);
    int n;
    const char **docs = strings(cJSON_GetObjectItem(g, "documents"), &n);
    const char *query = cJSON_GetObjectItem(g, "query")->valuestring;
    mtplx_ctx *c = ctx_of(m);
    float *s = malloc((size_t)n * sizeof(float)), one;
    assert_int_equal(mtplx_rerank(c, query, docs, n, s, NULL), MTPLX_OK);
    const cJSON *ref = cJSON_GetObjectItem(g, "scores");
    for (int i = 0; i < n; i++) {
        double r = cJSON_GetArrayItem(ref, i)->valuedouble;
        assert_int_equal(mtplx_rerank(c, query, &docs[i], 1, &one, NULL), MTPLX_OK);
        printf("  doc %d: score %.7f (alone %.7f), reference %.7f\n", i, s[i], one, r);
        assert_true(fabs(s[i] - r) <= SCORE_TOL);
        assert_true(fabs(one - r) <= SCORE_TOL);
    }
    free(s);
    free(docs);
    mtplx_ctx_free(c);
    mtplx_model_free(m);
    cJSON_Delete(g);
}

static void test_bert_embed(void **state) { embed_model("bert-embed"); }
static void test_qwen3_embed(void **state) { embed_model("qwen3-embed"); }
static void test_bert_rerank(void **state) { rerank_model("bert-rerank"); }
static void test_qwen3_reranker(void **state) { rerank_model("qwen3-reranker"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bert_embed),  cmocka_unit_test(test_bert_rerank),
        cmocka_unit_test(test_qwen3_embed), cmocka_unit_test(test_qwen3_reranker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
