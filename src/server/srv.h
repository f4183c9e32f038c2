/* srv.h: what the server's files share. The picture:
 *
 *   HTTP threads (http.c)          scheduler thread (sched.c)
 *   parse + render + tokenize  ->  queue -> slots (one mtplx_ctx each, one
 *   (openai.c)                      shared backend), round-robin gen_step
 *   stream events (stream.c)   <-  srv_req: text, tokens, stop matching
 *
 * A srv_req is shared by both sides and reference counted; its output part
 * is written by the scheduler under req->mu and read by the HTTP thread. */
#ifndef MTPLX_SRV_H
#define MTPLX_SRV_H

#include "mtplx.h"
#include "server/server.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------- growable text (util.c) ---------------- */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;
void sb_put(sbuf *b, const char *s, size_t n);
void sb_puts(sbuf *b, const char *s);
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_free(sbuf *b);
/* NUL-terminated contents ("" when empty); stays owned by b. */
const char *sb_str(sbuf *b);
double srv_now_ms(void);

/* ---------------- stop strings (stream.c) ---------------- */
/* Length of out's text that can be shown without possibly showing the start
 * of a stop string; *hit gets the offset of a complete stop string (or -1).
 * from: where to start looking (text before it was already checked). */
size_t srv_stop_scan(const char *out, size_t n, char *const *stops, int n_stops, size_t from,
                     long *hit);

/* ---------------- JSON constrained decoding (jsonmask.c) ---------------- */
typedef struct jmask jmask;
/* A mask for the model's vocabulary that only lets through token sequences
 * whose text is a prefix of a JSON value valid for schema (NULL schema: any
 * JSON object). prefix / suffix: literal text required before / after the
 * JSON (tool calls); NULL for none. Returns NULL with *err set on a schema
 * we cannot enforce. */
jmask *jmask_new(const mtplx_tokenizer *tok, const char *schema_json, const char *prefix,
                 const char *suffix, char *err, size_t err_cap);
void jmask_free(jmask *m);
void jmask_apply(const int32_t *gen, int32_t n_gen, float *logits, int32_t n_vocab, void *user);
/* For tests: does text satisfy the automaton (complete = full value)? */
bool jmask_check_text(jmask *m, const char *text, size_t n, bool *complete);

/* ---------------- tool calls (toolcall.c) ---------------- */
typedef struct tool_call {
    char id[40];
    char *name;      /* caller frees */
    char *arguments; /* JSON text; caller frees */
} tool_call;
typedef struct toolparse {
    int mode;        /* 0 detecting, 1 plain content, 2 inside <tool_call>, 3 llama JSON */
    sbuf hold;       /* text not yet classified */
    sbuf call;       /* current call's JSON */
    int n_calls;
    uint64_t id_seed;
} toolparse;
/* Feed released model text; content pieces go to *content (appended), and
 * completed calls are appended to calls (caller frees each). */
void toolparse_feed(toolparse *tp, const char *text, size_t n, sbuf *content, tool_call **calls,
                    int *n_calls, bool final);
void toolparse_free(toolparse *tp);
void tool_call_free(tool_call *c);
/* Parse one call object {"name":..,"arguments"|"parameters":..}. */
bool tool_call_parse(const char *json, size_t n, tool_call *out, uint64_t *seed);

/* ---------------- requests and scheduler (sched.c) ---------------- */
/* One of the most likely tokens at a position (top_logprobs). */
typedef struct srv_alt {
    float logprob;
    char *text; /* the token decoded on its own (owned) */
} srv_alt;

typedef struct srv_tok {
    int32_t id;
    int8_t source, draft_pos;
    uint8_t n_top;
    float logprob;
    size_t text_off, text_len; /* in req->out */
    srv_alt *top;              /* [n_top], most likely first (owned) */
} srv_tok;

enum { FIN_NONE = 0, FIN_STOP, FIN_LENGTH, FIN_CANCELLED, FIN_ERROR };

typedef struct srv_req {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    /* input: set before submit, read-only afterwards */
    int32_t *prompt;
    int32_t n_prompt;
    mtplx_gen_params gp;
    bool depth_asked;   /* gp.draft_depth came from the request (else the scheduler may rule it) */
    char **stops;
    int n_stops;
    size_t max_stop;
    jmask *mask;
    int top_logprobs;               /* alternatives to report per token (0..20) */
    const mtplx_tokenizer *tok;     /* to decode them */
    const char *endpoint; /* for metrics */
    double t_submit;
    /* output: guarded by mu */
    sbuf out;           /* all generated text, including held-back text */
    size_t released;    /* text the client may see */
    srv_tok *toks;
    int n_toks, cap_toks;
    bool started, done;
    int finish;
    char err[256];
    mtplx_gen_stats stats;
    double t_first, t_done;
    atomic_bool cancel;
} srv_req;

srv_req *srv_req_new(void);
void srv_req_unref(srv_req *r);
/* Number of tokens whose text lies entirely in [0, released) (all when done). */
int srv_req_tokens_released(const srv_req *r);

typedef struct srv_metrics srv_metrics;
typedef struct srv_sched srv_sched;
typedef struct srv_sched_params {
    int n_slots, n_ctx, n_threads, max_queue, n_batch;
    mtplx_kv_type kv_type;
    const char *device;
    /* mtplx_server_params.depth_for and its user (may be NULL) */
    int32_t (*depth_for)(int32_t n_positions, void *user);
    void *depth_user;
} srv_sched_params;
mtplx_status srv_sched_new(mtplx_model *model, const srv_sched_params *p, srv_metrics *m,
                           srv_sched **out);
/* false: the queue is full (the caller answers 429). Takes a reference. */
bool srv_sched_submit(srv_sched *s, srv_req *r);
void srv_sched_stop(srv_sched *s); /* stops the thread, cancels everything (idempotent) */
void srv_sched_free(srv_sched *s);
int srv_sched_n_ctx(const srv_sched *s);
void srv_sched_load(srv_sched *s, int *queued, int *active);

/* ---------------- metrics (metrics.c) ---------------- */
srv_metrics *srv_metrics_new(void);
void srv_metrics_free(srv_metrics *m);
void srv_metrics_request(srv_metrics *m, const char *endpoint, int status);
void srv_metrics_gen(srv_metrics *m, const srv_req *r);
void srv_metrics_render(srv_metrics *m, srv_sched *s, sbuf *out);

/* ---------------- the server (http.c / openai.c) ---------------- */
typedef struct srv {
    mtplx_server_params p;
    mtplx_model *model;
    const mtplx_tokenizer *tok;
    char model_id[256];
    char *tmpl;          /* chat template (file, model's, or NULL = ChatML fallback) */
    bool tmpl_chatml;    /* rendered prompts end turns with <|im_end|> */
    pthread_mutex_t tok_mu; /* tokenizer and template calls */
    srv_sched *sched;
    srv_metrics *metrics;
    int n_ctx;
    int draft_depth;
    /* optional embedding / reranking models */
    mtplx_model *emb_model, *rr_model;
    mtplx_ctx *emb_ctx, *rr_ctx;
    char emb_id[256], rr_id[256];
    pthread_mutex_t aux_mu;
} srv;

/* An HTTP answer built by the handlers. */
typedef struct srv_reply {
    int status;
    sbuf body;
    const char *ctype;
    int retry_after; /* > 0: Retry-After header */
    /* streaming: when set, http.c streams this request */
    srv_req *stream_req;
    struct stream_state *stream;
} srv_reply;

void srv_error(srv_reply *rep, int status, const char *type, const char *param, const char *fmt,
               ...) __attribute__((format(printf, 5, 6)));

/* POST handlers (openai.c). Parse body, validate, build a srv_req and either
 * submit it for streaming (rep->stream set) or wait for it (is_gone polled
 * so a vanished client cancels) and fill the reply. */
typedef bool (*srv_gone_fn)(void *user);
void srv_chat(srv *s, const char *body, size_t n, srv_reply *rep, srv_gone_fn gone, void *gu);
void srv_completions(srv *s, const char *body, size_t n, srv_reply *rep, srv_gone_fn gone,
                     void *gu);
void srv_embeddings(srv *s, const char *body, size_t n, srv_reply *rep);
void srv_rerank(srv *s, const char *body, size_t n, srv_reply *rep);
void srv_models(srv *s, srv_reply *rep);
/* embed.c: the optional embedding / reranking models */
mtplx_status srv_aux_load(srv *s);
void srv_aux_free(srv *s);

/* ---------------- streaming (stream.c) ---------------- */
typedef struct stream_state stream_state;
/* chat: chat.completion.chunk events; else text_completion events. */
stream_state *stream_new(srv *s, srv_req *r, bool chat, const char *id, const char *model,
                         bool include_usage, bool logprobs, bool tools, bool echo_prompt,
                         const char *prompt_text);
void stream_free(stream_state *st);
/* Next bytes of the SSE body: blocks up to wait_ms for events. Returns the
 * number of bytes written (0 = nothing yet), -1 at the end. */
long stream_read(stream_state *st, char *buf, size_t cap, int wait_ms);
srv_req *stream_req(stream_state *st);

/* The "mtplx" summary object (tok/s, acceptance, ...) for a finished request. */
struct cJSON;
struct cJSON *srv_mtp_summary(const srv_req *r);
struct cJSON *srv_usage(const srv_req *r);
const char *srv_finish_name(int fin, bool tool_calls);
/* logprobs objects of the first n tokens (text clipped to what was released) */
struct cJSON *srv_chat_logprobs(const srv_req *r, int n);
struct cJSON *srv_completion_logprobs(const srv_req *r, int n, size_t base_off);

#endif
