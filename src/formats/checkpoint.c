/* checkpoint.c: which format a path holds, and loading any of them.
 *
 * A folder with config.json is an HF model; a file starting with "GGUF" is
 * GGUF; a file whose first 28 bytes are a plausible llama2.c header is a
 * llama2.c checkpoint (its exact size is checked by the loader). A
 * config.json or .safetensors file inside an HF folder stands for the folder. */
#include "formats/formats.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <string.h>

static bool has_suffix(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* The HF folder that a file inside it stands for, or false. */
static bool hf_parent(const char *path, char *dir, size_t cap) {
    if (!has_suffix(path, "config.json") && !has_suffix(path, ".safetensors") &&
        !has_suffix(path, ".safetensors.index.json"))
        return false;
    char tmp[PATH_MAX], cfg[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    snprintf(dir, cap, "%s", dirname(tmp));
    return mtplx_path_join(cfg, sizeof cfg, dir, "config.json") == MTPLX_OK &&
           mtplx_file_exists(cfg);
}

static const char *detect(const char *path, mtplx_status *st) {
    char buf[PATH_MAX];
    *st = MTPLX_ERR_FORMAT;
    if (!path) {
        *st = mtplx_fail(MTPLX_ERR_ARG, "no checkpoint path given");
        return NULL;
    }
    if (mtplx_is_dir(path)) {
        if (mtplx_path_join(buf, sizeof buf, path, "config.json") != MTPLX_OK) return NULL;
        if (mtplx_file_exists(buf)) return "hf";
        mtplx_fail(MTPLX_ERR_FORMAT, "%s: a folder without config.json is not an HF model", path);
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        *st = mtplx_fail(MTPLX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    uint8_t h[28];
    size_t n = fread(h, 1, sizeof h, f);
    fclose(f);
    if (n >= 4 && !memcmp(h, "GGUF", 4)) return "gguf";
    if (hf_parent(path, buf, sizeof buf)) return "hf";
    if (n == sizeof h) {
        int32_t v[7];
        memcpy(v, h, sizeof v);
        bool ok = v[6] > 0 && v[5] != 0;
        for (int i = 0; i < 5; i++) ok = ok && v[i] > 0;
        if (ok && v[0] % v[3] == 0 && v[3] % v[4] == 0) return "llama2c";
    }
    if (n >= 4 && !memcmp(h, "FUGG", 4)) {
        *st = mtplx_fail(MTPLX_ERR_UNSUPPORTED, "%s: big-endian GGUF is not supported", path);
        return NULL;
    }
    mtplx_fail(MTPLX_ERR_FORMAT, "%s: unknown format: not GGUF (no \"GGUF\" magic), not an HF "
               "folder (config.json) and not a llama2.c checkpoint (28-byte header)", path);
    return NULL;
}

const char *mtplx_detect_format(const char *path) {
    mtplx_status st;
    return detect(path, &st);
}

mtplx_status mtplx_checkpoint_load(const char *path, const char *tokenizer_path,
                                   mtplx_gguf **out) {
    *out = NULL;
    mtplx_status st;
    const char *fmt = detect(path, &st);
    if (!fmt) return st;
    if (!strcmp(fmt, "gguf")) return mtplx_gguf_open(path, out);
    if (!strcmp(fmt, "llama2c")) return mtplx_llama2c_load(path, tokenizer_path, out);
    char dir[PATH_MAX];
    if (!mtplx_is_dir(path) && hf_parent(path, dir, sizeof dir)) return mtplx_hf_load(dir, out);
    return mtplx_hf_load(path, out);
}
