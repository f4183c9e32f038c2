/* formats.h: checkpoint loaders that produce an mtplx_gguf container with
 * llama.cpp's key and tensor names (see gguf.h). */
#ifndef MTPLX_FORMATS_H
#define MTPLX_FORMATS_H

#include "formats/gguf.h"

/* Which format a path is: "gguf", "hf" (folder with config.json),
 * "llama2c" (.bin), or NULL with an error. */
const char *mtplx_detect_format(const char *path);

/* Hugging Face folder: config.json, model.safetensors or sharded
 * model.safetensors.index.json, generation_config.json, tokenizer.json and
 * tokenizer_config.json when present (their texts are kept verbatim under
 * "tokenizer.huggingface.json" / "tokenizer.huggingface.config" for the
 * tokenizer layer; the chat template becomes tokenizer.chat_template).
 * Architectures: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
 * MiMoForCausalLM (as qwen2). MTP heads (Qwen3-Next mtp.*, DeepSeek/GLM
 * model.layers.N>=n_layer, MiMo model.mtp_layers.i) become blocks n_layer+i
 * with llama.cpp's blk.B.nextn.* names, <arch>.nextn_predict_layers = heads
 * and block_count = n_layer + heads (MiMo adds mtplx.nextn.hidden_first).
 * Llama q/k weights are permuted to GGUF's interleaved-RoPE order, as
 * llama.cpp's converter does. Full key list at the top of hf.c. */
mtplx_status mtplx_hf_load(const char *dir, mtplx_gguf **out);

/* Safetensors file: header checked against the file; tensors appended to g
 * with their HF names (mapping is done by mtplx_hf_load). */
mtplx_status mtplx_safetensors_load(const char *path, mtplx_gguf *g);
/* Same from bytes in memory (borrowed: the tensors point into them). On
 * failure g is left as it was. For fuzzing and tests. */
mtplx_status mtplx_safetensors_load_memory(const void *data, size_t size, const char *path,
                                           mtplx_gguf *g);

/* llama2.c v0 checkpoint (.bin) with its tokenizer.bin (NULL = tokenizer.bin
 * or tok<N>.bin beside it). Produces arch "llama". */
mtplx_status mtplx_llama2c_load(const char *bin, const char *tokenizer_path, mtplx_gguf **out);

/* A llama2.c tokenizer.bin as tokenizer.ggml.* keys ("llama" model, tokens,
 * scores, token_type, bos 1, eos 2, unk 0, add_bos) added to g. n_vocab: the
 * model's vocab size (the file must hold exactly that many tokens), or <= 0 to
 * take every entry in the file. */
mtplx_status mtplx_llama2c_tokenizer_load(const char *path, int32_t n_vocab, mtplx_gguf *g);

/* Any of the above by path. */
mtplx_status mtplx_checkpoint_load(const char *path, const char *tokenizer_path, mtplx_gguf **out);

#endif
