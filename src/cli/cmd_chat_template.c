/* cmd_chat_template.c: `mtplx chat-template` (not written yet). */
#include "cli/cli.h"

int cmd_chat_template(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mtplx chat-template: not available in this build yet\n");
    return EXIT_RUNTIME;
}
