/* x86_float_tmpl.h: AVX2 matmul of F32 / F16 / BF16 weights against f32
 * activations, for any number of tokens. Included by x86_avx2.c.
 *
 * One tile kernel does the arithmetic: FR rows x FT tokens of 8-lane dot
 * products over one block of FK values of k, 12 accumulators in registers,
 * so that one step loads 3 weight vectors and 4 activation vectors for 12
 * FMAs (a dot product per (row, token) alone needs a load per FMA, which
 * held prefill to half the FMA peak). Two loop orders call it:
 *  - few tokens (decode, verification): a tile walks the full rows, three
 *    weight streams read from memory once for up to FT tokens;
 *  - many tokens (prefill): blocks of rows and one k block at a time; the
 *    weights' slice is copied to f32 (FLOAT_PACK_ROWS x FK) and each group
 *    of 4 tokens' slice of x (4 KiB, in L1) beside it, so that the rows,
 *    often 4 KiB apart in memory, do not fight over the same L1 sets.
 * Both give every output the same arithmetic: per k block, 8 lane sums in k
 * order, reduced by hsum8x4's tree, then the k % 8 tail by fmaf; block sums
 * added to 0 in block order. So a token's result never depends on n, on the
 * rows around it or on the threads (batch invariance, as the embedder and
 * MTP verification need). */

#define FR 3    /* rows per tile */
#define FT 4    /* tokens per tile */
#define FK 256  /* k per block */
/* Prefill order from this many tokens on (below, e.g. n = 8 verification,
 * two passes over rows hot in cache measured faster). */
#define FLOAT_GEMM_MIN_N 16
/* Prefill: rows of W copied per k block (48 KiB of stack, in L2): each copy
 * of a token group's x then serves 16 tiles. Against 24 rows: BF16 prefill
 * +15% (61 vs 53 tok/s, 0.6B, 1 thread), F32 the same within noise. */
#define FLOAT_PACK_ROWS 48

AI __m256 load_w8(const int type, const void *w, int64_t j) {
    if (type == MTPLX_TYPE_F32) return _mm256_loadu_ps((const float *)w + j);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + j));
    if (type == MTPLX_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

AI float load_w1(const int type, const void *w, int64_t j) {
    if (type == MTPLX_TYPE_F32) return ((const float *)w)[j];
    uint16_t h = ((const uint16_t *)w)[j];
    return type == MTPLX_TYPE_F16 ? f16_to_f32(h) : mtplx_bf16_to_fp32(h);
}

/* s[i][t] = the block sum over kc values of weight row i (w + i * ws bytes,
 * of type) and token t (x + t * xs floats), for nr rows and nt tokens. */
AI void float_tile(const int type, const uint8_t *w, size_t ws, const float *x, int64_t xs,
                   const int nr, const int nt, int kc, const char *pf, float s[FR][FT]) {
    const int64_t pf_step = 8 * nr * (type == MTPLX_TYPE_F32 ? 4 : 2);
    __m256 acc[FR][FT];
    UNROLL
    for (int i = 0; i < nr; i++) {
        UNROLL
        for (int t = 0; t < nt; t++) acc[i][t] = _mm256_setzero_ps();
    }
    const int end = kc & ~7;
    for (int j = 0; j < end; j += 8, pf += pf_step) {
        if (type != MTPLX_TYPE_F32) _mm_prefetch(pf, _MM_HINT_T0);
        __m256 wv[FR];
        UNROLL
        for (int i = 0; i < nr; i++) wv[i] = load_w8(type, w + i * ws, j);
        UNROLL
        for (int t = 0; t < nt; t++) {
            const __m256 xv = _mm256_loadu_ps(x + t * xs + j);
            UNROLL
            for (int i = 0; i < nr; i++) acc[i][t] = _mm256_fmadd_ps(wv[i], xv, acc[i][t]);
        }
    }
    UNROLL
    for (int i = 0; i < nr; i++) {
        const __m256 z = _mm256_setzero_ps();
        float v[4];
        _mm_storeu_ps(v, hsum8x4(acc[i][0], nt > 1 ? acc[i][1] : z, nt > 2 ? acc[i][2] : z,
                                 nt > 3 ? acc[i][3] : z));
        UNROLL
        for (int t = 0; t < nt; t++) s[i][t] = v[t];
    }
    for (int j = end; j < kc; j++) /* k % 8 tail, last block only */
        for (int i = 0; i < nr; i++) {
            const float wj = load_w1(type, w + i * ws, j);
            for (int t = 0; t < nt; t++) s[i][t] = fmaf(wj, x[t * xs + j], s[i][t]);
        }
}

/* Calls F(nr, nt) with both as compile-time constants (nr <= FR, nt <= FT),
 * so that the tile's loops unroll into registers. */
#define FLOAT_TILE_SWITCH(F, nr, nt)                                                         \
    switch ((nr) * 8 + (nt)) {                                                               \
    case 8 * 3 + 4: F(3, 4); break;                                                          \
    case 8 * 3 + 3: F(3, 3); break;                                                          \
    case 8 * 3 + 2: F(3, 2); break;                                                          \
    case 8 * 3 + 1: F(3, 1); break;                                                          \
    case 8 * 2 + 4: F(2, 4); break;                                                          \
    case 8 * 2 + 3: F(2, 3); break;                                                          \
    case 8 * 2 + 2: F(2, 2); break;                                                          \
    case 8 * 2 + 1: F(2, 1); break;                                                          \
    case 8 * 1 + 4: F(1, 4); break;                                                          \
    case 8 * 1 + 3: F(1, 3); break;                                                          \
    case 8 * 1 + 2: F(1, 2); break;                                                          \
    default: F(1, 1); break;                                                                 \
    }

/* Few tokens: for each tile, all k blocks in order, sums kept here. */
AI void float_rows_tile(const mm_args *a, const int type, int64_t r, const int nr, int64_t t0,
                        const int nt) {
    const size_t es = type == MTPLX_TYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    /* 16-bit rows (2 KiB at k = 1024) are short streams that the hardware
     * prefetcher picks up late: the next tile's rows, which follow these in
     * memory, are prefetched a line per step (BF16 decode +15% on a 0.6B
     * shape, 1 thread, Zen 3). F32 rows are long enough, and there the
     * same prefetch measured 10% slower: float_tile skips it for F32. */
    const char *pf = (const char *)a->W + (size_t)(r + nr) * a->w_stride;
    float y[FR][FT] = {{0}}, s[FR][FT];
    for (int64_t k0 = 0; k0 < a->k; k0 += FK) {
        float_tile(type, a->W + (size_t)r * a->w_stride + (size_t)k0 * es, a->w_stride,
                   a->x + t0 * a->k + k0, a->k, nr, nt, a->k - k0 < FK ? (int)(a->k - k0) : FK,
                   pf + (size_t)k0 * es * (size_t)nr, s);
        UNROLL
        for (int i = 0; i < nr; i++) {
            UNROLL
            for (int t = 0; t < nt; t++) y[i][t] += s[i][t];
        }
    }
    UNROLL
    for (int i = 0; i < nr; i++) {
        UNROLL
        for (int t = 0; t < nt; t++) a->y[(t0 + t) * a->m + r + i] = y[i][t];
    }
}

AI void float_few(const mm_args *a, int64_t r0, int64_t r1, const int type) {
    const int64_t rb = row_block(a->w_stride);
    for (int64_t rr = r0; rr < r1; rr += rb) {
        const int64_t re = rr + rb < r1 ? rr + rb : r1;
        for (int64_t t0 = 0; t0 < a->n; t0 += FT) {
            const int nt = a->n - t0 < FT ? (int)(a->n - t0) : FT;
            for (int64_t r = rr; r < re; r += FR) {
                const int nr = re - r < FR ? (int)(re - r) : FR;
#define FEW(NR, NT) float_rows_tile(a, type, r, NR, t0, NT)
                FLOAT_TILE_SWITCH(FEW, nr, nt)
#undef FEW
            }
        }
    }
}

/* One k block of a tile from the packed slice wp ([rows][FK] f32, row i of
 * the tile at wp + i * FK), added into y (zeroed before the first block). */
AI void float_block_tile(const mm_args *a, const float *wp, const float *xp, int64_t r,
                         const int nr, int64_t t0, const int nt, int kc) {
    float s[FR][FT];
    float_tile(MTPLX_TYPE_F32, (const uint8_t *)wp, FK * sizeof(float), xp, FK, nr, nt, kc, NULL, s);
    UNROLL
    for (int i = 0; i < nr; i++) {
        UNROLL
        for (int t = 0; t < nt; t++) a->y[(t0 + t) * a->m + r + i] += s[i][t];
    }
}

/* wp[i][j] = W[r + i][k0 + j] as f32: a contiguous copy of the slice (see
 * the top), which also converts BF16 / F16 once rather than once per token
 * group. The conversion is exact, so the arithmetic is float_few's. */
AI void float_pack(const mm_args *a, const int type, int64_t r, int rows, int64_t k0, int kc,
                   float *wp) {
    const size_t es = type == MTPLX_TYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    for (int i = 0; i < rows; i++) {
        const uint8_t *w = a->W + (size_t)(r + i) * a->w_stride + (size_t)k0 * es;
        int j = 0;
        for (; j + 8 <= kc; j += 8) _mm256_store_ps(wp + i * FK + j, load_w8(type, w, j));
        for (; j < kc; j++) wp[i * FK + j] = load_w1(type, w, j);
    }
}

AI void float_many(const mm_args *a, int64_t r0, int64_t r1, const int type) {
    float wp[FLOAT_PACK_ROWS * FK] __attribute__((aligned(32)));
    float xp[FT * FK] __attribute__((aligned(32)));
    for (int64_t t = 0; t < a->n; t++)
        memset(a->y + t * a->m + r0, 0, (size_t)(r1 - r0) * sizeof(float));
    for (int64_t rr = r0; rr < r1; rr += FLOAT_PACK_ROWS) {
        const int64_t re = rr + FLOAT_PACK_ROWS < r1 ? rr + FLOAT_PACK_ROWS : r1;
        for (int64_t k0 = 0; k0 < a->k; k0 += FK) {
            const int kc = a->k - k0 < FK ? (int)(a->k - k0) : FK;
            float_pack(a, type, rr, (int)(re - rr), k0, kc, wp);
            for (int64_t t0 = 0; t0 < a->n; t0 += FT) {
                const int nt = a->n - t0 < FT ? (int)(a->n - t0) : FT;
                for (int t = 0; t < nt; t++)
                    memcpy(xp + t * FK, a->x + (t0 + t) * a->k + k0, (size_t)kc * sizeof(float));
                for (int64_t r = rr; r < re; r += FR) {
                    const int nr = re - r < FR ? (int)(re - r) : FR;
#define MANY(NR, NT) float_block_tile(a, wp + (r - rr) * FK, xp, r, NR, t0, NT, kc)
                    FLOAT_TILE_SWITCH(MANY, nr, nt)
#undef MANY
                }
            }
        }
    }
}

AI void float_mm(const mm_args *a, int64_t r0, int64_t r1, const int type) {
    if (a->n >= FLOAT_GEMM_MIN_N) float_many(a, r0, r1, type);
    else float_few(a, r0, r1, type);
}
