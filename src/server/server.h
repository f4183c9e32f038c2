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
    const char *chat_template_path; /* Jinja file overriding the model's template */
    int max_queue;               /* requests waiting for a slot before 429 (64) */
    const char *embedding_model; /* optional model for /v1/embeddings */
    const char *reranker_model;  /* optional model for /v1/rerank */
    size_t max_body;             /* request body cap in bytes (8 MiB) */
    /* Called once the socket listens, with the URL ("http://127.0.0.1:8000"). */
    void (*on_listen)(const char *url, int port, void *user);
    void *user;
} mtplx_server_params;

mtplx_server_params mtplx_server_default_params(void);

/* Load the model(s), listen, serve until mtplx_server_stop(). */
mtplx_status mtplx_server_run(const mtplx_server_params *p);

/* Ask a running server to shut down (async-signal-safe). */
void mtplx_server_stop(void);

#endif
