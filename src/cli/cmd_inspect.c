/* cmd_inspect.c: `mtplx inspect` (not written yet). */
#include "cli/cli.h"

int cmd_inspect(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mtplx inspect: not available in this build yet\n");
    return EXIT_RUNTIME;
}
