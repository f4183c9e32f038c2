/* test_mtp.c: the MTP engine's two invariants on a random model with a
 * random MTP head (so drafts are often rejected and every branch runs):
 *  1. greedy MTP text == greedy AR text, for draft depths 1..4;
 *  2. sampled MTP output is distributed exactly as AR sampling: the joint
 *     distribution of the first three generated tokens under temperature and
 *     top-k, computed exactly by enumeration, against 20000 MTP samples, by a
 *     chi-square test whose false-failure rate is 1e-6.
 * Plus the rejection sampler alone on enumerated small vocabularies. */
#include "test_util.h"

/* Log-probabilities of the emitted tokens, to compare two paths' events. */
typedef struct lp_collect {
    int32_t n;
    float lp[512];
} lp_collect;

static int lp_collect_cb(const mtplx_token_event *ev, void *user) {
    lp_collect *c = user;
    if (ev->id >= 0 && c->n < 512) c->lp[c->n++] = ev->logprob;
    return 0;
}

/* q8_head: the head's matrices as the Q8_0 draft copy (MTPLX_MTP_Q8_0),
 * which the CPU replaces by Q4_0 copies unless q4_off (MTPLX_MTP_Q4_0), and
 * the lm_head the head drafts with as a Q4_0 copy (MTPLX_DRAFT_LM_Q4_0), the
 * defaults, which may change acceptance but never the output; without: the
 * head's own F32 weights. */
static void greedy_equal_with(bool q8_head, bool q4_off) {
    setenv("MTPLX_MTP_Q8_0", q8_head ? "1" : "0", 1);
    setenv("MTPLX_MTP_Q4_0", q4_off ? "0" : "1", 1);
    setenv("MTPLX_DRAFT_LM_Q4_0", q8_head ? "1" : "0", 1);
    mtplx_model *m = tu_random_model(1, 3.0f);
    unsetenv("MTPLX_MTP_Q8_0");
    unsetenv("MTPLX_MTP_Q4_0");
    unsetenv("MTPLX_DRAFT_LM_Q4_0");
    assert_int_equal(m->mtp[0].layer.w_up.type, q8_head ? MTPLX_TYPE_Q8_0 : MTPLX_TYPE_F32);
    assert_int_equal(m->mtp[0].eh_proj.type, q8_head ? MTPLX_TYPE_Q8_0 : MTPLX_TYPE_F32);
    /* the CPU's copies (lm_head, Q4_0 head) are made by the first CPU
     * context, not at load */
    assert_null(m->draft_output.data);
    assert_null(m->draft_mtp);
    mtplx_ctx *c = NULL;
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    assert_int_equal(mtplx_ctx_new(m, &cp, &c), MTPLX_OK);
    assert_int_equal(m->draft_output.type, q8_head ? MTPLX_TYPE_Q4_0 : 0);
    assert_true((m->draft_output.data != NULL) == q8_head);
    assert_true((m->draft_mtp != NULL) == (q8_head && !q4_off));
    if (m->draft_mtp) {
        assert_int_equal(m->draft_mtp[0].layer.w_down.type, MTPLX_TYPE_Q4_0);
        assert_int_equal(m->draft_mtp[0].eh_proj.type, MTPLX_TYPE_Q4_0);
        assert_ptr_equal(m->draft_mtp[0].norm, m->mtp[0].norm);
    }
    int32_t prompt[] = {1, 403, 261, 378, 285};
    mtplx_gen_params gp = mtplx_gen_default_params();
    gp.sampling.temperature = 0;
    gp.max_tokens = 96;
    gp.ignore_eos = true;
    gp.draft_depth = 0;
    static tu_collect ar, sp;
    memset(&ar, 0, sizeof ar);
    assert_int_equal(mtplx_generate(c, prompt, 5, &gp, tu_collect_cb, &ar, NULL), MTPLX_OK);
    assert_int_equal(ar.n, 96);
    /* no_event_logits: every pick by the backend's argmax_rows (the CPU's
     * too), no distributions built; the same tokens and log-probabilities */
    static lp_collect lp_host, lp_pick;
    memset(&lp_host, 0, sizeof lp_host);
    memset(&lp_pick, 0, sizeof lp_pick);
    assert_int_equal(mtplx_generate(c, prompt, 5, &gp, lp_collect_cb, &lp_host, NULL), MTPLX_OK);
    for (int picks = 0; picks <= 1; picks++) {
        gp.no_event_logits = picks;
        for (int depth = 0; depth <= 6; depth++) {
            memset(&sp, 0, sizeof sp);
            gp.draft_depth = depth > 4 ? depth - 3 : depth;
            gp.draft_vocab = depth > 4 ? 64 : -1; /* depths 2 and 3 again, drafting over ids < 64 */
            mtplx_gen_stats st;
            assert_int_equal(mtplx_generate(c, prompt, 5, &gp, tu_collect_cb, &sp, &st), MTPLX_OK);
            char what[64];
            snprintf(what, sizeof what, "depth %d (draft vocab %d, picks %d)", gp.draft_depth, gp.draft_vocab,
                     picks);
            tu_assert_same_ids(&ar, &sp, what);
            if (depth == 0) continue;
            assert_true(st.n_forward < 96); /* at least something was accepted... */
            assert_true(st.drafted[0] > 0);
        }
        if (picks) {
            gp.draft_depth = 3;
            gp.draft_vocab = -1;
            assert_int_equal(mtplx_generate(c, prompt, 5, &gp, lp_collect_cb, &lp_pick, NULL), MTPLX_OK);
        }
    }
    assert_int_equal(lp_pick.n, lp_host.n);
    assert_memory_equal(lp_pick.lp, lp_host.lp, (size_t)lp_host.n * sizeof(float));
    mtplx_ctx_free(c);
    mtplx_model_free(m);
}

static void greedy_equal(void **state) {
    (void)state;
    greedy_equal_with(false, false);
}

/* Greedy with penalties: the draft and the verifier both pick after the
 * penalties (drafts count as history), and MTP text still equals AR. */
static void greedy_equal_penalties(void **state) {
    (void)state;
    tu_bigram_noise = 1.0f; /* a head that is mostly right, so drafts are kept */
    mtplx_model *m = tu_random_model(1, 1.0f);
    tu_bigram_noise = -1.0f;
    mtplx_ctx *c = NULL;
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_ctx = 256;
    assert_int_equal(mtplx_ctx_new(m, &cp, &c), MTPLX_OK);
    int32_t prompt[] = {1, 403, 261, 378, 285};
    mtplx_gen_params gp = mtplx_gen_default_params();
    gp.sampling.temperature = 0;
    gp.sampling.repeat_penalty = 1.1f;
    gp.sampling.presence_penalty = 0.05f;
    gp.max_tokens = 64;
    gp.ignore_eos = true;
    static tu_collect ar, sp;
    memset(&ar, 0, sizeof ar);
    gp.draft_depth = 0;
    assert_int_equal(mtplx_generate(c, prompt, 5, &gp, tu_collect_cb, &ar, NULL), MTPLX_OK);
    for (int depth = 1; depth <= 3; depth++) {
        memset(&sp, 0, sizeof sp);
        gp.draft_depth = depth;
        mtplx_gen_stats st;
        assert_int_equal(mtplx_generate(c, prompt, 5, &gp, tu_collect_cb, &sp, &st), MTPLX_OK);
        char what[32];
        snprintf(what, sizeof what, "depth %d", depth);
        tu_assert_same_ids(&ar, &sp, what);
        print_message("depth %d accepted %lld of %lld\n", depth, (long long)st.accepted[0], (long long)st.drafted[0]);
        assert_true(st.accepted[0] > 0);
    }
    mtplx_ctx_free(c);
    mtplx_model_free(m);
}

static void greedy_equal_q8_head(void **state) {
    (void)state;
    greedy_equal_with(true, true);
}

static void greedy_equal_q4_head(void **state) {
    (void)state;
    greedy_equal_with(true, false);
}

/* Regularised upper tail of chi-square via Wilson-Hilferty: good to a few
 * percent in the far tail, plenty for a 1e-6 threshold. */
static double chi2_sf(double x, double k) {
    double z = (cbrt(x / k) - (1 - 2 / (9 * k))) / sqrt(2 / (9 * k));
    return 0.5 * erfc(z / sqrt(2));
}

/* A random one-layer model whose head is close to the target (tu_random_model
 * with tu_bigram_noise 2): drafts are often right, so accepts, rejections,
 * bonus tokens and rows taken over all occur. */
static mtplx_model *model_head_often_right(void) {
    tu_bigram_noise = 2.0f;
    mtplx_model *m = tu_random_model(1, 0.05f);
    tu_bigram_noise = -1.0f;
    return m;
}

#define TOPK 4
/* draft_vocab: the draft's support (mtplx_gen_params.draft_vocab); a small
 * one leaves some target tokens out of q entirely, which only the residual
 * can produce. */
static void joint_distribution(int32_t draft_vocab, int N) {
    /* drafts close to the target: accept, reject and bonus all run */
    mtplx_model *m = model_head_often_right();
    mtplx_ctx *c = NULL;
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    assert_int_equal(mtplx_ctx_new(m, &cp, &c), MTPLX_OK);
    int32_t V = 512;
    mtplx_sampler_params sp = mtplx_sampler_default_params();
    sp.temperature = 0.9f;
    sp.top_k = TOPK;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    int32_t prompt[8] = {1, 403, 261, 378};
    int np = 4;
    float *dist = malloc(V * sizeof(float)), *work = malloc(V * sizeof(float));
    int32_t *idx = malloc(V * sizeof(int32_t));
    /* exact joint of (t1, t2, t3) by enumeration */
    enum { MAXC = TOPK * TOPK * TOPK };
    int32_t cell[MAXC][3];
    double prob[MAXC];
    int ncell = 0;
    int32_t seq[8];
    memcpy(seq, prompt, sizeof prompt);
    mtplx_history none = {NULL, 0};
    assert_int_equal(mtplx_ctx_truncate(c, 0), MTPLX_OK);
    assert_int_equal(mtplx_forward(c, seq, np, false), MTPLX_OK);
    float p1[512];
    mtplx_sampler_dist(mtplx_logits(c, np - 1), V, &sp, none, p1, work, idx);
    for (int32_t a = 0; a < V; a++) {
        if (p1[a] <= 0) continue;
        seq[np] = a;
        assert_int_equal(mtplx_ctx_truncate(c, 0), MTPLX_OK);
        assert_int_equal(mtplx_forward(c, seq, np + 1, false), MTPLX_OK);
        float p2[512];
        mtplx_sampler_dist(mtplx_logits(c, np), V, &sp, none, p2, work, idx);
        for (int32_t b = 0; b < V; b++) {
            if (p2[b] <= 0) continue;
            seq[np + 1] = b;
            assert_int_equal(mtplx_ctx_truncate(c, 0), MTPLX_OK);
            assert_int_equal(mtplx_forward(c, seq, np + 2, false), MTPLX_OK);
            mtplx_sampler_dist(mtplx_logits(c, np + 1), V, &sp, none, dist, work, idx);
            for (int32_t t = 0; t < V; t++) {
                if (dist[t] <= 0) continue;
                assert_true(ncell < MAXC);
                cell[ncell][0] = a;
                cell[ncell][1] = b;
                cell[ncell][2] = t;
                prob[ncell++] = (double)p1[a] * p2[b] * dist[t];
            }
        }
    }
    /* MTP samples at depth 2 */
    static int count[MAXC];
    memset(count, 0, sizeof count);
    mtplx_gen_params gp = mtplx_gen_default_params();
    gp.sampling = sp;
    gp.max_tokens = 3;
    gp.ignore_eos = true;
    gp.draft_depth = 2;
    gp.draft_vocab = draft_vocab;
    int drafted_ok = 0, outside = 0;
    for (int s = 0; s < N; s++) {
        tu_collect got;
        memset(&got, 0, sizeof got);
        gp.sampling.seed = 1000 + (uint64_t)s;
        mtplx_gen_stats st;
        assert_int_equal(mtplx_generate(c, prompt, np, &gp, tu_collect_cb, &got, &st), MTPLX_OK);
        assert_int_equal(got.n, 3);
        drafted_ok += got.by_src[MTPLX_SRC_DRAFTED];
        for (int i = 0; i < 3; i++) outside += draft_vocab > 0 && got.ids[i] >= draft_vocab;
        int k = 0;
        while (k < ncell && !(cell[k][0] == got.ids[0] && cell[k][1] == got.ids[1] && cell[k][2] == got.ids[2])) k++;
        if (k == ncell) fail_msg("sample %d: (%d %d %d) has probability 0", s, got.ids[0], got.ids[1], got.ids[2]);
        count[k]++;
    }
    /* pool cells with expected count < 5 */
    double chi = 0, pool_e = 0, pool_o = 0;
    int df = -1;
    for (int k = 0; k < ncell; k++) {
        double e = prob[k] * N;
        if (e < 5) {
            pool_e += e;
            pool_o += count[k];
            continue;
        }
        chi += (count[k] - e) * (count[k] - e) / e;
        df++;
    }
    if (pool_e > 0) {
        chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        df++;
    }
    double pval = chi2_sf(chi, df);
    print_message("joint of 3 tokens, draft vocab %d: %d cells, chi2 %.1f on %d df, p = %.3g; "
                  "%d drafted tokens accepted, %d tokens from outside the draft's vocabulary\n",
                  draft_vocab, ncell, chi, df, pval, drafted_ok, outside);
    assert_true(drafted_ok > (draft_vocab > 0 ? N / 10 : N / 4)); /* the accept path ran often */
    if (draft_vocab > 0) assert_true(outside > N / 20); /* and the residual-only tokens did occur */
    assert_true(pval > 1e-6);
    free(dist);
    free(work);
    free(idx);
    mtplx_ctx_free(c);
    mtplx_model_free(m);
}

static void distribution_exact(void **state) {
    (void)state;
    joint_distribution(-1, 20000); /* the whole vocabulary */
}

static void distribution_exact_draft_vocab(void **state) {
    (void)state;
    joint_distribution(256, 12000); /* the draft covers half of the 512 ids */
}

/* The sampler's transforms against a direct computation. */
/* top-k on a large vocabulary (the one-pass heap path): exactly the k
 * largest logits, ties at the boundary going to the lower id, with
 * probabilities exp(l - max) over their sum; masked ids never kept */
static void sampler_top_k_large(void **state) {
    (void)state;
    enum { V = 5000, K = 40 };
    static float l[V], p[V], w[V];
    static int32_t idx[V];
    uint64_t x = 12345;
    for (int i = 0; i < V; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        l[i] = (float)((x >> 40) % 200) / 10.0f; /* 200 levels: many ties */
    }
    l[17] = -INFINITY;
    mtplx_sampler_params sp = mtplx_sampler_default_params();
    sp.temperature = 1.0f, sp.top_k = K, sp.top_p = 1.0f, sp.min_p = 0;
    mtplx_history none = {NULL, 0};
    mtplx_sampler_dist(l, V, &sp, none, p, w, idx);
    /* brute force: rank = number of ids ranking above */
    double z = 0, mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    int kept = 0;
    for (int i = 0; i < V; i++) {
        int above = 0;
        for (int j = 0; j < V; j++) above += l[j] > l[i] || (l[j] == l[i] && j < i);
        bool in = above < K && l[i] != -INFINITY;
        assert_true((p[i] > 0) == in);
        if (in) z += exp(l[i] - mx), kept++;
    }
    assert_int_equal(kept, K);
    for (int i = 0; i < V; i++)
        if (p[i] > 0) assert_float_equal(p[i], exp(l[i] - mx) / z, 1e-6);
}

static void sampler_transforms(void **state) {
    (void)state;
    float logits[6] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 3.0f}, p[6], w[6];
    int32_t idx[6];
    mtplx_sampler_params sp = mtplx_sampler_default_params();
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0;
    mtplx_history none = {NULL, 0};
    mtplx_sampler_dist(logits, 6, &sp, none, p, w, idx);
    double z = 0;
    for (int i = 0; i < 6; i++) z += exp(logits[i]);
    for (int i = 0; i < 6; i++) assert_float_equal(p[i], exp(logits[i]) / z, 1e-6);
    sp.top_k = 3; /* keeps 3.0, 2.0, 1.0 */
    mtplx_sampler_dist(logits, 6, &sp, none, p, w, idx);
    z = exp(3.0) + exp(2.0) + exp(1.0);
    assert_float_equal(p[5], exp(3.0) / z, 1e-6);
    assert_float_equal(p[0], exp(2.0) / z, 1e-6);
    assert_float_equal(p[2], 0.0, 0);
    sp.top_k = 0;
    sp.top_p = 0.8f; /* sorted probs .5745 .2113 .0777 ...: nucleus is the top 2 */
    mtplx_sampler_dist(logits, 6, &sp, none, p, w, idx);
    assert_true(p[5] > 0 && p[0] > 0 && p[1] == 0);
    assert_float_equal(p[5] + p[0], 1.0, 1e-6);
    sp.top_p = 1.0f;
    sp.min_p = 0.3f; /* keeps p >= 0.3 * pmax: exp(x-3) >= 0.3 -> x >= 1.796 */
    mtplx_sampler_dist(logits, 6, &sp, none, p, w, idx);
    assert_true(p[5] > 0 && p[0] > 0 && p[1] == 0);
    sp.min_p = 0;
    sp.temperature = 0;
    mtplx_sampler_dist(logits, 6, &sp, none, p, w, idx);
    assert_float_equal(p[5], 1.0, 0);
    /* presence penalty on the argmax flips the greedy choice */
    int32_t hist[1] = {5};
    sp.presence_penalty = 1.5f;
    mtplx_sampler_dist(logits, 6, &sp, (mtplx_history){hist, 1}, p, w, idx);
    assert_float_equal(p[0], 1.0, 0);
}

/* After a long sampled generation with many rejections (random head), the
 * KV cache must equal a fresh prefill of the same text: compare the logits
 * of every position, recomputed through the cache, with a fresh context. */
static void cache_integrity(void **state) {
    (void)state;
    mtplx_model *m = tu_random_model(1, 0.12f);
    mtplx_ctx *c = NULL, *f = NULL;
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_ctx = 512;
    cp.n_threads = 2;
    assert_int_equal(mtplx_ctx_new(m, &cp, &c), MTPLX_OK);
    assert_int_equal(mtplx_ctx_new(m, &cp, &f), MTPLX_OK);
    int32_t prompt[] = {1, 403, 261, 378, 285};
    mtplx_gen_params gp = mtplx_gen_default_params();
    gp.sampling.temperature = 1.0f;
    gp.sampling.top_k = 0;
    gp.sampling.top_p = 1.0f;
    gp.sampling.min_p = 0;
    gp.sampling.seed = 7;
    gp.max_tokens = 300;
    gp.ignore_eos = true;
    gp.draft_depth = 3;
    static tu_collect got;
    memset(&got, 0, sizeof got);
    mtplx_gen_stats st;
    assert_int_equal(mtplx_generate(c, prompt, 5, &gp, tu_collect_cb, &got, &st), MTPLX_OK);
    assert_int_equal(got.n, 300);
    int64_t rejected = 0;
    for (int i = 0; i < 3; i++) rejected += st.drafted[i] - st.accepted[i];
    assert_true(rejected > 50);
    /* the cache holds prompt + generated[0..n-2]; feed the last token */
    static int32_t seq[512];
    memcpy(seq, prompt, sizeof prompt);
    memcpy(seq + 5, got.ids, (size_t)got.n * sizeof(int32_t));
    int n = 5 + got.n;
    assert_int_equal(mtplx_ctx_n_past(c), n - 1);
    double worst = 0;
    int V = m->hp.n_vocab;
    /* every position: roll the cached context back and recompute that
     * position's logits through the cache; fresh context computes in chunks */
    static float fresh[512][512];
    for (int s0 = 0; s0 < n; s0 += 16) {
        int k = n - s0 < 16 ? n - s0 : 16;
        assert_int_equal(mtplx_forward(f, seq + s0, k, true), MTPLX_OK);
        for (int i = 0; i < k; i++) memcpy(fresh[s0 + i], mtplx_logits(f, i), V * sizeof(float));
    }
    for (int p = n - 1; p >= 1; p -= 7) {
        assert_int_equal(mtplx_ctx_truncate(c, p), MTPLX_OK);
        assert_int_equal(mtplx_forward(c, &seq[p], 1, false), MTPLX_OK);
        const float *l = mtplx_logits(c, 0);
        double mx = 0, mb = 0;
        for (int v = 0; v < V; v++) {
            double d = fabs(l[v] - fresh[p][v]);
            if (d > mx) mx = d;
            if (fabs(fresh[p][v]) > mb) mb = fabs(fresh[p][v]);
        }
        if (mx / mb > worst) worst = mx / mb;
    }
    print_message("cache integrity: %lld rejections, worst relative logit difference %.3g\n",
                  (long long)rejected, worst);
    assert_true(worst < 1e-4);
    mtplx_ctx_free(c);
    mtplx_ctx_free(f);
    mtplx_model_free(m);
}

/* A prompt longer than the head's pending buffer (small n_batch) makes the
 * head consume the prefill as it goes; two contexts sharing one backend,
 * stepped alternately with mtplx_gen_step, give the same greedy tokens as
 * mtplx_generate and as AR. */
static void long_prompt_and_interleaved_steps(void **state) {
    (void)state;
    mtplx_model *m = tu_random_model(1, 3.0f);
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 16;
    cp.n_threads = 2;
    mtplx_ctx *a = NULL, *b = NULL;
    assert_int_equal(mtplx_ctx_new(m, &cp, &a), MTPLX_OK);
    cp.share_backend_of = a;
    assert_int_equal(mtplx_ctx_new(m, &cp, &b), MTPLX_OK);
    int32_t prompt[100];
    for (int i = 0; i < 100; i++) prompt[i] = (int32_t)((i * 37 + 11) % 500) + 3;
    mtplx_gen_params gp = mtplx_gen_default_params();
    gp.sampling.temperature = 0;
    gp.max_tokens = 40;
    gp.ignore_eos = true;
    gp.draft_depth = 0;
    static tu_collect ar, x, y;
    memset(&ar, 0, sizeof ar);
    assert_int_equal(mtplx_generate(a, prompt, 100, &gp, tu_collect_cb, &ar, NULL), MTPLX_OK);
    gp.draft_depth = 3;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    mtplx_gen *ga = NULL, *gb = NULL;
    assert_int_equal(mtplx_gen_start(a, prompt, 100, &gp, &ga), MTPLX_OK);
    assert_int_equal(mtplx_gen_start(b, prompt + 10, 90, &gp, &gb), MTPLX_OK);
    bool da = false, db = false;
    int steps = 0;
    while (!da || !db) {
        if (!da) assert_int_equal(mtplx_gen_step(ga, tu_collect_cb, &x, &da), MTPLX_OK);
        if (!db) assert_int_equal(mtplx_gen_step(gb, tu_collect_cb, &y, &db), MTPLX_OK);
        assert_true(++steps < 1000);
    }
    assert_int_equal(x.n, 40);
    for (int i = 0; i < 40; i++) assert_int_equal(x.ids[i], ar.ids[i]);
    assert_true(mtplx_gen_get_stats(ga)->drafted[0] > 0);
    mtplx_gen_free(ga);
    mtplx_gen_free(gb);
    /* b's result equals a plain generate of the same prompt */
    static tu_collect z;
    memset(&z, 0, sizeof z);
    assert_int_equal(mtplx_generate(a, prompt + 10, 90, &gp, tu_collect_cb, &z, NULL), MTPLX_OK);
    assert_int_equal(y.n, z.n);
    for (int i = 0; i < z.n; i++) assert_int_equal(y.ids[i], z.ids[i]);
    mtplx_ctx_free(b);
    mtplx_ctx_free(a);
    mtplx_model_free(m);
}

/* The acceptance test alone: for target / draft distributions made by the
 * sampler's transforms (temperature x top-k x top-p x min-p) over an
 * 8-token vocabulary, the procedure "x ~ q; keep x if u < p(x)/q(x), else
 * draw from the residual" must output exactly p: 200000 runs per
 * combination against p by chi-square (false-failure rate 1e-6 each).
 * Greedy: the output is always p's argmax. */
static void rejection_sampler_exact(void **state) {
    (void)state;
    enum { V = 8 };
    float temps[] = {0.5f, 1.0f, 1.7f}, topps[] = {1.0f, 0.8f}, minps[] = {0.0f, 0.12f};
    int topks[] = {0, 3};
    uint64_t seed = 1;
    int combos = 0;
    for (int ti = 0; ti < 3; ti++)
        for (int ki = 0; ki < 2; ki++)
            for (int pi = 0; pi < 2; pi++)
                for (int mi = 0; mi < 2; mi++) {
                    float lp[V], lq[V], p[V], q[V], w[V], pr[V];
                    int32_t idx[V];
                    for (int i = 0; i < V; i++) {
                        lp[i] = 1.5f * tu_randn();
                        lq[i] = lp[i] + 1.0f * tu_randn(); /* a related but different draft */
                    }
                    mtplx_sampler_params sp = mtplx_sampler_default_params();
                    sp.temperature = temps[ti];
                    sp.top_k = topks[ki];
                    sp.top_p = topps[pi];
                    sp.min_p = minps[mi];
                    mtplx_history none = {NULL, 0};
                    mtplx_sampler_dist(lp, V, &sp, none, p, w, idx);
                    mtplx_sampler_dist(lq, V, &sp, none, q, w, idx);
                    const int N = 200000;
                    int count[V] = {0}, accepted = 0;
                    for (int n = 0; n < N; n++) {
                        int32_t x = mtplx_sample_dist(q, V, mtplx_rng_uniform(seed, (uint64_t)n, RNG_DRAFT));
                        memcpy(pr, p, sizeof p);
                        double u = mtplx_rng_uniform(seed, (uint64_t)n, RNG_ACCEPT);
                        int32_t out = x;
                        if (mtplx_accept_or_residual(pr, q, V, x, u, false)) accepted++;
                        else out = mtplx_sample_dist(pr, V, mtplx_rng_uniform(seed, (uint64_t)n, RNG_RESIDUAL));
                        count[out]++;
                    }
                    seed++;
                    double chi = 0;
                    int df = -1;
                    for (int i = 0; i < V; i++) {
                        if (p[i] <= 0) {
                            assert_int_equal(count[i], 0); /* never outside the target's support */
                            continue;
                        }
                        double e = p[i] * N;
                        chi += (count[i] - e) * (count[i] - e) / e;
                        df++;
                    }
                    double pval = df > 0 ? chi2_sf(chi, df) : 1.0;
                    if (pval < 1e-6)
                        fail_msg("T=%.1f top-k %d top-p %.1f min-p %.2f: chi2 %.1f on %d df, p = %.3g",
                                 temps[ti], topks[ki], topps[pi], minps[mi], chi, df, pval);
                    assert_true((accepted > 0 && accepted < N) || df == 0);
                    combos++;
                    /* greedy: one-hot distributions, output = argmax p */
                    sp.temperature = 0;
                    mtplx_sampler_dist(lp, V, &sp, none, p, w, idx);
                    mtplx_sampler_dist(lq, V, &sp, none, q, w, idx);
                    int32_t want = mtplx_sample_dist(p, V, 0.0), x = mtplx_sample_dist(q, V, 0.0), out = x;
                    memcpy(pr, p, sizeof p);
                    if (!mtplx_accept_or_residual(pr, q, V, x, 0.0, true)) out = mtplx_sample_dist(pr, V, 0.0);
                    assert_int_equal(out, want);
                }
    print_message("rejection sampler: %d transform combinations match the target exactly\n", combos);
}

/* mtplx_gen_step_many: three generations (two MTP depths and one AR) on
 * contexts sharing one backend verify in one batched forward, and each
 * gives exactly what it gives alone, greedy and sampled. */
static void batched_step_many(void **state) {
    (void)state;
    mtplx_model *m = model_head_often_right(); /* all paths run */
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    mtplx_ctx *c[3] = {NULL, NULL, NULL};
    assert_int_equal(mtplx_ctx_new(m, &cp, &c[0]), MTPLX_OK);
    cp.share_backend_of = c[0];
    assert_int_equal(mtplx_ctx_new(m, &cp, &c[1]), MTPLX_OK);
    assert_int_equal(mtplx_ctx_new(m, &cp, &c[2]), MTPLX_OK);
    int32_t prompts[3][6] = {{1, 403, 261, 378, 285, 50}, {1, 77, 88}, {1, 300, 301, 302, 303}};
    int32_t np[3] = {6, 3, 5}, depth[3] = {3, 2, 0};
    int64_t accepted = 0;
    for (int temp = 0; temp < 2; temp++) {
        static tu_collect alone[3], many[3];
        mtplx_gen_params gp[3];
        for (int i = 0; i < 3; i++) {
            gp[i] = mtplx_gen_default_params();
            gp[i].sampling.temperature = temp ? 1.0f : 0.0f;
            gp[i].sampling.top_k = 0;
            gp[i].sampling.top_p = 1.0f;
            gp[i].sampling.min_p = 0;
            gp[i].sampling.seed = 40 + (uint64_t)i;
            gp[i].max_tokens = 50 + 7 * i;
            gp[i].ignore_eos = true;
            gp[i].draft_depth = depth[i];
            memset(&alone[i], 0, sizeof alone[i]);
            assert_int_equal(mtplx_generate(c[i], prompts[i], np[i], &gp[i], tu_collect_cb, &alone[i], NULL),
                             MTPLX_OK);
        }
        mtplx_gen *g[3];
        void *users[3];
        bool done[3] = {false, false, false};
        for (int i = 0; i < 3; i++) {
            memset(&many[i], 0, sizeof many[i]);
            users[i] = &many[i];
            assert_int_equal(mtplx_ctx_truncate(c[i], 0), MTPLX_OK);
            assert_int_equal(mtplx_gen_start(c[i], prompts[i], np[i], &gp[i], &g[i]), MTPLX_OK);
        }
        int rounds = 0;
        while (!(done[0] && done[1] && done[2])) {
            mtplx_gen *act[3];
            void *us[3];
            bool d[3];
            int na = 0, idx[3];
            for (int i = 0; i < 3; i++)
                if (!done[i]) {
                    act[na] = g[i];
                    us[na] = users[i];
                    idx[na++] = i;
                }
            assert_int_equal(mtplx_gen_step_many(act, na, tu_collect_cb, us, d), MTPLX_OK);
            for (int j = 0; j < na; j++) done[idx[j]] = d[j];
            assert_true(++rounds < 1000);
        }
        for (int i = 0; i < 3; i++) {
            assert_int_equal(many[i].n, alone[i].n);
            for (int t = 0; t < alone[i].n; t++)
                if (many[i].ids[t] != alone[i].ids[t])
                    fail_msg("temp %d, generation %d: token %d differs (%d vs %d)", temp, i, t,
                             many[i].ids[t], alone[i].ids[t]);
            if (depth[i] > 0) accepted += mtplx_gen_get_stats(g[i])->accepted[0];
            mtplx_gen_free(g[i]);
        }
        assert_true(accepted > 0); /* batched verification accepted drafts */
    }
    for (int i = 2; i >= 0; i--) mtplx_ctx_free(c[i]);
    mtplx_model_free(m);
}

static int32_t argmax_draft(void *user, int32_t d, float *logits, const int32_t *drafts) {
    (void)d, (void)drafts;
    int32_t V = *(const int32_t *)user, best = 0;
    for (int32_t i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* Draft 3 tokens after x (greedy) on contexts c and f that hold the same
 * sequence: the drafts, the streams' cached row counts and their rows (up to
 * a relative 1e-4) are the same. */
static void same_drafts_and_rows(mtplx_ctx *c, mtplx_ctx *f, int32_t x, const char *what) {
    int32_t V = c->model->hp.n_vocab, dc[3], df[3];
    assert_int_equal(mtplx_mtp_draft(c, x, 3, argmax_draft, &V, NULL, dc), MTPLX_OK);
    assert_int_equal(mtplx_mtp_draft(f, x, 3, argmax_draft, &V, NULL, df), MTPLX_OK);
    int64_t e = c->model->hp.n_embd;
    double worst = 0;
    for (int d = 1; d <= 3; d++) {
        assert_int_equal(dc[d - 1], df[d - 1]);
        assert_int_equal(c->valid[d], f->valid[d]);
        for (int64_t i = 0; i < (int64_t)c->valid[d] * e; i++) {
            double diff = fabs(c->hist[d][i] - f->hist[d][i]) / (1.0 + fabs(f->hist[d][i]));
            if (diff > worst) worst = diff;
        }
    }
    print_message("%s: worst relative difference %.3g\n", what, worst);
    assert_true(worst < 1e-4);
}

/* The head's rows that a draft takes over from the previous draft (its
 * speculative rows whose drafts were accepted) equal the rows a fresh
 * context computes from scratch over the same sequence, and so do the next
 * drafts. A row taken over from a rejected draft would differ. */
static void head_rows_taken_over(void **state) {
    (void)state;
    mtplx_model *m = model_head_often_right(); /* rows are taken over */
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    mtplx_ctx *c = NULL, *f = NULL;
    assert_int_equal(mtplx_ctx_new(m, &cp, &c), MTPLX_OK);
    assert_int_equal(mtplx_ctx_new(m, &cp, &f), MTPLX_OK);
    int32_t prompt[] = {1, 403, 261, 378, 285, 50};
    mtplx_gen_params gp = mtplx_gen_default_params();
    gp.sampling.temperature = 1.0f; /* greedy falls into a loop that is always accepted */
    gp.sampling.top_k = 0;
    gp.sampling.seed = 5;
    gp.max_tokens = 200;
    gp.ignore_eos = true;
    gp.draft_depth = 3;
    static tu_collect got;
    memset(&got, 0, sizeof got);
    /* whole steps only, so that the cache ends just before the last token */
    mtplx_gen *g = NULL;
    bool done = false;
    assert_int_equal(mtplx_gen_start(c, prompt, 6, &gp, &g), MTPLX_OK);
    while (got.n < 120 && !done) assert_int_equal(mtplx_gen_step(g, tu_collect_cb, &got, &done), MTPLX_OK);
    const mtplx_gen_stats *st = mtplx_gen_get_stats(g);
    assert_true(st->accepted[1] > 5 && st->accepted[1] < st->drafted[1]); /* kept and rejected */
    mtplx_gen_free(g);
    static int32_t seq[256];
    memcpy(seq, prompt, sizeof prompt);
    memcpy(seq + 6, got.ids, (size_t)got.n * sizeof(int32_t));
    int32_t n = 6 + got.n - 1, x = seq[n];
    assert_int_equal(mtplx_ctx_n_past(c), n);
    assert_int_equal(mtplx_forward(f, seq, n, false), MTPLX_OK);
    same_drafts_and_rows(c, f, x, "head rows taken over");
    mtplx_ctx_free(f);
    mtplx_ctx_free(c);
    mtplx_model_free(m);
}

/* Priming (mtplx_mtp_prime at the end of prefill, after the first token's
 * event; MTPLX_MTP_PRIME=0 turns it off) moves the head's pass over the
 * prompt out of the first decode step and changes nothing else: after it each stream holds exactly the rows
 * whose inputs are committed, the first draft and the streams' rows are the
 * unprimed ones, and greedy and sampled (fixed seed) text are the same with
 * it on and off: prefill and the head's pass in chunks, a second turn over
 * a cached prefix, fixed and adaptive depth. */
typedef struct {
    mtplx_ctx *c;
    int events;
    int32_t valid_at_first; /* stream 1's committed rows when the first token came */
} prime_probe;

static int prime_probe_cb(const mtplx_token_event *ev, void *user) {
    (void)ev;
    prime_probe *p = user;
    if (p->events++ == 0) p->valid_at_first = p->c->valid[1];
    return 0;
}

static void prime_same_output(void **state) {
    (void)state;
    mtplx_model *m = model_head_often_right(); /* drafts are kept */
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 16; /* prefill and the head's pass in chunks */
    cp.n_threads = 2;
    mtplx_ctx *c = NULL, *f = NULL;
    assert_int_equal(mtplx_ctx_new(m, &cp, &c), MTPLX_OK);
    assert_int_equal(mtplx_ctx_new(m, &cp, &f), MTPLX_OK);
    enum { N = 40 };
    int32_t prompt[N], prompt2[N];
    for (int i = 0; i < N; i++) {
        prompt[i] = 1 + (i * 37 + 11) % 400;
        prompt2[i] = i < 30 ? prompt[i] : 2 + (i * 53) % 300;
    }
    /* the first draft after prefill, primed (c) and not (f) */
    int32_t x = 77;
    assert_int_equal(mtplx_forward(c, prompt, N, false), MTPLX_OK);
    assert_int_equal(mtplx_forward(f, prompt, N, false), MTPLX_OK);
    assert_int_equal(mtplx_mtp_prime(c, 3), MTPLX_OK);
    for (int d = 1; d <= 3; d++)
        assert_int_equal(c->valid[d], N - d);
    same_drafts_and_rows(c, f, x, "primed head rows");
    mtplx_ctx_free(f);
    /* a generation primes right after the first token's event, not before
     * it (the event must not wait for the head's pass) */
    mtplx_gen_params g1 = mtplx_gen_default_params();
    g1.sampling.temperature = 0.0f;
    g1.draft_depth = 3;
    g1.max_tokens = 8;
    assert_int_equal(mtplx_ctx_truncate(c, 0), MTPLX_OK);
    mtplx_gen *g = NULL;
    assert_int_equal(mtplx_gen_start(c, prompt, N, &g1, &g), MTPLX_OK);
    prime_probe probe = {.c = c, .valid_at_first = -1};
    bool done = false;
    while (probe.events == 0 && !done)
        assert_int_equal(mtplx_gen_step(g, prime_probe_cb, &probe, &done), MTPLX_OK);
    assert_int_equal(probe.valid_at_first, 0); /* stream 1 untouched when the token went out */
    for (int d = 1; d <= 3; d++)
        assert_int_equal(c->valid[d], N - d); /* and primed when the step returned */
    mtplx_gen_free(g);
    /* whole generations, on and off */
    mtplx_gen_params gp = mtplx_gen_default_params();
    gp.sampling.top_k = 0;
    gp.sampling.seed = 9;
    gp.max_tokens = 60;
    gp.ignore_eos = true;
    int64_t accepted = 0;
    /* greedy, sampled, greedy at adaptive depth (sampled text at adaptive
     * depth follows the measured draft and verify times, primed or not) */
    for (int run = 0; run < 3; run++) {
        gp.sampling.temperature = run == 1 ? 1.0f : 0.0f;
        gp.adaptive_depth = run == 2;
        gp.draft_depth = run == 2 ? 4 : 3;
        static tu_collect out[2][2];
        for (int primed = 0; primed <= 1; primed++) {
            setenv("MTPLX_MTP_PRIME", primed ? "1" : "0", 1);
            memset(out[primed], 0, sizeof out[primed]);
            mtplx_gen_stats st;
            assert_int_equal(mtplx_ctx_truncate(c, 0), MTPLX_OK);
            assert_int_equal(mtplx_generate(c, prompt, N, &gp, tu_collect_cb, &out[primed][0], &st),
                             MTPLX_OK);
            accepted += st.accepted[0];
            assert_int_equal(
                mtplx_generate(c, prompt2, N, &gp, tu_collect_cb, &out[primed][1], &st), MTPLX_OK);
            assert_int_equal(st.n_cached, 30); /* the second turn reuses the common prefix */
        }
        unsetenv("MTPLX_MTP_PRIME");
        for (int turn = 0; turn < 2; turn++) {
            char what[64];
            snprintf(what, sizeof what, "run %d turn %d, primed vs not", run, turn);
            tu_assert_same_ids(&out[0][turn], &out[1][turn], what);
        }
    }
    assert_true(accepted > 0);
    mtplx_ctx_free(c);
    mtplx_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sampler_transforms),
        cmocka_unit_test(sampler_top_k_large),
        cmocka_unit_test(rejection_sampler_exact),
        cmocka_unit_test(greedy_equal),
        cmocka_unit_test(greedy_equal_q8_head),
        cmocka_unit_test(greedy_equal_q4_head),
        cmocka_unit_test(greedy_equal_penalties),
        cmocka_unit_test(distribution_exact),
        cmocka_unit_test(distribution_exact_draft_vocab),
        cmocka_unit_test(cache_integrity),
        cmocka_unit_test(long_prompt_and_interleaved_steps),
        cmocka_unit_test(batched_step_many),
        cmocka_unit_test(head_rows_taken_over),
        cmocka_unit_test(prime_same_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
