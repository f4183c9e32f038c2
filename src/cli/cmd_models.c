/* cmd_models.c: `mtplx models` (not written yet). */
#include "cli/cli.h"

int cmd_models(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mtplx models: not available in this build yet\n");
    return EXIT_RUNTIME;
}
