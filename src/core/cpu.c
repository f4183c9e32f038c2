/* cpu.c: CPUID feature detection, done once. Also checks that the OS saves
 * the AVX / AVX-512 / AMX register state (XGETBV), as CPUID alone does not. */
#include "core/core.h"

#include <cpuid.h>
#include <pthread.h>
#include <unistd.h>

static mtplx_cpu cpu;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static uint64_t xgetbv0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

static void detect(void) {
    unsigned a, b, c, d;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu.n_cores = n > 0 ? (int)n : 1;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = c & (1u << 27);
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    bool ymm = (xcr0 & 6) == 6, zmm = (xcr0 & 0xe6) == 0xe6, tile = (xcr0 & 0x60000) == 0x60000;
    cpu.fma = ymm && (c & (1u << 12));
    cpu.f16c = ymm && (c & (1u << 29));
    if (__get_cpuid_max(0, NULL) < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    cpu.avx2 = ymm && (b & (1u << 5));
    cpu.avx512f = zmm && (b & (1u << 16));
    cpu.avx512bw = zmm && (b & (1u << 30));
    cpu.avx512vl = zmm && (b & (1u << 31));
    cpu.avx512vnni = zmm && (c & (1u << 11));
    cpu.amx_bf16 = tile && (d & (1u << 22));
    cpu.amx_tile = tile && (d & (1u << 24));
    cpu.amx_int8 = tile && (d & (1u << 25));
    __cpuid_count(7, 1, a, b, c, d);
    cpu.avx512bf16 = zmm && (a & (1u << 5));
}

const mtplx_cpu *mtplx_cpu_features(void) {
    pthread_once(&cpu_once, detect);
    return &cpu;
}
