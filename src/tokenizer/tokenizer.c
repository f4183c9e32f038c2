/* tokenizer.c: the public tokenizer API: loading by path (tokenizer.json, HF
 * folder, GGUF, llama2.c tokenizer.bin), encoding (added tokens first, then
 * normalizer -> pre-tokenizer -> model per segment, then the post-processor's
 * specials) and the small accessors. Decoding lives in tok_decode.c.
 * Invalid UTF-8 input is first replaced by U+FFFD (maximal subparts), which is
 * what Python's errors="replace" does, so goldens made from Python agree. */
#include "tokenizer/tok_internal.h"

#include <ctype.h>

void mtplx_tokenizer_free(mtplx_tokenizer *t) {
    if (!t) return;
    if (t->piece)
        for (int32_t i = 0; i < t->n_vocab; i++) free(t->piece[i]);
    free(t->piece);
    free(t->plen);
    free(t->score);
    free(t->ttype);
    free(t->eog);
    free(t->vocab.slot);
    free(t->merges.key);
    free(t->merges.rank);
    free(t->merges.id);
    free(t->cont_prefix);
    free(t->eow_suffix);
    free(t->wp_prefix);
    for (int i = 0; i < t->n_norm; i++) tok_step_free(&t->norm[i]);
    for (int i = 0; i < t->n_pre; i++) tok_step_free(&t->pre[i]);
    for (int i = 0; i < t->n_dec; i++) tok_step_free(&t->dec[i]);
    free(t->norm);
    free(t->pre);
    free(t->dec);
    free(t->post_pre);
    free(t->post_post);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].s);
    free(t->added);
    free(t->gguf_pre);
    free(t->hf_json);
    free(t->hf_config);
    free(t->src);
    free(t);
}

/* ---------------- loading ---------------- */

static mtplx_status load_json_file(const char *json_path, const char *cfg_path,
                                   mtplx_tokenizer **out) {
    char *json = NULL, *cfg = NULL;
    size_t jl = 0, cl = 0;
    MTPLX_TRY(mtplx_read_file(json_path, &json, &jl));
    if (cfg_path && mtplx_file_exists(cfg_path)) {
        mtplx_status st = mtplx_read_file(cfg_path, &cfg, &cl);
        if (st != MTPLX_OK) {
            free(json);
            return st;
        }
    }
    mtplx_status st = mtplx_tokenizer_from_json(json, jl, cfg, out);
    free(json);
    free(cfg);
    if (st != MTPLX_OK) return mtplx_fail_prefix(st, "%s", json_path);
    (*out)->src = mtplx_strdup(json_path);
    return MTPLX_OK;
}

mtplx_status mtplx_tokenizer_load(const char *path, mtplx_tokenizer **out) {
    *out = NULL;
    if (!path) return mtplx_fail(MTPLX_ERR_ARG, "tokenizer path is NULL");
    char a[4096], b[4096];
    if (mtplx_is_dir(path)) {
        MTPLX_TRY(mtplx_path_join(a, sizeof a, path, "tokenizer.json"));
        MTPLX_TRY(mtplx_path_join(b, sizeof b, path, "tokenizer_config.json"));
        if (!mtplx_file_exists(a))
            return mtplx_fail(MTPLX_ERR_IO, "%s: no tokenizer.json in this folder", path);
        return load_json_file(a, b, out);
    }
    FILE *f = fopen(path, "rb");
    if (!f) return mtplx_fail(MTPLX_ERR_IO, "%s: cannot open", path);
    unsigned char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (got == 4 && !memcmp(magic, "GGUF", 4)) {
        mtplx_gguf *g = NULL;
        MTPLX_TRY(mtplx_gguf_open(path, &g));
        mtplx_status st = mtplx_tokenizer_from_gguf(g, out);
        mtplx_gguf_free(g);
        if (st != MTPLX_OK) return mtplx_fail_prefix(st, "%s", path);
        return MTPLX_OK;
    }
    size_t k = 0;
    while (k < got && isspace(magic[k])) k++;
    if (k < got && magic[k] == '{') {
        /* tokenizer_config.json beside it, if any */
        const char *slash = strrchr(path, '/');
        int dl = slash ? (int)(slash - path) : 1;
        snprintf(b, sizeof b, "%.*s/tokenizer_config.json", dl, slash ? path : ".");
        return load_json_file(path, b, out);
    }
    return tok_load_llama2c(path, out);
}

/* ---------------- encoding ---------------- */

static bool is_word_byte(const char *s, size_t n, size_t i, bool before) {
    /* ASCII word chars, and any non-ASCII char counts as part of a word */
    if (before) {
        if (i == 0) return false;
        unsigned char c = (unsigned char)s[i - 1];
        return isalnum(c) || c == '_' || c >= 0x80;
    }
    if (i >= n) return false;
    unsigned char c = (unsigned char)s[i];
    return isalnum(c) || c == '_' || c >= 0x80;
}

static bool is_space_byte(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Leftmost-longest added token in s[from, n) for this pass. */
static bool find_added(const mtplx_tokenizer *t, const char *s, size_t n, size_t from,
                       bool normalized_pass, bool parse_special, size_t *ms, size_t *me,
                       int32_t *id) {
    for (size_t i = from; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        for (int k = t->added_lo[c]; k < t->added_hi[c]; k++) {
            const added_tok *a = &t->added[k];
            if (a->normalized != normalized_pass || (a->special && !parse_special)) continue;
            if (a->len > n - i || memcmp(s + i, a->s, a->len) != 0) continue;
            size_t st = i, en = i + a->len;
            if (a->single_word && (is_word_byte(s, n, st, true) || is_word_byte(s, n, en, false)))
                continue;
            if (a->lstrip)
                while (st > from && is_space_byte(s[st - 1])) st--;
            if (a->rstrip)
                while (en < n && is_space_byte(s[en])) en++;
            *ms = st, *me = en, *id = a->id;
            return true;
        }
    }
    return false;
}

typedef struct enc {
    const mtplx_tokenizer *t;
    tok_cache *cache;
    tpieces pieces;
    tbuf norm;
    ivec ids;
    bool parse_special;
} enc;

static void encode_normalized(enc *e, const char *s, size_t n, bool first) {
    tok_pretokenize(e->t, s, n, first, &e->pieces);
    for (size_t i = 0; i < e->pieces.n; i++)
        tok_model_word(e->t, e->cache, e->pieces.text.p + e->pieces.off[i], e->pieces.len[i],
                       &e->ids);
}

static void encode_segment(enc *e, const char *s, size_t n, bool first) {
    if (!n) return;
    tok_normalize(e->t, s, n, &e->norm);
    tbuf nb = e->norm; /* take it: encode_normalized does not touch e->norm */
    e->norm = (tbuf){0};
    size_t pos = 0, ms, me;
    int32_t id;
    while (pos < nb.n && find_added(e->t, nb.p, nb.n, pos, true, e->parse_special, &ms, &me, &id)) {
        encode_normalized(e, nb.p + pos, ms - pos, first && pos == 0);
        ivec_push(&e->ids, id);
        pos = me;
    }
    if (pos < nb.n) encode_normalized(e, nb.p + pos, nb.n - pos, first && pos == 0);
    if (nb.oom) e->ids.oom = true;
    tbuf_free(&e->norm);
    e->norm = nb;
}

mtplx_status mtplx_tokenize(const mtplx_tokenizer *t, const char *text, size_t len,
                            bool add_special, bool parse_special, int32_t **ids_out,
                            size_t *n_out) {
    *ids_out = NULL;
    *n_out = 0;
    if (!t || (!text && len)) return mtplx_fail(MTPLX_ERR_ARG, "mtplx_tokenize: NULL argument");
    tbuf clean = {0};
    const char *s = text ? text : "";
    if (!utf8_valid(s, len)) {
        utf8_sanitize(s, len, &clean);
        s = clean.p ? clean.p : "";
        len = clean.n;
    }
    enc e = {.t = t, .cache = tok_cache_new(), .parse_special = parse_special};
    if (!e.cache) e.ids.oom = true;
    if (add_special) {
        if (t->has_post)
            for (int i = 0; i < t->n_post_pre; i++) ivec_push(&e.ids, t->post_pre[i]);
        else if (t->add_bos && t->bos >= 0) ivec_push(&e.ids, t->bos);
    }
    size_t pos = 0, ms, me;
    int32_t id;
    while (!e.ids.oom && pos < len &&
           find_added(t, s, len, pos, false, parse_special, &ms, &me, &id)) {
        encode_segment(&e, s + pos, ms - pos, pos == 0);
        ivec_push(&e.ids, id);
        pos = me;
    }
    if (pos < len) encode_segment(&e, s + pos, len - pos, pos == 0);
    if (add_special) {
        if (t->has_post)
            for (int i = 0; i < t->n_post_post; i++) ivec_push(&e.ids, t->post_post[i]);
        else if (t->add_eos && t->eos >= 0) ivec_push(&e.ids, t->eos);
    }
    bool oom = e.ids.oom || e.pieces.oom || e.pieces.text.oom || e.norm.oom || clean.oom;
    tok_cache_free(e.cache);
    tpieces_free(&e.pieces);
    tbuf_free(&e.norm);
    tbuf_free(&clean);
    if (oom) {
        free(e.ids.v);
        return mtplx_fail(MTPLX_ERR_NOMEM, "tokenize: out of memory");
    }
    if (!e.ids.v) e.ids.v = malloc(sizeof(int32_t)); /* a non-NULL result for empty output */
    *ids_out = e.ids.v;
    *n_out = e.ids.n;
    return MTPLX_OK;
}

/* ---------------- accessors ---------------- */

int32_t mtplx_tokenizer_vocab_size(const mtplx_tokenizer *t) { return t ? t->n_vocab : 0; }

const char *mtplx_token_piece(const mtplx_tokenizer *t, int32_t id) {
    return (t && id >= 0 && id < t->n_vocab) ? t->piece[id] : NULL;
}

int32_t mtplx_token_bos(const mtplx_tokenizer *t) { return t ? t->bos : -1; }
int32_t mtplx_token_eos(const mtplx_tokenizer *t) { return t ? t->eos : -1; }

bool mtplx_token_is_eog(const mtplx_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_vocab && t->eog[id];
}

bool mtplx_token_is_special(const mtplx_tokenizer *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab) return false;
    return t->ttype[id] == TT_CONTROL || t->ttype[id] == TT_UNKNOWN || id == t->bos ||
           id == t->eos;
}
