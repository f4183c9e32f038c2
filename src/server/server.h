/* server.h: `mtplx serve`, an OpenAI-compatible HTTP server, as one blocking
 * entry point. The CLI (`mtplx serve`, `mtplx start --web`) fills the params
 * and calls mtplx_server_run; it prints nothing itself (the on_listen hook
 * lets the caller print the URL). */
#ifndef MTPLX_SERVER_H
#define MTPLX_SERVER_H

#include "mtplx.h"

typedef struct mtplx_server_params {
    const char *host;            /* "127.0.0.1" */
    int port;                    /* 8000; 0 = any free port (on_listen gets it) */
    const char *api_key;         /* NULL = no auth; else "Authorization: Bearer KEY" */
    const char *model_path;      /* required: a path the library can load */
    const char *model_id;        /* name in /v1/models; NULL = file name without extension */
    int n_parallel;              /* slots decoding together (1) */
    int n_ctx;                   /* context per slot; 0 = min(model's, 4096) */
    int draft_depth;             /* -1 = model default (3 with an MTP head), 0 = AR */
    int n_threads;               /* 0 = all cores */
    int n_batch;                 /* prefill chunk, tokens per forward; 0 = 512 */
    mtplx_kv_type kv_type;       /* every slot's KV cache (MTPLX_KV_F16) */
    const char *device;          /* "cpu" (NULL) or "cuda" */
    bool adaptive_depth;         /* requests adapt their depth to the running acceptance */
    int draft_vocab;             /* mtplx_gen_params.draft_vocab of every request (0 = automatic) */
    const char *chat_template_path; /* Jinja file overriding the model's template */
    int max_queue;               /* requests waiting for a slot before 429 (64) */
    const char *embedding_model; /* optional model for /v1/embeddings */
    const char *reranker_model;  /* optional model for /v1/rerank */
    size_t max_body;             /* request body cap in bytes (8 MiB) */
    /* Called once the socket listens, with the URL ("http://127.0.0.1:8000"). */
    void (*on_listen)(const char *url, int port, void *user);
    /* Called once the model is loaded, before the slots' contexts are made:
     * may change n_ctx, n_threads, n_batch, kv_type, device, draft_depth,
     * adaptive_depth and draft_vocab (the CLI resolves --mode here and prints
     * its plan).
     * Anything but MTPLX_OK stops the server with that status. */
    mtplx_status (*on_model)(const mtplx_model *model, struct mtplx_server_params *p, void *user);
    /* For a request that does not ask for a draft_depth: the depth to use
     * when it will reach n_positions positions (prompt + max new tokens, at
     * most the context); NULL = draft_depth. Called on the scheduler thread. */
    int32_t (*depth_for)(int32_t n_positions, void *user);
    void *user; /* passed to the hooks above */
} mtplx_server_params;

mtplx_server_params mtplx_server_default_params(void);

/* Load the model(s), listen, serve until mtplx_server_stop(). */
mtplx_status mtplx_server_run(const mtplx_server_params *p);

/* Ask a running server to shut down (async-signal-safe). */
void mtplx_server_stop(void);

#endif
