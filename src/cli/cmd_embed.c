/* cmd_embed.c: `mtplx embed`: embedding vectors of texts, one JSON line each
 * ({"index": i, "tokens": n, "embedding": [...]}), from an embedding model
 * (BERT / sentence-transformers folder, Qwen3-Embedding, GGUF). Texts come
 * from the arguments, or one per line from stdin. All texts run as one call. */
#include "cli/cli.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: mtplx embed -m PATH [--query] [--dimensions N] [--threads N] [--device D] [TEXT...]\n\n"
               "Print the embedding of each TEXT (or of each stdin line) as a JSON line.\n\n"
               "  -m, --model PATH  an embedding model (HF folder with sentence-transformers config, GGUF)\n"
               "  --query           embed as queries (the model's query instruction, e.g. Qwen3-Embedding's)\n"
               "  --dimensions N    keep the first N dimensions and re-normalise (Matryoshka)\n"
               "  --threads N       CPU threads (default: all cores)\n"
               "  --device D        cpu (default), cuda (the first GPU; decoder models only) or auto\n"
               "  -h, --help        this help\n\n"
               "exit codes: 0 ok, 1 the model cannot embed or an input is invalid, 2 bad usage\n");
}

/* Lines of stdin (without newlines; empty lines skipped). */
static char **read_lines(int *n_out) {
    char **v = NULL, *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int n = 0;
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!len) continue;
        char **nv = realloc(v, (size_t)(n + 1) * sizeof *v);
        if (!nv || !(nv[n] = strdup(line))) {
            free(nv ? nv : v);
            free(line);
            return NULL;
        }
        v = nv;
        n++;
    }
    free(line);
    *n_out = n;
    return v;
}

int cmd_embed(int argc, char **argv) {
    const char *model = NULL;
    bool query = false;
    long dims = 0, threads = 0;
    const char *device = NULL;
    const char **texts = calloc((size_t)argc + 1, sizeof *texts);
    int n = 0;
    if (!texts) return EXIT_RUNTIME;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool val = !strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--dimensions") ||
                   !strcmp(a, "--threads") || !strcmp(a, "--device");
        if (val && i + 1 >= argc) {
            free(texts);
            return cli_usage_error("embed", "%s needs a value", a);
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(texts);
            return EXIT_OK;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = argv[++i];
        else if (!strcmp(a, "--query")) query = true;
        else if (!strcmp(a, "--dimensions")) {
            if (!cli_parse_int("embed", a, argv[++i], 1, 1 << 20, &dims)) { free(texts); return EXIT_USAGE; }
        } else if (!strcmp(a, "--threads")) {
            if (!cli_parse_int("embed", a, argv[++i], 1, 4096, &threads)) { free(texts); return EXIT_USAGE; }
        } else if (!strcmp(a, "--device")) {
            if (!cli_parse_device("embed", argv[++i], &device)) { free(texts); return EXIT_USAGE; }
        } else if (!strcmp(a, "--")) {
            while (++i < argc) texts[n++] = argv[i];
        } else if (a[0] == '-' && a[1]) {
            free(texts);
            return cli_usage_error("embed", "unknown option '%s'", a);
        } else texts[n++] = a;
    }
    if (!model) {
        free(texts);
        return cli_usage_error("embed", "-m PATH is required (an embedding model)");
    }
    char **lines = NULL;
    int n_lines = 0;
    if (!n) {
        lines = read_lines(&n_lines);
        if (!lines && n_lines) { free(texts); return EXIT_RUNTIME; }
        free(texts);
        texts = (const char **)lines;
        n = n_lines;
    }
    int rc = EXIT_RUNTIME;
    char path[4096];
    mtplx_model *m = NULL;
    mtplx_ctx *ctx = NULL;
    float *vec = NULL;
    if (!cli_resolve_model(model, path, sizeof path)) goto done;
    if (mtplx_model_load(path, NULL, &m) != MTPLX_OK) { cli_error("embed: loading the model"); goto done; }
    int32_t d = mtplx_embed_dim(m);
    if (!d) {
        fprintf(stderr, "mtplx embed: %s is not an embedding model\n", path);
        goto done;
    }
    if (dims > d) {
        rc = cli_usage_error("embed", "--dimensions %ld is more than the model's %d", dims, d);
        goto done;
    }
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_threads = (int32_t)threads;
    cp.device = device;
    if (mtplx_ctx_new(m, &cp, &ctx) != MTPLX_OK) { cli_error("embed: context"); goto done; }
    vec = malloc((size_t)(n ? n : 1) * (size_t)d * sizeof(float));
    if (!vec) goto done;
    int32_t n_tok = 0;
    if (mtplx_embed(ctx, texts, n, query, vec, &n_tok) != MTPLX_OK) { cli_error("embed"); goto done; }
    int32_t od = dims ? (int32_t)dims : d;
    if (dims && mtplx_embed_truncate(vec, n, d, od, true) != MTPLX_OK) { cli_error("embed"); goto done; }
    for (int i = 0; i < n; i++) {
        printf("{\"index\":%d,\"embedding\":[", i);
        for (int32_t j = 0; j < od; j++) printf("%s%.9g", j ? "," : "", vec[(size_t)i * od + j]);
        printf("]}\n");
    }
    fprintf(stderr, "mtplx embed: %d texts, %d tokens, dim %d\n", n, n_tok, od);
    rc = EXIT_OK;
done:
    free(vec);
    mtplx_ctx_free(ctx);
    mtplx_model_free(m);
    if (lines) for (int i = 0; i < n_lines; i++) free(lines[i]);
    free(texts);
    return rc;
}
