/* test_formats_inspect.c: the `mtplx inspect` program (MTPLX_BIN) on good and
 * bad checkpoints: exit codes 0 / 1 / 2, a one-line stderr message naming
 * the bad file, and --json output that parses and says what the file is. */
#include "test_formats_util.h"

#include <cjson/cJSON.h>
#include <sys/wait.h>

#define STORIES MTPLX_SHARED_DIR "/models/stories260K/stories260K.bin"

/* Run MTPLX_BIN with args; returns the exit code, stdout / stderr into buffers (caller frees). */
static int run(const char *args, char **out, char **err) {
    const char *o = tf_path("stdout.txt"), *e = tf_path("stderr.txt");
    char cmd[PATH_MAX * 3];
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s'", MTPLX_BIN, args, o, e);
    int st = system(cmd);
    assert_true(WIFEXITED(st));
    size_t n;
    *out = (char *)tf_read(o, &n);
    *err = (char *)tf_read(e, &n);
    return WEXITSTATUS(st);
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void test_bad_file(void **state) {
    (void)state;
    const char *bad = tf_path("broken.gguf");
    tf_buf b = {0};
    bb_raw(&b, "GGUF", 4);
    bb_u32(&b, 3);
    bb_u64(&b, 1ull << 50); /* tensor count far beyond the file */
    bb_u64(&b, 0);
    tf_write(bad, b.p, b.n);
    free(b.p);
    char args[PATH_MAX + 16], *out, *err;
    snprintf(args, sizeof args, "inspect '%s'", bad);
    assert_int_equal(run(args, &out, &err), 1);
    assert_int_equal(count_lines(err), 1);
    assert_non_null(strstr(err, "broken.gguf"));
    assert_non_null(strstr(err, "tensor count"));
    assert_string_equal(out, "");
    free(out);
    free(err);
    /* truncated llama2.c checkpoint */
    size_t n;
    uint8_t *bin = tf_read(STORIES, &n);
    tf_mkdir(tf_path("cut"));
    const char *cut = tf_path("cut/stories260K.bin");
    tf_write(cut, bin, n - 100);
    free(bin);
    snprintf(args, sizeof args, "inspect --json '%s'", cut);
    assert_int_equal(run(args, &out, &err), 1);
    assert_int_equal(count_lines(err), 1);
    assert_non_null(strstr(err, "stories260K.bin"));
    assert_non_null(strstr(err, "truncated"));
    free(out);
    free(err);
}

static void test_usage(void **state) {
    (void)state;
    char *out, *err;
    assert_int_equal(run("inspect --bogus", &out, &err), 2);
    assert_non_null(strstr(err, "--bogus"));
    free(out);
    free(err);
    assert_int_equal(run("inspect --help", &out, &err), 0);
    assert_non_null(strstr(out, "usage: mtplx inspect"));
    free(out);
    free(err);
}

static void test_good_json(void **state) {
    (void)state;
    char *out, *err;
    assert_int_equal(run("inspect --json --tensors '" STORIES "'", &out, &err), 0);
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("not JSON: %s", out);
    assert_string_equal(cJSON_GetObjectItem(j, "format")->valuestring, "llama2c");
    assert_string_equal(cJSON_GetObjectItem(j, "architecture")->valuestring, "llama");
    cJSON *hp = cJSON_GetObjectItem(j, "hparams");
    assert_int_equal(cJSON_GetObjectItem(hp, "embedding_length")->valueint, 64);
    assert_int_equal(cJSON_GetObjectItem(hp, "block_count")->valueint, 5);
    assert_int_equal(cJSON_GetObjectItem(j, "n_tensors")->valueint, 47);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "tensors")), 47);
    assert_int_equal(cJSON_GetObjectItem(j, "mtp_heads")->valueint, 0);
    cJSON *tk = cJSON_GetObjectItem(j, "tokenizer");
    assert_string_equal(cJSON_GetObjectItem(tk, "kind")->valuestring, "llama");
    assert_int_equal(cJSON_GetObjectItem(tk, "vocab_size")->valueint, 512);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(j, "chat_template")));
    cJSON_Delete(j);
    free(out);
    free(err);
    /* the same as GGUF, with an MTP head and a template added */
    mtplx_gguf *g = NULL;
    assert_int_equal(mtplx_llama2c_load(STORIES, NULL, &g), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_u32(g, "llama.block_count", 6), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_u32(g, "llama.nextn_predict_layers", 1), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_str(g, "tokenizer.chat_template", "{{x}}"), MTPLX_OK);
    const mtplx_gguf_tensor *t = mtplx_gguf_find_tensor(g, "blk.0.ffn_up.weight");
    assert_int_equal(mtplx_gguf_add_tensor(g, "blk.5.ffn_up.weight", t->type, 2, t->ne, t->data,
                                           false), MTPLX_OK);
    const char *p = tf_path("with_mtp.gguf");
    assert_int_equal(mtplx_gguf_write(g, p), MTPLX_OK);
    int64_t mtp_params = t->ne[0] * t->ne[1];
    mtplx_gguf_free(g);
    char args[PATH_MAX + 32];
    snprintf(args, sizeof args, "inspect --json '%s'", p);
    assert_int_equal(run(args, &out, &err), 0);
    j = cJSON_Parse(out);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "format")->valuestring, "gguf");
    assert_int_equal(cJSON_GetObjectItem(j, "mtp_heads")->valueint, 1);
    assert_int_equal((int64_t)cJSON_GetObjectItem(j, "n_params_mtp")->valuedouble, mtp_params);
    assert_int_equal((int64_t)cJSON_GetObjectItem(j, "n_params_trunk")->valuedouble, 260032);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "chat_template")));
    cJSON_Delete(j);
    free(out);
    free(err);
    snprintf(args, sizeof args, "inspect --tensors '%s'", p);
    assert_int_equal(run(args, &out, &err), 0);
    assert_non_null(strstr(out, "MTP heads:     1"));
    assert_non_null(strstr(out, "blk.5.ffn_up.weight"));
    free(out);
    free(err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_file),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_good_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
