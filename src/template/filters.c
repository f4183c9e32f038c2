/* filters.c: jinja2's built-in filters and tests, transformers' tojson, and
 * the Python str / dict / list methods that chat templates call. Mutating
 * methods (list.append, dict.update, ...) fail as in jinja2's immutable
 * sandbox, which is what transformers renders with. Case mapping uses
 * utf8proc per code point (no special casing such as German sharp s). */
#include "template/jinja.h"

#include <math.h>
#include <string.h>
#include <utf8proc.h>

typedef struct fargs {
    jj_val *args;
    int nargs;
    const char **kwn;
    jj_val *kwv;
    int nkw;
} fargs;

/* Positional argument pos or keyword name; NULL if absent. */
static jj_val *arg(const fargs *a, int pos, const char *name) {
    if (name)
        for (int k = 0; k < a->nkw; k++)
            if (!strcmp(a->kwn[k], name)) return &a->kwv[k];
    if (pos >= 0 && pos < a->nargs) return &a->args[pos];
    return NULL;
}

static _Noreturn void need_str(jj_ctx *c, const jj_node *n, const char *what, jj_val v) {
    jj_err(c, n->line, "%s expects a string, got '%s'", what, jj_type_name(v));
}

/* ---- unicode helpers ---- */
static int32_t decode(const char *p, size_t n, size_t i, size_t *len) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p + i, (utf8proc_ssize_t)(n - i), &cp);
    if (k <= 0) { *len = 1; return (unsigned char)p[i]; }
    *len = (size_t)k;
    return cp;
}
static bool py_space(int32_t cp) {
    return (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202f || cp == 0x205f || cp == 0x3000;
}
static bool is_cased(int32_t cp) {
    utf8proc_category_t k = utf8proc_category(cp);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}
static void put_cp(jj_ctx *c, jj_buf *b, int32_t cp) {
    utf8proc_uint8_t e[4];
    utf8proc_ssize_t k = utf8proc_encode_char(cp, e);
    jj_buf_put(c, b, (const char *)e, (size_t)k);
}

enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAP, CASE_JTITLE };
static jj_val change_case(jj_ctx *c, const jj_str *s, int mode);
jj_val jj_str_case(jj_ctx *c, const jj_str *s, int mode) {
    static const int map[] = {CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAP};
    return change_case(c, s, map[mode]);
}
static jj_val change_case(jj_ctx *c, const jj_str *s, int mode) {
    jj_buf b = {0};
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < s->n;) {
        size_t len;
        int32_t cp = decode(s->p, s->n, i, &len);
        int32_t o = cp;
        switch (mode) {
        case CASE_UPPER: o = utf8proc_toupper(cp); break;
        case CASE_LOWER: o = utf8proc_tolower(cp); break;
        case CASE_CAP: o = first ? utf8proc_toupper(cp) : utf8proc_tolower(cp); break;
        case CASE_TITLE:
            o = is_cased(cp) ? (prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp)) : cp;
            prev_cased = is_cased(cp);
            break;
        case CASE_JTITLE: /* jinja's title: words begin after - whitespace ( { [ < */
            o = prev_cased ? utf8proc_tolower(cp) : utf8proc_toupper(cp);
            prev_cased = !(py_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<');
            break;
        }
        first = false;
        put_cp(c, &b, o);
        i += len;
    }
    return jj_buf_val(c, &b);
}

/* strip chars (NULL: whitespace) from the left (1), right (2) or both (3). */
jj_val jj_str_strip(jj_ctx *c, const jj_str *s, const jj_str *chars, int side) {
    size_t a = 0, e = s->n;
    for (;;) {
        if (!(side & 1) || a >= e) break;
        size_t len;
        int32_t cp = decode(s->p, s->n, a, &len);
        bool hit = chars ? memmem(chars->p, chars->n, s->p + a, len) != NULL : py_space(cp);
        if (!hit) break;
        a += len;
    }
    while ((side & 2) && e > a) {
        size_t st = e - 1;
        while (st > a && ((unsigned char)s->p[st] & 0xC0) == 0x80) st--;
        size_t len;
        int32_t cp = decode(s->p, s->n, st, &len);
        bool hit = chars ? memmem(chars->p, chars->n, s->p + st, len) != NULL : py_space(cp);
        if (!hit) break;
        e = st;
    }
    return jj_strv(c, s->p + a, e - a);
}

jj_val jj_str_split(jj_ctx *c, const jj_node *n, const jj_str *s, jj_val *sepv, int64_t maxsplit, bool from_right) {
    jj_val r = jj_new_list(c, 0);
    if (!sepv || sepv->t == V_NONE) {
        /* runs of whitespace; no empty strings */
        if (from_right) {
            jj_val tmp = jj_new_list(c, 0);
            size_t e = s->n;
            int64_t done = 0;
            for (;;) {
                while (e > 0 && py_space((unsigned char)s->p[e - 1])) e--;
                if (e == 0) break;
                size_t st = e;
                if (maxsplit >= 0 && done >= maxsplit) st = 0;
                else while (st > 0 && !py_space((unsigned char)s->p[st - 1])) st--;
                jj_list_push(c, tmp.u.l, jj_strv(c, s->p + (maxsplit >= 0 && done >= maxsplit ? 0 : st),
                                                   e - (maxsplit >= 0 && done >= maxsplit ? 0 : st)));
                done++;
                e = st;
            }
            for (size_t i = tmp.u.l->n; i-- > 0;) jj_list_push(c, r.u.l, tmp.u.l->v[i]);
            return r;
        }
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            size_t len;
            while (i < s->n && py_space(decode(s->p, s->n, i, &len))) i += len;
            if (i >= s->n) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                size_t e = s->n;
                while (e > i && py_space((unsigned char)s->p[e - 1])) e--;
                jj_list_push(c, r.u.l, jj_strv(c, s->p + i, e - i));
                break;
            }
            size_t st = i;
            while (i < s->n && !py_space(decode(s->p, s->n, i, &len))) i += len;
            jj_list_push(c, r.u.l, jj_strv(c, s->p + st, i - st));
            done++;
        }
        return r;
    }
    if (sepv->t != V_STR) need_str(c, n, "split", *sepv);
    const jj_str *sep = sepv->u.s;
    if (sep->n == 0) jj_err(c, n->line, "empty separator");
    if (from_right) {
        jj_val tmp = jj_new_list(c, 0);
        size_t e = s->n;
        int64_t done = 0;
        for (;;) {
            const char *hit = NULL;
            if (!(maxsplit >= 0 && done >= maxsplit) && e >= sep->n)
                for (size_t k = e - sep->n + 1; k-- > 0;)
                    if (!memcmp(s->p + k, sep->p, sep->n)) { hit = s->p + k; break; }
            if (!hit) { jj_list_push(c, tmp.u.l, jj_strv(c, s->p, e)); break; }
            size_t k = (size_t)(hit - s->p);
            jj_list_push(c, tmp.u.l, jj_strv(c, hit + sep->n, e - k - sep->n));
            e = k;
            done++;
        }
        for (size_t i = tmp.u.l->n; i-- > 0;) jj_list_push(c, r.u.l, tmp.u.l->v[i]);
        return r;
    }
    size_t i = 0;
    int64_t done = 0;
    for (;;) {
        const char *hit = (maxsplit >= 0 && done >= maxsplit) ? NULL : memmem(s->p + i, s->n - i, sep->p, sep->n);
        if (!hit) { jj_list_push(c, r.u.l, jj_strv(c, s->p + i, s->n - i)); break; }
        jj_list_push(c, r.u.l, jj_strv(c, s->p + i, (size_t)(hit - (s->p + i))));
        i = (size_t)(hit - s->p) + sep->n;
        done++;
    }
    return r;
}

jj_val jj_str_replace(jj_ctx *c, const jj_str *s, const jj_str *old, const jj_str *new_, int64_t count) {
    jj_buf b = {0};
    size_t i = 0;
    int64_t done = 0;
    if (old->n == 0) {
        for (size_t k = 0; k <= s->n; k++) {
            if (count < 0 || done < count) { jj_buf_put(c, &b, new_->p, new_->n); done++; }
            if (k < s->n) jj_buf_put(c, &b, s->p + k, 1);
        }
        return jj_buf_val(c, &b);
    }
    for (;;) {
        const char *hit = (count >= 0 && done >= count) ? NULL : memmem(s->p + i, s->n - i, old->p, old->n);
        if (!hit) { jj_buf_put(c, &b, s->p + i, s->n - i); break; }
        jj_buf_put(c, &b, s->p + i, (size_t)(hit - (s->p + i)));
        jj_buf_put(c, &b, new_->p, new_->n);
        i = (size_t)(hit - s->p) + old->n;
        done++;
    }
    return jj_buf_val(c, &b);
}

static jj_val join(jj_ctx *c, const jj_node *n, jj_val seq, const jj_str *sep, jj_val *attr) {
    jj_list *l = jj_iter(c, n->line, seq);
    jj_buf b = {0};
    for (size_t i = 0; i < l->n; i++) {
        if (i && sep) jj_buf_put(c, &b, sep->p, sep->n);
        jj_val v = l->v[i];
        if (attr) v = jj_getitem(c, n->line, v, *attr);
        jj_to_str(c, &b, v);
    }
    return jj_buf_val(c, &b);
}

/* jinja's attribute lookup for filters: "a.b" or an int index. */
static jj_val attr_path(jj_ctx *c, int line, jj_val v, jj_val attr) {
    if (attr.t != V_STR) return jj_getitem(c, line, v, attr);
    const char *p = attr.u.s->p;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        jj_val key = jj_strv(c, p, len);
        char *end;
        long long iv = strtoll(key.u.s->p, &end, 10);
        if (len && *end == 0) key = jj_int(iv);
        if (v.t == V_UNDEF) return v;
        v = jj_getitem(c, line, v, key);
        if (!dot) return v;
        p = dot + 1;
    }
}

/* ---- sorting ---- */
typedef struct sort_ctx { jj_ctx *c; int line; bool cs; jj_val *attr; bool by_value; } sort_ctx;
static sort_ctx *g_sort;
static jj_val sort_key(jj_val v) {
    sort_ctx *s = g_sort;
    if (s->by_value && v.t == V_LIST && v.u.l->n == 2) v = v.u.l->v[1];
    else if (s->attr) v = attr_path(s->c, s->line, v, *s->attr);
    if (!s->cs && v.t == V_STR) v = change_case(s->c, v.u.s, CASE_LOWER);
    return v;
}
static int sort_cmp(const void *x, const void *y) {
    return jj_cmp(g_sort->c, g_sort->line, sort_key(*(const jj_val *)x), sort_key(*(const jj_val *)y));
}
static void stable_sort(jj_val *v, size_t n) { /* insertion-merge: n is small in templates */
    if (n < 2) return;
    size_t h = n / 2;
    stable_sort(v, h);
    stable_sort(v + h, n - h);
    jj_val *tmp = malloc(n * sizeof *tmp);
    if (!tmp) jj_err(g_sort->c, g_sort->line, "out of memory");
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = sort_cmp(&v[j], &v[i]) < 0 ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *tmp);
    free(tmp);
}
static jj_val sorted(jj_ctx *c, int line, jj_list *l, bool reverse, bool cs, jj_val *attr, bool by_value) {
    sort_ctx s = {c, line, cs, attr, by_value};
    sort_ctx *saved = g_sort;
    g_sort = &s;
    jj_val r = jj_new_list(c, l->n);
    for (size_t i = 0; i < l->n; i++) jj_list_push(c, r.u.l, l->v[i]);
    stable_sort(r.u.l->v, r.u.l->n);
    if (reverse)
        for (size_t i = 0; i < r.u.l->n / 2; i++) {
            jj_val t = r.u.l->v[i];
            r.u.l->v[i] = r.u.l->v[r.u.l->n - 1 - i];
            r.u.l->v[r.u.l->n - 1 - i] = t;
        }
    g_sort = saved;
    return r;
}

/* ---- tests ---- */
static const char *TESTS[] = {"defined", "undefined", "none", "string", "number", "integer", "float",
    "mapping", "iterable", "sequence", "boolean", "true", "false", "callable", "equalto", "eq", "==",
    "ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "lessthan", "greaterthan", "in", "odd",
    "even", "divisibleby", "lower", "upper", "sameas", "escaped", NULL};

bool jj_has_test(const char *name) {
    for (int i = 0; TESTS[i]; i++)
        if (!strcmp(TESTS[i], name)) return true;
    return false;
}

bool jj_call_test(jj_ctx *c, const jj_node *n, const char *t, jj_val v, jj_val *args, int nargs) {
    jj_val a0 = nargs > 0 ? args[0] : jj_undef(c, "missing test argument");
    if (!strcmp(t, "defined")) return v.t != V_UNDEF;
    if (!strcmp(t, "undefined")) return v.t == V_UNDEF;
    if (!strcmp(t, "none")) return v.t == V_NONE;
    if (!strcmp(t, "string")) return v.t == V_STR;
    if (!strcmp(t, "number")) return v.t == V_INT || v.t == V_FLOAT || v.t == V_BOOL;
    if (!strcmp(t, "integer")) return v.t == V_INT;
    if (!strcmp(t, "float")) return v.t == V_FLOAT;
    if (!strcmp(t, "mapping")) return v.t == V_DICT;
    if (!strcmp(t, "iterable")) return v.t == V_STR || v.t == V_LIST || v.t == V_DICT || v.t == V_UNDEF;
    if (!strcmp(t, "sequence")) return v.t == V_STR || v.t == V_LIST || v.t == V_DICT;
    if (!strcmp(t, "boolean")) return v.t == V_BOOL;
    if (!strcmp(t, "true")) return v.t == V_BOOL && v.u.b;
    if (!strcmp(t, "false")) return v.t == V_BOOL && !v.u.b;
    if (!strcmp(t, "callable")) return v.t == V_MACRO || v.t == V_FUNC || v.t == V_METHOD;
    if (!strcmp(t, "escaped")) return false;
    if (!strcmp(t, "equalto") || !strcmp(t, "eq") || !strcmp(t, "==")) return jj_eq(v, a0);
    if (!strcmp(t, "ne") || !strcmp(t, "!=")) return !jj_eq(v, a0);
    if (!strcmp(t, "sameas")) return jj_eq(v, a0) && v.t == a0.t;
    if (!strcmp(t, "lt") || !strcmp(t, "<") || !strcmp(t, "lessthan")) return jj_cmp(c, n->line, v, a0) < 0;
    if (!strcmp(t, "le") || !strcmp(t, "<=")) return jj_cmp(c, n->line, v, a0) <= 0;
    if (!strcmp(t, "gt") || !strcmp(t, ">") || !strcmp(t, "greaterthan")) return jj_cmp(c, n->line, v, a0) > 0;
    if (!strcmp(t, "ge") || !strcmp(t, ">=")) return jj_cmp(c, n->line, v, a0) >= 0;
    if (!strcmp(t, "in")) {
        if (a0.t == V_STR && v.t == V_STR) return memmem(a0.u.s->p, a0.u.s->n, v.u.s->p, v.u.s->n) != NULL;
        if (a0.t == V_LIST) { for (size_t i = 0; i < a0.u.l->n; i++) if (jj_eq(a0.u.l->v[i], v)) return true; return false; }
        if (a0.t == V_DICT) return jj_dict_get(a0.u.d, v) != NULL;
        return false;
    }
    if (!strcmp(t, "odd") || !strcmp(t, "even") || !strcmp(t, "divisibleby")) {
        if (v.t != V_INT) jj_err(c, n->line, "test '%s' needs an integer, got '%s'", t, jj_type_name(v));
        if (t[0] == 'o') return (v.u.i % 2) != 0;
        if (t[0] == 'e') return (v.u.i % 2) == 0;
        if (a0.t != V_INT || a0.u.i == 0) jj_err(c, n->line, "divisibleby needs a non-zero integer");
        return v.u.i % a0.u.i == 0;
    }
    if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        if (v.t != V_STR) return false;
        bool any = false;
        for (size_t i = 0; i < v.u.s->n;) {
            size_t len;
            int32_t cp = decode(v.u.s->p, v.u.s->n, i, &len);
            if (is_cased(cp)) {
                any = true;
                if (t[0] == 'l' ? utf8proc_tolower(cp) != cp : utf8proc_toupper(cp) != cp) return false;
            }
            i += len;
        }
        return any;
    }
    jj_err(c, n->line, "unknown test '%s'", t);
}

/* ---- filters ---- */
static const char *FILTERS[] = {"trim", "tojson", "length", "count", "join", "items", "selectattr",
    "rejectattr", "select", "reject", "map", "first", "last", "default", "d", "upper", "lower",
    "capitalize", "title", "replace", "indent", "list", "string", "int", "float", "abs", "round",
    "sort", "unique", "reverse", "batch", "safe", "escape", "e", "forceescape", "wordcount",
    "dictsort", "min", "max", "sum", "attr", "format", "center", "striptags", "truncate", "pprint",
    "urlencode", "wordwrap", "filesizeformat", "xmlattr", "slice", "groupby", "random", "urlize",
    "tojson", "bool", NULL};

bool jj_has_filter(const char *name) {
    for (int i = 0; FILTERS[i]; i++)
        if (!strcmp(FILTERS[i], name)) return true;
    return false;
}

jj_val jj_html_escape(jj_ctx *c, const jj_str *s) {
    jj_buf b = {0};
    for (size_t i = 0; i < s->n; i++) {
        switch (s->p[i]) {
        case '&': jj_buf_puts(c, &b, "&amp;"); break;
        case '<': jj_buf_puts(c, &b, "&lt;"); break;
        case '>': jj_buf_puts(c, &b, "&gt;"); break;
        case '"': jj_buf_puts(c, &b, "&#34;"); break;
        case '\'': jj_buf_puts(c, &b, "&#39;"); break;
        default: jj_buf_put(c, &b, s->p + i, 1);
        }
    }
    jj_val r = jj_buf_val(c, &b);
    r.safe = 1;
    return r;
}

/* Lines as Python's str.splitlines() (\n, \r\n, \r). */
static jj_list *splitlines(jj_ctx *c, const jj_str *s) {
    jj_list *l = jj_new_list(c, 0).u.l;
    size_t st = 0, i = 0;
    while (i < s->n) {
        if (s->p[i] == '\n' || s->p[i] == '\r') {
            jj_list_push(c, l, jj_strv(c, s->p + st, i - st));
            if (s->p[i] == '\r' && i + 1 < s->n && s->p[i + 1] == '\n') i++;
            st = ++i;
        } else {
            i++;
        }
    }
    if (st < s->n) jj_list_push(c, l, jj_strv(c, s->p + st, s->n - st));
    return l;
}

static jj_val select_common(jj_ctx *c, const jj_node *n, jj_val in, const fargs *a, bool by_attr, bool keep) {
    jj_list *l = jj_truthy(in) ? jj_iter(c, n->line, in) : jj_new_list(c, 0).u.l; /* jinja2: `if seq:` */
    jj_val r = jj_new_list(c, 0);
    int k = 0;
    jj_val attr = {0};
    if (by_attr) {
        if (a->nargs < 1) jj_err(c, n->line, "%s needs an attribute name", n->name);
        attr = a->args[k++];
    }
    const char *test = NULL;
    if (a->nargs > k) {
        if (a->args[k].t != V_STR) jj_err(c, n->line, "%s: test name must be a string", n->name);
        test = a->args[k++].u.s->p;
        if (!jj_has_test(test)) jj_err(c, n->line, "unknown test '%s'", test);
    }
    for (size_t i = 0; i < l->n; i++) {
        jj_val v = by_attr ? attr_path(c, n->line, l->v[i], attr) : l->v[i];
        bool t = test ? jj_call_test(c, n, test, v, a->args + k, a->nargs - k) : jj_truthy(v);
        if (t == keep) jj_list_push(c, r.u.l, l->v[i]);
    }
    return r;
}

static int64_t to_int(jj_val v, int64_t dflt, bool *ok) {
    *ok = true;
    switch (v.t) {
    case V_INT: return v.u.i;
    case V_BOOL: return v.u.b;
    case V_FLOAT: return (int64_t)v.u.f;
    case V_STR: {
        char *end;
        char *tmp = strndup(v.u.s->p, v.u.s->n);
        if (!tmp) break;
        long long x = strtoll(tmp, &end, 10);
        bool good = *tmp && *end == 0;
        if (!good) {
            double d = strtod(tmp, &end);
            if (*tmp && *end == 0 && isfinite(d)) { x = (long long)d; good = true; }
        }
        free(tmp);
        if (good) return x;
        break;
    }
    default: break;
    }
    *ok = false;
    return dflt;
}

static jj_str *str_arg(jj_ctx *c, const jj_node *n, jj_val *v, const char *what) {
    if (!v) jj_err(c, n->line, "%s: missing argument", what);
    if (v->t != V_STR) need_str(c, n, what, *v);
    return v->u.s;
}

jj_val jj_call_filter(jj_ctx *c, const jj_node *n, const char *f, jj_val in, jj_val *args,
                      int nargs, const char **kwn, jj_val *kwv, int nkw) {
    fargs A = {args, nargs, kwn, kwv, nkw};
    const fargs *a = &A;
    int line = n->line;
    /* unknown names fail when reached, as in jinja2 3.x (not at parse time) */
    if (!jj_has_filter(f)) jj_err(c, line, "unknown filter '%s'", f);

    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        jj_val *dv = arg(a, 0, "default_value"), *bl = arg(a, 1, "boolean");
        bool use = in.t == V_UNDEF || (bl && jj_truthy(*bl) && !jj_truthy(in));
        return use ? (dv ? *dv : jj_cstr(c, "")) : in;
    }
    if (!strcmp(f, "safe")) {
        jj_val r = {.t = V_STR, .u.s = jj_str_of(c, in)};
        r.safe = 1;
        return r;
    }
    if ((!strcmp(f, "escape") || !strcmp(f, "e")) && in.t == V_STR && in.safe) return in;
    if (!strcmp(f, "length") || !strcmp(f, "count")) return jj_int(jj_len(c, line, in));
    if (!strcmp(f, "string")) return (jj_val){.t = V_STR, .u.s = jj_str_of(c, in)};
    if (!strcmp(f, "list")) {
        jj_list *l = jj_iter(c, line, in);
        jj_val r = jj_new_list(c, l->n);
        for (size_t i = 0; i < l->n; i++) jj_list_push(c, r.u.l, l->v[i]);
        return r;
    }
    if (!strcmp(f, "tojson")) {
        jj_val *ea = arg(a, 0, "ensure_ascii"), *ind = arg(a, 1, "indent"), *sep = arg(a, 2, "separators"),
               *sk = arg(a, 3, "sort_keys");
        int indent = -1;
        if (ind && ind->t != V_NONE) {
            if (ind->t != V_INT) jj_err(c, line, "tojson: indent must be an integer");
            indent = (int)ind->u.i;
        }
        const char *isep = indent >= 0 ? "," : ", ", *ksep = ": ";
        if (sep && sep->t == V_LIST && sep->u.l->n == 2 && sep->u.l->v[0].t == V_STR && sep->u.l->v[1].t == V_STR) {
            isep = sep->u.l->v[0].u.s->p;
            ksep = sep->u.l->v[1].u.s->p;
        }
        if (in.t == V_UNDEF) jj_err(c, line, "Object of type Undefined is not JSON serializable");
        jj_buf b = {0};
        jj_tojson(c, line, &b, in, ea && jj_truthy(*ea), indent, isep, ksep, sk && jj_truthy(*sk), 0);
        return jj_buf_val(c, &b);
    }
    if (!strcmp(f, "items")) {
        jj_val r = jj_new_list(c, 0);
        if (in.t == V_UNDEF) return r;
        if (in.t != V_DICT && in.t != V_NS) jj_err(c, line, "items: expected a mapping, got '%s'", jj_type_name(in));
        for (size_t i = 0; i < in.u.d->n; i++) {
            jj_val t = jj_new_list(c, 2);
            t.tuple = 1;
            jj_list_push(c, t.u.l, in.u.d->k[i]);
            jj_list_push(c, t.u.l, in.u.d->v[i]);
            jj_list_push(c, r.u.l, t);
        }
        return r;
    }
    if (!strcmp(f, "join")) {
        jj_val *sep = arg(a, 0, "d"), *attr = arg(a, 1, "attribute");
        jj_str *s = sep ? jj_str_of(c, *sep) : NULL;
        return join(c, n, in, s, attr);
    }
    if (!strcmp(f, "selectattr")) return select_common(c, n, in, a, true, true);
    if (!strcmp(f, "rejectattr")) return select_common(c, n, in, a, true, false);
    if (!strcmp(f, "select")) return select_common(c, n, in, a, false, true);
    if (!strcmp(f, "reject")) return select_common(c, n, in, a, false, false);
    if (!strcmp(f, "map")) {
        jj_list *l = jj_truthy(in) ? jj_iter(c, line, in) : jj_new_list(c, 0).u.l;
        jj_val r = jj_new_list(c, l->n);
        jj_val *attr = arg(a, -1, "attribute");
        if (attr) {
            jj_val *dflt = arg(a, -1, "default");
            for (size_t i = 0; i < l->n; i++) {
                jj_val v = attr_path(c, line, l->v[i], *attr);
                if (v.t == V_UNDEF && dflt) v = *dflt;
                jj_list_push(c, r.u.l, v);
            }
            return r;
        }
        if (nargs < 1 || args[0].t != V_STR) jj_err(c, line, "map needs a filter name or attribute=");
        const char *fn = args[0].u.s->p;
        if (!jj_has_filter(fn)) jj_err(c, line, "unknown filter '%s'", fn);
        for (size_t i = 0; i < l->n; i++)
            jj_list_push(c, r.u.l, jj_call_filter(c, n, fn, l->v[i], args + 1, nargs - 1, kwn, kwv, nkw));
        return r;
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        jj_list *l = jj_iter(c, line, in);
        if (l->n == 0) return jj_undef(c, "No %s item, sequence was empty.", f);
        return f[0] == 'f' ? l->v[0] : l->v[l->n - 1];
    }
    if (!strcmp(f, "reverse")) {
        if (in.t == V_STR) {
            jj_list *l = jj_iter(c, line, in);
            jj_buf b = {0};
            for (size_t i = l->n; i-- > 0;) jj_buf_put(c, &b, l->v[i].u.s->p, l->v[i].u.s->n);
            return jj_buf_val(c, &b);
        }
        jj_list *l = jj_iter(c, line, in);
        jj_val r = jj_new_list(c, l->n);
        for (size_t i = l->n; i-- > 0;) jj_list_push(c, r.u.l, l->v[i]);
        return r;
    }
    if (!strcmp(f, "sort")) {
        jj_val *rev = arg(a, 0, "reverse"), *cs = arg(a, 1, "case_sensitive"), *attr = arg(a, 2, "attribute");
        return sorted(c, line, jj_iter(c, line, in), rev && jj_truthy(*rev), cs && jj_truthy(*cs), attr, false);
    }
    if (!strcmp(f, "dictsort")) {
        jj_val *cs = arg(a, 0, "case_sensitive"), *by = arg(a, 1, "by"), *rev = arg(a, 2, "reverse");
        jj_val items = jj_call_filter(c, n, "items", in, NULL, 0, NULL, NULL, 0);
        bool by_value = by && by->t == V_STR && !strcmp(by->u.s->p, "value");
        jj_val zero = jj_int(0);
        return sorted(c, line, items.u.l, rev && jj_truthy(*rev), cs && jj_truthy(*cs), by_value ? NULL : &zero, by_value);
    }
    if (!strcmp(f, "unique")) {
        jj_val *cs = arg(a, 0, "case_sensitive"), *attr = arg(a, 1, "attribute");
        jj_list *l = jj_iter(c, line, in);
        jj_val r = jj_new_list(c, 0), seen = jj_new_list(c, 0);
        for (size_t i = 0; i < l->n; i++) {
            jj_val k = attr ? attr_path(c, line, l->v[i], *attr) : l->v[i];
            if (!(cs && jj_truthy(*cs)) && k.t == V_STR) k = change_case(c, k.u.s, CASE_LOWER);
            bool dup = false;
            for (size_t j = 0; j < seen.u.l->n && !dup; j++) dup = jj_eq(seen.u.l->v[j], k);
            if (!dup) {
                jj_list_push(c, seen.u.l, k);
                jj_list_push(c, r.u.l, l->v[i]);
            }
        }
        return r;
    }
    if (!strcmp(f, "min") || !strcmp(f, "max")) {
        jj_val *cs = arg(a, 0, "case_sensitive"), *attr = arg(a, 1, "attribute");
        jj_list *l = jj_iter(c, line, in);
        if (l->n == 0) return jj_undef(c, "No aggregated item, sequence was empty.");
        jj_val s = sorted(c, line, l, false, cs && jj_truthy(*cs), attr, false);
        return f[1] == 'i' ? s.u.l->v[0] : s.u.l->v[s.u.l->n - 1];
    }
    if (!strcmp(f, "sum")) {
        jj_val *attr = arg(a, 0, "attribute"), *start = arg(a, 1, "start");
        jj_list *l = jj_iter(c, line, in);
        int64_t si = 0;
        double sf = 0;
        bool isf = false;
        if (start) { if (start->t == V_FLOAT) { isf = true; sf = start->u.f; } else si = start->u.i; }
        for (size_t i = 0; i < l->n; i++) {
            jj_val v = attr ? attr_path(c, line, l->v[i], *attr) : l->v[i];
            if (v.t == V_FLOAT) { if (!isf) { isf = true; sf = (double)si; } sf += v.u.f; }
            else if (v.t == V_INT || v.t == V_BOOL) { if (isf) sf += (double)(v.t == V_INT ? v.u.i : v.u.b); else si += v.t == V_INT ? v.u.i : v.u.b; }
            else jj_err(c, line, "sum: cannot add '%s'", jj_type_name(v));
        }
        return isf ? jj_float(sf) : jj_int(si);
    }
    if (!strcmp(f, "batch")) {
        jj_val *cnt = arg(a, 0, "linecount"), *fill = arg(a, 1, "fill_with");
        if (!cnt || cnt->t != V_INT || cnt->u.i <= 0) jj_err(c, line, "batch needs a positive count");
        jj_list *l = jj_iter(c, line, in);
        jj_val r = jj_new_list(c, 0), cur = jj_new_list(c, 0);
        for (size_t i = 0; i < l->n; i++) {
            jj_list_push(c, cur.u.l, l->v[i]);
            if ((int64_t)cur.u.l->n == cnt->u.i) { jj_list_push(c, r.u.l, cur); cur = jj_new_list(c, 0); }
        }
        if (cur.u.l->n) {
            if (fill && fill->t != V_NONE) while ((int64_t)cur.u.l->n < cnt->u.i) jj_list_push(c, cur.u.l, *fill);
            jj_list_push(c, r.u.l, cur);
        }
        return r;
    }
    if (!strcmp(f, "attr")) return jj_getattr(c, line, in, str_arg(c, n, arg(a, 0, "name"), "attr")->p, 0);
    if (!strcmp(f, "abs")) {
        if (in.t == V_INT) return jj_int(in.u.i < 0 ? -in.u.i : in.u.i);
        if (in.t == V_FLOAT) return jj_float(fabs(in.u.f));
        if (in.t == V_BOOL) return jj_int(in.u.b);
        jj_err(c, line, "bad operand type for abs(): '%s'", jj_type_name(in));
    }
    if (!strcmp(f, "int")) {
        jj_val *dv = arg(a, 0, "default");
        bool ok;
        int64_t x = to_int(in, 0, &ok);
        return ok ? jj_int(x) : (dv ? *dv : jj_int(0));
    }
    if (!strcmp(f, "float")) {
        jj_val *dv = arg(a, 0, "default");
        if (in.t == V_FLOAT) return in;
        if (in.t == V_INT || in.t == V_BOOL) return jj_float(in.t == V_INT ? (double)in.u.i : in.u.b);
        if (in.t == V_STR) {
            char *end;
            double d = strtod(in.u.s->p, &end);
            if (in.u.s->n && *end == 0) return jj_float(d);
        }
        return dv ? *dv : jj_float(0.0);
    }
    if (!strcmp(f, "round")) {
        jj_val *pr = arg(a, 0, "precision"), *me = arg(a, 1, "method");
        int p = pr && pr->t == V_INT ? (int)pr->u.i : 0;
        const char *m = me && me->t == V_STR ? me->u.s->p : "common";
        if (in.t != V_INT && in.t != V_FLOAT && in.t != V_BOOL) jj_err(c, line, "round: expected a number");
        double x = in.t == V_FLOAT ? in.u.f : in.t == V_INT ? (double)in.u.i : in.u.b;
        if (!strcmp(m, "common")) {
            if (in.t != V_FLOAT) return jj_int(in.t == V_INT ? in.u.i : in.u.b);
            char buf[400];
            snprintf(buf, sizeof buf, "%.*f", p < 0 ? 0 : p > 300 ? 300 : p, x);
            return jj_float(strtod(buf, NULL));
        }
        double sc = pow(10, p);
        if (!strcmp(m, "floor")) return jj_float(floor(x * sc) / sc);
        if (!strcmp(m, "ceil")) return jj_float(ceil(x * sc) / sc);
        jj_err(c, line, "round: method must be common, ceil or floor");
    }

    /* string filters: the input is converted with str() */
    jj_str *s = jj_str_of(c, in);
    if (!strcmp(f, "trim")) {
        jj_val *ch = arg(a, 0, "chars");
        return jj_str_strip(c, s, ch && ch->t != V_NONE ? str_arg(c, n, ch, "trim") : NULL, 3);
    }
    if (!strcmp(f, "upper")) return change_case(c, s, CASE_UPPER);
    if (!strcmp(f, "lower")) return change_case(c, s, CASE_LOWER);
    if (!strcmp(f, "capitalize")) return change_case(c, s, CASE_CAP);
    if (!strcmp(f, "title")) return change_case(c, s, CASE_JTITLE);
    if (!strcmp(f, "escape") || !strcmp(f, "e") || !strcmp(f, "forceescape")) return jj_html_escape(c, s);
    if (!strcmp(f, "replace")) {
        jj_val *cnt = arg(a, 2, "count"), *nw = arg(a, 1, "new");
        if (!nw) jj_err(c, line, "replace: missing argument 'new'");
        return jj_str_replace(c, s, str_arg(c, n, arg(a, 0, "old"), "replace"), jj_str_of(c, *nw),
                       cnt && cnt->t == V_INT ? cnt->u.i : -1);
    }
    if (!strcmp(f, "wordcount")) {
        jj_val w = jj_str_split(c, n, s, NULL, -1, false);
        return jj_int((int64_t)w.u.l->n);
    }
    if (!strcmp(f, "center")) {
        jj_val *wv = arg(a, 0, "width");
        int64_t w = wv && wv->t == V_INT ? wv->u.i : 80, len = (int64_t)jj_utf8_len(s->p, s->n);
        if (w <= len) return (jj_val){.t = V_STR, .u.s = s};
        int64_t pad = w - len, left = pad / 2 + (pad & w & 1);
        jj_buf b = {0};
        for (int64_t i = 0; i < left; i++) jj_buf_puts(c, &b, " ");
        jj_buf_put(c, &b, s->p, s->n);
        for (int64_t i = 0; i < pad - left; i++) jj_buf_puts(c, &b, " ");
        return jj_buf_val(c, &b);
    }
    if (!strcmp(f, "indent")) {
        jj_val *wv = arg(a, 0, "width"), *fv = arg(a, 1, "first"), *bv = arg(a, 2, "blank");
        jj_buf ind = {0};
        if (wv && wv->t == V_STR) jj_buf_put(c, &ind, wv->u.s->p, wv->u.s->n);
        else for (int64_t i = 0; i < (wv && wv->t == V_INT ? wv->u.i : 4); i++) jj_buf_puts(c, &ind, " ");
        jj_buf tmp = {0};
        jj_buf_put(c, &tmp, s->p, s->n);
        jj_buf_puts(c, &tmp, "\n");
        jj_list *lines = splitlines(c, jj_buf_val(c, &tmp).u.s);
        jj_buf b = {0};
        if (fv && jj_truthy(*fv)) jj_buf_put(c, &b, ind.p, ind.n);
        for (size_t i = 0; i < lines->n; i++) {
            jj_str *ln = lines->v[i].u.s;
            if (i) {
                jj_buf_puts(c, &b, "\n");
                if (ln->n || (bv && jj_truthy(*bv))) jj_buf_put(c, &b, ind.p, ind.n);
            }
            jj_buf_put(c, &b, ln->p, ln->n);
        }
        return jj_buf_val(c, &b);
    }
    if (!strcmp(f, "format")) {
        jj_val t = jj_new_list(c, (size_t)nargs);
        t.tuple = 1;
        for (int i = 0; i < nargs; i++) jj_list_push(c, t.u.l, args[i]);
        jj_buf b = {0};
        size_t k = 0;
        for (size_t i = 0; i < s->n; i++) {
            char ch = s->p[i];
            if (ch != '%' || i + 1 >= s->n) { jj_buf_put(c, &b, &ch, 1); continue; }
            char fc = s->p[++i];
            if (fc == '%') { jj_buf_puts(c, &b, "%"); continue; }
            jj_val v = k < t.u.l->n ? t.u.l->v[k] : jj_none();
            k++;
            if (fc == 'r') jj_repr(c, &b, v);
            else jj_to_str(c, &b, v);
        }
        return jj_buf_val(c, &b);
    }
    jj_err(c, line, "unsupported filter '%s'", f);
}
