/* bench_tokenizer.c: encoding throughput of one tokenizer on one core.
 * usage: bench_tokenizer TOKENIZER TEXTFILE [MAX_MB] [REPEATS]
 * Prints MB/s for one mtplx_tokenize call over the text (best of REPEATS),
 * tokens/s, and a decode round-trip check. A benchmark, not a test: nothing
 * is asserted about speed.
 * Build: cc -O2 -Iinclude -Isrc bench/bench_tokenizer.c -Lbuild -lmtplx \
 *        -lpcre2-8 -lutf8proc -lcjson -lmicrohttpd -lpthread -lm */
#include "mtplx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER TEXTFILE [MAX_MB] [REPEATS]\n", argv[0]);
        return 2;
    }
    double max_mb = argc > 3 ? atof(argv[3]) : 4.0;
    int reps = argc > 4 ? atoi(argv[4]) : 3;
    double t0 = now();
    mtplx_tokenizer *tok;
    if (mtplx_tokenizer_load(argv[1], &tok) != MTPLX_OK) {
        fprintf(stderr, "load: %s\n", mtplx_last_error());
        return 1;
    }
    double tload = now() - t0;
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    size_t cap = (size_t)(max_mb * 1e6), n;
    char *text = malloc(cap + 1);
    n = fread(text, 1, cap, f);
    fclose(f);
    text[n] = 0;
    double best = 1e30;
    int32_t *ids = NULL;
    size_t nids = 0;
    for (int r = 0; r < reps; r++) {
        free(ids);
        t0 = now();
        if (mtplx_tokenize(tok, text, n, false, false, &ids, &nids) != MTPLX_OK) {
            fprintf(stderr, "tokenize: %s\n", mtplx_last_error());
            return 1;
        }
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    t0 = now();
    char *back;
    size_t bl;
    mtplx_detokenize(tok, ids, nids, false, &back, &bl);
    double tdec = now() - t0;
    printf("load %.2f s; encode %.2f MB in %.3f s = %.2f MB/s, %.0f tokens/s (%zu tokens, %.2f bytes/token); "
           "decode %.1f MB/s; round trip %s\n",
           tload, n / 1e6, best, n / 1e6 / best, nids / best, nids, (double)n / nids, n / 1e6 / tdec,
           (bl == n && !memcmp(back, text, n)) ? "exact" : "differs");
    free(back);
    free(ids);
    free(text);
    mtplx_tokenizer_free(tok);
    return 0;
}
