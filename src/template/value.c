/* value.c: the interpreter's values and what Python does with them: the
 * arena they live in, truthiness, equality and ordering, str() and repr()
 * (Python's float repr included), json.dumps as transformers' tojson calls
 * it, conversion from cJSON, iteration and len(). Strings are UTF-8; len and
 * indexing count code points as Python does. */
#include "template/jinja.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

/* ---- arena ---- */
struct jj_chunk {
    jj_chunk *next;
    size_t used, cap;
    max_align_t data[];
};

void *jj_alloc(jj_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    jj_chunk *c = a->head;
    if (!c || c->used + n > c->cap) {
        size_t cap = n > (64u << 10) ? n : (64u << 10);
        a->used_total += cap;
        if (a->limit && a->used_total > a->limit)
            jj_fail(a->jmp, 0, "used more than %zu MiB of memory (runaway template?)", a->limit >> 20);
        c = malloc(sizeof *c + cap);
        if (!c) jj_fail(a->jmp, 0, "out of memory");
        c->cap = cap;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void jj_arena_free(jj_arena *a) {
    jj_chunk *c = a->head;
    while (c) {
        jj_chunk *nx = c->next;
        free(c);
        c = nx;
    }
    a->head = NULL;
    a->used_total = 0;
}

char *jj_strndup(jj_arena *a, const char *s, size_t n) {
    char *p = jj_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

_Noreturn void jj_fail(jmp_buf *jmp, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0) mtplx_fail(MTPLX_ERR_FORMAT, "template line %d: %s", line, msg);
    else mtplx_fail(MTPLX_ERR_FORMAT, "template: %s", msg);
    longjmp(*jmp, 1);
}

_Noreturn void jj_err(jj_ctx *c, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jj_fail(c->jmp, line, "%s", msg);
}

/* ---- buffers ---- */
void jj_buf_put(jj_ctx *c, jj_buf *b, const char *s, size_t n) {
    if (n == 0) return;
    c->out_total += n;
    if (c->out_total > JJ_MAX_OUTPUT)
        jj_err(c, 0, "output larger than %u MiB (runaway template?)", JJ_MAX_OUTPUT >> 20);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = jj_alloc(c->a, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
void jj_buf_puts(jj_ctx *c, jj_buf *b, const char *s) { jj_buf_put(c, b, s, strlen(s)); }

/* ---- constructors ---- */
jj_val jj_undef(jj_ctx *c, const char *fmt, ...) {
    jj_val v = {.t = V_UNDEF};
    if (fmt) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        v.u.s = jj_alloc(c->a, sizeof(jj_str));
        v.u.s->n = strlen(msg);
        v.u.s->p = jj_strndup(c->a, msg, v.u.s->n);
    }
    return v;
}
jj_val jj_none(void) { return (jj_val){.t = V_NONE}; }
jj_val jj_bool(bool b) { return (jj_val){.t = V_BOOL, .u.b = b}; }
jj_val jj_int(int64_t i) { return (jj_val){.t = V_INT, .u.i = i}; }
jj_val jj_float(double f) { return (jj_val){.t = V_FLOAT, .u.f = f}; }
jj_val jj_strv(jj_ctx *c, const char *s, size_t n) {
    jj_val v = {.t = V_STR};
    v.u.s = jj_alloc(c->a, sizeof(jj_str));
    v.u.s->p = jj_strndup(c->a, s, n);
    v.u.s->n = n;
    return v;
}
jj_val jj_cstr(jj_ctx *c, const char *s) { return jj_strv(c, s, strlen(s)); }
jj_val jj_buf_val(jj_ctx *c, jj_buf *b) {
    jj_val v = {.t = V_STR};
    v.u.s = jj_alloc(c->a, sizeof(jj_str));
    v.u.s->p = b->p ? b->p : "";
    v.u.s->n = b->n;
    return v;
}
jj_val jj_new_list(jj_ctx *c, size_t cap) {
    jj_val v = {.t = V_LIST};
    v.u.l = jj_alloc(c->a, sizeof(jj_list));
    if (cap) {
        v.u.l->v = jj_alloc(c->a, cap * sizeof(jj_val));
        v.u.l->cap = cap;
    }
    return v;
}
jj_val jj_new_dict(jj_ctx *c) {
    jj_val v = {.t = V_DICT};
    v.u.d = jj_alloc(c->a, sizeof(jj_dict));
    return v;
}
void jj_list_push(jj_ctx *c, jj_list *l, jj_val v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jj_val *nv = jj_alloc(c->a, cap * sizeof(jj_val));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jj_val));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}
jj_val *jj_dict_get(const jj_dict *d, jj_val k) {
    for (size_t i = 0; i < d->n; i++)
        if (jj_eq(d->k[i], k)) return &d->v[i];
    return NULL;
}
jj_val *jj_dict_gets(const jj_dict *d, const char *k) {
    size_t n = strlen(k);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == V_STR && d->k[i].u.s->n == n && memcmp(d->k[i].u.s->p, k, n) == 0)
            return &d->v[i];
    return NULL;
}
void jj_dict_set(jj_ctx *c, jj_dict *d, jj_val k, jj_val v) {
    jj_val *e = jj_dict_get(d, k);
    if (e) {
        *e = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jj_val *nk = jj_alloc(c->a, cap * sizeof(jj_val)), *nv = jj_alloc(c->a, cap * sizeof(jj_val));
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(jj_val));
            memcpy(nv, d->v, d->n * sizeof(jj_val));
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
}

/* ---- Python semantics ---- */
bool jj_truthy(jj_val v) {
    switch (v.t) {
    case V_UNDEF: case V_NONE: return false;
    case V_BOOL: return v.u.b;
    case V_INT: return v.u.i != 0;
    case V_FLOAT: return v.u.f != 0.0;
    case V_STR: return v.u.s->n != 0;
    case V_LIST: return v.u.l->n != 0;
    case V_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

static bool is_num(jj_val v) { return v.t == V_INT || v.t == V_FLOAT || v.t == V_BOOL; }
static double num(jj_val v) {
    return v.t == V_FLOAT ? v.u.f : v.t == V_INT ? (double)v.u.i : (double)v.u.b;
}

bool jj_eq(jj_val a, jj_val b) {
    if (is_num(a) && is_num(b)) {
        if (a.t != V_FLOAT && b.t != V_FLOAT)
            return (a.t == V_INT ? a.u.i : a.u.b) == (b.t == V_INT ? b.u.i : b.u.b);
        return num(a) == num(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case V_UNDEF: case V_NONE: return true;
    case V_STR: return a.u.s->n == b.u.s->n && memcmp(a.u.s->p, b.u.s->p, a.u.s->n) == 0;
    case V_LIST:
        if (a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jj_eq(a.u.l->v[i], b.u.l->v[i])) return false;
        return true;
    case V_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jj_val *o = jj_dict_get(b.u.d, a.u.d->k[i]);
            if (!o || !jj_eq(a.u.d->v[i], *o)) return false;
        }
        return true;
    case V_NS: return a.u.d == b.u.d;
    case V_MACRO: return a.u.m == b.u.m;
    case V_FUNC: return a.u.fn == b.u.fn;
    case V_LOOP: return a.u.loop == b.u.loop;
    default: return false;
    }
}

const char *jj_type_name(jj_val v) {
    switch (v.t) {
    case V_UNDEF: return "Undefined";
    case V_NONE: return "NoneType";
    case V_BOOL: return "bool";
    case V_INT: return "int";
    case V_FLOAT: return "float";
    case V_STR: return "str";
    case V_LIST: return v.tuple ? "tuple" : "list";
    case V_DICT: return "dict";
    case V_NS: return "Namespace";
    case V_MACRO: return "Macro";
    case V_LOOP: return "LoopContext";
    default: return "builtin_function_or_method";
    }
}

int jj_cmp(jj_ctx *c, int line, jj_val a, jj_val b) {
    if (is_num(a) && is_num(b)) {
        if (a.t == V_INT && b.t == V_INT) return a.u.i < b.u.i ? -1 : a.u.i > b.u.i;
        double x = num(a), y = num(b);
        return x < y ? -1 : x > y;
    }
    if (a.t == V_STR && b.t == V_STR) {
        size_t n = a.u.s->n < b.u.s->n ? a.u.s->n : b.u.s->n;
        int r = memcmp(a.u.s->p, b.u.s->p, n);
        if (r) return r < 0 ? -1 : 1;
        return a.u.s->n < b.u.s->n ? -1 : a.u.s->n > b.u.s->n;
    }
    if (a.t == V_LIST && b.t == V_LIST) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            int r = jj_cmp(c, line, a.u.l->v[i], b.u.l->v[i]);
            if (r) return r;
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    if (a.t == V_UNDEF || b.t == V_UNDEF) {
        jj_val u = a.t == V_UNDEF ? a : b;
        jj_err(c, line, "%s", u.u.s ? u.u.s->p : "undefined value in comparison");
    }
    jj_err(c, line, "'<' not supported between instances of '%s' and '%s'", jj_type_name(a),
           jj_type_name(b));
}

/* Python's repr(float): the shortest digits that round-trip; scientific
 * notation when the exponent is < -4 or >= 16. */
void jj_float_repr(double f, char *out, size_t cap) {
    if (isnan(f)) { snprintf(out, cap, "nan"); return; }
    if (isinf(f)) { snprintf(out, cap, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { snprintf(out, cap, signbit(f) ? "-0.0" : "0.0"); return; }
    char buf[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* buf: [-]d[.ddd]e[+-]XX */
    char digits[32] = {0};
    int nd = 0;
    const char *p = buf;
    bool neg = false;
    if (*p == '-') { neg = true; p++; }
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char o[64];
    int on = 0;
    if (neg) o[on++] = '-';
    if (exp < -4 || exp >= 16) {
        o[on++] = digits[0];
        if (nd > 1) {
            o[on++] = '.';
            for (int i = 1; i < nd; i++) o[on++] = digits[i];
        }
        on += snprintf(o + on, sizeof o - (size_t)on, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        o[on++] = '0';
        o[on++] = '.';
        for (int i = 0; i < -exp - 1; i++) o[on++] = '0';
        for (int i = 0; i < nd; i++) o[on++] = digits[i];
        o[on] = 0;
    } else {
        for (int i = 0; i <= exp; i++) o[on++] = i < nd ? digits[i] : '0';
        o[on++] = '.';
        if (nd > exp + 1)
            for (int i = exp + 1; i < nd; i++) o[on++] = digits[i];
        else
            o[on++] = '0';
        o[on] = 0;
    }
    snprintf(out, cap, "%s", o);
}

static void repr_str(jj_ctx *c, jj_buf *b, const jj_str *s) {
    bool has_sq = memchr(s->p, '\'', s->n) != NULL, has_dq = memchr(s->p, '"', s->n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jj_buf_put(c, b, &q, 1);
    for (size_t i = 0; i < s->n; i++) {
        unsigned char ch = (unsigned char)s->p[i];
        char e[8];
        if (ch == '\\') jj_buf_puts(c, b, "\\\\");
        else if (ch == (unsigned char)q) { e[0] = '\\'; e[1] = q; jj_buf_put(c, b, e, 2); }
        else if (ch == '\n') jj_buf_puts(c, b, "\\n");
        else if (ch == '\r') jj_buf_puts(c, b, "\\r");
        else if (ch == '\t') jj_buf_puts(c, b, "\\t");
        else if (ch < 0x20 || ch == 0x7f) { snprintf(e, sizeof e, "\\x%02x", ch); jj_buf_puts(c, b, e); }
        else jj_buf_put(c, b, (const char *)&s->p[i], 1);
    }
    jj_buf_put(c, b, &q, 1);
}

void jj_repr(jj_ctx *c, jj_buf *b, jj_val v) {
    if (++c->depth > JJ_MAX_DEPTH) jj_err(c, 0, "value nested too deeply");
    switch (v.t) {
    case V_STR: repr_str(c, b, v.u.s); break;
    case V_LIST:
        jj_buf_puts(c, b, v.tuple ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jj_buf_puts(c, b, ", ");
            jj_repr(c, b, v.u.l->v[i]);
        }
        if (v.tuple && v.u.l->n == 1) jj_buf_puts(c, b, ",");
        jj_buf_puts(c, b, v.tuple ? ")" : "]");
        break;
    case V_DICT:
        jj_buf_puts(c, b, "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jj_buf_puts(c, b, ", ");
            jj_repr(c, b, v.u.d->k[i]);
            jj_buf_puts(c, b, ": ");
            jj_repr(c, b, v.u.d->v[i]);
        }
        jj_buf_puts(c, b, "}");
        break;
    default: jj_to_str(c, b, v); break;
    }
    c->depth--;
}

void jj_to_str(jj_ctx *c, jj_buf *b, jj_val v) {
    char tmp[64];
    switch (v.t) {
    case V_UNDEF: break;
    case V_NONE: jj_buf_puts(c, b, "None"); break;
    case V_BOOL: jj_buf_puts(c, b, v.u.b ? "True" : "False"); break;
    case V_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i); jj_buf_puts(c, b, tmp); break;
    case V_FLOAT: jj_float_repr(v.u.f, tmp, sizeof tmp); jj_buf_puts(c, b, tmp); break;
    case V_STR: jj_buf_put(c, b, v.u.s->p, v.u.s->n); break;
    case V_LIST: case V_DICT: jj_repr(c, b, v); break;
    case V_NS: jj_buf_puts(c, b, "<Namespace>"); break;
    case V_MACRO: jj_buf_puts(c, b, "<Macro>"); break;
    case V_LOOP: jj_buf_puts(c, b, "<LoopContext>"); break;
    default: jj_buf_puts(c, b, "<built-in function>"); break;
    }
}

jj_str *jj_str_of(jj_ctx *c, jj_val v) {
    if (v.t == V_STR) return v.u.s;
    jj_buf b = {0};
    jj_to_str(c, &b, v);
    return jj_buf_val(c, &b).u.s;
}

/* ---- JSON ---- */
static void json_str(jj_ctx *c, jj_buf *b, const char *s, size_t n, bool ensure_ascii) {
    jj_buf_puts(c, b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[16];
        switch (ch) {
        case '"': jj_buf_puts(c, b, "\\\""); continue;
        case '\\': jj_buf_puts(c, b, "\\\\"); continue;
        case '\n': jj_buf_puts(c, b, "\\n"); continue;
        case '\r': jj_buf_puts(c, b, "\\r"); continue;
        case '\t': jj_buf_puts(c, b, "\\t"); continue;
        case '\b': jj_buf_puts(c, b, "\\b"); continue;
        case '\f': jj_buf_puts(c, b, "\\f"); continue;
        default: break;
        }
        if (ch < 0x20 || (ensure_ascii && ch == 0x7f)) {
            snprintf(e, sizeof e, "\\u%04x", ch);
            jj_buf_puts(c, b, e);
        } else if (ch >= 0x80 && ensure_ascii) {
            uint32_t cp;
            int len = ch >= 0xF0 ? 4 : ch >= 0xE0 ? 3 : 2;
            cp = ch & (len == 4 ? 0x07 : len == 3 ? 0x0F : 0x1F);
            for (int k = 1; k < len && i + 1 < n; k++) cp = (cp << 6) | ((unsigned char)s[++i] & 0x3F);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(e, sizeof e, "\\u%04x", cp);
            }
            jj_buf_puts(c, b, e);
        } else {
            jj_buf_put(c, b, s + i, 1);
        }
    }
    jj_buf_puts(c, b, "\"");
}

static void newline_indent(jj_ctx *c, jj_buf *b, int indent, int level) {
    jj_buf_puts(c, b, "\n");
    for (int i = 0; i < indent * level; i++) jj_buf_puts(c, b, " ");
}

static int key_cmp_ctx_line;
static jj_ctx *key_cmp_ctx;
static int key_cmp(const void *x, const void *y) {
    const jj_val *a = x, *b = y;
    return jj_cmp(key_cmp_ctx, key_cmp_ctx_line, a[0], b[0]);
}

void jj_tojson(jj_ctx *c, int line, jj_buf *b, jj_val v, bool ensure_ascii, int indent,
               const char *item_sep, const char *key_sep, bool sort_keys, int level) {
    char tmp[64];
    if (level > JJ_MAX_DEPTH) jj_err(c, line, "tojson: value nested too deeply");
    switch (v.t) {
    case V_NONE: jj_buf_puts(c, b, "null"); break;
    case V_BOOL: jj_buf_puts(c, b, v.u.b ? "true" : "false"); break;
    case V_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i); jj_buf_puts(c, b, tmp); break;
    case V_FLOAT:
        if (isnan(v.u.f)) jj_buf_puts(c, b, "NaN");
        else if (isinf(v.u.f)) jj_buf_puts(c, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else { jj_float_repr(v.u.f, tmp, sizeof tmp); jj_buf_puts(c, b, tmp); }
        break;
    case V_STR: json_str(c, b, v.u.s->p, v.u.s->n, ensure_ascii); break;
    case V_LIST:
        if (v.u.l->n == 0) { jj_buf_puts(c, b, "[]"); break; }
        jj_buf_puts(c, b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jj_buf_puts(c, b, item_sep);
            if (indent >= 0) newline_indent(c, b, indent, level + 1);
            jj_tojson(c, line, b, v.u.l->v[i], ensure_ascii, indent, item_sep, key_sep, sort_keys, level + 1);
        }
        if (indent >= 0) newline_indent(c, b, indent, level);
        jj_buf_puts(c, b, "]");
        break;
    case V_DICT: case V_NS: {
        jj_dict *d = v.u.d;
        if (v.t == V_NS) jj_err(c, line, "Object of type Namespace is not JSON serializable");
        if (d->n == 0) { jj_buf_puts(c, b, "{}"); break; }
        jj_val *pairs = jj_alloc(c->a, d->n * 2 * sizeof(jj_val));
        for (size_t i = 0; i < d->n; i++) {
            pairs[2 * i] = d->k[i];
            pairs[2 * i + 1] = d->v[i];
        }
        if (sort_keys) {
            key_cmp_ctx = c;
            key_cmp_ctx_line = line;
            qsort(pairs, d->n, 2 * sizeof(jj_val), key_cmp);
        }
        jj_buf_puts(c, b, "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i) jj_buf_puts(c, b, item_sep);
            if (indent >= 0) newline_indent(c, b, indent, level + 1);
            jj_val k = pairs[2 * i];
            if (k.t == V_STR) json_str(c, b, k.u.s->p, k.u.s->n, ensure_ascii);
            else {
                jj_buf kb = {0};
                if (k.t == V_BOOL) jj_buf_puts(c, &kb, k.u.b ? "true" : "false");
                else if (k.t == V_NONE) jj_buf_puts(c, &kb, "null");
                else jj_to_str(c, &kb, k);
                json_str(c, b, kb.p ? kb.p : "", kb.n, ensure_ascii);
            }
            jj_buf_puts(c, b, key_sep);
            jj_tojson(c, line, b, pairs[2 * i + 1], ensure_ascii, indent, item_sep, key_sep, sort_keys, level + 1);
        }
        if (indent >= 0) newline_indent(c, b, indent, level);
        jj_buf_puts(c, b, "}");
        break;
    }
    default:
        jj_err(c, line, "Object of type %s is not JSON serializable", jj_type_name(v));
    }
}

jj_val jj_from_cjson(jj_ctx *c, const cJSON *j) {
    if (cJSON_IsNull(j)) return jj_none();
    if (cJSON_IsBool(j)) return jj_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9007199254740992.0) return jj_int((int64_t)d);
        return jj_float(d);
    }
    if (cJSON_IsString(j)) return jj_cstr(c, j->valuestring);
    if (cJSON_IsArray(j)) {
        jj_val l = jj_new_list(c, (size_t)cJSON_GetArraySize(j));
        for (const cJSON *e = j->child; e; e = e->next) jj_list_push(c, l.u.l, jj_from_cjson(c, e));
        return l;
    }
    if (cJSON_IsObject(j)) {
        jj_val d = jj_new_dict(c);
        for (const cJSON *e = j->child; e; e = e->next)
            jj_dict_set(c, d.u.d, jj_cstr(c, e->string ? e->string : ""), jj_from_cjson(c, e));
        return d;
    }
    return jj_none();
}

/* ---- UTF-8 ---- */
size_t jj_utf8_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}
size_t jj_utf8_offset(const char *s, size_t n, int64_t cp) {
    size_t i = 0;
    int64_t k = 0;
    while (i < n) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (k == cp) return i;
            k++;
        }
        i++;
    }
    return n;
}

/* ---- iteration ---- */
jj_list *jj_iter(jj_ctx *c, int line, jj_val v) {
    switch (v.t) {
    case V_UNDEF: return jj_new_list(c, 0).u.l;
    case V_LIST: return v.u.l;
    case V_DICT: case V_NS: {
        jj_list *l = jj_new_list(c, v.u.d->n).u.l;
        for (size_t i = 0; i < v.u.d->n; i++) jj_list_push(c, l, v.u.d->k[i]);
        return l;
    }
    case V_STR: {
        jj_list *l = jj_new_list(c, v.u.s->n).u.l;
        const char *p = v.u.s->p;
        size_t n = v.u.s->n, i = 0;
        while (i < n) {
            size_t j = i + 1;
            while (j < n && ((unsigned char)p[j] & 0xC0) == 0x80) j++;
            jj_list_push(c, l, jj_strv(c, p + i, j - i));
            i = j;
        }
        return l;
    }
    default: jj_err(c, line, "'%s' object is not iterable", jj_type_name(v));
    }
}

int64_t jj_len(jj_ctx *c, int line, jj_val v) {
    switch (v.t) {
    case V_UNDEF: return 0;
    case V_STR: return (int64_t)jj_utf8_len(v.u.s->p, v.u.s->n);
    case V_LIST: return (int64_t)v.u.l->n;
    case V_DICT: case V_NS: return (int64_t)v.u.d->n;
    default: jj_err(c, line, "object of type '%s' has no len()", jj_type_name(v));
    }
}
