/* cmd_doctor.c: `mtplx doctor` (not written yet). */
#include "cli/cli.h"

int cmd_doctor(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "mtplx doctor: not available in this build yet\n");
    return EXIT_RUNTIME;
}
