/* mtplx.h: the whole public API of libmtplx.
 *
 * mtplx is a local LLM inference runtime that decodes faster than plain
 * autoregressive decoding by multi-token prediction: an MTP head drafts k
 * tokens, the base model verifies k+1 positions in one forward pass, and an
 * exact Leviathan-Chen rejection test commits the accepted prefix.
 *
 * Conventions:
 *  - Every fallible function returns mtplx_status. On failure a message that
 *    names the file / field and what was expected is kept per thread and read
 *    with mtplx_last_error() (the library never prints to stdout, never exits).
 *  - Handles are opaque and come back through out pointers; *_free(NULL) is a
 *    no-op.
 *  - Memory returned to the caller says who frees it in the comment above the
 *    function; "caller frees" means with free().
 */
#ifndef MTPLX_H
#define MTPLX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MTPLX_VERSION "0.1.0"
#define MTPLX_MAX_DRAFT 8

typedef enum mtplx_status {
    MTPLX_OK = 0,
    MTPLX_ERR_ARG = 1,         /* a bad argument from the caller */
    MTPLX_ERR_IO = 2,          /* open / read / write / mmap failed */
    MTPLX_ERR_FORMAT = 3,      /* a file or document is malformed */
    MTPLX_ERR_UNSUPPORTED = 4, /* well formed, but not something we run */
    MTPLX_ERR_NOMEM = 5,
    MTPLX_ERR_RANGE = 6,       /* context full, prompt too long, bad id */
    MTPLX_ERR_CANCELLED = 7,
    MTPLX_ERR_INTERNAL = 8,
} mtplx_status;

/* Short stable name of a status ("ok", "format", ...). Static storage. */
const char *mtplx_status_name(mtplx_status st);
/* Message of the last failure on this thread ("" if none). Valid until the
 * next failing call on the same thread. */
const char *mtplx_last_error(void);

/* ------------------------------------------------------------------ */
/* Tokenizers                                                          */
/* ------------------------------------------------------------------ */

typedef struct mtplx_tokenizer mtplx_tokenizer;

/* Load a tokenizer from a tokenizer.json, an HF folder, a GGUF file
 * (vocab-only allowed) or a llama2.c tokenizer.bin. */
mtplx_status mtplx_tokenizer_load(const char *path, mtplx_tokenizer **out);
void mtplx_tokenizer_free(mtplx_tokenizer *tok);

/* Encode UTF-8 text. add_special: add BOS/EOS as the tokenizer's own config
 * says. parse_special: turn special-token strings in the text into their ids
 * (otherwise they are encoded as plain text). *ids_out: caller frees. */
mtplx_status mtplx_tokenize(const mtplx_tokenizer *tok, const char *text, size_t len,
                            bool add_special, bool parse_special, int32_t **ids_out,
                            size_t *n_out);
/* Decode ids to text. skip_special: drop control / special tokens.
 * *text_out: caller frees (NUL terminated; *len_out excludes the NUL). */
mtplx_status mtplx_detokenize(const mtplx_tokenizer *tok, const int32_t *ids, size_t n,
                              bool skip_special, char **text_out, size_t *len_out);
int32_t mtplx_tokenizer_vocab_size(const mtplx_tokenizer *tok);
/* The raw vocabulary entry of id (as stored, e.g. "Ġthe"); NULL if out of range. */
const char *mtplx_token_piece(const mtplx_tokenizer *tok, int32_t id);
int32_t mtplx_token_bos(const mtplx_tokenizer *tok); /* -1 if none */
int32_t mtplx_token_eos(const mtplx_tokenizer *tok); /* -1 if none */
/* True for tokens that end a generation (EOS, EOT, <|im_end|>, ...). */
bool mtplx_token_is_eog(const mtplx_tokenizer *tok, int32_t id);
/* True for control / special tokens. */
bool mtplx_token_is_special(const mtplx_tokenizer *tok, int32_t id);

/* Streaming detokenizer: turns ids into text one at a time and only ever
 * hands out complete UTF-8 (byte-fallback pieces split over several ids are
 * held back until their character is complete). */
typedef struct mtplx_detok mtplx_detok;
mtplx_status mtplx_detok_new(const mtplx_tokenizer *tok, bool skip_special, mtplx_detok **out);
/* Push one id; *text (owned by the detok, valid until the next call) gets the
 * newly completed text, possibly empty. */
mtplx_status mtplx_detok_push(mtplx_detok *d, int32_t id, const char **text, size_t *len);
/* Whatever is still held back, with invalid bytes as U+FFFD. */
mtplx_status mtplx_detok_flush(mtplx_detok *d, const char **text, size_t *len);
void mtplx_detok_reset(mtplx_detok *d);
void mtplx_detok_free(mtplx_detok *d);

/* ------------------------------------------------------------------ */
/* Chat templates (a Jinja subset interpreter)                         */
/* ------------------------------------------------------------------ */

/* Render a Jinja chat template. vars_json is a JSON object whose members
 * become the template's variables (messages, tools, add_generation_prompt,
 * bos_token, eos_token, enable_thinking, ...). *out: caller frees. */
mtplx_status mtplx_template_render(const char *tmpl, const char *vars_json, char **out,
                                   size_t *out_len);

/* ------------------------------------------------------------------ */
/* Models                                                              */
/* ------------------------------------------------------------------ */

typedef struct mtplx_model mtplx_model;

typedef struct mtplx_model_params {
    const char *tokenizer_path; /* llama2.c .bin: its tokenizer; NULL = look beside it */
    bool load_mtp;              /* load MTP heads when present (default true) */
    bool vocab_only;            /* only the tokenizer and metadata */
    /* Draft with a Q8_0 copy of float MTP head matrices (default true; the
     * environment variable MTPLX_MTP_Q8_0=0/1 overrides it): half the bytes
     * of a BF16 head per draft step. The output is unchanged (the rejection
     * test is exact for any draft distribution); acceptance can change (on
     * the built-in model it did not: bench/RESULTS.md section 6). */
    bool mtp_q8_0;
    /* With mtp_q8_0, the CPU drafts with Q4_0 copies of those matrices
     * instead (default true; MTPLX_MTP_Q4_0=0/1 overrides it): 0.53 of the
     * Q8_0 copy's bytes and less arithmetic per draft step. Made by the first
     * CPU context, like draft_lm_q4_0's copy; other backends draft with the
     * Q8_0 copy. Exact; on the built-in model 1.9% fewer tokens per forward
     * for a head step about a third cheaper (bench/RESULTS.md section 18b). */
    bool mtp_q4_0;
    /* Draft with a Q4_0 copy of the output matrix (lm_head) (default true;
     * MTPLX_DRAFT_LM_Q4_0=0/1 overrides it; made only for a model with MTP
     * heads, used by the CPU backend only): 0.56 of a Q8_0 lm_head's bytes
     * per draft step, the verifier keeps the original. Exact; acceptance can
     * change; costs the copy's memory (n_vocab x n_embd x 0.5625 bytes). */
    bool draft_lm_q4_0;
} mtplx_model_params;

mtplx_model_params mtplx_model_default_params(void);

/* path: a .gguf file, an HF folder, or a llama2.c .bin. */
mtplx_status mtplx_model_load(const char *path, const mtplx_model_params *params,
                              mtplx_model **out);
void mtplx_model_free(mtplx_model *model);

typedef struct mtplx_model_info {
    char arch[32];   /* "llama", "qwen2", "qwen3" */
    char name[128];  /* general.name or folder name */
    char format[16]; /* "gguf", "hf", "llama2c" */
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx_train;
    float rope_theta, norm_eps;
    bool tied_embeddings;
    int64_t n_params;    /* trunk parameters (MTP heads excluded) */
    uint64_t n_bytes;    /* bytes of all weights */
    char weight_type[16];/* the type most weight bytes are in: "Q8_0", "BF16", ... */
    int32_t n_mtp;       /* MTP heads loaded (0 = none) */
    int32_t mtp_depth_trained; /* the draft depth the head was trained to (GGUF
                                * mtplx.nextn.depth_trained), 0 = not recorded */
    int64_t n_mtp_params;
} mtplx_model_info;

void mtplx_model_get_info(const mtplx_model *model, mtplx_model_info *out);
/* Owned by the model. */
const mtplx_tokenizer *mtplx_model_tokenizer(const mtplx_model *model);
/* The model's own chat template, or NULL. Owned by the model. */
const char *mtplx_model_chat_template(const mtplx_model *model);

/* ------------------------------------------------------------------ */
/* Contexts and the forward pass                                       */
/* ------------------------------------------------------------------ */

typedef struct mtplx_ctx mtplx_ctx;

/* What the KV cache stores. Bytes per cached value: F32 4, F16 2, Q8_0
 * 34/32 (GGUF's Q8_0 blocks: 32 int8 values and one fp16 scale; each
 * position is quantized on its own when written, so results stay batch
 * invariant and greedy MTP text still equals AR text). Q8_0 runs on the
 * CPU only and needs a head_dim that is a multiple of 32. */
typedef enum mtplx_kv_type {
    MTPLX_KV_F16 = 0, /* the default */
    MTPLX_KV_F32 = 1,
    MTPLX_KV_Q8_0 = 2,
} mtplx_kv_type;

/* "f16", "f32", "q8_0" (static storage; "?" for anything else). */
const char *mtplx_kv_type_name(mtplx_kv_type t);
/* Parse "f16" / "f32" / "q8_0" (case-insensitive, "q8" too); false if unknown. */
bool mtplx_kv_type_parse(const char *s, mtplx_kv_type *out);
/* Bytes one position takes in a KV cache of this type for n_layers layers
 * of n_kv_dim (= n_head_kv * head_dim) keys and as many values. */
uint64_t mtplx_kv_bytes_per_token(mtplx_kv_type t, int64_t n_kv_dim, int32_t n_layers);

typedef struct mtplx_ctx_params {
    int32_t n_ctx;     /* KV cache length; 0 = min(model's, 4096) */
    int32_t n_threads; /* 0 = all cores */
    int32_t n_batch;   /* most tokens per forward (prefill chunks); 0 = 512 */
    mtplx_kv_type kv_type; /* MTPLX_KV_F16 (default), F32 or Q8_0 (also for the MTP head's caches) */
    bool kv_f32;       /* older spelling of kv_type = MTPLX_KV_F32 (with kv_type left at F16) */
    /* Share this context's backend (thread pool and scratch) instead of
     * making one: for several contexts driven from ONE thread (a server's
     * slots). It must outlive the new context and have n_ctx, n_batch >=. */
    mtplx_ctx *share_backend_of;
    const char *device; /* "cpu" (default, also NULL) or "cuda" (the first GPU) */
} mtplx_ctx_params;

mtplx_ctx_params mtplx_ctx_default_params(void);
mtplx_status mtplx_ctx_new(mtplx_model *model, const mtplx_ctx_params *params, mtplx_ctx **out);
void mtplx_ctx_free(mtplx_ctx *ctx);

/* Run n tokens at positions n_past .. n_past+n-1 and append them to the KV
 * cache. all_logits: keep logits for every token (else only the last). */
mtplx_status mtplx_forward(mtplx_ctx *ctx, const int32_t *tokens, int32_t n, bool all_logits);
/* Logits [n_vocab] of token i of the last forward (i < n; i = n-1 when
 * all_logits was false). Owned by the context, valid until the next forward. */
const float *mtplx_logits(const mtplx_ctx *ctx, int32_t i);
int32_t mtplx_ctx_n_past(const mtplx_ctx *ctx);
int32_t mtplx_ctx_n_ctx(const mtplx_ctx *ctx);
/* Forget every position >= n_past. O(1). */
mtplx_status mtplx_ctx_truncate(mtplx_ctx *ctx, int32_t n_past);

/* ------------------------------------------------------------------ */
/* Sampling and generation                                             */
/* ------------------------------------------------------------------ */

typedef struct mtplx_sampler_params {
    float temperature;   /* 0 = greedy */
    int32_t top_k;       /* 0 = off */
    float top_p;         /* 1 = off */
    float min_p;         /* 0 = off */
    float repeat_penalty;/* 1 = off */
    int32_t repeat_last_n;
    float presence_penalty;
    float frequency_penalty;
    uint64_t seed;
} mtplx_sampler_params;

mtplx_sampler_params mtplx_sampler_default_params(void);

/* How a generated token came to be. */
typedef enum mtplx_token_source {
    MTPLX_SRC_SAMPLED = 0,  /* plain AR sample from the target */
    MTPLX_SRC_DRAFTED = 1,  /* drafted by the MTP head and accepted */
    MTPLX_SRC_VERIFIER = 2, /* residual / bonus sample of the verifier */
} mtplx_token_source;

typedef struct mtplx_token_event {
    int32_t id;
    const char *text; /* complete UTF-8 produced by this token (may be empty) */
    size_t text_len;
    mtplx_token_source source;
    int32_t draft_pos; /* 1-based draft position for DRAFTED, else 0 */
    float logprob;     /* log softmax of the target's raw logits at id */
    /* The target's raw logits for this position ([n_vocab], after any mask),
     * valid during the callback only: for top_logprobs. NULL for the final
     * flush event (id < 0) and with mtplx_gen_params.no_event_logits. */
    const float *logits;
    int32_t n_vocab;
} mtplx_token_event;

/* Return non-zero to stop generation (the token is still committed). */
typedef int (*mtplx_token_cb)(const mtplx_token_event *ev, void *user);

/* Optional constraint: set logits of forbidden tokens to -INFINITY given the
 * tokens generated so far. Applied to the target and the draft alike, so MTP
 * stays exact. */
typedef void (*mtplx_mask_cb)(const int32_t *generated, int32_t n_generated, float *logits,
                              int32_t n_vocab, void *user);

typedef struct mtplx_gen_params {
    mtplx_sampler_params sampling;
    int32_t max_tokens;      /* <= 0: until EOS or the context is full */
    int32_t draft_depth;     /* 0 = plain AR; -1 = model default */
    bool adaptive_depth;     /* shrink / grow depth with running acceptance */
    bool ignore_eos;
    mtplx_mask_cb mask;
    void *mask_user;
    /* The MTP head drafts over the first draft_vocab token ids only (BPE and
     * SentencePiece vocabularies put frequent tokens first), so each draft
     * step reads that share of the output matrix. Exact whatever the value:
     * q is 0 outside the subset and the rejection test corrects for it.
     * 0 = automatic (today: the whole vocabulary), -1 = the whole vocabulary. */
    int32_t draft_vocab;
    /* Token events carry logits = NULL. Lets a GPU context at temperature 0
     * (no penalties, no mask) pick tokens on the GPU and copy back only their
     * ids and log-probabilities instead of whole logits rows. */
    bool no_event_logits;
} mtplx_gen_params;

mtplx_gen_params mtplx_gen_default_params(void);

typedef enum mtplx_stop_reason {
    MTPLX_STOP_LENGTH = 0,
    MTPLX_STOP_EOS = 1,
    MTPLX_STOP_CALLBACK = 2,
    MTPLX_STOP_CTX_FULL = 3,
} mtplx_stop_reason;

typedef struct mtplx_gen_stats {
    int32_t n_prompt, n_cached; /* prompt tokens; of them reused from the cache */
    int32_t n_gen;
    /* prefill includes the MTP head's pass over the prompt (its streams'
     * rows whose inputs are committed), run right after the first token's
     * event so it does not delay it; the first decode step then drafts
     * without a catch-up (MTPLX_MTP_PRIME=0 leaves that pass to it) */
    double t_prefill_ms, t_decode_ms, t_draft_ms, t_verify_ms;
    int32_t n_forward; /* target forwards during decode */
    int32_t draft_depth;
    int64_t drafted[MTPLX_MAX_DRAFT];  /* drafts offered at position i+1 */
    int64_t accepted[MTPLX_MAX_DRAFT]; /* of them accepted */
    mtplx_stop_reason stop;
} mtplx_gen_stats;

/* Generate after the given full token sequence. The context reuses the
 * longest prefix already in its KV cache. stats may be NULL. */
mtplx_status mtplx_generate(mtplx_ctx *ctx, const int32_t *prompt, int32_t n_prompt,
                            const mtplx_gen_params *params, mtplx_token_cb cb, void *user,
                            mtplx_gen_stats *stats);

/* Mean tokens committed per target forward during decode (>= 1 with MTP). */
double mtplx_gen_stats_tokens_per_forward(const mtplx_gen_stats *s);

/* ---- incremental generation (servers, UIs) ----
 * The same algorithm as mtplx_generate, one step at a time, so a scheduler
 * can interleave several contexts. start() checks the request and keeps a
 * copy of the prompt; each step() does one prefill chunk (emitting nothing)
 * or one decode step (AR: 1 token; MTP: 1..k+1 tokens, each through cb) and
 * sets *done when generation has ended (EOS, length, context, callback). */
typedef struct mtplx_gen mtplx_gen;
mtplx_status mtplx_gen_start(mtplx_ctx *ctx, const int32_t *prompt, int32_t n_prompt,
                             const mtplx_gen_params *params, mtplx_gen **out);
mtplx_status mtplx_gen_step(mtplx_gen *g, mtplx_token_cb cb, void *user, bool *done);
/* One step of each of n generations; those decoding on contexts that share
 * a backend (mtplx_ctx_params.share_backend_of) verify in ONE batched
 * forward, each with its own exact MTP acceptance. cb gets users[i] for
 * gens[i] (users may be NULL); done[i] as mtplx_gen_step's. Returns the
 * first error; the other generations still stepped. */
mtplx_status mtplx_gen_step_many(mtplx_gen **gens, int32_t n, mtplx_token_cb cb, void **users,
                                 bool *done);
/* Cap the draft depth from the next step on (-1 lifts the cap): a server
 * lowers it when many sequences share a forward and drafting stops paying. */
void mtplx_gen_limit_depth(mtplx_gen *g, int32_t max_depth);
/* The error that ended the generation, MTPLX_OK if none did. */
mtplx_status mtplx_gen_status(const mtplx_gen *g);
/* Statistics so far (owned by g). */
const mtplx_gen_stats *mtplx_gen_get_stats(const mtplx_gen *g);
void mtplx_gen_free(mtplx_gen *g);

/* ------------------------------------------------------------------ */
/* Embeddings and reranking                                            */
/* ------------------------------------------------------------------ */

enum {
    MTPLX_ROLE_GENERATE = 1, /* causal LM (chat / completions) */
    MTPLX_ROLE_EMBED = 2,    /* sentence embeddings */
    MTPLX_ROLE_RERANK = 4,   /* query-document relevance */
};
/* Bit set of the roles this model can play. */
int mtplx_model_roles(const mtplx_model *model);
/* Embedding width (0 if the model cannot embed). */
int32_t mtplx_embed_dim(const mtplx_model *model);
/* Embed n texts as one batch: out [n][mtplx_embed_dim] floats, pooled and
 * (when the model says so) L2-normalised. is_query applies the model's query
 * instruction convention (Qwen3-Embedding). n_tokens (may be NULL) gets the
 * total input tokens. Inputs longer than the context: MTPLX_ERR_RANGE. */
mtplx_status mtplx_embed(mtplx_ctx *ctx, const char *const *texts, int32_t n, bool is_query,
                         float *out, int32_t *n_tokens);
/* Relevance scores in [0, 1] of n documents for a query (cross-encoder
 * sigmoid, or p("yes") for Qwen3-Reranker style models). */
mtplx_status mtplx_rerank(mtplx_ctx *ctx, const char *query, const char *const *docs, int32_t n,
                          float *scores, int32_t *n_tokens);
/* Matryoshka truncation (OpenAI `dimensions`): keep the first new_dim of each
 * of n vectors [n][dim], compacted in place to [n][new_dim], and
 * re-normalise them when normalize. new_dim must be 1..dim. */
mtplx_status mtplx_embed_truncate(float *vecs, int32_t n, int32_t dim, int32_t new_dim,
                                  bool normalize);
/* Scale v [dim] to unit L2 norm (left as is when all zero). */
void mtplx_embed_normalize(float *v, int32_t dim);

#ifdef __cplusplus
}
#endif
#endif /* MTPLX_H */
