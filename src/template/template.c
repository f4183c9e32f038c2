/* template.c: the public face of the Jinja interpreter: parse a template
 * once (its own arena), render it against a cJSON object of variables (a
 * fresh arena per render, freed in one go), and the one-call
 * mtplx_template_render of mtplx.h. Errors inside either phase longjmp back
 * here with the message already recorded by mtplx_fail(). */
#include "template/template.h"
#include "template/jinja.h"

#include <string.h>

struct mtplx_template {
    jj_arena arena;
    jj_node *root;
};

mtplx_status mtplx_template_parse(const char *src, mtplx_template **out) {
    *out = NULL;
    if (!src) return mtplx_fail(MTPLX_ERR_ARG, "template: NULL source");
    mtplx_template *t = calloc(1, sizeof *t);
    if (!t) return mtplx_fail(MTPLX_ERR_NOMEM, "template: out of memory");
    jmp_buf jmp;
    t->arena.jmp = &jmp;
    t->arena.limit = JJ_MAX_MEMORY;
    if (setjmp(jmp)) {
        jj_arena_free(&t->arena);
        free(t);
        return MTPLX_ERR_FORMAT;
    }
    jj_tok *toks;
    int ntoks;
    jj_lex(&t->arena, &jmp, src, &toks, &ntoks);
    t->root = jj_parse(&t->arena, &jmp, toks, ntoks);
    t->arena.jmp = NULL;
    *out = t;
    return MTPLX_OK;
}

void mtplx_template_free(mtplx_template *t) {
    if (!t) return;
    jj_arena_free(&t->arena);
    free(t);
}

mtplx_status mtplx_template_render_json(const mtplx_template *t, const cJSON *vars, char **out,
                                        size_t *out_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t) return mtplx_fail(MTPLX_ERR_ARG, "template: NULL template");
    if (vars && !cJSON_IsObject(vars))
        return mtplx_fail(MTPLX_ERR_ARG, "template: variables must be a JSON object");
    jj_arena arena = {0};
    jmp_buf jmp;
    arena.jmp = &jmp;
    arena.limit = JJ_MAX_MEMORY;
    jj_ctx c = {.a = &arena, .jmp = &jmp};
    if (setjmp(jmp)) {
        jj_arena_free(&arena);
        return MTPLX_ERR_FORMAT;
    }
    jj_frame *g = jj_alloc(&arena, sizeof *g);
    if (vars)
        for (const cJSON *e = vars->child; e; e = e->next)
            jj_dict_set(&c, &g->vars, jj_cstr(&c, e->string ? e->string : ""), jj_from_cjson(&c, e));
    c.globals = g;
    jj_frame *top = jj_alloc(&arena, sizeof *top);
    top->parent = g;
    jj_buf b = {0};
    jj_exec_body(&c, top, &t->root->body, &b);
    char *res = malloc(b.n + 1);
    if (!res) {
        jj_arena_free(&arena);
        return mtplx_fail(MTPLX_ERR_NOMEM, "template: out of memory");
    }
    if (b.n) memcpy(res, b.p, b.n);
    res[b.n] = 0;
    *out = res;
    if (out_len) *out_len = b.n;
    jj_arena_free(&arena);
    return MTPLX_OK;
}

mtplx_status mtplx_template_render(const char *tmpl, const char *vars_json, char **out,
                                   size_t *out_len) {
    if (!out) return mtplx_fail(MTPLX_ERR_ARG, "template: NULL output pointer");
    *out = NULL;
    cJSON *vars = NULL;
    if (vars_json && *vars_json) {
        const char *end = NULL;
        vars = cJSON_ParseWithOpts(vars_json, &end, true);
        if (!vars) {
            size_t off = end ? (size_t)(end - vars_json) : 0;
            return mtplx_fail(MTPLX_ERR_FORMAT, "template variables: malformed JSON near byte %zu", off);
        }
        if (!cJSON_IsObject(vars)) {
            cJSON_Delete(vars);
            return mtplx_fail(MTPLX_ERR_FORMAT, "template variables: expected a JSON object");
        }
    }
    mtplx_template *t;
    mtplx_status st = mtplx_template_parse(tmpl, &t);
    if (st == MTPLX_OK) {
        st = mtplx_template_render_json(t, vars, out, out_len);
        mtplx_template_free(t);
    }
    cJSON_Delete(vars);
    return st;
}
