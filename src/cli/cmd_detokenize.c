/* cmd_detokenize.c: `mtplx detokenize -m PATH ID...`: token ids (arguments,
 * or whitespace-separated on stdin) back to text, written as is. */
#include "cli/cli.h"

#include <stdlib.h>
#include <string.h>

mtplx_status cli_load_tokenizer(const char *path, mtplx_tokenizer **out); /* cmd_tokenize.c */

static void usage(FILE *f) {
    fprintf(f, "usage: mtplx detokenize [-m PATH] [--skip-special] [--tokenizer FILE] [ID...]\n\n"
               "Decode token ids (arguments, or whitespace-separated on stdin) to text.\n"
               "PATH: tokenizer.json, an HF folder, a .gguf, a llama2.c tokenizer.bin or a model\n"
               "name in the store; the built-in default model when left out.\n\n"
               "  --skip-special   drop control / special tokens\n"
               "  --tokenizer FILE the tokenizer to use instead of the model's\n"
               "  -h, --help       this help\n\n"
               "exit codes: 0 ok, 1 cannot load or an id is out of range, 2 bad usage\n");
}

static bool push_id(int32_t **ids, size_t *n, size_t *cap, const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 0 || v > INT32_MAX) return false;
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        int32_t *x = realloc(*ids, *cap * sizeof *x);
        if (!x) return false;
        *ids = x;
    }
    (*ids)[(*n)++] = (int32_t)v;
    return true;
}

int cmd_detokenize(int argc, char **argv) {
    const char *model = NULL, *tokfile = NULL;
    bool skip = false, any = false;
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(ids);
            return EXIT_OK;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--tokenizer")) {
            if (i + 1 >= argc) {
                free(ids);
                return cli_usage_error("detokenize", "%s needs a value", a);
            }
            if (!strcmp(a, "--tokenizer")) tokfile = argv[++i];
            else model = argv[++i];
        } else if (!strcmp(a, "--skip-special")) skip = true;
        else {
            any = true;
            if (!push_id(&ids, &n, &cap, a)) {
                free(ids);
                return cli_usage_error("detokenize", "'%s' is not a token id", a);
            }
        }
    }
    if (!any) {
        char w[64];
        while (scanf("%63s", w) == 1)
            if (!push_id(&ids, &n, &cap, w)) {
                free(ids);
                return cli_usage_error("detokenize", "'%s' is not a token id", w);
            }
    }
    char path[4096];
    if (!tokfile && !cli_resolve_model(model, path, sizeof path)) {
        free(ids);
        return EXIT_RUNTIME;
    }
    mtplx_tokenizer *tok = NULL;
    if (cli_load_tokenizer(tokfile ? tokfile : path, &tok) != MTPLX_OK) {
        cli_error("detokenize");
        free(ids);
        return EXIT_RUNTIME;
    }
    char *text = NULL;
    size_t tl = 0;
    int rc = EXIT_OK;
    if (mtplx_detokenize(tok, ids, n, skip, &text, &tl) != MTPLX_OK) {
        cli_error("detokenize");
        rc = EXIT_RUNTIME;
    } else {
        fwrite(text, 1, tl, stdout);
        putchar('\n');
    }
    free(text);
    free(ids);
    mtplx_tokenizer_free(tok);
    return rc;
}
