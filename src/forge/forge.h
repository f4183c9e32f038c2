/* forge.h: checkpoint conversion: any loadable checkpoint (HF folder,
 * llama2.c, GGUF) to a GGUF file, optionally quantized. MTP heads stay in
 * their source precision (quantizing them collapses acceptance); norms and
 * biases become F32, as GGUF readers expect. */
#ifndef MTPLX_FORGE_H
#define MTPLX_FORGE_H

#include "core/core.h"

typedef struct mtplx_convert_params {
    int quant_type;      /* mtplx_type for 2-D weights; -1 = keep */
    bool quantize_mtp;   /* also quantize MTP head weights (default false) */
    /* progress: called after each tensor (done, total, name); may be NULL */
    void (*progress)(int64_t done, int64_t total, const char *name, void *user);
    void *user;
} mtplx_convert_params;

mtplx_status mtplx_forge_convert(const char *in_path, const char *tokenizer_path,
                                 const char *out_path, const mtplx_convert_params *p);

#endif
