/* test_server.c: `mtplx serve` end to end over raw HTTP on loopback: the
 * server runs as a child on a free port (--port 0) with the default model.
 * Greedy answers are compared with `mtplx run --temp 0`, streamed text with
 * non-streamed text, concurrent streams with the same requests run one at a
 * time; every error status is checked with the field it names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct server { pid_t pid; int port; } server;
static server S, S2;

static const char *TMPL_PATH = "/tmp/mtplx_test_server_hermes.jinja";
static const char *HERMES =
    "{%- if tools %}<|im_start|>system\nYou may call functions. Tools: {{ tools | tojson }}\n"
    "Reply with <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>.<|im_end|>\n{%- endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}";

static bool start(server *sv, const char *extra) {
    int fd[2];
    if (pipe(fd)) return false;
    sv->pid = fork();
    if (sv->pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "exec %s serve --port 0 -t 1 %s", MTPLX_BIN, extra);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char buf[512];
    size_t n = 0;
    sv->port = 0;
    for (int i = 0; i < 600 && !sv->port; i++) { /* at most 60 s */
        struct pollfd p = {.fd = fd[0], .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t r = read(fd[0], buf + n, sizeof buf - 1 - n);
        if (r <= 0) break;
        n += (size_t)r;
        buf[n] = 0;
        const char *u = strstr(buf, "127.0.0.1:");
        if (u && strchr(u, ' ')) sv->port = atoi(u + 10);
    }
    close(fd[0]);
    return sv->port > 0;
}

static void stop(server *sv) {
    if (sv->pid <= 0) return;
    kill(sv->pid, SIGTERM);
    int st;
    waitpid(sv->pid, &st, 0);
    sv->pid = 0;
}

static int connect_to(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(s, (struct sockaddr *)&a, sizeof a), 0);
    struct timeval tv = {.tv_sec = 120};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return s;
}

static void send_req(int s, const char *method, const char *path, const char *hdrs, const char *body, size_t blen) {
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n%sContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n", method, path, hdrs ? hdrs : "", blen);
    assert_int_equal(send(s, head, (size_t)n, MSG_NOSIGNAL), n);
    size_t off = 0;
    while (off < blen) {
        ssize_t w = send(s, body + off, blen - off, MSG_NOSIGNAL);
        if (w <= 0) break; /* the server may answer 413 and close early */
        off += (size_t)w;
    }
}

/* Read the whole response; returns the status, *body (caller frees) de-chunked. */
static int read_resp(int s, char **body) {
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    ssize_t r;
    while ((r = recv(s, b + n, cap - n - 1, 0)) > 0) {
        n += (size_t)r;
        if (n + 1 >= cap) b = realloc(b, cap *= 2);
    }
    b[n] = 0;
    close(s);
    int status = 0;
    sscanf(b, "HTTP/1.%*d %d", &status);
    char *hend = strstr(b, "\r\n\r\n");
    char *out = strdup(hend ? hend + 4 : "");
    if (hend && strcasestr(b, "transfer-encoding: chunked") && strcasestr(b, "transfer-encoding: chunked") < hend) {
        char *p = hend + 4, *o = out;
        for (;;) {
            long len = strtol(p, &p, 16);
            if (len <= 0) break;
            p = strstr(p, "\r\n");
            if (!p) break;
            p += 2;
            memcpy(o, p, (size_t)len);
            o += len;
            p += len + 2;
        }
        *o = 0;
    }
    free(b);
    *body = out;
    return status;
}

static int http(int port, const char *method, const char *path, const char *hdrs, const char *body, char **resp) {
    int s = connect_to(port);
    send_req(s, method, path, hdrs, body ? body : "", body ? strlen(body) : 0);
    return read_resp(s, resp);
}

/* Content of a non-stream answer (chat: message.content; completions: text). */
static char *answer_text(const char *resp, char *finish) {
    cJSON *o = cJSON_Parse(resp);
    assert_non_null(o);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    assert_non_null(c);
    cJSON *t = cJSON_GetObjectItem(c, "text");
    if (!t) t = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content");
    assert_true(cJSON_IsString(t));
    if (finish) snprintf(finish, 16, "%s", cJSON_GetObjectItem(c, "finish_reason")->valuestring);
    char *r = strdup(t->valuestring);
    cJSON_Delete(o);
    return r;
}

/* Concatenated text of an SSE body; checks [DONE] and the final chunk. */
static char *stream_text(const char *body, char *finish) {
    size_t cap = strlen(body) + 1;
    char *out = calloc(1, cap);
    bool done = false;
    for (const char *p = body; (p = strstr(p, "data: ")); p += 6) {
        if (!strncmp(p + 6, "[DONE]", 6)) {
            done = true;
            break;
        }
        const char *e = strstr(p, "\n\n");
        assert_non_null(e);
        cJSON *o = cJSON_ParseWithLength(p + 6, (size_t)(e - p - 6));
        assert_non_null(o);
        cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
        if (c) {
            cJSON *t = cJSON_GetObjectItem(c, "text");
            if (!t) t = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "delta"), "content");
            if (cJSON_IsString(t)) strcat(out, t->valuestring);
            cJSON *f = cJSON_GetObjectItem(c, "finish_reason");
            if (cJSON_IsString(f)) {
                if (finish) snprintf(finish, 16, "%s", f->valuestring);
                assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "mtplx"), "acceptance"));
            }
        }
        cJSON_Delete(o);
    }
    assert_true(done);
    return out;
}

static void expect_error(int port, const char *method, const char *path, const char *body, int status,
                         const char *param, const char *msg_part) {
    char *r;
    int st = http(port, method, path, NULL, body, &r);
    if (st != status) fprintf(stderr, "%s %s %s -> %d %s\n", method, path, body ? body : "", st, r);
    assert_int_equal(st, status);
    cJSON *o = cJSON_Parse(r);
    assert_non_null(o);
    cJSON *e = cJSON_GetObjectItem(o, "error");
    assert_non_null(e);
    assert_true(cJSON_IsString(cJSON_GetObjectItem(e, "message")));
    assert_true(cJSON_IsString(cJSON_GetObjectItem(e, "type")));
    if (param) assert_string_equal(cJSON_GetObjectItem(e, "param")->valuestring, param);
    if (msg_part) assert_non_null(strstr(cJSON_GetObjectItem(e, "message")->valuestring, msg_part));
    cJSON_Delete(o);
    free(r);
}

static char xdg[] = "/tmp/mtplx_test_server_xdg.XXXXXX";

static int setup(void **st) {
    /* an empty tuning store: the servers' depths are the untuned defaults
     * whatever `mtplx tune` stored for this user */
    if (!mkdtemp(xdg)) return -1;
    setenv("XDG_CONFIG_HOME", xdg, 1);
    FILE *f = fopen(TMPL_PATH, "w");
    if (!f) return -1;
    fputs(HERMES, f);
    fclose(f);
    return start(&S, "--parallel 2") ? 0 : -1;
}

static int teardown(void **st) {
    stop(&S);
    stop(&S2);
    rmdir(xdg); /* the servers only read the store: it stays empty */
    return 0;
}

static void health_models(void **st) {
    char *r;
    assert_int_equal(http(S.port, "GET", "/health", NULL, NULL, &r), 200);
    assert_non_null(strstr(r, "\"ok\""));
    free(r);
    assert_int_equal(http(S.port, "GET", "/v1/models", NULL, NULL, &r), 200);
    assert_non_null(strstr(r, "\"id\":\"default\""));
    free(r);
    assert_int_equal(http(S.port, "GET", "/", NULL, NULL, &r), 200);
    free(r);
}

static char *run_cli(const char *prompt, int n) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s run --temp 0 -t 1 -n %d -f /tmp/mtplx_test_server_prompt.txt 2>/dev/null", MTPLX_BIN, n);
    FILE *f = fopen("/tmp/mtplx_test_server_prompt.txt", "w");
    fputs(prompt, f);
    fclose(f);
    FILE *p = popen(cmd, "r");
    static char out[1 << 16];
    size_t k = fread(out, 1, sizeof out - 1, p);
    out[k] = 0;
    pclose(p);
    if (k && out[k - 1] == '\n') out[k - 1] = 0; /* run ends with a newline */
    return strdup(out);
}

static void completions_match_run(void **st) {
    const char *prompt = "It was a dark and stormy night";
    char *r, fin[16];
    assert_int_equal(http(S.port, "POST", "/v1/completions", NULL,
                          "{\"prompt\":\"It was a dark and stormy night\",\"max_tokens\":24,\"temperature\":0}", &r), 200);
    char *a = answer_text(r, fin);
    free(r);
    char *ref = run_cli(prompt, 24);
    assert_string_equal(a, ref);
    assert_string_equal(fin, "length");
    /* streamed, with echo */
    assert_int_equal(http(S.port, "POST", "/v1/completions", NULL,
                          "{\"prompt\":\"It was a dark and stormy night\",\"max_tokens\":24,\"temperature\":0,"
                          "\"stream\":true,\"echo\":true}", &r), 200);
    char *b = stream_text(r, fin);
    assert_int_equal(strncmp(b, prompt, strlen(prompt)), 0);
    assert_string_equal(b + strlen(prompt), ref);
    free(r);
    free(a);
    free(b);
    free(ref);
}

static const char *CHAT = "{\"messages\":[{\"role\":\"system\",\"content\":\"You tell stories.\"},"
                          "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Once upon a time\"}]}],"
                          "\"max_tokens\":40,\"temperature\":0%s}";

static void chat_stream_equals_nonstream(void **st) {
    char body[1024], *r, fin[16], fin2[16];
    snprintf(body, sizeof body, CHAT, "");
    assert_int_equal(http(S.port, "POST", "/v1/chat/completions", NULL, body, &r), 200);
    assert_non_null(strstr(r, "\"usage\""));
    assert_non_null(strstr(r, "\"mtp\""));
    char *a = answer_text(r, fin);
    free(r);
    snprintf(body, sizeof body, CHAT, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    assert_int_equal(http(S.port, "POST", "/v1/chat/completions", NULL, body, &r), 200);
    assert_non_null(strstr(r, "\"prompt_tokens\""));
    assert_non_null(strstr(r, "\"source\""));
    char *b = stream_text(r, fin2);
    free(r);
    assert_string_equal(a, b);
    assert_string_equal(fin, fin2);
    /* the ChatML fallback rendering, run through `mtplx run`: the same text up to <|im_end|> */
    char *ref = run_cli("<|im_start|>system\nYou tell stories.<|im_end|>\n<|im_start|>user\nOnce upon a time"
                        "<|im_end|>\n<|im_start|>assistant\n", 40);
    char *cut = strstr(ref, "<|im_end|>");
    if (cut) *cut = 0;
    assert_string_equal(a, ref);
    free(a);
    free(b);
    free(ref);
}

static void stop_across_tokens(void **st) {
    char *r;
    assert_int_equal(http(S.port, "POST", "/v1/completions", NULL,
                          "{\"prompt\":\"The king said\",\"max_tokens\":40,\"temperature\":0,\"logprobs\":0}", &r), 200);
    cJSON *o = cJSON_Parse(r);
    free(r);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    const char *full = cJSON_GetObjectItem(c, "text")->valuestring;
    cJSON *toks = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "logprobs"), "tokens");
    assert_true(cJSON_GetArraySize(toks) >= 4);
    /* a stop string made of the end of one token and the start of the next */
    char stopstr[64] = "";
    size_t off = 0;
    for (int i = 0; i + 1 < cJSON_GetArraySize(toks); i++) {
        const char *t0 = cJSON_GetArrayItem(toks, i)->valuestring, *t1 = cJSON_GetArrayItem(toks, i + 1)->valuestring;
        size_t l0 = strlen(t0), l1 = strlen(t1);
        if (i > 0 && l0 >= 2 && l1 >= 2) {
            snprintf(stopstr, sizeof stopstr, "%.2s%.2s", t0 + l0 - 2, t1);
            break;
        }
        off += l0;
    }
    assert_true(stopstr[0]);
    const char *at = strstr(full, stopstr);
    assert_non_null(at);
    size_t keep = (size_t)(at - full);
    char body[512], *esc;
    cJSON *sj = cJSON_CreateString(stopstr);
    esc = cJSON_PrintUnformatted(sj);
    cJSON_Delete(sj);
    for (int stream = 0; stream < 2; stream++) {
        snprintf(body, sizeof body, "{\"prompt\":\"The king said\",\"max_tokens\":40,\"temperature\":0,"
                                    "\"stop\":[\"@@never@@\",%s],\"stream\":%s}", esc, stream ? "true" : "false");
        assert_int_equal(http(S.port, "POST", "/v1/completions", NULL, body, &r), 200);
        char fin[16];
        char *t = stream ? stream_text(r, fin) : answer_text(r, fin);
        assert_int_equal(strlen(t), keep);
        assert_int_equal(strncmp(t, full, keep), 0);
        assert_null(strstr(t, stopstr));
        assert_string_equal(fin, "stop");
        free(t);
        free(r);
    }
    free(esc);
    cJSON_Delete(o);
}

static void errors(void **st) {
    const char *chat = "/v1/chat/completions";
    expect_error(S.port, "POST", chat, "{\"messages\": [", 400, NULL, NULL);
    expect_error(S.port, "POST", chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":5}]}",
                 400, "messages[1].content", "expected a string or an array of parts");
    expect_error(S.port, "POST", chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"temperature\":\"hot\"}",
                 400, "temperature", NULL);
    expect_error(S.port, "POST", chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":2}", 400, "n", NULL);
    expect_error(S.port, "POST", chat, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"a\"}]}", 400,
                 "messages[0].role", NULL);
    expect_error(S.port, "POST", chat, "{\"messages\":[]}", 400, "messages", NULL);
    expect_error(S.port, "POST", chat, "{\"model\":\"gpt-9\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", 404,
                 "model", NULL);
    expect_error(S.port, "POST", "/v1/completions", "{\"prompt\":{}}", 400, "prompt", NULL);
    expect_error(S.port, "POST", "/v1/completions", "{\"prompt\":[1,2,99999999]}", 400, "prompt", NULL);
    expect_error(S.port, "GET", "/v1/nothing", NULL, 404, NULL, NULL);
    expect_error(S.port, "GET", chat, NULL, 405, NULL, NULL);
    expect_error(S.port, "POST", "/v1/embeddings", "{\"input\":\"x\"}", 400, "model", "cannot embed");
    /* a prompt longer than the context (1024) */
    size_t n = 40000;
    char *big = malloc(n + 64);
    strcpy(big, "{\"prompt\":\"");
    for (size_t i = strlen(big); i < n; i++) big[i] = "ab cd"[i % 5];
    strcpy(big + n, "\"}");
    expect_error(S.port, "POST", "/v1/completions", big, 400, "prompt", "exceeds the context of");
    free(big);
    /* a body over 8 MiB */
    size_t huge = (8u << 20) + 100;
    big = malloc(huge + 1);
    memset(big, ' ', huge);
    big[huge] = 0;
    expect_error(S.port, "POST", chat, big, 413, NULL, NULL);
    free(big);
    char *r;
    assert_int_equal(http(S.port, "GET", "/health", NULL, NULL, &r), 200);
    free(r);
}

static void disconnect_mid_stream(void **st) {
    int s = connect_to(S.port);
    const char *body = "{\"prompt\":\"Long ago\",\"max_tokens\":900,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}";
    send_req(s, "POST", "/v1/completions", NULL, body, strlen(body));
    char buf[4096];
    size_t got = 0;
    for (int i = 0; i < 100 && got < 2000; i++) {
        ssize_t r = recv(s, buf, sizeof buf, 0);
        if (r <= 0) break;
        got += (size_t)r;
    }
    assert_true(got >= 2000);
    close(s);
    /* the server stays healthy and the cancellation shows in /metrics */
    char *r;
    bool cancelled = false;
    for (int i = 0; i < 300 && !cancelled; i++) {
        assert_int_equal(http(S.port, "GET", "/metrics", NULL, NULL, &r), 200);
        cancelled = strstr(r, "mtplx_generations_total{reason=\"cancelled\"} 0") == NULL;
        free(r);
        if (!cancelled) usleep(100000);
    }
    assert_true(cancelled);
    assert_int_equal(http(S.port, "POST", "/v1/completions", NULL, "{\"prompt\":\"Hello\",\"max_tokens\":4}", &r), 200);
    free(r);
}

static void concurrent_streams(void **st) {
    const char *prompts[4] = {"The sea", "In the morning", "She walked", "A letter came"};
    char *seq[4];
    char body[512];
    for (int i = 0; i < 4; i++) {
        char *r;
        snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":30,\"temperature\":0}", prompts[i]);
        assert_int_equal(http(S.port, "POST", "/v1/completions", NULL, body, &r), 200);
        seq[i] = answer_text(r, NULL);
        free(r);
    }
    int socks[4];
    for (int i = 0; i < 4; i++) {
        socks[i] = connect_to(S.port);
        snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":30,\"temperature\":0,\"stream\":true}", prompts[i]);
        send_req(socks[i], "POST", "/v1/completions", NULL, body, strlen(body));
    }
    for (int i = 0; i < 4; i++) {
        char *r;
        assert_int_equal(read_resp(socks[i], &r), 200);
        char *t = stream_text(r, NULL);
        assert_string_equal(t, seq[i]);
        free(t);
        free(r);
        free(seq[i]);
    }
}

static void json_mode(void **st) {
    char *r;
    assert_int_equal(http(S.port, "POST", "/v1/chat/completions", NULL,
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"Describe a cat as JSON\"}],\"max_tokens\":120,"
                          "\"temperature\":0,\"response_format\":{\"type\":\"json_object\"}}", &r), 200);
    char fin[16];
    char *t = answer_text(r, fin);
    cJSON *j = cJSON_Parse(t);
    if (!j) fprintf(stderr, "not JSON: %s\n", t);
    assert_true(cJSON_IsObject(j));
    cJSON_Delete(j);
    free(t);
    free(r);
    assert_int_equal(http(S.port, "POST", "/v1/chat/completions", NULL,
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"A person\"}],\"max_tokens\":200,\"temperature\":0,"
                          "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":{"
                          "\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"},\"color\":{\"enum\":[\"red\",\"blue\"]},"
                          "\"n\":{\"type\":\"integer\"}},\"required\":[\"ok\",\"color\",\"n\"]}}}}", &r), 200);
    t = answer_text(r, fin);
    j = cJSON_Parse(t);
    if (!j) fprintf(stderr, "not JSON: %s\n", t);
    assert_true(cJSON_IsObject(j));
    assert_true(cJSON_IsBool(cJSON_GetObjectItem(j, "ok")));
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(j, "n")));
    const char *col = cJSON_GetObjectItem(j, "color")->valuestring;
    assert_true(!strcmp(col, "red") || !strcmp(col, "blue"));
    cJSON_Delete(j);
    free(t);
    free(r);
}

static void metrics(void **st) {
    char *r;
    assert_int_equal(http(S.port, "GET", "/metrics", NULL, NULL, &r), 200);
    const char *want[] = {"mtplx_requests_total{endpoint=\"completions\",status=\"200\"}",
                          "mtplx_requests_total{endpoint=\"chat_completions\",status=\"400\"}",
                          "mtplx_generated_tokens_total", "mtplx_time_to_first_token_seconds_bucket",
                          "mtplx_queue_depth", "mtplx_active_slots", "mtplx_mtp_accepted_total{position=\"1\"}"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) assert_non_null(strstr(r, want[i]));
    const char *g = strstr(r, "\nmtplx_generated_tokens_total ");
    assert_non_null(g);
    assert_true(atol(g + 30) > 0);
    free(r);
}

static void auth_and_queue(void **st) {
    assert_true(start(&S2, "--api-key sekrit --max-queue 1 --parallel 1"));
    char *r;
    expect_error(S2.port, "GET", "/v1/models", NULL, 401, NULL, NULL);
    assert_int_equal(http(S2.port, "GET", "/v1/models", "Authorization: Bearer sekrit\r\n", NULL, &r), 200);
    free(r);
    assert_int_equal(http(S2.port, "GET", "/health", NULL, NULL, &r), 200);
    free(r);
    /* three long requests at once on one slot and a queue of one: one is refused */
    int socks[3];
    const char *body = "{\"prompt\":\"Long ago\",\"max_tokens\":600,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}";
    for (int i = 0; i < 3; i++) {
        socks[i] = connect_to(S2.port);
        send_req(socks[i], "POST", "/v1/completions", "Authorization: Bearer sekrit\r\n", body, strlen(body));
    }
    int n429 = 0;
    for (int i = 0; i < 3; i++) {
        char *resp;
        int status = read_resp(socks[i], &resp);
        if (status == 429) n429++;
        else assert_int_equal(status, 200);
        free(resp);
    }
    assert_true(n429 >= 1);
    stop(&S2);
}

static int usage_depth(const char *resp) {
    cJSON *o = cJSON_Parse(resp);
    const cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "mtp"), "draft_depth");
    int v = cJSON_IsNumber(d) ? d->valueint : -1;
    cJSON_Delete(o);
    return v;
}

/* --mode sustained: the plan printed at start-up, a Q8_0 KV cache, and the
 * per-request depth rule (requests reaching past 4096 positions draft at
 * most 2 deep unless they ask for a depth). A stop string of " " ends each
 * request at its first token, so a 5000-token budget costs nothing. */
static void serve_mode_sustained(void **st) {
    (void)st;
    const char *err = "/tmp/mtplx_test_server_mode.err";
    char extra[256];
    snprintf(extra, sizeof extra, "--mode sustained --ctx 8192 2>%s", err);
    assert_true(start(&S2, extra));
    char log[4096] = {0};
    FILE *f = fopen(err, "r");
    assert_non_null(f);
    size_t n = fread(log, 1, sizeof log - 1, f);
    fclose(f);
    log[n] = 0;
    if (!strstr(log, "mode sustained (asked)") || !strstr(log, "kv q8_0") || !strstr(log, "ctx 8192 (flag)") ||
        !strstr(log, "adaptive depth") || !strstr(log, "threads 1 (flag)"))
        fail_msg("plan not printed as expected:\n%s", log);
    char *r;
    assert_int_equal(http(S2.port, "POST", "/v1/completions", NULL,
                          "{\"prompt\":\"The sea\",\"max_tokens\":20,\"temperature\":0,\"stop\":[\" \"]}", &r), 200);
    assert_int_equal(usage_depth(r), 3);
    free(r);
    assert_int_equal(http(S2.port, "POST", "/v1/completions", NULL,
                          "{\"prompt\":\"The sea\",\"max_tokens\":5000,\"temperature\":0,\"stop\":[\" \"]}", &r), 200);
    assert_int_equal(usage_depth(r), 2);
    free(r);
    assert_int_equal(http(S2.port, "POST", "/v1/completions", NULL,
                          "{\"prompt\":\"The sea\",\"max_tokens\":5000,\"temperature\":0,\"stop\":[\" \"],"
                          "\"draft_depth\":3}", &r), 200);
    assert_int_equal(usage_depth(r), 3); /* asked: not ruled */
    free(r);
    assert_int_equal(http(S2.port, "GET", "/v1/models", NULL, NULL, &r), 200);
    assert_non_null(strstr(r, "\"kv_type\":\"q8_0\""));
    free(r);
    stop(&S2);
    /* turbo: F16, the mode's defaults, flags shown as flags */
    snprintf(extra, sizeof extra, "--mode turbo --kv-type f32 -b 64 2>%s", err);
    assert_true(start(&S2, extra));
    f = fopen(err, "r");
    assert_non_null(f);
    n = fread(log, 1, sizeof log - 1, f);
    fclose(f);
    log[n] = 0;
    if (!strstr(log, "mode turbo (asked)") || !strstr(log, "kv f32 (flag)") || !strstr(log, "n_batch 64 (flag)"))
        fail_msg("plan not printed as expected:\n%s", log);
    stop(&S2);
    /* bad values are usage errors */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s serve --mode warp 2>/dev/null", MTPLX_BIN);
    assert_int_equal(WEXITSTATUS(system(cmd)), 2);
    snprintf(cmd, sizeof cmd, "%s serve --kv-type q4_0 2>/dev/null", MTPLX_BIN);
    assert_int_equal(WEXITSTATUS(system(cmd)), 2);
    snprintf(cmd, sizeof cmd, "%s serve --device tpu 2>/dev/null", MTPLX_BIN);
    assert_int_equal(WEXITSTATUS(system(cmd)), 2);
}

static void tool_call_template(void **st) {
    stop(&S2);
    char extra[256];
    snprintf(extra, sizeof extra, "--chat-template %s", TMPL_PATH);
    assert_true(start(&S2, extra));
    char *r;
    assert_int_equal(http(S2.port, "POST", "/v1/chat/completions", NULL,
                          "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"temperature\":0,"
                          "\"max_tokens\":120,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                          "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
                          "\"required\":[\"city\"]}}}],\"tool_choice\":\"required\"}", &r), 200);
    cJSON *o = cJSON_Parse(r);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    if (strcmp(cJSON_GetObjectItem(c, "finish_reason")->valuestring, "tool_calls")) fprintf(stderr, "%s\n", r);
    assert_string_equal(cJSON_GetObjectItem(c, "finish_reason")->valuestring, "tool_calls");
    cJSON *tc = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "tool_calls"), 0);
    cJSON *fn = cJSON_GetObjectItem(tc, "function");
    assert_string_equal(cJSON_GetObjectItem(fn, "name")->valuestring, "get_weather");
    cJSON *args = cJSON_Parse(cJSON_GetObjectItem(fn, "arguments")->valuestring);
    assert_true(cJSON_IsString(cJSON_GetObjectItem(args, "city")));
    cJSON_Delete(args);
    cJSON_Delete(o);
    free(r);
    stop(&S2);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(health_models),       cmocka_unit_test(completions_match_run),
        cmocka_unit_test(chat_stream_equals_nonstream), cmocka_unit_test(stop_across_tokens),
        cmocka_unit_test(errors),              cmocka_unit_test(disconnect_mid_stream),
        cmocka_unit_test(concurrent_streams),  cmocka_unit_test(json_mode),
        cmocka_unit_test(metrics),             cmocka_unit_test(auth_and_queue),
        cmocka_unit_test(tool_call_template),  cmocka_unit_test(serve_mode_sustained),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
