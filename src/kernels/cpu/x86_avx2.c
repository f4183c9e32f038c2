/* x86_avx2.c: the AVX2 + FMA + F16C kernels (the variant that runs on most
 * x86-64 machines of the last decade, and in CI).
 *
 * matmul: each weight row (or row block) is loaded once and applied to up to
 * NT_MAX tokens held in registers; K-quants keep integer sums per super-block
 * and convert to float once per 256 values. Activations arrive quantized
 * (see kernels_impl.h); float weights take register tiles of 3 rows x 4
 * tokens (x86_float_tmpl.h). Also: activation quantizers bit-identical to the
 * reference, small elementwise ops with a vectorized exp, and attention with
 * F16C key/value loads or over a Q8_0 cache (int8 dots for the scores).
 * Not here: AVX-512 (x86_avx512.c). */
#include "kernels/cpu/x86_simd.h"

/* ---- Q8_0 / Q4_0 (shared template) ---- */
AI __m256i dot_u8_s8_avx2(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
#define DOT_U8_S8(u, s) dot_u8_s8_avx2(u, s)
#define MM_Q8_0_NAME mm_q8_0_avx2
#define MM_Q4_0_NAME mm_q4_0_avx2
#include "kernels/cpu/x86_q8_0_tmpl.h"

/* ---- prepared (8-row interleaved) Q8_0 / Q4_0 / Q4_K ---- */
#include "kernels/cpu/x86_prep_tmpl.h"

/* ---- Q4_K x Q8_K ---- */
/* The 12 packed bytes to 8 scales and 8 mins (GGML's layout: bytes 0-3 low 6
 * bits of scales 0-3, 4-7 of mins 0-3, 8-11 low nibbles of scales/mins 4-7,
 * whose high 2 bits sit in the top of bytes 0-7), with 32-bit masks. */
AI void q4_K_unpack_scales(const uint8_t *q, uint8_t out[16]) {
    uint32_t u[4];
    memcpy(u, q, 12);
    const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
    u[3] = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4); /* mins 4-7 */
    uint32_t mins03 = u[1] & m6;
    u[1] = (u[2] & m4) | (((u[0] >> 6) & m2) << 4); /* scales 4-7 */
    u[2] = mins03;
    u[0] &= m6; /* scales 0-3 */
    memcpy(out, u, 16);
}
AI void q4_K_row(const mm_args *a, int64_t r, int64_t t0, const int nt) {
    const int64_t k = a->k, nb = k / QK_K;
    const block_q4_K *w = (const block_q4_K *)(a->W + (size_t)r * a->w_stride);
    const int8_t *xq = a->xq + t0 * k;
    const float *xd = a->xd + t0 * nb;
    const int16_t *xs = a->xs + t0 * (k / 16);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[NT_MAX];
    UNROLL
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        uint8_t sc[16]; /* 8 six-bit scales, then 8 six-bit mins */
        q4_K_unpack_scales(w[b].scales, sc);
        const uint8_t *mn = sc + 8;
        const float d = f16_to_f32(w[b].d), dmin = f16_to_f32(w[b].dmin);
        /* mins pair up with the activation's sums of 16: two sums per sub-block */
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(
            _mm_loadl_epi64((const __m128i *)mn),
            _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7)));
        __m256i isum[NT_MAX];
        UNROLL
        for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();
        UNROLL
        for (int j = 0; j < QK_K / 64; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * j));
            const __m256i lo = _mm256_and_si256(q, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i s1 = _mm256_set1_epi16(sc[2 * j]), s2 = _mm256_set1_epi16(sc[2 * j + 1]);
            UNROLL
            for (int t = 0; t < nt; t++) {
                const int8_t *x = xq + t * k + b * QK_K + 64 * j;
                __m256i x1 = _mm256_loadu_si256((const __m256i *)x);
                __m256i x2 = _mm256_loadu_si256((const __m256i *)(x + 32));
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x1), s1);
                __m256i p2 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x2), s2);
                isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(p1, p2));
            }
        }
        UNROLL
        for (int t = 0; t < nt; t++) {
            const float dx = xd[t * nb + b];
            __m256i bs = _mm256_loadu_si256((const __m256i *)(xs + t * (k / 16) + b * 16));
            __m256 pm = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d * dx), acc[t]);
            acc[t] = _mm256_fnmadd_ps(pm, _mm256_set1_ps(dmin * dx), acc[t]);
        }
    }
    store_results(a, r, t0, nt, acc);
}

#define Q4_K_ROW(a, r, t0, nt) q4_K_row(a, r, t0, nt)
static void mm_q4_K_avx2(const mm_args *a, int64_t r0, int64_t r1) {
    FOR_ROWS_AND_TOKENS(Q4_K_ROW, a, r0, r1);
}

/* ---- Q6_K x Q8_K ----
 * Values are used unsigned (0..63) in maddubs; the -32 offset is applied once
 * per super-block as 32 * sum_j scale_j * bsum_j. */
AI void q6_K_row(const mm_args *a, int64_t r, int64_t t0, const int nt) {
    const int64_t k = a->k, nb = k / QK_K;
    const block_q6_K *w = (const block_q6_K *)(a->W + (size_t)r * a->w_stride);
    const int8_t *xq = a->xq + t0 * k;
    const float *xd = a->xd + t0 * nb;
    const int16_t *xs = a->xs + t0 * (k / 16);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[NT_MAX];
    UNROLL
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *sc = w[b].scales;
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
        __m256i isum[NT_MAX];
        UNROLL
        for (int t = 0; t < nt; t++) isum[t] = _mm256_setzero_si256();
        UNROLL
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(w[b].ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(w[b].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(w[b].qh + 32 * h));
            UNROLL
            for (int g = 0; g < 4; g++) {
                /* group g: 32 values at 128h + 32g, scales 8h+2g (first 16) and 8h+2g+1 */
                __m256i q4 = g & 1 ? ql1 : ql0;
                q4 = g < 2 ? _mm256_and_si256(q4, m4) : _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
                __m256i hb = _mm256_and_si256(qh, _mm256_set1_epi8((char)(3 << (2 * g))));
                hb = g == 0 ? _mm256_slli_epi16(hb, 4)
                     : g == 1 ? _mm256_slli_epi16(hb, 2)
                     : g == 2 ? hb
                              : _mm256_srli_epi16(hb, 2);
                const __m256i q = _mm256_or_si256(q4, hb);
                const __m256i s = _mm256_set_m128i(_mm_set1_epi16(sc[8 * h + 2 * g + 1]),
                                                   _mm_set1_epi16(sc[8 * h + 2 * g]));
                UNROLL
                for (int t = 0; t < nt; t++) {
                    const int8_t *x = xq + t * k + b * QK_K + 128 * h + 32 * g;
                    __m256i xv = _mm256_loadu_si256((const __m256i *)x);
                    isum[t] = _mm256_add_epi32(isum[t],
                                               _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), s));
                }
            }
        }
        const float d = f16_to_f32(w[b].d);
        UNROLL
        for (int t = 0; t < nt; t++) {
            __m256i bs = _mm256_loadu_si256((const __m256i *)(xs + t * (k / 16) + b * 16));
            __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
            __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[t], off));
            acc[t] = _mm256_fmadd_ps(v, _mm256_set1_ps(d * xd[t * nb + b]), acc[t]);
        }
    }
    store_results(a, r, t0, nt, acc);
}

#define Q6_K_ROW(a, r, t0, nt) q6_K_row(a, r, t0, nt)
static void mm_q6_K_avx2(const mm_args *a, int64_t r0, int64_t r1) {
    FOR_ROWS_AND_TOKENS(Q6_K_ROW, a, r0, r1);
}

/* ---- F32 / F16 / BF16 weights against f32 activations ---- */
#include "kernels/cpu/x86_float_tmpl.h"
static void mm_f32_avx2(const mm_args *a, int64_t r0, int64_t r1) { float_mm(a, r0, r1, MTPLX_TYPE_F32); }
static void mm_f16_avx2(const mm_args *a, int64_t r0, int64_t r1) { float_mm(a, r0, r1, MTPLX_TYPE_F16); }
static void mm_bf16_avx2(const mm_args *a, int64_t r0, int64_t r1) { float_mm(a, r0, r1, MTPLX_TYPE_BF16); }

/* ---- activation quantizers (bit-identical to the reference) ---- */
AI float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 32 int32 (as 4 vectors) to 32 int8 in order, saturating. */
AI __m256i pack32(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* roundf(): halves away from zero (C's rule, which the Q8_0 reference uses). */
AI __m256 round_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    __m256 one = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.f));
    return _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one));
}

static void quant_q8_0_avx2(const float *x, int64_t n, int8_t *q, float *d) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0) {
        __m256 v[4], amax = _mm256_setzero_ps();
        UNROLL
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 8 * i);
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
        }
        float dd = hmax8(amax) / 127.f, id = dd ? 1.f / dd : 0.f;
        d[b] = _cvtsh_ss(_cvtss_sh(dd, 0));
        __m256 mul = _mm256_set1_ps(id);
        __m256i iv[4];
        UNROLL
        for (int i = 0; i < 4; i++) iv[i] = _mm256_cvtps_epi32(round_away(_mm256_mul_ps(v[i], mul)));
        _mm256_storeu_si256((__m256i *)(q + b * QK8_0), pack32(iv[0], iv[1], iv[2], iv[3]));
    }
}

static void quant_q8_K_avx2(const float *x, int64_t n, int8_t *q, float *d, int16_t *s) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K, q += QK_K, s += QK_K / 16) {
        __m256 amax = _mm256_setzero_ps();
        for (int i = 0; i < QK_K; i += 8)
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
        float am = hmax8(amax);
        if (!am) {
            d[b] = 0;
            memset(q, 0, QK_K);
            memset(s, 0, QK_K / 16 * sizeof(int16_t));
            continue;
        }
        float max = 0; /* the first value of largest magnitude, with its sign */
        for (int j = 0; j < QK_K; j++)
            if (fabsf(x[j]) == am) {
                max = x[j];
                break;
            }
        float iscale = -127.f / max;
        __m256 mul = _mm256_set1_ps(iscale);
        for (int i = 0; i < QK_K; i += 32) {
            __m256i iv[4];
            UNROLL
            for (int u = 0; u < 4; u++)
                iv[u] = _mm256_cvtps_epi32(_mm256_round_ps(
                    _mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * u), mul),
                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            __m256i p = pack32(iv[0], iv[1], iv[2], iv[3]);
            _mm256_storeu_si256((__m256i *)(q + i), p);
            /* sums of 16: pairs via maddubs, quads via madd, then two hadds */
            __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p),
                                           _mm256_set1_epi16(1));
            s4 = _mm256_hadd_epi32(s4, s4);
            s4 = _mm256_hadd_epi32(s4, s4);
            s[i / 16] = (int16_t)_mm256_extract_epi32(s4, 0);
            s[i / 16 + 1] = (int16_t)_mm256_extract_epi32(s4, 4);
        }
        d[b] = 1 / iscale;
    }
}

/* ---- small ops ---- */
/* e^x, Cephes' expf polynomial: about 1 ulp over [-87, 88]; below that 0. */
AI __m256 exp8(__m256 x) {
    x = _mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f));
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3365478515625f));
    __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f),
                                                _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(5.0000001201E-1f));
    __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

static void rmsnorm_row_avx2(const float *x, const float *w, float *out, int64_t d, float eps) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= d; i += 16) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(v0, v0, a0);
        a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    float ss = hsum8(_mm256_add_ps(a0, a1));
    for (; i < d; i++) ss += x[i] * x[i];
    float scale = 1.f / sqrtf(ss / (float)d + eps);
    __m256 vs = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= d; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs),
                                                _mm256_loadu_ps(w + i)));
    for (; i < d; i++) out[i] = x[i] * scale * w[i];
}

static void silu_mul_avx2(const float *gate, const float *up, float *out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 den = _mm256_add_ps(_mm256_set1_ps(1.f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), g)));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, den), _mm256_loadu_ps(up + i)));
    }
    for (; i < n; i++) out[i] = gate[i] / (1.f + expf(-gate[i])) * up[i];
}

static void add_avx2(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

/* sum of e = exp((x - mx) * s) over x[0..n), each e also stored to out[i]
 * unless out is NULL (out may be x). With scale 0 the product by s is left
 * out (s is 1); with mask, -inf entries give exactly 0 (exp8 alone would give
 * its floor, ~1e-38). One accumulator, in index order. */
AI float exp_shifted(const float *x, int64_t n, float mx, float s, float *out, const int scale, const int mask) {
    const __m256 vmax = _mm256_set1_ps(mx), vs = _mm256_set1_ps(s), ninf = _mm256_set1_ps(-INFINITY);
    __m256 sum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i), d = _mm256_sub_ps(v, vmax);
        __m256 e = exp8(scale ? _mm256_mul_ps(d, vs) : d);
        if (mask) e = _mm256_andnot_ps(_mm256_cmp_ps(v, ninf, _CMP_EQ_OQ), e);
        if (out) _mm256_storeu_ps(out + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    float t = hsum8(sum);
    for (; i < n; i++) {
        float e = mask && x[i] == -INFINITY ? 0.0f : expf(scale ? (x[i] - mx) * s : x[i] - mx);
        if (out) out[i] = e;
        t += e;
    }
    return t;
}

/* exp(x - max) in place; returns the sum. */
static float exp_sum(float *x, int64_t n, float max) { return exp_shifted(x, n, max, 1.f, x, 0, 0); }

static float max_of(const float *x, int64_t n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
    float r = hmax8(m);
    for (; i < n; i++) r = fmaxf(r, x[i]);
    return r;
}

static void softmax_avx2(float *x, int64_t n) {
    if (n <= 0) return;
    float inv = 1.f / exp_sum(x, n, max_of(x, n));
    __m256 vi = _mm256_set1_ps(inv);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vi));
    for (; i < n; i++) x[i] *= inv;
}

static float log_sum_exp_avx2(const float *x, int64_t n) {
    const float mx = max_of(x, n);
    if (!isfinite(mx)) return mx;
    return mx + logf(exp_shifted(x, n, mx, 1.f, NULL, 0, 0));
}

static float exp_scaled_avx2(const float *x, int64_t n, float s, float *out) {
    const float mx = max_of(x, n);
    if (mx == -INFINITY) {
        memset(out, 0, (size_t)n * sizeof(float));
        return 0;
    }
    return exp_shifted(x, n, mx, s, out, 1, 1);
}

/* argmax_ref's answer in two passes: the largest value that is not NaN
 * (max_ps keeps its second operand when the first is NaN), then the first
 * index holding it. x[0] NaN: the scalar rule never moves off 0. */
static int64_t argmax_avx2(const float *x, int64_t n) {
    if (x[0] != x[0]) return 0;
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
        m2 = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), m2);
        m3 = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), m3);
    }
    for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    float mx = hmax8(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    for (; i < n; i++)
        if (x[i] > mx) mx = x[i];
    const __m256 vm = _mm256_set1_ps(mx);
    for (i = 0; i + 8 <= n; i += 8) {
        int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
        if (hit) return i + __builtin_ctz((unsigned)hit);
    }
    for (; i < n; i++)
        if (x[i] == mx) return i;
    return 0; /* unreachable: x[0] is a number, so mx is one of x */
}

static void f32_to_f16_avx2(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = mtplx_fp32_to_fp16(x[i]);
}

/* ---- attention for one (token, head) ---- */
AI __m256 load_kv8(int f16, const void *base, size_t idx) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + idx)));
    return _mm256_loadu_ps((const float *)base + idx);
}

AI void attn_head(const attn_args *a, int64_t tok, int head, float *scores, const int f16) {
    const int hd = a->head_dim, kvh = head / (a->n_head / a->n_head_kv);
    const size_t row = (size_t)a->n_head_kv * hd, off = (size_t)kvh * hd;
    const int64_t n_kv = a->pos0 + tok + 1;
    const float *q = a->q + ((size_t)tok * a->n_head + head) * hd;
    float *out = a->out + ((size_t)tok * a->n_head + head) * hd;
    /* scores: four keys at a time share the q loads and one 4-way reduction */
    int64_t j = 0;
    for (; j + 4 <= n_kv; j += 4) {
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int d = 0; d < hd; d += 8) {
            __m256 qv = _mm256_loadu_ps(q + d);
            s0 = _mm256_fmadd_ps(qv, load_kv8(f16, a->k, (j + 0) * row + off + d), s0);
            s1 = _mm256_fmadd_ps(qv, load_kv8(f16, a->k, (j + 1) * row + off + d), s1);
            s2 = _mm256_fmadd_ps(qv, load_kv8(f16, a->k, (j + 2) * row + off + d), s2);
            s3 = _mm256_fmadd_ps(qv, load_kv8(f16, a->k, (j + 3) * row + off + d), s3);
        }
        _mm_storeu_ps(scores + j, _mm_mul_ps(hsum8x4(s0, s1, s2, s3), _mm_set1_ps(a->scale)));
    }
    for (; j < n_kv; j++) {
        __m256 s = _mm256_setzero_ps();
        for (int d = 0; d < hd; d += 8)
            s = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load_kv8(f16, a->k, j * row + off + d), s);
        scores[j] = hsum8(s) * a->scale;
    }
    const float inv = 1.f / exp_sum(scores, n_kv, max_of(scores, n_kv));
    /* out = sum_j p_j v_j, 64 dims (8 registers) at a time */
    for (int d0 = 0; d0 < hd; d0 += 64) {
        if (d0 + 64 <= hd) {
            __m256 acc[8];
            UNROLL
            for (int u = 0; u < 8; u++) acc[u] = _mm256_setzero_ps();
            for (j = 0; j < n_kv; j++) {
                __m256 p = _mm256_broadcast_ss(scores + j);
                UNROLL
                for (int u = 0; u < 8; u++)
                    acc[u] = _mm256_fmadd_ps(p, load_kv8(f16, a->v, j * row + off + d0 + 8 * u), acc[u]);
            }
            UNROLL
            for (int u = 0; u < 8; u++)
                _mm256_storeu_ps(out + d0 + 8 * u, _mm256_mul_ps(acc[u], _mm256_set1_ps(inv)));
        } else {
            for (int d = d0; d < hd; d += 8) {
                __m256 acc = _mm256_setzero_ps();
                for (j = 0; j < n_kv; j++)
                    acc = _mm256_fmadd_ps(_mm256_broadcast_ss(scores + j),
                                          load_kv8(f16, a->v, j * row + off + d), acc);
                _mm256_storeu_ps(out + d, _mm256_mul_ps(acc, _mm256_set1_ps(inv)));
            }
        }
    }
}

/* ---- attention over a Q8_0 cache ----
 * Scores as GGML's CPU path computes them over a q8_0 cache: q rounded to
 * Q8_0 (quant_q8_0_avx2, the reference's values), one exact int8 dot per
 * block, scaled by both blocks' scales (the contract attn_ref follows).
 * Values are dequantized on the fly in float. Each position's row is blocks
 * of 32 values with one fp16 scale, and a head covers head_dim / 32 whole
 * blocks (head_dim <= ATTN_Q8_MAX_HD here; larger heads take the reference). */
#define ATTN_Q8_MAX_HD 512

AI __m256 q8_8(const int8_t *p) { /* 8 int8 values as floats */
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* 8 int32 lanes summing to the dot product of 32 int8 pairs (|values| <=
 * 127, so maddubs on |a| and b's sign-adjusted copy cannot saturate) */
AI __m256i i8_dot32(__m256i a, __m256i b) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a)),
                             _mm256_set1_epi16(1));
}

/* one key block against the quantized q block: (float)dot * (dq * dk), 8 lanes */
AI __m256 q8_key_block(__m256i qv, float dq, const block_q8_0 *k, __m256 acc) {
    __m256i kv = _mm256_loadu_si256((const __m256i *)k->qs);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(i8_dot32(qv, kv)), _mm256_set1_ps(dq * f16_to_f32(k->d)), acc);
}

static void attn_head_q8_0(const attn_args *a, int64_t tok, int head, float *scores) {
    const int hd = a->head_dim, nb = hd / QK8_0, kvh = head / (a->n_head / a->n_head_kv);
    const size_t row_b = (size_t)a->n_head_kv * (size_t)nb, off_b = (size_t)kvh * (size_t)nb;
    const block_q8_0 *K = (const block_q8_0 *)a->k + off_b, *V = (const block_q8_0 *)a->v + off_b;
    const int64_t n_kv = a->pos0 + tok + 1;
    const float *q = a->q + ((size_t)tok * a->n_head + head) * hd;
    float *out = a->out + ((size_t)tok * a->n_head + head) * hd;
    int8_t qq[ATTN_Q8_MAX_HD] __attribute__((aligned(32)));
    float qd[ATTN_Q8_MAX_HD / QK8_0];
    quant_q8_0_avx2(q, hd, qq, qd);
    int64_t j = 0;
    for (; j + 4 <= n_kv; j += 4) {
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int b = 0; b < nb; b++) {
            const __m256i qv = _mm256_load_si256((const __m256i *)(qq + b * QK8_0));
            s0 = q8_key_block(qv, qd[b], K + (size_t)(j + 0) * row_b + b, s0);
            s1 = q8_key_block(qv, qd[b], K + (size_t)(j + 1) * row_b + b, s1);
            s2 = q8_key_block(qv, qd[b], K + (size_t)(j + 2) * row_b + b, s2);
            s3 = q8_key_block(qv, qd[b], K + (size_t)(j + 3) * row_b + b, s3);
        }
        _mm_storeu_ps(scores + j, _mm_mul_ps(hsum8x4(s0, s1, s2, s3), _mm_set1_ps(a->scale)));
    }
    for (; j < n_kv; j++) {
        __m256 s = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++)
            s = q8_key_block(_mm256_load_si256((const __m256i *)(qq + b * QK8_0)), qd[b], K + (size_t)j * row_b + b, s);
        scores[j] = hsum8(s) * a->scale;
    }
    const float inv = 1.f / exp_sum(scores, n_kv, max_of(scores, n_kv));
    /* out = sum_j p_j d_jb v_jb: two blocks (8 registers) at a time */
    for (int b0 = 0; b0 < nb; b0 += 2) {
        const int two = b0 + 1 < nb;
        __m256 acc[8];
        UNROLL
        for (int u = 0; u < 8; u++) acc[u] = _mm256_setzero_ps();
        for (j = 0; j < n_kv; j++) {
            const block_q8_0 *vb = V + (size_t)j * row_b + b0;
            const __m256 p0 = _mm256_set1_ps(scores[j] * f16_to_f32(vb[0].d));
            const int8_t *x0 = (const int8_t *)vb[0].qs;
            UNROLL
            for (int u = 0; u < 4; u++) acc[u] = _mm256_fmadd_ps(p0, q8_8(x0 + 8 * u), acc[u]);
            if (two) {
                const __m256 p1 = _mm256_set1_ps(scores[j] * f16_to_f32(vb[1].d));
                const int8_t *x1 = (const int8_t *)vb[1].qs;
                UNROLL
                for (int u = 0; u < 4; u++) acc[4 + u] = _mm256_fmadd_ps(p1, q8_8(x1 + 8 * u), acc[4 + u]);
            }
        }
        for (int u = 0; u < (two ? 8 : 4); u++)
            _mm256_storeu_ps(out + b0 * QK8_0 + 8 * u, _mm256_mul_ps(acc[u], _mm256_set1_ps(inv)));
    }
}

static void attn_avx2(const attn_args *a, int64_t tok, int head, float *scores) {
    if (a->kv_type == MTPLX_TYPE_Q8_0) { /* head_dim is a multiple of 32 */
        if (a->head_dim <= ATTN_Q8_MAX_HD) attn_head_q8_0(a, tok, head, scores);
        else mtplx_kernels_ref_ops.attn(a, tok, head, scores);
        return;
    }
    if (a->head_dim % 8) { /* odd head sizes: not worth a SIMD path */
        mtplx_kernels_ref_ops.attn(a, tok, head, scores);
        return;
    }
    if (a->kv_type == MTPLX_TYPE_F16)
        attn_head(a, tok, head, scores, 1);
    else
        attn_head(a, tok, head, scores, 0);
}

/* ---- attention for a group of queries sharing a KV head ----
 * K and V are converted to f32 tiles of ATTN_JT positions once per group,
 * then every query of the group works from the tile (in L1) instead of
 * reading the cache itself. Each query's arithmetic is the per-query
 * kernel's with one change that makes it the same in any group: every key's
 * score goes through a four-key reduction (hsum8x4), the last partial four
 * included. Scores first (pass 1), then the softmax, then values (pass 2,
 * each query's accumulators kept in memory between tiles, so the sums run in
 * position order exactly as one unbroken loop would). */
#define ATTN_JT 32       /* positions per tile, a multiple of 4 */
#define ATTN_TILE_HD 256 /* head_dim limit of the tiled path */

static void attn_tile(float *tile, int f16, const void *base, int64_t j0, int jn, size_t row, size_t off, int hd) {
    for (int jj = 0; jj < jn; jj++) {
        const size_t src = (size_t)(j0 + jj) * row + off;
        float *dst = tile + (size_t)jj * hd;
        /* a row of the next tile: strided rows defeat the hardware prefetcher */
        const char *ahead = (const char *)base + (src + ATTN_JT * row) * (f16 ? 2 : 4);
        for (int b = 0; b < hd * (f16 ? 2 : 4); b += 64) _mm_prefetch(ahead + b, _MM_HINT_T0);
        if (f16)
            for (int d = 0; d < hd; d += 8) _mm256_store_ps(dst + d, load_kv8(1, base, src + d));
        else
            memcpy(dst, (const float *)base + src, (size_t)hd * sizeof(float));
    }
    int pad = (jn + 3) / 4 * 4; /* read by the last four-key group, never used */
    memset(tile + (size_t)jn * hd, 0, (size_t)(pad - jn) * hd * sizeof(float));
}

/* acc[d0 .. d0 + 64) += sum_j p[j] * tile row j, j < jn (8 registers) */
AI void attn_values64(float *acc, const float *p, const float *tile, int jn, int hd, int d0) {
    __m256 r0 = _mm256_load_ps(acc + d0), r1 = _mm256_load_ps(acc + d0 + 8), r2 = _mm256_load_ps(acc + d0 + 16),
           r3 = _mm256_load_ps(acc + d0 + 24), r4 = _mm256_load_ps(acc + d0 + 32),
           r5 = _mm256_load_ps(acc + d0 + 40), r6 = _mm256_load_ps(acc + d0 + 48),
           r7 = _mm256_load_ps(acc + d0 + 56);
    for (int jj = 0; jj < jn; jj++) {
        const __m256 pb = _mm256_broadcast_ss(p + jj);
        const float *x = tile + (size_t)jj * hd + d0;
        r0 = _mm256_fmadd_ps(pb, _mm256_load_ps(x), r0);
        r1 = _mm256_fmadd_ps(pb, _mm256_load_ps(x + 8), r1);
        r2 = _mm256_fmadd_ps(pb, _mm256_load_ps(x + 16), r2);
        r3 = _mm256_fmadd_ps(pb, _mm256_load_ps(x + 24), r3);
        r4 = _mm256_fmadd_ps(pb, _mm256_load_ps(x + 32), r4);
        r5 = _mm256_fmadd_ps(pb, _mm256_load_ps(x + 40), r5);
        r6 = _mm256_fmadd_ps(pb, _mm256_load_ps(x + 48), r6);
        r7 = _mm256_fmadd_ps(pb, _mm256_load_ps(x + 56), r7);
    }
    _mm256_store_ps(acc + d0, r0), _mm256_store_ps(acc + d0 + 8, r1), _mm256_store_ps(acc + d0 + 16, r2);
    _mm256_store_ps(acc + d0 + 24, r3), _mm256_store_ps(acc + d0 + 32, r4), _mm256_store_ps(acc + d0 + 40, r5);
    _mm256_store_ps(acc + d0 + 48, r6), _mm256_store_ps(acc + d0 + 56, r7);
}

/* the same for 8 columns */
AI void attn_values8(float *acc, const float *p, const float *tile, int jn, int hd, int d0) {
    __m256 r = _mm256_load_ps(acc + d0);
    for (int jj = 0; jj < jn; jj++)
        r = _mm256_fmadd_ps(_mm256_broadcast_ss(p + jj), _mm256_load_ps(tile + (size_t)jj * hd + d0), r);
    _mm256_store_ps(acc + d0, r);
}

static void attn_group_avx2(const attn_args *a, int kvh, int h0, int h1, int64_t t0, int64_t t1, float *scores,
                            size_t stride) {
    const int hd = a->head_dim, nh = h1 - h0, nq = nh * (int)(t1 - t0);
    if (a->kv_type == MTPLX_TYPE_Q8_0 || hd % 8 || hd > ATTN_TILE_HD || nq > ATTN_GROUP_Q) {
        attn_group_each(attn_avx2, a, h0, h1, t0, t1, scores, stride);
        return;
    }
    const int f16 = a->kv_type == MTPLX_TYPE_F16;
    const size_t row = (size_t)a->n_head_kv * hd, off = (size_t)kvh * hd;
    const int64_t n_max = a->pos0 + t1; /* positions the last token sees */
    float tile[ATTN_JT * ATTN_TILE_HD] __attribute__((aligned(32)));
    float acc[ATTN_GROUP_Q * ATTN_TILE_HD] __attribute__((aligned(32)));
    float inv[ATTN_GROUP_Q];
#define QUERY(qi) (a->pos0 + t0 + (qi) / nh + 1) /* positions query qi sees */
    for (int64_t j0 = 0; j0 < n_max; j0 += ATTN_JT) {
        const int jn = (int)(n_max - j0 < ATTN_JT ? n_max - j0 : ATTN_JT);
        attn_tile(tile, f16, a->k, j0, jn, row, off, hd);
        for (int qi = 0; qi < nq; qi++) {
            const int64_t n_kv = QUERY(qi);
            if (j0 >= n_kv) continue;
            const int je = (int)(n_kv - j0 < jn ? n_kv - j0 : jn);
            const float *q = a->q + ((size_t)(t0 + qi / nh) * a->n_head + h0 + qi % nh) * hd;
            float *s = scores + (size_t)qi * stride + j0;
            for (int jj = 0; jj < je; jj += 4) {
                const float *k0 = tile + (size_t)jj * hd;
                __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
                for (int d = 0; d < hd; d += 8) {
                    __m256 qv = _mm256_loadu_ps(q + d);
                    s0 = _mm256_fmadd_ps(qv, _mm256_load_ps(k0 + d), s0);
                    s1 = _mm256_fmadd_ps(qv, _mm256_load_ps(k0 + hd + d), s1);
                    s2 = _mm256_fmadd_ps(qv, _mm256_load_ps(k0 + 2 * hd + d), s2);
                    s3 = _mm256_fmadd_ps(qv, _mm256_load_ps(k0 + 3 * hd + d), s3);
                }
                __m128 r = _mm_mul_ps(hsum8x4(s0, s1, s2, s3), _mm_set1_ps(a->scale));
                if (jj + 4 <= je) {
                    _mm_storeu_ps(s + jj, r);
                } else {
                    float x[4];
                    _mm_storeu_ps(x, r);
                    for (int u = 0; jj + u < je; u++) s[jj + u] = x[u];
                }
            }
        }
    }
    for (int qi = 0; qi < nq; qi++) {
        float *s = scores + (size_t)qi * stride;
        const int64_t n_kv = QUERY(qi);
        inv[qi] = 1.f / exp_sum(s, n_kv, max_of(s, n_kv));
    }
    memset(acc, 0, (size_t)nq * hd * sizeof(float));
    for (int64_t j0 = 0; j0 < n_max; j0 += ATTN_JT) {
        const int jn = (int)(n_max - j0 < ATTN_JT ? n_max - j0 : ATTN_JT);
        attn_tile(tile, f16, a->v, j0, jn, row, off, hd);
        for (int qi = 0; qi < nq; qi++) {
            const int64_t n_kv = QUERY(qi);
            if (j0 >= n_kv) continue;
            const int je = (int)(n_kv - j0 < jn ? n_kv - j0 : jn);
            const float *p = scores + (size_t)qi * stride + j0;
            int d0 = 0;
            for (; d0 + 64 <= hd; d0 += 64) attn_values64(acc + (size_t)qi * hd, p, tile, je, hd, d0);
            for (; d0 < hd; d0 += 8) attn_values8(acc + (size_t)qi * hd, p, tile, je, hd, d0);
        }
    }
    for (int qi = 0; qi < nq; qi++) {
        float *out = a->out + ((size_t)(t0 + qi / nh) * a->n_head + h0 + qi % nh) * hd;
        const __m256 vi = _mm256_set1_ps(inv[qi]);
        for (int d = 0; d < hd; d += 8)
            _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_load_ps(acc + (size_t)qi * hd + d), vi));
    }
#undef QUERY
}

const kernel_ops mtplx_kernels_avx2_ops = {
    .name = "avx2",
    .mm =
        {
            [MTPLX_TYPE_F32] = mm_f32_avx2,
            [MTPLX_TYPE_F16] = mm_f16_avx2,
            [MTPLX_TYPE_BF16] = mm_bf16_avx2,
            [MTPLX_TYPE_Q8_0] = mm_q8_0_avx2,
            [MTPLX_TYPE_Q4_0] = mm_q4_0_avx2,
            [MTPLX_TYPE_Q4_K] = mm_q4_K_avx2,
            [MTPLX_TYPE_Q6_K] = mm_q6_K_avx2,
        },
    .mm_prep =
        {
            [MTPLX_TYPE_Q8_0] = mm_prep_q8_0_avx2,
            [MTPLX_TYPE_Q4_0] = mm_prep_q4_0_avx2,
            [MTPLX_TYPE_Q4_K] = mm_prep_q4_K_avx2,
        },
    .quant_q8_0 = quant_q8_0_avx2,
    .quant_q8_K = quant_q8_K_avx2,
    .rmsnorm_row = rmsnorm_row_avx2,
    .silu_mul = silu_mul_avx2,
    .add = add_avx2,
    .softmax = softmax_avx2,
    .log_sum_exp = log_sum_exp_avx2,
    .exp_scaled = exp_scaled_avx2,
    .argmax = argmax_avx2,
    .f32_to_f16 = f32_to_f16_avx2,
    .attn = attn_avx2,
    .attn_group = attn_group_avx2,
};
