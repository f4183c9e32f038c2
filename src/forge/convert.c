/* convert.c: `forge convert`: load and check the model, quantize the weight
 * matrices, optionally strip the MTP heads, write GGUF.
 * The tokenizer is written both as llama.cpp's tokenizer.ggml.* keys (so
 * llama.cpp can read the file) and, when the source was a tokenizer.json, as
 * that JSON text (so mtplx tokenizes exactly as the source model did).
 * Heads are described by mtplx.nextn.layout / mtplx.nextn.depth_trained. */
#include "forge/forge.h"

#include "formats/formats.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

static bool is_mtp_tensor(const char *name, int64_t n_layer) {
    int blk;
    return sscanf(name, "blk.%d.", &blk) == 1 && blk >= n_layer;
}

/* The head's layout: a key already there, MiMo's order flag, the HF
 * config's own description (the default model's "mtplx_mtp", Qwen3-Next's
 * mtp_num_hidden_layers, DeepSeek / GLM's num_nextn_predict_layers), else by
 * architecture. *depth: depth_trained when known, else 0. */
static const char *head_layout(const char *in_path, const char *fmt, const mtplx_gguf *g,
                               char *buf, size_t cap, int64_t *depth) {
    *depth = mtplx_gguf_get_int(g, "mtplx.nextn.depth_trained", 0);
    const char *have = mtplx_gguf_get_str(g, "mtplx.nextn.layout");
    if (have) return have;
    if (mtplx_gguf_get_bool(g, "mtplx.nextn.hidden_first", false)) return "mimo";
    const char *arch = mtplx_gguf_get_str(g, "general.architecture");
    const char *guess = arch && !strncmp(arch, "qwen3", 5) ? "qwen3-next" : "deepseek";
    char cfg[PATH_MAX], *json = NULL;
    size_t len;
    if (strcmp(fmt, "hf") || mtplx_path_join(cfg, sizeof cfg, in_path, "config.json") != MTPLX_OK ||
        mtplx_read_file(cfg, &json, &len) != MTPLX_OK) {
        mtplx_clear_error();
        return guess;
    }
    cJSON *j = cJSON_Parse(json);
    free(json);
    const cJSON *mm = cJSON_GetObjectItemCaseSensitive(j, "mtplx_mtp");
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(mm, "layout");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(mm, "depth_trained");
    if (cJSON_IsString(lay)) {
        snprintf(buf, cap, "%s", lay->valuestring);
        guess = buf;
    } else if (cJSON_GetObjectItemCaseSensitive(j, "mtp_num_hidden_layers")) {
        guess = "qwen3-next";
    } else if (cJSON_GetObjectItemCaseSensitive(j, "num_nextn_predict_layers")) {
        guess = "deepseek";
    }
    if (cJSON_IsNumber(dt)) *depth = (int64_t)dt->valuedouble;
    cJSON_Delete(j);
    return guess;
}

static bool drop_key(const char *key, const char *arch, bool strip) {
    size_t al = arch ? strlen(arch) : 0;
    bool arch_key = arch && !strncmp(key, arch, al) && key[al] == '.';
    if (strip && arch_key && !strcmp(key + al + 1, "nextn_predict_layers")) return true;
    return strip && !strncmp(key, "mtplx.nextn.", 12);
}

/* Fail early (before minutes of quantizing) when the output cannot be written. */
static mtplx_status check_writable(const char *out_path) {
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", out_path);
    const char *dir = dirname(tmp);
    if (!mtplx_is_dir(dir))
        return mtplx_fail(MTPLX_ERR_IO, "%s: the folder %s does not exist", out_path, dir);
    if (access(dir, W_OK) != 0)
        return mtplx_fail(MTPLX_ERR_IO, "%s: cannot write into %s: %s", out_path, dir, strerror(errno));
    if (mtplx_is_dir(out_path))
        return mtplx_fail(MTPLX_ERR_IO, "%s: is a folder, expected a file name", out_path);
    return MTPLX_OK;
}

mtplx_status mtplx_forge_convert(const char *in_path, const char *tokenizer_path,
                                 const char *out_path, const mtplx_convert_params *p) {
    if (!in_path || !out_path || !p) return mtplx_fail(MTPLX_ERR_ARG, "convert: NULL argument");
    if (p->quant_type >= 0 && (!mtplx_type_info(p->quant_type) || p->quant_type == MTPLX_TYPE_Q8_K))
        return mtplx_fail(MTPLX_ERR_ARG, "cannot quantize to type %d", p->quant_type);
    MTPLX_TRY(check_writable(out_path));
    const char *fmt = mtplx_detect_format(in_path);
    if (!fmt) return MTPLX_ERR_FORMAT;
    mtplx_gguf *loaded = NULL, *dst = NULL;
    mtplx_model *model = NULL;
    MTPLX_TRY(mtplx_checkpoint_load(in_path, tokenizer_path, &loaded));
    /* build the model from it: every shape is checked against the config */
    mtplx_model_params mp = mtplx_model_default_params();
    MTPLX_TRY(mtplx_model_from_gguf(loaded, in_path, fmt, &mp, &model));
    const mtplx_gguf *src = model->g;
    const mtplx_tokenizer *tok = model->tok;
    const char *arch = mtplx_gguf_get_str(src, "general.architecture");
    mtplx_status st = MTPLX_OK;
    dst = mtplx_gguf_new();
    if (!dst) {
        st = mtplx_fail(MTPLX_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int64_t i = 0; i < src->n_kv && st == MTPLX_OK; i++)
        if (!drop_key(src->kv[i].key, arch, p->strip_mtp)) st = mtplx_gguf_copy_kv(dst, &src->kv[i]);
    if (st != MTPLX_OK) goto out;
    if (!mtplx_gguf_get(src, "tokenizer.ggml.tokens") && (st = mtplx_tokenizer_to_gguf(tok, dst)) != MTPLX_OK)
        goto out;
    int64_t n_layer = model->hp.n_layer;
    bool heads = mtplx_gguf_get_arch_int(src, "nextn_predict_layers", 0) > 0;
    char key[128], lbuf[64];
    if (p->strip_mtp) {
        snprintf(key, sizeof key, "%s.block_count", arch);
        st = mtplx_gguf_set_u32(dst, key, (uint32_t)n_layer);
    } else if (heads) {
        int64_t depth;
        const char *lay = head_layout(in_path, fmt, src, lbuf, sizeof lbuf, &depth);
        st = mtplx_gguf_set_str(dst, "mtplx.nextn.layout", lay);
        if (st == MTPLX_OK && depth > 0) st = mtplx_gguf_set_u32(dst, "mtplx.nextn.depth_trained", (uint32_t)depth);
    }
    if (st == MTPLX_OK && p->quant_type >= 0) st = mtplx_gguf_set_u32(dst, "general.quantization_version", 2);
    if (st != MTPLX_OK) goto out;
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
        bool mtp = is_mtp_tensor(t->name, n_layer);
        if (p->strip_mtp && mtp) continue;
        int64_t rows = 1, k = t->ne[0];
        for (int d = 1; d < t->n_dims; d++) rows *= t->ne[d];
        int type = t->type;
        bool matrix = t->n_dims >= 2 && strstr(t->name, "norm") == NULL;
        if (!matrix && (type == MTPLX_TYPE_F16 || type == MTPLX_TYPE_BF16)) type = MTPLX_TYPE_F32;
        if (matrix && p->quant_type >= 0 && (p->quantize_mtp || !mtp) &&
            k % mtplx_type_info(p->quant_type)->block_size == 0 && mtplx_type_info(t->type))
            type = p->quant_type; /* quantized sources go through F32 */
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
        if (p->progress && i + 1 < src->n_tensors) p->progress(i + 1, src->n_tensors, t->name, p->user);
    }
    free(row);
    if (st == MTPLX_OK && p->progress) p->progress(src->n_tensors, src->n_tensors, "", p->user);
    if (st == MTPLX_OK) st = mtplx_gguf_write(dst, out_path);
out:
    mtplx_gguf_free(dst);
    mtplx_model_free(model);
    return st;
}
