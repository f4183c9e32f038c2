/* main.c: `mtplx <command>`: dispatch to the command files. */
#include "cli/cli.h"

#include <string.h>

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} command;

#define X(n, h) {#n, cmd_##n, h},
static const command commands[] = {CLI_COMMANDS(X)};
#undef X

static void usage(FILE *f) {
    fprintf(f, "mtplx %s: local LLM inference with exact multi-token prediction\n\n"
               "usage: mtplx <command> [options]    (mtplx <command> --help for more)\n\n"
               "commands:\n",
            MTPLX_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s", commands[i].name);
        for (char *p = name; *p; p++)
            if (*p == '_') *p = '-';
        fprintf(f, "  %-14s %s\n", name, commands[i].help);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *c = argv[1];
    if (!strcmp(c, "--help") || !strcmp(c, "-h") || !strcmp(c, "help")) {
        usage(stdout);
        return EXIT_OK;
    }
    if (!strcmp(c, "--version")) {
        printf("mtplx %s\n", MTPLX_VERSION);
        return EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s", commands[i].name);
        for (char *p = name; *p; p++)
            if (*p == '_') *p = '-';
        if (!strcmp(c, name)) return commands[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "mtplx: unknown command '%s'\n\n", c);
    usage(stderr);
    return EXIT_USAGE;
}
