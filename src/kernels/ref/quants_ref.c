/* quants_ref.c: GGML block quantization and dequantization, scalar.
 *
 * The quantizers follow llama.cpp's *_ref algorithms (the ones that make
 * model files deterministic): Q8_0 amax/127 with roundf, Q4_0 d = max/-8,
 * Q4_K's weighted min/scale search (make_qkx2_quants style), Q6_K's scale
 * search (make_qx_quants style), Q8_K amax/127 with nearest-even rounding.
 * Written from the format description; the outputs are meant to match
 * llama.cpp's bit for bit. Importance-matrix variants are left out. */
#include "kernels/kernels_impl.h"

#define GROUP_MAX_EPS 1e-15f

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* ---- Q8_0 ---- */
static void quantize_q8_0(const float *x, block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK8_0) {
        float amax = 0;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.f, id = d ? 1.f / d : 0.f;
        y[i].d = mtplx_fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
}

/* ---- Q4_0 ---- */
static void quantize_q4_0(const float *x, block_q4_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK4_0) {
        float amax = 0, max = 0;
        for (int j = 0; j < QK4_0; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
        float d = max / -8, id = d ? 1.f / d : 0.f;
        y[i].d = mtplx_fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            /* truncation after +8.5 is round-half-up of the offset value */
            int lo = imin(15, (int8_t)(x[j] * id + 8.5f));
            int hi = imin(15, (int8_t)(x[j + QK4_0 / 2] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(lo | (hi << 4));
        }
    }
}

/* ---- Q4_K ---- */
/* Fit x ~ scale * L - min_neg with L in [0, nmax], weighted least squares over
 * a small grid of candidate scales; returns scale, *neg_min = -min >= 0. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
                           float *neg_min, uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0], sum_w = w[0], sum_x = w[0] * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        int l = mtplx_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * L[i] + min - x[i];
        best += w[i] * diff * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(0, imin(nmax, mtplx_nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D <= 0) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = this_scale * Laux[i] + this_min - x[i];
            err += w[i] * diff * diff;
        }
        if (err < best) {
            memcpy(L, Laux, (size_t)n);
            best = err;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

static void quantize_q4_K(const float *x, block_q4_K *y, int64_t nb) {
    uint8_t L[QK_K], Laux[32];
    float w[32], mins[QK_K / 32], scales[QK_K / 32];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            const float *xs = x + 32 * j;
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
            float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xs[l]);
            scales[j] = fit_scale_min(32, 15, xs, w, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        memset(y[i].scales, 0, K_SCALE_SIZE);
        for (int j = 0; j < QK_K / 32; j++) {
            uint8_t ls = (uint8_t)imin(63, (uint8_t)mtplx_nearest_int(inv_scale * scales[j]));
            uint8_t lm = (uint8_t)imin(63, (uint8_t)mtplx_nearest_int(inv_min * mins[j]));
            if (j < 4) {
                y[i].scales[j] = ls;
                y[i].scales[j + 4] = lm;
            } else {
                y[i].scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
                y[i].scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
                y[i].scales[j] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        y[i].d = mtplx_fp32_to_fp16(max_scale / 63.f);
        y[i].dmin = mtplx_fp32_to_fp16(max_min / 63.f);
        /* requantize against the scales as stored (6 bit, fp16) */
        for (int j = 0; j < QK_K / 32; j++) {
            uint8_t sc, m;
            mtplx_q4k_scale_min(j, y[i].scales, &sc, &m);
            float d = mtplx_fp16_to_fp32(y[i].d) * sc;
            if (!d) continue;
            float dm = mtplx_fp16_to_fp32(y[i].dmin) * m;
            for (int l = 0; l < 32; l++) {
                int q = mtplx_nearest_int((x[32 * j + l] + dm) / d);
                L[32 * j + l] = (uint8_t)imax(0, imin(15, q));
            }
        }
        /* 64 values per 32 bytes: low nibbles first 32, high nibbles next 32 */
        for (int j = 0; j < QK_K / 64; j++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * j + l] = (uint8_t)(L[64 * j + l] | (L[64 * j + 32 + l] << 4));
    }
}

static void dequantize_q4_K(const block_q4_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = mtplx_fp16_to_fp32(b[i].d), dmin = mtplx_fp16_to_fp32(b[i].dmin);
        for (int j = 0; j < QK_K / 64; j++) {
            uint8_t sc1, m1, sc2, m2;
            mtplx_q4k_scale_min(2 * j, b[i].scales, &sc1, &m1);
            mtplx_q4k_scale_min(2 * j + 1, b[i].scales, &sc2, &m2);
            const uint8_t *q = b[i].qs + 32 * j;
            for (int l = 0; l < 32; l++) *y++ = d * sc1 * (q[l] & 0xF) - dmin * m1;
            for (int l = 0; l < 32; l++) *y++ = d * sc2 * (q[l] >> 4) - dmin * m2;
        }
    }
}

/* ---- Q6_K ---- */
/* Symmetric fit x ~ scale * (L - nmax), L in [0, 2 nmax), weights x^2,
 * searching 19 scales around nmax / max. */
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = imax(-nmax, imin(nmax - 1, mtplx_nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(-nmax, imin(nmax - 1, mtplx_nearest_int(iscale * x[i])));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, mtplx_nearest_int(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void quantize_q6_K(const float *x, block_q6_K *y, int64_t nb) {
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max_scale = 0, max_abs = 0;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            scales[ib] = fit_scale_sym(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs) max_abs = fabsf(scales[ib]), max_scale = scales[ib];
        }
        if (max_abs < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = mtplx_fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ib++)
            y[i].scales[ib] = (int8_t)imin(127, mtplx_nearest_int(iscale * scales[ib]));
        for (int j = 0; j < QK_K / 16; j++) {
            float d = mtplx_fp16_to_fp32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int l = 0; l < 16; l++) {
                int q = imax(-32, imin(31, mtplx_nearest_int(x[16 * j + l] / d)));
                L[16 * j + l] = (int8_t)(q + 32);
            }
        }
        /* per 128 values: ql holds low nibbles of (l, l+64) and (l+32, l+96),
         * qh the 2 high bits of l, l+32, l+64, l+96 */
        uint8_t *ql = y[i].ql, *qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
                ql[l] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
                ql[l + 32] = (uint8_t)((q2 & 0xF) | ((q4 & 0xF) << 4));
                qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

static void dequantize_q6_K(const block_q6_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = mtplx_fp16_to_fp32(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

/* ---- Q8_K (activations of the K-quant dots) ---- */
static void quantize_q8_K_block(const float *x, int8_t *q, float *d, int16_t *bsums) {
    float max = 0, amax = 0;
    for (int j = 0; j < QK_K; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    if (!amax) {
        *d = 0;
        memset(q, 0, QK_K);
        memset(bsums, 0, QK_K / 16 * sizeof(int16_t));
        return;
    }
    float iscale = -127.f / max;
    for (int j = 0; j < QK_K; j++) q[j] = (int8_t)imin(127, mtplx_nearest_int(iscale * x[j]));
    for (int j = 0; j < QK_K / 16; j++) {
        int s = 0;
        for (int l = 0; l < 16; l++) s += q[16 * j + l];
        bsums[j] = (int16_t)s;
    }
    *d = 1 / iscale;
}

void mtplx_quant_q8_K_ref(const float *x, int64_t n, int8_t *q, float *d, int16_t *s) {
    for (int64_t i = 0; i < n / QK_K; i++)
        quantize_q8_K_block(x + i * QK_K, q + i * QK_K, d + i, s + i * (QK_K / 16));
}

void mtplx_quant_q8_0_ref(const float *x, int64_t n, int8_t *q, float *d) {
    for (int64_t i = 0; i < n / QK8_0; i++) {
        block_q8_0 b;
        quantize_q8_0(x + i * QK8_0, &b, 1);
        memcpy(q + i * QK8_0, b.qs, QK8_0);
        d[i] = mtplx_fp16_to_fp32(b.d);
    }
}

/* ---- row entry points ---- */
void mtplx_dequantize_row(int type, const void *src, float *dst, int64_t n) {
    const mtplx_type_traits *tt = mtplx_type_info(type);
    MTPLX_ASSERT(tt && n % tt->block_size == 0);
    int64_t nb = n / tt->block_size;
    switch (type) {
    case MTPLX_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case MTPLX_TYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = mtplx_fp16_to_fp32(((const uint16_t *)src)[i]);
        break;
    case MTPLX_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = mtplx_bf16_to_fp32(((const uint16_t *)src)[i]);
        break;
    case MTPLX_TYPE_Q8_0:
        for (int64_t i = 0; i < nb; i++) {
            const block_q8_0 *b = (const block_q8_0 *)src + i;
            float d = mtplx_fp16_to_fp32(b->d);
            for (int j = 0; j < QK8_0; j++) dst[i * QK8_0 + j] = d * (int8_t)b->qs[j];
        }
        break;
    case MTPLX_TYPE_Q4_0:
        for (int64_t i = 0; i < nb; i++) {
            const block_q4_0 *b = (const block_q4_0 *)src + i;
            float d = mtplx_fp16_to_fp32(b->d);
            for (int j = 0; j < QK4_0 / 2; j++) {
                dst[i * QK4_0 + j] = d * ((b->qs[j] & 0xF) - 8);
                dst[i * QK4_0 + j + QK4_0 / 2] = d * ((b->qs[j] >> 4) - 8);
            }
        }
        break;
    case MTPLX_TYPE_Q4_K: dequantize_q4_K(src, dst, nb); break;
    case MTPLX_TYPE_Q6_K: dequantize_q6_K(src, dst, nb); break;
    case MTPLX_TYPE_Q8_K:
        for (int64_t i = 0; i < nb; i++) {
            const block_q8_K *b = (const block_q8_K *)src + i;
            for (int j = 0; j < QK_K; j++) dst[i * QK_K + j] = b->d * b->qs[j];
        }
        break;
    default: MTPLX_ASSERT(!"unsupported type");
    }
}

size_t mtplx_quantize_row(int type, const float *src, void *dst, int64_t n) {
    size_t bytes = mtplx_row_size(type, n);
    MTPLX_ASSERT(bytes || n == 0);
    const mtplx_type_traits *tt = mtplx_type_info(type);
    int64_t nb = n / tt->block_size;
    switch (type) {
    case MTPLX_TYPE_F32: memcpy(dst, src, bytes); break;
    case MTPLX_TYPE_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = mtplx_fp32_to_fp16(src[i]);
        break;
    case MTPLX_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = mtplx_fp32_to_bf16(src[i]);
        break;
    case MTPLX_TYPE_Q8_0: quantize_q8_0(src, dst, nb); break;
    case MTPLX_TYPE_Q4_0: quantize_q4_0(src, dst, nb); break;
    case MTPLX_TYPE_Q4_K: quantize_q4_K(src, dst, nb); break;
    case MTPLX_TYPE_Q6_K: quantize_q6_K(src, dst, nb); break;
    case MTPLX_TYPE_Q8_K:
        for (int64_t i = 0; i < nb; i++) {
            block_q8_K *b = (block_q8_K *)dst + i;
            quantize_q8_K_block(src + i * QK_K, b->qs, &b->d, b->bsums);
        }
        break;
    default: MTPLX_ASSERT(!"unsupported type");
    }
    return bytes;
}
