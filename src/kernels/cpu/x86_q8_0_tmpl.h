/* x86_q8_0_tmpl.h: the Q8_0 and Q4_0 matmul kernels, written once for every
 * x86 file. The includer defines DOT_U8_S8(u, s): the 8 int32 sums of 4
 * products of unsigned bytes u with signed bytes s (AVX2: maddubs + madd;
 * AVX-512 VNNI: one vpdpbusd), and names the two entry points through
 * MM_Q8_0_NAME / MM_Q4_0_NAME.
 *
 * Per weight block (32 values): unpack to signed bytes once, take |w| once,
 * then for each of nt tokens: sign(x, w), one dot, scale, accumulate. The
 * weight block is read from memory once for all tokens. */
#include "kernels/cpu/x86_simd.h"

AI __m256i unpack_q4_0(const block_q4_0 *b) {
    __m128i raw = _mm_loadu_si128((const __m128i *)b->qs);
    __m128i m4 = _mm_set1_epi8(0x0F);
    __m128i lo = _mm_and_si128(raw, m4), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), m4);
    return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}

/* Weight block b of one row against nt tokens, accumulated into acc[t];
 * sc[8 t] is the block's combined scale dw * dx for token t. */
AI void q8_0_block(const uint8_t *wrow, int64_t b, const int8_t *xq, int64_t k, const float *sc,
                   const int nt, const int q4, __m256 *acc) {
    __m256i w;
    if (q4)
        w = unpack_q4_0((const block_q4_0 *)wrow + b);
    else
        w = _mm256_loadu_si256((const __m256i *)((const block_q8_0 *)wrow + b)->qs);
    const __m256i aw = _mm256_abs_epi8(w);
    UNROLL
    for (int t = 0; t < nt; t++) {
        __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + t * k + b * QK8_0));
        __m256i p = DOT_U8_S8(aw, _mm256_sign_epi8(xv, w));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(sc + 8 * t), acc[t]);
    }
}

/* One weight row r against tokens t0 .. t0+nt-1. q4 selects the weight layout.
 * Blocks go in chunks of 8 so that the scale products dw * dx are one vector
 * multiply per token per chunk: the multiply ports, which the integer dot
 * products also need, are the bottleneck once several tokens share a block. */
AI void q8_0_row(const mm_args *a, int64_t r, int64_t t0, const int nt, const int q4) {
    const int64_t k = a->k, nb = k / QK8_0;
    const uint8_t *wrow = a->W + (size_t)r * a->w_stride;
    const size_t bsz = q4 ? sizeof(block_q4_0) : sizeof(block_q8_0);
    const int8_t *xq = a->xq + t0 * k;
    const float *xd = a->xd + t0 * nb;
    /* two accumulator sets hide the FMA latency when few tokens share a block */
    __m256 acc0[NT_MAX], acc1[NT_MAX];
    UNROLL
    for (int t = 0; t < nt; t++) acc0[t] = acc1[t] = _mm256_setzero_ps();
    float sc[NT_MAX * 8] __attribute__((aligned(32)));
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
        const int cnt = nb - b0 < 8 ? (int)(nb - b0) : 8;
        /* d is the first field of both block types */
#define D_AT(i) (i < cnt ? *(const uint16_t *)(wrow + (size_t)(b0 + i) * bsz) : 0)
        const __m256 dw8 = _mm256_cvtph_ps(_mm_setr_epi16(
            (short)D_AT(0), (short)D_AT(1), (short)D_AT(2), (short)D_AT(3), (short)D_AT(4),
            (short)D_AT(5), (short)D_AT(6), (short)D_AT(7)));
#undef D_AT
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt),
                                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        UNROLL
        for (int t = 0; t < nt; t++)
            _mm256_store_ps(sc + 8 * t, _mm256_mul_ps(dw8, _mm256_maskload_ps(xd + t * nb + b0, mask)));
        if (cnt == 8) {
            UNROLL
            for (int i = 0; i < 8; i += 2) {
                q8_0_block(wrow, b0 + i, xq, k, sc + i, nt, q4, acc0);
                q8_0_block(wrow, b0 + i + 1, xq, k, sc + i + 1, nt, q4, nt <= 2 ? acc1 : acc0);
            }
        } else {
            for (int i = 0; i < cnt; i++) q8_0_block(wrow, b0 + i, xq, k, sc + i, nt, q4, acc0);
        }
    }
    UNROLL
    for (int t = 0; t < nt; t++) acc0[t] = _mm256_add_ps(acc0[t], acc1[t]);
    store_results(a, r, t0, nt, acc0);
}

#define Q8_0_ROW(a, r, t0, nt) q8_0_row(a, r, t0, nt, 0)
#define Q4_0_ROW(a, r, t0, nt) q8_0_row(a, r, t0, nt, 1)

static void MM_Q8_0_NAME(const mm_args *a, int64_t r0, int64_t r1) {
    FOR_ROWS_AND_TOKENS(Q8_0_ROW, a, r0, r1);
}

static void MM_Q4_0_NAME(const mm_args *a, int64_t r0, int64_t r1) {
    FOR_ROWS_AND_TOKENS(Q4_0_ROW, a, r0, r1);
}
