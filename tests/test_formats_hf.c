/* test_formats_hf.c: HF folders written by the test (config.json,
 * model.safetensors or shards, generation_config.json, tokenizer files) are
 * loaded and checked: GGUF keys, tensor names and shapes (ne reversed), the
 * llama q/k RoPE permutation against a naive reshape/swapaxes, no permutation
 * for Qwen, tied embeddings, the three MTP head layouts, and bad folders. */
#include "test_formats_util.h"

#include <math.h>

enum { EMBD = 16, HEADS = 4, KV = 2, HD = 4, FF = 24, VOCAB = 10, LAYERS = 2 };

/* A growing list of F32 tensors whose values are id * 1000 + index. */
typedef struct tlist {
    tf_st t[128];
    float *bufs[128];
    char names[128][96];
    int n;
} tlist;

static float *tl_add(tlist *l, const char *name, int rank, int64_t s0, int64_t s1) {
    int i = l->n++;
    int64_t n = s0 * (rank > 1 ? s1 : 1);
    float *d = malloc((size_t)n * sizeof *d);
    for (int64_t k = 0; k < n; k++) d[k] = (float)(i * 1000 + k);
    snprintf(l->names[i], sizeof l->names[i], "%s", name);
    l->t[i] = (tf_st){l->names[i], "F32", rank, {s0, s1}, d, (size_t)n * sizeof *d};
    l->bufs[i] = d;
    return d;
}

static void tl_free(tlist *l) {
    for (int i = 0; i < l->n; i++) free(l->bufs[i]);
    l->n = 0;
}

static const float *tl_find(const tlist *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->names[i], name)) return l->bufs[i];
    fail_msg("no source tensor %s", name);
    return NULL;
}

/* One decoder layer under prefix ("model.layers.0." ...). */
static void add_layer(tlist *l, const char *prefix, bool qwen3, bool bias) {
    char n[96];
#define T(suffix, rank, a, b)                                                                      \
    do {                                                                                           \
        snprintf(n, sizeof n, "%s%s", prefix, suffix);                                             \
        tl_add(l, n, rank, a, b);                                                                  \
    } while (0)
    T("self_attn.q_proj.weight", 2, HEADS * HD, EMBD);
    T("self_attn.k_proj.weight", 2, KV * HD, EMBD);
    T("self_attn.v_proj.weight", 2, KV * HD, EMBD);
    T("self_attn.o_proj.weight", 2, EMBD, HEADS * HD);
    if (bias) {
        T("self_attn.q_proj.bias", 1, HEADS * HD, 1);
        T("self_attn.k_proj.bias", 1, KV * HD, 1);
        T("self_attn.v_proj.bias", 1, KV * HD, 1);
    }
    if (qwen3) {
        T("self_attn.q_norm.weight", 1, HD, 1);
        T("self_attn.k_norm.weight", 1, HD, 1);
    }
    T("input_layernorm.weight", 1, EMBD, 1);
    T("post_attention_layernorm.weight", 1, EMBD, 1);
    T("mlp.gate_proj.weight", 2, FF, EMBD);
    T("mlp.up_proj.weight", 2, FF, EMBD);
    T("mlp.down_proj.weight", 2, EMBD, FF);
#undef T
}

static void write_config(const char *dir, const char *arch, const char *extra) {
    char p[PATH_MAX], buf[2048];
    snprintf(p, sizeof p, "%s/config.json", dir);
    snprintf(buf, sizeof buf,
             "{\"architectures\": [\"%s\"], \"hidden_size\": %d, \"num_hidden_layers\": %d, "
             "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"intermediate_size\": %d, "
             "\"vocab_size\": %d, \"max_position_embeddings\": 128, \"rope_theta\": 500000.0, "
             "\"rms_norm_eps\": 1e-05, \"bos_token_id\": 7%s}",
             arch, EMBD, LAYERS, HEADS, KV, FF, VOCAB, extra ? extra : "");
    tf_write_str(p, buf);
}

static mtplx_gguf *load_ok(const char *dir) {
    mtplx_gguf *g = NULL;
    if (mtplx_hf_load(dir, &g) != MTPLX_OK) fail_msg("%s", mtplx_last_error());
    return g;
}

static const mtplx_gguf_tensor *need_tensor(const mtplx_gguf *g, const char *name, int64_t ne0,
                                            int64_t ne1) {
    const mtplx_gguf_tensor *t = mtplx_gguf_find_tensor(g, name);
    if (!t) fail_msg("tensor %s missing", name);
    if (t->ne[0] != ne0 || t->ne[1] != ne1)
        fail_msg("%s: ne [%lld, %lld], expected [%lld, %lld]", name, (long long)t->ne[0],
                 (long long)t->ne[1], (long long)ne0, (long long)ne1);
    return t;
}

/* What llama.cpp's permute does, spelled as numpy would:
 * w.reshape(n_head, 2, rows/n_head/2, cols).swapaxes(1, 2).reshape(rows, cols). */
static float *naive_permute(const float *w, int rows, int cols, int n_head) {
    int half = rows / n_head / 2;
    float *a = malloc(sizeof(float) * (size_t)rows * (size_t)cols); /* [n_head][2][half][cols] */
    memcpy(a, w, sizeof(float) * (size_t)rows * (size_t)cols);
    float *b = malloc(sizeof(float) * (size_t)rows * (size_t)cols); /* [n_head][half][2][cols] */
    for (int h = 0; h < n_head; h++)
        for (int two = 0; two < 2; two++)
            for (int i = 0; i < half; i++)
                for (int c = 0; c < cols; c++)
                    b[((h * half + i) * 2 + two) * cols + c] = a[((h * 2 + two) * half + i) * cols + c];
    free(a);
    return b;
}

static void test_llama(void **state) {
    (void)state;
    const char *dir = tf_path("TinyLlama-test");
    tf_mkdir(dir);
    write_config(dir, "LlamaForCausalLM",
                 ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                 "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                 "\"original_max_position_embeddings\": 64}, \"attention_bias\": true");
    tlist l = {0};
    tl_add(&l, "model.embed_tokens.weight", 2, VOCAB, EMBD);
    for (int i = 0; i < LAYERS; i++) {
        char pre[64];
        snprintf(pre, sizeof pre, "model.layers.%d.", i);
        add_layer(&l, pre, false, true);
    }
    tl_add(&l, "model.layers.0.self_attn.rotary_emb.inv_freq", 1, HD / 2, 1);
    tl_add(&l, "model.norm.weight", 1, EMBD, 1);
    tl_add(&l, "lm_head.weight", 2, VOCAB, EMBD);
    /* one BF16 and one F16 tensor: kept as they are */
    uint16_t half_data[EMBD];
    for (int i = 0; i < EMBD; i++) half_data[i] = (uint16_t)(0x3f80 + i);
    for (int i = 0; i < l.n; i++)
        if (!strcmp(l.names[i], "model.layers.1.input_layernorm.weight")) {
            l.t[i].dtype = "BF16";
            l.t[i].data = half_data;
            l.t[i].nbytes = sizeof half_data;
        }
    tf_write_safetensors(tf_path("TinyLlama-test/model.safetensors"), l.t, l.n);
    tf_write_str(tf_path("TinyLlama-test/generation_config.json"),
                 "{\"bos_token_id\": 1, \"eos_token_id\": [2, 5]}");
    const char *tokjson = "{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\"}}";
    tf_write_str(tf_path("TinyLlama-test/tokenizer.json"), tokjson);
    tf_write_str(tf_path("TinyLlama-test/tokenizer_config.json"),
                 "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, "
                 "{\"name\": \"default\", \"template\": \"{{ messages }}\"}]}");

    assert_string_equal(mtplx_detect_format(dir), "hf");
    mtplx_gguf *g = load_ok(dir);
    assert_string_equal(mtplx_gguf_get_str(g, "general.architecture"), "llama");
    assert_string_equal(mtplx_gguf_get_str(g, "general.name"), "TinyLlama-test");
    assert_int_equal(mtplx_gguf_get_int(g, "llama.context_length", 0), 128);
    assert_int_equal(mtplx_gguf_get_int(g, "llama.embedding_length", 0), EMBD);
    assert_int_equal(mtplx_gguf_get_int(g, "llama.block_count", 0), LAYERS);
    assert_int_equal(mtplx_gguf_get_int(g, "llama.feed_forward_length", 0), FF);
    assert_int_equal(mtplx_gguf_get_int(g, "llama.attention.head_count", 0), HEADS);
    assert_int_equal(mtplx_gguf_get_int(g, "llama.attention.head_count_kv", 0), KV);
    assert_int_equal(mtplx_gguf_get_int(g, "llama.attention.key_length", 0), HD);
    assert_int_equal(mtplx_gguf_get_int(g, "llama.attention.value_length", 0), HD);
    assert_true(mtplx_gguf_get_float(g, "llama.rope.freq_base", 0) == 500000.0);
    assert_true(fabs(mtplx_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", 0) - 1e-5) <
                1e-10);
    assert_string_equal(mtplx_gguf_get_str(g, "llama.rope.scaling.type"), "llama3");
    assert_true(mtplx_gguf_get_float(g, "llama.rope.scaling.factor", 0) == 8.0);
    assert_true(mtplx_gguf_get_float(g, "llama.rope.scaling.low_freq_factor", 0) == 1.0);
    assert_true(mtplx_gguf_get_float(g, "llama.rope.scaling.high_freq_factor", 0) == 4.0);
    assert_int_equal(mtplx_gguf_get_int(g, "llama.rope.scaling.original_context_length", 0), 64);
    assert_int_equal(mtplx_gguf_get_int(g, "tokenizer.ggml.bos_token_id", -1), 1);
    assert_int_equal(mtplx_gguf_get_int(g, "tokenizer.ggml.eos_token_id", -1), 2);
    const mtplx_gguf_kv *eos = mtplx_gguf_get(g, "mtplx.eos_token_ids");
    assert_non_null(eos);
    assert_int_equal(eos->arr_type, GGUF_TYPE_INT32);
    assert_int_equal(eos->arr_n, 2);
    assert_int_equal(((int32_t *)eos->arr_data)[1], 5);
    assert_string_equal(mtplx_gguf_get_str(g, "tokenizer.huggingface.json"), tokjson);
    assert_non_null(strstr(mtplx_gguf_get_str(g, "tokenizer.huggingface.config"), "tool_use"));
    assert_string_equal(mtplx_gguf_get_str(g, "tokenizer.chat_template"), "{{ messages }}");

    /* token_embd, 12 per layer, output_norm, output; inv_freq dropped */
    assert_int_equal(g->n_tensors, 1 + 12 * LAYERS + 2); /* 7 attn + 2 norms + 3 mlp */
    assert_string_equal(g->tensors[0].name, "token_embd.weight");
    need_tensor(g, "token_embd.weight", EMBD, VOCAB);
    need_tensor(g, "output.weight", EMBD, VOCAB);
    need_tensor(g, "output_norm.weight", EMBD, 1);
    need_tensor(g, "blk.1.attn_output.weight", HEADS * HD, EMBD);
    need_tensor(g, "blk.0.ffn_down.weight", FF, EMBD);
    need_tensor(g, "blk.0.ffn_gate.weight", EMBD, FF);
    need_tensor(g, "blk.0.ffn_norm.weight", EMBD, 1);
    const mtplx_gguf_tensor *bt = need_tensor(g, "blk.1.attn_norm.weight", EMBD, 1);
    assert_int_equal(bt->type, MTPLX_TYPE_BF16);
    assert_memory_equal(bt->data, half_data, sizeof half_data);
    assert_null(mtplx_gguf_find_tensor(g, "blk.0.rotary_emb.inv_freq"));

    for (int layer = 0; layer < LAYERS; layer++) {
        char hf[96], gg[96];
        struct { const char *hf, *gg; int rows, heads; bool perm; } cases[] = {
            {"q_proj.weight", "attn_q.weight", HEADS * HD, HEADS, true},
            {"k_proj.weight", "attn_k.weight", KV * HD, KV, true},
            {"q_proj.bias", "attn_q.bias", HEADS * HD, HEADS, true},
            {"k_proj.bias", "attn_k.bias", KV * HD, KV, true},
            {"v_proj.weight", "attn_v.weight", KV * HD, KV, false},
            {"o_proj.weight", "attn_output.weight", EMBD, 0, false},
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            snprintf(hf, sizeof hf, "model.layers.%d.self_attn.%s", layer, cases[c].hf);
            snprintf(gg, sizeof gg, "blk.%d.%s", layer, cases[c].gg);
            bool is_bias = strstr(hf, "bias") != NULL;
            int cols = is_bias ? 1 : (c == 5 ? HEADS * HD : EMBD);
            const float *src = tl_find(&l, hf);
            const mtplx_gguf_tensor *t = need_tensor(g, gg, is_bias ? cases[c].rows : cols,
                                                     is_bias ? 1 : cases[c].rows);
            float *want = cases[c].perm ? naive_permute(src, cases[c].rows, cols, cases[c].heads)
                                        : NULL;
            assert_memory_equal(t->data, want ? want : src, t->nbytes);
            if (want) {
                assert_true(t->owned_data);
                assert_memory_not_equal(t->data, src, t->nbytes); /* it really moved rows */
            }
            free(want);
        }
    }
    /* and it writes and reads back as GGUF */
    const char *out = tf_path("llama.gguf");
    assert_int_equal(mtplx_gguf_write(g, out), MTPLX_OK);
    mtplx_gguf *r = NULL;
    assert_int_equal(mtplx_gguf_open(out, &r), MTPLX_OK);
    assert_int_equal(r->n_tensors, g->n_tensors);
    assert_memory_equal(mtplx_gguf_find_tensor(r, "blk.1.attn_q.weight")->data,
                        mtplx_gguf_find_tensor(g, "blk.1.attn_q.weight")->data,
                        mtplx_gguf_find_tensor(g, "blk.1.attn_q.weight")->nbytes);
    mtplx_gguf_free(r);
    mtplx_gguf_free(g);
    /* a file inside the folder stands for the folder */
    assert_string_equal(mtplx_detect_format(tf_path("TinyLlama-test/config.json")), "hf");
    assert_int_equal(mtplx_checkpoint_load(tf_path("TinyLlama-test/model.safetensors"), NULL, &g),
                     MTPLX_OK);
    mtplx_gguf_free(g);
    tl_free(&l);
}

/* Qwen3, tied, sharded, DeepSeek-style MTP layer model.layers.2.* */
static void test_qwen3_sharded_mtp(void **state) {
    (void)state;
    const char *dir = tf_path("qwen3-mtp");
    tf_mkdir(dir);
    write_config(dir, "Qwen3ForCausalLM", ", \"tie_word_embeddings\": true, \"head_dim\": 4");
    tlist a = {0}, b = {0};
    tl_add(&a, "model.embed_tokens.weight", 2, VOCAB, EMBD);
    add_layer(&a, "model.layers.0.", true, false);
    add_layer(&b, "model.layers.1.", true, false);
    add_layer(&b, "model.layers.2.", true, false); /* the MTP head's block */
    tl_add(&b, "model.layers.2.enorm.weight", 1, EMBD, 1);
    tl_add(&b, "model.layers.2.hnorm.weight", 1, EMBD, 1);
    tl_add(&b, "model.layers.2.eh_proj.weight", 2, EMBD, 2 * EMBD);
    tl_add(&b, "model.layers.2.shared_head.norm.weight", 1, EMBD, 1);
    tl_add(&b, "model.norm.weight", 1, EMBD, 1);
    tl_add(&b, "lm_head.weight", 2, VOCAB, EMBD); /* tied: dropped */
    tf_write_safetensors(tf_path("qwen3-mtp/model-00001-of-00002.safetensors"), a.t, a.n);
    tf_write_safetensors(tf_path("qwen3-mtp/model-00002-of-00002.safetensors"), b.t, b.n);
    char idx[16384];
    size_t n = (size_t)snprintf(idx, sizeof idx, "{\"metadata\": {}, \"weight_map\": {");
    for (int i = 0; i < a.n; i++)
        n += (size_t)snprintf(idx + n, sizeof idx - n, "%s\"%s\": \"model-00001-of-00002.safetensors\"",
                              i ? ", " : "", a.names[i]);
    for (int i = 0; i < b.n; i++)
        n += (size_t)snprintf(idx + n, sizeof idx - n, ", \"%s\": \"model-00002-of-00002.safetensors\"",
                              b.names[i]);
    snprintf(idx + n, sizeof idx - n, "}}");
    tf_write_str(tf_path("qwen3-mtp/model.safetensors.index.json"), idx);
    tf_write_str(tf_path("qwen3-mtp/tokenizer_config.json"), "{\"chat_template\": \"X{{y}}\"}");

    mtplx_gguf *g = load_ok(dir);
    assert_string_equal(mtplx_gguf_get_str(g, "general.architecture"), "qwen3");
    assert_int_equal(mtplx_gguf_get_int(g, "qwen3.block_count", 0), LAYERS + 1);
    assert_int_equal(mtplx_gguf_get_int(g, "qwen3.nextn_predict_layers", 0), 1);
    assert_false(mtplx_gguf_get_bool(g, "mtplx.nextn.hidden_first", false));
    assert_int_equal(mtplx_gguf_get_int(g, "tokenizer.ggml.bos_token_id", -1), 7); /* config.json */
    assert_string_equal(mtplx_gguf_get_str(g, "tokenizer.chat_template"), "X{{y}}");
    assert_null(mtplx_gguf_find_tensor(g, "output.weight"));
    need_tensor(g, "blk.2.nextn.eh_proj.weight", 2 * EMBD, EMBD);
    need_tensor(g, "blk.2.nextn.enorm.weight", EMBD, 1);
    need_tensor(g, "blk.2.nextn.hnorm.weight", EMBD, 1);
    need_tensor(g, "blk.2.nextn.shared_head_norm.weight", EMBD, 1);
    need_tensor(g, "blk.2.attn_q_norm.weight", HD, 1);
    need_tensor(g, "blk.1.attn_k_norm.weight", HD, 1);
    /* qwen: NeoX RoPE, no permutation, data straight from the mapping */
    const mtplx_gguf_tensor *q = need_tensor(g, "blk.1.attn_q.weight", EMBD, HEADS * HD);
    assert_memory_equal(q->data, tl_find(&b, "model.layers.1.self_attn.q_proj.weight"), q->nbytes);
    assert_false(q->owned_data);
    assert_int_equal(g->n_extra_maps, 2);
    /* sorted: token_embd, blk.0.., blk.2.., output_norm */
    assert_string_equal(g->tensors[0].name, "token_embd.weight");
    assert_string_equal(g->tensors[g->n_tensors - 1].name, "output_norm.weight");
    mtplx_gguf_free(g);

    /* the index names a tensor that is not in its shard */
    char *bad = strdup(idx);
    char *p = strstr(bad, "\"model.norm.weight\"");
    memcpy(p, "\"model.nrm0.weight\"", 19);
    tf_write_str(tf_path("qwen3-mtp/model.safetensors.index.json"), bad);
    free(bad);
    assert_int_equal(mtplx_hf_load(dir, &g), MTPLX_ERR_FORMAT);
    tf_assert_msg("model.safetensors.index.json", "model.nrm0.weight", NULL);
    assert_null(g);
    tl_free(&a);
    tl_free(&b);
}

static void test_qwen3next_and_mimo_heads(void **state) {
    (void)state;
    /* Qwen3-Next style mtp.* on a qwen3 trunk */
    const char *dir = tf_path("qnext");
    tf_mkdir(dir);
    write_config(dir, "Qwen3ForCausalLM", NULL);
    tlist l = {0};
    tl_add(&l, "model.embed_tokens.weight", 2, VOCAB, EMBD);
    add_layer(&l, "model.layers.0.", true, false);
    add_layer(&l, "model.layers.1.", true, false);
    tl_add(&l, "model.norm.weight", 1, EMBD, 1);
    tl_add(&l, "lm_head.weight", 2, VOCAB, EMBD);
    tl_add(&l, "mtp.fc.weight", 2, EMBD, 2 * EMBD);
    tl_add(&l, "mtp.pre_fc_norm_embedding.weight", 1, EMBD, 1);
    tl_add(&l, "mtp.pre_fc_norm_hidden.weight", 1, EMBD, 1);
    tl_add(&l, "mtp.norm.weight", 1, EMBD, 1);
    add_layer(&l, "mtp.layers.0.", true, false);
    tf_write_safetensors(tf_path("qnext/model.safetensors"), l.t, l.n);
    mtplx_gguf *g = load_ok(dir);
    assert_int_equal(mtplx_gguf_get_int(g, "qwen3.block_count", 0), 3);
    assert_int_equal(mtplx_gguf_get_int(g, "qwen3.nextn_predict_layers", 0), 1);
    const mtplx_gguf_tensor *t = need_tensor(g, "blk.2.nextn.eh_proj.weight", 2 * EMBD, EMBD);
    assert_memory_equal(t->data, tl_find(&l, "mtp.fc.weight"), t->nbytes);
    need_tensor(g, "blk.2.nextn.enorm.weight", EMBD, 1);
    need_tensor(g, "blk.2.nextn.hnorm.weight", EMBD, 1);
    need_tensor(g, "blk.2.nextn.shared_head_norm.weight", EMBD, 1);
    need_tensor(g, "blk.2.ffn_up.weight", EMBD, FF);
    need_tensor(g, "output.weight", EMBD, VOCAB);
    mtplx_gguf_free(g);
    tl_free(&l);

    /* MiMo: model.mtp_layers.i.* with the [hidden, emb] order flag */
    dir = tf_path("mimo");
    tf_mkdir(dir);
    write_config(dir, "MiMoForCausalLM", NULL);
    tl_add(&l, "model.embed_tokens.weight", 2, VOCAB, EMBD);
    add_layer(&l, "model.layers.0.", false, true);
    add_layer(&l, "model.layers.1.", false, true);
    tl_add(&l, "model.norm.weight", 1, EMBD, 1);
    for (int h = 0; h < 2; h++) {
        char pre[64], n[96];
        snprintf(pre, sizeof pre, "model.mtp_layers.%d.", h);
        add_layer(&l, pre, false, true);
        const char *extra[] = {"token_layernorm", "hidden_layernorm", "final_layernorm"};
        for (int k = 0; k < 3; k++) {
            snprintf(n, sizeof n, "%s%s.weight", pre, extra[k]);
            tl_add(&l, n, 1, EMBD, 1);
        }
        snprintf(n, sizeof n, "%sinput_proj.weight", pre);
        tl_add(&l, n, 2, EMBD, 2 * EMBD);
    }
    tf_write_safetensors(tf_path("mimo/model.safetensors"), l.t, l.n);
    g = load_ok(dir);
    assert_string_equal(mtplx_gguf_get_str(g, "general.architecture"), "qwen2");
    assert_int_equal(mtplx_gguf_get_int(g, "qwen2.block_count", 0), 4);
    assert_int_equal(mtplx_gguf_get_int(g, "qwen2.nextn_predict_layers", 0), 2);
    assert_true(mtplx_gguf_get_bool(g, "mtplx.nextn.hidden_first", false));
    need_tensor(g, "blk.3.nextn.eh_proj.weight", 2 * EMBD, EMBD);
    need_tensor(g, "blk.3.nextn.enorm.weight", EMBD, 1);
    need_tensor(g, "blk.2.nextn.hnorm.weight", EMBD, 1);
    need_tensor(g, "blk.2.nextn.shared_head_norm.weight", EMBD, 1);
    need_tensor(g, "blk.3.attn_q.bias", HEADS * HD, 1);
    mtplx_gguf_free(g);
    tl_free(&l);
}

static void test_bad_folders(void **state) {
    (void)state;
    mtplx_gguf *g = NULL;
    const char *dir = tf_path("bad1");
    tf_mkdir(dir);
    /* no config.json */
    assert_int_not_equal(mtplx_hf_load(dir, &g), MTPLX_OK);
    tf_assert_msg("bad1/config.json", NULL, NULL);
    /* unknown architecture */
    write_config(dir, "GPTNeoXForCausalLM", NULL);
    assert_int_equal(mtplx_hf_load(dir, &g), MTPLX_ERR_UNSUPPORTED);
    tf_assert_msg("bad1/config.json", "architectures", "GPTNeoXForCausalLM");
    /* missing field */
    tf_write_str(tf_path("bad1/config.json"), "{\"architectures\": [\"Qwen3ForCausalLM\"]}");
    assert_int_equal(mtplx_hf_load(dir, &g), MTPLX_ERR_FORMAT);
    tf_assert_msg("bad1/config.json", "hidden_size", NULL);
    tf_write_str(tf_path("bad1/config.json"), "{not json");
    assert_int_equal(mtplx_hf_load(dir, &g), MTPLX_ERR_FORMAT);
    tf_assert_msg("bad1/config.json", "JSON", NULL);
    /* no weights */
    write_config(dir, "Qwen2ForCausalLM", NULL);
    assert_int_not_equal(mtplx_hf_load(dir, &g), MTPLX_OK);
    tf_assert_msg("bad1", "model.safetensors", NULL);
    /* a tensor without a GGUF name */
    tlist l = {0};
    tl_add(&l, "model.embed_tokens.weight", 2, VOCAB, EMBD);
    tl_add(&l, "model.layers.0.mystery.weight", 1, EMBD, 1);
    tf_write_safetensors(tf_path("bad1/model.safetensors"), l.t, l.n);
    assert_int_equal(mtplx_hf_load(dir, &g), MTPLX_ERR_UNSUPPORTED);
    tf_assert_msg("bad1", "model.layers.0.mystery.weight", NULL);
    tl_free(&l);
    /* an unsupported dtype */
    float d[4] = {0};
    tf_write_st_raw(tf_path("bad1/model.safetensors"),
                    "{\"model.norm.weight\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}",
                    d, sizeof d);
    assert_int_equal(mtplx_hf_load(dir, &g), MTPLX_ERR_UNSUPPORTED);
    tf_assert_msg("bad1/model.safetensors", "I64", NULL);
    /* llama q rows that cannot be split into heads */
    write_config(dir, "LlamaForCausalLM", NULL);
    tl_add(&l, "model.layers.0.self_attn.q_proj.weight", 2, 6, EMBD);
    tf_write_safetensors(tf_path("bad1/model.safetensors"), l.t, l.n);
    assert_int_equal(mtplx_hf_load(dir, &g), MTPLX_ERR_FORMAT);
    tf_assert_msg("bad1", "q_proj", "heads");
    tl_free(&l);
    assert_null(g);
    /* not a folder */
    assert_int_not_equal(mtplx_hf_load(tf_path("nope"), &g), MTPLX_OK);
    tf_assert_msg("nope", NULL, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_qwen3_sharded_mtp),
        cmocka_unit_test(test_qwen3next_and_mimo_heads),
        cmocka_unit_test(test_bad_folders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
