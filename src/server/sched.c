/* sched.c: the scheduler. One thread owns every slot's context (all sharing
 * one backend, so one thread pool) and steps all active slots together with
 * mtplx_gen_step_many: prefill goes one chunk per slot per round (so a long
 * prompt does not stall the other streams), and the decoding slots' MTP
 * verifications (or AR steps) run as ONE batched forward, each slot keeping
 * its own exact MTP acceptance (continuous batching). With many active slots
 * the draft depth is capped so a round stays near BATCH_ROWS rows. Requests
 * wait in a bounded FIFO; a free slot is given to the oldest request,
 * preferring the slot whose cache shares the longest prefix with its prompt. */
#include "core/core.h"
#include "server/srv.h"

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#define MAX_BATCH_SLOTS 64
#define BATCH_ROWS 16

typedef struct slot {
    mtplx_ctx *ctx;
    mtplx_gen *gen;
    srv_req *req;
    int32_t *cache; /* tokens believed to be in ctx's KV cache */
    int32_t n_cache;
} slot;

struct srv_sched {
    mtplx_model *model;
    srv_metrics *metrics;
    int n_slots, n_ctx, max_queue;
    slot *slots;
    pthread_t th;
    bool th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_req **queue;
    int q_head, q_len;
    int n_active;
    bool stop;
    int32_t (*depth_for)(int32_t n_positions, void *user);
    void *depth_user;
};

srv_req *srv_req_new(void) {
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->refs = 1;
    r->gp = mtplx_gen_default_params();
    atomic_init(&r->cancel, false);
    return r;
}

void srv_req_unref(srv_req *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left > 0) return;
    free(r->prompt);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->stops);
    jmask_free(r->mask);
    sb_free(&r->out);
    for (int i = 0; i < r->n_toks; i++) {
        for (int k = 0; k < r->toks[i].n_top; k++) free(r->toks[i].top[k].text);
        free(r->toks[i].top);
    }
    free(r->toks);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

int srv_req_tokens_released(const srv_req *r) {
    if (r->done) return r->n_toks;
    int k = 0;
    while (k < r->n_toks && r->toks[k].text_off + r->toks[k].text_len <= r->released) k++;
    return k;
}

static void *sched_main(void *arg);

mtplx_status srv_sched_new(mtplx_model *model, const srv_sched_params *p, srv_metrics *m,
                           srv_sched **out) {
    *out = NULL;
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) return MTPLX_ERR_NOMEM;
    s->model = model;
    s->metrics = m;
    s->n_slots = p->n_slots > 0 ? p->n_slots : 1;
    if (s->n_slots > MAX_BATCH_SLOTS) s->n_slots = MAX_BATCH_SLOTS; /* --parallel is capped here */
    s->max_queue = p->max_queue > 0 ? p->max_queue : 64;
    s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
    s->queue = calloc((size_t)s->max_queue, sizeof *s->queue);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (!s->slots || !s->queue) {
        srv_sched_free(s);
        return MTPLX_ERR_NOMEM;
    }
    s->depth_for = p->depth_for;
    s->depth_user = p->depth_user;
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_ctx = p->n_ctx;
    cp.n_threads = p->n_threads;
    cp.n_batch = p->n_batch;
    cp.kv_type = p->kv_type;
    cp.device = p->device;
    for (int i = 0; i < s->n_slots; i++) {
        cp.share_backend_of = i ? s->slots[0].ctx : NULL;
        mtplx_status st = mtplx_ctx_new(model, &cp, &s->slots[i].ctx);
        if (st != MTPLX_OK) {
            srv_sched_free(s);
            return st;
        }
        if (i == 0) cp.n_ctx = mtplx_ctx_n_ctx(s->slots[0].ctx);
    }
    s->n_ctx = mtplx_ctx_n_ctx(s->slots[0].ctx);
    if (mtplx_thread_create(&s->th, sched_main, s) != 0) {
        srv_sched_free(s);
        return MTPLX_ERR_INTERNAL;
    }
    s->th_started = true;
    *out = s;
    return MTPLX_OK;
}

int srv_sched_n_ctx(const srv_sched *s) { return s->n_ctx; }

void srv_sched_load(srv_sched *s, int *queued, int *active) {
    pthread_mutex_lock(&s->mu);
    *queued = s->q_len;
    *active = s->n_active;
    pthread_mutex_unlock(&s->mu);
}

bool srv_sched_submit(srv_sched *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    if (s->stop || s->q_len >= s->max_queue) {
        pthread_mutex_unlock(&s->mu);
        return false;
    }
    pthread_mutex_lock(&r->mu);
    r->refs++;
    pthread_mutex_unlock(&r->mu);
    s->queue[(s->q_head + s->q_len++) % s->max_queue] = r;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return true;
}

static void finish_req(srv_req *r, int fin, const char *err) {
    pthread_mutex_lock(&r->mu);
    if (!r->done) {
        bool stop_hit = r->finish == FIN_STOP; /* released ends at the stop string */
        r->done = true;
        if (!r->finish) r->finish = fin;
        if (err) snprintf(r->err, sizeof r->err, "%s", err);
        if (!stop_hit || r->released > r->out.n) r->released = r->out.n;
        r->t_done = srv_now_ms();
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* The n most likely tokens of a logits row with their log-probabilities
 * (one pass for the log-sum-exp, one keeping a small sorted list). */
static srv_alt *top_alternatives(const srv_req *r, const float *lg, int32_t V, int n, uint8_t *n_out) {
    *n_out = 0;
    if (n > 20) n = 20;
    int32_t ids[20];
    float best[20];
    int have = 0;
    float mx = -INFINITY;
    for (int32_t i = 0; i < V; i++)
        if (lg[i] > mx) mx = lg[i];
    double sum = 0;
    for (int32_t i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
    if (!(sum > 0)) return NULL;
    double lse = mx + log(sum);
    for (int32_t i = 0; i < V; i++) {
        float v = lg[i];
        if (have == n && !(v > best[have - 1])) continue;
        int j = have < n ? have++ : n - 1;
        while (j > 0 && best[j - 1] < v) {
            best[j] = best[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        best[j] = v;
        ids[j] = i;
    }
    srv_alt *a = calloc((size_t)have, sizeof *a);
    if (!a) return NULL;
    for (int k = 0; k < have; k++) {
        a[k].logprob = (float)((double)best[k] - lse);
        size_t len;
        if (mtplx_detokenize(r->tok, &ids[k], 1, false, &a[k].text, &len) != MTPLX_OK)
            a[k].text = strdup("");
    }
    *n_out = (uint8_t)have;
    return a;
}

/* Token callback of a slot's generation (scheduler thread). */
static int on_token(const mtplx_token_event *ev, void *user) {
    srv_req *r = user;
    pthread_mutex_lock(&r->mu);
    size_t off = r->out.n;
    sb_put(&r->out, ev->text, ev->text_len);
    if (ev->id >= 0) {
        if (r->n_toks == r->cap_toks) {
            int cap = r->cap_toks ? 2 * r->cap_toks : 64;
            srv_tok *t = realloc(r->toks, (size_t)cap * sizeof *t);
            if (t) {
                r->toks = t;
                r->cap_toks = cap;
            }
        }
        if (r->n_toks < r->cap_toks) {
            srv_tok t = {.id = ev->id, .source = (int8_t)ev->source, .draft_pos = (int8_t)ev->draft_pos,
                         .logprob = ev->logprob, .text_off = off, .text_len = ev->text_len};
            if (r->top_logprobs > 0 && ev->logits && r->tok)
                t.top = top_alternatives(r, ev->logits, ev->n_vocab, r->top_logprobs, &t.n_top);
            r->toks[r->n_toks++] = t;
        }
        if (!r->t_first) r->t_first = srv_now_ms();
    } else if (r->n_toks) {
        /* flushed text belongs to the last token */
        r->toks[r->n_toks - 1].text_len = r->out.n - r->toks[r->n_toks - 1].text_off;
    }
    int stop = 0;
    long hit = -1;
    size_t from = off > r->max_stop ? off - r->max_stop : 0;
    size_t safe = srv_stop_scan(r->out.p ? r->out.p : "", r->out.n, r->stops, r->n_stops, from, &hit);
    if (hit >= 0) {
        r->released = (size_t)hit;
        r->finish = FIN_STOP;
        stop = 1;
    } else if (safe > r->released) {
        r->released = safe;
    }
    if (!stop && r->mask && ev->id >= 0) {
        /* constrained output: stop as soon as the JSON (and suffix) is complete */
        bool complete = false;
        if (jmask_check_text(r->mask, r->out.p ? r->out.p : "", r->out.n, &complete) && complete) {
            r->released = r->out.n;
            r->finish = FIN_STOP;
            stop = 1;
        }
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (atomic_load(&r->cancel)) return 1;
    return stop;
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Give queued requests to free slots (s->mu held). */
static void assign(srv_sched *s) {
    while (s->q_len > 0) {
        srv_req *r = s->queue[s->q_head];
        int best = -1;
        int32_t best_len = -1;
        for (int i = 0; i < s->n_slots; i++) {
            if (s->slots[i].req) continue;
            int32_t l = common_prefix(s->slots[i].cache, s->slots[i].n_cache, r->prompt, r->n_prompt);
            if (l > best_len) {
                best_len = l;
                best = i;
            }
        }
        if (best < 0) return;
        s->q_head = (s->q_head + 1) % s->max_queue;
        s->q_len--;
        slot *sl = &s->slots[best];
        if (atomic_load(&r->cancel)) {
            finish_req(r, FIN_CANCELLED, NULL);
            srv_req_unref(r);
            continue;
        }
        mtplx_gen_params gp = r->gp;
        if (s->depth_for && !r->depth_asked && gp.draft_depth != 0) {
            /* the per-request depth rule (sustained mode: shallower drafts
             * for requests that will reach long contexts) */
            int32_t want = gp.max_tokens > 0 ? r->n_prompt + gp.max_tokens : s->n_ctx;
            gp.draft_depth = s->depth_for(want < s->n_ctx ? want : s->n_ctx, s->depth_user);
        }
        /* only top_logprobs reads whole logits rows: without it a GPU
         * context picks or samples its tokens on the GPU */
        gp.no_event_logits = r->top_logprobs <= 0;
        mtplx_gen *g = NULL;
        mtplx_status st = mtplx_gen_start(sl->ctx, r->prompt, r->n_prompt, &gp, &g);
        if (st != MTPLX_OK) {
            finish_req(r, FIN_ERROR, mtplx_last_error());
            srv_req_unref(r);
            continue;
        }
        pthread_mutex_lock(&r->mu);
        r->started = true;
        pthread_mutex_unlock(&r->mu);
        sl->gen = g;
        sl->req = r;
        s->n_active++;
    }
}

/* A slot's generation ended: publish the result, remember the cache. */
static void release(srv_sched *s, slot *sl, mtplx_status st) {
    srv_req *r = sl->req;
    const mtplx_gen_stats *gs = mtplx_gen_get_stats(sl->gen);
    pthread_mutex_lock(&r->mu);
    r->stats = *gs;
    pthread_mutex_unlock(&r->mu);
    int fin = FIN_LENGTH;
    if (st != MTPLX_OK) fin = FIN_ERROR;
    else if (atomic_load(&r->cancel)) fin = FIN_CANCELLED;
    else if (gs->stop == MTPLX_STOP_EOS || gs->stop == MTPLX_STOP_CALLBACK) fin = FIN_STOP;
    finish_req(r, fin, st != MTPLX_OK ? mtplx_last_error() : NULL);
    srv_metrics_gen(s->metrics, r);
    /* the KV cache now holds the prompt and (most of) the generated tokens */
    int32_t n = r->n_prompt + r->n_toks;
    int32_t *c = realloc(sl->cache, (size_t)(n > 0 ? n : 1) * sizeof *c);
    if (c) {
        memcpy(c, r->prompt, (size_t)r->n_prompt * sizeof *c);
        for (int i = 0; i < r->n_toks; i++) c[r->n_prompt + i] = r->toks[i].id;
        sl->cache = c;
        sl->n_cache = st == MTPLX_OK ? n : 0;
    }
    mtplx_gen_free(sl->gen);
    sl->gen = NULL;
    sl->req = NULL;
    srv_req_unref(r);
}

static void *sched_main(void *arg) {
    srv_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        assign(s);
        if (s->n_active == 0) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        int freed = 0, na = 0;
        slot *act[MAX_BATCH_SLOTS];
        mtplx_gen *gens[MAX_BATCH_SLOTS];
        void *users[MAX_BATCH_SLOTS];
        bool done[MAX_BATCH_SLOTS];
        for (int i = 0; i < s->n_slots; i++) {
            slot *sl = &s->slots[i];
            if (!sl->req) continue;
            if (atomic_load(&sl->req->cancel)) {
                release(s, sl, MTPLX_OK);
                freed++;
                continue;
            }
            if (na < MAX_BATCH_SLOTS) {
                act[na] = sl;
                gens[na] = sl->gen;
                users[na++] = sl->req;
            }
        }
        /* all active slots step together: their verifications share one
         * forward; past BATCH_ROWS rows drafting stops paying, so each
         * slot's depth is capped to keep the batch near that size */
        int cap = na > 1 ? BATCH_ROWS / na - 1 : -1;
        if (na > 1 && cap < 1) cap = 1;
        for (int j = 0; j < na; j++) mtplx_gen_limit_depth(gens[j], cap);
        if (na > 0) mtplx_gen_step_many(gens, na, on_token, users, done);
        for (int j = 0; j < na; j++) {
            if (!done[j]) continue;
            release(s, act[j], mtplx_gen_status(gens[j]));
            freed++;
        }
        pthread_mutex_lock(&s->mu);
        s->n_active -= freed;
    }
    /* shutting down: cancel whatever is left */
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->req) continue;
        atomic_store(&sl->req->cancel, true);
        release(s, sl, MTPLX_OK);
    }
    while (s->q_len > 0) {
        srv_req *r = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->max_queue;
        s->q_len--;
        finish_req(r, FIN_CANCELLED, "the server is shutting down");
        srv_req_unref(r);
    }
    s->n_active = 0;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

void srv_sched_stop(srv_sched *s) {
    if (!s || !s->th_started) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    s->th_started = false;
}

void srv_sched_free(srv_sched *s) {
    if (!s) return;
    srv_sched_stop(s);
    if (s->slots) {
        /* contexts sharing slot 0's backend go first */
        for (int i = s->n_slots - 1; i >= 0; i--) {
            mtplx_ctx_free(s->slots[i].ctx);
            free(s->slots[i].cache);
        }
    }
    free(s->slots);
    free(s->queue);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
