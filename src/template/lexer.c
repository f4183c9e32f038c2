/* lexer.c: Jinja source to tokens, with jinja2's whitespace rules as HF
 * transformers configures them: newlines normalised to \n, one trailing
 * newline dropped (keep_trailing_newline=False), trim_blocks (the first \n
 * after a block or comment tag goes), lstrip_blocks (spaces before a block or
 * comment tag on its own line go), and the explicit - / + markers.
 * Leaves out: line statements, custom delimiters. */
#include "template/jinja.h"

#include <ctype.h>
#include <string.h>

typedef struct lexer {
    jj_arena *a;
    jmp_buf *jmp;
    const char *s;
    size_t n;
    jj_tok *toks;
    int ntoks, cap;
} lexer;

static jj_tok *push(lexer *L, jj_tok_type t, int line) {
    if (L->ntoks == L->cap) {
        int cap = L->cap ? L->cap * 2 : 256;
        jj_tok *nt = jj_alloc(L->a, (size_t)cap * sizeof(jj_tok));
        if (L->ntoks) memcpy(nt, L->toks, (size_t)L->ntoks * sizeof(jj_tok));
        L->toks = nt;
        L->cap = cap;
    }
    jj_tok *t0 = &L->toks[L->ntoks++];
    memset(t0, 0, sizeof *t0);
    t0->t = t;
    t0->line = line;
    return t0;
}

static int count_nl(const char *s, size_t a, size_t b) {
    int k = 0;
    for (size_t i = a; i < b; i++) k += s[i] == '\n';
    return k;
}

static bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }

static void emit_text(lexer *L, size_t a, size_t b, int line) {
    if (b <= a) return;
    jj_tok *t = push(L, T_TEXT, line);
    t->p = jj_strndup(L->a, L->s + a, b - a);
    t->n = b - a;
}

/* Append the UTF-8 encoding of cp. */
static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* A string literal from s[*i] (the quote); Python escape rules. */
static void lex_string(lexer *L, size_t *i, int line) {
    char q = L->s[*i];
    size_t j = *i + 1;
    char *o = jj_alloc(L->a, L->n - *i + 1);
    size_t on = 0;
    for (;;) {
        if (j >= L->n) jj_fail(L->jmp, line, "unterminated string literal");
        char ch = L->s[j];
        if (ch == q) break;
        if (ch != '\\') { o[on++] = ch; j++; continue; }
        if (j + 1 >= L->n) jj_fail(L->jmp, line, "unterminated string literal");
        char e = L->s[j + 1];
        j += 2;
        switch (e) {
        case 'n': o[on++] = '\n'; break;
        case 't': o[on++] = '\t'; break;
        case 'r': o[on++] = '\r'; break;
        case '\\': o[on++] = '\\'; break;
        case '\'': o[on++] = '\''; break;
        case '"': o[on++] = '"'; break;
        case 'a': o[on++] = '\a'; break;
        case 'b': o[on++] = '\b'; break;
        case 'f': o[on++] = '\f'; break;
        case 'v': o[on++] = '\v'; break;
        case '\n': break;
        case 'x': case 'u': case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < nd; k++) {
                int h = j < L->n ? hexval(L->s[j]) : -1;
                if (h < 0) jj_fail(L->jmp, line, "bad \\%c escape in string literal", e);
                cp = cp * 16 + (uint32_t)h;
                j++;
            }
            on += put_utf8(o + on, cp);
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && j < L->n && L->s[j] >= '0' && L->s[j] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(L->s[j++] - '0');
                on += put_utf8(o + on, cp);
            } else {
                o[on++] = '\\';
                j--; /* keep the character after the backslash */
            }
        }
    }
    jj_tok *t = push(L, T_STRING, line);
    o[on] = 0;
    t->p = o;
    t->n = on;
    *i = j + 1;
}

static const char *OPS2[] = {"//", "**", "==", "!=", "<=", ">=", NULL};
static const char OPS1[] = "+-*/%~<>=()[]{},.:|";

/* Tokens inside a {{ }} or {% %} tag, from *i up to its end marker.
 * Returns the end marker's modifier ('-', '+' or 0); *i is past the marker. */
static char lex_tag(lexer *L, size_t *i, int *line, char kind) {
    int depth = 0;
    const char *s = L->s;
    for (;;) {
        while (*i < L->n && is_ws(s[*i])) {
            if (s[*i] == '\n') (*line)++;
            (*i)++;
        }
        if (*i >= L->n)
            jj_fail(L->jmp, *line, "unexpected end of template (missing '%s')",
                    kind == '%' ? "%}" : "}}");
        size_t p = *i;
        char endc = kind == '%' ? '%' : '}';
        if (depth == 0) {
            char mod = 0;
            size_t q = p;
            if ((s[q] == '-' || s[q] == '+') && q + 2 < L->n + 1 && s[q + 1] == endc && s[q + 2] == '}') {
                mod = s[q];
                q++;
            }
            if (q + 1 < L->n && s[q] == endc && s[q + 1] == '}') {
                *i = q + 2;
                return mod ? mod : 1;
            }
        }
        char ch = s[p];
        if (isalpha((unsigned char)ch) || ch == '_') {
            size_t q = p;
            while (q < L->n && (isalnum((unsigned char)s[q]) || s[q] == '_')) q++;
            jj_tok *t = push(L, T_NAME, *line);
            t->p = jj_strndup(L->a, s + p, q - p);
            t->n = q - p;
            *i = q;
        } else if (isdigit((unsigned char)ch)) {
            size_t q = p;
            char buf[128];
            size_t bn = 0;
            bool isf = false;
            while (q < L->n && (isdigit((unsigned char)s[q]) || s[q] == '_')) {
                if (s[q] != '_' && bn < 100) buf[bn++] = s[q];
                q++;
            }
            bool after_dot = p > 0 && s[p - 1] == '.';
            if (!after_dot && q + 1 < L->n && s[q] == '.' && isdigit((unsigned char)s[q + 1])) {
                isf = true;
                buf[bn++] = s[q++];
                while (q < L->n && (isdigit((unsigned char)s[q]) || s[q] == '_')) {
                    if (s[q] != '_' && bn < 100) buf[bn++] = s[q];
                    q++;
                }
            }
            if (!after_dot && q < L->n && (s[q] == 'e' || s[q] == 'E')) {
                size_t r = q + 1;
                if (r < L->n && (s[r] == '+' || s[r] == '-')) r++;
                if (r < L->n && isdigit((unsigned char)s[r])) {
                    isf = true;
                    while (q < r) buf[bn++] = s[q++];
                    while (q < L->n && isdigit((unsigned char)s[q]) && bn < 120) buf[bn++] = s[q++];
                }
            }
            buf[bn] = 0;
            jj_tok *t = push(L, isf ? T_FLOAT : T_INT, *line);
            if (isf) t->f = strtod(buf, NULL);
            else t->i = strtoll(buf, NULL, 10);
            *i = q;
        } else if (ch == '\'' || ch == '"') {
            int l0 = *line;
            size_t q = p;
            lex_string(L, &q, l0);
            *line += count_nl(s, p, q);
            *i = q;
        } else {
            const char *op = NULL;
            for (int k = 0; OPS2[k]; k++)
                if (p + 1 < L->n && s[p] == OPS2[k][0] && s[p + 1] == OPS2[k][1]) op = OPS2[k];
            size_t len = 2;
            if (!op && strchr(OPS1, ch) && ch) {
                len = 1;
                op = jj_strndup(L->a, s + p, 1);
            }
            if (!op) jj_fail(L->jmp, *line, "unexpected character '%c' in tag", ch);
            if (len == 1 && (ch == '(' || ch == '[' || ch == '{')) depth++;
            if (len == 1 && (ch == ')' || ch == ']' || ch == '}')) {
                if (depth == 0) jj_fail(L->jmp, *line, "unexpected '%c'", ch);
                depth--;
            }
            jj_tok *t = push(L, T_OP, *line);
            t->p = op;
            t->n = len;
            *i = p + len;
        }
    }
}

/* Does s[i..] read "<ws>word<ws>" followed by an optional '-' and "%}"?
 * Sets *end past "%}" and *mod to '-' or 0. */
static bool match_word_tag(const char *s, size_t n, size_t i, const char *word, size_t *end, char *mod) {
    while (i < n && is_ws(s[i])) i++;
    size_t wl = strlen(word);
    if (i + wl > n || memcmp(s + i, word, wl) != 0) return false;
    i += wl;
    if (i < n && (isalnum((unsigned char)s[i]) || s[i] == '_')) return false;
    while (i < n && is_ws(s[i])) i++;
    *mod = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) *mod = s[i++];
    if (i + 1 < n && s[i] == '%' && s[i + 1] == '}') {
        *end = i + 2;
        return true;
    }
    return false;
}

void jj_lex(jj_arena *a, jmp_buf *jmp, const char *src, jj_tok **toks, int *ntoks) {
    lexer L = {.a = a, .jmp = jmp};
    /* normalise newlines; drop one trailing newline */
    size_t sl = strlen(src);
    char *s = jj_alloc(a, sl + 1);
    size_t n = 0;
    for (size_t i = 0; i < sl; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < sl && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n > 0 && s[n - 1] == '\n') n--;
    s[n] = 0;
    L.s = s;
    L.n = n;

    size_t pos = 0;
    int line = 1;
    bool line_starting = true;
    while (pos < n) {
        size_t q = pos;
        while (q + 1 < n && !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#'))) q++;
        if (q + 1 >= n) {
            emit_text(&L, pos, n, line);
            break;
        }
        char kind = s[q + 1];
        char mod = q + 2 < n ? s[q + 2] : 0;
        size_t text_end = q;
        if (mod == '-') {
            while (text_end > pos && is_ws(s[text_end - 1])) text_end--;
        } else if (mod != '+' && kind != '{') {
            size_t l = q;
            while (l > pos && s[l - 1] != '\n') l--;
            bool has_nl = l > pos;
            if (has_nl || line_starting) {
                bool all_ws = true;
                for (size_t k = l; k < q; k++)
                    if (!is_ws(s[k])) all_ws = false;
                if (all_ws) text_end = l;
            }
        }
        emit_text(&L, pos, text_end, line);
        line += count_nl(s, pos, q);
        size_t p = q + 2 + ((mod == '-' || mod == '+') ? 1 : 0);

        if (kind == '#') {
            const char *e = strstr(s + p, "#}");
            if (!e) jj_fail(jmp, line, "unclosed comment");
            size_t end = (size_t)(e - s);
            size_t after = end + 2;
            if (end > p && s[end - 1] == '-') {
                while (after < n && is_ws(s[after])) after++;
            } else if (!(end > p && s[end - 1] == '+') && after < n && s[after] == '\n') {
                after++;
            }
            line += count_nl(s, q, after);
            pos = after;
            line_starting = s[pos - 1] == '\n';
            continue;
        }
        size_t rend;
        char rmod;
        if (kind == '%' && match_word_tag(s, n, p, "raw", &rend, &rmod)) {
            size_t body = rend;
            if (rmod == '-')
                while (body < n && is_ws(s[body])) body++;
            size_t k = body;
            for (;;) {
                const char *e = strstr(s + k, "{%");
                if (!e) jj_fail(jmp, line, "missing endraw for raw block");
                size_t t0 = (size_t)(e - s);
                size_t t1 = t0 + 2;
                char m0 = s[t1] == '-' || s[t1] == '+' ? s[t1] : 0;
                if (m0) t1++;
                size_t eend;
                char emod;
                if (match_word_tag(s, n, t1, "endraw", &eend, &emod)) {
                    size_t te = t0;
                    if (m0 == '-')
                        while (te > body && is_ws(s[te - 1])) te--;
                    emit_text(&L, body, te, line + count_nl(s, q, body));
                    if (emod == '-') {
                        while (eend < n && is_ws(s[eend])) eend++;
                    } else if (emod != '+' && eend < n && s[eend] == '\n') {
                        eend++;
                    }
                    line += count_nl(s, q, eend);
                    pos = eend;
                    break;
                }
                k = t0 + 2;
            }
            line_starting = s[pos - 1] == '\n';
            continue;
        }
        push(&L, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, line);
        char emod = lex_tag(&L, &p, &line, kind);
        push(&L, kind == '%' ? T_BLOCK_END : T_VAR_END, line);
        if (emod == '-') {
            while (p < n && is_ws(s[p])) {
                if (s[p] == '\n') line++;
                p++;
            }
        } else if (kind == '%' && emod != '+' && p < n && s[p] == '\n') {
            p++;
            line++;
        }
        pos = p;
        line_starting = s[pos - 1] == '\n';
    }
    push(&L, T_EOF, line);
    *toks = L.toks;
    *ntoks = L.ntoks;
}
