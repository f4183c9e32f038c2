/* llama.c: Llama 2 / 3, TinyLlama, SmolLM, llama2.c checkpoints.
 * GGUF stores llama q/k weights in interleaved-RoPE order (the HF converter
 * permutes them), so RoPE rotates (2i, 2i+1) pairs. No biases, no QK-norm.
 * Llama-3 RoPE scaling is applied to the frequencies in model.c. */
#include "model/model.h"

const mtplx_arch mtplx_arch_llama = {.name = "llama", .rope_neox = false};
