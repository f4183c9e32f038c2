/* generate.c: mtplx_generate: reuse the cached prefix, prefill the rest,
 * then decode with plain AR steps or MTP steps (spec.c) until EOS, the token
 * budget, the context end or the callback says stop. Emits one event per
 * committed token with complete UTF-8 text and how the token was produced. */
#include "engine/engine.h"

#include <math.h>
#include <string.h>

mtplx_gen_params mtplx_gen_default_params(void) {
    return (mtplx_gen_params){.sampling = mtplx_sampler_default_params(), .max_tokens = 256,
                              .draft_depth = -1, .adaptive_depth = false};
}

double mtplx_gen_stats_tokens_per_forward(const mtplx_gen_stats *s) {
    return s->n_forward > 0 ? (double)s->n_gen / s->n_forward : 0.0;
}

typedef struct {
    mtplx_ctx *c;
    mtplx_gen_state gs;
    mtplx_detok *detok;
    mtplx_token_cb cb;
    void *user;
    mtplx_gen_stats *st;
    bool done;
} run;

/* Commit one generated token: returns false once generation must stop. */
static bool emit(run *r, int32_t id, mtplx_token_source src, int32_t draft_pos, float lp) {
    const mtplx_gen_params *gp = r->gs.gp;
    r->gs.gen[r->gs.n_gen++] = id;
    r->gs.hist[r->gs.n_hist++] = id;
    if (!gp->ignore_eos && mtplx_token_is_eog(r->c->model->tok, id)) {
        r->st->stop = MTPLX_STOP_EOS;
        return false;
    }
    r->st->n_gen++;
    mtplx_token_event ev = {.id = id, .source = src, .draft_pos = draft_pos, .logprob = lp};
    if (mtplx_detok_push(r->detok, id, &ev.text, &ev.text_len) != MTPLX_OK) {
        ev.text = "";
        ev.text_len = 0;
    }
    if (r->cb && r->cb(&ev, r->user)) {
        r->st->stop = MTPLX_STOP_CALLBACK;
        return false;
    }
    if (gp->max_tokens > 0 && r->st->n_gen >= gp->max_tokens) {
        r->st->stop = MTPLX_STOP_LENGTH;
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

mtplx_status mtplx_generate(mtplx_ctx *c, const int32_t *prompt, int32_t n_prompt,
                            const mtplx_gen_params *gp_in, mtplx_token_cb cb, void *user,
                            mtplx_gen_stats *stats) {
    mtplx_gen_params gp = gp_in ? *gp_in : mtplx_gen_default_params();
    mtplx_gen_stats local;
    mtplx_gen_stats *st = stats ? stats : &local;
    memset(st, 0, sizeof *st);
    if (!c || !prompt || n_prompt <= 0)
        return mtplx_fail(MTPLX_ERR_ARG, "generate: the prompt must hold at least one token");
    if (n_prompt >= c->n_ctx)
        return mtplx_fail(MTPLX_ERR_RANGE, "prompt of %d tokens does not fit the context of %d tokens",
                          n_prompt, c->n_ctx);
    if (!(gp.sampling.temperature >= 0) || !(gp.sampling.top_p > 0 && gp.sampling.top_p <= 1) ||
        !(gp.sampling.min_p >= 0 && gp.sampling.min_p <= 1) || gp.sampling.top_k < 0)
        return mtplx_fail(MTPLX_ERR_ARG, "generate: sampling parameters out of range");
    int32_t depth = gp.draft_depth < 0 ? (c->has_mtp ? 3 : 0) : gp.draft_depth;
    if (depth > MTPLX_MAX_DRAFT) depth = MTPLX_MAX_DRAFT;
    if (depth > 0 && !c->has_mtp)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "draft depth %d asked for, but the model has no MTP head",
                          depth);
    st->draft_depth = depth;
    st->n_prompt = n_prompt;

    /* Reuse the longest cached prefix; at least the last prompt token runs
     * again so its logits exist. With MTP on, the head's cache must cover the
     * prefix too, so restart one position before the head's end. */
    int32_t common = 0, lim = c->n_past < n_prompt - 1 ? c->n_past : n_prompt - 1;
    while (common < lim && c->tokens[common] == prompt[common]) common++;
    bool was_on = c->mtp_on;
    c->mtp_on = depth > 0;
    if (c->mtp_on) {
        /* head position j pairs h_j with token j+1, so it is valid only for
         * j + 1 < common; its hidden states are gone, so the trunk restarts
         * where the head's valid part ends */
        int32_t h = was_on ? c->mtp_n_past : 0;
        common = common > 0 ? common - 1 : 0;
        if (common > h) common = h;
        c->mtp_n_past = common;
    }
    c->n_past = common;
    if (c->mtp_n_past > common) c->mtp_n_past = common;
    st->n_cached = common;

    run r = {.c = c, .cb = cb, .user = user, .st = st};
    r.gs.gp = &gp;
    r.gs.stats = st;
    size_t cap = (size_t)c->n_ctx + MTPLX_MAX_DRAFT + 2;
    r.gs.gen = malloc(cap * sizeof(int32_t));
    r.gs.hist = malloc(cap * sizeof(int32_t));
    mtplx_status s = (r.gs.gen && r.gs.hist) ? mtplx_detok_new(c->model->tok, true, &r.detok)
                                             : mtplx_fail(MTPLX_ERR_NOMEM, "generate: out of memory");
    if (s != MTPLX_OK) goto out;
    memcpy(r.gs.hist, prompt, (size_t)n_prompt * sizeof(int32_t));
    r.gs.n_hist = n_prompt;

    double t0 = mtplx_time_ms();
    s = mtplx_ctx_decode(c, prompt + common, n_prompt - common, false, true);
    if (s != MTPLX_OK) goto out;
    st->t_prefill_ms = mtplx_time_ms() - t0;
    double t1 = mtplx_time_ms();

    /* first token: a plain sample from the prompt's last logits */
    int32_t V = c->model->hp.n_vocab;
    float *logits = c->acts.logits;
    if (gp.mask) gp.mask(r.gs.gen, 0, logits, V, gp.mask_user);
    mtplx_sampler_dist(logits, V, &gp.sampling, (mtplx_history){r.gs.hist, r.gs.n_hist}, c->p[0],
                       c->work, c->work_idx);
    int32_t x = gp.sampling.temperature <= 0
                    ? mtplx_sample_dist(c->p[0], V, 0.0)
                    : mtplx_sample_dist(c->p[0], V,
                                        mtplx_rng_uniform(gp.sampling.seed, (uint64_t)c->n_past, RNG_SAMPLE));
    bool go = emit(&r, x, MTPLX_SRC_SAMPLED, 0, mtplx_logprob(logits, V, x));
    int32_t steps = 0, cur_depth = depth;
    while (go) {
        int32_t room = c->n_ctx - c->n_past - 1; /* positions left after x */
        if (room < 0) {
            st->stop = MTPLX_STOP_CTX_FULL;
            break;
        }
        int32_t k = cur_depth < room ? cur_depth : room;
        if (k > 0) {
            mtplx_step_result res;
            s = mtplx_spec_step(c, &r.gs, x, k, &res);
            if (s != MTPLX_OK) break;
            st->n_forward++;
            steps++;
            for (int32_t i = 0; i < res.n && go; i++)
                go = emit(&r, res.ids[i], res.src[i],
                          res.src[i] == MTPLX_SRC_DRAFTED ? i + 1 : 0, res.logprob[i]);
            x = res.ids[res.n - 1];
            if (go && !c->mtp_on) {
                /* the head lost track (a very long prompt chunk): plain AR from here */
                cur_depth = 0;
            }
            if (gp.adaptive_depth) cur_depth = adapt_depth(st, depth, steps);
        } else {
            s = mtplx_ctx_decode(c, &x, 1, false, true);
            if (s != MTPLX_OK) break;
            st->n_forward++;
            logits = c->acts.logits;
            if (gp.mask) gp.mask(r.gs.gen, r.gs.n_gen, logits, V, gp.mask_user);
            mtplx_sampler_dist(logits, V, &gp.sampling, (mtplx_history){r.gs.hist, r.gs.n_hist},
                               c->p[0], c->work, c->work_idx);
            x = gp.sampling.temperature <= 0
                    ? mtplx_sample_dist(c->p[0], V, 0.0)
                    : mtplx_sample_dist(c->p[0], V,
                                        mtplx_rng_uniform(gp.sampling.seed, (uint64_t)c->n_past, RNG_SAMPLE));
            go = emit(&r, x, MTPLX_SRC_SAMPLED, 0, mtplx_logprob(logits, V, x));
        }
    }
    st->t_decode_ms = mtplx_time_ms() - t1;
    if (s == MTPLX_OK && r.detok) {
        const char *txt;
        size_t len;
        if (mtplx_detok_flush(r.detok, &txt, &len) == MTPLX_OK && len && r.cb) {
            mtplx_token_event ev = {.id = -1, .text = txt, .text_len = len};
            r.cb(&ev, r.user);
        }
    }
out:
    mtplx_detok_free(r.detok);
    free(r.gs.gen);
    free(r.gs.hist);
    return s;
}
