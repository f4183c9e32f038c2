/* cmd_forge.c: `mtplx forge`: make checkpoints MTP-capable.
 *   mtplx forge convert SRC [-o OUT.gguf] [--type T] [--strip-mtp] [--quantize-mtp]
 *   mtplx forge train-mtp MODEL --data TEXT -o OUT.gguf [--depth K] [--steps N] ...
 *   mtplx forge verify MODEL [--data TEXT] [--depth K] [-n TOKENS]
 * Without -o, convert writes into the model store (<home>/models/<name>.gguf). */
#include "cli/cli.h"

#include "forge/forge.h"
#include "kernels/kernels.h"

#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void help(void) {
    printf("usage: mtplx forge convert SRC [options]\n"
           "       mtplx forge train-mtp MODEL --data TEXT_FILE -o OUT.gguf [options]\n"
           "       mtplx forge verify MODEL [--data TEXT_FILE] [--depth K] [-n TOKENS] [--temp T] [--device D]\n\n"
           "convert: an HF folder, a llama2.c .bin or a GGUF file to GGUF.\n"
           "  -o, --output PATH      output file (default: the model store, %s/models/NAME.gguf)\n"
           "  -t, --type TYPE        weight matrices as f32, f16, bf16, q8_0, q4_0, q4_K, q6_K\n"
           "                         (--quantize is the same option)\n"
           "      --strip-mtp        drop the MTP heads: a plain GGUF that llama.cpp loads\n"
           "      --quantize-mtp     quantize MTP heads too (default: kept in source precision)\n"
           "      --tokenizer PATH   tokenizer for a llama2.c .bin\n\n"
           "train-mtp: train a Qwen3-Next-style MTP head for a model without one, trunk frozen,\n"
           "on the CPU, by self-distillation (KL to the trunk's own next-next distributions).\n"
           "  --data FILE            UTF-8 training text (the last 10%% is held out)\n"
           "  -o, --output PATH      the model with its new head\n"
           "  --depth K              unrolled draft depth trained (1..%d, default 1)\n"
           "  --steps N              optimizer steps, one window each (default 200)\n"
           "  --seq N                positions per window (default 128)\n"
           "  --lr X                 peak learning rate (default 1e-3; cosine, 5%% warmup)\n"
           "  -j, --threads N        threads (default: all cores)\n"
           "  --checkpoint-every N   write OUT.ckpt.gguf (+ .opt optimizer state) every N steps\n"
           "  --resume CKPT          continue from a checkpoint GGUF (reads CKPT.opt)\n"
           "  --bf16                 store the head's matrices as BF16 (default F32)\n"
           "  --f32-lm-head          lm_head products in f32 (default: the model's own lm_head\n"
           "                         and a Q8_0 copy of its transpose, through the int8 kernels)\n"
           "  --seed N               data order seed (default 1234)\n"
           "  --on-policy F          train this share of the steps (0..1, default 0) on the\n"
           "                         trunk's own greedy text, which drafts are verified along\n"
           "  --pool N               on-policy windows made before the first step (default 256)\n\n"
           "verify: acceptance per draft position, tokens per forward, AR vs MTP tok/s, and\n"
           "whether greedy MTP text equals greedy AR text.\n"
           "  --data FILE            prompts from this text (default: built-in prompts)\n"
           "  --depth K              draft depth (default 3)\n"
           "  -n, --tokens N         tokens per prompt (default 128)\n"
           "  --prompts N            number of prompts (default 4)\n"
           "  -j, --threads N\n"
           "  --device D             cpu (default), cuda (the first GPU) or auto\n"
           "  --temp T               sample at temperature T (top-k 40, top-p 0.95, min-p 0.05)\n"
           "                         instead of greedy: the rejection test's acceptance; the\n"
           "                         AR and MTP texts are then independent samples (default 0)\n"
           "  -s, --seed N           sampling seed of the first prompt, +1 per prompt (default 1)\n"
           "      --draft-vocab N    the head drafts over the first N token ids (as run's)\n",
           cli_home(), MTPLX_TRAIN_MAX_DEPTH);
}

typedef struct {
    double t0;
    double last_line; /* ms of the last line written when stderr is not a terminal */
} prog;

static bool stderr_tty(void) {
    static int tty = -1;
    if (tty < 0) tty = isatty(STDERR_FILENO);
    return tty;
}

/* On a terminal the bar redraws in place at every update; into a log file or
 * a pipe, \r redraws would pile up on one line, so it writes a whole line at
 * most every 5 s, and the last one. */
static bool progress_line_due(double *last_ms, bool final) {
    if (stderr_tty()) return true;
    double now = cli_now_ms();
    if (!final && *last_ms > 0 && now - *last_ms < 5000) return false;
    *last_ms = now;
    return true;
}

static void progress(int64_t done, int64_t total, const char *name, void *user) {
    prog *p = user;
    if (!progress_line_due(&p->last_line, done == total)) return;
    double el = (cli_now_ms() - p->t0) / 1e3;
    double eta = done ? el / done * (total - done) : 0;
    int w = 30, fill = (int)(w * done / (total ? total : 1));
    fputs(stderr_tty() ? "\r" : "", stderr);
    fprintf(stderr, "[%.*s%*s] %3d%% %lld/%lld tensors  %.1fs  ETA %.1fs  %-28.28s",
            fill, "##############################", w - fill, "", (int)(100 * done / (total ? total : 1)),
            (long long)done, (long long)total, el, eta, name);
    if (done == total || !stderr_tty()) fputc('\n', stderr);
}

static void default_output(const char *in, char *buf, size_t cap) {
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", in);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
    char *base = basename(tmp), *dot = strrchr(base, '.');
    if (dot && dot != base) *dot = 0;
    snprintf(buf, cap, "%s/models", cli_home());
    mkdir(cli_home(), 0755);
    mkdir(buf, 0755);
    snprintf(buf, cap, "%s/models/%s.gguf", cli_home(), base);
}

static int do_convert(int argc, char **argv) {
    enum { O_STRIP = 256, O_QMTP, O_TOK };
    static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                         {"type", required_argument, 0, 't'},
                                         {"quantize", required_argument, 0, 't'},
                                         {"strip-mtp", no_argument, 0, O_STRIP},
                                         {"quantize-mtp", no_argument, 0, O_QMTP},
                                         {"tokenizer", required_argument, 0, O_TOK},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *out = NULL, *tokp = NULL;
    mtplx_convert_params cp = {.quant_type = -1};
    int c;
    while ((c = getopt_long(argc, argv, "o:t:q:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 't':
        case 'q':
            cp.quant_type = mtplx_type_from_name(optarg);
            if (cp.quant_type < 0 || cp.quant_type == MTPLX_TYPE_Q8_K)
                return cli_usage_error("forge", "--type: unknown type '%s' (have f32, f16, bf16, "
                                       "q8_0, q4_0, q4_K, q6_K)", optarg);
            break;
        case O_STRIP: cp.strip_mtp = true; break;
        case O_QMTP: cp.quantize_mtp = true; break;
        case O_TOK: tokp = optarg; break;
        case 'h': help(); return EXIT_OK;
        default: return cli_usage_error("forge", "convert: unknown option");
        }
    }
    if (optind != argc - 1) return cli_usage_error("forge", "convert needs exactly one SRC");
    const char *in = argv[optind];
    char outbuf[PATH_MAX];
    if (!out) {
        default_output(in, outbuf, sizeof outbuf);
        out = outbuf;
    }
    prog pg = {.t0 = cli_now_ms()};
    cp.progress = progress;
    cp.user = &pg;
    if (mtplx_forge_convert(in, tokp, out, &cp) != MTPLX_OK) {
        fputc('\n', stderr);
        cli_error("forge convert");
        return EXIT_RUNTIME;
    }
    struct stat st;
    stat(out, &st);
    fprintf(stderr, "wrote %s (%.1f MiB) in %.1fs\n", out, st.st_size / 1048576.0,
            (cli_now_ms() - pg.t0) / 1e3);
    return EXIT_OK;
}

/* ---- verify ---- */

static void print_verify(const mtplx_verify_result *r) {
    printf("prompts:            %d, %lld tokens each way\n", r->n_prompts,
           (long long)(r->n_prompts ? r->n_gen_ar / r->n_prompts : 0));
    if (!r->has_mtp) {
        printf("MTP head:           none\n");
        printf("AR decode:          %.1f tok/s\n", r->ar_tok_s);
        printf("verdict: no MTP head - plain AR only (train one with `mtplx forge train-mtp`)\n");
        return;
    }
    printf("draft depth:        %d\n", r->depth);
    printf("acceptance:        ");
    for (int d = 0; d < r->depth; d++)
        printf(" pos%d %.3f (%lld/%lld)", d + 1,
               r->drafted[d] ? (double)r->accepted[d] / (double)r->drafted[d] : 0.0,
               (long long)r->accepted[d], (long long)r->drafted[d]);
    printf("\ntokens per forward: %.3f\n", r->tokens_per_forward);
    double sp = r->ar_tok_s > 0 ? r->mtp_tok_s / r->ar_tok_s : 0;
    printf("decode:             AR %.1f tok/s, MTP %.1f tok/s (%.2fx)\n", r->ar_tok_s, r->mtp_tok_s, sp);
    if (r->temperature > 0) {
        printf("sampled:            temperature %.2f; AR and MTP texts are independent samples "
               "(exactness: test_mtp's distribution test)\n", r->temperature);
        printf("verdict: %.2f tokens per forward, %.2fx AR, sampled at temperature %.2f\n",
               r->tokens_per_forward, sp, r->temperature);
        return;
    }
    printf("greedy identity:    %d/%d prompts identical\n", r->identical, r->n_prompts);
    if (r->identical != r->n_prompts)
        printf("verdict: FAIL - greedy MTP text differs from greedy AR text\n");
    else if (sp >= 1.05)
        printf("verdict: OK - exact, %.2f tokens per forward, %.2fx faster than AR\n", r->tokens_per_forward, sp);
    else if (r->tokens_per_forward >= 1.5)
        printf("verdict: exact, %.2f tokens per forward, but %.2fx wall clock here: verification "
               "or drafting costs too much on this machine (or it is busy); try `mtplx tune`\n",
               r->tokens_per_forward, sp);
    else
        printf("verdict: exact but no faster (%.2f tokens per forward, %.2fx): the head is too weak "
               "at depth %d\n", r->tokens_per_forward, sp, r->depth);
}

static int run_verify(const char *model, const mtplx_verify_params *vp) {
    mtplx_verify_result r;
    if (mtplx_forge_verify(model, vp, &r) != MTPLX_OK) {
        cli_error("forge verify");
        return EXIT_RUNTIME;
    }
    print_verify(&r);
    return r.temperature > 0 || r.identical == r.n_prompts ? EXIT_OK : EXIT_RUNTIME;
}

static int do_verify(int argc, char **argv) {
    enum { O_DATA = 256, O_DEPTH, O_PROMPTS, O_DEVICE, O_TEMP, O_DVOCAB };
    static const struct option opts[] = {{"data", required_argument, 0, O_DATA},
                                         {"depth", required_argument, 0, O_DEPTH},
                                         {"tokens", required_argument, 0, 'n'},
                                         {"prompts", required_argument, 0, O_PROMPTS},
                                         {"threads", required_argument, 0, 'j'},
                                         {"device", required_argument, 0, O_DEVICE},
                                         {"temp", required_argument, 0, O_TEMP},
                                         {"seed", required_argument, 0, 's'},
                                         {"draft-vocab", required_argument, 0, O_DVOCAB},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    mtplx_verify_params vp = mtplx_verify_default_params();
    long v;
    double f;
    int c;
    while ((c = getopt_long(argc, argv, "n:j:t:s:h", opts, NULL)) != -1) {
        switch (c) {
        case O_DATA: vp.data_path = optarg; break;
        case O_DEPTH:
            if (!cli_parse_int("forge", "--depth", optarg, 1, MTPLX_MAX_DRAFT, &v)) return EXIT_USAGE;
            vp.depth = (int32_t)v;
            break;
        case 'n':
            if (!cli_parse_int("forge", "--tokens", optarg, 1, 4096, &v)) return EXIT_USAGE;
            vp.n_tokens = (int32_t)v;
            break;
        case O_PROMPTS:
            if (!cli_parse_int("forge", "--prompts", optarg, 1, 1000, &v)) return EXIT_USAGE;
            vp.n_prompts = (int32_t)v;
            break;
        case 'j':
        case 't':
            if (!cli_parse_int("forge", "--threads", optarg, 1, 1024, &v)) return EXIT_USAGE;
            vp.n_threads = (int32_t)v;
            break;
        case O_DEVICE:
            if (!cli_parse_device("forge", optarg, &vp.device)) return EXIT_USAGE;
            break;
        case O_TEMP:
            if (!cli_parse_float("forge", "--temp", optarg, 0.0, 100.0, &f)) return EXIT_USAGE;
            vp.temperature = (float)f;
            break;
        case 's':
            if (!cli_parse_int("forge", "--seed", optarg, 0, LONG_MAX, &v)) return EXIT_USAGE;
            vp.seed = (uint64_t)v;
            break;
        case O_DVOCAB:
            if (!cli_parse_int("forge", "--draft-vocab", optarg, -1, 1 << 24, &v)) return EXIT_USAGE;
            vp.draft_vocab = (int32_t)v;
            break;
        case 'h': help(); return EXIT_OK;
        default: return cli_usage_error("forge", "verify: unknown option");
        }
    }
    if (optind != argc - 1) return cli_usage_error("forge", "verify needs exactly one MODEL");
    char path[PATH_MAX];
    if (!cli_resolve_model(argv[optind], path, sizeof path)) return EXIT_RUNTIME;
    return run_verify(path, &vp);
}

/* ---- train-mtp ---- */

static void train_progress(const mtplx_train_progress *p, void *user) {
    const int *depth = user;
    static double last_line;
    if (!progress_line_due(&last_line, p->step == p->steps || p->checkpoint)) return;
    int w = 24, fill = (int)(w * p->step / (p->steps ? p->steps : 1));
    fputs(stderr_tty() ? "\r" : "", stderr);
    fprintf(stderr, "[%.*s%*s] ", fill, "########################", w - fill, "");
    if (p->pool) { /* the on-policy windows, before the first step */
        fprintf(stderr, "on-policy pool %lld/%lld windows", (long long)p->step, (long long)p->steps);
    } else {
        fprintf(stderr, "%lld/%lld  loss %.3f  agree", (long long)p->step, (long long)p->steps, p->loss);
        for (int d = 0; d < *depth; d++) fprintf(stderr, " %.2f", p->agree[d]);
    }
    fprintf(stderr, "  %.0f tok/s  %.0fs  ETA %.0fs%s   ", p->tok_s, p->elapsed_s, p->eta_s,
            p->checkpoint ? "  (checkpoint)" : "");
    if (p->step == p->steps || !stderr_tty()) fputc('\n', stderr);
}

static int do_train(int argc, char **argv) {
    enum { O_DATA = 256, O_DEPTH, O_STEPS, O_SEQ, O_LR, O_RESUME, O_CKPT, O_BF16, O_SEED, O_F32LM,
           O_ONPOL, O_POOL };
    static const struct option opts[] = {{"data", required_argument, 0, O_DATA},
                                         {"output", required_argument, 0, 'o'},
                                         {"depth", required_argument, 0, O_DEPTH},
                                         {"steps", required_argument, 0, O_STEPS},
                                         {"seq", required_argument, 0, O_SEQ},
                                         {"lr", required_argument, 0, O_LR},
                                         {"threads", required_argument, 0, 'j'},
                                         {"resume", required_argument, 0, O_RESUME},
                                         {"checkpoint-every", required_argument, 0, O_CKPT},
                                         {"bf16", no_argument, 0, O_BF16},
                                         {"f32-lm-head", no_argument, 0, O_F32LM},
                                         {"seed", required_argument, 0, O_SEED},
                                         {"on-policy", required_argument, 0, O_ONPOL},
                                         {"pool", required_argument, 0, O_POOL},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    mtplx_train_params tp = mtplx_train_default_params();
    long v;
    double f;
    int c;
    while ((c = getopt_long(argc, argv, "o:j:t:h", opts, NULL)) != -1) {
        switch (c) {
        case O_DATA: tp.data_path = optarg; break;
        case 'o': tp.out_path = optarg; break;
        case O_DEPTH:
            if (!cli_parse_int("forge", "--depth", optarg, 1, MTPLX_TRAIN_MAX_DEPTH, &v)) return EXIT_USAGE;
            tp.depth = (int32_t)v;
            break;
        case O_STEPS:
            if (!cli_parse_int("forge", "--steps", optarg, 0, 100000000, &v)) return EXIT_USAGE;
            tp.steps = v;
            break;
        case O_SEQ:
            if (!cli_parse_int("forge", "--seq", optarg, 2, 8192, &v)) return EXIT_USAGE;
            tp.seq = (int32_t)v;
            break;
        case O_LR:
            if (!cli_parse_float("forge", "--lr", optarg, 1e-8, 1.0, &f)) return EXIT_USAGE;
            tp.lr = (float)f;
            break;
        case 'j':
        case 't':
            if (!cli_parse_int("forge", "--threads", optarg, 1, 1024, &v)) return EXIT_USAGE;
            tp.n_threads = (int32_t)v;
            break;
        case O_RESUME: tp.resume = optarg; break;
        case O_CKPT:
            if (!cli_parse_int("forge", "--checkpoint-every", optarg, 0, 100000000, &v)) return EXIT_USAGE;
            tp.checkpoint_every = v;
            break;
        case O_BF16: tp.head_bf16 = true; break;
        case O_F32LM: tp.f32_lm_head = true; break;
        case O_SEED:
            if (!cli_parse_int("forge", "--seed", optarg, 0, 1L << 62, &v)) return EXIT_USAGE;
            tp.seed = (uint64_t)v;
            break;
        case O_ONPOL:
            if (!cli_parse_float("forge", "--on-policy", optarg, 0.0, 1.0, &f)) return EXIT_USAGE;
            tp.on_policy = (float)f;
            break;
        case O_POOL:
            if (!cli_parse_int("forge", "--pool", optarg, 1, 1000000, &v)) return EXIT_USAGE;
            tp.pool_windows = (int32_t)v;
            break;
        case 'h': help(); return EXIT_OK;
        default: return cli_usage_error("forge", "train-mtp: unknown option");
        }
    }
    if (optind != argc - 1) return cli_usage_error("forge", "train-mtp needs exactly one MODEL");
    if (!tp.data_path) return cli_usage_error("forge", "train-mtp needs --data TEXT_FILE");
    if (!tp.out_path) return cli_usage_error("forge", "train-mtp needs -o OUT.gguf");
    char path[PATH_MAX];
    if (!cli_resolve_model(argv[optind], path, sizeof path)) return EXIT_RUNTIME;
    int depth = tp.depth;
    tp.progress = train_progress;
    tp.user = &depth;
    double t0 = cli_now_ms();
    mtplx_train_result r;
    if (mtplx_forge_train_mtp(path, &tp, &r) != MTPLX_OK) {
        fputc('\n', stderr);
        cli_error("forge train-mtp");
        return EXIT_RUNTIME;
    }
    fprintf(stderr, "trained %lld steps (%lld tokens, %.0f tok/s) in %.0fs; wrote %s\n",
            (long long)r.steps_done, (long long)r.tokens, r.tok_s, (cli_now_ms() - t0) / 1e3, tp.out_path);
    printf("held-out KL (nats) / top-1 agreement with the trunk, before -> after:\n");
    for (int d = 0; d < depth; d++)
        printf("  depth %d: KL %.3f -> %.3f, agree %.3f -> %.3f\n", d + 1, r.eval_loss0[d],
               r.eval_loss1[d], r.eval_agree0[d], r.eval_agree1[d]);
    mtplx_verify_params vp = mtplx_verify_default_params();
    vp.data_path = tp.data_path;
    vp.depth = depth > 1 ? depth : 1;
    vp.n_threads = tp.n_threads;
    vp.n_tokens = 64;
    return run_verify(tp.out_path, &vp);
}

int cmd_forge(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        help();
        return argc < 2 ? EXIT_USAGE : EXIT_OK;
    }
    const char *sub = argv[1];
    optind = 1;
    argc--;
    argv++;
    if (!strcmp(sub, "convert")) return do_convert(argc, argv);
    if (!strcmp(sub, "train-mtp")) return do_train(argc, argv);
    if (!strcmp(sub, "verify")) return do_verify(argc, argv);
    return cli_usage_error("forge", "unknown subcommand '%s' (have: convert, train-mtp, verify)", sub);
}
