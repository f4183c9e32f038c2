/* hf.c: a Hugging Face model folder (config.json + safetensors + tokenizer
 * files) loaded as a container with llama.cpp's GGUF key and tensor names,
 * following llama.cpp's convert_hf_to_gguf.py.
 *
 * Keys written ("<arch>" = llama | qwen2 | qwen3):
 *   general.architecture, general.name (the folder's name),
 *   <arch>.context_length, embedding_length, block_count, feed_forward_length,
 *   <arch>.attention.head_count, head_count_kv, key_length, value_length,
 *   <arch>.rope.dimension_count, rope.freq_base, attention.layer_norm_rms_epsilon,
 *   <arch>.vocab_size (when config.json has it),
 *   rope scaling (config "rope_scaling", any type):
 *     <arch>.rope.scaling.type (string: "llama3", "linear", "yarn", ...),
 *     <arch>.rope.scaling.factor (f32),
 *     <arch>.rope.scaling.low_freq_factor, high_freq_factor (f32, llama3),
 *     <arch>.rope.scaling.original_context_length (u32, from
 *       original_max_position_embeddings; llama.cpp's key name),
 *   MTP heads: <arch>.nextn_predict_layers, mtplx.nextn.hidden_first (MiMo),
 *   tokenizer.ggml.bos_token_id / eos_token_id, mtplx.eos_token_ids (int32[]),
 *   tokenizer.huggingface.json, tokenizer.huggingface.config (file texts),
 *   tokenizer.chat_template.
 * The tokenizer itself is left to the tokenizer layer, which reads the JSON.
 * Tensors stay in the shard mappings except llama's q/k, which are permuted
 * into GGUF's interleaved-RoPE row order (owned copies). */
#include "formats/formats.h"
#include "formats/formats_internal.h"
#include "kernels/kernels.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <string.h>

typedef struct hf_cfg {
    const char *dir;
    const char *arch;
    int64_t n_layer, n_embd, n_head, n_head_kv, head_dim;
    bool permute; /* llama: q/k to interleaved RoPE order */
    bool tied;
} hf_cfg;

/* ------------------------------------------------------------------ */
/* config.json                                                         */
/* ------------------------------------------------------------------ */

static mtplx_status load_json(const char *dir, const char *name, bool required, cJSON **out,
                              char **text_out, size_t *len_out) {
    char path[PATH_MAX];
    *out = NULL;
    MTPLX_TRY(mtplx_path_join(path, sizeof path, dir, name));
    if (!mtplx_file_exists(path)) {
        if (required)
            return mtplx_fail(MTPLX_ERR_IO, "%s: missing (an HF model folder needs it)", path);
        return MTPLX_OK;
    }
    char *text;
    size_t len;
    MTPLX_TRY(mtplx_read_file(path, &text, &len));
    cJSON *j = cJSON_ParseWithLength(text, len);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        free(text);
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: not a valid JSON object", path);
    }
    *out = j;
    if (text_out) {
        *text_out = text;
        *len_out = len;
    } else {
        free(text);
    }
    return MTPLX_OK;
}

/* A non-negative integer field; def when missing / null (required: error). */
static mtplx_status cfg_int(const cJSON *root, const char *dir, const char *key, bool required,
                            int64_t def, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) {
        if (required)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s/config.json: %s is missing (expected a "
                              "positive integer)", dir, key);
        *out = def;
        return MTPLX_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e15 ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s/config.json: %s is not a non-negative integer",
                          dir, key);
    *out = (int64_t)v->valuedouble;
    return MTPLX_OK;
}

static double cfg_num(const cJSON *root, const char *key, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static mtplx_status set_arch_u32(mtplx_gguf *g, const hf_cfg *c, const char *suffix, int64_t v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", c->arch, suffix);
    if (v < 0 || v > UINT32_MAX)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s/config.json: value %lld for %s is out of range",
                          c->dir, (long long)v, key);
    return mtplx_gguf_set_u32(g, key, (uint32_t)v);
}

static mtplx_status set_arch_f32(mtplx_gguf *g, const hf_cfg *c, const char *suffix, double v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", c->arch, suffix);
    return mtplx_gguf_set_f32(g, key, (float)v);
}

/* BERT (llama.cpp's "bert" keys): absolute positions, post-LN, GELU. A
 * sequence classifier is a cross-encoder: pooling type rank (4). */
static mtplx_status read_bert_config(const cJSON *cfg, hf_cfg *c, mtplx_gguf *g, const char *a) {
    int64_t n_ff, n_ctx;
    c->arch = "bert";
    MTPLX_TRY(cfg_int(cfg, c->dir, "hidden_size", true, 0, &c->n_embd));
    MTPLX_TRY(cfg_int(cfg, c->dir, "num_hidden_layers", true, 0, &c->n_layer));
    MTPLX_TRY(cfg_int(cfg, c->dir, "num_attention_heads", true, 0, &c->n_head));
    MTPLX_TRY(cfg_int(cfg, c->dir, "intermediate_size", true, 0, &n_ff));
    MTPLX_TRY(cfg_int(cfg, c->dir, "max_position_embeddings", false, 512, &n_ctx));
    c->n_head_kv = c->n_head;
    const cJSON *pe = cJSON_GetObjectItemCaseSensitive(cfg, "position_embedding_type");
    if (cJSON_IsString(pe) && strcmp(pe->valuestring, "absolute"))
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s/config.json: position_embedding_type '%s' "
                          "is not supported (expected absolute)", c->dir, pe->valuestring);
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act");
    bool tanh_gelu = cJSON_IsString(act) && (!strcmp(act->valuestring, "gelu_new") ||
                                             !strcmp(act->valuestring, "gelu_pytorch_tanh"));
    if (cJSON_IsString(act) && !tanh_gelu && strcmp(act->valuestring, "gelu"))
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s/config.json: hidden_act '%s' is not "
                          "supported (expected gelu)", c->dir, act->valuestring);
    MTPLX_TRY(mtplx_gguf_set_str(g, "general.architecture", c->arch));
    MTPLX_TRY(set_arch_u32(g, c, "context_length", n_ctx));
    MTPLX_TRY(set_arch_u32(g, c, "embedding_length", c->n_embd));
    MTPLX_TRY(set_arch_u32(g, c, "block_count", c->n_layer));
    MTPLX_TRY(set_arch_u32(g, c, "feed_forward_length", n_ff));
    MTPLX_TRY(set_arch_u32(g, c, "attention.head_count", c->n_head));
    MTPLX_TRY(set_arch_f32(g, c, "attention.layer_norm_epsilon", cfg_num(cfg, "layer_norm_eps", 1e-12)));
    MTPLX_TRY(mtplx_gguf_set_bool(g, "bert.attention.causal", false));
    if (tanh_gelu) MTPLX_TRY(mtplx_gguf_set_bool(g, "mtplx.bert.gelu_tanh", true));
    if (!strcmp(a, "BertForSequenceClassification")) MTPLX_TRY(set_arch_u32(g, c, "pooling_type", 4));
    return MTPLX_OK;
}

/* sentence-transformers files: modules.json names a Pooling module (its
 * config.json gives the mode) and maybe a Normalize module;
 * config_sentence_transformers.json may hold prompts.query. Written as
 * "<arch>.pooling_type" (llama.cpp: 1 mean, 2 cls, 3 last),
 * mtplx.embed.normalize and mtplx.embed.query_prompt. */
static mtplx_status read_st_config(hf_cfg *c, mtplx_gguf *g) {
    cJSON *mods = NULL, *pc = NULL, *stc = NULL;
    char path[PATH_MAX];
    MTPLX_TRY(mtplx_path_join(path, sizeof path, c->dir, "modules.json"));
    if (!mtplx_file_exists(path)) return MTPLX_OK;
    char *text;
    size_t len;
    MTPLX_TRY(mtplx_read_file(path, &text, &len));
    mods = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsArray(mods)) {
        cJSON_Delete(mods);
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: not a JSON array of modules", path);
    }
    mtplx_status st = MTPLX_OK;
    bool normalize = false;
    int pooling = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, mods) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(it, "type");
        const cJSON *pa = cJSON_GetObjectItemCaseSensitive(it, "path");
        if (!cJSON_IsString(ty)) continue;
        if (strstr(ty->valuestring, "Normalize")) normalize = true;
        if (!strstr(ty->valuestring, "Pooling") || !cJSON_IsString(pa) || strstr(pa->valuestring, ".."))
            continue;
        char sub[PATH_MAX];
        st = mtplx_path_join(sub, sizeof sub, c->dir, pa->valuestring);
        if (st == MTPLX_OK) st = load_json(sub, "config.json", true, &pc, NULL, NULL);
        if (st != MTPLX_OK) break;
        static const struct { const char *key; int type; } modes[] = {
            {"pooling_mode_cls_token", 2}, {"pooling_mode_mean_tokens", 1}, {"pooling_mode_lasttoken", 3}};
        for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pc, modes[i].key))) pooling = modes[i].type;
        const cJSON *pm = cJSON_GetObjectItemCaseSensitive(pc, "pooling_mode");
        if (cJSON_IsString(pm))
            pooling = !strcmp(pm->valuestring, "cls") ? 2 : !strcmp(pm->valuestring, "lasttoken") ? 3
                    : !strcmp(pm->valuestring, "mean") ? 1 : pooling;
        if (!pooling)
            st = mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s/%s/config.json: no supported pooling mode "
                            "(mean, cls or lasttoken)", c->dir, pa->valuestring);
        cJSON_Delete(pc);
        pc = NULL;
        if (st != MTPLX_OK) break;
    }
    cJSON_Delete(mods);
    MTPLX_TRY(st);
    if (pooling) MTPLX_TRY(set_arch_u32(g, c, "pooling_type", (int64_t)pooling));
    MTPLX_TRY(mtplx_gguf_set_bool(g, "mtplx.embed.normalize", normalize));
    MTPLX_TRY(load_json(c->dir, "config_sentence_transformers.json", false, &stc, NULL, NULL));
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(stc, "prompts");
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(pr, "query");
    if (cJSON_IsString(q)) st = mtplx_gguf_set_str(g, "mtplx.embed.query_prompt", q->valuestring);
    cJSON_Delete(stc);
    return st;
}

static mtplx_status read_config(const cJSON *cfg, hf_cfg *c, mtplx_gguf *g) {
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(cfg, "architectures");
    const char *a = cJSON_IsArray(archs) && cJSON_IsString(archs->child)
                        ? archs->child->valuestring : NULL;
    if (!a)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s/config.json: architectures is missing (expected "
                          "e.g. [\"LlamaForCausalLM\"])", c->dir);
    c->permute = false;
    if (!strcmp(a, "BertModel") || !strcmp(a, "BertForSequenceClassification"))
        return read_bert_config(cfg, c, g, a);
    if (!strcmp(a, "LlamaForCausalLM")) {
        c->arch = "llama";
        c->permute = true;
    } else if (!strcmp(a, "Qwen2ForCausalLM") || !strcmp(a, "MiMoForCausalLM")) {
        c->arch = "qwen2"; /* MiMo is Qwen2 plus MTP layers */
    } else if (!strcmp(a, "Qwen3ForCausalLM") || !strcmp(a, "Qwen3Model")) { /* Model: embedders */
        c->arch = "qwen3";
    } else {
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s/config.json: architectures: '%s' is not "
                          "supported (expected LlamaForCausalLM, Qwen2ForCausalLM, "
                          "Qwen3ForCausalLM, Qwen3Model, MiMoForCausalLM, BertModel or "
                          "BertForSequenceClassification)", c->dir, a);
    }
    int64_t n_ff, n_ctx, n_vocab;
    MTPLX_TRY(cfg_int(cfg, c->dir, "hidden_size", true, 0, &c->n_embd));
    MTPLX_TRY(cfg_int(cfg, c->dir, "num_hidden_layers", true, 0, &c->n_layer));
    MTPLX_TRY(cfg_int(cfg, c->dir, "num_attention_heads", true, 0, &c->n_head));
    MTPLX_TRY(cfg_int(cfg, c->dir, "intermediate_size", true, 0, &n_ff));
    MTPLX_TRY(cfg_int(cfg, c->dir, "num_key_value_heads", false, c->n_head, &c->n_head_kv));
    MTPLX_TRY(cfg_int(cfg, c->dir, "max_position_embeddings", false, 0, &n_ctx));
    MTPLX_TRY(cfg_int(cfg, c->dir, "vocab_size", false, 0, &n_vocab));
    if (c->n_embd <= 0 || c->n_layer <= 0 || c->n_head <= 0 || c->n_head_kv <= 0 || n_ff <= 0)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s/config.json: hidden_size, num_hidden_layers, "
                          "num_attention_heads, num_key_value_heads and intermediate_size must be "
                          "positive", c->dir);
    if (c->n_head % c->n_head_kv)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s/config.json: num_attention_heads %lld is not a "
                          "multiple of num_key_value_heads %lld", c->dir, (long long)c->n_head,
                          (long long)c->n_head_kv);
    if (c->n_embd % c->n_head && !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(cfg, "head_dim")))
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s/config.json: hidden_size %lld is not a multiple "
                          "of num_attention_heads %lld and head_dim is not given", c->dir,
                          (long long)c->n_embd, (long long)c->n_head);
    MTPLX_TRY(cfg_int(cfg, c->dir, "head_dim", false, c->n_embd / c->n_head, &c->head_dim));
    if (c->head_dim <= 0)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s/config.json: head_dim must be positive", c->dir);
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings");
    c->tied = cJSON_IsTrue(tie); /* LlamaConfig / Qwen2Config / Qwen3Config default: false */

    MTPLX_TRY(mtplx_gguf_set_str(g, "general.architecture", c->arch));
    if (n_ctx > 0) MTPLX_TRY(set_arch_u32(g, c, "context_length", n_ctx));
    MTPLX_TRY(set_arch_u32(g, c, "embedding_length", c->n_embd));
    MTPLX_TRY(set_arch_u32(g, c, "block_count", c->n_layer));
    MTPLX_TRY(set_arch_u32(g, c, "feed_forward_length", n_ff));
    MTPLX_TRY(set_arch_u32(g, c, "attention.head_count", c->n_head));
    MTPLX_TRY(set_arch_u32(g, c, "attention.head_count_kv", c->n_head_kv));
    MTPLX_TRY(set_arch_u32(g, c, "attention.key_length", c->head_dim));
    MTPLX_TRY(set_arch_u32(g, c, "attention.value_length", c->head_dim));
    MTPLX_TRY(set_arch_u32(g, c, "rope.dimension_count", c->head_dim));
    /* transformers 5 writes rope_parameters {rope_theta, rope_type, ...} in
     * place of rope_theta / rope_scaling; "default" means no scaling */
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(cfg, "rope_parameters");
    double theta = cfg_num(cfg, "rope_theta", cJSON_IsObject(rp) ? cfg_num(rp, "rope_theta", 10000.0) : 10000.0);
    MTPLX_TRY(set_arch_f32(g, c, "rope.freq_base", theta));
    MTPLX_TRY(set_arch_f32(g, c, "attention.layer_norm_rms_epsilon",
                           cfg_num(cfg, "rms_norm_eps", 1e-6)));
    if (n_vocab > 0) MTPLX_TRY(set_arch_u32(g, c, "vocab_size", n_vocab));

    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    if (!cJSON_IsObject(rs) && cJSON_IsObject(rp)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
        if (cJSON_IsString(t) && strcmp(t->valuestring, "default")) rs = rp;
    }
    if (cJSON_IsObject(rs)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
        if (!cJSON_IsString(t)) t = cJSON_GetObjectItemCaseSensitive(rs, "type");
        if (!cJSON_IsString(t))
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s/config.json: rope_scaling has no rope_type / "
                              "type string", c->dir);
        char key[128];
        snprintf(key, sizeof key, "%s.rope.scaling.type", c->arch);
        MTPLX_TRY(mtplx_gguf_set_str(g, key, t->valuestring));
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(rs, "factor")))
            MTPLX_TRY(set_arch_f32(g, c, "rope.scaling.factor", cfg_num(rs, "factor", 1)));
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(rs, "low_freq_factor")))
            MTPLX_TRY(set_arch_f32(g, c, "rope.scaling.low_freq_factor",
                                   cfg_num(rs, "low_freq_factor", 1)));
        if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(rs, "high_freq_factor")))
            MTPLX_TRY(set_arch_f32(g, c, "rope.scaling.high_freq_factor",
                                   cfg_num(rs, "high_freq_factor", 4)));
        int64_t orig;
        MTPLX_TRY(cfg_int(rs, c->dir, "original_max_position_embeddings", false, 0, &orig));
        if (orig > 0) MTPLX_TRY(set_arch_u32(g, c, "rope.scaling.original_context_length", orig));
        if (!strcmp(t->valuestring, "llama3") &&
            (!mtplx_gguf_get(g, "llama.rope.scaling.factor") || orig <= 0) &&
            !strcmp(c->arch, "llama"))
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s/config.json: rope_scaling of type llama3 "
                              "needs factor and original_max_position_embeddings", c->dir);
    }
    return MTPLX_OK;
}

/* ------------------------------------------------------------------ */
/* tensor names                                                        */
/* ------------------------------------------------------------------ */

static const struct { const char *hf, *gguf; } block_map[] = {
    {"self_attn.q_proj", "attn_q"},          {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"},          {"self_attn.o_proj", "attn_output"},
    {"self_attn.q_norm", "attn_q_norm"},     {"self_attn.k_norm", "attn_k_norm"},
    {"input_layernorm", "attn_norm"},        {"post_attention_layernorm", "ffn_norm"},
    {"mlp.gate_proj", "ffn_gate"},           {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},
    /* DeepSeek-V3 / GLM MTP layers (model.layers.N, N >= num_hidden_layers) */
    {"enorm", "nextn.enorm"},                {"hnorm", "nextn.hnorm"},
    {"eh_proj", "nextn.eh_proj"},            {"shared_head.norm", "nextn.shared_head_norm"},
    {"shared_head.head", "nextn.shared_head_head"}, {"embed_tokens", "nextn.embed_tokens"},
    /* MiMo (model.mtp_layers.i) */
    {"token_layernorm", "nextn.enorm"},      {"hidden_layernorm", "nextn.hnorm"},
    {"input_proj", "nextn.eh_proj"},         {"final_layernorm", "nextn.shared_head_norm"},
};

/* "module.param" -> "blk.B.<gguf module>.param"; false if unknown. */
static bool map_block(const char *suffix, int64_t blk, char *out, size_t cap) {
    const char *dot = strrchr(suffix, '.');
    if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias"))) return false;
    size_t mlen = (size_t)(dot - suffix);
    for (size_t i = 0; i < sizeof block_map / sizeof block_map[0]; i++)
        if (strlen(block_map[i].hf) == mlen && !strncmp(suffix, block_map[i].hf, mlen)) {
            int n = snprintf(out, cap, "blk.%lld.%s%s", (long long)blk, block_map[i].gguf, dot);
            return n > 0 && (size_t)n < cap;
        }
    return false;
}

/* Parse "<prefix><int>." at the start of s; returns the rest or NULL. */
static const char *parse_index(const char *s, const char *prefix, int64_t *idx) {
    size_t pl = strlen(prefix);
    if (strncmp(s, prefix, pl)) return NULL;
    s += pl;
    if (*s < '0' || *s > '9') return NULL;
    int64_t v = 0;
    while (*s >= '0' && *s <= '9' && v < 1000000) v = v * 10 + (*s++ - '0');
    if (*s != '.') return NULL;
    *idx = v;
    return s + 1;
}

typedef enum { MAP_OK, MAP_SKIP, MAP_UNKNOWN } map_result;

/* BERT names (with or without the "bert." prefix of task models) as
 * llama.cpp's converter writes them. */
static map_result map_bert(const char *hf, char *out, size_t cap) {
    static const struct { const char *hf, *gguf; } top[] = {
        {"embeddings.word_embeddings", "token_embd"},
        {"embeddings.position_embeddings", "position_embd"},
        {"embeddings.token_type_embeddings", "token_types"},
        {"embeddings.LayerNorm", "token_embd_norm"},
        {"pooler.dense", "cls"},
        {"classifier", "cls.output"},
    };
    static const struct { const char *hf, *gguf; } blk[] = {
        {"attention.self.query", "attn_q"},  {"attention.self.key", "attn_k"},
        {"attention.self.value", "attn_v"},  {"attention.output.dense", "attn_output"},
        {"attention.output.LayerNorm", "attn_output_norm"},
        {"intermediate.dense", "ffn_up"},    {"output.dense", "ffn_down"},
        {"output.LayerNorm", "layer_output_norm"},
    };
    if (!strncmp(hf, "bert.", 5)) hf += 5;
    if (!strcmp(hf, "embeddings.position_ids") || !strncmp(hf, "cls.", 4)) return MAP_SKIP;
    const char *dot = strrchr(hf, '.');
    if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias"))) return MAP_UNKNOWN;
    size_t mlen = (size_t)(dot - hf);
    for (size_t i = 0; i < sizeof top / sizeof *top; i++)
        if (strlen(top[i].hf) == mlen && !strncmp(hf, top[i].hf, mlen))
            return snprintf(out, cap, "%s%s", top[i].gguf, dot) < (int)cap ? MAP_OK : MAP_UNKNOWN;
    static const char pre[] = "encoder.layer.";
    if (strncmp(hf, pre, sizeof pre - 1)) return MAP_UNKNOWN;
    char *end;
    long b = strtol(hf + sizeof pre - 1, &end, 10);
    if (end == hf + sizeof pre - 1 || *end != '.' || b < 0 || b > 100000) return MAP_UNKNOWN;
    const char *rest = end + 1;
    size_t rlen = (size_t)(dot - rest);
    for (size_t i = 0; i < sizeof blk / sizeof *blk; i++)
        if (strlen(blk[i].hf) == rlen && !strncmp(rest, blk[i].hf, rlen))
            return snprintf(out, cap, "blk.%ld.%s%s", b, blk[i].gguf, dot) < (int)cap ? MAP_OK
                                                                                    : MAP_UNKNOWN;
    return MAP_UNKNOWN;
}

/* HF name -> GGUF name; *mtp_head = MTP head index or -1; *mimo for MiMo names. */
static map_result map_name(const hf_cfg *c, const char *hf, char *out, size_t cap,
                           int64_t *mtp_head, bool *mimo) {
    int64_t idx;
    const char *rest;
    *mtp_head = -1;
    if (!strcmp(c->arch, "bert")) return map_bert(hf, out, cap);
    /* a bare Qwen3Model / sentence-transformers save has no "model." prefix */
    char pfx[256];
    if ((!strncmp(hf, "layers.", 7) || !strcmp(hf, "embed_tokens.weight") ||
         !strcmp(hf, "norm.weight")) && snprintf(pfx, sizeof pfx, "model.%s", hf) < (int)sizeof pfx)
        hf = pfx;
    static const char inv_freq[] = ".rotary_emb.inv_freq"; /* a buffer, not a weight */
    size_t len = strlen(hf), il = sizeof inv_freq - 1;
    if (len > il && !strcmp(hf + len - il, inv_freq)) return MAP_SKIP;
    if (!strcmp(hf, "model.embed_tokens.weight")) return snprintf(out, cap, "token_embd.weight"), MAP_OK;
    if (!strcmp(hf, "model.norm.weight")) return snprintf(out, cap, "output_norm.weight"), MAP_OK;
    if (!strcmp(hf, "lm_head.weight")) {
        if (c->tied) return MAP_SKIP; /* tied: the model uses token_embd */
        return snprintf(out, cap, "output.weight"), MAP_OK;
    }
    if ((rest = parse_index(hf, "model.layers.", &idx))) {
        if (idx >= c->n_layer) *mtp_head = idx - c->n_layer; /* DeepSeek / GLM MTP */
        return map_block(rest, idx, out, cap) ? MAP_OK : MAP_UNKNOWN;
    }
    if ((rest = parse_index(hf, "model.mtp_layers.", &idx))) { /* MiMo */
        *mtp_head = idx;
        *mimo = true;
        return map_block(rest, c->n_layer + idx, out, cap) ? MAP_OK : MAP_UNKNOWN;
    }
    if ((rest = parse_index(hf, "mtp.layers.", &idx))) { /* Qwen3-Next */
        *mtp_head = idx;
        return map_block(rest, c->n_layer + idx, out, cap) ? MAP_OK : MAP_UNKNOWN;
    }
    static const struct { const char *hf, *gguf; } qnext[] = {
        {"mtp.fc.weight", "nextn.eh_proj.weight"},
        {"mtp.pre_fc_norm_embedding.weight", "nextn.enorm.weight"},
        {"mtp.pre_fc_norm_hidden.weight", "nextn.hnorm.weight"},
        {"mtp.norm.weight", "nextn.shared_head_norm.weight"},
    };
    for (size_t i = 0; i < sizeof qnext / sizeof qnext[0]; i++)
        if (!strcmp(hf, qnext[i].hf)) {
            *mtp_head = 0;
            snprintf(out, cap, "blk.%lld.%s", (long long)c->n_layer, qnext[i].gguf);
            return MAP_OK;
        }
    return MAP_UNKNOWN;
}

/* llama.cpp LlamaModel.permute: rows reshaped (n_head, 2, rows/n_head/2) and
 * the last two axes swapped, so each head's two RoPE halves interleave:
 * new row h*hd + 2*i + j = old row h*hd + j*(hd/2) + i. */
static mtplx_status permute_rows(const hf_cfg *c, const char *name, mtplx_gguf_tensor *t,
                                 int64_t n_head, void **out) {
    int64_t rows = t->n_dims == 1 ? t->ne[0] : t->ne[1];
    if (t->n_dims > 2 || rows % (2 * n_head))
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': %lld rows cannot be split into %lld "
                          "heads of two RoPE halves", c->dir, name, (long long)rows,
                          (long long)n_head);
    size_t row_bytes = t->nbytes / (size_t)rows;
    int64_t hd = rows / n_head, half = hd / 2;
    uint8_t *dst = malloc(t->nbytes ? t->nbytes : 1);
    if (!dst) return mtplx_fail(MTPLX_ERR_NOMEM, "%s: out of memory permuting '%s'", c->dir, name);
    const uint8_t *src = t->data;
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t i = 0; i < half; i++)
            for (int64_t j = 0; j < 2; j++)
                memcpy(dst + (size_t)(h * hd + 2 * i + j) * row_bytes,
                       src + (size_t)(h * hd + j * half + i) * row_bytes, row_bytes);
    *out = dst;
    return MTPLX_OK;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* Sort key: token_embd, blk.0 .. blk.N, output_norm, output, then by name. */
static int64_t tensor_rank(const char *n) {
    if (!strncmp(n, "token_embd.", 11)) return -1;
    if (!strncmp(n, "blk.", 4)) return strtoll(n + 4, NULL, 10);
    if (!strncmp(n, "output_norm.", 12)) return INT64_MAX - 1;
    return INT64_MAX;
}
static int tensor_cmp(const void *a, const void *b) {
    const mtplx_gguf_tensor *x = a, *y = b;
    int64_t rx = tensor_rank(x->name), ry = tensor_rank(y->name);
    if (rx != ry) return rx < ry ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Rename raw (HF names) into g, permuting where needed; takes raw's data and maps. */
static mtplx_status map_tensors(const hf_cfg *c, mtplx_gguf *raw, mtplx_gguf *g) {
    int64_t n_heads = 0;
    bool mimo = false;
    char name[256];
    for (int64_t i = 0; i < raw->n_tensors; i++) {
        mtplx_gguf_tensor *t = &raw->tensors[i];
        int64_t head;
        map_result r = map_name(c, t->name, name, sizeof name, &head, &mimo);
        if (r == MAP_SKIP) continue;
        if (r == MAP_UNKNOWN)
            return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: tensor '%s' has no GGUF name for "
                              "architecture %s", c->dir, t->name, c->arch);
        if (head >= 0 && head + 1 > n_heads) n_heads = head + 1;
        void *data = t->data;
        bool own = t->owned_data;
        bool is_q = ends_with(name, ".attn_q.weight") || ends_with(name, ".attn_q.bias");
        bool is_k = ends_with(name, ".attn_k.weight") || ends_with(name, ".attn_k.bias");
        if (c->permute && (is_q || is_k)) {
            MTPLX_TRY(permute_rows(c, t->name, t, is_q ? c->n_head : c->n_head_kv, &data));
            own = true; /* raw keeps (and frees) its own copy if it had one */
        } else {
            t->owned_data = false; /* g owns it now */
        }
        mtplx_status st = mtplx_gguf_add_tensor(g, name, t->type, t->n_dims, t->ne, data, own);
        if (st != MTPLX_OK) return mtplx_fail_prefix(st, "%s (from '%s')", c->dir, t->name);
    }
    if (n_heads > 1000)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: MTP layer indices imply %lld heads", c->dir,
                          (long long)n_heads);
    qsort(g->tensors, (size_t)g->n_tensors, sizeof *g->tensors, tensor_cmp);
    /* the shard mappings move to g */
    for (int i = 0; i < raw->n_extra_maps; i++) {
        mtplx_mmap m = {raw->extra_maps[i], raw->extra_sizes[i]};
        raw->extra_maps[i] = NULL;
        raw->extra_sizes[i] = 0;
        mtplx_status st = mtplx_gguf_keep_map(g, &m);
        if (st != MTPLX_OK) {
            mtplx_mmap_close(&m);
            return st;
        }
    }
    raw->n_extra_maps = 0;
    if (n_heads > 0) {
        MTPLX_TRY(set_arch_u32(g, c, "block_count", c->n_layer + n_heads));
        MTPLX_TRY(set_arch_u32(g, c, "nextn_predict_layers", n_heads));
        if (mimo) MTPLX_TRY(mtplx_gguf_set_bool(g, "mtplx.nextn.hidden_first", true));
    }
    return MTPLX_OK;
}

/* model.safetensors, or every shard listed in model.safetensors.index.json. */
static mtplx_status load_weights(const hf_cfg *c, mtplx_gguf *raw) {
    char path[PATH_MAX];
    const char *dir = c->dir;
    MTPLX_TRY(mtplx_path_join(path, sizeof path, dir, "model.safetensors"));
    cJSON *idx = NULL;
    mtplx_status st = MTPLX_OK;
    int n_files = 0;
    char **files = NULL;
    if (mtplx_file_exists(path)) {
        MTPLX_TRY(mtplx_safetensors_load(path, raw));
    } else {
        MTPLX_TRY(load_json(dir, "model.safetensors.index.json", false, &idx, NULL, NULL));
        if (!idx) {
            MTPLX_TRY(mtplx_path_join(path, sizeof path, dir, "pytorch_model.bin"));
            if (mtplx_file_exists(path))
                return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: only PyTorch .bin weights; convert "
                                  "them to safetensors first", dir);
            return mtplx_fail(MTPLX_ERR_IO, "%s: no model.safetensors or "
                              "model.safetensors.index.json", dir);
        }
        const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
        if (!cJSON_IsObject(wm))
            st = mtplx_fail(MTPLX_ERR_FORMAT, "%s/model.safetensors.index.json: weight_map is "
                            "missing or not an object", dir);
        int cap = cJSON_GetArraySize(wm);
        files = calloc((size_t)(cap ? cap : 1), sizeof *files);
        if (st == MTPLX_OK && !files) st = mtplx_fail(MTPLX_ERR_NOMEM, "%s: out of memory", dir);
        const cJSON *e;
        cJSON_ArrayForEach(e, wm) {
            if (st != MTPLX_OK) break;
            if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !e->valuestring[0]) {
                st = mtplx_fail(MTPLX_ERR_FORMAT, "%s/model.safetensors.index.json: weight_map "
                                "entry '%s' is not a file name in the folder", dir, e->string);
                break;
            }
            bool seen = false;
            for (int i = 0; i < n_files && !seen; i++) seen = !strcmp(files[i], e->valuestring);
            if (!seen) files[n_files++] = e->valuestring;
        }
        for (int i = 0; i < n_files && st == MTPLX_OK; i++) {
            st = mtplx_path_join(path, sizeof path, dir, files[i]);
            if (st == MTPLX_OK) st = mtplx_safetensors_load(path, raw);
        }
        /* every tensor the index names must be where it says */
        cJSON_ArrayForEach(e, wm) {
            if (st != MTPLX_OK) break;
            if (!mtplx_gguf_find_tensor(raw, e->string))
                st = mtplx_fail(MTPLX_ERR_FORMAT, "%s/model.safetensors.index.json: tensor '%s' "
                                "is not in %s", dir, e->string, e->valuestring);
        }
    }
    free(files);
    cJSON_Delete(idx);
    return st;
}

/* ------------------------------------------------------------------ */
/* generation_config.json, tokenizer files                             */
/* ------------------------------------------------------------------ */

static mtplx_status special_ids(const hf_cfg *c, const cJSON *gen, const cJSON *cfg,
                                mtplx_gguf *g) {
    const cJSON *bos = gen ? cJSON_GetObjectItemCaseSensitive(gen, "bos_token_id") : NULL;
    const cJSON *eos = gen ? cJSON_GetObjectItemCaseSensitive(gen, "eos_token_id") : NULL;
    if (!cJSON_IsNumber(bos)) bos = cJSON_GetObjectItemCaseSensitive(cfg, "bos_token_id");
    if (!cJSON_IsNumber(eos) && !cJSON_IsArray(eos))
        eos = cJSON_GetObjectItemCaseSensitive(cfg, "eos_token_id");
    if (cJSON_IsNumber(bos) && bos->valuedouble >= 0 && bos->valuedouble < 1e9)
        MTPLX_TRY(mtplx_gguf_set_u32(g, "tokenizer.ggml.bos_token_id", (uint32_t)bos->valuedouble));
    int32_t ids[64];
    int n = 0;
    if (cJSON_IsNumber(eos)) {
        if (eos->valuedouble < 0 || eos->valuedouble >= 1e9)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s/generation_config.json: eos_token_id %g is "
                              "not a token id", c->dir, eos->valuedouble);
        ids[n++] = (int32_t)eos->valuedouble;
    }
    else if (cJSON_IsArray(eos)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, eos) {
            if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= 1e9)
                return mtplx_fail(MTPLX_ERR_FORMAT, "%s/generation_config.json: eos_token_id "
                                  "holds a non-id", c->dir);
            if (n < 64) ids[n++] = (int32_t)it->valuedouble;
        }
    }
    for (int i = 0; i < n; i++)
        if (ids[i] < 0)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s/generation_config.json: eos_token_id %d is "
                              "negative", c->dir, ids[i]);
    if (n > 0) {
        MTPLX_TRY(mtplx_gguf_set_u32(g, "tokenizer.ggml.eos_token_id", (uint32_t)ids[0]));
        MTPLX_TRY(mtplx_gguf_set_arr(g, "mtplx.eos_token_ids", GGUF_TYPE_INT32, ids, (uint64_t)n));
    }
    return MTPLX_OK;
}

static mtplx_status tokenizer_files(const hf_cfg *c, mtplx_gguf *g) {
    char path[PATH_MAX];
    char *text;
    size_t len;
    MTPLX_TRY(mtplx_path_join(path, sizeof path, c->dir, "tokenizer.json"));
    if (mtplx_file_exists(path)) {
        MTPLX_TRY(mtplx_read_file(path, &text, &len));
        mtplx_status st = mtplx_gguf_set_strn(g, "tokenizer.huggingface.json", text, len);
        free(text);
        MTPLX_TRY(st);
    }
    cJSON *tc = NULL;
    MTPLX_TRY(load_json(c->dir, "tokenizer_config.json", false, &tc, &text, &len));
    mtplx_status st = MTPLX_OK;
    if (tc) {
        st = mtplx_gguf_set_strn(g, "tokenizer.huggingface.config", text, len);
        free(text);
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
        const char *tmpl = NULL;
        if (cJSON_IsString(ct)) tmpl = ct->valuestring;
        else if (cJSON_IsArray(ct)) { /* [{name, template}, ...]: "default" */
            const cJSON *it;
            cJSON_ArrayForEach(it, ct) {
                const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
                const cJSON *tp = cJSON_GetObjectItemCaseSensitive(it, "template");
                if (cJSON_IsString(nm) && cJSON_IsString(tp) && !strcmp(nm->valuestring, "default"))
                    tmpl = tp->valuestring;
            }
            if (!tmpl)
                st = mtplx_fail(MTPLX_ERR_FORMAT, "%s/tokenizer_config.json: chat_template is a "
                                "list without a template named \"default\"", c->dir);
        }
        if (st == MTPLX_OK && tmpl) st = mtplx_gguf_set_str(g, "tokenizer.chat_template", tmpl);
        cJSON_Delete(tc);
    }
    MTPLX_TRY(st);
    /* newer exports keep the template in its own file */
    if (!mtplx_gguf_get(g, "tokenizer.chat_template")) {
        MTPLX_TRY(mtplx_path_join(path, sizeof path, c->dir, "chat_template.jinja"));
        if (mtplx_file_exists(path)) {
            MTPLX_TRY(mtplx_read_file(path, &text, &len));
            st = mtplx_gguf_set_strn(g, "tokenizer.chat_template", text, len);
            free(text);
        }
    }
    return st;
}

/* ------------------------------------------------------------------ */

static mtplx_status build(hf_cfg *c, mtplx_gguf *g) {
    cJSON *cfg = NULL, *gen = NULL;
    mtplx_gguf *raw = mtplx_gguf_new();
    if (raw) raw->path = mtplx_strdup(c->dir);
    mtplx_status st = raw && raw->path ? MTPLX_OK : mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    if (st == MTPLX_OK) st = load_json(c->dir, "config.json", true, &cfg, NULL, NULL);
    if (st == MTPLX_OK) st = read_config(cfg, c, g);
    if (st == MTPLX_OK) st = read_st_config(c, g); /* embedders: pooling, normalize */
    if (st == MTPLX_OK) {
        /* general.name: the folder's own name */
        const char *d = c->dir;
        size_t n = strlen(d);
        while (n > 1 && d[n - 1] == '/') n--;
        size_t b = n;
        while (b > 0 && d[b - 1] != '/') b--;
        st = mtplx_gguf_set_strn(g, "general.name", d + b, n - b);
    }
    if (st == MTPLX_OK) st = load_json(c->dir, "generation_config.json", false, &gen, NULL, NULL);
    if (st == MTPLX_OK) st = special_ids(c, gen, cfg, g);
    if (st == MTPLX_OK) st = tokenizer_files(c, g);
    if (st == MTPLX_OK) st = load_weights(c, raw);
    if (st == MTPLX_OK) st = map_tensors(c, raw, g);
    mtplx_gguf_free(raw);
    cJSON_Delete(cfg);
    cJSON_Delete(gen);
    return st;
}

mtplx_status mtplx_hf_load(const char *dir, mtplx_gguf **out) {
    *out = NULL;
    if (!mtplx_is_dir(dir))
        return mtplx_fail(MTPLX_ERR_IO, "%s: not a folder (an HF model is a folder with "
                          "config.json)", dir);
    mtplx_gguf *g = mtplx_gguf_new();
    if (!g || !(g->path = mtplx_strdup(dir))) {
        mtplx_gguf_free(g);
        return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    }
    hf_cfg c = {.dir = dir};
    mtplx_status st = build(&c, g);
    if (st != MTPLX_OK) {
        mtplx_gguf_free(g);
        return st;
    }
    *out = g;
    return MTPLX_OK;
}
