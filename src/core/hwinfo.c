/* hwinfo.c: hardware detection from /proc and /sys, and the bandwidth probe.
 * Leaves out anything that needs privileges (DMI, MSRs) and GPUs. */
#include "core/hwinfo.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* First line of a small sysfs file into buf, trailing newline removed. */
static bool read_line(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (!ok) return false;
    buf[strcspn(buf, "\n")] = 0;
    return true;
}

/* "32K", "512K", "32768K", "1M" -> bytes. */
static int64_t parse_size(const char *s) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s) return 0;
    if (*end == 'K') v <<= 10;
    else if (*end == 'M') v <<= 20;
    else if (*end == 'G') v <<= 30;
    return v;
}

static void detect_caches(mtplx_hwinfo *h) {
    for (int i = 0; i < 8; i++) {
        char p[128], level[16], type[32], size[32];
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (!read_line(p, level, sizeof level)) break;
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if (!read_line(p, type, sizeof type)) continue;
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!read_line(p, size, sizeof size)) continue;
        int64_t b = parse_size(size);
        int lv = atoi(level);
        if (lv == 1 && !strcmp(type, "Data")) h->l1d = b;
        else if (lv == 1 && !strcmp(type, "Instruction")) h->l1i = b;
        else if (lv == 2) h->l2 = b;
        else if (lv == 3) h->l3 = b;
    }
}

/* Physical cores: distinct (package, core_id) pairs over online CPUs. */
static void detect_topology(mtplx_hwinfo *h) {
    enum { MAXC = 4096 };
    static int64_t seen[MAXC];
    int n_seen = 0, max_pkg = -1;
    for (int cpu = 0; cpu < MAXC; cpu++) {
        char p[128], a[32], b[32];
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        if (!read_line(p, a, sizeof a)) {
            if (cpu >= h->n_threads) break;
            continue;
        }
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        if (!read_line(p, b, sizeof b)) snprintf(b, sizeof b, "0");
        int64_t id = ((int64_t)atoi(b) << 32) | (uint32_t)atoi(a);
        if (atoi(b) > max_pkg) max_pkg = atoi(b);
        bool dup = false;
        for (int i = 0; i < n_seen && !dup; i++) dup = seen[i] == id;
        if (!dup && n_seen < MAXC) seen[n_seen++] = id;
    }
    h->n_cores = n_seen > 0 ? n_seen : h->n_threads;
    h->n_packages = max_pkg >= 0 ? max_pkg + 1 : 1;
    h->n_numa = 0;
    DIR *d = opendir("/sys/devices/system/node");
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (!strncmp(e->d_name, "node", 4) && e->d_name[4] >= '0' && e->d_name[4] <= '9')
                h->n_numa++;
        closedir(d);
    }
    if (h->n_numa < 1) h->n_numa = 1;
}

static void detect_cpu_model(mtplx_hwinfo *h) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(h->cpu_model, sizeof h->cpu_model, "%s", v);
        h->cpu_model[strcspn(h->cpu_model, "\n")] = 0;
        break;
    }
    fclose(f);
    /* trailing blanks some CPUs pad their brand string with */
    size_t n = strlen(h->cpu_model);
    while (n && h->cpu_model[n - 1] == ' ') h->cpu_model[--n] = 0;
    if (!n) snprintf(h->cpu_model, sizeof h->cpu_model, "unknown CPU");
}

static void detect_memory(mtplx_hwinfo *h) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return;
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) h->mem_total = kb * 1024ull;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) h->mem_available = kb * 1024ull;
    }
    fclose(f);
}

void mtplx_hwinfo_detect(mtplx_hwinfo *h) {
    memset(h, 0, sizeof *h);
    h->cpu = *mtplx_cpu_features();
    h->n_threads = h->cpu.n_cores;
#ifdef MTPLX_HAVE_CUDA
    h->cuda_built = true;
#endif
    detect_cpu_model(h);
    detect_topology(h);
    detect_caches(h);
    detect_memory(h);
    const struct {
        bool on;
        const char *name;
    } feats[] = {{h->cpu.avx2, "avx2"},           {h->cpu.fma, "fma"},
                 {h->cpu.f16c, "f16c"},           {h->cpu.avx512f, "avx512f"},
                 {h->cpu.avx512bw, "avx512bw"},   {h->cpu.avx512vl, "avx512vl"},
                 {h->cpu.avx512vnni, "avx512vnni"}, {h->cpu.avx512bf16, "avx512bf16"},
                 {h->cpu.amx_tile, "amx_tile"},   {h->cpu.amx_bf16, "amx_bf16"},
                 {h->cpu.amx_int8, "amx_int8"}};
    char plus[160] = "";
    for (size_t i = 0; i < sizeof feats / sizeof *feats; i++) {
        if (!feats[i].on) continue;
        size_t n = strlen(h->simd), m = strlen(plus);
        snprintf(h->simd + n, sizeof h->simd - n, "%s%s", n ? " " : "", feats[i].name);
        snprintf(plus + m, sizeof plus - m, "%s%s", m ? "+" : "", feats[i].name);
    }
    if (!h->simd[0]) snprintf(h->simd, sizeof h->simd, "none (scalar)");
    snprintf(h->key, sizeof h->key, "%s|%dt|%s", h->cpu_model, h->n_threads,
             plus[0] ? plus : "scalar");
}

/* ---- bandwidth probe ---- */

typedef struct {
    const uint64_t *a;
    int64_t n;
    uint64_t sums[256];
} sum_job;

/* Two 64-bit lanes per vector (SSE2, the x86-64 baseline), four independent
 * accumulators: enough loads in flight that DRAM, not the adds, is the limit. */
typedef uint64_t u64x2 __attribute__((vector_size(16)));

static void sum_part(void *arg, int ith, int nth) {
    sum_job *j = arg;
    int64_t lo, hi;
    mtplx_split(j->n / 8, ith, nth, &lo, &hi);
    const u64x2 *a = (const u64x2 *)j->a;
    u64x2 s0 = {0, 0}, s1 = {0, 0}, s2 = {0, 0}, s3 = {0, 0};
    for (int64_t i = lo * 4; i < hi * 4; i += 4) {
        s0 += a[i];
        s1 += a[i + 1];
        s2 += a[i + 2];
        s3 += a[i + 3];
    }
    u64x2 s = s0 + s1 + s2 + s3;
    if (ith < 256) j->sums[ith] = s[0] + s[1];
}

static void fill_part(void *arg, int ith, int nth) {
    sum_job *j = arg;
    int64_t lo, hi;
    mtplx_split(j->n, ith, nth, &lo, &hi);
    uint64_t *a = (uint64_t *)j->a;
    for (int64_t i = lo; i < hi; i++) a[i] = (uint64_t)i * 0x9E3779B97F4A7C15ull;
}

mtplx_status mtplx_hwinfo_bandwidth(size_t bytes, int n_threads, int reps, double *gbps) {
    *gbps = 0;
    bytes &= ~(size_t)63;
    if (bytes < 64 || reps < 1) return mtplx_fail(MTPLX_ERR_ARG, "bandwidth probe: bad size");
    if (n_threads <= 0) n_threads = mtplx_cpu_features()->n_cores;
    if (n_threads > 256) n_threads = 256;
    uint64_t *a = mtplx_aligned_alloc(64, bytes);
    if (!a) return mtplx_fail(MTPLX_ERR_NOMEM, "bandwidth probe: cannot allocate %zu bytes", bytes);
    mtplx_threadpool *tp = NULL;
    mtplx_status st = mtplx_threadpool_new(n_threads, &tp);
    if (st != MTPLX_OK) {
        free(a);
        return st;
    }
    sum_job j = {.a = a, .n = (int64_t)(bytes / 8)};
    /* each thread touches its own part first, so pages land on its node */
    mtplx_threadpool_run(tp, fill_part, &j);
    double best = 1e30;
    volatile uint64_t sink = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = mtplx_time_ms();
        mtplx_threadpool_run(tp, sum_part, &j);
        double t = mtplx_time_ms() - t0;
        for (int i = 0; i < n_threads; i++) sink += j.sums[i];
        if (t < best) best = t;
    }
    (void)sink;
    mtplx_threadpool_free(tp);
    free(a);
    *gbps = best > 0 ? (double)bytes / (best * 1e6) : 0;
    return MTPLX_OK;
}
