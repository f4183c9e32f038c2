/* tok_json.c: build a tokenizer from HF tokenizer.json (+ tokenizer_config.json)
 * with cJSON. Sequences of normalizers / pre-tokenizers / decoders are
 * flattened into step lists; the post-processor is reduced to the special ids
 * it puts before and after the sequence ($A). Errors name the JSON field.
 * Not supported: Unigram / WordLevel models, the Precompiled normalizer
 * (ignored with a warning), pair templates and offsets. */
#include "tokenizer/tok_internal.h"

#include <cjson/cJSON.h>

mtplx_tokenizer *tok_new(void) {
    mtplx_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->bos = t->eos = t->unk = t->pad = -1;
    t->max_input_chars = 100;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    return t;
}

#define JFAIL(st, ...) mtplx_fail(st, "tokenizer.json: " __VA_ARGS__)

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
static bool jbool(const cJSON *o, const char *k, bool def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}
static double jnum(const cJSON *o, const char *k, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

typedef struct steps {
    tok_step *v;
    int n, cap;
} steps;

static tok_step *step_add(steps *s, int kind) {
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 8;
        tok_step *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) return NULL;
        s->v = v;
        s->cap = cap;
    }
    tok_step *st = &s->v[s->n++];
    memset(st, 0, sizeof *st);
    st->kind = kind;
    return st;
}

static mtplx_status set_str(char **dst, size_t *len, const char *s) {
    *dst = mtplx_strdup(s ? s : "");
    if (!*dst) return mtplx_fail(MTPLX_ERR_NOMEM, "tokenizer string");
    if (len) *len = strlen(*dst);
    return MTPLX_OK;
}

/* {"String": s} or {"Regex": r} into st->a / st->re. */
static mtplx_status set_pattern(tok_step *st, const cJSON *pat, const char *field) {
    const char *s = jstr(pat, "String"), *r = jstr(pat, "Regex");
    if (s) return set_str(&st->a, &st->alen, s);
    if (!r) return JFAIL(MTPLX_ERR_FORMAT, "field \"%s.pattern\": expected {\"String\"} or {\"Regex\"}", field);
    MTPLX_TRY(set_str(&st->a, &st->alen, r));
    char err[160];
    st->re = tok_regex(r, strlen(r), err, sizeof err);
    if (!st->re) return JFAIL(MTPLX_ERR_UNSUPPORTED, "field \"%s.pattern.Regex\": %s", field, err);
    return MTPLX_OK;
}

static int behavior(const char *b) {
    if (!b || !strcmp(b, "Isolated")) return SB_ISOLATED;
    if (!strcmp(b, "Removed")) return SB_REMOVED;
    if (!strcmp(b, "MergedWithPrevious")) return SB_MERGED_PREV;
    if (!strcmp(b, "MergedWithNext")) return SB_MERGED_NEXT;
    if (!strcmp(b, "Contiguous")) return SB_CONTIGUOUS;
    return -1;
}

static mtplx_status parse_norm(const cJSON *j, steps *out) {
    if (!j || cJSON_IsNull(j)) return MTPLX_OK;
    const char *ty = jstr(j, "type");
    if (!ty) return JFAIL(MTPLX_ERR_FORMAT, "field \"normalizer.type\": expected a string");
    tok_step *st;
    if (!strcmp(ty, "Sequence")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "normalizers"), *x;
        cJSON_ArrayForEach(x, a) MTPLX_TRY(parse_norm(x, out));
        return MTPLX_OK;
    }
    int kind = !strcmp(ty, "NFC")            ? N_NFC
               : !strcmp(ty, "NFD")          ? N_NFD
               : !strcmp(ty, "NFKC")         ? N_NFKC
               : !strcmp(ty, "NFKD")         ? N_NFKD
               : !strcmp(ty, "Lowercase")    ? N_LOWER
               : !strcmp(ty, "StripAccents") ? N_STRIP_ACCENTS
               : !strcmp(ty, "Prepend")      ? N_PREPEND
               : !strcmp(ty, "Replace")      ? N_REPLACE
               : !strcmp(ty, "Strip")        ? N_STRIP
               : !strcmp(ty, "BertNormalizer") ? N_BERT
                                               : -1;
    if (kind < 0) {
        if (!strcmp(ty, "Precompiled") || !strcmp(ty, "NMT")) {
            mtplx_log(MTPLX_LOG_WARN, "tokenizer.json: normalizer %s is ignored", ty);
            return MTPLX_OK;
        }
        return JFAIL(MTPLX_ERR_UNSUPPORTED, "field \"normalizer.type\": unknown type \"%s\"", ty);
    }
    if (!(st = step_add(out, kind))) return mtplx_fail(MTPLX_ERR_NOMEM, "normalizer");
    switch (kind) {
    case N_PREPEND: return set_str(&st->a, &st->alen, jstr(j, "prepend"));
    case N_REPLACE:
        MTPLX_TRY(set_pattern(st, cJSON_GetObjectItemCaseSensitive(j, "pattern"), "normalizer"));
        return set_str(&st->b, &st->blen, jstr(j, "content"));
    case N_STRIP:
        st->ia = jbool(j, "strip_left", true);
        st->ib = jbool(j, "strip_right", true);
        return MTPLX_OK;
    case N_BERT: {
        st->fa = jbool(j, "clean_text", true);
        st->fb = jbool(j, "handle_chinese_chars", true);
        st->fd = jbool(j, "lowercase", true);
        const cJSON *sa = cJSON_GetObjectItemCaseSensitive(j, "strip_accents");
        st->fc = cJSON_IsBool(sa) ? cJSON_IsTrue(sa) : st->fd;
        return MTPLX_OK;
    }
    default: return MTPLX_OK;
    }
}

static int prepend_scheme(const cJSON *j) {
    const char *p = jstr(j, "prepend_scheme");
    if (p) return !strcmp(p, "first") ? PS_FIRST : !strcmp(p, "never") ? PS_NEVER : PS_ALWAYS;
    return jbool(j, "add_prefix_space", true) ? PS_ALWAYS : PS_NEVER;
}

static mtplx_status parse_pre(const cJSON *j, steps *out) {
    if (!j || cJSON_IsNull(j)) return MTPLX_OK;
    const char *ty = jstr(j, "type");
    if (!ty) return JFAIL(MTPLX_ERR_FORMAT, "field \"pre_tokenizer.type\": expected a string");
    if (!strcmp(ty, "Sequence")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "pretokenizers"), *x;
        cJSON_ArrayForEach(x, a) MTPLX_TRY(parse_pre(x, out));
        return MTPLX_OK;
    }
    int kind = !strcmp(ty, "Split")             ? P_SPLIT
               : !strcmp(ty, "ByteLevel")       ? P_BYTELEVEL
               : !strcmp(ty, "Metaspace")       ? P_METASPACE
               : !strcmp(ty, "Digits")          ? P_DIGITS
               : !strcmp(ty, "Whitespace")      ? P_WHITESPACE
               : !strcmp(ty, "WhitespaceSplit") ? P_WSSPLIT
               : !strcmp(ty, "Punctuation")     ? P_PUNCT
               : !strcmp(ty, "BertPreTokenizer") ? P_BERT
                                                 : -1;
    if (kind < 0)
        return JFAIL(MTPLX_ERR_UNSUPPORTED, "field \"pre_tokenizer.type\": unknown type \"%s\"", ty);
    tok_step *st = step_add(out, kind);
    if (!st) return mtplx_fail(MTPLX_ERR_NOMEM, "pre_tokenizer");
    switch (kind) {
    case P_SPLIT:
        MTPLX_TRY(set_pattern(st, cJSON_GetObjectItemCaseSensitive(j, "pattern"), "pre_tokenizer"));
        st->ia = behavior(jstr(j, "behavior"));
        if (st->ia < 0)
            return JFAIL(MTPLX_ERR_UNSUPPORTED, "field \"pre_tokenizer.behavior\": unknown value");
        st->fa = jbool(j, "invert", false);
        return MTPLX_OK;
    case P_BYTELEVEL:
        st->fb = jbool(j, "add_prefix_space", true);
        st->fc = jbool(j, "use_regex", true);
        return MTPLX_OK;
    case P_METASPACE:
        st->ib = prepend_scheme(j);
        st->fd = jbool(j, "split", true);
        return set_str(&st->a, &st->alen, jstr(j, "replacement") ? jstr(j, "replacement") : "\xe2\x96\x81");
    case P_DIGITS: st->fa = jbool(j, "individual_digits", false); return MTPLX_OK;
    case P_PUNCT:
        st->ia = behavior(jstr(j, "behavior"));
        if (st->ia < 0) st->ia = SB_ISOLATED;
        return MTPLX_OK;
    default: return MTPLX_OK;
    }
}

static mtplx_status parse_dec(const cJSON *j, steps *out) {
    if (!j || cJSON_IsNull(j)) return MTPLX_OK;
    const char *ty = jstr(j, "type");
    if (!ty) return JFAIL(MTPLX_ERR_FORMAT, "field \"decoder.type\": expected a string");
    if (!strcmp(ty, "Sequence")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "decoders"), *x;
        cJSON_ArrayForEach(x, a) MTPLX_TRY(parse_dec(x, out));
        return MTPLX_OK;
    }
    int kind = !strcmp(ty, "ByteLevel")      ? D_BYTELEVEL
               : !strcmp(ty, "Replace")      ? D_REPLACE
               : !strcmp(ty, "ByteFallback") ? D_BYTEFALLBACK
               : !strcmp(ty, "Fuse")         ? D_FUSE
               : !strcmp(ty, "Strip")        ? D_STRIP
               : !strcmp(ty, "Metaspace")    ? D_METASPACE
               : !strcmp(ty, "WordPiece")    ? D_WORDPIECE
               : !strcmp(ty, "BPEDecoder")   ? D_BPE
                                             : -1;
    if (kind < 0) return JFAIL(MTPLX_ERR_UNSUPPORTED, "field \"decoder.type\": unknown type \"%s\"", ty);
    tok_step *st = step_add(out, kind);
    if (!st) return mtplx_fail(MTPLX_ERR_NOMEM, "decoder");
    switch (kind) {
    case D_REPLACE:
        MTPLX_TRY(set_pattern(st, cJSON_GetObjectItemCaseSensitive(j, "pattern"), "decoder"));
        return set_str(&st->b, &st->blen, jstr(j, "content"));
    case D_STRIP:
        st->ia = (int)jnum(j, "start", 0);
        st->ib = (int)jnum(j, "stop", 0);
        return set_str(&st->a, &st->alen, jstr(j, "content") ? jstr(j, "content") : " ");
    case D_METASPACE:
        st->ib = prepend_scheme(j);
        return set_str(&st->a, &st->alen, jstr(j, "replacement") ? jstr(j, "replacement") : "\xe2\x96\x81");
    case D_WORDPIECE:
        st->fa = jbool(j, "cleanup", true);
        return set_str(&st->a, &st->alen, jstr(j, "prefix") ? jstr(j, "prefix") : "##");
    case D_BPE: return set_str(&st->a, &st->alen, jstr(j, "suffix") ? jstr(j, "suffix") : "</w>");
    default: return MTPLX_OK;
    }
}

static mtplx_status add_ids(int32_t **v, int *n, const cJSON *ids) {
    const cJSON *x;
    cJSON_ArrayForEach(x, ids) {
        int32_t *nv = realloc(*v, (size_t)(*n + 1) * sizeof **v);
        if (!nv) return mtplx_fail(MTPLX_ERR_NOMEM, "post_processor");
        *v = nv;
        (*v)[(*n)++] = (int32_t)x->valuedouble;
    }
    return MTPLX_OK;
}

static mtplx_status parse_post(mtplx_tokenizer *t, const cJSON *j) {
    if (!j || cJSON_IsNull(j)) return MTPLX_OK;
    const char *ty = jstr(j, "type");
    if (!ty) return JFAIL(MTPLX_ERR_FORMAT, "field \"post_processor.type\": expected a string");
    if (!strcmp(ty, "Sequence")) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "processors"), *x;
        cJSON_ArrayForEach(x, a) MTPLX_TRY(parse_post(t, x));
        return MTPLX_OK;
    }
    if (!strcmp(ty, "TemplateProcessing")) {
        t->has_post = true;
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(j, "single"), *x;
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
        bool after = false;
        if (!cJSON_IsArray(single))
            return JFAIL(MTPLX_ERR_FORMAT, "field \"post_processor.single\": expected an array");
        cJSON_ArrayForEach(x, single) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(x, "SpecialToken");
            if (!s) {
                after = true; /* {"Sequence": {"id": "A"}} */
                continue;
            }
            const char *name = jstr(s, "id");
            const cJSON *e = name ? cJSON_GetObjectItemCaseSensitive(sp, name) : NULL;
            const cJSON *ids = cJSON_GetObjectItemCaseSensitive(e, "ids");
            if (!cJSON_IsArray(ids))
                return JFAIL(MTPLX_ERR_FORMAT,
                             "field \"post_processor.special_tokens.%s.ids\": expected an array",
                             name ? name : "?");
            MTPLX_TRY(after ? add_ids(&t->post_post, &t->n_post_post, ids)
                            : add_ids(&t->post_pre, &t->n_post_pre, ids));
        }
        return MTPLX_OK;
    }
    if (!strcmp(ty, "BertProcessing") || !strcmp(ty, "RobertaProcessing")) {
        t->has_post = true;
        const cJSON *cls = cJSON_GetObjectItemCaseSensitive(j, "cls");
        const cJSON *sep = cJSON_GetObjectItemCaseSensitive(j, "sep");
        const cJSON *ci = cJSON_GetArrayItem(cls, 1), *si = cJSON_GetArrayItem(sep, 1);
        if (!cJSON_IsNumber(ci) || !cJSON_IsNumber(si))
            return JFAIL(MTPLX_ERR_FORMAT, "field \"post_processor.cls/sep\": expected [token, id]");
        cJSON *a = cJSON_CreateArray(), *b = cJSON_CreateArray();
        cJSON_AddItemToArray(a, cJSON_CreateNumber(ci->valuedouble));
        cJSON_AddItemToArray(b, cJSON_CreateNumber(si->valuedouble));
        mtplx_status st = add_ids(&t->post_pre, &t->n_post_pre, a);
        if (st == MTPLX_OK) st = add_ids(&t->post_post, &t->n_post_post, b);
        cJSON_Delete(a);
        cJSON_Delete(b);
        return st;
    }
    return MTPLX_OK; /* ByteLevel and others add nothing to ids */
}

/* tokenizer_config.json's bos_token / eos_token: a string or {"content": ...}. */
static const char *cfg_token(const cJSON *cfg, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, k);
    if (cJSON_IsString(v)) return v->valuestring;
    return jstr(v, "content");
}

static mtplx_status parse_model(mtplx_tokenizer *t, const cJSON *m, const cJSON *added) {
    if (!cJSON_IsObject(m)) return JFAIL(MTPLX_ERR_FORMAT, "field \"model\": expected an object");
    const char *ty = jstr(m, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if (!ty) ty = merges ? "BPE" : "WordPiece";
    if (!strcmp(ty, "BPE")) t->model = TM_BPE;
    else if (!strcmp(ty, "WordPiece")) t->model = TM_WORDPIECE;
    else return JFAIL(MTPLX_ERR_UNSUPPORTED, "field \"model.type\": model \"%s\" is not supported", ty);
    if (!cJSON_IsObject(vocab))
        return JFAIL(MTPLX_ERR_FORMAT, "field \"model.vocab\": expected an object of piece: id");
    int32_t n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, vocab) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 1e8)
            return JFAIL(MTPLX_ERR_FORMAT, "field \"model.vocab\": id of \"%s\" is not a valid id",
                         x->string);
        if ((int32_t)x->valuedouble + 1 > n) n = (int32_t)x->valuedouble + 1;
    }
    cJSON_ArrayForEach(x, added) {
        double id = jnum(x, "id", -1);
        if (id < 0 || id > 1e8 || !jstr(x, "content"))
            return JFAIL(MTPLX_ERR_FORMAT, "field \"added_tokens\": entry without a valid id/content");
        if ((int32_t)id + 1 > n) n = (int32_t)id + 1;
    }
    MTPLX_TRY(tok_alloc_vocab(t, n));
    cJSON_ArrayForEach(x, vocab) tok_set_piece(t, (int32_t)x->valuedouble, x->string, strlen(x->string));
    t->added = calloc((size_t)cJSON_GetArraySize(added) + 1, sizeof *t->added);
    if (!t->added) return mtplx_fail(MTPLX_ERR_NOMEM, "added tokens");
    cJSON_ArrayForEach(x, added) {
        added_tok *a = &t->added[t->n_added++];
        a->id = (int32_t)jnum(x, "id", 0);
        a->s = mtplx_strdup(jstr(x, "content"));
        a->len = a->s ? strlen(a->s) : 0;
        a->special = jbool(x, "special", false);
        a->normalized = jbool(x, "normalized", !a->special);
        a->lstrip = jbool(x, "lstrip", false);
        a->rstrip = jbool(x, "rstrip", false);
        a->single_word = jbool(x, "single_word", false);
        if (!t->piece[a->id]) tok_set_piece(t, a->id, a->s, a->len);
        t->ttype[a->id] = a->special ? TT_CONTROL : TT_USER;
    }
    const char *unk = jstr(m, "unk_token");
    if (t->model == TM_WORDPIECE) {
        t->max_input_chars = (int)jnum(m, "max_input_chars_per_word", 100);
        const char *p = jstr(m, "continuing_subword_prefix");
        t->wp_prefix = mtplx_strdup(p ? p : "##");
        t->fuse_unk = false;
        if (unk) {
            const cJSON *u = cJSON_GetObjectItemCaseSensitive(vocab, unk);
            if (cJSON_IsNumber(u)) t->unk = (int32_t)u->valuedouble;
        }
        return MTPLX_OK;
    }
    t->byte_fallback = jbool(m, "byte_fallback", false);
    t->fuse_unk = jbool(m, "fuse_unk", false);
    t->ignore_merges = jbool(m, "ignore_merges", false);
    const char *cp = jstr(m, "continuing_subword_prefix"), *es = jstr(m, "end_of_word_suffix");
    if (cp && *cp) t->cont_prefix = mtplx_strdup(cp);
    if (es && *es) t->eow_suffix = mtplx_strdup(es);
    if (unk) {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(vocab, unk);
        if (cJSON_IsNumber(u)) t->unk = (int32_t)u->valuedouble;
    }
    /* Merges: pairs need the vocab map, so build a temporary one now. */
    strmap_init(&t->vocab, (size_t)n);
    if (!t->vocab.slot) return mtplx_fail(MTPLX_ERR_NOMEM, "vocab index");
    for (int32_t i = 0; i < n; i++)
        if (t->piece[i]) strmap_insert(t, &t->vocab, i);
    int nm = cJSON_GetArraySize(merges);
    if (!mergemap_init(&t->merges, (size_t)nm)) return mtplx_fail(MTPLX_ERR_NOMEM, "merges");
    tbuf cat = {0};
    int rank = 0;
    cJSON_ArrayForEach(x, merges) {
        const char *a, *b;
        size_t al, bl;
        if (cJSON_IsString(x)) {
            const char *sp = strchr(x->valuestring, ' ');
            if (!sp) {
                tbuf_free(&cat);
                return JFAIL(MTPLX_ERR_FORMAT, "field \"model.merges[%d]\": expected \"a b\"", rank);
            }
            a = x->valuestring, al = (size_t)(sp - a), b = sp + 1, bl = strlen(b);
        } else if (cJSON_IsArray(x) && cJSON_GetArraySize(x) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(x, 0)) && cJSON_IsString(cJSON_GetArrayItem(x, 1))) {
            a = cJSON_GetArrayItem(x, 0)->valuestring, al = strlen(a);
            b = cJSON_GetArrayItem(x, 1)->valuestring, bl = strlen(b);
        } else {
            tbuf_free(&cat);
            return JFAIL(MTPLX_ERR_FORMAT, "field \"model.merges[%d]\": expected \"a b\" or [a, b]", rank);
        }
        int32_t ia = tok_find(t, a, al), ib = tok_find(t, b, bl);
        cat.n = 0;
        tbuf_put(&cat, a, al);
        tbuf_put(&cat, b, bl);
        int32_t ic = cat.p ? tok_find(t, cat.p, cat.n) : -1;
        if (ia < 0 || ib < 0 || ic < 0) {
            tbuf_free(&cat);
            return JFAIL(MTPLX_ERR_FORMAT, "field \"model.merges[%d]\": a piece is not in the vocab",
                         rank);
        }
        mergemap_put(&t->merges, ia, ib, rank++, ic);
    }
    t->n_merges = rank;
    tbuf_free(&cat);
    free(t->vocab.slot);
    t->vocab.slot = NULL;
    return MTPLX_OK;
}

static mtplx_status from_json(mtplx_tokenizer *t, const cJSON *root, const cJSON *cfg) {
    if (!cJSON_IsObject(root)) return JFAIL(MTPLX_ERR_FORMAT, "expected a JSON object");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added && !cJSON_IsArray(added))
        return JFAIL(MTPLX_ERR_FORMAT, "field \"added_tokens\": expected an array");
    MTPLX_TRY(parse_model(t, cJSON_GetObjectItemCaseSensitive(root, "model"), added));
    steps n = {0}, p = {0}, d = {0};
    mtplx_status st = parse_norm(cJSON_GetObjectItemCaseSensitive(root, "normalizer"), &n);
    if (st == MTPLX_OK) st = parse_pre(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), &p);
    if (st == MTPLX_OK) st = parse_dec(cJSON_GetObjectItemCaseSensitive(root, "decoder"), &d);
    t->norm = n.v, t->n_norm = n.n, t->pre = p.v, t->n_pre = p.n, t->dec = d.v, t->n_dec = d.n;
    MTPLX_TRY(st);
    MTPLX_TRY(parse_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor")));

    const char *bos = cfg_token(cfg, "bos_token"), *eos = cfg_token(cfg, "eos_token");
    MTPLX_TRY(tok_finish(t, eos));
    if (bos) t->bos = tok_find(t, bos, strlen(bos));
    if (t->bos < 0 && t->n_post_pre) t->bos = t->post_pre[0];
    const char *unk = cfg_token(cfg, "unk_token"), *pad = cfg_token(cfg, "pad_token");
    if (t->unk < 0 && unk) t->unk = tok_find(t, unk, strlen(unk));
    if (pad) t->pad = tok_find(t, pad, strlen(pad));
    if (!t->has_post) {
        t->add_bos = jbool(cfg, "add_bos_token", false) && t->bos >= 0;
        t->add_eos = jbool(cfg, "add_eos_token", false) && t->eos >= 0;
    }
    for (int i = 0; i < t->n_pre; i++)
        if (t->pre[i].kind == P_METASPACE) t->add_space_prefix = t->pre[i].ib != PS_NEVER;
    return MTPLX_OK;
}

mtplx_status mtplx_tokenizer_from_json(const char *json, size_t len, const char *config_json,
                                       mtplx_tokenizer **out) {
    *out = NULL;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        const char *e = cJSON_GetErrorPtr();
        return JFAIL(MTPLX_ERR_FORMAT, "invalid JSON near byte %td", e ? e - json : (ptrdiff_t)0);
    }
    cJSON *cfg = config_json ? cJSON_Parse(config_json) : NULL;
    if (config_json && !cfg) {
        cJSON_Delete(root);
        return mtplx_fail(MTPLX_ERR_FORMAT, "tokenizer_config.json: invalid JSON");
    }
    mtplx_tokenizer *t = tok_new();
    mtplx_status st = t ? MTPLX_OK : mtplx_fail(MTPLX_ERR_NOMEM, "tokenizer");
    if (st == MTPLX_OK) st = from_json(t, root, cfg);
    if (st == MTPLX_OK) {
        t->hf_json = mtplx_strndup(json, len);
        t->hf_json_len = len;
        t->hf_config = config_json ? mtplx_strdup(config_json) : NULL;
        if (!t->hf_json) st = mtplx_fail(MTPLX_ERR_NOMEM, "tokenizer.json copy");
    }
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    if (st != MTPLX_OK) {
        mtplx_tokenizer_free(t);
        return st;
    }
    *out = t;
    return MTPLX_OK;
}
