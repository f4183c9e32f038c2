/* engine.h: internal state of a context and the pieces generation is built
 * from: sampling transforms into full-vocabulary distributions, counter-based
 * RNG streams, the AR step and the MTP step (spec.c). */
#ifndef MTPLX_ENGINE_H
#define MTPLX_ENGINE_H

#include "model/model.h"

struct mtplx_ctx {
    mtplx_model *model;
    mtplx_backend *be;
    mtplx_kv kv;
    mtplx_acts acts;
    int32_t n_ctx, n_batch, n_past;
    int32_t *tokens;   /* [n_ctx] tokens whose K/V are in the cache */
    int32_t n_known;   /* entries of tokens[] that are valid (>= n_past while decoding) */
    bool be_shared;    /* the backend belongs to another context */
    int32_t last_n;    /* tokens in the last forward */
    bool last_all;     /* ... and whether all their logits were kept */
    /* MTP head state: its own 1-layer KV cache, valid for positions
     * [0, mtp_n_past); hidden states of trunk positions [mtp_n_past, n_past)
     * wait in pend_hidden until their next token is known. */
    bool has_mtp;
    bool mtp_on;        /* the head follows the trunk (set per generate call) */
    mtplx_kv mtp_kv;
    mtplx_acts mtp_acts;
    int32_t mtp_n_past;
    float *pend_hidden; /* [n_pend_max][n_embd] */
    int32_t n_pend_max;
    /* sampling workspace: target p_0..p_k and draft q_1..q_k, each [n_vocab] */
    float *p[MTPLX_MAX_DRAFT + 1], *q[MTPLX_MAX_DRAFT + 1];
    float *work;        /* [n_vocab] */
    int32_t *work_idx;  /* [n_vocab] */
};

/* ---- RNG: stream (seed, position, purpose) -> uniform in [0, 1) ---- */
enum { RNG_SAMPLE = 1, RNG_DRAFT = 2, RNG_ACCEPT = 3, RNG_RESIDUAL = 4 };
double mtplx_rng_uniform(uint64_t seed, uint64_t pos, uint32_t purpose);

/* History the penalties look at. */
typedef struct mtplx_history {
    const int32_t *ids;
    int32_t n;
} mtplx_history;

/* Turn logits into the sampling distribution: penalties (from hist), then
 * temperature, top-k, top-p, min-p, in fp32. probs [n_vocab] receives the
 * dense distribution (zeros outside the kept set); temperature 0 gives a
 * one-hot at the argmax. logits are not modified (a copy goes through work).
 * mask, if set, forbids tokens first. */
void mtplx_sampler_dist(const float *logits, int32_t n_vocab, const mtplx_sampler_params *sp,
                        mtplx_history hist, float *probs, float *work, int32_t *work_idx);
/* Inverse-CDF draw from a dense distribution with uniform u. */
int32_t mtplx_sample_dist(const float *probs, int32_t n_vocab, double u);
/* log softmax(logits)[id], the model's own log-probability. */
float mtplx_logprob(const float *logits, int32_t n_vocab, int32_t id);

/* Run n tokens through the trunk, in chunks of n_batch, appending them to the
 * cache. With mtp_on, their hidden states wait for the head; committed says
 * the tokens are final (a prompt), so a long prefill may feed the head as it
 * goes; verification passes false. all_logits needs n <= acts.n_logits. */
mtplx_status mtplx_ctx_decode(mtplx_ctx *ctx, const int32_t *tokens, int32_t n, bool all_logits,
                              bool committed);
/* Bring the head's cache up to n_past, given `next`, the token after
 * position n_past - 1. Afterwards ctx->mtp_acts holds the head's logits for
 * that last position (row 0: the first draft's q) and its output hidden
 * state in hidden row *row (fed back for deeper drafts). */
mtplx_status mtplx_mtp_catch_up(mtplx_ctx *ctx, int32_t next, int64_t *row);

/* One MTP step (spec.c): draft k tokens after `pending`, verify, accept.
 * out receives the committed tokens (accepted drafts then the correction or
 * bonus token) and src their sources; returns how many (1..k+1). */
typedef struct mtplx_step_result {
    int32_t n;
    int32_t ids[MTPLX_MAX_DRAFT + 1];
    mtplx_token_source src[MTPLX_MAX_DRAFT + 1];
    float logprob[MTPLX_MAX_DRAFT + 1];
    int32_t n_accepted;
} mtplx_step_result;

typedef struct mtplx_gen_state {
    const mtplx_gen_params *gp;
    int32_t *gen;      /* generated ids so far (for penalties / masks) */
    int32_t n_gen;
    int32_t *hist;     /* prompt + generated, for penalties */
    int32_t n_hist;
    uint64_t step_pos; /* position index for RNG streams */
    mtplx_gen_stats *stats;
} mtplx_gen_state;

mtplx_status mtplx_spec_step(mtplx_ctx *ctx, mtplx_gen_state *gs, int32_t pending, int32_t depth,
                             mtplx_step_result *res);

#endif
