/* prof.c: see prof.h. Accumulates (phase, label) -> total ms and calls. */
#include "core/prof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int mtplx_prof_on = -1, mtplx_prof_phase = 0, mtplx_prof_tag = 0;
static const char *phase_name[] = {"ar", "head", "verify", "prefill", "other"};
typedef struct {
    const char *label;
    int phase;
    double ms;
    long calls;
} entry;
static entry tab[512];
static int n_tab;

double mtplx_prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void dump(void) {
    for (int p = 0; p < 5; p++) {
        double tot = 0;
        for (int i = 0; i < n_tab; i++)
            if (tab[i].phase == p) tot += tab[i].ms;
        if (tot == 0) continue;
        fprintf(stderr, "== phase %s total %.2f ms\n", phase_name[p], tot);
        for (int i = 0; i < n_tab; i++)
            if (tab[i].phase == p)
                fprintf(stderr, "  %-28s %9.2f ms %8ld calls %8.2f us/call %5.1f%%\n", tab[i].label, tab[i].ms,
                        tab[i].calls, tab[i].ms * 1e3 / tab[i].calls, 100 * tab[i].ms / tot);
    }
}

void mtplx_prof_add(const char *label, double ms) {
    int ph = mtplx_prof_phase;
    for (int i = 0; i < n_tab; i++)
        if (tab[i].phase == ph && !strcmp(tab[i].label, label)) {
            tab[i].ms += ms;
            tab[i].calls++;
            return;
        }
    if (n_tab == 0) atexit(dump);
    if (n_tab < 512) tab[n_tab++] = (entry){strdup(label), ph, ms, 1};
}
