/* dispatch.c: the public kernel entry points. Picks a variant (ref, avx2,
 * avx512) once from CPU features or MTPLX_KERNELS, quantizes matmul
 * activations into the caller's scratch, and splits work over the thread pool.
 * The arithmetic itself lives in ref/ and cpu/. */
#include "kernels/kernels_impl.h"

#include <pthread.h>

/* Below this many activation values, quantizing on the calling thread is
 * cheaper than waking the pool. */
#define QUANT_PARALLEL_MIN 16384
/* Row splits are multiples of this, so that threads never write the same
 * cache line of y (16 floats = 64 bytes) for rows that are line aligned. */
#define ROW_ALIGN (MTPLX_CACHE_LINE / (int64_t)sizeof(float))

static kernel_ops ops_table;
static const kernel_ops *ops_cur;
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;

static const kernel_ops *variant(const char *isa) {
    const mtplx_cpu *c = mtplx_cpu_features();
#if defined(__x86_64__)
    bool has_avx2 = c->avx2 && c->fma && c->f16c;
    if (!strcmp(isa, "avx2")) return has_avx2 ? &mtplx_kernels_avx2_ops : NULL;
    if (!strcmp(isa, "avx512"))
        return has_avx2 && c->avx512f && c->avx512bw && c->avx512vl && c->avx512vnni
                   ? &mtplx_kernels_avx512_ops
                   : NULL;
#else
    (void)c;
#endif
    if (!strcmp(isa, "ref")) return &mtplx_kernels_ref_ops;
    return NULL;
}

/* Copy v, filling its NULL entries from the simpler variants. */
static void install(const kernel_ops *v) {
    const kernel_ops *chain[3] = {v, NULL, &mtplx_kernels_ref_ops};
#if defined(__x86_64__)
    if (v == &mtplx_kernels_avx512_ops) chain[1] = &mtplx_kernels_avx2_ops;
#endif
    kernel_ops t = *v;
    for (int i = 1; i < 3; i++) {
        const kernel_ops *f = chain[i];
        if (!f) continue;
        for (int ty = 0; ty < MTPLX_TYPE_COUNT; ty++)
            if (!t.mm[ty]) t.mm[ty] = f->mm[ty];
        for (int ty = 0; ty < MTPLX_TYPE_COUNT; ty++)
            if (!t.mm_prep[ty]) t.mm_prep[ty] = f->mm_prep[ty];
#define FILL(field)                                                                          \
    if (!t.field) t.field = f->field
        FILL(quant_q8_0);
        FILL(quant_q8_K);
        FILL(rmsnorm_row);
        FILL(silu_mul);
        FILL(add);
        FILL(softmax);
        FILL(log_sum_exp);
        FILL(exp_scaled);
        FILL(argmax);
        FILL(f32_to_f16);
        FILL(attn);
        FILL(attn_group);
#undef FILL
    }
    ops_table = t;
    ops_cur = &ops_table;
}

static void init_ops(void) {
    const char *env = getenv("MTPLX_KERNELS");
    const kernel_ops *v = env && *env ? variant(env) : NULL;
    if (env && *env && !v) mtplx_log(MTPLX_LOG_WARN, "MTPLX_KERNELS=%s: not available here", env);
    /* AVX2 first, AVX-512 on request (MTPLX_KERNELS=avx512): on a Sapphire-
     * Rapids-class Xeon (the H200 host, 2026-12-01, 1 thread, Qwen3-0.6B
     * shapes) the AVX2 kernels, tuned since, were faster for every type:
     * decode Q4_K 27.1 vs 24.8 tok/s, Q8_0 16.5 vs 15.6, BF16 7.8 vs 6.2, and
     * the n=4 verify 1.21 vs 1.42 (Q4_K), 1.16 vs 1.36 (BF16); both pass
     * test_kernels there. */
    if (!v) v = variant("avx2");
    if (!v) v = variant("avx512");
    if (!v) v = &mtplx_kernels_ref_ops;
    install(v);
}

const kernel_ops *mtplx_kernels_ops(void) {
    pthread_once(&ops_once, init_ops);
    return ops_cur;
}

const char *mtplx_kernels_isa(void) { return mtplx_kernels_ops()->name; }

bool mtplx_kernels_force(const char *isa) {
    mtplx_kernels_ops();
    const kernel_ops *v = isa ? variant(isa) : NULL;
    if (!v) return false;
    install(v);
    return true;
}

/* ---- matmul ---- */
static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Scratch planes for n tokens of k activations (see kernels_impl.h). */
typedef struct act_layout {
    size_t q_off, d_off, s_off, b_off, total;
} act_layout;

static act_layout layout_for(int partner, int64_t k, int64_t n) {
    act_layout L = {0};
    if (partner == MTPLX_TYPE_F32) {
        L.total = MTPLX_CACHE_LINE;
        return L;
    }
    int64_t bs = partner == MTPLX_TYPE_Q8_0 ? QK8_0 : QK_K;
    L.q_off = 0;
    L.d_off = round_up((size_t)(n * k), MTPLX_CACHE_LINE);
    L.s_off = L.d_off + round_up((size_t)(n * (k / bs)) * sizeof(float), MTPLX_CACHE_LINE);
    L.total = L.s_off;
    if (partner == MTPLX_TYPE_Q8_K)
        L.total += round_up((size_t)(n * (k / 16)) * sizeof(int16_t), MTPLX_CACHE_LINE);
    L.b_off = L.total; /* Q8_0: block sums for prepared Q4_0 */
    if (partner == MTPLX_TYPE_Q8_0)
        L.total += round_up((size_t)(n * (k / QK8_0)) * sizeof(int16_t), MTPLX_CACHE_LINE);
    return L;
}

size_t mtplx_matmul_scratch_size(int type, int64_t k, int64_t n) {
    return layout_for(mm_partner(type), k, n).total;
}

typedef struct quant_task {
    const kernel_ops *ops;
    int partner;
    const float *x;
    int64_t k, n;
    int8_t *q;
    float *d;
    int16_t *s;
} quant_task;

/* Quantize whole blocks [lo, hi) of the n*k activation values (blocks never
 * straddle tokens because k is a multiple of the block size). */
static void quant_range(const quant_task *qt, int64_t lo, int64_t hi) {
    if (qt->partner == MTPLX_TYPE_Q8_0)
        qt->ops->quant_q8_0(qt->x + lo * QK8_0, (hi - lo) * QK8_0, qt->q + lo * QK8_0, qt->d + lo);
    else
        qt->ops->quant_q8_K(qt->x + lo * QK_K, (hi - lo) * QK_K, qt->q + lo * QK_K, qt->d + lo,
                            qt->s + lo * (QK_K / 16));
}

static void quant_worker(void *arg, int ith, int nth) {
    const quant_task *qt = arg;
    int64_t bs = qt->partner == MTPLX_TYPE_Q8_0 ? QK8_0 : QK_K, lo, hi;
    mtplx_split(qt->n * qt->k / bs, ith, nth, &lo, &hi);
    if (lo < hi) quant_range(qt, lo, hi);
}

typedef struct mm_task {
    const mm_args *a;
    mm_fn fn;
} mm_task;

static void mm_worker(void *arg, int ith, int nth) {
    const mm_task *t = arg;
    int64_t units = (t->a->m + ROW_ALIGN - 1) / ROW_ALIGN, lo, hi;
    mtplx_split(units, ith, nth, &lo, &hi);
    int64_t r0 = lo * ROW_ALIGN, r1 = hi * ROW_ALIGN < t->a->m ? hi * ROW_ALIGN : t->a->m;
    if (r0 < r1) t->fn(t->a, r0, r1);
}

/* Sums of each 32-value block of quantized activations (prepared Q4_0 keeps
 * nibbles as value + 8 and takes 8 * sum(x) off once per block). */
static void block_sums(const int8_t *q, int64_t n_blocks, int16_t *out) {
    for (int64_t b = 0; b < n_blocks; b++) {
        int s = 0;
        for (int i = 0; i < QK8_0; i++) s += q[b * QK8_0 + i];
        out[b] = (int16_t)s;
    }
}

static void matmul(mtplx_threadpool *tp, int type, bool prepared, const void *W, int64_t m,
                   int64_t k, const float *x, int64_t n, float *y, void *scratch) {
    const kernel_ops *ops = mtplx_kernels_ops();
    MTPLX_ASSERT(type >= 0 && type < MTPLX_TYPE_COUNT);
    mm_fn fn = prepared ? ops->mm_prep[type] : ops->mm[type];
    MTPLX_ASSERT(fn);
    size_t w_stride = mtplx_row_size(type, k);
    MTPLX_ASSERT(w_stride > 0 && n >= 0 && m >= 0);
    if (n == 0 || m == 0) return;
    mm_args a = {.type = type, .W = W, .w_stride = w_stride, .m = m, .k = k, .n = n, .x = x, .y = y};
    int partner = mm_partner(type);
    if (partner != MTPLX_TYPE_F32) {
        act_layout L = layout_for(partner, k, n);
        uint8_t *s = scratch;
        MTPLX_ASSERT(s && ((uintptr_t)s % MTPLX_CACHE_LINE) == 0);
        quant_task qt = {ops, partner, x, k, n, (int8_t *)(s + L.q_off), (float *)(s + L.d_off),
                         (int16_t *)(s + L.s_off)};
        int64_t bs = partner == MTPLX_TYPE_Q8_0 ? QK8_0 : QK_K;
        if (n * k < QUANT_PARALLEL_MIN || mtplx_threadpool_size(tp) == 1)
            quant_range(&qt, 0, n * k / bs);
        else
            mtplx_threadpool_run(tp, quant_worker, &qt);
        a.xq = qt.q;
        a.xd = qt.d;
        a.xs = qt.s;
        if (prepared && type == MTPLX_TYPE_Q4_0) {
            a.xb = (int16_t *)(s + L.b_off);
            block_sums(a.xq, n * k / QK8_0, (int16_t *)(s + L.b_off));
        }
    }
    mm_task t = {&a, fn};
    mtplx_threadpool_run(tp, mm_worker, &t);
}

void mtplx_matmul(mtplx_threadpool *tp, int type, const void *W, int64_t m, int64_t k,
                  const float *x, int64_t n, float *y, void *scratch) {
    matmul(tp, type, false, W, m, k, x, n, y, scratch);
}

void mtplx_matmul_prepared(mtplx_threadpool *tp, int type, const void *P, int64_t m, int64_t k,
                           const float *x, int64_t n, float *y, void *scratch) {
    MTPLX_ASSERT(mtplx_weight_prepared_size(type, m > 0 ? m : 1, k) > 0);
    matmul(tp, type, true, P, m, k, x, n, y, scratch);
}

/* ---- small ops ---- */
void mtplx_rmsnorm(const float *x, const float *w, float *out, int64_t n, int64_t d, float eps) {
    const kernel_ops *ops = mtplx_kernels_ops();
    for (int64_t i = 0; i < n; i++) ops->rmsnorm_row(x + i * d, w, out + i * d, d, eps);
}

void mtplx_silu_mul(const float *gate, const float *up, float *out, int64_t n) {
    mtplx_kernels_ops()->silu_mul(gate, up, out, n);
}

void mtplx_add(float *y, const float *x, int64_t n) { mtplx_kernels_ops()->add(y, x, n); }

void mtplx_softmax(float *x, int64_t n) { mtplx_kernels_ops()->softmax(x, n); }

float mtplx_exp_scaled(const float *x, int64_t n, float s, float *out) {
    if (n <= 0) return 0;
    return mtplx_kernels_ops()->exp_scaled(x, n, s, out);
}

int64_t mtplx_argmax(const float *x, int64_t n) {
    MTPLX_ASSERT(n > 0);
    return mtplx_kernels_ops()->argmax(x, n);
}

float mtplx_log_sum_exp(const float *x, int64_t n) {
    return n > 0 ? mtplx_kernels_ops()->log_sum_exp(x, n) : -INFINITY;
}

void mtplx_store_rows(int kv_type, const float *src, void *dst, int64_t n, int64_t d) {
    if (kv_type == MTPLX_TYPE_F32)
        memcpy(dst, src, (size_t)(n * d) * sizeof(float));
    else if (kv_type == MTPLX_TYPE_F16)
        mtplx_kernels_ops()->f32_to_f16(src, dst, n * d);
    else if (kv_type == MTPLX_TYPE_Q8_0) {
        /* block by block with the activation quantizer, whose values and
         * fp16-rounded scales are mtplx_quantize_row's bit for bit; a
         * position's blocks never depend on how many rows came together */
        const kernel_ops *ops = mtplx_kernels_ops();
        MTPLX_ASSERT(d % QK8_0 == 0);
        block_q8_0 *b = dst;
        for (int64_t i = 0; i < n * d / QK8_0; i++) {
            float s;
            ops->quant_q8_0(src + i * QK8_0, QK8_0, (int8_t *)b[i].qs, &s);
            b[i].d = mtplx_fp32_to_fp16(s);
        }
    } else
        MTPLX_ASSERT(!"KV type must be F16, F32 or Q8_0");
}

/* ---- attention ----
 * Work items are a KV head's query heads over a block of tokens, up to q_max
 * queries, so that K and V are read once per item rather than once per query
 * head and token (GQA groups and the rows of a verify step share them). The
 * scratch holds q_max score rows per thread; a small scratch only means
 * smaller items. Items go to threads round-robin: later tokens see more keys. */
#define ATTN_SCRATCH_CAP ((size_t)64 << 20) /* all threads' score rows */

static size_t scores_stride(int64_t n_pos) { return round_up((size_t)n_pos, ROW_ALIGN); }

size_t mtplx_attention_scratch_size(int64_t n_ctx, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    size_t one = (size_t)n_threads * scores_stride(n_ctx) * sizeof(float), q = ATTN_GROUP_Q;
    while (q > 1 && one * q > ATTN_SCRATCH_CAP) q /= 2;
    return one * q + MTPLX_CACHE_LINE;
}

typedef struct attn_task {
    const attn_args *a;
    attn_group_fn fn;
    float *scratch;
    size_t stride;
    int hb;      /* query heads per item (of one KV head's group) */
    int n_hb;    /* head blocks per KV head */
    int64_t tb;  /* tokens per item */
    int64_t n_items;
} attn_task;

static void attn_worker(void *arg, int ith, int nth) {
    const attn_task *t = arg;
    const attn_args *a = t->a;
    const int g = a->n_head / a->n_head_kv;
    float *scores = t->scratch + (size_t)ith * (size_t)(t->hb * t->tb) * t->stride;
    for (int64_t i = ith; i < t->n_items; i += nth) {
        int hbk = (int)(i % t->n_hb), kvh = (int)(i / t->n_hb % a->n_head_kv);
        int64_t t0 = i / t->n_hb / a->n_head_kv * t->tb, t1 = t0 + t->tb < a->n_tok ? t0 + t->tb : a->n_tok;
        int h0 = kvh * g + hbk * t->hb, h1 = h0 + t->hb < (kvh + 1) * g ? h0 + t->hb : (kvh + 1) * g;
        t->fn(a, kvh, h0, h1, t0, t1, scores, t->stride);
    }
}

void mtplx_attention(mtplx_threadpool *tp, const float *q, int64_t n_tok, int n_head,
                     int n_head_kv, int head_dim, const void *k, const void *v, int kv_type,
                     int64_t pos0, float scale, float *out, void *scratch, size_t scratch_size) {
    MTPLX_ASSERT(n_head > 0 && n_head_kv > 0 && n_head % n_head_kv == 0 && head_dim > 0);
    MTPLX_ASSERT(kv_type == MTPLX_TYPE_F16 || kv_type == MTPLX_TYPE_F32 ||
                 (kv_type == MTPLX_TYPE_Q8_0 && head_dim % QK8_0 == 0 &&
                  head_dim <= MTPLX_KV_Q8_0_MAX_HEAD_DIM));
    MTPLX_ASSERT(scratch && pos0 >= 0);
    if (n_tok <= 0) return;
    attn_args a = {q, n_tok, n_head, n_head_kv, head_dim, k, v, kv_type, pos0, scale, out};
    const int nth = mtplx_threadpool_size(tp), g = n_head / n_head_kv;
    const size_t stride = scores_stride(pos0 + n_tok), row_bytes = (size_t)nth * stride * sizeof(float);
    size_t q_max = (scratch_size - (scratch_size > MTPLX_CACHE_LINE ? MTPLX_CACHE_LINE : 0)) / row_bytes;
    MTPLX_ASSERT(q_max >= 1); /* at least mtplx_attention_scratch_size(pos0 + n_tok, nth) */
    if (q_max > ATTN_GROUP_Q) q_max = ATTN_GROUP_Q;
    attn_task t = {&a, mtplx_kernels_ops()->attn_group, scratch, stride, 0, 0, 0, 0};
    t.hb = g < (int)q_max ? g : (int)q_max;
    t.n_hb = (g + t.hb - 1) / t.hb;
    t.tb = (int64_t)q_max / t.hb;
    t.n_items = (n_tok + t.tb - 1) / t.tb * n_head_kv * t.n_hb;
    mtplx_threadpool_run(tp, attn_worker, &t);
}
