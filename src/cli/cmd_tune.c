/* cmd_tune.c: `mtplx tune` (not written yet). */
#include "cli/cli.h"

int cmd_tune(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mtplx tune: not available in this build yet\n");
    return EXIT_RUNTIME;
}
