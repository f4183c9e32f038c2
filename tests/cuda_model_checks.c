/* cuda_model_checks.c: test_cuda's whole-model checks (test_cuda.c has the
 * op checks, the host checks of the device code and main): logits of the
 * CUDA backend against the CPU backend, chunked and plain prefill, greedy
 * MTP == greedy AR on the GPU, sampled generation, CUDA graphs on == off and
 * PDL on == off bit for bit, and a model too big for the GPU refused before
 * loading. Linked into test_cuda (tests/CMakeLists.txt). */
#include "cuda_checks.h"

#include "cuda/cuda_backend.h"
#include "engine/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mtplx_ctx *new_ctx(mtplx_model *m, const char *device) {
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 64;
    cp.device = device;
    mtplx_ctx *c = NULL;
    mtplx_status st = mtplx_ctx_new(m, &cp, &c);
    if (st != MTPLX_OK) {
        report(false, "context on %s: %s", device, mtplx_last_error());
        return NULL;
    }
    return c;
}

static int collect_cb(const mtplx_token_event *ev, void *user) {
    int32_t *ids = user;
    if (ev->id >= 0 && ids[0] < 255) ids[1 + ids[0]++] = ev->id;
    return 0;
}

/* mtplx_generate from an empty cache. The prefill kernels depend on the
 * batch (tensor cores round to bf16, split-k follows the shape), so a
 * prompt's last token re-run alone over a reused prefix would not give the
 * bits its batched prefill gave: generations compared token for token must
 * each prefill the whole prompt (as forge verify and bench exactness do). */
static mtplx_status generate_fresh(mtplx_ctx *c, const int32_t *prompt, int32_t n,
                                   const mtplx_gen_params *gp, int32_t *ids, mtplx_gen_stats *st) {
    mtplx_status s = mtplx_ctx_truncate(c, 0);
    return s == MTPLX_OK ? mtplx_generate(c, prompt, n, gp, collect_cb, ids, st) : s;
}

/* The model at path, or NULL after reporting the failure. */
static mtplx_model *load_model(const char *path) {
    mtplx_model *m = NULL;
    if (mtplx_model_load(path, NULL, &m) != MTPLX_OK) {
        report(false, "load %s: %s", path, mtplx_last_error());
        return NULL;
    }
    return m;
}

/* Logits of the CUDA backend against the CPU backend: a prompt with all its
 * logits (the verify shape), a longer prefill in chunks, then single decode
 * steps. Tolerance relative to the largest CPU logit: the CPU rounds
 * activations to 8 bits for quantised weights. The chunks of 64 rows take
 * the prefill kernels (tensor-core GEMM, flash attention) as the backend
 * has them (on unless the environment says otherwise); plain_prefill turns
 * both off, for the same checks over the step kernels alone. */
void test_model(const char *path, double tol, bool mtp, bool plain_prefill, bool i8) {
    mtplx_model *m = load_model(path);
    if (!m) return;
    mtplx_model_info info;
    mtplx_model_get_info(m, &info);
    mtplx_ctx *cc = new_ctx(m, "cpu"), *gc = new_ctx(m, "cuda");
    if (!cc || !gc) goto done;
    mtplx_cuda_paths paths = mtplx_cuda_get_paths(gc->be);
    if (plain_prefill) paths.tc = paths.tc_f32 = paths.flash = false;
    if (i8) paths.mma_q4k = false; /* as a context without a head has it */
    mtplx_cuda_set_paths(gc->be, paths);
    char pf[128];
    snprintf(pf, sizeof pf, "prefill: tensor cores %s, flash %s%s",
             paths.tc ? (paths.tc_f32 ? "all" : "on") : "off", paths.flash ? "on" : "off",
             i8 ? "; steps on the int8 GEMV (mma_q4k off), PDL and fused norms as configured"
                : "");
    int32_t V = info.n_vocab, tok[200];
    for (int i = 0; i < 200; i++) tok[i] = (int32_t)((i * 7919 + 13) % V);
    /* 1. 12 tokens, all logits */
    if (mtplx_forward(cc, tok, 12, true) != MTPLX_OK || mtplx_forward(gc, tok, 12, true) != MTPLX_OK) {
        report(false, "model %s: forward: %s", info.name, mtplx_last_error());
        goto done;
    }
    double e = 0;
    for (int i = 0; i < 12; i++) e = fmax(e, rel_err(mtplx_logits(gc, i), mtplx_logits(cc, i), V, 1.0));
    report(e <= tol, "model %s (%s): 12-token logits  %.2e (tol %.0e)%s", info.name, info.weight_type,
           e, tol, i8 ? " (int8 GEMV)" : "");
    /* 2. 150 more tokens (3 chunks of 64), last logits; then 5 single steps */
    if (mtplx_forward(cc, tok + 12, 150, false) != MTPLX_OK ||
        mtplx_forward(gc, tok + 12, 150, false) != MTPLX_OK) {
        report(false, "model %s: forward: %s", info.name, mtplx_last_error());
        goto done;
    }
    e = rel_err(mtplx_logits(gc, -1), mtplx_logits(cc, -1), V, 1.0);
    for (int s = 0; s < 5; s++) {
        if (mtplx_forward(cc, tok + 162 + s, 1, false) != MTPLX_OK ||
            mtplx_forward(gc, tok + 162 + s, 1, false) != MTPLX_OK)
            break;
        e = fmax(e, rel_err(mtplx_logits(gc, -1), mtplx_logits(cc, -1), V, 1.0));
    }
    report(e <= tol, "model %s: chunked prefill to 162 (%s), then 5 decode steps  %.2e (tol %.0e)",
           info.name, pf, e, tol);

    /* 3. greedy text: MTP == AR on the GPU; and GPU AR vs CPU AR (reported) */
    if (mtp && info.n_mtp > 0) {
        static int32_t ar[256], sp[256], car[256];
        mtplx_gen_params gp = mtplx_gen_default_params();
        gp.sampling.temperature = 0;
        gp.max_tokens = 64;
        gp.ignore_eos = true;
        gp.draft_depth = 0;
        ar[0] = sp[0] = car[0] = 0;
        if (generate_fresh(gc, tok, 20, &gp, ar, NULL) != MTPLX_OK ||
            generate_fresh(cc, tok, 20, &gp, car, NULL) != MTPLX_OK) {
            report(false, "model %s: generate: %s", info.name, mtplx_last_error());
            goto done;
        }
        for (int depth = 1; depth <= 3; depth++) {
            sp[0] = 0;
            gp.draft_depth = depth;
            mtplx_gen_stats st;
            if (generate_fresh(gc, tok, 20, &gp, sp, &st) != MTPLX_OK)
                report(false, "model %s: generate: %s", info.name, mtplx_last_error());
            int same = 0;
            while (same < ar[0] && same < sp[0] && ar[1 + same] == sp[1 + same]) same++;
            report(ar[0] == 64 && sp[0] == 64 && same == 64,
                   "model %s: greedy MTP depth %d == AR on the GPU (%d/64 tokens, %.2f tokens/forward; %s)",
                   info.name, depth, same, mtplx_gen_stats_tokens_per_forward(&st), pf);
        }
        int same = 0;
        while (same < ar[0] && same < car[0] && ar[1 + same] == car[1 + same]) same++;
        printf("  info  model %s: greedy AR, GPU and CPU agree on the first %d/64 tokens "
               "(not asserted: near-ties may flip)\n", info.name, same);
    }
done:
    mtplx_ctx_free(gc);
    mtplx_ctx_free(cc);
    mtplx_model_free(m);
}

static int collect_logits_cb(const mtplx_token_event *ev, void *user) {
    int32_t *ids = user; /* ids[0] count, ids[1..255] ids, ids[256] events that carried logits */
    if (ev->id >= 0 && ids[0] < 255) ids[1 + ids[0]++] = ev->id;
    if (ev->id >= 0 && ev->logits) ids[256]++;
    return 0;
}

/* Sampled generation with the draws and the acceptance test on the GPU
 * (sample_rows: the caller wants no logits in its events) against the same
 * GPU context sampling on the host (it wants them): the same logits and the
 * same uniforms, so the same tokens, for AR and MTP depths 1-3 and several
 * seeds; near-boundary draws could in principle differ, at odds of about
 * 1e-6 per draw. */
void test_sampled_gen(const char *path) {
    mtplx_model *m = load_model(path);
    if (!m) return;
    mtplx_ctx *gc = new_ctx(m, "cuda");
    if (!gc) {
        mtplx_model_free(m);
        return;
    }
    if (!gc->be->sample_rows) {
        printf("  info  sample_rows is off (MTPLX_CUDA_SAMPLE=0): sampled generation not checked\n");
        goto done;
    }
    mtplx_model_info info;
    mtplx_model_get_info(m, &info);
    int32_t tok[20];
    for (int i = 0; i < 20; i++) tok[i] = (int32_t)((i * 7919 + 13) % info.n_vocab);
    static int32_t dev[257], host[257];
    int max_depth = info.n_mtp > 0 ? 3 : 0;
    for (int depth = 0; depth <= max_depth; depth++) {
        int same_runs = 0, runs = 0, logits_seen = 0;
        double tpf = 0, dev_ms = 0, host_ms = 0;
        for (uint64_t seed = 1; seed <= 4; seed++, runs++) {
            mtplx_gen_params gp = mtplx_gen_default_params();
            gp.sampling.seed = seed;
            gp.max_tokens = 64;
            gp.ignore_eos = true;
            gp.draft_depth = depth;
            mtplx_gen_stats st, sh;
            memset(dev, 0, sizeof dev), memset(host, 0, sizeof host);
            gp.no_event_logits = true;
            mtplx_status a = mtplx_ctx_truncate(gc, 0);
            if (a == MTPLX_OK) a = mtplx_generate(gc, tok, 20, &gp, collect_logits_cb, dev, &st);
            gp.no_event_logits = false;
            mtplx_status b = mtplx_ctx_truncate(gc, 0);
            if (b == MTPLX_OK) b = mtplx_generate(gc, tok, 20, &gp, collect_logits_cb, host, &sh);
            if (a != MTPLX_OK || b != MTPLX_OK) {
                report(false, "sampled generation: %s", mtplx_last_error());
                goto done;
            }
            same_runs += dev[0] == 64 && host[0] == 64 && memcmp(dev + 1, host + 1, 64 * sizeof(int32_t)) == 0;
            logits_seen += dev[256];
            tpf += mtplx_gen_stats_tokens_per_forward(&st) / 4;
            dev_ms += st.t_decode_ms, host_ms += sh.t_decode_ms;
        }
        char mode[32] = "AR";
        if (depth) snprintf(mode, sizeof mode, "MTP depth %d", depth);
        report(same_runs == runs && logits_seen == 0,
               "model %s: sampled (T 0.8, top-k 40) %s on the GPU == on the host: %d/%d seeds x 64 tokens "
               "(%.2f tokens/forward; decode %.1f ms against %.1f)",
               info.name, mode, same_runs, runs, tpf, dev_ms, host_ms);
    }
done:
    mtplx_ctx_free(gc);
    mtplx_model_free(m);
}

/* CUDA graphs and programmatic dependent launch (PDL) change how ops are
 * launched, never what they compute: three GPU contexts, graphs on, graphs
 * off, and graphs on with PDL off (MTPLX_CUDA_PDL=0), must give
 * bit-identical logits through a prefill, decode steps (1 row), verify steps
 * (4 rows, all logits, rolled back by 2 like a partly rejected draft) and
 * greedy MTP generation (the head's forwards too); and the graphs must
 * actually have been replayed. A kernel of the PDL chain that read its
 * predecessor's output before its wait would differ here (or under
 * memcheck's run of the op checks, which launch with PDL too). from > 0:
 * the step attention takes a block per KV head for the rows of at least
 * from positions (paths.attn_group_from) in all three, so that the steps
 * cross it: a graph captured before it must not be replayed after. */
void test_graphs(const char *path, bool i8, int64_t from) {
    mtplx_model *m = load_model(path);
    if (!m) return;
    mtplx_model_info info;
    mtplx_model_get_info(m, &info);
    mtplx_ctx *on = new_ctx(m, "cuda"), *off = new_ctx(m, "cuda"), *np = new_ctx(m, "cuda");
    if (!on || !off || !np) goto done;
    mtplx_cuda_set_graphs(on->be, true);
    mtplx_cuda_set_graphs(off->be, false);
    mtplx_cuda_set_graphs(np->be, true);
    bool pdl_env = mtplx_cuda_get_paths(on->be).pdl;
    for (int i = 0; i < 3; i++) {
        mtplx_backend *be = i == 0 ? on->be : i == 1 ? off->be : np->be;
        mtplx_cuda_paths p = mtplx_cuda_get_paths(be);
        if (i8) p.mma_q4k = false; /* steps on the int8 GEMV, with the fused norms as configured */
        if (i == 2) p.pdl = false;
        if (from > 0) p.attn_group_from = from;
        mtplx_cuda_set_paths(be, p);
    }
    char tag[96];
    snprintf(tag, sizeof tag, "%s", i8 ? ", int8 GEMV" : "");
    if (from > 0)
        snprintf(tag + strlen(tag), sizeof tag - strlen(tag), ", attention by KV head from %lld positions",
                 (long long)from);
    int32_t V = info.n_vocab, tok[128];
    for (int i = 0; i < 128; i++) tok[i] = (int32_t)((i * 7919 + 13) % V);
    size_t row = (size_t)V * sizeof(float);
    int diff = 0, diffp = 0, steps = 0;
    /* prefill 20 (not captured: > 16 rows), 8 decode steps, 6 verify steps */
    bool ok = mtplx_forward(on, tok, 20, false) == MTPLX_OK && mtplx_forward(off, tok, 20, false) == MTPLX_OK &&
              mtplx_forward(np, tok, 20, false) == MTPLX_OK;
    diff += ok && memcmp(mtplx_logits(on, -1), mtplx_logits(off, -1), row) != 0;
    diffp += ok && memcmp(mtplx_logits(on, -1), mtplx_logits(np, -1), row) != 0;
    for (int s = 0; ok && s < 8; s++, steps++) {
        ok = mtplx_forward(on, tok + 20 + s, 1, false) == MTPLX_OK &&
             mtplx_forward(off, tok + 20 + s, 1, false) == MTPLX_OK &&
             mtplx_forward(np, tok + 20 + s, 1, false) == MTPLX_OK;
        diff += ok && memcmp(mtplx_logits(on, -1), mtplx_logits(off, -1), row) != 0;
        diffp += ok && memcmp(mtplx_logits(on, -1), mtplx_logits(np, -1), row) != 0;
    }
    for (int s = 0; ok && s < 6; s++, steps++) {
        ok = mtplx_forward(on, tok + 40 + 3 * s, 4, true) == MTPLX_OK &&
             mtplx_forward(off, tok + 40 + 3 * s, 4, true) == MTPLX_OK &&
             mtplx_forward(np, tok + 40 + 3 * s, 4, true) == MTPLX_OK;
        for (int i = 0; ok && i < 4; i++) {
            diff += memcmp(mtplx_logits(on, i), mtplx_logits(off, i), row) != 0;
            diffp += memcmp(mtplx_logits(on, i), mtplx_logits(np, i), row) != 0;
        }
        int32_t back = mtplx_ctx_n_past(on) - 2;
        ok = ok && mtplx_ctx_truncate(on, back) == MTPLX_OK && mtplx_ctx_truncate(off, back) == MTPLX_OK &&
             mtplx_ctx_truncate(np, back) == MTPLX_OK;
    }
    if (!ok) {
        report(false, "graphs: forward: %s", mtplx_last_error());
        goto done;
    }
    mtplx_cuda_graph_stats gs = mtplx_cuda_get_graph_stats(on->be), g0 = mtplx_cuda_get_graph_stats(off->be);
    /* from > 0: the verify key captured twice more (both kernels, then by
     * KV head alone) */
    report(diff == 0 && gs.replayed >= 10 && gs.failed == 0 && g0.replayed == 0 && (from <= 0 || gs.captured >= 3),
           "graphs on vs off (%s%s): prefill + %d decode/verify steps, logits bit-identical (%d rows "
           "differ); on: %lld captured, %lld replayed, %lld failed; off: %lld replayed",
           info.name, tag, steps, diff, (long long)gs.captured, (long long)gs.replayed,
           (long long)gs.failed, (long long)g0.replayed);
    mtplx_cuda_graph_stats gp0 = mtplx_cuda_get_graph_stats(np->be);
    report(diffp == 0 && gp0.replayed >= 10 && gp0.failed == 0,
           "with PDL (MTPLX_CUDA_PDL%s) == without, graphs on (%s%s): prefill + %d decode/verify "
           "steps, logits bit-identical (%d rows differ); without: %lld replayed, %lld failed",
           pdl_env ? "" : "=0 in the environment: both without", info.name, tag, steps, diffp,
           (long long)gp0.replayed, (long long)gp0.failed);
    if (info.n_mtp > 0) {
        static int32_t a[256], b[256], pb[256];
        mtplx_gen_params gp = mtplx_gen_default_params();
        gp.sampling.temperature = 0;
        gp.max_tokens = 64;
        gp.ignore_eos = true;
        for (int depth = 0; depth <= 3; depth += 3) {
            gp.draft_depth = depth;
            a[0] = b[0] = pb[0] = 0;
            mtplx_cuda_graph_stats before = mtplx_cuda_get_graph_stats(on->be);
            if (generate_fresh(on, tok, 20, &gp, a, NULL) != MTPLX_OK ||
                generate_fresh(off, tok, 20, &gp, b, NULL) != MTPLX_OK ||
                generate_fresh(np, tok, 20, &gp, pb, NULL) != MTPLX_OK) {
                report(false, "graphs: generate: %s", mtplx_last_error());
                break;
            }
            gs = mtplx_cuda_get_graph_stats(on->be);
            bool same = a[0] == 64 && b[0] == 64 && memcmp(a, b, 65 * sizeof(int32_t)) == 0;
            /* the same with the greedy picks made on the GPU (no logits copied back) */
            static int32_t c3[256];
            c3[0] = 0;
            gp.no_event_logits = true;
            mtplx_gen_stats st3;
            mtplx_status s3 = generate_fresh(on, tok, 20, &gp, c3, &st3);
            gp.no_event_logits = false;
            report(s3 == MTPLX_OK && c3[0] == 64 && memcmp(a, c3, 65 * sizeof(int32_t)) == 0,
                   "greedy picks on the GPU (%s%s): the same 64 tokens as picking on the host "
                   "(%.2f tokens/forward)", depth ? "MTP depth 3" : "AR", tag,
                   mtplx_gen_stats_tokens_per_forward(&st3));
            report(same && gs.replayed - before.replayed >= 20 && gs.failed == 0,
                   "graphs on vs off (%s%s): greedy %s 64 tokens identical; %lld forwards replayed",
                   info.name, tag, depth ? "MTP depth 3" : "AR", (long long)(gs.replayed - before.replayed));
            report(a[0] == 64 && pb[0] == 64 && memcmp(a, pb, 65 * sizeof(int32_t)) == 0,
                   "with PDL == without, graphs on (%s%s): greedy %s 64 tokens identical", info.name,
                   tag, depth ? "MTP depth 3" : "AR");
        }
    }
done:
    mtplx_ctx_free(on);
    mtplx_ctx_free(off);
    mtplx_ctx_free(np);
    mtplx_model_free(m);
}

/* A model that does not fit says so when the context is made, before any
 * weight is uploaded (MTPLX_CUDA_MEM_LIMIT pretends the GPU is small). */
void test_fit(const char *path) {
    mtplx_model *m = load_model(path);
    if (!m) return;
    setenv("MTPLX_CUDA_MEM_LIMIT", "1000000", 1);
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.device = "cuda";
    mtplx_ctx *c = NULL;
    mtplx_status st = mtplx_ctx_new(m, &cp, &c);
    const char *msg = mtplx_last_error();
    report(st == MTPLX_ERR_NOMEM && c == NULL && strstr(msg, "does not fit") != NULL,
           "a model that does not fit (1 MB allowed) is refused: %s", msg);
    unsetenv("MTPLX_CUDA_MEM_LIMIT");
    st = mtplx_ctx_new(m, &cp, &c);
    report(st == MTPLX_OK, "... and fits without the limit");
    mtplx_ctx_free(c);
    mtplx_model_free(m);
}
