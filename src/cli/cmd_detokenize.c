/* cmd_detokenize.c: `mtplx detokenize` (not written yet). */
#include "cli/cli.h"

int cmd_detokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mtplx detokenize: not available in this build yet\n");
    return EXIT_RUNTIME;
}
