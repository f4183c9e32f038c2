/* encoder.c: the BERT encoder forward pass (bidirectional attention over
 * each packed sequence, post-LN LayerNorm with bias, GELU, token types), the
 * cross-encoder head, and the roles a model can play (generate / embed /
 * rerank) with its pooling settings.
 *
 * Sequences of a batch are packed back to back with no padding: matmuls,
 * norms and the FFN run over all tokens at once, attention per sequence. So
 * a batch gives the same vectors as its texts one by one.
 * LayerNorm and GELU are plain C here, not backend ops: only the CPU backend
 * exists; they move behind the backend interface with the first GPU one.
 * Not here: rotary / ALiBi encoders, RoBERTa position offsets. */
#include "model/encoder.h"

#include "kernels/kernels.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* forward                                                             */
/* ------------------------------------------------------------------ */

/* out = (x - mean) / sqrt(var + eps) * w + b for n rows of d (out may be x). */
static void layernorm(const float *x, const float *w, const float *b, float *out, int64_t n,
                      int64_t d, float eps) {
    for (int64_t i = 0; i < n; i++) {
        const float *r = x + i * d;
        float *o = out + i * d;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < d; j++) mean += r[j];
        mean /= (double)d;
        for (int64_t j = 0; j < d; j++) var += (r[j] - mean) * (r[j] - mean);
        float inv = (float)(1.0 / sqrt(var / (double)d + eps));
        for (int64_t j = 0; j < d; j++) o[j] = (float)(r[j] - mean) * inv * w[j] + b[j];
    }
}

/* HF "gelu" is the exact erf form; "gelu_new" / "gelu_pytorch_tanh" the tanh one. */
static void gelu(float *x, int64_t n, bool tanh_form) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        if (tanh_form)
            x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
        else
            x[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

/* y[n][w->m] = x[n][w->k] W^T + bias, in chunks of max_rows (backend scratch). */
static void mm(mtplx_backend *be, const mtplx_weight *w, const float *bias, const float *x,
               int64_t n, float *y, int64_t max_rows) {
    for (int64_t i = 0; i < n; i += max_rows) {
        int64_t c = n - i < max_rows ? n - i : max_rows;
        be->matmul(be, w, bias, x + i * w->k, c, y + i * w->m);
    }
}

mtplx_status mtplx_encoder_forward(const mtplx_model *m, mtplx_backend *be, int64_t max_rows,
                                   const int32_t *tokens, const int32_t *types,
                                   const int32_t *seq_len, int32_t n_seq, float *out) {
    const mtplx_bert *b = m->bert;
    const mtplx_hparams *hp = &m->hp;
    MTPLX_ASSERT(b && n_seq > 0 && max_rows > 0);
    int64_t e = hp->n_embd, ff = hp->n_ff, hd = hp->head_dim, n = 0;
    for (int32_t s = 0; s < n_seq; s++) {
        if (seq_len[s] <= 0 || seq_len[s] > hp->n_ctx_train)
            return mtplx_fail(MTPLX_ERR_RANGE, "encoder: sequence %d has %d tokens, the model "
                              "takes 1..%d", s, seq_len[s], hp->n_ctx_train);
        n += seq_len[s];
    }
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return mtplx_fail(MTPLX_ERR_RANGE, "encoder: token id %d is outside the vocabulary "
                              "(0..%d)", tokens[i], hp->n_vocab - 1);
        int32_t ty = types ? types[i] : 0;
        if (ty < 0 || (ty > 0 && ty >= b->n_types))
            return mtplx_fail(MTPLX_ERR_RANGE, "encoder: token type %d but the model has %d",
                              ty, b->n_types);
    }
    /* activations [n][...]: x is `out` itself */
    float *q = be->buf_alloc(be, (size_t)(n * e) * sizeof(float));
    float *k = be->buf_alloc(be, (size_t)(n * e) * sizeof(float));
    float *v = be->buf_alloc(be, (size_t)(n * e) * sizeof(float));
    float *att = be->buf_alloc(be, (size_t)(n * e) * sizeof(float));
    float *hb = be->buf_alloc(be, (size_t)(n * ff) * sizeof(float));
    float *row = be->buf_alloc(be, (size_t)e * sizeof(float));
    if (!q || !k || !v || !att || !hb || !row) {
        float *ps[] = {q, k, v, att, hb, row};
        for (int i = 0; i < 6; i++) be->buf_free(be, ps[i]);
        return mtplx_fail(MTPLX_ERR_NOMEM, "encoder: out of memory for %lld tokens", (long long)n);
    }
    float *x = out;
    /* embeddings: word + position + token type, then LayerNorm */
    for (int32_t s = 0, off = 0; s < n_seq; off += seq_len[s++]) {
        for (int32_t p = 0; p < seq_len[s]; p++) {
            int64_t i = off + p;
            float *xi = x + i * e;
            be->get_row(be, &m->tok_embd, tokens[i], xi);
            be->get_row(be, &b->pos_embd, p, row);
            for (int64_t j = 0; j < e; j++) xi[j] += row[j];
            if (b->n_types > 0) {
                be->get_row(be, &b->type_embd, types ? types[i] : 0, row);
                for (int64_t j = 0; j < e; j++) xi[j] += row[j];
            }
        }
    }
    layernorm(x, b->embd_norm_w, b->embd_norm_b, x, n, e, hp->norm_eps);
    float scale = 1.0f / sqrtf((float)hd);
    for (int l = 0; l < hp->n_layer; l++) {
        const mtplx_bert_layer *L = &b->layers[l];
        mm(be, &L->wq, L->bq, x, n, q, max_rows);
        mm(be, &L->wk, L->bk, x, n, k, max_rows);
        mm(be, &L->wv, L->bv, x, n, v, max_rows);
        /* Bidirectional attention through the causal kernel: one query at a
         * time at position len-1 sees every key 0..len-1 of its sequence,
         * whose K/V rows [len][n_head*hd] f32 are already the cache layout. */
        for (int32_t s = 0, off = 0; s < n_seq; off += seq_len[s++])
            for (int32_t p = 0; p < seq_len[s]; p++)
                be->attention(be, q + (int64_t)(off + p) * e, 1, hp->n_head, hp->n_head, (int)hd,
                              k + (int64_t)off * e, v + (int64_t)off * e, MTPLX_TYPE_F32,
                              seq_len[s] - 1, scale, att + (int64_t)(off + p) * e);
        mm(be, &L->wo, L->bo, att, n, q, max_rows);
        be->add(be, q, x, n * e);
        layernorm(q, L->attn_norm_w, L->attn_norm_b, x, n, e, hp->norm_eps);
        mm(be, &L->w_up, L->b_up, x, n, hb, max_rows);
        gelu(hb, n * ff, b->gelu_tanh);
        mm(be, &L->w_down, L->b_down, hb, n, q, max_rows);
        be->add(be, q, x, n * e);
        layernorm(q, L->out_norm_w, L->out_norm_b, x, n, e, hp->norm_eps);
    }
    float *ps[] = {q, k, v, att, hb, row};
    for (int i = 0; i < 6; i++) be->buf_free(be, ps[i]);
    return MTPLX_OK;
}

mtplx_status mtplx_encoder_classify(const mtplx_model *m, mtplx_backend *be, const float *h,
                                    int64_t n, float *logits) {
    const mtplx_bert *b = m->bert;
    if (!b || !b->n_labels)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: no classifier head (cls.output)", m->path);
    int64_t e = m->hp.n_embd;
    const float *in = h;
    float *pooled = NULL;
    if (b->cls.data) { /* BERT pooler: tanh(W h_cls + b) */
        pooled = be->buf_alloc(be, (size_t)(n * e) * sizeof(float));
        if (!pooled) return mtplx_fail(MTPLX_ERR_NOMEM, "classifier: out of memory");
        be->matmul(be, &b->cls, b->cls_b, h, n, pooled);
        for (int64_t i = 0; i < n * e; i++) pooled[i] = tanhf(pooled[i]);
        in = pooled;
    }
    be->matmul(be, &b->cls_out, b->cls_out_b, in, n, logits);
    be->buf_free(be, pooled);
    return MTPLX_OK;
}

/* ------------------------------------------------------------------ */
/* roles                                                               */
/* ------------------------------------------------------------------ */

static bool name_says_rerank(const char *s) {
    for (; s && *s; s++) {
        static const char w[] = "rerank";
        size_t i = 0;
        while (w[i] && s[i] && tolower((unsigned char)s[i]) == w[i]) i++;
        if (!w[i]) return true;
    }
    return false;
}

/* The id of a vocabulary entry spelled exactly `piece`, -1 if none. */
static int32_t find_piece(const mtplx_tokenizer *tok, const char *piece) {
    int32_t n = mtplx_tokenizer_vocab_size(tok);
    for (int32_t i = 0; i < n; i++) {
        const char *p = mtplx_token_piece(tok, i);
        if (p && !strcmp(p, piece)) return i;
    }
    return -1;
}

void mtplx_embed_cfg_free(mtplx_embed_cfg *e) {
    if (!e) return;
    free(e->query_prompt);
    free(e);
}

/* Roles:
 *  - encoder with a classifier head (cls.output): rerank (cross-encoder);
 *  - encoder without: embed (pooling from "<arch>.pooling_type", default mean);
 *  - decoder with a pooling type other than rank (sentence-transformers
 *    config, or a llama.cpp embedding GGUF): embed only (Qwen3-Embedding);
 *  - decoder with pooling type rank, or whose name says "rerank", and
 *    "yes" / "no" tokens: rerank only (Qwen3-Reranker: p(yes));
 *  - any other decoder: generate. */
mtplx_status mtplx_model_embed_setup(mtplx_model *m) {
    mtplx_embed_cfg *e = calloc(1, sizeof *e);
    if (!e) return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    m->emb = e;
    e->tok_yes = e->tok_no = -1;
    e->pooling = (int)mtplx_gguf_get_arch_int(m->g, "pooling_type", -1);
    e->normalize = mtplx_gguf_get_bool(m->g, MTPLX_KEY_EMBED_NORMALIZE, true);
    const char *qp = mtplx_gguf_get_str(m->g, MTPLX_KEY_EMBED_QUERY);
    if (e->pooling > MTPLX_POOL_RANK)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: %s.pooling_type %d is not one of none, mean, "
                          "cls, last, rank", m->path, m->arch->name, e->pooling);
    if (m->arch->encoder) {
        if (m->bert->n_labels > 0) {
            e->roles = MTPLX_ROLE_RERANK;
            e->pooling = MTPLX_POOL_RANK;
        } else {
            e->roles = MTPLX_ROLE_EMBED;
            if (e->pooling <= MTPLX_POOL_NONE || e->pooling == MTPLX_POOL_RANK)
                e->pooling = MTPLX_POOL_MEAN;
        }
    } else if (e->pooling > MTPLX_POOL_NONE && e->pooling != MTPLX_POOL_RANK) {
        e->roles = MTPLX_ROLE_EMBED;
        if (!qp && !strcmp(m->arch->name, "qwen3")) qp = MTPLX_QWEN3_EMBED_QUERY;
    } else if (e->pooling == MTPLX_POOL_RANK || name_says_rerank(m->name)) {
        e->tok_yes = find_piece(m->tok, "yes");
        e->tok_no = find_piece(m->tok, "no");
        if (e->tok_yes < 0 || e->tok_no < 0 || e->tok_yes >= m->hp.n_vocab || e->tok_no >= m->hp.n_vocab)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: a yes/no reranker needs \"yes\" and \"no\" "
                              "tokens in its vocabulary", m->path);
        e->roles = MTPLX_ROLE_RERANK;
        e->pooling = MTPLX_POOL_RANK;
    } else {
        e->roles = MTPLX_ROLE_GENERATE;
        e->pooling = MTPLX_POOL_NONE;
    }
    if (qp && (e->roles & MTPLX_ROLE_EMBED) && *qp && !(e->query_prompt = mtplx_strdup(qp)))
        return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    return MTPLX_OK;
}
