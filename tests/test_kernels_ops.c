/* test_kernels_ops.c: the small ops and attention, every variant this CPU
 * has, against naive double-precision references written here. */
#include "test_kernels_util.h"

/* relative to the magnitude of the exact result */
#define OPS_TOL 4e-6
/* attention: relative to max |v| (outputs are convex combinations of v) */
#define ATTN_TOL 2e-5
/* Q8_0 cache against the F32 values it was quantized from, absolute, for
 * unit-gaussian q, k, v: each cached value moves by up to amax/254 of its
 * block (about 0.01 here), and the scores use q rounded to Q8_0 too; outputs
 * move by a few times that. Measured worst case on these cases: 0.026. */
#define ATTN_Q8_TOL 0.05

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

        /* log-sum-exp (what every token's logprob costs): y as above, a
         * masked entry, and a row with every entry masked */
        y[11] = -INFINITY;
        double lz = 0;
        for (int64_t j = 0; j < d; j++) lz += exp((double)y[j] - 400);
        assert_true(fabs(mtplx_log_sum_exp(y, d) - (400 + log(lz))) <= 1e-4);
        for (int64_t j = 0; j < 37; j++) out[j] = -INFINITY;
        assert_true(mtplx_log_sum_exp(out, 37) == -INFINITY);
        /* the sampler's temperature softmax numerator: masked entries 0 */
        float es = mtplx_exp_scaled(y, d, 1 / 0.7f, out);
        double et = 0;
        for (int64_t j = 0; j < d; j++) {
            double e = y[j] == -INFINITY ? 0 : exp(((double)y[j] - 400) / 0.7);
            assert_true(fabs(out[j] - e) <= OPS_TOL * e + 1e-37);
            et += e;
        }
        assert_true(out[11] == 0 && fabs(es - et) <= 1e-5 * et);
        for (int64_t j = 0; j < 37; j++) y[j] = -INFINITY;
        assert_true(mtplx_exp_scaled(y, 37, 1.f, out) == 0 && out[0] == 0);

        mtplx_store_rows(MTPLX_TYPE_F16, x, h, 1, d);
        for (int64_t j = 0; j < d; j++) assert_int_equal(h[j], mtplx_fp32_to_fp16(x[j]));
        mtplx_store_rows(MTPLX_TYPE_F32, x, out, rows, d);
        assert_memory_equal(out, x, rows * d * 4);
    }
    free(x), free(w), free(out), free(g), free(u), free(y), free(h);
}

/* The sampler's greedy rule, written out: the first index of the largest,
 * a NaN never larger. */
static int64_t argmax_naive(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* mtplx_argmax (every greedy pick) against the loop it replaced: random rows
 * of sizes around the vector widths, ties (the first wins), -inf, NaN
 * (skipped; first: answer 0), signed zeros, the largest last or first. */
static void test_argmax(void **state) {
    (void)state;
    rng r = {11};
    const int64_t sizes[] = {1, 2, 7, 8, 9, 31, 32, 33, 100, 1003, 8192};
    float *x = xalloc(8192 * 4);
    int checked = 0;
    for (int v = 0; v < N_ISAS; v++) {
        if (!use_isa(all_isas[v])) continue;
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            const int64_t n = sizes[s];
            for (int c = 0; c < 9; c++) {
                fill_gauss(&r, x, n, 4.f);
                int64_t a = (int64_t)(rng_next(&r) % (uint64_t)n), b = (int64_t)(rng_next(&r) % (uint64_t)n);
                switch (c) {
                case 1: x[a] = x[b] = 50.f; break;                      /* a tie */
                case 2: for (int64_t i = 0; i < n; i++) x[i] = -INFINITY; break;
                case 3: x[a] = NAN; break;                               /* skipped */
                case 4: x[0] = NAN; break;                               /* answer 0 */
                case 5: for (int64_t i = 0; i < n; i++) x[i] = i % 3 ? -0.0f : 0.0f; break;
                case 6: for (int64_t i = 0; i < n; i++) x[i] = -1.f; x[n - 1] = 0; break;
                case 7: x[0] = INFINITY; x[a] = INFINITY; break;
                case 8: for (int64_t i = 0; i < n; i++) x[i] = (float)(i % 5); break;
                default: break;
                }
                assert_int_equal(mtplx_argmax(x, n), argmax_naive(x, n));
                checked++;
            }
        }
    }
    printf("argmax: %d rows match the sampler's loop\n", checked);
    free(x);
}

typedef struct attn_case {
    int64_t n_tok, pos0;
    int n_head, n_head_kv, hd, kv_type;
} attn_case;

/* Naive double-precision attention of (token t, head h) against F32 keys and
 * values kf, vf; returns the largest |out - reference| over head_dim. */
static double attn_err(const attn_case *ac, const float *q, const float *kf, const float *vf,
                       const float *out, int64_t t, int h, double *p) {
    int group = ac->n_head / ac->n_head_kv;
    float scale = 1.f / sqrtf((float)ac->hd);
    int64_t n_kv = ac->pos0 + t + 1;
    const float *qh = q + (t * ac->n_head + h) * ac->hd;
    double max = -INFINITY, z = 0, worst = 0;
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
        for (int64_t j = 0; j < n_kv; j++) e += p[j] / z * vf[(j * ac->n_head_kv + h / group) * ac->hd + d];
        double err = fabs(out[(t * ac->n_head + h) * ac->hd + d] - e);
        if (!(err <= worst)) worst = err; /* NaN sticks */
    }
    return worst;
}

static double q8_worst; /* largest Q8_0-cache error against F32, reported */

static void check_attention(const attn_case *ac, rng *r, mtplx_threadpool *tp) {
    const int64_t n_ctx = ac->pos0 + ac->n_tok + 5; /* slots past the window hold junk */
    const int64_t kv_n = n_ctx * ac->n_head_kv * ac->hd;
    const int64_t q_n = ac->n_tok * ac->n_head * ac->hd;
    float *q = xalloc(q_n * 4), *kf = xalloc(kv_n * 4), *vf = xalloc(kv_n * 4);
    float *k32 = xalloc(kv_n * 4), *v32 = xalloc(kv_n * 4), *qr = xalloc(q_n * 4);
    float *out = xalloc(q_n * 4), *out1 = xalloc(q_n * 4);
    void *k = xalloc(kv_n * 4), *v = xalloc(kv_n * 4);
    fill_gauss(r, q, q_n, 1.f);
    fill_gauss(r, kf, kv_n, 1.f);
    fill_gauss(r, vf, kv_n, 1.f);
    for (int64_t i = (ac->pos0 + ac->n_tok) * ac->n_head_kv * ac->hd; i < kv_n; i++)
        kf[i] = 1e4f, vf[i] = 1e4f; /* a leak past the causal window is loud */
    mtplx_store_rows(ac->kv_type, kf, k, n_ctx, ac->n_head_kv * ac->hd);
    mtplx_store_rows(ac->kv_type, vf, v, n_ctx, ac->n_head_kv * ac->hd);
    memcpy(k32, kf, kv_n * 4);
    memcpy(v32, vf, kv_n * 4);
    if (ac->kv_type == MTPLX_TYPE_F16) /* compare against what the cache holds */
        for (int64_t i = 0; i < kv_n; i++) {
            kf[i] = mtplx_fp16_to_fp32(((uint16_t *)k)[i]);
            vf[i] = mtplx_fp16_to_fp32(((uint16_t *)v)[i]);
        }
    memcpy(qr, q, q_n * 4);
    if (ac->kv_type == MTPLX_TYPE_Q8_0) {
        /* the kernel's contract: scores from q rounded to Q8_0 (blocks of 32
         * never straddle heads, so rounding the whole buffer is the same) */
        char *qb = xalloc(mtplx_row_size(MTPLX_TYPE_Q8_0, q_n));
        mtplx_quantize_row(MTPLX_TYPE_Q8_0, q, qb, q_n);
        mtplx_dequantize_row(MTPLX_TYPE_Q8_0, qb, qr, q_n);
        free(qb);
        int64_t row = ac->n_head_kv * ac->hd;
        size_t rs = mtplx_row_size(MTPLX_TYPE_Q8_0, row);
        for (int64_t j = 0; j < n_ctx; j++) { /* each position is its own blocks */
            char one[4096];
            assert_true(rs <= sizeof one);
            assert_int_equal(mtplx_quantize_row(MTPLX_TYPE_Q8_0, k32 + j * row, one, row), rs);
            assert_memory_equal(one, (char *)k + j * rs, rs);
            mtplx_dequantize_row(MTPLX_TYPE_Q8_0, (char *)k + j * rs, kf + j * row, row);
            mtplx_dequantize_row(MTPLX_TYPE_Q8_0, (char *)v + j * rs, vf + j * row, row);
        }
    }
    int nth = mtplx_threadpool_size(tp);
    size_t scratch_size = mtplx_attention_scratch_size(n_ctx, nth);
    void *scratch = xalloc(scratch_size);
    float scale = 1.f / sqrtf((float)ac->hd);
    mtplx_attention(tp, q, ac->n_tok, ac->n_head, ac->n_head_kv, ac->hd, k, v, ac->kv_type,
                    ac->pos0, scale, out, scratch, scratch_size);
    mtplx_attention(NULL, q, ac->n_tok, ac->n_head, ac->n_head_kv, ac->hd, k, v, ac->kv_type,
                    ac->pos0, scale, out1, scratch, scratch_size);
    assert_memory_equal(out, out1, q_n * 4); /* threads change nothing */
    /* batch invariance: each token alone gives the same bits as in the batch
     * (what keeps greedy MTP verification == AR decoding exact) */
    for (int64_t t = 0; t < ac->n_tok; t++) {
        int64_t hq = (int64_t)ac->n_head * ac->hd;
        mtplx_attention(tp, q + t * hq, 1, ac->n_head, ac->n_head_kv, ac->hd, k, v, ac->kv_type,
                        ac->pos0 + t, scale, out1, scratch, scratch_size);
        assert_memory_equal(out + t * hq, out1, hq * 4);
    }
    double *p = malloc(n_ctx * sizeof(double));
    for (int64_t t = 0; t < ac->n_tok; t++)
        for (int h = 0; h < ac->n_head; h++) {
            /* against the values the cache holds: the kernel's arithmetic */
            double e = attn_err(ac, qr, kf, vf, out, t, h, p);
            if (!(e <= ATTN_TOL * 5)) { /* |v| <= ~5 sigma */
                fprintf(stderr, "%s attn type %d t=%lld h=%d: error %g\n", mtplx_kernels_isa(),
                        ac->kv_type, (long long)t, h, e);
                fail();
            }
            if (ac->kv_type != MTPLX_TYPE_Q8_0) continue;
            /* against the F32 values before quantization: what Q8_0 costs */
            e = attn_err(ac, q, k32, v32, out, t, h, p);
            if (e > q8_worst || e != e) q8_worst = e;
            if (!(e <= ATTN_Q8_TOL)) {
                fprintf(stderr, "%s attn Q8_0 vs F32 t=%lld h=%d: error %g > %g\n", mtplx_kernels_isa(),
                        (long long)t, h, e, ATTN_Q8_TOL);
                fail();
            }
        }
    free(p), free(q), free(qr), free(kf), free(vf), free(k32), free(v32), free(out), free(out1), free(k), free(v),
        free(scratch);
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
        {1, 0, 4, 4, 64, MTPLX_TYPE_Q8_0},  /* Q8_0 cache: first token */
        {1, 37, 8, 2, 64, MTPLX_TYPE_Q8_0}, /* decode with GQA, 2 blocks per head */
        {5, 37, 8, 2, 128, MTPLX_TYPE_Q8_0},/* MTP verify, 4 blocks per head */
        {4, 61, 6, 3, 96, MTPLX_TYPE_Q8_0}, /* 3 blocks per head (an odd pair) */
        {3, 2, 4, 1, 32, MTPLX_TYPE_Q8_0},  /* one block per head */
        {67, 0, 4, 2, 64, MTPLX_TYPE_Q8_0}, /* prefill */
        /* grouped queries (KV rows read once per group of up to 16 queries) */
        {9, 70, 32, 1, 64, MTPLX_TYPE_F16},  /* 32 heads on one KV head: split in two */
        {20, 100, 8, 2, 256, MTPLX_TYPE_F32},/* widest tiled head, 5 tokens per group */
        {4, 29, 8, 4, 48, MTPLX_TYPE_F16},   /* head_dim not a multiple of 64; tile edge */
        {2, 9, 4, 2, 264, MTPLX_TYPE_F16},   /* wider than a tile: per-query path */
    };
    mtplx_threadpool *tp;
    assert_int_equal(mtplx_threadpool_new(3, &tp), MTPLX_OK);
    rng r = {77};
    for (int v = 0; v < N_ISAS; v++) {
        if (!use_isa(all_isas[v])) continue;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) check_attention(&cases[c], &r, tp);
    }
    printf("attention: Q8_0 cache vs F32 worst error %.4g (tolerance %g)\n", q8_worst, ATTN_Q8_TOL);
    mtplx_threadpool_free(tp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_ops),
        cmocka_unit_test(test_argmax),
        cmocka_unit_test(test_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
