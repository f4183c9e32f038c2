/* error.c: the per-thread last-error message and assertions. */
#include "core/core.h"

#include <string.h>

static _Thread_local char last_error[1024];

const char *mtplx_last_error(void) { return last_error; }

void mtplx_clear_error(void) { last_error[0] = 0; }

mtplx_status mtplx_fail(mtplx_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

mtplx_status mtplx_fail_prefix(mtplx_status st, const char *fmt, ...) {
    char prefix[512], old[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    size_t pl = strlen(prefix);
    if (pl > sizeof last_error - 3) pl = sizeof last_error - 3;
    memcpy(last_error, prefix, pl);
    memcpy(last_error + pl, ": ", 2);
    size_t ol = strlen(old), room = sizeof last_error - pl - 3;
    if (ol > room) ol = room;
    memcpy(last_error + pl + 2, old, ol);
    last_error[pl + 2 + ol] = 0;
    return st;
}

_Noreturn void mtplx_assert_fail(const char *file, int line, const char *cond) {
    fprintf(stderr, "mtplx: assertion failed at %s:%d: %s\n", file, line, cond);
    abort();
}

const char *mtplx_status_name(mtplx_status st) {
    switch (st) {
    case MTPLX_OK: return "ok";
    case MTPLX_ERR_ARG: return "invalid argument";
    case MTPLX_ERR_IO: return "i/o error";
    case MTPLX_ERR_FORMAT: return "bad format";
    case MTPLX_ERR_UNSUPPORTED: return "unsupported";
    case MTPLX_ERR_NOMEM: return "out of memory";
    case MTPLX_ERR_RANGE: return "out of range";
    case MTPLX_ERR_CANCELLED: return "cancelled";
    case MTPLX_ERR_INTERNAL: return "internal error";
    }
    return "unknown";
}
