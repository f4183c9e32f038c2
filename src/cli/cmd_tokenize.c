/* cmd_tokenize.c: `mtplx tokenize`: text to token ids with a model's
 * tokenizer (a tokenizer.json, HF folder, GGUF or llama2.c tokenizer.bin).
 * Prints id<TAB>piece lines, or ids on one line (--ids), or pieces (--pieces). */
#include "cli/cli.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: mtplx tokenize [-m PATH] [--ids|--pieces] [--no-bos] [--no-special]\n"
               "                      [--tokenizer FILE] [TEXT...]\n\n"
               "Encode TEXT (or stdin when no TEXT is given) with a model's tokenizer.\n"
               "PATH: tokenizer.json, an HF folder, a .gguf, a llama2.c tokenizer.bin or a model\n"
               "name in the store; the built-in default model when left out.\n\n"
               "  --ids            print the ids space-separated on one line\n"
               "  --pieces         print the pieces space-separated on one line\n"
               "  --no-bos         do not add BOS/EOS (added only when the tokenizer's config says so)\n"
               "  --no-special     do not parse special-token strings (<|im_start|>, ...) in TEXT\n"
               "  --tokenizer FILE the tokenizer to use instead of the model's\n"
               "  -h, --help       this help\n\n"
               "default output: one line per token, id<TAB>piece (control chars escaped)\n"
               "exit codes: 0 ok, 1 the tokenizer cannot be loaded, 2 bad usage\n");
}

static void put_escaped(const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\\') fputs("\\\\", stdout);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
}

/* Load the tokenizer of PATH; for a llama2.c model .bin try tokenizer.bin beside it. */
mtplx_status cli_load_tokenizer(const char *path, mtplx_tokenizer **out);
mtplx_status cli_load_tokenizer(const char *path, mtplx_tokenizer **out) {
    mtplx_status st = mtplx_tokenizer_load(path, out);
    if (st == MTPLX_OK) return st;
    const char *slash = strrchr(path, '/');
    char alt[4096];
    const char *names[] = {"tokenizer.bin", "tok512.bin"};
    for (int i = 0; i < 2; i++) {
        snprintf(alt, sizeof alt, "%.*s%s", slash ? (int)(slash - path + 1) : 0, path, names[i]);
        if (strcmp(alt, path) && mtplx_tokenizer_load(alt, out) == MTPLX_OK) return MTPLX_OK;
    }
    return mtplx_tokenizer_load(path, out); /* restore the first error message */
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *tokfile = NULL;
    bool ids_only = false, pieces = false, add_special = true, parse_special = true;
    char *text = NULL;
    size_t tl = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(text);
            return EXIT_OK;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--tokenizer")) {
            if (i + 1 >= argc) {
                free(text);
                return cli_usage_error("tokenize", "%s needs a value", a);
            }
            if (!strcmp(a, "--tokenizer")) tokfile = argv[++i];
            else model = argv[++i];
        } else if (!strcmp(a, "--ids")) ids_only = true;
        else if (!strcmp(a, "--pieces")) pieces = true;
        else if (!strcmp(a, "--no-bos")) add_special = false;
        else if (!strcmp(a, "--no-special")) parse_special = false;
        else if (a[0] == '-' && a[1] && strcmp(a, "--") != 0) {
            free(text);
            return cli_usage_error("tokenize", "unknown option '%s'", a);
        } else {
            if (!strcmp(a, "--") && i + 1 < argc) a = argv[++i];
            size_t l = strlen(a);
            char *nt = realloc(text, tl + l + 2);
            if (!nt) {
                free(text);
                return EXIT_RUNTIME;
            }
            text = nt;
            if (tl) text[tl++] = ' ';
            memcpy(text + tl, a, l + 1);
            tl += l;
        }
    }
    if (ids_only && pieces) {
        free(text);
        return cli_usage_error("tokenize", "--ids and --pieces exclude each other");
    }
    if (!text) { /* stdin */
        size_t cap = 0;
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) {
            if (tl + n + 1 > cap) {
                cap = (tl + n + 1) * 2;
                char *nt = realloc(text, cap);
                if (!nt) {
                    free(text);
                    return EXIT_RUNTIME;
                }
                text = nt;
            }
            memcpy(text + tl, buf, n);
            tl += n;
        }
        if (!text) text = calloc(1, 1);
        else text[tl] = 0;
    }
    char path[4096];
    if (!tokfile && !cli_resolve_model(model, path, sizeof path)) {
        free(text);
        return EXIT_RUNTIME;
    }
    mtplx_tokenizer *tok = NULL;
    if (cli_load_tokenizer(tokfile ? tokfile : path, &tok) != MTPLX_OK) {
        cli_error("tokenize");
        free(text);
        return EXIT_RUNTIME;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (mtplx_tokenize(tok, text, tl, add_special, parse_special, &ids, &n) != MTPLX_OK) {
        cli_error("tokenize");
        mtplx_tokenizer_free(tok);
        free(text);
        return EXIT_RUNTIME;
    }
    for (size_t i = 0; i < n; i++) {
        if (ids_only) printf("%s%d", i ? " " : "", ids[i]);
        else if (pieces) {
            if (i) putchar(' ');
            put_escaped(mtplx_token_piece(tok, ids[i]));
        } else {
            printf("%d\t", ids[i]);
            put_escaped(mtplx_token_piece(tok, ids[i]));
            putchar('\n');
        }
    }
    if (ids_only || pieces) putchar('\n');
    free(ids);
    free(text);
    mtplx_tokenizer_free(tok);
    return EXIT_OK;
}
