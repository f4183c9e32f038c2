/* tok_model.c: the models that turn one pre-token word into ids.
 *  - BPE by merge rank (HF tokenizers' BPE: symbols in a linked list, a
 *    binary heap of candidate pairs keyed by (rank, position), stale entries
 *    skipped on pop; byte_fallback, unk/fuse_unk, ignore_merges, prefixes).
 *  - SPM by piece score (llama.cpp's llm_tokenizer_spm / llama2.c: merge the
 *    adjacent pair whose concatenation is the best-scoring piece, leftmost on
 *    ties; unknown symbols fall back to <0xNN> bytes).
 *  - WordPiece (greedy longest match first, "##" continuation).
 * A per-call cache maps short words to their ids, since prose repeats words. */
#include "tokenizer/tok_internal.h"

/* ---------------- word cache ---------------- */

typedef struct centry {
    uint64_t h;
    uint32_t koff, klen, ioff, icount; /* klen == 0: empty slot (empty words are not cached) */
} centry;

typedef struct work work;
static void work_free(work *w);
struct tok_cache {
    centry *e;
    uint32_t mask, used;
    tbuf keys;
    ivec ids;
    work *w;
};

#define CACHE_MAX_WORD 64
#define CACHE_MAX_ENTRIES (1u << 20)

tok_cache *tok_cache_new(void) {
    tok_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->e = calloc(1024, sizeof *c->e);
    if (!c->e) {
        free(c);
        return NULL;
    }
    c->mask = 1023;
    return c;
}

void tok_cache_free(tok_cache *c) {
    if (!c) return;
    free(c->e);
    tbuf_free(&c->keys);
    free(c->ids.v);
    work_free(c->w);
    free(c);
}

static centry *cache_slot(tok_cache *c, uint64_t h, const char *s, size_t n) {
    uint32_t i = (uint32_t)h & c->mask;
    for (;;) {
        centry *e = &c->e[i];
        if (!e->klen) return e;
        if (e->h == h && e->klen == n && memcmp(c->keys.p + e->koff, s, n) == 0) return e;
        i = (i + 1) & c->mask;
    }
}

static void cache_grow(tok_cache *c) {
    uint32_t cap = (c->mask + 1) * 2;
    centry *ne = calloc(cap, sizeof *ne), *old = c->e;
    if (!ne) return;
    uint32_t oldcap = c->mask + 1;
    c->e = ne;
    c->mask = cap - 1;
    for (uint32_t i = 0; i < oldcap; i++) {
        if (!old[i].klen) continue;
        uint32_t j = (uint32_t)old[i].h & c->mask;
        while (ne[j].klen) j = (j + 1) & c->mask;
        ne[j] = old[i];
    }
    free(old);
}

/* ---------------- merge engine (BPE and SPM) ---------------- */

typedef struct sym {
    uint32_t start, len;
    int32_t id, prev, next;
} sym;

typedef struct cand {
    double prio; /* lower merges first: BPE rank, or -score for SPM */
    int32_t left, right, new_id;
    uint32_t size;
} cand;

typedef struct heap {
    cand *v;
    size_t n, cap;
} heap;

static inline bool cand_less(const cand *a, const cand *b) {
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

static void heap_push(heap *h, cand c) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        cand *v = realloc(h->v, cap * sizeof *v);
        if (!v) return;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = c;
}

static cand heap_pop(heap *h) {
    cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < h->n && cand_less(&h->v[l], best)) m = l, best = &h->v[l];
        if (r < h->n && cand_less(&h->v[r], best)) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n) h->v[i] = last;
    return top;
}

struct work {
    sym *s;
    size_t n, cap;
    heap h;
    tbuf tmp;
};

static void work_free(work *w) {
    if (!w) return;
    free(w->s);
    free(w->h.v);
    tbuf_free(&w->tmp);
    free(w);
}

static void sym_push(work *w, uint32_t start, uint32_t len, int32_t id) {
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        sym *v = realloc(w->s, cap * sizeof *v);
        if (!v) return;
        w->s = v;
        w->cap = cap;
    }
    w->s[w->n] = (sym){start, len, id, (int32_t)w->n - 1, -1};
    if (w->n) w->s[w->n - 1].next = (int32_t)w->n;
    w->n++;
}

/* Candidate merge of symbols l and r (l's next is r). */
static void try_pair(const mtplx_tokenizer *t, work *w, const char *word, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const sym *a = &w->s[l], *b = &w->s[r];
    if (t->model == TM_BPE) {
        int32_t rank, id;
        if (a->id < 0 || b->id < 0 || !mergemap_get(&t->merges, a->id, b->id, &rank, &id)) return;
        heap_push(&w->h, (cand){rank, l, r, id, a->len + b->len});
    } else {
        int32_t id = tok_find(t, word + a->start, a->len + b->len);
        if (id < 0) return;
        heap_push(&w->h, (cand){t->score ? -(double)t->score[id] : 0.0, l, r, id, a->len + b->len});
    }
}

static void merge_all(const mtplx_tokenizer *t, work *w, const char *word) {
    w->h.n = 0;
    for (size_t i = 0; i + 1 < w->n; i++) try_pair(t, w, word, (int32_t)i, (int32_t)i + 1);
    while (w->h.n) {
        cand c = heap_pop(&w->h);
        sym *a = &w->s[c.left];
        if (!a->len || a->next != c.right) continue;
        sym *b = &w->s[c.right];
        if (a->len + b->len != c.size) continue;
        if (t->model == TM_BPE) {
            int32_t rank, id;
            if (!mergemap_get(&t->merges, a->id, b->id, &rank, &id) || id != c.new_id) continue;
        }
        a->id = c.new_id;
        a->len += b->len;
        a->next = b->next;
        b->len = 0;
        if (a->next >= 0) w->s[a->next].prev = c.left;
        try_pair(t, w, word, a->prev, c.left);
        try_pair(t, w, word, c.left, a->next);
    }
}

static void bpe_word(const mtplx_tokenizer *t, work *w, const char *s, size_t n, ivec *out) {
    if (t->ignore_merges) {
        int32_t id = tok_find(t, s, n);
        if (id >= 0) {
            ivec_push(out, id);
            return;
        }
    }
    w->n = 0;
    size_t pl = t->cont_prefix ? strlen(t->cont_prefix) : 0;
    size_t sl = t->eow_suffix ? strlen(t->eow_suffix) : 0;
    for (size_t i = 0; i < n;) {
        int k = utf8_len((unsigned char)s[i]);
        if (i + (size_t)k > n) k = (int)(n - i);
        int32_t id;
        if (pl || sl) {
            w->tmp.n = 0;
            if (pl && i) tbuf_put(&w->tmp, t->cont_prefix, pl);
            tbuf_put(&w->tmp, s + i, (size_t)k);
            if (sl && i + (size_t)k == n) tbuf_put(&w->tmp, t->eow_suffix, sl);
            id = tok_find(t, w->tmp.p, w->tmp.n);
        } else id = tok_find(t, s + i, (size_t)k);
        if (id < 0 && t->byte_fallback) {
            bool all = true;
            for (int j = 0; j < k; j++) all = all && t->byte_id[(unsigned char)s[i + j]] >= 0;
            if (all) {
                for (int j = 0; j < k; j++)
                    sym_push(w, (uint32_t)(i + j), 1, t->byte_id[(unsigned char)s[i + j]]);
                i += (size_t)k;
                continue;
            }
        }
        if (id < 0) {
            if (t->unk >= 0) {
                if (t->fuse_unk && w->n && w->s[w->n - 1].id == t->unk)
                    w->s[w->n - 1].len += (uint32_t)k;
                else sym_push(w, (uint32_t)i, (uint32_t)k, t->unk);
            }
            i += (size_t)k;
            continue;
        }
        sym_push(w, (uint32_t)i, (uint32_t)k, id);
        i += (size_t)k;
    }
    merge_all(t, w, s);
    for (int32_t i = w->n ? 0 : -1; i >= 0; i = w->s[i].next) ivec_push(out, w->s[i].id);
}

static void spm_word(const mtplx_tokenizer *t, work *w, const char *s, size_t n, ivec *out) {
    w->n = 0;
    for (size_t i = 0; i < n;) {
        int k = utf8_len((unsigned char)s[i]);
        if (i + (size_t)k > n) k = (int)(n - i);
        sym_push(w, (uint32_t)i, (uint32_t)k, tok_find(t, s + i, (size_t)k));
        i += (size_t)k;
    }
    merge_all(t, w, s);
    for (int32_t i = w->n ? 0 : -1; i >= 0; i = w->s[i].next) {
        const sym *x = &w->s[i];
        if (x->id >= 0) {
            ivec_push(out, x->id);
            continue;
        }
        for (uint32_t j = 0; j < x->len; j++) {
            int32_t b = t->byte_id[(unsigned char)s[x->start + j]];
            if (b >= 0) ivec_push(out, b);
            else if (t->unk >= 0 && (j == 0 || !t->fuse_unk)) ivec_push(out, t->unk);
        }
    }
}

static void wordpiece_word(const mtplx_tokenizer *t, work *w, const char *s, size_t n,
                           ivec *out) {
    size_t nchars = 0;
    for (size_t i = 0; i < n; i += (size_t)utf8_len((unsigned char)s[i])) nchars++;
    size_t mark = out->n;
    if (nchars > (size_t)t->max_input_chars) goto bad;
    const char *pre = t->wp_prefix ? t->wp_prefix : "##";
    size_t pl = strlen(pre);
    for (size_t start = 0; start < n;) {
        size_t end = n;
        int32_t cur = -1;
        while (start < end) {
            w->tmp.n = 0;
            if (start) tbuf_put(&w->tmp, pre, pl);
            tbuf_put(&w->tmp, s + start, end - start);
            cur = tok_find(t, w->tmp.p, w->tmp.n);
            if (cur >= 0) break;
            end--;
            while (end > start && ((unsigned char)s[end] & 0xc0) == 0x80) end--;
        }
        if (cur < 0) goto bad;
        ivec_push(out, cur);
        start = end;
    }
    return;
bad:
    out->n = mark;
    if (t->unk >= 0) ivec_push(out, t->unk);
}

static void model_word(const mtplx_tokenizer *t, tok_cache *c, const char *s, size_t n, ivec *out);

void tok_model_word(const mtplx_tokenizer *t, tok_cache *c, const char *s, size_t n, ivec *out) {
    if (n <= CACHE_MAX_WORD || !t->split_mark) {
        model_word(t, c, s, n, out);
        return;
    }
    /* cut before each U+2581 that follows another char (see split_mark) */
    size_t start = 0;
    for (size_t i = 1; i + 3 <= n; i++) {
        if (memcmp(s + i, "\xe2\x96\x81", 3) != 0) continue;
        if (i >= 3 && !memcmp(s + i - 3, "\xe2\x96\x81", 3)) continue;
        model_word(t, c, s + start, i - start, out);
        start = i;
    }
    model_word(t, c, s + start, n - start, out);
}

static void model_word(const mtplx_tokenizer *t, tok_cache *c, const char *s, size_t n, ivec *out) {
    if (!n) return;
    if (!c->w && !(c->w = calloc(1, sizeof *c->w))) {
        out->oom = true;
        return;
    }
    centry *e = NULL;
    uint64_t h = 0;
    if (n <= CACHE_MAX_WORD) {
        h = tok_hash(s, n);
        e = cache_slot(c, h, s, n);
        if (e->klen) {
            for (uint32_t i = 0; i < e->icount; i++) ivec_push(out, c->ids.v[e->ioff + i]);
            return;
        }
    }
    size_t mark = out->n;
    work *w = c->w;
    if (t->model == TM_BPE) bpe_word(t, w, s, n, out);
    else if (t->model == TM_SPM) spm_word(t, w, s, n, out);
    else wordpiece_word(t, w, s, n, out);
    if (e && !out->oom && c->used < CACHE_MAX_ENTRIES) {
        size_t koff = c->keys.n, ioff = c->ids.n;
        tbuf_put(&c->keys, s, n);
        for (size_t i = mark; i < out->n; i++) ivec_push(&c->ids, out->v[i]);
        if (c->keys.oom || c->ids.oom) return;
        *e = (centry){h, (uint32_t)koff, (uint32_t)n, (uint32_t)ioff, (uint32_t)(out->n - mark)};
        if (++c->used * 2 > c->mask) cache_grow(c);
    }
}
