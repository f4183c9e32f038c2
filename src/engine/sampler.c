/* sampler.c: logits -> the distribution a token is drawn from.
 *
 * The same function serves plain sampling, the MTP draft and the verifier, so
 * the Leviathan-Chen test compares distributions made by identical transforms:
 * penalties -> temperature -> top-k -> top-p -> min-p, in fp32, dense over
 * the vocabulary. Random numbers come from a counter-based hash of
 * (seed, position, purpose), so every position has its own stream and a run
 * is reproducible whatever was drafted before it. */
#include "engine/engine.h"
#include "kernels/kernels.h"

#include <float.h>
#include <math.h>
#include <string.h>

mtplx_sampler_params mtplx_sampler_default_params(void) {
    return (mtplx_sampler_params){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                                  .repeat_penalty = 1.0f, .repeat_last_n = 64,
                                  .presence_penalty = 0.0f, .frequency_penalty = 0.0f, .seed = 0};
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

double mtplx_rng_uniform(uint64_t seed, uint64_t pos, uint32_t purpose) {
    uint64_t h = splitmix64(seed ^ splitmix64(pos ^ splitmix64((uint64_t)purpose << 32)));
    return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

bool mtplx_sampler_has_penalties(const mtplx_sampler_params *sp) {
    return sp->repeat_penalty != 1.0f || sp->presence_penalty != 0.0f || sp->frequency_penalty != 0.0f;
}

bool mtplx_dev_sample_takes(const mtplx_sampler_params *sp, int64_t V) {
    return sp->temperature > 0.0f && !mtplx_sampler_has_penalties(sp) && sp->top_k >= 1 &&
           sp->top_k <= MTPLX_DEV_TOPK_MAX && sp->top_k < V;
}

bool mtplx_dev_sampling_ok(const mtplx_ctx *c, const mtplx_sampler_params *sp) {
    return c->be->sample_rows && mtplx_dev_sample_takes(sp, c->model->hp.n_vocab);
}

static void apply_penalties(float *l, int32_t V, const mtplx_sampler_params *sp,
                            mtplx_history h) {
    if (!mtplx_sampler_has_penalties(sp) || h.n == 0) return;
    bool rep = sp->repeat_penalty != 1.0f;
    int32_t n = h.n;
    if (sp->repeat_last_n > 0 && n > sp->repeat_last_n) n = sp->repeat_last_n;
    const int32_t *ids = h.ids + (h.n - n);
    /* Count occurrences with a scratch pass: negative marks visited. */
    for (int32_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= V) continue;
        int32_t cnt = 0;
        bool first = true;
        for (int32_t j = 0; j < n; j++) {
            if (ids[j] == id) {
                if (j < i) first = false;
                cnt++;
            }
        }
        if (!first) continue;
        if (rep) l[id] = l[id] > 0 ? l[id] / sp->repeat_penalty : l[id] * sp->repeat_penalty;
        l[id] -= (float)cnt * sp->frequency_penalty + sp->presence_penalty;
    }
}

static int cmp_desc(const void *a, const void *b, void *ctx) {
    const float *p = ctx;
    float x = p[*(const int32_t *)a], y = p[*(const int32_t *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

/* a ranks above b: larger value, then the smaller id (cmp_desc's order) */
static inline bool ranks_above(const float *p, int32_t a, int32_t b) {
    return p[a] > p[b] || (p[a] == p[b] && a < b);
}

/* idx[0..k) as a heap whose root ranks lowest */
static void sift_down(int32_t *h, int32_t k, int32_t i, const float *p) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < k && ranks_above(p, h[w], h[l])) w = l;
        if (r < k && ranks_above(p, h[w], h[r])) w = r;
        if (w == i) return;
        int32_t t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Move the k largest of idx[0..n) (by p) to the front, sorted descending.
 * Small k (top-k 40 of 8192 logits, each row of each verify step): one pass
 * against a k-entry heap, almost every entry rejected by one comparison with
 * its root. Large k: quickselect. */
static void top_sorted(int32_t *idx, int32_t n, int32_t k, const float *p) {
    if (k < n && k <= n / 16) {
        for (int32_t i = k / 2 - 1; i >= 0; i--) sift_down(idx, k, i, p);
        for (int32_t i = k; i < n; i++) {
            if (!ranks_above(p, idx[i], idx[0])) continue;
            int32_t t = idx[0];
            idx[0] = idx[i];
            idx[i] = t;
            sift_down(idx, k, 0, p);
        }
    } else if (k < n) {
        /* quickselect on values */
        int32_t lo = 0, hi = n - 1;
        while (lo < hi) {
            float pivot = p[idx[(lo + hi) / 2]];
            int32_t i = lo, j = hi;
            while (i <= j) {
                while (p[idx[i]] > pivot) i++;
                while (p[idx[j]] < pivot) j--;
                if (i <= j) {
                    int32_t t = idx[i];
                    idx[i++] = idx[j];
                    idx[j--] = t;
                }
            }
            if (k - 1 <= j) hi = j;
            else if (k - 1 >= i) lo = i;
            else break;
        }
    }
    qsort_r(idx, (size_t)(k < n ? k : n), sizeof *idx, cmp_desc, (void *)p);
}

int32_t mtplx_sampler_greedy(const float *logits, int32_t V, const mtplx_sampler_params *sp,
                             mtplx_history hist, float *work) {
    const float *l = logits;
    if (mtplx_sampler_has_penalties(sp) && hist.n > 0) {
        memcpy(work, logits, (size_t)V * sizeof(float));
        apply_penalties(work, V, sp, hist);
        l = work;
    }
    return (int32_t)mtplx_argmax(l, V); /* the first largest, as mtplx_sampler_dist's one-hot */
}

void mtplx_sampler_dist(const float *logits, int32_t V, const mtplx_sampler_params *sp,
                        mtplx_history hist, float *probs, float *work, int32_t *idx) {
    if (sp->temperature <= 0.0f) {
        int32_t best = mtplx_sampler_greedy(logits, V, sp, hist, work);
        memset(probs, 0, (size_t)V * sizeof(float));
        probs[best] = 1.0f;
        return;
    }
    memcpy(work, logits, (size_t)V * sizeof(float));
    apply_penalties(work, V, sp, hist);
    const float inv_t = 1.0f / sp->temperature;
    bool top_k = sp->top_k > 0 && sp->top_k < V, top_p = sp->top_p < 1.0f,
         min_p = sp->min_p > 0.0f;
    /* The kept set is idx[0..kept): top-k, then the smallest top-p nucleus
     * of what top-k kept, then min-p relative to the best kept token.
     * Renormalising between stages does not change the order, so the final
     * distribution is the kept probabilities renormalised once. The nucleus
     * is found in a sorted prefix that widens until it contains it. */
    int32_t n = 0, K, kept;
    double Z; /* the mass of what top-k kept, in probs' units */
    if (top_k) {
        /* Only the k largest logits can be kept, so only they are
         * exponentiated (probs unnormalised; Z is their sum): a verify step
         * builds k + 1 of these distributions and the draft k more. */
        for (int32_t i = 0; i < V; i++)
            if (work[i] != -INFINITY) idx[n++] = i;
        K = sp->top_k < n ? sp->top_k : n;
        top_sorted(idx, n, K, work);
        memset(probs, 0, (size_t)V * sizeof(float));
        Z = 0;
        kept = 0;
        for (int32_t j = 0; j < K; j++) {
            float e = expf((work[idx[j]] - work[idx[0]]) * inv_t);
            if (!(e > 0)) continue;
            probs[idx[j]] = e;
            Z += e;
            idx[kept++] = idx[j];
        }
        n = K = kept;
    } else {
        float sum = mtplx_exp_scaled(work, V, inv_t, probs);
        const float inv = 1.0f / sum;
        for (int32_t i = 0; i < V; i++) probs[i] *= inv;
        if (!(top_p || min_p)) return;
        for (int32_t i = 0; i < V; i++)
            if (probs[i] > 0) idx[n++] = i;
        K = kept = n;
        Z = 1.0;
    }
    if (top_p) {
        int32_t want = K < n ? K : (K < 1024 ? K : 1024);
        for (;;) {
            if (K == n) top_sorted(idx, n, want, probs);
            double c = 0, target = (double)sp->top_p * Z;
            int32_t j = 0;
            while (j < want && c < target) c += probs[idx[j++]];
            if (c >= target || want >= K) {
                kept = j > 0 ? j : 1;
                break;
            }
            want = want * 4 < K ? want * 4 : K;
        }
    }
    if (min_p) {
        float mxp = 0;
        for (int32_t j = 0; j < kept; j++)
            if (probs[idx[j]] > mxp) mxp = probs[idx[j]];
        float thr = mxp * sp->min_p;
        int32_t w = 0;
        for (int32_t j = 0; j < kept; j++)
            if (probs[idx[j]] >= thr) idx[w++] = idx[j];
        kept = w;
    }
    double tot = 0;
    for (int32_t j = 0; j < kept; j++) tot += probs[idx[j]];
    for (int32_t j = 0; j < kept; j++) work[j] = (float)(probs[idx[j]] / tot);
    memset(probs, 0, (size_t)V * sizeof(float));
    for (int32_t j = 0; j < kept; j++) probs[idx[j]] = work[j];
}

int32_t mtplx_sample_dist(const float *probs, int32_t V, double u) {
    double c = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < V; i++) {
        if (probs[i] <= 0) continue;
        c += probs[i];
        last = i;
        if (u < c) return i;
    }
    return last < 0 ? 0 : last; /* rounding: the last token with mass */
}

float mtplx_logprob(const float *logits, int32_t V, int32_t id) {
    float lse = mtplx_log_sum_exp(logits, V); /* SIMD: per token on every path, so it must be cheap */
    if (lse == -INFINITY) return -INFINITY;   /* every token masked */
    return logits[id] - lse;
}
