/* tok_text.c: HF normalizers and pre-tokenizers on UTF-8 text, following
 * tokenizers' Rust code (split behaviours, Metaspace prepend schemes,
 * ByteLevel's per-split prefix space). Offsets are not tracked: mtplx only
 * needs ids. Unicode tables come from utf8proc; regexes are PCRE2 in UTF+UCP
 * mode (HF uses Oniguruma; for the patterns real tokenizers ship the two agree). */
#include "tokenizer/tok_internal.h"

#include <utf8proc.h>

/* ---------------- normalizers ---------------- */

static bool is_ws(int32_t c) { /* Rust char::is_whitespace */
    return c == ' ' || (c >= 9 && c <= 13) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

static bool is_cjk(int32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static bool is_punct(int32_t c) {
    if (c < 128) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
                        (c >= 123 && c <= 126);
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

static void apply_utf8proc(tbuf *b, int opts) {
    if (!b->n) return;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r =
        utf8proc_map((const utf8proc_uint8_t *)b->p, (utf8proc_ssize_t)b->n, &dst, opts);
    if (r < 0) return; /* invalid input cannot happen: text is sanitized first */
    b->n = 0;
    tbuf_put(b, dst, (size_t)r);
    free(dst);
}

/* NFC only where it can change anything: ASCII is NFC-stable, never the second
 * half of a composition, and a starter, so only runs of non-ASCII text (with
 * the ASCII char before them, which a combining mark may attach to) are
 * normalized. Prose is mostly ASCII, and this keeps NFC off the profile. */
static void nfc_spans(tbuf *b) {
    size_t i = 0;
    while (i < b->n && (unsigned char)b->p[i] < 0x80) i++;
    if (i == b->n) return;
    tbuf out = {0}, tmp = {0};
    size_t done = 0;
    while (i < b->n) {
        size_t st = i > 0 ? i - 1 : 0, j = i;
        while (j < b->n && (unsigned char)b->p[j] >= 0x80) j++;
        tbuf_put(&out, b->p + done, st - done);
        tmp.n = 0;
        tbuf_put(&tmp, b->p + st, j - st);
        apply_utf8proc(&tmp, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        tbuf_put(&out, tmp.p, tmp.n);
        done = j;
        i = j;
        while (i < b->n && (unsigned char)b->p[i] < 0x80) i++;
    }
    tbuf_put(&out, b->p + done, b->n - done);
    if (tmp.oom) out.oom = true;
    tbuf_free(&tmp);
    tbuf_free(b);
    *b = out;
}

/* Rewrite b char by char: fn appends the replacement of cp to out. */
typedef void (*char_fn)(const tok_step *st, int32_t cp, tbuf *out);

static void map_chars(tbuf *b, const tok_step *st, char_fn fn) {
    tbuf out = {0};
    for (size_t i = 0; i < b->n;) {
        int32_t cp;
        int k = utf8_next(b->p + i, b->n - i, &cp);
        if (cp < 0) cp = 0xfffd;
        fn(st, cp, &out);
        i += (size_t)k;
    }
    tbuf_free(b);
    *b = out;
}

static void lower_fn(const tok_step *st, int32_t cp, tbuf *o) {
    if (cp == 0x130) { /* full lowercase mapping of U+0130 */
        tbuf_put(o, "i\xcc\x87", 3);
        return;
    }
    utf8_put(o, cp < 128 ? (cp >= 'A' && cp <= 'Z' ? cp + 32 : cp) : utf8proc_tolower(cp));
}

static void strip_accents_fn(const tok_step *st, int32_t cp, tbuf *o) {
    if (cp >= 0x300 && utf8proc_category(cp) == UTF8PROC_CATEGORY_MN) return;
    utf8_put(o, cp);
}

/* BertNormalizer: clean_text (fa), handle_chinese_chars (fb). */
static void bert_clean_fn(const tok_step *st, int32_t cp, tbuf *o) {
    if (st->fa) {
        if (cp == 0 || cp == 0xfffd) return;
        if (cp == '\t' || cp == '\n' || cp == '\r' || is_ws(cp) ||
            utf8proc_category(cp) == UTF8PROC_CATEGORY_ZS) {
            tbuf_putc(o, ' ');
            return;
        }
        utf8proc_category_t k = utf8proc_category(cp);
        if (k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CN ||
            k == UTF8PROC_CATEGORY_CO)
            return;
    }
    if (st->fb && is_cjk(cp)) {
        tbuf_putc(o, ' ');
        utf8_put(o, cp);
        tbuf_putc(o, ' ');
        return;
    }
    utf8_put(o, cp);
}

static void replace_all(tbuf *b, const tok_step *st) {
    if (!b->n) return;
    tbuf out = {0};
    if (!st->re) {
        if (!st->alen) return;
        size_t i = 0;
        while (i < b->n) {
            const char *m = memmem(b->p + i, b->n - i, st->a, st->alen);
            if (!m) break;
            tbuf_put(&out, b->p + i, (size_t)(m - (b->p + i)));
            tbuf_put(&out, st->b, st->blen);
            i = (size_t)(m - b->p) + st->alen;
        }
        tbuf_put(&out, b->p + i, b->n - i);
    } else {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(st->re, NULL);
        size_t i = 0, pos = 0;
        while (pos <= b->n &&
               pcre2_match(st->re, (PCRE2_SPTR)b->p, b->n, pos, PCRE2_NO_UTF_CHECK, md, NULL) >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            tbuf_put(&out, b->p + i, ov[0] - i);
            tbuf_put(&out, st->b, st->blen);
            i = ov[1];
            pos = ov[1] > ov[0] ? ov[1] : ov[1] + (size_t)(ov[1] < b->n ? utf8_len((unsigned char)b->p[ov[1]]) : 1);
            if (ov[1] == ov[0] && ov[1] < b->n) { /* empty match: keep the skipped char */
                tbuf_put(&out, b->p + ov[1], pos - ov[1]);
                i = pos;
            }
        }
        pcre2_match_data_free(md);
        if (i < b->n) tbuf_put(&out, b->p + i, b->n - i);
    }
    tbuf_free(b);
    *b = out;
}

static void strip_ws(tbuf *b, bool left, bool right) {
    size_t s = 0, e = b->n;
    while (left && s < e) {
        int32_t cp;
        int k = utf8_next(b->p + s, e - s, &cp);
        if (!is_ws(cp)) break;
        s += (size_t)k;
    }
    while (right && e > s) {
        size_t j = e - 1;
        while (j > s && ((unsigned char)b->p[j] & 0xc0) == 0x80) j--;
        int32_t cp;
        utf8_next(b->p + j, e - j, &cp);
        if (!is_ws(cp)) break;
        e = j;
    }
    memmove(b->p, b->p + s, e - s);
    b->n = e - s;
    if (b->p) b->p[b->n] = 0;
}

void tok_normalize(const mtplx_tokenizer *t, const char *s, size_t n, tbuf *out) {
    out->n = 0;
    tbuf_put(out, s, n);
    if (!out->p) tbuf_put(out, "", 0);
    for (int k = 0; k < t->n_norm; k++) {
        const tok_step *st = &t->norm[k];
        switch (st->kind) {
        case N_NFC: nfc_spans(out); break;
        case N_NFD: apply_utf8proc(out, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE); break;
        case N_NFKC: apply_utf8proc(out, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT); break;
        case N_NFKD:
            apply_utf8proc(out, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
            break;
        case N_LOWER: map_chars(out, st, lower_fn); break;
        case N_STRIP_ACCENTS: map_chars(out, st, strip_accents_fn); break;
        case N_PREPEND:
            if (out->n) {
                tbuf nb = {0};
                tbuf_put(&nb, st->a, st->alen);
                tbuf_put(&nb, out->p, out->n);
                tbuf_free(out);
                *out = nb;
            }
            break;
        case N_REPLACE: replace_all(out, st); break;
        case N_STRIP: strip_ws(out, st->ia > 0, st->ib > 0); break;
        case N_BERT:
            map_chars(out, st, bert_clean_fn);
            if (st->fc) { /* strip accents */
                apply_utf8proc(out, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
                map_chars(out, st, strip_accents_fn);
            }
            if (st->fd) map_chars(out, st, lower_fn);
            break;
        default: break;
        }
    }
}

/* ---------------- pre-tokenizers ---------------- */

/* Spans of one piece: [start, end) with is_match, covering the piece. */
typedef struct span {
    size_t s, e;
    bool m;
} span;
typedef struct spans {
    span *v;
    size_t n, cap;
} spans;

static void span_add(spans *sp, size_t s, size_t e, bool m) {
    if (sp->n == sp->cap) {
        size_t cap = sp->cap ? sp->cap * 2 : 64;
        span *v = realloc(sp->v, cap * sizeof *v);
        if (!v) return; /* drops spans under OOM; the caller's buffers flag it */
        sp->v = v;
        sp->cap = cap;
    }
    sp->v[sp->n++] = (span){s, e, m};
}

/* HF Pattern::find_matches then SplitDelimiterBehavior, appending non-empty
 * pieces to out. */
static void emit_spans(const char *s, spans *sp, int beh, bool invert, tpieces *out) {
    if (invert)
        for (size_t i = 0; i < sp->n; i++) sp->v[i].m = !sp->v[i].m;
    size_t n = 0; /* merged spans are written back in place */
    if (beh == SB_MERGED_NEXT) {
        /* reverse fold, as HF does */
        bool prev = false;
        span *v = sp->v;
        size_t w = sp->n; /* write from the end */
        for (size_t i = sp->n; i-- > 0;) {
            span x = v[i];
            if (x.m && !prev && w < sp->n) v[w].s = x.s;
            else v[--w] = (span){x.s, x.e, false};
            prev = x.m;
        }
        for (size_t i = w; i < sp->n; i++)
            if (sp->v[i].e > sp->v[i].s) tpieces_add(out, s + sp->v[i].s, sp->v[i].e - sp->v[i].s);
        return;
    }
    bool prev = false;
    for (size_t i = 0; i < sp->n; i++) {
        span x = sp->v[i];
        switch (beh) {
        case SB_REMOVED:
            if (!x.m) sp->v[n++] = x;
            break;
        case SB_ISOLATED: sp->v[n++] = x; break;
        case SB_MERGED_PREV:
            if (x.m && !prev && n) sp->v[n - 1].e = x.e;
            else sp->v[n++] = x;
            break;
        case SB_CONTIGUOUS:
            if (x.m == prev && n) sp->v[n - 1].e = x.e;
            else sp->v[n++] = x;
            break;
        }
        prev = x.m;
    }
    for (size_t i = 0; i < n; i++)
        if (sp->v[i].e > sp->v[i].s) tpieces_add(out, s + sp->v[i].s, sp->v[i].e - sp->v[i].s);
}

static void find_regex(pcre2_code *re, pcre2_match_data *md, const char *s, size_t n, spans *sp) {
    size_t prev = 0, pos = 0;
    while (pos <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] == ov[0]) { /* empty match: step over one char */
            if (ov[0] >= n) break;
            pos = ov[0] + (size_t)utf8_len((unsigned char)s[ov[0]]);
            continue;
        }
        if (ov[0] > prev) span_add(sp, prev, ov[0], false);
        span_add(sp, ov[0], ov[1], true);
        prev = pos = ov[1];
    }
    if (prev < n) span_add(sp, prev, n, false);
}

static void find_string(const char *pat, size_t plen, const char *s, size_t n, spans *sp) {
    size_t prev = 0;
    if (plen) {
        for (size_t i = 0; i + plen <= n;) {
            const char *m = memmem(s + i, n - i, pat, plen);
            if (!m) break;
            size_t at = (size_t)(m - s);
            if (at > prev) span_add(sp, prev, at, false);
            span_add(sp, at, at + plen, true);
            prev = i = at + plen;
        }
    }
    if (prev < n) span_add(sp, prev, n, false);
}

typedef bool (*char_pred)(int32_t cp);
static bool pred_ws(int32_t c) { return is_ws(c); }
static bool pred_digit(int32_t c) { return c >= '0' && c <= '9'; }
static bool pred_punct(int32_t c) { return is_punct(c); }

static void find_chars(char_pred pred, const char *s, size_t n, spans *sp) {
    size_t prev = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        int k = utf8_next(s + i, n - i, &cp);
        if (pred(cp)) {
            if (i > prev) span_add(sp, prev, i, false);
            span_add(sp, i, i + (size_t)k, true);
            prev = i + (size_t)k;
        }
        i += (size_t)k;
    }
    if (prev < n) span_add(sp, prev, n, false);
}

static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static pcre2_code *gpt2_re, *ws_re;

static pcre2_code *shared_re(pcre2_code **slot, const char *pat) {
    pcre2_code *re = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (re) return re;
    char err[128];
    re = tok_regex(pat, strlen(pat), err, sizeof err);
    pcre2_code *expected = NULL;
    if (!__atomic_compare_exchange_n(slot, &expected, re, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        pcre2_code_free(re);
        re = expected;
    }
    return re;
}

static void one_step(const tok_step *st, const tpieces *in, bool first, tpieces *out,
                     spans *sp, pcre2_match_data **md) {
    for (size_t i = 0; i < in->n; i++) {
        const char *s = in->text.p + in->off[i];
        size_t n = in->len[i];
        sp->n = 0;
        switch (st->kind) {
        case P_SPLIT:
            if (st->re) {
                if (!*md) *md = pcre2_match_data_create(8, NULL);
                find_regex(st->re, *md, s, n, sp);
            } else find_string(st->a, st->alen, s, n, sp);
            emit_spans(s, sp, st->ia, st->fa, out);
            break;
        case P_WHITESPACE: {
            pcre2_code *re = shared_re(&ws_re, "\\w+|[^\\w\\s]+");
            if (!*md) *md = pcre2_match_data_create(8, NULL);
            find_regex(re, *md, s, n, sp);
            emit_spans(s, sp, SB_REMOVED, true, out);
            break;
        }
        case P_WSSPLIT:
            find_chars(pred_ws, s, n, sp);
            emit_spans(s, sp, SB_REMOVED, false, out);
            break;
        case P_DIGITS:
            find_chars(pred_digit, s, n, sp);
            emit_spans(s, sp, st->fa ? SB_ISOLATED : SB_CONTIGUOUS, false, out);
            break;
        case P_PUNCT:
            find_chars(pred_punct, s, n, sp);
            emit_spans(s, sp, st->ia, false, out);
            break;
        case P_BERT: {
            tpieces tmp = {0};
            find_chars(pred_ws, s, n, sp);
            emit_spans(s, sp, SB_REMOVED, false, &tmp);
            for (size_t j = 0; j < tmp.n; j++) {
                sp->n = 0;
                find_chars(pred_punct, tmp.text.p + tmp.off[j], tmp.len[j], sp);
                emit_spans(tmp.text.p + tmp.off[j], sp, SB_ISOLATED, false, out);
            }
            tpieces_free(&tmp);
            break;
        }
        case P_BYTELEVEL: {
            if (!st->fb && !st->fc) { /* the common case: map bytes straight into out */
                tbuf *o = &out->text;
                size_t start = o->n;
                if (!tbuf_reserve(o, 2 * n + 1)) break;
                for (size_t k = 0; k < n; k++) {
                    int l;
                    const char *c = bytelevel_char((unsigned char)s[k], &l);
                    o->p[o->n++] = c[0];
                    if (l == 2) o->p[o->n++] = c[1];
                }
                o->p[o->n] = 0;
                if (o->n > start) tpieces_commit(out, start);
                break;
            }
            tbuf pre = {0};
            if (st->fb && (n == 0 || s[0] != ' ')) tbuf_putc(&pre, ' ');
            tbuf_put(&pre, s, n);
            const char *ps = pre.p ? pre.p : "";
            tpieces tmp = {0};
            if (st->fc) {
                if (!*md) *md = pcre2_match_data_create(8, NULL);
                find_regex(shared_re(&gpt2_re, gpt2_pattern), *md, ps, pre.n, sp);
                emit_spans(ps, sp, SB_ISOLATED, false, &tmp);
            } else if (pre.n) tpieces_add(&tmp, ps, pre.n);
            tbuf mapped = {0};
            for (size_t j = 0; j < tmp.n; j++) {
                mapped.n = 0;
                const unsigned char *q = (const unsigned char *)tmp.text.p + tmp.off[j];
                for (size_t k = 0; k < tmp.len[j]; k++) {
                    int l;
                    const char *c = bytelevel_char(q[k], &l);
                    tbuf_put(&mapped, c, (size_t)l);
                }
                tpieces_add(out, mapped.p, mapped.n);
            }
            tbuf_free(&mapped);
            tpieces_free(&tmp);
            tbuf_free(&pre);
            break;
        }
        case P_METASPACE: {
            tbuf r = {0};
            if ((st->ib == PS_ALWAYS || (st->ib == PS_FIRST && first && i == 0)) &&
                !(n >= st->alen && memcmp(s, st->a, st->alen) == 0))
                tbuf_put(&r, st->a, st->alen);
            for (size_t k = 0; k < n; k++) {
                if (s[k] == ' ') tbuf_put(&r, st->a, st->alen);
                else tbuf_putc(&r, s[k]);
            }
            const char *rs = r.p ? r.p : "";
            if (st->fd) {
                find_string(st->a, st->alen, rs, r.n, sp);
                emit_spans(rs, sp, SB_MERGED_NEXT, false, out);
            } else if (r.n) tpieces_add(out, rs, r.n);
            tbuf_free(&r);
            break;
        }
        default:
            if (n) tpieces_add(out, s, n);
        }
    }
}

void tok_pretokenize(const mtplx_tokenizer *t, const char *s, size_t n, bool first,
                     tpieces *out) {
    tpieces_clear(out);
    if (n) tpieces_add(out, s, n);
    if (!t->n_pre) return;
    tpieces tmp = {0};
    spans sp = {0};
    pcre2_match_data *md = NULL;
    for (int k = 0; k < t->n_pre; k++) {
        tpieces_clear(&tmp);
        one_step(&t->pre[k], out, first, &tmp, &sp, &md);
        tpieces x = *out;
        *out = tmp;
        tmp = x;
    }
    if (md) pcre2_match_data_free(md);
    free(sp.v);
    tpieces_free(&tmp);
}
