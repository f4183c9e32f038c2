/* cmd_run.c: `mtplx run`: one-shot generation from a prompt. Text streams to
 * stdout (the prompt is not echoed); one stats line goes to stderr. */
#include "cli/cli.h"
#include "cli/tuning.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void help(void) {
    printf("usage: mtplx run [-m MODEL] [-p PROMPT] [options]\n\n"
           "Generate text from a prompt (or from BOS when none is given).\n\n"
           "  -m, --model PATH        .gguf file, HF folder, llama2.c .bin, or a store name\n"
           "                          (default: the built-in model)\n"
           "      --tokenizer PATH    tokenizer for a llama2.c .bin (default: beside it)\n"
           "  -p, --prompt TEXT       prompt text (default: start from BOS)\n"
           "  -f, --file PATH         read the prompt from a file\n"
           "  -n, --n-predict N       tokens to generate (default 256; -1 = until EOS)\n"
           "      --temp T            temperature (default 0.8; 0 = greedy)\n"
           "      --top-k K           (default 40; 0 = off)\n"
           "      --top-p P           (default 0.95; 1 = off)\n"
           "      --min-p P           (default 0.05; 0 = off)\n"
           "      --repeat-penalty X  (default 1.0 = off)   --repeat-last-n N (default 64)\n"
           "      --presence-penalty X, --frequency-penalty X (default 0)\n"
           "  -s, --seed S            RNG seed (default: random)\n"
           "  -t, --threads N         threads (default: all cores)\n"
           "  -c, --ctx N             context length (default: min(model, 4096))\n"
           "      --draft-depth K     MTP draft depth 0..8 (default 3 when the model has a head)\n"
           "      --no-mtp            plain autoregressive decoding\n"
           "      --draft-vocab N     the head drafts over the first N token ids only\n"
           "                          (exact for any N; default -1: all of them)\n"
           "      --no-draft-q8       draft with the MTP head's own float weights, not the\n"
           "                          default quantized copy (half the bytes per draft step\n"
           "                          or less; exact either way, acceptance may differ)\n"
           "      --no-draft-q4       on the CPU, that copy in Q8_0, not the default Q4_0\n"
           "                          (a third cheaper head step, ~2%% fewer tokens per\n"
           "                          forward on the built-in model; likewise exact)\n"
           "      --no-draft-lm-q4    draft with the model's lm_head, not the default\n"
           "                          Q4_0 copy (CPU; likewise)\n"
           "      --adaptive          adapt the draft depth to the running acceptance\n"
           "      --no-adaptive       fixed draft depth (overrides the sustained mode)\n"
           "      --mode M            turbo | sustained | burst | auto (default auto: burst\n"
           "                          for short runs, sustained for long contexts); the\n"
           "                          settings it implies are printed; flags override them\n"
           "  -b, --batch N           prefill chunk, tokens per forward (default: mode's)\n"
           "      --ignore-eos        keep going past end-of-sequence tokens\n"
           "      --kv-type T         KV cache f16, f32 or q8_0 (default: the mode's; f16,\n"
           "                          q8_0 in sustained mode; q8_0 is CPU-only)\n"
           "      --kv-f32            same as --kv-type f32\n"
           "      --device D          cpu (default), cuda (the first GPU) or auto\n"
           "      --no-special        do not parse special-token text in the prompt\n"
           "  -h, --help\n");
}

static int on_token(const mtplx_token_event *ev, void *user) {
    (void)user;
    if (ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
    }
    return 0;
}

int cmd_run(int argc, char **argv) {
    enum { O_TEMP = 256, O_TOPK, O_TOPP, O_MINP, O_REP, O_REPN, O_PRES, O_FREQ, O_DEPTH, O_NOMTP,
           O_ADAPT, O_IGNEOS, O_KVF32, O_TOK, O_NOSPEC, O_MODE, O_NOADAPT, O_DEVICE, O_DVOCAB, O_KVTYPE,
           O_DQ8, O_DLM4, O_NODQ8, O_NODLM4, O_DQ4, O_NODQ4 };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},     {"prompt", required_argument, 0, 'p'},
        {"file", required_argument, 0, 'f'},      {"n-predict", required_argument, 0, 'n'},
        {"temp", required_argument, 0, O_TEMP},   {"top-k", required_argument, 0, O_TOPK},
        {"top-p", required_argument, 0, O_TOPP},  {"min-p", required_argument, 0, O_MINP},
        {"repeat-penalty", required_argument, 0, O_REP},
        {"repeat-last-n", required_argument, 0, O_REPN},
        {"presence-penalty", required_argument, 0, O_PRES},
        {"frequency-penalty", required_argument, 0, O_FREQ},
        {"seed", required_argument, 0, 's'},      {"threads", required_argument, 0, 't'},
        {"ctx", required_argument, 0, 'c'},       {"draft-depth", required_argument, 0, O_DEPTH},
        {"no-mtp", no_argument, 0, O_NOMTP},      {"adaptive", no_argument, 0, O_ADAPT},
        {"ignore-eos", no_argument, 0, O_IGNEOS}, {"kv-f32", no_argument, 0, O_KVF32},
        {"tokenizer", required_argument, 0, O_TOK}, {"no-special", no_argument, 0, O_NOSPEC},
        {"mode", required_argument, 0, O_MODE},   {"no-adaptive", no_argument, 0, O_NOADAPT},
        {"batch", required_argument, 0, 'b'},     {"device", required_argument, 0, O_DEVICE},
        {"draft-vocab", required_argument, 0, O_DVOCAB},
        {"draft-q8", no_argument, 0, O_DQ8},
        {"no-draft-q8", no_argument, 0, O_NODQ8},
        {"no-draft-lm-q4", no_argument, 0, O_NODLM4},
        {"draft-lm-q4", no_argument, 0, O_DLM4},
        {"draft-q4", no_argument, 0, O_DQ4},
        {"no-draft-q4", no_argument, 0, O_NODQ4},
        {"kv-type", required_argument, 0, O_KVTYPE},
        {"help", no_argument, 0, 'h'},            {0, 0, 0, 0}};
    const char *model_arg = NULL, *prompt = NULL, *file = NULL;
    mtplx_gen_params gp = mtplx_gen_default_params();
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.kv_type = CLI_KV_AUTO;
    mtplx_model_params mp = mtplx_model_default_params();
    bool seed_set = false, parse_special = true, no_adaptive = false;
    const char *mode = NULL;
    long iv;
    double fv;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:f:n:s:t:c:b:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_arg = optarg; break;
        case 'p': prompt = optarg; break;
        case 'f': file = optarg; break;
        case 'n':
            if (!cli_parse_int("run", "-n", optarg, -1, 1 << 24, &iv)) return EXIT_USAGE;
            gp.max_tokens = (int32_t)iv;
            break;
        case O_TEMP:
            if (!cli_parse_float("run", "--temp", optarg, 0, 100, &fv)) return EXIT_USAGE;
            gp.sampling.temperature = (float)fv;
            break;
        case O_TOPK:
            if (!cli_parse_int("run", "--top-k", optarg, 0, 1 << 24, &iv)) return EXIT_USAGE;
            gp.sampling.top_k = (int32_t)iv;
            break;
        case O_TOPP:
            if (!cli_parse_float("run", "--top-p", optarg, 1e-6, 1, &fv)) return EXIT_USAGE;
            gp.sampling.top_p = (float)fv;
            break;
        case O_MINP:
            if (!cli_parse_float("run", "--min-p", optarg, 0, 1, &fv)) return EXIT_USAGE;
            gp.sampling.min_p = (float)fv;
            break;
        case O_REP:
            if (!cli_parse_float("run", "--repeat-penalty", optarg, 0.01, 100, &fv)) return EXIT_USAGE;
            gp.sampling.repeat_penalty = (float)fv;
            break;
        case O_REPN:
            if (!cli_parse_int("run", "--repeat-last-n", optarg, 0, 1 << 24, &iv)) return EXIT_USAGE;
            gp.sampling.repeat_last_n = (int32_t)iv;
            break;
        case O_PRES:
            if (!cli_parse_float("run", "--presence-penalty", optarg, -2, 2, &fv)) return EXIT_USAGE;
            gp.sampling.presence_penalty = (float)fv;
            break;
        case O_FREQ:
            if (!cli_parse_float("run", "--frequency-penalty", optarg, -2, 2, &fv)) return EXIT_USAGE;
            gp.sampling.frequency_penalty = (float)fv;
            break;
        case 's':
            if (!cli_parse_int("run", "--seed", optarg, 0, 0x7fffffffffffffffL, &iv)) return EXIT_USAGE;
            gp.sampling.seed = (uint64_t)iv;
            seed_set = true;
            break;
        case 't':
            if (!cli_parse_int("run", "--threads", optarg, 1, 1024, &iv)) return EXIT_USAGE;
            cp.n_threads = (int32_t)iv;
            break;
        case 'c':
            if (!cli_parse_int("run", "--ctx", optarg, 16, 1 << 24, &iv)) return EXIT_USAGE;
            cp.n_ctx = (int32_t)iv;
            break;
        case O_DEPTH:
            if (!cli_parse_int("run", "--draft-depth", optarg, 0, MTPLX_MAX_DRAFT, &iv)) return EXIT_USAGE;
            gp.draft_depth = (int32_t)iv;
            break;
        case O_NOMTP: gp.draft_depth = 0; break;
        case O_ADAPT: gp.adaptive_depth = true; break;
        case O_NOADAPT: no_adaptive = true; break;
        case O_MODE: mode = optarg; break;
        case 'b':
            if (!cli_parse_int("run", "--batch", optarg, 1, 1 << 20, &iv)) return EXIT_USAGE;
            cp.n_batch = (int32_t)iv;
            break;
        case O_IGNEOS: gp.ignore_eos = true; break;
        case O_DVOCAB:
            if (!cli_parse_int("run", "--draft-vocab", optarg, -1, 1 << 24, &iv)) return EXIT_USAGE;
            gp.draft_vocab = iv == 0 ? -1 : (int32_t)iv; /* 0 reads as "no limit" too */
            break;
        case O_DQ8: mp.mtp_q8_0 = true; break;
        case O_NODQ8: mp.mtp_q8_0 = false; break;
        case O_NODLM4: mp.draft_lm_q4_0 = false; break;
        case O_DLM4: mp.draft_lm_q4_0 = true; break;
        case O_DQ4: mp.mtp_q8_0 = mp.mtp_q4_0 = true; break;
        case O_NODQ4: mp.mtp_q4_0 = false; break;
        case O_KVF32: cp.kv_type = MTPLX_KV_F32; break;
        case O_KVTYPE:
            if (!cli_parse_kv_type("run", optarg, &cp.kv_type)) return EXIT_USAGE;
            break;
        case O_DEVICE:
            if (!cli_parse_device("run", optarg, &cp.device)) return EXIT_USAGE;
            break;
        case O_TOK: mp.tokenizer_path = optarg; break;
        case O_NOSPEC: parse_special = false; break;
        case 'h': help(); return EXIT_OK;
        default: return cli_usage_error("run", "unknown option");
        }
    }
    if (optind < argc) return cli_usage_error("run", "unexpected argument '%s'", argv[optind]);
    if (prompt && file) return cli_usage_error("run", "give -p or -f, not both");
    cli_mode mode_id;
    if (!cli_mode_parse(mode, &mode_id))
        return cli_usage_error("run", "--mode expects turbo, sustained, burst or auto, got '%s'", mode);
    if (!seed_set) gp.sampling.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);

    char path[4096];
    if (!cli_resolve_model(model_arg, path, sizeof path)) return EXIT_RUNTIME;
    char *file_text = NULL;
    if (file) {
        FILE *f = fopen(file, "rb");
        if (!f) {
            fprintf(stderr, "mtplx run: cannot read prompt file %s\n", file);
            return EXIT_RUNTIME;
        }
        size_t cap = 1 << 16, n = 0;
        file_text = malloc(cap);
        size_t r;
        while (file_text && (r = fread(file_text + n, 1, cap - n - 1, f)) > 0) {
            n += r;
            if (n + 1 == cap) {
                char *grown = realloc(file_text, cap *= 2);
                if (!grown) free(file_text);
                file_text = grown;
            }
        }
        fclose(f);
        if (!file_text) return EXIT_RUNTIME;
        file_text[n] = 0;
        prompt = file_text;
    }

    int rc = EXIT_RUNTIME;
    mtplx_model *model = NULL;
    mtplx_ctx *ctx = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    double t0 = cli_now_ms();
    if (mtplx_model_load(path, &mp, &model) != MTPLX_OK) {
        cli_error("cannot load model");
        goto done;
    }
    double t_load = cli_now_ms() - t0;
    const mtplx_tokenizer *tok = mtplx_model_tokenizer(model);
    if (prompt && *prompt) {
        if (mtplx_tokenize(tok, prompt, strlen(prompt), true, parse_special, &ids, &n_ids) != MTPLX_OK) {
            cli_error("cannot tokenize the prompt");
            goto done;
        }
    }
    if (n_ids == 0) {
        int32_t bos = mtplx_token_bos(tok);
        if (bos < 0) bos = mtplx_token_eos(tok);
        if (bos < 0) {
            fprintf(stderr, "mtplx run: the tokenizer has no BOS token; give a prompt with -p\n");
            goto done;
        }
        free(ids);
        ids = malloc(sizeof *ids);
        if (!ids) goto done;
        ids[0] = bos;
        n_ids = 1;
    }
    mtplx_model_info info;
    mtplx_model_get_info(model, &info);
    if (gp.draft_depth > 0 && info.n_mtp == 0) {
        fprintf(stderr, "mtplx run: --draft-depth %d needs an MTP head, and %s has none "
                        "(use --no-mtp, or give it one with `mtplx forge`)\n",
                gp.draft_depth, path);
        rc = EXIT_USAGE;
        goto done;
    }
    int32_t n_expected = gp.max_tokens > 0 ? (int32_t)n_ids + gp.max_tokens : 0;
    cli_mode_plan plan;
    if ((rc = cli_apply_mode(model, path, mode, n_expected, &gp, &cp, NULL, &plan)) != EXIT_OK)
        goto done;
    rc = EXIT_RUNTIME;
    if (no_adaptive) gp.adaptive_depth = plan.adaptive = false;
    cli_mode_print(&plan, stderr);
    if (mtplx_ctx_new(model, &cp, &ctx) != MTPLX_OK) {
        cli_error("cannot create a context");
        goto done;
    }
    mtplx_gen_stats st;
    gp.no_event_logits = true; /* on_token prints text only: greedy picks may stay on a GPU */
    if (mtplx_generate(ctx, ids, (int32_t)n_ids, &gp, on_token, NULL, &st) != MTPLX_OK) {
        fputc('\n', stdout);
        cli_error("generation failed");
        goto done;
    }
    fputc('\n', stdout);
    fflush(stdout);
    double dec_s = st.t_decode_ms / 1e3;
    fprintf(stderr, "\nmtplx: load %.0f ms | prompt %d tok (%d cached) %.1f tok/s | gen %d tok %.2f tok/s",
            t_load, st.n_prompt, st.n_cached,
            st.t_prefill_ms > 0 ? (st.n_prompt - st.n_cached) / (st.t_prefill_ms / 1e3) : 0.0,
            st.n_gen, dec_s > 0 ? st.n_gen / dec_s : 0.0);
    if (st.draft_depth > 0) {
        fprintf(stderr, " | mtp depth %d: accept", st.draft_depth);
        for (int i = 0; i < st.draft_depth; i++)
            fprintf(stderr, "%s%.2f", i ? "/" : " ",
                    st.drafted[i] ? (double)st.accepted[i] / st.drafted[i] : 0.0);
        int64_t acc = 0;
        for (int i = 0; i < st.draft_depth; i++) acc += st.accepted[i];
        fprintf(stderr, ", mean accepted %.2f, %.2f tok/forward, draft %.0f%% verify %.0f%%",
                st.n_forward ? (double)acc / st.n_forward : 0.0,
                mtplx_gen_stats_tokens_per_forward(&st),
                st.t_decode_ms > 0 ? 100 * st.t_draft_ms / st.t_decode_ms : 0.0,
                st.t_decode_ms > 0 ? 100 * st.t_verify_ms / st.t_decode_ms : 0.0);
    }
    fprintf(stderr, "\n");
    rc = EXIT_OK;
done:
    free(ids);
    free(file_text);
    mtplx_ctx_free(ctx);
    mtplx_model_free(model);
    return rc;
}
