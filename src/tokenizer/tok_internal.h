/* tok_internal.h: the tokenizer's in-memory shape, shared by the files of
 * src/tokenizer/. One struct holds every model kind (BPE by merge rank, SPM
 * by piece score, WordPiece); the HF pipeline (normalizer, pre-tokenizer,
 * post-processor, decoder) is kept as flat lists of steps, Sequences being
 * flattened at load time. Unigram and offsets are deliberately left out. */
#ifndef MTPLX_TOK_INTERNAL_H
#define MTPLX_TOK_INTERNAL_H

#include "core/core.h"
#include "tokenizer/tokenizer.h"

#include <pcre2.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* ---- growable byte buffer; after an allocation failure it stays flagged and
 * ignores writes, so long pipelines check once at the end ---- */
typedef struct tbuf {
    char *p;
    size_t n, cap;
    bool oom;
} tbuf;
bool tbuf_reserve(tbuf *b, size_t extra);
static inline void tbuf_put(tbuf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap && !tbuf_reserve(b, n + 1)) return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static inline void tbuf_putc(tbuf *b, char c) { tbuf_put(b, &c, 1); }
void tbuf_free(tbuf *b);

/* ---- int32 vector ---- */
typedef struct ivec {
    int32_t *v;
    size_t n, cap;
    bool oom;
} ivec;
void ivec_push(ivec *a, int32_t x);

/* ---- list of pieces (spans of one text buffer) ---- */
typedef struct tpieces {
    tbuf text;
    size_t *off, *len;
    size_t n, cap;
    bool oom;
} tpieces;
void tpieces_add(tpieces *p, const char *s, size_t n); /* copies s */
/* Register text[start, text.n) (already written by the caller) as a piece. */
void tpieces_commit(tpieces *p, size_t start);
void tpieces_clear(tpieces *p);
void tpieces_free(tpieces *p);

/* ---- string -> id hash table over the vocabulary pieces ---- */
typedef struct strmap {
    uint32_t mask;   /* cap - 1, cap a power of two */
    int32_t *slot;   /* -1 empty, else id */
} strmap;
uint64_t tok_hash(const char *s, size_t n);

/* ---- (id a, id b) -> (rank, merged id) ---- */
typedef struct mergemap {
    uint32_t mask;
    uint64_t *key; /* (a << 32 | b) + 1; 0 empty */
    int32_t *rank, *id;
} mergemap;

/* Step kinds of the HF pipeline. */
enum {
    /* normalizers */
    N_NFC, N_NFD, N_NFKC, N_NFKD, N_LOWER, N_STRIP_ACCENTS, N_PREPEND, N_REPLACE, N_STRIP,
    N_BERT,
    /* pre-tokenizers */
    P_SPLIT, P_BYTELEVEL, P_METASPACE, P_DIGITS, P_WHITESPACE, P_WSSPLIT, P_PUNCT, P_BERT,
    /* decoders */
    D_BYTELEVEL, D_REPLACE, D_BYTEFALLBACK, D_FUSE, D_STRIP, D_METASPACE, D_WORDPIECE, D_BPE,
};
/* Split behaviours (HF SplitDelimiterBehavior). */
enum { SB_REMOVED, SB_ISOLATED, SB_MERGED_PREV, SB_MERGED_NEXT, SB_CONTIGUOUS };
/* Metaspace prepend schemes. */
enum { PS_ALWAYS, PS_FIRST, PS_NEVER };

typedef struct tok_step {
    int kind;
    char *a, *b;        /* pattern / content / replacement / prefix strings */
    size_t alen, blen;
    pcre2_code *re;     /* regex pattern (Split, Replace) or NULL for string */
    int ia, ib;         /* behaviour, prepend scheme, strip counts, ... */
    bool fa, fb, fc, fd; /* invert / add_prefix_space / use_regex / split / flags */
} tok_step;

typedef struct added_tok {
    int32_t id;
    char *s;
    size_t len;
    bool special, normalized, lstrip, rstrip, single_word;
} added_tok;

enum { TM_BPE, TM_SPM, TM_WORDPIECE };

/* llama.cpp token types (tokenizer.ggml.token_type). */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

struct mtplx_tokenizer {
    int model;
    int32_t n_vocab;
    char **piece;       /* [n_vocab] NUL terminated, NULL for holes */
    uint32_t *plen;     /* [n_vocab] */
    float *score;       /* [n_vocab] or NULL */
    uint8_t *ttype;     /* [n_vocab] TT_* */
    uint8_t *eog;       /* [n_vocab] 1 = ends a generation */
    strmap vocab;

    /* BPE */
    mergemap merges;
    int32_t n_merges;
    bool byte_fallback, fuse_unk, ignore_merges;
    bool split_mark; /* no piece has U+2581 after another char: long words may be cut before it */
    char *cont_prefix, *eow_suffix; /* NULL when unused */
    int32_t byte_id[256];           /* id of "<0xNN>", -1 when absent */
    /* WordPiece */
    int max_input_chars;
    char *wp_prefix;

    tok_step *norm, *pre, *dec;
    int n_norm, n_pre, n_dec;
    int32_t *post_pre, *post_post; /* ids the post-processor puts around $A */
    int n_post_pre, n_post_post;
    bool has_post; /* the post-processor says what specials are added */

    added_tok *added; /* sorted by first byte, then longest first */
    int n_added;
    int added_lo[256], added_hi[256]; /* added[lo..hi) start with this byte */

    int32_t bos, eos, unk, pad;
    bool add_bos, add_eos;
    bool add_space_prefix; /* SPM models from GGUF / llama2.c */

    char *gguf_pre;        /* tokenizer.ggml.pre name (to_gguf) */
    char *hf_json, *hf_config; /* original texts (to_gguf), may be NULL */
    size_t hf_json_len;
    char *src;             /* where it came from, for messages */
};

/* tok_util.c */
void strmap_init(strmap *m, size_t n_items);
void strmap_insert(const mtplx_tokenizer *t, strmap *m, int32_t id);
int32_t tok_find(const mtplx_tokenizer *t, const char *s, size_t n); /* -1 if absent */
bool mergemap_init(mergemap *m, size_t n_items);
void mergemap_put(mergemap *m, int32_t a, int32_t b, int32_t rank, int32_t id);
bool mergemap_get(const mergemap *m, int32_t a, int32_t b, int32_t *rank, int32_t *id);
int utf8_len(unsigned char c); /* length from lead byte; 1 for invalid */
/* Decode one code point from s[0..n); returns bytes used (>=1), *cp = -1 when invalid. */
int utf8_next(const char *s, size_t n, int32_t *cp);
void utf8_put(tbuf *b, int32_t cp);
/* Replace invalid UTF-8 with U+FFFD (maximal subparts, as Python and Rust do). */
void utf8_sanitize(const char *s, size_t n, tbuf *out);
bool utf8_valid(const char *s, size_t n);
/* GPT-2 bytes_to_unicode: the UTF-8 of the char for byte b, and back (-1 if none). */
const char *bytelevel_char(unsigned char b, int *len);
int bytelevel_byte(int32_t cp);
pcre2_code *tok_regex(const char *pat, size_t len, char *err, size_t errcap);
void tok_set_piece(mtplx_tokenizer *t, int32_t id, const char *s, size_t n);
mtplx_status tok_alloc_vocab(mtplx_tokenizer *t, int32_t n);
/* After pieces / added tokens are in: builds the hash map, byte ids, added index, eog flags. */
mtplx_status tok_finish(mtplx_tokenizer *t, const char *eos_name);
void tok_step_free(tok_step *s);

/* tok_text.c: normalizers and pre-tokenizers */
void tok_normalize(const mtplx_tokenizer *t, const char *s, size_t n, tbuf *out);
/* first: this segment starts the input (Metaspace prepend_scheme "first"). */
void tok_pretokenize(const mtplx_tokenizer *t, const char *s, size_t n, bool first,
                     tpieces *out);

/* tok_model.c */
typedef struct tok_cache tok_cache;
tok_cache *tok_cache_new(void);
void tok_cache_free(tok_cache *c);
/* Append the ids of one pre-token word. */
void tok_model_word(const mtplx_tokenizer *t, tok_cache *c, const char *s, size_t n, ivec *out);

/* tok_decode.c */
/* Decode to raw bytes (may end in a partial UTF-8 sequence before sanitizing). */
void tok_decode_raw(const mtplx_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                    tbuf *out);

/* tok_json.c / tok_gguf.c */
mtplx_tokenizer *tok_new(void);
mtplx_status tok_load_llama2c(const char *path, mtplx_tokenizer **out);

#endif
