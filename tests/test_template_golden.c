/* test_template_golden.c: real chat templates (Qwen3, Qwen2.5, Llama 3.x,
 * DeepSeek, Mistral, Gemma, Phi-3.5, ... ) rendered byte-identically to
 * Python's jinja2 with transformers' settings. The conversations and the
 * expected prompts are checked in (tests/fixtures/template/<name>.json, made
 * by tools/make_template_goldens.py); the templates themselves are not, and
 * are read from the cache that tools/fetch_templates.sh fills
 * (MTPLX_TEMPLATE_CACHE or .cache/templates). Without the cache the test is
 * skipped with a message. Also runs `mtplx chat-template` on an HF folder. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/core.h"
#include "formats/gguf.h"
#include "template/template.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *cache_dir(void) {
    const char *e = getenv("MTPLX_TEMPLATE_CACHE");
    return e && *e ? e : MTPLX_SOURCE_DIR "/.cache/templates";
}

/* Template text for a fixture's template_file ("path" or "path#chat_template"). */
static char *load_template(const char *rel) {
    char path[4096];
    const char *hash = strchr(rel, '#');
    snprintf(path, sizeof path, "%s/%.*s", cache_dir(), (int)(hash ? hash - rel : (long)strlen(rel)), rel);
    char *text;
    size_t len;
    if (mtplx_read_file(path, &text, &len) != MTPLX_OK) return NULL;
    if (!hash) return text;
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    char *t = NULL;
    const cJSON *ct = cJSON_GetObjectItem(cfg, "chat_template");
    if (cJSON_IsString(ct)) t = mtplx_strdup(ct->valuestring);
    const cJSON *e;
    if (cJSON_IsArray(ct))
        cJSON_ArrayForEach(e, ct) if (!strcmp(cJSON_GetObjectItem(e, "name")->valuestring, "default"))
            t = mtplx_strdup(cJSON_GetObjectItem(e, "template")->valuestring);
    cJSON_Delete(cfg);
    return t;
}

static void test_real_templates(void **state) {
    (void)state;
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/llama.cpp/models/templates", cache_dir());
    if (!mtplx_is_dir(probe)) {
        fprintf(stderr, "SKIP: no template cache at %s (run tools/fetch_templates.sh)\n", cache_dir());
        skip();
    }
    DIR *d = opendir(MTPLX_SOURCE_DIR "/tests/fixtures/template");
    assert_non_null(d);
    int files = 0, cases = 0, bad = 0, missing = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t nl = strlen(de->d_name);
        if (nl < 6 || strcmp(de->d_name + nl - 5, ".json") || !strcmp(de->d_name, "unit.json")) continue;
        char path[4096], *text;
        size_t len;
        snprintf(path, sizeof path, MTPLX_SOURCE_DIR "/tests/fixtures/template/%s", de->d_name);
        assert_int_equal(mtplx_read_file(path, &text, &len), MTPLX_OK);
        cJSON *fx = cJSON_Parse(text);
        free(text);
        assert_non_null(fx);
        const char *rel = cJSON_GetObjectItem(fx, "template_file")->valuestring;
        char *tmpl = load_template(rel);
        if (!tmpl) {
            fprintf(stderr, "missing template %s for %s\n", rel, de->d_name);
            missing++;
            cJSON_Delete(fx);
            continue;
        }
        files++;
        mtplx_template *t = NULL;
        if (mtplx_template_parse(tmpl, &t) != MTPLX_OK) {
            fprintf(stderr, "%s: parse: %s\n", de->d_name, mtplx_last_error());
            bad++;
        }
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(fx, "cases")) {
            if (!t) break;
            cases++;
            char *out = NULL;
            size_t olen;
            const char *want = cJSON_GetObjectItem(c, "expected")->valuestring;
            mtplx_status st = mtplx_template_render_json(t, cJSON_GetObjectItem(c, "vars"), &out, &olen);
            if (st != MTPLX_OK || strcmp(out, want) != 0) {
                fprintf(stderr, "%s / %s: %s\n", de->d_name, cJSON_GetObjectItem(c, "name")->valuestring,
                        st ? mtplx_last_error() : "output differs");
                if (st == MTPLX_OK) fprintf(stderr, "  want [%s]\n  got  [%s]\n", want, out);
                bad++;
            }
            free(out);
        }
        mtplx_template_free(t);
        free(tmpl);
        cJSON_Delete(fx);
    }
    closedir(d);
    fprintf(stderr, "real templates: %d files, %d cases, %d mismatches, %d templates missing\n", files,
            cases, bad, missing);
    assert_true(files > 0);
    assert_int_equal(bad, 0);
    assert_int_equal(missing, 0);
}

/* `mtplx chat-template` on an HF folder: template from tokenizer_config.json,
 * bos_token from it, exact output with no newline added. */
static void test_cli_hf_folder(void **state) {
    (void)state;
    if (access(MTPLX_BIN, X_OK) != 0) {
        fprintf(stderr, "SKIP: %s not built\n", MTPLX_BIN);
        skip();
    }
    char dir[] = "/tmp/mtplx_tmpl_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char p[512], cmd[2048];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("{\"bos_token\": {\"content\": \"<B>\"}, \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"no\"},"
          " {\"name\": \"default\", \"template\": \"{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}\\n{% endfor %}"
          "{% if add_generation_prompt %}<assistant>{% endif %}{{ x }}\"}]}", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/m.json", dir);
    f = fopen(p, "w");
    assert_non_null(f);
    fputs("[{\"role\": \"user\", \"content\": \"hi\"}]", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s chat-template -m %s --messages %s/m.json --add-generation-prompt --var x=7 > %s/out.txt",
             MTPLX_BIN, dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(p, sizeof p, "%s/out.txt", dir);
    char *out;
    size_t len;
    assert_int_equal(mtplx_read_file(p, &out, &len), MTPLX_OK);
    assert_string_equal(out, "<B><user>hi\n<assistant>7");
    free(out);
    snprintf(cmd, sizeof cmd, "%s chat-template --messages %s/m.json 2>/dev/null", MTPLX_BIN, dir);
    assert_int_equal(WEXITSTATUS(system(cmd)), 2);
    /* a GGUF file: tokenizer.chat_template, bos_token from the vocabulary */
    mtplx_gguf *g = mtplx_gguf_new();
    assert_non_null(g);
    const char *toks[] = {"<unk>", "<BOS>", "<EOS>"};
    assert_int_equal(mtplx_gguf_set_str(g, "tokenizer.chat_template", "{{ bos_token }}{{ messages[0].content }}|{{ eos_token }}"), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_arr(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, toks, 3), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_u32(g, "tokenizer.ggml.bos_token_id", 1), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_u32(g, "tokenizer.ggml.eos_token_id", 2), MTPLX_OK);
    snprintf(p, sizeof p, "%s/m.gguf", dir);
    assert_int_equal(mtplx_gguf_write(g, p), MTPLX_OK);
    mtplx_gguf_free(g);
    snprintf(cmd, sizeof cmd, "%s chat-template -m %s/m.gguf --messages %s/m.json > %s/out2.txt", MTPLX_BIN, dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(p, sizeof p, "%s/out2.txt", dir);
    assert_int_equal(mtplx_read_file(p, &out, &len), MTPLX_OK);
    assert_string_equal(out, "<BOS>hi|<EOS>");
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    /* The goldens were rendered on 2026-12-01 (tools/make_template_goldens.py
     * pins the same day), and some templates print today's date. */
    setenv("MTPLX_NOW", "1796126400", 1); /* 2026-12-01 12:00 UTC */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_templates),
        cmocka_unit_test(test_cli_hf_folder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
