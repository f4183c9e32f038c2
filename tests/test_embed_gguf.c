/* test_embed_gguf.c: embedders and rerankers converted to GGUF by `forge
 * convert` give the same vectors / scores as their HF folders (whose values
 * match sentence-transformers, see test_embed_golden.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "forge/forge.h"
#include "mtplx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FIX MTPLX_SOURCE_DIR "/tests/fixtures/embed/"

static void embed_pair(const char *name) {
    char in[512], out[512];
    snprintf(in, sizeof in, FIX "%s", name);
    if (access(in, R_OK)) skip();
    snprintf(out, sizeof out, "/tmp/mtplx-embed-gguf-%d-%s.gguf", (int)getpid(), name);
    mtplx_convert_params cp = {.quant_type = -1};
    if (mtplx_forge_convert(in, NULL, out, &cp) != MTPLX_OK) fail_msg("convert %s: %s", in, mtplx_last_error());
    mtplx_model *a = NULL, *b = NULL;
    mtplx_ctx *ca = NULL, *cb = NULL;
    mtplx_ctx_params p = mtplx_ctx_default_params();
    p.kv_f32 = true;
    p.n_threads = 1;
    assert_int_equal(mtplx_model_load(in, NULL, &a), MTPLX_OK);
    assert_int_equal(mtplx_model_load(out, NULL, &b), MTPLX_OK);
    assert_int_equal(mtplx_model_roles(a), mtplx_model_roles(b));
    assert_int_equal(mtplx_ctx_new(a, &p, &ca), MTPLX_OK);
    assert_int_equal(mtplx_ctx_new(b, &p, &cb), MTPLX_OK);
    const char *texts[] = {"hello world", "The quick brown fox jumps over the lazy dog.", "a"};
    if (mtplx_model_roles(a) & MTPLX_ROLE_EMBED) {
        int32_t d = mtplx_embed_dim(a);
        float *va = malloc(3 * (size_t)d * sizeof(float)), *vb = malloc(3 * (size_t)d * sizeof(float));
        assert_int_equal(mtplx_embed(ca, texts, 3, false, va, NULL), MTPLX_OK);
        assert_int_equal(mtplx_embed(cb, texts, 3, false, vb, NULL), MTPLX_OK);
        for (int i = 0; i < 3 * d; i++) assert_float_equal(va[i], vb[i], 1e-6);
        free(va);
        free(vb);
    } else {
        /* short documents: the tiny Qwen3 reranker's prompt template alone is
         * ~220 of its 256 positions */
        const char *docs[] = {"hello world", "a fox runs", "a"};
        float sa[3], sb[3];
        assert_int_equal(mtplx_rerank(ca, "what does the fox do?", docs, 3, sa, NULL), MTPLX_OK);
        assert_int_equal(mtplx_rerank(cb, "what does the fox do?", docs, 3, sb, NULL), MTPLX_OK);
        for (int i = 0; i < 3; i++) assert_float_equal(sa[i], sb[i], 1e-6);
    }
    mtplx_ctx_free(ca);
    mtplx_ctx_free(cb);
    mtplx_model_free(a);
    mtplx_model_free(b);
    unlink(out);
}

static void bert_embed(void **s) { (void)s; embed_pair("bert-embed"); }
static void bert_rerank(void **s) { (void)s; embed_pair("bert-rerank"); }
static void qwen3_embed(void **s) { (void)s; embed_pair("qwen3-embed"); }
static void qwen3_reranker(void **s) { (void)s; embed_pair("qwen3-reranker"); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bert_embed),
        cmocka_unit_test(bert_rerank),
        cmocka_unit_test(qwen3_embed),
        cmocka_unit_test(qwen3_reranker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
