/* test_kernels_matmul.c: mtplx_matmul for every weight type.
 *  - the reference equals a float matmul of the dequantized weights up to the
 *    activation quantization error (so the oracle itself is checked);
 *  - every SIMD variant this CPU has equals the reference on odd shapes and
 *    n = 1..16 and 67, within a tolerance relative to sum |w x|;
 *  - results with 2 and 3 threads are bit-identical to 1 thread;
 *  - BF16 at decode sizes is batch invariant;
 *  - a token's results do not depend on the batch (prepared and float). */
#include "test_kernels_util.h"

/* SIMD vs reference: the integer parts are exact, only the order of float
 * additions differs, so errors are a few ulps of sum_j |w_j x_j|. */
#define MM_TOL_QUANT 2e-6
/* Float weights: the reference sums in double, SIMD in float. */
#define MM_TOL_FLOAT 1e-5
/* Reference vs exact float product of the dequantized weights: the error of
 * quantizing activations to 8 bits, relative to ||y||. */
#define MM_TOL_ACT_Q8 0.02

static const int mm_types[] = {MTPLX_TYPE_F32,  MTPLX_TYPE_F16,  MTPLX_TYPE_BF16, MTPLX_TYPE_Q8_0,
                               MTPLX_TYPE_Q4_0, MTPLX_TYPE_Q4_K, MTPLX_TYPE_Q6_K};
#define N_MM_TYPES 7

typedef struct mm_case {
    int type;
    int64_t m, k, n;
    void *W;
    float *Wf; /* dequantized [m][k] */
    float *x;  /* [n][k] */
    void *scratch;
} mm_case;

static int64_t k_for(int type, int variant) {
    int64_t bs = mtplx_type_info(type)->block_size;
    if (bs == 1) return variant ? 203 : 517; /* not a multiple of 8 or 16 */
    if (bs == 32) return variant ? 160 : 32 * 33;
    return variant ? 3 * QK_K : QK_K;
}

static mm_case make_case(rng *r, int type, int64_t m, int64_t k, int64_t n) {
    mm_case c = {type, m, k, n, NULL, NULL, NULL, NULL};
    float *wf = xalloc((size_t)(m * k) * sizeof(float));
    fill_gauss(r, wf, m * k, 0.05f);
    size_t rs = mtplx_row_size(type, k);
    c.W = xalloc(rs * (size_t)m);
    c.Wf = xalloc((size_t)(m * k) * sizeof(float));
    for (int64_t i = 0; i < m; i++) {
        mtplx_quantize_row(type, wf + i * k, (uint8_t *)c.W + i * rs, k);
        mtplx_dequantize_row(type, (uint8_t *)c.W + i * rs, c.Wf + i * k, k);
    }
    free(wf);
    c.x = xalloc((size_t)(n * k) * sizeof(float));
    fill_gauss(r, c.x, n * k, 1.0f);
    c.scratch = xalloc(mtplx_matmul_scratch_size(type, k, n));
    return c;
}

static void free_case(mm_case *c) { free(c->W), free(c->Wf), free(c->x), free(c->scratch); }

static void run(mtplx_threadpool *tp, mm_case *c, float *y) {
    mtplx_matmul(tp, c->type, c->W, c->m, c->k, c->x, c->n, y, c->scratch);
}

static void test_reference_vs_dequant(void **state) {
    (void)state;
    rng r = {42};
    assert_true(use_isa("ref"));
    for (int ti = 0; ti < N_MM_TYPES; ti++) {
        int type = mm_types[ti];
        mm_case c = make_case(&r, type, 19, k_for(type, 0), 3);
        float *y = xalloc((size_t)(c.n * c.m) * sizeof(float));
        run(NULL, &c, y);
        double se = 0, sy = 0;
        for (int64_t t = 0; t < c.n; t++)
            for (int64_t i = 0; i < c.m; i++) {
                double e = 0;
                for (int64_t j = 0; j < c.k; j++) e += (double)c.Wf[i * c.k + j] * c.x[t * c.k + j];
                double d = y[t * c.m + i] - e;
                se += d * d, sy += e * e;
            }
        double rel = sqrt(se / sy);
        double tol = mtplx_type_info(type)->is_quantized ? MM_TOL_ACT_Q8 : 1e-6;
        if (getenv("MTPLX_TEST_VERBOSE"))
            printf("%-5s ref vs dequant: rel %.2e\n", mtplx_type_info(type)->name, rel);
        assert_true(rel < tol);
        free(y);
        free_case(&c);
    }
}

static void test_variants_vs_reference(void **state) {
    (void)state;
    static const int64_t ns[] = {1, 2, 3, 4, 5, 8, 13, 16, 67};
    rng r = {7};
    for (int ti = 0; ti < N_MM_TYPES; ti++) {
        int type = mm_types[ti];
        int64_t m = 37, k = k_for(type, 1);
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            mm_case c = make_case(&r, type, m, k, ns[ni]);
            size_t ysz = (size_t)(c.n * m) * sizeof(float);
            float *yref = xalloc(ysz), *y = xalloc(ysz);
            assert_true(use_isa("ref"));
            run(NULL, &c, yref);
            for (int v = 1; v < N_ISAS; v++) {
                if (!use_isa(all_isas[v])) continue;
                memset(y, 0xff, ysz); /* NaN: a row the kernel skips fails */
                run(NULL, &c, y);
                double tol = mtplx_type_info(type)->is_quantized ? MM_TOL_QUANT : MM_TOL_FLOAT;
                for (int64_t t = 0; t < c.n; t++)
                    for (int64_t i = 0; i < m; i++) {
                        double mag = 0;
                        for (int64_t j = 0; j < k; j++)
                            mag += fabs((double)c.Wf[i * k + j] * c.x[t * k + j]);
                        double err = fabs((double)y[t * m + i] - yref[t * m + i]);
                        if (!(err <= tol * mag)) {
                            fprintf(stderr, "%s %s n=%lld t=%lld row=%lld: %g vs ref %g\n",
                                    all_isas[v], mtplx_type_info(type)->name, (long long)c.n,
                                    (long long)t, (long long)i, y[t * m + i], yref[t * m + i]);
                            fail();
                        }
                    }
            }
            free(yref), free(y);
            free_case(&c);
        }
    }
}

static void test_threads_match_single(void **state) {
    (void)state;
    mtplx_threadpool *tp2, *tp3;
    assert_int_equal(mtplx_threadpool_new(2, &tp2), MTPLX_OK);
    assert_int_equal(mtplx_threadpool_new(3, &tp3), MTPLX_OK);
    rng r = {9};
    for (int v = 0; v < N_ISAS; v++) {
        if (!use_isa(all_isas[v])) continue;
        for (int ti = 0; ti < N_MM_TYPES; ti++) {
            int type = mm_types[ti];
            const int64_t shapes[][2] = {{37, 4}, {100, 1}, {64, 67}};
            for (int s = 0; s < 3; s++) {
                /* 67 tokens x 64 rows x 768 also crosses the parallel quantization size */
                mm_case c = make_case(&r, type, shapes[s][0], k_for(type, 1), shapes[s][1]);
                size_t ysz = (size_t)(c.n * c.m) * sizeof(float);
                float *y1 = xalloc(ysz), *y2 = xalloc(ysz), *y3 = xalloc(ysz);
                run(NULL, &c, y1);
                run(tp2, &c, y2);
                run(tp3, &c, y3);
                assert_memory_equal(y1, y2, ysz);
                assert_memory_equal(y1, y3, ysz);
                free(y1), free(y2), free(y3);
                free_case(&c);
            }
        }
    }
    mtplx_threadpool_free(tp2);
    mtplx_threadpool_free(tp3);
}

/* ---- prepared (8-row interleaved) weights ---- */
static const int prep_types[] = {MTPLX_TYPE_Q8_0, MTPLX_TYPE_Q4_0, MTPLX_TYPE_Q4_K};

static void *prepare(const mm_case *c) {
    size_t sz = mtplx_weight_prepared_size(c->type, c->m, c->k);
    assert_true(sz > 0);
    void *p = xalloc(sz);
    mtplx_weight_prepare(c->type, c->W, c->m, c->k, p);
    return p;
}

static void run_prep(mtplx_threadpool *tp, const mm_case *c, const void *P, float *y) {
    mtplx_matmul_prepared(tp, c->type, P, c->m, c->k, c->x, c->n, y, c->scratch);
}

/* The reference on prepared weights equals the reference on plain rows up
 * to the order of float additions; every variant equals it bit for bit. */
static void test_prepared_vs_reference(void **state) {
    (void)state;
    static const int64_t ms[] = {37, 8, 5, 64};
    static const int64_t ns[] = {1, 2, 3, 4, 5, 8, 13, 67};
    rng r = {11};
    assert_int_equal(mtplx_weight_prepared_size(MTPLX_TYPE_F32, 8, 32), 0);
    assert_int_equal(mtplx_weight_prepared_size(MTPLX_TYPE_Q6_K, 8, 256), 0);
    for (size_t ti = 0; ti < 3; ti++) {
        int type = prep_types[ti];
        for (size_t mi = 0; mi < 4; mi++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
                int64_t m = ms[mi], k = k_for(type, (int)((mi + ni) % 2));
                mm_case c = make_case(&r, type, m, k, ns[ni]);
                void *P = prepare(&c);
                size_t ysz = (size_t)(c.n * m) * sizeof(float);
                float *yplain = xalloc(ysz), *yref = xalloc(ysz), *y = xalloc(ysz);
                assert_true(use_isa("ref"));
                run(NULL, &c, yplain);
                memset(yref, 0xff, ysz);
                run_prep(NULL, &c, P, yref);
                for (int64_t t = 0; t < c.n; t++)
                    for (int64_t i = 0; i < m; i++) {
                        double mag = 0;
                        for (int64_t j = 0; j < k; j++)
                            mag += fabs((double)c.Wf[i * k + j] * c.x[t * k + j]);
                        double err = fabs((double)yref[t * m + i] - yplain[t * m + i]);
                        if (!(err <= MM_TOL_QUANT * mag)) {
                            fprintf(stderr, "prepared ref %s m=%lld n=%lld t=%lld row=%lld: %g vs %g\n",
                                    mtplx_type_info(type)->name, (long long)m, (long long)c.n,
                                    (long long)t, (long long)i, yref[t * m + i], yplain[t * m + i]);
                            fail();
                        }
                    }
                for (int v = 1; v < N_ISAS; v++) {
                    if (!use_isa(all_isas[v])) continue;
                    memset(y, 0xff, ysz);
                    run_prep(NULL, &c, P, y);
                    if (memcmp(y, yref, ysz)) {
                        fprintf(stderr, "prepared %s %s m=%lld n=%lld differs from the reference\n",
                                all_isas[v], mtplx_type_info(type)->name, (long long)m,
                                (long long)c.n);
                        fail();
                    }
                }
                free(yplain), free(yref), free(y), free(P);
                free_case(&c);
            }
    }
}

/* Batch invariance: a token's row of y is the same bits whether it runs
 * alone or among n tokens (greedy MTP == greedy AR rests on this), and with
 * 1, 2 or 3 threads. */
static void test_prepared_batch_invariance(void **state) {
    (void)state;
    mtplx_threadpool *tp2, *tp3;
    assert_int_equal(mtplx_threadpool_new(2, &tp2), MTPLX_OK);
    assert_int_equal(mtplx_threadpool_new(3, &tp3), MTPLX_OK);
    rng r = {13};
    for (int v = 0; v < N_ISAS; v++) {
        if (!use_isa(all_isas[v])) continue;
        for (size_t ti = 0; ti < 3; ti++) {
            int type = prep_types[ti];
            mm_case c = make_case(&r, type, 45, k_for(type, 1), 9);
            void *P = prepare(&c);
            size_t ysz = (size_t)(c.n * c.m) * sizeof(float);
            float *y = xalloc(ysz), *y2 = xalloc(ysz), *y3 = xalloc(ysz), *y1 = xalloc(ysz);
            run_prep(NULL, &c, P, y);
            run_prep(tp2, &c, P, y2);
            run_prep(tp3, &c, P, y3);
            assert_memory_equal(y, y2, ysz);
            assert_memory_equal(y, y3, ysz);
            mm_case one = c;
            void *scr1 = xalloc(mtplx_matmul_scratch_size(type, c.k, 1));
            one.scratch = scr1;
            one.n = 1;
            for (int64_t t = 0; t < c.n; t++) {
                one.x = c.x + t * c.k;
                run_prep(NULL, &one, P, y1 + t * c.m);
            }
            assert_memory_equal(y, y1, ysz);
            free(y), free(y2), free(y3), free(y1), free(P), free(scr1);
            free_case(&c);
        }
    }
    mtplx_threadpool_free(tp2);
    mtplx_threadpool_free(tp3);
}

/* BF16 at decode / draft sizes (n <= 8: a BF16 MTP head's path): every
 * variant against the reference on shapes with odd row counts and k that is
 * not a multiple of 16 or 8, and batch invariance: a token's results are the
 * same bits alone as among n tokens (the draft takes over rows computed in
 * batches of other sizes). */
static void test_bf16_decode(void **state) {
    (void)state;
    static const int64_t ks[] = {16, 24, 203, 519, 1408}, ms[] = {1, 3, 37, 70};
    rng r = {17};
    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
            for (int64_t n = 1; n <= 8; n++) {
                int64_t m = ms[mi], k = ks[ki];
                mm_case c = make_case(&r, MTPLX_TYPE_BF16, m, k, n);
                size_t ysz = (size_t)(n * m) * sizeof(float);
                float *yref = xalloc(ysz), *y = xalloc(ysz), *y1 = xalloc(ysz);
                assert_true(use_isa("ref"));
                run(NULL, &c, yref);
                for (int v = 1; v < N_ISAS; v++) {
                    if (!use_isa(all_isas[v])) continue;
                    memset(y, 0xff, ysz);
                    run(NULL, &c, y);
                    for (int64_t t = 0; t < n; t++)
                        for (int64_t i = 0; i < m; i++) {
                            double mag = 0;
                            for (int64_t j = 0; j < k; j++) mag += fabs((double)c.Wf[i * k + j] * c.x[t * k + j]);
                            if (!(fabs((double)y[t * m + i] - yref[t * m + i]) <= MM_TOL_FLOAT * mag)) {
                                fprintf(stderr, "%s BF16 m=%lld k=%lld n=%lld t=%lld row=%lld: %g vs ref %g\n",
                                        all_isas[v], (long long)m, (long long)k, (long long)n,
                                        (long long)t, (long long)i, y[t * m + i], yref[t * m + i]);
                                fail();
                            }
                        }
                    mm_case one = c;
                    one.n = 1;
                    for (int64_t t = 0; t < n; t++) {
                        one.x = c.x + t * k;
                        run(NULL, &one, y1 + t * m);
                    }
                    if (memcmp(y, y1, ysz)) {
                        fprintf(stderr, "%s BF16 m=%lld k=%lld n=%lld: not batch invariant\n",
                                all_isas[v], (long long)m, (long long)k, (long long)n);
                        fail();
                    }
                }
                free(yref), free(y), free(y1);
                free_case(&c);
            }
}

/* Batch invariance for float weights: a token's row of y has the same bits alone,
 * in a small group (the decode / verification order) and among 67 tokens
 * (the prefill order), over k blocks with a tail (k = 517). */
static void test_float_batch_invariance(void **state) {
    (void)state;
    static const int float_types[] = {MTPLX_TYPE_F32, MTPLX_TYPE_F16, MTPLX_TYPE_BF16};
    rng r = {17};
    for (int v = 0; v < N_ISAS; v++) {
        if (!use_isa(all_isas[v])) continue;
        for (size_t ti = 0; ti < 3; ti++) {
            int type = float_types[ti];
            mm_case c = make_case(&r, type, 45, k_for(type, 0), 67);
            size_t ysz = (size_t)(c.n * c.m) * sizeof(float);
            float *y = xalloc(ysz), *y1 = xalloc(ysz), *y5 = xalloc(ysz);
            run(NULL, &c, y);
            mm_case part = c;
            for (int64_t t = 0; t < c.n; t++) { /* one at a time */
                part.x = c.x + t * c.k;
                part.n = 1;
                run(NULL, &part, y1 + t * c.m);
            }
            for (int64_t t = 0; t < c.n; t += 5) { /* groups of 5, the last of 2 */
                part.x = c.x + t * c.k;
                part.n = c.n - t < 5 ? c.n - t : 5;
                run(NULL, &part, y5 + t * c.m);
            }
            assert_memory_equal(y, y1, ysz);
            assert_memory_equal(y, y5, ysz);
            free(y), free(y1), free(y5);
            free_case(&c);
        }
    }
}

static void test_isa_selection(void **state) {
    (void)state;
    assert_true(mtplx_kernels_force("ref"));
    assert_string_equal(mtplx_kernels_isa(), "ref");
    assert_false(mtplx_kernels_force("sse9"));
    assert_string_equal(mtplx_kernels_isa(), "ref"); /* unchanged on failure */
    const mtplx_cpu *cpu = mtplx_cpu_features();
    assert_int_equal(mtplx_kernels_force("avx2"), cpu->avx2 && cpu->fma && cpu->f16c);
    if (!cpu->avx512f) assert_false(mtplx_kernels_force("avx512"));
    /* the zero-size cases are no-ops */
    mtplx_matmul(NULL, MTPLX_TYPE_Q8_0, NULL, 0, 32, NULL, 1, NULL, NULL);
    mtplx_matmul(NULL, MTPLX_TYPE_Q8_0, NULL, 4, 32, NULL, 0, NULL, NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isa_selection),
        cmocka_unit_test(test_reference_vs_dequant),
        cmocka_unit_test(test_variants_vs_reference),
        cmocka_unit_test(test_threads_match_single),
        cmocka_unit_test(test_prepared_vs_reference),
        cmocka_unit_test(test_prepared_batch_invariance),
        cmocka_unit_test(test_bf16_decode),
        cmocka_unit_test(test_float_batch_invariance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
