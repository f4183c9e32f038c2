/* cmd_serve.c: `mtplx serve` (not written yet). */
#include "cli/cli.h"

int cmd_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mtplx serve: not available in this build yet\n");
    return EXIT_RUNTIME;
}
