/* bert.c: the BERT family as llama.cpp's "bert" GGUF architecture: learned
 * absolute positions, token type embeddings, post-LN LayerNorm with bias,
 * biased q/k/v/output and FFN, GELU; optional pooler (cls) and classifier
 * (cls.output) for cross-encoders. Loads hyper-parameters and tensors only;
 * the forward pass is model/encoder.c.
 * Not here: rotary encoders (nomic-bert, jina-v2 ALiBi), RoBERTa's position
 * offset (XLM-R); those need their own traits. */
#include "model/encoder.h"

#include <string.h>

const mtplx_arch mtplx_arch_bert = {.name = "bert", .encoder = true};

static mtplx_status load_layer(mtplx_model *m, int blk, mtplx_bert_layer *L) {
    int64_t e = m->hp.n_embd, ff = m->hp.n_ff;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, blk), n)
    MTPLX_TRY(mtplx_model_weight(m, NAME("attn_q.weight"), e, e, true, &L->wq));
    MTPLX_TRY(mtplx_model_weight(m, NAME("attn_k.weight"), e, e, true, &L->wk));
    MTPLX_TRY(mtplx_model_weight(m, NAME("attn_v.weight"), e, e, true, &L->wv));
    MTPLX_TRY(mtplx_model_weight(m, NAME("attn_output.weight"), e, e, true, &L->wo));
    MTPLX_TRY(mtplx_model_vec(m, NAME("attn_q.bias"), e, true, &L->bq));
    MTPLX_TRY(mtplx_model_vec(m, NAME("attn_k.bias"), e, true, &L->bk));
    MTPLX_TRY(mtplx_model_vec(m, NAME("attn_v.bias"), e, true, &L->bv));
    MTPLX_TRY(mtplx_model_vec(m, NAME("attn_output.bias"), e, true, &L->bo));
    MTPLX_TRY(mtplx_model_vec(m, NAME("attn_output_norm.weight"), e, true, &L->attn_norm_w));
    MTPLX_TRY(mtplx_model_vec(m, NAME("attn_output_norm.bias"), e, true, &L->attn_norm_b));
    MTPLX_TRY(mtplx_model_weight(m, NAME("ffn_up.weight"), e, ff, true, &L->w_up));
    MTPLX_TRY(mtplx_model_vec(m, NAME("ffn_up.bias"), ff, true, &L->b_up));
    MTPLX_TRY(mtplx_model_weight(m, NAME("ffn_down.weight"), ff, e, true, &L->w_down));
    MTPLX_TRY(mtplx_model_vec(m, NAME("ffn_down.bias"), e, true, &L->b_down));
    MTPLX_TRY(mtplx_model_vec(m, NAME("layer_output_norm.weight"), e, true, &L->out_norm_w));
    MTPLX_TRY(mtplx_model_vec(m, NAME("layer_output_norm.bias"), e, true, &L->out_norm_b));
#undef NAME
    return MTPLX_OK;
}

/* Rows of a 2-D tensor whose first dimension is n_embd (0 if absent). */
static int64_t rows_of(const mtplx_model *m, const char *name) {
    const mtplx_gguf_tensor *t = mtplx_gguf_find_tensor(m->g, name);
    return t && t->n_dims == 2 ? t->ne[1] : 0;
}

mtplx_status mtplx_bert_load(mtplx_model *m) {
    mtplx_hparams *hp = &m->hp;
    hp->n_embd = (int32_t)mtplx_gguf_get_arch_int(m->g, "embedding_length", 0);
    hp->n_layer = (int32_t)mtplx_gguf_get_arch_int(m->g, "block_count", 0);
    hp->n_head = (int32_t)mtplx_gguf_get_arch_int(m->g, "attention.head_count", 0);
    hp->n_head_kv = hp->n_head;
    hp->n_ff = (int32_t)mtplx_gguf_get_arch_int(m->g, "feed_forward_length", 0);
    hp->n_ctx_train = (int32_t)mtplx_gguf_get_arch_int(m->g, "context_length", 512);
    hp->norm_eps = (float)mtplx_gguf_get_arch_float(m->g, "attention.layer_norm_epsilon", 1e-12);
    hp->rope_theta = 0;
    struct { const char *key; int64_t v, lo, hi; } chk[] = {
        {"embedding_length", hp->n_embd, 1, 1 << 16}, {"block_count", hp->n_layer, 1, 1024},
        {"attention.head_count", hp->n_head, 1, 1024}, {"feed_forward_length", hp->n_ff, 1, 1 << 20},
        {"context_length", hp->n_ctx_train, 1, 1 << 20}};
    for (size_t i = 0; i < sizeof chk / sizeof *chk; i++)
        if (chk[i].v < chk[i].lo || chk[i].v > chk[i].hi)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: bert.%s is %lld, expected %lld..%lld", m->path,
                              chk[i].key, (long long)chk[i].v, (long long)chk[i].lo,
                              (long long)chk[i].hi);
    if (hp->n_embd % hp->n_head)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: bert.embedding_length %d is not a multiple of "
                          "%d heads", m->path, hp->n_embd, hp->n_head);
    hp->head_dim = hp->n_embd / hp->n_head;
    int64_t e = hp->n_embd;
    hp->n_vocab = (int32_t)rows_of(m, "token_embd.weight");
    MTPLX_TRY(mtplx_model_weight(m, "token_embd.weight", e, hp->n_vocab, true, &m->tok_embd));
    if (mtplx_tokenizer_vocab_size(m->tok) > hp->n_vocab)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tokenizer has %d tokens but token_embd.weight only %d rows",
                          m->path, mtplx_tokenizer_vocab_size(m->tok), hp->n_vocab);
    mtplx_bert *b = calloc(1, sizeof *b);
    if (!b) return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    m->bert = b;
    b->gelu_tanh = mtplx_gguf_get_bool(m->g, "mtplx.bert.gelu_tanh", false);
    int64_t n_pos = rows_of(m, "position_embd.weight");
    if (n_pos <= 0)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: tensor 'position_embd.weight' is missing "
                          "(rotary / ALiBi BERT variants are not supported)", m->path);
    if (n_pos < hp->n_ctx_train) hp->n_ctx_train = (int32_t)n_pos;
    MTPLX_TRY(mtplx_model_weight(m, "position_embd.weight", e, n_pos, true, &b->pos_embd));
    b->n_types = (int32_t)rows_of(m, "token_types.weight");
    if (b->n_types > 0)
        MTPLX_TRY(mtplx_model_weight(m, "token_types.weight", e, b->n_types, true, &b->type_embd));
    MTPLX_TRY(mtplx_model_vec(m, "token_embd_norm.weight", e, true, &b->embd_norm_w));
    MTPLX_TRY(mtplx_model_vec(m, "token_embd_norm.bias", e, true, &b->embd_norm_b));
    b->layers = calloc((size_t)hp->n_layer, sizeof *b->layers);
    if (!b->layers) return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < hp->n_layer; i++) MTPLX_TRY(load_layer(m, i, &b->layers[i]));
    /* cross-encoder head: pooler dense + tanh (cls), classifier (cls.output) */
    MTPLX_TRY(mtplx_model_weight(m, "cls.weight", e, e, false, &b->cls));
    MTPLX_TRY(mtplx_model_vec(m, "cls.bias", e, false, &b->cls_b));
    int64_t n_labels = rows_of(m, "cls.output.weight");
    if (n_labels > 0) {
        if (n_labels > 64)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: cls.output.weight has %lld labels", m->path,
                              (long long)n_labels);
        MTPLX_TRY(mtplx_model_weight(m, "cls.output.weight", e, n_labels, true, &b->cls_out));
        MTPLX_TRY(mtplx_model_vec(m, "cls.output.bias", n_labels, false, &b->cls_out_b));
        b->n_labels = (int32_t)n_labels;
    }
    return MTPLX_OK;
}

void mtplx_bert_free(mtplx_bert *b) {
    if (!b) return;
    free(b->layers);
    free(b);
}
