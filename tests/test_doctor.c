/* test_doctor.c: `mtplx doctor --json` parses, has every field, and agrees
 * with /proc/cpuinfo and sysconf; the bandwidth probe is cached under the
 * hardware key and --refresh measures again; `mtplx models` lists a store.
 * Bandwidth values are checked for being positive, never against a speed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "test_proc.h"

#include "core/hwinfo.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp[256];

static int setup(void **s) {
    (void)s;
    snprintf(tmp, sizeof tmp, "/tmp/mtplx_test_doctor.XXXXXX");
    assert_non_null(mkdtemp(tmp));
    setenv("XDG_CONFIG_HOME", tmp, 1);
    return 0;
}

static int teardown(void **s) {
    (void)s;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static int prog(const char *args, char *out, size_t cap) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s 2>/dev/null", MTPLX_BIN, args);
    return tu_capture(cmd, out, cap);
}

static const cJSON *path(const cJSON *o, const char *a, const char *b, const char *c) {
    o = cJSON_GetObjectItem(o, a);
    if (b) o = cJSON_GetObjectItem(o, b);
    if (c) o = cJSON_GetObjectItem(o, c);
    if (!o) fail_msg("missing field %s.%s.%s", a, b ? b : "", c ? c : "");
    return o;
}

/* The first "model name" and whether "flags" has word w, from /proc/cpuinfo. */
static bool cpuinfo(char *model, size_t cap, const char *w) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return false;
    char line[8192];
    bool has = false, got_model = false, got_flags = false;
    while (fgets(line, sizeof line, f)) {
        if (!got_model && !strncmp(line, "model name", 10)) {
            const char *v = strchr(line, ':') + 1;
            while (*v == ' ') v++;
            snprintf(model, cap, "%s", v);
            model[strcspn(model, "\n")] = 0;
            size_t n = strlen(model);
            while (n && model[n - 1] == ' ') model[--n] = 0;
            got_model = true;
        }
        if (!got_flags && !strncmp(line, "flags", 5)) {
            char pat[64];
            snprintf(pat, sizeof pat, " %s", w);
            line[strcspn(line, "\n")] = ' ';
            char *p = strstr(line, pat);
            has = p && p[strlen(pat)] == ' ';
            got_flags = true;
        }
    }
    fclose(f);
    return has;
}

static void doctor_json(void **s) {
    (void)s;
    static char out[1 << 16];
    assert_int_equal(prog("doctor --json --probe-mib 64", out, sizeof out), 0);
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("not JSON:\n%s", out);
    char model[256] = "";
    bool avx2 = cpuinfo(model, sizeof model, "avx2");
    bool avx512f = cpuinfo(model, sizeof model, "avx512f");
    assert_string_equal(path(j, "cpu", "model", NULL)->valuestring, model);
    assert_int_equal(path(j, "cpu", "threads", NULL)->valueint, (int)sysconf(_SC_NPROCESSORS_ONLN));
    int cores = path(j, "cpu", "cores", NULL)->valueint;
    assert_true(cores >= 1 && cores <= (int)sysconf(_SC_NPROCESSORS_ONLN));
    assert_true(path(j, "cpu", "numa_nodes", NULL)->valueint >= 1);
    /* CPUID with the OS's XSAVE state agrees with the kernel's flags */
    assert_int_equal(cJSON_IsTrue(path(j, "cpu", "simd", "avx2")), avx2);
    assert_int_equal(cJSON_IsTrue(path(j, "cpu", "simd", "avx512f")), avx512f);
    path(j, "cpu", "simd", "avx512vnni");
    path(j, "cpu", "simd", "amx_tile");
    path(j, "cpu", "cache_bytes", "l2");
    assert_true(path(j, "memory", "total_bytes", NULL)->valuedouble > 0);
    assert_true(path(j, "memory", "available_bytes", NULL)->valuedouble <=
                path(j, "memory", "total_bytes", NULL)->valuedouble);
    assert_string_equal(path(j, "memory", "bandwidth", "source")->valuestring, "measured");
    assert_true(path(j, "memory", "bandwidth", "gbps_1_thread")->valuedouble > 0);
    assert_true(path(j, "memory", "bandwidth", "gbps_all_threads")->valuedouble > 0);
    assert_true(cJSON_IsBool(path(j, "cuda", "built", NULL)));
    assert_true(cJSON_IsArray(path(j, "cuda", "devices", NULL)));
    const char *key = path(j, "hardware_key", NULL, NULL)->valuestring;
    assert_non_null(strstr(key, model));
    /* the library's own detection gives the same key */
    mtplx_hwinfo hw;
    mtplx_hwinfo_detect(&hw);
    assert_string_equal(hw.key, key);
    cJSON_Delete(j);

    /* second run: the cached probe; --refresh measures again */
    assert_int_equal(prog("doctor --json --probe-mib 64", out, sizeof out), 0);
    j = cJSON_Parse(out);
    assert_non_null(j);
    assert_string_equal(path(j, "memory", "bandwidth", "source")->valuestring, "cached");
    cJSON_Delete(j);
    assert_int_equal(prog("doctor --json --refresh --probe-mib 64", out, sizeof out), 0);
    j = cJSON_Parse(out);
    assert_non_null(j);
    assert_string_equal(path(j, "memory", "bandwidth", "source")->valuestring, "measured");
    cJSON_Delete(j);
    /* the readable report */
    assert_int_equal(prog("doctor --no-probe", out, sizeof out), 0);
    assert_non_null(strstr(out, "CUDA"));
    assert_non_null(strstr(out, model));
    assert_int_equal(prog("doctor --bogus", out, sizeof out), 2);
}

static void models_list(void **s) {
    (void)s;
    if (access(MTPLX_SOURCE_DIR "/models/default.gguf", R_OK)) skip();
    char cmd[1024];
    static char out[1 << 16];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/home/models' && ln -sf '%s' '%s/home/models/mine.gguf'",
             tmp, MTPLX_SOURCE_DIR "/models/default.gguf", tmp);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/home", tmp);
    setenv("MTPLX_HOME", cmd, 1);
    assert_int_equal(prog("models --json", out, sizeof out), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    assert_int_equal(cJSON_GetArraySize(j), 1);
    const cJSON *m = cJSON_GetArrayItem(j, 0);
    assert_string_equal(cJSON_GetObjectItem(m, "name")->valuestring, "mine.gguf");
    assert_string_equal(cJSON_GetObjectItem(m, "arch")->valuestring, "qwen3");
    assert_string_equal(cJSON_GetObjectItem(m, "quant")->valuestring, "Q8_0");
    assert_int_equal(cJSON_GetObjectItem(m, "mtp_heads")->valueint, 1);
    assert_true(cJSON_GetObjectItem(m, "size_bytes")->valuedouble > 1e6);
    cJSON_Delete(j);
    assert_int_equal(prog("models", out, sizeof out), 0);
    assert_non_null(strstr(out, "mine.gguf"));
    setenv("MTPLX_HOME", "/nonexistent/mtplx-home", 1);
    assert_int_equal(prog("models", out, sizeof out), 0);
    assert_non_null(strstr(out, "no models"));
    unsetenv("MTPLX_HOME");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(doctor_json),
        cmocka_unit_test(models_list),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
