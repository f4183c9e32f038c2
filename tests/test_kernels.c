/* test_kernels.c: tensor types and quantization: the type table, fp16/bf16
 * conversion, GGML block layouts checked against hand-computed blocks,
 * round-trip error bounds per type, and the activation quantizers of every
 * variant against mtplx_quantize_row bit for bit. Matmul, small ops and
 * attention are in test_kernels_matmul.c and test_kernels_ops.c. */
#include "test_kernels_util.h"

/* Round-trip error bounds: RMSE(dequant(quant(x)) - x) / RMS(x) on Gaussian
 * data (seeded). Measured here, close to the step/sqrt(12) theory:
 * F16 2.1e-4, BF16 1.7e-3, Q8_0 0.0054, Q4_0 0.086, Q4_K 0.072, Q6_K 0.018,
 * Q8_K 0.0069. The bounds leave ~1.3x headroom; a layout or rounding bug
 * costs far more than that. */
#define RT_BOUND_F16 2.7e-4
#define RT_BOUND_BF16 2.2e-3
#define RT_BOUND_Q8_0 0.0070
#define RT_BOUND_Q4_0 0.11
#define RT_BOUND_Q4_K 0.092
#define RT_BOUND_Q6_K 0.023
#define RT_BOUND_Q8_K 0.0090
/* llama.cpp's test-quantize-fns metric (sqrt(sum sq err) / n on its cosine
 * test data) and its bound for types of 4 bits and more. */
#define GGML_MAX_TOTAL_ERROR 0.002

static void test_type_info(void **state) {
    (void)state;
    assert_string_equal(mtplx_type_info(MTPLX_TYPE_Q4_K)->name, "Q4_K");
    assert_int_equal(mtplx_type_info(MTPLX_TYPE_Q6_K)->type_size, 210);
    assert_int_equal(mtplx_type_info(MTPLX_TYPE_Q8_0)->block_size, 32);
    assert_true(mtplx_type_info(MTPLX_TYPE_Q4_K)->is_quantized);
    assert_false(mtplx_type_info(MTPLX_TYPE_BF16)->is_quantized);
    assert_null(mtplx_type_info(3));
    assert_null(mtplx_type_info(-1));
    assert_null(mtplx_type_info(MTPLX_TYPE_COUNT));
    assert_int_equal(mtplx_type_from_name("q8_0"), MTPLX_TYPE_Q8_0);
    assert_int_equal(mtplx_type_from_name("Q4_k"), MTPLX_TYPE_Q4_K);
    assert_int_equal(mtplx_type_from_name("bf16"), MTPLX_TYPE_BF16);
    assert_int_equal(mtplx_type_from_name("F32"), MTPLX_TYPE_F32);
    assert_int_equal(mtplx_type_from_name("q8"), -1);
    assert_int_equal(mtplx_type_from_name("q8_0x"), -1);
    assert_int_equal(mtplx_row_size(MTPLX_TYPE_Q8_0, 64), 68);
    assert_int_equal(mtplx_row_size(MTPLX_TYPE_Q8_0, 65), 0);
    assert_int_equal(mtplx_row_size(MTPLX_TYPE_Q4_K, 1024), 576);
    assert_int_equal(mtplx_row_size(MTPLX_TYPE_F16, 7), 14);
    assert_int_equal(mtplx_row_size(MTPLX_TYPE_Q6_K, 128), 0);
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_fp16(void **state) {
    (void)state;
    /* every finite half survives half -> float -> half */
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN payloads */
        assert_int_equal(mtplx_fp32_to_fp16(mtplx_fp16_to_fp32((uint16_t)h)), h);
    }
    assert_true(mtplx_fp16_to_fp32(0x3c00) == 1.0f);
    assert_true(mtplx_fp16_to_fp32(0xc000) == -2.0f);
    assert_true(mtplx_fp16_to_fp32(0x7bff) == 65504.0f);
    assert_true(mtplx_fp16_to_fp32(0x0001) == 0x1p-24f);
    assert_true(isinf(mtplx_fp16_to_fp32(0xfc00)) && mtplx_fp16_to_fp32(0xfc00) < 0);
    /* round to nearest even at the tie and just past it */
    assert_int_equal(mtplx_fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(mtplx_fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
    assert_int_equal(mtplx_fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    assert_int_equal(mtplx_fp32_to_fp16(65519.0f), 0x7bff);
    assert_int_equal(mtplx_fp32_to_fp16(65520.0f), 0x7c00);
    assert_int_equal(mtplx_fp32_to_fp16(-1e9f), 0xfc00);
    assert_int_equal(mtplx_fp32_to_fp16(0x1p-25f), 0x0000);              /* tie to even (0) */
    assert_int_equal(mtplx_fp32_to_fp16(0x1p-25f + 0x1p-35f), 0x0001);   /* above the tie */
    assert_int_equal(mtplx_fp32_to_fp16(3 * 0x1p-25f), 0x0002);          /* tie to even (2) */
    assert_int_equal(mtplx_fp32_to_fp16(-0.0f), 0x8000);
    assert_int_equal(mtplx_fp32_to_fp16(NAN) & 0x7e00, 0x7e00);
}

static void test_bf16(void **state) {
    (void)state;
    assert_int_equal(mtplx_fp32_to_bf16(1.0f), 0x3f80);
    assert_true(mtplx_bf16_to_fp32(0xc040) == -3.0f);
    /* 1 + 2^-8 is the tie between 0x3f80 and 0x3f81: even wins */
    assert_int_equal(mtplx_fp32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    assert_int_equal(mtplx_fp32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    assert_int_equal(mtplx_fp32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_int_equal(mtplx_fp32_to_bf16(NAN) & 0x7fc0, 0x7fc0);
    rng r = {1};
    for (int i = 0; i < 10000; i++) {
        float f = rng_gauss(&r) * 100;
        float back = mtplx_bf16_to_fp32(mtplx_fp32_to_bf16(f));
        assert_true(fabsf(back - f) <= fabsf(f) * 0x1p-8f);
        assert_int_equal(fbits(back) & 0xffff, 0);
    }
}

/* ---- hand-computed blocks ---- */
static void test_q8_0_block_exact(void **state) {
    (void)state;
    /* amax = 127 makes d = 1 exactly, so the codes are roundf(x): halves go
     * away from zero (2.5 -> 3, -0.5 -> -1), unlike nearest-even. */
    float x[32];
    int expect[32];
    x[0] = -127;
    expect[0] = -127;
    for (int j = 1; j < 32; j++) {
        x[j] = (float)(j - 16) + 0.5f;
        double v = x[j];
        expect[j] = v > 0 ? (int)(v + 0.5) : -(int)(-v + 0.5);
    }
    block_q8_0 b;
    assert_int_equal(mtplx_quantize_row(MTPLX_TYPE_Q8_0, x, &b, 32), sizeof b);
    assert_int_equal(b.d, 0x3c00);
    for (int j = 0; j < 32; j++) assert_int_equal((int8_t)b.qs[j], expect[j]);
}

static void test_q4_0_block_exact(void **state) {
    (void)state;
    /* max by magnitude is -8, so d = -8 / -8 = 1 and the code is
     * min(15, trunc(x + 8.5)); element j sits in byte j % 16, low nibble
     * for j < 16. */
    float x[32];
    x[0] = -8;
    for (int j = 1; j < 32; j++) x[j] = (float)((j * 5) % 16 - 8) + (j % 3 == 0 ? 0.5f : 0.f);
    block_q4_0 b;
    mtplx_quantize_row(MTPLX_TYPE_Q4_0, x, &b, 32);
    assert_int_equal(b.d, 0x3c00);
    for (int j = 0; j < 32; j++) {
        int e = (int)floor(x[j] + 8.5);
        if (e > 15) e = 15;
        int got = j < 16 ? b.qs[j] & 0xF : b.qs[j - 16] >> 4;
        assert_int_equal(got, e);
    }
}

static void test_q8_K_block_exact(void **state) {
    (void)state;
    /* x[0] = -127 gives iscale = 1: codes are nearest-even of x; bsums are
     * sums of 16 codes. */
    float x[QK_K];
    x[0] = -127;
    rng r = {7};
    for (int j = 1; j < QK_K; j++) x[j] = (float)((int)(rng_uniform(&r) * 252) - 126) * 0.5f;
    block_q8_K b;
    mtplx_quantize_row(MTPLX_TYPE_Q8_K, x, &b, QK_K);
    assert_true(b.d == 1.0f);
    for (int g = 0; g < QK_K / 16; g++) {
        int sum = 0;
        for (int l = 0; l < 16; l++) {
            int e = (int)rint(x[16 * g + l]); /* default rounding: nearest even */
            assert_int_equal(b.qs[16 * g + l], e);
            sum += e;
        }
        assert_int_equal(b.bsums[g], sum);
    }
}

static void test_q4_K_block_exact(void **state) {
    (void)state;
    /* Integer data 0..15 with 0 and 15 in every sub-block fits exactly with
     * scale 1, min 0: all six-bit scales 63, mins 0, d = fp16(1/63), dmin 0,
     * and the codes equal the data. The 12 scale bytes follow GGML's packing:
     * bytes 0-3 scale | (scale>>4)<<6 of 4-7, 4-7 mins, 8-11 low nibbles. */
    float x[QK_K];
    rng r = {3};
    for (int j = 0; j < QK_K; j++) x[j] = (float)(rng_next(&r) % 16);
    for (int s = 0; s < 8; s++) x[32 * s] = 0, x[32 * s + 1] = 15;
    block_q4_K b;
    mtplx_quantize_row(MTPLX_TYPE_Q4_K, x, &b, QK_K);
    assert_int_equal(b.d, mtplx_fp32_to_fp16(1.0f / 63.0f));
    assert_int_equal(b.dmin, 0);
    static const uint8_t scales[12] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0x0f, 0x0f, 0x0f, 0x0f};
    assert_memory_equal(b.scales, scales, 12);
    for (int j = 0; j < QK_K; j++) {
        int chunk = j / 64, l = j % 64;
        int got = l < 32 ? b.qs[32 * chunk + l] & 0xF : b.qs[32 * chunk + l - 32] >> 4;
        assert_int_equal(got, (int)x[j]);
    }
}

static void test_q6_K_block_exact(void **state) {
    (void)state;
    /* Integers in [-32, 31] with -32 in every sub-block of 16 fit exactly:
     * all scales -128, d = fp16(-1/128), codes x + 32, dequant == x. */
    float x[QK_K], y[QK_K];
    rng r = {5};
    for (int j = 0; j < QK_K; j++) x[j] = (float)((int)(rng_next(&r) % 64) - 32);
    for (int s = 0; s < 16; s++) x[16 * s + 3] = -32;
    block_q6_K b;
    mtplx_quantize_row(MTPLX_TYPE_Q6_K, x, &b, QK_K);
    assert_int_equal(b.d, mtplx_fp32_to_fp16(-1.0f / 128));
    for (int s = 0; s < 16; s++) assert_int_equal(b.scales[s], -128);
    /* layout: value i of a 128 half: low nibble in ql[i % 64] (>> 4 if i >= 64),
     * high 2 bits in qh[i % 32] at bit 2 * (i / 32) */
    for (int j = 0; j < QK_K; j++) {
        int h = j / 128, i = j % 128;
        int lo = b.ql[64 * h + i % 64] >> (i >= 64 ? 4 : 0) & 0xF;
        int hi = b.qh[32 * h + i % 32] >> (2 * (i / 32)) & 3;
        assert_int_equal(lo | hi << 4, (int)x[j] + 32);
    }
    mtplx_dequantize_row(MTPLX_TYPE_Q6_K, &b, y, QK_K);
    for (int j = 0; j < QK_K; j++) assert_true(y[j] == x[j]);
}

/* ---- round trips ---- */
static double roundtrip_rel_rmse(int type, const float *x, int64_t n) {
    void *q = xalloc(mtplx_row_size(type, n));
    float *y = xalloc((size_t)n * sizeof(float));
    mtplx_quantize_row(type, x, q, n);
    mtplx_dequantize_row(type, q, y, n);
    double se = 0, sx = 0;
    for (int64_t i = 0; i < n; i++) se += (double)(y[i] - x[i]) * (y[i] - x[i]), sx += (double)x[i] * x[i];
    free(q);
    free(y);
    return sqrt(se / sx);
}

static void test_roundtrip(void **state) {
    (void)state;
    const struct {
        int type;
        double bound;
    } cases[] = {
        {MTPLX_TYPE_F32, 0},          {MTPLX_TYPE_F16, RT_BOUND_F16},
        {MTPLX_TYPE_BF16, RT_BOUND_BF16}, {MTPLX_TYPE_Q8_0, RT_BOUND_Q8_0},
        {MTPLX_TYPE_Q4_0, RT_BOUND_Q4_0}, {MTPLX_TYPE_Q4_K, RT_BOUND_Q4_K},
        {MTPLX_TYPE_Q6_K, RT_BOUND_Q6_K}, {MTPLX_TYPE_Q8_K, RT_BOUND_Q8_K},
    };
    const int64_t n = 64 * QK_K;
    float *x = xalloc(n * sizeof(float));
    rng r = {11};
    fill_gauss(&r, x, n, 0.02f);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double e = roundtrip_rel_rmse(cases[c].type, x, n);
        if (getenv("MTPLX_TEST_VERBOSE"))
            printf("%-5s rel rmse %.5f (bound %.5f)\n", mtplx_type_info(cases[c].type)->name, e,
                   cases[c].bound);
        assert_true(e <= cases[c].bound);
    }
    /* all-zero input quantizes to zeros without NaN */
    memset(x, 0, QK_K * sizeof(float));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float y[QK_K];
        uint8_t q[2048];
        mtplx_quantize_row(cases[c].type, x, q, QK_K);
        mtplx_dequantize_row(cases[c].type, q, y, QK_K);
        for (int i = 0; i < QK_K; i++) assert_true(y[i] == 0);
    }
    free(x);
}

/* llama.cpp's own acceptance test: data 0.1 + 2 cos(i + offset), error
 * sqrt(sum sq) / n, bound 0.002 for the 4-bit-and-up types. */
static void test_ggml_total_error(void **state) {
    (void)state;
    const int64_t n = 32 * 128;
    float *x = xalloc(n * sizeof(float)), *y = xalloc(n * sizeof(float));
    void *q = xalloc(mtplx_row_size(MTPLX_TYPE_F32, n));
    for (int64_t i = 0; i < n; i++) x[i] = 0.1f + 2 * cosf((float)i);
    const int types[] = {MTPLX_TYPE_Q8_0, MTPLX_TYPE_Q4_0, MTPLX_TYPE_Q4_K, MTPLX_TYPE_Q6_K};
    for (size_t t = 0; t < 4; t++) {
        mtplx_quantize_row(types[t], x, q, n);
        mtplx_dequantize_row(types[t], q, y, n);
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += (double)(y[i] - x[i]) * (y[i] - x[i]);
        assert_true(sqrt(sum) / n < GGML_MAX_TOTAL_ERROR);
    }
    free(x);
    free(y);
    free(q);
}

/* ---- activation quantizers: every variant equals quantize_row ---- */
static void test_activation_quant(void **state) {
    (void)state;
    const int64_t n = 12 * QK_K;
    float *x = xalloc(n * sizeof(float));
    rng r = {21};
    fill_gauss(&r, x, n, 1.0f);
    x[5] = 0.5f * 127 / 3; /* some exact ties */
    for (int j = 256; j < 512; j++) x[j] = 0;            /* a zero Q8_K block */
    for (int j = 512; j < 768; j++) x[j] = (float)(j % 7) - 3; /* ties in Q8_K */
    block_q8_0 *b0 = xalloc(mtplx_row_size(MTPLX_TYPE_Q8_0, n));
    block_q8_K *bk = xalloc(mtplx_row_size(MTPLX_TYPE_Q8_K, n));
    mtplx_quantize_row(MTPLX_TYPE_Q8_0, x, b0, n);
    mtplx_quantize_row(MTPLX_TYPE_Q8_K, x, bk, n);
    int8_t *q = xalloc(n);
    float *d = xalloc(n / 32 * sizeof(float));
    int16_t *s = xalloc(n / 16 * sizeof(int16_t));
    for (int v = 0; v < N_ISAS; v++) {
        if (!use_isa(all_isas[v])) continue;
        const kernel_ops *ops = mtplx_kernels_ops();
        ops->quant_q8_0(x, n, q, d);
        for (int64_t b = 0; b < n / 32; b++) {
            assert_memory_equal(q + 32 * b, b0[b].qs, 32);
            assert_true(d[b] == mtplx_fp16_to_fp32(b0[b].d));
        }
        ops->quant_q8_K(x, n, q, d, s);
        for (int64_t b = 0; b < n / QK_K; b++) {
            assert_memory_equal(q + QK_K * b, bk[b].qs, QK_K);
            assert_true(d[b] == bk[b].d);
            assert_memory_equal(s + 16 * b, bk[b].bsums, 32);
        }
    }
    free(x), free(b0), free(bk), free(q), free(d), free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_info),        cmocka_unit_test(test_fp16),
        cmocka_unit_test(test_bf16),             cmocka_unit_test(test_q8_0_block_exact),
        cmocka_unit_test(test_q4_0_block_exact), cmocka_unit_test(test_q8_K_block_exact),
        cmocka_unit_test(test_q4_K_block_exact), cmocka_unit_test(test_q6_K_block_exact),
        cmocka_unit_test(test_roundtrip),        cmocka_unit_test(test_ggml_total_error),
        cmocka_unit_test(test_activation_quant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
