/* cmd_start.c: `mtplx start`: interactive chat in the terminal.
 * Chat mode renders the model's own chat template; a base model without one
 * (the built-in model is one) gets a completion mode that says so and
 * continues the user's text. Line editing and history come from libedit. */
#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <editline/readline.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

typedef struct {
    char *buf;
    size_t len, cap;
} strbuf;

static void sb_add(strbuf *s, const char *t, size_t n) {
    if (s->len + n + 1 > s->cap) {
        size_t cap = (s->len + n + 1) * 2;
        char *nb = realloc(s->buf, cap);
        if (!nb) return;
        s->buf = nb;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, t, n);
    s->len += n;
    s->buf[s->len] = 0;
}

static int on_token(const mtplx_token_event *ev, void *user) {
    strbuf *reply = user;
    if (ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
        sb_add(reply, ev->text, ev->text_len);
    }
    return interrupted ? 1 : 0;
}

static void help(void) {
    printf("usage: mtplx start [-m MODEL] [--depth K] [--temp T] [options]\n\n"
           "Interactive chat in the terminal (completion mode for base models).\n\n"
           "  -m, --model PATH   model (default: the built-in model)\n"
           "      --depth K      MTP draft depth 0..8 (default 3 with a head)\n"
           "      --temp T       temperature (default 0.7)\n"
           "  -n, --n-predict N  most tokens per reply (default 256)\n"
           "  -c, --ctx N        context length\n"
           "  -t, --threads N    threads\n"
           "      --web          start the web UI (needs `mtplx serve`)\n"
           "  -h, --help\n\n"
           "In the chat: /help /clear /system TEXT /temp T /depth K /stats /save FILE /quit;\n"
           "end a line with \\ to continue it; Ctrl-C stops a reply.\n");
}

static void print_stats(const mtplx_gen_stats *st, int32_t used, int32_t n_ctx) {
    double s = st->t_decode_ms / 1e3;
    fprintf(stderr, "\x1b[2m[%.1f tok/s", s > 0 ? st->n_gen / s : 0.0);
    if (st->draft_depth > 0) {
        fprintf(stderr, " | accept");
        int64_t acc = 0;
        for (int i = 0; i < st->draft_depth; i++) {
            fprintf(stderr, "%s%.2f", i ? "/" : " ", st->drafted[i] ? (double)st->accepted[i] / st->drafted[i] : 0.0);
            acc += st->accepted[i];
        }
        fprintf(stderr, " | mean accepted %.2f | %.2f tok/forward",
                st->n_forward ? (double)acc / st->n_forward : 0.0, mtplx_gen_stats_tokens_per_forward(st));
    }
    fprintf(stderr, " | ctx %d/%d]\x1b[0m\n", used, n_ctx);
}

int cmd_start(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"depth", required_argument, 0, 'd'},
        {"temp", required_argument, 0, 'T'},  {"n-predict", required_argument, 0, 'n'},
        {"ctx", required_argument, 0, 'c'},   {"threads", required_argument, 0, 't'},
        {"web", no_argument, 0, 'w'},         {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *model_arg = NULL;
    mtplx_gen_params gp = mtplx_gen_default_params();
    gp.sampling.temperature = 0.7f;
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    long iv;
    double fv;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:n:c:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_arg = optarg; break;
        case 'd':
            if (!cli_parse_int("start", "--depth", optarg, 0, MTPLX_MAX_DRAFT, &iv)) return EXIT_USAGE;
            gp.draft_depth = (int32_t)iv;
            break;
        case 'T':
            if (!cli_parse_float("start", "--temp", optarg, 0, 100, &fv)) return EXIT_USAGE;
            gp.sampling.temperature = (float)fv;
            break;
        case 'n':
            if (!cli_parse_int("start", "-n", optarg, 1, 1 << 20, &iv)) return EXIT_USAGE;
            gp.max_tokens = (int32_t)iv;
            break;
        case 'c':
            if (!cli_parse_int("start", "--ctx", optarg, 64, 1 << 24, &iv)) return EXIT_USAGE;
            cp.n_ctx = (int32_t)iv;
            break;
        case 't':
            if (!cli_parse_int("start", "--threads", optarg, 1, 1024, &iv)) return EXIT_USAGE;
            cp.n_threads = (int32_t)iv;
            break;
        case 'w':
            fprintf(stderr, "mtplx start: the web UI is not in this build yet (use the terminal chat)\n");
            return EXIT_RUNTIME;
        case 'h': help(); return EXIT_OK;
        default: return cli_usage_error("start", "unknown option");
        }
    }
    if (optind < argc) return cli_usage_error("start", "unexpected argument '%s'", argv[optind]);
    char path[4096];
    if (!cli_resolve_model(model_arg, path, sizeof path)) return EXIT_RUNTIME;
    fprintf(stderr, "loading %s ...", path);
    fflush(stderr);
    double t0 = cli_now_ms();
    mtplx_model *model = NULL;
    mtplx_ctx *ctx = NULL;
    if (mtplx_model_load(path, NULL, &model) != MTPLX_OK || mtplx_ctx_new(model, &cp, &ctx) != MTPLX_OK) {
        fputc('\n', stderr);
        cli_error("cannot load model");
        mtplx_model_free(model);
        return EXIT_RUNTIME;
    }
    mtplx_model_info info;
    mtplx_model_get_info(model, &info);
    if (gp.draft_depth > 0 && info.n_mtp == 0) {
        fprintf(stderr, "\nmtplx start: --depth needs an MTP head; %s has none\n", path);
        mtplx_ctx_free(ctx);
        mtplx_model_free(model);
        return EXIT_USAGE;
    }
    int depth = gp.draft_depth < 0 ? (info.n_mtp ? 3 : 0) : gp.draft_depth;
    gp.draft_depth = depth;
    const char *tmpl = mtplx_model_chat_template(model);
    bool chat = tmpl != NULL;
    fprintf(stderr, " done in %.0f ms\n%s: %s, %d layers, %s, MTP heads %d, draft depth %d, context %d\n",
            cli_now_ms() - t0, info.name, info.arch, info.n_layer, info.weight_type, info.n_mtp, depth,
            mtplx_ctx_n_ctx(ctx));
    if (!chat)
        fprintf(stderr, "This is a base model without a chat template: it does not chat, it continues "
                        "your text.\nType the beginning of a passage; /help for commands.\n");
    else
        fprintf(stderr, "Chat with the model; /help for commands.\n");
    const mtplx_tokenizer *tok = mtplx_model_tokenizer(model);
    cJSON *messages = cJSON_CreateArray();
    char *system = NULL;
    strbuf history = {0};
    mtplx_gen_stats last = {0};
    int32_t used = 0;
    gp.sampling.seed = (uint64_t)time(NULL);
    using_history();
    for (;;) {
        strbuf in = {0};
        const char *prompt = "> ";
        for (;;) {
            char *line = readline(prompt);
            if (!line) break;
            size_t n = strlen(line);
            bool cont = n && line[n - 1] == '\\';
            sb_add(&in, line, cont ? n - 1 : n);
            free(line);
            if (!cont) break;
            sb_add(&in, "\n", 1);
            prompt = ". ";
        }
        if (!in.buf) {
            fputc('\n', stdout);
            break;
        }
        char *text = in.buf;
        if (!*text) {
            free(text);
            continue;
        }
        add_history(text);
        if (text[0] == '/') {
            if (!strcmp(text, "/quit") || !strcmp(text, "/exit")) {
                free(text);
                break;
            } else if (!strcmp(text, "/help")) {
                printf("/clear  forget the conversation\n/system TEXT  set the system prompt\n"
                       "/temp T  temperature\n/depth K  MTP draft depth (0 = off)\n"
                       "/stats  last reply's statistics\n/save FILE  save the conversation\n/quit\n");
            } else if (!strcmp(text, "/clear")) {
                cJSON_Delete(messages);
                messages = cJSON_CreateArray();
                history.len = 0;
                if (history.buf) history.buf[0] = 0;
                printf("(cleared)\n");
            } else if (!strncmp(text, "/system ", 8)) {
                free(system);
                system = strdup(text + 8);
                printf("(system prompt set)\n");
            } else if (!strncmp(text, "/temp ", 6)) {
                double t = atof(text + 6);
                if (t >= 0 && t <= 100) gp.sampling.temperature = (float)t;
                printf("(temperature %.2f)\n", gp.sampling.temperature);
            } else if (!strncmp(text, "/depth ", 7)) {
                int d = atoi(text + 7);
                if (d >= 0 && d <= MTPLX_MAX_DRAFT && (d == 0 || info.n_mtp)) gp.draft_depth = d;
                printf("(draft depth %d)\n", gp.draft_depth);
            } else if (!strcmp(text, "/stats")) {
                print_stats(&last, used, mtplx_ctx_n_ctx(ctx));
            } else if (!strncmp(text, "/save ", 6)) {
                FILE *f = fopen(text + 6, "w");
                if (!f) printf("(cannot write %s)\n", text + 6);
                else {
                    if (chat) {
                        char *j = cJSON_Print(messages);
                        fputs(j, f);
                        free(j);
                    } else if (history.buf) {
                        fputs(history.buf, f);
                    }
                    fclose(f);
                    printf("(saved to %s)\n", text + 6);
                }
            } else {
                printf("unknown command %s (/help)\n", text);
            }
            free(text);
            continue;
        }
        /* build the full prompt */
        char *full = NULL;
        if (chat) {
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "user");
            cJSON_AddStringToObject(m, "content", text);
            cJSON_AddItemToArray(messages, m);
            cJSON *vars = cJSON_CreateObject();
            cJSON *msgs = cJSON_Duplicate(messages, 1);
            if (system) {
                cJSON *s = cJSON_CreateObject();
                cJSON_AddStringToObject(s, "role", "system");
                cJSON_AddStringToObject(s, "content", system);
                cJSON_InsertItemInArray(msgs, 0, s);
            }
            cJSON_AddItemToObject(vars, "messages", msgs);
            cJSON_AddBoolToObject(vars, "add_generation_prompt", 1);
            const char *bos = mtplx_token_bos(tok) >= 0 ? mtplx_token_piece(tok, mtplx_token_bos(tok)) : "";
            const char *eos = mtplx_token_eos(tok) >= 0 ? mtplx_token_piece(tok, mtplx_token_eos(tok)) : "";
            cJSON_AddStringToObject(vars, "bos_token", bos ? bos : "");
            cJSON_AddStringToObject(vars, "eos_token", eos ? eos : "");
            char *vj = cJSON_PrintUnformatted(vars);
            size_t fl;
            mtplx_status st = mtplx_template_render(tmpl, vj, &full, &fl);
            free(vj);
            cJSON_Delete(vars);
            if (st != MTPLX_OK) {
                cli_error("chat template");
                free(text);
                continue;
            }
        } else {
            sb_add(&history, text, strlen(text));
            full = strdup(history.buf);
            fputs(text, stdout);
        }
        int32_t *ids = NULL;
        size_t n_ids = 0;
        if (mtplx_tokenize(tok, full, strlen(full), !chat, chat, &ids, &n_ids) != MTPLX_OK || n_ids == 0) {
            cli_error("tokenize");
            free(full);
            free(text);
            free(ids);
            continue;
        }
        strbuf reply = {0};
        interrupted = 0;
        struct sigaction sa = {0}, old;
        sa.sa_handler = on_sigint;
        sigaction(SIGINT, &sa, &old);
        mtplx_status st = mtplx_generate(ctx, ids, (int32_t)n_ids, &gp, on_token, &reply, &last);
        sigaction(SIGINT, &old, NULL);
        printf("%s\n", interrupted ? " [stopped]" : "");
        fflush(stdout);
        if (st != MTPLX_OK) cli_error("generation");
        used = mtplx_ctx_n_past(ctx);
        print_stats(&last, used, mtplx_ctx_n_ctx(ctx));
        if (chat) {
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddStringToObject(m, "content", reply.buf ? reply.buf : "");
            cJSON_AddItemToArray(messages, m);
        } else if (reply.buf) {
            sb_add(&history, reply.buf, reply.len);
        }
        free(reply.buf);
        free(ids);
        free(full);
        free(text);
    }
    cJSON_Delete(messages);
    free(system);
    free(history.buf);
    mtplx_ctx_free(ctx);
    mtplx_model_free(model);
    return EXIT_OK;
}
