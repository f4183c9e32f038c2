/* tok_util.c: small pieces the tokenizer files share: buffers, the vocab and
 * merge hash tables, UTF-8 helpers (sanitizing like Python's
 * errors="replace"), the GPT-2 byte<->char table, PCRE2 compilation, and
 * tok_finish (indexes built once pieces and added tokens are known). */
#include "tokenizer/tok_internal.h"

bool tbuf_reserve(tbuf *b, size_t extra) {
    if (b->oom) return false;
    size_t need = b->n + extra;
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < need) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void tbuf_free(tbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

void ivec_push(ivec *a, int32_t x) {
    if (a->oom) return;
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) {
            a->oom = true;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
}

static bool tpieces_grow(tpieces *p) {
    if (p->oom || p->text.oom) {
        p->oom = true;
        return false;
    }
    if (p->n < p->cap) return true;
    size_t cap = p->cap ? p->cap * 2 : 64;
    size_t *o = realloc(p->off, cap * sizeof *o);
    if (o) p->off = o;
    size_t *l = o ? realloc(p->len, cap * sizeof *l) : NULL;
    if (!o || !l) {
        p->oom = true;
        return false;
    }
    p->len = l;
    p->cap = cap;
    return true;
}

void tpieces_commit(tpieces *p, size_t start) {
    if (!tpieces_grow(p)) return;
    p->off[p->n] = start;
    p->len[p->n] = p->text.n - start;
    p->n++;
}

void tpieces_add(tpieces *p, const char *s, size_t n) {
    if (p->oom || p->text.oom) {
        p->oom = true;
        return;
    }
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        size_t *o = realloc(p->off, cap * sizeof *o);
        if (o) p->off = o;
        size_t *l = o ? realloc(p->len, cap * sizeof *l) : NULL;
        if (!o || !l) {
            p->oom = true;
            return;
        }
        p->len = l;
        p->cap = cap;
    }
    p->off[p->n] = p->text.n;
    p->len[p->n] = n;
    tbuf_put(&p->text, s, n);
    p->n++;
}

void tpieces_clear(tpieces *p) {
    p->n = 0;
    p->text.n = 0;
}

void tpieces_free(tpieces *p) {
    tbuf_free(&p->text);
    free(p->off);
    free(p->len);
    memset(p, 0, sizeof *p);
}

/* FNV-1a, 64-bit: simple and good enough for short pieces. */
uint64_t tok_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

void strmap_init(strmap *m, size_t n_items) {
    size_t cap = 16;
    while (cap < n_items * 2) cap *= 2;
    m->slot = malloc(cap * sizeof *m->slot);
    if (!m->slot) {
        m->mask = 0;
        return;
    }
    memset(m->slot, 0xff, cap * sizeof *m->slot);
    m->mask = (uint32_t)(cap - 1);
}

void strmap_insert(const mtplx_tokenizer *t, strmap *m, int32_t id) {
    const char *s = t->piece[id];
    size_t n = t->plen[id];
    uint32_t i = (uint32_t)tok_hash(s, n) & m->mask;
    while (m->slot[i] >= 0) {
        int32_t o = m->slot[i];
        if (t->plen[o] == n && memcmp(t->piece[o], s, n) == 0) return; /* first id wins */
        i = (i + 1) & m->mask;
    }
    m->slot[i] = id;
}

int32_t tok_find(const mtplx_tokenizer *t, const char *s, size_t n) {
    const strmap *m = &t->vocab;
    if (!m->slot) return -1;
    uint32_t i = (uint32_t)tok_hash(s, n) & m->mask;
    for (;;) {
        int32_t o = m->slot[i];
        if (o < 0) return -1;
        if (t->plen[o] == n && memcmp(t->piece[o], s, n) == 0) return o;
        i = (i + 1) & m->mask;
    }
}

static inline uint32_t mix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

bool mergemap_init(mergemap *m, size_t n_items) {
    size_t cap = 16;
    while (cap < n_items * 2) cap *= 2;
    m->key = calloc(cap, sizeof *m->key);
    m->rank = malloc(cap * sizeof *m->rank);
    m->id = malloc(cap * sizeof *m->id);
    m->mask = (uint32_t)(cap - 1);
    return m->key && m->rank && m->id;
}

void mergemap_put(mergemap *m, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint32_t i = mix64(k) & m->mask;
    while (m->key[i] && m->key[i] != k) i = (i + 1) & m->mask;
    if (m->key[i] == k) return; /* HF keeps the first (lowest) rank */
    m->key[i] = k;
    m->rank[i] = rank;
    m->id[i] = id;
}

bool mergemap_get(const mergemap *m, int32_t a, int32_t b, int32_t *rank, int32_t *id) {
    if (!m->key) return false;
    uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint32_t i = mix64(k) & m->mask;
    while (m->key[i]) {
        if (m->key[i] == k) {
            *rank = m->rank[i];
            *id = m->id[i];
            return true;
        }
        i = (i + 1) & m->mask;
    }
    return false;
}

int utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0) return 2;
    if ((c & 0xf0) == 0xe0) return 3;
    if ((c & 0xf8) == 0xf0) return 4;
    return 1;
}

/* Strict decoding (no overlongs, surrogates or > U+10FFFF). On an invalid
 * sequence returns the length of its maximal subpart (>= 1) with *cp = -1. */
int utf8_next(const char *str, size_t n, int32_t *cp) {
    const unsigned char *s = (const unsigned char *)str;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = (int32_t)c;
        return 1;
    }
    int need;
    unsigned lo = 0x80, hi = 0xbf;
    int32_t v;
    if (c >= 0xc2 && c <= 0xdf) need = 1, v = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) {
        need = 2, v = c & 0x0f;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3, v = c & 0x07;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else {
        *cp = -1;
        return 1;
    }
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n || s[i] < lo || s[i] > hi) {
            *cp = -1;
            return i;
        }
        v = (v << 6) | (s[i] & 0x3f);
        lo = 0x80, hi = 0xbf;
    }
    *cp = v;
    return need + 1;
}

void utf8_put(tbuf *b, int32_t cp) {
    char o[4];
    int n;
    if (cp < 0x80) o[0] = (char)cp, n = 1;
    else if (cp < 0x800) o[0] = (char)(0xc0 | (cp >> 6)), o[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
    else if (cp < 0x10000)
        o[0] = (char)(0xe0 | (cp >> 12)), o[1] = (char)(0x80 | ((cp >> 6) & 0x3f)),
        o[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
    else
        o[0] = (char)(0xf0 | (cp >> 18)), o[1] = (char)(0x80 | ((cp >> 12) & 0x3f)),
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), o[3] = (char)(0x80 | (cp & 0x3f)), n = 4;
    tbuf_put(b, o, (size_t)n);
}

bool utf8_valid(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        int32_t cp;
        int k = utf8_next(s + i, n - i, &cp);
        if (cp < 0) return false;
        i += (size_t)k;
    }
    return true;
}

void utf8_sanitize(const char *s, size_t n, tbuf *out) {
    size_t run = 0; /* start of the current valid run */
    for (size_t i = 0; i < n;) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        int32_t cp;
        int k = utf8_next(s + i, n - i, &cp);
        if (cp < 0) {
            tbuf_put(out, s + run, i - run);
            tbuf_put(out, "\xef\xbf\xbd", 3);
            run = i + (size_t)k;
        }
        i += (size_t)k;
    }
    tbuf_put(out, s + run, n - run);
}

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves,
 * the other 68 bytes to U+0100 upwards in byte order. */
static char bl_chars[256][3];
static int bl_len[256];
static int16_t bl_back[512];
static bool bl_ready;

static void bytelevel_init(void) {
    int next = 256;
    for (int i = 0; i < 512; i++) bl_back[i] = -1;
    for (int b = 0; b < 256; b++) {
        int cp = ((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff))
                     ? b
                     : next++;
        bl_back[cp] = (int16_t)b;
        if (cp < 0x80) bl_chars[b][0] = (char)cp, bl_len[b] = 1;
        else bl_chars[b][0] = (char)(0xc0 | (cp >> 6)), bl_chars[b][1] = (char)(0x80 | (cp & 0x3f)),
        bl_len[b] = 2;
    }
    __atomic_store_n(&bl_ready, true, __ATOMIC_RELEASE);
}

const char *bytelevel_char(unsigned char b, int *len) {
    if (!__atomic_load_n(&bl_ready, __ATOMIC_ACQUIRE)) bytelevel_init();
    *len = bl_len[b];
    return bl_chars[b];
}

int bytelevel_byte(int32_t cp) {
    if (!__atomic_load_n(&bl_ready, __ATOMIC_ACQUIRE)) bytelevel_init();
    return (cp >= 0 && cp < 512) ? bl_back[cp] : -1;
}

pcre2_code *tok_regex(const char *pat, size_t len, char *err, size_t errcap) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK,
                                   &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        snprintf(err, errcap, "%s at offset %zu", (char *)msg, (size_t)eo);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if absent */
    return re;
}

mtplx_status tok_alloc_vocab(mtplx_tokenizer *t, int32_t n) {
    t->n_vocab = n;
    t->piece = calloc((size_t)n, sizeof *t->piece);
    t->plen = calloc((size_t)n, sizeof *t->plen);
    t->ttype = calloc((size_t)n, 1);
    t->eog = calloc((size_t)n, 1);
    if (!t->piece || !t->plen || !t->ttype || !t->eog)
        return mtplx_fail(MTPLX_ERR_NOMEM, "%s: vocabulary of %d tokens", t->src, n);
    for (int32_t i = 0; i < n; i++) t->ttype[i] = TT_NORMAL;
    return MTPLX_OK;
}

void tok_set_piece(mtplx_tokenizer *t, int32_t id, const char *s, size_t n) {
    free(t->piece[id]);
    t->piece[id] = mtplx_strndup(s, n);
    t->plen[id] = t->piece[id] ? (uint32_t)n : 0;
}

/* By first byte, then longest first: the matcher scans one first-byte bucket. */
static int added_cmp(const void *a, const void *b) {
    const added_tok *x = a, *y = b;
    int fx = x->len ? (unsigned char)x->s[0] : -1, fy = y->len ? (unsigned char)y->s[0] : -1;
    if (fx != fy) return fx < fy ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Names of end-of-generation tokens across model families. */
static const char *const eog_names[] = {
    "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<|end|>", "<｜end▁of▁sentence｜>", "<|return|>", "<|call|>", "</s>",
    "<eos>", "<|EOT|>", "[SEP]", NULL};

mtplx_status tok_finish(mtplx_tokenizer *t, const char *eos_name) {
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (!t->piece[i]) {
            t->piece[i] = mtplx_strdup("");
            t->ttype[i] = TT_UNUSED;
        }
    strmap_init(&t->vocab, (size_t)t->n_vocab);
    if (!t->vocab.slot) return mtplx_fail(MTPLX_ERR_NOMEM, "%s: vocabulary index", t->src);
    /* Model pieces first so a normal piece wins over an added duplicate. */
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->ttype[i] == TT_NORMAL || t->ttype[i] == TT_BYTE) strmap_insert(t, &t->vocab, i);
    for (int32_t i = 0; i < t->n_vocab; i++) strmap_insert(t, &t->vocab, i);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        t->byte_id[b] = tok_find(t, s, 6);
    }
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, added_cmp);
    for (int b = 0; b < 256; b++) t->added_lo[b] = t->added_hi[b] = 0;
    for (int i = 0; i < t->n_added; i++) {
        added_tok *a = &t->added[i];
        if (!a->len) continue;
        int b = (unsigned char)a->s[0];
        if (t->added_hi[b] == t->added_lo[b]) t->added_lo[b] = i;
        t->added_hi[b] = i + 1;
    }
    /* SPM-style text is one long "word"; merges cannot cross a U+2581 that
     * follows another char when no piece has one there, so words can be cut. */
    t->split_mark = t->model != TM_WORDPIECE && tok_find(t, "\xe2\x96\x81", 3) >= 0;
    for (int32_t i = 0; t->split_mark && i < t->n_vocab; i++) {
        const char *p = t->piece[i], *m = p;
        while ((m = strstr(m, "\xe2\x96\x81")) != NULL) {
            if (m != p && !(m - p >= 3 && !memcmp(m - 3, "\xe2\x96\x81", 3))) {
                t->split_mark = false;
                break;
            }
            m += 3;
        }
    }
    if (eos_name && t->eos < 0) t->eos = tok_find(t, eos_name, strlen(eos_name));
    if (t->eos >= 0 && t->eos < t->n_vocab) t->eog[t->eos] = 1;
    for (int k = 0; eog_names[k]; k++) {
        int32_t id = tok_find(t, eog_names[k], strlen(eog_names[k]));
        if (id >= 0 && (t->ttype[id] == TT_CONTROL || t->ttype[id] == TT_USER)) t->eog[id] = 1;
    }
    return MTPLX_OK;
}

void tok_step_free(tok_step *s) {
    free(s->a);
    free(s->b);
    if (s->re) pcre2_code_free(s->re);
}
