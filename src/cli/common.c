/* common.c: helpers shared by the command files. */
#include "cli/cli.h"
#include "cuda/cuda_backend.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#ifndef MTPLX_DEFAULT_MODEL
#define MTPLX_DEFAULT_MODEL "models/default.gguf"
#endif

void cli_error(const char *what) {
    const char *e = mtplx_last_error();
    if (e && *e) fprintf(stderr, "mtplx: %s: %s\n", what, e);
    else fprintf(stderr, "mtplx: %s failed\n", what);
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mtplx %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see mtplx %s --help)\n", cmd);
    va_end(ap);
    return EXIT_USAGE;
}

const char *cli_home(void) {
    static char home[PATH_MAX / 2];
    if (home[0]) return home;
    const char *h = getenv("MTPLX_HOME");
    if (h && *h) snprintf(home, sizeof home, "%s", h);
    else snprintf(home, sizeof home, "%s/.mtplx", getenv("HOME") ? getenv("HOME") : ".");
    size_t n = strlen(home);
    while (n > 1 && home[n - 1] == '/') home[--n] = 0;
    return home;
}

static bool exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

bool cli_resolve_model(const char *arg, char *buf, size_t cap) {
    if (!arg) {
        /* The built-in default: beside the binary's source tree, or the store. */
        const char *env = getenv("MTPLX_DEFAULT_MODEL");
        const char *cands[3] = {env, MTPLX_DEFAULT_MODEL, NULL};
        char store[PATH_MAX];
        _Static_assert(PATH_MAX / 2 + 32 < PATH_MAX, "store path fits");
        snprintf(store, sizeof store, "%s/models/default.gguf", cli_home());
        cands[2] = store;
        for (int i = 0; i < 3; i++) {
            if (cands[i] && exists(cands[i])) {
                snprintf(buf, cap, "%s", cands[i]);
                return true;
            }
        }
        fprintf(stderr, "mtplx: no model given and the built-in default model (%s) is missing; "
                        "pass -m PATH\n", MTPLX_DEFAULT_MODEL);
        return false;
    }
    if (exists(arg)) {
        snprintf(buf, cap, "%s", arg);
        return true;
    }
    if (!strchr(arg, '/')) {
        snprintf(buf, cap, "%s/models/%s", cli_home(), arg);
        if (exists(buf)) return true;
        snprintf(buf, cap, "%s/models/%s.gguf", cli_home(), arg);
        if (exists(buf)) return true;
    }
    fprintf(stderr, "mtplx: model '%s': no such file, folder or name in %s/models\n", arg,
            cli_home());
    return false;
}

bool cli_parse_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi) {
        cli_usage_error(cmd, "%s expects an integer in [%ld, %ld], got '%s'", flag, lo, hi,
                        s ? s : "");
        return false;
    }
    *out = v;
    return true;
}

const char *cli_auto_device(void) { return mtplx_cuda_device_count() > 0 ? "cuda" : "cpu"; }

const char *cli_default_device(mtplx_kv_type kv_type) {
    return kv_type == MTPLX_KV_Q8_0 ? "cpu" : cli_auto_device();
}

bool cli_parse_device(const char *cmd, const char *s, const char **out) {
    if (s && !strcmp(s, "auto")) {
        *out = cli_auto_device();
        return true;
    }
    if (!s || (strcmp(s, "cpu") != 0 && strcmp(s, "cuda") != 0)) {
        cli_usage_error(cmd, "--device expects cpu, cuda or auto, got '%s'", s ? s : "");
        return false;
    }
    *out = s;
    return true;
}

bool cli_parse_float(const char *cmd, const char *flag, const char *s, double lo, double hi,
                     double *out) {
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        cli_usage_error(cmd, "%s expects a number in [%g, %g], got '%s'", flag, lo, hi,
                        s ? s : "");
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_kv_type(const char *cmd, const char *s, mtplx_kv_type *out) {
    if (mtplx_kv_type_parse(s, out)) return true;
    cli_usage_error(cmd, "--kv-type expects f16, f32 or q8_0, got '%s'", s ? s : "");
    return false;
}

double cli_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
