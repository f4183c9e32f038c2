/* cmd_tune.c: `mtplx tune`: measure plain AR and each draft depth 1..4 on the
 * embedded prompt suite, print a table and a verdict, and keep the winner in
 * the tuning store (tuning.h) so that run / start / serve use it.
 * AR winning is reported and nothing is stored. */
#include "cli/tuning.h"

#include <getopt.h>
#include <string.h>

static void help(void) {
    printf("usage: mtplx tune [-m MODEL] [--retune] [--suite NAME] [--show]\n\n"
           "Measure plain autoregressive decoding and MTP draft depths 1..4 on this\n"
           "machine and store the fastest depth for this model, quant type and hardware in\n"
           "%s.\n"
           "Then, on the CPU, the fastest depth again with the head drafting over the\n"
           "first half and quarter of the token ids only (exact either way; a smaller\n"
           "draft vocabulary reads less of the output matrix per draft): one that beats\n"
           "the whole vocabulary by more than 1%% is stored with the depth.\n\n"
           "  -m, --model PATH     model (default: the built-in model)\n"
           "      --retune         measure again and replace a stored result\n"
           "      --suite NAME     prompt suite: all (default), prose, code\n"
           "      --show           list the stored results and exit\n"
           "  -t, --threads N      threads (default: all cores)\n"
           "      --device D       cpu (default), cuda (the first GPU) or auto; measured and\n"
           "                       printed, not stored: the store is for CPU runs)\n"
           "  -n, --tokens N       new tokens per run (default 64)\n"
           "      --prompts N      use the first N prompts of the suite (default 4)\n"
           "      --reps N         timed repetitions (default 3)\n"
           "      --margin F       a depth must beat AR by more than this fraction to be\n"
           "                       stored (default 0.03; negative: store the best depth)\n"
           "      --no-vocab       skip the second phase (see below)\n"
           "      --temp T         sampling temperature (default 0.8, as run; fixed seeds)\n"
           "  -h, --help\n",
           tune_store_path());
}

/* tune's tables: a row per measured configuration, its speed against the
 * table's first row (the baseline) and its acceptance per draft position. */
static void print_header(const char *first, const char *vs) {
    printf("%-8s %9s %17s %9s %8s  %s\n", first, "tok/s", "range", "tok/fwd", vs,
           "acceptance per position");
}

static void print_row(const char *name, const tune_cfg *x, double base) {
    printf("%-8s %9.1f %8.1f..%-8.1f %9.2f %7.2fx ", name, x->median, x->lo, x->hi,
           x->n_forward ? (double)x->n_gen / x->n_forward : 0.0, base > 0 ? x->median / base : 0.0);
    for (int32_t q = 0; q < x->depth; q++)
        printf("%s%.2f", q ? "/" : " ", x->drafted[q] ? (double)x->accepted[q] / x->drafted[q] : 0.0);
    printf("\n");
}

/* The second phase: depth `depth` with the whole vocabulary and with the
 * prefixes of tune_vocab_candidates, interleaved. A prefix is kept when it
 * beats the whole vocabulary by more than 1% (the smaller cut within 1% of
 * the fastest loses: it drafts worse for the same speed). *best, phase one's
 * median at this depth, is scaled by the ratio this phase measured, so the
 * stored speedup compares medians of one phase's runs. */
static bool tune_vocab(mtplx_model *model, const tune_prompt *prompts, int n_prompts,
                       const tune_plan *plan, int32_t depth, int32_t n_vocab, int32_t *vocab,
                       double *best) {
    int32_t cand[4];
    int32_t n = tune_vocab_candidates(n_vocab, cand);
    if (n < 2) return true;
    tune_cfg cfg[4];
    for (int32_t i = 0; i < n; i++) cfg[i] = (tune_cfg){.depth = depth, .draft_vocab = cand[i]};
    char cuts[64];
    if (n > 2) snprintf(cuts, sizeof cuts, "the first %d and %d", cand[1], cand[2]);
    else snprintf(cuts, sizeof cuts, "the first %d", cand[1]);
    fprintf(stderr, "mtplx tune: depth %d drafting over all %d ids and over %s: %d runs\n", depth,
            n_vocab, cuts, (plan->warmup ? n : 0) + plan->reps * n_prompts * n);
    if (tune_measure(model, prompts, n_prompts, plan, cfg, n) != MTPLX_OK) {
        cli_error("measurement failed");
        return false;
    }
    double med[4];
    print_header("vocab", "vs all");
    for (int32_t i = 0; i < n; i++) {
        med[i] = cfg[i].median;
        char name[16] = "all";
        if (i) snprintf(name, sizeof name, "%d", cand[i]);
        print_row(name, &cfg[i], med[0]);
    }
    int32_t w = tune_decide(med, n - 1, 0.01, 0.01);
    if (w == 0) {
        printf("The whole vocabulary stays: no prefix beat it by more than 1%%.\n");
        return true;
    }
    *vocab = cand[w];
    *best *= med[w] / med[0];
    printf("Drafting over the first %d ids is fastest: %.2fx the whole vocabulary at depth %d.\n",
           cand[w], med[w] / med[0], depth);
    return true;
}

int cmd_tune(int argc, char **argv) {
    enum { O_RETUNE = 256, O_SUITE, O_SHOW, O_QUICK, O_REPS, O_TEMP, O_DEPTH, O_PROMPTS, O_MARGIN,
           O_DEVICE, O_NOVOCAB };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"retune", no_argument, 0, O_RETUNE},
        {"suite", required_argument, 0, O_SUITE}, {"show", no_argument, 0, O_SHOW},
        {"quick", no_argument, 0, O_QUICK},   {"threads", required_argument, 0, 't'},
        {"tokens", required_argument, 0, 'n'}, {"reps", required_argument, 0, O_REPS},
        {"temp", required_argument, 0, O_TEMP}, {"max-depth", required_argument, 0, O_DEPTH},
        {"prompts", required_argument, 0, O_PROMPTS}, {"margin", required_argument, 0, O_MARGIN},
        {"device", required_argument, 0, O_DEVICE}, {"no-vocab", no_argument, 0, O_NOVOCAB},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    const char *model_arg = NULL, *suite = "all";
    bool retune = false, show = false, quick = false, no_vocab = false;
    tune_plan plan = {.max_depth = 4, .n_tokens = 64, .reps = 3, .temperature = 0.8f,
                      .seed = 1234, .warmup = true, .progress = true};
    bool set_tokens = false, set_reps = false;
    long max_prompts = 4;
    double margin = 0.03;
    long iv;
    double fv;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:t:n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_arg = optarg; break;
        case O_RETUNE: retune = true; break;
        case O_SUITE: suite = optarg; break;
        case O_SHOW: show = true; break;
        case O_QUICK: quick = true; break; /* hidden: tiny budget, for tests */
        case 't':
            if (!cli_parse_int("tune", "--threads", optarg, 1, 1024, &iv)) return EXIT_USAGE;
            plan.n_threads = (int32_t)iv;
            break;
        case 'n':
            if (!cli_parse_int("tune", "--tokens", optarg, 4, 4096, &iv)) return EXIT_USAGE;
            plan.n_tokens = (int32_t)iv;
            set_tokens = true;
            break;
        case O_REPS:
            if (!cli_parse_int("tune", "--reps", optarg, 1, 32, &iv)) return EXIT_USAGE;
            plan.reps = (int32_t)iv;
            set_reps = true;
            break;
        case O_TEMP:
            if (!cli_parse_float("tune", "--temp", optarg, 0, 100, &fv)) return EXIT_USAGE;
            plan.temperature = (float)fv;
            break;
        case O_DEPTH:
            if (!cli_parse_int("tune", "--max-depth", optarg, 1, MTPLX_MAX_DRAFT, &iv)) return EXIT_USAGE;
            plan.max_depth = (int32_t)iv;
            break;
        case O_MARGIN:
            if (!cli_parse_float("tune", "--margin", optarg, -0.99, 10, &margin)) return EXIT_USAGE;
            break;
        case O_PROMPTS:
            if (!cli_parse_int("tune", "--prompts", optarg, 1, 64, &max_prompts)) return EXIT_USAGE;
            break;
        case O_NOVOCAB: no_vocab = true; break;
        case O_DEVICE:
            if (!cli_parse_device("tune", optarg, &plan.device)) return EXIT_USAGE;
            break;
        case 'h': help(); return EXIT_OK;
        default: return cli_usage_error("tune", "unknown option");
        }
    }
    if (optind < argc) return cli_usage_error("tune", "unexpected argument '%s'", argv[optind]);
    if (show) return tune_store_show(stdout) < 0 ? EXIT_RUNTIME : EXIT_OK;
    int n_prompts;
    const tune_prompt *prompts = tune_suite(suite, &n_prompts);
    if (!prompts) return cli_usage_error("tune", "unknown suite '%s' (all, prose, code)", suite);
    if (n_prompts > max_prompts) n_prompts = (int)max_prompts;
    if (quick) {
        if (!set_tokens) plan.n_tokens = 48;
        if (!set_reps) plan.reps = 1;
        if (n_prompts > 2) n_prompts = 2;
        plan.warmup = false;
    }

    char path[4096];
    if (!cli_resolve_model(model_arg, path, sizeof path)) return EXIT_RUNTIME;
    mtplx_model *model = NULL;
    mtplx_model_params mp = mtplx_model_default_params();
    if (mtplx_model_load(path, &mp, &model) != MTPLX_OK) {
        cli_error("cannot load model");
        return EXIT_RUNTIME;
    }
    int rc = EXIT_RUNTIME;
    mtplx_model_info info;
    mtplx_model_get_info(model, &info);
    tune_key key;
    tune_entry have;
    if (!tune_key_make(path, info.weight_type, &key)) {
        fprintf(stderr, "mtplx tune: cannot hash %s\n", path);
        goto done;
    }
    if (info.n_mtp == 0) {
        printf("%s has no MTP head: plain AR is the only way to run it; nothing to tune.\n", path);
        rc = EXIT_OK;
        goto done;
    }
    bool gpu = plan.device && strcmp(plan.device, "cuda") == 0;
    int got = tune_store_get(&key, &have);
    if (got < 0) goto done;
    if (got == 1 && !retune && !gpu) {
        char dv[48] = "";
        if (have.draft_vocab > 0) snprintf(dv, sizeof dv, ", draft vocabulary %d", have.draft_vocab);
        printf("Already tuned (%s): depth %d%s, %.1f -> %.1f tokens/s (%.2fx). "
               "Use --retune to measure again.\n",
               have.when, have.depth, dv, have.ar_tps, have.best_tps,
               have.ar_tps > 0 ? have.best_tps / have.ar_tps : 0.0);
        rc = EXIT_OK;
        goto done;
    }

    mtplx_hwinfo hw;
    mtplx_hwinfo_detect(&hw);
    int threads = plan.n_threads > 0 ? plan.n_threads : hw.n_threads;
    int runs = (plan.warmup ? plan.max_depth + 1 : 0) + plan.reps * n_prompts * (plan.max_depth + 1);
    char where[64];
    if (gpu) snprintf(where, sizeof where, "GPU 0 (--device cuda)");
    else snprintf(where, sizeof where, "%d threads", threads);
    fprintf(stderr, "mtplx tune: %s (%s, %s, %d MTP head) on %s, %s\n"
                    "  AR and depths 1..%d, suite '%s' (%d prompts), %d tokens, %d reps, temp %.2f: "
                    "%d runs\n",
            path, info.arch, info.weight_type, info.n_mtp, hw.cpu_model, where, plan.max_depth,
            suite, n_prompts, plan.n_tokens, plan.reps, plan.temperature, runs);
    tune_cfg cfg[MTPLX_MAX_DRAFT + 1];
    if (tune_measure(model, prompts, n_prompts, &plan, cfg, tune_cfgs_depths(cfg, plan.max_depth)) !=
        MTPLX_OK) {
        cli_error("measurement failed");
        goto done;
    }
    double med[MTPLX_MAX_DRAFT + 1];
    print_header("config", "vs AR");
    for (int32_t d = 0; d <= plan.max_depth; d++) {
        med[d] = cfg[d].median;
        char name[24]; /* "depth " + any int32 */
        if (d) snprintf(name, sizeof name, "depth %d", d);
        else snprintf(name, sizeof name, "AR");
        print_row(name, &cfg[d], med[0]);
    }
    int32_t win = tune_decide(med, plan.max_depth, margin, 0.01);
    if (win == 0) {
        int32_t best = 1;
        for (int32_t d = 2; d <= plan.max_depth; d++)
            if (med[d] > med[best]) best = d;
        printf("Plain AR is fastest: %.1f tokens/s; the best depth (%d) reaches %.1f (%.2fx). "
               "Nothing stored.\n",
               med[0], best, med[best], med[0] > 0 ? med[best] / med[0] : 0.0);
        if (got == 1 && !gpu && !tune_store_remove(&key)) goto done;
        rc = EXIT_OK;
        goto done;
    }
    printf("Depth %d is fastest: %.1f -> %.1f tokens/s (%.2fx)\n", win, med[0], med[win],
           med[0] > 0 ? med[win] / med[0] : 0.0);
    if (gpu) {
        printf("Not stored: the tuning store holds CPU results (run / start / serve read it for the CPU).\n");
        rc = EXIT_OK;
        goto done;
    }
    int32_t vocab = 0;
    double best = med[win];
    if (!no_vocab && !tune_vocab(model, prompts, n_prompts, &plan, win, info.n_vocab, &vocab, &best))
        goto done;
    tune_entry e;
    memset(&e, 0, sizeof e);
    e.key = key;
    snprintf(e.model, sizeof e.model, "%.511s", path);
    e.depth = win;
    e.threads = threads;
    e.ar_tps = med[0];
    e.best_tps = best;
    e.draft_vocab = vocab;
    snprintf(e.suite, sizeof e.suite, "%s%s", suite, quick ? " (quick)" : "");
    if (!tune_store_put(&e)) goto done;
    printf("Stored in %s (%s).\n", tune_store_path(), got == 1 ? "replaced" : "new");
    rc = EXIT_OK;
done:
    mtplx_model_free(model);
    return rc;
}
