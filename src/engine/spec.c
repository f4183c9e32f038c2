/* spec.c: one step of exact multi-token prediction.
 *
 *   draft:  the MTP head proposes d_1..d_k, each sampled from q_i, the head's
 *           distribution after the same transforms the target uses;
 *   verify: ONE trunk forward over [x, d_1..d_k] gives p_0..p_k;
 *   accept: d_i is kept with probability min(1, p_{i-1}(d_i) / q_i(d_i)); at
 *           the first rejection a token is drawn from normalize(max(0, p - q))
 *           and the step ends; if all k survive, a bonus token comes from p_k.
 * This is Leviathan et al. / Chen et al. speculative sampling: the committed
 * tokens are distributed exactly as plain sampling from the target. At
 * temperature 0 both distributions are one-hot and the test reduces to
 * "accept while d_i == argmax p_{i-1}", so greedy text equals AR text.
 *
 * Here are the draft (mtplx_spec_draft) and accept (mtplx_spec_accept) parts;
 * the verify forward between them is run by generate.c, for one context
 * (mtplx_gen_step) or for several at once (mtplx_gen_step_many).
 *
 * Caches: the trunk cache simply drops rejected positions (n_past moves back);
 * the head's streams catch up from the verified hidden states at the start
 * of the next draft (mtplx_mtp_draft), so no extra trunk forward runs. */
#include "engine/engine.h"
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

static void apply_mask(const mtplx_gen_state *gs, const int32_t *drafts, int32_t n_drafts,
                       float *logits, int32_t V) {
    if (!gs->gp->mask) return;
    /* the constraint sees generated tokens followed by the drafts so far */
    memcpy(gs->gen + gs->n_gen, drafts, (size_t)n_drafts * sizeof(int32_t));
    gs->gp->mask(gs->gen, gs->n_gen + n_drafts, logits, V, gs->gp->mask_user);
}

/* Sampling distribution at a position whose history ends with drafts[0..n). */
static void dist_at(mtplx_ctx *c, mtplx_gen_state *gs, const int32_t *drafts, int32_t n,
                    float *logits, float *out) {
    int32_t V = c->model->hp.n_vocab;
    apply_mask(gs, drafts, n, logits, V);
    memcpy(gs->hist + gs->n_hist, drafts, (size_t)n * sizeof(int32_t));
    mtplx_history h = {gs->hist, gs->n_hist + n};
    mtplx_sampler_dist(logits, V, &gs->gp->sampling, h, out, c->work, c->work_idx);
}

static int32_t draw(const float *dist, int32_t V, const mtplx_sampler_params *sp, uint64_t pos,
                    uint32_t purpose) {
    if (sp->temperature <= 0.0f) return (int32_t)mtplx_argmax(dist, V);
    return mtplx_sample_dist(dist, V, mtplx_rng_uniform(sp->seed, pos, purpose));
}

bool mtplx_accept_or_residual(float *p, const float *q, int32_t V, int32_t x, double u, bool greedy) {
    /* greedy: p and q are one-hot, so on rejection (x is not p's argmax)
     * max(0, p - q) is p: nothing to compute, and q is never needed */
    if (greedy) return p[x] > 0.5f;
    /* accept x with probability min(1, p(x) / q(x)); q(x) > 0 as x ~ q */
    if (u < (q[x] > 0 ? (double)p[x] / q[x] : 0.0)) return true;
    /* rejected: the residual normalize(max(0, p - q)) */
    double s = 0;
    for (int32_t t = 0; t < V; t++) s += p[t] > q[t] ? p[t] - q[t] : 0;
    if (s <= 0) return false; /* p == q cannot reject; rounding only: p stays */
    for (int32_t t = 0; t < V; t++) p[t] = p[t] > q[t] ? (float)((p[t] - q[t]) / s) : 0.0f;
    return false;
}

typedef struct {
    mtplx_ctx *c;
    mtplx_gen_state *gs;
    int64_t N;
} draft_ctx;

/* q_d from the head's logits, and the draft d_d drawn from it. Greedy, only
 * the draft: q_d would be its one-hot, which the greedy test never reads
 * (mtplx_accept_or_residual), so the dense copy, fill and second pass over
 * the vocabulary are skipped. */
static int32_t draft_one(void *user, int32_t d, float *logits, const int32_t *drafts) {
    draft_ctx *dc = user;
    mtplx_ctx *c = dc->c;
    mtplx_gen_state *gs = dc->gs;
    if (gs->gp->sampling.temperature <= 0.0f) {
        int32_t V = c->model->hp.n_vocab;
        apply_mask(gs, drafts, d - 1, logits, V);
        memcpy(gs->hist + gs->n_hist, drafts, (size_t)(d - 1) * sizeof(int32_t));
        mtplx_history h = {gs->hist, gs->n_hist + d - 1};
        return mtplx_sampler_greedy(logits, V, &gs->gp->sampling, h, c->work);
    }
    dist_at(c, gs, drafts, d - 1, logits, c->q[d]);
    return draw(c->q[d], c->model->hp.n_vocab, &dc->gs->gp->sampling, (uint64_t)(dc->N + d), RNG_DRAFT);
}

mtplx_status mtplx_spec_draft(mtplx_ctx *c, mtplx_gen_state *gs, int32_t x, int32_t k, int32_t *d) {
    MTPLX_ASSERT(k >= 1 && k <= MTPLX_MAX_DRAFT && c->n_past + k + 1 <= c->n_ctx);
    double t0 = mtplx_time_ms();
    draft_ctx dc = {c, gs, c->n_past};
    bool dev = gs->pick_dev || gs->sample_dev;
    MTPLX_TRY(mtplx_mtp_draft(c, x, k, dev ? NULL : draft_one, &dc, gs->sample_dev ? &gs->gp->sampling : NULL,
                              d));
    if (gs->stats) gs->stats->t_draft_ms += mtplx_time_ms() - t0;
    return MTPLX_OK;
}

/* Keep x (at N) and the a accepted drafts; forget the rest. */
static void keep(mtplx_ctx *c, int64_t N, int32_t a) {
    c->n_past = (int32_t)(N + 1 + a);
    c->valid[0] = c->n_past;
    c->last_n = 0; /* the rows stay readable through res->logits until the next forward */
}

/* A step decided on the device: ids[0..a] are the a accepted drafts and
 * the verifier's token after them, lp their log-probabilities; positions
 * 1..min(a+1, k) were tested. No logits rows reach the host. */
static void commit_dev(mtplx_gen_state *gs, int32_t k, int32_t a, const int32_t *ids, const float *lp,
                       mtplx_step_result *res) {
    for (int32_t i = 0; i < k && i <= a; i++) {
        if (gs->stats) gs->stats->drafted[i]++;
        if (gs->stats && i < a) gs->stats->accepted[i]++;
    }
    for (int32_t i = 0; i <= a; i++) {
        res->ids[i] = ids[i];
        res->src[i] = i < a ? MTPLX_SRC_DRAFTED : MTPLX_SRC_VERIFIER;
        res->logprob[i] = lp[i];
        res->logits[i] = NULL;
    }
    res->n = a + 1;
    res->n_accepted = a;
}

/* The greedy test with the picks made on the device: target token t_i is
 * the argmax of row i; d_i is kept while d_i == t_{i-1}; the first mismatch
 * commits t_{i-1} instead (the residual of two one-hot distributions), or
 * all k pass and t_k is the bonus. The same tokens as the general path at
 * temperature 0, without copying any logits row. */
static void accept_picked(mtplx_ctx *c, mtplx_gen_state *gs, const int32_t *d, int32_t k,
                          mtplx_step_result *res) {
    int32_t t[MTPLX_MAX_DRAFT + 1];
    float lp[MTPLX_MAX_DRAFT + 1];
    mtplx_ctx_pick(c, k + 1, t, lp);
    int32_t a = 0;
    while (a < k && d[a] == t[a]) a++;
    commit_dev(gs, k, a, t, lp, res);
}

/* The sampled test on the device: every row's p, test and residual draw at
 * once (be->sample_rows with the host path's uniforms; a row's outcome
 * matters only if the rows before it accepted), then the first rejection
 * ends the step as on the host. q_dev row i holds q_{i+1}. */
static void accept_sampled(mtplx_ctx *c, mtplx_gen_state *gs, const int32_t *d, int32_t k, int64_t N,
                           mtplx_step_result *res) {
    const mtplx_sampler_params *sp = &gs->gp->sampling;
    mtplx_dev_sample r[MTPLX_MAX_DRAFT + 1];
    for (int32_t i = 0; i <= k; i++)
        r[i] = (mtplx_dev_sample){
            .draft = i < k ? d[i] : -1,
            .u_accept = i < k ? mtplx_rng_uniform(sp->seed, (uint64_t)(N + i + 1), RNG_ACCEPT) : 0.0,
            .u_sample = mtplx_rng_uniform(sp->seed, (uint64_t)(N + i + 1), RNG_RESIDUAL)};
    bool ok = c->be->sample_rows(c->be, c->acts.logits, k + 1, c->model->hp.n_vocab, sp, NULL, c->q_dev, r);
    MTPLX_ASSERT(ok); /* mtplx_gen_start checked mtplx_dev_sampling_ok */
    int32_t a = 0, ids[MTPLX_MAX_DRAFT + 1];
    float lp[MTPLX_MAX_DRAFT + 1];
    while (a < k && r[a].accepted) a++;
    for (int32_t i = 0; i <= a; i++) ids[i] = r[i].id, lp[i] = r[i].logprob;
    commit_dev(gs, k, a, ids, lp, res);
}

void mtplx_spec_accept(mtplx_ctx *c, mtplx_gen_state *gs, const int32_t *d, int32_t k,
                       mtplx_step_result *res) {
    const mtplx_sampler_params *sp = &gs->gp->sampling;
    int32_t V = c->model->hp.n_vocab;
    int64_t N = c->n_past - (k + 1); /* the verify pass put x at N */
    memset(res, 0, sizeof *res);
    int32_t a = 0;
    bool rejected = false;
    if (gs->pick_dev || gs->sample_dev) {
        if (gs->pick_dev) accept_picked(c, gs, d, k, res);
        else accept_sampled(c, gs, d, k, N, res);
        keep(c, N, res->n_accepted);
        return;
    }
    for (int32_t i = 1; i <= k; i++) {
        float *lg = mtplx_ctx_logits(c) + (int64_t)(i - 1) * V;
        float *p = c->p[i - 1], *q = c->q[i];
        dist_at(c, gs, d, i - 1, lg, p);
        float lp = mtplx_logprob(lg, V, d[i - 1]);
        if (gs->stats) gs->stats->drafted[i - 1]++;
        bool greedy = sp->temperature <= 0.0f;
        double u = greedy ? 0.0 : mtplx_rng_uniform(sp->seed, (uint64_t)(N + i), RNG_ACCEPT);
        if (mtplx_accept_or_residual(p, q, V, d[i - 1], u, greedy)) {
            res->ids[res->n] = d[i - 1];
            res->src[res->n] = MTPLX_SRC_DRAFTED;
            res->logits[res->n] = lg;
            res->logprob[res->n++] = lp;
            a++;
            if (gs->stats) gs->stats->accepted[i - 1]++;
            continue;
        }
        int32_t tok = draw(p, V, sp, (uint64_t)(N + i), RNG_RESIDUAL);
        res->ids[res->n] = tok;
        res->src[res->n] = MTPLX_SRC_VERIFIER;
        res->logits[res->n] = lg;
        res->logprob[res->n++] = mtplx_logprob(lg, V, tok);
        rejected = true;
        break;
    }
    if (!rejected) {
        float *lg = mtplx_ctx_logits(c) + (int64_t)k * V;
        dist_at(c, gs, d, k, lg, c->p[k]);
        int32_t tok = draw(c->p[k], V, sp, (uint64_t)(N + k + 1), RNG_RESIDUAL);
        res->ids[res->n] = tok;
        res->src[res->n] = MTPLX_SRC_VERIFIER;
        res->logits[res->n] = lg;
        res->logprob[res->n++] = mtplx_logprob(lg, V, tok);
    }
    res->n_accepted = a;
    keep(c, N, a);
}
