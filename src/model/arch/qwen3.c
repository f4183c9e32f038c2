/* qwen3.c: Qwen3 (and mtplx's default model): NeoX RoPE, no biases,
 * per-head RMSNorm of q and k before RoPE (QK-norm). */
#include "model/model.h"

const mtplx_arch mtplx_arch_qwen3 = {.name = "qwen3", .rope_neox = true, .qk_norm = true};
