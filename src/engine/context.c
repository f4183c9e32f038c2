/* context.c: contexts: KV cache, activations, the MTP head's cache, and the
 * public forward / truncate API. Everything is allocated here, at creation,
 * so the decode loop never allocates. */
#include "engine/engine.h"
#include "kernels/kernels.h"

#include <string.h>

mtplx_ctx_params mtplx_ctx_default_params(void) {
    return (mtplx_ctx_params){.n_ctx = 0, .n_threads = 0, .n_batch = 0, .kv_f32 = false};
}

mtplx_status mtplx_ctx_new(mtplx_model *model, const mtplx_ctx_params *params, mtplx_ctx **out) {
    *out = NULL;
    if (!model || !model->layers)
        return mtplx_fail(MTPLX_ERR_ARG, "context: the model has no weights (vocab-only load)");
    mtplx_ctx_params p = params ? *params : mtplx_ctx_default_params();
    const mtplx_hparams *hp = &model->hp;
    if (p.n_ctx <= 0) p.n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (p.n_ctx > hp->n_ctx_train) {
        mtplx_log(MTPLX_LOG_WARN, "context of %d is longer than the model's trained %d",
                  p.n_ctx, hp->n_ctx_train);
    }
    if (p.n_batch <= 0) p.n_batch = 512;
    if (p.n_batch > p.n_ctx) p.n_batch = p.n_ctx;
    if (p.n_batch < MTPLX_MAX_DRAFT + 1) p.n_batch = MTPLX_MAX_DRAFT + 1;
    mtplx_ctx *c = calloc(1, sizeof *c);
    if (!c) return mtplx_fail(MTPLX_ERR_NOMEM, "context: out of memory");
    c->model = model;
    c->n_ctx = p.n_ctx;
    c->n_batch = p.n_batch;
    int64_t max_k = hp->n_ff;
    if ((int64_t)hp->n_head * hp->head_dim > max_k) max_k = (int64_t)hp->n_head * hp->head_dim;
    if (2 * (int64_t)hp->n_embd > max_k) max_k = 2 * (int64_t)hp->n_embd;
    mtplx_status st = MTPLX_OK;
    if (p.share_backend_of) {
        const mtplx_ctx *o = p.share_backend_of;
        if (o->model != model || p.n_ctx > o->n_ctx || p.n_batch > o->n_batch)
            st = mtplx_fail(MTPLX_ERR_ARG, "context: a shared backend must come from a context of the "
                                           "same model with n_ctx >= %d and n_batch >= %d", p.n_ctx, p.n_batch);
        c->be = o->be;
        c->be_shared = true;
    } else {
        st = mtplx_backend_cpu_new(p.n_threads, max_k, p.n_batch, p.n_ctx, &c->be);
    }
    if (st == MTPLX_OK) st = mtplx_kv_init(&c->kv, c->be, hp, hp->n_layer, p.n_ctx, p.kv_f32);
    if (st == MTPLX_OK) st = mtplx_acts_init(&c->acts, c->be, hp, p.n_batch);
    c->tokens = calloc((size_t)p.n_ctx, sizeof(int32_t));
    c->work = calloc((size_t)hp->n_vocab, sizeof(float));
    c->work_idx = calloc((size_t)hp->n_vocab, sizeof(int32_t));
    if (st == MTPLX_OK && (!c->tokens || !c->work || !c->work_idx))
        st = mtplx_fail(MTPLX_ERR_NOMEM, "context: out of memory");
    for (int i = 0; st == MTPLX_OK && i <= MTPLX_MAX_DRAFT; i++) {
        c->p[i] = calloc((size_t)hp->n_vocab, sizeof(float));
        c->q[i] = calloc((size_t)hp->n_vocab, sizeof(float));
        if (!c->p[i] || !c->q[i]) st = mtplx_fail(MTPLX_ERR_NOMEM, "context: out of memory");
    }
    if (st == MTPLX_OK && model->n_mtp > 0) {
        c->has_mtp = true;
        c->n_pend_max = p.n_batch + MTPLX_MAX_DRAFT + 1;
        st = mtplx_kv_init(&c->mtp_kv, c->be, hp, 1, p.n_ctx, p.kv_f32);
        if (st == MTPLX_OK) st = mtplx_acts_init(&c->mtp_acts, c->be, hp, p.n_batch);
        c->pend_hidden = calloc((size_t)c->n_pend_max * (size_t)hp->n_embd, sizeof(float));
        if (st == MTPLX_OK && !c->pend_hidden) st = mtplx_fail(MTPLX_ERR_NOMEM, "context: out of memory");
    }
    if (st != MTPLX_OK) {
        mtplx_ctx_free(c);
        return st;
    }
    *out = c;
    return MTPLX_OK;
}

void mtplx_ctx_free(mtplx_ctx *c) {
    if (!c) return;
    if (c->be) {
        mtplx_kv_free(&c->kv, c->be);
        mtplx_acts_free(&c->acts, c->be);
        mtplx_kv_free(&c->mtp_kv, c->be);
        mtplx_acts_free(&c->mtp_acts, c->be);
        if (!c->be_shared) c->be->free(c->be);
    }
    for (int i = 0; i <= MTPLX_MAX_DRAFT; i++) {
        free(c->p[i]);
        free(c->q[i]);
    }
    free(c->pend_hidden);
    free(c->tokens);
    free(c->work);
    free(c->work_idx);
    free(c);
}

int32_t mtplx_ctx_n_past(const mtplx_ctx *c) { return c->n_past; }
int32_t mtplx_ctx_n_ctx(const mtplx_ctx *c) { return c->n_ctx; }

mtplx_status mtplx_ctx_truncate(mtplx_ctx *c, int32_t n_past) {
    if (n_past < 0 || n_past > c->n_past)
        return mtplx_fail(MTPLX_ERR_RANGE, "truncate to %d: the cache holds %d positions", n_past,
                          c->n_past);
    c->n_past = n_past;
    if (c->mtp_n_past > n_past) c->mtp_n_past = n_past;
    return MTPLX_OK;
}

/* Run the head over positions [mtp_n_past, upto), in chunks; position j
 * pairs h_j with the token after it: ctx->tokens[j+1], or `next` for the
 * newest position. The last chunk's last row leaves its logits (row 0) and
 * output hidden state in ctx->mtp_acts; *last_row gets that row. */
static void mtp_run(mtplx_ctx *c, int64_t upto, int32_t next, int64_t *last_row) {
    int64_t e = c->model->hp.n_embd;
    int32_t *toks = c->work_idx; /* free between samplings */
    while (c->mtp_n_past < upto) {
        int64_t n = upto - c->mtp_n_past;
        if (n > c->mtp_acts.n_max) n = c->mtp_acts.n_max;
        for (int64_t i = 0; i < n; i++) {
            int64_t pos = c->mtp_n_past + i;
            toks[i] = pos + 1 < c->n_known ? c->tokens[pos + 1] : next;
        }
        mtplx_mtp_forward(c->model, 0, c->be, &c->mtp_kv, &c->mtp_acts, toks, c->pend_hidden, n,
                          c->mtp_n_past);
        int64_t left = (c->n_past - c->mtp_n_past) - n;
        if (left > 0)
            memmove(c->pend_hidden, c->pend_hidden + n * e, (size_t)left * (size_t)e * sizeof(float));
        c->mtp_n_past += (int32_t)n;
        if (last_row) *last_row = n - 1;
    }
}

mtplx_status mtplx_ctx_decode(mtplx_ctx *c, const int32_t *tokens, int32_t n, bool all_logits,
                              bool committed) {
    if (n <= 0) return mtplx_fail(MTPLX_ERR_ARG, "forward: no tokens");
    if (c->n_past + n > c->n_ctx)
        return mtplx_fail(MTPLX_ERR_RANGE, "forward: %d + %d tokens exceed the context of %d",
                          c->n_past, n, c->n_ctx);
    if (all_logits && n > c->acts.n_logits)
        return mtplx_fail(MTPLX_ERR_RANGE, "forward: all logits kept for at most %lld tokens at once, got %d",
                          (long long)c->acts.n_logits, n);
    int32_t V = c->model->hp.n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return mtplx_fail(MTPLX_ERR_RANGE, "forward: token id %d is outside the vocabulary (0..%d)",
                              tokens[i], V - 1);
    for (int32_t done = 0; done < n;) {
        int32_t m = n - done < c->n_batch ? n - done : c->n_batch;
        memcpy(c->tokens + c->n_past, tokens + done, (size_t)m * sizeof(int32_t));
        c->n_known = c->n_past + m; /* the head may pair position n_past-1 with this chunk's first */
        mtplx_model_forward(c->model, c->be, &c->kv, &c->acts, tokens + done, m, c->n_past,
                            all_logits);
        if (c->mtp_on) {
            /* a long prefill: let the head consume committed positions so the
             * pending buffer never holds more than one chunk */
            if (committed && c->n_past - c->mtp_n_past + m > c->n_pend_max)
                mtp_run(c, c->n_past, 0, NULL);
            if (c->n_past - c->mtp_n_past + m > c->n_pend_max) {
                c->mtp_on = false; /* cannot keep up: the head restarts later */
            } else {
                int64_t e = c->model->hp.n_embd;
                memcpy(c->pend_hidden + (int64_t)(c->n_past - c->mtp_n_past) * e, c->acts.hidden,
                       (size_t)m * (size_t)e * sizeof(float));
            }
        }
        c->n_past += m;
        done += m;
    }
    c->last_n = n < c->n_batch ? n : (n % c->n_batch ? n % c->n_batch : c->n_batch);
    c->last_all = all_logits;
    return MTPLX_OK;
}

mtplx_status mtplx_mtp_catch_up(mtplx_ctx *c, int32_t next, int64_t *row) {
    MTPLX_ASSERT(c->has_mtp && c->mtp_on && c->mtp_n_past < c->n_past);
    c->n_known = c->n_past; /* the newest position pairs with `next` */
    mtp_run(c, c->n_past, next, row);
    return MTPLX_OK;
}

mtplx_status mtplx_forward(mtplx_ctx *c, const int32_t *tokens, int32_t n, bool all_logits) {
    if (!c || !tokens) return mtplx_fail(MTPLX_ERR_ARG, "forward: NULL argument");
    c->mtp_on = false;
    return mtplx_ctx_decode(c, tokens, n, all_logits, true);
}

const float *mtplx_logits(const mtplx_ctx *c, int32_t i) {
    if (c->last_n <= 0) return NULL;
    if (!c->last_all) return i == c->last_n - 1 || i == -1 ? c->acts.logits : NULL;
    if (i < 0 || i >= c->last_n) return NULL;
    return c->acts.logits + (int64_t)i * c->model->hp.n_vocab;
}
