/* repack.c: the prepared weight layout (kernels_impl.h, "prepared weights"):
 * plain GGML rows to 8-row interleaved tiles, once at model load. Pure byte
 * shuffling, no arithmetic, so a prepared matmul sees exactly the plain
 * weights. Types without a prepared layout report size 0. */
#include "kernels/kernels_impl.h"

static size_t tile_size(int type) {
    switch (type) {
    case MTPLX_TYPE_Q8_0: return sizeof(tile_q8_0);
    case MTPLX_TYPE_Q4_0: return sizeof(tile_q4_0);
    case MTPLX_TYPE_Q4_K: return sizeof(tile_q4_K);
    default: return 0;
    }
}

size_t mtplx_weight_prepared_size(int type, int64_t m, int64_t k) {
    size_t ts = tile_size(type);
    int64_t bs = ts ? mtplx_type_info(type)->block_size : 1;
    if (!ts || m <= 0 || k <= 0 || k % bs) return 0;
    return (size_t)((m + PREP_ROWS - 1) / PREP_ROWS) * (size_t)(k / bs) * ts;
}

/* One tile from the 8 rows' blocks b (rows[i] NULL past m: zeros). */
static void tile_q8_0_from(const block_q8_0 *const rows[PREP_ROWS], int64_t b, tile_q8_0 *t) {
    for (int i = 0; i < PREP_ROWS; i++) {
        const block_q8_0 *w = rows[i] ? rows[i] + b : NULL;
        t->d[i] = w ? w->d : 0;
        for (int c = 0; c < 8; c++)
            for (int e = 0; e < 4; e++) t->qs[c][4 * i + e] = w ? (int8_t)w->qs[4 * c + e] : 0;
    }
}

static void tile_q4_0_from(const block_q4_0 *const rows[PREP_ROWS], int64_t b, tile_q4_0 *t) {
    for (int i = 0; i < PREP_ROWS; i++) {
        const block_q4_0 *w = rows[i] ? rows[i] + b : NULL;
        t->d[i] = w ? w->d : 0;
        /* a zero row stores nibbles 8 (value 0) so its sums stay exact zeros */
        for (int c = 0; c < 4; c++)
            for (int e = 0; e < 4; e++) t->qs[c][4 * i + e] = w ? w->qs[4 * c + e] : 0x88;
    }
}

static void tile_q4_K_from(const block_q4_K *const rows[PREP_ROWS], int64_t b, tile_q4_K *t) {
    for (int i = 0; i < PREP_ROWS; i++) {
        const block_q4_K *w = rows[i] ? rows[i] + b : NULL;
        t->d[i] = w ? w->d : 0;
        t->dmin[i] = w ? w->dmin : 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc = 0, mn = 0;
            if (w) mtplx_q4k_scale_min(j, w->scales, &sc, &mn);
            t->sc[j][i] = sc;
            t->mn[j / 2][2 * i + j % 2] = mn;
        }
        for (int j = 0; j < 4; j++)
            for (int c = 0; c < 8; c++)
                for (int e = 0; e < 4; e++)
                    t->qs[j][c][4 * i + e] = w ? w->qs[32 * j + 4 * c + e] : 0;
    }
}

void mtplx_weight_prepare(int type, const void *W, int64_t m, int64_t k, void *dst) {
    size_t ts = tile_size(type), rs = mtplx_row_size(type, k);
    MTPLX_ASSERT(ts && rs && dst);
    const int64_t nb = k / mtplx_type_info(type)->block_size;
    uint8_t *out = dst;
    for (int64_t g = 0; g < (m + PREP_ROWS - 1) / PREP_ROWS; g++) {
        const void *rows[PREP_ROWS];
        for (int i = 0; i < PREP_ROWS; i++) {
            int64_t r = g * PREP_ROWS + i;
            rows[i] = r < m ? (const uint8_t *)W + (size_t)r * rs : NULL;
        }
        for (int64_t b = 0; b < nb; b++, out += ts) {
            if (type == MTPLX_TYPE_Q8_0)
                tile_q8_0_from((const block_q8_0 *const *)rows, b, (tile_q8_0 *)out);
            else if (type == MTPLX_TYPE_Q4_0)
                tile_q4_0_from((const block_q4_0 *const *)rows, b, (tile_q4_0 *)out);
            else
                tile_q4_K_from((const block_q4_K *const *)rows, b, (tile_q4_K *)out);
        }
    }
}
