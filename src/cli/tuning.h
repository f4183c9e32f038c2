/* tuning.h: what `tune`, `bench`, `doctor` and the generating commands share:
 *  - the tuning store ($XDG_CONFIG_HOME/mtplx/tuning.json, default
 *    ~/.config/mtplx/tuning.json): the fastest draft depth per (model content
 *    hash, quant type, hardware key, mtplx version), and the bandwidth probe
 *    per hardware key;
 *  - the measurement loop (fresh context per run, shuffled order, medians);
 *  - tune's decision rule;
 *  - the modes turbo / sustained / burst: named presets over concrete knobs.
 * The embedded prompt suites live in tuning.c. No model logic: everything
 * goes through the public API. */
#ifndef MTPLX_CLI_TUNING_H
#define MTPLX_CLI_TUNING_H

#include "cli/cli.h"
#include "core/hwinfo.h"
#include "server/server.h"

/* ------------------------------------------------------------------ */
/* The store                                                           */
/* ------------------------------------------------------------------ */

/* What a stored result is valid for. Any field differing is a miss. */
typedef struct tune_key {
    /* "fnv1a64:<16 hex>": FNV-1a 64 over the file size (8 bytes, little
     * endian), its first MiB and its last MiB. A folder (HF) hashes, in name
     * order, each regular file's name, size, first and last MiB. Cheap (2 MiB
     * read per file) and changes with any re-quantisation or re-training. */
    char model_hash[40];
    char quant[16];      /* mtplx_model_info.weight_type: "Q8_0", "Q4_K", ... */
    char hardware[320];  /* mtplx_hwinfo.key */
    char version[16];    /* MTPLX_VERSION */
} tune_key;

typedef struct tune_entry {
    tune_key key;
    char model[512];   /* path when tuned (informational) */
    int32_t depth;     /* the winner, >= 1 (AR winning is never stored) */
    int32_t draft_vocab; /* the winner's draft vocabulary (mtplx_gen_params.draft_vocab); 0 = the
                          * whole vocabulary (no prefix beat it, or not measured: GPU, old entries) */
    int32_t threads;   /* threads used while measuring */
    double ar_tps, best_tps;
    char suite[32];
    char when[32];     /* UTC, ISO 8601 */
} tune_entry;

/* The store's path (static storage). */
const char *tune_store_path(void);
/* Model content hash as described at tune_key.model_hash. */
bool tune_model_hash(const char *path, char *out, size_t cap);
/* Fill a key for this model file, quant type and this machine. */
bool tune_key_make(const char *model_path, const char *quant, tune_key *out);
/* 1: found (copied to *out), 0: no entry for this key, -1: store unreadable
 * (message on stderr). A missing store file is a miss, not an error. */
int tune_store_get(const tune_key *k, tune_entry *out);
/* Add e, replacing any entry with the same key. Written atomically. */
bool tune_store_put(const tune_entry *e);
/* Remove the entry with this key (no-op if absent). */
bool tune_store_remove(const tune_key *k);
/* Print every stored entry as a table to f; returns the count (-1 on error). */
int tune_store_show(FILE *f);
/* Bandwidth probe results for a hardware key (GB/s on 1 thread and on
 * n_threads threads). get: true when present. */
bool tune_store_get_bandwidth(const char *hw_key, double *gbps_1, double *gbps_all,
                              int *n_threads);
bool tune_store_put_bandwidth(const char *hw_key, double gbps_1, double gbps_all, int n_threads);

/* ------------------------------------------------------------------ */
/* Prompt suites and measurement                                       */
/* ------------------------------------------------------------------ */

typedef struct tune_prompt {
    const char *name, *kind, *text; /* kind: "prose" or "code" */
} tune_prompt;

/* The embedded suite "prose", "code" or "all" (NULL = "all"). NULL if the
 * name is unknown. */
const tune_prompt *tune_suite(const char *name, int *n);

typedef struct tune_plan {
    int32_t max_depth;  /* tune_cfgs_depths: AR (0) and depths 1..max_depth */
    int32_t n_tokens;   /* new tokens per run */
    int32_t reps;       /* timed repetitions of each (prompt, config) */
    int32_t n_threads;  /* 0 = all */
    int32_t n_ctx;      /* each fresh context; 0 = 1024 */
    const char *device; /* "cpu" (NULL) or "cuda" */
    float temperature;  /* with the run defaults for top-k/p, min-p */
    uint64_t seed;      /* per (prompt, rep) seed = seed + 1000 * prompt + rep */
    bool warmup;        /* one untimed short run per config first */
    bool progress;      /* progress bar with ETA on stderr (tty only) */
} tune_plan;

enum { TUNE_MAX_SAMPLES = 256 };

typedef struct tune_cfg {
    int32_t depth;                   /* set by the caller: 0 = AR */
    int32_t draft_vocab;             /* set by the caller: mtplx_gen_params.draft_vocab */
    int n;                           /* samples */
    double tps[TUNE_MAX_SAMPLES];    /* decode tok/s of each run */
    double median, lo, hi;           /* of tps */
    int64_t n_gen, n_forward, drafted[MTPLX_MAX_DRAFT], accepted[MTPLX_MAX_DRAFT];
    double t_decode_ms, t_draft_ms, t_verify_ms;
} tune_cfg;

/* Fill out[0..max_depth] with the configurations AR and depths 1..max_depth
 * (the model's automatic draft vocabulary); returns their count. */
int32_t tune_cfgs_depths(tune_cfg *out, int32_t max_depth);

/* Measure the n_cfg configurations out[i] (depth and draft_vocab set by the
 * caller; the rest is filled). Each run gets a fresh context; within each
 * (rep, prompt) the configurations run in a shuffled order (fixed seed), so
 * none systematically warms caches for another. */
mtplx_status tune_measure(mtplx_model *model, const tune_prompt *prompts, int n_prompts,
                          const tune_plan *plan, tune_cfg *out, int32_t n_cfg);

/* The draft vocabularies tune tries at the winning depth, against the whole
 * vocabulary (out[0] = -1): the first V/2 and V/4 ids, multiples of 8, when
 * at least 1024. Returns the count (1 when V is too small for a prefix). */
int32_t tune_vocab_candidates(int32_t n_vocab, int32_t *out);

/* The decision. med[0] = AR median tok/s, med[d] = depth d (<= 0: not
 * measured). The fastest depth wins only if it beats AR by more than
 * margin (e.g. 0.03 = 3%: below that AR is kept, it costs less); depths
 * within tie (e.g. 0.01) of the fastest count as equal and the smallest of
 * them wins (less drafting work for the same speed). Returns 0 for AR. */
int32_t tune_decide(const double *med, int32_t n_depths, double margin, double tie);

/* ------------------------------------------------------------------ */
/* Modes                                                               */
/* ------------------------------------------------------------------ */

typedef enum cli_mode { CLI_MODE_AUTO = 0, CLI_MODE_TURBO, CLI_MODE_SUSTAINED, CLI_MODE_BURST } cli_mode;

/* "auto" / NULL, "turbo", "sustained", "burst"; false if unknown. */
bool cli_mode_parse(const char *s, cli_mode *out);
const char *cli_mode_name(cli_mode m);

/* What the presets look at (filled from the model, the machine and the
 * store by cli_apply_mode; by hand in tests). */
typedef struct cli_mode_env {
    int32_t n_threads;          /* logical CPUs */
    uint64_t mem_available;     /* bytes */
    uint64_t weight_bytes;
    uint64_t kv_bytes_per_token;/* F16 KV, trunk + MTP layers (other types scale it) */
    int32_t n_ctx_train;
    bool has_mtp;
    int32_t tuned_depth;        /* 0: nothing in the store */
    int32_t tuned_draft_vocab;  /* the stored draft vocabulary, 0 = the whole one */
    int32_t depth_trained;      /* the head's trained draft depth, 0 = unknown */
    int32_t n_expected;         /* prompt + new tokens, 0 = unknown (chat, server) */
    /* NULL when a Q8_0 KV cache can run; else why not ("q8_0 KV is CPU-only",
     * a head_dim that is not whole blocks): sustained then keeps F16 */
    const char *no_q8_kv;
} cli_mode_env;

/* cp->kv_type before resolving when no --kv-type / --kv-f32 flag was given:
 * the mode picks. Never reaches the library (cli_mode_resolve replaces it). */
#define CLI_KV_AUTO ((mtplx_kv_type)-1)

typedef struct cli_mode_plan {
    cli_mode mode;              /* never AUTO after resolving */
    char why[160];              /* how the mode was chosen */
    int32_t depth, n_threads, n_batch, n_ctx;
    mtplx_kv_type kv_type;
    const char *kv_note;        /* sustained wanted Q8_0 and could not have it: why */
    bool adaptive;
    char depth_from[48];        /* "tuned", "flag", "default", "no MTP head", ... */
    int32_t draft_vocab;        /* as resolved into gp->draft_vocab (0 = automatic) */
    bool vocab_tuned;           /* it came from the store */
    uint64_t mem_budget;        /* sustained: bytes for weights + KV (0 = none) */
    uint64_t kv_bytes_per_token;/* of the chosen KV type */
    int32_t base_depth;         /* sustained: depth before the context rule */
    const char *device;         /* "cpu" or "cuda", as the context will be made */
    /* which knobs came from the user's flags */
    bool set_depth, set_threads, set_batch, set_ctx, set_kv, set_adaptive;
} cli_mode_plan;

/* Resolve a mode against gp/cp, which hold the user's flags: a knob still at
 * its "unset" value (draft_depth -1, n_threads / n_batch / n_ctx 0, kv_type
 * CLI_KV_AUTO with kv_f32 false, adaptive_depth false) is filled by the
 * preset; a set one is kept (kv_f32 = true becomes kv_type F32).
 *  turbo:     depth = tuned or 3; threads = all; n_batch 512; KV F16;
 *             ctx = min(train, 4096).
 *  sustained: KV Q8_0 (F16 where it cannot run, env->no_q8_kv); ctx =
 *             min(train, 32768, what fits half the available memory after
 *             the weights, counting the chosen KV type's bytes); n_batch 256
 *             (chunked prefill);
 *             depth from the per-context-length rule (cli_mode_depth_at) on
 *             the expected length, and adaptive_depth on, so the engine
 *             lowers depth further when verification gets costlier.
 *  burst:     ctx = min(train, 2048) (grown to fit n_expected); n_batch 512;
 *             depth = tuned if stored (tune measures exactly this short-run
 *             regime), else 4, the deepest tune tries.
 *  auto:      sustained when ctx > 8192 was asked or n_expected > 4096;
 *             burst when 0 < n_expected <= 1536 and ctx (if asked) <= 2048;
 *             turbo otherwise.
 * Every mode: the stored draft vocabulary (env->tuned_draft_vocab) when the
 * depth is the tuned one and gp->draft_vocab is unset (0); it was measured
 * at that depth only. */
void cli_mode_resolve(cli_mode mode, const cli_mode_env *env, mtplx_gen_params *gp,
                      mtplx_ctx_params *cp, cli_mode_plan *out);

/* The sustained per-context-length rule: base depth up to 4096 positions,
 * at most 2 up to 16384, 1 beyond. Other modes return their depth as is.
 * start/serve call this per turn / request with the positions it will use. */
int32_t cli_mode_depth_at(const cli_mode_plan *p, int32_t n_positions);

/* Print "mtplx: mode M (why) | depth D (from) | threads T | n_batch B |
 * kv T N KiB/token | ctx C [| adaptive] [| budget X GiB]" to log (T: f16,
 * f32 or q8_0; N: the KV bytes one position costs, trunk and MTP head). */
void cli_mode_print(const cli_mode_plan *p, FILE *log);

/* How a generating command uses it (run does; start / serve the same way):
 * parse flags into gp / cp as before (leaving unset knobs at their defaults),
 * with cp.kv_type = CLI_KV_AUTO unless --kv-type / --kv-f32 was given,
 * add --mode M (and -b/--batch, --no-adaptive if wanted), load the model,
 * then before mtplx_ctx_new:
 *     cli_mode_plan plan;
 *     if (cli_apply_mode(model, path, mode, n_expected, &gp, &cp, stderr, &plan)) -> usage
 * with n_expected = prompt + max new tokens, or 0 when unknown (chat, server:
 * auto then picks turbo, or sustained when --ctx > 8192). In sustained mode,
 * per turn / request: gp.draft_depth = cli_mode_depth_at(&plan, n_past + n_new).
 *
 * All of the above for a loaded model: looks up the tuning store, resolves,
 * fills gp / cp, prints to log (NULL = quiet). mode: NULL or a name.
 * n_expected: prompt + new tokens, 0 when unknown. plan_out may be NULL.
 * Returns EXIT_OK, or EXIT_USAGE (message printed) for an unknown mode. */
int cli_apply_mode(const mtplx_model *model, const char *model_path, const char *mode,
                   int32_t n_expected, mtplx_gen_params *gp, mtplx_ctx_params *cp, FILE *log,
                   cli_mode_plan *plan_out);

/* The same for the server (`serve`, `start --web`), which loads the model
 * itself: fill gp / cp with the flags as above (cp.kv_type = CLI_KV_AUTO
 * unless given), then cli_serve_mode_attach(&sp, &m): the server calls back
 * once the model is loaded, the mode is resolved and printed to stderr and
 * the server's params filled from it; in sustained mode each request that
 * does not ask for a depth gets cli_mode_depth_at(prompt + max tokens). m
 * must outlive mtplx_server_run. */
typedef struct cli_serve_mode {
    const char *mode;      /* --mode, NULL = auto (turbo, or sustained for --ctx > 8192) */
    bool no_adaptive;      /* --no-adaptive */
    mtplx_gen_params gp;   /* draft_depth, adaptive_depth from the flags */
    mtplx_ctx_params cp;   /* n_ctx, n_threads, n_batch, kv_type, device from the flags */
    cli_mode_plan plan;    /* filled when the model is loaded */
} cli_serve_mode;
void cli_serve_mode_init(cli_serve_mode *m);
void cli_serve_mode_attach(mtplx_server_params *sp, cli_serve_mode *m);

/* Median of n doubles (sorts a copy; 0 when n == 0). */
double tune_median(const double *v, int n);

#endif
