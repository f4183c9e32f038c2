/* x86_prep_tmpl.h: AVX2 matmul on prepared weights (8-row interleaved tiles,
 * kernels_impl.h). Included by x86_avx2.c.
 *
 * A 32-bit broadcast of 4 activation bytes meets 4 weights of each of the 8
 * rows of a tile register, so the int32 lanes of a block's dot are the 8 rows'
 * sums: per block and token one conversion and one FMA serve 8 rows, and no
 * horizontal sums remain. Where the weights are 4-bit (at most 15), 8
 * maddubs results add up in int16 without overflow (8 * 2 * 15 * 127 < 2^15)
 * before one madd widens them.
 * Per token, the arithmetic and its order are those of ref/repack_ref.c
 * whatever the number of tokens, so results equal the reference bit for bit
 * and do not depend on the batch. */

/* Weight bytes of row groups kept hot while each group of NT_MAX tokens
 * passes over them (prefill and n > NT_MAX). */
#define PREP_GROUP_BYTES (24 * 1024)

/* Pins v in a register at this point. Without it GCC reassociates the long
 * integer add chains below into a tree: it computes every product of a block
 * first, spills them to the stack and sums them afterwards, which costs more
 * than the products themselves once several tokens share a tile. */
#define KEEP(v) __asm__("" : "+x"(v))

/* Tiles are read as one stream; a software prefetch this many bytes ahead,
 * one per 64-72 bytes of tiles, keeps more lines in flight than the hardware
 * prefetcher alone (measured on a 0.6B shape, 1 thread, Zen 3: decode +15-30%
 * on Q8_0 / Q4_K, and n = 4 verification -20%). Prefetching past the end of
 * the weights is harmless: a prefetch never faults. */
#define PREP_PREFETCH_BYTES 2048
AI void pf(const void *p) { _mm_prefetch((const char *)p + PREP_PREFETCH_BYTES, _MM_HINT_T0); }

AI __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* y[t0 + t][8g .. 8g+7] = acc[t], rows past m dropped. */
AI void store_group(const mm_args *a, int64_t g, int64_t t0, const int nt, const __m256 *acc) {
    const int64_t r = g * PREP_ROWS;
    if (r + PREP_ROWS <= a->m) {
        UNROLL
        for (int t = 0; t < nt; t++) _mm256_storeu_ps(a->y + (t0 + t) * a->m + r, acc[t]);
        return;
    }
    for (int t = 0; t < nt; t++) {
        float v[PREP_ROWS];
        _mm256_storeu_ps(v, acc[t]);
        for (int64_t i = 0; r + i < a->m; i++) a->y[(t0 + t) * a->m + r + i] = v[i];
    }
}

AI void prep_q8_0_group(const mm_args *a, const tile_q8_0 *tl, int64_t g, int64_t t0,
                        const int nt) {
    const int64_t k = a->k, nb = k / QK8_0;
    const int8_t *xq = a->xq + t0 * k;
    const float *xd = a->xd + t0 * nb;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[NT_MAX];
    UNROLL
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const tile_q8_0 *T = tl + b;
        __m256i s[NT_MAX];
        UNROLL
        for (int t = 0; t < nt; t++) s[t] = _mm256_setzero_si256();
        UNROLL
        for (int c = 0; c < 8; c++) {
            if (c % 2 == 0) pf(T->qs[c]);
            const __m256i w = _mm256_loadu_si256((const __m256i *)T->qs[c]);
            const __m256i aw = _mm256_abs_epi8(w);
            UNROLL
            for (int t = 0; t < nt; t++) {
                __m256i xv = _mm256_sign_epi8(bcast4(xq + t * k + b * QK8_0 + 4 * c), w);
                s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xv), ones));
                KEEP(s[t]);
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)T->d));
        UNROLL
        for (int t = 0; t < nt; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]),
                                     _mm256_mul_ps(dw, _mm256_set1_ps(xd[t * nb + b])), acc[t]);
    }
    store_group(a, g, t0, nt, acc);
}

AI void prep_q4_0_group(const mm_args *a, const tile_q4_0 *tl, int64_t g, int64_t t0,
                        const int nt) {
    const int64_t k = a->k, nb = k / QK4_0;
    const int8_t *xq = a->xq + t0 * k;
    const float *xd = a->xd + t0 * nb;
    const int16_t *xb = a->xb + t0 * nb;
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[NT_MAX];
    UNROLL
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const tile_q4_0 *T = tl + b;
        __m256i s[NT_MAX];
        UNROLL
        for (int t = 0; t < nt; t++) s[t] = _mm256_setzero_si256();
        UNROLL
        for (int c = 0; c < 4; c++) {
            if (c % 2 == 0) pf(T->qs[c]);
            const __m256i v = _mm256_loadu_si256((const __m256i *)T->qs[c]);
            const __m256i lo = _mm256_and_si256(v, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            UNROLL
            for (int t = 0; t < nt; t++) {
                const int8_t *x = xq + t * k + b * QK4_0 + 4 * c;
                s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(lo, bcast4(x)));
                s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(hi, bcast4(x + 16)));
                KEEP(s[t]);
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)T->d));
        UNROLL
        for (int t = 0; t < nt; t++) {
            __m256i s32 = _mm256_sub_epi32(_mm256_madd_epi16(s[t], ones),
                                           _mm256_set1_epi32(8 * xb[t * nb + b]));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32),
                                     _mm256_mul_ps(dw, _mm256_set1_ps(xd[t * nb + b])), acc[t]);
        }
    }
    store_group(a, g, t0, nt, acc);
}

/* 8 u8 scales (one per row) as int16 pairs (s, s) in each row's int32 lane. */
AI __m256i scale_pairs(const uint8_t *s) {
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)s));
    return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}

AI void prep_q4_K_group(const mm_args *a, const tile_q4_K *tl, int64_t g, int64_t t0,
                        const int nt) {
    const int64_t k = a->k, nb = k / QK_K;
    const int8_t *xq = a->xq + t0 * k;
    const float *xd = a->xd + t0 * nb;
    const int16_t *xs = a->xs + t0 * (k / 16);
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[NT_MAX];
    UNROLL
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const tile_q4_K *T = tl + b;
        __m256i is[NT_MAX];
        UNROLL
        for (int t = 0; t < nt; t++) is[t] = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            UNROLL
            for (int h = 0; h < 2; h++) { /* low nibbles: sub-block 2j, high: 2j+1 */
                __m256i s[NT_MAX];
                UNROLL
                for (int t = 0; t < nt; t++) s[t] = _mm256_setzero_si256();
                UNROLL
                for (int c = 0; c < 8; c++) {
                    if (h == 0 && c % 2 == 0) pf(T->qs[j][c]);
                    __m256i v = _mm256_loadu_si256((const __m256i *)T->qs[j][c]);
                    v = _mm256_and_si256(h ? _mm256_srli_epi16(v, 4) : v, m4);
                    UNROLL
                    for (int t = 0; t < nt; t++) {
                        s[t] = _mm256_add_epi16(
                            s[t], _mm256_maddubs_epi16(
                                      v, bcast4(xq + t * k + b * QK_K + 64 * j + 32 * h + 4 * c)));
                        KEEP(s[t]);
                    }
                }
                const __m256i sc = scale_pairs(T->sc[2 * j + h]);
                UNROLL
                for (int t = 0; t < nt; t++) is[t] = _mm256_add_epi32(is[t], _mm256_madd_epi16(s[t], sc));
            }
        }
        /* mins: row i takes sum_j min_ij * (sum of the activation's sub-block j) */
        __m256i mn[4];
        UNROLL
        for (int p = 0; p < 4; p++) mn[p] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)T->mn[p]));
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)T->d));
        const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)T->dmin));
        UNROLL
        for (int t = 0; t < nt; t++) {
            /* int16 sums of 32: (b0 b1) (b2 b3) as int32 elements 0, 1; (b4 b5) (b6 b7) as 4, 5 */
            __m256i b32 = _mm256_madd_epi16(
                _mm256_loadu_si256((const __m256i *)(xs + t * (k / 16) + b * 16)), ones);
            __m256i b16 = _mm256_packs_epi32(b32, b32);
            __m256i ms = _mm256_madd_epi16(mn[0], _mm256_permutevar8x32_epi32(b16, _mm256_set1_epi32(0)));
            ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mn[1], _mm256_permutevar8x32_epi32(b16, _mm256_set1_epi32(1))));
            ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mn[2], _mm256_permutevar8x32_epi32(b16, _mm256_set1_epi32(4))));
            ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mn[3], _mm256_permutevar8x32_epi32(b16, _mm256_set1_epi32(5))));
            const __m256 dx = _mm256_set1_ps(xd[t * nb + b]);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t]), _mm256_mul_ps(d, dx), acc[t]);
            acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dmin, dx), acc[t]);
        }
    }
    store_group(a, g, t0, nt, acc);
}

/* pf() keeps PREP_PREFETCH_BYTES ahead of the reads, so the first that many
 * bytes of a call would be demand misses one after another; asking for them
 * all at the start overlaps them (small matrices, 1024 x 1024 Q4_K: ~5% on
 * 1 thread, Zen 3; decode runs ~200 matmuls per token). */
AI void prefetch_head(const void *p) {
    for (int o = 0; o < PREP_PREFETCH_BYTES; o += MTPLX_CACHE_LINE)
        _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* Run GROUP(a, tiles of group g, g, t0, nt) over the groups of rows [r0, r1)
 * and all tokens, NT_MAX tokens at a time over a few groups hot in cache. */
#define FOR_GROUPS_AND_TOKENS(GROUP, TILE, a, r0, r1)                                        \
    do {                                                                                     \
        const int64_t nb_ = (a)->k / mtplx_type_info((a)->type)->block_size;                 \
        const TILE *tiles_ = (const TILE *)(a)->W;                                           \
        const int64_t g0_ = (r0) / PREP_ROWS, g1_ = ((r1) + PREP_ROWS - 1) / PREP_ROWS;      \
        int64_t gb_ = PREP_GROUP_BYTES / ((int64_t)sizeof(TILE) * nb_);                      \
        if (gb_ < 1) gb_ = 1;                                                                \
        prefetch_head(tiles_ + g0_ * nb_);                                                   \
        for (int64_t gg_ = g0_; gg_ < g1_; gg_ += gb_) {                                     \
            const int64_t ge_ = gg_ + gb_ < g1_ ? gg_ + gb_ : g1_;                           \
            for (int64_t t0_ = 0; t0_ < (a)->n; t0_ += NT_MAX) {                             \
                const int64_t left_ = (a)->n - t0_;                                          \
                for (int64_t g_ = gg_; g_ < ge_; g_++) {                                     \
                    const TILE *tg_ = tiles_ + g_ * nb_;                                     \
                    switch (left_ >= NT_MAX ? NT_MAX : left_) {                              \
                    case 4: GROUP(a, tg_, g_, t0_, 4); break;                                \
                    case 3: GROUP(a, tg_, g_, t0_, 3); break;                                \
                    case 2: GROUP(a, tg_, g_, t0_, 2); break;                                \
                    default: GROUP(a, tg_, g_, t0_, 1); break;                               \
                    }                                                                        \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    } while (0)

static void mm_prep_q8_0_avx2(const mm_args *a, int64_t r0, int64_t r1) {
    FOR_GROUPS_AND_TOKENS(prep_q8_0_group, tile_q8_0, a, r0, r1);
}
static void mm_prep_q4_0_avx2(const mm_args *a, int64_t r0, int64_t r1) {
    FOR_GROUPS_AND_TOKENS(prep_q4_0_group, tile_q4_0, a, r0, r1);
}
static void mm_prep_q4_K_avx2(const mm_args *a, int64_t r0, int64_t r1) {
    FOR_GROUPS_AND_TOKENS(prep_q4_K_group, tile_q4_K, a, r0, r1);
}
