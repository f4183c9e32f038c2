/* model.c: build an mtplx_model from a checkpoint container: read the
 * hyper-parameters, find and shape-check every tensor, convert norms and
 * biases to f32, precompute RoPE frequencies, attach the tokenizer.
 * Weights stay where the container put them (usually the file mapping). */
#include "model/model.h"

#include "formats/formats.h"
#include "model/encoder.h"
#include "kernels/kernels.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <string.h>

extern const mtplx_arch mtplx_arch_llama, mtplx_arch_qwen2, mtplx_arch_qwen3, mtplx_arch_bert;

const mtplx_arch *mtplx_arch_find(const char *name) {
    static const mtplx_arch *all[] = {&mtplx_arch_llama, &mtplx_arch_qwen2, &mtplx_arch_qwen3,
                                      &mtplx_arch_bert};
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (!strcmp(all[i]->name, name)) return all[i];
    return NULL;
}

mtplx_model_params mtplx_model_default_params(void) {
    return (mtplx_model_params){.tokenizer_path = NULL, .load_mtp = true, .vocab_only = false,
                                .mtp_q8_0 = true, .mtp_q4_0 = true, .draft_lm_q4_0 = true};
}

static mtplx_status own(mtplx_model *m, void *p) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 64;
        void **nv = realloc(m->owned, (size_t)cap * sizeof *nv);
        if (!nv) {
            free(p);
            return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
        }
        m->owned = nv;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    return MTPLX_OK;
}

static const char *dims_str(const mtplx_gguf_tensor *t, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "[");
    for (int i = 0; i < t->n_dims && n < (int)cap; i++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%lld", i ? ", " : "", (long long)t->ne[i]);
    if (n < (int)cap) snprintf(buf + n, cap - (size_t)n, "]");
    return buf;
}

/* Find a tensor with ne = {ne0, ne1} (ne1 = 1 for vectors). */
static mtplx_status find(const mtplx_model *m, const char *name, int64_t ne0, int64_t ne1,
                         bool required, const mtplx_gguf_tensor **out) {
    *out = NULL;
    const mtplx_gguf_tensor *t = mtplx_gguf_find_tensor(m->g, name);
    if (!t) {
        if (!required) return MTPLX_OK;
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s' is missing", m->path, name);
    }
    int64_t n_rest = 1;
    for (int i = 2; i < t->n_dims; i++) n_rest *= t->ne[i];
    if (t->ne[0] != ne0 || (t->n_dims > 1 ? t->ne[1] : 1) != ne1 || n_rest != 1) {
        char buf[96];
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected [%lld, %lld]",
                          m->path, name, dims_str(t, buf, sizeof buf), (long long)ne0,
                          (long long)ne1);
    }
    *out = t;
    return MTPLX_OK;
}

/* A 1-D float tensor (any float type) as an owned f32 copy. */
static mtplx_status vec_f32(mtplx_model *m, const char *name, int64_t n, bool required,
                            float **out) {
    const mtplx_gguf_tensor *t;
    *out = NULL;
    MTPLX_TRY(find(m, name, n, 1, required, &t));
    if (!t) return MTPLX_OK;
    if (t->type != MTPLX_TYPE_F32 && t->type != MTPLX_TYPE_F16 && t->type != MTPLX_TYPE_BF16)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, expected F32/F16/BF16",
                          m->path, name, mtplx_type_info(t->type) ? mtplx_type_info(t->type)->name : "?");
    float *v = malloc((size_t)n * sizeof(float));
    if (!v) return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    mtplx_dequantize_row(t->type, t->data, v, n);
    MTPLX_TRY(own(m, v));
    *out = v;
    return MTPLX_OK;
}

/* Relayout a matrix for the CPU matmul (kernels.h, prepared weights) into a
 * buffer the model owns. The mapped original stays for row lookups; its
 * pages are read once here and then only for embedding rows, so resident
 * memory is about one copy. MTPLX_NO_PREPARE=1 keeps the plain layout. */
static mtplx_status prepare(mtplx_model *m, mtplx_weight *w) {
    size_t sz = mtplx_weight_prepared_size(w->type, w->m, w->k);
    const char *off = getenv("MTPLX_NO_PREPARE");
    if (!sz || (off && *off && *off != '0')) return MTPLX_OK;
    void *p = mtplx_aligned_alloc(64, sz);
    if (!p) return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory for a prepared weight (%zu bytes)", sz);
    mtplx_weight_prepare(w->type, w->data, w->m, w->k, p);
    MTPLX_TRY(own(m, p));
    w->prep = p;
    return MTPLX_OK;
}

static mtplx_status weight(mtplx_model *m, const char *name, int64_t k, int64_t rows, bool required,
                           mtplx_weight *w) {
    const mtplx_gguf_tensor *t;
    memset(w, 0, sizeof *w);
    MTPLX_TRY(find(m, name, k, rows, required, &t));
    if (!t) return MTPLX_OK;
    const mtplx_type_traits *tt = mtplx_type_info(t->type);
    if (!tt || t->type == MTPLX_TYPE_Q8_K)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: tensor '%s' has unsupported type %d", m->path,
                          name, t->type);
    if (k % tt->block_size)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': row length %lld is not a multiple of %s's block size %lld",
                          m->path, name, (long long)k, tt->name, (long long)tt->block_size);
    *w = (mtplx_weight){.type = t->type, .m = rows, .k = k, .data = t->data};
    return prepare(m, w);
}

mtplx_status mtplx_model_weight(mtplx_model *m, const char *name, int64_t k, int64_t rows,
                                bool required, mtplx_weight *w) {
    return weight(m, name, k, rows, required, w);
}

mtplx_status mtplx_model_vec(mtplx_model *m, const char *name, int64_t n, bool required,
                             float **out) {
    return vec_f32(m, name, n, required, out);
}

static mtplx_status load_layer(mtplx_model *m, int blk, mtplx_layer *L) {
    const mtplx_hparams *hp = &m->hp;
    int64_t e = hp->n_embd, qd = (int64_t)hp->n_head * hp->head_dim,
            kvd = (int64_t)hp->n_head_kv * hp->head_dim, ff = hp->n_ff;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, blk), n)
    MTPLX_TRY(vec_f32(m, NAME("attn_norm.weight"), e, true, &L->attn_norm));
    MTPLX_TRY(weight(m, NAME("attn_q.weight"), e, qd, true, &L->wq));
    MTPLX_TRY(weight(m, NAME("attn_k.weight"), e, kvd, true, &L->wk));
    MTPLX_TRY(weight(m, NAME("attn_v.weight"), e, kvd, true, &L->wv));
    MTPLX_TRY(weight(m, NAME("attn_output.weight"), qd, e, true, &L->wo));
    bool bias = m->arch->qkv_bias;
    MTPLX_TRY(vec_f32(m, NAME("attn_q.bias"), qd, bias, &L->bq));
    MTPLX_TRY(vec_f32(m, NAME("attn_k.bias"), kvd, bias, &L->bk));
    MTPLX_TRY(vec_f32(m, NAME("attn_v.bias"), kvd, bias, &L->bv));
    MTPLX_TRY(vec_f32(m, NAME("attn_q_norm.weight"), hp->head_dim, m->arch->qk_norm, &L->q_norm));
    MTPLX_TRY(vec_f32(m, NAME("attn_k_norm.weight"), hp->head_dim, m->arch->qk_norm, &L->k_norm));
    MTPLX_TRY(vec_f32(m, NAME("ffn_norm.weight"), e, true, &L->ffn_norm));
    MTPLX_TRY(weight(m, NAME("ffn_gate.weight"), e, ff, true, &L->w_gate));
    MTPLX_TRY(weight(m, NAME("ffn_up.weight"), e, ff, true, &L->w_up));
    MTPLX_TRY(weight(m, NAME("ffn_down.weight"), ff, e, true, &L->w_down));
#undef NAME
    return MTPLX_OK;
}

/* A copy of a matrix in another block type (Q8_0, Q4_0), in the prepared
 * layout, replacing it in *w: a Q8_0 head is half the bytes of a BF16 one, a
 * Q4_0 lm_head 0.56 of a Q8_0 one. Only for drafting (mtplx_model_params
 * says when): these weights make the draft distribution q only, and the
 * rejection test is exact for any q, so the output is unchanged; acceptance
 * may not be. A matrix whose rows are already no larger stays as it is:
 * the copy would read no fewer bytes. */
static mtplx_status requant(mtplx_model *m, mtplx_weight *w, int type) {
    size_t src_rs = mtplx_row_size(w->type, w->k), rs = mtplx_row_size(type, w->k);
    if (w->type == type || w->k % QK8_0 || rs >= src_rs) return MTPLX_OK;
    uint8_t *q = mtplx_aligned_alloc(64, rs * (size_t)w->m);
    float *row = malloc((size_t)w->k * sizeof(float));
    if (!q || !row) {
        free(q);
        free(row);
        return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory for a %s draft copy of a %lld x %lld matrix",
                          mtplx_type_info(type)->name, (long long)w->m, (long long)w->k);
    }
    for (int64_t r = 0; r < w->m; r++) {
        mtplx_dequantize_row(w->type, (const uint8_t *)w->data + (size_t)r * src_rs, row, w->k);
        mtplx_quantize_row(type, row, q + (size_t)r * rs, w->k);
    }
    free(row);
    MTPLX_TRY(own(m, q));
    *w = (mtplx_weight){.type = type, .m = w->m, .k = w->k, .data = q};
    return prepare(m, w);
}

/* A set environment variable overrides the parameter either way, 0 or not
 * (for tools without the flag, and for A/B runs). */
static bool env_override(const char *name, bool param) {
    const char *v = getenv(name);
    return v && *v ? *v != '0' : param;
}

/* The head's float matrices as copies of type (Q8_0 at load, Q4_0 for the
 * CPU's draft copy); quantized ones stay as they are. */
static mtplx_status head_requant(mtplx_model *m, mtplx_mtp_head *h, int type) {
    mtplx_weight *ws[] = {&h->eh_proj,      &h->layer.wq,     &h->layer.wk,   &h->layer.wv,
                          &h->layer.wo,     &h->layer.w_gate, &h->layer.w_up, &h->layer.w_down};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++)
        if (!mtplx_type_info(ws[i]->type)->is_quantized) MTPLX_TRY(requant(m, ws[i], type));
    return MTPLX_OK;
}

static mtplx_status load_mtp(mtplx_model *m, int i, mtplx_mtp_head *h) {
    int blk = m->hp.n_layer + i;
    int64_t e = m->hp.n_embd;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.nextn." s, blk), n)
    MTPLX_TRY(vec_f32(m, NAME("enorm.weight"), e, true, &h->enorm));
    MTPLX_TRY(vec_f32(m, NAME("hnorm.weight"), e, true, &h->hnorm));
    MTPLX_TRY(weight(m, NAME("eh_proj.weight"), 2 * e, e, true, &h->eh_proj));
    MTPLX_TRY(vec_f32(m, NAME("shared_head_norm.weight"), e, true, &h->norm));
#undef NAME
    h->hidden_first = mtplx_gguf_get_bool(m->g, "mtplx.nextn.hidden_first", false);
    return load_layer(m, blk, &h->layer);
}

/* RoPE inverse frequencies, with llama3 scaling or a rope_freqs tensor. */
static mtplx_status rope_freqs(mtplx_model *m) {
    int half = m->hp.head_dim / 2;
    m->inv_freq = malloc((size_t)half * sizeof(float));
    if (!m->inv_freq) return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    MTPLX_TRY(own(m, m->inv_freq));
    for (int i = 0; i < half; i++)
        m->inv_freq[i] = (float)(1.0 / pow(m->hp.rope_theta, (2.0 * i) / m->hp.head_dim));
    float *factors = NULL;
    MTPLX_TRY(vec_f32(m, "rope_freqs.weight", half, false, &factors));
    if (factors) {
        for (int i = 0; i < half; i++) m->inv_freq[i] /= factors[i];
        return MTPLX_OK;
    }
    char key[96];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch->name);
    const char *type = mtplx_gguf_get_str(m->g, key);
    if (!type || strcmp(type, "llama3")) return MTPLX_OK;
    double factor = mtplx_gguf_get_arch_float(m->g, "rope.scaling.factor", 8.0);
    double lo = mtplx_gguf_get_arch_float(m->g, "rope.scaling.low_freq_factor", 1.0);
    double hi = mtplx_gguf_get_arch_float(m->g, "rope.scaling.high_freq_factor", 4.0);
    double old = (double)mtplx_gguf_get_arch_int(m->g, "rope.scaling.original_context_length", 8192);
    double lo_wl = old / lo, hi_wl = old / hi;
    for (int i = 0; i < half; i++) {
        double f = m->inv_freq[i], wl = 2 * M_PI / f;
        if (wl < hi_wl) continue;
        if (wl > lo_wl) f /= factor;
        else {
            double s = (old / wl - lo) / (hi - lo);
            f = (1 - s) * f / factor + s * f;
        }
        m->inv_freq[i] = (float)f;
    }
    return MTPLX_OK;
}

static mtplx_status build(mtplx_model *m, const mtplx_model_params *p) {
    const char *arch = mtplx_gguf_get_str(m->g, "general.architecture");
    if (!arch) return mtplx_fail(MTPLX_ERR_FORMAT, "%s: missing key general.architecture", m->path);
    if (!p->vocab_only) {
        m->arch = mtplx_arch_find(arch);
        if (!m->arch)
            return mtplx_fail(MTPLX_ERR_UNSUPPORTED,
                              "%s: unknown architecture '%s' (supported: llama, qwen2, qwen3, bert)",
                              m->path, arch);
    }
    const char *name = mtplx_gguf_get_str(m->g, "general.name");
    snprintf(m->name, sizeof m->name, "%s", name ? name : arch);
    const char *tmpl = mtplx_gguf_get_str(m->g, "tokenizer.chat_template");
    if (tmpl && !(m->chat_template = mtplx_strdup(tmpl)))
        return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    mtplx_status st = mtplx_tokenizer_from_gguf(m->g, &m->tok);
    if (st != MTPLX_OK) return mtplx_fail_prefix(st, "%s: tokenizer", m->path);
    if (p->vocab_only) return MTPLX_OK;
    if (m->arch->encoder) { /* BERT family: arch/bert.c */
        MTPLX_TRY(mtplx_bert_load(m));
        return mtplx_model_embed_setup(m);
    }

    mtplx_hparams *hp = &m->hp;
    int64_t n_blocks = mtplx_gguf_get_arch_int(m->g, "block_count", 0);
    int64_t n_nextn = mtplx_gguf_get_arch_int(m->g, "nextn_predict_layers", 0);
    hp->n_embd = (int32_t)mtplx_gguf_get_arch_int(m->g, "embedding_length", 0);
    hp->n_layer = (int32_t)(n_blocks - n_nextn);
    hp->n_head = (int32_t)mtplx_gguf_get_arch_int(m->g, "attention.head_count", 0);
    hp->n_head_kv = (int32_t)mtplx_gguf_get_arch_int(m->g, "attention.head_count_kv", hp->n_head);
    hp->n_ff = (int32_t)mtplx_gguf_get_arch_int(m->g, "feed_forward_length", 0);
    hp->n_ctx_train = (int32_t)mtplx_gguf_get_arch_int(m->g, "context_length", 2048);
    hp->rope_theta = (float)mtplx_gguf_get_arch_float(m->g, "rope.freq_base", 10000.0);
    hp->norm_eps = (float)mtplx_gguf_get_arch_float(m->g, "attention.layer_norm_rms_epsilon", 1e-5);
    hp->head_dim = hp->n_head > 0 ? (int32_t)mtplx_gguf_get_arch_int(m->g, "attention.key_length",
                                                                    hp->n_embd / hp->n_head)
                                  : 0;
    struct { const char *key; int64_t v, lo, hi; } chk[] = {
        {"embedding_length", hp->n_embd, 1, 1 << 16}, {"block_count", hp->n_layer, 1, 1024},
        {"attention.head_count", hp->n_head, 1, 1024}, {"attention.head_count_kv", hp->n_head_kv, 1, 1024},
        {"feed_forward_length", hp->n_ff, 1, 1 << 20}, {"attention.key_length", hp->head_dim, 2, 1024},
        {"nextn_predict_layers", n_nextn, 0, MTPLX_MAX_DRAFT}, {"context_length", hp->n_ctx_train, 1, 1 << 24}};
    for (size_t i = 0; i < sizeof chk / sizeof *chk; i++)
        if (chk[i].v < chk[i].lo || chk[i].v > chk[i].hi)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: %s.%s is %lld, expected %lld..%lld", m->path,
                              arch, chk[i].key, (long long)chk[i].v, (long long)chk[i].lo,
                              (long long)chk[i].hi);
    if (hp->n_head % hp->n_head_kv || hp->head_dim % 2)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: %d heads are not a multiple of %d KV heads (or odd head size %d)",
                          m->path, hp->n_head, hp->n_head_kv, hp->head_dim);
    const mtplx_gguf_tensor *emb = mtplx_gguf_find_tensor(m->g, "token_embd.weight");
    if (!emb) return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor 'token_embd.weight' is missing", m->path);
    hp->n_vocab = (int32_t)(emb->n_dims > 1 ? emb->ne[1] : 0);
    MTPLX_TRY(weight(m, "token_embd.weight", hp->n_embd, hp->n_vocab, true, &m->tok_embd));
    if (mtplx_tokenizer_vocab_size(m->tok) > hp->n_vocab)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tokenizer has %d tokens but token_embd.weight only %d rows",
                          m->path, mtplx_tokenizer_vocab_size(m->tok), hp->n_vocab);
    MTPLX_TRY(weight(m, "output.weight", hp->n_embd, hp->n_vocab, false, &m->output));
    m->tied = m->output.data == NULL;
    if (m->tied) m->output = m->tok_embd;
    MTPLX_TRY(vec_f32(m, "output_norm.weight", hp->n_embd, true, &m->output_norm));
    MTPLX_TRY(rope_freqs(m));
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < hp->n_layer; i++) MTPLX_TRY(load_layer(m, i, &m->layers[i]));
    if (p->load_mtp && n_nextn > 0) {
        m->mtp = calloc((size_t)n_nextn, sizeof *m->mtp);
        if (!m->mtp) return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
        bool to_q8 = env_override("MTPLX_MTP_Q8_0", p->mtp_q8_0);
        bool to_q4 = to_q8 && env_override("MTPLX_MTP_Q4_0", p->mtp_q4_0);
        if (to_q4 && !(m->mtp_src = calloc((size_t)n_nextn, sizeof *m->mtp_src)))
            return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
        for (int i = 0; i < n_nextn; i++) {
            MTPLX_TRY(load_mtp(m, i, &m->mtp[i]));
            if (to_q4) m->mtp_src[i] = m->mtp[i]; /* the Q4_0 copies start from these */
            if (to_q8) MTPLX_TRY(head_requant(m, &m->mtp[i], MTPLX_TYPE_Q8_0));
        }
        m->draft_output_wanted = env_override("MTPLX_DRAFT_LM_Q4_0", p->draft_lm_q4_0);
        m->n_mtp = (int32_t)n_nextn;
    }
    return mtplx_model_embed_setup(m); /* embedder / reranker roles (model/encoder.c) */
}

mtplx_status mtplx_model_from_gguf(mtplx_gguf *g, const char *path, const char *format,
                                   const mtplx_model_params *params, mtplx_model **out) {
    *out = NULL;
    mtplx_model_params defp = mtplx_model_default_params();
    if (!params) params = &defp;
    mtplx_model *m = calloc(1, sizeof *m);
    if (!m) {
        mtplx_gguf_free(g);
        return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    }
    m->g = g;
    pthread_mutex_init(&m->draft_lock, NULL);
    m->path = mtplx_strdup(path);
    snprintf(m->format, sizeof m->format, "%s", format);
    mtplx_status st = m->path ? build(m, params) : mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    if (st != MTPLX_OK) {
        mtplx_model_free(m);
        return st;
    }
    *out = m;
    return MTPLX_OK;
}

mtplx_status mtplx_model_load(const char *path, const mtplx_model_params *params,
                              mtplx_model **out) {
    *out = NULL;
    if (!path) return mtplx_fail(MTPLX_ERR_ARG, "no model path given");
    const char *fmt = mtplx_detect_format(path);
    if (!fmt) return MTPLX_ERR_IO;
    mtplx_gguf *g = NULL;
    MTPLX_TRY(mtplx_checkpoint_load(path, params ? params->tokenizer_path : NULL, &g));
    return mtplx_model_from_gguf(g, path, fmt, params, out);
}

void mtplx_model_free(mtplx_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->mtp);
    free(m->mtp_src);
    free(m->draft_mtp);
    mtplx_bert_free(m->bert);
    mtplx_embed_cfg_free(m->emb);
    free(m->chat_template);
    mtplx_tokenizer_free(m->tok);
    mtplx_gguf_free(m->g);
    free(m->path);
    pthread_mutex_destroy(&m->draft_lock);
    free(m);
}

/* The Q4_0 draft copies of the lm_head and of the heads' matrices are made
 * here, by the first context on the CPU (the only backend that reads them),
 * not at load: a model that runs on a GPU never pays their memory and time.
 * Contexts of one model may be created from several threads (the server),
 * hence the lock. */
mtplx_status mtplx_model_draft_output_prepare(mtplx_model *m) {
    if (m->n_mtp == 0 || (!m->draft_output_wanted && !m->mtp_src)) return MTPLX_OK;
    pthread_mutex_lock(&m->draft_lock);
    mtplx_status st = MTPLX_OK;
    if (m->draft_output_wanted && !m->draft_output.data) {
        mtplx_weight w = m->output;
        st = requant(m, &w, MTPLX_TYPE_Q4_0);
        if (st == MTPLX_OK) m->draft_output = w;
    }
    if (st == MTPLX_OK && m->mtp_src && !m->draft_mtp) {
        mtplx_mtp_head *d = calloc((size_t)m->n_mtp, sizeof *d);
        if (!d) st = mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
        for (int i = 0; st == MTPLX_OK && i < m->n_mtp; i++) {
            d[i] = m->mtp_src[i];
            st = head_requant(m, &d[i], MTPLX_TYPE_Q4_0);
        }
        if (st == MTPLX_OK) m->draft_mtp = d;
        else free(d);
    }
    pthread_mutex_unlock(&m->draft_lock);
    return st;
}

const mtplx_tokenizer *mtplx_model_tokenizer(const mtplx_model *m) { return m->tok; }
const char *mtplx_model_chat_template(const mtplx_model *m) { return m->chat_template; }

static int64_t weight_params(const mtplx_weight *w) { return w->data ? w->m * w->k : 0; }

void mtplx_model_get_info(const mtplx_model *m, mtplx_model_info *o) {
    memset(o, 0, sizeof *o);
    const mtplx_hparams *hp = &m->hp;
    snprintf(o->arch, sizeof o->arch, "%s", m->arch ? m->arch->name : "?");
    snprintf(o->name, sizeof o->name, "%s", m->name);
    snprintf(o->format, sizeof o->format, "%s", m->format);
    o->n_vocab = hp->n_vocab;
    o->n_embd = hp->n_embd;
    o->n_layer = hp->n_layer;
    o->n_head = hp->n_head;
    o->n_head_kv = hp->n_head_kv;
    o->head_dim = hp->head_dim;
    o->n_ff = hp->n_ff;
    o->n_ctx_train = hp->n_ctx_train;
    o->rope_theta = hp->rope_theta;
    o->norm_eps = hp->norm_eps;
    o->tied_embeddings = m->tied;
    o->n_mtp = m->n_mtp;
    o->mtp_depth_trained =
        m->n_mtp ? (int32_t)mtplx_gguf_get_int(m->g, "mtplx.nextn.depth_trained", 0) : 0;
    if (o->mtp_depth_trained < 0 || o->mtp_depth_trained > MTPLX_MAX_DRAFT) o->mtp_depth_trained = 0;
    /* Bytes and parameters from the container; MTP = tensors of blocks >= n_layer. */
    uint64_t by_type[MTPLX_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < m->g->n_tensors; i++) {
        const mtplx_gguf_tensor *t = &m->g->tensors[i];
        int64_t n = 1;
        for (int d = 0; d < t->n_dims; d++) n *= t->ne[d];
        int blk = -1;
        if (sscanf(t->name, "blk.%d.", &blk) == 1 && blk >= hp->n_layer) o->n_mtp_params += n;
        else o->n_params += n;
        o->n_bytes += t->nbytes;
        if (t->type >= 0 && t->type < MTPLX_TYPE_COUNT && t->n_dims >= 2) by_type[t->type] += t->nbytes;
    }
    int best = MTPLX_TYPE_F32;
    for (int t = 0; t < MTPLX_TYPE_COUNT; t++)
        if (by_type[t] > by_type[best]) best = t;
    const mtplx_type_traits *tt = mtplx_type_info(best);
    snprintf(o->weight_type, sizeof o->weight_type, "%s", tt ? tt->name : "?");
    (void)weight_params;
}
