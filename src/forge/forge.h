/* forge.h: making checkpoints MTP-capable.
 *  - convert: any loadable checkpoint (HF folder, llama2.c, GGUF) to a GGUF
 *    file, optionally quantized, optionally without its MTP head. MTP heads
 *    stay in their source precision (quantizing them collapses acceptance);
 *    norms and biases become F32, as GGUF readers expect.
 *  - train_mtp: train a Qwen3-Next-style MTP head for a frozen trunk on the
 *    CPU by self-distillation (train_mtp.c).
 *  - verify: acceptance, speed and greedy exactness of a model's head. */
#ifndef MTPLX_FORGE_H
#define MTPLX_FORGE_H

#include "core/core.h"

typedef struct mtplx_convert_params {
    int quant_type;      /* mtplx_type for 2-D weights; -1 = keep */
    bool quantize_mtp;   /* also quantize MTP head weights (default false) */
    bool strip_mtp;      /* drop the MTP heads: a plain GGUF for other tools */
    /* progress: called after each tensor (done, total, name); may be NULL */
    void (*progress)(int64_t done, int64_t total, const char *name, void *user);
    void *user;
} mtplx_convert_params;

/* Convert in_path to out_path (written to a temporary file, then renamed:
 * on failure nothing is left behind). The source is fully checked as a model
 * first (architecture, every tensor's shape against the config). Quantized
 * sources are re-quantized through F32 when a different type is asked for.
 * Heads get mtplx.nextn.layout ("qwen3-next", "deepseek", "mimo") and, when
 * known, mtplx.nextn.depth_trained. */
mtplx_status mtplx_forge_convert(const char *in_path, const char *tokenizer_path,
                                 const char *out_path, const mtplx_convert_params *p);

/* ---- train-mtp ---- */

#define MTPLX_TRAIN_MAX_DEPTH 4

typedef struct mtplx_train_progress {
    int64_t step, steps;
    double loss;                            /* running mean KL (nats), all depths */
    double agree[MTPLX_TRAIN_MAX_DEPTH];    /* running top-1 agreement with the trunk */
    double tok_s;                           /* training tokens (windows x rows) per second */
    double elapsed_s, eta_s;
    bool checkpoint;                        /* a checkpoint was just written */
    /* Before the first step, while the on-policy pool is made: step / steps
     * count its windows, tok_s is the trunk's generation speed, and loss and
     * agree are unset. */
    bool pool;
} mtplx_train_progress;

typedef struct mtplx_train_params {
    const char *data_path;   /* UTF-8 text */
    const char *out_path;    /* model + head GGUF */
    int32_t depth;           /* unrolled depth K (1..MTPLX_TRAIN_MAX_DEPTH) */
    int64_t steps;           /* optimizer steps (one window of seq rows each) */
    int32_t seq;             /* rows per window */
    float lr, weight_decay, clip, warmup_frac;
    int32_t n_threads;       /* 0 = all cores */
    const char *resume;      /* checkpoint GGUF (its optimizer state in "<path>.opt") */
    int64_t checkpoint_every;/* 0 = none; checkpoints go to "<out>.ckpt.gguf" (+ ".opt") */
    bool head_bf16;          /* store head matrices as BF16 (default F32) */
    bool init_random;        /* small random head instead of the trunk-layer copy (baselines) */
    bool f32_lm_head;        /* lm_head products in f32 (default: the int8 kernels, ~4x faster) */
    uint64_t seed;
    int32_t eval_windows;    /* held-out windows for the before / after loss */
    /* On-policy data: this share of the steps (0..1) trains on windows of
     * the trunk's own greedy text (a quarter of a window of training text,
     * then the trunk's greedy continuation), drawn from a pool of pool_windows
     * made before the first step. Drafts are verified along such text, and
     * it repeats far more than books do. 0 = training text only. */
    float on_policy;
    int32_t pool_windows;
    void (*progress)(const mtplx_train_progress *p, void *user);
    void *user;
} mtplx_train_params;

mtplx_train_params mtplx_train_default_params(void);

typedef struct mtplx_train_result {
    int64_t steps_done, tokens;
    double tok_s;
    /* held-out mean KL and top-1 agreement per depth, at the start and the end */
    double eval_loss0[MTPLX_TRAIN_MAX_DEPTH], eval_loss1[MTPLX_TRAIN_MAX_DEPTH];
    double eval_agree0[MTPLX_TRAIN_MAX_DEPTH], eval_agree1[MTPLX_TRAIN_MAX_DEPTH];
} mtplx_train_result;

/* Train a head for model_path (a model without one; an existing head is
 * replaced) and write out_path. res may be NULL. */
mtplx_status mtplx_forge_train_mtp(const char *model_path, const mtplx_train_params *p,
                                   mtplx_train_result *res);

/* ---- verify ---- */

typedef struct mtplx_verify_params {
    const char *data_path; /* prompts from this text; NULL = built-in prompts */
    int32_t depth;         /* draft depth; 0 = the model's default (3) */
    int32_t n_tokens;      /* tokens generated per prompt */
    int32_t n_prompts;
    int32_t prompt_len;    /* tokens per prompt taken from data */
    int32_t n_threads;
    const char *device;    /* "cpu" (NULL) or "cuda" */
    /* 0: greedy, and MTP text must equal AR text. Above 0: the default
     * sampler (top-k 40, top-p 0.95, min-p 0.05) at this temperature, prompt
     * i seeded seed + i: acceptance and speed of sampled decoding; the AR and
     * MTP texts are then different samples, not compared */
    float temperature;
    uint64_t seed;
    int32_t draft_vocab; /* mtplx_gen_params.draft_vocab (0 = automatic) */
} mtplx_verify_params;

mtplx_verify_params mtplx_verify_default_params(void);

typedef struct mtplx_verify_result {
    int32_t depth, n_prompts;
    int64_t n_gen_ar, n_gen_mtp;
    int64_t drafted[MTPLX_MAX_DRAFT], accepted[MTPLX_MAX_DRAFT];
    double tokens_per_forward;
    double ar_tok_s, mtp_tok_s;
    int32_t identical; /* prompts whose MTP text equals the AR text */
    bool has_mtp;
    float temperature; /* as asked: identical counts only at 0 */
} mtplx_verify_result;

mtplx_status mtplx_forge_verify(const char *model_path, const mtplx_verify_params *p,
                                mtplx_verify_result *r);

#endif
