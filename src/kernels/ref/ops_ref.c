/* ops_ref.c: scalar reference kernels, the oracle every SIMD variant is
 * tested against, and the fallback on CPUs without AVX2.
 *
 * Integer dot products are exact; float sums of the float weight types use
 * double so that the oracle is more accurate than what it judges. Clarity over
 * speed: no blocking, no unrolling. */
#include "kernels/kernels_impl.h"

/* ---- dot products of one weight row with one quantized activation row ---- */
static float dot_q8_0(const block_q8_0 *w, const int8_t *xq, const float *xd, int64_t nb) {
    float sum = 0;
    for (int64_t b = 0; b < nb; b++) {
        int s = 0;
        for (int j = 0; j < QK8_0; j++) s += (int8_t)w[b].qs[j] * xq[b * QK8_0 + j];
        sum += (float)s * (mtplx_fp16_to_fp32(w[b].d) * xd[b]);
    }
    return sum;
}

static float dot_q4_0(const block_q4_0 *w, const int8_t *xq, const float *xd, int64_t nb) {
    float sum = 0;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *x = xq + b * QK4_0;
        int s = 0;
        for (int j = 0; j < QK4_0 / 2; j++)
            s += ((w[b].qs[j] & 0xF) - 8) * x[j] + ((w[b].qs[j] >> 4) - 8) * x[j + QK4_0 / 2];
        sum += (float)s * (mtplx_fp16_to_fp32(w[b].d) * xd[b]);
    }
    return sum;
}

/* sum_j d*sc_j*q*x - dmin*m_j*x over sub-blocks; the min term uses the
 * activation's sums of 16 (bsums). */
static float dot_q4_K(const block_q4_K *w, const int8_t *xq, const float *xd, const int16_t *xs,
                      int64_t nb) {
    float sum = 0;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *x = xq + b * QK_K;
        const int16_t *bs = xs + b * (QK_K / 16);
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < QK_K / 64; j++) {
            uint8_t sc1, m1, sc2, m2;
            mtplx_q4k_scale_min(2 * j, w[b].scales, &sc1, &m1);
            mtplx_q4k_scale_min(2 * j + 1, w[b].scales, &sc2, &m2);
            int s1 = 0, s2 = 0;
            for (int l = 0; l < 32; l++) {
                s1 += (w[b].qs[32 * j + l] & 0xF) * x[64 * j + l];
                s2 += (w[b].qs[32 * j + l] >> 4) * x[64 * j + 32 + l];
            }
            sumi += sc1 * s1 + sc2 * s2;
            summ += m1 * (bs[4 * j] + bs[4 * j + 1]) + m2 * (bs[4 * j + 2] + bs[4 * j + 3]);
        }
        sum += mtplx_fp16_to_fp32(w[b].d) * xd[b] * sumi -
               mtplx_fp16_to_fp32(w[b].dmin) * xd[b] * summ;
    }
    return sum;
}

static float dot_q6_K(const block_q6_K *w, const int8_t *xq, const float *xd, int64_t nb) {
    float sum = 0;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *x = xq + b * QK_K;
        const uint8_t *ql = w[b].ql, *qh = w[b].qh;
        int32_t sumi = 0;
        for (int h = 0; h < 2; h++, ql += 64, qh += 32, x += 128) {
            int s[8] = {0};
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                s[is + 0] += (((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32) * x[l];
                s[is + 2] += (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32) * x[l + 32];
                s[is + 4] += (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * x[l + 64];
                s[is + 6] += (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * x[l + 96];
            }
            for (int g = 0; g < 8; g++) sumi += w[b].scales[8 * h + g] * s[g];
        }
        sum += mtplx_fp16_to_fp32(w[b].d) * xd[b] * sumi;
    }
    return sum;
}

static float dot_float(int type, const void *w, const float *x, int64_t k) {
    double s = 0;
    for (int64_t j = 0; j < k; j++) {
        float wj = type == MTPLX_TYPE_F32   ? ((const float *)w)[j]
                   : type == MTPLX_TYPE_F16 ? mtplx_fp16_to_fp32(((const uint16_t *)w)[j])
                                            : mtplx_bf16_to_fp32(((const uint16_t *)w)[j]);
        s += (double)wj * x[j];
    }
    return (float)s;
}

static void mm_ref(const mm_args *a, int64_t r0, int64_t r1) {
    int64_t k = a->k;
    for (int64_t r = r0; r < r1; r++) {
        const void *w = a->W + (size_t)r * a->w_stride;
        for (int64_t t = 0; t < a->n; t++) {
            float v;
            switch (a->type) {
            case MTPLX_TYPE_Q8_0:
                v = dot_q8_0(w, a->xq + t * k, a->xd + t * (k / QK8_0), k / QK8_0);
                break;
            case MTPLX_TYPE_Q4_0:
                v = dot_q4_0(w, a->xq + t * k, a->xd + t * (k / QK8_0), k / QK8_0);
                break;
            case MTPLX_TYPE_Q4_K:
                v = dot_q4_K(w, a->xq + t * k, a->xd + t * (k / QK_K), a->xs + t * (k / 16),
                             k / QK_K);
                break;
            case MTPLX_TYPE_Q6_K:
                v = dot_q6_K(w, a->xq + t * k, a->xd + t * (k / QK_K), k / QK_K);
                break;
            default: v = dot_float(a->type, w, a->x + t * k, k);
            }
            a->y[t * a->m + r] = v;
        }
    }
}

/* ---- small ops ---- */
static void rmsnorm_row_ref(const float *x, const float *w, float *out, int64_t d, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < d; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / (double)d + eps));
    for (int64_t i = 0; i < d; i++) out[i] = x[i] * scale * w[i];
}

static void silu_mul_ref(const float *gate, const float *up, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = gate[i] / (1.f + expf(-gate[i])) * up[i];
}

static void add_ref(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

static void softmax_ref(float *x, int64_t n) {
    if (n <= 0) return;
    float max = x[0];
    for (int64_t i = 1; i < n; i++) max = fmaxf(max, x[i]);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += x[i] = expf(x[i] - max);
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

static float log_sum_exp_ref(const float *x, int64_t n) {
    float max = x[0];
    for (int64_t i = 1; i < n; i++) max = fmaxf(max, x[i]);
    if (!isfinite(max)) return max;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += exp((double)x[i] - max);
    return (float)(max + log(fmax(sum, 1.0))); /* sum >= 1: the max term is exp(0) */
}

static float exp_scaled_ref(const float *x, int64_t n, float s, float *out) {
    float mx = x[0];
    for (int64_t i = 1; i < n; i++) mx = fmaxf(mx, x[i]);
    if (mx == -INFINITY) {
        memset(out, 0, (size_t)n * sizeof(float));
        return 0;
    }
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += out[i] = x[i] == -INFINITY ? 0.0f : expf((x[i] - mx) * s);
    return (float)sum;
}

static int64_t argmax_ref(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void f32_to_f16_ref(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = mtplx_fp32_to_fp16(x[i]);
}

/* ---- attention for one (token, head) ---- */
/* Element idx of a cache laid out as [n_ctx][row]: for Q8_0 the row is a
 * whole number of blocks, so element idx is value idx % 32 of block idx / 32. */
static inline float kv_at(int type, const void *base, size_t idx) {
    if (type == MTPLX_TYPE_Q8_0) {
        const block_q8_0 *b = (const block_q8_0 *)base + idx / QK8_0;
        return mtplx_fp16_to_fp32(b->d) * (float)(int8_t)b->qs[idx % QK8_0];
    }
    return type == MTPLX_TYPE_F16 ? mtplx_fp16_to_fp32(((const uint16_t *)base)[idx])
                                  : ((const float *)base)[idx];
}

/* Scores over a Q8_0 cache, as GGML's CPU path computes them: q rounded to
 * Q8_0 (the reference quantizer), an exact integer dot per block of 32,
 * times the two blocks' scales, summed over the head's blocks. */
static void scores_q8_0_ref(const attn_args *a, const float *q, int kvh, int64_t n_kv, float *scores) {
    enum { MAX_HD = MTPLX_KV_Q8_0_MAX_HEAD_DIM };
    int hd = a->head_dim, nb = hd / QK8_0;
    int8_t qq[MAX_HD];
    float qd[MAX_HD / QK8_0];
    MTPLX_ASSERT(hd <= MAX_HD);
    mtplx_quant_q8_0_ref(q, hd, qq, qd);
    const block_q8_0 *K = (const block_q8_0 *)a->k + (size_t)kvh * nb;
    size_t row_b = (size_t)a->n_head_kv * nb;
    for (int64_t j = 0; j < n_kv; j++) {
        float s = 0;
        for (int b = 0; b < nb; b++) {
            const block_q8_0 *k = K + (size_t)j * row_b + b;
            int32_t dot = 0;
            for (int i = 0; i < QK8_0; i++) dot += (int32_t)qq[b * QK8_0 + i] * (int8_t)k->qs[i];
            s += (float)dot * (qd[b] * mtplx_fp16_to_fp32(k->d));
        }
        scores[j] = s * a->scale;
    }
}

static void attn_ref(const attn_args *a, int64_t tok, int head, float *scores) {
    int hd = a->head_dim, kvh = head / (a->n_head / a->n_head_kv);
    size_t row = (size_t)a->n_head_kv * hd; /* elements per cache position */
    int64_t n_kv = a->pos0 + tok + 1;       /* causal: sees 0 .. pos0 + tok */
    const float *q = a->q + ((size_t)tok * a->n_head + head) * hd;
    float *out = a->out + ((size_t)tok * a->n_head + head) * hd;
    if (a->kv_type == MTPLX_TYPE_Q8_0) {
        scores_q8_0_ref(a, q, kvh, n_kv, scores);
    } else {
        for (int64_t j = 0; j < n_kv; j++) {
            float s = 0;
            for (int d = 0; d < hd; d++) s += q[d] * kv_at(a->kv_type, a->k, j * row + (size_t)kvh * hd + d);
            scores[j] = s * a->scale;
        }
    }
    softmax_ref(scores, n_kv);
    for (int d = 0; d < hd; d++) out[d] = 0;
    for (int64_t j = 0; j < n_kv; j++)
        for (int d = 0; d < hd; d++)
            out[d] += scores[j] * kv_at(a->kv_type, a->v, j * row + (size_t)kvh * hd + d);
}

static void attn_group_ref(const attn_args *a, int kvh, int h0, int h1, int64_t t0, int64_t t1, float *scores,
                           size_t stride) {
    (void)kvh;
    attn_group_each(attn_ref, a, h0, h1, t0, t1, scores, stride);
}

const kernel_ops mtplx_kernels_ref_ops = {
    .name = "ref",
    .mm =
        {
            [MTPLX_TYPE_F32] = mm_ref,
            [MTPLX_TYPE_F16] = mm_ref,
            [MTPLX_TYPE_BF16] = mm_ref,
            [MTPLX_TYPE_Q8_0] = mm_ref,
            [MTPLX_TYPE_Q4_0] = mm_ref,
            [MTPLX_TYPE_Q4_K] = mm_ref,
            [MTPLX_TYPE_Q6_K] = mm_ref,
        },
    .mm_prep =
        {
            [MTPLX_TYPE_Q8_0] = mtplx_mm_prep_q8_0_ref,
            [MTPLX_TYPE_Q4_0] = mtplx_mm_prep_q4_0_ref,
            [MTPLX_TYPE_Q4_K] = mtplx_mm_prep_q4_K_ref,
        },
    .quant_q8_0 = mtplx_quant_q8_0_ref,
    .quant_q8_K = mtplx_quant_q8_K_ref,
    .rmsnorm_row = rmsnorm_row_ref,
    .silu_mul = silu_mul_ref,
    .add = add_ref,
    .softmax = softmax_ref,
    .log_sum_exp = log_sum_exp_ref,
    .argmax = argmax_ref,
    .exp_scaled = exp_scaled_ref,
    .f32_to_f16 = f32_to_f16_ref,
    .attn = attn_ref,
    .attn_group = attn_group_ref,
};
