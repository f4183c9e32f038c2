/* test_kernels_ops.c: the small ops and attention, every variant this CPU
 * has, against naive double-precision references written here. */
#include "test_kernels_util.h"

/* relative to the magnitude of the exact result */
#define OPS_TOL 4e-6
/* attention: relative to max |v| (outputs are convex combinations of v) */
#define ATTN_TOL 2e-5

static void test_small_ops(void **state) {
    (void)state;
    const int64_t d = 1003, rows = 3; /* not a multiple of 8 or 16 */
    rng r = {5};
    float *x = xalloc(rows * d * 4), *w = xalloc(d * 4), *out = xalloc(rows * d * 4);
    float *g = xalloc(d * 4), *u = xalloc(d * 4), *y = xalloc(d * 4);
    uint16_t *h = xalloc(d * 2);
    for (int v = 0; v < N_ISAS; v++) {
        if (!use_isa(all_isas[v])) continue;
        fill_gauss(&r, x, rows * d, 3.f);
        fill_gauss(&r, w, d, 1.f);
        mtplx_rmsnorm(x, w, out, rows, d, 1e-6f);
        for (int64_t i = 0; i < rows; i++) {
            double ss = 0;
            for (int64_t j = 0; j < d; j++) ss += (double)x[i * d + j] * x[i * d + j];
            double sc = 1 / sqrt(ss / d + 1e-6);
            for (int64_t j = 0; j < d; j++) {
                double e = x[i * d + j] * sc * w[j];
                assert_true(fabs(out[i * d + j] - e) <= OPS_TOL * (fabs(e) + 1e-3));
            }
        }
        mtplx_rmsnorm(x, w, x, rows, d, 1e-6f); /* in place */
        assert_memory_equal(x, out, rows * d * 4);

        fill_gauss(&r, g, d, 6.f);
        g[0] = -100, g[1] = 100, g[2] = 0, g[3] = -87.5f;
        fill_gauss(&r, u, d, 1.f);
        mtplx_silu_mul(g, u, out, d);
        for (int64_t j = 0; j < d; j++) {
            double e = g[j] / (1 + exp(-(double)g[j])) * u[j];
            assert_true(fabs(out[j] - e) <= OPS_TOL * (fabs(e) + 1e-30));
        }

        memcpy(y, g, d * 4);
        mtplx_add(y, u, d);
        for (int64_t j = 0; j < d; j++) assert_true(y[j] == g[j] + u[j]);

        fill_gauss(&r, y, d, 10.f);
        y[7] = 400; /* large logits must not overflow */
        memcpy(out, y, d * 4);
        mtplx_softmax(out, d);
        double z = 0, sum = 0;
        for (int64_t j = 0; j < d; j++) z += exp((double)y[j] - 400);
        for (int64_t j = 0; j < d; j++) {
            double e = exp((double)y[j] - 400) / z;
            assert_true(fabs(out[j] - e) <= OPS_TOL * e + 1e-37);
            sum += out[j];
        }
        assert_true(fabs(sum - 1) < 1e-5);

        mtplx_store_rows(MTPLX_TYPE_F16, x, h, 1, d);
        for (int64_t j = 0; j < d; j++) assert_int_equal(h[j], mtplx_fp32_to_fp16(x[j]));
        mtplx_store_rows(MTPLX_TYPE_F32, x, out, rows, d);
        assert_memory_equal(out, x, rows * d * 4);
    }
    free(x), free(w), free(out), free(g), free(u), free(y), free(h);
}

typedef struct attn_case {
    int64_t n_tok, pos0;
    int n_head, n_head_kv, hd, kv_type;
} attn_case;

static void check_attention(const attn_case *ac, rng *r, mtplx_threadpool *tp) {
    const int64_t n_ctx = ac->pos0 + ac->n_tok + 5; /* slots past the window hold junk */
    const int64_t kv_n = n_ctx * ac->n_head_kv * ac->hd;
    const int64_t q_n = ac->n_tok * ac->n_head * ac->hd;
    float *q = xalloc(q_n * 4), *kf = xalloc(kv_n * 4), *vf = xalloc(kv_n * 4);
    float *out = xalloc(q_n * 4), *out1 = xalloc(q_n * 4);
    void *k = xalloc(kv_n * 4), *v = xalloc(kv_n * 4);
    fill_gauss(r, q, q_n, 1.f);
    fill_gauss(r, kf, kv_n, 1.f);
    fill_gauss(r, vf, kv_n, 1.f);
    for (int64_t i = (ac->pos0 + ac->n_tok) * ac->n_head_kv * ac->hd; i < kv_n; i++)
        kf[i] = 1e4f, vf[i] = 1e4f; /* a leak past the causal window is loud */
    mtplx_store_rows(ac->kv_type, kf, k, n_ctx, ac->n_head_kv * ac->hd);
    mtplx_store_rows(ac->kv_type, vf, v, n_ctx, ac->n_head_kv * ac->hd);
    if (ac->kv_type == MTPLX_TYPE_F16) /* compare against what the cache holds */
        for (int64_t i = 0; i < kv_n; i++) {
            kf[i] = mtplx_fp16_to_fp32(((uint16_t *)k)[i]);
            vf[i] = mtplx_fp16_to_fp32(((uint16_t *)v)[i]);
        }
    int nth = mtplx_threadpool_size(tp);
    void *scratch = xalloc(mtplx_attention_scratch_size(n_ctx, nth));
    float scale = 1.f / sqrtf((float)ac->hd);
    mtplx_attention(tp, q, ac->n_tok, ac->n_head, ac->n_head_kv, ac->hd, k, v, ac->kv_type,
                    ac->pos0, scale, out, scratch);
    mtplx_attention(NULL, q, ac->n_tok, ac->n_head, ac->n_head_kv, ac->hd, k, v, ac->kv_type,
                    ac->pos0, scale, out1, scratch);
    assert_memory_equal(out, out1, q_n * 4); /* threads change nothing */
    int group = ac->n_head / ac->n_head_kv;
    double *p = malloc(n_ctx * sizeof(double));
    for (int64_t t = 0; t < ac->n_tok; t++)
        for (int h = 0; h < ac->n_head; h++) {
            int64_t n_kv = ac->pos0 + t + 1;
            const float *qh = q + (t * ac->n_head + h) * ac->hd;
            double max = -INFINITY, z = 0;
            for (int64_t j = 0; j < n_kv; j++) {
                const float *kj = kf + (j * ac->n_head_kv + h / group) * ac->hd;
                double s = 0;
                for (int d = 0; d < ac->hd; d++) s += (double)qh[d] * kj[d];
                p[j] = s * scale;
                if (p[j] > max) max = p[j];
            }
            for (int64_t j = 0; j < n_kv; j++) z += p[j] = exp(p[j] - max);
            for (int d = 0; d < ac->hd; d++) {
                double e = 0;
                for (int64_t j = 0; j < n_kv; j++)
                    e += p[j] / z * vf[(j * ac->n_head_kv + h / group) * ac->hd + d];
                double got = out[(t * ac->n_head + h) * ac->hd + d];
                if (!(fabs(got - e) <= ATTN_TOL * 5)) { /* |v| <= ~5 sigma */
                    fprintf(stderr, "%s attn t=%lld h=%d d=%d: %g vs %g\n", mtplx_kernels_isa(),
                            (long long)t, h, d, got, e);
                    fail();
                }
            }
        }
    free(p), free(q), free(kf), free(vf), free(out), free(out1), free(k), free(v), free(scratch);
}

static void test_attention(void **state) {
    (void)state;
    static const attn_case cases[] = {
        {1, 0, 4, 4, 64, MTPLX_TYPE_F32},   /* first token of a sequence */
        {1, 37, 8, 2, 64, MTPLX_TYPE_F16},  /* decode with GQA */
        {5, 37, 8, 2, 128, MTPLX_TYPE_F16}, /* MTP verify, 128-dim heads */
        {7, 13, 6, 3, 40, MTPLX_TYPE_F32},  /* head_dim not a multiple of 64 */
        {3, 2, 4, 1, 20, MTPLX_TYPE_F16},   /* head_dim not a multiple of 8 */
        {67, 0, 4, 2, 64, MTPLX_TYPE_F16},  /* prefill */
    };
    mtplx_threadpool *tp;
    assert_int_equal(mtplx_threadpool_new(3, &tp), MTPLX_OK);
    rng r = {77};
    for (int v = 0; v < N_ISAS; v++) {
        if (!use_isa(all_isas[v])) continue;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) check_attention(&cases[c], &r, tp);
    }
    mtplx_threadpool_free(tp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_ops),
        cmocka_unit_test(test_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
