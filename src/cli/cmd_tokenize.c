/* cmd_tokenize.c: `mtplx tokenize` (not written yet). */
#include "cli/cli.h"

int cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mtplx tokenize: not available in this build yet\n");
    return EXIT_RUNTIME;
}
