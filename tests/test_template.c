/* test_template.c: the Jinja interpreter against jinja2. Every case of
 * tests/fixtures/template/unit.json (one small template per construct and
 * filter, expected strings rendered by Python's jinja2 with transformers'
 * settings, made by tools/make_template_goldens.py) must render
 * byte-identically, or fail where jinja2 fails. Then the error contract:
 * messages name the construct and its line, runaway templates stop, bad
 * JSON variables are rejected. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/core.h"
#include "template/template.h"

#include <cjson/cJSON.h>
#include <string.h>

static char *render(const char *tmpl, const char *vars, mtplx_status *st) {
    char *out = NULL;
    size_t len = 0;
    *st = mtplx_template_render(tmpl, vars, &out, &len);
    if (*st == MTPLX_OK) assert_int_equal(strlen(out), len);
    return out;
}

static void test_unit_fixture(void **state) {
    (void)state;
    char *text;
    size_t len;
    assert_int_equal(mtplx_read_file(MTPLX_SOURCE_DIR "/tests/fixtures/template/unit.json", &text, &len), MTPLX_OK);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    const cJSON *cases = cJSON_GetObjectItem(root, "cases");
    int n = 0, bad = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *tmpl = cJSON_GetObjectItem(c, "template")->valuestring;
        char *vars = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "vars"));
        const cJSON *exp = cJSON_GetObjectItem(c, "expected");
        mtplx_status st;
        char *out = render(tmpl, vars, &st);
        if (exp) {
            if (st != MTPLX_OK || strcmp(out, exp->valuestring) != 0) {
                fprintf(stderr, "case %s:\n  want [%s]\n  got  [%s] %s\n", name, exp->valuestring,
                        out ? out : "", st ? mtplx_last_error() : "");
                bad++;
            }
        } else if (st == MTPLX_OK) {
            fprintf(stderr, "case %s: jinja2 fails (%s) but we rendered [%s]\n", name,
                    cJSON_GetObjectItem(c, "error")->valuestring, out);
            bad++;
        }
        free(out);
        free(vars);
        n++;
    }
    cJSON_Delete(root);
    fprintf(stderr, "unit.json: %d cases, %d mismatches\n", n, bad);
    assert_true(n >= 80);
    assert_int_equal(bad, 0);
}

/* Render must fail with a message containing each of the given pieces. */
static void expect_error(const char *tmpl, const char *vars, ...) {
    mtplx_status st;
    char *out = render(tmpl, vars, &st);
    if (st == MTPLX_OK) fprintf(stderr, "expected an error for [%s], got [%s]\n", tmpl, out);
    assert_int_not_equal(st, MTPLX_OK);
    const char *msg = mtplx_last_error();
    va_list ap;
    va_start(ap, vars);
    for (const char *want; (want = va_arg(ap, const char *));) {
        if (!strstr(msg, want)) fprintf(stderr, "message [%s] lacks [%s]\n", msg, want);
        assert_non_null(strstr(msg, want));
    }
    va_end(ap);
}

static void test_errors_name_construct_and_line(void **state) {
    (void)state;
    expect_error("a\n\n{% include 'x.j' %}", "{}", "line 3", "include", NULL);
    expect_error("a\n{% nosuchtag %}", "{}", "line 2", "unknown tag 'nosuchtag'", NULL);
    expect_error("line1\nline2\n{{ x|foo }}", "{\"x\":1}", "line 3", "unknown filter 'foo'", NULL);
    expect_error("{{ x is foo }}", "{}", "line 1", "unknown test 'foo'", NULL);
    expect_error("{% for x in xs recursive %}{% endfor %}", "{\"xs\":[]}", "recursive", NULL);
    expect_error("{% if true %}\nx", "{}", "not closed", "endif", NULL);
    expect_error("{{ 1 + }}", "{}", "line 1", NULL);
    expect_error("{% endfor %}", "{}", "unexpected 'endfor'", NULL);
    expect_error("{{ 'abc }}", "{}", "unterminated string", NULL);
    expect_error("x\n{{ raise_exception('Conversation roles must alternate') }}", "{}", "line 2",
                 "Conversation roles must alternate", NULL);
    expect_error("{{ 1 + 'a' }}", "{}", "unsupported operand", NULL);
    expect_error("{% set l = [] %}{{ l.append(1) }}", "{}", "append", "unsafe", NULL);
}

static void test_undefined_semantics(void **state) {
    (void)state;
    mtplx_status st;
    /* printing, testing, iterating and defaulting an undefined are fine ... */
    char *out = render("[{{ nope }}|{{ nope is defined }}|{{ nope|default('d') }}|{% for x in nope %}x{% endfor %}|"
                       "{{ m.missing }}|{{ m.missing is defined }}|{% if nope %}t{% else %}f{% endif %}]",
                       "{\"m\":{}}", &st);
    assert_int_equal(st, MTPLX_OK);
    assert_string_equal(out, "[|False|d|||False|f]");
    free(out);
    /* ... an attribute of an undefined is an error naming it, as in jinja2 */
    expect_error("{{ nope.attr }}", "{}", "'nope' is undefined", NULL);
    expect_error("{{ nope + 1 }}", "{}", "'nope' is undefined", NULL);
    expect_error("{{ nope|tojson }}", "{}", "not JSON serializable", NULL);
}

static void test_runaway_is_bounded(void **state) {
    (void)state;
    double t0 = mtplx_time_ms();
    expect_error("{% for i in range(100000000) %}{% endfor %}", "{}", "line 1", "Range too big", NULL);
    expect_error("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", "{}",
                 "runaway", NULL);
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", "recursion", NULL);
    expect_error("{% set ns = namespace(s='xy') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 "{}", "runaway", NULL);
    expect_error("{{ 'x' * 1000000000 }}", "{}", "too large", NULL);
    /* generous: each stops in well under a second on any machine */
    assert_true(mtplx_time_ms() - t0 < 30000.0);
}

static void test_bad_vars(void **state) {
    (void)state;
    mtplx_status st;
    char *out = render("{{ x }}", "{\"x\": [1, 2", &st);
    assert_null(out);
    assert_int_equal(st, MTPLX_ERR_FORMAT);
    assert_non_null(strstr(mtplx_last_error(), "malformed JSON"));
    out = render("{{ x }}", "[1, 2]", &st);
    assert_int_equal(st, MTPLX_ERR_FORMAT);
    assert_non_null(strstr(mtplx_last_error(), "JSON object"));
    out = render("{{ x }}", NULL, &st); /* no variables at all is fine */
    assert_int_equal(st, MTPLX_OK);
    assert_string_equal(out, "");
    free(out);
}

static void test_parse_once_render_many(void **state) {
    (void)state;
    mtplx_template *t;
    assert_int_equal(mtplx_template_parse("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}", &t), MTPLX_OK);
    for (int i = 0; i < 3; i++) {
        cJSON *vars = cJSON_Parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
        char *out;
        size_t len;
        assert_int_equal(mtplx_template_render_json(t, vars, &out, &len), MTPLX_OK);
        assert_string_equal(out, "<user>hi");
        free(out);
        cJSON_Delete(vars);
    }
    mtplx_template_free(t);
    mtplx_template_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unit_fixture),
        cmocka_unit_test(test_errors_name_construct_and_line),
        cmocka_unit_test(test_undefined_semantics),
        cmocka_unit_test(test_runaway_is_bounded),
        cmocka_unit_test(test_bad_vars),
        cmocka_unit_test(test_parse_once_render_many),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
