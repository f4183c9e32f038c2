/* eval.c: walks the AST: expressions to values, statements to output.
 * Scoping follows jinja2: a for loop, macro call or with block opens a frame
 * whose assignments do not leak out (hence namespace()); if does not.
 * Attribute access x.y tries the attribute (methods) then the item, x['y']
 * the item then the attribute. Every evaluation step counts against
 * JJ_MAX_STEPS so that a runaway template stops with an error. */
#include "template/jinja.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { F_RANGE = 1, F_NAMESPACE, F_DICT, F_RAISE, F_STRFTIME };
enum { CTL_NONE = 0, CTL_BREAK, CTL_CONTINUE };

static void step(jj_ctx *c, int line) {
    if (++c->steps > JJ_MAX_STEPS)
        jj_err(c, line, "template exceeded %ld evaluation steps (runaway loop?)", (long)JJ_MAX_STEPS);
}

static jj_frame *new_frame(jj_ctx *c, jj_frame *parent) {
    jj_frame *f = jj_alloc(c->a, sizeof *f);
    f->parent = parent;
    return f;
}

static void set_var(jj_ctx *c, jj_frame *f, const char *name, jj_val v) {
    jj_dict_set(c, &f->vars, jj_cstr(c, name), v);
}

static jj_val lookup(jj_ctx *c, jj_frame *f, const char *name) {
    for (; f; f = f->parent) {
        jj_val *v = jj_dict_gets(&f->vars, name);
        if (v) return *v;
    }
    static const struct { const char *name; int fn; } builtins[] = {
        {"range", F_RANGE}, {"namespace", F_NAMESPACE}, {"dict", F_DICT},
        {"raise_exception", F_RAISE}, {"strftime_now", F_STRFTIME}, {NULL, 0}};
    for (int i = 0; builtins[i].name; i++)
        if (!strcmp(builtins[i].name, name)) return (jj_val){.t = V_FUNC, .u.fn = builtins[i].fn};
    return jj_undef(c, "'%s' is undefined", name);
}

static _Noreturn void undef_error(jj_ctx *c, int line, jj_val u) {
    jj_err(c, line, "%s", u.u.s ? u.u.s->p : "undefined value");
}

static const char *obj_desc(jj_val v) {
    switch (v.t) {
    case V_DICT: return "dict object";
    case V_LIST: return v.tuple ? "tuple object" : "list object";
    case V_STR: return "str object";
    case V_INT: return "int object";
    case V_FLOAT: return "float object";
    case V_BOOL: return "bool object";
    case V_NONE: return "None";
    default: return "object";
    }
}

jj_val jj_getattr(jj_ctx *c, int line, jj_val obj, const char *name, size_t n) {
    (void)n;
    switch (obj.t) {
    case V_UNDEF: undef_error(c, line, obj);
    case V_NS: {
        jj_val *v = jj_dict_gets(obj.u.d, name);
        if (v) return *v;
        break;
    }
    case V_LOOP: {
        jj_loop *L = obj.u.loop;
        int64_t len = (int64_t)L->items->n, i = L->index0;
        if (!strcmp(name, "index")) return jj_int(i + 1);
        if (!strcmp(name, "index0")) return jj_int(i);
        if (!strcmp(name, "first")) return jj_bool(i == 0);
        if (!strcmp(name, "last")) return jj_bool(i == len - 1);
        if (!strcmp(name, "length")) return jj_int(len);
        if (!strcmp(name, "revindex")) return jj_int(len - i);
        if (!strcmp(name, "revindex0")) return jj_int(len - i - 1);
        if (!strcmp(name, "depth")) return jj_int(1);
        if (!strcmp(name, "depth0")) return jj_int(0);
        if (!strcmp(name, "previtem"))
            return i > 0 ? L->items->v[i - 1] : jj_undef(c, "there is no previous item");
        if (!strcmp(name, "nextitem"))
            return i + 1 < len ? L->items->v[i + 1] : jj_undef(c, "there is no next item");
        if (!strcmp(name, "cycle")) break;
        return jj_undef(c, "'LoopContext object' has no attribute '%s'", name);
    }
    default: break;
    }
    if (jj_is_method(obj, name)) {
        jj_val m = {.t = V_METHOD};
        m.u.s = jj_cstr(c, name).u.s;
        m.self = jj_alloc(c->a, sizeof(jj_val));
        *m.self = obj;
        return m;
    }
    if (obj.t == V_DICT) {
        jj_val *v = jj_dict_gets(obj.u.d, name);
        if (v) return *v;
    }
    return jj_undef(c, "'%s' has no attribute '%s'", obj_desc(obj), name);
}

static int64_t norm_index(int64_t i, int64_t len) { return i < 0 ? i + len : i; }

jj_val jj_getitem(jj_ctx *c, int line, jj_val obj, jj_val key) {
    switch (obj.t) {
    case V_UNDEF: undef_error(c, line, obj);
    case V_DICT: case V_NS: {
        jj_val *v = jj_dict_get(obj.u.d, key);
        if (v) return *v;
        break;
    }
    case V_LIST:
        if (key.t == V_INT || key.t == V_BOOL) {
            int64_t i = norm_index(key.t == V_INT ? key.u.i : key.u.b, (int64_t)obj.u.l->n);
            if (i >= 0 && i < (int64_t)obj.u.l->n) return obj.u.l->v[i];
            return jj_undef(c, "%s has no element %lld", obj_desc(obj), (long long)key.u.i);
        }
        break;
    case V_STR:
        if (key.t == V_INT) {
            int64_t len = (int64_t)jj_utf8_len(obj.u.s->p, obj.u.s->n);
            int64_t i = norm_index(key.u.i, len);
            if (i >= 0 && i < len) {
                size_t a = jj_utf8_offset(obj.u.s->p, obj.u.s->n, i);
                size_t b = jj_utf8_offset(obj.u.s->p, obj.u.s->n, i + 1);
                return jj_strv(c, obj.u.s->p + a, b - a);
            }
            return jj_undef(c, "str object has no element %lld", (long long)key.u.i);
        }
        break;
    default: break;
    }
    if (key.t == V_STR) return jj_getattr(c, line, obj, key.u.s->p, key.u.s->n);
    jj_buf kb = {0};
    jj_repr(c, &kb, key);
    return jj_undef(c, "'%s' has no attribute '%s'", obj_desc(obj), kb.p ? kb.p : "");
}

static jj_val slice(jj_ctx *c, int line, jj_val obj, jj_val vs, jj_val ve, jj_val vst) {
    if (obj.t == V_UNDEF) undef_error(c, line, obj);
    if (obj.t != V_LIST && obj.t != V_STR) jj_err(c, line, "'%s' object is not subscriptable", jj_type_name(obj));
    for (int k = 0; k < 3; k++) {
        jj_val v = k == 0 ? vs : k == 1 ? ve : vst;
        if (v.t != V_NONE && v.t != V_INT && v.t != V_BOOL)
            jj_err(c, line, "slice indices must be integers or None");
    }
    int64_t len = obj.t == V_LIST ? (int64_t)obj.u.l->n : (int64_t)jj_utf8_len(obj.u.s->p, obj.u.s->n);
    int64_t st = vst.t == V_NONE ? 1 : vst.u.i;
    if (st == 0) jj_err(c, line, "slice step cannot be zero");
    int64_t a, b;
    if (st > 0) {
        a = vs.t == V_NONE ? 0 : norm_index(vs.u.i, len);
        b = ve.t == V_NONE ? len : norm_index(ve.u.i, len);
        a = a < 0 ? 0 : a > len ? len : a;
        b = b < 0 ? 0 : b > len ? len : b;
    } else {
        a = vs.t == V_NONE ? len - 1 : norm_index(vs.u.i, len);
        b = ve.t == V_NONE ? -1 : norm_index(ve.u.i, len);
        a = a < 0 ? -1 : a >= len ? len - 1 : a;
        b = b < 0 ? -1 : b >= len ? len - 1 : b;
    }
    if (obj.t == V_LIST) {
        jj_val r = jj_new_list(c, 0);
        r.tuple = obj.tuple;
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) jj_list_push(c, r.u.l, obj.u.l->v[i]);
        return r;
    }
    jj_buf out = {0};
    const char *p = obj.u.s->p;
    size_t n = obj.u.s->n;
    bool ascii = jj_utf8_len(p, n) == n;
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st) {
        if (ascii) jj_buf_put(c, &out, p + i, 1);
        else {
            size_t x = jj_utf8_offset(p, n, i), y = jj_utf8_offset(p, n, i + 1);
            jj_buf_put(c, &out, p + x, y - x);
        }
    }
    return jj_buf_val(c, &out);
}

/* ---- arithmetic ---- */
static bool numeric(jj_val v) { return v.t == V_INT || v.t == V_FLOAT || v.t == V_BOOL; }
static double as_f(jj_val v) { return v.t == V_FLOAT ? v.u.f : v.t == V_INT ? (double)v.u.i : v.u.b; }
static int64_t as_i(jj_val v) { return v.t == V_INT ? v.u.i : v.u.b; }

static _Noreturn void bad_operands(jj_ctx *c, int line, const char *op, jj_val a, jj_val b) {
    if (a.t == V_UNDEF) undef_error(c, line, a);
    if (b.t == V_UNDEF) undef_error(c, line, b);
    jj_err(c, line, "unsupported operand type(s) for %s: '%s' and '%s'", op, jj_type_name(a), jj_type_name(b));
}

static jj_val repeat(jj_ctx *c, int line, jj_val seq, int64_t k) {
    if (k < 0) k = 0;
    if (seq.t == V_STR) {
        if ((double)seq.u.s->n * (double)k > JJ_MAX_OUTPUT) jj_err(c, line, "string repetition too large");
        jj_buf b = {0};
        for (int64_t i = 0; i < k; i++) jj_buf_put(c, &b, seq.u.s->p, seq.u.s->n);
        return jj_buf_val(c, &b);
    }
    if ((double)seq.u.l->n * (double)k > JJ_MAX_RANGE * 10.0) jj_err(c, line, "list repetition too large");
    jj_val r = jj_new_list(c, 0);
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < seq.u.l->n; j++) jj_list_push(c, r.u.l, seq.u.l->v[j]);
    return r;
}

static jj_val arith(jj_ctx *c, int line, const char *op, jj_val a, jj_val b) {
    bool ints = (a.t == V_INT || a.t == V_BOOL) && (b.t == V_INT || b.t == V_BOOL);
    switch (op[0]) {
    case '+':
        if (numeric(a) && numeric(b)) return ints ? jj_int(as_i(a) + as_i(b)) : jj_float(as_f(a) + as_f(b));
        if (a.t == V_STR && b.t == V_STR && a.safe != b.safe) { /* Markup + str escapes the str */
            if (!a.safe) a = jj_html_escape(c, a.u.s);
            if (!b.safe) b = jj_html_escape(c, b.u.s);
        }
        if (a.t == V_STR && b.t == V_STR) {
            jj_buf o = {0};
            jj_buf_put(c, &o, a.u.s->p, a.u.s->n);
            jj_buf_put(c, &o, b.u.s->p, b.u.s->n);
            jj_val r = jj_buf_val(c, &o);
            r.safe = a.safe;
            return r;
        }
        if (a.t == V_LIST && b.t == V_LIST) {
            jj_val r = jj_new_list(c, a.u.l->n + b.u.l->n);
            for (size_t i = 0; i < a.u.l->n; i++) jj_list_push(c, r.u.l, a.u.l->v[i]);
            for (size_t i = 0; i < b.u.l->n; i++) jj_list_push(c, r.u.l, b.u.l->v[i]);
            r.tuple = a.tuple && b.tuple;
            return r;
        }
        break;
    case '-':
        if (numeric(a) && numeric(b)) return ints ? jj_int(as_i(a) - as_i(b)) : jj_float(as_f(a) - as_f(b));
        break;
    case '*':
        if (op[1] == '*') {
            if (!numeric(a) || !numeric(b)) break;
            if (ints && as_i(b) >= 0) {
                int64_t r = 1, x = as_i(a);
                for (int64_t i = 0; i < as_i(b) && i < 64; i++) r *= x;
                return jj_int(r);
            }
            return jj_float(pow(as_f(a), as_f(b)));
        }
        if (numeric(a) && numeric(b)) return ints ? jj_int(as_i(a) * as_i(b)) : jj_float(as_f(a) * as_f(b));
        if ((a.t == V_STR || a.t == V_LIST) && (b.t == V_INT || b.t == V_BOOL)) return repeat(c, line, a, as_i(b));
        if ((b.t == V_STR || b.t == V_LIST) && (a.t == V_INT || a.t == V_BOOL)) return repeat(c, line, b, as_i(a));
        break;
    case '/':
        if (!numeric(a) || !numeric(b)) break;
        if (op[1] == '/') {
            if (ints) {
                int64_t x = as_i(a), y = as_i(b);
                if (y == 0) jj_err(c, line, "integer division or modulo by zero");
                int64_t q = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
                return jj_int(q);
            }
            if (as_f(b) == 0) jj_err(c, line, "float floor division by zero");
            return jj_float(floor(as_f(a) / as_f(b)));
        }
        if (as_f(b) == 0) jj_err(c, line, "division by zero");
        return jj_float(as_f(a) / as_f(b));
    case '%':
        if (numeric(a) && numeric(b)) {
            if (ints) {
                int64_t x = as_i(a), y = as_i(b);
                if (y == 0) jj_err(c, line, "integer division or modulo by zero");
                int64_t r = x % y;
                if (r != 0 && ((r < 0) != (y < 0))) r += y;
                return jj_int(r);
            }
            double y = as_f(b);
            if (y == 0) jj_err(c, line, "float modulo");
            double r = fmod(as_f(a), y);
            if (r != 0 && ((r < 0) != (y < 0))) r += y;
            return jj_float(r);
        }
        if (a.t == V_STR) { /* printf-style: %s and %d with one value or a tuple */
            jj_buf o = {0};
            size_t k = 0;
            for (size_t i = 0; i < a.u.s->n; i++) {
                char ch = a.u.s->p[i];
                if (ch != '%' || i + 1 >= a.u.s->n) { jj_buf_put(c, &o, &ch, 1); continue; }
                char f = a.u.s->p[++i];
                if (f == '%') { jj_buf_put(c, &o, "%", 1); continue; }
                jj_val arg = b.t == V_LIST && b.tuple ? (k < b.u.l->n ? b.u.l->v[k] : jj_none()) : b;
                k++;
                if (f == 's') jj_to_str(c, &o, arg);
                else if (f == 'r') jj_repr(c, &o, arg);
                else if (f == 'd' || f == 'i') jj_to_str(c, &o, numeric(arg) ? jj_int((int64_t)as_f(arg)) : arg);
                else jj_err(c, line, "unsupported format character '%c'", f);
            }
            return jj_buf_val(c, &o);
        }
        break;
    }
    bad_operands(c, line, op, a, b);
}

static bool contains(jj_ctx *c, int line, jj_val hay, jj_val needle) {
    switch (hay.t) {
    case V_UNDEF: return false;
    case V_STR:
        if (needle.t != V_STR)
            jj_err(c, line, "'in <string>' requires string as left operand, not %s", jj_type_name(needle));
        if (needle.u.s->n == 0) return true;
        return memmem(hay.u.s->p, hay.u.s->n, needle.u.s->p, needle.u.s->n) != NULL;
    case V_LIST:
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (jj_eq(hay.u.l->v[i], needle)) return true;
        return false;
    case V_DICT: case V_NS: return jj_dict_get(hay.u.d, needle) != NULL;
    default: jj_err(c, line, "argument of type '%s' is not iterable", jj_type_name(hay));
    }
}

/* ---- calls ---- */
static jj_val call_macro(jj_ctx *c, int line, jj_macro *m, jj_val *args, int nargs,
                         const char **kwn, jj_val *kwv, int nkw, jj_val *caller) {
    const jj_node *def = m->def;
    if (++c->depth > JJ_MAX_DEPTH) jj_err(c, line, "maximum recursion depth exceeded in macro '%s'", m->name);
    if (nargs > def->args.n)
        jj_err(c, line, "macro '%s' takes not more than %d argument(s)", m->name, def->args.n);
    jj_frame *mf = new_frame(c, m->closure);
    for (int k = 0; k < nkw; k++) {
        bool ok = false;
        for (int i = 0; i < def->args.n; i++)
            if (!strcmp(def->args.v[i]->name, kwn[k])) ok = true;
        if (!ok && !(caller == NULL && !strcmp(kwn[k], "caller")))
            jj_err(c, line, "macro '%s' takes no keyword argument '%s'", m->name, kwn[k]);
    }
    for (int i = 0; i < def->args.n; i++) {
        const char *pn = def->args.v[i]->name;
        jj_val v;
        bool have = false;
        if (i < nargs) { v = args[i]; have = true; }
        for (int k = 0; k < nkw; k++)
            if (!strcmp(kwn[k], pn)) { v = kwv[k]; have = true; }
        if (!have) {
            if (def->kwvals.v[i]) v = jj_eval(c, mf, def->kwvals.v[i]);
            else v = jj_undef(c, "parameter '%s' was not provided", pn);
        }
        set_var(c, mf, pn, v);
    }
    for (int k = 0; k < nkw; k++)
        if (!strcmp(kwn[k], "caller") && !caller) set_var(c, mf, "caller", kwv[k]);
    if (caller) set_var(c, mf, "caller", *caller);
    jj_buf out = {0};
    jj_exec_body(c, mf, &def->body, &out);
    c->depth--;
    return jj_buf_val(c, &out);
}

/* The clock strftime_now reads: MTPLX_NOW (seconds since the epoch) when it
 * is set to a number, so that tests and reproducible prompts can fix the
 * date templates print; otherwise the real time. */
static time_t template_now(void) {
    const char *e = getenv("MTPLX_NOW");
    if (e && *e) {
        char *end;
        long long v = strtoll(e, &end, 10);
        if (*end == '\0') return (time_t)v;
    }
    return time(NULL);
}

static jj_val call_builtin(jj_ctx *c, const jj_node *n, int fn, jj_val *args, int nargs,
                           const char **kwn, jj_val *kwv, int nkw) {
    switch (fn) {
    case F_RANGE: {
        int64_t a = 0, b = 0, s = 1;
        for (int i = 0; i < nargs; i++)
            if (args[i].t != V_INT && args[i].t != V_BOOL)
                jj_err(c, n->line, "range() arguments must be integers, not '%s'", jj_type_name(args[i]));
        if (nargs == 1) b = as_i(args[0]);
        else if (nargs == 2 || nargs == 3) {
            a = as_i(args[0]);
            b = as_i(args[1]);
            if (nargs == 3) s = as_i(args[2]);
        } else jj_err(c, n->line, "range expected 1 to 3 arguments, got %d", nargs);
        if (s == 0) jj_err(c, n->line, "range() arg 3 must not be zero");
        int64_t cnt = s > 0 ? (b > a ? (b - a + s - 1) / s : 0) : (a > b ? (a - b - s - 1) / -s : 0);
        if (cnt > JJ_MAX_RANGE)
            jj_err(c, n->line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", JJ_MAX_RANGE);
        jj_val r = jj_new_list(c, (size_t)cnt);
        for (int64_t i = 0; i < cnt; i++) jj_list_push(c, r.u.l, jj_int(a + i * s));
        return r;
    }
    case F_NAMESPACE: case F_DICT: {
        jj_val d = jj_new_dict(c);
        for (int i = 0; i < nargs; i++) {
            if (args[i].t != V_DICT) jj_err(c, n->line, "%s() takes keyword arguments or a dict", fn == F_DICT ? "dict" : "namespace");
            for (size_t k = 0; k < args[i].u.d->n; k++) jj_dict_set(c, d.u.d, args[i].u.d->k[k], args[i].u.d->v[k]);
        }
        for (int k = 0; k < nkw; k++) jj_dict_set(c, d.u.d, jj_cstr(c, kwn[k]), kwv[k]);
        if (fn == F_NAMESPACE) d.t = V_NS;
        return d;
    }
    case F_RAISE: {
        jj_str *s = nargs ? jj_str_of(c, args[0]) : jj_cstr(c, "raise_exception").u.s;
        jj_err(c, n->line, "%.*s", (int)s->n, s->p);
    }
    case F_STRFTIME: {
        if (nargs != 1 || args[0].t != V_STR) jj_err(c, n->line, "strftime_now expects one format string");
        time_t now = template_now();
        struct tm tmv;
        localtime_r(&now, &tmv);
        char buf[512];
        size_t len = strftime(buf, sizeof buf, args[0].u.s->p, &tmv);
        return jj_strv(c, buf, len);
    }
    }
    jj_err(c, n->line, "unknown builtin");
}

jj_val jj_call_value(jj_ctx *c, const jj_node *n, jj_val fn, jj_val *args, int nargs,
                     const char **kwn, jj_val *kwv, int nkw) {
    switch (fn.t) {
    case V_MACRO: return call_macro(c, n->line, fn.u.m, args, nargs, kwn, kwv, nkw, NULL);
    case V_FUNC: return call_builtin(c, n, fn.u.fn, args, nargs, kwn, kwv, nkw);
    case V_METHOD: {
        bool found = false;
        jj_val r = jj_call_method(c, n, *fn.self, fn.u.s->p, args, nargs, kwn, kwv, nkw, &found);
        if (found) return r;
        break;
    }
    case V_UNDEF: undef_error(c, n->line, fn);
    default: break;
    }
    jj_err(c, n->line, "'%s' object is not callable", jj_type_name(fn));
}

/* Evaluate a call's arguments into arena arrays. */
static void eval_args(jj_ctx *c, jj_frame *f, const jj_node *n, jj_val **args, jj_val **kwv) {
    *args = jj_alloc(c->a, (size_t)(n->args.n + 1) * sizeof(jj_val));
    *kwv = jj_alloc(c->a, (size_t)(n->kwvals.n + 1) * sizeof(jj_val));
    for (int i = 0; i < n->args.n; i++) (*args)[i] = jj_eval(c, f, n->args.v[i]);
    for (int i = 0; i < n->kwvals.n; i++) (*kwv)[i] = jj_eval(c, f, n->kwvals.v[i]);
}

static jj_val eval_call(jj_ctx *c, jj_frame *f, const jj_node *n) {
    jj_val *args, *kwv;
    if (n->a->k == E_GETATTR) {
        jj_val obj = jj_eval(c, f, n->a->a);
        if (obj.t == V_UNDEF) undef_error(c, n->line, obj);
        eval_args(c, f, n, &args, &kwv);
        bool found = false;
        jj_val r = jj_call_method(c, n, obj, n->a->name, args, n->args.n, n->kwnames, kwv, n->kwvals.n, &found);
        if (found) return r;
        jj_val fn = jj_getattr(c, n->line, obj, n->a->name, strlen(n->a->name));
        return jj_call_value(c, n, fn, args, n->args.n, n->kwnames, kwv, n->kwvals.n);
    }
    jj_val fn = jj_eval(c, f, n->a);
    eval_args(c, f, n, &args, &kwv);
    return jj_call_value(c, n, fn, args, n->args.n, n->kwnames, kwv, n->kwvals.n);
}

static jj_val apply_filter(jj_ctx *c, jj_frame *f, const jj_node *n, jj_val in) {
    jj_val *args, *kwv;
    eval_args(c, f, n, &args, &kwv);
    return jj_call_filter(c, n, n->name, in, args, n->args.n, n->kwnames, kwv, n->kwvals.n);
}

/* A filter chain whose innermost input is NULL (filter blocks, set blocks). */
static jj_val apply_chain(jj_ctx *c, jj_frame *f, const jj_node *n, jj_val in) {
    if (!n) return in;
    in = apply_chain(c, f, n->a, in);
    return apply_filter(c, f, n, in);
}

jj_val jj_eval(jj_ctx *c, jj_frame *f, const jj_node *n) {
    step(c, n->line);
    if (++c->depth > JJ_MAX_DEPTH * 4) jj_err(c, n->line, "expression nested too deeply");
    jj_val r;
    switch (n->k) {
    case E_LIT: r = n->lit; break;
    case E_NAME: r = lookup(c, f, n->name); break;
    case E_LIST: case E_TUPLE:
        r = jj_new_list(c, (size_t)n->args.n);
        r.tuple = n->k == E_TUPLE;
        for (int i = 0; i < n->args.n; i++) jj_list_push(c, r.u.l, jj_eval(c, f, n->args.v[i]));
        break;
    case E_DICT:
        r = jj_new_dict(c);
        for (int i = 0; i < n->args.n; i++)
            jj_dict_set(c, r.u.d, jj_eval(c, f, n->args.v[i]), jj_eval(c, f, n->kwvals.v[i]));
        break;
    case E_GETATTR: r = jj_getattr(c, n->line, jj_eval(c, f, n->a), n->name, strlen(n->name)); break;
    case E_GETITEM: {
        jj_val o = jj_eval(c, f, n->a);
        r = jj_getitem(c, n->line, o, jj_eval(c, f, n->b));
        break;
    }
    case E_SLICE: {
        jj_val o = jj_eval(c, f, n->a);
        jj_val s = n->b ? jj_eval(c, f, n->b) : jj_none();
        jj_val e = n->c ? jj_eval(c, f, n->c) : jj_none();
        jj_val st = n->d ? jj_eval(c, f, n->d) : jj_none();
        r = slice(c, n->line, o, s, e, st);
        break;
    }
    case E_CALL: r = eval_call(c, f, n); break;
    case E_FILTER: r = apply_filter(c, f, n, jj_eval(c, f, n->a)); break;
    case E_TEST: {
        jj_val in = jj_eval(c, f, n->a);
        jj_val *args, *kwv;
        eval_args(c, f, n, &args, &kwv);
        bool t = jj_call_test(c, n, n->name, in, args, n->args.n);
        r = jj_bool(n->neg ? !t : t);
        break;
    }
    case E_NEG: case E_POS: {
        jj_val v = jj_eval(c, f, n->a);
        if (v.t == V_UNDEF) undef_error(c, n->line, v);
        if (!numeric(v)) jj_err(c, n->line, "bad operand type for unary %c: '%s'", n->k == E_NEG ? '-' : '+', jj_type_name(v));
        if (n->k == E_POS) r = v.t == V_BOOL ? jj_int(v.u.b) : v;
        else r = v.t == V_FLOAT ? jj_float(-v.u.f) : jj_int(-as_i(v));
        break;
    }
    case E_NOT: r = jj_bool(!jj_truthy(jj_eval(c, f, n->a))); break;
    case E_AND: {
        jj_val a = jj_eval(c, f, n->a);
        r = jj_truthy(a) ? jj_eval(c, f, n->b) : a;
        break;
    }
    case E_OR: {
        jj_val a = jj_eval(c, f, n->a);
        r = jj_truthy(a) ? a : jj_eval(c, f, n->b);
        break;
    }
    case E_BIN: {
        jj_val a = jj_eval(c, f, n->a);
        jj_val b = jj_eval(c, f, n->b);
        r = arith(c, n->line, n->name, a, b);
        break;
    }
    case E_CMP: {
        jj_val a = jj_eval(c, f, n->a);
        jj_val b = jj_eval(c, f, n->b);
        const char *op = n->name;
        bool t;
        if (!strcmp(op, "in")) t = contains(c, n->line, b, a) != n->neg;
        else if (!strcmp(op, "==")) t = jj_eq(a, b);
        else if (!strcmp(op, "!=")) t = !jj_eq(a, b);
        else {
            int k = jj_cmp(c, n->line, a, b);
            t = op[0] == '<' ? (op[1] ? k <= 0 : k < 0) : (op[1] ? k >= 0 : k > 0);
        }
        r = jj_bool(t);
        break;
    }
    case E_COND:
        if (jj_truthy(jj_eval(c, f, n->a))) r = jj_eval(c, f, n->b);
        else r = n->c ? jj_eval(c, f, n->c) : jj_undef(c, "the inline if-expression evaluated to false and no else section was defined.");
        break;
    case E_CONCAT: {
        jj_buf b = {0};
        jj_to_str(c, &b, jj_eval(c, f, n->a));
        jj_to_str(c, &b, jj_eval(c, f, n->b));
        r = jj_buf_val(c, &b);
        break;
    }
    default: jj_err(c, n->line, "internal: statement where an expression was expected");
    }
    c->depth--;
    return r;
}

/* ---- statements ---- */
static void assign(jj_ctx *c, jj_frame *f, const jj_node *t, jj_val v, int line) {
    if (t->k == E_NAME) {
        set_var(c, f, t->name, v);
    } else if (t->k == E_TUPLE) {
        jj_list *l = jj_iter(c, line, v);
        if (l->n != (size_t)t->args.n)
            jj_err(c, line, "%s values to unpack (expected %d, got %zu)",
                   l->n > (size_t)t->args.n ? "too many" : "not enough", t->args.n, l->n);
        for (int i = 0; i < t->args.n; i++) assign(c, f, t->args.v[i], l->v[i], line);
    } else if (t->k == E_GETATTR) {
        jj_val ns = lookup(c, f, t->a->name);
        if (ns.t != V_NS) jj_err(c, line, "cannot assign attribute on non-namespace object '%s'", t->a->name);
        jj_dict_set(c, ns.u.d, jj_cstr(c, t->name), v);
    } else {
        jj_err(c, line, "cannot assign to this target");
    }
}

static void exec_for(jj_ctx *c, jj_frame *f, const jj_node *n, jj_buf *out) {
    jj_val seq = jj_eval(c, f, n->b);
    jj_list *items = jj_iter(c, n->line, seq);
    if (seq.t == V_LIST) { /* the body may not change what we iterate */
        jj_list *copy = jj_new_list(c, items->n).u.l;
        for (size_t i = 0; i < items->n; i++) jj_list_push(c, copy, items->v[i]);
        items = copy;
    }
    jj_frame *lf = new_frame(c, f);
    if (n->c) {
        jj_list *kept = jj_new_list(c, items->n).u.l;
        for (size_t i = 0; i < items->n; i++) {
            assign(c, lf, n->a, items->v[i], n->line);
            if (jj_truthy(jj_eval(c, lf, n->c))) jj_list_push(c, kept, items->v[i]);
        }
        items = kept;
        lf = new_frame(c, f);
    }
    if (items->n == 0) {
        jj_exec_body(c, f, &n->orelse, out);
        return;
    }
    jj_loop *L = jj_alloc(c->a, sizeof *L);
    L->items = items;
    jj_val lv = {.t = V_LOOP, .u.loop = L};
    for (size_t i = 0; i < items->n; i++) {
        step(c, n->line);
        L->index0 = (int64_t)i;
        lf = new_frame(c, f); /* each iteration starts from the outer scope */
        assign(c, lf, n->a, items->v[i], n->line);
        set_var(c, lf, "loop", lv);
        jj_exec_body(c, lf, &n->body, out);
        if (c->ctl_flag == CTL_BREAK) { c->ctl_flag = CTL_NONE; break; }
        c->ctl_flag = CTL_NONE;
    }
}

void jj_exec_body(jj_ctx *c, jj_frame *f, const jj_nodes *body, jj_buf *out) {
    for (int i = 0; i < body->n; i++) {
        const jj_node *n = body->v[i];
        step(c, n->line);
        switch (n->k) {
        case S_TEXT: jj_buf_put(c, out, n->lit.u.s->p, n->lit.u.s->n); break;
        case S_OUT: jj_to_str(c, out, jj_eval(c, f, n->a)); break;
        case S_IF:
            if (jj_truthy(jj_eval(c, f, n->a))) jj_exec_body(c, f, &n->body, out);
            else jj_exec_body(c, f, &n->orelse, out);
            break;
        case S_FOR: exec_for(c, f, n, out); break;
        case S_SET: assign(c, f, n->a, jj_eval(c, f, n->b), n->line); break;
        case S_SETBLOCK: {
            jj_buf b = {0};
            jj_exec_body(c, f, &n->body, &b);
            assign(c, f, n->a, apply_chain(c, f, n->b, jj_buf_val(c, &b)), n->line);
            break;
        }
        case S_MACRO: {
            jj_macro *m = jj_alloc(c->a, sizeof *m);
            m->def = n;
            m->closure = f;
            m->name = n->name;
            set_var(c, f, n->name, (jj_val){.t = V_MACRO, .u.m = m});
            break;
        }
        case S_CALLBLOCK: {
            jj_macro *cm = jj_alloc(c->a, sizeof *cm);
            cm->def = n;
            cm->closure = f;
            cm->name = "caller";
            jj_val caller = {.t = V_MACRO, .u.m = cm};
            const jj_node *call = n->a;
            jj_val fn = jj_eval(c, f, call->a);
            jj_val *args, *kwv;
            eval_args(c, f, call, &args, &kwv);
            if (fn.t != V_MACRO) jj_err(c, n->line, "call block needs a macro");
            jj_to_str(c, out, call_macro(c, n->line, fn.u.m, args, call->args.n, call->kwnames, kwv, call->kwvals.n, &caller));
            break;
        }
        case S_FILTERBLOCK: {
            jj_buf b = {0};
            jj_exec_body(c, f, &n->body, &b);
            jj_to_str(c, out, apply_chain(c, f, n->a, jj_buf_val(c, &b)));
            break;
        }
        case S_BREAK: c->ctl_flag = CTL_BREAK; return;
        case S_CONTINUE: c->ctl_flag = CTL_CONTINUE; return;
        case S_WITH: {
            jj_frame *wf = new_frame(c, f);
            for (int k = 0; k < n->args.n; k++) assign(c, wf, n->args.v[k], jj_eval(c, f, n->kwvals.v[k]), n->line);
            jj_exec_body(c, wf, &n->body, out);
            break;
        }
        default: jj_err(c, n->line, "internal: expression where a statement was expected");
        }
        if (c->ctl_flag) return;
    }
}
