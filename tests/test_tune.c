/* test_tune.c: the tuning store, tune's decision rule, the mode presets, and
 * the tune / bench / run --mode programs end to end.
 * The CLI helpers are compiled in directly (tuning.c, common.c): they are not
 * part of the library, and testing them through the program alone could not
 * reach the decision rule with synthetic numbers. Nothing here asserts a
 * speed: only what was decided from the numbers, and what was stored. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "test_proc.h"

#include "cli/common.c"
#include "cli/tuning.c"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char xdg[256];

static int setup(void **s) {
    (void)s;
    snprintf(xdg, sizeof xdg, "/tmp/mtplx_test_tune.XXXXXX");
    assert_non_null(mkdtemp(xdg));
    setenv("XDG_CONFIG_HOME", xdg, 1);
    return 0;
}

static int teardown(void **s) {
    (void)s;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", xdg);
    return system(cmd) == 0 ? 0 : -1;
}

static void clear_store(void) { unlink(tune_store_path()); }

static tune_entry sample_entry(const char *hash, const char *quant, int32_t depth) {
    tune_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.key.model_hash, sizeof e.key.model_hash, "%s", hash);
    snprintf(e.key.quant, sizeof e.key.quant, "%s", quant);
    snprintf(e.key.hardware, sizeof e.key.hardware, "Test CPU|4t|avx2+fma+f16c");
    snprintf(e.key.version, sizeof e.key.version, "%s", MTPLX_VERSION);
    snprintf(e.model, sizeof e.model, "/models/x.gguf");
    e.depth = depth;
    e.threads = 4;
    e.ar_tps = 40;
    e.best_tps = 40 + 10 * depth;
    return e;
}

static int count_entries(void) {
    FILE *f = fopen("/dev/null", "w");
    int n = tune_store_show(f);
    fclose(f);
    return n;
}

static void store_round_trip(void **s) {
    (void)s;
    clear_store();
    tune_entry e = sample_entry("fnv1a64:0123456789abcdef", "Q8_0", 2), got;
    assert_int_equal(tune_store_get(&e.key, &got), 0); /* no file: a miss */
    assert_true(tune_store_put(&e));
    assert_int_equal(tune_store_get(&e.key, &got), 1);
    assert_int_equal(got.depth, 2);
    assert_int_equal(got.threads, 4);
    assert_true(got.best_tps > 59.9 && got.best_tps < 60.1);
    assert_string_equal(got.model, "/models/x.gguf");
    assert_true(got.when[0] != 0);
    assert_int_equal(got.draft_vocab, 0); /* none stored: the whole vocabulary */
    e.draft_vocab = 4096;
    assert_true(tune_store_put(&e));
    assert_int_equal(tune_store_get(&e.key, &got), 1);
    assert_int_equal(got.draft_vocab, 4096);
    /* any key field differing is a miss */
    tune_key k = e.key;
    snprintf(k.quant, sizeof k.quant, "Q4_0");
    assert_int_equal(tune_store_get(&k, &got), 0);
    k = e.key;
    snprintf(k.model_hash, sizeof k.model_hash, "fnv1a64:fedcba9876543210");
    assert_int_equal(tune_store_get(&k, &got), 0);
    k = e.key;
    snprintf(k.hardware, sizeof k.hardware, "Other CPU|4t|avx2+fma+f16c");
    assert_int_equal(tune_store_get(&k, &got), 0);
    k = e.key;
    snprintf(k.version, sizeof k.version, "0.0.1");
    assert_int_equal(tune_store_get(&k, &got), 0);
    /* a second model is a second entry; retuning the first replaces it */
    tune_entry e2 = sample_entry("fnv1a64:1111111111111111", "Q8_0", 1);
    assert_true(tune_store_put(&e2));
    assert_int_equal(count_entries(), 2);
    e.depth = 3;
    assert_true(tune_store_put(&e));
    assert_int_equal(count_entries(), 2);
    assert_int_equal(tune_store_get(&e.key, &got), 1);
    assert_int_equal(got.depth, 3);
    assert_int_equal(tune_store_get(&e2.key, &got), 1);
    assert_int_equal(got.depth, 1);
    assert_true(tune_store_remove(&e.key));
    assert_int_equal(tune_store_get(&e.key, &got), 0);
    assert_int_equal(count_entries(), 1);
    /* bandwidth cache beside the entries */
    double g1, ga;
    int nt;
    assert_false(tune_store_get_bandwidth("Test CPU|4t|avx2", &g1, &ga, &nt));
    assert_true(tune_store_put_bandwidth("Test CPU|4t|avx2", 10.5, 30.25, 4));
    assert_true(tune_store_get_bandwidth("Test CPU|4t|avx2", &g1, &ga, &nt));
    assert_true(g1 == 10.5 && ga == 30.25 && nt == 4);
    assert_int_equal(count_entries(), 1);
    /* a corrupt store is an error, not a silent miss */
    FILE *f = fopen(tune_store_path(), "w");
    fputs("not json", f);
    fclose(f);
    assert_int_equal(tune_store_get(&e2.key, &got), -1);
    clear_store();
}

static void model_hash(void **s) {
    (void)s;
    char a[40], b[40], c[40], p[512];
    assert_true(tune_model_hash(MTPLX_SOURCE_DIR "/models/default.gguf", a, sizeof a));
    assert_true(tune_model_hash(MTPLX_SOURCE_DIR "/models/default.gguf", b, sizeof b));
    assert_string_equal(a, b);
    assert_int_equal(strncmp(a, "fnv1a64:", 8), 0);
    assert_int_equal(strlen(a), 8 + 16);
    /* one byte changed in the last MiB of a 3 MiB file changes the hash */
    snprintf(p, sizeof p, "%s/blob", xdg);
    char *buf = calloc(3 << 20, 1);
    FILE *f = fopen(p, "wb");
    fwrite(buf, 1, 3 << 20, f);
    fclose(f);
    assert_true(tune_model_hash(p, b, sizeof b));
    buf[(3 << 20) - 10] = 1;
    f = fopen(p, "wb");
    fwrite(buf, 1, 3 << 20, f);
    fclose(f);
    assert_true(tune_model_hash(p, c, sizeof c));
    assert_string_not_equal(b, c);
    free(buf);
    assert_false(tune_model_hash("/nonexistent/model.gguf", c, sizeof c));
}

static void decide(void **s) {
    (void)s;
    /* a clear winner */
    double m1[5] = {40, 60, 78, 70, 65};
    assert_int_equal(tune_decide(m1, 4, 0.03, 0.01), 2);
    /* AR wins outright */
    double m2[5] = {100, 90, 80, 70, 60};
    assert_int_equal(tune_decide(m2, 4, 0.03, 0.01), 0);
    /* a depth within the noise margin of AR does not win */
    double m3[5] = {100, 102, 95, 90, 80};
    assert_int_equal(tune_decide(m3, 4, 0.03, 0.01), 0);
    /* ties go to the smaller depth */
    double m4[5] = {50, 60, 80, 80.5, 79};
    assert_int_equal(tune_decide(m4, 4, 0.03, 0.01), 2);
    double m5[5] = {50, 80, 80, 80, 80};
    assert_int_equal(tune_decide(m5, 4, 0.03, 0.01), 1);
    /* unmeasured depths (0) are ignored; nothing measured: AR */
    double m6[5] = {50, 0, 0, 90, 0};
    assert_int_equal(tune_decide(m6, 4, 0.03, 0.01), 3);
    double m7[5] = {50, 0, 0, 0, 0};
    assert_int_equal(tune_decide(m7, 4, 0.03, 0.01), 0);
    /* medians make one outlier run harmless */
    double runs[5] = {61, 60, 1000, 59, 62};
    assert_true(tune_median(runs, 5) == 61);
    double even[4] = {4, 1, 3, 2};
    assert_true(tune_median(even, 4) == 2.5);
}

static cli_mode_env env_default(void) {
    return (cli_mode_env){.n_threads = 8, .mem_available = 16ull << 30, .weight_bytes = 1ull << 30,
                          .kv_bytes_per_token = 128 << 10, .n_ctx_train = 40960, .has_mtp = true,
                          .tuned_depth = 0, .n_expected = 0};
}

/* gp / cp as the commands start: no flag given (set some after this) */
static void unset(mtplx_gen_params *gp, mtplx_ctx_params *cp) {
    *gp = mtplx_gen_default_params();
    *cp = mtplx_ctx_default_params();
    cp->kv_type = CLI_KV_AUTO;
}

static void resolve(cli_mode m, const cli_mode_env *env, mtplx_gen_params *gp,
                    mtplx_ctx_params *cp, cli_mode_plan *plan) {
    unset(gp, cp);
    cli_mode_resolve(m, env, gp, cp, plan);
}

static void mode_presets(void **s) {
    (void)s;
    cli_mode_env env = env_default();
    mtplx_gen_params gp;
    mtplx_ctx_params cp;
    cli_mode_plan p;
    /* turbo: default depth 3 untuned, the tuned depth when stored */
    resolve(CLI_MODE_TURBO, &env, &gp, &cp, &p);
    assert_int_equal(gp.draft_depth, 3);
    assert_int_equal(cp.n_threads, 8);
    assert_int_equal(cp.n_batch, 512);
    assert_int_equal(cp.n_ctx, 4096);
    assert_int_equal(cp.kv_type, MTPLX_KV_F16);
    assert_false(cp.kv_f32);
    assert_false(gp.adaptive_depth);
    env.tuned_depth = 2;
    resolve(CLI_MODE_TURBO, &env, &gp, &cp, &p);
    assert_int_equal(gp.draft_depth, 2);
    assert_string_equal(p.depth_from, "tuned");
    /* burst: small context, deepest depth when untuned, tuned otherwise */
    resolve(CLI_MODE_BURST, &env, &gp, &cp, &p);
    assert_int_equal(cp.n_ctx, 2048);
    assert_int_equal(gp.draft_depth, 2);
    env.tuned_depth = 0;
    resolve(CLI_MODE_BURST, &env, &gp, &cp, &p);
    assert_int_equal(gp.draft_depth, 4);
    /* ... but not deeper than the head was trained to */
    env.depth_trained = 3;
    resolve(CLI_MODE_BURST, &env, &gp, &cp, &p);
    assert_int_equal(gp.draft_depth, 3);
    env.depth_trained = 0;
    env.n_expected = 3000; /* grown to fit what was asked */
    resolve(CLI_MODE_BURST, &env, &gp, &cp, &p);
    assert_int_equal(cp.n_ctx, 3072);
    /* sustained: chunked prefill, adaptive depth, a Q8_0 KV cache (68 KiB a
     * position where F16 takes 128 KiB), context bounded by half the
     * available memory: (8 GiB - 1 GiB) / 68 KiB = 107941 -> capped at 32768 */
    env.n_expected = 0;
    resolve(CLI_MODE_SUSTAINED, &env, &gp, &cp, &p);
    assert_int_equal(cp.n_batch, 256);
    assert_true(gp.adaptive_depth);
    assert_int_equal(cp.kv_type, MTPLX_KV_Q8_0);
    assert_int_equal(p.kv_bytes_per_token, 68 << 10);
    assert_int_equal(cp.n_ctx, 32768);
    assert_int_equal(p.mem_budget, 8ull << 30);
    assert_int_equal(gp.draft_depth, 1); /* the rule at 32768 positions */
    env.mem_available = 4ull << 30;      /* (2 GiB - 1 GiB) / 68 KiB = 15420 -> 15360 */
    resolve(CLI_MODE_SUSTAINED, &env, &gp, &cp, &p);
    assert_int_equal(cp.n_ctx, 15360);
    assert_int_equal(gp.draft_depth, 2);
    /* where Q8_0 KV cannot run (CUDA): F16, and the budget counts F16 bytes:
     * (2 GiB - 1 GiB) / 128 KiB = 8192 */
    env.no_q8_kv = "q8_0 KV is CPU-only";
    resolve(CLI_MODE_SUSTAINED, &env, &gp, &cp, &p);
    assert_int_equal(cp.kv_type, MTPLX_KV_F16);
    assert_int_equal(cp.n_ctx, 8192);
    assert_string_equal(p.kv_note, "q8_0 KV is CPU-only");
    env.no_q8_kv = NULL;
    /* the per-context-length rule */
    resolve(CLI_MODE_SUSTAINED, &env, &gp, &cp, &p);
    assert_int_equal(cli_mode_depth_at(&p, 1000), 3);
    assert_int_equal(cli_mode_depth_at(&p, 4096), 3);
    assert_int_equal(cli_mode_depth_at(&p, 4097), 2);
    assert_int_equal(cli_mode_depth_at(&p, 16385), 1);
    /* the model's trained context bounds every mode */
    env.n_ctx_train = 1024;
    resolve(CLI_MODE_SUSTAINED, &env, &gp, &cp, &p);
    assert_int_equal(cp.n_ctx, 1024);
    resolve(CLI_MODE_TURBO, &env, &gp, &cp, &p);
    assert_int_equal(cp.n_ctx, 1024);
    env = env_default();
    /* no MTP head: depth 0 whatever the mode */
    env.has_mtp = false;
    resolve(CLI_MODE_BURST, &env, &gp, &cp, &p);
    assert_int_equal(gp.draft_depth, 0);
    resolve(CLI_MODE_SUSTAINED, &env, &gp, &cp, &p);
    assert_int_equal(gp.draft_depth, 0);
    assert_false(gp.adaptive_depth);
}

/* The stored draft vocabulary: used at the tuned depth when no flag set one. */
static void mode_tuned_vocab(void **s) {
    (void)s;
    int32_t c[4];
    assert_int_equal(tune_vocab_candidates(8192, c), 3);
    assert_true(c[0] == -1 && c[1] == 4096 && c[2] == 2048);
    assert_int_equal(tune_vocab_candidates(151936, c), 3);
    assert_true(c[1] == 75968 && c[2] == 37984); /* multiples of 8 */
    assert_int_equal(tune_vocab_candidates(3000, c), 2); /* 750 is too few ids to try */
    assert_int_equal(tune_vocab_candidates(512, c), 1);
    cli_mode_env env = env_default();
    env.tuned_depth = 2;
    env.tuned_draft_vocab = 4096;
    mtplx_gen_params gp;
    mtplx_ctx_params cp;
    cli_mode_plan p;
    resolve(CLI_MODE_TURBO, &env, &gp, &cp, &p);
    assert_int_equal(gp.draft_depth, 2);
    assert_int_equal(gp.draft_vocab, 4096);
    assert_true(p.vocab_tuned);
    assert_int_equal(p.draft_vocab, 4096);
    /* --draft-vocab (here: all of it, -1) wins */
    unset(&gp, &cp);
    gp.draft_vocab = -1;
    cli_mode_resolve(CLI_MODE_TURBO, &env, &gp, &cp, &p);
    assert_int_equal(gp.draft_vocab, -1);
    assert_false(p.vocab_tuned);
    /* another depth than the tuned one was not measured with it */
    unset(&gp, &cp);
    gp.draft_depth = 3;
    cli_mode_resolve(CLI_MODE_TURBO, &env, &gp, &cp, &p);
    assert_int_equal(gp.draft_vocab, 0);
    /* nor is plain AR given one */
    unset(&gp, &cp);
    gp.draft_depth = 0;
    cli_mode_resolve(CLI_MODE_TURBO, &env, &gp, &cp, &p);
    assert_int_equal(gp.draft_vocab, 0);
}

static void mode_flags_override(void **s) {
    (void)s;
    cli_mode_env env = env_default();
    env.tuned_depth = 2;
    mtplx_gen_params gp = mtplx_gen_default_params();
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cli_mode_plan p;
    gp.draft_depth = 1;
    cp.n_threads = 3;
    cp.n_batch = 64;
    cp.n_ctx = 8192;
    cp.kv_type = CLI_KV_AUTO;
    cp.kv_f32 = true; /* --kv-f32 */
    cli_mode_resolve(CLI_MODE_SUSTAINED, &env, &gp, &cp, &p);
    assert_int_equal(gp.draft_depth, 1);
    assert_string_equal(p.depth_from, "flag");
    assert_int_equal(cp.n_threads, 3);
    assert_int_equal(cp.n_batch, 64);
    assert_int_equal(cp.n_ctx, 8192);
    assert_int_equal(cp.kv_type, MTPLX_KV_F32);
    assert_false(cp.kv_f32);
    assert_true(p.set_depth && p.set_threads && p.set_batch && p.set_ctx && p.set_kv);
    assert_int_equal(cli_mode_depth_at(&p, 20000), 1); /* a flag depth is not ruled */
    /* --kv-type f16 keeps sustained off Q8_0 */
    gp = mtplx_gen_default_params();
    cp = mtplx_ctx_default_params();
    cp.kv_type = MTPLX_KV_F16;
    cli_mode_resolve(CLI_MODE_SUSTAINED, &env, &gp, &cp, &p);
    assert_int_equal(cp.kv_type, MTPLX_KV_F16);
    assert_true(p.set_kv);
    unset(&gp, &cp);
    gp.draft_depth = 0; /* --no-mtp */
    cli_mode_resolve(CLI_MODE_BURST, &env, &gp, &cp, &p);
    assert_int_equal(gp.draft_depth, 0);
    /* the printed line names the mode and every knob */
    char line[1024] = {0};
    FILE *f = fmemopen(line, sizeof line - 1, "w");
    cli_mode_print(&p, f);
    fclose(f);
    assert_non_null(strstr(line, "mode burst"));
    assert_non_null(strstr(line, "depth 0 (flag)"));
    assert_non_null(strstr(line, "threads 8"));
    assert_non_null(strstr(line, "n_batch 512"));
    assert_non_null(strstr(line, "kv f16 128.0 KiB/token"));
    assert_non_null(strstr(line, "ctx 2048"));
    /* sustained prints its Q8_0 cache and what a position costs in it */
    resolve(CLI_MODE_SUSTAINED, &env, &gp, &cp, &p);
    memset(line, 0, sizeof line);
    f = fmemopen(line, sizeof line - 1, "w");
    cli_mode_print(&p, f);
    fclose(f);
    assert_non_null(strstr(line, "mode sustained"));
    assert_non_null(strstr(line, "kv q8_0 68.0 KiB/token"));
    assert_non_null(strstr(line, "adaptive depth"));
    assert_non_null(strstr(line, "memory budget 8.0 GiB"));
}

static void mode_auto(void **s) {
    (void)s;
    cli_mode_env env = env_default();
    mtplx_gen_params gp;
    mtplx_ctx_params cp;
    cli_mode_plan p;
    resolve(CLI_MODE_AUTO, &env, &gp, &cp, &p); /* unknown length: turbo */
    assert_int_equal(p.mode, CLI_MODE_TURBO);
    env.n_expected = 300;
    resolve(CLI_MODE_AUTO, &env, &gp, &cp, &p);
    assert_int_equal(p.mode, CLI_MODE_BURST);
    env.n_expected = 3000;
    resolve(CLI_MODE_AUTO, &env, &gp, &cp, &p);
    assert_int_equal(p.mode, CLI_MODE_TURBO);
    env.n_expected = 9000;
    resolve(CLI_MODE_AUTO, &env, &gp, &cp, &p);
    assert_int_equal(p.mode, CLI_MODE_SUSTAINED);
    env.n_expected = 0;
    unset(&gp, &cp);
    cp.n_ctx = 16384;
    cli_mode_resolve(CLI_MODE_AUTO, &env, &gp, &cp, &p);
    assert_int_equal(p.mode, CLI_MODE_SUSTAINED);
    assert_int_equal(cp.kv_type, MTPLX_KV_Q8_0);
    cli_mode m;
    assert_true(cli_mode_parse("burst", &m) && m == CLI_MODE_BURST);
    assert_true(cli_mode_parse(NULL, &m) && m == CLI_MODE_AUTO);
    assert_false(cli_mode_parse("fast", &m));
}

/* ---- the programs ---- */

static int prog(const char *args, char *out, size_t cap, char *err, size_t errcap) {
    char cmd[2048], errpath[512];
    snprintf(errpath, sizeof errpath, "%s/stderr", xdg);
    snprintf(cmd, sizeof cmd, "%s %s 2>'%s'", MTPLX_BIN, args, errpath);
    int rc = tu_capture(cmd, out, cap);
    if (err) {
        FILE *f = fopen(errpath, "r");
        size_t n = f ? fread(err, 1, errcap - 1, f) : 0;
        err[n] = 0;
        if (f) fclose(f);
    }
    return rc;
}

static void tune_cli(void **s) {
    (void)s;
    if (access(MTPLX_SOURCE_DIR "/models/default.gguf", R_OK)) skip();
    clear_store();
    static char out[1 << 16], err[1 << 16];
    /* the tiny budget measures all five configs and gives a verdict; whether
     * AR or a depth wins depends on the machine, and the store agrees */
    assert_int_equal(prog("tune --quick --temp 0 -t 1", out, sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(out, "AR "));
    assert_non_null(strstr(out, "depth 4"));
    const char *verdict = strstr(out, "Depth ");
    bool depth_won = verdict && strstr(verdict, " is fastest: ");
    bool ar_won = strstr(out, "Plain AR is fastest") != NULL;
    if (depth_won == ar_won) fail_msg("want exactly one verdict line in:\n%s", out);
    assert_int_equal(count_entries(), depth_won ? 1 : 0);
    /* --margin -0.99: the fastest depth is stored whatever AR did */
    assert_int_equal(prog("tune --quick --temp 0 -t 1 --retune --margin -0.99", out, sizeof out,
                          NULL, 0), 0);
    verdict = strstr(out, "Depth ");
    if (!verdict || !strstr(verdict, " is fastest: ")) fail_msg("no depth verdict in:\n%s", out);
    int d = atoi(verdict + 6);
    /* then the draft vocabularies at that depth (8192 ids: all, 4096, 2048), and a verdict */
    if (!strstr(verdict, "\nall ") || !strstr(verdict, "\n4096 ") || !strstr(verdict, "\n2048 "))
        fail_msg("no draft vocabulary table in:\n%s", out);
    const char *kept = strstr(verdict, "Drafting over the first ");
    if (!kept == !strstr(verdict, "The whole vocabulary stays"))
        fail_msg("want exactly one vocabulary verdict in:\n%s", out);
    int dv = kept ? atoi(kept + strlen("Drafting over the first ")) : 0;
    assert_true(d >= 1 && d <= 4);
    assert_int_equal(count_entries(), 1);
    tune_entry e;
    tune_key k;
    assert_true(tune_key_make(MTPLX_SOURCE_DIR "/models/default.gguf", "Q8_0", &k));
    assert_int_equal(tune_store_get(&k, &e), 1);
    assert_int_equal(e.depth, d);
    assert_int_equal(e.draft_vocab, dv);
    assert_int_equal(e.threads, 1);
    assert_int_equal(prog("tune --show", out, sizeof out, NULL, 0), 0);
    assert_non_null(strstr(out, "1 entry"));
    assert_non_null(strstr(out, "Q8_0"));
    assert_non_null(strstr(out, k.model_hash));
    /* a second tune does not measure again; --retune does, and replaces */
    assert_int_equal(prog("tune --quick --temp 0 -t 1", out, sizeof out, NULL, 0), 0);
    assert_non_null(strstr(out, "Already tuned"));
    assert_int_equal(prog("tune --quick --temp 0 -t 1 --retune --margin -0.99", out, sizeof out,
                          NULL, 0), 0);
    assert_non_null(strstr(out, "(replaced)"));
    assert_int_equal(count_entries(), 1);
    assert_int_equal(tune_store_get(&k, &e), 1);
    /* run, in turbo and burst, uses the stored depth */
    char want[64];
    snprintf(want, sizeof want, "depth %d (tuned)", e.depth);
    assert_int_equal(prog("run --mode turbo -t 1 -n 4 --temp 0 -p 'The sea'", out, sizeof out,
                          err, sizeof err), 0);
    if (!strstr(err, want)) fail_msg("want '%s' in:\n%s", want, err);
    assert_int_equal(prog("run --mode burst -t 1 -n 4 --temp 0 -p 'The sea'", out, sizeof out,
                          err, sizeof err), 0);
    if (!strstr(err, want)) fail_msg("want '%s' in:\n%s", want, err);
    /* ... and the stored draft vocabulary with it (one is stored here by hand,
     * whatever this machine measured) */
    e.draft_vocab = 4096;
    assert_true(tune_store_put(&e));
    assert_int_equal(prog("run --mode turbo -t 1 -n 4 --temp 0 -p 'The sea'", out, sizeof out,
                          err, sizeof err), 0);
    if (!strstr(err, "draft vocab 4096 (tuned)")) fail_msg("want the tuned vocabulary in:\n%s", err);
    assert_int_equal(prog("run --mode turbo -t 1 -n 4 --temp 0 --draft-vocab 0 -p 'The sea'", out,
                          sizeof out, err, sizeof err), 0);
    if (strstr(err, "draft vocab")) fail_msg("--draft-vocab 0 (all) should win in:\n%s", err);
    assert_int_equal(prog("tune --show", out, sizeof out, NULL, 0), 0);
    assert_non_null(strstr(out, " 4096 "));
    /* --no-vocab: the first phase alone */
    assert_int_equal(prog("tune --quick --temp 0 -t 1 --retune --margin -0.99 --no-vocab", out,
                          sizeof out, NULL, 0), 0);
    assert_null(strstr(out, "\n4096 "));
    assert_int_equal(tune_store_get(&k, &e), 1);
    assert_int_equal(e.draft_vocab, 0);
    assert_int_equal(prog("tune --suite nosuch", out, sizeof out, NULL, 0), 2);
    clear_store();
}

static void run_mode_cli(void **s) {
    (void)s;
    if (access(MTPLX_SOURCE_DIR "/models/default.gguf", R_OK)) skip();
    clear_store();
    static char out[1 << 16], err[1 << 16];
    assert_int_equal(prog("run --mode sustained -t 1 -b 32 -n 4 --temp 0 -p 'The sea'", out,
                          sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(err, "mode sustained (asked)"));
    assert_non_null(strstr(err, "threads 1 (flag)"));
    assert_non_null(strstr(err, "n_batch 32 (flag)"));
    assert_non_null(strstr(err, "adaptive depth"));
    assert_non_null(strstr(err, "kv q8_0"));
    /* --kv-type wins over the mode */
    assert_int_equal(prog("run --mode sustained --kv-type f16 -t 1 -n 4 --temp 0 -p 'The sea'", out,
                          sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(err, "kv f16 (flag)"));
    assert_int_equal(prog("run --kv-type q4 -n 4", out, sizeof out, NULL, 0), 2);
    /* auto on a short run is burst, untuned: the built-in head's trained
     * depth (3), not the deepest (4) */
    assert_int_equal(prog("run -t 1 -n 4 --temp 0 -p 'The sea'", out, sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(err, "mode burst (auto"));
    assert_non_null(strstr(err, "depth 3 (burst: the head's trained depth, not tuned)"));
    assert_non_null(strstr(err, "mtp depth 3"));
    assert_int_equal(prog("run --mode warp -n 4", out, sizeof out, NULL, 0), 2);
}

/* `start` resolves and prints the mode like `run` (stdin at end of input: it
 * loads, prints, and leaves). */
static void start_mode_cli(void **s) {
    (void)s;
    if (access(MTPLX_SOURCE_DIR "/models/default.gguf", R_OK)) skip();
    clear_store();
    static char out[1 << 16], err[1 << 16];
    assert_int_equal(prog("start --mode sustained -t 1 </dev/null", out, sizeof out, err, sizeof err), 0);
    if (!strstr(err, "mode sustained (asked)") || !strstr(err, "kv q8_0") || !strstr(err, "n_batch 256") ||
        !strstr(err, "adaptive depth") || !strstr(err, "memory budget"))
        fail_msg("no sustained plan in:\n%s", err);
    /* auto for a chat is turbo; every knob has its flag */
    assert_int_equal(prog("start -t 1 -b 48 --kv-type f32 --no-adaptive --depth 2 </dev/null", out, sizeof out,
                          err, sizeof err), 0);
    if (!strstr(err, "mode turbo (auto)") || !strstr(err, "depth 2 (flag)") || !strstr(err, "n_batch 48 (flag)") ||
        !strstr(err, "kv f32 (flag)") || !strstr(err, "threads 1 (flag)") || strstr(err, "adaptive depth"))
        fail_msg("flags not applied in:\n%s", err);
    assert_int_equal(prog("start --mode burst --ctx 512 -t 1 </dev/null", out, sizeof out, err, sizeof err), 0);
    if (!strstr(err, "mode burst (asked)") || !strstr(err, "ctx 512 (flag)") || !strstr(err, "context 512"))
        fail_msg("burst plan not applied in:\n%s", err);
    /* sustained on cuda keeps F16 and says why; the device itself fails
     * cleanly without a GPU (or runs, with one) */
    int rc = prog("start --mode sustained --device cuda -t 1 </dev/null", out, sizeof out, err, sizeof err);
    if (!strstr(err, "kv f16") || !strstr(err, "not q8_0: q8_0 KV is CPU-only")) fail_msg("rc %d:\n%s", rc, err);
    assert_true(rc == 0 || (rc == 1 && strstr(err, "cuda")));
    assert_int_equal(prog("start --mode warp", out, sizeof out, NULL, 0), 2);
    assert_int_equal(prog("start --kv-type q4", out, sizeof out, NULL, 0), 2);
    assert_int_equal(prog("start --device tpu", out, sizeof out, NULL, 0), 2);
}

static void bench_exactness(void **s) {
    (void)s;
    if (access(MTPLX_SOURCE_DIR "/models/default.gguf", R_OK)) skip();
    static char out[1 << 16];
    char cmd[1024], json[512];
    snprintf(json, sizeof json, "%s/exact.json", xdg);
    snprintf(cmd, sizeof cmd, "bench --suite exactness --quick -t 1 --samples 0 --json '%s'", json);
    int rc = prog(cmd, out, sizeof out, NULL, 0);
    if (rc != 0 || !strstr(out, "8 passed, 0 failed")) fail_msg("rc %d:\n%s", rc, out);
    char *text = NULL;
    size_t len;
    assert_int_equal(mtplx_read_file(json, &text, &len), MTPLX_OK);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    const cJSON *res = cJSON_GetObjectItem(root, "results");
    assert_int_equal((int)jnum(res, "passed"), 8);
    assert_int_equal((int)jnum(res, "failed"), 0);
    assert_string_equal(jstr(cJSON_GetObjectItem(root, "model"), "quant"), "Q8_0");
    assert_non_null(cJSON_GetObjectItem(root, "machine"));
    cJSON_Delete(root);
    assert_int_equal(prog("bench --suite nosuch", out, sizeof out, NULL, 0), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(store_round_trip), cmocka_unit_test(model_hash),
        cmocka_unit_test(decide),           cmocka_unit_test(mode_presets),
        cmocka_unit_test(mode_tuned_vocab),
        cmocka_unit_test(mode_flags_override), cmocka_unit_test(mode_auto),
        cmocka_unit_test(tune_cli),         cmocka_unit_test(run_mode_cli),
        cmocka_unit_test(start_mode_cli),
        cmocka_unit_test(bench_exactness),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
