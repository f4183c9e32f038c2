/* parser.c: tokens to an AST, following jinja2's grammar and operator
 * precedence (or < and < not < compare < + - < ~ < * / // % < ** < unary <
 * postfix / filters / tests). Statements: if, for, set (plain, block,
 * namespace attribute), macro, call, filter, with, break, continue and
 * transformers' generation block. Leaves out: include / extends / block /
 * import (no loader), recursive loops, *args in calls. */
#include "template/jinja.h"

#include <string.h>

typedef struct parser {
    jj_arena *a;
    jmp_buf *jmp;
    jj_tok *t;
    int n, i;
} parser;

static jj_tok *cur(parser *P) { return &P->t[P->i]; }
static jj_tok *peek(parser *P, int k) {
    int j = P->i + k;
    return &P->t[j < P->n ? j : P->n - 1];
}
static int line(parser *P) { return cur(P)->line; }

static bool is_op(jj_tok *t, const char *op) { return t->t == T_OP && strcmp(t->p, op) == 0; }
static bool is_name(jj_tok *t, const char *nm) { return t->t == T_NAME && strcmp(t->p, nm) == 0; }

static const char *tok_desc(jj_tok *t) {
    switch (t->t) {
    case T_EOF: return "end of template";
    case T_TEXT: return "text";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "'%}'";
    case T_STRING: return "a string";
    case T_INT: case T_FLOAT: return "a number";
    default: return t->p;
    }
}

static void expect_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) jj_fail(P->jmp, line(P), "expected '%s', got %s", op, tok_desc(cur(P)));
    P->i++;
}
static void expect_block_end(parser *P, const char *what) {
    if (cur(P)->t != T_BLOCK_END)
        jj_fail(P->jmp, line(P), "expected '%%}' after '%s', got %s", what, tok_desc(cur(P)));
    P->i++;
}
static const char *expect_name(parser *P) {
    if (cur(P)->t != T_NAME) jj_fail(P->jmp, line(P), "expected a name, got %s", tok_desc(cur(P)));
    return P->t[P->i++].p;
}

static jj_node *mk(parser *P, jj_kind k, int ln) {
    jj_node *n = jj_alloc(P->a, sizeof *n);
    n->k = k;
    n->line = ln;
    return n;
}

void jj_nodes_push(jj_arena *a, jj_nodes *l, jj_node *n) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        jj_node **v = jj_alloc(a, (size_t)cap * sizeof *v);
        if (l->n) memcpy(v, l->v, (size_t)l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = n;
}

static jj_node *parse_expr(parser *P);
static jj_node *parse_or(parser *P);
static jj_node *parse_unary(parser *P, bool with_filter);
static jj_node *parse_primary(parser *P);

/* Call arguments after '(' up to ')': positional then name=value. */
static void parse_args(parser *P, jj_node *n) {
    int cap = 0;
    while (!is_op(cur(P), ")")) {
        if (n->args.n || n->kwvals.n) expect_op(P, ",");
        if (is_op(cur(P), ")")) break;
        if (is_op(cur(P), "*")) jj_fail(P->jmp, line(P), "unsupported construct '*args' in call");
        if (cur(P)->t == T_NAME && is_op(peek(P, 1), "=")) {
            const char *nm = cur(P)->p;
            P->i += 2;
            if (n->kwvals.n == cap) {
                cap = cap ? cap * 2 : 4;
                const char **nn = jj_alloc(P->a, (size_t)cap * sizeof *nn);
                if (n->kwvals.n) memcpy(nn, n->kwnames, (size_t)n->kwvals.n * sizeof *nn);
                n->kwnames = nn;
            }
            n->kwnames[n->kwvals.n] = nm;
            jj_nodes_push(P->a, &n->kwvals, parse_expr(P));
        } else {
            if (n->kwvals.n) jj_fail(P->jmp, line(P), "positional argument after keyword argument");
            jj_nodes_push(P->a, &n->args, parse_expr(P));
        }
    }
    P->i++;
}

/* expr, expr, ... -> a tuple when there is a comma (or explicit parentheses). */
static jj_node *parse_tuple(parser *P, bool with_condexpr, bool explicit) {
    int ln = line(P);
    jj_node *first = NULL, *tup = NULL;
    for (;;) {
        if (first) {
            if (!is_op(cur(P), ",")) break;
            P->i++;
            if (!tup) {
                tup = mk(P, E_TUPLE, ln);
                jj_nodes_push(P->a, &tup->args, first);
            }
        }
        jj_tok *t = cur(P);
        if (first && (t->t == T_VAR_END || t->t == T_BLOCK_END || is_op(t, ")") ||
                      is_name(t, "in") || is_op(t, "=")))
            break;
        if (!first && explicit && is_op(t, ")")) return mk(P, E_TUPLE, ln);
        jj_node *e = with_condexpr ? parse_expr(P) : parse_or(P);
        if (!first) first = e;
        else jj_nodes_push(P->a, &tup->args, e);
    }
    return tup ? tup : first;
}

static jj_node *parse_subscript(parser *P) {
    int ln = line(P);
    jj_node *parts[3] = {NULL, NULL, NULL};
    int k = 0;
    bool slice = false;
    for (;;) {
        if (is_op(cur(P), ":")) {
            slice = true;
            P->i++;
            if (++k > 2) jj_fail(P->jmp, ln, "bad slice");
            continue;
        }
        if (is_op(cur(P), "]")) break;
        parts[k] = parse_expr(P);
        if (!slice && is_op(cur(P), "]")) break;
    }
    P->i++;
    if (!slice) return parts[0];
    jj_node *s = mk(P, E_SLICE, ln);
    s->b = parts[0];
    s->c = parts[1];
    s->d = parts[2];
    return s;
}

static jj_node *parse_postfix(parser *P, jj_node *n) {
    for (;;) {
        jj_tok *t = cur(P);
        if (is_op(t, ".")) {
            P->i++;
            jj_tok *a = cur(P);
            if (a->t == T_NAME) {
                jj_node *g = mk(P, E_GETATTR, a->line);
                g->a = n;
                g->name = a->p;
                P->i++;
                n = g;
            } else if (a->t == T_INT) {
                jj_node *g = mk(P, E_GETITEM, a->line);
                g->a = n;
                g->b = mk(P, E_LIT, a->line);
                g->b->lit = (jj_val){.t = V_INT, .u.i = a->i};
                P->i++;
                n = g;
            } else {
                jj_fail(P->jmp, t->line, "expected an attribute name after '.'");
            }
        } else if (is_op(t, "[")) {
            P->i++;
            jj_node *sub = parse_subscript(P);
            if (sub && sub->k == E_SLICE) {
                sub->a = n;
                n = sub;
            } else {
                jj_node *g = mk(P, E_GETITEM, t->line);
                g->a = n;
                g->b = sub;
                n = g;
            }
        } else if (is_op(t, "(")) {
            P->i++;
            jj_node *c = mk(P, E_CALL, t->line);
            c->a = n;
            parse_args(P, c);
            n = c;
        } else {
            return n;
        }
    }
}

static jj_node *parse_filter_expr(parser *P, jj_node *n) {
    for (;;) {
        jj_tok *t = cur(P);
        if (is_op(t, "|")) {
            P->i++;
            jj_node *f = mk(P, E_FILTER, t->line);
            f->a = n;
            f->name = expect_name(P);
            if (is_op(cur(P), "(")) {
                P->i++;
                parse_args(P, f);
            }
            n = f;
        } else if (is_name(t, "is")) {
            P->i++;
            jj_node *x = mk(P, E_TEST, t->line);
            x->a = n;
            if (is_name(cur(P), "not")) {
                x->neg = true;
                P->i++;
            }
            /* `is none`, `is true` ... arrive as names */
            x->name = expect_name(P);
            jj_tok *c = cur(P);
            if (is_op(c, "(")) {
                P->i++;
                parse_args(P, x);
            } else if ((c->t == T_NAME || c->t == T_STRING || c->t == T_INT || c->t == T_FLOAT ||
                        is_op(c, "[") || is_op(c, "{")) &&
                       !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
                if (is_name(c, "is")) jj_fail(P->jmp, c->line, "cannot chain multiple tests with is");
                jj_node *arg = parse_postfix(P, parse_primary(P));
                jj_nodes_push(P->a, &x->args, arg);
            }
            n = x;
        } else if (is_op(t, "(")) {
            P->i++;
            jj_node *c = mk(P, E_CALL, t->line);
            c->a = n;
            parse_args(P, c);
            n = c;
        } else {
            return n;
        }
    }
}

static jj_node *parse_primary(parser *P) {
    jj_tok *t = cur(P);
    int ln = t->line;
    jj_node *n;
    switch (t->t) {
    case T_NAME: {
        P->i++;
        const char *s = t->p;
        n = mk(P, E_LIT, ln);
        if (!strcmp(s, "true") || !strcmp(s, "True")) n->lit = jj_bool(true);
        else if (!strcmp(s, "false") || !strcmp(s, "False")) n->lit = jj_bool(false);
        else if (!strcmp(s, "none") || !strcmp(s, "None")) n->lit = jj_none();
        else {
            n->k = E_NAME;
            n->name = s;
        }
        return n;
    }
    case T_STRING: {
        size_t total = 0;
        int j = P->i;
        while (P->t[j].t == T_STRING) total += P->t[j++].n;
        char *buf = jj_alloc(P->a, total + 1);
        size_t o = 0;
        while (cur(P)->t == T_STRING) {
            memcpy(buf + o, cur(P)->p, cur(P)->n);
            o += cur(P)->n;
            P->i++;
        }
        jj_str *s = jj_alloc(P->a, sizeof *s);
        s->p = buf;
        s->n = total;
        n = mk(P, E_LIT, ln);
        n->lit = (jj_val){.t = V_STR, .u.s = s};
        return n;
    }
    case T_INT:
        P->i++;
        n = mk(P, E_LIT, ln);
        n->lit = jj_int(t->i);
        return n;
    case T_FLOAT:
        P->i++;
        n = mk(P, E_LIT, ln);
        n->lit = jj_float(t->f);
        return n;
    case T_OP:
        if (is_op(t, "(")) {
            P->i++;
            n = parse_tuple(P, true, true);
            expect_op(P, ")");
            return n;
        }
        if (is_op(t, "[")) {
            P->i++;
            n = mk(P, E_LIST, ln);
            while (!is_op(cur(P), "]")) {
                if (n->args.n) expect_op(P, ",");
                if (is_op(cur(P), "]")) break;
                jj_nodes_push(P->a, &n->args, parse_expr(P));
            }
            P->i++;
            return n;
        }
        if (is_op(t, "{")) {
            P->i++;
            n = mk(P, E_DICT, ln);
            while (!is_op(cur(P), "}")) {
                if (n->args.n) expect_op(P, ",");
                if (is_op(cur(P), "}")) break;
                jj_nodes_push(P->a, &n->args, parse_expr(P));
                expect_op(P, ":");
                jj_nodes_push(P->a, &n->kwvals, parse_expr(P));
            }
            P->i++;
            return n;
        }
        break;
    default:
        break;
    }
    jj_fail(P->jmp, ln, "unexpected %s in expression", tok_desc(t));
}

static jj_node *parse_unary(parser *P, bool with_filter) {
    jj_tok *t = cur(P);
    jj_node *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        P->i++;
        n = mk(P, t->p[0] == '-' ? E_NEG : E_POS, t->line);
        n->a = parse_unary(P, false);
    } else {
        n = parse_postfix(P, parse_primary(P));
    }
    if (with_filter) n = parse_filter_expr(P, n);
    return n;
}

static jj_node *bin(parser *P, jj_kind k, const char *op, int ln, jj_node *a, jj_node *b) {
    jj_node *n = mk(P, k, ln);
    n->name = op;
    n->a = a;
    n->b = b;
    return n;
}

static jj_node *parse_pow(parser *P) {
    jj_node *n = parse_unary(P, true);
    while (is_op(cur(P), "**")) {
        int ln = line(P);
        P->i++;
        n = bin(P, E_BIN, "**", ln, n, parse_unary(P, true));
    }
    return n;
}

static jj_node *parse_math2(parser *P) {
    jj_node *n = parse_pow(P);
    for (;;) {
        jj_tok *t = cur(P);
        if (!(is_op(t, "*") || is_op(t, "/") || is_op(t, "//") || is_op(t, "%"))) return n;
        P->i++;
        n = bin(P, E_BIN, t->p, t->line, n, parse_pow(P));
    }
}

static jj_node *parse_concat(parser *P) {
    jj_node *n = parse_math2(P);
    while (is_op(cur(P), "~")) {
        int ln = line(P);
        P->i++;
        n = bin(P, E_CONCAT, "~", ln, n, parse_math2(P));
    }
    return n;
}

static jj_node *parse_math1(parser *P) {
    jj_node *n = parse_concat(P);
    for (;;) {
        jj_tok *t = cur(P);
        if (!(is_op(t, "+") || is_op(t, "-"))) return n;
        P->i++;
        n = bin(P, E_BIN, t->p, t->line, n, parse_concat(P));
    }
}

static jj_node *parse_compare(parser *P) {
    jj_node *n = parse_math1(P);
    for (;;) {
        jj_tok *t = cur(P);
        if (is_op(t, "==") || is_op(t, "!=") || is_op(t, "<") || is_op(t, ">") || is_op(t, "<=") ||
            is_op(t, ">=")) {
            P->i++;
            n = bin(P, E_CMP, t->p, t->line, n, parse_math1(P));
        } else if (is_name(t, "in")) {
            P->i++;
            n = bin(P, E_CMP, "in", t->line, n, parse_math1(P));
        } else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
            P->i += 2;
            n = bin(P, E_CMP, "in", t->line, n, parse_math1(P));
            n->neg = true;
        } else {
            return n;
        }
    }
}

static jj_node *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        jj_node *n = mk(P, E_NOT, line(P));
        P->i++;
        n->a = parse_not(P);
        return n;
    }
    return parse_compare(P);
}

static jj_node *parse_and(parser *P) {
    jj_node *n = parse_not(P);
    while (is_name(cur(P), "and")) {
        int ln = line(P);
        P->i++;
        n = bin(P, E_AND, "and", ln, n, parse_not(P));
    }
    return n;
}

static jj_node *parse_or(parser *P) {
    jj_node *n = parse_and(P);
    while (is_name(cur(P), "or")) {
        int ln = line(P);
        P->i++;
        n = bin(P, E_OR, "or", ln, n, parse_and(P));
    }
    return n;
}

static jj_node *parse_expr(parser *P) {
    jj_node *n = parse_or(P);
    while (is_name(cur(P), "if")) {
        jj_node *c = mk(P, E_COND, line(P));
        P->i++;
        c->b = n;
        c->a = parse_or(P);
        if (is_name(cur(P), "else")) {
            P->i++;
            c->c = parse_expr(P);
        }
        n = c;
    }
    return n;
}

/* ---- statements ---- */

static const char *UNSUPPORTED_TAGS[] = {"include", "extends", "block", "import", "from", "do",
                                         "autoescape", "trans", "pluralize", NULL};

/* Parse statements until a block tag named in `ends` (NULL-terminated; NULL
 * list = until EOF). Leaves P->i at that tag's name; returns the name. */
static const char *parse_body(parser *P, jj_nodes *body, const char *const *ends, const char *in);

static jj_node *parse_target(parser *P, bool allow_attr) {
    int ln = line(P);
    jj_node *first = NULL, *tup = NULL;
    for (;;) {
        const char *nm = expect_name(P);
        jj_node *n = mk(P, E_NAME, ln);
        n->name = nm;
        if (allow_attr && is_op(cur(P), ".")) {
            P->i++;
            jj_node *g = mk(P, E_GETATTR, ln);
            g->a = n;
            g->name = expect_name(P);
            n = g;
        }
        if (!first) first = n;
        else {
            if (!tup) {
                tup = mk(P, E_TUPLE, ln);
                jj_nodes_push(P->a, &tup->args, first);
            }
            jj_nodes_push(P->a, &tup->args, n);
        }
        if (!is_op(cur(P), ",")) break;
        P->i++;
    }
    return tup ? tup : first;
}

static void parse_params(parser *P, jj_node *n) {
    expect_op(P, "(");
    int cap = 0;
    while (!is_op(cur(P), ")")) {
        if (n->args.n) expect_op(P, ",");
        if (is_op(cur(P), ")")) break;
        jj_node *pn = mk(P, E_NAME, line(P));
        pn->name = expect_name(P);
        jj_node *def = NULL;
        if (is_op(cur(P), "=")) {
            P->i++;
            def = parse_expr(P);
        }
        jj_nodes_push(P->a, &n->args, pn);
        (void)cap;
        jj_nodes_push(P->a, &n->kwvals, def);
    }
    P->i++;
}

static jj_node *parse_filter_chain(parser *P, jj_node *input) {
    jj_node *n = input;
    bool first = true;
    while (first || is_op(cur(P), "|")) {
        if (!first) P->i++;
        first = false;
        jj_node *f = mk(P, E_FILTER, line(P));
        f->a = n;
        f->name = expect_name(P);
        if (is_op(cur(P), "(")) {
            P->i++;
            parse_args(P, f);
        }
        n = f;
    }
    return n;
}

static void end_tag(parser *P, const char *name) {
    P->i++; /* the end tag's name */
    expect_block_end(P, name);
}

static jj_node *parse_statement(parser *P) {
    jj_tok *t = cur(P);
    int ln = t->line;
    if (t->t != T_NAME) jj_fail(P->jmp, ln, "expected a tag name after '{%%', got %s", tok_desc(t));
    const char *tag = t->p;
    P->i++;
    if (!strcmp(tag, "if")) {
        jj_node *n = mk(P, S_IF, ln);
        n->a = parse_tuple(P, false, false);
        expect_block_end(P, "if");
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        const char *e = parse_body(P, &n->body, ends, "if");
        jj_node *tail = n;
        while (!strcmp(e, "elif")) {
            jj_node *el = mk(P, S_IF, line(P));
            P->i++;
            el->a = parse_tuple(P, false, false);
            expect_block_end(P, "elif");
            e = parse_body(P, &el->body, ends, "if");
            jj_nodes_push(P->a, &tail->orelse, el);
            tail = el;
        }
        if (!strcmp(e, "else")) {
            end_tag(P, "else");
            static const char *const ends2[] = {"endif", NULL};
            parse_body(P, &tail->orelse, ends2, "if");
        }
        end_tag(P, "endif");
        return n;
    }
    if (!strcmp(tag, "for")) {
        jj_node *n = mk(P, S_FOR, ln);
        n->a = parse_target(P, false);
        if (!is_name(cur(P), "in")) jj_fail(P->jmp, line(P), "expected 'in' in for loop");
        P->i++;
        n->b = parse_tuple(P, false, false);
        if (is_name(cur(P), "if")) {
            P->i++;
            n->c = parse_expr(P);
        }
        if (is_name(cur(P), "recursive"))
            jj_fail(P->jmp, line(P), "unsupported construct 'recursive' loop");
        expect_block_end(P, "for");
        static const char *const ends[] = {"else", "endfor", NULL};
        const char *e = parse_body(P, &n->body, ends, "for");
        if (!strcmp(e, "else")) {
            end_tag(P, "else");
            static const char *const ends2[] = {"endfor", NULL};
            parse_body(P, &n->orelse, ends2, "for");
        }
        end_tag(P, "endfor");
        return n;
    }
    if (!strcmp(tag, "set")) {
        jj_node *target = parse_target(P, true);
        if (is_op(cur(P), "=")) {
            P->i++;
            jj_node *n = mk(P, S_SET, ln);
            n->a = target;
            n->b = parse_tuple(P, true, false);
            expect_block_end(P, "set");
            return n;
        }
        if (target->k != E_NAME) jj_fail(P->jmp, ln, "block set needs a single name");
        jj_node *n = mk(P, S_SETBLOCK, ln);
        n->a = target;
        if (is_op(cur(P), "|")) {
            P->i++;
            n->b = parse_filter_chain(P, NULL);
        }
        expect_block_end(P, "set");
        static const char *const ends[] = {"endset", NULL};
        parse_body(P, &n->body, ends, "set");
        end_tag(P, "endset");
        return n;
    }
    if (!strcmp(tag, "macro")) {
        jj_node *n = mk(P, S_MACRO, ln);
        n->name = expect_name(P);
        parse_params(P, n);
        expect_block_end(P, "macro");
        static const char *const ends[] = {"endmacro", NULL};
        parse_body(P, &n->body, ends, "macro");
        end_tag(P, "endmacro");
        return n;
    }
    if (!strcmp(tag, "call")) {
        jj_node *n = mk(P, S_CALLBLOCK, ln);
        n->name = "caller";
        if (is_op(cur(P), "(")) parse_params(P, n);
        n->a = parse_expr(P);
        if (n->a->k != E_CALL) jj_fail(P->jmp, ln, "expected a call after 'call'");
        expect_block_end(P, "call");
        static const char *const ends[] = {"endcall", NULL};
        parse_body(P, &n->body, ends, "call");
        end_tag(P, "endcall");
        return n;
    }
    if (!strcmp(tag, "filter")) {
        jj_node *n = mk(P, S_FILTERBLOCK, ln);
        n->a = parse_filter_chain(P, NULL);
        expect_block_end(P, "filter");
        static const char *const ends[] = {"endfilter", NULL};
        parse_body(P, &n->body, ends, "filter");
        end_tag(P, "endfilter");
        return n;
    }
    if (!strcmp(tag, "with")) {
        jj_node *n = mk(P, S_WITH, ln);
        while (cur(P)->t != T_BLOCK_END) {
            if (n->args.n) expect_op(P, ",");
            jj_node *tg = parse_target(P, false);
            expect_op(P, "=");
            jj_nodes_push(P->a, &n->args, tg);
            jj_nodes_push(P->a, &n->kwvals, parse_expr(P));
        }
        expect_block_end(P, "with");
        static const char *const ends[] = {"endwith", NULL};
        parse_body(P, &n->body, ends, "with");
        end_tag(P, "endwith");
        return n;
    }
    if (!strcmp(tag, "generation")) { /* transformers' AssistantTracker: renders its body */
        jj_node *n = mk(P, S_WITH, ln);
        expect_block_end(P, "generation");
        static const char *const ends[] = {"endgeneration", NULL};
        parse_body(P, &n->body, ends, "generation");
        end_tag(P, "endgeneration");
        return n;
    }
    if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
        jj_node *n = mk(P, tag[0] == 'b' ? S_BREAK : S_CONTINUE, ln);
        expect_block_end(P, tag);
        return n;
    }
    for (int k = 0; UNSUPPORTED_TAGS[k]; k++)
        if (!strcmp(tag, UNSUPPORTED_TAGS[k]))
            jj_fail(P->jmp, ln, "unsupported construct '%s' tag", tag);
    jj_fail(P->jmp, ln, "unknown tag '%s'", tag);
}

static const char *parse_body(parser *P, jj_nodes *body, const char *const *ends, const char *in) {
    for (;;) {
        jj_tok *t = cur(P);
        switch (t->t) {
        case T_EOF:
            if (ends) {
                int k = 0;
                while (ends[k + 1]) k++;
                jj_fail(P->jmp, t->line, "unexpected end of template: '%s' not closed (expected '%s')",
                        in, ends[k]);
            }
            return NULL;
        case T_TEXT: {
            jj_node *n = mk(P, S_TEXT, t->line);
            n->lit = (jj_val){.t = V_STR};
            jj_str *s = jj_alloc(P->a, sizeof *s);
            s->p = t->p;
            s->n = t->n;
            n->lit.u.s = s;
            jj_nodes_push(P->a, body, n);
            P->i++;
            break;
        }
        case T_VAR_BEGIN: {
            P->i++;
            jj_node *n = mk(P, S_OUT, t->line);
            n->a = parse_tuple(P, true, false);
            if (cur(P)->t != T_VAR_END)
                jj_fail(P->jmp, line(P), "expected '}}', got %s", tok_desc(cur(P)));
            P->i++;
            jj_nodes_push(P->a, body, n);
            break;
        }
        case T_BLOCK_BEGIN: {
            P->i++;
            jj_tok *nt = cur(P);
            if (nt->t == T_NAME && ends)
                for (int k = 0; ends[k]; k++)
                    if (!strcmp(nt->p, ends[k])) return ends[k];
            if (nt->t == T_NAME && (!strncmp(nt->p, "end", 3) || !strcmp(nt->p, "else") ||
                                    !strcmp(nt->p, "elif")))
                jj_fail(P->jmp, nt->line, "unexpected '%s'%s%s", nt->p, in ? " inside " : "",
                        in ? in : "");
            jj_nodes_push(P->a, body, parse_statement(P));
            break;
        }
        default:
            jj_fail(P->jmp, t->line, "unexpected %s", tok_desc(t));
        }
    }
}

jj_node *jj_parse(jj_arena *a, jmp_buf *jmp, jj_tok *toks, int ntoks) {
    parser P = {.a = a, .jmp = jmp, .t = toks, .n = ntoks, .i = 0};
    jj_node *root = mk(&P, S_BODY, 1);
    parse_body(&P, &root->body, NULL, NULL);
    return root;
}
