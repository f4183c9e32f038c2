/* tok_decode.c: ids back to text. HF decoders run on the list of token
 * strings exactly as tokenizers' decode_chain does (ByteLevel, Replace,
 * ByteFallback, Fuse, Strip, Metaspace, WordPiece, BPEDecoder; no decoder
 * means join with " "). The streaming detokenizer re-decodes a short window
 * (the last emitted token plus the new ones) and emits the difference only
 * when it does not end in U+FFFD, so partial UTF-8 from byte-level or
 * byte-fallback tokens is held back until its character completes. */
#include "tokenizer/tok_internal.h"

static bool skip_id(const mtplx_tokenizer *t, int32_t id) {
    return t->ttype[id] == TT_CONTROL || t->ttype[id] == TT_UNKNOWN;
}

static void dec_bytelevel(const tpieces *in, tpieces *out) {
    tbuf all = {0};
    for (size_t i = 0; i < in->n; i++) {
        const char *s = in->text.p + in->off[i];
        size_t n = in->len[i], mark = all.n;
        bool ok = true;
        for (size_t k = 0; k < n && ok;) {
            int32_t cp;
            int l = utf8_next(s + k, n - k, &cp);
            int b = bytelevel_byte(cp);
            if (b < 0) ok = false;
            else tbuf_putc(&all, (char)b);
            k += (size_t)l;
        }
        if (!ok) {
            all.n = mark;
            tbuf_put(&all, s, n);
        }
    }
    tpieces_add(out, all.p ? all.p : "", all.n);
    tbuf_free(&all);
}

static int byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static void flush_bytes(tbuf *bytes, size_t count, tpieces *out) {
    if (!count) return;
    if (utf8_valid(bytes->p, bytes->n)) tpieces_add(out, bytes->p, bytes->n);
    else
        for (size_t i = 0; i < count; i++) tpieces_add(out, "\xef\xbf\xbd", 3);
    bytes->n = 0;
}

static void dec_bytefallback(const tpieces *in, tpieces *out) {
    tbuf bytes = {0};
    size_t count = 0;
    for (size_t i = 0; i < in->n; i++) {
        const char *s = in->text.p + in->off[i];
        int b = byte_token(s, in->len[i]);
        if (b >= 0) {
            tbuf_putc(&bytes, (char)b);
            count++;
            continue;
        }
        flush_bytes(&bytes, count, out);
        count = 0;
        tpieces_add(out, s, in->len[i]);
    }
    flush_bytes(&bytes, count, out);
    tbuf_free(&bytes);
}

static void replace_str(const char *s, size_t n, const char *a, size_t al, const char *b,
                        size_t bl, tbuf *o) {
    size_t i = 0;
    while (al && i < n) {
        const char *m = memmem(s + i, n - i, a, al);
        if (!m) break;
        tbuf_put(o, s + i, (size_t)(m - (s + i)));
        tbuf_put(o, b, bl);
        i = (size_t)(m - s) + al;
    }
    tbuf_put(o, s + i, n - i);
}

static const char *const wp_cleanup[][2] = {
    {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
    {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};

static void one_dec(const mtplx_tokenizer *t, const tok_step *st, const tpieces *in, tpieces *out) {
    tbuf o = {0};
    switch (st->kind) {
    case D_BYTELEVEL: dec_bytelevel(in, out); return;
    case D_BYTEFALLBACK: dec_bytefallback(in, out); return;
    case D_FUSE:
        for (size_t i = 0; i < in->n; i++) tbuf_put(&o, in->text.p + in->off[i], in->len[i]);
        tpieces_add(out, o.p ? o.p : "", o.n);
        tbuf_free(&o);
        return;
    default: break;
    }
    for (size_t i = 0; i < in->n; i++) {
        const char *s = in->text.p + in->off[i];
        size_t n = in->len[i];
        o.n = 0;
        switch (st->kind) {
        case D_REPLACE:
            if (st->re) {
                tbuf x = {0};
                tbuf_put(&x, s, n);
                tbuf_free(&o);
                /* regex replace through the normalizer helper */
                mtplx_tokenizer tmp = {0};
                tok_step one = *st;
                one.kind = N_REPLACE;
                tmp.norm = &one;
                tmp.n_norm = 1;
                tok_normalize(&tmp, x.p ? x.p : "", x.n, &o);
                tbuf_free(&x);
            } else replace_str(s, n, st->a, st->alen, st->b, st->blen, &o);
            break;
        case D_STRIP: {
            size_t b = 0, e = n;
            for (int k = 0; k < st->ia && e - b >= st->alen && memcmp(s + b, st->a, st->alen) == 0; k++)
                b += st->alen;
            for (int k = 0; k < st->ib && e - b >= st->alen &&
                            memcmp(s + e - st->alen, st->a, st->alen) == 0; k++)
                e -= st->alen;
            tbuf_put(&o, s + b, e - b);
            break;
        }
        case D_METASPACE:
            replace_str(s, n, st->a, st->alen, " ", 1, &o);
            if (i == 0 && st->ib != PS_NEVER && o.n && o.p[0] == ' ') {
                memmove(o.p, o.p + 1, o.n - 1);
                o.n--;
            }
            break;
        case D_WORDPIECE: {
            if (i) {
                if (n >= st->alen && memcmp(s, st->a, st->alen) == 0) s += st->alen, n -= st->alen;
                else tbuf_putc(&o, ' ');
            }
            tbuf_put(&o, s, n);
            if (st->fa)
                for (size_t k = 0; k < sizeof wp_cleanup / sizeof wp_cleanup[0]; k++) {
                    tbuf x = {0};
                    replace_str(o.p ? o.p : "", o.n, wp_cleanup[k][0], strlen(wp_cleanup[k][0]),
                                wp_cleanup[k][1], strlen(wp_cleanup[k][1]), &x);
                    tbuf_free(&o);
                    o = x;
                }
            break;
        }
        case D_BPE:
            replace_str(s, n, st->a, st->alen, i + 1 == in->n ? "" : " ", i + 1 == in->n ? 0 : 1, &o);
            break;
        default: tbuf_put(&o, s, n);
        }
        tpieces_add(out, o.p ? o.p : "", o.n);
    }
    tbuf_free(&o);
}

void tok_decode_raw(const mtplx_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                    tbuf *out) {
    tpieces a = {0}, b = {0};
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_vocab) continue;
        if (skip_special && skip_id(t, id)) continue;
        tpieces_add(&a, t->piece[id], t->plen[id]);
    }
    if (!t->n_dec) {
        for (size_t i = 0; i < a.n; i++) {
            if (i) tbuf_putc(out, ' ');
            tbuf_put(out, a.text.p + a.off[i], a.len[i]);
        }
    } else {
        for (int k = 0; k < t->n_dec; k++) {
            tpieces_clear(&b);
            one_dec(t, &t->dec[k], &a, &b);
            tpieces x = a;
            a = b;
            b = x;
        }
        for (size_t i = 0; i < a.n; i++) tbuf_put(out, a.text.p + a.off[i], a.len[i]);
    }
    if (a.oom || a.text.oom) out->oom = true;
    tpieces_free(&a);
    tpieces_free(&b);
}

mtplx_status mtplx_detokenize(const mtplx_tokenizer *t, const int32_t *ids, size_t n,
                              bool skip_special, char **text_out, size_t *len_out) {
    *text_out = NULL;
    if (len_out) *len_out = 0;
    if (!t || (!ids && n)) return mtplx_fail(MTPLX_ERR_ARG, "mtplx_detokenize: NULL argument");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return mtplx_fail(MTPLX_ERR_RANGE, "detokenize: id %d at position %zu is outside the vocabulary (%d)",
                              ids[i], i, t->n_vocab);
    tbuf raw = {0}, clean = {0};
    tok_decode_raw(t, ids, n, skip_special, &raw);
    utf8_sanitize(raw.p ? raw.p : "", raw.n, &clean);
    tbuf_put(&clean, "", 0);
    bool oom = raw.oom || clean.oom;
    tbuf_free(&raw);
    if (oom) {
        tbuf_free(&clean);
        return mtplx_fail(MTPLX_ERR_NOMEM, "detokenize: out of memory");
    }
    *text_out = clean.p;
    if (len_out) *len_out = clean.n;
    return MTPLX_OK;
}

/* ---------------- streaming ---------------- */

struct mtplx_detok {
    const mtplx_tokenizer *t;
    bool skip_special;
    ivec ids;
    size_t prefix_off, read_off;
    tbuf prev, cur, out;
};

mtplx_status mtplx_detok_new(const mtplx_tokenizer *t, bool skip_special, mtplx_detok **out) {
    *out = NULL;
    if (!t) return mtplx_fail(MTPLX_ERR_ARG, "mtplx_detok_new: NULL tokenizer");
    mtplx_detok *d = calloc(1, sizeof *d);
    if (!d) return mtplx_fail(MTPLX_ERR_NOMEM, "detok");
    d->t = t;
    d->skip_special = skip_special;
    *out = d;
    return MTPLX_OK;
}

static void window(mtplx_detok *d, size_t from, size_t to, tbuf *o) {
    tbuf raw = {0};
    o->n = 0;
    tok_decode_raw(d->t, d->ids.v + from, to - from, d->skip_special, &raw);
    utf8_sanitize(raw.p ? raw.p : "", raw.n, o);
    tbuf_put(o, "", 0);
    if (raw.oom) o->oom = true;
    tbuf_free(&raw);
}

static mtplx_status emit(mtplx_detok *d, bool final, const char **text, size_t *len) {
    window(d, d->prefix_off, d->read_off, &d->prev);
    window(d, d->prefix_off, d->ids.n, &d->cur);
    d->out.n = 0;
    tbuf_put(&d->out, "", 0);
    if (d->prev.oom || d->cur.oom || d->ids.oom || d->out.oom)
        return mtplx_fail(MTPLX_ERR_NOMEM, "detok: out of memory");
    bool tail_bad = d->cur.n >= 3 && memcmp(d->cur.p + d->cur.n - 3, "\xef\xbf\xbd", 3) == 0;
    if (d->cur.n > d->prev.n && (final || !tail_bad)) {
        /* the window's text normally extends the previous one; if a decoder
         * rewrote earlier text, emit from the first difference we can trust */
        size_t k = d->prev.n;
        if (memcmp(d->cur.p, d->prev.p, d->prev.n) != 0) {
            k = 0;
            while (k < d->prev.n && d->cur.p[k] == d->prev.p[k]) k++;
        }
        tbuf_put(&d->out, d->cur.p + k, d->cur.n - k);
        d->prefix_off = d->read_off;
        d->read_off = d->ids.n;
    }
    if (final) d->prefix_off = d->read_off = d->ids.n;
    *text = d->out.p;
    *len = d->out.n;
    return MTPLX_OK;
}

mtplx_status mtplx_detok_push(mtplx_detok *d, int32_t id, const char **text, size_t *len) {
    *text = "";
    *len = 0;
    if (id < 0 || id >= d->t->n_vocab)
        return mtplx_fail(MTPLX_ERR_RANGE, "detok: id %d is outside the vocabulary (%d)", id,
                          d->t->n_vocab);
    if (d->skip_special && skip_id(d->t, id)) return MTPLX_OK;
    ivec_push(&d->ids, id);
    return emit(d, false, text, len);
}

mtplx_status mtplx_detok_flush(mtplx_detok *d, const char **text, size_t *len) {
    *text = "";
    *len = 0;
    if (d->read_off == d->ids.n) return MTPLX_OK;
    return emit(d, true, text, len);
}

void mtplx_detok_reset(mtplx_detok *d) {
    if (!d) return;
    d->ids.n = 0;
    d->prefix_off = d->read_off = 0;
}

void mtplx_detok_free(mtplx_detok *d) {
    if (!d) return;
    free(d->ids.v);
    tbuf_free(&d->prev);
    tbuf_free(&d->cur);
    tbuf_free(&d->out);
    free(d);
}
