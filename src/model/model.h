/* model.h: a loaded model (weights, hyper-parameters, tokenizer, MTP heads)
 * and the forward pass for n tokens.
 *
 * One forward serves prefill (large n), AR decode (n = 1) and MTP
 * verification (n = k+1). Architectures differ only in a few traits
 * (arch/llama.c, arch/qwen2.c, arch/qwen3.c); the decoder layer is shared,
 * and the MTP head runs the same layer code. */
#ifndef MTPLX_MODEL_H
#define MTPLX_MODEL_H

#include <pthread.h>
#include "formats/gguf.h"
#include "model/backend.h"

/* What distinguishes one architecture from another. */
typedef struct mtplx_arch {
    const char *name;
    bool rope_neox;   /* rotate (i, i+d/2) pairs, else (2i, 2i+1) */
    bool qkv_bias;    /* attn_{q,k,v}.bias expected */
    bool qk_norm;     /* per-head RMSNorm of q and k before RoPE */
    bool encoder;     /* encoder-only (BERT family): model/encoder.h, no decoder forward */
} mtplx_arch;

/* NULL if the architecture is not supported. */
const mtplx_arch *mtplx_arch_find(const char *name);

typedef struct mtplx_layer {
    float *attn_norm;              /* [n_embd] */
    mtplx_weight wq, wk, wv, wo;   /* [n_head*hd, n_embd], [n_kv*hd, n_embd] x2, [n_embd, n_head*hd] */
    float *bq, *bk, *bv;           /* biases or NULL */
    float *q_norm, *k_norm;        /* [head_dim] or NULL */
    float *ffn_norm;               /* [n_embd] */
    mtplx_weight w_gate, w_up, w_down; /* [n_ff, n_embd] x2, [n_embd, n_ff] */
} mtplx_layer;

/* One MTP head: fc(cat[enorm(emb(t)), hnorm(h)]) -> layer -> norm -> lm_head. */
typedef struct mtplx_mtp_head {
    float *enorm, *hnorm;  /* [n_embd] */
    mtplx_weight eh_proj;  /* [n_embd, 2*n_embd] */
    float *norm;           /* [n_embd] (shared_head_norm) */
    mtplx_layer layer;
    bool hidden_first;     /* MiMo order cat[hnorm(h), enorm(emb)] */
} mtplx_mtp_head;

typedef struct mtplx_hparams {
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    float rope_theta, norm_eps;
} mtplx_hparams;

struct mtplx_model {
    char *path;
    char format[16];
    const mtplx_arch *arch;
    mtplx_hparams hp;
    mtplx_gguf *g;          /* owns the weight bytes (mapping or buffers) */
    mtplx_tokenizer *tok;
    char *chat_template;    /* NULL if none */
    char name[128];
    mtplx_weight tok_embd;  /* [n_vocab, n_embd] */
    mtplx_weight output;    /* [n_vocab, n_embd]; = tok_embd when tied */
    mtplx_weight draft_output; /* copy of output the MTP head drafts with on the CPU, or .data NULL */
    bool draft_output_wanted;  /* made by the first CPU context (mtplx_model_draft_output_prepare) */
    /* [n_mtp] the heads as the CPU drafts with them: Q4_0 copies of the
     * float matrices of mtp_src (the heads as loaded, before the Q8_0
     * copies replaced them in mtp), made with draft_output; NULL: the CPU
     * drafts with mtp like every backend */
    mtplx_mtp_head *draft_mtp, *mtp_src;
    pthread_mutex_t draft_lock;
    bool tied;
    float *output_norm;     /* [n_embd] */
    float *inv_freq;        /* [head_dim/2], llama3 scaling / rope_freqs applied */
    mtplx_layer *layers;
    int32_t n_mtp;
    mtplx_mtp_head *mtp;
    void **owned;           /* f32 copies of norms / biases */
    int n_owned, cap_owned;
    struct mtplx_bert *bert;      /* encoder weights (arch->encoder), else NULL */
    struct mtplx_embed_cfg *emb;  /* roles, pooling, query prompt (model/encoder.h) */
};

/* Tensor lookups with shape checks, for architecture loaders (arch/bert.c):
 * a weight of `rows` x k, or a 1-D float tensor of n as an f32 copy owned by
 * the model. Missing and not required: OK with w->data / *out NULL. */
mtplx_status mtplx_model_weight(mtplx_model *m, const char *name, int64_t k, int64_t rows,
                                bool required, mtplx_weight *w);
mtplx_status mtplx_model_vec(mtplx_model *m, const char *name, int64_t n, bool required,
                             float **out);

/* Build a model from a loaded container (takes ownership of g). */
/* Make the CPU draft copies of the lm_head and of the heads' matrices if
 * wanted and not made yet (thread-safe; every context on the CPU calls it
 * when it is created). */
mtplx_status mtplx_model_draft_output_prepare(mtplx_model *m);
mtplx_status mtplx_model_from_gguf(mtplx_gguf *g, const char *path, const char *format,
                                   const mtplx_model_params *params, mtplx_model **out);

/* Per-context state of the forward pass: KV cache and activations. */
typedef struct mtplx_kv {
    int kv_type;     /* MTPLX_TYPE_F16, F32 or Q8_0 */
    int64_t n_ctx, row; /* row = n_head_kv * head_dim elements */
    size_t row_bytes;   /* bytes of one position: mtplx_row_size(kv_type, row) */
    void **k, **v;   /* per layer [n_ctx][row] */
    int n_layers;
} mtplx_kv;

/* Logits are kept for at most this many tokens per forward (verification
 * needs k+1 <= 9; prefill needs only the last), so a 150k vocabulary does not
 * cost n_batch x 600 KB. */
#define MTPLX_LOGITS_ROWS 32

typedef struct mtplx_acts {
    int64_t n_max, n_logits;
    float *x, *xb, *q, *k, *v, *att, *hb, *hb2; /* [n_max][...] */
    float *hidden;  /* [n_max][n_embd] pre-final-norm hidden of the last forward */
    float *logits;  /* [n_logits][n_vocab] */
    float *cat;     /* [n_max][2*n_embd] MTP input */
} mtplx_acts;

mtplx_status mtplx_kv_init(mtplx_kv *kv, mtplx_backend *be, const mtplx_hparams *hp,
                           int n_layers, int64_t n_ctx, int kv_type);
void mtplx_kv_free(mtplx_kv *kv, mtplx_backend *be);
mtplx_status mtplx_acts_init(mtplx_acts *a, mtplx_backend *be, const mtplx_hparams *hp,
                             int64_t n_max);
void mtplx_acts_free(mtplx_acts *a, mtplx_backend *be);

/* One sequence's part of a batched forward: its cache and positions. */
typedef struct mtplx_seg {
    mtplx_kv *kv;
    int64_t pos0, n;
} mtplx_seg;

/* Trunk forward of several sequences in one pass: tokens holds segs[0].n
 * tokens, then segs[1].n, ...; rows of a->hidden / a->logits follow the
 * same order (logits of every row with all_logits, else of the last row). */
void mtplx_model_forward_segs(const mtplx_model *m, mtplx_backend *be, mtplx_acts *a,
                              const int32_t *tokens, const mtplx_seg *segs, int nseg, bool all_logits);

/* Trunk forward of n tokens at positions pos0..; writes a->hidden for all n
 * and a->logits for all n (all_logits) or only the last (row 0 of logits). */
void mtplx_model_forward(const mtplx_model *m, mtplx_backend *be, mtplx_kv *kv, mtplx_acts *a,
                         const int32_t *tokens, int64_t n, int64_t pos0, bool all_logits);

/* MTP head forward of n positions at pos0..: input pairs (tokens[i],
 * hidden[i] [n_embd]). Writes a->hidden for all n (the head's output hidden
 * state, fed back for deeper drafts) and a->logits row 0 for the LAST
 * position only (the draft distribution). kv is the head's 1-layer cache. */
void mtplx_mtp_forward(const mtplx_model *m, int head, mtplx_backend *be, mtplx_kv *kv,
                       mtplx_acts *a, const int32_t *tokens, const float *hidden, int64_t n,
                       int64_t pos0);
/* The same with logits for the first n_out vocabulary entries only (0 or
 * n_vocab = all; n_out a multiple of 8 when below n_vocab): row 0 of
 * a->logits holds those n_out values. */
void mtplx_mtp_forward_vocab(const mtplx_model *m, int head, mtplx_backend *be, mtplx_kv *kv,
                             mtplx_acts *a, const int32_t *tokens, const float *hidden, int64_t n,
                             int64_t pos0, int64_t n_out);

#endif
