/* test_formats_gguf.c: GGUF write -> read round trip of every metadata type
 * and several tensor types, lookups and building rules, and bad GGUF files
 * (truncated at every byte, wrong magic / version, huge counts, strings past
 * the end, tensors outside the file or overlapping, bad shapes, unknown
 * types): each must fail with a message naming the file, never crash. */
#include "test_formats_util.h"

#include <math.h>

static mtplx_gguf *make_sample(void) {
    mtplx_gguf *g = mtplx_gguf_new();
    assert_non_null(g);
    assert_int_equal(mtplx_gguf_set_str(g, "general.architecture", "qwen3"), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_u32(g, "qwen3.block_count", 28), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_i32(g, "t.i32", -123456), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_u64(g, "t.u64", 0xfedcba9876543210ull), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_f32(g, "qwen3.rope.freq_base", 1000000.0f), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_bool(g, "t.bool", true), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_str(g, "t.empty", ""), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_strn(g, "t.nul", "a\0b", 3), MTPLX_OK);
    /* the remaining scalar types through the copy path */
    mtplx_gguf_kv kv = {0};
    struct { const char *key; mtplx_gguf_type t; } sc[] = {
        {"t.u8", GGUF_TYPE_UINT8},   {"t.i8", GGUF_TYPE_INT8},   {"t.u16", GGUF_TYPE_UINT16},
        {"t.i16", GGUF_TYPE_INT16},  {"t.i64", GGUF_TYPE_INT64}, {"t.f64", GGUF_TYPE_FLOAT64},
    };
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
        kv.key = (char *)sc[i].key;
        kv.type = sc[i].t;
        kv.v.u64 = 0;
        if (sc[i].t == GGUF_TYPE_UINT8) kv.v.u64 = 250;
        if (sc[i].t == GGUF_TYPE_INT8) kv.v.i64 = -100;
        if (sc[i].t == GGUF_TYPE_UINT16) kv.v.u64 = 65000;
        if (sc[i].t == GGUF_TYPE_INT16) kv.v.i64 = -32000;
        if (sc[i].t == GGUF_TYPE_INT64) kv.v.i64 = -(1ll << 60);
        if (sc[i].t == GGUF_TYPE_FLOAT64) kv.v.f64 = 3.141592653589793;
        assert_int_equal(mtplx_gguf_copy_kv(g, &kv), MTPLX_OK);
    }
    uint8_t u8[] = {1, 2, 255};
    int8_t i8[] = {-1, 2, -128};
    uint16_t u16[] = {1, 65535};
    int16_t i16[] = {-2, 32767};
    uint32_t u32[] = {7, 4000000000u};
    int32_t i32[] = {-7, 1 << 30, 0};
    float f32[] = {1.5f, -0.25f};
    uint8_t bl[] = {1, 0, 1};
    uint64_t u64[] = {1, UINT64_MAX};
    int64_t i64[] = {INT64_MIN, 5};
    double f64[] = {1e-300, -2.5};
    const char *strs[] = {"hello", "", "wörld"};
    assert_int_equal(mtplx_gguf_set_arr(g, "a.u8", GGUF_TYPE_UINT8, u8, 3), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_arr(g, "a.i8", GGUF_TYPE_INT8, i8, 3), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_arr(g, "a.u16", GGUF_TYPE_UINT16, u16, 2), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_arr(g, "a.i16", GGUF_TYPE_INT16, i16, 2), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_arr(g, "a.u32", GGUF_TYPE_UINT32, u32, 2), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_arr(g, "a.i32", GGUF_TYPE_INT32, i32, 3), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_arr(g, "a.f32", GGUF_TYPE_FLOAT32, f32, 2), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_arr(g, "a.bool", GGUF_TYPE_BOOL, bl, 3), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_arr(g, "a.u64", GGUF_TYPE_UINT64, u64, 2), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_arr(g, "a.i64", GGUF_TYPE_INT64, i64, 2), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_arr(g, "a.f64", GGUF_TYPE_FLOAT64, f64, 2), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_arr(g, "a.str", GGUF_TYPE_STRING, strs, 3), MTPLX_OK);
    assert_int_equal(mtplx_gguf_set_arr(g, "a.empty", GGUF_TYPE_INT32, NULL, 0), MTPLX_OK);

    /* tensors of several types, data = a byte pattern per tensor */
    struct { const char *name; int type; int n_dims; int64_t ne[4]; } ts[] = {
        {"token_embd.weight", MTPLX_TYPE_F32, 2, {8, 3}},
        {"blk.0.attn_q.weight", MTPLX_TYPE_F16, 2, {16, 5}},
        {"blk.0.attn_k.weight", MTPLX_TYPE_BF16, 3, {4, 3, 2}},
        {"blk.0.ffn_up.weight", MTPLX_TYPE_Q8_0, 2, {64, 3}},
        {"blk.0.ffn_down.weight", MTPLX_TYPE_Q4_0, 2, {32, 2}},
        {"blk.0.ffn_gate.weight", MTPLX_TYPE_Q4_K, 2, {256, 2}},
        {"output.weight", MTPLX_TYPE_Q6_K, 4, {256, 1, 1, 2}},
        {"output_norm.weight", MTPLX_TYPE_F32, 1, {7}},
    };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        size_t nb = mtplx_row_size(ts[i].type, ts[i].ne[0]);
        for (int d = 1; d < ts[i].n_dims; d++) nb *= (size_t)ts[i].ne[d];
        uint8_t *data = malloc(nb);
        for (size_t k = 0; k < nb; k++) data[k] = (uint8_t)(k * 7 + i * 31);
        assert_int_equal(mtplx_gguf_add_tensor(g, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne,
                                               data, true), MTPLX_OK);
        assert_int_equal(g->tensors[g->n_tensors - 1].nbytes, nb);
    }
    return g;
}

static void compare(const mtplx_gguf *a, const mtplx_gguf *b) {
    assert_int_equal(a->n_tensors, b->n_tensors);
    for (int64_t i = 0; i < a->n_kv; i++) {
        const mtplx_gguf_kv *x = &a->kv[i], *y = mtplx_gguf_get(b, x->key);
        if (!y) fail_msg("key %s lost", x->key);
        assert_int_equal(x->type, y->type);
        switch (x->type) {
        case GGUF_TYPE_STRING:
            assert_int_equal(x->v.str.len, y->v.str.len);
            assert_memory_equal(x->v.str.data, y->v.str.data, x->v.str.len + 1);
            break;
        case GGUF_TYPE_ARRAY:
            assert_int_equal(x->arr_type, y->arr_type);
            assert_int_equal(x->arr_n, y->arr_n);
            if (x->arr_type == GGUF_TYPE_STRING) {
                const mtplx_gguf_str *s = x->arr_data, *t = y->arr_data;
                for (uint64_t k = 0; k < x->arr_n; k++) {
                    assert_int_equal(s[k].len, t[k].len);
                    assert_string_equal(s[k].data, t[k].data);
                }
            } else if (x->arr_n) {
                assert_memory_equal(x->arr_data, y->arr_data,
                                    x->arr_n * mtplx_gguf_type_size(x->arr_type));
            }
            break;
        case GGUF_TYPE_FLOAT32: assert_true(x->v.f64 == y->v.f64); break;
        case GGUF_TYPE_FLOAT64: assert_true(x->v.f64 == y->v.f64); break;
        default: assert_true(x->v.u64 == y->v.u64);
        }
    }
    for (int64_t i = 0; i < a->n_tensors; i++) {
        const mtplx_gguf_tensor *x = &a->tensors[i], *y = mtplx_gguf_find_tensor(b, x->name);
        assert_non_null(y);
        assert_int_equal(x->type, y->type);
        assert_int_equal(x->n_dims, y->n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(x->ne[d], y->ne[d]);
        assert_int_equal(x->nbytes, y->nbytes);
        assert_memory_equal(x->data, y->data, x->nbytes);
    }
}

static void test_roundtrip(void **state) {
    (void)state;
    mtplx_gguf *g = make_sample();
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) g->alignment = 64; /* non-default: written as general.alignment */
        const char *path = tf_path("rt%d.gguf", pass);
        assert_int_equal(mtplx_gguf_write(g, path), MTPLX_OK);
        mtplx_gguf *r = NULL;
        if (mtplx_gguf_open(path, &r) != MTPLX_OK) fail_msg("%s", mtplx_last_error());
        assert_int_equal(r->version, 3);
        assert_int_equal(r->alignment, pass ? 64 : 32);
        compare(g, r);
        /* data really sits at aligned file offsets */
        for (int64_t i = 0; i < r->n_tensors; i++) {
            size_t off = (size_t)((uint8_t *)r->tensors[i].data - (uint8_t *)r->map.data);
            assert_int_equal(off % r->alignment, 0);
        }
        assert_int_equal(mtplx_gguf_get_int(r, "general.alignment", 32), pass ? 64 : 32);
        /* a second round trip is byte-identical */
        const char *p2 = tf_path("rt%d_b.gguf", pass);
        assert_int_equal(mtplx_gguf_write(r, p2), MTPLX_OK);
        size_t n1, n2;
        uint8_t *b1 = tf_read(path, &n1), *b2 = tf_read(p2, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(b1, b2, n1);
        free(b1);
        free(b2);
        mtplx_gguf_free(r);
    }
    /* no temporary files left behind */
    DIR *d = opendir(tf_dir());
    struct dirent *e;
    while ((e = readdir(d))) assert_null(strstr(e->d_name, ".tmp."));
    closedir(d);
    mtplx_gguf_free(g);
}

static void test_lookups(void **state) {
    (void)state;
    mtplx_gguf *g = make_sample();
    assert_int_equal(mtplx_gguf_get_arch_int(g, "block_count", 0), 28);
    assert_true(fabs(mtplx_gguf_get_arch_float(g, "rope.freq_base", 0) - 1e6) < 1e-3);
    assert_int_equal(mtplx_gguf_get_arch_int(g, "missing", -5), -5);
    assert_int_equal(mtplx_gguf_get_int(g, "t.i32", 0), -123456);
    assert_int_equal(mtplx_gguf_get_int(g, "t.i8", 0), -100);
    assert_int_equal(mtplx_gguf_get_int(g, "t.u16", 0), 65000);
    assert_int_equal(mtplx_gguf_get_int(g, "general.architecture", 9), 9); /* wrong type */
    assert_true(mtplx_gguf_get_bool(g, "t.bool", false));
    assert_false(mtplx_gguf_get_bool(g, "t.i32", false));
    assert_string_equal(mtplx_gguf_get_str(g, "general.architecture"), "qwen3");
    assert_null(mtplx_gguf_get_str(g, "t.i32"));
    assert_null(mtplx_gguf_get(g, "nope"));
    /* set replaces */
    int64_t n = g->n_kv;
    assert_int_equal(mtplx_gguf_set_str(g, "t.i32", "now a string"), MTPLX_OK);
    assert_int_equal(g->n_kv, n);
    assert_string_equal(mtplx_gguf_get_str(g, "t.i32"), "now a string");
    /* tensor rules */
    int64_t ne[2] = {33, 2};
    float dummy[128] = {0};
    assert_int_equal(mtplx_gguf_add_tensor(g, "x", MTPLX_TYPE_Q8_0, 2, ne, dummy, false),
                     MTPLX_ERR_FORMAT);
    assert_non_null(strstr(mtplx_last_error(), "block size"));
    ne[0] = 32;
    assert_int_equal(mtplx_gguf_add_tensor(g, "x", 77, 2, ne, dummy, false),
                     MTPLX_ERR_UNSUPPORTED);
    assert_int_equal(mtplx_gguf_add_tensor(g, "output.weight", 0, 2, ne, dummy, false),
                     MTPLX_ERR_FORMAT);
    ne[1] = 0;
    assert_int_not_equal(mtplx_gguf_add_tensor(g, "y", 0, 2, ne, dummy, false), MTPLX_OK);
    assert_null(mtplx_gguf_find_tensor(g, "x"));
    assert_non_null(mtplx_gguf_find_tensor(g, "output.weight"));
    mtplx_gguf_free(g);
    mtplx_gguf_free(NULL);
}

/* ---------------- bad files ---------------- */

/* A small valid v3 file built by hand: 2 kvs, 2 F32 tensors. */
static tf_buf good_file(uint32_t version) {
    tf_buf b = {0};
    bb_raw(&b, "GGUF", 4);
    bb_u32(&b, version);
    bb_u64(&b, 2); /* tensors */
    bb_u64(&b, 3); /* kvs */
    bb_str(&b, "general.architecture");
    bb_u32(&b, GGUF_TYPE_STRING);
    bb_str(&b, "llama");
    bb_str(&b, "tokenizer.ggml.tokens");
    bb_u32(&b, GGUF_TYPE_ARRAY);
    bb_u32(&b, GGUF_TYPE_STRING);
    bb_u64(&b, 2);
    bb_str(&b, "a");
    bb_str(&b, "bc");
    bb_str(&b, "general.alignment");
    bb_u32(&b, GGUF_TYPE_UINT32);
    bb_u32(&b, 32);
    bb_str(&b, "a.weight");
    bb_u32(&b, 2);
    bb_u64(&b, 4);
    bb_u64(&b, 2);
    bb_u32(&b, MTPLX_TYPE_F32);
    bb_u64(&b, 0);
    bb_str(&b, "b.weight");
    bb_u32(&b, 1);
    bb_u64(&b, 8);
    bb_u32(&b, MTPLX_TYPE_F32);
    bb_u64(&b, 32);
    bb_pad(&b, 32);
    float f[16];
    for (int i = 0; i < 16; i++) f[i] = (float)i;
    bb_raw(&b, f, 32);
    bb_raw(&b, f + 8, 32);
    return b;
}

/* Offset of the first occurrence of a byte string in b. */
static size_t find(const tf_buf *b, const void *s, size_t n) {
    for (size_t i = 0; i + n <= b->n; i++)
        if (!memcmp(b->p + i, s, n)) return i;
    fail_msg("pattern not found");
    return 0;
}

static mtplx_status open_bytes(const char *name, const void *p, size_t n) {
    const char *path = tf_path("%s", name);
    tf_write(path, p, n);
    mtplx_gguf *g = NULL;
    mtplx_status st = mtplx_gguf_open(path, &g);
    if (st == MTPLX_OK) assert_non_null(g);
    else assert_null(g);
    mtplx_gguf_free(g);
    return st;
}

static void expect_bad(const char *name, const tf_buf *b, mtplx_status want, const char *frag) {
    mtplx_status st = open_bytes(name, b->p, b->n);
    if (st != want)
        fail_msg("%s: status %d, expected %d (%s)", name, st, want, mtplx_last_error());
    tf_assert_msg(name, frag, NULL);
}

static void test_good_file_and_truncation(void **state) {
    (void)state;
    tf_buf b = good_file(3);
    assert_int_equal(open_bytes("good.gguf", b.p, b.n), MTPLX_OK);
    tf_buf b2 = good_file(2);
    assert_int_equal(open_bytes("good2.gguf", b2.p, b2.n), MTPLX_OK);
    free(b2.p);
    /* every cut point: never OK (except after the full data), never a crash */
    for (size_t cut = 0; cut < b.n; cut++) {
        mtplx_status st = open_bytes("cut.gguf", b.p, cut);
        if (st == MTPLX_OK) fail_msg("truncated at %zu of %zu: accepted", cut, b.n);
        tf_assert_msg("cut.gguf", NULL, NULL);
    }
    /* from memory too, without the file's page of slack */
    for (size_t cut = 0; cut < b.n; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, b.p, cut);
        mtplx_gguf *g = NULL;
        assert_int_not_equal(mtplx_gguf_open_memory(copy, cut, "mem.gguf", &g), MTPLX_OK);
        assert_null(g);
        free(copy);
    }
    free(b.p);
}

static void test_bad_headers(void **state) {
    (void)state;
    tf_buf b = good_file(3);
    b.p[0] = 'X';
    expect_bad("magic.gguf", &b, MTPLX_ERR_FORMAT, "magic");
    free(b.p);
    b = good_file(1);
    expect_bad("v1.gguf", &b, MTPLX_ERR_UNSUPPORTED, "version 1");
    free(b.p);
    b = good_file(4);
    expect_bad("v4.gguf", &b, MTPLX_ERR_UNSUPPORTED, "version 4");
    free(b.p);
    /* huge counts */
    b = good_file(3);
    uint64_t huge = 1ull << 62;
    memcpy(b.p + 8, &huge, 8);
    expect_bad("ntensors.gguf", &b, MTPLX_ERR_FORMAT, "tensor count");
    free(b.p);
    b = good_file(3);
    memcpy(b.p + 16, &huge, 8);
    expect_bad("nkv.gguf", &b, MTPLX_ERR_FORMAT, "kv count");
    free(b.p);
    /* a string length past the end */
    b = good_file(3);
    size_t at = find(&b, "llama", 5) - 8;
    uint64_t big = 1ull << 40;
    memcpy(b.p + at, &big, 8);
    expect_bad("strlen.gguf", &b, MTPLX_ERR_FORMAT, "general.architecture");
    free(b.p);
    /* array length huge */
    b = good_file(3);
    at = find(&b, "tokenizer.ggml.tokens", 21) + 21 + 8;
    memcpy(b.p + at, &huge, 8);
    expect_bad("arrlen.gguf", &b, MTPLX_ERR_FORMAT, "tokenizer.ggml.tokens");
    free(b.p);
    /* array of arrays */
    b = good_file(3);
    at = find(&b, "tokenizer.ggml.tokens", 21) + 21 + 4;
    uint32_t arr = GGUF_TYPE_ARRAY;
    memcpy(b.p + at, &arr, 4);
    expect_bad("arrarr.gguf", &b, MTPLX_ERR_UNSUPPORTED, "arrays of arrays");
    free(b.p);
    /* unknown value type */
    b = good_file(3);
    at = find(&b, "general.architecture", 20) + 20;
    uint32_t t99 = 99;
    memcpy(b.p + at, &t99, 4);
    expect_bad("vtype.gguf", &b, MTPLX_ERR_FORMAT, "value type");
    free(b.p);
    /* duplicate key */
    tf_buf d = {0};
    bb_raw(&d, "GGUF", 4);
    bb_u32(&d, 3);
    bb_u64(&d, 0);
    bb_u64(&d, 2);
    for (int i = 0; i < 2; i++) {
        bb_str(&d, "k.dup");
        bb_u32(&d, GGUF_TYPE_UINT32);
        bb_u32(&d, (uint32_t)i);
    }
    expect_bad("dupkey.gguf", &d, MTPLX_ERR_FORMAT, "appears twice");
    free(d.p);
    /* bad alignment value */
    b = good_file(3);
    at = find(&b, "general.alignment", 17) + 17 + 4;
    uint32_t a3 = 3;
    memcpy(b.p + at, &a3, 4);
    expect_bad("align.gguf", &b, MTPLX_ERR_FORMAT, "general.alignment");
    free(b.p);
}

static void set_u64_after(tf_buf *b, const char *name, size_t skip, uint64_t v) {
    size_t at = find(b, name, strlen(name)) + strlen(name) + skip;
    memcpy(b->p + at, &v, 8);
}

static void test_bad_tensors(void **state) {
    (void)state;
    /* b.weight info: n_dims(4) ne0(8) type(4) offset(8) */
    tf_buf b = good_file(3);
    set_u64_after(&b, "b.weight", 4 + 8 + 4, 4096);
    expect_bad("offset.gguf", &b, MTPLX_ERR_FORMAT, "past the end");
    tf_assert_msg("offset.gguf", "b.weight", NULL);
    free(b.p);
    b = good_file(3);
    set_u64_after(&b, "b.weight", 4 + 8 + 4, UINT64_MAX - 31);
    expect_bad("offset2.gguf", &b, MTPLX_ERR_FORMAT, "b.weight");
    free(b.p);
    b = good_file(3);
    set_u64_after(&b, "b.weight", 4 + 8 + 4, 0); /* same range as a.weight */
    expect_bad("overlap.gguf", &b, MTPLX_ERR_FORMAT, "overlaps");
    free(b.p);
    b = good_file(3);
    set_u64_after(&b, "b.weight", 4 + 8 + 4, 16); /* not aligned */
    expect_bad("unaligned.gguf", &b, MTPLX_ERR_FORMAT, "alignment");
    free(b.p);
    b = good_file(3);
    set_u64_after(&b, "b.weight", 4, 0); /* ne0 = 0 */
    expect_bad("ne0.gguf", &b, MTPLX_ERR_FORMAT, "ne[0]");
    free(b.p);
    b = good_file(3);
    set_u64_after(&b, "a.weight", 4 + 8, 1ull << 40); /* ne1 huge: past the end */
    expect_bad("ne1.gguf", &b, MTPLX_ERR_FORMAT, "a.weight");
    free(b.p);
    /* type Q8_0 with ne0 = 8: not a multiple of 32 */
    b = good_file(3);
    size_t at = find(&b, "b.weight", 8) + 8 + 4 + 8;
    uint32_t q8 = MTPLX_TYPE_Q8_0;
    memcpy(b.p + at, &q8, 4);
    expect_bad("block.gguf", &b, MTPLX_ERR_FORMAT, "block size");
    free(b.p);
    b = good_file(3);
    uint32_t t77 = 77;
    memcpy(b.p + at, &t77, 4);
    expect_bad("ttype.gguf", &b, MTPLX_ERR_UNSUPPORTED, "tensor type 77");
    free(b.p);
    /* n_dims 5 */
    b = good_file(3);
    at = find(&b, "b.weight", 8) + 8;
    uint32_t five = 5;
    memcpy(b.p + at, &five, 4);
    expect_bad("ndims.gguf", &b, MTPLX_ERR_FORMAT, "n_dims");
    free(b.p);
    /* duplicate tensor name */
    b = good_file(3);
    at = find(&b, "b.weight", 8);
    b.p[at] = 'a';
    expect_bad("duptensor.gguf", &b, MTPLX_ERR_FORMAT, "twice");
    free(b.p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_lookups),
        cmocka_unit_test(test_good_file_and_truncation),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_bad_tensors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
