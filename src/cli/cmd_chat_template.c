/* cmd_chat_template.c: `mtplx chat-template`: render a model's chat template
 * for a conversation and print the prompt exactly (no newline added).
 * The template comes from --template, or from -m: a GGUF file
 * (tokenizer.chat_template), an HF folder or a tokenizer_config.json
 * (chat_template: a string, or a list of {name, template} where "default"
 * is used). bos_token / eos_token come from tokenizer_config.json or the
 * GGUF vocabulary. */
#include "cli/cli.h"
#include "core/core.h"
#include "formats/gguf.h"
#include "template/template.h"

#include <cjson/cJSON.h>
#include <string.h>

static const char *CMD = "chat-template";

static void usage(FILE *f) {
    fprintf(f,
            "usage: mtplx chat-template -m PATH --messages FILE.json [options]\n"
            "\n"
            "Render a chat template for a conversation and print the prompt exactly.\n"
            "\n"
            "  -m, --model PATH         GGUF file, HF folder or tokenizer_config.json\n"
            "  --messages FILE.json     the conversation: a JSON list of messages\n"
            "                           (or an object with a \"messages\" member)\n"
            "  --tools FILE.json        tool definitions (a JSON list)\n"
            "  --add-generation-prompt  end with the assistant turn's opening\n"
            "  --template FILE.jinja    use this template instead of the model's\n"
            "  --var NAME=JSON          set a template variable (repeatable),\n"
            "                           e.g. --var enable_thinking=false\n"
            "  -h, --help               this help\n");
}

/* bos_token / eos_token of a tokenizer_config.json: a string or {"content": ...}. */
static void add_special(cJSON *vars, const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (cJSON_IsString(v) && !cJSON_GetObjectItemCaseSensitive(vars, key))
        cJSON_AddStringToObject(vars, key, v->valuestring);
}

/* chat_template of a parsed tokenizer_config.json, copied; NULL if none. */
static char *template_of_config(const cJSON *cfg) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(t)) return mtplx_strdup(t->valuestring);
    if (cJSON_IsArray(t)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, t) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            const cJSON *tt = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (cJSON_IsString(name) && !strcmp(name->valuestring, "default") && cJSON_IsString(tt))
                return mtplx_strdup(tt->valuestring);
        }
    }
    return NULL;
}

static cJSON *read_json(const char *path, const char *what) {
    char *text;
    size_t len;
    if (mtplx_read_file(path, &text, &len) != MTPLX_OK) {
        cli_error(what);
        return NULL;
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(text, &end, true);
    if (!j)
        fprintf(stderr, "mtplx %s: %s: malformed JSON near byte %zu\n", CMD, path,
                end ? (size_t)(end - text) : (size_t)0);
    free(text);
    return j;
}

/* Token text of the vocabulary entry named by key (a token id), or NULL. */
static const char *gguf_token(const mtplx_gguf *g, const char *key) {
    const mtplx_gguf_kv *id = mtplx_gguf_get(g, key);
    const mtplx_gguf_kv *toks = mtplx_gguf_get(g, "tokenizer.ggml.tokens");
    if (!id || !toks || toks->type != GGUF_TYPE_ARRAY || toks->arr_type != GGUF_TYPE_STRING) return NULL;
    uint64_t i = id->v.u64;
    if (i >= toks->arr_n) return NULL;
    return ((const mtplx_gguf_str *)toks->arr_data)[i].data;
}

/* Load the template (and bos/eos into vars) from -m. Returns false after printing. */
static bool load_model_template(const char *path, cJSON *vars, char **tmpl) {
    char cfg_path[4096];
    bool is_json = strlen(path) > 5 && !strcmp(path + strlen(path) - 5, ".json");
    if (mtplx_is_dir(path) || is_json) {
        if (is_json) snprintf(cfg_path, sizeof cfg_path, "%s", path);
        else if (mtplx_path_join(cfg_path, sizeof cfg_path, path, "tokenizer_config.json") != MTPLX_OK) {
            cli_error("model path");
            return false;
        }
        cJSON *cfg = mtplx_file_exists(cfg_path) ? read_json(cfg_path, "tokenizer_config.json") : NULL;
        if (cfg) {
            add_special(vars, cfg, "bos_token");
            add_special(vars, cfg, "eos_token");
            if (!*tmpl) *tmpl = template_of_config(cfg);
            cJSON_Delete(cfg);
        }
        if (!*tmpl && !is_json) { /* newer HF folders keep it in its own file */
            char jp[4096];
            size_t len;
            if (mtplx_path_join(jp, sizeof jp, path, "chat_template.jinja") == MTPLX_OK &&
                mtplx_file_exists(jp) && mtplx_read_file(jp, tmpl, &len) != MTPLX_OK) {
                cli_error("chat_template.jinja");
                return false;
            }
        }
        if (!*tmpl) {
            fprintf(stderr, "mtplx %s: %s has no chat_template (use --template)\n", CMD, path);
            return false;
        }
        return true;
    }
    mtplx_gguf *g;
    if (mtplx_gguf_open(path, &g) != MTPLX_OK) {
        cli_error("open model");
        return false;
    }
    const char *t = mtplx_gguf_get_str(g, "tokenizer.chat_template");
    const char *bos = gguf_token(g, "tokenizer.ggml.bos_token_id");
    const char *eos = gguf_token(g, "tokenizer.ggml.eos_token_id");
    if (bos && !cJSON_GetObjectItemCaseSensitive(vars, "bos_token")) cJSON_AddStringToObject(vars, "bos_token", bos);
    if (eos && !cJSON_GetObjectItemCaseSensitive(vars, "eos_token")) cJSON_AddStringToObject(vars, "eos_token", eos);
    if (!*tmpl && t) *tmpl = mtplx_strdup(t);
    mtplx_gguf_free(g);
    if (!*tmpl) {
        fprintf(stderr, "mtplx %s: %s has no tokenizer.chat_template (use --template)\n", CMD, path);
        return false;
    }
    return true;
}

int cmd_chat_template(int argc, char **argv) {
    const char *model = NULL, *messages = NULL, *tools = NULL, *tmpl_path = NULL;
    bool gen = false;
    cJSON *vars = cJSON_CreateObject();
    cJSON *extra = cJSON_CreateObject();
    char *tmpl = NULL;
    int rc = EXIT_RUNTIME;
    if (!vars || !extra) goto done;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            rc = EXIT_OK;
            goto done;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!has_val) { rc = cli_usage_error(CMD, "%s needs a path", a); goto done; }
            model = argv[++i];
        } else if (!strcmp(a, "--messages")) {
            if (!has_val) { rc = cli_usage_error(CMD, "--messages needs a file"); goto done; }
            messages = argv[++i];
        } else if (!strcmp(a, "--tools")) {
            if (!has_val) { rc = cli_usage_error(CMD, "--tools needs a file"); goto done; }
            tools = argv[++i];
        } else if (!strcmp(a, "--template")) {
            if (!has_val) { rc = cli_usage_error(CMD, "--template needs a file"); goto done; }
            tmpl_path = argv[++i];
        } else if (!strcmp(a, "--add-generation-prompt")) {
            gen = true;
        } else if (!strcmp(a, "--var")) {
            if (!has_val) { rc = cli_usage_error(CMD, "--var needs NAME=JSON"); goto done; }
            const char *kv = argv[++i];
            const char *eq = strchr(kv, '=');
            if (!eq || eq == kv) { rc = cli_usage_error(CMD, "--var expects NAME=JSON, got '%s'", kv); goto done; }
            cJSON *v = cJSON_Parse(eq + 1);
            if (!v) { rc = cli_usage_error(CMD, "--var %.*s: value is not JSON: '%s'", (int)(eq - kv), kv, eq + 1); goto done; }
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)(eq - kv), kv);
            cJSON_DeleteItemFromObjectCaseSensitive(extra, name);
            cJSON_AddItemToObject(extra, name, v);
        } else {
            rc = cli_usage_error(CMD, "unknown argument '%s'", a);
            goto done;
        }
    }
    if (!messages) { rc = cli_usage_error(CMD, "--messages is required"); goto done; }
    if (!model && !tmpl_path) { rc = cli_usage_error(CMD, "-m PATH or --template FILE is required"); goto done; }

    cJSON *msgs = read_json(messages, "messages");
    if (!msgs) goto done;
    if (cJSON_IsObject(msgs)) {
        cJSON *inner = cJSON_DetachItemFromObjectCaseSensitive(msgs, "messages");
        cJSON_Delete(msgs);
        msgs = inner;
    }
    if (!cJSON_IsArray(msgs)) {
        fprintf(stderr, "mtplx %s: %s: expected a JSON list of messages\n", CMD, messages);
        cJSON_Delete(msgs);
        goto done;
    }
    cJSON_AddItemToObject(vars, "messages", msgs);
    if (tools) {
        cJSON *t = read_json(tools, "tools");
        if (!t) goto done;
        cJSON_AddItemToObject(vars, "tools", t);
    }
    cJSON_AddBoolToObject(vars, "add_generation_prompt", gen);
    /* --var wins over everything */
    for (cJSON *e = extra->child; e; e = e->next) cJSON_DeleteItemFromObjectCaseSensitive(vars, e->string);
    if (tmpl_path) {
        size_t len;
        if (mtplx_read_file(tmpl_path, &tmpl, &len) != MTPLX_OK) {
            cli_error("read template");
            goto done;
        }
    }
    if (model && !load_model_template(model, vars, &tmpl)) goto done;
    while (extra->child) {
        cJSON *e = cJSON_DetachItemViaPointer(extra, extra->child);
        cJSON_AddItemToObject(vars, e->string, e);
    }

    mtplx_template *t;
    if (mtplx_template_parse(tmpl, &t) != MTPLX_OK) {
        cli_error("chat template");
        goto done;
    }
    char *out;
    size_t len;
    mtplx_status st = mtplx_template_render_json(t, vars, &out, &len);
    mtplx_template_free(t);
    if (st != MTPLX_OK) {
        cli_error("chat template");
        goto done;
    }
    fwrite(out, 1, len, stdout);
    fflush(stdout);
    free(out);
    rc = EXIT_OK;
done:
    free(tmpl);
    cJSON_Delete(vars);
    cJSON_Delete(extra);
    return rc;
}
