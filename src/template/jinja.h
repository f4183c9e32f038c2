/* jinja.h: what the Jinja interpreter's files share: the arena, values, the
 * token and AST shapes, and the error path (errors longjmp to the entry point,
 * since everything lives in arenas that are freed in one go).
 *
 * Semantics follow Python's jinja2 as HF transformers sets it up:
 * ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
 * loopcontrols extension, default Undefined, transformers' own tojson, and the
 * globals raise_exception and strftime_now. No autoescape, no includes,
 * no template inheritance. */
#ifndef MTPLX_JINJA_H
#define MTPLX_JINJA_H

#include "core/core.h"

#include <cjson/cJSON.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- limits: a runaway template stops with an error ---- */
#define JJ_MAX_STEPS 20000000L         /* evaluation steps per render */
#define JJ_MAX_OUTPUT (64u << 20)      /* bytes of rendered output */
#define JJ_MAX_MEMORY (256u << 20)     /* arena bytes per render */
#define JJ_MAX_DEPTH 200               /* macro calls / expression nesting */
#define JJ_MAX_RANGE 100000            /* jinja2's sandbox MAX_RANGE */

/* ---- arena ---- */
typedef struct jj_chunk jj_chunk;
typedef struct jj_arena {
    jj_chunk *head;
    size_t used_total, limit;
    jmp_buf *jmp; /* where an out-of-memory error goes */
} jj_arena;
void *jj_alloc(jj_arena *a, size_t n); /* zeroed; longjmps on failure */
void jj_arena_free(jj_arena *a);
char *jj_strndup(jj_arena *a, const char *s, size_t n);

/* Record "template line N: ..." and longjmp to *jmp. */
_Noreturn void jj_fail(jmp_buf *jmp, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- values ---- */
typedef enum {
    V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT,
    V_NS,     /* namespace(): a dict whose attributes can be set */
    V_MACRO,  /* macro or caller */
    V_FUNC,   /* builtin global (range, namespace, ...) */
    V_METHOD, /* bound method: self + name (e.g. d.items without call) */
    V_LOOP,   /* the `loop` object of a for */
} jj_type;

typedef struct jj_str { size_t n; const char *p; } jj_str;
typedef struct jj_val jj_val;
typedef struct jj_list { size_t n, cap; jj_val *v; } jj_list;
typedef struct jj_dict { size_t n, cap; jj_val *k, *v; } jj_dict;
struct jj_node;
struct jj_loop;
typedef struct jj_macro {
    const struct jj_node *def; /* S_MACRO or S_CALLBLOCK node */
    struct jj_frame *closure;
    const char *name;
} jj_macro;

struct jj_val {
    uint8_t t;
    uint8_t tuple; /* V_LIST made from a tuple (prints as (...)) */
    uint8_t safe;  /* V_STR marked safe (markupsafe.Markup): `+` escapes the other side */
    union {
        bool b;
        int64_t i;
        double f;
        jj_str *s;  /* V_STR; V_UNDEF: hint (may be NULL); V_METHOD: name */
        jj_list *l;
        jj_dict *d; /* V_DICT, V_NS */
        jj_macro *m;
        int fn;
        struct jj_loop *loop;
    } u;
    jj_val *self; /* V_METHOD */
};

/* ---- tokens ---- */
typedef enum {
    T_EOF, T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP,
} jj_tok_type;
typedef struct jj_tok {
    jj_tok_type t;
    int line;
    const char *p; /* T_TEXT/T_NAME/T_OP/T_STRING: text (NUL terminated, unescaped) */
    size_t n;
    int64_t i;
    double f;
} jj_tok;

/* Tokenize src (whitespace control, trim_blocks, lstrip_blocks applied). */
void jj_lex(jj_arena *a, jmp_buf *jmp, const char *src, jj_tok **toks, int *ntoks);

/* ---- AST ---- */
typedef enum {
    /* expressions */
    E_LIT, E_NAME, E_LIST, E_TUPLE, E_DICT, E_GETATTR, E_GETITEM, E_SLICE, E_CALL,
    E_FILTER, E_TEST, E_NEG, E_POS, E_NOT, E_AND, E_OR, E_BIN, E_CMP, E_COND, E_CONCAT,
    /* statements */
    S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_CALLBLOCK, S_FILTERBLOCK,
    S_BREAK, S_CONTINUE, S_WITH, S_BODY,
} jj_kind;

typedef struct jj_node jj_node;
typedef struct jj_nodes { jj_node **v; int n, cap; } jj_nodes;
struct jj_node {
    jj_kind k;
    int line;
    const char *name; /* names, operators, filter/test names, attributes */
    jj_val lit;
    jj_node *a, *b, *c, *d;
    jj_nodes args;        /* call args, list items, dict keys, params, targets */
    jj_nodes kwvals;      /* kwargs values / dict values / param defaults */
    const char **kwnames; /* names matching kwvals (params: NULL default) */
    jj_nodes body, orelse;
    bool neg;             /* `is not`, `not in` */
};
void jj_nodes_push(jj_arena *a, jj_nodes *l, jj_node *n);

/* Parse tokens into a body node (S_BODY). */
jj_node *jj_parse(jj_arena *a, jmp_buf *jmp, jj_tok *toks, int ntoks);

/* ---- render ---- */
typedef struct jj_buf { char *p; size_t n, cap; } jj_buf;
typedef struct jj_frame {
    struct jj_frame *parent;
    jj_dict vars;
} jj_frame;

typedef struct jj_loop {
    jj_list *items;
    int64_t index0;
} jj_loop;

typedef struct jj_ctx {
    jj_arena *a;
    jmp_buf *jmp;
    long steps;
    int depth;
    size_t out_total; /* all bytes written to any buffer */
    int ctl_flag;     /* pending break (1) / continue (2) */
    jj_frame *globals;
} jj_ctx;

_Noreturn void jj_err(jj_ctx *c, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* buffers (arena backed) */
void jj_buf_put(jj_ctx *c, jj_buf *b, const char *s, size_t n);
void jj_buf_puts(jj_ctx *c, jj_buf *b, const char *s);

/* value helpers (value.c) */
jj_val jj_undef(jj_ctx *c, const char *hint_fmt, ...) __attribute__((format(printf, 2, 3)));
jj_val jj_none(void);
jj_val jj_bool(bool b);
jj_val jj_int(int64_t i);
jj_val jj_float(double f);
jj_val jj_strv(jj_ctx *c, const char *s, size_t n); /* copies */
jj_val jj_cstr(jj_ctx *c, const char *s);
jj_val jj_buf_val(jj_ctx *c, jj_buf *b);
jj_val jj_new_list(jj_ctx *c, size_t cap);
jj_val jj_new_dict(jj_ctx *c);
void jj_list_push(jj_ctx *c, jj_list *l, jj_val v);
void jj_dict_set(jj_ctx *c, jj_dict *d, jj_val k, jj_val v);
jj_val *jj_dict_get(const jj_dict *d, jj_val k);
jj_val *jj_dict_gets(const jj_dict *d, const char *k);
bool jj_truthy(jj_val v);
bool jj_eq(jj_val a, jj_val b);
int jj_cmp(jj_ctx *c, int line, jj_val a, jj_val b); /* <0 0 >0; errors on mixed types */
const char *jj_type_name(jj_val v);
/* str(v) / repr(v) appended to b */
void jj_to_str(jj_ctx *c, jj_buf *b, jj_val v);
void jj_repr(jj_ctx *c, jj_buf *b, jj_val v);
jj_str *jj_str_of(jj_ctx *c, jj_val v); /* str(v) as a string */
void jj_float_repr(double f, char *out, size_t cap);
/* json.dumps(v, ensure_ascii, indent (<0: none), separators, sort_keys) */
void jj_tojson(jj_ctx *c, int line, jj_buf *b, jj_val v, bool ensure_ascii, int indent,
               const char *item_sep, const char *key_sep, bool sort_keys, int level);
jj_val jj_from_cjson(jj_ctx *c, const cJSON *j);
/* iterate: a list of the items of v (dict: keys; string: characters). */
jj_list *jj_iter(jj_ctx *c, int line, jj_val v);
int64_t jj_len(jj_ctx *c, int line, jj_val v);
/* UTF-8 helpers */
size_t jj_utf8_len(const char *s, size_t n);
size_t jj_utf8_offset(const char *s, size_t n, int64_t cp); /* byte offset of code point */

/* filters, tests, methods (filters.c) */
jj_val jj_call_filter(jj_ctx *c, const jj_node *n, const char *name, jj_val in, jj_val *args,
                      int nargs, const char **kwn, jj_val *kwv, int nkw);
bool jj_call_test(jj_ctx *c, const jj_node *n, const char *name, jj_val in, jj_val *args,
                  int nargs);
bool jj_has_test(const char *name);
bool jj_has_filter(const char *name);
/* method call obj.name(args); *found false when obj has no such method */
jj_val jj_call_method(jj_ctx *c, const jj_node *n, jj_val obj, const char *name, jj_val *args,
                      int nargs, const char **kwn, jj_val *kwv, int nkw, bool *found);
bool jj_is_method(jj_val obj, const char *name);
/* str helpers shared by filters and methods; side: 1 left, 2 right, 3 both;
 * case mode: 0 upper, 1 lower, 2 title (str.title), 3 capitalize */
jj_val jj_str_strip(jj_ctx *c, const jj_str *s, const jj_str *chars, int side);
jj_val jj_str_split(jj_ctx *c, const struct jj_node *n, const jj_str *s, jj_val *sep,
                    int64_t maxsplit, bool from_right);
jj_val jj_str_replace(jj_ctx *c, const jj_str *s, const jj_str *old, const jj_str *new_,
                      int64_t count);
jj_val jj_str_case(jj_ctx *c, const jj_str *s, int mode);
jj_val jj_html_escape(jj_ctx *c, const jj_str *s);

/* eval.c */
jj_val jj_eval(jj_ctx *c, jj_frame *f, const jj_node *n);
void jj_exec_body(jj_ctx *c, jj_frame *f, const jj_nodes *body, jj_buf *out);
jj_val jj_getattr(jj_ctx *c, int line, jj_val obj, const char *name, size_t n);
jj_val jj_getitem(jj_ctx *c, int line, jj_val obj, jj_val key);
jj_val jj_call_value(jj_ctx *c, const jj_node *n, jj_val fn, jj_val *args, int nargs,
                     const char **kwn, jj_val *kwv, int nkw);

#endif
