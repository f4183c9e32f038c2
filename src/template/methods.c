/* methods.c: the Python methods templates call on values: str (startswith,
 * split, strip, replace, ...), dict (items, keys, values, get), list (index,
 * count) and loop.cycle. Mutating methods raise the same SecurityError that
 * jinja2's ImmutableSandboxedEnvironment raises under transformers. */
#include "template/jinja.h"

#include <string.h>

static const char *STR_METHODS[] = {"startswith", "endswith", "split", "rsplit", "strip", "lstrip",
    "rstrip", "replace", "upper", "lower", "title", "capitalize", "find", "rfind", "index", "count",
    "format", "join", "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper", "splitlines",
    NULL};
static const char *DICT_METHODS[] = {"items", "keys", "values", "get", NULL};
static const char *DICT_UNSAFE[] = {"update", "pop", "popitem", "setdefault", "clear", NULL};
static const char *LIST_METHODS[] = {"index", "count", NULL};
static const char *LIST_UNSAFE[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort",
                                    "clear", NULL};

static bool in_list(const char *const *l, const char *s) {
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], s)) return true;
    return false;
}

bool jj_is_method(jj_val obj, const char *name) {
    switch (obj.t) {
    case V_STR: return in_list(STR_METHODS, name);
    case V_DICT: return in_list(DICT_METHODS, name) || in_list(DICT_UNSAFE, name);
    case V_LIST: return in_list(LIST_METHODS, name) || in_list(LIST_UNSAFE, name);
    case V_LOOP: return !strcmp(name, "cycle");
    default: return false;
    }
}

static jj_val *argp(jj_val *args, int nargs, const char **kwn, jj_val *kwv, int nkw, int pos, const char *name) {
    for (int k = 0; k < nkw; k++)
        if (name && !strcmp(kwn[k], name)) return &kwv[k];
    return pos < nargs ? &args[pos] : NULL;
}

static jj_str *need_s(jj_ctx *c, const jj_node *n, jj_val *v, const char *m) {
    if (!v) jj_err(c, n->line, "%s() missing an argument", m);
    if (v->t != V_STR) jj_err(c, n->line, "%s() argument must be str, not '%s'", m, jj_type_name(*v));
    return v->u.s;
}

static int64_t find(const jj_str *s, const jj_str *sub, bool rev) {
    if (sub->n > s->n) return -1;
    if (rev) {
        for (size_t k = s->n - sub->n + 1; k-- > 0;)
            if (!memcmp(s->p + k, sub->p, sub->n)) return (int64_t)k;
        return -1;
    }
    const char *h = sub->n ? memmem(s->p, s->n, sub->p, sub->n) : s->p;
    return h ? (int64_t)(h - s->p) : -1;
}

static bool all_chars(const jj_str *s, int kind) {
    if (s->n == 0) return false;
    for (size_t i = 0; i < s->n; i++) {
        unsigned char ch = (unsigned char)s->p[i];
        bool ok = kind == 0 ? (ch >= '0' && ch <= '9')
                : kind == 1 ? ((ch | 32) >= 'a' && (ch | 32) <= 'z') || ch >= 0x80
                : kind == 2 ? ((ch | 32) >= 'a' && (ch | 32) <= 'z') || (ch >= '0' && ch <= '9') || ch >= 0x80
                            : (ch == ' ' || (ch >= 9 && ch <= 13));
        if (!ok) return false;
    }
    return true;
}

/* "{}" / "{0}" / "{name}" replacement fields (no format specs). */
static jj_val str_format(jj_ctx *c, const jj_node *n, const jj_str *s, jj_val *args, int nargs,
                         const char **kwn, jj_val *kwv, int nkw) {
    jj_buf b = {0};
    int auto_i = 0;
    for (size_t i = 0; i < s->n; i++) {
        char ch = s->p[i];
        if (ch == '{' && i + 1 < s->n && s->p[i + 1] == '{') { jj_buf_puts(c, &b, "{"); i++; continue; }
        if (ch == '}' && i + 1 < s->n && s->p[i + 1] == '}') { jj_buf_puts(c, &b, "}"); i++; continue; }
        if (ch != '{') { jj_buf_put(c, &b, &ch, 1); continue; }
        const char *e = memchr(s->p + i, '}', s->n - i);
        if (!e) jj_err(c, n->line, "format: single '{' encountered in format string");
        size_t fl = (size_t)(e - (s->p + i + 1));
        char field[128];
        snprintf(field, sizeof field, "%.*s", (int)(fl < 127 ? fl : 127), s->p + i + 1);
        jj_val v;
        if (!field[0]) v = auto_i < nargs ? args[auto_i++] : jj_none();
        else if (field[0] >= '0' && field[0] <= '9') { int k = atoi(field); v = k < nargs ? args[k] : jj_none(); }
        else {
            v = jj_none();
            for (int k = 0; k < nkw; k++) if (!strcmp(kwn[k], field)) v = kwv[k];
        }
        jj_to_str(c, &b, v);
        i = (size_t)(e - s->p);
    }
    return jj_buf_val(c, &b);
}

jj_val jj_call_method(jj_ctx *c, const jj_node *n, jj_val obj, const char *m, jj_val *args,
                      int nargs, const char **kwn, jj_val *kwv, int nkw, bool *found) {
    *found = true;
    int line = n->line;
#define ARG(i, nm) argp(args, nargs, kwn, kwv, nkw, i, nm)
    if (obj.t == V_STR) {
        const jj_str *s = obj.u.s;
        if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
            jj_val *p = ARG(0, NULL);
            bool suf = m[0] == 'e';
            if (p && p->t == V_LIST) {
                for (size_t i = 0; i < p->u.l->n; i++) {
                    jj_val e = p->u.l->v[i];
                    jj_str *x = need_s(c, n, &e, m);
                    if (x->n <= s->n && !memcmp(suf ? s->p + s->n - x->n : s->p, x->p, x->n)) return jj_bool(true);
                }
                return jj_bool(false);
            }
            jj_str *x = need_s(c, n, p, m);
            return jj_bool(x->n <= s->n && !memcmp(suf ? s->p + s->n - x->n : s->p, x->p, x->n));
        }
        if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
            jj_val *sep = ARG(0, "sep"), *mx = ARG(1, "maxsplit");
            return jj_str_split(c, n, s, sep, mx && mx->t == V_INT ? mx->u.i : -1, m[0] == 'r');
        }
        if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
            jj_val *ch = ARG(0, "chars");
            const jj_str *cs = ch && ch->t != V_NONE ? need_s(c, n, ch, m) : NULL;
            return jj_str_strip(c, s, cs, m[0] == 'l' ? 1 : m[0] == 'r' ? 2 : 3);
        }
        if (!strcmp(m, "replace")) {
            jj_val *cnt = ARG(2, "count");
            return jj_str_replace(c, s, need_s(c, n, ARG(0, NULL), m), need_s(c, n, ARG(1, NULL), m),
                                  cnt && cnt->t == V_INT ? cnt->u.i : -1);
        }
        if (!strcmp(m, "upper")) return jj_str_case(c, s, 0);
        if (!strcmp(m, "lower")) return jj_str_case(c, s, 1);
        if (!strcmp(m, "title")) return jj_str_case(c, s, 2);
        if (!strcmp(m, "capitalize")) return jj_str_case(c, s, 3);
        if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index")) {
            const jj_str *sub = need_s(c, n, ARG(0, NULL), m);
            int64_t k = find(s, sub, m[0] == 'r');
            if (k < 0 && m[0] == 'i') jj_err(c, line, "substring not found");
            return jj_int(k < 0 ? -1 : (int64_t)jj_utf8_len(s->p, (size_t)k));
        }
        if (!strcmp(m, "count")) {
            const jj_str *sub = need_s(c, n, ARG(0, NULL), m);
            if (sub->n == 0) return jj_int((int64_t)jj_utf8_len(s->p, s->n) + 1);
            int64_t k = 0;
            for (size_t i = 0; i + sub->n <= s->n;) {
                if (!memcmp(s->p + i, sub->p, sub->n)) { k++; i += sub->n; }
                else i++;
            }
            return jj_int(k);
        }
        if (!strcmp(m, "format")) return str_format(c, n, s, args, nargs, kwn, kwv, nkw);
        if (!strcmp(m, "join")) {
            jj_val *it = ARG(0, NULL);
            if (!it) jj_err(c, line, "join() takes exactly one argument");
            jj_list *l = jj_iter(c, line, *it);
            jj_buf b = {0};
            for (size_t i = 0; i < l->n; i++) {
                if (l->v[i].t != V_STR) jj_err(c, line, "sequence item %zu: expected str instance, %s found", i, jj_type_name(l->v[i]));
                if (i) jj_buf_put(c, &b, s->p, s->n);
                jj_buf_put(c, &b, l->v[i].u.s->p, l->v[i].u.s->n);
            }
            return jj_buf_val(c, &b);
        }
        if (!strcmp(m, "isdigit")) return jj_bool(all_chars(s, 0));
        if (!strcmp(m, "isalpha")) return jj_bool(all_chars(s, 1));
        if (!strcmp(m, "isalnum")) return jj_bool(all_chars(s, 2));
        if (!strcmp(m, "isspace")) return jj_bool(all_chars(s, 3));
        if (!strcmp(m, "islower") || !strcmp(m, "isupper")) {
            jj_val t = jj_str_case(c, s, m[2] == 'l' ? 1 : 0);
            bool cased = !jj_eq(jj_str_case(c, s, 0), jj_str_case(c, s, 1));
            return jj_bool(cased && jj_eq(t, obj));
        }
        if (!strcmp(m, "splitlines")) {
            jj_val r = jj_new_list(c, 0);
            size_t st = 0, i = 0;
            while (i < s->n) {
                if (s->p[i] == '\n' || s->p[i] == '\r') {
                    jj_list_push(c, r.u.l, jj_strv(c, s->p + st, i - st));
                    if (s->p[i] == '\r' && i + 1 < s->n && s->p[i + 1] == '\n') i++;
                    st = ++i;
                } else i++;
            }
            if (st < s->n) jj_list_push(c, r.u.l, jj_strv(c, s->p + st, s->n - st));
            return r;
        }
    } else if (obj.t == V_DICT) {
        jj_dict *d = obj.u.d;
        if (!strcmp(m, "items") || !strcmp(m, "keys") || !strcmp(m, "values")) {
            jj_val r = jj_new_list(c, d->n);
            for (size_t i = 0; i < d->n; i++) {
                if (m[0] == 'k') jj_list_push(c, r.u.l, d->k[i]);
                else if (m[0] == 'v') jj_list_push(c, r.u.l, d->v[i]);
                else {
                    jj_val t = jj_new_list(c, 2);
                    t.tuple = 1;
                    jj_list_push(c, t.u.l, d->k[i]);
                    jj_list_push(c, t.u.l, d->v[i]);
                    jj_list_push(c, r.u.l, t);
                }
            }
            return r;
        }
        if (!strcmp(m, "get")) {
            jj_val *k = ARG(0, NULL), *dv = ARG(1, NULL);
            if (!k) jj_err(c, line, "get expected at least 1 argument, got 0");
            jj_val *v = jj_dict_get(d, *k);
            return v ? *v : dv ? *dv : jj_none();
        }
        if (in_list(DICT_UNSAFE, m)) jj_err(c, line, "access to attribute '%s' of 'dict' object is unsafe.", m);
    } else if (obj.t == V_LIST) {
        if (!strcmp(m, "index") || !strcmp(m, "count")) {
            jj_val *x = ARG(0, NULL);
            if (!x) jj_err(c, line, "%s() takes exactly one argument", m);
            int64_t k = 0;
            for (size_t i = 0; i < obj.u.l->n; i++)
                if (jj_eq(obj.u.l->v[i], *x)) {
                    if (m[0] == 'i') return jj_int((int64_t)i);
                    k++;
                }
            if (m[0] == 'i') jj_err(c, line, "value is not in list");
            return jj_int(k);
        }
        if (in_list(LIST_UNSAFE, m)) jj_err(c, line, "access to attribute '%s' of 'list' object is unsafe.", m);
    } else if (obj.t == V_LOOP && !strcmp(m, "cycle")) {
        if (nargs == 0) jj_err(c, line, "no items for cycling given");
        return args[obj.u.loop->index0 % nargs];
    }
#undef ARG
    *found = false;
    return jj_none();
}
