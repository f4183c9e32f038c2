/* cmd_run.c: `mtplx run` (not written yet). */
#include "cli/cli.h"

int cmd_run(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mtplx run: not available in this build yet\n");
    return EXIT_RUNTIME;
}
