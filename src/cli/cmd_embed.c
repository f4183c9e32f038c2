/* cmd_embed.c: `mtplx embed` (not written yet). */
#include "cli/cli.h"

int cmd_embed(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mtplx embed: not available in this build yet\n");
    return EXIT_RUNTIME;
}
