/* safetensors.c: read a .safetensors file into an mtplx_gguf container
 * (tensors keep their HF names; hf.c renames them).
 *
 * Format (huggingface/safetensors README): u64 little-endian header length N,
 * N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, ...,
 * "__metadata__": {...}}, then the data; offsets are relative to the byte
 * after the header. We check the header length, every offset against the
 * data size, shape x dtype size against end - begin, and that no two tensors
 * overlap. Only F32, F16 and BF16 are loaded; other dtypes are refused.
 * Tensor data stays in the mapping (copied only when misaligned for its
 * element type, which the spec allows but our kernels do not like). */
#include "formats/formats.h"
#include "formats/formats_internal.h"
#include "kernels/kernels.h"

#include <cjson/cJSON.h>
#include <string.h>

#define ST_MAX_HEADER (100u << 20) /* the reference implementation's limit */

typedef struct st_range {
    uint64_t lo, hi;
    const char *name;
} st_range;

static int st_range_cmp(const void *a, const void *b) {
    const st_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : 0;
}

static int dtype_of(const char *s, size_t *esize) {
    if (!strcmp(s, "F32")) { *esize = 4; return MTPLX_TYPE_F32; }
    if (!strcmp(s, "F16")) { *esize = 2; return MTPLX_TYPE_F16; }
    if (!strcmp(s, "BF16")) { *esize = 2; return MTPLX_TYPE_BF16; }
    return -1;
}

/* Parse one tensor entry and add it to g. */
static mtplx_status add_entry(const char *path, const cJSON *e, const uint8_t *data,
                              uint64_t data_size, mtplx_gguf *g, st_range *rg) {
    const char *name = e->string;
    if (!cJSON_IsObject(e))
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': header entry is not an object", path,
                          name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt))
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': dtype is missing or not a string",
                          path, name);
    size_t esize = 0;
    int type = dtype_of(dt->valuestring, &esize);
    if (type < 0)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: tensor '%s': dtype %s is not supported "
                          "(expected F32, F16 or BF16)", path, name, dt->valuestring);
    if (!cJSON_IsArray(sh))
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': shape is missing or not an array",
                          path, name);
    int rank = cJSON_GetArraySize(sh);
    if (rank > 4)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: tensor '%s': shape has %d dimensions, at "
                          "most 4 are supported", path, name, rank);
    int64_t ne[4] = {1, 1, 1, 1};
    uint64_t n_el = 1;
    int d = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, sh) {
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (v < 1 || v > (double)((int64_t)1 << 48) || v != (double)(int64_t)v)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a positive "
                              "integer (empty tensors are not supported)", path, name, d);
        ne[rank - 1 - d] = (int64_t)v; /* GGUF ne is the reverse of the shape */
        if (n_el > UINT64_MAX / (uint64_t)v / 8)
            return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': shape overflows", path, name);
        n_el *= (uint64_t)v;
        d++;
    }
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': data_offsets is not a [begin, end] "
                          "pair", path, name);
    double b = cJSON_IsNumber(of->child) ? of->child->valuedouble : -1;
    double en = cJSON_IsNumber(of->child->next) ? of->child->next->valuedouble : -1;
    if (!(b >= 0 && en >= 0 && b < 1.8e19 && en < 1.8e19) || b != (double)(uint64_t)b ||
        en != (double)(uint64_t)en)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': data_offsets must be non-negative "
                          "integers", path, name);
    uint64_t lo = (uint64_t)b, hi = (uint64_t)en;
    if (lo > hi || hi > data_size)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] are "
                          "outside the data section (%llu bytes)", path, name,
                          (unsigned long long)lo, (unsigned long long)hi,
                          (unsigned long long)data_size);
    if (hi - lo != n_el * esize)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s': data_offsets cover %llu bytes but "
                          "shape x %s size needs %llu", path, name,
                          (unsigned long long)(hi - lo), dt->valuestring,
                          (unsigned long long)(n_el * esize));
    *rg = (st_range){lo, hi, name};
    int n_dims = rank ? rank : 1;
    void *p = (void *)(data + lo);
    bool own = false;
    if ((uintptr_t)p % esize) {
        void *copy = malloc((size_t)(hi - lo) ? (size_t)(hi - lo) : 1);
        if (!copy) return mtplx_fail(MTPLX_ERR_NOMEM, "%s: out of memory for '%s'", path, name);
        memcpy(copy, p, (size_t)(hi - lo));
        p = copy;
        own = true;
    }
    mtplx_status st = mtplx_gguf_add_tensor(g, name, type, n_dims, ne, p, own);
    if (st != MTPLX_OK) return mtplx_fail_prefix(st, "%s", path);
    return MTPLX_OK;
}

mtplx_status mtplx_safetensors_load_memory(const void *bytes, size_t size, const char *path,
                                           mtplx_gguf *g) {
    const uint8_t *p = bytes;
    if (size < 8)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: %zu bytes, too short for the 8-byte header "
                          "length of a safetensors file", path, size);
    uint64_t hlen;
    memcpy(&hlen, p, 8);
    if (hlen < 2 || hlen > size - 8 || hlen > ST_MAX_HEADER)
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: header length %llu does not fit the file (%zu "
                          "bytes; expected 2..%zu): not a safetensors file or truncated", path,
                          (unsigned long long)hlen, size, size - 8 < ST_MAX_HEADER ? size - 8 :
                          (size_t)ST_MAX_HEADER);
    const char *hdr = (const char *)p + 8;
    if (hdr[0] != '{')
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: header does not start with '{': not a "
                          "safetensors file", path);
    cJSON *root = cJSON_ParseWithLength(hdr, (size_t)hlen);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return mtplx_fail(MTPLX_ERR_FORMAT, "%s: header is not a valid JSON object", path);
    }
    const uint8_t *data = p + 8 + hlen;
    uint64_t data_size = size - 8 - hlen;
    int n = cJSON_GetArraySize(root);
    st_range *rg = calloc((size_t)(n ? n : 1), sizeof *rg);
    int64_t n0 = g->n_tensors;
    mtplx_status st = rg ? MTPLX_OK : mtplx_fail(MTPLX_ERR_NOMEM, "%s: out of memory", path);
    int nr = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (st != MTPLX_OK) break;
        if (!e->string)
            st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: header entry without a name", path);
        else if (!strcmp(e->string, "__metadata__")) continue;
        else st = add_entry(path, e, data, data_size, g, &rg[nr++]);
    }
    if (st == MTPLX_OK && nr > 1) {
        qsort(rg, (size_t)nr, sizeof *rg, st_range_cmp);
        for (int i = 1; i < nr && st == MTPLX_OK; i++)
            if (rg[i].lo < rg[i - 1].hi)
                st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: tensor '%s' (data_offsets [%llu, %llu]) "
                                "overlaps tensor '%s' ([%llu, %llu])", path, rg[i].name,
                                (unsigned long long)rg[i].lo, (unsigned long long)rg[i].hi,
                                rg[i - 1].name, (unsigned long long)rg[i - 1].lo,
                                (unsigned long long)rg[i - 1].hi);
    }
    free(rg);
    cJSON_Delete(root);
    if (st != MTPLX_OK) mtplx_gguf_truncate_tensors(g, n0);
    return st;
}

mtplx_status mtplx_safetensors_load(const char *path, mtplx_gguf *g) {
    mtplx_mmap m;
    MTPLX_TRY(mtplx_mmap_open(path, &m));
    int64_t n0 = g->n_tensors;
    mtplx_status st = mtplx_safetensors_load_memory(m.data, m.size, path, g);
    if (st == MTPLX_OK) st = mtplx_gguf_keep_map(g, &m);
    if (st != MTPLX_OK) {
        mtplx_gguf_truncate_tensors(g, n0);
        mtplx_mmap_close(&m);
    }
    return st;
}
