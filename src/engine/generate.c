/* generate.c: mtplx_generate: reuse the cached prefix, prefill the rest,
 * then decode with plain AR steps or MTP steps (spec.c) until EOS, the token
 * budget, the context end or the callback says stop. Emits one event per
 * committed token with complete UTF-8 text and how the token was produced. */
#include "engine/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

mtplx_gen_params mtplx_gen_default_params(void) {
    return (mtplx_gen_params){.sampling = mtplx_sampler_default_params(), .max_tokens = 256,
                              .draft_depth = -1, .adaptive_depth = false};
}

double mtplx_gen_stats_tokens_per_forward(const mtplx_gen_stats *s) {
    return s->n_forward > 0 ? (double)s->n_gen / s->n_forward : 0.0;
}

/* One generation in progress: everything mtplx_gen_step needs to resume. */
struct mtplx_gen {
    mtplx_ctx *c;
    mtplx_gen_params gp;
    mtplx_gen_stats st;
    mtplx_gen_state gs;
    mtplx_detok *detok;
    int32_t *prompt, n_prompt;
    int32_t next_prefill; /* first prompt index not yet in the cache */
    enum { PH_PREFILL, PH_DECODE, PH_DONE } phase;
    int32_t x;            /* the newest committed token, not yet in the cache */
    int32_t depth, cur_depth, steps;
    mtplx_token_cb cb;    /* of the current step */
    void *user;
    /* the decode step in progress: [x, d_1..d_k] (k = 0: plain AR) */
    int32_t batch[MTPLX_MAX_DRAFT + 1], k;
    int32_t depth_cap;    /* mtplx_gen_limit_depth; -1 = none */
    bool prime;           /* prime the head's streams at the end of prefill (MTPLX_MTP_PRIME) */
    mtplx_status err;     /* what ended it, if an error did */
};

/* Commit one generated token: returns false once generation must stop. */
static bool emit(mtplx_gen *r, int32_t id, mtplx_token_source src, int32_t draft_pos, float lp,
                 const float *logits) {
    const mtplx_gen_params *gp = &r->gp;
    r->gs.gen[r->gs.n_gen++] = id;
    r->gs.hist[r->gs.n_hist++] = id;
    if (!gp->ignore_eos && mtplx_token_is_eog(r->c->model->tok, id)) {
        r->st.stop = MTPLX_STOP_EOS;
        return false;
    }
    r->st.n_gen++;
    mtplx_token_event ev = {.id = id, .source = src, .draft_pos = draft_pos, .logprob = lp,
                            .logits = logits, .n_vocab = r->c->model->hp.n_vocab};
    if (mtplx_detok_push(r->detok, id, &ev.text, &ev.text_len) != MTPLX_OK) {
        ev.text = "";
        ev.text_len = 0;
    }
    if (r->cb && r->cb(&ev, r->user)) {
        r->st.stop = MTPLX_STOP_CALLBACK;
        return false;
    }
    if (gp->max_tokens > 0 && r->st.n_gen >= gp->max_tokens) {
        r->st.stop = MTPLX_STOP_LENGTH;
        return false;
    }
    return true;
}

/* Adaptive depth: pick the depth that maximises expected tokens per unit of
 * time, from running acceptance per position and measured draft / verify
 * costs. Unobserved deep positions are assumed as good as the last one. */
static int32_t adapt_depth(const mtplx_gen_stats *s, int32_t max_depth, int32_t steps) {
    if (steps < 8) return max_depth;
    double per_draft = s->t_draft_ms / (steps * (double)s->draft_depth + 1e-9);
    double verify = s->t_verify_ms / steps;
    double best = 0, chain = 1, expect = 1, acc_prev = 0.5;
    int32_t best_d = 1;
    for (int32_t d = 1; d <= max_depth; d++) {
        double acc = s->drafted[d - 1] >= 8 ? (double)s->accepted[d - 1] / s->drafted[d - 1] : acc_prev;
        acc_prev = acc;
        chain *= acc;
        expect += chain;
        double rate = expect / (verify + d * per_draft);
        if (rate > best) {
            best = rate;
            best_d = d;
        }
    }
    return best_d;
}

void mtplx_gen_free(mtplx_gen *g) {
    if (!g) return;
    mtplx_detok_free(g->detok);
    free(g->gs.gen);
    free(g->gs.hist);
    free(g->prompt);
    free(g);
}

const mtplx_gen_stats *mtplx_gen_get_stats(const mtplx_gen *g) { return &g->st; }

mtplx_status mtplx_gen_start(mtplx_ctx *c, const int32_t *prompt, int32_t n_prompt,
                             const mtplx_gen_params *gp_in, mtplx_gen **out) {
    *out = NULL;
    mtplx_gen_params gp = gp_in ? *gp_in : mtplx_gen_default_params();
    if (!c || !prompt || n_prompt <= 0)
        return mtplx_fail(MTPLX_ERR_ARG, "generate: the prompt must hold at least one token");
    if (n_prompt >= c->n_ctx)
        return mtplx_fail(MTPLX_ERR_RANGE, "prompt of %d tokens does not fit the context of %d tokens",
                          n_prompt, c->n_ctx);
    if (!(gp.sampling.temperature >= 0) || !(gp.sampling.top_p > 0 && gp.sampling.top_p <= 1) ||
        !(gp.sampling.min_p >= 0 && gp.sampling.min_p <= 1) || gp.sampling.top_k < 0)
        return mtplx_fail(MTPLX_ERR_ARG, "generate: sampling parameters out of range");
    int32_t V = c->model->hp.n_vocab;
    for (int32_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return mtplx_fail(MTPLX_ERR_RANGE, "prompt token %d is %d, outside the vocabulary (0..%d)",
                              i, prompt[i], V - 1);
    int32_t depth = gp.draft_depth < 0 ? (c->has_mtp ? 3 : 0) : gp.draft_depth;
    if (depth > MTPLX_MAX_DRAFT) depth = MTPLX_MAX_DRAFT;
    if (depth > 0 && !c->has_mtp)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "draft depth %d asked for, but the model has no MTP head",
                          depth);
    mtplx_gen *g = calloc(1, sizeof *g);
    if (!g) return mtplx_fail(MTPLX_ERR_NOMEM, "generate: out of memory");
    g->c = c;
    g->gp = gp;
    g->depth = g->cur_depth = depth;
    g->depth_cap = -1;
    const char *prime = getenv("MTPLX_MTP_PRIME");
    g->prime = !(prime && *prime == '0');
    g->st.draft_depth = depth;
    g->st.n_prompt = n_prompt;
    g->gs.gp = &g->gp;
    g->gs.stats = &g->st;
    const mtplx_sampler_params *sp = &gp.sampling;
    c->draft_n_out = mtplx_draft_vocab_resolve(c, gp.draft_vocab);
    g->gs.pick_dev = gp.no_event_logits && c->be->argmax_rows && sp->temperature <= 0.0f &&
                     !gp.mask && !mtplx_sampler_has_penalties(sp);
    g->gs.sample_dev = gp.no_event_logits && !gp.mask && mtplx_dev_sampling_ok(c, sp);
    size_t cap = (size_t)c->n_ctx + MTPLX_MAX_DRAFT + 2;
    g->gs.gen = malloc(cap * sizeof(int32_t));
    g->gs.hist = malloc(cap * sizeof(int32_t));
    g->prompt = malloc((size_t)n_prompt * sizeof(int32_t));
    mtplx_status s = (g->gs.gen && g->gs.hist && g->prompt)
                         ? mtplx_detok_new(c->model->tok, true, &g->detok)
                         : mtplx_fail(MTPLX_ERR_NOMEM, "generate: out of memory");
    if (s != MTPLX_OK) {
        mtplx_gen_free(g);
        return s;
    }
    memcpy(g->prompt, prompt, (size_t)n_prompt * sizeof(int32_t));
    g->n_prompt = n_prompt;
    memcpy(g->gs.hist, prompt, (size_t)n_prompt * sizeof(int32_t));
    g->gs.n_hist = n_prompt;

    /* Reuse the longest cached prefix; at least the last prompt token runs
     * again so its logits exist. The head's streams keep what the prefix
     * still supports. */
    int32_t common = 0, lim = c->n_past < n_prompt - 1 ? c->n_past : n_prompt - 1;
    while (common < lim && c->tokens[common] == prompt[common]) common++;
    c->n_past = common;
    mtplx_ctx_heads_keep(c, common);
    g->st.n_cached = common;
    g->next_prefill = common;
    g->phase = PH_PREFILL;
    *out = g;
    return MTPLX_OK;
}

static int32_t sample_logits(mtplx_gen *g, float *logits) {
    mtplx_ctx *c = g->c;
    int32_t V = c->model->hp.n_vocab;
    if (g->gp.mask) g->gp.mask(g->gs.gen, g->gs.n_gen, logits, V, g->gp.mask_user);
    mtplx_sampler_dist(logits, V, &g->gp.sampling, (mtplx_history){g->gs.hist, g->gs.n_hist},
                       c->p[0], c->work, c->work_idx);
    double u = g->gp.sampling.temperature <= 0
                   ? 0.0
                   : mtplx_rng_uniform(g->gp.sampling.seed, (uint64_t)c->n_past, RNG_SAMPLE);
    return mtplx_sample_dist(c->p[0], V, u);
}

/* The token after the last forward's last logits row (row 0: it kept only
 * the last): sampled on the host, or picked on the device (pick_dev). Emits
 * it; false once generation must stop. */
static bool next_token(mtplx_gen *g) {
    mtplx_ctx *c = g->c;
    if (g->gs.pick_dev) {
        float lp;
        mtplx_ctx_pick(c, 1, &g->x, &lp);
        return emit(g, g->x, MTPLX_SRC_SAMPLED, 0, lp, NULL);
    }
    if (g->gs.sample_dev) {
        const mtplx_sampler_params *sp = &g->gp.sampling;
        mtplx_dev_sample r = {.draft = -1,
                              .u_sample = mtplx_rng_uniform(sp->seed, (uint64_t)c->n_past, RNG_SAMPLE)};
        bool ok = c->be->sample_rows(c->be, c->acts.logits, 1, c->model->hp.n_vocab, sp, NULL, NULL, &r);
        MTPLX_ASSERT(ok);
        g->x = r.id;
        return emit(g, g->x, MTPLX_SRC_SAMPLED, 0, r.logprob, NULL);
    }
    float *logits = mtplx_ctx_logits(c);
    g->x = sample_logits(g, logits);
    return emit(g, g->x, MTPLX_SRC_SAMPLED, 0, mtplx_logprob(logits, c->model->hp.n_vocab, g->x),
                logits);
}

static void finish(mtplx_gen *g) {
    g->phase = PH_DONE;
    const char *txt;
    size_t len;
    if (g->detok && mtplx_detok_flush(g->detok, &txt, &len) == MTPLX_OK && len && g->cb) {
        mtplx_token_event ev = {.id = -1, .text = txt, .text_len = len};
        g->cb(&ev, g->user);
    }
}

/* The draft depth of the next step: the current depth within the room the
 * context has left after the pending token and the caller's cap. */
static int32_t step_depth(const mtplx_gen *g) {
    int32_t room = g->c->n_ctx - g->c->n_past - 1;
    int32_t k = g->cur_depth < room ? g->cur_depth : room;
    return g->depth_cap >= 0 && k > g->depth_cap ? g->depth_cap : k;
}

/* Decode step, part 1: how many drafts fit, and the drafts (MTP). *full
 * when the context has no room left. */
static mtplx_status decode_prepare(mtplx_gen *g, bool *full) {
    mtplx_ctx *c = g->c;
    int32_t room = c->n_ctx - c->n_past - 1; /* positions left after x */
    *full = room < 0;
    if (*full) {
        g->st.stop = MTPLX_STOP_CTX_FULL;
        return MTPLX_OK;
    }
    g->k = step_depth(g);
    g->batch[0] = g->x;
    if (g->k > 0) MTPLX_TRY(mtplx_spec_draft(c, &g->gs, g->x, g->k, g->batch + 1));
    return MTPLX_OK;
}

/* Decode step, part 2, after the forward of g->batch: accept / correct (or
 * sample), emit. false once generation must stop. */
static bool decode_finish(mtplx_gen *g) {
    mtplx_ctx *c = g->c;
    bool go = true;
    g->st.n_forward++;
    if (g->k > 0) {
        mtplx_step_result res;
        mtplx_spec_accept(c, &g->gs, g->batch + 1, g->k, &res);
        g->steps++;
        int32_t i = 0;
        while (i < res.n && go) {
            go = emit(g, res.ids[i], res.src[i], res.src[i] == MTPLX_SRC_DRAFTED ? i + 1 : 0,
                      res.logprob[i], res.logits[i]);
            i++;
        }
        /* a stop inside the step (length, EOS, the callback): the cache keeps
         * the emitted tokens but the last, as after any other stop, so the
         * accepted drafts past it go (the next turn's prefix match and
         * mtplx_ctx_n_past see only what the caller saw) */
        if (!go && i < res.n) (void)mtplx_ctx_truncate(c, c->n_past - (res.n - i));
        g->x = res.ids[res.n - 1];
        if (g->gp.adaptive_depth) g->cur_depth = adapt_depth(&g->st, g->depth, g->steps);
    } else {
        go = next_token(g);
    }
    return go;
}

mtplx_status mtplx_gen_step(mtplx_gen *g, mtplx_token_cb cb, void *user, bool *done) {
    mtplx_ctx *c = g->c;
    g->cb = cb;
    g->user = user;
    *done = false;
    mtplx_status s = MTPLX_OK;
    double t0 = mtplx_time_ms();
    if (g->phase == PH_DONE) {
        *done = true;
        return MTPLX_OK;
    }
    if (g->phase == PH_PREFILL) {
        int32_t left = g->n_prompt - g->next_prefill;
        int32_t n = left < c->n_batch ? left : c->n_batch;
        s = mtplx_ctx_decode(c, g->prompt + g->next_prefill, n, false);
        if (s != MTPLX_OK) goto fail;
        g->next_prefill += n;
        g->st.t_prefill_ms += mtplx_time_ms() - t0;
        if (g->next_prefill < g->n_prompt) return MTPLX_OK;
        /* first token: a plain sample from the prompt's last logits */
        t0 = mtplx_time_ms();
        g->phase = PH_DECODE;
        bool go = next_token(g);
        g->st.t_decode_ms += mtplx_time_ms() - t0;
        /* then the head's pass over the prompt: prompt processing, counted
         * in prefill, but run after the first token has gone to the caller
         * so that it does not delay it; for the depth the first step drafts
         * at (a later, deeper one catches up) */
        int32_t k = go && g->prime ? step_depth(g) : 0;
        if (k > 0) {
            t0 = mtplx_time_ms();
            s = mtplx_mtp_prime(c, k);
            if (s != MTPLX_OK) goto fail;
            g->st.t_prefill_ms += mtplx_time_ms() - t0;
        }
        if (!go) finish(g);
        *done = g->phase == PH_DONE;
        return MTPLX_OK;
    }
    bool go = true;
    bool full = false;
    s = decode_prepare(g, &full);
    if (s != MTPLX_OK) goto fail;
    if (full) {
        go = false;
    } else {
        double t1 = mtplx_time_ms();
        s = mtplx_ctx_decode(c, g->batch, g->k + 1, g->k > 0);
        if (s != MTPLX_OK) goto fail;
        if (g->k > 0) g->st.t_verify_ms += mtplx_time_ms() - t1;
        go = decode_finish(g);
    }
    g->st.t_decode_ms += mtplx_time_ms() - t0;
    if (!go) finish(g);
    *done = g->phase == PH_DONE;
    return MTPLX_OK;
fail:
    g->phase = PH_DONE;
    g->err = s;
    *done = true;
    return s;
}

void mtplx_gen_limit_depth(mtplx_gen *g, int32_t max_depth) { g->depth_cap = max_depth; }

mtplx_status mtplx_gen_status(const mtplx_gen *g) { return g->err; }

mtplx_status mtplx_generate(mtplx_ctx *c, const int32_t *prompt, int32_t n_prompt,
                            const mtplx_gen_params *gp, mtplx_token_cb cb, void *user,
                            mtplx_gen_stats *stats) {
    if (stats) memset(stats, 0, sizeof *stats);
    mtplx_gen *g = NULL;
    MTPLX_TRY(mtplx_gen_start(c, prompt, n_prompt, gp, &g));
    bool done = false;
    mtplx_status s = MTPLX_OK;
    while (!done && s == MTPLX_OK) s = mtplx_gen_step(g, cb, user, &done);
    if (stats) *stats = g->st;
    mtplx_gen_free(g);
    return s;
}

/* Several generations, one step each. Those in the decode phase whose
 * contexts share one backend run their verification (or AR) rows through ONE
 * forward: the weights are read once for all of them, which is what keeps
 * MTP's speed when several requests decode at once. Each keeps its own
 * drafts, acceptance and RNG streams, so every output is exactly what its
 * own mtplx_gen_step would give. Prefill steps and the rest run one by one. */
mtplx_status mtplx_gen_step_many(mtplx_gen **gens, int32_t n, mtplx_token_cb cb, void **users,
                                 bool *done) {
    enum { MAX_SEGS = 64 };
    mtplx_gen *batch[MAX_SEGS];
    int32_t nb = 0;
    mtplx_status first_err = MTPLX_OK;
    for (int32_t i = 0; i < n; i++) {
        mtplx_gen *g = gens[i];
        done[i] = false;
        bool joins = g->phase == PH_DECODE && nb < MAX_SEGS &&
                     (nb == 0 || (g->c->be == batch[0]->c->be && g->c->model == batch[0]->c->model));
        if (!joins) {
            mtplx_status s = mtplx_gen_step(g, cb, users ? users[i] : NULL, &done[i]);
            if (s != MTPLX_OK && first_err == MTPLX_OK) first_err = s;
            continue;
        }
        g->cb = cb;
        g->user = users ? users[i] : NULL;
        double t0 = mtplx_time_ms();
        bool full = false;
        mtplx_status s = decode_prepare(g, &full);
        g->st.t_decode_ms += mtplx_time_ms() - t0;
        if (s != MTPLX_OK || full) {
            if (s != MTPLX_OK && first_err == MTPLX_OK) first_err = s;
            g->err = s;
            if (full) finish(g);
            else g->phase = PH_DONE;
            done[i] = true;
            continue;
        }
        batch[nb++] = g;
    }
    /* verification forwards: groups whose rows fit the logits buffer of the
     * group's first context (it hosts the batch) */
    for (int32_t b0 = 0; b0 < nb;) {
        mtplx_ctx *host = batch[b0]->c;
        int32_t rows = 0, b1 = b0;
        mtplx_seg segs[MAX_SEGS];
        int32_t toks[MAX_SEGS * (MTPLX_MAX_DRAFT + 1)];
        while (b1 < nb && rows + batch[b1]->k + 1 <= host->acts.n_logits &&
               rows + batch[b1]->k + 1 <= host->acts.n_max) {
            mtplx_gen *g = batch[b1];
            segs[b1 - b0] = (mtplx_seg){&g->c->kv, g->c->n_past, g->k + 1};
            memcpy(toks + rows, g->batch, (size_t)(g->k + 1) * sizeof(int32_t));
            rows += g->k + 1;
            b1++;
        }
        double t0 = mtplx_time_ms();
        mtplx_model_forward_segs(host->model, host->be, &host->acts, toks, segs, b1 - b0, true);
        /* hand each context its rows; the host's own rows (first) last */
        for (int32_t j = b1 - 1, r = rows; j >= b0; j--) {
            mtplx_gen *g = batch[j];
            r -= g->k + 1;
            mtplx_ctx_commit_rows(g->c, &host->acts, r, g->batch, g->k + 1, true);
        }
        double share = (mtplx_time_ms() - t0) / (b1 - b0);
        for (int32_t j = b0; j < b1; j++) {
            mtplx_gen *g = batch[j];
            double t1 = mtplx_time_ms();
            if (g->k > 0) g->st.t_verify_ms += share;
            bool go = decode_finish(g);
            g->st.t_decode_ms += share + (mtplx_time_ms() - t1);
            if (!go) finish(g);
            for (int32_t i = 0; i < n; i++)
                if (gens[i] == g) done[i] = g->phase == PH_DONE;
        }
        b0 = b1;
    }
    return first_err;
}
