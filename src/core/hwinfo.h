/* hwinfo.h: what machine we run on, for `mtplx doctor`, the tuning store's
 * hardware key and the mode presets: CPU model, cores, SIMD features (from
 * cpu.c), cache sizes and NUMA nodes (sysfs), memory (/proc/meminfo), and a
 * quick memory-bandwidth probe. Linux only; fields that cannot be read stay 0
 * or "". GPUs are the CUDA backend's to list (cuda/cuda_backend.h); this only
 * says whether the library was built with it. */
#ifndef MTPLX_HWINFO_H
#define MTPLX_HWINFO_H

#include "core/core.h"

typedef struct mtplx_hwinfo {
    char cpu_model[128];  /* /proc/cpuinfo "model name" */
    int n_threads;        /* online logical CPUs */
    int n_cores;          /* physical cores (distinct package/core ids) */
    int n_packages;       /* sockets */
    int n_numa;           /* NUMA nodes with CPUs or memory (>= 1) */
    int64_t l1d, l1i, l2, l3; /* bytes per instance, as sysfs reports cpu0's */
    uint64_t mem_total, mem_available; /* bytes */
    mtplx_cpu cpu;        /* the features the kernels dispatch on */
    bool cuda_built;      /* the library has the CUDA backend (MTPLX_CUDA=ON) */
    char simd[160];       /* "avx2 fma f16c ..." (space separated, fixed order) */
    /* "<cpu model>|<threads>t|<simd joined by '+'>": the tuning store's
     * hardware key. Same machine, same key; a different CPU, thread count or
     * feature set gives a different key. */
    char key[320];
} mtplx_hwinfo;

/* Detect once per call (cheap: a few small file reads). Never fails; unknown
 * fields stay zero. */
void mtplx_hwinfo_detect(mtplx_hwinfo *out);

/* Memory read bandwidth in GB/s (1e9 bytes/s): sum an array of `bytes`
 * (rounded down to 64 B) on n_threads threads (0 = all), best of reps runs.
 * Allocates and touches the array first (not timed). */
mtplx_status mtplx_hwinfo_bandwidth(size_t bytes, int n_threads, int reps, double *gbps);

#endif
