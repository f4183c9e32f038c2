/* cmd_forge.c: `mtplx forge` (not written yet). */
#include "cli/cli.h"

int cmd_forge(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mtplx forge: not available in this build yet\n");
    return EXIT_RUNTIME;
}
