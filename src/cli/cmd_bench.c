/* cmd_bench.c: `mtplx bench` (not written yet). */
#include "cli/cli.h"

int cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mtplx bench: not available in this build yet\n");
    return EXIT_RUNTIME;
}
