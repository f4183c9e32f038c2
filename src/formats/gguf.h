/* gguf.h: GGUF v2/v3 files, read (mmap) and write, and the in-memory
 * container that every checkpoint format is loaded into.
 *
 * The HF and llama2.c loaders produce an mtplx_gguf with llama.cpp's key
 * names ("llama.embedding_length", "tokenizer.ggml.tokens", ...) and tensor
 * names ("blk.0.attn_q.weight"), so the model builder sees one shape of
 * checkpoint and `forge convert` is "load, then write". */
#ifndef MTPLX_GGUF_H
#define MTPLX_GGUF_H

#include "core/core.h"

typedef enum mtplx_gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
} mtplx_gguf_type;

typedef struct mtplx_gguf_str {
    uint64_t len;
    char *data; /* NUL terminated copy */
} mtplx_gguf_str;

typedef struct mtplx_gguf_kv {
    char *key;
    mtplx_gguf_type type;
    union {
        uint64_t u64; /* all unsigned ints and bool */
        int64_t i64;  /* all signed ints */
        double f64;   /* float32 and float64 */
        mtplx_gguf_str str;
    } v;
    /* arrays: arr_type, arr_n and arr_data (n elements of the scalar type's
     * natural C size: uint8_t, int32_t, float, ..., mtplx_gguf_str for strings) */
    mtplx_gguf_type arr_type;
    uint64_t arr_n;
    void *arr_data;
} mtplx_gguf_kv;

typedef struct mtplx_gguf_tensor {
    char *name;
    int n_dims;
    int64_t ne[4]; /* ne[0] innermost (row length), unused dims 1 */
    int type;      /* mtplx_type */
    uint64_t offset; /* offset in the data section (files read / written) */
    size_t nbytes;
    void *data;    /* into the mapping, or owned (then owned_data is set) */
    bool owned_data;
} mtplx_gguf_tensor;

typedef struct mtplx_gguf {
    uint32_t version;
    uint32_t alignment;
    int64_t n_kv, cap_kv;
    mtplx_gguf_kv *kv;
    int64_t n_tensors, cap_tensors;
    mtplx_gguf_tensor *tensors;
    mtplx_mmap map;       /* set when read from a file */
    char *path;           /* file or folder it came from (for messages) */
    void **extra_maps; int n_extra_maps; size_t *extra_sizes; /* more mappings (shards) */
} mtplx_gguf;

#define MTPLX_GGUF_DEFAULT_ALIGNMENT 32

/* Read a GGUF file. Every count, size and offset is checked against the file
 * before use; errors name the file and the field. */
mtplx_status mtplx_gguf_open(const char *path, mtplx_gguf **out);
/* Same, from bytes in memory (borrowed: tensor data points into them, so
 * they must outlive *out). name is used in messages. For fuzzing and tests. */
mtplx_status mtplx_gguf_open_memory(const void *data, size_t size, const char *name,
                                    mtplx_gguf **out);
/* Empty container (version 3, alignment 32). NULL on out of memory. */
mtplx_gguf *mtplx_gguf_new(void);
void mtplx_gguf_free(mtplx_gguf *g);
/* Write g to path (GGUF v3), tensors aligned to g->alignment. Writes to a
 * temporary file and renames it, so a failed write leaves nothing behind. */
mtplx_status mtplx_gguf_write(const mtplx_gguf *g, const char *path);

/* ---- metadata lookup: NULL / default when missing or of another type ---- */
const mtplx_gguf_kv *mtplx_gguf_get(const mtplx_gguf *g, const char *key);
/* Integer of any int type (or bool); def if missing. */
int64_t mtplx_gguf_get_int(const mtplx_gguf *g, const char *key, int64_t def);
double mtplx_gguf_get_float(const mtplx_gguf *g, const char *key, double def);
bool mtplx_gguf_get_bool(const mtplx_gguf *g, const char *key, bool def);
const char *mtplx_gguf_get_str(const mtplx_gguf *g, const char *key); /* NULL if missing */
/* "<arch>.<suffix>" e.g. mtplx_gguf_get_arch_int(g, "block_count", 0). */
int64_t mtplx_gguf_get_arch_int(const mtplx_gguf *g, const char *suffix, int64_t def);
double mtplx_gguf_get_arch_float(const mtplx_gguf *g, const char *suffix, double def);

/* ---- building (copies key / strings; replaces an existing key) ---- */
mtplx_status mtplx_gguf_set_u32(mtplx_gguf *g, const char *key, uint32_t v);
mtplx_status mtplx_gguf_set_i32(mtplx_gguf *g, const char *key, int32_t v);
mtplx_status mtplx_gguf_set_u64(mtplx_gguf *g, const char *key, uint64_t v);
mtplx_status mtplx_gguf_set_f32(mtplx_gguf *g, const char *key, float v);
mtplx_status mtplx_gguf_set_bool(mtplx_gguf *g, const char *key, bool v);
mtplx_status mtplx_gguf_set_str(mtplx_gguf *g, const char *key, const char *v);
/* String of len bytes (may hold NUL bytes). */
mtplx_status mtplx_gguf_set_strn(mtplx_gguf *g, const char *key, const char *v, size_t len);
/* Array of n scalars of elem_type copied from data (strings: const char *const *). */
mtplx_status mtplx_gguf_set_arr(mtplx_gguf *g, const char *key, mtplx_gguf_type elem_type,
                                const void *data, uint64_t n);
/* Copy a kv from another container. */
mtplx_status mtplx_gguf_copy_kv(mtplx_gguf *g, const mtplx_gguf_kv *kv);

/* ---- tensors ---- */
mtplx_gguf_tensor *mtplx_gguf_find_tensor(const mtplx_gguf *g, const char *name);
/* Add a tensor. data is borrowed unless take_ownership (then freed with free(),
 * also when the call fails). Fails on a duplicate name, unknown type, bad
 * shape or a row length that is not a multiple of the type's block size. */
mtplx_status mtplx_gguf_add_tensor(mtplx_gguf *g, const char *name, int type, int n_dims,
                                   const int64_t *ne, void *data, bool take_ownership);

/* Elements of a tensor (ne[0]*ne[1]*ne[2]*ne[3]). */
int64_t mtplx_tensor_nelements(const mtplx_gguf_tensor *t);
/* "uint8", "string", ... ; bytes of one element in memory (0 for arrays). */
const char *mtplx_gguf_type_name(mtplx_gguf_type t);
size_t mtplx_gguf_type_size(mtplx_gguf_type t);

#endif
