/* prof.h: per-op wall-clock timers for a profiling build made by
 * bench/prof/mkprof.sh (never part of the library: instrument.py copies this
 * file into a scratch copy of the tree). MTPLX_PROF=1 turns them on; the
 * table goes to stderr at exit. */
#ifndef MTPLX_PROF_H
#define MTPLX_PROF_H
#include <stdint.h>
extern int mtplx_prof_on;    /* -1 until the CPU backend reads MTPLX_PROF */
extern int mtplx_prof_phase; /* 0 AR step, 1 draft, 2 verify step, 3 prefill, 4 other */
extern int mtplx_prof_tag;   /* the head stream d being run, 0 in the trunk */
void mtplx_prof_add(const char *label, double ms);
double mtplx_prof_now(void);
#endif
