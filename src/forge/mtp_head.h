/* mtp_head.h (forge internal): a Qwen3-Next-style MTP head in F32 with its
 * hand-written backward pass, for `forge train-mtp` (and its gradient test).
 *
 * One head step, exactly what src/model/forward.c mtplx_mtp_forward computes:
 *     x0 = fc(cat[enorm(emb(t)), hnorm(g)])          fc: [E][2E], no bias
 *     x1 = x0 + Wo attn(rope(qn(Wq a)), rope(kn(Wk a)), Wv a),  a = attn_norm(x0)
 *     x2 = x1 + Wd(silu(Wg b) * Wu b),                         b = ffn_norm(x1)
 *     q  = softmax(Wout norm(x2))                     Wout frozen (the model's lm_head)
 * x2 is the head's output hidden state (fed to the next draft depth).
 * A "stream" is T rows run causally (row j attends to rows <= j, RoPE
 * position j), as in tools/train_default.py. Loss per row: KL(p || q) with p
 * the trunk's distribution; d loss / d logits = q - p.
 *
 * The frozen lm_head may be given quantized (head_frozen): the int8 kernels
 * then compute the logits and d norm(x2); the head's own weights, activations
 * and gradients stay f32.
 * Deliberately left out: MiMo's [hidden, emb] order (training writes the
 * Qwen3-Next order only), batching several windows. */
#ifndef MTPLX_FORGE_MTP_HEAD_H
#define MTPLX_FORGE_MTP_HEAD_H

#include "core/core.h"

typedef struct head_shape {
    int64_t E, H, KVH, D, F, V; /* embd, heads, kv heads, head dim, ffn, vocab */
    float eps;
    bool neox, qk_norm, bias;
    const float *inv_freq; /* [D/2], borrowed */
} head_shape;

enum {
    HP_ENORM, HP_HNORM, HP_FC, HP_NORM, /* blk.N.nextn.* */
    HP_ATTN_NORM, HP_WQ, HP_WK, HP_WV, HP_BQ, HP_BK, HP_BV, HP_QNORM, HP_KNORM, HP_WO,
    HP_FFN_NORM, HP_WG, HP_WU, HP_WD, /* blk.N.* (the decoder layer) */
    HP_COUNT
};

typedef struct head_tensor {
    const char *name; /* GGUF suffix after "blk.N." */
    int64_t ne0, ne1; /* ne0 = row length; ne1 = 1 for vectors */
    bool decay;       /* weight decay (matrices only) */
    bool present;
    size_t off;       /* offset in the flat parameter array (floats) */
} head_tensor;

/* Parameter layout: every trainable tensor in one flat float array. */
typedef struct head_layout {
    head_shape s;
    head_tensor t[HP_COUNT];
    size_t n; /* floats */
} head_layout;

void head_layout_init(head_layout *L, const head_shape *s);

/* Activations of one stream of T rows (all owned; sized at creation). */
typedef struct head_stream {
    int64_t T;
    const int32_t *tok; /* [T] input tokens (borrowed) */
    const float *g_in;  /* [T][E] input hidden (borrowed) */
    float *emb, *cat, *x0, *a;  /* [T][E], [T][2E], [T][E], [T][E] */
    float *q, *k, *v, *qr, *kr; /* q: after bias, before qk-norm; qr/kr: after norm + RoPE */
    float *prob;                /* [H][T][T] attention probabilities */
    float *o, *x1, *b, *gt, *up, *s, *x2, *y, *dy;
    double loss;  /* sum over rows of KL(p || q) */
    int64_t agree;/* rows whose argmax q == argmax p */
} head_stream;

mtplx_status head_stream_init(head_stream *st, const head_shape *s, int64_t T);
void head_stream_free(head_stream *st);

/* Scratch shared by all streams (transposes, logits). */
typedef struct head_work {
    mtplx_threadpool *tp;
    float *wt, *xt, *dyt, *tmp; /* transposes and a dW temporary */
    float *logits;              /* [T][V] */
    float *g[12];               /* [T][maxw] activation gradients */
    double *row_loss;           /* [T] KL of each row (summed in row order: deterministic) */
    int32_t *row_top;           /* [T] argmax of each row's logits */
    void *mm_scratch;           /* big enough for F32, Q8_0 and Q8_K partners up to k = V */
} head_work;

mtplx_status head_work_init(head_work *w, const head_shape *s, int64_t T, mtplx_threadpool *tp);
void head_work_free(head_work *w);

/* The frozen pieces the head uses. */
typedef struct head_frozen {
    const float *wout;  /* [V][E] f32 lm_head */
    const float *woutT; /* [E][V] its transpose (backward) */
    /* Optional faster copies (NULL: the f32 ones are used). wout_q: the
     * lm_head [V][E] in wout_q_type (the model's own output weight, so the
     * training forward computes the logits the runtime drafts with), with
     * its prepared layout wout_q_prep or NULL. woutT_q: woutT [E][V] in
     * woutT_q_type (Q8_0) for the backward's d norm(x2) = d logits . Wout,
     * prepared as woutT_q_prep or NULL. All borrowed. */
    const void *wout_q, *wout_q_prep, *woutT_q, *woutT_q_prep;
    int wout_q_type, woutT_q_type;
    /* embedding row of token id into out [E] */
    void (*embed)(void *user, int32_t id, float *out);
    void *user;
} head_frozen;

/* Target distributions of T rows: p [T][V], negent [T] = sum_c p log p
 * (so KL(p || q) = negent - sum_c p log q needs no log per element), top [T]
 * = argmax p. All borrowed. */
typedef struct head_target {
    const float *p;
    const double *negent;
    const int32_t *top;
} head_target;

/* From logits [T][V]: p [T][V] = softmax rows, negent [T], top [T]. p must
 * not alias logits. Threaded over rows on tp (may be NULL). */
void head_targets(mtplx_threadpool *tp, const float *logits, int64_t T, int64_t V, float *p,
                  double *negent, int32_t *top);

/* Forward of one stream over tok/g_in (set in st) with parameters w. When tg
 * (targets of the T rows) is given, computes st->loss / st->agree and
 * st->dy = scale * d KL / d norm(x2) [T][E]. */
void head_forward(const head_layout *L, const float *w, const head_frozen *fz, head_work *wk,
                  head_stream *st, const head_target *tg, float scale);
/* Backward of one stream: dx2_extra [T][E] (gradient reaching x2 from the
 * next depth, may be NULL) plus st->dy; accumulates parameter gradients into
 * grad and writes d loss / d g_in into dg_in [T][E] (may be NULL). */
void head_backward(const head_layout *L, const float *w, float *grad, const head_frozen *fz,
                   head_work *wk, head_stream *st, const float *dx2_extra, float *dg_in);

#endif
