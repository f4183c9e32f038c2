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
    bool be_shared;    /* the backend belongs to another context */
    int kv_type;       /* MTPLX_TYPE_F16, F32 or Q8_0: trunk and MTP head caches */
    int32_t last_n;    /* tokens in the last forward */
    bool last_all;     /* ... and whether all their logits were kept */
    /* MTP head state, one causal stream per draft depth, exactly as the head
     * is trained (tools/train_default.py): stream d row j is
     *     g_{d,j} = head(t_{j+d}, g_{d-1,j}),  g_{0,j} = h_j (trunk hidden),
     * attending to stream d's own K/V at rows <= j, RoPE position j; its
     * logits predict t_{j+d+1}. Rows whose inputs are all committed are
     * cached (valid[d]); the last d-1 rows of stream d depend on drafts and
     * are speculative: the next step takes over those whose drafts were
     * accepted and recomputes the rest. Hidden states are kept for every position,
     * so rolling back is again only counters. */
    bool has_mtp;
    int32_t n_streams;                 /* streams allocated (<= MTPLX_MAX_DRAFT) */
    mtplx_kv mtp_kv[MTPLX_MAX_DRAFT];  /* per stream, 1 layer */
    mtplx_acts mtp_acts;
    /* buffers of the backend (on a GPU, device memory: the head never
     * sends hidden states through the host) */
    float *hist[MTPLX_MAX_DRAFT];      /* hist[0] = h, hist[d] = g_d: [n_ctx][n_embd] */
    float *spec[MTPLX_MAX_DRAFT + 1];  /* speculative g_d rows of this step: [MAX][n_embd] */
    int32_t valid[MTPLX_MAX_DRAFT + 1];/* valid[d]: rows of stream d cached (valid[0] = n_past) */
    /* The last draft's speculative rows, kept so that the next draft can
     * take over those whose drafts were accepted instead of recomputing
     * them: stream d held rows [spec_row0[d], spec_N) in spec[d] (and its
     * K/V cache), made from drafts spec_drafts[0..spec_k); spec_k = 0: none. */
    int32_t spec_N, spec_k;
    int32_t spec_row0[MTPLX_MAX_DRAFT + 1];
    int32_t spec_drafts[MTPLX_MAX_DRAFT];
    int32_t draft_n_out;               /* vocabulary prefix the head drafts over (set by mtplx_gen_start; 0 = all) */
    float *stage;                      /* [n_batch][n_embd] head input staging */
    int32_t *stage_tok;                /* [n_batch] */
    /* sampling workspace: target p_0..p_k and draft q_1..q_k, each [n_vocab] */
    float *p[MTPLX_MAX_DRAFT + 1], *q[MTPLX_MAX_DRAFT + 1];
    float *work;        /* [n_vocab] */
    int32_t *work_idx;  /* [n_vocab] */
    /* Host copies of the logits when the backend's buffers are device
     * memory (be->download set); NULL on the CPU, where the sampler reads
     * acts.logits directly. Copied on first read through mtplx_ctx_logits
     * (logits_pending rows wait on the device until then), so a greedy step
     * that picks its tokens on the device never copies them. */
    float *logits_host;     /* [acts.n_logits][n_vocab] */
    /* The drafts' distributions q_1..q_k when they are sampled on the device
     * (be->sample_rows): MTPLX_MAX_DRAFT rows of be->dist_bytes, a buffer of
     * the backend; NULL without a head or device sampling. */
    void *q_dev;
    float *mtp_logits_host; /* [n_vocab] */
    int32_t logits_pending;
};

/* The last trunk forward's logits rows, in host memory (copied from the
 * device on first use after a forward). */
float *mtplx_ctx_logits(const mtplx_ctx *c);
/* Greedy pick of rows [0, n) of the last trunk forward's logits (device:
 * the backend's argmax_rows, which must exist). */
void mtplx_ctx_pick(mtplx_ctx *c, int32_t n, int32_t *ids, float *logprob);

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
/* The token of mtplx_sampler_dist's one-hot at temperature 0 (penalties,
 * then the first largest logit) without writing the distribution; work is
 * used only when penalties apply. */
int32_t mtplx_sampler_greedy(const float *logits, int32_t n_vocab, const mtplx_sampler_params *sp,
                             mtplx_history hist, float *work);
/* Inverse-CDF draw from a dense distribution with uniform u. */
int32_t mtplx_sample_dist(const float *probs, int32_t n_vocab, double u);
/* Whether any repetition / presence / frequency penalty is set. */
bool mtplx_sampler_has_penalties(const mtplx_sampler_params *sp);
/* log softmax(logits)[id], the model's own log-probability. */
float mtplx_logprob(const float *logits, int32_t n_vocab, int32_t id);

/* Run n tokens through the trunk, in chunks of n_batch, appending them to the
 * cache (and their hidden states to the head's history). all_logits needs
 * n <= acts.n_logits. */
mtplx_status mtplx_ctx_decode(mtplx_ctx *ctx, const int32_t *tokens, int32_t n, bool all_logits);
/* Make sure `depth` head streams exist (allocated on first use). */
mtplx_status mtplx_ctx_streams(mtplx_ctx *ctx, int32_t depth);
/* Forget what the head streams hold beyond the first `common` tokens of the
 * sequence (the rest of the sequence changed). */
void mtplx_ctx_heads_keep(mtplx_ctx *ctx, int32_t common);
/* Draft k tokens after the pending token x (at position n_past): stream d's
 * distribution q_d goes through dist(d, logits) which must sample the draft
 * (returned); drafts are written to out[0..k). fn NULL: each draft is made
 * on the device and no logits are copied to the host: with dev_sp NULL the
 * greedy pick of the head's logits (be->argmax_rows), else a draw under
 * dev_sp (be->sample_rows, uniform mtplx_rng_uniform(seed, n_past + d,
 * RNG_DRAFT), as spec.c's host draft) whose distribution stays in q_dev
 * row d-1. */
typedef int32_t (*mtplx_draft_fn)(void *user, int32_t d, float *logits, const int32_t *drafts);
mtplx_status mtplx_mtp_draft(mtplx_ctx *ctx, int32_t x, int32_t k, mtplx_draft_fn fn, void *user,
                             const mtplx_sampler_params *dev_sp, int32_t *out);
/* Run head streams 1..k over every row whose inputs are committed (all but
 * the last d rows of stream d: the token after the cache is not known yet),
 * so that the next mtplx_mtp_draft has no catch-up over a prompt. Called
 * at the end of prefill; the drafts that follow are the same as without it. */
mtplx_status mtplx_mtp_prime(mtplx_ctx *ctx, int32_t k);
/* Whether sampling under sp can run on the context's device (be->sample_rows
 * takes it: temperature > 0, no penalties, top-k in 1..MTPLX_DEV_TOPK_MAX
 * and below the vocabulary size). */
bool mtplx_dev_sampling_ok(const mtplx_ctx *ctx, const mtplx_sampler_params *sp);
/* The number of leading token ids the head drafts over for a requested
 * mtplx_gen_params.draft_vocab (0 = automatic, -1 = all): a multiple of 8,
 * at most n_vocab; the whole vocabulary off the CPU backend. Logits past it
 * reach the draft function as -INFINITY. */
int32_t mtplx_draft_vocab_resolve(const mtplx_ctx *ctx, int32_t requested);

/* What one MTP step committed: the accepted drafts, then the correction or
 * bonus token (n = 1..k+1), with their sources. */
typedef struct mtplx_step_result {
    int32_t n;
    int32_t ids[MTPLX_MAX_DRAFT + 1];
    mtplx_token_source src[MTPLX_MAX_DRAFT + 1];
    float logprob[MTPLX_MAX_DRAFT + 1];
    const float *logits[MTPLX_MAX_DRAFT + 1]; /* the target's logits row of each */
    int32_t n_accepted;
} mtplx_step_result;

typedef struct mtplx_gen_state {
    const mtplx_gen_params *gp;
    int32_t *gen;      /* generated ids so far (for penalties / masks) */
    int32_t n_gen;
    int32_t *hist;     /* prompt + generated, for penalties */
    int32_t n_hist;
    uint64_t step_pos; /* position index for RNG streams */
    /* temperature 0, no penalties, no mask, no logits wanted in events, and
     * a backend with argmax_rows (the CPU's, or CUDA's on the device): every
     * token and draft is a greedy pick of its row, no distribution is built */
    bool pick_dev;
    /* temperature > 0 otherwise as pick_dev, and the backend samples what
     * mtplx_dev_sampling_ok says: drafts, the acceptance test and tokens
     * are drawn on the device (the same uniforms as on the host) */
    bool sample_dev;
    mtplx_gen_stats *stats;
} mtplx_gen_state;

/* The Leviathan-Chen test at one position: draft x ~ q is accepted when
 * u < p(x) / q(x) (greedy: when x is p's argmax, p one-hot). On rejection p
 * is replaced by the residual normalize(max(0, p - q)) to sample from;
 * greedy, q is not read (the residual of two one-hots is p itself). */
bool mtplx_accept_or_residual(float *p, const float *q, int32_t V, int32_t x, double u, bool greedy);

/* The step in its parts, for batching several contexts' verifications into
 * one forward: draft k tokens after x (into d[0..k)); then, once the
 * verify forward of [x, d_1..d_k] has run (logits of all k+1 rows in the
 * context), accept / correct and roll the cache back. */
mtplx_status mtplx_spec_draft(mtplx_ctx *ctx, mtplx_gen_state *gs, int32_t x, int32_t k, int32_t *d);
void mtplx_spec_accept(mtplx_ctx *ctx, mtplx_gen_state *gs, const int32_t *d, int32_t k,
                       mtplx_step_result *res);
/* Store what a forward of tokens [n] at n_past did: the tokens, the hidden
 * states of acts rows [row0, row0+n), the logits (all n rows, or only the
 * last when !all_logits); a may be another context's activations (a
 * batched forward). mtplx_ctx_decode calls it after each chunk. */
void mtplx_ctx_commit_rows(mtplx_ctx *ctx, const mtplx_acts *a, int64_t row0, const int32_t *tokens,
                           int32_t n, bool all_logits);


#endif
