/* http.c: libmicrohttpd glue: one thread per connection (so a handler may
 * block waiting for its request), routing, Bearer auth, body size cap,
 * OpenAI error objects, SSE responses through a content-reader callback
 * that also notices a client that went away, and mtplx_server_run itself
 * (load, listen, wait for mtplx_server_stop, shut down in order). */
#include "server/srv.h"
#include "core/core.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

extern const unsigned char mtplx_webui_index_html[];
extern const size_t mtplx_webui_index_html_len;

static volatile sig_atomic_t g_stop;

void mtplx_server_stop(void) { g_stop = 1; }

mtplx_server_params mtplx_server_default_params(void) {
    return (mtplx_server_params){.host = "127.0.0.1", .port = 8000, .n_parallel = 1,
                                 .draft_depth = -1, .max_queue = 64, .max_body = 8u << 20};
}

void srv_error(srv_reply *rep, int status, const char *type, const char *param, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    const char *code = status == 404 && param && !strcmp(param, "model") ? "model_not_found"
                       : status == 401 ? "invalid_api_key"
                       : status == 429 ? "rate_limit_exceeded"
                       : strstr(msg, "exceeds the context") ? "context_length_exceeded"
                                                             : NULL;
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    rep->status = status;
    rep->ctype = "application/json";
    rep->body.n = 0;
    if (js) sb_puts(&rep->body, js);
    free(js);
}

/* Per connection: the body as it arrives. */
typedef struct conn {
    sbuf body;
    bool too_large;
    struct MHD_Connection *c;
} conn;

/* True when the peer closed its end (a recv peek reads end-of-file). */
static bool peer_gone(void *user) {
    struct MHD_Connection *c = user;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    char b;
    ssize_t r = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

typedef struct sse {
    stream_state *st;
    struct MHD_Connection *c;
} sse;

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    sse *x = cls;
    for (int i = 0; i < 1 << 30; i++) {
        long n = stream_read(x->st, buf, max, 100);
        if (n < 0) return MHD_CONTENT_READER_END_OF_STREAM;
        if (n > 0) return n;
        if (peer_gone(x->c)) {
            atomic_store(&stream_req(x->st)->cancel, true);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

static void sse_free(void *cls) {
    sse *x = cls;
    srv_req *r = stream_req(x->st);
    /* closed before the end: stop generating for nobody */
    atomic_store(&r->cancel, true);
    stream_free(x->st);
    free(x);
}

static enum MHD_Result send_reply(srv *s, struct MHD_Connection *c, srv_reply *rep, const char *ep) {
    struct MHD_Response *resp;
    if (rep->stream) {
        sse *x = calloc(1, sizeof *x);
        if (!x) {
            stream_free(rep->stream);
            return MHD_NO;
        }
        x->st = rep->stream;
        x->c = c;
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, x, sse_free);
        if (!resp) {
            sse_free(x);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    } else {
        resp = MHD_create_response_from_buffer(rep->body.n, rep->body.p ? rep->body.p : (void *)"",
                                               MHD_RESPMEM_MUST_COPY);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "Content-Type", rep->ctype ? rep->ctype : "application/json");
    }
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
    if (rep->retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", rep->retry_after);
        MHD_add_response_header(resp, "Retry-After", ra);
    }
    if (rep->status == 405) MHD_add_response_header(resp, "Allow", ep && !strcmp(ep, "get") ? "GET" : "POST");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)rep->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static bool auth_ok(srv *s, struct MHD_Connection *c) {
    if (!s->p.api_key || !s->p.api_key[0]) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    /* constant-time compare */
    size_t a = strlen(h), b = strlen(s->p.api_key);
    unsigned d = (unsigned)(a != b);
    for (size_t i = 0; i < a && i < b; i++) d |= (unsigned char)(h[i] ^ s->p.api_key[i]);
    return d == 0;
}

typedef enum { R_NONE, R_HEALTH, R_MODELS, R_CHAT, R_COMPL, R_EMB, R_RERANK, R_METRICS, R_UI } route;

static route find_route(const char *url, bool *post) {
    static const struct { const char *path; route r; bool post; } tab[] = {
        {"/health", R_HEALTH, false},       {"/v1/health", R_HEALTH, false},
        {"/v1/models", R_MODELS, false},    {"/models", R_MODELS, false},
        {"/v1/chat/completions", R_CHAT, true}, {"/chat/completions", R_CHAT, true},
        {"/v1/completions", R_COMPL, true}, {"/completions", R_COMPL, true},
        {"/v1/embeddings", R_EMB, true},    {"/embeddings", R_EMB, true},
        {"/v1/rerank", R_RERANK, true},     {"/rerank", R_RERANK, true},
        {"/metrics", R_METRICS, false},     {"/", R_UI, false},
        {"/index.html", R_UI, false},
    };
    for (size_t i = 0; i < sizeof tab / sizeof *tab; i++)
        if (!strcmp(url, tab[i].path)) {
            *post = tab[i].post;
            return tab[i].r;
        }
    return R_NONE;
}

static const char *route_name(route r) {
    static const char *n[] = {"other", "health", "models", "chat_completions", "completions",
                              "embeddings", "rerank", "metrics", "ui"};
    return n[r];
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls) {
    srv *s = cls;
    conn *cn = *con_cls;
    if (!cn) {
        cn = calloc(1, sizeof *cn);
        if (!cn) return MHD_NO;
        cn->c = c;
        *con_cls = cn;
        return MHD_YES;
    }
    if (*upload_size) {
        if (cn->body.n + *upload_size > s->p.max_body) cn->too_large = true;
        else sb_put(&cn->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    srv_reply rep = {.status = 200};
    bool want_post = false;
    route r = find_route(url, &want_post);
    bool is_post = !strcmp(method, "POST"), is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (!strcmp(method, "OPTIONS")) {
        /* CORS preflight */
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        enum MHD_Result ret = MHD_queue_response(c, 204, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    if (r == R_NONE) {
        srv_error(&rep, 404, "not_found_error", NULL, "no route for %s %s", method, url);
    } else if (want_post ? !is_post : !is_get) {
        srv_error(&rep, 405, "invalid_request_error", NULL, "%s %s: method not allowed (use %s)", method, url,
                  want_post ? "POST" : "GET");
    } else if (cn->too_large) {
        srv_error(&rep, 413, "invalid_request_error", NULL, "the request body is larger than %zu bytes",
                  s->p.max_body);
    } else if (r != R_HEALTH && r != R_UI && !auth_ok(s, c)) {
        srv_error(&rep, 401, "invalid_request_error", NULL, "missing or wrong API key (Authorization: Bearer ...)");
    } else {
        const char *b = sb_str(&cn->body);
        switch (r) {
        case R_HEALTH: {
            int q, a;
            srv_sched_load(s->sched, &q, &a);
            sb_printf(&rep.body, "{\"status\":\"ok\",\"slots_idle\":%d,\"slots_processing\":%d,\"queued\":%d}",
                      s->p.n_parallel - a, a, q);
            rep.ctype = "application/json";
            break;
        }
        case R_MODELS: srv_models(s, &rep); break;
        case R_CHAT: srv_chat(s, b, cn->body.n, &rep, peer_gone, c); break;
        case R_COMPL: srv_completions(s, b, cn->body.n, &rep, peer_gone, c); break;
        case R_EMB: srv_embeddings(s, b, cn->body.n, &rep); break;
        case R_RERANK: srv_rerank(s, b, cn->body.n, &rep); break;
        case R_METRICS:
            srv_metrics_render(s->metrics, s->sched, &rep.body);
            rep.ctype = "text/plain; version=0.0.4; charset=utf-8";
            break;
        case R_UI:
            sb_put(&rep.body, (const char *)mtplx_webui_index_html, mtplx_webui_index_html_len);
            rep.ctype = "text/html; charset=utf-8";
            break;
        default: break;
        }
        if (rep.body.oom) srv_error(&rep, 503, "server_error", NULL, "out of memory");
    }
    srv_metrics_request(s->metrics, route_name(r), rep.status);
    enum MHD_Result ret = send_reply(s, c, &rep, want_post ? "post" : "get");
    sb_free(&rep.body);
    return ret;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
    conn *cn = *con_cls;
    if (!cn) return;
    sb_free(&cn->body);
    free(cn);
    *con_cls = NULL;
}

static void base_id(const char *path, char *out, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b && b[1] ? b + 1 : path;
    snprintf(out, cap, "%s", b);
    char *dot = strrchr(out, '.');
    if (dot && dot != out && (!strcmp(dot, ".gguf") || !strcmp(dot, ".bin"))) *dot = 0;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    sbuf b = {0};
    char tmp[8192];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) sb_put(&b, tmp, n);
    fclose(f);
    if (b.oom) {
        sb_free(&b);
        return NULL;
    }
    if (!b.p) return strdup("");
    return b.p;
}

mtplx_status mtplx_server_run(const mtplx_server_params *pp) {
    srv *s = calloc(1, sizeof *s);
    if (!s) return MTPLX_ERR_NOMEM;
    s->p = *pp;
    if (s->p.n_parallel <= 0) s->p.n_parallel = 1;
    if (s->p.max_queue <= 0) s->p.max_queue = 64;
    if (!s->p.max_body) s->p.max_body = 8u << 20;
    if (!s->p.host) s->p.host = "127.0.0.1";
    pthread_mutex_init(&s->tok_mu, NULL);
    pthread_mutex_init(&s->aux_mu, NULL);
    g_stop = 0;
    mtplx_status st = MTPLX_OK;
    struct MHD_Daemon *d = NULL;
    mtplx_model_params mp = mtplx_model_default_params();
    if (!s->p.model_path) {
        st = MTPLX_ERR_ARG;
        goto done;
    }
    if ((st = mtplx_model_load(s->p.model_path, &mp, &s->model)) != MTPLX_OK) goto done;
    if (s->p.on_model && (st = s->p.on_model(s->model, &s->p, s->p.user)) != MTPLX_OK) goto done;
    s->tok = mtplx_model_tokenizer(s->model);
    if (s->p.model_id) snprintf(s->model_id, sizeof s->model_id, "%s", s->p.model_id);
    else base_id(s->p.model_path, s->model_id, sizeof s->model_id);
    if (s->p.chat_template_path) {
        s->tmpl = read_file(s->p.chat_template_path);
        if (!s->tmpl) {
            st = mtplx_fail(MTPLX_ERR_IO, "--chat-template %s: cannot read the file", s->p.chat_template_path);
            goto done;
        }
    } else if (mtplx_model_chat_template(s->model)) {
        s->tmpl = strdup(mtplx_model_chat_template(s->model));
    }
    s->tmpl_chatml = !s->tmpl || strstr(s->tmpl, "<|im_end|>") != NULL;
    s->draft_depth = s->p.draft_depth;
    {
        /* warm the tokenizer's lazily built tables before threads share it */
        int32_t *ids = NULL;
        size_t n = 0;
        if (mtplx_tokenize(s->tok, "warm up", 7, false, true, &ids, &n) == MTPLX_OK) {
            char *t = NULL;
            mtplx_detokenize(s->tok, ids, n, true, &t, NULL);
            free(t);
        }
        free(ids);
    }
    if ((st = srv_aux_load(s)) != MTPLX_OK) goto done;
    s->metrics = srv_metrics_new();
    srv_sched_params sp = {.n_slots = s->p.n_parallel, .n_ctx = s->p.n_ctx, .n_threads = s->p.n_threads,
                           .max_queue = s->p.max_queue, .n_batch = s->p.n_batch, .kv_type = s->p.kv_type,
                           .device = s->p.device, .depth_for = s->p.depth_for, .depth_user = s->p.user};
    if (!s->metrics || (st = srv_sched_new(s->model, &sp, s->metrics, &s->sched)) != MTPLX_OK) {
        if (st == MTPLX_OK) st = MTPLX_ERR_NOMEM;
        goto done;
    }
    s->n_ctx = srv_sched_n_ctx(s->sched);

    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    struct sockaddr *sa = NULL;
    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    const char *host = !strcmp(s->p.host, "localhost") ? "127.0.0.1" : s->p.host;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD;
    if (inet_pton(AF_INET, host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)s->p.port);
        sa = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)s->p.port);
        sa = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        st = mtplx_fail(MTPLX_ERR_ARG, "--host %s: expected an IPv4 or IPv6 address", host);
        goto done;
    }
    d = MHD_start_daemon(flags, (uint16_t)s->p.port, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, sa,
                         MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned)600, MHD_OPTION_CONNECTION_LIMIT, (unsigned)512, MHD_OPTION_END);
    if (!d) {
        st = mtplx_fail(MTPLX_ERR_IO, "cannot listen on %s port %d (in use, or not allowed)", host, s->p.port);
        goto done;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    int port = di ? di->port : s->p.port;
    if (s->p.on_listen) {
        char url[300];
        snprintf(url, sizeof url, strchr(host, ':') ? "http://[%s]:%d" : "http://%s:%d", host, port);
        s->p.on_listen(url, port, s->p.user);
    }
    while (!g_stop) usleep(50 * 1000);
done:
    srv_sched_stop(s->sched); /* streams in flight end now */
    if (d) MHD_stop_daemon(d);
    srv_sched_free(s->sched);
    srv_metrics_free(s->metrics);
    srv_aux_free(s);
    mtplx_model_free(s->model);
    free(s->tmpl);
    pthread_mutex_destroy(&s->tok_mu);
    pthread_mutex_destroy(&s->aux_mu);
    free(s);
    return st;
}
