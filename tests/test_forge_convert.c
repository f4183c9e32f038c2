/* test_forge_convert.c: `forge convert` round trips and bad input.
 *  - HF folder -> GGUF: the same logits as the HF folder itself;
 *  - GGUF -> re-quantized GGUF (Q8_0 -> Q4_0 through F32): types as asked,
 *    logits close to the source;
 *  - llama2.c stories260K -> GGUF: the same greedy text as the .bin;
 *  - --strip-mtp on the default model: no head, identical trunk logits; the
 *    kept head is described by mtplx.nextn.layout;
 *  - unsupported architecture, missing shard, config that disagrees with
 *    the tensors, unwritable output: a clear error and no file left. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "forge/forge.h"
#include "formats/formats.h"
#include "kernels/kernels.h"
#include "model/model.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FIXTURE MTPLX_SOURCE_DIR "/tests/fixtures/models/qwen3"
#define DEFAULT MTPLX_SOURCE_DIR "/models/default.gguf"
#define STORIES MTPLX_SHARED_DIR "/models/stories260K/stories260K.bin"

static char dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mtplx_forge_conv_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", dir, name);
    return buf;
}

static mtplx_status convert(const char *in, const char *out, int type, bool strip) {
    mtplx_convert_params p = {.quant_type = type, .strip_mtp = strip};
    mtplx_status st = mtplx_forge_convert(in, NULL, out, &p);
    if (st != MTPLX_OK) fprintf(stderr, "convert %s: %s\n", in, mtplx_last_error());
    return st;
}

/* Logits of 8 fixed tokens, all positions: caller frees. */
static float *logits_of(const char *path, int32_t *n_vocab, bool load_mtp) {
    mtplx_model_params mp = mtplx_model_default_params();
    mp.load_mtp = load_mtp;
    mtplx_model *m = NULL;
    mtplx_status st = mtplx_model_load(path, &mp, &m);
    if (st != MTPLX_OK) fprintf(stderr, "load %s: %s\n", path, mtplx_last_error());
    assert_int_equal(st, MTPLX_OK);
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    mtplx_ctx *c = NULL;
    assert_int_equal(mtplx_ctx_new(m, &cp, &c), MTPLX_OK);
    const int32_t toks[8] = {1, 17, 42, 99, 7, 300, 5, 64};
    assert_int_equal(mtplx_forward(c, toks, 8, true), MTPLX_OK);
    *n_vocab = m->hp.n_vocab;
    float *out = malloc((size_t)(8 * *n_vocab) * sizeof(float));
    for (int i = 0; i < 8; i++) memcpy(out + i * *n_vocab, mtplx_logits(c, i), (size_t)*n_vocab * sizeof(float));
    mtplx_ctx_free(c);
    mtplx_model_free(m);
    return out;
}

static double rel_err(const float *a, const float *b, int64_t n) {
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        d += (double)(a[i] - b[i]) * (a[i] - b[i]);
        s += (double)a[i] * a[i];
    }
    return sqrt(d / (s + 1e-30));
}

static bool dir_is_empty_of(const char *prefix) {
    DIR *d = opendir(dir);
    struct dirent *e;
    bool clean = true;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) clean = false;
    closedir(d);
    return clean;
}

static void test_hf_roundtrip(void **state) {
    (void)state;
    char out[128];
    assert_int_equal(convert(FIXTURE, tmp_path(out, sizeof out, "qwen3.gguf"), -1, false), MTPLX_OK);
    int32_t V, V2;
    float *a = logits_of(FIXTURE, &V, true), *b = logits_of(out, &V2, true);
    assert_int_equal(V, V2);
    assert_true(rel_err(a, b, 8 * (int64_t)V) < 1e-6);
    free(a);
    free(b);
}

static void test_requantize(void **state) {
    (void)state;
    char q8[128], q4[128];
    assert_int_equal(convert(FIXTURE, tmp_path(q8, sizeof q8, "q8.gguf"), MTPLX_TYPE_Q8_0, false), MTPLX_OK);
    assert_int_equal(convert(q8, tmp_path(q4, sizeof q4, "q4.gguf"), MTPLX_TYPE_Q4_0, false), MTPLX_OK);
    mtplx_gguf *g = NULL;
    assert_int_equal(mtplx_gguf_open(q4, &g), MTPLX_OK);
    assert_int_equal(mtplx_gguf_find_tensor(g, "blk.0.attn_q.weight")->type, MTPLX_TYPE_Q4_0);
    assert_int_equal(mtplx_gguf_find_tensor(g, "blk.0.attn_norm.weight")->type, MTPLX_TYPE_F32);
    mtplx_gguf_free(g);
    int32_t V;
    float *ref = logits_of(FIXTURE, &V, true), *a = logits_of(q8, &V, true), *b = logits_of(q4, &V, true);
    double e8 = rel_err(ref, a, 8 * (int64_t)V), e4 = rel_err(ref, b, 8 * (int64_t)V);
    fprintf(stderr, "logits rel err: q8_0 %.4f, q4_0 (from q8_0) %.4f\n", e8, e4);
    assert_true(e8 < 0.05); /* a tiny random model: coarse tolerances */
    assert_true(e4 < 0.5 && e4 > e8); /* coarser, but the same model */
    free(ref);
    free(a);
    free(b);
}

static void greedy(const char *path, int32_t *ids, int n) {
    mtplx_model *m = NULL;
    assert_int_equal(mtplx_model_load(path, NULL, &m), MTPLX_OK);
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_threads = 1;
    mtplx_ctx *c = NULL;
    assert_int_equal(mtplx_ctx_new(m, &cp, &c), MTPLX_OK);
    int32_t t = 1; /* BOS */
    for (int i = 0; i < n; i++) {
        assert_int_equal(mtplx_forward(c, &t, 1, false), MTPLX_OK);
        const float *lg = mtplx_logits(c, 0);
        int32_t best = 0;
        for (int32_t v = 1; v < m->hp.n_vocab; v++)
            if (lg[v] > lg[best]) best = v;
        ids[i] = t = best;
    }
    mtplx_ctx_free(c);
    mtplx_model_free(m);
}

static void test_llama2c_roundtrip(void **state) {
    (void)state;
    char out[128];
    assert_int_equal(convert(STORIES, tmp_path(out, sizeof out, "stories.gguf"), -1, false), MTPLX_OK);
    int32_t a[64], b[64];
    greedy(STORIES, a, 64);
    greedy(out, b, 64);
    assert_memory_equal(a, b, sizeof a);
}

static void test_strip_mtp(void **state) {
    (void)state;
    char out[128], kept[128];
    assert_int_equal(convert(DEFAULT, tmp_path(out, sizeof out, "stripped.gguf"), -1, true), MTPLX_OK);
    mtplx_gguf *g = NULL;
    assert_int_equal(mtplx_gguf_open(out, &g), MTPLX_OK);
    int64_t nl = mtplx_gguf_get_arch_int(g, "block_count", 0);
    assert_int_equal(nl, 8);
    assert_null(mtplx_gguf_get(g, "qwen3.nextn_predict_layers"));
    assert_null(mtplx_gguf_get(g, "mtplx.nextn.layout"));
    for (int64_t i = 0; i < g->n_tensors; i++) {
        int blk;
        assert_null(strstr(g->tensors[i].name, "nextn"));
        assert_false(sscanf(g->tensors[i].name, "blk.%d.", &blk) == 1 && blk >= nl);
    }
    mtplx_gguf_free(g);
    mtplx_model *m = NULL;
    assert_int_equal(mtplx_model_load(out, NULL, &m), MTPLX_OK);
    assert_int_equal(m->n_mtp, 0);
    mtplx_model_free(m);
    int32_t V;
    float *a = logits_of(DEFAULT, &V, false), *b = logits_of(out, &V, false);
    assert_memory_equal(a, b, (size_t)(8 * V) * sizeof(float)); /* the trunk is untouched */
    free(a);
    free(b);
    /* kept heads are described */
    assert_int_equal(convert(DEFAULT, tmp_path(kept, sizeof kept, "kept.gguf"), -1, false), MTPLX_OK);
    assert_int_equal(mtplx_gguf_open(kept, &g), MTPLX_OK);
    assert_string_equal(mtplx_gguf_get_str(g, "mtplx.nextn.layout"), "qwen3-next");
    assert_int_equal(mtplx_gguf_get_arch_int(g, "nextn_predict_layers", 0), 1);
    assert_int_equal(mtplx_gguf_find_tensor(g, "blk.8.nextn.eh_proj.weight")->type, MTPLX_TYPE_BF16);
    mtplx_gguf_free(g);
}

/* A copy of the HF fixture into dir/name with config.json edited by sed. */
static void hf_copy(const char *name, const char *sed_expr) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/%s' && cp '%s'/* '%s/%s/' && sed -i '%s' '%s/%s/config.json'",
             dir, name, FIXTURE, dir, name, sed_expr, dir, name);
    assert_int_equal(system(cmd), 0);
}

static void expect_fail(const char *in, const char *out_name, mtplx_status want, const char *msg_part) {
    char out[128];
    mtplx_convert_params p = {.quant_type = -1};
    mtplx_status st = mtplx_forge_convert(in, NULL, tmp_path(out, sizeof out, out_name), &p);
    fprintf(stderr, "expected failure: %s\n", mtplx_last_error());
    assert_int_equal(st, want);
    assert_non_null(strstr(mtplx_last_error(), msg_part));
    assert_true(access(out, F_OK) != 0);
    assert_true(dir_is_empty_of(out_name)); /* no temporary file either */
}

static void test_bad_input(void **state) {
    (void)state;
    char in[128];
    /* unsupported architecture */
    hf_copy("gpt2", "s/Qwen3ForCausalLM/GPT2LMHeadModel/; s/\"model_type\": \"qwen3\"/\"model_type\": \"gpt2\"/");
    expect_fail(tmp_path(in, sizeof in, "gpt2"), "gpt2.gguf", MTPLX_ERR_UNSUPPORTED, "GPT2LMHeadModel");
    /* config that disagrees with the tensors */
    hf_copy("wide", "s/\"intermediate_size\": 128/\"intermediate_size\": 96/");
    expect_fail(tmp_path(in, sizeof in, "wide"), "wide.gguf", MTPLX_ERR_FORMAT, "ffn_gate");
    /* a sharded checkpoint with a missing shard */
    hf_copy("shard", "s/x/x/");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd '%s/shard' && mv model.safetensors model-00001-of-00002.safetensors && "
             "printf '{\"metadata\":{},\"weight_map\":{\"model.embed_tokens.weight\":"
             "\"model-00001-of-00002.safetensors\",\"model.norm.weight\":"
             "\"model-00002-of-00002.safetensors\"}}' > model.safetensors.index.json", dir);
    assert_int_equal(system(cmd), 0);
    expect_fail(tmp_path(in, sizeof in, "shard"), "shard.gguf", MTPLX_ERR_IO, "model-00002-of-00002");
    /* unwritable / missing output folder */
    mtplx_convert_params p = {.quant_type = -1};
    assert_int_equal(mtplx_forge_convert(FIXTURE, NULL, "/nonexistent_mtplx/out.gguf", &p), MTPLX_ERR_IO);
    assert_non_null(strstr(mtplx_last_error(), "does not exist"));
    char ro[128];
    tmp_path(ro, sizeof ro, "readonly");
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && chmod 0555 '%s'", ro, ro);
    assert_int_equal(system(cmd), 0);
    char out[160];
    snprintf(out, sizeof out, "%s/out.gguf", ro);
    if (geteuid() != 0) { /* root writes anywhere */
        assert_int_equal(mtplx_forge_convert(FIXTURE, NULL, out, &p), MTPLX_ERR_IO);
        assert_non_null(strstr(mtplx_last_error(), "cannot write"));
    }
    assert_int_equal(mtplx_forge_convert(FIXTURE, NULL, "/proc/mtplx_forge_test.gguf", &p), MTPLX_ERR_IO);
    assert_true(access("/proc/mtplx_forge_test.gguf", F_OK) != 0);
    snprintf(cmd, sizeof cmd, "chmod 0755 '%s'", ro);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_roundtrip),   cmocka_unit_test(test_requantize),
        cmocka_unit_test(test_llama2c_roundtrip), cmocka_unit_test(test_strip_mtp),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
