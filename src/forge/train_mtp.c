/* train_mtp.c: `forge train-mtp`: train a Qwen3-Next-style MTP head for a
 * frozen trunk, on the CPU, by self-distillation.
 *
 * Each step takes one window of S+K tokens t_0.. of the text, runs the trunk
 * over it with the library (the same forward the runtime decodes with) and
 * keeps the pre-final-norm hidden states h_j and the trunk's distributions
 * p_i = softmax(lm_head(norm(h_i))). Then, exactly as the runtime drafts
 * (src/engine/context.c mtplx_mtp_draft, tools/train_default.py):
 *     stream d row j:  g_{d,j} = head(t_{j+d}, g_{d-1,j}),  g_{0,j} = h_j,
 *     loss_{d,j} = KL(p_{j+d} || softmax(lm_head(norm_head(g_{d,j}))))
 * i.e. the head at depth d learns the trunk's own distribution for the token
 * after t_{j+d} (what the verifier will compare drafts against). Gradients
 * flow through every depth (unrolled, shared weights), then AdamW (betas 0.9
 * / 0.95, decoupled weight decay on matrices), global-norm clipping and a
 * cosine learning rate after a linear warmup.
 *
 * Initialisation: the head's decoder layer is a copy of the trunk's LAST
 * layer; fc = [0 | I], so at first x0 is the (re-normalised) trunk hidden
 * state and the head starts as "one more last layer" (on the default model:
 * held-out KL 6.0 nats at init, against 11.7 for fc = [I/2 | I/2]); the
 * embedding half of fc starts at zero and gets its gradient like any other
 * weight. enorm = hnorm = the trunk hidden states' mean RMS (x0 then has the
 * scale the copied layer was trained on); the head's final norm is the
 * trunk's output norm. The lm_head stays the model's own.
 *
 * Speed: a step is one window, every row of it at once (one trunk forward,
 * GEMMs of S rows through the library's matmul on the thread pool). The
 * lm_head products, most of the work, go through the int8 kernels: the
 * targets are the logits of the runtime's own forward, the head's logits use
 * the model's own (quantized) output weight, i.e. what the runtime drafts and
 * verifies with, and the backward's d logits . Wout uses a Q8_0 copy of
 * Wout^T (--f32-lm-head: all three in f32, the reference the gradient test
 * checks). Results depend on the seed and the thread count only.
 *
 * Left out: batches of several windows per step, caching the trunk across
 * epochs (one pass over the text is the use case), MiMo's [hidden, emb]
 * order. */
#include "forge/forge.h"
#include "forge/mtp_head.h"

#include "engine/engine.h"
#include "formats/formats.h"
#include "kernels/kernels.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

mtplx_train_params mtplx_train_default_params(void) {
    return (mtplx_train_params){.depth = 1, .steps = 200, .seq = 128, .lr = 1e-3f,
                                .weight_decay = 0.1f, .clip = 1.0f, .warmup_frac = 0.05f,
                                .seed = 1234, .eval_windows = 4, .on_policy = 0.f,
                                .pool_windows = 256};
}

typedef struct trainer {
    const mtplx_train_params *p;
    mtplx_model *m;
    mtplx_ctx *ctx;
    mtplx_threadpool *tp;
    int64_t K, S, E, V;
    head_layout L;
    float *w, *grad, *adam_m, *adam_v; /* [L.n] each */
    int64_t step;
    float *wout, *woutT;   /* [V][E], [E][V] */
    int32_t *toks;
    size_t n_toks, n_train;/* training windows start below n_train - (S + K) */
    int32_t *pool;         /* [n_pool][S+K] on-policy windows (p->on_policy), or NULL */
    size_t n_pool;
    float *hid, *probs;    /* [S+K][E] trunk hidden, [S+K][V] trunk distributions */
    double *negent;        /* [S+K] sum p log p of each row of probs */
    int32_t *top;          /* [S+K] argmax of each row of probs */
    void *woutT_q;         /* woutT [E][V] as Q8_0 (plain rows), or NULL */
    void *woutT_prep;      /* the same, prepared, or NULL */
    head_stream st[MTPLX_TRAIN_MAX_DEPTH];
    float *dg[MTPLX_TRAIN_MAX_DEPTH]; /* dg[d]: gradient at stream d+1's output from depth d+2 */
    head_work wk;
    head_frozen fz;
    uint64_t rng;
} trainer;

static void embed_row(void *user, int32_t id, float *out) {
    const mtplx_model *m = user;
    size_t rs = mtplx_row_size(m->tok_embd.type, m->tok_embd.k);
    mtplx_dequantize_row(m->tok_embd.type, (const char *)m->tok_embd.data + (size_t)id * rs, out,
                         m->tok_embd.k);
}

static void weight_to_f32(const mtplx_weight *wt, float *out) {
    size_t rs = mtplx_row_size(wt->type, wt->k);
    for (int64_t r = 0; r < wt->m; r++)
        mtplx_dequantize_row(wt->type, (const char *)wt->data + (size_t)r * rs, out + r * wt->k, wt->k);
}

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ---- one window: trunk, then the head's K streams (and their backward) ---- */

static mtplx_status trunk(trainer *tr, const int32_t *win) {
    int64_t n = tr->S + tr->K, E = tr->E, V = tr->V;
    MTPLX_TRY(mtplx_ctx_truncate(tr->ctx, 0));
    /* in chunks: the context keeps all logits for at most acts.n_logits rows
     * (results do not depend on the chunking: the kernels are batch invariant) */
    for (int64_t r0 = 0, ch = tr->ctx->acts.n_logits; r0 < n; r0 += ch) {
        int64_t cnt = n - r0 < ch ? n - r0 : ch;
        MTPLX_TRY(mtplx_forward(tr->ctx, win + r0, (int32_t)cnt, true));
        memcpy(tr->hid + r0 * E, tr->ctx->acts.hidden, (size_t)(cnt * E) * sizeof(float));
        /* trunk distributions (row j+d is the target of stream d row j; row 0 is
         * nobody's): the logits the runtime's verifier computes */
        int64_t skip = r0 == 0;
        head_targets(tr->tp, mtplx_logits(tr->ctx, (int32_t)skip), cnt - skip, V,
                     tr->probs + (r0 + skip) * V, tr->negent + r0 + skip, tr->top + r0 + skip);
    }
    return MTPLX_OK;
}

/* Loss (mean KL over rows, per depth) of the window at win; with backward,
 * tr->grad receives the gradient of the mean over depths. */
static mtplx_status run_window(trainer *tr, const int32_t *win, bool backward, double *loss,
                               double *agree) {
    MTPLX_TRY(trunk(tr, win));
    int64_t K = tr->K, S = tr->S;
    float scale = 1.0f / (float)(S * K);
    for (int64_t d = 1; d <= K; d++) {
        head_stream *st = &tr->st[d - 1];
        st->tok = win + d;
        st->g_in = d == 1 ? tr->hid : tr->st[d - 2].x2;
        head_target tg = {tr->probs + d * tr->V, tr->negent + d, tr->top + d};
        head_forward(&tr->L, tr->w, &tr->fz, &tr->wk, st, &tg, scale);
        loss[d - 1] = st->loss / (double)S;
        agree[d - 1] = (double)st->agree / (double)S;
    }
    if (!backward) return MTPLX_OK;
    memset(tr->grad, 0, tr->L.n * sizeof(float));
    for (int64_t d = K; d >= 1; d--)
        head_backward(&tr->L, tr->w, tr->grad, &tr->fz, &tr->wk, &tr->st[d - 1],
                      d < K ? tr->dg[d - 1] : NULL, d > 1 ? tr->dg[d - 2] : NULL);
    return MTPLX_OK;
}

static mtplx_status evaluate(trainer *tr, double *loss, double *agree) {
    int64_t K = tr->K, n = tr->S + K, nw = tr->p->eval_windows > 0 ? tr->p->eval_windows : 1;
    double l[MTPLX_TRAIN_MAX_DEPTH], a[MTPLX_TRAIN_MAX_DEPTH];
    for (int64_t d = 0; d < K; d++) loss[d] = agree[d] = 0;
    size_t lo = tr->n_train, span = tr->n_toks - (size_t)n - lo;
    for (int64_t i = 0; i < nw; i++) {
        size_t at = lo + (nw > 1 ? span * (size_t)i / (size_t)(nw - 1) : 0);
        MTPLX_TRY(run_window(tr, tr->toks + at, false, l, a));
        for (int64_t d = 0; d < K; d++) {
            loss[d] += l[d] / (double)nw;
            agree[d] += a[d] / (double)nw;
        }
    }
    return MTPLX_OK;
}

/* ---- AdamW with a cosine schedule ---- */

static float lr_at(const mtplx_train_params *p, int64_t step) {
    int64_t warm = (int64_t)(p->warmup_frac * (float)p->steps);
    if (warm < 1) warm = 1;
    if (step < warm) return p->lr * (float)(step + 1) / (float)warm;
    double t = (double)(step - warm) / (double)(p->steps > warm ? p->steps - warm : 1);
    if (t > 1) t = 1;
    return (float)(p->lr * (0.1 + 0.9 * 0.5 * (1 + cos(M_PI * t)))); /* down to lr / 10 */
}

static void adamw(trainer *tr) {
    const mtplx_train_params *p = tr->p;
    double nrm = 0;
    for (size_t i = 0; i < tr->L.n; i++) nrm += (double)tr->grad[i] * tr->grad[i];
    nrm = sqrt(nrm);
    float clip = p->clip > 0 && nrm > p->clip ? (float)(p->clip / nrm) : 1.0f;
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, lr = lr_at(p, tr->step);
    tr->step++;
    float c1 = 1.0f - powf(b1, (float)tr->step), c2 = 1.0f - powf(b2, (float)tr->step);
    for (int t = 0; t < HP_COUNT; t++) {
        const head_tensor *ht = &tr->L.t[t];
        if (!ht->present) continue;
        float wd = ht->decay ? p->weight_decay : 0.0f;
        for (size_t i = ht->off; i < ht->off + (size_t)(ht->ne0 * ht->ne1); i++) {
            float g = tr->grad[i] * clip;
            tr->adam_m[i] = b1 * tr->adam_m[i] + (1 - b1) * g;
            tr->adam_v[i] = b2 * tr->adam_v[i] + (1 - b2) * g * g;
            float mh = tr->adam_m[i] / c1, vh = tr->adam_v[i] / c2;
            tr->w[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * tr->w[i]);
        }
    }
}

/* ---- initialisation, checkpoints, output ---- */

static void init_params(trainer *tr) {
    const mtplx_model *m = tr->m;
    const mtplx_layer *last = &m->layers[m->hp.n_layer - 1];
    head_layout *L = &tr->L;
    int64_t E = tr->E;
    float *w = tr->w;
    const mtplx_weight *mats[HP_COUNT] = {[HP_WQ] = &last->wq, [HP_WK] = &last->wk, [HP_WV] = &last->wv,
                                          [HP_WO] = &last->wo, [HP_WG] = &last->w_gate,
                                          [HP_WU] = &last->w_up, [HP_WD] = &last->w_down};
    const float *vecs[HP_COUNT] = {[HP_ATTN_NORM] = last->attn_norm, [HP_FFN_NORM] = last->ffn_norm,
                                   [HP_BQ] = last->bq, [HP_BK] = last->bk, [HP_BV] = last->bv,
                                   [HP_QNORM] = last->q_norm, [HP_KNORM] = last->k_norm,
                                   [HP_NORM] = m->output_norm};
    for (int t = 0; t < HP_COUNT; t++) {
        const head_tensor *ht = &L->t[t];
        if (!ht->present) continue;
        if (mats[t]) weight_to_f32(mats[t], w + ht->off);
        else if (vecs[t]) memcpy(w + ht->off, vecs[t], (size_t)ht->ne0 * sizeof(float));
    }
    /* enorm = hnorm = mean RMS of the trunk's hidden states (of the first held-out window) */
    double rms = 0;
    for (int64_t j = 0; j < tr->S; j++) {
        double ss = 0;
        for (int64_t c = 0; c < E; c++) ss += (double)tr->hid[j * E + c] * tr->hid[j * E + c];
        rms += sqrt(ss / (double)E) / (double)tr->S;
    }
    for (int64_t c = 0; c < E; c++) {
        w[L->t[HP_ENORM].off + c] = (float)rms;
        w[L->t[HP_HNORM].off + c] = (float)rms;
    }
    float *fc = w + L->t[HP_FC].off; /* [E rows][2E] */
    memset(fc, 0, (size_t)(2 * E * E) * sizeof(float));
    for (int64_t r = 0; r < E; r++) fc[r * 2 * E + E + r] = 1.0f;
}

/* Baseline: every matrix N(0, 1/fan_in), norms 1 (a head that knows nothing). */
static void init_random(trainer *tr) {
    uint64_t s = tr->p->seed ^ 0x9e3779b97f4a7c15ull;
    for (int t = 0; t < HP_COUNT; t++) {
        const head_tensor *ht = &tr->L.t[t];
        if (!ht->present) continue;
        float *w = tr->w + ht->off;
        for (int64_t i = 0; i < ht->ne0 * ht->ne1; i++) {
            if (ht->ne1 == 1) {
                w[i] = t == HP_BQ || t == HP_BK || t == HP_BV ? 0.0f : 1.0f;
                continue;
            }
            double u1 = ((next_rand(&s) >> 11) + 0.5) / 9007199254740992.0;
            double u2 = ((next_rand(&s) >> 11) + 0.5) / 9007199254740992.0;
            w[i] = (float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2) / sqrt((double)ht->ne0));
        }
    }
}

#define OPT_MAGIC "MTPLXOPT"

static mtplx_status write_opt(const trainer *tr, const char *path) {
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return mtplx_fail(MTPLX_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    uint64_t hdr[4] = {1, tr->L.n, (uint64_t)tr->step, (uint64_t)tr->rng};
    bool ok = fwrite(OPT_MAGIC, 1, 8, f) == 8 && fwrite(hdr, sizeof hdr, 1, f) == 1 &&
              fwrite(tr->w, sizeof(float), tr->L.n, f) == tr->L.n &&
              fwrite(tr->adam_m, sizeof(float), tr->L.n, f) == tr->L.n &&
              fwrite(tr->adam_v, sizeof(float), tr->L.n, f) == tr->L.n;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return mtplx_fail(MTPLX_ERR_IO, "%s: write failed", path);
    }
    return MTPLX_OK;
}

static mtplx_status read_opt(trainer *tr, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return mtplx_fail(MTPLX_ERR_IO, "%s: cannot open the optimizer state: %s", path, strerror(errno));
    char magic[8];
    uint64_t hdr[4];
    mtplx_status st = MTPLX_OK;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, OPT_MAGIC, 8) || fread(hdr, sizeof hdr, 1, f) != 1 ||
        hdr[0] != 1)
        st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: not an mtplx optimizer state (magic %s, version 1)", path, OPT_MAGIC);
    else if (hdr[1] != tr->L.n)
        st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: holds %llu parameters, this model's head has %zu", path,
                        (unsigned long long)hdr[1], tr->L.n);
    else if (fread(tr->w, sizeof(float), tr->L.n, f) != tr->L.n ||
             fread(tr->adam_m, sizeof(float), tr->L.n, f) != tr->L.n ||
             fread(tr->adam_v, sizeof(float), tr->L.n, f) != tr->L.n)
        st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: truncated", path);
    fclose(f);
    if (st == MTPLX_OK) {
        tr->step = (int64_t)hdr[2];
        tr->rng = hdr[3];
    }
    return st;
}

static bool skip_key(const char *key, const char *arch) {
    size_t al = strlen(arch);
    if (!strncmp(key, "mtplx.nextn.", 12)) return true;
    return !strncmp(key, arch, al) && key[al] == '.' &&
           (!strcmp(key + al + 1, "block_count") || !strcmp(key + al + 1, "nextn_predict_layers"));
}

/* The model's container (its own head dropped) plus the trained head. */
static mtplx_status write_model(const trainer *tr, const char *path) {
    const mtplx_model *m = tr->m;
    const mtplx_gguf *src = m->g;
    const char *arch = mtplx_gguf_get_str(src, "general.architecture");
    int nl = m->hp.n_layer;
    mtplx_gguf *g = mtplx_gguf_new();
    if (!g) return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    mtplx_status st = MTPLX_OK;
    for (int64_t i = 0; i < src->n_kv && st == MTPLX_OK; i++)
        if (!skip_key(src->kv[i].key, arch)) st = mtplx_gguf_copy_kv(g, &src->kv[i]);
    for (int64_t i = 0; i < src->n_tensors && st == MTPLX_OK; i++) {
        const mtplx_gguf_tensor *t = &src->tensors[i];
        int blk;
        if (sscanf(t->name, "blk.%d.", &blk) == 1 && blk >= nl) continue;
        st = mtplx_gguf_add_tensor(g, t->name, t->type, t->n_dims, t->ne, t->data, false);
    }
    char key[128], name[128];
    for (int t = 0; t < HP_COUNT && st == MTPLX_OK; t++) {
        const head_tensor *ht = &tr->L.t[t];
        if (!ht->present) continue;
        int64_t n = ht->ne0 * ht->ne1, ne[2] = {ht->ne0, ht->ne1};
        bool bf16 = tr->p->head_bf16 && ht->ne1 > 1;
        void *data = malloc((size_t)n * (bf16 ? 2 : 4));
        if (!data) {
            st = mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
            break;
        }
        if (bf16) mtplx_quantize_row(MTPLX_TYPE_BF16, tr->w + ht->off, data, n);
        else memcpy(data, tr->w + ht->off, (size_t)n * sizeof(float));
        snprintf(name, sizeof name, "blk.%d.%s", nl, ht->name);
        st = mtplx_gguf_add_tensor(g, name, bf16 ? MTPLX_TYPE_BF16 : MTPLX_TYPE_F32,
                                   ht->ne1 > 1 ? 2 : 1, ne, data, true);
    }
    if (st == MTPLX_OK) {
        snprintf(key, sizeof key, "%s.block_count", arch);
        st = mtplx_gguf_set_u32(g, key, (uint32_t)nl + 1);
    }
    if (st == MTPLX_OK) {
        snprintf(key, sizeof key, "%s.nextn_predict_layers", arch);
        st = mtplx_gguf_set_u32(g, key, 1);
    }
    if (st == MTPLX_OK) st = mtplx_gguf_set_str(g, "mtplx.nextn.layout", "qwen3-next");
    if (st == MTPLX_OK) st = mtplx_gguf_set_u32(g, "mtplx.nextn.depth_trained", (uint32_t)tr->K);
    if (st == MTPLX_OK) st = mtplx_gguf_set_str(g, "mtplx.nextn.trained_by", "mtplx forge train-mtp (self-distillation, trunk frozen)");
    if (st == MTPLX_OK) st = mtplx_gguf_set_u64(g, "mtplx.nextn.train_steps", (uint64_t)tr->step);
    if (st == MTPLX_OK) st = mtplx_gguf_set_u64(g, "mtplx.nextn.train_tokens", (uint64_t)(tr->step * tr->S));
    if (st == MTPLX_OK) st = mtplx_gguf_write(g, path);
    mtplx_gguf_free(g);
    return st;
}

static mtplx_status checkpoint(const trainer *tr) {
    char path[4096], opt[4200];
    snprintf(path, sizeof path, "%s.ckpt.gguf", tr->p->out_path);
    snprintf(opt, sizeof opt, "%s.opt", path);
    MTPLX_TRY(write_model(tr, path));
    return write_opt(tr, opt);
}

/* ---- setup ---- */

/* The lm_head products through the int8 kernels (about 4x the f32 ones on
 * AVX2, and they are most of a step's work): the head's logits with the
 * model's own output weight (what the runtime drafts with), the backward's
 * d logits . Wout with a Q8_0 copy of Wout^T (rows of V; needs V % 32 == 0). */
static mtplx_status fast_lm_head(trainer *tr) {
    const mtplx_weight *o = &tr->m->output;
    tr->fz.wout_q = o->data;
    tr->fz.wout_q_prep = o->prep;
    tr->fz.wout_q_type = o->type;
    int64_t E = tr->E, V = tr->V;
    if (V % 32) return MTPLX_OK;
    size_t rs = mtplx_row_size(MTPLX_TYPE_Q8_0, V), ps = mtplx_weight_prepared_size(MTPLX_TYPE_Q8_0, E, V);
    if (!(tr->woutT_q = malloc(rs * (size_t)E)))
        return mtplx_fail(MTPLX_ERR_NOMEM, "train-mtp: out of memory");
    for (int64_t r = 0; r < E; r++)
        mtplx_quantize_row(MTPLX_TYPE_Q8_0, tr->woutT + r * V, (char *)tr->woutT_q + (size_t)r * rs, V);
    if (ps) {
        if (!(tr->woutT_prep = mtplx_aligned_alloc(64, ps)))
            return mtplx_fail(MTPLX_ERR_NOMEM, "train-mtp: out of memory");
        mtplx_weight_prepare(MTPLX_TYPE_Q8_0, tr->woutT_q, E, V, tr->woutT_prep);
    }
    tr->fz.woutT_q = tr->woutT_q;
    tr->fz.woutT_q_prep = tr->woutT_prep;
    tr->fz.woutT_q_type = MTPLX_TYPE_Q8_0;
    return MTPLX_OK;
}

static mtplx_status load_data(trainer *tr) {
    const mtplx_train_params *p = tr->p;
    char *text = NULL;
    size_t len = 0;
    MTPLX_TRY(mtplx_read_file(p->data_path, &text, &len));
    mtplx_status st = mtplx_tokenize(tr->m->tok, text, len, false, false, &tr->toks, &tr->n_toks);
    free(text);
    if (st != MTPLX_OK) return mtplx_fail_prefix(st, "%s", p->data_path);
    size_t win = (size_t)(tr->S + tr->K), ne = (size_t)(p->eval_windows > 0 ? p->eval_windows : 1);
    if (tr->n_toks < 2 * win)
        return mtplx_fail(MTPLX_ERR_ARG, "%s: %zu tokens of text; train-mtp needs at least %zu "
                          "(two windows of --seq %lld + depth %lld)", p->data_path, tr->n_toks,
                          2 * win, (long long)tr->S, (long long)tr->K);
    /* the last ~10% (at least one window) is held out for evaluation */
    size_t hold = tr->n_toks / 10;
    if (hold < win + ne) hold = win + ne;
    if (hold > tr->n_toks - win) hold = tr->n_toks - win;
    tr->n_train = tr->n_toks - hold;
    return MTPLX_OK;
}

typedef struct {
    int32_t *out;
    int32_t n, cap;
} pool_fill;

static int pool_take(const mtplx_token_event *ev, void *user) {
    pool_fill *f = user;
    if (ev->id >= 0 && f->n < f->cap) f->out[f->n++] = ev->id;
    return 0;
}

/* p->on_policy's pool: each window is S+K tokens, the first quarter from the
 * training text (a random start below n_train), the rest the trunk's greedy
 * continuation of it. Deterministic for a seed, so --resume rebuilds it. */
static mtplx_status build_pool(trainer *tr) {
    const mtplx_train_params *p = tr->p;
    size_t W = (size_t)(tr->S + tr->K), P = W / 4 > 0 ? W / 4 : 1;
    tr->n_pool = (size_t)p->pool_windows; /* >= 1: mtplx_forge_train_mtp checked it */
    if (!(tr->pool = malloc(tr->n_pool * W * sizeof(int32_t))))
        return mtplx_fail(MTPLX_ERR_NOMEM, "train-mtp: out of memory");
    mtplx_ctx *ctx = NULL;
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_ctx = (int32_t)(W + 8);
    cp.n_threads = p->n_threads;
    MTPLX_TRY(mtplx_ctx_new(tr->m, &cp, &ctx));
    mtplx_gen_params gp = mtplx_gen_default_params();
    gp.sampling.temperature = 0.f;
    gp.draft_depth = 0;
    gp.ignore_eos = true;
    gp.no_event_logits = true;
    gp.max_tokens = (int32_t)(W - P);
    uint64_t rng = (p->seed ? p->seed : 1) ^ 0x9E3779B97F4A7C15ull;
    size_t span = tr->n_train > W ? tr->n_train - W : 1;
    double t0 = mtplx_time_ms();
    mtplx_log(MTPLX_LOG_INFO, "train-mtp: making %zu on-policy windows (%zu tokens of text, then %zu of "
              "the trunk's greedy continuation)", tr->n_pool, P, W - P);
    mtplx_status st = MTPLX_OK;
    for (size_t i = 0; i < tr->n_pool && st == MTPLX_OK; i++) {
        int32_t *win = tr->pool + i * W;
        memcpy(win, tr->toks + next_rand(&rng) % span, P * sizeof(int32_t));
        pool_fill f = {.out = win + P, .n = 0, .cap = (int32_t)(W - P)};
        st = mtplx_ctx_truncate(ctx, 0);
        if (st == MTPLX_OK) st = mtplx_generate(ctx, win, (int32_t)P, &gp, pool_take, &f, NULL);
        if (st == MTPLX_OK && f.n < f.cap)
            st = mtplx_fail(MTPLX_ERR_INTERNAL, "train-mtp: the trunk stopped after %d of %d tokens", f.n,
                            f.cap);
        if (st == MTPLX_OK && p->progress) {
            double el = (mtplx_time_ms() - t0) / 1e3;
            mtplx_train_progress pr = {.step = (int64_t)i + 1, .steps = (int64_t)tr->n_pool,
                                       .tok_s = (double)(i + 1) * (double)(W - P) / (el > 0 ? el : 1e-9),
                                       .elapsed_s = el, .pool = true};
            pr.eta_s = el / (double)(i + 1) * (double)(tr->n_pool - i - 1);
            p->progress(&pr, p->user);
        }
    }
    mtplx_ctx_free(ctx);
    if (st == MTPLX_OK)
        mtplx_log(MTPLX_LOG_INFO, "train-mtp: on-policy pool made in %.1fs", (mtplx_time_ms() - t0) / 1e3);
    return st;
}

static mtplx_status setup(trainer *tr, const char *model_path) {
    const mtplx_train_params *p = tr->p;
    mtplx_model_params mp = mtplx_model_default_params();
    mp.load_mtp = false;
    MTPLX_TRY(mtplx_model_load(model_path, &mp, &tr->m));
    const mtplx_model *m = tr->m;
    if (m->mtp == NULL && mtplx_gguf_get_arch_int(m->g, "nextn_predict_layers", 0) > 0)
        mtplx_log(MTPLX_LOG_WARN, "%s: its MTP head is replaced by the trained one", model_path);
    tr->K = p->depth;
    tr->S = p->seq;
    tr->E = m->hp.n_embd;
    tr->V = m->hp.n_vocab;
    if (tr->S + tr->K > m->hp.n_ctx_train)
        return mtplx_fail(MTPLX_ERR_ARG, "--seq %lld + depth %lld exceeds the model's context of %d",
                          (long long)tr->S, (long long)tr->K, m->hp.n_ctx_train);
    MTPLX_TRY(load_data(tr));
    head_shape hs = {.E = tr->E, .H = m->hp.n_head, .KVH = m->hp.n_head_kv, .D = m->hp.head_dim,
                     .F = m->hp.n_ff, .V = tr->V, .eps = m->hp.norm_eps, .neox = m->arch->rope_neox,
                     .qk_norm = m->arch->qk_norm, .bias = m->arch->qkv_bias, .inv_freq = m->inv_freq};
    head_layout_init(&tr->L, &hs);
    size_t n = tr->L.n, V = (size_t)tr->V, E = (size_t)tr->E, rows = (size_t)(tr->S + tr->K);
    tr->w = calloc(n, sizeof(float));
    tr->grad = calloc(n, sizeof(float));
    tr->adam_m = calloc(n, sizeof(float));
    tr->adam_v = calloc(n, sizeof(float));
    tr->wout = malloc(V * E * sizeof(float));
    tr->woutT = malloc(V * E * sizeof(float));
    tr->hid = malloc(rows * E * sizeof(float));
    tr->probs = calloc(rows * V, sizeof(float));
    tr->negent = calloc(rows, sizeof(double));
    tr->top = calloc(rows, sizeof(int32_t));
    if (!tr->w || !tr->grad || !tr->adam_m || !tr->adam_v || !tr->wout || !tr->woutT || !tr->hid ||
        !tr->probs || !tr->negent || !tr->top)
        return mtplx_fail(MTPLX_ERR_NOMEM, "train-mtp: out of memory");
    weight_to_f32(&m->output, tr->wout);
    for (size_t r = 0; r < V; r++)
        for (size_t c = 0; c < E; c++) tr->woutT[c * V + r] = tr->wout[r * E + c];
    tr->fz = (head_frozen){.wout = tr->wout, .woutT = tr->woutT, .embed = embed_row, .user = tr->m};
    if (!p->f32_lm_head) MTPLX_TRY(fast_lm_head(tr));
    MTPLX_TRY(mtplx_threadpool_new(p->n_threads > 0 ? p->n_threads : mtplx_cpu_features()->n_cores, &tr->tp));
    MTPLX_TRY(head_work_init(&tr->wk, &hs, tr->S > tr->K ? tr->S : tr->K + 1, tr->tp));
    for (int64_t d = 0; d < tr->K; d++) {
        MTPLX_TRY(head_stream_init(&tr->st[d], &hs, tr->S));
        if (!(tr->dg[d] = calloc((size_t)tr->S * E, sizeof(float))))
            return mtplx_fail(MTPLX_ERR_NOMEM, "train-mtp: out of memory");
    }
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_ctx = (int32_t)rows;
    cp.n_batch = (int32_t)rows;
    cp.n_threads = p->n_threads;
    cp.kv_f32 = true;
    MTPLX_TRY(mtplx_ctx_new(tr->m, &cp, &tr->ctx));
    if (p->on_policy > 0.f) MTPLX_TRY(build_pool(tr));
    tr->rng = p->seed ? p->seed : 88172645463325252ull;
    if (p->resume) {
        char opt[4200];
        snprintf(opt, sizeof opt, "%s.opt", p->resume);
        MTPLX_TRY(read_opt(tr, opt));
    } else {
        MTPLX_TRY(trunk(tr, tr->toks + tr->n_train));
        init_params(tr);
        if (p->init_random) init_random(tr);
    }
    return MTPLX_OK;
}

static void teardown(trainer *tr) {
    mtplx_ctx_free(tr->ctx);
    for (int d = 0; d < MTPLX_TRAIN_MAX_DEPTH; d++) {
        if (tr->st[d].x2) head_stream_free(&tr->st[d]);
        free(tr->dg[d]);
    }
    if (tr->wk.logits) head_work_free(&tr->wk);
    mtplx_threadpool_free(tr->tp);
    free(tr->w);
    free(tr->grad);
    free(tr->adam_m);
    free(tr->adam_v);
    free(tr->wout);
    free(tr->woutT);
    free(tr->hid);
    free(tr->probs);
    free(tr->negent);
    free(tr->top);
    free(tr->woutT_q);
    free(tr->woutT_prep);
    free(tr->toks);
    free(tr->pool);
    mtplx_model_free(tr->m);
}

mtplx_status mtplx_forge_train_mtp(const char *model_path, const mtplx_train_params *p,
                                   mtplx_train_result *res) {
    if (!model_path || !p || !p->data_path || !p->out_path)
        return mtplx_fail(MTPLX_ERR_ARG, "train-mtp: a model, --data and an output path are needed");
    if (p->depth < 1 || p->depth > MTPLX_TRAIN_MAX_DEPTH || p->seq < 2 || p->steps < 0 || p->lr <= 0 ||
        !(p->on_policy >= 0.f && p->on_policy <= 1.f) || (p->on_policy > 0.f && p->pool_windows < 1))
        return mtplx_fail(MTPLX_ERR_ARG, "train-mtp: depth must be 1..%d, seq >= 2, steps >= 0, lr > 0, "
                          "on-policy share 0..1 with a pool of at least 1 window", MTPLX_TRAIN_MAX_DEPTH);
    trainer tr = {.p = p};
    mtplx_train_result r = {0};
    mtplx_status st = setup(&tr, model_path);
    int64_t K = tr.K;
    if (st == MTPLX_OK) st = evaluate(&tr, r.eval_loss0, r.eval_agree0);
    double t0 = mtplx_time_ms(), loss_avg = 0, agree_avg[MTPLX_TRAIN_MAX_DEPTH] = {0};
    int64_t first = tr.step, span = (int64_t)tr.n_train - (tr.S + K) + 1;
    if (span < 1) span = 1;
    while (st == MTPLX_OK && tr.step < p->steps) {
        const int32_t *win = tr.toks + next_rand(&tr.rng) % (uint64_t)span;
        /* (no draw at all without a pool: the text-only order is as before) */
        if (tr.pool && ((next_rand(&tr.rng) >> 11) + 0.5) / 9007199254740992.0 < p->on_policy)
            win = tr.pool + (size_t)(next_rand(&tr.rng) % tr.n_pool) * (size_t)(tr.S + K);
        double loss[MTPLX_TRAIN_MAX_DEPTH], agree[MTPLX_TRAIN_MAX_DEPTH], tot = 0;
        st = run_window(&tr, win, true, loss, agree);
        if (st != MTPLX_OK) break;
        adamw(&tr);
        for (int64_t d = 0; d < K; d++) tot += loss[d] / (double)K;
        double a = tr.step - first == 1 ? 0.0 : 0.9; /* running means */
        loss_avg = a * loss_avg + (1 - a) * tot;
        for (int64_t d = 0; d < K; d++) agree_avg[d] = a * agree_avg[d] + (1 - a) * agree[d];
        bool ck = p->checkpoint_every > 0 && tr.step % p->checkpoint_every == 0 && tr.step < p->steps;
        if (ck) st = checkpoint(&tr);
        if (p->progress) {
            double el = (mtplx_time_ms() - t0) / 1e3, done = (double)(tr.step - first);
            mtplx_train_progress pr = {.step = tr.step, .steps = p->steps, .loss = loss_avg,
                                       .tok_s = done * (double)tr.S / (el > 0 ? el : 1e-9),
                                       .elapsed_s = el, .checkpoint = ck};
            pr.eta_s = el / done * (double)(p->steps - tr.step);
            memcpy(pr.agree, agree_avg, sizeof agree_avg);
            p->progress(&pr, p->user);
        }
    }
    if (st == MTPLX_OK) {
        double el = (mtplx_time_ms() - t0) / 1e3;
        r.steps_done = tr.step;
        r.tokens = (tr.step - first) * tr.S;
        r.tok_s = el > 0 ? (double)r.tokens / el : 0;
        st = evaluate(&tr, r.eval_loss1, r.eval_agree1);
    }
    if (st == MTPLX_OK) st = write_model(&tr, p->out_path);
    if (res) *res = r;
    teardown(&tr);
    return st;
}
