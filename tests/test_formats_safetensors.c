/* test_formats_safetensors.c: safetensors files written by the test are read
 * back (F32 / F16 / BF16, ne reversed, __metadata__ ignored, misaligned data
 * copied), and broken ones fail with a message naming the file: truncated at
 * every byte, header length past the end, bad JSON, unsupported dtype,
 * offsets outside the data, shape x dtype != byte range, overlaps. */
#include "test_formats_util.h"

static void test_read(void **state) {
    (void)state;
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[4] = {0x3c00, 0x4000, 0x4200, 0x4400};
    uint16_t bf[24];
    for (int i = 0; i < 24; i++) bf[i] = (uint16_t)(0x3f80 + i);
    tf_st ts[] = {
        {"a", "F32", 2, {2, 3}, a, sizeof a},
        {"h", "F16", 1, {4}, h, sizeof h},
        {"bf", "BF16", 3, {2, 3, 4}, bf, sizeof bf},
    };
    const char *p = tf_path("ok.safetensors");
    tf_write_safetensors(p, ts, 3);
    mtplx_gguf *g = mtplx_gguf_new();
    if (mtplx_safetensors_load(p, g) != MTPLX_OK) fail_msg("%s", mtplx_last_error());
    assert_int_equal(g->n_tensors, 3);
    assert_int_equal(g->n_extra_maps, 1);
    const mtplx_gguf_tensor *t = mtplx_gguf_find_tensor(g, "a");
    assert_int_equal(t->type, MTPLX_TYPE_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 3); /* innermost first */
    assert_int_equal(t->ne[1], 2);
    assert_memory_equal(t->data, a, sizeof a);
    t = mtplx_gguf_find_tensor(g, "h");
    assert_int_equal(t->type, MTPLX_TYPE_F16);
    assert_int_equal(t->ne[0], 4);
    assert_memory_equal(t->data, h, sizeof h);
    t = mtplx_gguf_find_tensor(g, "bf");
    assert_int_equal(t->type, MTPLX_TYPE_BF16);
    assert_int_equal(t->ne[0], 4);
    assert_int_equal(t->ne[1], 3);
    assert_int_equal(t->ne[2], 2);
    assert_int_equal(t->nbytes, sizeof bf);
    assert_memory_equal(t->data, bf, sizeof bf);
    assert_null(mtplx_gguf_find_tensor(g, "__metadata__"));
    /* a second file into the same container: a duplicate name is refused and
     * the container is left as it was */
    assert_int_not_equal(mtplx_safetensors_load(p, g), MTPLX_OK);
    tf_assert_msg(p, "twice", NULL);
    assert_int_equal(g->n_tensors, 3);
    assert_int_equal(g->n_extra_maps, 1);
    mtplx_gguf_free(g);

    /* header of odd length: F32 data lands misaligned and is copied */
    const char *json = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    assert_true(strlen(json) % 4 != 0);
    p = tf_path("odd.safetensors");
    tf_write_st_raw(p, json, a, 8);
    g = mtplx_gguf_new();
    assert_int_equal(mtplx_safetensors_load(p, g), MTPLX_OK);
    t = mtplx_gguf_find_tensor(g, "x");
    assert_int_equal((uintptr_t)t->data % 4, 0);
    assert_true(t->owned_data);
    assert_memory_equal(t->data, a, 8);
    mtplx_gguf_free(g);
}

static void expect_bad(const char *name, const char *json, const void *data, size_t n,
                       mtplx_status want, const char *frag) {
    const char *p = tf_path("%s", name);
    tf_write_st_raw(p, json, data, n);
    mtplx_gguf *g = mtplx_gguf_new();
    mtplx_status st = mtplx_safetensors_load(p, g);
    if (st != want) fail_msg("%s: status %d, expected %d (%s)", name, st, want, mtplx_last_error());
    tf_assert_msg(p, frag, NULL);
    assert_int_equal(g->n_tensors, 0);
    mtplx_gguf_free(g);
}

static void test_bad(void **state) {
    (void)state;
    float d[8] = {0};
    expect_bad("dtype.st", "{\"t\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", d,
               16, MTPLX_ERR_UNSUPPORTED, "I64");
    expect_bad("f64.st", "{\"t\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", d, 16,
               MTPLX_ERR_UNSUPPORTED, "F64");
    expect_bad("past.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]}}", d, 16,
               MTPLX_ERR_FORMAT, "outside");
    expect_bad("shape.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", d,
               16, MTPLX_ERR_FORMAT, "shape");
    expect_bad("shape2.st", "{\"t\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
               d, 16, MTPLX_ERR_FORMAT, "needs 8");
    expect_bad("rev.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", d, 16,
               MTPLX_ERR_FORMAT, "data_offsets");
    expect_bad("neg.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", d, 16,
               MTPLX_ERR_FORMAT, "shape[0]");
    expect_bad("zero.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", d, 16,
               MTPLX_ERR_FORMAT, "empty");
    expect_bad("frac.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0.5,8.5]}}", d,
               16, MTPLX_ERR_FORMAT, "data_offsets");
    expect_bad("huge.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1e30,1e31]}}",
               d, 16, MTPLX_ERR_FORMAT, "data_offsets");
    expect_bad("rank.st",
               "{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,8]}}", d, 16,
               MTPLX_ERR_UNSUPPORTED, "dimensions");
    expect_bad("overlap.st",
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               d, 16, MTPLX_ERR_FORMAT, "overlaps");
    expect_bad("nodtype.st", "{\"t\":{\"shape\":[2],\"data_offsets\":[0,8]}}", d, 16,
               MTPLX_ERR_FORMAT, "dtype");
    expect_bad("noshape.st", "{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", d, 16,
               MTPLX_ERR_FORMAT, "shape");
    expect_bad("nooffs.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", d, 16, MTPLX_ERR_FORMAT,
               "data_offsets");
    expect_bad("notobj.st", "{\"t\":[1,2]}", d, 16, MTPLX_ERR_FORMAT, "not an object");
    expect_bad("json.st", "{\"t\":{\"dtype\":", d, 16, MTPLX_ERR_FORMAT, "JSON");
    expect_bad("arr.st", "[1,2,3]", d, 16, MTPLX_ERR_FORMAT, "'{'");
    /* header length past the end */
    const char *p = tf_path("hlen.st");
    uint64_t hl = 1000;
    tf_write(p, &hl, 8);
    mtplx_gguf *g = mtplx_gguf_new();
    assert_int_equal(mtplx_safetensors_load(p, g), MTPLX_ERR_FORMAT);
    tf_assert_msg(p, "header length", NULL);
    mtplx_gguf_free(g);
}

static void test_truncation(void **state) {
    (void)state;
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[4] = {1, 2, 3, 4};
    tf_st ts[] = {{"a", "F32", 2, {2, 3}, a, sizeof a}, {"h", "F16", 1, {4}, h, sizeof h}};
    const char *p = tf_path("full.safetensors");
    tf_write_safetensors(p, ts, 2);
    size_t n;
    uint8_t *b = tf_read(p, &n);
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, b, cut);
        mtplx_gguf *g = mtplx_gguf_new();
        assert_int_not_equal(mtplx_safetensors_load_memory(copy, cut, "cut.safetensors", g),
                             MTPLX_OK);
        tf_assert_msg("cut.safetensors", NULL, NULL);
        assert_int_equal(g->n_tensors, 0);
        mtplx_gguf_free(g);
        free(copy);
    }
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read),
        cmocka_unit_test(test_bad),
        cmocka_unit_test(test_truncation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
