/* tok_gguf.c: tokenizers from and to GGUF tokenizer.ggml.* keys (llama.cpp's
 * names), and from llama2.c's tokenizer.bin.
 *  - "gpt2": byte-level BPE with merges; the pre-tokenizer regexes are chosen
 *    by tokenizer.ggml.pre as llama.cpp does (qwen2, llama-bpe, deepseek-v3,
 *    gpt-2 / default).
 *  - "llama": SentencePiece BPE by score with byte fallback; llama2.c files
 *    become the same (spaces in pieces turned into U+2581).
 *  - "bert": WordPiece, pieces in llama.cpp's "phantom space" form.
 * A GGUF holding tokenizer.huggingface.json is loaded from that JSON. */
#include "tokenizer/tok_internal.h"

#define SPACE_MARK "\xe2\x96\x81" /* U+2581 */

static const char re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char re_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char re_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char re_ds3_a[] = "\\p{N}{1,3}";
static const char re_ds3_b[] = "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+";
static const char re_ds3_c[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

static tok_step *add_step(tok_step **v, int *n, int kind) {
    tok_step *nv = realloc(*v, (size_t)(*n + 1) * sizeof *nv);
    if (!nv) return NULL;
    *v = nv;
    tok_step *s = &nv[(*n)++];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    return s;
}

static mtplx_status add_split(mtplx_tokenizer *t, const char *re) {
    tok_step *s = add_step(&t->pre, &t->n_pre, P_SPLIT);
    if (!s) return mtplx_fail(MTPLX_ERR_NOMEM, "pre-tokenizer");
    char err[128];
    s->ia = SB_ISOLATED;
    s->a = mtplx_strdup(re);
    s->alen = strlen(re);
    s->re = tok_regex(re, strlen(re), err, sizeof err);
    if (!s->re) return mtplx_fail(MTPLX_ERR_INTERNAL, "built-in regex: %s", err);
    return MTPLX_OK;
}

static mtplx_status set_bytelevel_pipeline(mtplx_tokenizer *t, const char *pre) {
    const char *p = pre ? pre : "default";
    if (!strcmp(p, "qwen2") || !strcmp(p, "qwen35") || !strcmp(p, "deepseek-r1-qwen") ||
        !strcmp(p, "qwen3"))
        MTPLX_TRY(add_split(t, re_qwen2));
    else if (!strcmp(p, "llama-bpe") || !strcmp(p, "llama3") || !strcmp(p, "llama-v3") ||
             !strcmp(p, "smaug-bpe") || !strcmp(p, "falcon3") || !strcmp(p, "pixtral"))
        MTPLX_TRY(add_split(t, re_llama3));
    else if (!strcmp(p, "deepseek-v3")) {
        MTPLX_TRY(add_split(t, re_ds3_a));
        MTPLX_TRY(add_split(t, re_ds3_b));
        MTPLX_TRY(add_split(t, re_ds3_c));
    } else {
        if (strcmp(p, "gpt-2") && strcmp(p, "gpt2") && strcmp(p, "default"))
            mtplx_log(MTPLX_LOG_WARN, "tokenizer.ggml.pre \"%s\" is not known; using GPT-2's", p);
        MTPLX_TRY(add_split(t, re_gpt2));
    }
    tok_step *s = add_step(&t->pre, &t->n_pre, P_BYTELEVEL);
    tok_step *d = s ? add_step(&t->dec, &t->n_dec, D_BYTELEVEL) : NULL;
    if (!d) return mtplx_fail(MTPLX_ERR_NOMEM, "pipeline");
    t->gguf_pre = mtplx_strdup(p);
    return MTPLX_OK;
}

/* SentencePiece as HF's llama tokenizer.json spells it: Prepend + Replace,
 * decoded by Replace, ByteFallback, Fuse, Strip. */
static mtplx_status set_spm_pipeline(mtplx_tokenizer *t) {
    tok_step *s;
    if (t->add_space_prefix) {
        if (!(s = add_step(&t->norm, &t->n_norm, N_PREPEND))) goto oom;
        s->a = mtplx_strdup(SPACE_MARK), s->alen = 3;
    }
    if (!(s = add_step(&t->norm, &t->n_norm, N_REPLACE))) goto oom;
    s->a = mtplx_strdup(" "), s->alen = 1, s->b = mtplx_strdup(SPACE_MARK), s->blen = 3;
    if (!(s = add_step(&t->dec, &t->n_dec, D_REPLACE))) goto oom;
    s->a = mtplx_strdup(SPACE_MARK), s->alen = 3, s->b = mtplx_strdup(" "), s->blen = 1;
    if (!add_step(&t->dec, &t->n_dec, D_BYTEFALLBACK) || !add_step(&t->dec, &t->n_dec, D_FUSE))
        goto oom;
    if (t->add_space_prefix) {
        if (!(s = add_step(&t->dec, &t->n_dec, D_STRIP))) goto oom;
        s->a = mtplx_strdup(" "), s->alen = 1, s->ia = 1;
    }
    return MTPLX_OK;
oom:
    return mtplx_fail(MTPLX_ERR_NOMEM, "pipeline");
}

static mtplx_status set_bert_pipeline(mtplx_tokenizer *t) {
    tok_step *s = add_step(&t->norm, &t->n_norm, N_BERT);
    if (!s) return mtplx_fail(MTPLX_ERR_NOMEM, "pipeline");
    s->fa = s->fb = s->fc = s->fd = true;
    if (!add_step(&t->pre, &t->n_pre, P_BERT)) return mtplx_fail(MTPLX_ERR_NOMEM, "pipeline");
    if (!(s = add_step(&t->dec, &t->n_dec, D_WORDPIECE))) return mtplx_fail(MTPLX_ERR_NOMEM, "pipeline");
    s->a = mtplx_strdup("##"), s->alen = 2, s->fa = true;
    t->wp_prefix = mtplx_strdup("##");
    return MTPLX_OK;
}

/* Control and user-defined tokens are matched in text like HF added tokens. */
static mtplx_status added_from_types(mtplx_tokenizer *t) {
    t->added = calloc((size_t)t->n_vocab + 1, sizeof *t->added);
    if (!t->added) return mtplx_fail(MTPLX_ERR_NOMEM, "added tokens");
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int ty = t->ttype[i];
        if ((ty != TT_CONTROL && ty != TT_USER) || !t->piece[i] || !t->plen[i]) continue;
        added_tok *a = &t->added[t->n_added++];
        a->id = i;
        a->s = mtplx_strdup(t->piece[i]);
        a->len = t->plen[i];
        a->special = ty == TT_CONTROL;
    }
    return MTPLX_OK;
}

static void finish_specials(mtplx_tokenizer *t) {
    if (t->add_bos && t->bos >= 0) { /* expressed like HF's TemplateProcessing */
        t->post_pre = malloc(sizeof *t->post_pre);
        if (t->post_pre) t->post_pre[0] = t->bos, t->n_post_pre = 1;
    }
    if (t->add_eos && t->eos >= 0) {
        t->post_post = malloc(sizeof *t->post_post);
        if (t->post_post) t->post_post[0] = t->eos, t->n_post_post = 1;
    }
    t->has_post = true;
}

mtplx_status mtplx_tokenizer_from_gguf(const mtplx_gguf *g, mtplx_tokenizer **out) {
    *out = NULL;
    const char *hf = mtplx_gguf_get_str(g, MTPLX_KEY_HF_TOKENIZER_JSON);
    if (hf) {
        const mtplx_gguf_kv *kv = mtplx_gguf_get(g, MTPLX_KEY_HF_TOKENIZER_JSON);
        return mtplx_tokenizer_from_json(hf, (size_t)kv->v.str.len,
                                         mtplx_gguf_get_str(g, MTPLX_KEY_HF_TOKENIZER_CONFIG), out);
    }
    const char *model = mtplx_gguf_get_str(g, "tokenizer.ggml.model");
    const mtplx_gguf_kv *toks = mtplx_gguf_get(g, "tokenizer.ggml.tokens");
    if (!model) return mtplx_fail(MTPLX_ERR_FORMAT, "key tokenizer.ggml.model: missing");
    if (!toks || toks->type != GGUF_TYPE_ARRAY || toks->arr_type != GGUF_TYPE_STRING ||
        toks->arr_n == 0 || toks->arr_n > 100000000)
        return mtplx_fail(MTPLX_ERR_FORMAT, "key tokenizer.ggml.tokens: expected a non-empty string array");
    mtplx_tokenizer *t = tok_new();
    if (!t) return mtplx_fail(MTPLX_ERR_NOMEM, "tokenizer");
    t->src = mtplx_strdup(g->path ? g->path : "gguf");
    mtplx_status st = tok_alloc_vocab(t, (int32_t)toks->arr_n);
    const mtplx_gguf_str *ps = toks->arr_data;
    bool bert = !strcmp(model, "bert");
    for (int32_t i = 0; st == MTPLX_OK && i < t->n_vocab; i++) tok_set_piece(t, i, ps[i].data, ps[i].len);
    const mtplx_gguf_kv *types = mtplx_gguf_get(g, "tokenizer.ggml.token_type");
    if (st == MTPLX_OK && types && types->type == GGUF_TYPE_ARRAY && types->arr_n == toks->arr_n &&
        (types->arr_type == GGUF_TYPE_INT32 || types->arr_type == GGUF_TYPE_UINT32))
        for (int32_t i = 0; i < t->n_vocab; i++) {
            int32_t ty = ((const int32_t *)types->arr_data)[i];
            t->ttype[i] = (uint8_t)(ty >= 1 && ty <= 6 ? ty : TT_NORMAL);
        }
    const mtplx_gguf_kv *sc = mtplx_gguf_get(g, "tokenizer.ggml.scores");
    if (st == MTPLX_OK && sc && sc->type == GGUF_TYPE_ARRAY && sc->arr_type == GGUF_TYPE_FLOAT32 &&
        sc->arr_n == toks->arr_n) {
        t->score = malloc((size_t)t->n_vocab * sizeof *t->score);
        if (t->score) memcpy(t->score, sc->arr_data, (size_t)t->n_vocab * sizeof *t->score);
    }
    t->bos = (int32_t)mtplx_gguf_get_int(g, "tokenizer.ggml.bos_token_id", -1);
    t->eos = (int32_t)mtplx_gguf_get_int(g, "tokenizer.ggml.eos_token_id", -1);
    t->unk = (int32_t)mtplx_gguf_get_int(g, "tokenizer.ggml.unknown_token_id", -1);
    t->pad = (int32_t)mtplx_gguf_get_int(g, "tokenizer.ggml.padding_token_id", -1);
    if (t->bos >= t->n_vocab) t->bos = -1;
    if (t->eos >= t->n_vocab) t->eos = -1;
    if (t->unk >= t->n_vocab) t->unk = -1;
    if (st != MTPLX_OK) goto done;
    if (!strcmp(model, "gpt2")) {
        t->model = TM_BPE;
        t->add_bos = mtplx_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", false);
        st = set_bytelevel_pipeline(t, mtplx_gguf_get_str(g, "tokenizer.ggml.pre"));
    } else if (!strcmp(model, "llama")) {
        t->model = TM_SPM;
        t->byte_fallback = true;
        t->add_bos = mtplx_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", true);
        t->add_space_prefix = mtplx_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", true);
        st = set_spm_pipeline(t);
    } else if (bert) {
        t->model = TM_WORDPIECE;
        t->add_bos = true, t->add_eos = true;
        for (int32_t i = 0; i < t->n_vocab; i++) { /* phantom space form back to "##" form */
            const char *p = t->piece[i];
            if (t->ttype[i] == TT_CONTROL || !p) continue;
            char *np = NULL;
            if (!strncmp(p, SPACE_MARK, 3)) np = mtplx_strdup(p + 3);
            else if (asprintf(&np, "##%s", p) < 0) np = NULL;
            if (np) {
                tok_set_piece(t, i, np, strlen(np));
                free(np);
            }
        }
        int64_t cls = mtplx_gguf_get_int(g, "tokenizer.ggml.cls_token_id", t->bos);
        int64_t sep = mtplx_gguf_get_int(g, "tokenizer.ggml.seperator_token_id", t->eos);
        if (t->bos < 0) t->bos = (int32_t)cls;
        if (t->eos < 0) t->eos = (int32_t)sep;
        st = set_bert_pipeline(t);
    } else st = mtplx_fail(MTPLX_ERR_UNSUPPORTED, "key tokenizer.ggml.model: \"%s\" is not supported", model);
    t->add_bos = mtplx_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", t->add_bos);
    t->add_eos = mtplx_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", t->add_eos);
    if (st == MTPLX_OK) st = added_from_types(t);
    if (st == MTPLX_OK && t->model == TM_BPE) {
        const mtplx_gguf_kv *m = mtplx_gguf_get(g, "tokenizer.ggml.merges");
        if (!m || m->type != GGUF_TYPE_ARRAY || m->arr_type != GGUF_TYPE_STRING) {
            st = mtplx_fail(MTPLX_ERR_FORMAT, "key tokenizer.ggml.merges: expected a string array");
            goto done;
        }
        strmap_init(&t->vocab, (size_t)t->n_vocab);
        if (!t->vocab.slot || !mergemap_init(&t->merges, m->arr_n)) {
            st = mtplx_fail(MTPLX_ERR_NOMEM, "merges");
            goto done;
        }
        for (int32_t i = 0; i < t->n_vocab; i++) strmap_insert(t, &t->vocab, i);
        const mtplx_gguf_str *ms = m->arr_data;
        tbuf cat = {0};
        for (uint64_t r = 0; r < m->arr_n; r++) {
            const char *sp = ms[r].data ? strchr(ms[r].data, ' ') : NULL;
            if (!sp) {
                st = mtplx_fail(MTPLX_ERR_FORMAT, "key tokenizer.ggml.merges[%llu]: expected \"a b\"",
                                (unsigned long long)r);
                break;
            }
            size_t al = (size_t)(sp - ms[r].data), bl = ms[r].len - al - 1;
            cat.n = 0;
            tbuf_put(&cat, ms[r].data, al);
            tbuf_put(&cat, sp + 1, bl);
            int32_t a = tok_find(t, ms[r].data, al), b = tok_find(t, sp + 1, bl);
            int32_t c = cat.p ? tok_find(t, cat.p, cat.n) : -1;
            if (a >= 0 && b >= 0 && c >= 0) mergemap_put(&t->merges, a, b, (int32_t)r, c);
        }
        t->n_merges = (int32_t)m->arr_n;
        tbuf_free(&cat);
        free(t->vocab.slot);
        t->vocab.slot = NULL;
    }
    if (st == MTPLX_OK) {
        finish_specials(t);
        st = tok_finish(t, NULL);
    }
    if (st == MTPLX_OK) {
        int64_t eot = mtplx_gguf_get_int(g, "tokenizer.ggml.eot_token_id", -1);
        int64_t eom = mtplx_gguf_get_int(g, "tokenizer.ggml.eom_token_id", -1);
        if (eot >= 0 && eot < t->n_vocab) t->eog[eot] = 1;
        if (eom >= 0 && eom < t->n_vocab) t->eog[eom] = 1;
    }
done:
    if (st != MTPLX_OK) {
        mtplx_tokenizer_free(t);
        return st;
    }
    *out = t;
    return MTPLX_OK;
}

/* llama2.c tokenizer.bin: int32 max_token_length, then per token float score,
 * int32 len, len bytes; the vocab size is whatever the file holds. */
mtplx_status tok_load_llama2c(const char *path, mtplx_tokenizer **out) {
    *out = NULL;
    char *buf = NULL;
    size_t n = 0;
    MTPLX_TRY(mtplx_read_file(path, &buf, &n));
    mtplx_status st = MTPLX_OK;
    int32_t count = 0;
    size_t off = 4;
    if (n < 4) st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: not a tokenizer (too short for max_token_length)", path);
    while (st == MTPLX_OK && off < n) {
        int32_t len;
        if (off + 8 > n) {
            st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: token %d: truncated score/len", path, count);
            break;
        }
        memcpy(&len, buf + off + 4, 4);
        if (len < 0 || (size_t)len > n - off - 8) {
            st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: token %d: length %d runs past the end", path, count, len);
            break;
        }
        off += 8 + (size_t)len;
        count++;
    }
    if (st == MTPLX_OK && count < 3)
        st = mtplx_fail(MTPLX_ERR_FORMAT, "%s: only %d tokens (need <unk>, <s>, </s>)", path, count);
    mtplx_tokenizer *t = st == MTPLX_OK ? tok_new() : NULL;
    if (st == MTPLX_OK && !t) st = mtplx_fail(MTPLX_ERR_NOMEM, "tokenizer");
    if (st == MTPLX_OK) {
        t->src = mtplx_strdup(path);
        st = tok_alloc_vocab(t, count);
    }
    if (st == MTPLX_OK) t->score = malloc((size_t)count * sizeof *t->score);
    if (st == MTPLX_OK && !t->score) st = mtplx_fail(MTPLX_ERR_NOMEM, "scores");
    tbuf p = {0};
    off = 4;
    for (int32_t i = 0; st == MTPLX_OK && i < count; i++) {
        int32_t len;
        memcpy(&t->score[i], buf + off, 4);
        memcpy(&len, buf + off + 4, 4);
        const char *s = buf + off + 8;
        off += 8 + (size_t)len;
        p.n = 0;
        if (i == 0) tbuf_put(&p, "<unk>", 5), t->ttype[i] = TT_UNKNOWN;
        else if (i == 1) tbuf_put(&p, "<s>", 3), t->ttype[i] = TT_CONTROL;
        else if (i == 2) tbuf_put(&p, "</s>", 4), t->ttype[i] = TT_CONTROL;
        else {
            for (int32_t k = 0; k < len; k++) {
                if (s[k] == ' ') tbuf_put(&p, SPACE_MARK, 3);
                else tbuf_putc(&p, s[k]);
            }
            tbuf_put(&p, "", 0);
            if (len == 6 && !memcmp(s, "<0x", 3) && s[5] == '>') t->ttype[i] = TT_BYTE;
        }
        tok_set_piece(t, i, p.p, p.n);
    }
    tbuf_free(&p);
    free(buf);
    if (st == MTPLX_OK) {
        t->model = TM_SPM;
        t->unk = 0, t->bos = 1, t->eos = 2;
        t->add_bos = true, t->add_space_prefix = true, t->byte_fallback = true;
        t->gguf_pre = mtplx_strdup("default");
        st = set_spm_pipeline(t);
    }
    if (st == MTPLX_OK) st = added_from_types(t);
    if (st == MTPLX_OK) {
        finish_specials(t);
        st = tok_finish(t, NULL);
    }
    if (st != MTPLX_OK) {
        mtplx_tokenizer_free(t);
        return st;
    }
    *out = t;
    return MTPLX_OK;
}

/* ---------------- writing ---------------- */

static const char *pre_name(const mtplx_tokenizer *t) {
    if (t->gguf_pre) return t->gguf_pre;
    const char *name = "default";
    int n_split = 0;
    for (int i = 0; i < t->n_pre; i++) {
        const tok_step *s = &t->pre[i];
        if (s->kind == P_BYTELEVEL && s->fc) name = "gpt-2";
        if (s->kind != P_SPLIT || !s->a) continue;
        n_split++;
        if (!strcmp(s->a, re_qwen2)) name = "qwen2";
        else if (!strcmp(s->a, re_llama3)) name = "llama-bpe";
        else if (!strcmp(s->a, re_ds3_c) && n_split == 3) name = "deepseek-v3";
    }
    return name;
}

static bool is_bytelevel(const mtplx_tokenizer *t) {
    for (int i = 0; i < t->n_dec; i++)
        if (t->dec[i].kind == D_BYTELEVEL) return true;
    return false;
}

mtplx_status mtplx_tokenizer_to_gguf(const mtplx_tokenizer *t, mtplx_gguf *g) {
    if (!t || !g) return mtplx_fail(MTPLX_ERR_ARG, "mtplx_tokenizer_to_gguf: NULL argument");
    bool bl = t->model == TM_BPE && is_bytelevel(t);
    const char *model = t->model == TM_WORDPIECE ? "bert" : bl ? "gpt2" : "llama";
    MTPLX_TRY(mtplx_gguf_set_str(g, "tokenizer.ggml.model", model));
    MTPLX_TRY(mtplx_gguf_set_str(g, "tokenizer.ggml.pre", bl ? pre_name(t) : "default"));
    size_t n = (size_t)t->n_vocab;
    const char **pieces = malloc(n * sizeof *pieces);
    char **owned = calloc(n, sizeof *owned);
    int32_t *types = malloc(n * sizeof *types);
    float *scores = malloc(n * sizeof *scores);
    mtplx_status st = MTPLX_OK;
    if (!pieces || !owned || !types || !scores) st = mtplx_fail(MTPLX_ERR_NOMEM, "to_gguf");
    for (size_t i = 0; st == MTPLX_OK && i < n; i++) {
        pieces[i] = t->piece[i];
        types[i] = t->ttype[i];
        if (types[i] == TT_NORMAL && t->byte_id[0] >= 0 && t->plen[i] == 6 && !strncmp(t->piece[i], "<0x", 3))
            types[i] = TT_BYTE;
        scores[i] = t->score ? t->score[i] : 0.0f;
        if (t->model == TM_WORDPIECE && types[i] != TT_CONTROL) {
            const char *p = t->piece[i];
            if (!strncmp(p, "##", 2)) owned[i] = mtplx_strdup(p + 2);
            else if (asprintf(&owned[i], SPACE_MARK "%s", p) < 0) owned[i] = NULL;
            if (owned[i]) pieces[i] = owned[i];
        }
    }
    /* SPM from HF merges: score a piece by the rank of the merge that makes it */
    if (st == MTPLX_OK && !bl && t->model == TM_BPE) {
        for (size_t i = 0; i < n; i++) scores[i] = -1e9f;
        for (uint32_t k = 0; t->merges.key && k <= t->merges.mask; k++)
            if (t->merges.key[k] && -(float)t->merges.rank[k] > scores[t->merges.id[k]])
                scores[t->merges.id[k]] = -(float)t->merges.rank[k];
    }
    if (st == MTPLX_OK) st = mtplx_gguf_set_arr(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, pieces, n);
    if (st == MTPLX_OK) st = mtplx_gguf_set_arr(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n);
    if (st == MTPLX_OK && !bl) st = mtplx_gguf_set_arr(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, n);
    if (st == MTPLX_OK && bl) {
        /* merges back to "a b" strings in rank order */
        char **ms = calloc((size_t)t->n_merges + 1, sizeof *ms);
        int32_t nm = 0;
        if (!ms) st = mtplx_fail(MTPLX_ERR_NOMEM, "merges");
        for (uint32_t k = 0; ms && t->merges.key && k <= t->merges.mask; k++) {
            if (!t->merges.key[k]) continue;
            int32_t r = t->merges.rank[k];
            uint64_t key = t->merges.key[k] - 1;
            int32_t a = (int32_t)(key >> 32), b = (int32_t)(key & 0xffffffffu);
            if (r < 0 || r >= t->n_merges || ms[r]) continue;
            if (asprintf(&ms[r], "%s %s", t->piece[a], t->piece[b]) < 0) ms[r] = NULL;
        }
        for (int32_t r = 0; ms && r < t->n_merges; r++)
            if (ms[r]) ms[nm++] = ms[r];
        if (st == MTPLX_OK)
            st = mtplx_gguf_set_arr(g, "tokenizer.ggml.merges", GGUF_TYPE_STRING, ms, (uint64_t)nm);
        for (int32_t r = 0; ms && r < nm; r++) free(ms[r]);
        free(ms);
    }
    bool add_bos = t->has_post ? (t->n_post_pre > 0) : t->add_bos;
    bool add_eos = t->has_post ? (t->n_post_post > 0) : t->add_eos;
    if (st == MTPLX_OK && t->bos >= 0) st = mtplx_gguf_set_u32(g, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos);
    if (st == MTPLX_OK && t->eos >= 0) st = mtplx_gguf_set_u32(g, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos);
    if (st == MTPLX_OK && t->unk >= 0) st = mtplx_gguf_set_u32(g, "tokenizer.ggml.unknown_token_id", (uint32_t)t->unk);
    if (st == MTPLX_OK && t->pad >= 0) st = mtplx_gguf_set_u32(g, "tokenizer.ggml.padding_token_id", (uint32_t)t->pad);
    if (st == MTPLX_OK) st = mtplx_gguf_set_bool(g, "tokenizer.ggml.add_bos_token", add_bos);
    if (st == MTPLX_OK) st = mtplx_gguf_set_bool(g, "tokenizer.ggml.add_eos_token", add_eos);
    if (st == MTPLX_OK && t->model == TM_SPM)
        st = mtplx_gguf_set_bool(g, "tokenizer.ggml.add_space_prefix", t->add_space_prefix);
    if (st == MTPLX_OK && t->hf_json)
        st = mtplx_gguf_set_str(g, MTPLX_KEY_HF_TOKENIZER_JSON, t->hf_json);
    if (st == MTPLX_OK && t->hf_config)
        st = mtplx_gguf_set_str(g, MTPLX_KEY_HF_TOKENIZER_CONFIG, t->hf_config);
    for (size_t i = 0; owned && i < n; i++) free(owned[i]);
    free(owned);
    free(pieces);
    free(types);
    free(scores);
    return st;
}
