/* toolcall.c: tool calls out of the model's text, in the native formats:
 * Qwen / Hermes `<tool_call>{"name": .., "arguments": {..}}</tool_call>`
 * (any number, text around them is content) and Llama-3 JSON (the whole
 * reply is `{"name": .., "parameters": {..}}`, optionally after
 * `<|python_tag|>`). Text that may still turn into a call is held back, so
 * a streamed reply never shows the markup. Not here: Mistral [TOOL_CALLS]
 * and other formats. */
#include "server/srv.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>", PYTAG[] = "<|python_tag|>";

void tool_call_free(tool_call *c) {
    if (!c) return;
    free(c->name);
    free(c->arguments);
    c->name = c->arguments = NULL;
}

bool tool_call_parse(const char *json, size_t n, tool_call *out, uint64_t *seed) {
    memset(out, 0, sizeof *out);
    cJSON *o = cJSON_ParseWithLength(json, n);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return false;
    }
    cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    if (!cJSON_IsString(name) || !name->valuestring[0]) {
        cJSON_Delete(o);
        return false;
    }
    out->name = strdup(name->valuestring);
    if (cJSON_IsString(args)) out->arguments = strdup(args->valuestring);
    else if (args) out->arguments = cJSON_PrintUnformatted(args);
    else out->arguments = strdup("{}");
    cJSON_Delete(o);
    /* ids like OpenAI's: call_ + 24 alphanumerics */
    uint64_t x = (*seed += 0x9E3779B97F4A7C15ull);
    char *p = out->id + snprintf(out->id, sizeof out->id, "call_");
    for (int i = 0; i < 24; i++) {
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 29;
        *p++ = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[x % 62];
    }
    *p = 0;
    if (!out->name || !out->arguments) {
        tool_call_free(out);
        return false;
    }
    return true;
}

static void push_call(tool_call **calls, int *n, tool_call *c) {
    tool_call *a = realloc(*calls, (size_t)(*n + 1) * sizeof *a);
    if (!a) {
        tool_call_free(c);
        return;
    }
    a[(*n)++] = *c;
    *calls = a;
}

/* Length of the longest tail of s[0..n) that is a proper prefix of pat. */
static size_t partial_tail(const char *s, size_t n, const char *pat) {
    size_t L = strlen(pat);
    for (size_t k = (L - 1 < n ? L - 1 : n); k > 0; k--)
        if (!memcmp(s + n - k, pat, k)) return k;
    return 0;
}

void toolparse_feed(toolparse *tp, const char *text, size_t n, sbuf *content, tool_call **calls,
                    int *n_calls, bool final) {
    if (!tp->id_seed) tp->id_seed = (uint64_t)(uintptr_t)tp ^ 0x1234567ull;
    sb_put(&tp->hold, text, n);
    for (;;) {
        const char *h = sb_str(&tp->hold);
        size_t hn = tp->hold.n;
        if (tp->mode == 0) {
            /* decide from the first non-space text */
            size_t i = 0;
            while (i < hn && isspace((unsigned char)h[i])) i++;
            if (i == hn) {
                if (final) tp->mode = 1;
                else return;
                continue;
            }
            if (h[i] == '{') {
                tp->mode = 3;
                continue;
            }
            if (hn - i < sizeof PYTAG - 1 && !memcmp(h + i, PYTAG, hn - i) && !final) return;
            if (hn - i >= sizeof PYTAG - 1 && !memcmp(h + i, PYTAG, sizeof PYTAG - 1)) {
                tp->mode = 3;
                continue;
            }
            tp->mode = 1;
            continue;
        }
        if (tp->mode == 3) {
            if (!final) return;
            const char *j = h;
            const char *tag = strstr(h, PYTAG);
            if (tag) j = tag + sizeof PYTAG - 1;
            tool_call c;
            /* one object, or several separated by ';' or newlines */
            if (tool_call_parse(j, strlen(j), &c, &tp->id_seed)) {
                push_call(calls, n_calls, &c);
                tp->n_calls++;
            } else {
                sb_put(content, h, hn);
            }
            tp->hold.n = 0;
            return;
        }
        if (tp->mode == 1) {
            const char *open = memmem(h, hn, OPEN, sizeof OPEN - 1);
            if (open) {
                size_t pre = (size_t)(open - h);
                /* whitespace between calls is not content */
                bool blank = true;
                for (size_t i = 0; i < pre; i++) blank = blank && isspace((unsigned char)h[i]);
                if (!(blank && tp->n_calls > 0)) sb_put(content, h, pre);
                size_t rest = hn - pre - (sizeof OPEN - 1);
                memmove(tp->hold.p, open + sizeof OPEN - 1, rest);
                tp->hold.n = rest;
                tp->hold.p[rest] = 0;
                tp->mode = 2;
                continue;
            }
            size_t keep = final ? 0 : partial_tail(h, hn, OPEN);
            size_t emit = hn - keep;
            bool blank = true;
            for (size_t i = 0; i < emit; i++) blank = blank && isspace((unsigned char)h[i]);
            if (!(blank && tp->n_calls > 0)) sb_put(content, h, emit);
            if (tp->hold.p) {
                memmove(tp->hold.p, h + emit, keep);
                tp->hold.n = keep;
                tp->hold.p[keep] = 0;
            }
            return;
        }
        /* mode 2: inside <tool_call> */
        const char *close = memmem(h, hn, CLOSE, sizeof CLOSE - 1);
        if (!close && !final) return;
        size_t jn = close ? (size_t)(close - h) : hn;
        tool_call c;
        if (tool_call_parse(h, jn, &c, &tp->id_seed)) {
            push_call(calls, n_calls, &c);
            tp->n_calls++;
        } else {
            /* not a call after all: show it as it was */
            sb_puts(content, OPEN);
            sb_put(content, h, jn);
            if (close) sb_puts(content, CLOSE);
        }
        size_t used = close ? jn + sizeof CLOSE - 1 : hn;
        memmove(tp->hold.p, h + used, hn - used);
        tp->hold.n = hn - used;
        tp->hold.p[tp->hold.n] = 0;
        tp->mode = 1;
        if (!close) return;
    }
}

void toolparse_free(toolparse *tp) {
    sb_free(&tp->hold);
    sb_free(&tp->call);
}
