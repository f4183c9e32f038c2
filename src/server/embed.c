/* embed.c: /v1/embeddings and /v1/rerank (+ /rerank) over the optional
 * --embedding-model / --reranker-model, through mtplx_embed / mtplx_rerank.
 * Those come with issue 7; until they are linked in, the weak references
 * below are NULL and the endpoints answer 400 saying so. One request at a
 * time per model (aux_mu): embedding runs on the HTTP thread with the
 * model's own context. */
#include "server/srv.h"
#include "core/core.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern __typeof__(mtplx_model_roles) mtplx_model_roles __attribute__((weak));
extern __typeof__(mtplx_embed_dim) mtplx_embed_dim __attribute__((weak));
extern __typeof__(mtplx_embed) mtplx_embed __attribute__((weak));
extern __typeof__(mtplx_rerank) mtplx_rerank __attribute__((weak));

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
        if (!mtplx_model_roles || !cand[i].c || !(mtplx_model_roles(cand[i].m) & role)) {
            srv_error(rep, 400, "invalid_request_error", "model", "model `%s` cannot %s%s", cand[i].id,
                      role == MTPLX_ROLE_EMBED ? "embed" : "rerank",
                      mtplx_model_roles ? "" : " (embeddings are not in this build)");
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

/* Strings of a field that is a string or an array of strings. */
static const char **strings(cJSON *f, int *n, const char *name, srv_reply *rep) {
    *n = 0;
    if (cJSON_IsString(f)) {
        const char **a = malloc(sizeof *a);
        if (a) a[(*n)++] = f->valuestring;
        return a;
    }
    if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) == 0) {
        srv_error(rep, 400, "invalid_request_error", name, "%s: expected a string or a non-empty array of strings", name);
        return NULL;
    }
    const char **a = calloc((size_t)cJSON_GetArraySize(f), sizeof *a);
    cJSON *e;
    cJSON_ArrayForEach(e, f) {
        if (!cJSON_IsString(e)) {
            srv_error(rep, 400, "invalid_request_error", name, "%s[%d]: expected a string", name, *n);
            free(a);
            return NULL;
        }
        if (a) a[(*n)++] = e->valuestring;
    }
    return a;
}

void srv_embeddings(srv *s, const char *body, size_t n, srv_reply *rep) {
    cJSON *root = cJSON_ParseWithLength(body, n);
    const char **texts = NULL;
    float *vec = NULL;
    if (!cJSON_IsObject(root)) {
        srv_error(rep, 400, "invalid_request_error", NULL, "the body is not a JSON object");
        goto done;
    }
    mtplx_model *m;
    mtplx_ctx *c;
    const char *id;
    if (!pick(s, root, MTPLX_ROLE_EMBED, &m, &c, &id, rep)) goto done;
    int nt;
    texts = strings(cJSON_GetObjectItemCaseSensitive(root, "input"), &nt, "input", rep);
    if (!texts) goto done;
    int32_t dim = mtplx_embed_dim(m), ntok = 0;
    vec = malloc((size_t)nt * (size_t)dim * sizeof(float));
    if (!vec) {
        srv_error(rep, 503, "server_error", NULL, "out of memory");
        goto done;
    }
    pthread_mutex_lock(&s->aux_mu);
    mtplx_status st = mtplx_embed(c, texts, nt, false, vec, &ntok);
    pthread_mutex_unlock(&s->aux_mu);
    if (st != MTPLX_OK) {
        srv_error(rep, 400, "invalid_request_error", "input", "input: %s", mtplx_last_error());
        goto done;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < nt; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "object", "embedding");
        cJSON_AddNumberToObject(e, "index", i);
        cJSON *v = cJSON_AddArrayToObject(e, "embedding");
        for (int32_t j = 0; j < dim; j++) cJSON_AddItemToArray(v, cJSON_CreateNumber(vec[(size_t)i * dim + j]));
        cJSON_AddItemToArray(d, e);
    }
    cJSON_AddStringToObject(o, "model", id);
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", ntok);
    cJSON_AddNumberToObject(u, "total_tokens", ntok);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (js) sb_puts(&rep->body, js);
    free(js);
    rep->status = 200;
    rep->ctype = "application/json";
done:
    free(vec);
    free(texts);
    cJSON_Delete(root);
}

void srv_rerank(srv *s, const char *body, size_t n, srv_reply *rep) {
    cJSON *root = cJSON_ParseWithLength(body, n);
    const char **docs = NULL;
    float *sc = NULL;
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
    int nd;
    docs = strings(cJSON_GetObjectItemCaseSensitive(root, "documents"), &nd, "documents", rep);
    if (!docs) goto done;
    cJSON *tn = cJSON_GetObjectItemCaseSensitive(root, "top_n");
    int top_n = cJSON_IsNumber(tn) && tn->valueint > 0 && tn->valueint < nd ? tn->valueint : nd;
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
        cJSON *doc = cJSON_AddObjectToObject(e, "document");
        cJSON_AddStringToObject(doc, "text", docs[best]);
        cJSON_AddItemToArray(res, e);
    }
    free(used);
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", ntok);
    cJSON_AddNumberToObject(u, "total_tokens", ntok);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (js) sb_puts(&rep->body, js);
    free(js);
    rep->status = 200;
    rep->ctype = "application/json";
done:
    free(sc);
    free(docs);
    cJSON_Delete(root);
}
