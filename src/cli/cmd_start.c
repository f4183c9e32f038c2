/* cmd_start.c: `mtplx start` (not written yet). */
#include "cli/cli.h"

int cmd_start(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mtplx start: not available in this build yet\n");
    return EXIT_RUNTIME;
}
