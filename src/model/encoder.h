/* encoder.h: encoder-only models (BERT family) and what a model needs to
 * embed or rerank: its roles, pooling, normalisation, query prompt and, for
 * yes/no rerankers, the "yes" / "no" token ids.
 *
 * An encoder reuses mtplx_model for what every model has (hyper-parameters,
 * tokenizer, token embeddings) and keeps the rest in mtplx_bert
 * (arch/bert.c loads it, encoder.c runs it). Decoder models that embed or
 * rerank (Qwen3-Embedding, Qwen3-Reranker) run the ordinary decoder forward;
 * engine/embed.c pools their hidden states or reads their yes/no logits. */
#ifndef MTPLX_ENCODER_H
#define MTPLX_ENCODER_H

#include "model/model.h"

/* llama.cpp's LLAMA_POOLING_TYPE_* values, stored as "<arch>.pooling_type". */
enum { MTPLX_POOL_NONE = 0, MTPLX_POOL_MEAN = 1, MTPLX_POOL_CLS = 2, MTPLX_POOL_LAST = 3,
       MTPLX_POOL_RANK = 4 };

/* GGUF keys mtplx adds (hf.c writes them from sentence-transformers files). */
#define MTPLX_KEY_EMBED_NORMALIZE "mtplx.embed.normalize"     /* bool */
#define MTPLX_KEY_EMBED_QUERY "mtplx.embed.query_prompt"      /* string */

/* Qwen3-Embedding's default query instruction (its README and
 * config_sentence_transformers.json): the query follows "Query:" directly. */
#define MTPLX_QWEN3_EMBED_QUERY                                                               \
    "Instruct: Given a web search query, retrieve relevant passages that answer the query\n"  \
    "Query:"

typedef struct mtplx_bert_layer {
    mtplx_weight wq, wk, wv, wo;       /* [n_embd, n_embd] each (rows x cols) */
    float *bq, *bk, *bv, *bo;          /* [n_embd] */
    float *attn_norm_w, *attn_norm_b;  /* attn_output_norm [n_embd] (post-LN) */
    mtplx_weight w_up, w_down;         /* [n_ff, n_embd], [n_embd, n_ff] */
    float *b_up, *b_down;              /* [n_ff], [n_embd] */
    float *out_norm_w, *out_norm_b;    /* layer_output_norm [n_embd] */
} mtplx_bert_layer;

typedef struct mtplx_bert {
    mtplx_weight pos_embd;             /* [n_ctx_train, n_embd] absolute positions */
    mtplx_weight type_embd;            /* [n_types, n_embd]; data NULL if absent */
    int32_t n_types;
    float *embd_norm_w, *embd_norm_b;  /* token_embd_norm [n_embd] */
    mtplx_bert_layer *layers;          /* [n_layer] */
    mtplx_weight cls;                  /* pooler dense [n_embd, n_embd] (tanh), or none */
    float *cls_b;
    mtplx_weight cls_out;              /* classifier [n_labels, n_embd], or none */
    float *cls_out_b;
    int32_t n_labels;                  /* 0 = not a cross-encoder */
    bool gelu_tanh;                    /* hidden_act gelu_new / gelu_pytorch_tanh */
} mtplx_bert;

/* The embedding / reranking side of a model (mtplx_model.emb). */
typedef struct mtplx_embed_cfg {
    int roles;            /* MTPLX_ROLE_* bits */
    int pooling;          /* MTPLX_POOL_* */
    bool normalize;       /* L2-normalise pooled vectors */
    char *query_prompt;   /* prepended to queries (is_query), NULL = none */
    int32_t tok_yes, tok_no; /* yes/no reranker tokens, -1 if none */
} mtplx_embed_cfg;

/* arch/bert.c: read the encoder's hyper-parameters and tensors into m. */
mtplx_status mtplx_bert_load(mtplx_model *m);
void mtplx_bert_free(mtplx_bert *b);

/* encoder.c: decide m->emb (roles, pooling, ...) from the container's keys,
 * the tensors found and the model's name. Called once at load. */
mtplx_status mtplx_model_embed_setup(mtplx_model *m);
void mtplx_embed_cfg_free(mtplx_embed_cfg *e);

/* Encoder forward over n_seq packed sequences (no padding): tokens[n_tok],
 * types[n_tok] (token type ids; NULL = all 0), seq_len[n_seq] summing to
 * n_tok; each sequence attends to itself only (bidirectionally). out:
 * [n_tok][n_embd] final hidden states. Matmuls run in chunks of at most
 * max_rows rows (the backend's scratch size). Allocates its activations. */
mtplx_status mtplx_encoder_forward(const mtplx_model *m, mtplx_backend *be, int64_t max_rows,
                                   const int32_t *tokens, const int32_t *types,
                                   const int32_t *seq_len, int32_t n_seq, float *out);
/* Cross-encoder head on CLS hidden rows h [n][n_embd]: logits [n][n_labels]. */
mtplx_status mtplx_encoder_classify(const mtplx_model *m, mtplx_backend *be, const float *h,
                                    int64_t n, float *logits);

#endif
