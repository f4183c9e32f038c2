/* qwen2.c: Qwen2 / Qwen2.5: NeoX RoPE and a bias on the q, k, v projections. */
#include "model/model.h"

const mtplx_arch mtplx_arch_qwen2 = {.name = "qwen2", .rope_neox = true, .qkv_bias = true};
