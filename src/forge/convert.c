/* convert.c: `forge convert`: load, quantize the weight matrices, write GGUF.
 * The tokenizer is written both as llama.cpp's tokenizer.ggml.* keys (so
 * llama.cpp can read the file) and, when the source was a tokenizer.json, as
 * that JSON text (so mtplx tokenizes exactly as the source model did). */
#include "forge/forge.h"

#include "formats/formats.h"
#include "kernels/kernels.h"
#include "tokenizer/tokenizer.h"

#include <string.h>

static bool is_mtp_tensor(const char *name, int64_t n_layer) {
    int blk;
    return sscanf(name, "blk.%d.", &blk) == 1 && blk >= n_layer;
}

mtplx_status mtplx_forge_convert(const char *in_path, const char *tokenizer_path,
                                 const char *out_path, const mtplx_convert_params *p) {
    mtplx_gguf *src = NULL, *dst = NULL;
    mtplx_tokenizer *tok = NULL;
    MTPLX_TRY(mtplx_checkpoint_load(in_path, tokenizer_path, &src));
    mtplx_status st = MTPLX_OK;
    dst = mtplx_gguf_new();
    if (!dst) {
        st = mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int64_t i = 0; i < src->n_kv && st == MTPLX_OK; i++)
        st = mtplx_gguf_copy_kv(dst, &src->kv[i]);
    if (st != MTPLX_OK) goto out;
    st = mtplx_tokenizer_from_gguf(src, &tok);
    if (st != MTPLX_OK) {
        mtplx_fail_prefix(st, "%s: tokenizer", in_path);
        goto out;
    }
    if (!mtplx_gguf_get(src, "tokenizer.ggml.tokens") && (st = mtplx_tokenizer_to_gguf(tok, dst)) != MTPLX_OK)
        goto out;
    int64_t n_layer = mtplx_gguf_get_arch_int(src, "block_count", 0) -
                      mtplx_gguf_get_arch_int(src, "nextn_predict_layers", 0);
    if (p->quant_type >= 0) {
        mtplx_gguf_set_u32(dst, "general.quantization_version", 2);
        const mtplx_type_traits *qt = mtplx_type_info(p->quant_type);
        if (!qt || p->quant_type == MTPLX_TYPE_Q8_K) {
            st = mtplx_fail(MTPLX_ERR_ARG, "cannot quantize to type %d", p->quant_type);
            goto out;
        }
    }
    int64_t k_max = 1;
    for (int64_t i = 0; i < src->n_tensors; i++)
        if (src->tensors[i].ne[0] > k_max) k_max = src->tensors[i].ne[0];
    float *row = malloc((size_t)k_max * sizeof(float));
    if (!row) {
        st = mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int64_t i = 0; i < src->n_tensors; i++) {
        const mtplx_gguf_tensor *t = &src->tensors[i];
        int64_t rows = 1, k = t->ne[0];
        for (int d = 1; d < t->n_dims; d++) rows *= t->ne[d];
        int type = t->type;
        bool matrix = t->n_dims >= 2 && strstr(t->name, "norm") == NULL;
        if (!matrix && (type == MTPLX_TYPE_F16 || type == MTPLX_TYPE_BF16)) type = MTPLX_TYPE_F32;
        if (matrix && p->quant_type >= 0 && (p->quantize_mtp || !is_mtp_tensor(t->name, n_layer)) &&
            k % mtplx_type_info(p->quant_type)->block_size == 0 && mtplx_type_info(t->type) &&
            !mtplx_type_info(t->type)->is_quantized)
            type = p->quant_type;
        if (type == t->type) {
            st = mtplx_gguf_add_tensor(dst, t->name, t->type, t->n_dims, t->ne, t->data, false);
        } else {
            size_t rs = mtplx_row_size(type, k), srs = mtplx_row_size(t->type, k);
            char *out = malloc(rs * (size_t)rows);
            if (!out) {
                st = mtplx_fail(MTPLX_ERR_NOMEM, "out of memory converting %s", t->name);
                break;
            }
            for (int64_t r = 0; r < rows; r++) {
                mtplx_dequantize_row(t->type, (const char *)t->data + (size_t)r * srs, row, k);
                mtplx_quantize_row(type, row, out + (size_t)r * rs, k);
            }
            st = mtplx_gguf_add_tensor(dst, t->name, type, t->n_dims, t->ne, out, true);
        }
        if (st != MTPLX_OK) break;
        if (p->progress) p->progress(i + 1, src->n_tensors, t->name, p->user);
    }
    free(row);
    if (st == MTPLX_OK) st = mtplx_gguf_write(dst, out_path);
out:
    mtplx_tokenizer_free(tok);
    mtplx_gguf_free(dst);
    mtplx_gguf_free(src);
    return st;
}
