/* repack_ref.c: scalar matmul on prepared (8-row interleaved) weights, the
 * oracle for the SIMD prepared kernels. The arithmetic order is the one the
 * SIMD code uses per row: exact integer block sums, then per block one
 * fmaf(sum, dw * dx, acc) in block order, so SIMD results equal these bit for
 * bit. Each token's result depends only on its own activations (batch
 * invariance). */
#include "kernels/kernels_impl.h"

typedef float (*row_fn)(const mm_args *a, const uint8_t *group, int i, int64_t t);

static float q8_0_row(const mm_args *a, const uint8_t *group, int i, int64_t t) {
    const int64_t nb = a->k / QK8_0;
    const tile_q8_0 *tl = (const tile_q8_0 *)group;
    const int8_t *x = a->xq + t * a->k;
    float acc = 0;
    for (int64_t b = 0; b < nb; b++) {
        int32_t s = 0;
        for (int c = 0; c < 8; c++)
            for (int e = 0; e < 4; e++) s += tl[b].qs[c][4 * i + e] * x[b * QK8_0 + 4 * c + e];
        float sc = mtplx_fp16_to_fp32(tl[b].d[i]) * a->xd[t * nb + b];
        acc = fmaf((float)s, sc, acc);
    }
    return acc;
}

static float q4_0_row(const mm_args *a, const uint8_t *group, int i, int64_t t) {
    const int64_t nb = a->k / QK4_0;
    const tile_q4_0 *tl = (const tile_q4_0 *)group;
    const int8_t *x = a->xq + t * a->k;
    float acc = 0;
    for (int64_t b = 0; b < nb; b++) {
        int32_t s = 0;
        for (int c = 0; c < 4; c++)
            for (int e = 0; e < 4; e++) {
                uint8_t q = tl[b].qs[c][4 * i + e];
                s += (q & 15) * x[b * QK4_0 + 4 * c + e] + (q >> 4) * x[b * QK4_0 + 16 + 4 * c + e];
            }
        s -= 8 * a->xb[t * nb + b]; /* nibbles are value + 8 */
        float sc = mtplx_fp16_to_fp32(tl[b].d[i]) * a->xd[t * nb + b];
        acc = fmaf((float)s, sc, acc);
    }
    return acc;
}

static float q4_K_row(const mm_args *a, const uint8_t *group, int i, int64_t t) {
    const int64_t nb = a->k / QK_K;
    const tile_q4_K *tl = (const tile_q4_K *)group;
    const int8_t *x = a->xq + t * a->k;
    const int16_t *xs = a->xs + t * (a->k / 16);
    float acc = 0;
    for (int64_t b = 0; b < nb; b++) {
        int32_t s = 0, ms = 0;
        for (int j = 0; j < 4; j++) {
            int32_t lo = 0, hi = 0;
            for (int c = 0; c < 8; c++)
                for (int e = 0; e < 4; e++) {
                    uint8_t q = tl[b].qs[j][c][4 * i + e];
                    lo += (q & 15) * x[b * QK_K + 64 * j + 4 * c + e];
                    hi += (q >> 4) * x[b * QK_K + 64 * j + 32 + 4 * c + e];
                }
            s += tl[b].sc[2 * j][i] * lo + tl[b].sc[2 * j + 1][i] * hi;
        }
        for (int j = 0; j < 8; j++)
            ms += tl[b].mn[j / 2][2 * i + j % 2] * (xs[b * 16 + 2 * j] + xs[b * 16 + 2 * j + 1]);
        const float dx = a->xd[t * nb + b];
        acc = fmaf((float)s, mtplx_fp16_to_fp32(tl[b].d[i]) * dx, acc);
        acc = fmaf(-(float)ms, mtplx_fp16_to_fp32(tl[b].dmin[i]) * dx, acc);
    }
    return acc;
}

static void prep_rows(const mm_args *a, int64_t r0, int64_t r1, size_t tile, row_fn f) {
    const int64_t nb = a->k / mtplx_type_info(a->type)->block_size;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *group = a->W + (size_t)(r / PREP_ROWS) * (size_t)nb * tile;
        for (int64_t t = 0; t < a->n; t++) a->y[t * a->m + r] = f(a, group, (int)(r % PREP_ROWS), t);
    }
}

void mtplx_mm_prep_q8_0_ref(const mm_args *a, int64_t r0, int64_t r1) {
    prep_rows(a, r0, r1, sizeof(tile_q8_0), q8_0_row);
}
void mtplx_mm_prep_q4_0_ref(const mm_args *a, int64_t r0, int64_t r1) {
    prep_rows(a, r0, r1, sizeof(tile_q4_0), q4_0_row);
}
void mtplx_mm_prep_q4_K_ref(const mm_args *a, int64_t r0, int64_t r1) {
    prep_rows(a, r0, r1, sizeof(tile_q4_K), q4_K_row);
}
