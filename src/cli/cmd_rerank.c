/* cmd_rerank.c: `mtplx rerank` (not written yet). */
#include "cli/cli.h"

int cmd_rerank(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mtplx rerank: not available in this build yet\n");
    return EXIT_RUNTIME;
}
