/* gguf_write.c: write an mtplx_gguf container as a GGUF v3 file.
 *
 * Layout (ggml/docs/gguf.md): header, metadata kvs, tensor infos, padding to
 * the alignment, then each tensor's data at an offset that is a multiple of
 * the alignment. The file is written to "<path>.tmp.XXXXXX" beside the
 * target and renamed at the end, so readers never see half a file and a
 * failed write leaves nothing behind. Little-endian hosts only. */
#include "formats/gguf.h"
#include "formats/formats_internal.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct writer {
    FILE *f;
    const char *path;
    uint64_t off;
    bool failed;
} writer;

static void w(writer *wr, const void *p, size_t n) {
    if (wr->failed || n == 0) return;
    if (fwrite(p, 1, n, wr->f) != n) wr->failed = true;
    wr->off += n;
}
static void w_u32(writer *wr, uint32_t v) { w(wr, &v, 4); }
static void w_u64(writer *wr, uint64_t v) { w(wr, &v, 8); }
static void w_str(writer *wr, const char *s, uint64_t len) {
    w_u64(wr, len);
    w(wr, s, (size_t)len);
}
static void w_pad(writer *wr, uint32_t align) {
    static const uint8_t zeros[64];
    uint64_t pad = (align - wr->off % align) % align;
    while (pad) {
        size_t n = pad > sizeof zeros ? sizeof zeros : (size_t)pad;
        w(wr, zeros, n);
        pad -= n;
    }
}

static void w_scalar(writer *wr, mtplx_gguf_type t, uint64_t u, int64_t i, double f) {
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
            float f32; uint64_t u64; int64_t i64; double f64; } x;
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_BOOL: x.u8 = (uint8_t)u; break;
    case GGUF_TYPE_INT8: x.i8 = (int8_t)i; break;
    case GGUF_TYPE_UINT16: x.u16 = (uint16_t)u; break;
    case GGUF_TYPE_INT16: x.i16 = (int16_t)i; break;
    case GGUF_TYPE_UINT32: x.u32 = (uint32_t)u; break;
    case GGUF_TYPE_INT32: x.i32 = (int32_t)i; break;
    case GGUF_TYPE_FLOAT32: x.f32 = (float)f; break;
    case GGUF_TYPE_UINT64: x.u64 = u; break;
    case GGUF_TYPE_INT64: x.i64 = i; break;
    case GGUF_TYPE_FLOAT64: x.f64 = f; break;
    default: wr->failed = true; return;
    }
    w(wr, &x, mtplx_gguf_type_size(t));
}

static void w_kv(writer *wr, const mtplx_gguf_kv *kv) {
    w_str(wr, kv->key, strlen(kv->key));
    w_u32(wr, (uint32_t)kv->type);
    if (kv->type == GGUF_TYPE_STRING) {
        w_str(wr, kv->v.str.data ? kv->v.str.data : "", kv->v.str.data ? kv->v.str.len : 0);
    } else if (kv->type == GGUF_TYPE_ARRAY) {
        w_u32(wr, (uint32_t)kv->arr_type);
        w_u64(wr, kv->arr_n);
        if (kv->arr_type == GGUF_TYPE_STRING) {
            const mtplx_gguf_str *s = kv->arr_data;
            for (uint64_t i = 0; i < kv->arr_n; i++) w_str(wr, s[i].data, s[i].len);
        } else {
            /* In-memory element sizes equal the file's (bool is one byte). */
            w(wr, kv->arr_data, (size_t)kv->arr_n * mtplx_gguf_type_size(kv->arr_type));
        }
    } else {
        w_scalar(wr, kv->type, kv->v.u64, kv->v.i64, kv->v.f64);
    }
}

static mtplx_status check(const mtplx_gguf *g, const char *path, uint32_t align) {
    if (align == 0 || (align & (align - 1)))
        return mtplx_fail(MTPLX_ERR_ARG, "%s: alignment %u is not a power of two", path, align);
    for (int64_t i = 0; i < g->n_kv; i++) {
        const mtplx_gguf_kv *kv = &g->kv[i];
        if (kv->type > GGUF_TYPE_FLOAT64 ||
            (kv->type == GGUF_TYPE_ARRAY &&
             (kv->arr_type == GGUF_TYPE_ARRAY || kv->arr_type > GGUF_TYPE_FLOAT64)))
            return mtplx_fail(MTPLX_ERR_ARG, "%s: key '%s' has a type GGUF cannot hold", path,
                              kv->key);
    }
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (!g->tensors[i].data)
            return mtplx_fail(MTPLX_ERR_ARG, "%s: tensor '%s' has no data", path,
                              g->tensors[i].name);
    return MTPLX_OK;
}

mtplx_status mtplx_gguf_write(const mtplx_gguf *g, const char *path) {
    const mtplx_gguf_kv *al = mtplx_gguf_get(g, "general.alignment");
    uint32_t align = g->alignment ? g->alignment : MTPLX_GGUF_DEFAULT_ALIGNMENT;
    MTPLX_TRY(check(g, path, align));
    bool add_align = !al && align != MTPLX_GGUF_DEFAULT_ALIGNMENT;

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp) return mtplx_fail(MTPLX_ERR_NOMEM, "%s: out of memory", path);
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        mtplx_status st = mtplx_fail(MTPLX_ERR_IO, "%s: cannot create a temporary file beside it: "
                                     "%s", path, strerror(errno));
        free(tmp);
        return st;
    }
    fchmod(fd, 0644); /* mkstemp makes 0600; a model file is not a secret */
    writer wr = {fdopen(fd, "wb"), path, 0, false};
    if (!wr.f) {
        close(fd);
        unlink(tmp);
        free(tmp);
        return mtplx_fail(MTPLX_ERR_IO, "%s: fdopen failed", path);
    }

    w(&wr, "GGUF", 4);
    w_u32(&wr, 3);
    w_u64(&wr, (uint64_t)g->n_tensors);
    w_u64(&wr, (uint64_t)g->n_kv + (add_align ? 1 : 0));
    for (int64_t i = 0; i < g->n_kv; i++) {
        if (g->kv[i].type != GGUF_TYPE_ARRAY && !strcmp(g->kv[i].key, "general.alignment")) {
            mtplx_gguf_kv a = {.key = g->kv[i].key, .type = GGUF_TYPE_UINT32};
            a.v.u64 = align; /* the alignment actually used, as uint32 (spec) */
            w_kv(&wr, &a);
        } else {
            w_kv(&wr, &g->kv[i]);
        }
    }
    if (add_align) {
        mtplx_gguf_kv a = {.key = "general.alignment", .type = GGUF_TYPE_UINT32};
        a.v.u64 = align;
        w_kv(&wr, &a);
    }
    uint64_t off = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const mtplx_gguf_tensor *t = &g->tensors[i];
        w_str(&wr, t->name, strlen(t->name));
        w_u32(&wr, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) w_u64(&wr, (uint64_t)t->ne[d]);
        w_u32(&wr, (uint32_t)t->type);
        w_u64(&wr, off);
        off += (t->nbytes + align - 1) / align * align;
    }
    w_pad(&wr, align);
    uint64_t data_start = wr.off;
    for (int64_t i = 0; i < g->n_tensors && !wr.failed; i++) {
        const mtplx_gguf_tensor *t = &g->tensors[i];
        w(&wr, t->data, t->nbytes);
        w_pad(&wr, align); /* ggml pads after every tensor, the last one too */
    }
    (void)data_start;
    if (fflush(wr.f) != 0 || fsync(fileno(wr.f)) != 0) wr.failed = true;
    if (fclose(wr.f) != 0) wr.failed = true;
    mtplx_status st = MTPLX_OK;
    if (wr.failed) st = mtplx_fail(MTPLX_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    else if (rename(tmp, path) != 0)
        st = mtplx_fail(MTPLX_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp,
                        strerror(errno));
    if (st != MTPLX_OK) unlink(tmp);
    free(tmp);
    return st;
}
