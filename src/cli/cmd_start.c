/* cmd_start.c: `mtplx start`: interactive chat in the terminal, or with
 * --web the HTTP server and its web UI in this process.
 * Chat mode renders the model's own chat template; a base model without one
 * (the built-in model is one) gets a completion mode that says so and
 * continues the user's text. Line editing and history come from libedit.
 * While a reply streams, the bottom terminal row (outside a scroll region)
 * shows live tok/s, acceptance per draft position, mean accepted length and
 * context used; tokens the MTP head drafted and the verifier accepted are
 * green. Generation runs step by step (mtplx_gen_step) so the status line
 * reads the engine's exact running statistics and Ctrl-C is seen between
 * steps. No model logic lives here. */
#include "cli/cli.h"
#include "cli/tuning.h"

#include <cjson/cJSON.h>
#include <editline/readline.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

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

/* ---- terminal: colours and the live status line ---- */

typedef struct {
    bool tty, color;
    int rows; /* > 0 while the status row is reserved */
    double last_draw;
} term;

#define DIM "\x1b[2m"
#define GREEN "\x1b[32m"
#define BOLD "\x1b[1m"
#define RESET "\x1b[0m"

/* Reserve the bottom row: scroll region = rows 1..R-1 (as apt's progress bar
 * does). The caller's cursor is at column 0, so the newline + cursor-up that
 * make room on a full screen do not move the text. */
static void status_open(term *t) {
    struct winsize ws;
    if (!t->tty || ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_row < 4) return;
    t->rows = ws.ws_row;
    printf("\n\x1b" "7\x1b[1;%dr\x1b" "8\x1b[1A", t->rows - 1);
    fflush(stdout);
    t->last_draw = 0;
}

static void status_close(term *t) {
    if (!t->rows) return;
    printf("\x1b" "7\x1b[1;%dr\x1b[%d;1H\x1b[2K\x1b" "8", t->rows, t->rows);
    fflush(stdout);
    t->rows = 0;
}

/* One line of statistics: "212.4 tok/s | accept 0.86/0.75/0.78 | ..." */
static void format_stats(char *out, size_t cap, const mtplx_gen_stats *st, int32_t used, int32_t n_ctx) {
    double s = st->t_decode_ms / 1e3;
    /* before the first decode forward the rate means nothing yet */
    size_t n = st->n_forward || st->n_gen > 1 ? (size_t)snprintf(out, cap, "%.1f tok/s", s > 0 ? st->n_gen / s : 0.0)
                                                : (size_t)snprintf(out, cap, "-- tok/s");
    if (st->draft_depth > 0 && n < cap) {
        n += (size_t)snprintf(out + n, cap - n, " | accept");
        int64_t acc = 0;
        for (int i = 0; i < st->draft_depth && i < MTPLX_MAX_DRAFT && n < cap; i++) {
            n += (size_t)snprintf(out + n, cap - n, "%s%.2f", i ? "/" : " ",
                                  st->drafted[i] ? (double)st->accepted[i] / st->drafted[i] : 0.0);
            acc += st->accepted[i];
        }
        if (n < cap)
            n += (size_t)snprintf(out + n, cap - n, " | mean accepted %.2f | %.2f tok/forward",
                                  st->n_forward ? (double)acc / st->n_forward : 0.0,
                                  mtplx_gen_stats_tokens_per_forward(st));
    } else if (n < cap) {
        n += (size_t)snprintf(out + n, cap - n, " | MTP off");
    }
    if (n < cap) snprintf(out + n, cap - n, " | ctx %d/%d", used, n_ctx);
}

static void status_draw(term *t, const mtplx_gen_stats *st, int32_t used, int32_t n_ctx, bool force) {
    if (!t->rows) return;
    double now = cli_now_ms();
    if (!force && now - t->last_draw < 100) return;
    t->last_draw = now;
    char line[512];
    format_stats(line, sizeof line, st, used, n_ctx);
    printf("\x1b" "7\x1b[%d;1H\x1b[2K" "%s%s%s\x1b" "8", t->rows, t->color ? DIM : "", line, t->color ? RESET : "");
    fflush(stdout);
}

/* ---- one reply ---- */

typedef struct {
    strbuf *reply;
    term *t;
    int last_src; /* -1 before the first token */
} reply_state;

static int on_token(const mtplx_token_event *ev, void *user) {
    reply_state *rs = user;
    if (ev->text_len) {
        if (rs->t->color) {
            int src = ev->source == MTPLX_SRC_DRAFTED;
            if (src != rs->last_src) fputs(src ? GREEN : RESET, stdout);
            rs->last_src = src;
        }
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
        sb_add(rs->reply, ev->text, ev->text_len);
    }
    return interrupted ? 1 : 0;
}

static void help(void) {
    printf("usage: mtplx start [-m MODEL] [--depth K] [--temp T] [options]\n\n"
           "Interactive chat in the terminal (completion mode for base models), or with\n"
           "--web the HTTP server and its web UI.\n\n"
           "  -m, --model PATH   model (default: the built-in model)\n"
           "      --depth K      MTP draft depth 0..8 (default 3 with a head)\n"
           "      --temp T       temperature (default 0.7)\n"
           "  -n, --n-predict N  most tokens per reply (default 256)\n"
           "  -c, --ctx N        context length\n"
           "  -t, --threads N    threads\n"
           "      --mode M       turbo | sustained | burst | auto (default auto: turbo, or\n"
           "                     sustained when --ctx > 8192); the settings it implies are\n"
           "                     printed at start-up; flags override them\n"
           "  -b, --batch N      prefill chunk, tokens per forward (default: mode's)\n"
           "      --kv-type T    KV cache f16, f32 or q8_0 (default: the mode's; q8_0 in\n"
           "                     sustained mode; q8_0 is CPU-only)\n"
           "      --adaptive     adapt the draft depth to the running acceptance\n"
           "      --no-adaptive  fixed draft depth (overrides the sustained mode)\n"
           "      --device D     auto (default: the first GPU when there is one and the\n"
           "                     model fits, else the CPU), cpu or cuda\n"
           "      --no-color     plain output (also NO_COLOR=1)\n"
           "      --web          serve the web UI (and the OpenAI-compatible API) instead\n"
           "      --port N       port for --web (default 8000; 0 = any free port)\n"
           "      --host ADDR    address for --web (default 127.0.0.1)\n"
           "  -h, --help\n\n"
           "In the chat: /help /clear /system TEXT /temp T /depth K /max N /stats /save FILE /quit;\n"
           "end a line with \\ to continue it; Ctrl-C stops a reply.\n");
}

static void chat_help(bool chat) {
    printf("/clear        forget the conversation\n"
           "/system TEXT  set the system prompt%s\n"
           "/temp T       temperature (0 = greedy: exactly the text plain decoding gives)\n"
           "/depth K      MTP draft depth (0 = plain autoregressive decoding)\n"
           "/max N        most tokens per reply\n"
           "/stats        the last reply's statistics\n"
           "/color        colour drafted tokens on / off\n"
           "/save FILE    save the conversation\n"
           "/quit         leave (also Ctrl-D)\n"
           "A line ending in \\ continues on the next line. Ctrl-C stops a reply.\n",
           chat ? "" : " (chat models only)");
}

static void print_stats_detail(const mtplx_gen_stats *st, int32_t used, int32_t n_ctx) {
    if (!st->n_gen) {
        printf("(no reply yet)\n");
        return;
    }
    char line[512];
    format_stats(line, sizeof line, st, used, n_ctx);
    printf("%s\n", line);
    printf("prompt %d tokens (%d cached), prefill %.0f ms | %d tokens in %.0f ms, %d forwards\n", st->n_prompt,
           st->n_cached, st->t_prefill_ms, st->n_gen, st->t_decode_ms, st->n_forward);
    if (st->draft_depth > 0) {
        printf("draft depth %d; acceptance per draft position:\n", st->draft_depth);
        for (int i = 0; i < st->draft_depth && i < MTPLX_MAX_DRAFT; i++) {
            double a = st->drafted[i] ? (double)st->accepted[i] / st->drafted[i] : 0.0;
            char bar[21];
            int w = (int)(a * 20 + 0.5);
            for (int j = 0; j < 20; j++) bar[j] = j < w ? '#' : '.';
            bar[20] = 0;
            printf("  position %d: %s %5.1f%% (%lld of %lld)\n", i + 1, bar, 100 * a, (long long)st->accepted[i],
                   (long long)st->drafted[i]);
        }
        double tot = st->t_draft_ms + st->t_verify_ms;
        if (tot > 0)
            printf("time: draft %.0f%%, verify %.0f%%\n", 100 * st->t_draft_ms / tot, 100 * st->t_verify_ms / tot);
    }
}

/* ---- --web ---- */

static void web_stop(int sig) {
    (void)sig;
    mtplx_server_stop();
}

static void web_listening(const char *url, int port, void *user) {
    (void)port;
    (void)user;
    printf("\nmtplx web UI: %s/\n(the OpenAI-compatible API is at %s/v1; Ctrl-C stops the server)\n", url, url);
    fflush(stdout);
}

/* sm holds the flags; the server resolves the mode once it has loaded the
 * model (cli_serve_mode_attach) and prints the plan. */
static int run_web(const char *path, const char *host, int port, cli_serve_mode *sm) {
    mtplx_server_params sp = mtplx_server_default_params();
    sp.model_path = path;
    sp.host = host;
    sp.port = port;
    sp.on_listen = web_listening;
    cli_serve_mode_attach(&sp, sm);
    fprintf(stderr, "loading %s ...\n", path);
    fflush(stderr);
    struct sigaction sa = {0};
    sa.sa_handler = web_stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    mtplx_status st = mtplx_server_run(&sp);
    if (st != MTPLX_OK) {
        fputc('\n', stderr);
        cli_error("web UI");
        return EXIT_RUNTIME;
    }
    return EXIT_OK;
}

/* ---- the chat ---- */

/* Render the conversation (plus the system prompt) with the chat template.
 * Returns the prompt text (caller frees) or NULL. */
static char *render_chat(const char *tmpl, const cJSON *messages, const char *system, const mtplx_tokenizer *tok) {
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
    char *full = NULL;
    size_t fl;
    mtplx_status st = mtplx_template_render(tmpl, vj, &full, &fl);
    free(vj);
    cJSON_Delete(vars);
    return st == MTPLX_OK ? full : NULL;
}

/* The prompt's key reader, in place of libedit's read(). SIGINT stays
 * blocked while libedit works and is let through only inside ppoll(), so a
 * Ctrl-C that lands anywhere (before the read, between keys, or while the
 * terminal is still in cooked mode) is never lost: the handler sets the flag,
 * ppoll fails with EINTR, and returning -1 makes readline() give up the line
 * (libedit treats it as end of input, whatever was typed). UTF-8 is decoded
 * here because libedit takes the result as one wide character.
 * On a terminal the bytes come through a second, non-blocking descriptor of
 * the same tty: the Ctrl-C that ends a poll may also flush the typed input,
 * and a blocking read would then sleep with SIGINT held back. */
static sigset_t prompt_wait_mask;
static int prompt_fd = -1;

static int prompt_byte(int fd) {
    for (;;) {
        if (interrupted) return -1;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = ppoll(&pf, 1, NULL, &prompt_wait_mask);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        unsigned char c;
        ssize_t n = read(fd, &c, 1);
        if (n == 1) return c;
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        return -1; /* end of input */
    }
}

static int prompt_getc(FILE *f) {
    int fd = prompt_fd >= 0 ? prompt_fd : fileno(f); /* prompt_fd: stdin is a tty */
    int c = prompt_byte(fd);
    if (c < 0x80) return c; /* ASCII or -1 */
    int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    int cp = extra == 3 ? c & 0x07 : extra == 2 ? c & 0x0F : c & 0x1F;
    if (!extra) return 0xFFFD; /* a stray continuation byte */
    for (int i = 0; i < extra; i++) {
        int b = prompt_byte(fd);
        if (b < 0) return -1;
        if ((b & 0xC0) != 0x80) return 0xFFFD;
        cp = (cp << 6) | (b & 0x3F);
    }
    return cp;
}

/* Read one input, joining lines that end in a backslash. NULL on end of
 * input. Ctrl-C at the prompt drops the line being typed (like a shell)
 * instead of killing the program; the flag tells it apart from Ctrl-D. */
static char *read_input(void) {
    strbuf in = {0};
    const char *prompt = "> ";
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_sigint; /* no SA_RESTART */
    sigset_t intr, saved;
    sigemptyset(&intr);
    sigaddset(&intr, SIGINT);
    for (;;) {
        interrupted = 0;
        sigprocmask(SIG_BLOCK, &intr, &saved);
        prompt_wait_mask = saved;
        sigdelset(&prompt_wait_mask, SIGINT);
        sigaction(SIGINT, &sa, &old);
        char *line = readline(prompt);
        sigprocmask(SIG_SETMASK, &saved, NULL); /* a late Ctrl-C lands here, harmlessly */
        sigaction(SIGINT, &old, NULL);
        if (!line && interrupted) {
            printf("^C\n");
            free(in.buf);
            in = (strbuf){0};
            prompt = "> ";
            continue;
        }
        if (!line) break;
        size_t n = strlen(line);
        bool cont = n && line[n - 1] == '\\';
        sb_add(&in, line, cont ? n - 1 : n);
        if (!in.buf) sb_add(&in, "", 0);
        free(line);
        if (!cont) break;
        sb_add(&in, "\n", 1);
        prompt = ". ";
    }
    return in.buf;
}

int cmd_start(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"depth", required_argument, 0, 'd'},
        {"temp", required_argument, 0, 'T'},  {"n-predict", required_argument, 0, 'n'},
        {"ctx", required_argument, 0, 'c'},   {"threads", required_argument, 0, 't'},
        {"web", no_argument, 0, 'w'},         {"port", required_argument, 0, 'p'},
        {"host", required_argument, 0, 'H'},  {"no-color", no_argument, 0, 'C'},
        {"mode", required_argument, 0, 'M'},  {"batch", required_argument, 0, 'b'},
        {"kv-type", required_argument, 0, 'K'}, {"device", required_argument, 0, 'D'},
        {"adaptive", no_argument, 0, 'A'},    {"no-adaptive", no_argument, 0, 'N'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    const char *model_arg = NULL, *host = "127.0.0.1";
    mtplx_gen_params gp = mtplx_gen_default_params();
    gp.sampling.temperature = 0.7f;
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.kv_type = CLI_KV_AUTO;
    const char *mode = NULL;
    bool no_adaptive = false;
    bool web = false, no_color = getenv("NO_COLOR") && *getenv("NO_COLOR");
    int port = 8000;
    long iv;
    double fv;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:n:c:t:b:h", opts, NULL)) != -1) {
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
        case 'w': web = true; break;
        case 'p':
            if (!cli_parse_int("start", "--port", optarg, 0, 65535, &iv)) return EXIT_USAGE;
            port = (int)iv;
            break;
        case 'H': host = optarg; break;
        case 'C': no_color = true; break;
        case 'M': mode = optarg; break;
        case 'b':
            if (!cli_parse_int("start", "--batch", optarg, 1, 1 << 20, &iv)) return EXIT_USAGE;
            cp.n_batch = (int32_t)iv;
            break;
        case 'K':
            if (!cli_parse_kv_type("start", optarg, &cp.kv_type)) return EXIT_USAGE;
            break;
        case 'D':
            if (!cli_parse_device("start", optarg, &cp.device)) return EXIT_USAGE;
            break;
        case 'A': gp.adaptive_depth = true; break;
        case 'N': no_adaptive = true; break;
        case 'h': help(); return EXIT_OK;
        default: return cli_usage_error("start", "unknown option");
        }
    }
    if (optind < argc) return cli_usage_error("start", "unexpected argument '%s'", argv[optind]);
    cli_mode mode_id;
    if (!cli_mode_parse(mode, &mode_id))
        return cli_usage_error("start", "--mode expects turbo, sustained, burst or auto, got '%s'", mode);
    char path[4096];
    /* no --device: cli_default_device, and the CPU after all when the model
     * does not fit the GPU (the context below) */
    bool device_auto = cp.device == NULL;
    if (device_auto) cp.device = cli_default_device(cp.kv_type);
    if (!cli_resolve_model(model_arg, path, sizeof path)) return EXIT_RUNTIME;
    if (web) {
        static cli_serve_mode sm; /* outlives the server */
        cli_serve_mode_init(&sm);
        sm.mode = mode;
        sm.no_adaptive = no_adaptive;
        sm.gp = gp;
        sm.cp = cp;
        return run_web(path, host, port, &sm);
    }

    term t = {.tty = isatty(STDOUT_FILENO) != 0};
    t.color = t.tty && !no_color;
    fprintf(stderr, "loading %s ...", path);
    fflush(stderr);
    double t0 = cli_now_ms();
    mtplx_model *model = NULL;
    mtplx_ctx *ctx = NULL;
    if (mtplx_model_load(path, NULL, &model) != MTPLX_OK) {
        fputc('\n', stderr);
        cli_error("cannot load model");
        return EXIT_RUNTIME;
    }
    mtplx_model_info info;
    mtplx_model_get_info(model, &info);
    if (gp.draft_depth > 0 && info.n_mtp == 0) {
        fprintf(stderr, "\nmtplx start: --depth needs an MTP head; %s has none\n", path);
        mtplx_model_free(model);
        return EXIT_USAGE;
    }
    /* the mode: a chat's length is unknown, so auto is turbo (or sustained
     * for --ctx > 8192); printed below, once the load line is complete */
    cli_mode_plan plan;
    cli_apply_mode(model, path, mode, 0, &gp, &cp, NULL, &plan);
    if (no_adaptive) gp.adaptive_depth = plan.adaptive = false;
    mtplx_status cs = mtplx_ctx_new(model, &cp, &ctx);
    if (cs != MTPLX_OK && device_auto && !strcmp(cp.device, "cuda")) {
        /* chosen, not asked for: say why the GPU was not used, then run on the CPU */
        fprintf(stderr, "\nmtplx start: not on the GPU (%s); using the CPU\n", mtplx_last_error());
        cp.device = plan.device = "cpu";
        cs = mtplx_ctx_new(model, &cp, &ctx);
    }
    if (cs != MTPLX_OK) {
        fputc('\n', stderr);
        cli_mode_print(&plan, stderr);
        cli_error("cannot create a context");
        mtplx_model_free(model);
        return EXIT_RUNTIME;
    }
    int depth = gp.draft_depth;
    const char *tmpl = mtplx_model_chat_template(model);
    bool chat = tmpl != NULL;
    fprintf(stderr, " done in %.0f ms\n%s: %s, %d layers, %s, MTP heads %d, draft depth %d, context %d\n",
            cli_now_ms() - t0, info.name, info.arch, info.n_layer, info.weight_type, info.n_mtp, depth,
            mtplx_ctx_n_ctx(ctx));
    cli_mode_print(&plan, stderr);
    if (!chat)
        fprintf(stderr, "This is a base model without a chat template: it does not chat, it continues "
                        "your text.\nType the beginning of a passage; /help for commands.\n");
    else
        fprintf(stderr, "Chat with the model; /help for commands.\n");
    if (t.color && depth > 0)
        fprintf(stderr, GREEN "green" RESET " = drafted by the MTP head and accepted (no forward pass of its own); "
                        "plain = sampled by the verifier.\n");
    const mtplx_tokenizer *tok = mtplx_model_tokenizer(model);
    cJSON *messages = cJSON_CreateArray();
    char *system = NULL;
    strbuf history = {0};
    mtplx_gen_stats last = {0};
    int32_t used = 0;
    gp.sampling.seed = (uint64_t)time(NULL);
    /* libedit edits wide characters: give it a UTF-8 character type (only
     * LC_CTYPE, so numbers keep printing with a '.') */
    const char *ct = setlocale(LC_CTYPE, "");
    if (!ct || (!strstr(ct, "UTF-8") && !strstr(ct, "utf8"))) setlocale(LC_CTYPE, "C.UTF-8");
    if (isatty(STDIN_FILENO) && ttyname(STDIN_FILENO))
        prompt_fd = open(ttyname(STDIN_FILENO), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    rl_getc_function = prompt_getc; /* before libedit initialises */
    using_history();
    for (;;) {
        char *text = read_input();
        if (!text) {
            fputc('\n', stdout);
            break;
        }
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
                chat_help(chat);
            } else if (!strcmp(text, "/clear")) {
                cJSON_Delete(messages);
                messages = cJSON_CreateArray();
                history.len = 0;
                if (history.buf) history.buf[0] = 0;
                printf("(cleared)\n");
            } else if (!strncmp(text, "/system ", 8)) {
                free(system);
                system = strdup(text + 8);
                printf(chat ? "(system prompt set)\n" : "(system prompt set; a base model in completion mode does not use it)\n");
            } else if (!strncmp(text, "/temp ", 6)) {
                char *end;
                double v = strtod(text + 6, &end);
                if (end != text + 6 && v >= 0 && v <= 100) gp.sampling.temperature = (float)v;
                else printf("(expected a temperature from 0 to 100)\n");
                printf("(temperature %.2f)\n", gp.sampling.temperature);
            } else if (!strncmp(text, "/depth ", 7)) {
                char *end;
                long d = strtol(text + 7, &end, 10);
                if (end == text + 7 || d < 0 || d > MTPLX_MAX_DRAFT) printf("(expected a depth from 0 to %d)\n", MTPLX_MAX_DRAFT);
                else if (d > 0 && !info.n_mtp) printf("(this model has no MTP head: depth stays 0)\n");
                else {
                    gp.draft_depth = (int32_t)d;
                    plan.depth = gp.draft_depth; /* asked: the mode's context rule no longer applies */
                    plan.set_depth = true;
                }
                printf("(draft depth %d)\n", gp.draft_depth);
            } else if (!strncmp(text, "/max ", 5)) {
                char *end;
                long v = strtol(text + 5, &end, 10);
                if (end == text + 5 || v < 1 || v > (1L << 20)) printf("(expected a number of tokens from 1 to %ld)\n", 1L << 20);
                else gp.max_tokens = (int32_t)v;
                printf("(at most %d tokens per reply)\n", gp.max_tokens);
            } else if (!strcmp(text, "/stats")) {
                print_stats_detail(&last, used, mtplx_ctx_n_ctx(ctx));
            } else if (!strcmp(text, "/color")) {
                t.color = t.tty && !t.color;
                printf("(colour %s)\n", t.color ? "on" : "off");
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
            full = render_chat(tmpl, messages, system, tok);
            if (!full) {
                cli_error("chat template");
                cJSON_DeleteItemFromArray(messages, cJSON_GetArraySize(messages) - 1);
                free(text);
                continue;
            }
        } else {
            sb_add(&history, text, strlen(text));
            full = strdup(history.buf);
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
        reply_state rs = {.reply = &reply, .t = &t, .last_src = -1};
        interrupted = 0;
        struct sigaction sa = {0}, old;
        sa.sa_handler = on_sigint;
        sigaction(SIGINT, &sa, &old);
        status_open(&t);
        /* completion mode: the reply continues the user's own line */
        if (!chat) printf("%s%s%s", t.color ? BOLD : "", text, t.color ? RESET : "");
        fflush(stdout);
        mtplx_gen *g = NULL;
        /* sustained mode: shallower drafts once the conversation is long */
        gp.draft_depth = cli_mode_depth_at(&plan, (int32_t)n_ids + gp.max_tokens);
        mtplx_status st = mtplx_gen_start(ctx, ids, (int32_t)n_ids, &gp, &g);
        bool done = st != MTPLX_OK;
        while (!done && !interrupted) {
            st = mtplx_gen_step(g, on_token, &rs, &done);
            if (st != MTPLX_OK) break;
            status_draw(&t, mtplx_gen_get_stats(g), mtplx_ctx_n_past(ctx), mtplx_ctx_n_ctx(ctx), false);
        }
        if (g) last = *mtplx_gen_get_stats(g);
        mtplx_gen_free(g);
        if (t.color && rs.last_src > 0) fputs(RESET, stdout);
        status_close(&t);
        sigaction(SIGINT, &old, NULL);
        printf("%s\n", interrupted ? (t.color ? DIM " [stopped]" RESET : " [stopped]") : "");
        fflush(stdout);
        if (st != MTPLX_OK) cli_error("generation");
        used = mtplx_ctx_n_past(ctx);
        char line[512];
        format_stats(line, sizeof line, &last, used, mtplx_ctx_n_ctx(ctx));
        fprintf(stderr, "%s[%s]%s\n", t.color ? DIM : "", line, t.color ? RESET : "");
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
    if (prompt_fd >= 0) close(prompt_fd);
    prompt_fd = -1;
    mtplx_ctx_free(ctx);
    mtplx_model_free(model);
    return EXIT_OK;
}
