/* cmd_rerank.c: `mtplx rerank`: relevance scores of documents for a query
 * from a reranker (BERT cross-encoder or Qwen3-Reranker style), one line per
 * document in the given order: score<TAB>index<TAB>document. --sort orders
 * them by score, best first. */
#include "cli/cli.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: mtplx rerank -m PATH --query Q [--sort] [--threads N] [--device D] DOC...\n\n"
               "Score each DOC's relevance to Q in [0, 1].\n\n"
               "  -m, --model PATH  a reranker (cross-encoder HF folder / GGUF, Qwen3-Reranker)\n"
               "  -q, --query Q     the query\n"
               "  --sort            print best first (default: the given order)\n"
               "  --threads N       CPU threads (default: all cores)\n"
               "  --device D        cpu (default), cuda (the first GPU; decoder models only) or auto\n"
               "  -h, --help        this help\n\n"
               "output: score<TAB>index<TAB>document per line\n"
               "exit codes: 0 ok, 1 the model cannot rerank or an input is invalid, 2 bad usage\n");
}

static const float *g_scores;
static int by_score(const void *a, const void *b) {
    float x = g_scores[*(const int *)a], y = g_scores[*(const int *)b];
    return x < y ? 1 : x > y ? -1 : *(const int *)a - *(const int *)b;
}

int cmd_rerank(int argc, char **argv) {
    const char *model = NULL, *query = NULL;
    bool sort = false;
    long threads = 0;
    const char *device = NULL;
    const char **docs = calloc((size_t)argc + 1, sizeof *docs);
    int n = 0;
    if (!docs) return EXIT_RUNTIME;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool val = !strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "-q") ||
                   !strcmp(a, "--query") || !strcmp(a, "--threads") || !strcmp(a, "--device");
        if (val && i + 1 >= argc) {
            free(docs);
            return cli_usage_error("rerank", "%s needs a value", a);
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(docs);
            return EXIT_OK;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = argv[++i];
        else if (!strcmp(a, "-q") || !strcmp(a, "--query")) query = argv[++i];
        else if (!strcmp(a, "--sort")) sort = true;
        else if (!strcmp(a, "--threads")) {
            if (!cli_parse_int("rerank", a, argv[++i], 1, 4096, &threads)) { free(docs); return EXIT_USAGE; }
        } else if (!strcmp(a, "--device")) {
            if (!cli_parse_device("rerank", argv[++i], &device)) { free(docs); return EXIT_USAGE; }
        } else if (!strcmp(a, "--")) {
            while (++i < argc) docs[n++] = argv[i];
        } else if (a[0] == '-' && a[1]) {
            free(docs);
            return cli_usage_error("rerank", "unknown option '%s'", a);
        } else docs[n++] = a;
    }
    if (!model || !query || !n) {
        free(docs);
        return cli_usage_error("rerank", "-m PATH, --query Q and at least one DOC are required");
    }
    int rc = EXIT_RUNTIME;
    char path[4096];
    mtplx_model *m = NULL;
    mtplx_ctx *ctx = NULL;
    float *s = malloc((size_t)n * sizeof *s);
    int *order = malloc((size_t)n * sizeof *order);
    if (!s || !order) goto done;
    if (!cli_resolve_model(model, path, sizeof path)) goto done;
    if (mtplx_model_load(path, NULL, &m) != MTPLX_OK) { cli_error("rerank: loading the model"); goto done; }
    if (!(mtplx_model_roles(m) & MTPLX_ROLE_RERANK)) {
        fprintf(stderr, "mtplx rerank: %s is not a reranker\n", path);
        goto done;
    }
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_threads = (int32_t)threads;
    cp.device = device;
    if (mtplx_ctx_new(m, &cp, &ctx) != MTPLX_OK) { cli_error("rerank: context"); goto done; }
    int32_t n_tok = 0;
    if (mtplx_rerank(ctx, query, docs, n, s, &n_tok) != MTPLX_OK) { cli_error("rerank"); goto done; }
    for (int i = 0; i < n; i++) order[i] = i;
    g_scores = s;
    if (sort) qsort(order, (size_t)n, sizeof *order, by_score);
    for (int k = 0; k < n; k++) printf("%.6f\t%d\t%s\n", s[order[k]], order[k], docs[order[k]]);
    fprintf(stderr, "mtplx rerank: %d documents, %d tokens\n", n, n_tok);
    rc = EXIT_OK;
done:
    free(s);
    free(order);
    mtplx_ctx_free(ctx);
    mtplx_model_free(m);
    free(docs);
    return rc;
}
