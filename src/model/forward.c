/* forward.c: the decoder forward pass for n tokens (prefill, decode and
 * verification alike) and the MTP head's forward, on a backend.
 *
 * Activations are [n][dim] row-major f32; the KV cache is per layer
 * [n_ctx][n_head_kv * head_dim] in F16 (default), F32 or Q8_0 (GGUF blocks,
 * each position quantized on its own when stored). Writing positions
 * pos0.. overwrites whatever a rejected draft left there, which is why
 * rolling back the cache is only a counter.
 *
 * A backend that can capture a whole forward (CUDA graphs: be->graph_begin)
 * is offered every single-sequence forward; it replays a capture instead of
 * receiving the ops one by one. The ops issued are the same either way. */
#include "kernels/kernels.h"
#include "model/model.h"

#include <math.h>
#include <string.h>

mtplx_status mtplx_kv_init(mtplx_kv *kv, mtplx_backend *be, const mtplx_hparams *hp, int n_layers,
                           int64_t n_ctx, int kv_type) {
    memset(kv, 0, sizeof *kv);
    int64_t row = (int64_t)hp->n_head_kv * hp->head_dim;
    if (kv_type != MTPLX_TYPE_F16 && kv_type != MTPLX_TYPE_F32 && kv_type != MTPLX_TYPE_Q8_0)
        return mtplx_fail(MTPLX_ERR_ARG, "KV cache: type %d is not F16, F32 or Q8_0", kv_type);
    if (kv_type == MTPLX_TYPE_Q8_0 && (hp->head_dim % QK8_0 || hp->head_dim > MTPLX_KV_Q8_0_MAX_HEAD_DIM))
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "KV cache: Q8_0 needs a head_dim that is a multiple "
                          "of %d (blocks must not straddle heads) and at most %d, the model has %d; use F16",
                          QK8_0, MTPLX_KV_Q8_0_MAX_HEAD_DIM, hp->head_dim);
    kv->kv_type = kv_type;
    kv->n_ctx = n_ctx;
    kv->row = row;
    kv->row_bytes = mtplx_row_size(kv_type, row);
    kv->n_layers = n_layers;
    kv->k = calloc((size_t)n_layers, sizeof(void *));
    kv->v = calloc((size_t)n_layers, sizeof(void *));
    if (!kv->k || !kv->v) goto oom;
    size_t bytes = (size_t)n_ctx * kv->row_bytes;
    for (int i = 0; i < n_layers; i++) {
        kv->k[i] = be->buf_alloc(be, bytes);
        kv->v[i] = be->buf_alloc(be, bytes);
        if (!kv->k[i] || !kv->v[i]) goto oom;
    }
    return MTPLX_OK;
oom:
    mtplx_kv_free(kv, be);
    return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory for a KV cache of %lld positions",
                      (long long)n_ctx);
}

void mtplx_kv_free(mtplx_kv *kv, mtplx_backend *be) {
    for (int i = 0; i < kv->n_layers; i++) {
        if (kv->k) be->buf_free(be, kv->k[i]);
        if (kv->v) be->buf_free(be, kv->v[i]);
    }
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}

mtplx_status mtplx_acts_init(mtplx_acts *a, mtplx_backend *be, const mtplx_hparams *hp,
                             int64_t n) {
    memset(a, 0, sizeof *a);
    a->n_max = n;
    size_t f = sizeof(float);
    int64_t qd = (int64_t)hp->n_head * hp->head_dim, kvd = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t wide = qd > hp->n_embd ? qd : hp->n_embd;
    struct { float **p; int64_t d; } bufs[] = {
        {&a->x, hp->n_embd}, {&a->xb, wide},         {&a->q, qd},    {&a->k, kvd},
        {&a->v, kvd},        {&a->att, qd},          {&a->hb, hp->n_ff}, {&a->hb2, hp->n_ff},
        {&a->hidden, hp->n_embd}, {&a->logits, hp->n_vocab}, {&a->cat, 2 * (int64_t)hp->n_embd}};
    a->n_logits = n < MTPLX_LOGITS_ROWS ? n : MTPLX_LOGITS_ROWS;
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
        int64_t rows = bufs[i].p == &a->logits ? a->n_logits : n;
        *bufs[i].p = be->buf_alloc(be, (size_t)rows * (size_t)bufs[i].d * f);
        if (!*bufs[i].p) {
            mtplx_acts_free(a, be);
            return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory for activations of %lld tokens",
                              (long long)n);
        }
    }
    return MTPLX_OK;
}

void mtplx_acts_free(mtplx_acts *a, mtplx_backend *be) {
    float *ps[] = {a->x, a->xb, a->q, a->k, a->v, a->att, a->hb, a->hb2, a->hidden, a->logits, a->cat};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) be->buf_free(be, ps[i]);
    memset(a, 0, sizeof *a);
}

/* The ops a backend may fuse (backend.h: matmul_multi / _swiglu / _add),
 * with the plain ops as the fallback; the results are the same (up to f32
 * rounding where the norm is fused too). */

/* a->q, a->k, a->v from rmsnorm(a->x, attn_norm) (in a->xb when unfused) */
static void qkv_proj(const mtplx_hparams *hp, mtplx_backend *be, const mtplx_layer *L,
                     mtplx_acts *a, int64_t n) {
    const mtplx_weight *w[3] = {&L->wq, &L->wk, &L->wv};
    const float *b[3] = {L->bq, L->bk, L->bv};
    float *y[3] = {a->q, a->k, a->v};
    float eps = hp->norm_eps;
    if (be->matmul_multi && be->matmul_multi(be, 3, w, b, a->x, L->attn_norm, eps, n, y)) return;
    be->rmsnorm(be, a->x, L->attn_norm, a->xb, n, hp->n_embd, eps);
    if (be->matmul_multi && be->matmul_multi(be, 3, w, b, a->xb, NULL, 0.f, n, y)) return;
    for (int j = 0; j < 3; j++)
        be->matmul(be, w[j], b[j], a->xb, n, y[j]);
}

/* y[n][w->m] += x . W^T, through tmp [n][w->m] when not fused. */
static void proj_add(mtplx_backend *be, const mtplx_weight *w, const float *x, int64_t n, float *y,
                     float *tmp) {
    if (be->matmul_add && be->matmul_add(be, w, x, n, y)) return;
    be->matmul(be, w, NULL, x, n, tmp);
    be->add(be, y, tmp, n * w->m);
}

/* a->hb = silu(xn . gate^T) * (xn . up^T), xn = rmsnorm(a->x, ffn_norm) (in
 * a->xb when unfused); a->hb2 is the unfused scratch. */
static void ffn_gate_up(const mtplx_hparams *hp, mtplx_backend *be, const mtplx_layer *L,
                        mtplx_acts *a, int64_t n) {
    const mtplx_weight *g = &L->w_gate, *u = &L->w_up;
    float eps = hp->norm_eps;
    if (be->matmul_swiglu && be->matmul_swiglu(be, g, u, a->x, L->ffn_norm, eps, n, a->hb)) return;
    be->rmsnorm(be, a->x, L->ffn_norm, a->xb, n, hp->n_embd, eps);
    if (be->matmul_swiglu && be->matmul_swiglu(be, g, u, a->xb, NULL, 0.f, n, a->hb)) return;
    be->matmul(be, &L->w_gate, NULL, a->xb, n, a->hb);
    be->matmul(be, &L->w_up, NULL, a->xb, n, a->hb2);
    be->silu_mul(be, a->hb, a->hb2, a->hb, n * L->w_gate.m);
}

/* One pre-norm decoder layer over a->x [n][n_embd], in place. The rows are
 * nseg sequences one after the other: the matmuls run once over all rows
 * (each weight read once for every sequence), RoPE, the KV store and
 * attention run per sequence, against its own cache (layer `layer` of it). */
static void layer_forward(const mtplx_model *m, const mtplx_layer *L, mtplx_backend *be, int layer,
                          mtplx_acts *a, const mtplx_seg *segs, int nseg) {
    const mtplx_hparams *hp = &m->hp;
    int64_t hd = hp->head_dim, n = 0;
    for (int s = 0; s < nseg; s++) n += segs[s].n;
    int64_t qd = (int64_t)hp->n_head * hd, kvd = (int64_t)hp->n_head_kv * hd;
    qkv_proj(hp, be, L, a, n);
    /* one sequence: q/k norms, RoPE and the KV stores may be one fused op */
    bool prepped = nseg == 1 && be->qk_norm_rope_store &&
                   be->qk_norm_rope_store(be, a->q, a->k, a->v, n, hp->n_head, hp->n_head_kv,
                                          (int)hd, L->q_norm, L->k_norm, hp->norm_eps, segs[0].pos0,
                                          m->inv_freq, m->arch->rope_neox, segs[0].kv->kv_type,
                                          segs[0].kv->k[layer], segs[0].kv->v[layer]);
    if (L->q_norm && !prepped)
        be->rmsnorm(be, a->q, L->q_norm, a->q, n * hp->n_head, hd, hp->norm_eps);
    if (L->k_norm && !prepped)
        be->rmsnorm(be, a->k, L->k_norm, a->k, n * hp->n_head_kv, hd, hp->norm_eps);
    for (int s = 0, r = 0; s < nseg; r += (int)segs[s].n, s++) {
        const mtplx_seg *g = &segs[s];
        void *kc = g->kv->k[layer], *vc = g->kv->v[layer];
        if (!prepped) {
            be->rope(be, a->q + r * qd, g->n, hp->n_head, (int)hd, g->pos0, m->inv_freq,
                     m->arch->rope_neox);
            be->rope(be, a->k + r * kvd, g->n, hp->n_head_kv, (int)hd, g->pos0, m->inv_freq,
                     m->arch->rope_neox);
            be->kv_store(be, g->kv->kv_type, kc, g->pos0, a->k + r * kvd, g->n, kvd);
            be->kv_store(be, g->kv->kv_type, vc, g->pos0, a->v + r * kvd, g->n, kvd);
        }
        be->attention(be, a->q + r * qd, g->n, hp->n_head, hp->n_head_kv, (int)hd, kc, vc,
                      g->kv->kv_type, g->pos0, 1.0f / sqrtf((float)hd), a->att + r * qd);
    }
    proj_add(be, &L->wo, a->att, n, a->x, a->xb);
    ffn_gate_up(hp, be, L, a, n);
    proj_add(be, &L->w_down, a->hb, n, a->x, a->xb);
}

/* Final norm + lm_head for rows [first, first+cnt) of a->x into a->logits;
 * n_out < n_vocab: the first n_out outputs only (rows of the output matrix
 * are whole rows in both the plain and the prepared 8-row-tile layouts, so a
 * prefix of them is itself a valid weight). */
static void head(const mtplx_model *m, const mtplx_weight *out, const float *norm, mtplx_backend *be,
                 mtplx_acts *a, int64_t first, int64_t cnt, int64_t n_out) {
    int64_t e = m->hp.n_embd;
    mtplx_weight w = *out;
    if (n_out > 0 && n_out < w.m) {
        MTPLX_ASSERT(n_out % 8 == 0 && cnt == 1);
        w.m = n_out;
    }
    /* the norm fused into the matmul where the backend can */
    const mtplx_weight *wp = &w;
    const float *no_bias = NULL;
    if (be->matmul_multi && be->matmul_multi(be, 1, &wp, &no_bias, a->x + first * e, norm,
                                             m->hp.norm_eps, cnt, &a->logits))
        return;
    be->rmsnorm(be, a->x + first * e, norm, a->xb, cnt, e, m->hp.norm_eps);
    be->matmul(be, &w, NULL, a->xb, cnt, a->logits);
}

/* MTPLX_GRAPH_* for a single-sequence forward of n rows at pos0. The key
 * names buffers by their backend addresses (the cache's first K buffer, the
 * activations' first buffer), not by the host structs, which may be views
 * rebuilt on the stack (engine/embed.c). */
static int graph_begin(mtplx_backend *be, int32_t kind, const mtplx_model *m, const mtplx_kv *kv,
                       const mtplx_acts *a, const void *input, const int32_t *tokens, int64_t n,
                       int64_t pos0) {
    if (!be->graph_begin) return MTPLX_GRAPH_NONE;
    mtplx_graph_key key = {.ptr = {m, kv->k[0], a->x, input}, .n = n, .kind = kind};
    return be->graph_begin(be, &key, tokens, n, pos0);
}

static void trunk_ops(const mtplx_model *m, mtplx_backend *be, mtplx_acts *a, const int32_t *tokens,
                      const mtplx_seg *segs, int nseg, int64_t n, bool all_logits) {
    int64_t e = m->hp.n_embd;
    mtplx_be_get_rows(be, &m->tok_embd, tokens, n, a->x);
    for (int l = 0; l < m->hp.n_layer; l++) layer_forward(m, &m->layers[l], be, l, a, segs, nseg);
    mtplx_be_copy(be, a->hidden, a->x, (size_t)(n * e) * sizeof(float));
    if (all_logits) head(m, &m->output, m->output_norm, be, a, 0, n, 0);
    else head(m, &m->output, m->output_norm, be, a, n - 1, 1, 0);
}

void mtplx_model_forward_segs(const mtplx_model *m, mtplx_backend *be, mtplx_acts *a,
                              const int32_t *tokens, const mtplx_seg *segs, int nseg, bool all_logits) {
    int64_t n = 0;
    for (int s = 0; s < nseg; s++) {
        MTPLX_ASSERT(segs[s].n > 0 && segs[s].pos0 >= 0 && segs[s].pos0 + segs[s].n <= segs[s].kv->n_ctx);
        n += segs[s].n;
    }
    MTPLX_ASSERT(n > 0 && n <= a->n_max);
    MTPLX_ASSERT(!all_logits || n <= a->n_logits);
    int g = nseg == 1 ? graph_begin(be, all_logits ? 1 : 0, m, segs[0].kv, a, NULL, tokens, n,
                                    segs[0].pos0)
                      : MTPLX_GRAPH_NONE;
    if (g == MTPLX_GRAPH_REPLAYED) return;
    trunk_ops(m, be, a, tokens, segs, nseg, n, all_logits);
    if (g == MTPLX_GRAPH_CAPTURE && !be->graph_end(be)) trunk_ops(m, be, a, tokens, segs, nseg, n, all_logits);
}

void mtplx_model_forward(const mtplx_model *m, mtplx_backend *be, mtplx_kv *kv, mtplx_acts *a,
                         const int32_t *tokens, int64_t n, int64_t pos0, bool all_logits) {
    mtplx_seg seg = {kv, pos0, n};
    mtplx_model_forward_segs(m, be, a, tokens, &seg, 1, all_logits);
}

static void mtp_ops(const mtplx_model *m, int hi, mtplx_backend *be, mtplx_kv *kv, mtplx_acts *a,
                    const int32_t *tokens, const float *hidden, int64_t n, int64_t pos0,
                    int64_t n_out) {
    /* the CPU's Q4_0 draft copies (lm_head, head matrices) when made; the
     * GPU's fast GEMV reads the original types (mmv.cu) */
    bool cpu = !strcmp(be->name, "cpu");
    const mtplx_mtp_head *h = cpu && m->draft_mtp ? &m->draft_mtp[hi] : &m->mtp[hi];
    int64_t e = m->hp.n_embd;
    float eps = m->hp.norm_eps;
    int64_t eo = h->hidden_first ? e : 0, ho = h->hidden_first ? 0 : e;
    for (int64_t i = 0; i < n; i++) {
        float *c = a->cat + i * 2 * e;
        mtplx_be_get_rows(be, &m->tok_embd, tokens + i, 1, a->xb);
        be->rmsnorm(be, a->xb, h->enorm, c + eo, 1, e, eps);
        be->rmsnorm(be, hidden + i * e, h->hnorm, c + ho, 1, e, eps);
    }
    be->matmul(be, &h->eh_proj, NULL, a->cat, n, a->x);
    mtplx_seg seg = {kv, pos0, n};
    layer_forward(m, &h->layer, be, 0, a, &seg, 1);
    mtplx_be_copy(be, a->hidden, a->x, (size_t)(n * e) * sizeof(float));
    bool draft_lm = cpu && m->draft_output.data; /* set before any CPU context */
    head(m, draft_lm ? &m->draft_output : &m->output, h->norm, be, a, n - 1, 1, n_out);
}

void mtplx_mtp_forward(const mtplx_model *m, int hi, mtplx_backend *be, mtplx_kv *kv,
                       mtplx_acts *a, const int32_t *tokens, const float *hidden, int64_t n,
                       int64_t pos0) {
    mtplx_mtp_forward_vocab(m, hi, be, kv, a, tokens, hidden, n, pos0, 0);
}

void mtplx_mtp_forward_vocab(const mtplx_model *m, int hi, mtplx_backend *be, mtplx_kv *kv,
                             mtplx_acts *a, const int32_t *tokens, const float *hidden, int64_t n,
                             int64_t pos0, int64_t n_out) {
    MTPLX_ASSERT(hi >= 0 && hi < m->n_mtp && n > 0 && n <= a->n_max && pos0 + n <= kv->n_ctx);
    if (n_out >= m->output.m) n_out = 0;
    /* graphs capture the whole output matrix only */
    int g = n_out ? MTPLX_GRAPH_NONE : graph_begin(be, 2 + hi, m, kv, a, hidden, tokens, n, pos0);
    if (g == MTPLX_GRAPH_REPLAYED) return;
    mtp_ops(m, hi, be, kv, a, tokens, hidden, n, pos0, n_out);
    if (g == MTPLX_GRAPH_CAPTURE && !be->graph_end(be)) mtp_ops(m, hi, be, kv, a, tokens, hidden, n, pos0, n_out);
}
