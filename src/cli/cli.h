/* cli.h: what the command files share: the command table, model-path
 * resolution (paths, store names, the built-in default) and error printing.
 * Commands parse arguments, call the library and print; no model logic. */
#ifndef MTPLX_CLI_H
#define MTPLX_CLI_H

#include "mtplx.h"

#include <stdio.h>

/* Exit codes users rely on. */
enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

#define CLI_COMMANDS(X)                                                                      \
    X(run, "one-shot generation from a prompt")                                              \
    X(start, "interactive chat in the terminal")                                             \
    X(serve, "OpenAI-compatible HTTP server with a web UI")                                  \
    X(inspect, "what a checkpoint is: architecture, tensors, types, MTP heads")              \
    X(tokenize, "text to token ids with a model's tokenizer")                                \
    X(detokenize, "token ids to text")                                                       \
    X(chat_template, "render a model's chat template")                                       \
    X(forge, "convert, quantize and train MTP heads")                                        \
    X(models, "list the local model store")                                                  \
    X(tune, "measure AR and each draft depth, keep the fastest")                             \
    X(bench, "throughput / acceptance / exactness suites")                                   \
    X(doctor, "hardware report")                                                             \
    X(embed, "embedding vectors for texts")                                                  \
    X(rerank, "relevance scores of documents for a query")

#define X(name, help) int cmd_##name(int argc, char **argv);
CLI_COMMANDS(X)
#undef X

/* Print "mtplx: <what>: <last library error>" to stderr. */
void cli_error(const char *what);
/* Print a usage error and return EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* MTPLX_HOME or ~/.mtplx (no trailing slash). Static storage. */
const char *cli_home(void);
/* Resolve a model argument: an existing path, a name in the store
 * (<home>/models/NAME, NAME.gguf), or, when arg is NULL, the built-in default
 * model. Writes into buf; returns false with a message printed if nothing fits. */
bool cli_resolve_model(const char *arg, char *buf, size_t cap);

/* Parse helpers: false (and a usage message) when s is not a number in range. */
bool cli_parse_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out);
/* --device: "cpu" or "cuda" (the first GPU) into *out; else a usage error
 * is printed and false returned. A build without CUDA accepts "cuda" here and
 * fails when the context is made (a runtime error, exit 1). */
/* --device: cpu, cuda, or auto (cli_auto_device: the first GPU when this
 * build has CUDA and the machine has a GPU, else the CPU). */
bool cli_parse_device(const char *cmd, const char *s, const char **out);
const char *cli_auto_device(void);
/* The device of start / serve without --device: auto, unless the KV type
 * asked for runs on the CPU only (Q8_0). */
const char *cli_default_device(mtplx_kv_type kv_type);
bool cli_parse_float(const char *cmd, const char *flag, const char *s, double lo, double hi,
                     double *out);

/* --kv-type f16|f32|q8_0: false (and a usage message) otherwise. */
bool cli_parse_kv_type(const char *cmd, const char *s, mtplx_kv_type *out);

/* Monotonic milliseconds. */
double cli_now_ms(void);

#endif
