/* cuda_sample_checks.c: test_cuda's checks of the GPU's token picks: the
 * greedy pick (argmax_rows) and sampling with MTP's acceptance test
 * (sample_rows), each against the CPU sampler's rule on the same logits and
 * random numbers. */
#include "cuda_checks.h"

#include "engine/engine.h"
#include "model/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- greedy pick (argmax_rows) against the sampler's rule ---- */
void test_argmax(void) {
    if (!gpu->argmax_rows) {
        printf("  info  argmax_rows is off (MTPLX_CUDA_ARGMAX=0): not checked\n");
        return;
    }
    int64_t n = 5, V = 151937;
    float *l = rand_vec(n * V, 3.0f);
    /* row 1: a tie for the max (the lower id must win); row 2: -inf almost
     * everywhere; row 3: the max in the last element */
    l[1 * V + 70000] = l[1 * V + 90000] = 50.0f;
    for (int64_t j = 0; j < V; j++) l[2 * V + j] = j == 12345 ? 1.0f : -INFINITY;
    l[3 * V + V - 1] = 60.0f;
    float *ld = to_dev(l, (size_t)(n * V) * sizeof(float));
    int32_t ids[5];
    float lp[5];
    gpu->argmax_rows(gpu, ld, n, V, ids, lp);
    bool ok = true;
    double elp = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *r = l + i * V;
        int32_t best = 0;
        for (int32_t j = 1; j < V; j++)
            if (r[j] > r[best]) best = j;
        float want = mtplx_logprob(r, (int32_t)V, best);
        ok = ok && ids[i] == best;
        elp = fmax(elp, fabs((double)lp[i] - want));
    }
    report(ok && elp <= 1e-4 && ids[1] == 70000,
           "argmax_rows V=%lld x %lld rows (ties, -inf, last id): ids as the CPU sampler's, logprob %.1e (tol 1e-4)",
           (long long)V, (long long)n, elp);
    gpu->buf_free(gpu, ld);
    free(l);
}

/* ---- sampling on the device (sample_rows) against the CPU sampler ---- */
typedef struct {
    int32_t n;
    int32_t id[MTPLX_DEV_TOPK_MAX];
    float p[MTPLX_DEV_TOPK_MAX];
} dev_dist; /* sample.cu's kept distribution (cuda_kernels.h: mtplx_cuda_dist) */

/* How far u lies from the nearest boundary of the inverse CDF of dense
 * probs (in id order, as mtplx_sample_dist walks it). */
static double cdf_margin(const float *p, int64_t V, double u) {
    double c = 0, m = fabs(u);
    for (int64_t i = 0; i < V; i++) {
        if (p[i] <= 0) continue;
        c += p[i];
        m = fmin(m, fabs(u - c));
    }
    return m;
}

/* Rows of hard cases: ties at the top-k threshold, fewer usable logits than
 * top-k, one dominant logit, a flat row; the rest Gaussian. */
static void sample_rows_fill(float *l, int64_t n, int64_t V, float sigma) {
    for (int64_t i = 0; i < n * V; i++) l[i] = sigma * grand();
    if (n < 6) return;
    for (int64_t j = 0; j < 60; j++) l[1 * V + 17 * j + 5] = 20.0f;
    for (int64_t j = 0; j < V; j++)
        if (j % (V / 10) != 3) l[2 * V + j] = -INFINITY;
    l[3 * V + V / 2] = 30.0f;
    for (int64_t j = 0; j < V; j++) l[4 * V + j] *= 0.003f;
}

void test_sample_case(const mtplx_sampler_params *sp, int64_t V, int trials) {
    enum { N = 8 };
    size_t db = gpu->dist_bytes;
    float *lp = malloc((size_t)(N * V) * sizeof(float)), *lq = malloc((size_t)(N * V) * sizeof(float));
    float *p = malloc((size_t)V * sizeof(float)), *q = calloc((size_t)V, sizeof(float));
    float *work = malloc((size_t)V * sizeof(float));
    int32_t *idx = malloc((size_t)V * sizeof(int32_t));
    dev_dist *kd = malloc(N * sizeof *kd);
    void *qdev = gpu->buf_alloc(gpu, N * db);
    float *lpd = gpu->buf_alloc(gpu, (size_t)(N * V) * sizeof(float));
    float *lqd = gpu->buf_alloc(gpu, (size_t)(N * V) * sizeof(float));
    mtplx_history none = {NULL, 0};
    int64_t rows = 0, bad_dist = 0, bad_id = 0, edge = 0, bad_test = 0, acc = 0, rej = 0;
    double ep = 0, elp = 0;
    bool called = true;
    for (int t = 0; t < trials && called; t++) {
        sample_rows_fill(lp, N, V, 3.0f);
        /* drafts: the target's logits plus noise (row 5: the same; row 6:
         * unrelated), so tests both accept and reject */
        for (int64_t i = 0; i < N * V; i++) lq[i] = lp[i] + 0.7f * grand();
        memcpy(lq + 5 * V, lp + 5 * V, (size_t)V * sizeof(float));
        for (int64_t j = 0; j < V; j++) lq[6 * V + j] = 3.0f * grand();
        gpu->upload(gpu, lpd, lp, (size_t)(N * V) * sizeof(float));
        gpu->upload(gpu, lqd, lq, (size_t)(N * V) * sizeof(float));
        mtplx_dev_sample dr[N], vr[N];
        for (int i = 0; i < N; i++) dr[i] = (mtplx_dev_sample){.draft = -1, .u_sample = urand()};
        called = gpu->sample_rows(gpu, lqd, N, V, sp, qdev, NULL, dr);
        if (!called) break;
        gpu->download(gpu, kd, qdev, N * sizeof *kd);
        for (int i = 0; i < N; i++)
            vr[i] = (mtplx_dev_sample){.draft = dr[i].id, .u_accept = urand(), .u_sample = urand()};
        vr[N - 1].draft = -1; /* the bonus row */
        called = gpu->sample_rows(gpu, lpd, N, V, sp, NULL, qdev, vr);
        for (int i = 0; i < N && called; i++, rows++) {
            /* the draft: q, its token and log-probability */
            const float *rq = lq + i * V, *rp = lp + i * V;
            mtplx_sampler_dist(rq, (int32_t)V, sp, none, q, work, idx);
            int32_t nz = 0;
            bool same = true;
            for (int64_t j = 0; j < V; j++) nz += q[j] > 0;
            same = kd[i].n == nz;
            for (int32_t j = 0; same && j < kd[i].n; j++) {
                int32_t id = kd[i].id[j];
                same = id >= 0 && id < V && q[id] > 0 && (j == 0 || id > kd[i].id[j - 1]);
                if (same) ep = fmax(ep, fabs((double)kd[i].p[j] - q[id]));
            }
            bad_dist += !same;
            int32_t want = mtplx_sample_dist(q, (int32_t)V, dr[i].u_sample);
            if (dr[i].id != want) {
                if (cdf_margin(q, V, dr[i].u_sample) < 1e-5) edge++;
                else bad_id++;
            }
            elp = fmax(elp, fabs((double)dr[i].logprob - mtplx_logprob(rq, (int32_t)V, dr[i].id)));
            /* the test of that draft against the target's row (the GPU's own
             * q, densified, so only the test itself is compared) */
            memset(q, 0, (size_t)V * sizeof(float));
            for (int32_t j = 0; j < kd[i].n; j++) q[kd[i].id[j]] = kd[i].p[j];
            mtplx_sampler_dist(rp, (int32_t)V, sp, none, p, work, idx);
            bool ok_acc = true, near = false;
            int32_t tok;
            if (vr[i].draft >= 0) {
                int32_t x = vr[i].draft;
                double ratio = q[x] > 0 ? (double)p[x] / q[x] : 0.0;
                near = fabs(vr[i].u_accept - ratio) < 1e-5;
                bool a = mtplx_accept_or_residual(p, q, (int32_t)V, x, vr[i].u_accept, false);
                ok_acc = a == vr[i].accepted;
                acc += a, rej += !a;
                tok = a ? x : mtplx_sample_dist(p, (int32_t)V, vr[i].u_sample);
            } else {
                tok = mtplx_sample_dist(p, (int32_t)V, vr[i].u_sample);
            }
            if (!ok_acc || vr[i].id != tok) {
                if (near || cdf_margin(p, V, vr[i].u_sample) < 1e-5) edge++;
                else bad_test++;
            }
            elp = fmax(elp, fabs((double)vr[i].logprob - mtplx_logprob(rp, (int32_t)V, vr[i].id)));
        }
    }
    if (!called)
        report(false, "sample_rows refused T=%.2f top-k %d", sp->temperature, sp->top_k);
    else
        report(bad_dist == 0 && bad_id == 0 && bad_test == 0 && ep <= 2e-6 && elp <= 1e-4,
               "sample_rows V=%lld T=%.2f top-k %d top-p %.2f min-p %.2f: %lld rows; distributions as the "
               "CPU's (%lld differ, max |dp| %.1e, tol 2e-6), draws %lld off, tests %lld off "
               "(%lld accepted, %lld rejected; %lld within 1e-5 of a boundary, allowed), logprob %.1e",
               (long long)V, sp->temperature, sp->top_k, sp->top_p, sp->min_p, (long long)rows,
               (long long)bad_dist, ep, (long long)bad_id, (long long)bad_test, (long long)acc,
               (long long)rej, (long long)edge, elp);
    gpu->buf_free(gpu, qdev), gpu->buf_free(gpu, lpd), gpu->buf_free(gpu, lqd);
    free(lp), free(lq), free(p), free(q), free(work), free(idx), free(kd);
}

void test_sample(void) {
    if (!gpu->sample_rows) {
        printf("  info  sample_rows is off (MTPLX_CUDA_SAMPLE=0): not checked\n");
        return;
    }
    report(gpu->dist_bytes == sizeof(dev_dist), "sample_rows: kept distribution of %zu bytes",
           gpu->dist_bytes);
    mtplx_sampler_params sp = mtplx_sampler_default_params(), off = sp;
    off.temperature = 0;
    mtplx_dev_sample r = {.draft = -1};
    report(!gpu->sample_rows(gpu, NULL, 1, 8192, &off, NULL, NULL, &r),
           "sample_rows refuses temperature 0 (argmax_rows' job)");
    off = sp, off.repeat_penalty = 1.1f;
    report(!gpu->sample_rows(gpu, NULL, 1, 8192, &off, NULL, NULL, &r), "sample_rows refuses penalties");
    off = sp, off.top_k = 0;
    report(!gpu->sample_rows(gpu, NULL, 1, 8192, &off, NULL, NULL, &r), "sample_rows refuses top-k 0");
    struct { float t; int32_t k; float top_p, min_p; } cases[] = {
        {0.8f, 40, 0.95f, 0.05f}, /* the defaults */
        {1.0f, 1, 1.0f, 0.0f},    {0.7f, 1024, 0.9f, 0.0f}, {1.3f, 200, 1.0f, 0.1f},
        {0.5f, 7, 0.5f, 0.0f},    {2.0f, 1000, 1.0f, 0.0f},
    };
    /* under a sanitizer (MTPLX_CUDA_TEST_OPS_ONLY): one trial each */
    bool quick = getenv("MTPLX_CUDA_TEST_OPS_ONLY") != NULL;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sp.temperature = cases[c].t, sp.top_k = cases[c].k, sp.top_p = cases[c].top_p,
        sp.min_p = cases[c].min_p;
        test_sample_case(&sp, 8192, quick ? 1 : 12);
        if (c < 3 && !quick) test_sample_case(&sp, 151937, 3);
    }
}
