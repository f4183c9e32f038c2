/* cmd_serve.c: `mtplx serve`: the OpenAI-compatible HTTP server
 * (src/server/). Parses flags, prints the URL, stops on SIGINT / SIGTERM. */
#include "cli/cli.h"
#include "cli/tuning.h"

#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static void help(void) {
    printf("usage: mtplx serve [-m MODEL] [options]\n\n"
           "OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, /v1/models,\n"
           "/v1/embeddings, /v1/rerank, /health, /metrics) and the web UI at /.\n\n"
           "  -m, --model PATH          model to serve (default: the built-in model)\n"
           "      --host ADDR           address to bind (default 127.0.0.1)\n"
           "      --port N              port (default 8000; 0 = any free port)\n"
           "      --api-key KEY         require \"Authorization: Bearer KEY\"\n"
           "  -np, --parallel N         requests decoding together (slots, default 1)\n"
           "  -c, --ctx N               context per slot (default: min(model, 4096))\n"
           "      --draft-depth K       MTP draft depth 0..8 (default 3 with an MTP head)\n"
           "      --no-mtp              plain autoregressive decoding\n"
           "  -t, --threads N           threads (default: all cores)\n"
           "      --mode M              turbo | sustained | burst | auto (default auto: turbo,\n"
           "                            or sustained when --ctx > 8192); the settings it\n"
           "                            implies are printed at start-up; flags override them\n"
           "  -b, --batch N             prefill chunk, tokens per forward (default: mode's)\n"
           "      --kv-type T           KV cache f16, f32 or q8_0 (default: the mode's; q8_0\n"
           "                            in sustained mode; q8_0 is CPU-only)\n"
           "      --adaptive            adapt the draft depth to the running acceptance\n"
           "      --no-adaptive         fixed draft depth (overrides the sustained mode)\n"
           "      --device D            auto (default: the first GPU when there is one, else\n"
           "                            the CPU), cpu or cuda\n"
           "      --chat-template FILE  Jinja chat template instead of the model's\n"
           "                            (without either, a ChatML rendering is used)\n"
           "      --max-queue N         requests waiting for a slot before 429 (default 64)\n"
           "      --embedding-model P   model for /v1/embeddings\n"
           "      --reranker-model P    model for /v1/rerank\n"
           "      --alias NAME          model id in /v1/models (default: file name)\n"
           "  -h, --help\n");
}

static void on_stop(int sig) {
    (void)sig;
    mtplx_server_stop();
}

static void on_listen(const char *url, int port, void *user) {
    (void)port;
    (void)user;
    printf("mtplx serve: listening on %s (web UI at %s/, API at %s/v1)\n", url, url, url);
    fflush(stdout);
}

int cmd_serve(int argc, char **argv) {
    enum { O_HOST = 256, O_PORT, O_KEY, O_DEPTH, O_NOMTP, O_TMPL, O_QUEUE, O_EMB, O_RR, O_ALIAS, O_NP,
           O_MODE, O_KVTYPE, O_DEVICE, O_ADAPT, O_NOADAPT };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},          {"host", required_argument, 0, O_HOST},
        {"port", required_argument, 0, O_PORT},        {"api-key", required_argument, 0, O_KEY},
        {"parallel", required_argument, 0, O_NP},      {"np", required_argument, 0, O_NP},
        {"ctx", required_argument, 0, 'c'},            {"draft-depth", required_argument, 0, O_DEPTH},
        {"no-mtp", no_argument, 0, O_NOMTP},           {"threads", required_argument, 0, 't'},
        {"chat-template", required_argument, 0, O_TMPL}, {"max-queue", required_argument, 0, O_QUEUE},
        {"embedding-model", required_argument, 0, O_EMB}, {"reranker-model", required_argument, 0, O_RR},
        {"alias", required_argument, 0, O_ALIAS},      {"help", no_argument, 0, 'h'},
        {"mode", required_argument, 0, O_MODE},        {"batch", required_argument, 0, 'b'},
        {"kv-type", required_argument, 0, O_KVTYPE},   {"device", required_argument, 0, O_DEVICE},
        {"adaptive", no_argument, 0, O_ADAPT},         {"no-adaptive", no_argument, 0, O_NOADAPT},
        {0, 0, 0, 0}};
    mtplx_server_params p = mtplx_server_default_params();
    static cli_serve_mode sm; /* outlives mtplx_server_run */
    cli_serve_mode_init(&sm);
    const char *model_arg = NULL;
    long iv;
    int c;
    optind = 1;
    while ((c = getopt_long_only(argc, argv, "m:c:t:b:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_arg = optarg; break;
        case O_HOST: p.host = optarg; break;
        case O_PORT:
            if (!cli_parse_int("serve", "--port", optarg, 0, 65535, &iv)) return EXIT_USAGE;
            p.port = (int)iv;
            break;
        case O_KEY: p.api_key = optarg; break;
        case O_NP:
            if (!cli_parse_int("serve", "--parallel", optarg, 1, 256, &iv)) return EXIT_USAGE;
            p.n_parallel = (int)iv;
            break;
        case 'c':
            if (!cli_parse_int("serve", "--ctx", optarg, 16, 1 << 24, &iv)) return EXIT_USAGE;
            sm.cp.n_ctx = (int32_t)iv;
            break;
        case O_DEPTH:
            if (!cli_parse_int("serve", "--draft-depth", optarg, 0, MTPLX_MAX_DRAFT, &iv)) return EXIT_USAGE;
            sm.gp.draft_depth = (int32_t)iv;
            break;
        case O_NOMTP: sm.gp.draft_depth = 0; break;
        case 't':
            if (!cli_parse_int("serve", "--threads", optarg, 1, 1024, &iv)) return EXIT_USAGE;
            sm.cp.n_threads = (int32_t)iv;
            break;
        case 'b':
            if (!cli_parse_int("serve", "--batch", optarg, 1, 1 << 20, &iv)) return EXIT_USAGE;
            sm.cp.n_batch = (int32_t)iv;
            break;
        case O_MODE: sm.mode = optarg; break;
        case O_KVTYPE:
            if (!cli_parse_kv_type("serve", optarg, &sm.cp.kv_type)) return EXIT_USAGE;
            break;
        case O_DEVICE:
            if (!cli_parse_device("serve", optarg, &sm.cp.device)) return EXIT_USAGE;
            break;
        case O_ADAPT: sm.gp.adaptive_depth = true; break;
        case O_NOADAPT: sm.no_adaptive = true; break;
        case O_TMPL: p.chat_template_path = optarg; break;
        case O_QUEUE:
            if (!cli_parse_int("serve", "--max-queue", optarg, 1, 1 << 20, &iv)) return EXIT_USAGE;
            p.max_queue = (int)iv;
            break;
        case O_EMB: p.embedding_model = optarg; break;
        case O_RR: p.reranker_model = optarg; break;
        case O_ALIAS: p.model_id = optarg; break;
        case 'h': help(); return EXIT_OK;
        default: return cli_usage_error("serve", "unknown option");
        }
    }
    if (optind < argc) return cli_usage_error("serve", "unexpected argument '%s'", argv[optind]);
    if (!sm.cp.device) sm.cp.device = cli_default_device(sm.cp.kv_type);
    cli_mode mode_id;
    if (!cli_mode_parse(sm.mode, &mode_id))
        return cli_usage_error("serve", "--mode expects turbo, sustained, burst or auto, got '%s'", sm.mode);
    char path[4096], emb[4096], rr[4096];
    if (!cli_resolve_model(model_arg, path, sizeof path)) return EXIT_RUNTIME;
    p.model_path = path;
    if (p.embedding_model) {
        if (!cli_resolve_model(p.embedding_model, emb, sizeof emb)) return EXIT_RUNTIME;
        p.embedding_model = emb;
    }
    if (p.reranker_model) {
        if (!cli_resolve_model(p.reranker_model, rr, sizeof rr)) return EXIT_RUNTIME;
        p.reranker_model = rr;
    }
    p.on_listen = on_listen;
    cli_serve_mode_attach(&p, &sm);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    mtplx_status st = mtplx_server_run(&p);
    if (st != MTPLX_OK) {
        cli_error("serve");
        return EXIT_RUNTIME;
    }
    fprintf(stderr, "mtplx serve: stopped\n");
    return EXIT_OK;
}
