/* tokenizer.h: internal entry points of the tokenizer layer (the public
 * encode / decode API is in mtplx.h).
 *
 * A tokenizer comes from one of:
 *  - an HF tokenizer.json (+ tokenizer_config.json for BOS/EOS handling and
 *    special tokens), run exactly as HF `tokenizers` does;
 *  - GGUF `tokenizer.ggml.*` keys (models "gpt2" = byte-level BPE with the
 *    pre-tokenizer named by tokenizer.ggml.pre, "llama" = SentencePiece BPE
 *    with scores and byte fallback, "bert" = WordPiece);
 *  - a llama2.c tokenizer.bin (converted to "llama" GGUF keys by the loader).
 * A GGUF that carries "tokenizer.huggingface.json" (written by forge) is
 * loaded from that JSON, so it tokenizes exactly as the source model did. */
#ifndef MTPLX_TOKENIZER_H
#define MTPLX_TOKENIZER_H

#include "formats/gguf.h"

/* Key under which forge stores the original tokenizer.json text, and
 * tokenizer_config.json text. */
#define MTPLX_KEY_HF_TOKENIZER_JSON "tokenizer.huggingface.json"
#define MTPLX_KEY_HF_TOKENIZER_CONFIG "tokenizer.huggingface.config"

/* From GGUF metadata (tokenizer.* keys). */
mtplx_status mtplx_tokenizer_from_gguf(const mtplx_gguf *g, mtplx_tokenizer **out);
/* From tokenizer.json text; config_json (tokenizer_config.json text) may be NULL. */
mtplx_status mtplx_tokenizer_from_json(const char *json, size_t len, const char *config_json,
                                       mtplx_tokenizer **out);
/* Write the tokenizer as llama.cpp-compatible tokenizer.ggml.* keys
 * (model, pre, tokens, token_type, scores or merges, special ids, add_bos /
 * add_eos) so llama.cpp can read the GGUF forge writes. */
mtplx_status mtplx_tokenizer_to_gguf(const mtplx_tokenizer *tok, mtplx_gguf *g);

#endif
