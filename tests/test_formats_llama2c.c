/* test_formats_llama2c.c: the llama2.c loader on ../shared/models/stories260K
 * (header values, tensor names and shapes, tokenizer keys) and on broken
 * copies of it (truncated, trailing bytes, no tokenizer beside it, a
 * tokenizer of the wrong size), plus format detection. */
#include "test_formats_util.h"

#include <math.h>

#define STORIES MTPLX_SHARED_DIR "/models/stories260K/stories260K.bin"
#define TOK512 MTPLX_SHARED_DIR "/models/stories260K/tok512.bin"

static void test_stories(void **state) {
    (void)state;
    mtplx_gguf *g = NULL;
    if (mtplx_llama2c_load(STORIES, NULL, &g) != MTPLX_OK) fail_msg("%s", mtplx_last_error());
    assert_string_equal(mtplx_gguf_get_str(g, "general.architecture"), "llama");
    assert_string_equal(mtplx_gguf_get_str(g, "general.name"), "stories260K");
    assert_int_equal(mtplx_gguf_get_arch_int(g, "embedding_length", 0), 64);
    assert_int_equal(mtplx_gguf_get_arch_int(g, "block_count", 0), 5);
    assert_int_equal(mtplx_gguf_get_arch_int(g, "attention.head_count", 0), 8);
    assert_int_equal(mtplx_gguf_get_arch_int(g, "attention.head_count_kv", 0), 4);
    assert_int_equal(mtplx_gguf_get_arch_int(g, "context_length", 0), 512);
    assert_int_equal(mtplx_gguf_get_arch_int(g, "rope.dimension_count", 0), 8);
    int64_t hidden = mtplx_gguf_get_arch_int(g, "feed_forward_length", 0);
    assert_true(hidden > 0);
    assert_true(mtplx_gguf_get_arch_float(g, "rope.freq_base", 0) == 10000.0);
    assert_true(fabs(mtplx_gguf_get_arch_float(g, "attention.layer_norm_rms_epsilon", 0) - 1e-5) <
                1e-9);
    /* tensors: 1 + 9 per layer + 1 (classifier shared) */
    assert_int_equal(g->n_tensors, 2 + 9 * 5);
    mtplx_gguf_tensor *t = mtplx_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 512);
    assert_int_equal(t->type, MTPLX_TYPE_F32);
    assert_null(mtplx_gguf_find_tensor(g, "output.weight"));
    t = mtplx_gguf_find_tensor(g, "blk.4.attn_k.weight");
    assert_non_null(t);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 32); /* kv_dim = 4 heads * 8 */
    t = mtplx_gguf_find_tensor(g, "blk.2.ffn_down.weight");
    assert_int_equal(t->ne[0], hidden);
    assert_int_equal(t->ne[1], 64);
    /* RMS norm weights are near 1 after training: a cheap check the offsets are right */
    t = mtplx_gguf_find_tensor(g, "output_norm.weight");
    const float *w = t->data;
    for (int i = 0; i < 64; i++) assert_true(w[i] > 0.0f && w[i] < 10.0f);
    /* first layer's norm follows the embedding table directly */
    t = mtplx_gguf_find_tensor(g, "blk.0.attn_norm.weight");
    assert_ptr_equal(t->data, (const uint8_t *)g->map.data + 28 + 64 * 512 * 4);

    /* tokenizer */
    assert_string_equal(mtplx_gguf_get_str(g, "tokenizer.ggml.model"), "llama");
    const mtplx_gguf_kv *tok = mtplx_gguf_get(g, "tokenizer.ggml.tokens");
    assert_non_null(tok);
    assert_int_equal(tok->arr_type, GGUF_TYPE_STRING);
    assert_int_equal(tok->arr_n, 512);
    const mtplx_gguf_str *s = tok->arr_data;
    assert_string_equal(s[0].data, "<unk>");
    assert_string_equal(s[1].data, "<s>");
    assert_string_equal(s[2].data, "</s>");
    const mtplx_gguf_kv *tt = mtplx_gguf_get(g, "tokenizer.ggml.token_type");
    assert_int_equal(tt->arr_type, GGUF_TYPE_INT32);
    const int32_t *types = tt->arr_data;
    assert_int_equal(types[0], 2);
    assert_int_equal(types[1], 3);
    assert_int_equal(types[2], 3);
    /* spaces are SentencePiece's U+2581 again: id 259 was " t" in tok512.bin */
    assert_string_equal(s[259].data, "\xe2\x96\x81t");
    assert_string_equal(s[260].data, "he");
    int n_byte = 0;
    for (int i = 3; i < 512; i++) {
        bool is_byte = s[i].len == 6 && !strncmp(s[i].data, "<0x", 3);
        assert_int_equal(types[i], is_byte ? 6 : 1);
        n_byte += is_byte;
    }
    assert_int_equal(n_byte, 256);
    const mtplx_gguf_kv *sc = mtplx_gguf_get(g, "tokenizer.ggml.scores");
    assert_int_equal(sc->arr_type, GGUF_TYPE_FLOAT32);
    assert_int_equal(sc->arr_n, 512);
    assert_int_equal(mtplx_gguf_get_int(g, "tokenizer.ggml.bos_token_id", -1), 1);
    assert_int_equal(mtplx_gguf_get_int(g, "tokenizer.ggml.eos_token_id", -1), 2);
    assert_true(mtplx_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", false));

    /* writing it as GGUF and reading back gives the same container */
    const char *out = tf_path("stories.gguf");
    assert_int_equal(mtplx_gguf_write(g, out), MTPLX_OK);
    mtplx_gguf *r = NULL;
    assert_int_equal(mtplx_checkpoint_load(out, NULL, &r), MTPLX_OK);
    assert_int_equal(r->n_tensors, g->n_tensors);
    t = mtplx_gguf_find_tensor(r, "blk.3.ffn_up.weight");
    assert_memory_equal(t->data, mtplx_gguf_find_tensor(g, "blk.3.ffn_up.weight")->data, t->nbytes);
    assert_int_equal(mtplx_gguf_get(r, "tokenizer.ggml.tokens")->arr_n, 512);
    mtplx_gguf_free(r);
    mtplx_gguf_free(g);
}

static void test_detect(void **state) {
    (void)state;
    assert_string_equal(mtplx_detect_format(STORIES), "llama2c");
    mtplx_gguf *g = NULL;
    assert_int_equal(mtplx_checkpoint_load(STORIES, TOK512, &g), MTPLX_OK);
    mtplx_gguf_free(g);
    const char *junk = tf_path("junk.txt");
    tf_write_str(junk, "hello");
    assert_null(mtplx_detect_format(junk));
    tf_assert_msg(junk, "unknown format", NULL);
    assert_int_not_equal(mtplx_checkpoint_load(junk, NULL, &g), MTPLX_OK);
    assert_null(g);
    assert_null(mtplx_detect_format(tf_path("does-not-exist.bin")));
    tf_assert_msg("does-not-exist.bin", NULL, NULL);
    tf_mkdir(tf_path("emptydir"));
    assert_null(mtplx_detect_format(tf_path("emptydir")));
    tf_assert_msg("emptydir", "config.json", NULL);
}

static void test_broken_copies(void **state) {
    (void)state;
    size_t n, tn;
    uint8_t *bin = tf_read(STORIES, &n);
    uint8_t *tok = tf_read(TOK512, &tn);
    tf_mkdir(tf_path("l2c"));
    const char *tokp = tf_path("l2c/tokenizer.bin");
    tf_write(tokp, tok, tn);
    mtplx_gguf *g = NULL;
    /* truncated at several points, including inside the header */
    size_t cuts[] = {0, 3, 27, 28, 1000, n / 2, n - 4, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        const char *p = tf_path("l2c/cut.bin");
        tf_write(p, bin, cuts[i]);
        assert_int_not_equal(mtplx_llama2c_load(p, tokp, &g), MTPLX_OK);
        assert_null(g);
        tf_assert_msg(p, NULL, NULL);
        if (cuts[i] > 28) tf_assert_msg(p, "truncated", NULL);
    }
    /* trailing bytes */
    uint8_t *big = malloc(n + 4);
    memcpy(big, bin, n);
    memset(big + n, 0, 4);
    const char *p = tf_path("l2c/trailing.bin");
    tf_write(p, big, n + 4);
    assert_int_equal(mtplx_llama2c_load(p, tokp, &g), MTPLX_ERR_FORMAT);
    tf_assert_msg(p, "trailing", NULL);
    free(big);
    /* a garbage header */
    uint8_t *bad = malloc(n);
    memcpy(bad, bin, n);
    int32_t neg = -3;
    memcpy(bad + 8, &neg, 4); /* n_layers */
    p = tf_path("l2c/hdr.bin");
    tf_write(p, bad, n);
    assert_int_equal(mtplx_llama2c_load(p, tokp, &g), MTPLX_ERR_FORMAT);
    tf_assert_msg(p, "n_layers", NULL);
    free(bad);
    /* tokenizer.bin beside it is found; without it: an error */
    p = tf_path("l2c/model.bin");
    tf_write(p, bin, n);
    assert_int_equal(mtplx_llama2c_load(p, NULL, &g), MTPLX_OK);
    mtplx_gguf_free(g);
    g = NULL;
    tf_mkdir(tf_path("l2c_notok"));
    p = tf_path("l2c_notok/model.bin");
    tf_write(p, bin, n);
    assert_int_not_equal(mtplx_llama2c_load(p, NULL, &g), MTPLX_OK);
    assert_null(g);
    tf_assert_msg(p, "tokenizer", NULL);
    /* a tokenizer cut short, or with extra bytes */
    const char *tp = tf_path("l2c/short_tok.bin");
    tf_write(tp, tok, tn - 10);
    assert_int_equal(mtplx_llama2c_load(STORIES, tp, &g), MTPLX_ERR_FORMAT);
    tf_assert_msg(tp, "token", NULL);
    uint8_t *tok2 = malloc(tn + 9);
    memcpy(tok2, tok, tn);
    memset(tok2 + tn, 1, 9);
    tf_write(tp, tok2, tn + 9);
    assert_int_equal(mtplx_llama2c_load(STORIES, tp, &g), MTPLX_ERR_FORMAT);
    tf_assert_msg(tp, "trailing", NULL);
    free(tok2);
    /* tokenizer on its own, counting its entries */
    mtplx_gguf *t = mtplx_gguf_new();
    assert_int_equal(mtplx_llama2c_tokenizer_load(TOK512, 0, t), MTPLX_OK);
    assert_int_equal(mtplx_gguf_get(t, "tokenizer.ggml.tokens")->arr_n, 512);
    mtplx_gguf_free(t);
    free(bin);
    free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories),
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_broken_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
