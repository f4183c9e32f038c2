/* cmd_bench.c: `mtplx bench`: reproducible suites, a table on stdout and,
 * with --json PATH, the same numbers with the machine, build and model.
 *  throughput  AR vs draft depths 1..4 on the embedded prompts (tuning.c):
 *              tok/s, tokens per forward, acceptance per position, and the
 *              verify step's time over the AR step's time.
 *  acceptance  held-out Gutenberg text (../shared/data/gutenberg/valid.txt.xz,
 *              via `xz -dc`) or the embedded prompts: acceptance per position
 *              at temperature 0 and 0.7.
 *  exactness   greedy MTP ids == greedy AR ids, per prompt and depth, and
 *              the sampled first tokens' distributions under MTP vs AR
 *              (chi-square, bench_suites.c).
 *  long-context, math-quick: bench_suites.c;  `bench compare`: bench_compare.c.
 * With --llama-cpp PATH (or $MTPLX_LLAMA_CPP) the throughput suite also runs
 * llama.cpp's plain decode of the same GGUF on as many threads
 * (bench_llama.c) and prints it beside the AR and MTP rows; absent or
 * failing, that comparison is reported as skipped.
 * Prompts come from the disclosed files bench/suites/<suite>.json; the
 * throughput / exactness / acceptance prompts are also compiled into
 * tuning.c (tune uses them) and are the fallback outside the source tree.
 * Reports numbers; never judges them against a speed threshold. */
#include "cli/bench_suites.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <string.h>

#ifndef MTPLX_DEFAULT_MODEL
#define MTPLX_DEFAULT_MODEL "models/default.gguf"
#endif

static void help(void) {
    printf("usage: mtplx bench [--suite NAME] [-m MODEL] [--json PATH] [--llama-cpp PATH]\n"
           "       mtplx bench compare A.json B.json\n\n"
           "  -m, --model PATH     model (default: the built-in model)\n"
           "      --suite NAME     throughput (default), acceptance, exactness, long-context,\n"
           "                       math-quick\n"
           "      --json PATH      also write the results, machine, build and model as JSON\n"
           "      --llama-cpp PATH throughput: also run llama.cpp's plain decode of the same\n"
           "                       GGUF (PATH: llama-bench or the folder holding it; default\n"
           "                       $MTPLX_LLAMA_CPP) and print it beside our rows\n"
           "      --llama-model P  the GGUF llama.cpp runs instead (llama.cpp refuses MTP\n"
           "                       tensors: a `forge convert --strip-mtp` copy of -m)\n"
           "  -t, --threads N      threads (default: all cores)\n"
           "      --device D       cpu (default), cuda (the first GPU) or auto\n"
           "  -n, --tokens N       new tokens per run (default 96; exactness 64;\n"
           "                       long-context 64; math-quick 128)\n"
           "      --reps N         timed repetitions (throughput, default 3)\n"
           "      --max-depth K    deepest draft depth (default 4; long-context and\n"
           "                       math-quick: MTP depth, default 3)\n"
           "      --text PATH      held-out text for acceptance / long-context (.xz or plain)\n"
           "      --prompts N      passages / prompts to use (default 8 / all)\n"
           "      --positions LIST long-context lengths (default 1024,4096,16384; 16k works)\n"
           "      --samples N      exactness: samples per side of the distribution check\n"
           "                       (default 2000; 0 skips it)\n"
           "      --suites-dir DIR where <suite>.json files are (default: bench/suites of\n"
           "                       the source tree, then ./bench/suites)\n"
           "  -h, --help\n");
}

/* ---- passages of held-out text ---- */

bool bench_find_valid_text(char *buf, size_t cap) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%.2000s", MTPLX_DEFAULT_MODEL);
    char *s = strrchr(dir, '/');
    if (s) *s = 0;
    s = strrchr(dir, '/');
    if (s) *s = 0;
    else snprintf(dir, sizeof dir, ".");
    snprintf(buf, cap, "%s/../shared/data/gutenberg/valid.txt.xz", dir);
    if (mtplx_file_exists(buf)) return true;
    snprintf(buf, cap, "../shared/data/gutenberg/valid.txt.xz");
    return mtplx_file_exists(buf);
}

/* Up to n prompts of ~300 bytes, taken from paragraphs spread over the first
 * 512 KiB of the text; each cut at a space. *store: caller frees. */
static int load_passages(const char *path, int n, char ***out, char **store) {
    *out = NULL;
    *store = NULL;
    size_t len = 0, cap = 512 << 10;
    char *buf = malloc(cap + 1);
    if (!buf) return 0;
    size_t pl = strlen(path);
    FILE *f;
    bool piped = pl > 3 && !strcmp(path + pl - 3, ".xz");
    if (piped) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "xz -dc -- '%s' 2>/dev/null", path);
        f = popen(cmd, "r");
    } else {
        f = fopen(path, "rb");
    }
    if (!f) {
        free(buf);
        return 0;
    }
    size_t r;
    while (len < cap && (r = fread(buf + len, 1, cap - len, f)) > 0) len += r;
    if (piped) {
        pclose(f); /* xz ends on SIGPIPE: we only wanted the beginning */
    } else {
        fclose(f);
    }
    buf[len] = 0;
    char **list = calloc((size_t)n, sizeof *list);
    int got = 0;
    size_t step = len / (size_t)(n + 1);
    for (int i = 0; list && i < n && step > 0; i++) {
        char *p = buf + step * (size_t)(i + 1);
        char *para = strstr(p, "\n\n");
        if (!para) break;
        para += 2;
        while (*para == '\n' || *para == ' ') para++;
        size_t take = 300;
        if (strlen(para) < take + 50) break;
        char *end = para + take;
        while (end > para + 100 && *end != ' ') end--;
        *end = 0;
        for (char *q = para; *q; q++)
            if (*q == '\n') *q = ' ';
        list[got++] = para;
    }
    *out = list;
    *store = buf;
    return got;
}

/* ---- one generation, ids collected ---- */

typedef struct {
    int32_t *ids;
    int32_t n, cap;
} id_list;

static int collect(const mtplx_token_event *ev, void *user) {
    id_list *l = user;
    if (l->n < l->cap) l->ids[l->n++] = ev->id;
    return 0;
}

static mtplx_status gen_once(mtplx_model *m, const bench_opts *o, const char *text, int32_t depth,
                             float temp, uint64_t seed, id_list *ids, mtplx_gen_stats *st) {
    const mtplx_tokenizer *tok = mtplx_model_tokenizer(m);
    int32_t *p = NULL;
    size_t np = 0;
    MTPLX_TRY(mtplx_tokenize(tok, text, strlen(text), true, false, &p, &np));
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_threads = o->n_threads;
    cp.n_ctx = 1024;
    cp.device = o->device;
    mtplx_ctx *ctx = NULL;
    mtplx_status s = mtplx_ctx_new(m, &cp, &ctx);
    if (s == MTPLX_OK) {
        mtplx_gen_params gp = mtplx_gen_default_params();
        gp.no_event_logits = true; /* ids only: greedy picks may stay on a GPU */
        gp.sampling.temperature = temp;
        gp.sampling.seed = seed;
        gp.max_tokens = o->n_tokens;
        gp.draft_depth = depth;
        gp.ignore_eos = true;
        s = mtplx_generate(ctx, p, (int32_t)np, &gp, ids ? collect : NULL, ids, st);
    }
    mtplx_ctx_free(ctx);
    free(p);
    return s;
}

static cJSON *json_acc(const int64_t *drafted, const int64_t *accepted, int32_t depth) {
    cJSON *a = cJSON_CreateArray();
    for (int32_t q = 0; q < depth; q++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(drafted[q] ? (double)accepted[q] / drafted[q] : 0));
    return a;
}

static void print_acc(const int64_t *drafted, const int64_t *accepted, int32_t depth) {
    for (int32_t q = 0; q < depth; q++)
        printf("%s%.2f", q ? "/" : " ", drafted[q] ? (double)accepted[q] / drafted[q] : 0.0);
}

/* ---- suites ---- */

/* The suite's prompts as tune_prompts (borrowing set's strings). */
static tune_prompt *as_tune(const bench_set *set) {
    tune_prompt *t = calloc((size_t)(set->n ? set->n : 1), sizeof *t);
    for (int i = 0; t && i < set->n; i++)
        t[i] = (tune_prompt){set->p[i].name, set->p[i].kind, set->p[i].text};
    return t;
}

/* llama.cpp's plain decode of the same file, one row under the table, and
 * each config's tok/s over it (configs: the JSON rows just written). */
static void throughput_llama(const bench_opts *o, const tune_cfg *cfg, cJSON *configs,
                             cJSON *res) {
    bench_llama r;
    int threads = o->threads_used > 0 ? o->threads_used : 1;
    fflush(stdout);
    if (o->llama_cpp && *o->llama_cpp)
        fprintf(stderr, "mtplx bench: running llama.cpp (%s) on %d threads\n", o->llama_cpp,
                threads);
    const char *lm = o->llama_model ? o->llama_model : o->model_path;
    bench_llama_tg(o->llama_cpp, lm, threads, o->n_tokens, o->reps < 3 ? 3 : o->reps, &r);
    cJSON *lj = bench_llama_json(&r);
    cJSON_AddStringToObject(lj, "model", lm);
    cJSON_AddItemToObject(res, "llama_cpp", lj);
    if (!r.ran) {
        printf("llama.cpp: skipped (%s)\n", r.reason);
        if (strstr(r.reason, "failed to load model") && o->has_mtp && !o->llama_model)
            printf("llama.cpp: it refuses tensors it does not know, such as MTP heads; `mtplx "
                   "forge convert MODEL --strip-mtp -o PLAIN.gguf` writes a copy it loads: "
                   "--llama-model PLAIN.gguf\n");
        return;
    }
    printf("%-8s %9.1f %8s+-%-8.1f %8s %7s %12s  llama-bench tg%d, %d threads, build %s\n",
           "llama.cpp", r.tok_s, "", r.stddev, "-", "", "", r.n_gen, r.threads, r.commit);
    printf("vs llama.cpp:");
    int d = 0;
    cJSON *j;
    cJSON_ArrayForEach(j, configs) {
        double v = cfg[d].median / r.tok_s;
        if (d) printf("  depth %d %.2fx", d, v);
        else printf(" AR %.2fx", v);
        cJSON_AddNumberToObject(j, "vs_llama_cpp", v);
        d++;
    }
    printf("\n");
}

static int suite_throughput(mtplx_model *m, const bench_opts *o, cJSON *res) {
    bench_set set;
    if (!bench_set_load(o, "throughput", true, &set)) return EXIT_RUNTIME;
    int n = set.n;
    tune_prompt *pr = as_tune(&set);
    if (o->n_prompts > 0 && o->n_prompts < n) n = o->n_prompts;
    cJSON_AddStringToObject(res, "suite_file", set.source);
    if (!pr || n < 1) {
        fprintf(stderr, "mtplx bench: %s has no prompts\n", set.source);
        free(pr);
        bench_set_free(&set);
        return EXIT_RUNTIME;
    }
    tune_plan plan = {.max_depth = o->max_depth, .n_tokens = o->n_tokens, .reps = o->reps,
                      .n_threads = o->n_threads, .device = o->device, .temperature = 0.8f,
                      .seed = 1234,
                      .warmup = !o->quick, .progress = true};
    tune_cfg cfg[MTPLX_MAX_DRAFT + 1];
    mtplx_status ms = tune_measure(m, pr, n, &plan, cfg, tune_cfgs_depths(cfg, o->max_depth));
    free(pr);
    bench_set_free(&set);
    if (ms != MTPLX_OK) {
        cli_error("throughput suite");
        return EXIT_RUNTIME;
    }
    double ar_step = cfg[0].n_forward ? cfg[0].t_decode_ms / cfg[0].n_forward : 0;
    printf("throughput: %d prompts, %d tokens, %d reps, temp 0.8, fresh context per run\n", n,
           o->n_tokens, o->reps);
    printf("%-8s %9s %17s %8s %8s %12s  %s\n", "config", "tok/s", "range", "tok/fwd", "vs AR",
           "verify/AR", "acceptance per position");
    cJSON *arr = cJSON_AddArrayToObject(res, "configs");
    for (int32_t d = 0; d <= o->max_depth; d++) {
        tune_cfg *c = &cfg[d];
        double step = c->n_forward ? (d ? c->t_verify_ms : c->t_decode_ms) / c->n_forward : 0;
        double tpf = c->n_forward ? (double)c->n_gen / c->n_forward : 0;
        char name[24]; /* "depth " + any int32 */
        if (d) snprintf(name, sizeof name, "depth %d", d);
        else snprintf(name, sizeof name, "AR");
        printf("%-8s %9.1f %8.1f..%-8.1f %8.2f %7.2fx %11.2fx ", name, c->median, c->lo, c->hi,
               tpf, cfg[0].median > 0 ? c->median / cfg[0].median : 0.0,
               ar_step > 0 ? step / ar_step : 0.0);
        print_acc(c->drafted, c->accepted, d);
        printf("\n");
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "depth", d);
        cJSON_AddNumberToObject(j, "tokens_per_s_median", c->median);
        cJSON_AddNumberToObject(j, "tokens_per_s_min", c->lo);
        cJSON_AddNumberToObject(j, "tokens_per_s_max", c->hi);
        cJSON_AddNumberToObject(j, "samples", c->n);
        cJSON_AddNumberToObject(j, "tokens_per_forward", tpf);
        cJSON_AddNumberToObject(j, "step_ms", step);
        cJSON_AddNumberToObject(j, "step_over_ar_step", ar_step > 0 ? step / ar_step : 0);
        cJSON_AddNumberToObject(j, "draft_ms_per_step", c->n_forward ? c->t_draft_ms / c->n_forward : 0);
        cJSON_AddItemToObject(j, "acceptance", json_acc(c->drafted, c->accepted, d));
        cJSON_AddItemToArray(arr, j);
    }
    throughput_llama(o, cfg, arr, res);
    return EXIT_OK;
}

static int suite_acceptance(mtplx_model *m, const bench_opts *o, cJSON *res) {
    char path[4096];
    char **passages = NULL, *store = NULL;
    int n = 0;
    const char *source = "embedded";
    int want = o->n_prompts > 0 ? o->n_prompts : (o->quick ? 2 : 8);
    if (o->text) snprintf(path, sizeof path, "%s", o->text);
    if (o->text || bench_find_valid_text(path, sizeof path)) {
        n = load_passages(path, want, &passages, &store);
        if (n > 0) source = path;
        else if (o->text) {
            fprintf(stderr, "mtplx bench: cannot read passages from %s\n", path);
            return EXIT_RUNTIME;
        }
    }
    const char *texts[64];
    bench_set set = {0};
    if (n == 0) {
        if (!bench_set_load(o, "throughput", true, &set)) return EXIT_RUNTIME;
        for (int i = 0; i < set.n && i < want && i < 64; i++) texts[n++] = set.p[i].text;
        source = set.source;
    } else {
        for (int i = 0; i < n && i < 64; i++) texts[i] = passages[i];
    }
    int32_t depth = o->max_depth;
    printf("acceptance: depth %d, %d passages from %s, %d tokens each\n", depth, n, source, o->n_tokens);
    printf("%-6s %8s %10s  %s\n", "temp", "tok/fwd", "mean acc", "acceptance per position");
    cJSON_AddStringToObject(res, "text", source);
    cJSON_AddNumberToObject(res, "passages", n);
    cJSON_AddNumberToObject(res, "depth", depth);
    cJSON *arr = cJSON_AddArrayToObject(res, "temperatures");
    const float temps[2] = {0.0f, 0.7f};
    int rc = EXIT_OK;
    for (int t = 0; t < 2 && rc == EXIT_OK; t++) {
        int64_t drafted[MTPLX_MAX_DRAFT] = {0}, accepted[MTPLX_MAX_DRAFT] = {0}, gen = 0, fwd = 0;
        for (int i = 0; i < n; i++) {
            mtplx_gen_stats st;
            if (gen_once(m, o, texts[i], depth, temps[t], 42 + (uint64_t)i, NULL, &st) != MTPLX_OK) {
                cli_error("acceptance suite");
                rc = EXIT_RUNTIME;
                break;
            }
            gen += st.n_gen;
            fwd += st.n_forward;
            for (int q = 0; q < MTPLX_MAX_DRAFT; q++) {
                drafted[q] += st.drafted[q];
                accepted[q] += st.accepted[q];
            }
        }
        int64_t acc = 0;
        for (int q = 0; q < depth; q++) acc += accepted[q];
        printf("%-6.1f %8.2f %10.2f ", temps[t], fwd ? (double)gen / fwd : 0.0,
               fwd ? (double)acc / fwd : 0.0);
        print_acc(drafted, accepted, depth);
        printf("\n");
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "temperature", temps[t]);
        cJSON_AddNumberToObject(j, "tokens_per_forward", fwd ? (double)gen / fwd : 0);
        cJSON_AddNumberToObject(j, "mean_accepted", fwd ? (double)acc / fwd : 0);
        cJSON_AddItemToObject(j, "acceptance", json_acc(drafted, accepted, depth));
        cJSON_AddItemToArray(arr, j);
    }
    free(passages);
    free(store);
    bench_set_free(&set);
    return rc;
}

static int suite_exactness(mtplx_model *m, const bench_opts *o, cJSON *res) {
    bench_set set;
    if (!bench_set_load(o, "exactness", true, &set)) return EXIT_RUNTIME;
    const bench_prompt *pr = set.p;
    int n = set.n;
    if (o->n_prompts > 0 && o->n_prompts < n) n = o->n_prompts;
    cJSON_AddStringToObject(res, "suite_file", set.source);
    int32_t cap = o->n_tokens + 8;
    int32_t *a = malloc((size_t)cap * sizeof *a), *b = malloc((size_t)cap * sizeof *b);
    if (!a || !b) {
        free(a);
        free(b);
        bench_set_free(&set);
        return EXIT_RUNTIME;
    }
    int pass = 0, fail = 0;
    printf("exactness: greedy MTP ids == greedy AR ids, %d prompts x depths 1..%d, %d tokens\n", n,
           o->max_depth, o->n_tokens);
    cJSON *arr = cJSON_AddArrayToObject(res, "cases");
    int rc = EXIT_OK;
    for (int i = 0; i < n && rc == EXIT_OK; i++) {
        id_list ar = {a, 0, cap};
        mtplx_gen_stats st;
        if (gen_once(m, o, pr[i].text, 0, 0, 1, &ar, &st) != MTPLX_OK) {
            cli_error("exactness suite");
            rc = EXIT_RUNTIME;
            break;
        }
        printf("%-10s", pr[i].name);
        for (int32_t d = 1; d <= o->max_depth; d++) {
            id_list sp = {b, 0, cap};
            if (gen_once(m, o, pr[i].text, d, 0, 1, &sp, &st) != MTPLX_OK) {
                cli_error("exactness suite");
                rc = EXIT_RUNTIME;
                break;
            }
            int first = -1;
            for (int32_t k = 0; k < ar.n || k < sp.n; k++)
                if (k >= ar.n || k >= sp.n || a[k] != b[k]) {
                    first = k;
                    break;
                }
            bool ok = first < 0;
            ok ? pass++ : fail++;
            if (ok) printf("  d%d pass", d);
            else printf("  d%d FAIL@%d", d, first);
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "prompt", pr[i].name);
            cJSON_AddNumberToObject(j, "depth", d);
            cJSON_AddBoolToObject(j, "pass", ok);
            cJSON_AddNumberToObject(j, "tokens", ar.n);
            if (!ok) cJSON_AddNumberToObject(j, "first_difference", first);
            cJSON_AddItemToArray(arr, j);
        }
        printf("\n");
    }
    free(a);
    free(b);
    printf("exactness: %d passed, %d failed\n", pass, fail);
    cJSON_AddNumberToObject(res, "passed", pass);
    cJSON_AddNumberToObject(res, "failed", fail);
    if (rc == EXIT_OK && o->samples >= 0) {
        int df = bench_distribution(m, o, &set, res);
        if (df != 0) rc = EXIT_RUNTIME;
    }
    bench_set_free(&set);
    if (rc == EXIT_OK && fail) rc = EXIT_RUNTIME;
    return rc;
}

int cmd_bench(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "compare")) return bench_compare(argc - 1, argv + 1);
    enum { O_SUITE = 256, O_JSON, O_REPS, O_DEPTH, O_TEXT, O_PROMPTS, O_QUICK, O_POS, O_SAMPLES, O_SDIR,
           O_DEVICE, O_LLAMA, O_LMODEL };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},    {"suite", required_argument, 0, O_SUITE},
        {"json", required_argument, 0, O_JSON},  {"threads", required_argument, 0, 't'},
        {"tokens", required_argument, 0, 'n'},   {"reps", required_argument, 0, O_REPS},
        {"max-depth", required_argument, 0, O_DEPTH}, {"text", required_argument, 0, O_TEXT},
        {"prompts", required_argument, 0, O_PROMPTS}, {"quick", no_argument, 0, O_QUICK},
        {"positions", required_argument, 0, O_POS}, {"samples", required_argument, 0, O_SAMPLES},
        {"suites-dir", required_argument, 0, O_SDIR}, {"device", required_argument, 0, O_DEVICE},
        {"llama-cpp", required_argument, 0, O_LLAMA},
        {"llama-model", required_argument, 0, O_LMODEL},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    const char *model_arg = NULL, *suite = "throughput", *json_path = NULL;
    bench_opts o = {.max_depth = 4, .n_tokens = 0, .reps = 3};
    long iv;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:t:n:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_arg = optarg; break;
        case O_SUITE: suite = optarg; break;
        case O_JSON: json_path = optarg; break;
        case O_TEXT: o.text = optarg; break;
        case O_QUICK: o.quick = true; break; /* hidden: tiny budget, for tests */
        case O_POS: o.positions = optarg; break;
        case O_SDIR: o.suites_dir = optarg; break;
        case O_DEVICE:
            if (!cli_parse_device("bench", optarg, &o.device)) return EXIT_USAGE;
            break;
        case O_LLAMA: o.llama_cpp = optarg; break;
        case O_LMODEL: o.llama_model = optarg; break;
        case O_SAMPLES:
            if (!cli_parse_int("bench", "--samples", optarg, 0, 1000000, &iv)) return EXIT_USAGE;
            o.samples = iv ? (int32_t)iv : -1;
            break;
        case 't':
            if (!cli_parse_int("bench", "--threads", optarg, 1, 1024, &iv)) return EXIT_USAGE;
            o.n_threads = (int32_t)iv;
            break;
        case 'n':
            if (!cli_parse_int("bench", "--tokens", optarg, 1, 4096, &iv)) return EXIT_USAGE;
            o.n_tokens = (int32_t)iv;
            break;
        case O_REPS:
            if (!cli_parse_int("bench", "--reps", optarg, 1, 32, &iv)) return EXIT_USAGE;
            o.reps = (int32_t)iv;
            break;
        case O_DEPTH:
            if (!cli_parse_int("bench", "--max-depth", optarg, 1, MTPLX_MAX_DRAFT, &iv)) return EXIT_USAGE;
            o.max_depth = (int32_t)iv;
            o.depth_set = true;
            break;
        case O_PROMPTS:
            if (!cli_parse_int("bench", "--prompts", optarg, 1, 64, &iv)) return EXIT_USAGE;
            o.n_prompts = (int32_t)iv;
            break;
        case 'h': help(); return EXIT_OK;
        default: return cli_usage_error("bench", "unknown option");
        }
    }
    if (optind < argc) return cli_usage_error("bench", "unexpected argument '%s'", argv[optind]);
    if (!o.llama_cpp) o.llama_cpp = getenv("MTPLX_LLAMA_CPP");
    int (*fn)(mtplx_model *, const bench_opts *, cJSON *) = NULL;
    if (!strcmp(suite, "throughput")) fn = suite_throughput;
    else if (!strcmp(suite, "acceptance")) fn = suite_acceptance;
    else if (!strcmp(suite, "exactness")) fn = suite_exactness;
    else if (!strcmp(suite, "long-context")) fn = bench_suite_long_context;
    else if (!strcmp(suite, "math-quick")) fn = bench_suite_math_quick;
    else return cli_usage_error("bench", "unknown suite '%s' (throughput, acceptance, exactness, "
                                "long-context, math-quick)", suite);
    bool own_tokens = fn == bench_suite_long_context || fn == bench_suite_math_quick;
    if (o.n_tokens == 0 && !own_tokens) o.n_tokens = o.quick ? 16 : (fn == suite_exactness ? 64 : 96);
    if (o.quick) {
        o.reps = 1;
        if (o.n_prompts == 0) o.n_prompts = 2;
    }

    char path[4096];
    if (!cli_resolve_model(model_arg, path, sizeof path)) return EXIT_RUNTIME;
    mtplx_model *model = NULL;
    mtplx_model_params mp = mtplx_model_default_params();
    if (mtplx_model_load(path, &mp, &model) != MTPLX_OK) {
        cli_error("cannot load model");
        return EXIT_RUNTIME;
    }
    mtplx_model_info info;
    mtplx_model_get_info(model, &info);
    o.model_path = path;
    if (info.n_mtp == 0 && fn != suite_throughput && fn != bench_suite_long_context) {
        fprintf(stderr, "mtplx bench: %s has no MTP head: the %s suite needs one\n", path, suite);
        mtplx_model_free(model);
        return EXIT_RUNTIME;
    }
    if (info.n_mtp == 0) o.max_depth = 0;
    mtplx_hwinfo hw;
    mtplx_hwinfo_detect(&hw);
    o.threads_used = o.n_threads > 0 ? o.n_threads : hw.n_threads;
    o.has_mtp = info.n_mtp > 0;
    fprintf(stderr, "mtplx bench %s: %s (%s, %s) on %s, %d threads\n", suite, path, info.arch,
            info.weight_type, hw.cpu_model, o.n_threads > 0 ? o.n_threads : hw.n_threads);

    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "suite", suite);
    cJSON *b = cJSON_AddObjectToObject(root, "build");
    cJSON_AddStringToObject(b, "mtplx_version", MTPLX_VERSION);
    cJSON_AddStringToObject(b, "compiler", __VERSION__);
    cJSON_AddStringToObject(b, "kernels", getenv("MTPLX_KERNELS") ? getenv("MTPLX_KERNELS") : "auto");
    cJSON *mach = cJSON_AddObjectToObject(root, "machine");
    cJSON_AddStringToObject(mach, "cpu", hw.cpu_model);
    cJSON_AddNumberToObject(mach, "threads", hw.n_threads);
    cJSON_AddNumberToObject(mach, "cores", hw.n_cores);
    cJSON_AddStringToObject(mach, "simd", hw.simd);
    cJSON_AddNumberToObject(mach, "threads_used", o.n_threads > 0 ? o.n_threads : hw.n_threads);
    cJSON_AddStringToObject(mach, "hardware_key", hw.key);
    cJSON *mo = cJSON_AddObjectToObject(root, "model");
    char hash[40] = "";
    tune_model_hash(path, hash, sizeof hash);
    cJSON_AddStringToObject(mo, "path", path);
    cJSON_AddStringToObject(mo, "name", info.name);
    cJSON_AddStringToObject(mo, "arch", info.arch);
    cJSON_AddStringToObject(mo, "quant", info.weight_type);
    cJSON_AddStringToObject(mo, "hash", hash);
    cJSON_AddNumberToObject(mo, "mtp_heads", info.n_mtp);
    cJSON *res = cJSON_AddObjectToObject(root, "results");
    if (!own_tokens) cJSON_AddNumberToObject(res, "tokens", o.n_tokens); /* else the suite's */
    int rc = fn(model, &o, res);
    if (json_path) {
        char *t = cJSON_Print(root);
        FILE *f = fopen(json_path, "w");
        if (!f || !t || fputs(t, f) < 0 || fputc('\n', f) == EOF) {
            fprintf(stderr, "mtplx bench: cannot write %s\n", json_path);
            if (rc == EXIT_OK) rc = EXIT_RUNTIME;
        }
        if (f) fclose(f);
        free(t);
    }
    cJSON_Delete(root);
    mtplx_model_free(model);
    return rc;
}
