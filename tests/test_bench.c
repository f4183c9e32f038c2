/* test_bench.c: `mtplx bench`'s suite files, the chi-square helper behind
 * the exactness suite's distribution check, `bench compare` on two small
 * JSON files, the long-context (1k only), math-quick and exactness suites
 * end to end on the default model with tiny budgets, and the llama.cpp
 * side-by-side row against a stand-in llama-bench script (llama.cpp itself
 * never runs here). Nothing here asserts a speed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "test_proc.h"

#include "cli/bench_suites.h"
#include "cli/common.c"
#include "cli/tuning.c"
#include "cli/bench_suites.c"
#include "cli/bench_llama.c"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static int setup(void **s) {
    (void)s;
    snprintf(dir, sizeof dir, "/tmp/mtplx_test_bench.XXXXXX");
    assert_non_null(mkdtemp(dir));
    setenv("XDG_CONFIG_HOME", dir, 1);
    unsetenv("MTPLX_LLAMA_CPP"); /* never the real llama.cpp in a test */
    return 0;
}

static int teardown(void **s) {
    (void)s;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* bench_suites.c calls it; cmd_bench.c (not linked here) defines it */
bool bench_find_valid_text(char *buf, size_t cap) {
    snprintf(buf, cap, "%s/data/gutenberg/valid.txt.xz", MTPLX_SHARED_DIR);
    return mtplx_file_exists(buf);
}

static int prog(const char *args, char *out, size_t cap) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", MTPLX_BIN, args);
    return tu_capture(cmd, out, cap);
}

static cJSON *read_json(const char *path) {
    char *text = NULL;
    size_t len;
    assert_int_equal(mtplx_read_file(path, &text, &len), MTPLX_OK);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    return root;
}

static void suite_files(void **s) {
    (void)s;
    bench_opts o = {.suites_dir = MTPLX_SOURCE_DIR "/bench/suites"};
    bench_set set;
    /* the shipped throughput prompts are the compiled-in ones (tune's) */
    assert_true(bench_set_load(&o, "throughput", false, &set));
    int n;
    const tune_prompt *pr = tune_suite("all", &n);
    assert_int_equal(set.n, n);
    for (int i = 0; i < n; i++) {
        assert_string_equal(set.p[i].name, pr[i].name);
        assert_string_equal(set.p[i].kind, pr[i].kind);
        assert_string_equal(set.p[i].text, pr[i].text);
    }
    bench_set_free(&set);
    assert_true(bench_set_load(&o, "exactness", false, &set));
    assert_int_equal(set.n, n);
    assert_true(bench_set_num(&set, "distribution_samples", 0) >= 1000);
    bench_set_free(&set);
    /* math-quick: every problem has an answer, found as a whole number only */
    assert_true(bench_set_load(&o, "math-quick", false, &set));
    assert_true(set.n >= 8);
    for (int i = 0; i < set.n; i++) assert_non_null(set.p[i].answer);
    bench_set_free(&set);
    assert_true(answer_found("so the answer is 91.", "91"));
    assert_false(answer_found("it is 910 or 191", "91"));
    /* elsewhere: the compiled-in fallback, or an error without one */
    bench_opts none = {.suites_dir = dir};
    assert_true(bench_set_load(&none, "throughput", true, &set));
    assert_int_equal(set.n, n);
    assert_non_null(strstr(set.source, "compiled-in"));
    bench_set_free(&set);
    assert_false(bench_set_load(&none, "math-quick", false, &set));
}

static void chi2(void **s) {
    (void)s;
    /* chi-square upper tails against tables */
    assert_true(fabs(bench_chi2_sf(3.841, 1) - 0.05) < 1e-3);
    assert_true(fabs(bench_chi2_sf(18.307, 10) - 0.05) < 1e-3);
    assert_true(fabs(bench_chi2_sf(2.0, 2) - exp(-1.0)) < 1e-9);
    assert_true(bench_chi2_sf(200, 10) < 1e-30);
    /* the same distribution passes, a shifted one fails */
    int a[4] = {500, 300, 150, 50}, b[4] = {510, 290, 155, 45}, c[4] = {300, 300, 300, 100};
    int df;
    double tv;
    assert_true(bench_chi2_two_sample(a, b, 4, &df, &tv) > 0.1);
    assert_int_equal(df, 3);
    assert_true(fabs(tv - 0.015) < 1e-9);
    assert_true(bench_chi2_two_sample(a, c, 4, &df, &tv) < 1e-10);
    /* rare bins are pooled */
    int d[5] = {100, 100, 3, 2, 1}, e[5] = {100, 100, 2, 3, 1};
    bench_chi2_two_sample(d, e, 5, &df, &tv);
    assert_int_equal(df, 2);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void compare(void **s) {
    (void)s;
    static char out[1 << 16];
    char a[512], b[512], cmd[1200];
    snprintf(a, sizeof a, "%s/a.json", dir);
    snprintf(b, sizeof b, "%s/b.json", dir);
    write_file(a, "{\"suite\":\"throughput\",\"build\":{\"mtplx_version\":\"0.1.0\"},"
                  "\"machine\":{\"cpu\":\"CPU One\",\"threads\":4},\"model\":{\"quant\":\"Q8_0\"},"
                  "\"results\":{\"tokens\":96,\"configs\":[{\"depth\":0,\"tokens_per_s_median\":100},"
                  "{\"depth\":2,\"tokens_per_s_median\":150,\"acceptance\":[0.8,0.6]}]}}");
    write_file(b, "{\"suite\":\"throughput\",\"build\":{\"mtplx_version\":\"0.1.0\"},"
                  "\"machine\":{\"cpu\":\"CPU Two\",\"threads\":4},\"model\":{\"quant\":\"Q8_0\"},"
                  "\"results\":{\"tokens\":96,\"configs\":[{\"depth\":0,\"tokens_per_s_median\":120},"
                  "{\"depth\":2,\"tokens_per_s_median\":150,\"acceptance\":[0.9,0.6]}],\"new\":1}}");
    snprintf(cmd, sizeof cmd, "bench compare '%s' '%s'", a, b);
    int rc = prog(cmd, out, sizeof out);
    if (rc != 0) fail_msg("rc %d:\n%s", rc, out);
    /* the machine difference is flagged; the same build and model are not */
    if (!strstr(out, "DIFFERS machine.cpu") || !strstr(out, "CPU One") || !strstr(out, "CPU Two"))
        fail_msg("machine not flagged:\n%s", out);
    assert_null(strstr(out, "DIFFERS build"));
    assert_null(strstr(out, "DIFFERS model"));
    /* per-metric absolute and ratio differences, elements named by depth */
    const char *l = strstr(out, "configs[depth=0].tokens_per_s_median");
    if (!l || !strstr(l, "+20") || !strstr(l, "1.200x")) fail_msg("no AR line:\n%s", out);
    l = strstr(out, "configs[depth=2].acceptance[0]");
    if (!l || !strstr(l, "1.125x")) fail_msg("no acceptance line:\n%s", out);
    assert_non_null(strstr(out, "only in B"));
    assert_non_null(strstr(out, "7 metrics in both"));
    /* usage and bad files */
    snprintf(cmd, sizeof cmd, "bench compare '%s'", a);
    assert_int_equal(prog(cmd, out, sizeof out), 2);
    write_file(b, "[1,2]");
    snprintf(cmd, sizeof cmd, "bench compare '%s' '%s'", a, b);
    assert_int_equal(prog(cmd, out, sizeof out), 1);
}

static void long_context(void **s) {
    (void)s;
    if (access(MTPLX_SOURCE_DIR "/models/default.gguf", R_OK)) skip();
    static char out[1 << 16];
    char cmd[1024], json[512];
    snprintf(json, sizeof json, "%s/lc.json", dir);
    /* 1k only (the quick default); 1M positions is skipped, with a line */
    snprintf(cmd, sizeof cmd, "bench --suite long-context --quick -t 1 -n 8 --json '%s'", json);
    int rc = prog(cmd, out, sizeof out);
    if (rc != 0 || !strstr(out, "ran 1024; skipped none")) fail_msg("rc %d:\n%s", rc, out);
    cJSON *root = read_json(json);
    const cJSON *res = cJSON_GetObjectItem(root, "results");
    const cJSON *l0 = cJSON_GetArrayItem(cJSON_GetObjectItem(res, "lengths"), 0);
    assert_non_null(l0);
    assert_int_equal((int)jnum(l0, "positions"), 1024);
    assert_true(jnum(l0, "prefill_tokens_per_s") > 0);
    assert_true(jnum(l0, "ar_tokens_per_s") > 0);
    assert_true(jnum(l0, "mtp_tokens_per_s") > 0);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(l0, "acceptance")), 3);
    cJSON_Delete(root);
    snprintf(cmd, sizeof cmd, "bench --suite long-context -t 1 -n 8 --positions 4096k");
    rc = prog(cmd, out, sizeof out);
    if (rc != 0 || !strstr(out, "skipped:") || !strstr(out, "ran none; skipped 4194304"))
        fail_msg("rc %d:\n%s", rc, out);
    assert_int_equal(prog("bench --suite long-context --positions x", out, sizeof out), 2);
}

static void math_quick(void **s) {
    (void)s;
    if (access(MTPLX_SOURCE_DIR "/models/default.gguf", R_OK)) skip();
    static char out[1 << 16];
    char cmd[1024], json[512];
    snprintf(json, sizeof json, "%s/mq.json", dir);
    snprintf(cmd, sizeof cmd, "bench --suite math-quick --quick -t 1 --prompts 3 --json '%s'", json);
    int rc = prog(cmd, out, sizeof out);
    if (rc != 0 || !strstr(out, "answers found") || !strstr(out, "identical to AR 3/3"))
        fail_msg("rc %d:\n%s", rc, out);
    cJSON *root = read_json(json);
    const cJSON *res = cJSON_GetObjectItem(root, "results");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(res, "problems")), 3);
    const cJSON *t = cJSON_GetObjectItem(res, "total");
    assert_non_null(t);
    assert_true(jnum(t, "ar_tokens_per_s") > 0 && jnum(t, "mtp_tokens_per_s") > 0);
    assert_true(jnum(t, "tokens_per_forward") >= 1);
    assert_int_equal((int)jnum(t, "problems"), 3);
    assert_non_null(strstr(jstr(res, "suite_file"), "math-quick.json"));
    cJSON_Delete(root);
}

static void exactness(void **s) {
    (void)s;
    if (access(MTPLX_SOURCE_DIR "/models/default.gguf", R_OK)) skip();
    static char out[1 << 16];
    char cmd[1024], json[512];
    snprintf(json, sizeof json, "%s/ex.json", dir);
    snprintf(cmd, sizeof cmd, "bench --suite exactness --quick -t 1 --max-depth 2 --json '%s'", json);
    int rc = prog(cmd, out, sizeof out);
    if (rc != 0 || !strstr(out, "4 passed, 0 failed") || !strstr(out, "distribution: 3 passed, 0 failed"))
        fail_msg("rc %d:\n%s", rc, out);
    cJSON *root = read_json(json);
    const cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "results"), "distribution");
    assert_non_null(d);
    assert_int_equal((int)jnum(d, "failed"), 0);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(d, "checks")), 3);
    assert_true(jnum(d, "false_failure_rate") > 0 && jnum(d, "false_failure_rate") <= 0.01);
    cJSON_Delete(root);
}

/* llama-bench's -o json: a pp row, a tg row; the tg row is the one read. */
static void llama_parse(void **s) {
    (void)s;
    bench_llama r;
    memset(&r, 0, sizeof r);
    assert_true(bench_llama_parse(
        "[{\"build_commit\": \"abc1234\", \"n_threads\": 2, \"n_prompt\": 512, \"n_gen\": 0, "
        "\"avg_ts\": 80.5},\n {\"build_commit\": \"abc1234\", \"model_type\": \"qwen3 0.6B Q8_0\", "
        "\"n_threads\": 2, \"n_prompt\": 0, \"n_gen\": 32, \"avg_ts\": 21.25, \"stddev_ts\": 0.5}]",
        &r));
    assert_true(r.ran);
    assert_true(r.tok_s == 21.25 && r.stddev == 0.5);
    assert_int_equal(r.n_gen, 32);
    assert_int_equal(r.threads, 2);
    assert_string_equal(r.commit, "abc1234");
    assert_string_equal(r.model_type, "qwen3 0.6B Q8_0");
    static const char *bad[] = {"", "not json", "{}", "[]",
                                "[{\"n_prompt\": 512, \"n_gen\": 0, \"avg_ts\": 80}]",
                                "[{\"n_prompt\": 0, \"n_gen\": 32}]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        memset(&r, 0, sizeof r);
        assert_false(bench_llama_parse(bad[i], &r));
        assert_false(r.ran);
        assert_non_null(strstr(r.reason, "no tg row"));
    }
}

/* A stand-in llama-bench at dir/fake/llama-bench: records its arguments,
 * prints a JSON tg row (or fails with a message when fail). */
static void fake_llama(bool fail) {
    char d[512], path[600], text[1400];
    snprintf(d, sizeof d, "%s/fake", dir);
    mkdir(d, 0755);
    snprintf(path, sizeof path, "%s/llama-bench", d);
    if (fail)
        snprintf(text, sizeof text,
                 "#!/bin/sh\necho 'llama_bench: error: failed to load model' >&2\n"
                 "echo '['\nexit 1\n");
    else
        snprintf(text, sizeof text,
                 "#!/bin/sh\necho \"$@\" > '%s/args'\necho 'chatter on stderr' >&2\n"
                 "echo '[{\"build_commit\": \"fake123\", \"model_type\": \"qwen3 stand-in\", "
                 "\"n_threads\": 1, \"n_prompt\": 0, \"n_gen\": 16, \"avg_ts\": 12.5, "
                 "\"stddev_ts\": 0.25}]'\n", d);
    write_file(path, text);
    chmod(path, 0755);
}

static void llama_side_by_side(void **s) {
    (void)s;
    if (access(MTPLX_SOURCE_DIR "/models/default.gguf", R_OK)) skip();
    static char out[1 << 16];
    char cmd[2048], json[512], fake[512], args[600];
    snprintf(json, sizeof json, "%s/ll.json", dir);
    snprintf(fake, sizeof fake, "%s/fake", dir);
    snprintf(args, sizeof args, "%s/fake/args", dir);

    /* the folder given: its llama-bench runs with our threads and tokens */
    fake_llama(false);
    snprintf(cmd, sizeof cmd, "bench --quick -t 1 --max-depth 1 --llama-cpp '%s' --json '%s'",
             fake, json);
    int rc = prog(cmd, out, sizeof out);
    if (rc != 0 || !strstr(out, "llama.cpp      12.5") || !strstr(out, "vs llama.cpp: AR "))
        fail_msg("rc %d:\n%s", rc, out);
    char *a = NULL;
    size_t len;
    assert_int_equal(mtplx_read_file(args, &a, &len), MTPLX_OK);
    if (!strstr(a, "-t 1 -p 0 -n 16 -r 3 -o json") || !strstr(a, "models/default.gguf"))
        fail_msg("llama-bench arguments: %s", a);
    free(a);
    cJSON *root = read_json(json);
    const cJSON *res = cJSON_GetObjectItem(root, "results");
    const cJSON *l = cJSON_GetObjectItem(res, "llama_cpp");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(l, "ran")));
    assert_true(jnum(l, "tokens_per_s") == 12.5);
    assert_int_equal((int)jnum(l, "tokens"), 16);
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(res, "configs"), 0);
    assert_true(fabs(jnum(c0, "vs_llama_cpp") - jnum(c0, "tokens_per_s_median") / 12.5) < 1e-9);
    cJSON_Delete(root);

    /* the binary through the environment; another GGUF for llama.cpp */
    char bin[600];
    snprintf(bin, sizeof bin, "%s/llama-bench", fake);
    setenv("MTPLX_LLAMA_CPP", bin, 1);
    rc = prog("bench --quick -t 1 --max-depth 1 --llama-model /x/plain.gguf", out, sizeof out);
    unsetenv("MTPLX_LLAMA_CPP");
    if (rc != 0 || !strstr(out, "llama.cpp      12.5")) fail_msg("rc %d:\n%s", rc, out);
    assert_int_equal(mtplx_read_file(args, &a, &len), MTPLX_OK);
    if (!strstr(a, "-m /x/plain.gguf -t 1")) fail_msg("llama-bench arguments: %s", a);
    free(a);

    /* absent, missing or failing: skipped, and the bench still succeeds */
    rc = prog("bench --quick -t 1 --max-depth 1", out, sizeof out);
    if (rc != 0 || !strstr(out, "llama.cpp: skipped (no --llama-cpp PATH and no MTPLX_LLAMA_CPP)"))
        fail_msg("rc %d:\n%s", rc, out);
    snprintf(cmd, sizeof cmd,
             "bench --quick -t 1 --max-depth 1 --llama-cpp '%s/none' --json '%s'", dir, json);
    rc = prog(cmd, out, sizeof out);
    if (rc != 0 || !strstr(out, "llama.cpp: skipped (") || !strstr(out, "/none does not exist"))
        fail_msg("rc %d:\n%s", rc, out);
    root = read_json(json);
    l = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "results"), "llama_cpp");
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(l, "ran")));
    assert_true(cJSON_IsString(cJSON_GetObjectItem(l, "skipped")));
    cJSON_Delete(root);
    fake_llama(true);
    snprintf(cmd, sizeof cmd, "bench --quick -t 1 --max-depth 1 --llama-cpp '%s'", fake);
    rc = prog(cmd, out, sizeof out);
    if (rc != 0 || !strstr(out, "--strip-mtp") ||
        !strstr(out, "llama.cpp: skipped (llama-bench failed (exit 1): llama_bench: error: failed "
                     "to load model)"))
        fail_msg("rc %d:\n%s", rc, out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(suite_files),  cmocka_unit_test(chi2),
        cmocka_unit_test(compare),      cmocka_unit_test(long_context),
        cmocka_unit_test(math_quick),   cmocka_unit_test(exactness),
        cmocka_unit_test(llama_parse),  cmocka_unit_test(llama_side_by_side),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
