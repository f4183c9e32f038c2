/* metrics.c: GET /metrics in the Prometheus text format (0.0.4): requests by
 * endpoint and status, prompt / generated tokens, decode tokens per second,
 * a time-to-first-token histogram, queue depth, active slots and MTP drafts
 * offered / accepted per draft position. Counters live behind one mutex;
 * they move once per request, never per token. */
#include "server/srv.h"

#include <stdlib.h>
#include <string.h>

#define N_EP 16
static const double TTFT_BUCKETS[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
#define N_BUCKETS (sizeof TTFT_BUCKETS / sizeof *TTFT_BUCKETS)

struct srv_metrics {
    pthread_mutex_t mu;
    struct { const char *ep; int status; uint64_t n; } req[N_EP * 8];
    int n_req;
    uint64_t prompt_tokens, cached_tokens, gen_tokens, n_gen_req, forwards;
    double decode_s, prefill_s, last_tok_s;
    uint64_t ttft_bucket[N_BUCKETS];
    uint64_t ttft_count;
    double ttft_sum;
    uint64_t drafted[MTPLX_MAX_DRAFT], accepted[MTPLX_MAX_DRAFT];
    uint64_t fin[5];
};

srv_metrics *srv_metrics_new(void) {
    srv_metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void srv_metrics_free(srv_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void srv_metrics_request(srv_metrics *m, const char *ep, int status) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_req && !(m->req[i].status == status && !strcmp(m->req[i].ep, ep))) i++;
    if (i == m->n_req && m->n_req < (int)(sizeof m->req / sizeof *m->req)) {
        m->req[i].ep = ep;
        m->req[i].status = status;
        m->req[i].n = 0;
        m->n_req++;
    }
    if (i < m->n_req) m->req[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_gen(srv_metrics *m, const srv_req *r) {
    const mtplx_gen_stats *st = &r->stats;
    pthread_mutex_lock(&m->mu);
    m->n_gen_req++;
    m->prompt_tokens += (uint64_t)r->n_prompt;
    m->cached_tokens += (uint64_t)st->n_cached;
    m->gen_tokens += (uint64_t)r->n_toks;
    m->forwards += (uint64_t)st->n_forward;
    m->decode_s += st->t_decode_ms / 1e3;
    m->prefill_s += st->t_prefill_ms / 1e3;
    if (st->t_decode_ms > 0) m->last_tok_s = st->n_gen / (st->t_decode_ms / 1e3);
    if (r->t_first > 0) {
        double t = (r->t_first - r->t_submit) / 1e3;
        for (size_t i = 0; i < N_BUCKETS; i++)
            if (t <= TTFT_BUCKETS[i]) m->ttft_bucket[i]++;
        m->ttft_count++;
        m->ttft_sum += t;
    }
    for (int i = 0; i < MTPLX_MAX_DRAFT; i++) {
        m->drafted[i] += (uint64_t)st->drafted[i];
        m->accepted[i] += (uint64_t)st->accepted[i];
    }
    if (r->finish >= 0 && r->finish < 5) m->fin[r->finish]++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_render(srv_metrics *m, srv_sched *s, sbuf *o) {
    int queued = 0, active = 0;
    if (s) srv_sched_load(s, &queued, &active);
    pthread_mutex_lock(&m->mu);
    sb_puts(o, "# HELP mtplx_requests_total HTTP requests by endpoint and status.\n"
               "# TYPE mtplx_requests_total counter\n");
    for (int i = 0; i < m->n_req; i++)
        sb_printf(o, "mtplx_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", m->req[i].ep,
                  m->req[i].status, (unsigned long long)m->req[i].n);
    sb_printf(o, "# HELP mtplx_generations_total Finished generations by finish reason.\n"
                 "# TYPE mtplx_generations_total counter\n");
    static const char *fin[] = {"none", "stop", "length", "cancelled", "error"};
    for (int i = 1; i < 5; i++)
        sb_printf(o, "mtplx_generations_total{reason=\"%s\"} %llu\n", fin[i], (unsigned long long)m->fin[i]);
    sb_printf(o, "# HELP mtplx_prompt_tokens_total Prompt tokens of finished generations.\n"
                 "# TYPE mtplx_prompt_tokens_total counter\nmtplx_prompt_tokens_total %llu\n",
              (unsigned long long)m->prompt_tokens);
    sb_printf(o, "# HELP mtplx_prompt_tokens_cached_total Prompt tokens reused from a slot's KV cache.\n"
                 "# TYPE mtplx_prompt_tokens_cached_total counter\nmtplx_prompt_tokens_cached_total %llu\n",
              (unsigned long long)m->cached_tokens);
    sb_printf(o, "# HELP mtplx_generated_tokens_total Generated tokens.\n"
                 "# TYPE mtplx_generated_tokens_total counter\nmtplx_generated_tokens_total %llu\n",
              (unsigned long long)m->gen_tokens);
    sb_printf(o, "# HELP mtplx_target_forwards_total Target-model forwards during decode.\n"
                 "# TYPE mtplx_target_forwards_total counter\nmtplx_target_forwards_total %llu\n",
              (unsigned long long)m->forwards);
    sb_printf(o, "# HELP mtplx_decode_seconds_total Time spent decoding, summed over requests.\n"
                 "# TYPE mtplx_decode_seconds_total counter\nmtplx_decode_seconds_total %.6f\n", m->decode_s);
    sb_printf(o, "# HELP mtplx_prefill_seconds_total Time spent in prefill, summed over requests.\n"
                 "# TYPE mtplx_prefill_seconds_total counter\nmtplx_prefill_seconds_total %.6f\n", m->prefill_s);
    sb_printf(o, "# HELP mtplx_tokens_per_second Decode speed: generated tokens over decode time, all requests.\n"
                 "# TYPE mtplx_tokens_per_second gauge\nmtplx_tokens_per_second %.3f\n",
              m->decode_s > 0 ? m->gen_tokens / m->decode_s : 0.0);
    sb_printf(o, "# HELP mtplx_last_tokens_per_second Decode speed of the last finished request.\n"
                 "# TYPE mtplx_last_tokens_per_second gauge\nmtplx_last_tokens_per_second %.3f\n", m->last_tok_s);
    sb_puts(o, "# HELP mtplx_time_to_first_token_seconds Time from submit to the first generated token.\n"
               "# TYPE mtplx_time_to_first_token_seconds histogram\n");
    for (size_t i = 0; i < N_BUCKETS; i++)
        sb_printf(o, "mtplx_time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n", TTFT_BUCKETS[i],
                  (unsigned long long)m->ttft_bucket[i]);
    sb_printf(o, "mtplx_time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)m->ttft_count);
    sb_printf(o, "mtplx_time_to_first_token_seconds_sum %.6f\n", m->ttft_sum);
    sb_printf(o, "mtplx_time_to_first_token_seconds_count %llu\n", (unsigned long long)m->ttft_count);
    sb_printf(o, "# HELP mtplx_queue_depth Requests waiting for a slot.\n"
                 "# TYPE mtplx_queue_depth gauge\nmtplx_queue_depth %d\n", queued);
    sb_printf(o, "# HELP mtplx_active_slots Slots generating now.\n"
                 "# TYPE mtplx_active_slots gauge\nmtplx_active_slots %d\n", active);
    sb_puts(o, "# HELP mtplx_mtp_drafted_total MTP draft tokens offered, by draft position.\n"
               "# TYPE mtplx_mtp_drafted_total counter\n");
    for (int i = 0; i < MTPLX_MAX_DRAFT; i++)
        sb_printf(o, "mtplx_mtp_drafted_total{position=\"%d\"} %llu\n", i + 1, (unsigned long long)m->drafted[i]);
    sb_puts(o, "# HELP mtplx_mtp_accepted_total MTP draft tokens accepted, by draft position.\n"
               "# TYPE mtplx_mtp_accepted_total counter\n");
    for (int i = 0; i < MTPLX_MAX_DRAFT; i++)
        sb_printf(o, "mtplx_mtp_accepted_total{position=\"%d\"} %llu\n", i + 1, (unsigned long long)m->accepted[i]);
    pthread_mutex_unlock(&m->mu);
}
