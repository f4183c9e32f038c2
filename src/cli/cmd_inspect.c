/* cmd_inspect.c: `mtplx inspect [PATH] [--json] [--tensors]`: what a
 * checkpoint is, read from its container alone (no model is built): format,
 * architecture, hyper-parameters, tensor count and bytes per type, parameter
 * counts for the trunk and the MTP heads, tokenizer kind and vocabulary size,
 * whether a chat template is present. --json prints the same as one JSON
 * object; --tensors adds the tensor table. */
#include "cli/cli.h"
#include "formats/formats.h"
#include "kernels/kernels.h"
#include "model/model.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <string.h>

typedef struct type_stat {
    int64_t count;
    uint64_t bytes;
} type_stat;

typedef struct summary {
    const char *format, *arch, *name;
    int roles; /* MTPLX_ROLE_* bits; -1 when the model cannot be built */
    int64_t n_layer_total, n_mtp, n_trunk_layers;
    int64_t n_params, n_params_mtp;
    uint64_t n_bytes;
    type_stat types[MTPLX_TYPE_COUNT];
    const char *tok_kind;
    int64_t n_vocab;
    bool chat_template;
} summary;

static void usage(FILE *f) {
    fprintf(f, "usage: mtplx inspect [PATH] [--json] [--tensors] [--tokenizer FILE]\n\n"
               "Show what a checkpoint is: format, architecture, hyper-parameters, tensor\n"
               "types and sizes, parameter counts (trunk and MTP heads), tokenizer, chat\n"
               "template. PATH: a .gguf file, an HF folder, a llama2.c .bin, or a model name\n"
               "in the store; the built-in default model when left out.\n\n"
               "  --json           print one JSON object instead of text\n"
               "  --tensors        list every tensor (name, type, shape, bytes)\n"
               "  --tokenizer FILE llama2.c only: its tokenizer.bin (default: beside it)\n"
               "  -h, --help       this help\n\n"
               "exit codes: 0 ok, 1 the checkpoint cannot be read, 2 bad usage\n");
}

/* Block index of a "blk.N." tensor name, or -1. */
static int64_t block_of(const char *name) {
    if (strncmp(name, "blk.", 4) || name[4] < '0' || name[4] > '9') return -1;
    return strtoll(name + 4, NULL, 10);
}

static bool is_mtp_tensor(const summary *s, const char *name) {
    int64_t b = block_of(name);
    if (s->n_mtp > 0 && b >= s->n_trunk_layers) return true;
    return strstr(name, ".nextn.") != NULL || !strncmp(name, "mtp.", 4);
}

/* Vocabulary size of an HF tokenizer.json: the largest id + 1. */
static int64_t hf_vocab_size(const char *json) {
    cJSON *j = cJSON_Parse(json);
    if (!j) return -1;
    int64_t n = 0;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *it;
    if (cJSON_IsArray(vocab)) n = cJSON_GetArraySize(vocab); /* Unigram: [piece, score] */
    else if (cJSON_IsObject(vocab))
        cJSON_ArrayForEach(it, vocab) if (cJSON_IsNumber(it) && it->valuedouble + 1 > (double)n &&
                                          it->valuedouble < 1e12) n = (int64_t)it->valuedouble + 1;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "added_tokens")) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (cJSON_IsNumber(id) && id->valuedouble + 1 > (double)n && id->valuedouble < 1e12)
            n = (int64_t)id->valuedouble + 1;
    }
    cJSON_Delete(j);
    return n;
}

static void summarize(const mtplx_gguf *g, const char *format, summary *s) {
    memset(s, 0, sizeof *s);
    s->format = format;
    s->arch = mtplx_gguf_get_str(g, "general.architecture");
    s->name = mtplx_gguf_get_str(g, "general.name");
    s->n_layer_total = mtplx_gguf_get_arch_int(g, "block_count", 0);
    s->n_mtp = mtplx_gguf_get_arch_int(g, "nextn_predict_layers", 0);
    s->n_trunk_layers = s->n_layer_total - s->n_mtp;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const mtplx_gguf_tensor *t = &g->tensors[i];
        int64_t n = mtplx_tensor_nelements(t);
        s->n_params += n;
        s->n_bytes += t->nbytes;
        if (is_mtp_tensor(s, t->name)) s->n_params_mtp += n;
        if (t->type >= 0 && t->type < MTPLX_TYPE_COUNT) {
            s->types[t->type].count++;
            s->types[t->type].bytes += t->nbytes;
        }
    }
    /* heads present without the key (a GGUF from elsewhere): count nextn blocks */
    if (s->n_mtp == 0 && s->n_params_mtp > 0) {
        int64_t lo = INT64_MAX, hi = -1;
        for (int64_t i = 0; i < g->n_tensors; i++)
            if (strstr(g->tensors[i].name, ".nextn.")) {
                int64_t b = block_of(g->tensors[i].name);
                if (b >= 0 && b < lo) lo = b;
                if (b > hi) hi = b;
            }
        if (hi >= 0) s->n_mtp = hi - lo + 1;
    }
    const mtplx_gguf_kv *toks = mtplx_gguf_get(g, "tokenizer.ggml.tokens");
    const char *hfjson = mtplx_gguf_get_str(g, "tokenizer.huggingface.json");
    s->tok_kind = mtplx_gguf_get_str(g, "tokenizer.ggml.model");
    s->n_vocab = -1;
    if (toks && toks->type == GGUF_TYPE_ARRAY) s->n_vocab = (int64_t)toks->arr_n;
    if (hfjson) {
        if (!s->tok_kind) s->tok_kind = "huggingface";
        if (s->n_vocab < 0) s->n_vocab = hf_vocab_size(hfjson);
    }
    if (!s->tok_kind) s->tok_kind = "none";
    s->chat_template = mtplx_gguf_get_str(g, "tokenizer.chat_template") != NULL;
}

/* The head's layout as the file states it (forge writes mtplx.nextn.layout). */
static const char *head_layout(const mtplx_gguf *g) {
    const char *l = mtplx_gguf_get_str(g, "mtplx.nextn.layout");
    if (l) return l;
    return mtplx_gguf_get_bool(g, "mtplx.nextn.hidden_first", false) ? "mimo" : "nextn (unstated)";
}

/* Whether this runtime can draft with the heads: a supported trunk and every
 * tensor the head code reads (model.c load_mtp), else why not in *why. */
static bool head_usable(const mtplx_gguf *g, const summary *s, const char **why) {
    static const char *need[] = {"nextn.enorm.weight", "nextn.hnorm.weight", "nextn.eh_proj.weight",
                                 "nextn.shared_head_norm.weight", "attn_q.weight", "attn_k.weight",
                                 "attn_v.weight", "attn_output.weight", "ffn_gate.weight",
                                 "ffn_up.weight", "ffn_down.weight", "attn_norm.weight", "ffn_norm.weight"};
    static char buf[160];
    if (!mtplx_arch_find(s->arch)) return (*why = "architecture not supported"), false;
    if (s->n_mtp > MTPLX_MAX_DRAFT) return (*why = "more heads than the runtime drafts with"), false;
    for (int64_t h = 0; h < s->n_mtp; h++)
        for (size_t i = 0; i < sizeof need / sizeof *need; i++) {
            char name[128];
            snprintf(name, sizeof name, "blk.%lld.%s", (long long)(s->n_trunk_layers + h), need[i]);
            if (!mtplx_gguf_find_tensor(g, name)) {
                snprintf(buf, sizeof buf, "tensor %s is missing", name);
                return (*why = buf), false;
            }
        }
    *why = "";
    return true;
}

static const char *type_name(int type) {
    const mtplx_type_traits *ti = mtplx_type_info(type);
    return ti ? ti->name : "?";
}

/* Hyper-parameters: the "<arch>.*" keys that are not arrays. */
static bool is_hparam(const summary *s, const mtplx_gguf_kv *kv) {
    size_t al = s->arch ? strlen(s->arch) : 0;
    return s->arch && kv->type != GGUF_TYPE_ARRAY && !strncmp(kv->key, s->arch, al) &&
           kv->key[al] == '.';
}

static void print_value(const mtplx_gguf_kv *kv) {
    switch (kv->type) {
    case GGUF_TYPE_STRING: printf("%s", kv->v.str.data); break;
    case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64: printf("%g", kv->v.f64); break;
    case GGUF_TYPE_BOOL: printf("%s", kv->v.u64 ? "true" : "false"); break;
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
        printf("%lld", (long long)kv->v.i64);
        break;
    default: printf("%llu", (unsigned long long)kv->v.u64);
    }
}

static void print_text(const char *path, const mtplx_gguf *g, const summary *s, bool tensors) {
    printf("file:          %s\n", path);
    if (!strcmp(s->format, "gguf")) printf("format:        gguf (version %u)\n", g->version);
    else printf("format:        %s\n", s->format);
    printf("architecture:  %s\n", s->arch ? s->arch : "(none)");
    if (s->name) printf("name:          %s\n", s->name);
    printf("hyper-parameters:\n");
    size_t al = s->arch ? strlen(s->arch) + 1 : 0;
    for (int64_t i = 0; i < g->n_kv; i++) {
        if (!is_hparam(s, &g->kv[i])) continue;
        printf("  %-36s ", g->kv[i].key + al);
        print_value(&g->kv[i]);
        printf("\n");
    }
    printf("tensors:       %lld (%.2f MiB)\n", (long long)g->n_tensors, s->n_bytes / 1048576.0);
    for (int t = 0; t < MTPLX_TYPE_COUNT; t++)
        if (s->types[t].count)
            printf("  %-6s %6lld tensors %12.2f MiB\n", type_name(t),
                   (long long)s->types[t].count, s->types[t].bytes / 1048576.0);
    printf("parameters:    %lld (trunk %lld, MTP %lld)\n", (long long)s->n_params,
           (long long)(s->n_params - s->n_params_mtp), (long long)s->n_params_mtp);
    if (s->n_mtp > 0)
        printf("MTP heads:     %lld (blocks %lld..%lld)%s\n", (long long)s->n_mtp,
               (long long)s->n_trunk_layers, (long long)(s->n_layer_total - 1),
               mtplx_gguf_get_bool(g, "mtplx.nextn.hidden_first", false) ? ", [hidden, emb] order"
                                                                          : "");
    else printf("MTP heads:     none\n");
    if (s->n_mtp > 0) {
        const char *why;
        bool ok = head_usable(g, s, &why);
        int64_t dt = mtplx_gguf_get_int(g, "mtplx.nextn.depth_trained", 0);
        printf("MTP layout:    %s", head_layout(g));
        if (dt > 0) printf(", trained to depth %lld", (long long)dt);
        printf("; usable by mtplx: %s%s%s\n", ok ? "yes" : "no", ok ? "" : " - ", why);
    }
    if (s->n_vocab >= 0) printf("tokenizer:     %s, vocab %lld\n", s->tok_kind, (long long)s->n_vocab);
    else printf("tokenizer:     %s\n", s->tok_kind);
    printf("chat template: %s\n", s->chat_template ? "yes" : "no");
    if (s->roles >= 0)
        printf("roles:         %s%s%s%s\n", s->roles & MTPLX_ROLE_GENERATE ? "generate " : "",
               s->roles & MTPLX_ROLE_EMBED ? "embed " : "", s->roles & MTPLX_ROLE_RERANK ? "rerank " : "",
               s->roles ? "" : "none");
    if (!tensors) return;
    printf("\n%-48s %-6s %-24s %12s\n", "tensor", "type", "shape (ne)", "bytes");
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const mtplx_gguf_tensor *t = &g->tensors[i];
        char shape[64];
        int n = 0;
        for (int d = 0; d < t->n_dims; d++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%lld", d ? " x " : "",
                          (long long)t->ne[d]);
        printf("%-48s %-6s %-24s %12zu\n", t->name, type_name(t->type), shape, t->nbytes);
    }
}

static cJSON *json_value(const mtplx_gguf_kv *kv) {
    switch (kv->type) {
    case GGUF_TYPE_STRING: return cJSON_CreateString(kv->v.str.data);
    case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64: return cJSON_CreateNumber(kv->v.f64);
    case GGUF_TYPE_BOOL: return cJSON_CreateBool(kv->v.u64 != 0);
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
        return cJSON_CreateNumber((double)kv->v.i64);
    default: return cJSON_CreateNumber((double)kv->v.u64);
    }
}

static int print_json(const char *path, const mtplx_gguf *g, const summary *s, bool tensors) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", path);
    cJSON_AddStringToObject(o, "format", s->format);
    if (!strcmp(s->format, "gguf")) cJSON_AddNumberToObject(o, "gguf_version", g->version);
    if (s->arch) cJSON_AddStringToObject(o, "architecture", s->arch);
    else cJSON_AddNullToObject(o, "architecture");
    if (s->name) cJSON_AddStringToObject(o, "name", s->name);
    cJSON *hp = cJSON_AddObjectToObject(o, "hparams");
    size_t al = s->arch ? strlen(s->arch) + 1 : 0;
    for (int64_t i = 0; i < g->n_kv; i++)
        if (is_hparam(s, &g->kv[i])) cJSON_AddItemToObject(hp, g->kv[i].key + al, json_value(&g->kv[i]));
    cJSON_AddNumberToObject(o, "n_tensors", (double)g->n_tensors);
    cJSON_AddNumberToObject(o, "n_bytes", (double)s->n_bytes);
    cJSON *ty = cJSON_AddObjectToObject(o, "types");
    for (int t = 0; t < MTPLX_TYPE_COUNT; t++)
        if (s->types[t].count) {
            cJSON *e = cJSON_AddObjectToObject(ty, type_name(t));
            cJSON_AddNumberToObject(e, "tensors", (double)s->types[t].count);
            cJSON_AddNumberToObject(e, "bytes", (double)s->types[t].bytes);
        }
    cJSON_AddNumberToObject(o, "n_params", (double)s->n_params);
    cJSON_AddNumberToObject(o, "n_params_trunk", (double)(s->n_params - s->n_params_mtp));
    cJSON_AddNumberToObject(o, "n_params_mtp", (double)s->n_params_mtp);
    cJSON_AddNumberToObject(o, "mtp_heads", (double)s->n_mtp);
    if (s->n_mtp > 0) {
        const char *why;
        cJSON_AddStringToObject(o, "mtp_layout", head_layout(g));
        cJSON_AddNumberToObject(o, "mtp_depth_trained",
                                (double)mtplx_gguf_get_int(g, "mtplx.nextn.depth_trained", 0));
        cJSON_AddBoolToObject(o, "mtp_usable", head_usable(g, s, &why));
    }
    cJSON *tk = cJSON_AddObjectToObject(o, "tokenizer");
    cJSON_AddStringToObject(tk, "kind", s->tok_kind);
    if (s->n_vocab >= 0) cJSON_AddNumberToObject(tk, "vocab_size", (double)s->n_vocab);
    else cJSON_AddNullToObject(tk, "vocab_size");
    cJSON_AddBoolToObject(o, "chat_template", s->chat_template);
    if (s->roles >= 0) { /* what the model can serve: generate / embed / rerank */
        cJSON *r = cJSON_AddArrayToObject(o, "roles");
        if (s->roles & MTPLX_ROLE_GENERATE) cJSON_AddItemToArray(r, cJSON_CreateString("generate"));
        if (s->roles & MTPLX_ROLE_EMBED) cJSON_AddItemToArray(r, cJSON_CreateString("embed"));
        if (s->roles & MTPLX_ROLE_RERANK) cJSON_AddItemToArray(r, cJSON_CreateString("rerank"));
    } else {
        cJSON_AddNullToObject(o, "roles");
    }
    if (tensors) {
        cJSON *arr = cJSON_AddArrayToObject(o, "tensors");
        for (int64_t i = 0; i < g->n_tensors; i++) {
            const mtplx_gguf_tensor *t = &g->tensors[i];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", t->name);
            cJSON_AddStringToObject(e, "type", type_name(t->type));
            cJSON *ne = cJSON_AddArrayToObject(e, "ne");
            for (int d = 0; d < t->n_dims; d++)
                cJSON_AddItemToArray(ne, cJSON_CreateNumber((double)t->ne[d]));
            cJSON_AddNumberToObject(e, "bytes", (double)t->nbytes);
            cJSON_AddBoolToObject(e, "mtp", is_mtp_tensor(s, t->name));
            cJSON_AddItemToArray(arr, e);
        }
    }
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    if (!txt) {
        fprintf(stderr, "mtplx inspect: out of memory\n");
        return EXIT_RUNTIME;
    }
    printf("%s\n", txt);
    free(txt);
    return EXIT_OK;
}

int cmd_inspect(int argc, char **argv) {
    const char *arg = NULL, *tokenizer = NULL;
    bool json = false, tensors = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return EXIT_OK;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--tensors")) {
            tensors = true;
        } else if (!strcmp(a, "--tokenizer")) {
            if (i + 1 >= argc) return cli_usage_error("inspect", "--tokenizer needs a file");
            tokenizer = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("inspect", "unknown option '%s'", a);
        } else if (arg) {
            return cli_usage_error("inspect", "one checkpoint at a time ('%s' and '%s')", arg, a);
        } else {
            arg = a;
        }
    }
    char path[PATH_MAX];
    if (!cli_resolve_model(arg, path, sizeof path)) return EXIT_RUNTIME;
    const char *format = mtplx_detect_format(path);
    mtplx_gguf *g = NULL;
    if (!format || mtplx_checkpoint_load(path, tokenizer, &g) != MTPLX_OK) {
        cli_error("inspect");
        return EXIT_RUNTIME;
    }
    summary s;
    summarize(g, format, &s);
    /* roles need the model itself (heads, pooling config): build it (weights stay mapped) */
    mtplx_model_params mp = mtplx_model_default_params();
    mp.tokenizer_path = tokenizer;
    mp.load_mtp = false;
    mtplx_model *model = NULL;
    s.roles = mtplx_model_load(path, &mp, &model) == MTPLX_OK ? mtplx_model_roles(model) : -1;
    mtplx_model_free(model);
    int rc = EXIT_OK;
    if (json) rc = print_json(path, g, &s, tensors);
    else print_text(path, g, &s, tensors);
    mtplx_gguf_free(g);
    return rc;
}
