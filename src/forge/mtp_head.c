/* mtp_head.c: forward and backward of one MTP head stream in F32 (see
 * mtp_head.h for the equations). Matrix products go through the library's
 * F32 matmul kernel (y = x W^T); the backward pass reuses it on transposed
 * operands: dX = dY W = dY (W^T)^T and dW = dY^T X = (dY^T)(X^T)^T. The
 * small ops (RMSNorm, RoPE, attention, SwiGLU) are plain loops. */
#include "forge/mtp_head.h"

#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

void head_layout_init(head_layout *L, const head_shape *s) {
    memset(L, 0, sizeof *L);
    L->s = *s;
    int64_t E = s->E, qd = s->H * s->D, kd = s->KVH * s->D, F = s->F;
    const struct { const char *n; int64_t a, b; bool decay, present; } d[HP_COUNT] = {
        [HP_ENORM] = {"nextn.enorm.weight", E, 1, false, true},
        [HP_HNORM] = {"nextn.hnorm.weight", E, 1, false, true},
        [HP_FC] = {"nextn.eh_proj.weight", 2 * E, E, true, true},
        [HP_NORM] = {"nextn.shared_head_norm.weight", E, 1, false, true},
        [HP_ATTN_NORM] = {"attn_norm.weight", E, 1, false, true},
        [HP_WQ] = {"attn_q.weight", E, qd, true, true},
        [HP_WK] = {"attn_k.weight", E, kd, true, true},
        [HP_WV] = {"attn_v.weight", E, kd, true, true},
        [HP_BQ] = {"attn_q.bias", qd, 1, false, s->bias},
        [HP_BK] = {"attn_k.bias", kd, 1, false, s->bias},
        [HP_BV] = {"attn_v.bias", kd, 1, false, s->bias},
        [HP_QNORM] = {"attn_q_norm.weight", s->D, 1, false, s->qk_norm},
        [HP_KNORM] = {"attn_k_norm.weight", s->D, 1, false, s->qk_norm},
        [HP_WO] = {"attn_output.weight", qd, E, true, true},
        [HP_FFN_NORM] = {"ffn_norm.weight", E, 1, false, true},
        [HP_WG] = {"ffn_gate.weight", E, F, true, true},
        [HP_WU] = {"ffn_up.weight", E, F, true, true},
        [HP_WD] = {"ffn_down.weight", F, E, true, true},
    };
    size_t off = 0;
    for (int i = 0; i < HP_COUNT; i++) {
        L->t[i] = (head_tensor){d[i].n, d[i].a, d[i].b, d[i].decay, d[i].present, off};
        if (d[i].present) off += (size_t)(d[i].a * d[i].b);
    }
    L->n = off;
}

#define PW(L, w, id) ((L)->t[id].present ? (w) + (L)->t[id].off : NULL)

/* ---- allocation ---- */

static int64_t max_width(const head_shape *s) {
    int64_t m = 2 * s->E;
    if (s->F > m) m = s->F;
    if (s->H * s->D > m) m = s->H * s->D;
    return m;
}

mtplx_status head_stream_init(head_stream *st, const head_shape *s, int64_t T) {
    memset(st, 0, sizeof *st);
    st->T = T;
    int64_t E = s->E, qd = s->H * s->D, kd = s->KVH * s->D, F = s->F;
    struct { float **p; int64_t n; } b[] = {
        {&st->emb, T * E}, {&st->cat, T * 2 * E}, {&st->x0, T * E}, {&st->a, T * E},
        {&st->q, T * qd},  {&st->k, T * kd},      {&st->v, T * kd}, {&st->qr, T * qd},
        {&st->kr, T * kd}, {&st->prob, s->H * T * T}, {&st->o, T * qd}, {&st->x1, T * E},
        {&st->b, T * E},   {&st->gt, T * F},      {&st->up, T * F}, {&st->s, T * F},
        {&st->x2, T * E},  {&st->y, T * E},       {&st->dy, T * E}};
    for (size_t i = 0; i < sizeof b / sizeof *b; i++)
        if (!(*b[i].p = calloc((size_t)b[i].n, sizeof(float)))) {
            head_stream_free(st);
            return mtplx_fail(MTPLX_ERR_NOMEM, "train-mtp: out of memory for a head stream of %lld rows",
                              (long long)T);
        }
    return MTPLX_OK;
}

void head_stream_free(head_stream *st) {
    float *p[] = {st->emb, st->cat, st->x0, st->a, st->q,  st->k,  st->v, st->qr, st->kr, st->prob,
                  st->o,   st->x1,  st->b,  st->gt, st->up, st->s, st->x2, st->y, st->dy};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) free(p[i]);
    memset(st, 0, sizeof *st);
}

mtplx_status head_work_init(head_work *w, const head_shape *s, int64_t T, mtplx_threadpool *tp) {
    memset(w, 0, sizeof *w);
    w->tp = tp;
    int64_t mw = max_width(s), mat = mw * (s->E > s->F ? s->E : s->F);
    size_t act = (size_t)(T * mw);
    w->wt = malloc((size_t)mat * sizeof(float));
    w->tmp = malloc((size_t)mat * sizeof(float));
    w->xt = malloc(act * sizeof(float));
    w->dyt = malloc(act * sizeof(float));
    w->logits = malloc((size_t)(T * s->V) * sizeof(float));
    w->row_loss = malloc((size_t)T * sizeof(double));
    w->row_top = malloc((size_t)T * sizeof(int32_t));
    size_t scr = 0;
    const int types[] = {MTPLX_TYPE_F32, MTPLX_TYPE_Q8_0, MTPLX_TYPE_Q4_K};
    const int64_t ks[] = {mw, s->E, s->V};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 3; j++) {
            size_t z = mtplx_matmul_scratch_size(types[i], ks[j], T);
            if (z > scr) scr = z;
        }
    w->mm_scratch = mtplx_aligned_alloc(64, scr + 64);
    bool ok = w->wt && w->tmp && w->xt && w->dyt && w->logits && w->row_loss && w->row_top &&
              w->mm_scratch;
    for (int i = 0; i < 12 && ok; i++) ok = (w->g[i] = calloc(act, sizeof(float))) != NULL;
    if (!ok) {
        head_work_free(w);
        return mtplx_fail(MTPLX_ERR_NOMEM, "train-mtp: out of memory for the head's workspace");
    }
    return MTPLX_OK;
}

void head_work_free(head_work *w) {
    free(w->wt);
    free(w->tmp);
    free(w->xt);
    free(w->dyt);
    free(w->logits);
    free(w->row_loss);
    free(w->row_top);
    free(w->mm_scratch);
    for (int i = 0; i < 12; i++) free(w->g[i]);
    memset(w, 0, sizeof *w);
}

/* ---- linear algebra ---- */

/* y [n][m] = x [n][k] . W^T, W [m][k] */
static void mm(head_work *wk, const float *W, int64_t m, int64_t k, const float *x, int64_t n,
               float *y) {
    mtplx_matmul(wk->tp, MTPLX_TYPE_F32, W, m, k, x, n, y, wk->mm_scratch);
}

/* y [n][m] = x [n][k] . W^T with a frozen matrix: its quantized copy q
 * (prepared layout prep, or plain rows) when there is one, else f32 W. */
static void mm_frozen(head_work *wk, const float *W, const void *q, const void *prep, int type,
                      int64_t m, int64_t k, const float *x, int64_t n, float *y) {
    if (prep) mtplx_matmul_prepared(wk->tp, type, prep, m, k, x, n, y, wk->mm_scratch);
    else if (q) mtplx_matmul(wk->tp, type, q, m, k, x, n, y, wk->mm_scratch);
    else mm(wk, W, m, k, x, n, y);
}

static void transpose(const float *a, int64_t rows, int64_t cols, float *out) {
    const int64_t B = 32;
    for (int64_t r0 = 0; r0 < rows; r0 += B)
        for (int64_t c0 = 0; c0 < cols; c0 += B)
            for (int64_t r = r0; r < rows && r < r0 + B; r++)
                for (int64_t c = c0; c < cols && c < c0 + B; c++) out[c * rows + r] = a[r * cols + c];
}

/* Backward of y = x W^T: dx [n][k] = dy W (written, when dx), dW [m][k] += dy^T x. */
static void mm_back(head_work *wk, const float *W, int64_t m, int64_t k, const float *x, int64_t n,
                    const float *dy, float *dx, float *dW) {
    if (dx) {
        transpose(W, m, k, wk->wt);
        mm(wk, wk->wt, k, m, dy, n, dx);
    }
    transpose(x, n, k, wk->xt);
    transpose(dy, n, m, wk->dyt);
    mm(wk, wk->xt, k, n, wk->dyt, m, wk->tmp);
    for (int64_t i = 0; i < m * k; i++) dW[i] += wk->tmp[i];
}

static void add_to(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

/* ---- RMSNorm: y = w * x / rms(x) over rows of d ---- */

static void rmsnorm(const float *x, const float *w, float *y, int64_t n, int64_t d, float eps) {
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * d;
        double ss = 0;
        for (int64_t j = 0; j < d; j++) ss += (double)xi[j] * xi[j];
        float r = (float)(1.0 / sqrt(ss / (double)d + eps));
        for (int64_t j = 0; j < d; j++) y[i * d + j] = xi[j] * r * w[j];
    }
}

/* dx = r (w dy) - x r^3 mean(w dy x) (written or added), dw += dy x r. */
static void rmsnorm_back(const float *x, const float *w, const float *dy, float *dx, bool add,
                         float *dw, int64_t n, int64_t d, float eps) {
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * d, *di = dy + i * d;
        double ss = 0, dot = 0;
        for (int64_t j = 0; j < d; j++) {
            ss += (double)xi[j] * xi[j];
            dot += (double)w[j] * di[j] * xi[j];
        }
        double r = 1.0 / sqrt(ss / (double)d + eps), c = r * r * r * dot / (double)d;
        for (int64_t j = 0; j < d; j++) {
            float g = (float)(r * w[j] * di[j] - c * xi[j]);
            if (dw) dw[j] += (float)(di[j] * xi[j] * r); /* before dx: dx may alias dy */
            if (dx) dx[i * d + j] = add ? dx[i * d + j] + g : g;
        }
    }
}

/* ---- RoPE at positions 0..T-1; sign -1 rotates back (the backward pass) ---- */

static void rope(float *x, int64_t T, int64_t nh, int64_t D, const float *inv_freq, bool neox,
                 float sign) {
    int64_t half = D / 2;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            float th = (float)t * inv_freq[i], cs = cosf(th), sn = sign * sinf(th);
            for (int64_t h = 0; h < nh; h++) {
                float *v = x + (t * nh + h) * D;
                int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * cs - x1 * sn;
                v[b] = x0 * sn + x1 * cs;
            }
        }
}

/* ---- causal attention with GQA, threaded over KV heads ---- */

typedef struct att_task {
    const head_shape *s;
    int64_t T;
    const float *qr, *kr, *v, *prob_in, *d_o;
    float *prob, *o, *dq, *dk, *dv;
} att_task;

static void att_fwd_worker(void *arg, int ith, int nth) {
    const att_task *a = arg;
    const head_shape *s = a->s;
    int64_t T = a->T, H = s->H, KVH = s->KVH, D = s->D, grp = H / KVH;
    float scale = 1.0f / sqrtf((float)D);
    for (int64_t h = ith; h < H; h += nth) {
        int64_t g = h / grp;
        for (int64_t i = 0; i < T; i++) {
            const float *qi = a->qr + (i * H + h) * D;
            float *p = a->prob + (h * T + i) * T, mx = -INFINITY;
            for (int64_t j = 0; j <= i; j++) {
                const float *kj = a->kr + (j * KVH + g) * D;
                float dot = 0;
                for (int64_t c = 0; c < D; c++) dot += qi[c] * kj[c];
                p[j] = dot * scale;
                if (p[j] > mx) mx = p[j];
            }
            float sum = 0;
            for (int64_t j = 0; j <= i; j++) sum += (p[j] = expf(p[j] - mx));
            float *oi = a->o + (i * H + h) * D;
            memset(oi, 0, (size_t)D * sizeof(float));
            for (int64_t j = 0; j <= i; j++) {
                p[j] /= sum;
                const float *vj = a->v + (j * KVH + g) * D;
                for (int64_t c = 0; c < D; c++) oi[c] += p[j] * vj[c];
            }
            for (int64_t j = i + 1; j < T; j++) p[j] = 0;
        }
    }
}

/* dP_ij = do_i . v_j; dS = P (dP - sum_j P dP); dq_i = scale sum_j dS_ij k_j;
 * dk_j += scale dS_ij q_i; dv_j += P_ij do_i. One thread per KV head group,
 * so the dk / dv sums over the group's query heads never race. */
static void att_back_worker(void *arg, int ith, int nth) {
    const att_task *a = arg;
    const head_shape *s = a->s;
    int64_t T = a->T, H = s->H, KVH = s->KVH, D = s->D, grp = H / KVH;
    float scale = 1.0f / sqrtf((float)D);
    float *dp = a->prob + ith * T; /* per-thread row scratch: here prob is a free buffer */
    for (int64_t g = ith; g < KVH; g += nth) {
        for (int64_t j = 0; j < T; j++) {
            memset(a->dk + (j * KVH + g) * D, 0, (size_t)D * sizeof(float));
            memset(a->dv + (j * KVH + g) * D, 0, (size_t)D * sizeof(float));
        }
        for (int64_t h = g * grp; h < (g + 1) * grp; h++)
            for (int64_t i = 0; i < T; i++) {
                const float *p = a->prob_in + (h * T + i) * T, *doi = a->d_o + (i * H + h) * D,
                            *qi = a->qr + (i * H + h) * D;
                float *dqi = a->dq + (i * H + h) * D;
                double acc = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const float *vj = a->v + (j * KVH + g) * D;
                    float d = 0;
                    for (int64_t c = 0; c < D; c++) d += doi[c] * vj[c];
                    dp[j] = d;
                    acc += (double)p[j] * d;
                }
                memset(dqi, 0, (size_t)D * sizeof(float));
                for (int64_t j = 0; j <= i; j++) {
                    float ds = p[j] * (dp[j] - (float)acc) * scale;
                    const float *kj = a->kr + (j * KVH + g) * D;
                    float *dkj = a->dk + (j * KVH + g) * D, *dvj = a->dv + (j * KVH + g) * D;
                    for (int64_t c = 0; c < D; c++) {
                        dqi[c] += ds * kj[c];
                        dkj[c] += ds * qi[c];
                        dvj[c] += p[j] * doi[c];
                    }
                }
            }
    }
}

/* ---- targets and the KL loss, threaded over rows ---- */

typedef struct row_task {
    const float *logits; /* head_targets: input logits; loss: NULL */
    float *lg;           /* loss: logits in, d KL / d logits out */
    const head_target *tg;
    float *p;
    double *negent, *loss;
    int32_t *top;
    int64_t T, V;
    float scale;
} row_task;

static int64_t argmax_row(const float *x, int64_t n) {
    int64_t am = 0;
    for (int64_t c = 1; c < n; c++)
        if (x[c] > x[am]) am = c;
    return am;
}

static double dot_row(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t c0 = 0; c0 < n; c0 += 64) { /* float partial sums of 64, summed in double */
        float part = 0;
        for (int64_t c = c0; c < n && c < c0 + 64; c++) part += a[c] * b[c];
        s += part;
    }
    return s;
}

/* softmax: lse = lg[top] - log p[top], so sum p log p = sum p lg - lse. */
static void targets_worker(void *arg, int ith, int nth) {
    const row_task *a = arg;
    for (int64_t i = ith; i < a->T; i += nth) {
        const float *lg = a->logits + i * a->V;
        float *p = a->p + i * a->V;
        int64_t am = argmax_row(lg, a->V);
        memcpy(p, lg, (size_t)a->V * sizeof(float));
        mtplx_softmax(p, a->V);
        double lse = (double)lg[am] - log((double)p[am]);
        a->negent[i] = dot_row(p, lg, a->V) - lse;
        a->top[i] = (int32_t)am;
    }
}

void head_targets(mtplx_threadpool *tp, const float *logits, int64_t T, int64_t V, float *p,
                  double *negent, int32_t *top) {
    row_task a = {.logits = logits, .p = p, .negent = negent, .top = top, .T = T, .V = V};
    if (tp) mtplx_threadpool_run(tp, targets_worker, &a);
    else targets_worker(&a, 0, 1);
}

/* KL(p || q) = negent - sum p lg + lse(lg); lg becomes scale (q - p). */
static void loss_worker(void *arg, int ith, int nth) {
    const row_task *a = arg;
    for (int64_t i = ith; i < a->T; i += nth) {
        float *lg = a->lg + i * a->V;
        const float *pi = a->tg->p + i * a->V;
        int64_t am = argmax_row(lg, a->V);
        double pl = dot_row(pi, lg, a->V), mx = lg[am];
        mtplx_softmax(lg, a->V);
        MTPLX_ASSERT(lg[am] > 0); /* the max term alone contributes exp(0) = 1 */
        double lse = mx - log((double)lg[am]);
        a->loss[i] = a->tg->negent[i] - pl + lse;
        a->top[i] = (int32_t)am;
        for (int64_t c = 0; c < a->V; c++) lg[c] = a->scale * (lg[c] - pi[c]);
    }
}

/* ---- forward ---- */

void head_forward(const head_layout *L, const float *w, const head_frozen *fz, head_work *wk,
                  head_stream *st, const head_target *tg, float scale) {
    const head_shape *s = &L->s;
    int64_t T = st->T, E = s->E, qd = s->H * s->D, kd = s->KVH * s->D, F = s->F, V = s->V;
    float eps = s->eps;
    for (int64_t i = 0; i < T; i++) {
        fz->embed(fz->user, st->tok[i], st->emb + i * E);
        rmsnorm(st->emb + i * E, PW(L, w, HP_ENORM), st->cat + i * 2 * E, 1, E, eps);
        rmsnorm(st->g_in + i * E, PW(L, w, HP_HNORM), st->cat + i * 2 * E + E, 1, E, eps);
    }
    mm(wk, PW(L, w, HP_FC), E, 2 * E, st->cat, T, st->x0);
    /* attention block */
    rmsnorm(st->x0, PW(L, w, HP_ATTN_NORM), st->a, T, E, eps);
    mm(wk, PW(L, w, HP_WQ), qd, E, st->a, T, st->q);
    mm(wk, PW(L, w, HP_WK), kd, E, st->a, T, st->k);
    mm(wk, PW(L, w, HP_WV), kd, E, st->a, T, st->v);
    if (s->bias)
        for (int64_t i = 0; i < T; i++) {
            add_to(st->q + i * qd, PW(L, w, HP_BQ), qd);
            add_to(st->k + i * kd, PW(L, w, HP_BK), kd);
            add_to(st->v + i * kd, PW(L, w, HP_BV), kd);
        }
    if (s->qk_norm) {
        rmsnorm(st->q, PW(L, w, HP_QNORM), st->qr, T * s->H, s->D, eps);
        rmsnorm(st->k, PW(L, w, HP_KNORM), st->kr, T * s->KVH, s->D, eps);
    } else {
        memcpy(st->qr, st->q, (size_t)(T * qd) * sizeof(float));
        memcpy(st->kr, st->k, (size_t)(T * kd) * sizeof(float));
    }
    rope(st->qr, T, s->H, s->D, s->inv_freq, s->neox, 1.0f);
    rope(st->kr, T, s->KVH, s->D, s->inv_freq, s->neox, 1.0f);
    att_task at = {.s = s, .T = T, .qr = st->qr, .kr = st->kr, .v = st->v, .prob = st->prob, .o = st->o};
    mtplx_threadpool_run(wk->tp, att_fwd_worker, &at);
    mm(wk, PW(L, w, HP_WO), E, qd, st->o, T, st->x1);
    add_to(st->x1, st->x0, T * E);
    /* feed-forward block */
    rmsnorm(st->x1, PW(L, w, HP_FFN_NORM), st->b, T, E, eps);
    mm(wk, PW(L, w, HP_WG), F, E, st->b, T, st->gt);
    mm(wk, PW(L, w, HP_WU), F, E, st->b, T, st->up);
    for (int64_t i = 0; i < T * F; i++) st->s[i] = st->gt[i] / (1.0f + expf(-st->gt[i])) * st->up[i];
    mm(wk, PW(L, w, HP_WD), E, F, st->s, T, st->x2);
    add_to(st->x2, st->x1, T * E);
    /* shared head */
    rmsnorm(st->x2, PW(L, w, HP_NORM), st->y, T, E, eps);
    if (!tg) return;
    mm_frozen(wk, fz->wout, fz->wout_q, fz->wout_q_prep, fz->wout_q_type, V, E, st->y, T,
              wk->logits);
    row_task rt = {.lg = wk->logits, .tg = tg, .loss = wk->row_loss, .top = wk->row_top, .T = T,
                   .V = V, .scale = scale};
    mtplx_threadpool_run(wk->tp, loss_worker, &rt);
    st->loss = 0;
    st->agree = 0;
    for (int64_t i = 0; i < T; i++) {
        st->loss += wk->row_loss[i];
        st->agree += wk->row_top[i] == tg->top[i];
    }
    mm_frozen(wk, fz->woutT, fz->woutT_q, fz->woutT_q_prep, fz->woutT_q_type, E, V, wk->logits, T,
              st->dy);
}

/* ---- backward ---- */

void head_backward(const head_layout *L, const float *w, float *grad, const head_frozen *fz,
                   head_work *wk, head_stream *st, const float *dx2_extra, float *dg_in) {
    const head_shape *s = &L->s;
    int64_t T = st->T, E = s->E, qd = s->H * s->D, kd = s->KVH * s->D, F = s->F;
    float eps = s->eps;
    float *dx2 = wk->g[0], *dx1 = wk->g[1], *ds = wk->g[2], *dgt = wk->g[3], *dup = wk->g[4],
          *db = wk->g[5], *tmp = wk->g[6], *dq = wk->g[7], *dk = wk->g[8], *dv = wk->g[9],
          *d_o = wk->g[10], *dx0 = wk->g[11];
    /* shared head norm, plus what the next depth sends back */
    rmsnorm_back(st->x2, PW(L, w, HP_NORM), st->dy, dx2, false, PW(L, grad, HP_NORM), T, E, eps);
    if (dx2_extra) add_to(dx2, dx2_extra, T * E);
    /* feed-forward block: x2 = x1 + Wd s */
    mm_back(wk, PW(L, w, HP_WD), E, F, st->s, T, dx2, ds, PW(L, grad, HP_WD));
    for (int64_t i = 0; i < T * F; i++) {
        float g = st->gt[i], sg = 1.0f / (1.0f + expf(-g));
        dup[i] = ds[i] * g * sg;
        dgt[i] = ds[i] * st->up[i] * sg * (1.0f + g * (1.0f - sg));
    }
    mm_back(wk, PW(L, w, HP_WG), F, E, st->b, T, dgt, db, PW(L, grad, HP_WG));
    mm_back(wk, PW(L, w, HP_WU), F, E, st->b, T, dup, tmp, PW(L, grad, HP_WU));
    add_to(db, tmp, T * E);
    memcpy(dx1, dx2, (size_t)(T * E) * sizeof(float));
    rmsnorm_back(st->x1, PW(L, w, HP_FFN_NORM), db, dx1, true, PW(L, grad, HP_FFN_NORM), T, E, eps);
    /* attention block: x1 = x0 + Wo o */
    mm_back(wk, PW(L, w, HP_WO), E, qd, st->o, T, dx1, d_o, PW(L, grad, HP_WO));
    att_task at = {.s = s, .T = T, .qr = st->qr, .kr = st->kr, .v = st->v, .prob_in = st->prob,
                   .d_o = d_o, .prob = tmp, .dq = dq, .dk = dk, .dv = dv};
    mtplx_threadpool_run(wk->tp, att_back_worker, &at);
    rope(dq, T, s->H, s->D, s->inv_freq, s->neox, -1.0f);
    rope(dk, T, s->KVH, s->D, s->inv_freq, s->neox, -1.0f);
    if (s->qk_norm) { /* in place: dq, dk become gradients w.r.t. the raw q, k */
        rmsnorm_back(st->q, PW(L, w, HP_QNORM), dq, dq, false, PW(L, grad, HP_QNORM), T * s->H, s->D, eps);
        rmsnorm_back(st->k, PW(L, w, HP_KNORM), dk, dk, false, PW(L, grad, HP_KNORM), T * s->KVH, s->D, eps);
    }
    if (s->bias)
        for (int64_t i = 0; i < T; i++) {
            add_to(PW(L, grad, HP_BQ), dq + i * qd, qd);
            add_to(PW(L, grad, HP_BK), dk + i * kd, kd);
            add_to(PW(L, grad, HP_BV), dv + i * kd, kd);
        }
    float *da = ds; /* ds is free again; [T][E] fits in [T][maxw] */
    mm_back(wk, PW(L, w, HP_WQ), qd, E, st->a, T, dq, da, PW(L, grad, HP_WQ));
    mm_back(wk, PW(L, w, HP_WK), kd, E, st->a, T, dk, tmp, PW(L, grad, HP_WK));
    add_to(da, tmp, T * E);
    mm_back(wk, PW(L, w, HP_WV), kd, E, st->a, T, dv, tmp, PW(L, grad, HP_WV));
    add_to(da, tmp, T * E);
    memcpy(dx0, dx1, (size_t)(T * E) * sizeof(float));
    rmsnorm_back(st->x0, PW(L, w, HP_ATTN_NORM), da, dx0, true, PW(L, grad, HP_ATTN_NORM), T, E, eps);
    /* input: x0 = fc cat[enorm(emb), hnorm(g)] */
    float *dcat = dgt; /* [T][2E] fits */
    mm_back(wk, PW(L, w, HP_FC), E, 2 * E, st->cat, T, dx0, dcat, PW(L, grad, HP_FC));
    for (int64_t i = 0; i < T; i++) {
        rmsnorm_back(st->emb + i * E, PW(L, w, HP_ENORM), dcat + i * 2 * E, NULL, false,
                     PW(L, grad, HP_ENORM), 1, E, eps);
        rmsnorm_back(st->g_in + i * E, PW(L, w, HP_HNORM), dcat + i * 2 * E + E,
                     dg_in ? dg_in + i * E : NULL, false, PW(L, grad, HP_HNORM), 1, E, eps);
    }
}
