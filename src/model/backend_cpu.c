/* backend_cpu.c: the CPU backend: thin wrappers over kernels/ plus the
 * thread pool and the scratch memory the kernels need. RoPE lives here as it
 * is a few lines and not worth a kernel variant. */
#include "kernels/kernels.h"
#include "model/backend.h"

#include <math.h>
#include <string.h>

typedef struct {
    mtplx_backend base;
    mtplx_threadpool *tp;
    void *mm_scratch;
    size_t mm_scratch_size;
    void *att_scratch;
    size_t att_scratch_size;
    /* RoPE's (cos, sin) of each position and frequency, [n_ctx][half][2],
     * for the frequencies rope_freq (a copy), filled up to rope_filled */
    float *rope_cs, *rope_freq;
    int rope_half;
    int64_t n_ctx, rope_filled;
} cpu_backend;

static void cpu_matmul(mtplx_backend *be, const mtplx_weight *w, const float *bias,
                       const float *x, int64_t n, float *y) {
    cpu_backend *c = (cpu_backend *)be;
    MTPLX_ASSERT(mtplx_matmul_scratch_size(w->type, w->k, n) <= c->mm_scratch_size);
    if (w->prep)
        mtplx_matmul_prepared(c->tp, w->type, w->prep, w->m, w->k, x, n, y, c->mm_scratch);
    else
        mtplx_matmul(c->tp, w->type, w->data, w->m, w->k, x, n, y, c->mm_scratch);
    if (bias)
        for (int64_t i = 0; i < n; i++) mtplx_add(y + i * w->m, bias, w->m);
}

static void cpu_rmsnorm(mtplx_backend *be, const float *x, const float *w, float *out, int64_t n,
                        int64_t d, float eps) {
    mtplx_rmsnorm(x, w, out, n, d, eps);
}

/* The (cos, sin) pairs of positions [pos0, pos0 + n) for inv_freq [half]:
 * from the backend's table, filled on first use of a position, or NULL
 * when the table does not serve these (other frequencies than the first
 * seen, positions past n_ctx). A decode step rotates a few rows at fresh
 * positions and MTP revisits them (verification, each head stream), and
 * cosf / sinf were nearly all of the op; the values are the expressions
 * the uncached loop computes, so the rotation is the same bit for bit. The
 * table is allocated on the first call (n_ctx x head_dim floats). */
static const float *rope_table(cpu_backend *c, int half, int64_t pos0, int64_t n, const float *inv_freq) {
    if (pos0 + n > c->n_ctx) return NULL;
    if (!c->rope_cs) {
        c->rope_cs = malloc((size_t)c->n_ctx * (size_t)half * 2 * sizeof(float));
        c->rope_freq = malloc((size_t)half * sizeof(float));
        if (!c->rope_cs || !c->rope_freq) {
            free(c->rope_cs);
            free(c->rope_freq);
            c->rope_cs = c->rope_freq = NULL;
            c->n_ctx = 0; /* no table: compute every time */
            return NULL;
        }
        memcpy(c->rope_freq, inv_freq, (size_t)half * sizeof(float));
        c->rope_half = half;
    }
    if (half != c->rope_half || memcmp(inv_freq, c->rope_freq, (size_t)half * sizeof(float))) return NULL;
    for (; c->rope_filled < pos0 + n; c->rope_filled++) {
        float pos = (float)c->rope_filled, *cs = c->rope_cs + c->rope_filled * half * 2;
        for (int i = 0; i < half; i++) {
            float th = pos * inv_freq[i];
            cs[2 * i] = cosf(th);
            cs[2 * i + 1] = sinf(th);
        }
    }
    return c->rope_cs + pos0 * half * 2;
}

static void cpu_rope(mtplx_backend *be, float *x, int64_t n, int n_head, int head_dim, int64_t pos0,
                     const float *inv_freq, bool neox) {
    int half = head_dim / 2;
    const float *tab = rope_table((cpu_backend *)be, half, pos0, n, inv_freq);
    for (int64_t t = 0; t < n; t++) {
        float pos = (float)(pos0 + t);
        for (int i = 0; i < half; i++) {
            float cs, sn;
            if (tab) {
                cs = tab[(t * half + i) * 2];
                sn = tab[(t * half + i) * 2 + 1];
            } else {
                float th = pos * inv_freq[i];
                cs = cosf(th);
                sn = sinf(th);
            }
            for (int h = 0; h < n_head; h++) {
                float *v = x + (t * n_head + h) * head_dim;
                int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * cs - x1 * sn;
                v[b] = x0 * sn + x1 * cs;
            }
        }
    }
}

static void cpu_silu_mul(mtplx_backend *be, const float *gate, const float *up, float *out,
                         int64_t n) {
    mtplx_silu_mul(gate, up, out, n);
}

static void cpu_add(mtplx_backend *be, float *y, const float *x, int64_t n) { mtplx_add(y, x, n); }

static void cpu_kv_store(mtplx_backend *be, int kv_type, void *kv, int64_t row, const float *src,
                         int64_t n, int64_t d) {
    mtplx_store_rows(kv_type, src, (char *)kv + (size_t)row * mtplx_row_size(kv_type, d), n, d);
}

static void cpu_attention(mtplx_backend *be, const float *q, int64_t n_tok, int n_head,
                          int n_head_kv, int head_dim, const void *k, const void *v, int kv_type,
                          int64_t pos0, float scale, float *out) {
    cpu_backend *c = (cpu_backend *)be;
    mtplx_attention(c->tp, q, n_tok, n_head, n_head_kv, head_dim, k, v, kv_type, pos0, scale, out,
                    c->att_scratch, c->att_scratch_size);
}

static void cpu_get_row(mtplx_backend *be, const mtplx_weight *w, int64_t id, float *out) {
    size_t rs = mtplx_row_size(w->type, w->k);
    mtplx_dequantize_row(w->type, (const char *)w->data + (size_t)id * rs, out, w->k);
}

/* The greedy pick in place: the logits are host memory already, so this is
 * the sampler's rule (mtplx_argmax) and mtplx_logprob's log-softmax without
 * the dense one-hot distributions the host path builds around them. */
static void cpu_argmax_rows(mtplx_backend *be, const float *logits, int64_t n, int64_t V, int32_t *ids,
                            float *logprob) {
    for (int64_t i = 0; i < n; i++) {
        const float *l = logits + i * V;
        ids[i] = (int32_t)mtplx_argmax(l, V);
        if (!logprob) continue;
        float lse = mtplx_log_sum_exp(l, V);
        logprob[i] = lse == -INFINITY ? -INFINITY : l[ids[i]] - lse;
    }
}

static void *cpu_buf_alloc(mtplx_backend *be, size_t bytes) {
    void *p = mtplx_aligned_alloc(64, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

static void cpu_buf_free(mtplx_backend *be, void *p) { free(p); }

static void cpu_free(mtplx_backend *be) {
    if (!be) return;
    cpu_backend *c = (cpu_backend *)be;
    mtplx_threadpool_free(c->tp);
    free(c->mm_scratch);
    free(c->att_scratch);
    free(c->rope_cs);
    free(c->rope_freq);
    free(c);
}

mtplx_status mtplx_backend_cpu_new(int n_threads, int64_t max_k, int64_t max_n, int64_t n_ctx,
                                   mtplx_backend **out) {
    *out = NULL;
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) return mtplx_fail(MTPLX_ERR_NOMEM, "cpu backend: out of memory");
    if (n_threads <= 0) n_threads = mtplx_cpu_features()->n_cores;
    mtplx_status st = mtplx_threadpool_new(n_threads, &c->tp);
    if (st != MTPLX_OK) {
        free(c);
        return st;
    }
    /* The largest dot-partner conversion is F32 activations kept as they are
     * (4 bytes/elem); ask the kernels for the worst case over all types. */
    static const int types[] = {MTPLX_TYPE_F32,  MTPLX_TYPE_F16,  MTPLX_TYPE_BF16, MTPLX_TYPE_Q8_0,
                                MTPLX_TYPE_Q4_0, MTPLX_TYPE_Q4_K, MTPLX_TYPE_Q6_K};
    size_t mm = 0;
    int64_t kk = (max_k + QK_K - 1) / QK_K * QK_K;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        size_t s = mtplx_matmul_scratch_size(types[i], kk, max_n);
        if (s > mm) mm = s;
    }
    c->n_ctx = n_ctx;
    c->mm_scratch_size = mm;
    c->mm_scratch = mtplx_aligned_alloc(64, mm);
    c->att_scratch_size = mtplx_attention_scratch_size(n_ctx, n_threads);
    c->att_scratch = mtplx_aligned_alloc(64, c->att_scratch_size);
    if (!c->mm_scratch || !c->att_scratch) {
        cpu_free(&c->base);
        return mtplx_fail(MTPLX_ERR_NOMEM, "cpu backend: out of memory for scratch");
    }
    c->base = (mtplx_backend){
        .name = "cpu",
        .n_threads = n_threads,
        .matmul = cpu_matmul,
        .rmsnorm = cpu_rmsnorm,
        .rope = cpu_rope,
        .silu_mul = cpu_silu_mul,
        .add = cpu_add,
        .kv_store = cpu_kv_store,
        .attention = cpu_attention,
        .get_row = cpu_get_row,
        .argmax_rows = cpu_argmax_rows,
        .buf_alloc = cpu_buf_alloc,
        .buf_free = cpu_buf_free,
        .free = cpu_free,
    };
    *out = &c->base;
    return MTPLX_OK;
}
