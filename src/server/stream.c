/* stream.c: what the client sees of a request while it runs: stop strings
 * held back until they cannot start a stop string, SSE events for chat
 * (chat.completion.chunk) and completions (text_completion), the "mtplx"
 * extension (tokens with their source per chunk; MTP summary at the end)
 * and the usage / logprobs objects shared with the non-stream answers. */
#include "server/srv.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

size_t srv_stop_scan(const char *out, size_t n, char *const *stops, int n_stops, size_t from,
                     long *hit) {
    *hit = -1;
    size_t safe = n;
    if (from > n) from = n;
    for (int i = 0; i < n_stops; i++) {
        size_t L = strlen(stops[i]);
        if (!L) continue;
        const char *p = memmem(out + from, n - from, stops[i], L);
        if (p && (*hit < 0 || p - out < *hit)) *hit = p - out;
        /* the longest tail of out that is a proper prefix of the stop string */
        for (size_t k = (L - 1 < n ? L - 1 : n); k > 0; k--)
            if (!memcmp(out + n - k, stops[i], k)) {
                if (n - k < safe) safe = n - k;
                break;
            }
    }
    if (*hit >= 0) safe = (size_t)*hit;
    return safe;
}

static const char *src_name(int s) {
    return s == MTPLX_SRC_DRAFTED ? "drafted" : s == MTPLX_SRC_VERIFIER ? "verifier" : "sampled";
}

const char *srv_finish_name(int fin, bool tool_calls) {
    if (tool_calls) return "tool_calls";
    return fin == FIN_LENGTH ? "length" : "stop";
}

static double mean_accepted(const mtplx_gen_stats *st) {
    int64_t acc = 0;
    for (int i = 0; i < st->draft_depth && i < MTPLX_MAX_DRAFT; i++) acc += st->accepted[i];
    return st->n_forward ? (double)acc / st->n_forward : 0.0;
}

static cJSON *acceptance(const mtplx_gen_stats *st) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < st->draft_depth && i < MTPLX_MAX_DRAFT; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(st->drafted[i] ? (double)st->accepted[i] / st->drafted[i] : 0.0));
    return a;
}

cJSON *srv_mtp_summary(const srv_req *r) {
    const mtplx_gen_stats *st = &r->stats;
    cJSON *o = cJSON_CreateObject();
    double dec_s = st->t_decode_ms / 1e3;
    cJSON_AddNumberToObject(o, "tok_s", dec_s > 0 ? round(st->n_gen / dec_s * 100) / 100 : 0.0);
    cJSON_AddItemToObject(o, "acceptance", acceptance(st));
    cJSON_AddNumberToObject(o, "mean_accepted", mean_accepted(st));
    cJSON_AddNumberToObject(o, "tokens_per_forward", mtplx_gen_stats_tokens_per_forward(st));
    cJSON_AddNumberToObject(o, "draft_depth", st->draft_depth);
    return o;
}

cJSON *srv_usage(const srv_req *r) {
    const mtplx_gen_stats *st = &r->stats;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", r->n_toks);
    cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + r->n_toks);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", st->n_cached);
    cJSON *m = cJSON_AddObjectToObject(u, "mtp");
    cJSON_AddNumberToObject(m, "draft_depth", st->draft_depth);
    cJSON_AddItemToObject(m, "acceptance", acceptance(st));
    cJSON *dr = cJSON_AddArrayToObject(m, "drafted"), *ac = cJSON_AddArrayToObject(m, "accepted");
    for (int i = 0; i < st->draft_depth && i < MTPLX_MAX_DRAFT; i++) {
        cJSON_AddItemToArray(dr, cJSON_CreateNumber((double)st->drafted[i]));
        cJSON_AddItemToArray(ac, cJSON_CreateNumber((double)st->accepted[i]));
    }
    cJSON_AddNumberToObject(m, "mean_accepted", mean_accepted(st));
    cJSON_AddNumberToObject(m, "tokens_per_forward", mtplx_gen_stats_tokens_per_forward(st));
    cJSON_AddNumberToObject(m, "forwards", st->n_forward);
    return u;
}

/* ---------------- SSE ---------------- */

/* A token as the client sees it: its text clipped to what was released. */
typedef struct tok_view {
    srv_tok t;
    char *text;
} tok_view;

struct stream_state {
    srv *s;
    srv_req *r;
    bool chat, include_usage, logprobs, tools, echo;
    char *prompt_text;
    char id[64], model[256];
    long created;
    int phase; /* 0 start, 1 running, 2 ended */
    size_t sent_text;
    int sent_tok;
    sbuf pend;
    size_t pend_off;
    toolparse tp;
    int n_calls_sent;
    size_t text_off_total; /* completions logprobs text_offset */
};

stream_state *stream_new(srv *s, srv_req *r, bool chat, const char *id, const char *model,
                         bool include_usage, bool logprobs, bool tools, bool echo,
                         const char *prompt_text) {
    stream_state *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->s = s;
    st->r = r;
    pthread_mutex_lock(&r->mu);
    r->refs++;
    pthread_mutex_unlock(&r->mu);
    st->chat = chat;
    st->include_usage = include_usage;
    st->logprobs = logprobs;
    st->tools = tools;
    st->echo = echo;
    st->prompt_text = prompt_text ? strdup(prompt_text) : NULL;
    snprintf(st->id, sizeof st->id, "%s", id);
    snprintf(st->model, sizeof st->model, "%s", model);
    st->created = (long)time(NULL);
    return st;
}

void stream_free(stream_state *st) {
    if (!st) return;
    srv_req_unref(st->r);
    free(st->prompt_text);
    sb_free(&st->pend);
    toolparse_free(&st->tp);
    free(st);
}

srv_req *stream_req(stream_state *st) { return st->r; }

static cJSON *chunk_base(stream_state *st) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", st->id);
    cJSON_AddStringToObject(o, "object", st->chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)st->created);
    cJSON_AddStringToObject(o, "model", st->model);
    cJSON_AddStringToObject(o, "system_fingerprint", "mtplx-" MTPLX_VERSION);
    return o;
}

static void emit(stream_state *st, cJSON *o) {
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!js) return;
    sb_puts(&st->pend, "data: ");
    sb_puts(&st->pend, js);
    sb_puts(&st->pend, "\n\n");
    free(js);
}

/* Chat logprobs content entries for tokens. */
static cJSON *chat_logprobs(const tok_view *v, int n) {
    cJSON *lp = cJSON_CreateObject();
    cJSON *c = cJSON_AddArrayToObject(lp, "content");
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "token", v[i].text);
        cJSON_AddNumberToObject(e, "logprob", isfinite(v[i].t.logprob) ? v[i].t.logprob : -9999.0);
        cJSON *b = cJSON_AddArrayToObject(e, "bytes");
        for (const unsigned char *p = (const unsigned char *)v[i].text; *p; p++)
            cJSON_AddItemToArray(b, cJSON_CreateNumber(*p));
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int k = 0; k < v[i].t.n_top; k++) {
            cJSON *a = cJSON_CreateObject();
            cJSON_AddStringToObject(a, "token", v[i].t.top[k].text);
            cJSON_AddNumberToObject(a, "logprob", isfinite(v[i].t.top[k].logprob) ? v[i].t.top[k].logprob : -9999.0);
            cJSON *ab = cJSON_AddArrayToObject(a, "bytes");
            for (const unsigned char *q = (const unsigned char *)v[i].t.top[k].text; *q; q++)
                cJSON_AddItemToArray(ab, cJSON_CreateNumber(*q));
            cJSON_AddItemToArray(top, a);
        }
        cJSON_AddItemToArray(c, e);
    }
    return lp;
}

static void fill_views(const srv_req *r, int a, int b, size_t limit, tok_view *v) {
    for (int i = a; i < b; i++) {
        srv_tok t = r->toks[i];
        size_t end = t.text_off + t.text_len;
        if (end > limit) end = limit;
        size_t len = end > t.text_off ? end - t.text_off : 0;
        v[i - a].t = t;
        v[i - a].text = strndup(r->out.p ? r->out.p + t.text_off : "", len);
    }
}

cJSON *srv_chat_logprobs(const srv_req *r, int n) {
    tok_view *v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    if (!v) return cJSON_CreateNull();
    fill_views(r, 0, n, r->released, v);
    cJSON *o = chat_logprobs(v, n);
    for (int i = 0; i < n; i++) free(v[i].text);
    free(v);
    return o;
}

static cJSON *completion_logprobs(const tok_view *v, int n, size_t base_off) {
    cJSON *o = cJSON_CreateObject();
    cJSON *tk = cJSON_AddArrayToObject(o, "tokens"), *lp = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *off = cJSON_AddArrayToObject(o, "text_offset");
    bool any_top = false;
    for (int i = 0; i < n; i++) any_top |= v[i].t.n_top > 0;
    cJSON *top = any_top ? cJSON_AddArrayToObject(o, "top_logprobs") : NULL;
    if (!any_top) cJSON_AddNullToObject(o, "top_logprobs");
    for (int i = 0; i < n; i++) {
        if (top) {
            /* legacy completions shape: one {token: logprob} object per position */
            cJSON *m = cJSON_CreateObject();
            for (int k = 0; k < v[i].t.n_top; k++)
                if (!cJSON_GetObjectItemCaseSensitive(m, v[i].t.top[k].text))
                    cJSON_AddNumberToObject(m, v[i].t.top[k].text, v[i].t.top[k].logprob);
            cJSON_AddItemToArray(top, m);
        }
        cJSON_AddItemToArray(tk, cJSON_CreateString(v[i].text));
        cJSON_AddItemToArray(lp, cJSON_CreateNumber(isfinite(v[i].t.logprob) ? v[i].t.logprob : -9999.0));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(base_off + v[i].t.text_off)));
    }
    return o;
}

cJSON *srv_completion_logprobs(const srv_req *r, int n, size_t base_off) {
    tok_view *v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    if (!v) return cJSON_CreateNull();
    fill_views(r, 0, n, r->released, v);
    cJSON *o = completion_logprobs(v, n, base_off);
    for (int i = 0; i < n; i++) free(v[i].text);
    free(v);
    return o;
}

static cJSON *tokens_ext(const tok_view *v, int n) {
    cJSON *m = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(m, "tokens");
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "text", v[i].text);
        cJSON_AddStringToObject(e, "source", src_name(v[i].t.source));
        cJSON_AddNumberToObject(e, "draft_pos", v[i].t.source == MTPLX_SRC_DRAFTED ? v[i].t.draft_pos : 0);
        cJSON_AddItemToArray(a, e);
    }
    return m;
}

/* One content (or completion text) chunk. */
static void emit_text(stream_state *st, const char *text, size_t len, tok_view *v, int nv) {
    cJSON *o = chunk_base(st);
    cJSON *ch = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    char *t = strndup(text, len);
    if (st->chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        cJSON_AddStringToObject(d, "content", t ? t : "");
        if (st->logprobs && nv) cJSON_AddItemToObject(c, "logprobs", chat_logprobs(v, nv));
        else cJSON_AddNullToObject(c, "logprobs");
    } else {
        cJSON_AddStringToObject(c, "text", t ? t : "");
        if (st->logprobs && nv) cJSON_AddItemToObject(c, "logprobs", completion_logprobs(v, nv, st->text_off_total));
        else cJSON_AddNullToObject(c, "logprobs");
    }
    free(t);
    cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(ch, c);
    if (nv) cJSON_AddItemToObject(o, "mtplx", tokens_ext(v, nv));
    emit(st, o);
}

static void emit_calls(stream_state *st, tool_call *calls, int n) {
    for (int i = 0; i < n; i++) {
        cJSON *o = chunk_base(st);
        cJSON *ch = cJSON_AddArrayToObject(o, "choices");
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", 0);
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        cJSON *tc = cJSON_AddArrayToObject(d, "tool_calls");
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "index", st->n_calls_sent++);
        cJSON_AddStringToObject(e, "id", calls[i].id);
        cJSON_AddStringToObject(e, "type", "function");
        cJSON *f = cJSON_AddObjectToObject(e, "function");
        cJSON_AddStringToObject(f, "name", calls[i].name);
        cJSON_AddStringToObject(f, "arguments", calls[i].arguments);
        cJSON_AddItemToArray(tc, e);
        cJSON_AddNullToObject(c, "logprobs");
        cJSON_AddNullToObject(c, "finish_reason");
        cJSON_AddItemToArray(ch, c);
        emit(st, o);
        tool_call_free(&calls[i]);
    }
    free(calls);
}

static void emit_final(stream_state *st) {
    srv_req *r = st->r;
    if (r->finish == FIN_ERROR) {
        cJSON *o = cJSON_CreateObject();
        cJSON *e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "message", r->err[0] ? r->err : "generation failed");
        cJSON_AddStringToObject(e, "type", "server_error");
        cJSON_AddNullToObject(e, "param");
        cJSON_AddNullToObject(e, "code");
        emit(st, o);
    }
    cJSON *o = chunk_base(st);
    cJSON *ch = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (st->chat) cJSON_AddObjectToObject(c, "delta");
    else cJSON_AddStringToObject(c, "text", "");
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", srv_finish_name(r->finish, st->n_calls_sent > 0));
    cJSON_AddItemToArray(ch, c);
    cJSON_AddItemToObject(o, "mtplx", srv_mtp_summary(r));
    emit(st, o);
    if (st->include_usage) {
        o = chunk_base(st);
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", srv_usage(r));
        emit(st, o);
    }
    sb_puts(&st->pend, "data: [DONE]\n\n");
}

/* Turn whatever the request released since the last call into events. */
static void produce(stream_state *st, int wait_ms) {
    srv_req *r = st->r;
    if (st->phase == 0) {
        st->phase = 1;
        if (st->chat) {
            cJSON *o = chunk_base(st);
            cJSON *ch = cJSON_AddArrayToObject(o, "choices");
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "index", 0);
            cJSON *d = cJSON_AddObjectToObject(c, "delta");
            cJSON_AddStringToObject(d, "role", "assistant");
            cJSON_AddStringToObject(d, "content", "");
            cJSON_AddNullToObject(c, "logprobs");
            cJSON_AddNullToObject(c, "finish_reason");
            cJSON_AddItemToArray(ch, c);
            emit(st, o);
        } else if (st->echo && st->prompt_text) {
            emit_text(st, st->prompt_text, strlen(st->prompt_text), NULL, 0);
            st->text_off_total = strlen(st->prompt_text);
        }
        return;
    }
    pthread_mutex_lock(&r->mu);
    if (!r->done && r->released <= st->sent_text && srv_req_tokens_released(r) <= st->sent_tok) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = ts.tv_nsec + (long)wait_ms * 1000000L;
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    }
    bool done = r->done;
    size_t rel = r->released;
    int k = srv_req_tokens_released(r);
    size_t tlen = rel > st->sent_text ? rel - st->sent_text : 0;
    char *text = malloc(tlen + 1);
    int nv = k > st->sent_tok ? k - st->sent_tok : 0;
    tok_view *v = calloc((size_t)nv + 1, sizeof *v);
    if (text && v) {
        memcpy(text, r->out.p ? r->out.p + st->sent_text : "", tlen);
        text[tlen] = 0;
        fill_views(r, st->sent_tok, k, rel, v);
        st->sent_text = rel;
        st->sent_tok = k;
    } else {
        tlen = 0;
        nv = 0;
    }
    pthread_mutex_unlock(&r->mu);
    if (tlen || nv) {
        if (st->tools && st->chat) {
            sbuf content = {0};
            tool_call *calls = NULL;
            int n_calls = 0;
            toolparse_feed(&st->tp, text, tlen, &content, &calls, &n_calls, done);
            if (content.n) emit_text(st, content.p, content.n, v, nv);
            emit_calls(st, calls, n_calls);
            sb_free(&content);
        } else if (tlen) {
            emit_text(st, text, tlen, v, nv);
        }
    } else if (done && st->tools && st->chat) {
        sbuf content = {0};
        tool_call *calls = NULL;
        int n_calls = 0;
        toolparse_feed(&st->tp, "", 0, &content, &calls, &n_calls, true);
        if (content.n) emit_text(st, content.p, content.n, NULL, 0);
        emit_calls(st, calls, n_calls);
        sb_free(&content);
    }
    for (int i = 0; i < nv; i++) free(v[i].text);
    free(v);
    free(text);
    if (done) {
        emit_final(st);
        st->phase = 2;
    }
}

long stream_read(stream_state *st, char *buf, size_t cap, int wait_ms) {
    if (st->pend_off >= st->pend.n) {
        st->pend.n = 0;
        st->pend_off = 0;
        if (st->phase == 2) return -1;
        produce(st, wait_ms);
    }
    size_t n = st->pend.n - st->pend_off;
    if (n > cap) n = cap;
    if (n) memcpy(buf, st->pend.p + st->pend_off, n);
    st->pend_off += n;
    return (long)n;
}
