/* bench_suites.h: what cmd_bench.c shares with bench_suites.c (the suite
 * files under bench/suites/, long-context, math-quick, the exactness suite's
 * distribution check) and bench_compare.c (`mtplx bench compare`). */
#ifndef MTPLX_CLI_BENCH_SUITES_H
#define MTPLX_CLI_BENCH_SUITES_H

#include "cli/tuning.h"

#include <cjson/cJSON.h>

typedef struct bench_opts {
    int32_t max_depth, n_tokens, reps, n_threads, n_prompts;
    int32_t samples;        /* distribution check: samples per side (0 = the file's) */
    const char *text;       /* --text */
    const char *suites_dir; /* --suites-dir */
    const char *model_path; /* the resolved model path */
    const char *positions;  /* long-context: "1024,4096,16384" */
    const char *device;     /* --device: "cpu" (NULL) or "cuda" */
    const char *llama_cpp;  /* --llama-cpp / $MTPLX_LLAMA_CPP, NULL: none */
    const char *llama_model; /* --llama-model: the GGUF llama.cpp runs (NULL: model_path) */
    int32_t threads_used;   /* n_threads, or the machine's count when 0 */
    bool quick;
    bool depth_set; /* --max-depth was given */
    bool has_mtp;   /* the model has MTP heads */
} bench_opts;

/* The held-out Gutenberg text (../shared/data/gutenberg/valid.txt.xz) beside
 * the source tree or the working directory; false if absent. */
bool bench_find_valid_text(char *buf, size_t cap);

/* One prompt of a suite file. answer: math-quick's expected final answer. */
typedef struct bench_prompt {
    const char *name, *kind, *text, *answer;
} bench_prompt;

/* A suite read from <dir>/<suite>.json, or the compiled-in prompts of
 * tuning.c when allowed and no file is found. doc (the parsed file) owns the
 * strings. */
typedef struct bench_set {
    bench_prompt *p;
    int n;
    char source[4200]; /* the file, or "compiled-in (tuning.c)" */
    cJSON *doc;
} bench_set;

/* Where suite files are looked for, first hit wins: --suites-dir,
 * $MTPLX_BENCH_SUITES, <source tree>/bench/suites (the tree the binary was
 * built from), ./bench/suites. Returns false (message printed) when the file
 * is in none of them and fallback is false or there are no compiled-in
 * prompts for this suite. */
bool bench_set_load(const bench_opts *o, const char *suite, bool fallback, bench_set *out);
void bench_set_free(bench_set *s);
/* A number of the suite file's top-level object "settings", def if absent. */
double bench_set_num(const bench_set *s, const char *key, double def);

int bench_suite_long_context(mtplx_model *m, const bench_opts *o, cJSON *res);
int bench_suite_math_quick(mtplx_model *m, const bench_opts *o, cJSON *res);
/* The exactness suite's sampled half: first tokens under MTP vs AR. Adds
 * "distribution" to res; returns the number of failed checks (-1: error). */
int bench_distribution(mtplx_model *m, const bench_opts *o, const bench_set *set, cJSON *res);

/* Upper tail of the chi-square distribution with df degrees of freedom. */
double bench_chi2_sf(double x, double df);
/* Two-sample chi-square test of homogeneity over counts a[k], b[k] (bins
 * with a pooled count < 10 merged into one); *df_out, *tv_out (total
 * variation distance of the empirical distributions). Returns the p-value. */
double bench_chi2_two_sample(const int *a, const int *b, int k, int *df_out, double *tv_out);

/* llama.cpp's plain decode (llama-bench tg) of the same GGUF: bench_llama.c. */
typedef struct bench_llama {
    bool ran;
    char reason[640];    /* why it was skipped */
    char binary[4200];
    char commit[64], model_type[128];
    double tok_s, stddev;
    int n_gen, threads;
} bench_llama;
/* Run llama-bench (arg: the binary or its folder; NULL or "" = none) on
 * model with that many threads, tokens and repetitions. False (r->reason
 * says why, nothing printed) when it could not. */
bool bench_llama_tg(const char *arg, const char *model, int threads, int n_gen, int reps,
                    bench_llama *r);
/* Read the tg row of llama-bench's `-o json` output into r. */
bool bench_llama_parse(const char *text, bench_llama *r);
/* {"ran": true, "tokens_per_s": ..., ...} or {"ran": false, "skipped": why}. */
cJSON *bench_llama_json(const bench_llama *r);

/* `mtplx bench compare A.json B.json` (argv[0] is "compare"). */
int bench_compare(int argc, char **argv);

#endif
