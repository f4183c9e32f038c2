/* cmd_doctor.c: `mtplx doctor`: what this machine is (core/hwinfo.h), which
 * kernels the dispatcher will use, the memory-bandwidth probe (cached in the
 * tuning store under the hardware key; --refresh measures again), and what
 * is stored for it. Readable text or --json. */
#include "cli/tuning.h"
#include "cuda/cuda_backend.h"
#include "kernels/kernels.h"

#include <cjson/cJSON.h>
#include <getopt.h>
#include <string.h>

static void help(void) {
    printf("usage: mtplx doctor [--json] [--refresh] [--no-probe]\n\n"
           "Report the CPU, SIMD features, caches, NUMA nodes, memory and memory\n"
           "bandwidth (measured once, then cached in %s).\n\n"
           "  --json       machine-readable output\n"
           "  --refresh    measure the bandwidth again\n"
           "  --no-probe   skip the bandwidth probe (and the cache)\n"
           "  -h, --help\n",
           tune_store_path());
}

static double gib(uint64_t b) { return (double)b / (1024.0 * 1024 * 1024); }

int cmd_doctor(int argc, char **argv) {
    enum { O_JSON = 256, O_REFRESH, O_NOPROBE, O_MIB };
    static const struct option opts[] = {{"json", no_argument, 0, O_JSON},
                                         {"refresh", no_argument, 0, O_REFRESH},
                                         {"no-probe", no_argument, 0, O_NOPROBE},
                                         {"probe-mib", required_argument, 0, O_MIB},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    bool json = false, refresh = false, probe = true;
    long mib = 512;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_JSON: json = true; break;
        case O_REFRESH: refresh = true; break;
        case O_NOPROBE: probe = false; break;
        case O_MIB: /* hidden: a smaller probe, for tests */
            if (!cli_parse_int("doctor", "--probe-mib", optarg, 1, 1 << 16, &mib)) return EXIT_USAGE;
            break;
        case 'h': help(); return EXIT_OK;
        default: return cli_usage_error("doctor", "unknown option");
        }
    }
    if (optind < argc) return cli_usage_error("doctor", "unexpected argument '%s'", argv[optind]);

    mtplx_hwinfo hw;
    mtplx_hwinfo_detect(&hw);
    double bw1 = 0, bwn = 0;
    int bw_threads = hw.n_threads;
    const char *bw_from = "not measured";
    if (probe) {
        if (!refresh && tune_store_get_bandwidth(hw.key, &bw1, &bwn, &bw_threads)) {
            bw_from = "cached";
        } else {
            /* 512 MiB: far past any L3, so this is DRAM; capped at a quarter
             * of the available memory on small machines. */
            size_t bytes = (size_t)mib << 20;
            if (hw.mem_available && bytes > hw.mem_available / 4) bytes = (size_t)(hw.mem_available / 4);
            if (!json) fprintf(stderr, "mtplx doctor: measuring memory bandwidth (%zu MiB)...\n",
                               bytes >> 20);
            bw_threads = hw.n_threads;
            if (mtplx_hwinfo_bandwidth(bytes, 1, 3, &bw1) != MTPLX_OK ||
                mtplx_hwinfo_bandwidth(bytes, bw_threads, 3, &bwn) != MTPLX_OK) {
                cli_error("bandwidth probe");
                bw1 = bwn = 0;
            } else {
                bw_from = "measured";
                tune_store_put_bandwidth(hw.key, bw1, bwn, bw_threads);
            }
        }
    }
    const mtplx_cpu *f = &hw.cpu;
    int n_gpu = hw.cuda_built ? mtplx_cuda_device_count() : 0;
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "mtplx_version", MTPLX_VERSION);
        cJSON *cpu = cJSON_AddObjectToObject(o, "cpu");
        cJSON_AddStringToObject(cpu, "model", hw.cpu_model);
        cJSON_AddNumberToObject(cpu, "threads", hw.n_threads);
        cJSON_AddNumberToObject(cpu, "cores", hw.n_cores);
        cJSON_AddNumberToObject(cpu, "packages", hw.n_packages);
        cJSON_AddNumberToObject(cpu, "numa_nodes", hw.n_numa);
        cJSON *s = cJSON_AddObjectToObject(cpu, "simd");
        cJSON_AddBoolToObject(s, "avx2", f->avx2);
        cJSON_AddBoolToObject(s, "fma", f->fma);
        cJSON_AddBoolToObject(s, "f16c", f->f16c);
        cJSON_AddBoolToObject(s, "avx512f", f->avx512f);
        cJSON_AddBoolToObject(s, "avx512bw", f->avx512bw);
        cJSON_AddBoolToObject(s, "avx512vl", f->avx512vl);
        cJSON_AddBoolToObject(s, "avx512vnni", f->avx512vnni);
        cJSON_AddBoolToObject(s, "avx512bf16", f->avx512bf16);
        cJSON_AddBoolToObject(s, "amx_tile", f->amx_tile);
        cJSON_AddBoolToObject(s, "amx_bf16", f->amx_bf16);
        cJSON_AddBoolToObject(s, "amx_int8", f->amx_int8);
        cJSON_AddStringToObject(cpu, "kernels", mtplx_kernels_isa());
        cJSON *cache = cJSON_AddObjectToObject(cpu, "cache_bytes");
        cJSON_AddNumberToObject(cache, "l1d", (double)hw.l1d);
        cJSON_AddNumberToObject(cache, "l1i", (double)hw.l1i);
        cJSON_AddNumberToObject(cache, "l2", (double)hw.l2);
        cJSON_AddNumberToObject(cache, "l3", (double)hw.l3);
        cJSON *mem = cJSON_AddObjectToObject(o, "memory");
        cJSON_AddNumberToObject(mem, "total_bytes", (double)hw.mem_total);
        cJSON_AddNumberToObject(mem, "available_bytes", (double)hw.mem_available);
        cJSON *bw = cJSON_AddObjectToObject(mem, "bandwidth");
        cJSON_AddStringToObject(bw, "source", bw_from);
        cJSON_AddNumberToObject(bw, "gbps_1_thread", bw1);
        cJSON_AddNumberToObject(bw, "gbps_all_threads", bwn);
        cJSON_AddNumberToObject(bw, "threads", bw_threads);
        cJSON *gpu = cJSON_AddObjectToObject(o, "cuda");
        cJSON_AddBoolToObject(gpu, "built", hw.cuda_built);
        cJSON *devs = cJSON_AddArrayToObject(gpu, "devices");
        for (int i = 0; i < n_gpu; i++) {
            char name[256];
            size_t mem = 0;
            if (mtplx_cuda_device_name(i, name, sizeof name, &mem) != MTPLX_OK) continue;
            cJSON *d = cJSON_CreateObject();
            cJSON_AddStringToObject(d, "name", name);
            cJSON_AddNumberToObject(d, "memory_bytes", (double)mem);
            cJSON_AddItemToArray(devs, d);
        }
        cJSON_AddStringToObject(o, "hardware_key", hw.key);
        cJSON_AddStringToObject(o, "tuning_store", tune_store_path());
        char *t = cJSON_Print(o);
        printf("%s\n", t ? t : "{}");
        free(t);
        cJSON_Delete(o);
        return EXIT_OK;
    }
    printf("mtplx %s doctor\n\n", MTPLX_VERSION);
    printf("CPU        %s\n", hw.cpu_model);
    printf("           %d threads, %d cores, %d package%s, %d NUMA node%s\n", hw.n_threads,
           hw.n_cores, hw.n_packages, hw.n_packages == 1 ? "" : "s", hw.n_numa,
           hw.n_numa == 1 ? "" : "s");
    printf("SIMD       %s\n", hw.simd);
    printf("kernels    %s\n", mtplx_kernels_isa());
    printf("caches     L1d %lld KiB, L1i %lld KiB, L2 %lld KiB, L3 %lld KiB (per instance)\n",
           (long long)(hw.l1d >> 10), (long long)(hw.l1i >> 10), (long long)(hw.l2 >> 10),
           (long long)(hw.l3 >> 10));
    printf("memory     %.1f GiB total, %.1f GiB available\n", gib(hw.mem_total), gib(hw.mem_available));
    if (bw1 > 0)
        printf("bandwidth  %.1f GB/s on 1 thread, %.1f GB/s on %d threads (%s)\n", bw1, bwn,
               bw_threads, bw_from);
    else printf("bandwidth  %s\n", bw_from);
    if (!hw.cuda_built) printf("CUDA       not built\n");
    else if (n_gpu == 0) printf("CUDA       built; no GPU found\n");
    for (int i = 0; i < n_gpu; i++) {
        char name[256];
        if (mtplx_cuda_device_name(i, name, sizeof name, NULL) == MTPLX_OK)
            printf("%s %d: %s\n", i ? "          " : "CUDA GPU", i, name);
    }
    printf("store      %s\n", tune_store_path());
    printf("hw key     %s\n", hw.key);
    return EXIT_OK;
}
