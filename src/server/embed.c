/* embed.c: /v1/embeddings and /v1/rerank (+ /rerank) over the optional
 * --embedding-model / --reranker-model, through mtplx_embed / mtplx_rerank.
 * One request at a time per model (aux_mu): embedding runs on the HTTP
 * thread with the model's own context (F32 KV: an F16 cache moves Qwen3
 * embeddings by ~2e-4). Inputs: strings, or token-id arrays (decoded to text
 * with the model's tokenizer, then embedded); `dimensions` truncates and
 * renormalises (Matryoshka); `encoding_format` float or base64 (little-endian
 * float32, as OpenAI sends). Rerank answers in the Jina / Cohere shape. */
#include "server/srv.h"
#include "core/core.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUTS 2048

static void base_id(const char *path, char *out, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b && b[1] ? b + 1 : path;
    snprintf(out, cap, "%s", b);
    char *dot = strrchr(out, '.');
    if (dot && dot != out && !strcmp(dot, ".gguf")) *dot = 0;
}

static mtplx_status load_aux(const char *path, mtplx_model **m, mtplx_ctx **c, char *id, size_t cap) {
    if (!path) return MTPLX_OK;
    mtplx_model_params mp = mtplx_model_default_params();
    mp.load_mtp = false;
    MTPLX_TRY(mtplx_model_load(path, &mp, m));
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_threads = 1;
    cp.kv_f32 = true;
    MTPLX_TRY(mtplx_ctx_new(*m, &cp, c));
    base_id(path, id, cap);
    return MTPLX_OK;
}

mtplx_status srv_aux_load(srv *s) {
    MTPLX_TRY(load_aux(s->p.embedding_model, &s->emb_model, &s->emb_ctx, s->emb_id, sizeof s->emb_id));
    MTPLX_TRY(load_aux(s->p.reranker_model, &s->rr_model, &s->rr_ctx, s->rr_id, sizeof s->rr_id));
    return MTPLX_OK;
}

void srv_aux_free(srv *s) {
    mtplx_ctx_free(s->emb_ctx);
    mtplx_ctx_free(s->rr_ctx);
    mtplx_model_free(s->emb_model);
    mtplx_model_free(s->rr_model);
}

/* The model a request names, which must be able to play role. */
static bool pick(srv *s, cJSON *root, int role, mtplx_model **m, mtplx_ctx **c, const char **id,
                 srv_reply *rep) {
    cJSON *mf = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *want = cJSON_IsString(mf) ? mf->valuestring : NULL;
    struct { mtplx_model *m; mtplx_ctx *c; const char *id; } cand[3] = {
        {s->emb_model, s->emb_ctx, s->emb_id}, {s->rr_model, s->rr_ctx, s->rr_id}, {s->model, NULL, s->model_id}};
    for (int i = 0; i < 3; i++) {
        if (!cand[i].m) continue;
        if (want && want[0] && strcmp(want, cand[i].id)) continue;
        if (!want || !want[0]) {
            /* no model named: the one loaded for this role */
            if ((role == MTPLX_ROLE_EMBED && i != 0) || (role == MTPLX_ROLE_RERANK && i != 1)) continue;
        }
        if (!cand[i].c || !(mtplx_model_roles(cand[i].m) & role)) {
            srv_error(rep, 400, "invalid_request_error", "model", "model `%s` cannot %s", cand[i].id,
                      role == MTPLX_ROLE_EMBED ? "embed" : "rerank");
            return false;
        }
        *m = cand[i].m;
        *c = cand[i].c;
        *id = cand[i].id;
        return true;
    }
    if (want && want[0]) {
        srv_error(rep, 404, "invalid_request_error", "model", "The model `%s` does not exist", want);
        return false;
    }
    srv_error(rep, 400, "invalid_request_error", "model", "model `%s` cannot %s (start the server with %s)",
              s->model_id, role == MTPLX_ROLE_EMBED ? "embed" : "rerank",
              role == MTPLX_ROLE_EMBED ? "--embedding-model" : "--reranker-model");
    return false;
}

/* The texts of a field: a string, an array of strings, an array of token
 * ids, an array of token-id arrays, or (with objects) {"text": ...} items.
 * Token ids are decoded with tok; decoded texts are owned by *owned. */
static const char **strings(cJSON *f, int *n, const char *name, const mtplx_tokenizer *tok,
                            bool objects, char ***owned, srv_reply *rep) {
    *n = 0;
    *owned = NULL;
    if (cJSON_IsString(f)) {
        const char **a = malloc(sizeof *a);
        if (a) a[(*n)++] = f->valuestring;
        return a;
    }
    int cnt = cJSON_IsArray(f) ? cJSON_GetArraySize(f) : 0;
    if (cnt == 0) {
        srv_error(rep, 400, "invalid_request_error", name,
                  "%s: expected a string or a non-empty array of strings or token ids", name);
        return NULL;
    }
    if (cnt > MAX_INPUTS) {
        srv_error(rep, 400, "invalid_request_error", name, "%s: %d items, at most %d per request",
                  name, cnt, MAX_INPUTS);
        return NULL;
    }
    /* one token-id array is one input */
    bool ids_one = cJSON_IsNumber(cJSON_GetArrayItem(f, 0));
    int items = ids_one ? 1 : cnt;
    const char **a = calloc((size_t)items, sizeof *a);
    char **own = calloc((size_t)items, sizeof *own);
    if (!a || !own) {
        free(a);
        free(own);
        srv_error(rep, 503, "server_error", NULL, "out of memory");
        return NULL;
    }
    for (int i = 0; i < items; i++) {
        cJSON *e = ids_one ? f : cJSON_GetArrayItem(f, i);
        if (objects && cJSON_IsObject(e)) e = cJSON_GetObjectItemCaseSensitive(e, "text");
        if (cJSON_IsString(e)) {
            a[i] = e->valuestring;
            continue;
        }
        int nid = cJSON_IsArray(e) ? cJSON_GetArraySize(e) : 0;
        int32_t *ids = nid > 0 ? malloc((size_t)nid * sizeof *ids) : NULL;
        bool ok = ids != NULL;
        for (int j = 0; ok && j < nid; j++) {
            cJSON *x = cJSON_GetArrayItem(e, j);
            ok = cJSON_IsNumber(x) && x->valuedouble >= 0 &&
                 x->valuedouble < mtplx_tokenizer_vocab_size(tok) && x->valuedouble == (int32_t)x->valuedouble;
            if (ok) ids[j] = (int32_t)x->valuedouble;
        }
        size_t len;
        if (ok) ok = mtplx_detokenize(tok, ids, (size_t)nid, false, &own[i], &len) == MTPLX_OK;
        free(ids);
        if (!ok) {
            if (ids_one) srv_error(rep, 400, "invalid_request_error", name, "%s: expected token ids in [0, %d)",
                                   name, mtplx_tokenizer_vocab_size(tok));
            else srv_error(rep, 400, "invalid_request_error", name,
                           "%s[%d]: expected a string%s or an array of token ids", name, i,
                           objects ? ", an object with \"text\"" : "");
            for (int k = 0; k <= i; k++) free(own[k]);
            free(own);
            free(a);
            return NULL;
        }
        a[i] = own[i];
    }
    *n = items;
    *owned = own;
    return a;
}

static void free_owned(char **own, int n) {
    if (!own) return;
    for (int i = 0; i < n; i++) free(own[i]);
    free(own);
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* base64 of n little-endian float32 values (x86 is little-endian). */
static char *base64_floats(const float *v, int32_t n) {
    const unsigned char *p = (const unsigned char *)v;
    size_t len = (size_t)n * 4, o = 0;
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out) return NULL;
    for (size_t i = 0; i < len; i += 3) {
        unsigned x = (unsigned)p[i] << 16 | (i + 1 < len ? (unsigned)p[i + 1] << 8 : 0) |
                     (i + 2 < len ? p[i + 2] : 0);
        out[o++] = b64[x >> 18 & 63];
        out[o++] = b64[x >> 12 & 63];
        out[o++] = i + 1 < len ? b64[x >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? b64[x & 63] : '=';
    }
    out[o] = 0;
    return out;
}

/* Finish an answer: usage (input tokens), then the JSON body (takes o). */
static void reply_json(cJSON *o, int32_t ntok, srv_reply *rep) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", ntok);
    cJSON_AddNumberToObject(u, "total_tokens", ntok);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (js) sb_puts(&rep->body, js);
    free(js);
    rep->status = 200;
    rep->ctype = "application/json";
}

void srv_embeddings(srv *s, const char *body, size_t n, srv_reply *rep) {
    cJSON *root = cJSON_ParseWithLength(body, n);
    const char **texts = NULL;
    char **owned = NULL;
    float *vec = NULL;
    int nt = 0;
    if (!cJSON_IsObject(root)) {
        srv_error(rep, 400, "invalid_request_error", NULL, "the body is not a JSON object");
        goto done;
    }
    mtplx_model *m;
    mtplx_ctx *c;
    const char *id;
    if (!pick(s, root, MTPLX_ROLE_EMBED, &m, &c, &id, rep)) goto done;
    int32_t dim = mtplx_embed_dim(m), out_dim = dim, ntok = 0;
    cJSON *dm = cJSON_GetObjectItemCaseSensitive(root, "dimensions");
    if (dm && !cJSON_IsNull(dm)) {
        if (!cJSON_IsNumber(dm) || dm->valuedouble != (int)dm->valuedouble || dm->valueint < 1 ||
            dm->valueint > dim) {
            srv_error(rep, 400, "invalid_request_error", "dimensions",
                      "dimensions: expected an integer in [1, %d]", dim);
            goto done;
        }
        out_dim = dm->valueint;
    }
    cJSON *ef = cJSON_GetObjectItemCaseSensitive(root, "encoding_format");
    bool b64out = false;
    if (ef && !cJSON_IsNull(ef)) {
        if (!cJSON_IsString(ef) || (strcmp(ef->valuestring, "float") && strcmp(ef->valuestring, "base64"))) {
            srv_error(rep, 400, "invalid_request_error", "encoding_format",
                      "encoding_format: expected \"float\" or \"base64\"");
            goto done;
        }
        b64out = !strcmp(ef->valuestring, "base64");
    }
    /* extension: "input_type": "query" applies the model's query instruction */
    cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "input_type");
    bool is_query = cJSON_IsString(it) && !strcmp(it->valuestring, "query");
    texts = strings(cJSON_GetObjectItemCaseSensitive(root, "input"), &nt, "input",
                    mtplx_model_tokenizer(m), false, &owned, rep);
    if (!texts) goto done;
    for (int i = 0; i < nt; i++)
        if (!texts[i][0]) {
            srv_error(rep, 400, "invalid_request_error", "input", "input[%d]: empty text", i);
            goto done;
        }
    vec = malloc((size_t)nt * (size_t)dim * sizeof(float));
    if (!vec) {
        srv_error(rep, 503, "server_error", NULL, "out of memory");
        goto done;
    }
    pthread_mutex_lock(&s->aux_mu);
    mtplx_status st = mtplx_embed(c, texts, nt, is_query, vec, &ntok);
    pthread_mutex_unlock(&s->aux_mu);
    if (st != MTPLX_OK) {
        srv_error(rep, 400, "invalid_request_error", "input", "input: %s", mtplx_last_error());
        goto done;
    }
    if (out_dim < dim) mtplx_embed_truncate(vec, nt, dim, out_dim, true);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < nt; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "object", "embedding");
        cJSON_AddNumberToObject(e, "index", i);
        if (b64out) {
            char *enc = base64_floats(vec + (size_t)i * out_dim, out_dim);
            cJSON_AddStringToObject(e, "embedding", enc ? enc : "");
            free(enc);
        } else {
            cJSON *v = cJSON_AddArrayToObject(e, "embedding");
            for (int32_t j = 0; j < out_dim; j++)
                cJSON_AddItemToArray(v, cJSON_CreateNumber(vec[(size_t)i * out_dim + j]));
        }
        cJSON_AddItemToArray(d, e);
    }
    cJSON_AddStringToObject(o, "model", id);
    reply_json(o, ntok, rep);
done:
    free(vec);
    free(texts);
    free_owned(owned, nt);
    cJSON_Delete(root);
}

void srv_rerank(srv *s, const char *body, size_t n, srv_reply *rep) {
    cJSON *root = cJSON_ParseWithLength(body, n);
    const char **docs = NULL;
    char **owned = NULL;
    float *sc = NULL;
    int nd = 0;
    if (!cJSON_IsObject(root)) {
        srv_error(rep, 400, "invalid_request_error", NULL, "the body is not a JSON object");
        goto done;
    }
    mtplx_model *m;
    mtplx_ctx *c;
    const char *id;
    if (!pick(s, root, MTPLX_ROLE_RERANK, &m, &c, &id, rep)) goto done;
    cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "query");
    if (!cJSON_IsString(q)) {
        srv_error(rep, 400, "invalid_request_error", "query", "query: expected a string");
        goto done;
    }
    docs = strings(cJSON_GetObjectItemCaseSensitive(root, "documents"), &nd, "documents",
                   mtplx_model_tokenizer(m), true, &owned, rep);
    if (!docs) goto done;
    cJSON *tn = cJSON_GetObjectItemCaseSensitive(root, "top_n");
    if (tn && !cJSON_IsNull(tn) && (!cJSON_IsNumber(tn) || tn->valueint < 1)) {
        srv_error(rep, 400, "invalid_request_error", "top_n", "top_n: expected a positive integer");
        goto done;
    }
    int top_n = cJSON_IsNumber(tn) && tn->valueint < nd ? tn->valueint : nd;
    cJSON *rd = cJSON_GetObjectItemCaseSensitive(root, "return_documents");
    bool return_docs = !rd || cJSON_IsNull(rd) || cJSON_IsTrue(rd);
    sc = malloc((size_t)nd * sizeof *sc);
    int32_t ntok = 0;
    if (!sc) {
        srv_error(rep, 503, "server_error", NULL, "out of memory");
        goto done;
    }
    pthread_mutex_lock(&s->aux_mu);
    mtplx_status st = mtplx_rerank(c, q->valuestring, docs, nd, sc, &ntok);
    pthread_mutex_unlock(&s->aux_mu);
    if (st != MTPLX_OK) {
        srv_error(rep, 400, "invalid_request_error", "documents", "documents: %s", mtplx_last_error());
        goto done;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", id);
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *res = cJSON_AddArrayToObject(o, "results");
    bool *used = calloc((size_t)nd, 1);
    for (int k = 0; k < top_n && used; k++) {
        int best = -1;
        for (int i = 0; i < nd; i++)
            if (!used[i] && (best < 0 || sc[i] > sc[best])) best = i;
        used[best] = true;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "index", best);
        cJSON_AddNumberToObject(e, "relevance_score", sc[best]);
        if (return_docs) {
            cJSON *doc = cJSON_AddObjectToObject(e, "document");
            cJSON_AddStringToObject(doc, "text", docs[best]);
        }
        cJSON_AddItemToArray(res, e);
    }
    free(used);
    reply_json(o, ntok, rep);
done:
    free(sc);
    free(docs);
    free_owned(owned, nd);
    cJSON_Delete(root);
}
