/* gguf.c: the mtplx_gguf container (metadata and tensor tables, lookups,
 * building) and the GGUF v2/v3 reader.
 *
 * The reader maps the file and checks every count, string length, size and
 * offset against the bytes that are left before reading them, so a hostile
 * file costs at most an error message. Tensor data stays in the mapping.
 * Deliberately left out: big-endian GGUF and GGUF v1 (32-bit counts), and
 * arrays of arrays (no model we run uses them; rejected with a message).
 * The writer is in gguf_write.c. Spec: ggml/docs/gguf.md. */
#include "formats/gguf.h"
#include "formats/formats_internal.h"
#include "kernels/kernels.h"

#include <string.h>
#include <sys/mman.h>

#define GGUF_MAX_DIMS 4

/* ------------------------------------------------------------------ */
/* container                                                           */
/* ------------------------------------------------------------------ */

mtplx_gguf *mtplx_gguf_new(void) {
    mtplx_gguf *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->version = 3;
    g->alignment = MTPLX_GGUF_DEFAULT_ALIGNMENT;
    return g;
}

size_t mtplx_gguf_type_size(mtplx_gguf_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    case GGUF_TYPE_STRING: return sizeof(mtplx_gguf_str);
    default: return 0;
    }
}

const char *mtplx_gguf_type_name(mtplx_gguf_type t) {
    static const char *names[] = {"uint8",   "int8",  "uint16", "int16", "uint32",
                                  "int32",   "float32", "bool", "string", "array",
                                  "uint64",  "int64", "float64"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

static void kv_clear(mtplx_gguf_kv *kv) {
    if (kv->type == GGUF_TYPE_STRING) free(kv->v.str.data);
    if (kv->type == GGUF_TYPE_ARRAY && kv->arr_data) {
        if (kv->arr_type == GGUF_TYPE_STRING) {
            mtplx_gguf_str *s = kv->arr_data;
            for (uint64_t i = 0; i < kv->arr_n; i++) free(s[i].data);
        }
        free(kv->arr_data);
    }
    memset(&kv->v, 0, sizeof kv->v);
    kv->arr_data = NULL;
    kv->arr_n = 0;
    kv->arr_type = 0;
}

static void tensor_clear(mtplx_gguf_tensor *t) {
    free(t->name);
    if (t->owned_data) free(t->data);
    t->name = NULL;
    t->data = NULL;
    t->owned_data = false;
}

void mtplx_gguf_free(mtplx_gguf *g) {
    if (!g) return;
    for (int64_t i = 0; i < g->n_kv; i++) {
        kv_clear(&g->kv[i]);
        free(g->kv[i].key);
    }
    free(g->kv);
    for (int64_t i = 0; i < g->n_tensors; i++) tensor_clear(&g->tensors[i]);
    free(g->tensors);
    mtplx_mmap_close(&g->map);
    for (int i = 0; i < g->n_extra_maps; i++) {
        mtplx_mmap m = {g->extra_maps[i], g->extra_sizes[i]};
        mtplx_mmap_close(&m);
    }
    free(g->extra_maps);
    free(g->extra_sizes);
    free(g->path);
    free(g);
}

mtplx_status mtplx_gguf_keep_map(mtplx_gguf *g, mtplx_mmap *m) {
    void **maps = realloc(g->extra_maps, (size_t)(g->n_extra_maps + 1) * sizeof *maps);
    if (!maps) return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory keeping a file mapping");
    g->extra_maps = maps;
    size_t *sizes = realloc(g->extra_sizes, (size_t)(g->n_extra_maps + 1) * sizeof *sizes);
    if (!sizes) return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory keeping a file mapping");
    g->extra_sizes = sizes;
    maps[g->n_extra_maps] = m->data;
    sizes[g->n_extra_maps] = m->size;
    g->n_extra_maps++;
    m->data = NULL;
    m->size = 0;
    return MTPLX_OK;
}

/* ------------------------------------------------------------------ */
/* metadata lookup                                                     */
/* ------------------------------------------------------------------ */

static int64_t kv_index(const mtplx_gguf *g, const char *key) {
    for (int64_t i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key)) return i;
    return -1;
}

const mtplx_gguf_kv *mtplx_gguf_get(const mtplx_gguf *g, const char *key) {
    if (!g || !key) return NULL;
    int64_t i = kv_index(g, key);
    return i < 0 ? NULL : &g->kv[i];
}

static bool type_is_uint(mtplx_gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_BOOL;
}
static bool type_is_sint(mtplx_gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

int64_t mtplx_gguf_get_int(const mtplx_gguf *g, const char *key, int64_t def) {
    const mtplx_gguf_kv *kv = mtplx_gguf_get(g, key);
    if (!kv) return def;
    if (type_is_uint(kv->type)) return (int64_t)kv->v.u64;
    if (type_is_sint(kv->type)) return kv->v.i64;
    return def;
}

double mtplx_gguf_get_float(const mtplx_gguf *g, const char *key, double def) {
    const mtplx_gguf_kv *kv = mtplx_gguf_get(g, key);
    if (!kv) return def;
    if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64) return kv->v.f64;
    if (type_is_uint(kv->type)) return (double)kv->v.u64;
    if (type_is_sint(kv->type)) return (double)kv->v.i64;
    return def;
}

bool mtplx_gguf_get_bool(const mtplx_gguf *g, const char *key, bool def) {
    const mtplx_gguf_kv *kv = mtplx_gguf_get(g, key);
    if (!kv || kv->type != GGUF_TYPE_BOOL) return def;
    return kv->v.u64 != 0;
}

const char *mtplx_gguf_get_str(const mtplx_gguf *g, const char *key) {
    const mtplx_gguf_kv *kv = mtplx_gguf_get(g, key);
    if (!kv || kv->type != GGUF_TYPE_STRING) return NULL;
    return kv->v.str.data;
}

static bool arch_key(const mtplx_gguf *g, const char *suffix, char *buf, size_t cap) {
    const char *arch = mtplx_gguf_get_str(g, "general.architecture");
    if (!arch || !suffix) return false;
    int n = snprintf(buf, cap, "%s.%s", arch, suffix);
    return n > 0 && (size_t)n < cap;
}

int64_t mtplx_gguf_get_arch_int(const mtplx_gguf *g, const char *suffix, int64_t def) {
    char key[256];
    return arch_key(g, suffix, key, sizeof key) ? mtplx_gguf_get_int(g, key, def) : def;
}

double mtplx_gguf_get_arch_float(const mtplx_gguf *g, const char *suffix, double def) {
    char key[256];
    return arch_key(g, suffix, key, sizeof key) ? mtplx_gguf_get_float(g, key, def) : def;
}

/* ------------------------------------------------------------------ */
/* building                                                            */
/* ------------------------------------------------------------------ */

/* The kv for key, emptied (existing) or appended (new). NULL on OOM. */
static mtplx_gguf_kv *kv_slot(mtplx_gguf *g, const char *key) {
    int64_t i = kv_index(g, key);
    if (i >= 0) {
        kv_clear(&g->kv[i]);
        return &g->kv[i];
    }
    if (g->n_kv == g->cap_kv) {
        int64_t cap = g->cap_kv ? g->cap_kv * 2 : 32;
        mtplx_gguf_kv *kv = realloc(g->kv, (size_t)cap * sizeof *kv);
        if (!kv) return NULL;
        g->kv = kv;
        g->cap_kv = cap;
    }
    mtplx_gguf_kv *kv = &g->kv[g->n_kv];
    memset(kv, 0, sizeof *kv);
    kv->key = mtplx_strdup(key);
    if (!kv->key) return NULL;
    g->n_kv++;
    return kv;
}

static mtplx_status set_scalar(mtplx_gguf *g, const char *key, mtplx_gguf_type t, uint64_t u,
                               int64_t i, double f) {
    mtplx_gguf_kv *kv = kv_slot(g, key);
    if (!kv) return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory setting key '%s'", key);
    kv->type = t;
    if (type_is_uint(t)) kv->v.u64 = u;
    else if (type_is_sint(t)) kv->v.i64 = i;
    else kv->v.f64 = f;
    return MTPLX_OK;
}

mtplx_status mtplx_gguf_set_u32(mtplx_gguf *g, const char *key, uint32_t v) {
    return set_scalar(g, key, GGUF_TYPE_UINT32, v, 0, 0);
}
mtplx_status mtplx_gguf_set_i32(mtplx_gguf *g, const char *key, int32_t v) {
    return set_scalar(g, key, GGUF_TYPE_INT32, 0, v, 0);
}
mtplx_status mtplx_gguf_set_u64(mtplx_gguf *g, const char *key, uint64_t v) {
    return set_scalar(g, key, GGUF_TYPE_UINT64, v, 0, 0);
}
mtplx_status mtplx_gguf_set_f32(mtplx_gguf *g, const char *key, float v) {
    return set_scalar(g, key, GGUF_TYPE_FLOAT32, 0, 0, v);
}
mtplx_status mtplx_gguf_set_bool(mtplx_gguf *g, const char *key, bool v) {
    return set_scalar(g, key, GGUF_TYPE_BOOL, v ? 1 : 0, 0, 0);
}
mtplx_status mtplx_gguf_set_scalar(mtplx_gguf *g, const char *key, mtplx_gguf_type t,
                                   uint64_t u, int64_t i, double f) {
    if (t == GGUF_TYPE_STRING || t == GGUF_TYPE_ARRAY || !mtplx_gguf_type_size(t))
        return mtplx_fail(MTPLX_ERR_ARG, "key '%s': %s is not a scalar type", key,
                          mtplx_gguf_type_name(t));
    return set_scalar(g, key, t, u, i, f);
}

mtplx_status mtplx_gguf_set_strn(mtplx_gguf *g, const char *key, const char *v, size_t len) {
    char *copy = mtplx_strndup(v, len);
    if (!copy) return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory setting key '%s'", key);
    mtplx_gguf_kv *kv = kv_slot(g, key);
    if (!kv) {
        free(copy);
        return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory setting key '%s'", key);
    }
    kv->type = GGUF_TYPE_STRING;
    kv->v.str.len = len;
    kv->v.str.data = copy;
    return MTPLX_OK;
}

mtplx_status mtplx_gguf_set_str(mtplx_gguf *g, const char *key, const char *v) {
    return mtplx_gguf_set_strn(g, key, v, strlen(v));
}

/* Store an already built array (arr_data owned by the kv from now on). */
mtplx_status mtplx_gguf_set_arr_owned(mtplx_gguf *g, const char *key, mtplx_gguf_type elem_type,
                                      void *arr_data, uint64_t n) {
    mtplx_gguf_kv *kv = kv_slot(g, key);
    if (!kv) {
        mtplx_gguf_kv tmp = {.type = GGUF_TYPE_ARRAY, .arr_type = elem_type, .arr_n = n,
                             .arr_data = arr_data};
        kv_clear(&tmp);
        return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory setting key '%s'", key);
    }
    kv->type = GGUF_TYPE_ARRAY;
    kv->arr_type = elem_type;
    kv->arr_n = n;
    kv->arr_data = arr_data;
    return MTPLX_OK;
}

mtplx_status mtplx_gguf_set_arr(mtplx_gguf *g, const char *key, mtplx_gguf_type elem_type,
                                const void *data, uint64_t n) {
    size_t es = mtplx_gguf_type_size(elem_type);
    if (!es || elem_type == GGUF_TYPE_ARRAY)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "key '%s': arrays of %s are not supported", key,
                          mtplx_gguf_type_name(elem_type));
    if (n > SIZE_MAX / es) return mtplx_fail(MTPLX_ERR_RANGE, "key '%s': array too long", key);
    void *arr = calloc(n ? n : 1, es);
    if (!arr) return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory setting key '%s'", key);
    if (elem_type == GGUF_TYPE_STRING) {
        const char *const *src = data;
        mtplx_gguf_str *dst = arr;
        for (uint64_t i = 0; i < n; i++) {
            const char *s = src[i] ? src[i] : "";
            dst[i].len = strlen(s);
            dst[i].data = mtplx_strdup(s);
            if (!dst[i].data) {
                mtplx_gguf_kv tmp = {.type = GGUF_TYPE_ARRAY, .arr_type = elem_type,
                                     .arr_n = i, .arr_data = arr};
                kv_clear(&tmp);
                return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory setting key '%s'", key);
            }
        }
    } else if (n) {
        memcpy(arr, data, n * es);
    }
    return mtplx_gguf_set_arr_owned(g, key, elem_type, arr, n);
}

mtplx_status mtplx_gguf_copy_kv(mtplx_gguf *g, const mtplx_gguf_kv *kv) {
    switch (kv->type) {
    case GGUF_TYPE_STRING:
        return mtplx_gguf_set_strn(g, kv->key, kv->v.str.data, (size_t)kv->v.str.len);
    case GGUF_TYPE_ARRAY:
        if (kv->arr_type == GGUF_TYPE_STRING) {
            /* strings may hold NUL bytes: copy with their lengths */
            const mtplx_gguf_str *src = kv->arr_data;
            mtplx_gguf_str *dst = calloc(kv->arr_n ? kv->arr_n : 1, sizeof *dst);
            if (!dst) return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory copying '%s'", kv->key);
            for (uint64_t i = 0; i < kv->arr_n; i++) {
                dst[i].len = src[i].len;
                dst[i].data = mtplx_strndup(src[i].data, (size_t)src[i].len);
                if (!dst[i].data) {
                    mtplx_gguf_kv tmp = {.type = GGUF_TYPE_ARRAY, .arr_type = GGUF_TYPE_STRING,
                                         .arr_n = i, .arr_data = dst};
                    kv_clear(&tmp);
                    return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory copying '%s'", kv->key);
                }
            }
            return mtplx_gguf_set_arr_owned(g, kv->key, GGUF_TYPE_STRING, dst, kv->arr_n);
        }
        return mtplx_gguf_set_arr(g, kv->key, kv->arr_type, kv->arr_data, kv->arr_n);
    default:
        return mtplx_gguf_set_scalar(g, kv->key, kv->type, kv->v.u64, kv->v.i64, kv->v.f64);
    }
}

/* ------------------------------------------------------------------ */
/* tensors                                                             */
/* ------------------------------------------------------------------ */

mtplx_gguf_tensor *mtplx_gguf_find_tensor(const mtplx_gguf *g, const char *name) {
    if (!g || !name) return NULL;
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

int64_t mtplx_tensor_nelements(const mtplx_gguf_tensor *t) {
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

mtplx_status mtplx_tensor_nbytes(const char *where, const char *name, int type, int n_dims,
                                 const int64_t *ne, size_t *out) {
    const mtplx_type_traits *ti = mtplx_type_info(type);
    if (!ti)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: tensor '%s': type %d is not a supported "
                          "tensor type", where, name, type);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': n_dims %d, expected 1..%d", where,
                          name, n_dims, GGUF_MAX_DIMS);
    for (int d = 0; d < n_dims; d++)
        if (ne[d] <= 0 || ne[d] > ((int64_t)1 << 48))
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': ne[%d] = %lld, expected a "
                              "positive size", where, name, d, (long long)ne[d]);
    if (ne[0] % ti->block_size != 0)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': row length ne[0] = %lld is not a "
                          "multiple of the %s block size %lld", where, name, (long long)ne[0],
                          ti->name, (long long)ti->block_size);
    uint64_t bytes = (uint64_t)(ne[0] / ti->block_size) * ti->type_size;
    for (int d = 1; d < n_dims; d++) {
        if (bytes > (UINT64_MAX >> 1) / (uint64_t)ne[d] || bytes * (uint64_t)ne[d] > SIZE_MAX / 2)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': size overflows", where, name);
        bytes *= (uint64_t)ne[d];
    }
    *out = (size_t)bytes;
    return MTPLX_OK;
}

mtplx_status mtplx_gguf_add_tensor(mtplx_gguf *g, const char *name, int type, int n_dims,
                                   const int64_t *ne, void *data, bool take_ownership) {
    size_t nbytes = 0;
    mtplx_status st = MTPLX_OK;
    const char *where = g->path ? g->path : "gguf";
    if (mtplx_gguf_find_tensor(g, name))
        st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s' appears twice", where, name);
    if (st == MTPLX_OK) st = mtplx_tensor_nbytes(where, name, type, n_dims, ne, &nbytes);
    if (st == MTPLX_OK && g->n_tensors == g->cap_tensors) {
        int64_t cap = g->cap_tensors ? g->cap_tensors * 2 : 64;
        mtplx_gguf_tensor *t = realloc(g->tensors, (size_t)cap * sizeof *t);
        if (!t) st = mtplx_fail(MTPLX_ERR_NOMEM, "out of memory adding tensor '%s'", name);
        else {
            g->tensors = t;
            g->cap_tensors = cap;
        }
    }
    char *nm = st == MTPLX_OK ? mtplx_strdup(name) : NULL;
    if (st == MTPLX_OK && !nm) st = mtplx_fail(MTPLX_ERR_NOMEM, "out of memory adding '%s'", name);
    if (st != MTPLX_OK) {
        if (take_ownership) free(data);
        return st;
    }
    mtplx_gguf_tensor *t = &g->tensors[g->n_tensors++];
    memset(t, 0, sizeof *t);
    t->name = nm;
    t->n_dims = n_dims;
    for (int d = 0; d < 4; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->type = type;
    t->nbytes = nbytes;
    t->data = data;
    t->owned_data = take_ownership;
    return MTPLX_OK;
}

void mtplx_gguf_truncate_tensors(mtplx_gguf *g, int64_t n) {
    while (g->n_tensors > n) tensor_clear(&g->tensors[--g->n_tensors]);
}

/* ------------------------------------------------------------------ */
/* reader                                                              */
/* ------------------------------------------------------------------ */

typedef struct reader {
    const uint8_t *p;
    size_t size, off;
    const char *path;
} reader;

/* Make sure n bytes are left for `what`; what is printf'd after the path. */
static mtplx_status need(reader *r, uint64_t n, const char *what) {
    if (n > r->size - r->off)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: %s at offset %zu needs %llu bytes but only %zu "
                          "are left in the file (%zu bytes; truncated?)", r->path, what, r->off,
                          (unsigned long long)n, r->size - r->off, r->size);
    return MTPLX_OK;
}

static mtplx_status rd(reader *r, void *dst, size_t n, const char *what) {
    MTPLX_TRY(need(r, n, what));
    memcpy(dst, r->p + r->off, n);
    r->off += n;
    return MTPLX_OK;
}

static mtplx_status rd_u32(reader *r, uint32_t *v, const char *what) { return rd(r, v, 4, what); }
static mtplx_status rd_u64(reader *r, uint64_t *v, const char *what) { return rd(r, v, 8, what); }

static mtplx_status rd_str(reader *r, mtplx_gguf_str *s, const char *what) {
    uint64_t len;
    char buf[160];
    snprintf(buf, sizeof buf, "length of %s", what);
    MTPLX_TRY(rd_u64(r, &len, buf));
    if (len > r->size - r->off)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: %s at offset %zu: string length %llu is past "
                          "the end of the file (%zu bytes left)", r->path, what, r->off,
                          (unsigned long long)len, r->size - r->off);
    s->len = len;
    s->data = mtplx_strndup((const char *)r->p + r->off, (size_t)len);
    if (!s->data) return mtplx_fail(MTPLX_ERR_NOMEM, "%s: out of memory reading %s", r->path, what);
    r->off += (size_t)len;
    return MTPLX_OK;
}

/* One scalar of type t into u/i/f (the kv's union) or into an array slot. */
static mtplx_status rd_scalar(reader *r, mtplx_gguf_type t, mtplx_gguf_kv *kv, void *slot,
                              const char *what) {
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
            float f32; uint64_t u64; int64_t i64; double f64; } x;
    size_t es = mtplx_gguf_type_size(t);
    MTPLX_TRY(rd(r, &x, es, what));
    if (slot) {
        memcpy(slot, &x, es);
        if (t == GGUF_TYPE_BOOL && x.u8 > 1)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: %s: bool value %u, expected 0 or 1", r->path,
                              what, x.u8);
        return MTPLX_OK;
    }
    switch (t) {
    case GGUF_TYPE_UINT8: kv->v.u64 = x.u8; break;
    case GGUF_TYPE_BOOL:
        if (x.u8 > 1)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: %s: bool value %u, expected 0 or 1", r->path,
                              what, x.u8);
        kv->v.u64 = x.u8;
        break;
    case GGUF_TYPE_INT8: kv->v.i64 = x.i8; break;
    case GGUF_TYPE_UINT16: kv->v.u64 = x.u16; break;
    case GGUF_TYPE_INT16: kv->v.i64 = x.i16; break;
    case GGUF_TYPE_UINT32: kv->v.u64 = x.u32; break;
    case GGUF_TYPE_INT32: kv->v.i64 = x.i32; break;
    case GGUF_TYPE_FLOAT32: kv->v.f64 = x.f32; break;
    case GGUF_TYPE_UINT64: kv->v.u64 = x.u64; break;
    case GGUF_TYPE_INT64: kv->v.i64 = x.i64; break;
    case GGUF_TYPE_FLOAT64: kv->v.f64 = x.f64; break;
    default: return mtplx_fail(MTPLX_ERR_INTERNAL, "%s: %s: not a scalar", r->path, what);
    }
    return MTPLX_OK;
}

static mtplx_status rd_value(reader *r, mtplx_gguf_kv *kv) {
    char what[200];
    uint32_t t;
    snprintf(what, sizeof what, "key '%.120s': value type", kv->key);
    MTPLX_TRY(rd_u32(r, &t, what));
    if (t > GGUF_TYPE_FLOAT64)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: key '%s': unknown value type %u (expected 0..12)",
                          r->path, kv->key, t);
    snprintf(what, sizeof what, "key '%.120s' value", kv->key);
    if (t == GGUF_TYPE_STRING) {
        MTPLX_TRY(rd_str(r, &kv->v.str, what));
        kv->type = GGUF_TYPE_STRING;
        return MTPLX_OK;
    }
    if (t != GGUF_TYPE_ARRAY) {
        MTPLX_TRY(rd_scalar(r, (mtplx_gguf_type)t, kv, NULL, what));
        kv->type = (mtplx_gguf_type)t;
        return MTPLX_OK;
    }
    uint32_t at;
    uint64_t n;
    snprintf(what, sizeof what, "key '%.120s': array element type", kv->key);
    MTPLX_TRY(rd_u32(r, &at, what));
    if (at == GGUF_TYPE_ARRAY)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: key '%s': arrays of arrays are not supported",
                          r->path, kv->key);
    if (at > GGUF_TYPE_FLOAT64)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: key '%s': unknown array element type %u "
                          "(expected 0..12)", r->path, kv->key, at);
    snprintf(what, sizeof what, "key '%.120s': array length", kv->key);
    MTPLX_TRY(rd_u64(r, &n, what));
    /* In the file each element takes at least its size (strings: the 8-byte length). */
    size_t file_es = at == GGUF_TYPE_STRING ? 8 : mtplx_gguf_type_size(at);
    if (n > (r->size - r->off) / file_es)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: key '%s': array of %llu %s elements needs more "
                          "bytes than the %zu left in the file", r->path, kv->key,
                          (unsigned long long)n, mtplx_gguf_type_name(at), r->size - r->off);
    size_t es = mtplx_gguf_type_size(at);
    kv->type = GGUF_TYPE_ARRAY;
    kv->arr_type = (mtplx_gguf_type)at;
    kv->arr_n = 0; /* counts filled elements, so a failure frees only those */
    kv->arr_data = calloc(n ? n : 1, es);
    if (!kv->arr_data)
        return mtplx_fail(MTPLX_ERR_NOMEM, "%s: key '%s': out of memory for %llu elements",
                          r->path, kv->key, (unsigned long long)n);
    if (at == GGUF_TYPE_STRING) {
        mtplx_gguf_str *s = kv->arr_data;
        for (uint64_t i = 0; i < n; i++) {
            snprintf(what, sizeof what, "key '%.120s' element %llu", kv->key,
                     (unsigned long long)i);
            MTPLX_TRY(rd_str(r, &s[i], what));
            kv->arr_n = i + 1;
        }
    } else {
        if (at == GGUF_TYPE_BOOL) {
            uint8_t *b = kv->arr_data;
            for (uint64_t i = 0; i < n; i++) {
                b[i] = r->p[r->off + i];
                if (b[i] > 1)
                    return mtplx_fail(MTPLX_ERR_FORMAT, "%s: key '%s' element %llu: bool value "
                                      "%u, expected 0 or 1", r->path, kv->key,
                                      (unsigned long long)i, b[i]);
            }
        } else {
            memcpy(kv->arr_data, r->p + r->off, (size_t)n * es);
        }
        r->off += (size_t)n * es;
        kv->arr_n = n;
    }
    return MTPLX_OK;
}

typedef struct range {
    uint64_t lo, hi;
    int64_t idx;
} range;

static int range_cmp(const void *a, const void *b) {
    const range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : 0;
}

static mtplx_status parse(reader *r, mtplx_gguf *g) {
    char magic[4];
    MTPLX_TRY(rd(r, magic, 4, "magic"));
    if (memcmp(magic, "GGUF", 4) != 0)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: magic is not \"GGUF\" (first bytes %02x %02x %02x "
                          "%02x): not a GGUF file", r->path, (uint8_t)magic[0], (uint8_t)magic[1],
                          (uint8_t)magic[2], (uint8_t)magic[3]);
    MTPLX_TRY(rd_u32(r, &g->version, "version"));
    if (g->version == 1)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: GGUF version 1 is not supported (expected 2 "
                          "or 3; re-convert the file with a current llama.cpp)", r->path);
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0 && g->version != 0)
            return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: version field %u looks byte-swapped: "
                              "big-endian GGUF is not supported", r->path, g->version);
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: GGUF version %u is not supported (expected "
                          "2 or 3)", r->path, g->version);
    }
    uint64_t n_tensors, n_kv;
    MTPLX_TRY(rd_u64(r, &n_tensors, "tensor count"));
    MTPLX_TRY(rd_u64(r, &n_kv, "metadata kv count"));
    /* A kv takes >= 12 bytes (key length, type), a tensor info >= 28. */
    if (n_kv > (r->size - r->off) / 12)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: metadata kv count %llu cannot fit in the %zu "
                          "bytes left in the file", r->path, (unsigned long long)n_kv,
                          r->size - r->off);
    if (n_tensors > (r->size - r->off) / 28)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor count %llu cannot fit in the %zu bytes "
                          "left in the file", r->path, (unsigned long long)n_tensors,
                          r->size - r->off);
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->cap_kv = n_kv ? (int64_t)n_kv : 1;
    if (!g->kv) return mtplx_fail(MTPLX_ERR_NOMEM, "%s: out of memory", r->path);
    for (uint64_t i = 0; i < n_kv; i++) {
        char what[64];
        mtplx_gguf_kv *kv = &g->kv[g->n_kv];
        snprintf(what, sizeof what, "key %llu", (unsigned long long)i);
        mtplx_gguf_str key = {0};
        MTPLX_TRY(rd_str(r, &key, what));
        kv->key = key.data;
        kv->type = GGUF_TYPE_UINT8;
        g->n_kv++;
        if (key.len == 0 || strlen(key.data) != key.len)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: key %llu is empty or holds a NUL byte",
                              r->path, (unsigned long long)i);
        for (int64_t j = 0; j + 1 < g->n_kv; j++)
            if (!strcmp(g->kv[j].key, kv->key))
                return mtplx_fail(MTPLX_ERR_FORMAT, "%s: key '%s' appears twice", r->path, kv->key);
        MTPLX_TRY(rd_value(r, kv));
    }
    const mtplx_gguf_kv *al = mtplx_gguf_get(g, "general.alignment");
    if (al) {
        if (al->type != GGUF_TYPE_UINT32)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: general.alignment has type %s, expected uint32",
                              r->path, mtplx_gguf_type_name(al->type));
        if (al->v.u64 == 0 || (al->v.u64 & (al->v.u64 - 1)) || al->v.u64 > (1u << 20))
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: general.alignment = %llu, expected a power of "
                              "two", r->path, (unsigned long long)al->v.u64);
        g->alignment = (uint32_t)al->v.u64;
    }

    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    g->cap_tensors = n_tensors ? (int64_t)n_tensors : 1;
    if (!g->tensors) return mtplx_fail(MTPLX_ERR_NOMEM, "%s: out of memory", r->path);
    for (uint64_t i = 0; i < n_tensors; i++) {
        char what[200];
        mtplx_gguf_tensor *t = &g->tensors[g->n_tensors];
        snprintf(what, sizeof what, "tensor %llu name", (unsigned long long)i);
        mtplx_gguf_str name = {0};
        MTPLX_TRY(rd_str(r, &name, what));
        t->name = name.data;
        g->n_tensors++;
        if (name.len == 0 || strlen(name.data) != name.len)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor %llu: name is empty or holds a NUL byte",
                              r->path, (unsigned long long)i);
        uint32_t n_dims, type;
        snprintf(what, sizeof what, "tensor '%.120s': n_dims", t->name);
        MTPLX_TRY(rd_u32(r, &n_dims, what));
        if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': n_dims = %u, expected 1..%d",
                              r->path, t->name, n_dims, GGUF_MAX_DIMS);
        t->n_dims = (int)n_dims;
        for (int d = 0; d < 4; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            uint64_t ne;
            snprintf(what, sizeof what, "tensor '%.120s': ne[%u]", t->name, d);
            MTPLX_TRY(rd_u64(r, &ne, what));
            if (ne == 0 || ne > ((uint64_t)1 << 48))
                return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': ne[%u] = %llu, expected a "
                                  "positive size", r->path, t->name, d, (unsigned long long)ne);
            t->ne[d] = (int64_t)ne;
        }
        snprintf(what, sizeof what, "tensor '%.120s': type", t->name);
        MTPLX_TRY(rd_u32(r, &type, what));
        t->type = (int)type;
        snprintf(what, sizeof what, "tensor '%.120s': data offset", t->name);
        MTPLX_TRY(rd_u64(r, &t->offset, what));
        if (type > 1000 || !mtplx_type_info((int)type))
            return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: tensor '%s': unknown or unsupported "
                              "tensor type %u", r->path, t->name, type);
        MTPLX_TRY(mtplx_tensor_nbytes(r->path, t->name, t->type, t->n_dims, t->ne, &t->nbytes));
        if (t->offset % g->alignment)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': data offset %llu is not a "
                              "multiple of the alignment %u", r->path, t->name,
                              (unsigned long long)t->offset, g->alignment);
        for (int64_t j = 0; j + 1 < g->n_tensors; j++)
            if (!strcmp(g->tensors[j].name, t->name))
                return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s' appears twice", r->path,
                                  t->name);
    }

    /* Data section: after the infos, padded to the alignment. */
    uint64_t data_start = ((uint64_t)r->off + g->alignment - 1) / g->alignment * g->alignment;
    if (n_tensors && data_start > r->size)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: data section would start at %llu, past the end "
                          "of the file (%zu bytes)", r->path, (unsigned long long)data_start,
                          r->size);
    uint64_t data_size = n_tensors ? r->size - data_start : 0;
    range *rg = calloc(n_tensors ? n_tensors : 1, sizeof *rg);
    if (!rg) return mtplx_fail(MTPLX_ERR_NOMEM, "%s: out of memory", r->path);
    mtplx_status st = MTPLX_OK;
    for (int64_t i = 0; i < g->n_tensors && st == MTPLX_OK; i++) {
        mtplx_gguf_tensor *t = &g->tensors[i];
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': data offset %llu + %zu bytes is "
                            "past the end of the data section (%llu bytes; file %zu bytes)",
                            r->path, t->name, (unsigned long long)t->offset, t->nbytes,
                            (unsigned long long)data_size, r->size);
        else t->data = (void *)(r->p + data_start + t->offset);
        rg[i] = (range){t->offset, t->offset + t->nbytes, i};
    }
    if (st == MTPLX_OK && n_tensors > 1) {
        qsort(rg, (size_t)n_tensors, sizeof *rg, range_cmp);
        for (uint64_t i = 1; i < n_tensors && st == MTPLX_OK; i++)
            if (rg[i].lo < rg[i - 1].hi)
                st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s' (bytes %llu..%llu) overlaps "
                                "tensor '%s' (bytes %llu..%llu) in the data section", r->path,
                                g->tensors[rg[i].idx].name, (unsigned long long)rg[i].lo,
                                (unsigned long long)rg[i].hi, g->tensors[rg[i - 1].idx].name,
                                (unsigned long long)rg[i - 1].lo, (unsigned long long)rg[i - 1].hi);
    }
    free(rg);
    return st;
}

mtplx_status mtplx_gguf_open_memory(const void *data, size_t size, const char *name,
                                    mtplx_gguf **out) {
    *out = NULL;
    mtplx_gguf *g = mtplx_gguf_new();
    if (!g || !(g->path = mtplx_strdup(name ? name : "<memory>"))) {
        mtplx_gguf_free(g);
        return mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
    }
    g->n_kv = g->cap_kv = 0;
    reader r = {data, size, 0, g->path};
    mtplx_status st = parse(&r, g);
    if (st != MTPLX_OK) {
        mtplx_gguf_free(g);
        return st;
    }
    *out = g;
    return MTPLX_OK;
}

mtplx_status mtplx_gguf_open(const char *path, mtplx_gguf **out) {
    *out = NULL;
    mtplx_mmap m;
    MTPLX_TRY(mtplx_mmap_open(path, &m));
    mtplx_gguf *g = NULL;
    mtplx_status st = mtplx_gguf_open_memory(m.data, m.size, path, &g);
    if (st != MTPLX_OK) {
        mtplx_mmap_close(&m);
        return st;
    }
    g->map = m;
    *out = g;
    return MTPLX_OK;
}
