/* formats_internal.h: helpers shared by the files of src/formats only
 * (container plumbing the loaders need but callers of gguf.h do not). */
#ifndef MTPLX_FORMATS_INTERNAL_H
#define MTPLX_FORMATS_INTERNAL_H

#include "formats/gguf.h"

/* Keep a mapping alive until mtplx_gguf_free (m is emptied). */
mtplx_status mtplx_gguf_keep_map(mtplx_gguf *g, mtplx_mmap *m);
/* Array whose storage (arr_data, strings included) the kv takes over, also on failure. */
mtplx_status mtplx_gguf_set_arr_owned(mtplx_gguf *g, const char *key, mtplx_gguf_type elem_type,
                                      void *arr_data, uint64_t n);
/* Scalar of any non-string, non-array type (u for unsigned/bool, i signed, f float). */
mtplx_status mtplx_gguf_set_scalar(mtplx_gguf *g, const char *key, mtplx_gguf_type t,
                                   uint64_t u, int64_t i, double f);
/* Bytes of a tensor, with every shape rule checked (message names where and name). */
mtplx_status mtplx_tensor_nbytes(const char *where, const char *name, int type, int n_dims,
                                 const int64_t *ne, size_t *out);
/* Drop tensors n.. (rollback after a failed load). */
void mtplx_gguf_truncate_tensors(mtplx_gguf *g, int64_t n);

#endif
