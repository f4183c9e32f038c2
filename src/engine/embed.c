/* embed.c: sentence embeddings and reranking (mtplx_embed, mtplx_rerank).
 *
 * Embedding = tokenize (the tokenizer's own special tokens: BERT's [CLS] ..
 * [SEP], Qwen3-Embedding's trailing <|endoftext|>), run the model, pool the
 * final hidden states as the model's sentence-transformers config says
 * (mean over all tokens, CLS = first token, last token), L2-normalise.
 *  - Encoders (BERT): all texts of a call are packed into ONE forward
 *    without padding (model/encoder.c), so a batch equals its texts alone.
 *  - Decoders (Qwen3-Embedding): one causal forward per text through the
 *    context's KV cache, then the final RMSNorm (transformers' Qwen3Model
 *    last_hidden_state is after model.norm) on the pooled rows.
 *  - Queries (is_query) get the model's query prompt prepended: for
 *    Qwen3-Embedding "Instruct: {task}\nQuery:" + query with no space, its
 *    README's convention and config_sentence_transformers.json prompts.query.
 *
 * Reranking:
 *  - cross-encoders (BertForSequenceClassification, 1 label): score =
 *    sigmoid(logit) of "[CLS] query [SEP] doc [SEP]" with token types 0 / 1;
 *  - yes/no rerankers (Qwen3-Reranker): the model card's prompt
 *        <|im_start|>system\nJudge whether the Document meets the requirements
 *        based on the Query and the Instruct provided. Note that the answer can
 *        only be "yes" or "no".<|im_end|>\n<|im_start|>user\n
 *        <Instruct>: {instruct}\n<Query>: {query}\n<Document>: {doc}
 *        <|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n
 *    (three pieces tokenized separately, as the card does), score = p(yes)
 *    = softmax(l_no, l_yes)[1] of the last position's logits.
 * Texts are tokenized as HF does: special-token strings in them are matched.
 * The context is used as scratch: its KV cache is overwritten (n_past = 0
 * afterwards), so give embedding / reranking its own context.
 * Not here: truncation of over-long inputs (they fail with MTPLX_ERR_RANGE),
 * max / weighted-mean pooling. */
#include "engine/engine.h"
#include "kernels/kernels.h"
#include "model/encoder.h"

#include <math.h>
#include <string.h>

#define MAX_INPUTS 4096

static const char RR_PREFIX[] =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\"."
    "<|im_end|>\n<|im_start|>user\n";
static const char RR_SUFFIX[] = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
static const char RR_INSTRUCT[] =
    "Given a web search query, retrieve relevant passages that answer the query";

int mtplx_model_roles(const mtplx_model *m) { return m && m->emb ? m->emb->roles : 0; }

int32_t mtplx_embed_dim(const mtplx_model *m) {
    return mtplx_model_roles(m) & MTPLX_ROLE_EMBED ? m->hp.n_embd : 0;
}

static const char *roles_str(int r, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s%s%s", r & MTPLX_ROLE_GENERATE ? " generate" : "",
             r & MTPLX_ROLE_EMBED ? " embed" : "", r & MTPLX_ROLE_RERANK ? " rerank" : "",
             r ? "" : " none");
    return buf + 1;
}

static mtplx_status need_role(const mtplx_ctx *c, int role, const char *what) {
    if (mtplx_model_roles(c->model) & role) return MTPLX_OK;
    char buf[64];
    return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: %s cannot %s (its roles: %s)", what,
                      c->model->path, what, roles_str(mtplx_model_roles(c->model), buf, sizeof buf));
}

void mtplx_embed_normalize(float *v, int32_t dim) {
    double s = 0;
    for (int32_t i = 0; i < dim; i++) s += (double)v[i] * v[i];
    if (s <= 0) return;
    float inv = (float)(1.0 / sqrt(s));
    for (int32_t i = 0; i < dim; i++) v[i] *= inv;
}

mtplx_status mtplx_embed_truncate(float *vecs, int32_t n, int32_t dim, int32_t new_dim,
                                  bool normalize) {
    if (!vecs || n < 0 || dim <= 0 || new_dim <= 0 || new_dim > dim)
        return mtplx_fail(MTPLX_ERR_ARG, "embed: dimensions %d must be 1..%d", new_dim, dim);
    for (int32_t i = 0; i < n; i++) {
        memmove(vecs + (int64_t)i * new_dim, vecs + (int64_t)i * dim, (size_t)new_dim * sizeof(float));
        if (normalize) mtplx_embed_normalize(vecs + (int64_t)i * new_dim, new_dim);
    }
    return MTPLX_OK;
}

/* Tokenize prefix + text (prefix may be NULL) with the tokenizer's special tokens. */
static mtplx_status tokenize(const mtplx_model *m, const char *prefix, const char *text,
                             bool add_special, int32_t **ids, size_t *n) {
    size_t pl = prefix ? strlen(prefix) : 0, tl = strlen(text);
    char *s = malloc(pl + tl + 1);
    if (!s) return mtplx_fail(MTPLX_ERR_NOMEM, "embed: out of memory");
    if (pl) memcpy(s, prefix, pl);
    memcpy(s + pl, text, tl + 1);
    mtplx_status st = mtplx_tokenize(m->tok, s, pl + tl, add_special, true, ids, n);
    free(s);
    return st;
}

static mtplx_status check_inputs(const char *what, const char *const *texts, int32_t n) {
    if (n <= 0 || !texts) return mtplx_fail(MTPLX_ERR_ARG, "%s: no input", what);
    if (n > MAX_INPUTS)
        return mtplx_fail(MTPLX_ERR_RANGE, "%s: %d inputs, at most %d per call", what, n, MAX_INPUTS);
    for (int32_t i = 0; i < n; i++)
        if (!texts[i] || !texts[i][0])
            return mtplx_fail(MTPLX_ERR_ARG, "%s: input %d is empty", what, i);
    return MTPLX_OK;
}

/* The most tokens one sequence may have in this context. */
static int64_t max_seq(const mtplx_ctx *c) {
    int64_t lim = c->n_ctx;
    if (c->model->arch->encoder && c->model->hp.n_ctx_train < lim) lim = c->model->hp.n_ctx_train;
    return lim;
}

/* Pool rows h[len][e] into out[e] (no norm applied). */
static void pool(int mode, const float *h, int64_t len, int64_t e, float *out, bool first_chunk) {
    if (mode == MTPLX_POOL_CLS) {
        if (first_chunk) memcpy(out, h, (size_t)e * sizeof(float));
    } else if (mode == MTPLX_POOL_LAST) {
        memcpy(out, h + (len - 1) * e, (size_t)e * sizeof(float));
    } else { /* mean: caller divides */
        for (int64_t i = 0; i < len; i++)
            for (int64_t j = 0; j < e; j++) out[j] += h[i * e + j];
    }
}

static mtplx_status embed_encoder(mtplx_ctx *c, int32_t **ids, const size_t *lens, int32_t n,
                                  float *out) {
    const mtplx_model *m = c->model;
    int64_t e = m->hp.n_embd, total = 0;
    for (int32_t i = 0; i < n; i++) total += (int64_t)lens[i];
    int32_t *tok = malloc((size_t)total * sizeof *tok), *sl = malloc((size_t)n * sizeof *sl);
    float *h = malloc((size_t)(total * e) * sizeof(float));
    mtplx_status st = tok && sl && h ? MTPLX_OK : mtplx_fail(MTPLX_ERR_NOMEM, "embed: out of memory");
    for (int64_t i = 0, off = 0; st == MTPLX_OK && i < n; off += (int64_t)lens[i++]) {
        memcpy(tok + off, ids[i], lens[i] * sizeof *tok);
        sl[i] = (int32_t)lens[i];
    }
    if (st == MTPLX_OK) st = mtplx_encoder_forward(m, c->be, c->n_batch, tok, NULL, sl, n, h);
    for (int64_t i = 0, off = 0; st == MTPLX_OK && i < n; off += (int64_t)lens[i++]) {
        float *o = out + i * e;
        memset(o, 0, (size_t)e * sizeof(float));
        pool(m->emb->pooling, h + off * e, (int64_t)lens[i], e, o, true);
        if (m->emb->pooling == MTPLX_POOL_MEAN)
            for (int64_t j = 0; j < e; j++) o[j] /= (float)lens[i];
    }
    free(tok);
    free(sl);
    free(h);
    return st;
}

/* The final norm of one row h of the context's activations into host memory
 * out [n_embd] (on a GPU: normed into acts.xb, then copied). */
static void norm_row(const mtplx_ctx *c, const float *h, float *out) {
    const mtplx_model *m = c->model;
    int64_t e = m->hp.n_embd;
    if (!c->be->download) {
        c->be->rmsnorm(c->be, h, m->output_norm, out, 1, e, m->hp.norm_eps);
        return;
    }
    c->be->rmsnorm(c->be, h, m->output_norm, c->acts.xb, 1, e, m->hp.norm_eps);
    mtplx_be_download(c->be, out, c->acts.xb, (size_t)e * sizeof(float));
}

/* Add k rows of h (pre-final-norm hidden states, one chunk of a text) to the
 * pooled vector out: mean pooling sums the final-normed rows (the caller
 * divides), CLS takes the text's first row, last-token its last. */
static void pool_chunk(const mtplx_ctx *c, const float *h, int32_t k, bool first, bool last,
                       float *out, float *tmp) {
    const mtplx_model *m = c->model;
    int64_t e = m->hp.n_embd;
    int mode = m->emb->pooling;
    if (mode == MTPLX_POOL_MEAN) {
        for (int32_t r = 0; r < k; r++) {
            norm_row(c, h + (int64_t)r * e, tmp);
            for (int64_t j = 0; j < e; j++) out[j] += tmp[j];
        }
    } else if ((mode == MTPLX_POOL_CLS && first) || (mode == MTPLX_POOL_LAST && last)) {
        int64_t r = mode == MTPLX_POOL_CLS ? 0 : k - 1;
        norm_row(c, h + r * e, out);
    }
}

static void pool_finish(const mtplx_ctx *c, int32_t len, float *out) {
    if (c->model->emb->pooling != MTPLX_POOL_MEAN) return;
    for (int64_t j = 0; j < c->model->hp.n_embd; j++) out[j] /= (float)len;
}

/* One text through the decoder, chunk by chunk (texts longer than a batch). */
static mtplx_status embed_decoder_one(mtplx_ctx *c, const int32_t *ids, int32_t len, float *out,
                                      float *tmp) {
    MTPLX_TRY(mtplx_ctx_truncate(c, 0));
    memset(out, 0, (size_t)c->model->hp.n_embd * sizeof(float));
    for (int32_t done = 0; done < len;) {
        int32_t k = len - done < c->n_batch ? len - done : c->n_batch;
        MTPLX_TRY(mtplx_ctx_decode(c, ids + done, k, false));
        /* acts.hidden holds the k rows of this chunk, before the final norm */
        pool_chunk(c, c->acts.hidden, k, done == 0, done + k == len, out, tmp);
        done += k;
    }
    pool_finish(c, len, out);
    return mtplx_ctx_truncate(c, 0);
}

/* Texts through the decoder as ONE batched forward per group: each text is
 * its own sequence (positions from 0, its own causal attention) kept in its
 * own stretch of the context's KV cache, so padding never enters and a batch
 * gives the same vectors as the texts one by one. Texts longer than a batch
 * go alone, chunk by chunk. */
static mtplx_status embed_decoder(mtplx_ctx *c, int32_t **ids, const size_t *lens, int32_t n,
                                  float *out) {
    enum { MAX_SEGS = 64 };
    const mtplx_model *m = c->model;
    int64_t e = m->hp.n_embd;
    size_t row_bytes = c->kv.row_bytes;
    int32_t cap = c->n_batch < c->n_ctx ? c->n_batch : c->n_ctx;
    float *tmp = malloc((size_t)e * sizeof(float));
    int32_t *toks = malloc((size_t)cap * sizeof(int32_t));
    void **views = malloc((size_t)MAX_SEGS * 2 * (size_t)m->hp.n_layer * sizeof(void *));
    mtplx_status st = tmp && toks && views ? MTPLX_OK : mtplx_fail(MTPLX_ERR_NOMEM, "embed: out of memory");
    for (int32_t i = 0; st == MTPLX_OK && i < n;) {
        if ((int32_t)lens[i] > cap) {
            st = embed_decoder_one(c, ids[i], (int32_t)lens[i], out + (int64_t)i * e, tmp);
            i++;
            continue;
        }
        mtplx_seg segs[MAX_SEGS];
        mtplx_kv kvs[MAX_SEGS];
        int32_t j = i, rows = 0, ns = 0;
        while (j < n && ns < MAX_SEGS && rows + (int32_t)lens[j] <= cap) {
            mtplx_kv *v = &kvs[ns];
            *v = c->kv;
            v->k = views + (size_t)(2 * ns) * (size_t)m->hp.n_layer;
            v->v = v->k + m->hp.n_layer;
            for (int l = 0; l < m->hp.n_layer; l++) {
                v->k[l] = (char *)c->kv.k[l] + (size_t)rows * row_bytes;
                v->v[l] = (char *)c->kv.v[l] + (size_t)rows * row_bytes;
            }
            v->n_ctx = c->n_ctx - rows;
            segs[ns++] = (mtplx_seg){v, 0, (int64_t)lens[j]};
            memcpy(toks + rows, ids[j], lens[j] * sizeof(int32_t));
            rows += (int32_t)lens[j];
            j++;
        }
        mtplx_model_forward_segs(m, c->be, &c->acts, toks, segs, ns, false);
        for (int32_t k = i, r = 0; k < j; r += (int32_t)lens[k], k++) {
            float *o = out + (int64_t)k * e;
            memset(o, 0, (size_t)e * sizeof(float));
            pool_chunk(c, c->acts.hidden + (int64_t)r * e, (int32_t)lens[k], true, true, o, tmp);
            pool_finish(c, (int32_t)lens[k], o);
        }
        i = j;
    }
    free(tmp);
    free(toks);
    free(views);
    c->n_past = 0;
    c->last_n = 0;
    return st;
}

mtplx_status mtplx_embed(mtplx_ctx *c, const char *const *texts, int32_t n, bool is_query,
                         float *out, int32_t *n_tokens) {
    if (n_tokens) *n_tokens = 0;
    if (!c || !out) return mtplx_fail(MTPLX_ERR_ARG, "embed: NULL argument");
    MTPLX_TRY(need_role(c, MTPLX_ROLE_EMBED, "embed"));
    MTPLX_TRY(check_inputs("embed", texts, n));
    const mtplx_model *m = c->model;
    const mtplx_embed_cfg *cfg = m->emb;
    int64_t e = m->hp.n_embd, lim = max_seq(c), total = 0;
    int32_t **ids = calloc((size_t)n, sizeof *ids);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    mtplx_status st = ids && lens ? MTPLX_OK : mtplx_fail(MTPLX_ERR_NOMEM, "embed: out of memory");
    const char *prefix = is_query ? cfg->query_prompt : NULL;
    for (int32_t i = 0; st == MTPLX_OK && i < n; i++) {
        st = tokenize(m, prefix, texts[i], true, &ids[i], &lens[i]);
        if (st == MTPLX_OK && (lens[i] == 0 || (int64_t)lens[i] > lim))
            st = mtplx_fail(lens[i] ? MTPLX_ERR_RANGE : MTPLX_ERR_ARG, "embed: input %d has %zu "
                            "tokens, the model takes 1..%lld here", i, lens[i], (long long)lim);
        total += (int64_t)lens[i];
    }
    if (st == MTPLX_OK) {
        if (m->arch->encoder) {
            st = embed_encoder(c, ids, lens, n, out);
        } else {
            st = embed_decoder(c, ids, lens, n, out);
        }
    }
    if (st == MTPLX_OK && cfg->normalize)
        for (int32_t i = 0; i < n; i++) mtplx_embed_normalize(out + i * e, (int32_t)e);
    for (int32_t i = 0; ids && i < n; i++) free(ids[i]);
    free(ids);
    free(lens);
    if (st == MTPLX_OK && n_tokens) *n_tokens = (int32_t)(total > INT32_MAX ? INT32_MAX : total);
    return st;
}

/* ------------------------------------------------------------------ */
/* reranking                                                           */
/* ------------------------------------------------------------------ */

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* [CLS] q [SEP] d [SEP]: the query with its special tokens, then the
 * document's with its leading [CLS] dropped (BERT's pair template). */
static mtplx_status rerank_encoder(mtplx_ctx *c, const char *query, const char *const *docs,
                                   int32_t n, float *scores, int64_t *total_out) {
    const mtplx_model *m = c->model;
    int64_t e = m->hp.n_embd, lim = max_seq(c);
    if (m->bert->n_labels != 1)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "rerank: %s has %d labels; a cross-encoder "
                          "score needs 1", m->path, m->bert->n_labels);
    int32_t *qi = NULL;
    size_t nq = 0;
    MTPLX_TRY(tokenize(m, NULL, query, true, &qi, &nq));
    int32_t **di = calloc((size_t)n, sizeof *di);
    size_t *dl = calloc((size_t)n, sizeof *dl);
    int32_t *sl = calloc((size_t)n, sizeof *sl);
    mtplx_status st = di && dl && sl ? MTPLX_OK : mtplx_fail(MTPLX_ERR_NOMEM, "rerank: out of memory");
    int64_t total = 0;
    for (int32_t i = 0; st == MTPLX_OK && i < n; i++) {
        st = tokenize(m, NULL, docs[i], true, &di[i], &dl[i]);
        if (st != MTPLX_OK) break;
        size_t skip = nq > 0 && dl[i] > 0 && di[i][0] == qi[0] ? 1 : 0;
        int64_t len = (int64_t)nq + (int64_t)(dl[i] - skip);
        if (len > lim)
            st = mtplx_fail(MTPLX_ERR_RANGE, "rerank: query + document %d are %lld tokens, the "
                            "model takes at most %lld", i, (long long)len, (long long)lim);
        sl[i] = (int32_t)len;
        total += len;
    }
    int32_t *tok = NULL, *types = NULL;
    float *h = NULL, *cls = NULL, *logit = NULL;
    if (st == MTPLX_OK) {
        tok = malloc((size_t)total * sizeof *tok);
        types = malloc((size_t)total * sizeof *types);
        h = malloc((size_t)(total * e) * sizeof(float));
        cls = malloc((size_t)(n * e) * sizeof(float));
        logit = malloc((size_t)n * sizeof(float));
        if (!tok || !types || !h || !cls || !logit) st = mtplx_fail(MTPLX_ERR_NOMEM, "rerank: out of memory");
    }
    for (int64_t i = 0, off = 0; st == MTPLX_OK && i < n; off += sl[i++]) {
        size_t skip = dl[i] > 0 && nq > 0 && di[i][0] == qi[0] ? 1 : 0;
        memcpy(tok + off, qi, nq * sizeof *tok);
        memcpy(tok + off + nq, di[i] + skip, (dl[i] - skip) * sizeof *tok);
        for (int64_t j = 0; j < sl[i]; j++) types[off + j] = j < (int64_t)nq ? 0 : 1;
    }
    if (st == MTPLX_OK) st = mtplx_encoder_forward(m, c->be, c->n_batch, tok, types, sl, n, h);
    for (int64_t i = 0, off = 0; st == MTPLX_OK && i < n; off += sl[i++])
        memcpy(cls + i * e, h + off * e, (size_t)e * sizeof(float));
    if (st == MTPLX_OK) st = mtplx_encoder_classify(m, c->be, cls, n, logit);
    for (int32_t i = 0; st == MTPLX_OK && i < n; i++) scores[i] = sigmoid(logit[i]);
    for (int32_t i = 0; di && i < n; i++) free(di[i]);
    free(di);
    free(dl);
    free(sl);
    free(qi);
    free(tok);
    free(types);
    free(h);
    free(cls);
    free(logit);
    *total_out = total;
    return st;
}

static mtplx_status append(int32_t **v, size_t *n, const int32_t *src, size_t k) {
    int32_t *nv = realloc(*v, (*n + k + 1) * sizeof *nv);
    if (!nv) return mtplx_fail(MTPLX_ERR_NOMEM, "rerank: out of memory");
    memcpy(nv + *n, src, k * sizeof *nv);
    *v = nv;
    *n += k;
    return MTPLX_OK;
}

static mtplx_status rerank_decoder(mtplx_ctx *c, const char *query, const char *const *docs,
                                   int32_t n, float *scores, int64_t *total_out) {
    const mtplx_model *m = c->model;
    int32_t *pre = NULL, *suf = NULL;
    size_t npre = 0, nsuf = 0;
    int64_t lim = max_seq(c), total = 0;
    mtplx_status st = tokenize(m, NULL, RR_PREFIX, false, &pre, &npre);
    if (st == MTPLX_OK) st = tokenize(m, NULL, RR_SUFFIX, false, &suf, &nsuf);
    for (int32_t i = 0; st == MTPLX_OK && i < n; i++) {
        static const char fmt[] = "<Instruct>: %s\n<Query>: %s\n<Document>: %s";
        size_t cap = sizeof fmt + sizeof RR_INSTRUCT + strlen(query) + strlen(docs[i]);
        char *mid = malloc(cap);
        int32_t *body = NULL, *seq = NULL;
        size_t nb = 0, ns = 0;
        if (!mid) st = mtplx_fail(MTPLX_ERR_NOMEM, "rerank: out of memory");
        if (st == MTPLX_OK) {
            snprintf(mid, cap, fmt, RR_INSTRUCT, query, docs[i]);
            st = tokenize(m, NULL, mid, false, &body, &nb);
        }
        if (st == MTPLX_OK) st = append(&seq, &ns, pre, npre);
        if (st == MTPLX_OK) st = append(&seq, &ns, body, nb);
        if (st == MTPLX_OK) st = append(&seq, &ns, suf, nsuf);
        if (st == MTPLX_OK && (int64_t)ns > lim)
            st = mtplx_fail(MTPLX_ERR_RANGE, "rerank: prompt for document %d is %zu tokens, the "
                            "context holds %lld", i, ns, (long long)lim);
        if (st == MTPLX_OK) st = mtplx_ctx_truncate(c, 0);
        if (st == MTPLX_OK) st = mtplx_ctx_decode(c, seq, (int32_t)ns, false);
        if (st == MTPLX_OK) {
            const float *lg = mtplx_ctx_logits(c); /* last position */
            float d = lg[m->emb->tok_no] - lg[m->emb->tok_yes];
            scores[i] = 1.0f / (1.0f + expf(d)); /* softmax(no, yes)[yes] */
            total += (int64_t)ns;
        }
        free(mid);
        free(body);
        free(seq);
    }
    if (st == MTPLX_OK) st = mtplx_ctx_truncate(c, 0);
    free(pre);
    free(suf);
    *total_out = total;
    return st;
}

mtplx_status mtplx_rerank(mtplx_ctx *c, const char *query, const char *const *docs, int32_t n,
                          float *scores, int32_t *n_tokens) {
    if (n_tokens) *n_tokens = 0;
    if (!c || !scores || !query) return mtplx_fail(MTPLX_ERR_ARG, "rerank: NULL argument");
    MTPLX_TRY(need_role(c, MTPLX_ROLE_RERANK, "rerank"));
    if (!query[0]) return mtplx_fail(MTPLX_ERR_ARG, "rerank: the query is empty");
    MTPLX_TRY(check_inputs("rerank", docs, n));
    int64_t total = 0;
    mtplx_status st = c->model->arch->encoder ? rerank_encoder(c, query, docs, n, scores, &total)
                                              : rerank_decoder(c, query, docs, n, scores, &total);
    if (st == MTPLX_OK && n_tokens) *n_tokens = (int32_t)(total > INT32_MAX ? INT32_MAX : total);
    return st;
}
