/* context.c: contexts: KV cache, activations, the MTP head streams' caches
 * and hidden-state history, and the public forward / truncate API.
 * Everything is allocated at creation (head streams on first use of a
 * depth), so the decode loop never allocates. */
#include "cuda/cuda_backend.h"
#include "engine/engine.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

mtplx_ctx_params mtplx_ctx_default_params(void) {
    return (mtplx_ctx_params){.n_ctx = 0, .n_threads = 0, .n_batch = 0, .kv_type = MTPLX_KV_F16,
                              .kv_f32 = false};
}

static const char *const kv_names[] = {"f16", "f32", "q8_0"};

const char *mtplx_kv_type_name(mtplx_kv_type t) {
    return (unsigned)t < sizeof kv_names / sizeof *kv_names ? kv_names[t] : "?";
}

bool mtplx_kv_type_parse(const char *s, mtplx_kv_type *out) {
    if (!s) return false;
    for (unsigned i = 0; i < sizeof kv_names / sizeof *kv_names; i++)
        if (!strcasecmp(s, kv_names[i])) {
            *out = (mtplx_kv_type)i;
            return true;
        }
    if (!strcasecmp(s, "q8")) {
        *out = MTPLX_KV_Q8_0;
        return true;
    }
    return false;
}

/* The kernels' type id of a public KV type; -1 if unknown. */
static int kv_type_id(mtplx_kv_type t) {
    switch (t) {
    case MTPLX_KV_F16: return MTPLX_TYPE_F16;
    case MTPLX_KV_F32: return MTPLX_TYPE_F32;
    case MTPLX_KV_Q8_0: return MTPLX_TYPE_Q8_0;
    }
    return -1;
}

uint64_t mtplx_kv_bytes_per_token(mtplx_kv_type t, int64_t n_kv_dim, int32_t n_layers) {
    int id = kv_type_id(t);
    if (id < 0 || n_kv_dim <= 0 || n_layers <= 0) return 0;
    /* a Q8_0 row that is not whole blocks cannot exist; count it as F16 */
    size_t row = mtplx_row_size(id, n_kv_dim);
    if (!row) row = mtplx_row_size(MTPLX_TYPE_F16, n_kv_dim);
    return 2 * (uint64_t)row * (uint64_t)n_layers;
}

/* Does a context fit on GPU 0? Counted before anything is uploaded: the
 * weights (when this context brings its own backend; the container's tensor
 * bytes, and the second copy the CUDA backend keeps of a tied embedding:
 * get_rows reads the file's rows, the output head's GEMV its own layout,
 * BF16 tiled or Q8_0 repacked; every other matrix is there once, in its
 * GEMV's layout, which the prefill GEMM reads too), the trunk KV cache, the MTP streams' caches and hidden-state
 * histories at the deepest draft, activations and logits, plus headroom for the CUDA runtime. Compared with
 * cudaMemGetInfo's free bytes, or MTPLX_CUDA_MEM_LIMIT (bytes) when that is
 * smaller (to leave room for other programs, and for tests). */
static mtplx_status check_gpu_fit(const mtplx_model *m, const mtplx_ctx_params *p, bool weights) {
    const mtplx_hparams *hp = &m->hp;
    double w = 0;
    if (weights) {
        for (int64_t i = 0; i < m->g->n_tensors; i++)
            w += (double)m->g->tensors[i].nbytes;
        if (m->tied && (m->output.type == MTPLX_TYPE_BF16 || m->output.type == MTPLX_TYPE_Q8_0))
            w += (double)mtplx_row_size(m->output.type, m->output.k) * (double)m->output.m;
    }
    int streams = m->n_mtp > 0 ? MTPLX_MAX_DRAFT : 0;
    double kv = (double)mtplx_kv_bytes_per_token(p->kv_type, (int64_t)hp->n_head_kv * hp->head_dim,
                                                 hp->n_layer + streams) * (double)p->n_ctx;
    double per_row = (double)hp->n_embd * 5 + 3.0 * hp->n_head * hp->head_dim +
                     2.0 * hp->n_head_kv * hp->head_dim + 2.0 * hp->n_ff;
    double nl = p->n_batch < MTPLX_LOGITS_ROWS ? p->n_batch : MTPLX_LOGITS_ROWS;
    double acts = (m->n_mtp > 0 ? 2 : 1) * 4.0 * ((double)p->n_batch * per_row + nl * hp->n_vocab) +
                  (m->n_mtp > 0 ? 4.0 * (1 + streams) * (double)p->n_ctx * hp->n_embd : 0.0);
    double headroom = 256.0 * 1024 * 1024, need = w + kv + acts + headroom;
    size_t free_b = 0, total_b = 0;
    MTPLX_TRY(mtplx_cuda_mem_info(0, &free_b, &total_b));
    double avail = (double)free_b;
    const char *lim = getenv("MTPLX_CUDA_MEM_LIMIT");
    if (lim && *lim && strtod(lim, NULL) < avail) avail = strtod(lim, NULL);
    if (need <= avail) return MTPLX_OK;
    char name[160] = "GPU 0";
    if (mtplx_cuda_device_name(0, name, sizeof name, NULL) != MTPLX_OK) snprintf(name, sizeof name, "GPU 0");
    return mtplx_fail(MTPLX_ERR_NOMEM,
                      "cuda: %s does not fit on %s: it needs %.2f GB (weights %.2f GB as the GPU "
                      "holds them + KV cache %.2f GB for %d positions + activations %.2f GB + "
                      "%.2f GB headroom) and %.2f GB of %.2f GB are free%s; try a smaller --ctx, a "
                      "smaller quant type, or --device cpu",
                      m->path ? m->path : m->name, name, need / 1e9, w / 1e9, kv / 1e9, p->n_ctx,
                      acts / 1e9, headroom / 1e9, avail / 1e9, (double)total_b / 1e9,
                      avail < (double)free_b ? " (MTPLX_CUDA_MEM_LIMIT)" : "");
}

mtplx_status mtplx_ctx_new(mtplx_model *model, const mtplx_ctx_params *params, mtplx_ctx **out) {
    *out = NULL;
    if (!model || (!model->layers && !model->bert))
        return mtplx_fail(MTPLX_ERR_ARG, "context: the model has no weights (vocab-only load)");
    mtplx_ctx_params p = params ? *params : mtplx_ctx_default_params();
    bool cuda = p.device && strcmp(p.device, "cuda") == 0;
    if (p.device && !cuda && strcmp(p.device, "cpu") != 0)
        return mtplx_fail(MTPLX_ERR_ARG, "context: unknown device \"%s\" (cpu or cuda)", p.device);
    int kv_type = kv_type_id(p.kv_type);
    if (kv_type < 0)
        return mtplx_fail(MTPLX_ERR_ARG, "context: kv_type %d is not MTPLX_KV_F16, F32 or Q8_0", (int)p.kv_type);
    if (p.kv_f32 && p.kv_type != MTPLX_KV_F16 && p.kv_type != MTPLX_KV_F32)
        return mtplx_fail(MTPLX_ERR_ARG, "context: kv_f32 is set and kv_type is %s; set one of them",
                          mtplx_kv_type_name(p.kv_type));
    if (p.kv_f32) {
        p.kv_type = MTPLX_KV_F32; /* one field from here on (check_gpu_fit reads it) */
        kv_type = MTPLX_TYPE_F32;
    }
    if (cuda && kv_type == MTPLX_TYPE_Q8_0)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "context: a Q8_0 KV cache runs on the CPU only; "
                          "with device cuda use kv_type F16 (--kv-type f16)");
    if (cuda && model->bert)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "context: encoder models run on the CPU only");
    const mtplx_hparams *hp = &model->hp;
    if (p.n_ctx <= 0) p.n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (p.n_ctx > hp->n_ctx_train) {
        mtplx_log(MTPLX_LOG_WARN, "context of %d is longer than the model's trained %d",
                  p.n_ctx, hp->n_ctx_train);
    }
    if (p.n_batch <= 0) p.n_batch = 512;
    if (p.n_batch > p.n_ctx) p.n_batch = p.n_ctx;
    if (p.n_batch < MTPLX_MAX_DRAFT + 1) p.n_batch = MTPLX_MAX_DRAFT + 1;
    mtplx_ctx *c = calloc(1, sizeof *c);
    if (!c) return mtplx_fail(MTPLX_ERR_NOMEM, "context: out of memory");
    c->model = model;
    c->n_ctx = p.n_ctx;
    c->n_batch = p.n_batch;
    c->kv_type = kv_type;
    int64_t max_k = hp->n_ff;
    if ((int64_t)hp->n_head * hp->head_dim > max_k) max_k = (int64_t)hp->n_head * hp->head_dim;
    if (2 * (int64_t)hp->n_embd > max_k) max_k = 2 * (int64_t)hp->n_embd;
    mtplx_status st = MTPLX_OK;
    if (p.share_backend_of) {
        const mtplx_ctx *o = p.share_backend_of;
        if (o->model != model || p.n_ctx > o->n_ctx || p.n_batch > o->n_batch)
            st = mtplx_fail(MTPLX_ERR_ARG, "context: a shared backend must come from a context of the "
                                           "same model with n_ctx >= %d and n_batch >= %d", p.n_ctx, p.n_batch);
        c->be = o->be;
        c->be_shared = true;
    } else {
        st = cuda ? mtplx_backend_cuda_new(0, max_k, p.n_batch, p.n_ctx, &c->be)
                  : mtplx_backend_cpu_new(p.n_threads, max_k, p.n_batch, p.n_ctx, &c->be);
    }
    if (st == MTPLX_OK && cuda) st = check_gpu_fit(model, &p, !p.share_backend_of);
    if (st == MTPLX_OK && cuda) {
        /* Q8_0's and Q4_K's bf16 tensor-core GEMV (cuda_backend.h): on
         * for a shared backend, whose batched rows near 16, where it beats
         * the int8 one; a model that drafts verifies 2-4 rows, which the
         * int8 GEMV does faster still (bench/RESULTS.md section 38) */
        mtplx_cuda_paths pp = mtplx_cuda_get_paths(c->be);
        if (pp.mma_q4k_auto && !pp.mma_q4k && p.share_backend_of) {
            pp.mma_q4k = true;
            mtplx_cuda_set_paths(c->be, pp);
        }
    }
    if (st == MTPLX_OK && !cuda) st = mtplx_model_draft_output_prepare(model);
    if (st == MTPLX_OK) st = mtplx_kv_init(&c->kv, c->be, hp, hp->n_layer, p.n_ctx, kv_type);
    if (st == MTPLX_OK) st = mtplx_acts_init(&c->acts, c->be, hp, p.n_batch);
    c->tokens = calloc((size_t)p.n_ctx, sizeof(int32_t));
    c->work = calloc((size_t)hp->n_vocab, sizeof(float));
    c->work_idx = calloc((size_t)hp->n_vocab, sizeof(int32_t));
    if (st == MTPLX_OK && c->be->download) {
        c->logits_host = calloc((size_t)c->acts.n_logits * (size_t)hp->n_vocab, sizeof(float));
        c->mtp_logits_host = calloc((size_t)hp->n_vocab, sizeof(float));
        if (!c->logits_host || !c->mtp_logits_host)
            st = mtplx_fail(MTPLX_ERR_NOMEM, "context: out of memory for host logits");
    }
    if (st == MTPLX_OK && (!c->tokens || !c->work || !c->work_idx))
        st = mtplx_fail(MTPLX_ERR_NOMEM, "context: out of memory");
    for (int i = 0; st == MTPLX_OK && i <= MTPLX_MAX_DRAFT; i++) {
        c->p[i] = calloc((size_t)hp->n_vocab, sizeof(float));
        c->q[i] = calloc((size_t)hp->n_vocab, sizeof(float));
        if (!c->p[i] || !c->q[i]) st = mtplx_fail(MTPLX_ERR_NOMEM, "context: out of memory");
    }
    if (st == MTPLX_OK && model->n_mtp > 0) {
        c->has_mtp = true;
        size_t e = (size_t)hp->n_embd;
        st = mtplx_acts_init(&c->mtp_acts, c->be, hp, p.n_batch);
        c->hist[0] = c->be->buf_alloc(c->be, (size_t)p.n_ctx * e * sizeof(float));
        c->stage = c->be->buf_alloc(c->be, (size_t)p.n_batch * e * sizeof(float));
        c->stage_tok = calloc((size_t)p.n_batch, sizeof(int32_t));
        if (c->be->sample_rows) c->q_dev = c->be->buf_alloc(c->be, MTPLX_MAX_DRAFT * c->be->dist_bytes);
        if (st == MTPLX_OK && (!c->hist[0] || !c->stage || !c->stage_tok ||
                               (c->be->sample_rows && !c->q_dev)))
            st = mtplx_fail(MTPLX_ERR_NOMEM, "context: out of memory for the MTP head");
    }
    if (st != MTPLX_OK) {
        mtplx_ctx_free(c);
        return st;
    }
    *out = c;
    return MTPLX_OK;
}

mtplx_status mtplx_ctx_streams(mtplx_ctx *c, int32_t depth) {
    const mtplx_hparams *hp = &c->model->hp;
    size_t e = (size_t)hp->n_embd;
    if (depth > MTPLX_MAX_DRAFT) depth = MTPLX_MAX_DRAFT;
    while (c->n_streams < depth) {
        int d = c->n_streams + 1; /* stream d lives in mtp_kv[d-1], hist[d], spec[d] */
        MTPLX_TRY(mtplx_kv_init(&c->mtp_kv[d - 1], c->be, hp, 1, c->n_ctx, c->kv_type));
        c->hist[d] = c->be->buf_alloc(c->be, (size_t)c->n_ctx * e * sizeof(float));
        c->spec[d] = c->be->buf_alloc(c->be, (size_t)(MTPLX_MAX_DRAFT + 1) * e * sizeof(float));
        if (!c->hist[d] || !c->spec[d])
            return mtplx_fail(MTPLX_ERR_NOMEM, "context: out of memory for MTP stream %d", d);
        c->valid[d] = 0;
        c->n_streams = d;
    }
    return MTPLX_OK;
}

void mtplx_ctx_free(mtplx_ctx *c) {
    if (!c) return;
    if (c->be) {
        mtplx_kv_free(&c->kv, c->be);
        mtplx_acts_free(&c->acts, c->be);
        for (int d = 0; d < MTPLX_MAX_DRAFT; d++)
            if (c->mtp_kv[d].k) mtplx_kv_free(&c->mtp_kv[d], c->be);
        mtplx_acts_free(&c->mtp_acts, c->be);
        c->be->buf_free(c->be, c->stage);
        c->be->buf_free(c->be, c->q_dev);
        for (int i = 0; i <= MTPLX_MAX_DRAFT; i++) {
            c->be->buf_free(c->be, c->spec[i]);
            if (i < MTPLX_MAX_DRAFT) c->be->buf_free(c->be, c->hist[i]);
        }
        if (!c->be_shared) c->be->free(c->be);
    }
    for (int i = 0; i <= MTPLX_MAX_DRAFT; i++) {
        free(c->p[i]);
        free(c->q[i]);
    }
    free(c->stage_tok);
    free(c->logits_host);
    free(c->mtp_logits_host);
    free(c->tokens);
    free(c->work);
    free(c->work_idx);
    free(c);
}

int32_t mtplx_ctx_n_past(const mtplx_ctx *c) { return c->n_past; }
int32_t mtplx_ctx_n_ctx(const mtplx_ctx *c) { return c->n_ctx; }

void mtplx_ctx_heads_keep(mtplx_ctx *c, int32_t common) {
    c->spec_k = 0; /* the sequence changed: no speculative row is taken over */
    /* stream d row j used token j+d: valid only while j + d < common */
    for (int d = 1; d <= c->n_streams; d++) {
        int32_t lim = common - d > 0 ? common - d : 0;
        if (c->valid[d] > lim) c->valid[d] = lim;
        if (c->valid[d] > c->valid[d - 1] && d > 1) c->valid[d] = c->valid[d - 1];
    }
}

mtplx_status mtplx_ctx_truncate(mtplx_ctx *c, int32_t n_past) {
    if (n_past < 0 || n_past > c->n_past)
        return mtplx_fail(MTPLX_ERR_RANGE, "truncate to %d: the cache holds %d positions", n_past,
                          c->n_past);
    c->n_past = n_past;
    mtplx_ctx_heads_keep(c, n_past);
    return MTPLX_OK;
}

mtplx_status mtplx_ctx_decode(mtplx_ctx *c, const int32_t *tokens, int32_t n, bool all_logits) {
    if (n <= 0) return mtplx_fail(MTPLX_ERR_ARG, "forward: no tokens");
    if (c->model->arch->encoder) /* BERT family: mtplx_embed / mtplx_rerank (engine/embed.c) */
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "forward: %s is an encoder (%s); it embeds or "
                          "reranks, it does not generate", c->model->path, c->model->arch->name);
    if (c->n_past + n > c->n_ctx)
        return mtplx_fail(MTPLX_ERR_RANGE, "forward: %d + %d tokens exceed the context of %d",
                          c->n_past, n, c->n_ctx);
    if (all_logits && n > c->acts.n_logits)
        return mtplx_fail(MTPLX_ERR_RANGE, "forward: all logits kept for at most %lld tokens at once, got %d",
                          (long long)c->acts.n_logits, n);
    int32_t V = c->model->hp.n_vocab;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return mtplx_fail(MTPLX_ERR_RANGE, "forward: token id %d is outside the vocabulary (0..%d)",
                              tokens[i], V - 1);
    for (int32_t done = 0; done < n;) {
        int32_t m = n - done < c->n_batch ? n - done : c->n_batch;
        mtplx_model_forward(c->model, c->be, &c->kv, &c->acts, tokens + done, m, c->n_past,
                            all_logits);
        mtplx_ctx_commit_rows(c, &c->acts, 0, tokens + done, m, all_logits);
        done += m;
    }
    return MTPLX_OK;
}

/* Rows of the last draft's speculative rows whose inputs turned out to be
 * committed (their drafts were accepted) become history: stream d row j
 * depends on token t_{j+d}, on stream d-1 row j and on stream d's own rows
 * below j, so it is taken over while t_{j+d} is committed and equals the
 * draft it was made from, stream d-1 row j is history, and every row below
 * it was taken over. Its K/V are already in stream d's cache. At full
 * acceptance this leaves each stream a+1 new rows per step instead of a+d. */
static void take_over_spec_rows(mtplx_ctx *c, int32_t N) {
    int64_t e = c->model->hp.n_embd;
    for (int32_t d = 1; d <= c->spec_k && d <= c->n_streams; d++) {
        /* spec rows use drafts only: spec_N < j + d <= spec_N + spec_k */
        for (int32_t j = c->valid[d]; j >= c->spec_row0[d] && j < c->spec_N && j < c->valid[d - 1] &&
                                      j + d > c->spec_N && j + d <= N &&
                                      c->tokens[j + d] == c->spec_drafts[j + d - c->spec_N - 1];
             j++) {
            mtplx_be_copy(c->be, c->hist[d] + j * e, c->spec[d] + (j - c->spec_row0[d]) * e,
                          (size_t)e * sizeof(float));
            c->valid[d] = j + 1;
        }
    }
    c->spec_k = 0;
}

/* Logits entries a head forward computes where nothing reads them (catch-up
 * chunks, the prime): the smallest vocabulary prefix the forward takes on
 * the CPU (8 ids), the whole row elsewhere (mtplx_draft_vocab_resolve). */
static int64_t unread_logits(const mtplx_ctx *c) {
    return mtplx_draft_vocab_resolve(c, 8);
}

/* Run stream d from row valid[d] up to row `end`, in chunks of the head's
 * activations. Row j reads token t_{j+d} (a draft past N = n_past: drafts[j+d-N-1])
 * and stream d-1's row j (its history below in_lo, its speculative rows
 * spec[d-1] from in_lo on); its output is history below ce, a speculative
 * row of spec[d] from ce on. Speculative rows go in the last call, whose
 * last row's logits (the first n_out ids) stay in mtp_acts.logits. valid[d]
 * advances over the history written. */
static void stream_rows(mtplx_ctx *c, int32_t d, int32_t end, int32_t in_lo, int32_t ce,
                        const int32_t *drafts, int64_t n_out) {
    const mtplx_model *m = c->model;
    int64_t e = m->hp.n_embd;
    int32_t N = c->n_past;
    size_t rb = (size_t)e * sizeof(float);
    for (int32_t a = c->valid[d]; a < end;) {
        int32_t rows = end - a;
        bool last = rows <= c->mtp_acts.n_max;
        if (!last) rows = (int32_t)c->mtp_acts.n_max;
        if (!last && a + rows > ce) rows = ce - a; /* keep speculative rows for the last call */
        for (int32_t r = 0; r < rows; r++) {
            int32_t t = a + r + d;
            MTPLX_ASSERT(t <= N || drafts); /* the prime's rows have committed inputs only */
            c->stage_tok[r] = t > N && drafts ? drafts[t - N - 1] : c->tokens[t];
        }
        /* input rows j = a.. come from stream d-1's history below in_lo,
         * from its speculative rows above: two copies */
        int32_t r1 = in_lo - a < 0 ? 0 : in_lo - a;
        if (r1 > rows) r1 = rows;
        if (r1 > 0)
            mtplx_be_copy(c->be, c->stage, c->hist[d - 1] + (int64_t)a * e, (size_t)r1 * rb);
        if (r1 < rows)
            mtplx_be_copy(c->be, c->stage + (int64_t)r1 * e,
                          c->spec[d - 1] + (int64_t)(a + r1 - in_lo) * e, (size_t)(rows - r1) * rb);
        mtplx_mtp_forward_vocab(m, 0, c->be, &c->mtp_kv[d - 1], &c->mtp_acts, c->stage_tok,
                                c->stage, rows, a, last ? n_out : unread_logits(c));
        /* output rows below ce are history, the rest speculative */
        int32_t r2 = ce - a < 0 ? 0 : ce - a;
        if (r2 > rows) r2 = rows;
        if (r2 > 0)
            mtplx_be_copy(c->be, c->hist[d] + (int64_t)a * e, c->mtp_acts.hidden, (size_t)r2 * rb);
        if (r2 < rows)
            mtplx_be_copy(c->be, c->spec[d] + (int64_t)(a + r2 - ce) * e,
                          c->mtp_acts.hidden + (int64_t)r2 * e, (size_t)(rows - r2) * rb);
        a += rows;
        c->valid[d] = a < ce ? a : ce;
    }
}

/* Prime: for d = 1..k run stream d over the rows whose inputs are all
 * committed, [valid[d], min(valid[d-1], N-d)) (N = n_past): row j needs
 * t_{j+d}, and the pending token t_N is not known yet when prefill ends.
 * The prompt's pass of the drafter, as llama.cpp's draft model and vLLM's
 * MTP do it in prompt processing; the first draft then only runs its one
 * new history row and its speculative rows per stream. */
mtplx_status mtplx_mtp_prime(mtplx_ctx *c, int32_t k) {
    MTPLX_ASSERT(c->has_mtp && k >= 1 && k <= MTPLX_MAX_DRAFT);
    MTPLX_TRY(mtplx_ctx_streams(c, k));
    int32_t N = c->n_past;
    c->valid[0] = N;
    for (int32_t d = 1; d <= k; d++) {
        int32_t ce = c->valid[d - 1] < N - d ? c->valid[d - 1] : N - d;
        if (c->valid[d] < ce) stream_rows(c, d, ce, ce, ce, NULL, unread_logits(c));
    }
    return MTPLX_OK;
}

/* Draft: for d = 1..k run stream d over rows [valid[d], N) (N = n_past, the
 * pending token x sits at N): rows below N+1-d have committed inputs and are
 * cached, the rest use drafts and this step's speculative rows of stream
 * d-1. The last row's logits give q_d. Rows not primed go in chunks. */
mtplx_status mtplx_mtp_draft(mtplx_ctx *c, int32_t x, int32_t k, mtplx_draft_fn fn, void *user,
                             const mtplx_sampler_params *dev_sp, int32_t *drafts) {
    MTPLX_ASSERT(c->has_mtp && k >= 1 && k <= MTPLX_MAX_DRAFT);
    MTPLX_TRY(mtplx_ctx_streams(c, k));
    const mtplx_model *m = c->model;
    int32_t N = c->n_past;
    MTPLX_ASSERT(N >= 1);
    c->tokens[N] = x; /* the verify pass writes the same token here */
    take_over_spec_rows(c, N);
    int32_t spec_lo[MTPLX_MAX_DRAFT + 1] = {0}; /* first speculative row of each stream */
    spec_lo[0] = N;
    c->valid[0] = N;
    for (int32_t d = 1; d <= k; d++) {
        int32_t ce = c->valid[d - 1] < N + 1 - d ? c->valid[d - 1] : N + 1 - d;
        if (ce < 0) ce = 0; /* short sequences: every row of stream d is speculative */
        if (c->valid[d] > ce) c->valid[d] = ce;
        spec_lo[d] = ce;
        stream_rows(c, d, N, spec_lo[d - 1], ce, drafts, c->draft_n_out);
        int32_t n_out = c->draft_n_out > 0 && c->draft_n_out < m->hp.n_vocab ? c->draft_n_out : m->hp.n_vocab;
        if (!fn && dev_sp) {
            mtplx_dev_sample r = {.draft = -1,
                                  .u_sample = mtplx_rng_uniform(dev_sp->seed, (uint64_t)(N + d), RNG_DRAFT)};
            bool ok = c->be->sample_rows(c->be, c->mtp_acts.logits, 1, n_out, dev_sp,
                                         (char *)c->q_dev + (size_t)(d - 1) * c->be->dist_bytes, NULL, &r);
            MTPLX_ASSERT(ok); /* the caller checked mtplx_dev_sampling_ok */
            drafts[d - 1] = r.id;
            continue;
        }
        if (!fn) { /* the pick alone: a draft needs no log-probability */
            c->be->argmax_rows(c->be, c->mtp_acts.logits, 1, n_out, &drafts[d - 1], NULL);
            continue;
        }
        float *ql = c->mtp_acts.logits;
        if (c->mtp_logits_host) {
            ql = c->mtp_logits_host;
            mtplx_be_download(c->be, ql, c->mtp_acts.logits, (size_t)n_out * sizeof(float));
        }
        for (int32_t t = n_out; t < m->hp.n_vocab; t++) ql[t] = -INFINITY;
        drafts[d - 1] = fn(user, d, ql, drafts);
    }
    c->spec_N = N;
    c->spec_k = k;
    memcpy(c->spec_row0, spec_lo, sizeof spec_lo);
    memcpy(c->spec_drafts, drafts, (size_t)k * sizeof(int32_t));
    return MTPLX_OK;
}

/* Automatic draft vocabulary: the whole of it. Whether a prefix pays
 * depends on the model and the machine: on the built-in model (8192 ids,
 * 1 thread, depth 3) the first 2048 ids cut tokens per forward from 3.08 to
 * 2.94 and lost speed, the first 4096 gained 3-6% (bench/RESULTS.md 17,
 * 18b, 20), at the edge of that machine's noise. So the library does not
 * guess: `mtplx tune` measures the half and the quarter on the user's
 * machine and the commands pass the winner as draft_vocab (cli/tuning.c). */
static int32_t draft_vocab_auto(int32_t V) { return V; }

int32_t mtplx_draft_vocab_resolve(const mtplx_ctx *c, int32_t requested) {
    int32_t V = c->model->hp.n_vocab;
    if (strcmp(c->be->name, "cpu") != 0 || requested < 0) return V;
    if (requested == 0) requested = draft_vocab_auto(V);
    int32_t n = (requested + 7) / 8 * 8;
    return n < V ? n : V;
}

void mtplx_ctx_commit_rows(mtplx_ctx *c, const mtplx_acts *a, int64_t row0, const int32_t *tokens,
                           int32_t n, bool all_logits) {
    int64_t e = c->model->hp.n_embd, V = c->model->hp.n_vocab;
    int64_t rows = all_logits ? n : 1; /* logits rows the forward kept */
    MTPLX_ASSERT(c->n_past + n <= c->n_ctx && rows <= c->acts.n_logits);
    memcpy(c->tokens + c->n_past, tokens, (size_t)n * sizeof(int32_t));
    if (c->has_mtp)
        mtplx_be_copy(c->be, c->hist[0] + (int64_t)c->n_past * e, a->hidden + row0 * e,
                          (size_t)n * (size_t)e * sizeof(float));
    if (a != &c->acts)
        mtplx_be_copy(c->be, c->acts.logits, a->logits + row0 * V, (size_t)(rows * V) * sizeof(float));
    else
        MTPLX_ASSERT(row0 == 0); /* the batch's host context holds the first rows */
    c->n_past += n;
    c->valid[0] = c->n_past;
    c->last_n = n;
    c->last_all = all_logits;
    c->logits_pending = c->logits_host ? (int32_t)rows : 0; /* copied when read */
}

float *mtplx_ctx_logits(const mtplx_ctx *cc) {
    if (!cc->logits_host) return cc->acts.logits;
    if (cc->logits_pending > 0) {
        /* a lazily filled cache of device data: logically const */
        mtplx_ctx *c = (mtplx_ctx *)cc;
        mtplx_be_download(c->be, c->logits_host, c->acts.logits,
                          (size_t)c->logits_pending * (size_t)c->model->hp.n_vocab * sizeof(float));
        c->logits_pending = 0;
    }
    return cc->logits_host;
}

void mtplx_ctx_pick(mtplx_ctx *c, int32_t n, int32_t *ids, float *logprob) {
    MTPLX_ASSERT(c->be->argmax_rows != NULL && n <= c->acts.n_logits);
    c->be->argmax_rows(c->be, c->acts.logits, n, c->model->hp.n_vocab, ids, logprob);
}

mtplx_status mtplx_forward(mtplx_ctx *c, const int32_t *tokens, int32_t n, bool all_logits) {
    if (!c || !tokens) return mtplx_fail(MTPLX_ERR_ARG, "forward: NULL argument");
    return mtplx_ctx_decode(c, tokens, n, all_logits);
}

const float *mtplx_logits(const mtplx_ctx *c, int32_t i) {
    if (c->last_n <= 0) return NULL;
    if (!c->last_all) return i == c->last_n - 1 || i == -1 ? mtplx_ctx_logits(c) : NULL;
    if (i < 0 || i >= c->last_n) return NULL;
    return mtplx_ctx_logits(c) + (int64_t)i * c->model->hp.n_vocab;
}
