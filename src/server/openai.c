/* openai.c: the OpenAI request bodies (chat/completions, completions) turned
 * into a srv_req, and the non-stream answers. Every field is checked and a
 * bad one is named in a 400 ("messages[1].content: expected ..."). Prompts
 * are rendered with the chat template (--chat-template FILE, else the
 * model's, else the ChatML fallback below) and tokenized under the server's
 * tokenizer mutex. Not here: n > 1, images / audio. */
#include "server/srv.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---------------- field checks ---------------- */

static cJSON *field(cJSON *o, const char *name) {
    cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNull(f) ? NULL : f;
}

static bool get_num(cJSON *o, const char *name, double lo, double hi, double *out, srv_reply *rep) {
    cJSON *f = field(o, name);
    if (!f) return true;
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble)) {
        srv_error(rep, 400, "invalid_request_error", name, "%s: expected a number", name);
        return false;
    }
    if (f->valuedouble < lo || f->valuedouble > hi) {
        srv_error(rep, 400, "invalid_request_error", name, "%s: %g is out of range [%g, %g]", name,
                  f->valuedouble, lo, hi);
        return false;
    }
    *out = f->valuedouble;
    return true;
}

static bool get_int(cJSON *o, const char *name, double lo, double hi, long *out, srv_reply *rep) {
    cJSON *f = field(o, name);
    if (!f) return true;
    if (!cJSON_IsNumber(f) || f->valuedouble != floor(f->valuedouble)) {
        srv_error(rep, 400, "invalid_request_error", name, "%s: expected an integer", name);
        return false;
    }
    double v;
    if (!get_num(o, name, lo, hi, &v, rep)) return false;
    *out = (long)v;
    return true;
}

static bool get_bool(cJSON *o, const char *name, bool *out, srv_reply *rep) {
    cJSON *f = field(o, name);
    if (!f) return true;
    if (!cJSON_IsBool(f)) {
        srv_error(rep, 400, "invalid_request_error", name, "%s: expected a boolean", name);
        return false;
    }
    *out = cJSON_IsTrue(f);
    return true;
}

static bool check_model(srv *s, cJSON *root, srv_reply *rep) {
    cJSON *m = field(root, "model");
    if (!m) return true;
    if (!cJSON_IsString(m)) {
        srv_error(rep, 400, "invalid_request_error", "model", "model: expected a string");
        return false;
    }
    if (!m->valuestring[0] || !strcmp(m->valuestring, s->model_id) ||
        !strcmp(m->valuestring, s->p.model_path))
        return true;
    srv_error(rep, 404, "invalid_request_error", "model", "The model `%s` does not exist (this server has `%s`)",
              m->valuestring, s->model_id);
    return false;
}

/* Sampling fields shared by both endpoints. */
static bool parse_sampling(srv *s, cJSON *root, srv_req *r, srv_reply *rep) {
    mtplx_gen_params *gp = &r->gp;
    double v;
    long iv;
    gp->sampling = mtplx_sampler_default_params();
    v = gp->sampling.temperature;
    if (!get_num(root, "temperature", 0, 2, &v, rep)) return false;
    gp->sampling.temperature = (float)v;
    v = 1.0;
    if (!get_num(root, "top_p", 0, 1, &v, rep)) return false;
    if (field(root, "top_p") && v <= 0) {
        srv_error(rep, 400, "invalid_request_error", "top_p", "top_p: must be greater than 0");
        return false;
    }
    if (field(root, "top_p")) gp->sampling.top_p = (float)v;
    iv = gp->sampling.top_k;
    if (!get_int(root, "top_k", 0, 1 << 20, &iv, rep)) return false;
    gp->sampling.top_k = (int32_t)iv;
    v = gp->sampling.min_p;
    if (!get_num(root, "min_p", 0, 1, &v, rep)) return false;
    gp->sampling.min_p = (float)v;
    v = 0;
    if (!get_num(root, "presence_penalty", -2, 2, &v, rep)) return false;
    gp->sampling.presence_penalty = (float)v;
    v = 0;
    if (!get_num(root, "frequency_penalty", -2, 2, &v, rep)) return false;
    gp->sampling.frequency_penalty = (float)v;
    v = gp->sampling.repeat_penalty;
    if (!get_num(root, "repetition_penalty", 0.01, 100, &v, rep)) return false;
    gp->sampling.repeat_penalty = (float)v;
    double seed = -1;
    if (!get_num(root, "seed", -9.3e18, 9.3e18, &seed, rep)) return false;
    if (field(root, "seed") && field(root, "seed")->valuedouble != floor(seed)) {
        srv_error(rep, 400, "invalid_request_error", "seed", "seed: expected an integer");
        return false;
    }
    if (field(root, "seed")) gp->sampling.seed = (uint64_t)(int64_t)seed;
    else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        gp->sampling.seed = (uint64_t)ts.tv_nsec * 6364136223846793005ull ^ (uint64_t)ts.tv_sec;
    }
    if (!get_bool(root, "ignore_eos", &gp->ignore_eos, rep)) return false;
    iv = s->draft_depth;
    if (!get_int(root, "draft_depth", -1, MTPLX_MAX_DRAFT, &iv, rep)) return false;
    gp->draft_depth = (int32_t)iv;
    r->depth_asked = field(root, "draft_depth") != NULL;
    gp->adaptive_depth = s->p.adaptive_depth;
    gp->draft_vocab = s->p.draft_vocab;
    mtplx_model_info info;
    mtplx_model_get_info(s->model, &info);
    if (gp->draft_depth > 0 && info.n_mtp == 0) gp->draft_depth = 0;
    long n = 1;
    if (!get_int(root, "n", 1, 128, &n, rep)) return false;
    if (n != 1) {
        srv_error(rep, 400, "invalid_request_error", "n", "n: only n = 1 is supported");
        return false;
    }
    return true;
}

static bool parse_stop(srv *s, cJSON *root, srv_req *r, srv_reply *rep) {
    cJSON *st = field(root, "stop");
    int cap = 17;
    r->stops = calloc((size_t)cap, sizeof *r->stops);
    if (!r->stops) {
        srv_error(rep, 503, "server_error", NULL, "out of memory");
        return false;
    }
    if (st) {
        if (cJSON_IsString(st)) {
            if (st->valuestring[0]) r->stops[r->n_stops++] = strdup(st->valuestring);
        } else if (cJSON_IsArray(st)) {
            int i = 0;
            cJSON *e;
            cJSON_ArrayForEach(e, st) {
                if (!cJSON_IsString(e)) {
                    srv_error(rep, 400, "invalid_request_error", "stop", "stop[%d]: expected a string", i);
                    return false;
                }
                if (r->n_stops >= cap - 1) {
                    srv_error(rep, 400, "invalid_request_error", "stop", "stop: at most %d strings", cap - 1);
                    return false;
                }
                if (e->valuestring[0]) r->stops[r->n_stops++] = strdup(e->valuestring);
                i++;
            }
        } else {
            srv_error(rep, 400, "invalid_request_error", "stop", "stop: expected a string or an array of strings");
            return false;
        }
    }
    if (s && s->tmpl_chatml) r->stops[r->n_stops++] = strdup("<|im_end|>");
    for (int i = 0; i < r->n_stops; i++) {
        if (!r->stops[i]) return false;
        size_t L = strlen(r->stops[i]);
        if (L > r->max_stop) r->max_stop = L;
    }
    return true;
}

static bool tokenize(srv *s, const char *text, bool add_special, srv_req *r, srv_reply *rep) {
    pthread_mutex_lock(&s->tok_mu);
    size_t n = 0;
    mtplx_status st = mtplx_tokenize(s->tok, text, strlen(text), add_special, true, &r->prompt, &n);
    pthread_mutex_unlock(&s->tok_mu);
    if (st != MTPLX_OK) {
        srv_error(rep, 400, "invalid_request_error", NULL, "cannot tokenize the prompt: %s", mtplx_last_error());
        return false;
    }
    r->n_prompt = (int32_t)n;
    return true;
}

static bool check_length(srv *s, srv_req *r, const char *param, srv_reply *rep) {
    if (r->n_prompt <= 0) {
        int32_t bos = mtplx_token_bos(s->tok);
        if (bos < 0) bos = mtplx_token_eos(s->tok);
        free(r->prompt);
        r->prompt = malloc(sizeof(int32_t));
        if (bos < 0 || !r->prompt) {
            srv_error(rep, 400, "invalid_request_error", param, "%s: the prompt is empty", param);
            return false;
        }
        r->prompt[0] = bos;
        r->n_prompt = 1;
    }
    if (r->n_prompt >= s->n_ctx) {
        srv_error(rep, 400, "invalid_request_error", param, "prompt of %d tokens exceeds the context of %d",
                  r->n_prompt, s->n_ctx);
        cJSON *e = NULL;
        (void)e;
        return false;
    }
    return true;
}

/* ---------------- chat messages ---------------- */

/* messages[] as the template wants them: content a string, arguments objects. */
static cJSON *normalize_messages(cJSON *msgs, srv_reply *rep) {
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
        srv_error(rep, 400, "invalid_request_error", "messages", "messages: expected a non-empty array");
        return NULL;
    }
    cJSON *out = cJSON_CreateArray();
    int i = 0;
    cJSON *m;
    char p[64];
    cJSON_ArrayForEach(m, msgs) {
        if (!cJSON_IsObject(m)) {
            snprintf(p, sizeof p, "messages[%d]", i);
            srv_error(rep, 400, "invalid_request_error", p, "%s: expected an object", p);
            goto bad;
        }
        cJSON *role = field(m, "role");
        static const char *roles[] = {"system", "developer", "user", "assistant", "tool", "function"};
        bool ok = cJSON_IsString(role);
        if (ok) {
            ok = false;
            for (size_t k = 0; k < sizeof roles / sizeof *roles; k++) ok = ok || !strcmp(role->valuestring, roles[k]);
        }
        if (!ok) {
            snprintf(p, sizeof p, "messages[%d].role", i);
            srv_error(rep, 400, "invalid_request_error", p,
                      "%s: expected one of system, developer, user, assistant, tool", p);
            goto bad;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(out, o);
        cJSON_AddStringToObject(o, "role", !strcmp(role->valuestring, "developer") ? "system" : role->valuestring);
        cJSON *c = field(m, "content");
        snprintf(p, sizeof p, "messages[%d].content", i);
        if (!c) {
            if (strcmp(role->valuestring, "assistant")) {
                srv_error(rep, 400, "invalid_request_error", p, "%s: expected a string or an array of parts", p);
                goto bad;
            }
            cJSON_AddStringToObject(o, "content", "");
        } else if (cJSON_IsString(c)) {
            cJSON_AddStringToObject(o, "content", c->valuestring);
        } else if (cJSON_IsArray(c)) {
            sbuf t = {0};
            int j = 0;
            cJSON *part;
            cJSON_ArrayForEach(part, c) {
                cJSON *ty = field(part, "type"), *tx = field(part, "text");
                if (cJSON_IsString(part)) {
                    sb_puts(&t, part->valuestring);
                } else if (!cJSON_IsObject(part) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "text") ||
                           !cJSON_IsString(tx)) {
                    snprintf(p, sizeof p, "messages[%d].content[%d]", i, j);
                    srv_error(rep, 400, "invalid_request_error", p,
                              "%s: only {\"type\": \"text\", \"text\": ...} parts are supported", p);
                    sb_free(&t);
                    goto bad;
                } else {
                    sb_puts(&t, tx->valuestring);
                }
                j++;
            }
            cJSON_AddStringToObject(o, "content", sb_str(&t));
            sb_free(&t);
        } else {
            srv_error(rep, 400, "invalid_request_error", p, "%s: expected a string or an array of parts", p);
            goto bad;
        }
        cJSON *name = field(m, "name"), *tcid = field(m, "tool_call_id"), *tcs = field(m, "tool_calls");
        if (cJSON_IsString(name)) cJSON_AddStringToObject(o, "name", name->valuestring);
        if (cJSON_IsString(tcid)) cJSON_AddStringToObject(o, "tool_call_id", tcid->valuestring);
        if (tcs) {
            if (!cJSON_IsArray(tcs)) {
                snprintf(p, sizeof p, "messages[%d].tool_calls", i);
                srv_error(rep, 400, "invalid_request_error", p, "%s: expected an array", p);
                goto bad;
            }
            cJSON *arr = cJSON_AddArrayToObject(o, "tool_calls");
            int j = 0;
            cJSON *tc;
            cJSON_ArrayForEach(tc, tcs) {
                cJSON *fn = field(tc, "function");
                cJSON *fname = fn ? field(fn, "name") : NULL, *fargs = fn ? field(fn, "arguments") : NULL;
                if (!cJSON_IsObject(fn) || !cJSON_IsString(fname)) {
                    snprintf(p, sizeof p, "messages[%d].tool_calls[%d].function", i, j);
                    srv_error(rep, 400, "invalid_request_error", p, "%s: expected {\"name\": ..., \"arguments\": ...}", p);
                    goto bad;
                }
                cJSON *e = cJSON_CreateObject();
                cJSON_AddItemToArray(arr, e);
                cJSON *id = field(tc, "id");
                if (cJSON_IsString(id)) cJSON_AddStringToObject(e, "id", id->valuestring);
                cJSON_AddStringToObject(e, "type", "function");
                cJSON *f = cJSON_AddObjectToObject(e, "function");
                cJSON_AddStringToObject(f, "name", fname->valuestring);
                cJSON *args = NULL;
                if (cJSON_IsString(fargs)) args = cJSON_Parse(fargs->valuestring);
                else if (fargs) args = cJSON_Duplicate(fargs, true);
                if (!args) args = cJSON_IsString(fargs) ? cJSON_CreateString(fargs->valuestring) : cJSON_CreateObject();
                cJSON_AddItemToObject(f, "arguments", args);
                j++;
            }
        }
        i++;
    }
    return out;
bad:
    cJSON_Delete(out);
    return NULL;
}

/* The ChatML fallback for models without a template (what llama.cpp does):
 *   <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
 * Generation then stops at "<|im_end|>" (an implicit stop string). */
static char *render_chatml(cJSON *msgs) {
    sbuf b = {0};
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        sb_printf(&b, "<|im_start|>%s\n", cJSON_GetObjectItem(m, "role")->valuestring);
        sb_puts(&b, cJSON_GetObjectItem(m, "content")->valuestring);
        sb_puts(&b, "<|im_end|>\n");
    }
    sb_puts(&b, "<|im_start|>assistant\n");
    if (b.oom) {
        sb_free(&b);
        return NULL;
    }
    return b.p;
}

static char *render_chat(srv *s, cJSON *msgs, cJSON *tools, srv_reply *rep) {
    if (!s->tmpl) {
        char *t = render_chatml(msgs);
        if (!t) srv_error(rep, 503, "server_error", NULL, "out of memory");
        return t;
    }
    cJSON *vars = cJSON_CreateObject();
    cJSON_AddItemToObject(vars, "messages", cJSON_Duplicate(msgs, true));
    if (tools) cJSON_AddItemToObject(vars, "tools", cJSON_Duplicate(tools, true));
    cJSON_AddBoolToObject(vars, "add_generation_prompt", true);
    int32_t bos = mtplx_token_bos(s->tok), eos = mtplx_token_eos(s->tok);
    const char *bp = bos >= 0 ? mtplx_token_piece(s->tok, bos) : NULL;
    const char *ep = eos >= 0 ? mtplx_token_piece(s->tok, eos) : NULL;
    cJSON_AddStringToObject(vars, "bos_token", bp ? bp : "");
    cJSON_AddStringToObject(vars, "eos_token", ep ? ep : "");
    char *vj = cJSON_PrintUnformatted(vars);
    cJSON_Delete(vars);
    char *out = NULL;
    size_t n = 0;
    pthread_mutex_lock(&s->tok_mu);
    mtplx_status st = vj ? mtplx_template_render(s->tmpl, vj, &out, &n) : MTPLX_ERR_NOMEM;
    pthread_mutex_unlock(&s->tok_mu);
    free(vj);
    if (st != MTPLX_OK) {
        srv_error(rep, 400, "invalid_request_error", "messages", "messages: the chat template failed: %s",
                  mtplx_last_error());
        return NULL;
    }
    return out;
}

/* ---------------- tools and response_format ---------------- */

static bool parse_tools(cJSON *root, cJSON **tools_out, char **forced_schema, srv_reply *rep) {
    *tools_out = NULL;
    *forced_schema = NULL;
    cJSON *tools = field(root, "tools");
    if (!tools) return true;
    if (!cJSON_IsArray(tools)) {
        srv_error(rep, 400, "invalid_request_error", "tools", "tools: expected an array");
        return false;
    }
    int i = 0;
    cJSON *t;
    char p[64];
    cJSON_ArrayForEach(t, tools) {
        cJSON *ty = field(t, "type"), *fn = field(t, "function");
        cJSON *name = fn ? field(fn, "name") : NULL, *params = fn ? field(fn, "parameters") : NULL;
        snprintf(p, sizeof p, "tools[%d]", i);
        if (!cJSON_IsObject(t) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "function") ||
            !cJSON_IsObject(fn) || !cJSON_IsString(name) || (params && !cJSON_IsObject(params))) {
            srv_error(rep, 400, "invalid_request_error", p,
                      "%s: expected {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}", p);
            return false;
        }
        i++;
    }
    cJSON *tc = field(root, "tool_choice");
    const char *forced = NULL;
    bool required = false;
    if (tc) {
        if (cJSON_IsString(tc)) {
            if (!strcmp(tc->valuestring, "none")) return true; /* tools ignored */
            if (!strcmp(tc->valuestring, "required")) required = true;
            else if (strcmp(tc->valuestring, "auto")) {
                srv_error(rep, 400, "invalid_request_error", "tool_choice",
                          "tool_choice: expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", ...}");
                return false;
            }
        } else {
            cJSON *fn = field(tc, "function");
            cJSON *name = fn ? field(fn, "name") : NULL;
            if (!cJSON_IsObject(tc) || !cJSON_IsString(name)) {
                srv_error(rep, 400, "invalid_request_error", "tool_choice",
                          "tool_choice: expected {\"type\": \"function\", \"function\": {\"name\": ...}}");
                return false;
            }
            forced = name->valuestring;
            bool found = false;
            cJSON_ArrayForEach(t, tools) found = found || !strcmp(field(field(t, "function"), "name")->valuestring, forced);
            if (!found) {
                srv_error(rep, 400, "invalid_request_error", "tool_choice",
                          "tool_choice: no tool named `%s` in tools", forced);
                return false;
            }
        }
    }
    *tools_out = tools;
    if (required || forced) {
        /* the reply must be one call: {"name": a tool, "arguments": its parameters}
         * (with several tools the arguments are only required to be an object) */
        cJSON *sch = cJSON_CreateObject();
        cJSON_AddStringToObject(sch, "type", "object");
        cJSON *props = cJSON_AddObjectToObject(sch, "properties");
        cJSON *nm = cJSON_AddObjectToObject(props, "name");
        cJSON *en = cJSON_AddArrayToObject(nm, "enum");
        cJSON *one = NULL;
        int n_tools = 0;
        cJSON_ArrayForEach(t, tools) {
            cJSON *fn = field(t, "function");
            const char *name = field(fn, "name")->valuestring;
            if (forced && strcmp(name, forced)) continue;
            cJSON_AddItemToArray(en, cJSON_CreateString(name));
            one = field(fn, "parameters");
            n_tools++;
        }
        if (n_tools == 1 && one) cJSON_AddItemToObject(props, "arguments", cJSON_Duplicate(one, true));
        else cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "arguments"), "type", "object");
        cJSON *req = cJSON_AddArrayToObject(sch, "required");
        cJSON_AddItemToArray(req, cJSON_CreateString("name"));
        cJSON_AddItemToArray(req, cJSON_CreateString("arguments"));
        *forced_schema = cJSON_PrintUnformatted(sch);
        cJSON_Delete(sch);
    }
    return true;
}

static bool parse_response_format(srv *s, cJSON *root, srv_req *r, const char *forced_tool_schema,
                                  srv_reply *rep) {
    char err[256] = "";
    if (forced_tool_schema) {
        r->mask = jmask_new(s->tok, forced_tool_schema, "<tool_call>\n", "\n</tool_call>", err, sizeof err);
        if (!r->mask) {
            srv_error(rep, 400, "invalid_request_error", "tools", "tools: cannot enforce the parameters schema: %s", err);
            return false;
        }
        return true;
    }
    cJSON *rf = field(root, "response_format");
    if (!rf) return true;
    cJSON *ty = cJSON_IsObject(rf) ? field(rf, "type") : NULL;
    if (!cJSON_IsString(ty)) {
        srv_error(rep, 400, "invalid_request_error", "response_format",
                  "response_format: expected {\"type\": \"text\" | \"json_object\" | \"json_schema\"}");
        return false;
    }
    if (!strcmp(ty->valuestring, "text")) return true;
    char *schema = NULL;
    if (!strcmp(ty->valuestring, "json_schema")) {
        cJSON *js = field(rf, "json_schema");
        cJSON *sch = js ? field(js, "schema") : NULL;
        if (!cJSON_IsObject(js) || (sch && !cJSON_IsObject(sch))) {
            srv_error(rep, 400, "invalid_request_error", "response_format.json_schema",
                      "response_format.json_schema: expected {\"name\": ..., \"schema\": {...}}");
            return false;
        }
        schema = sch ? cJSON_PrintUnformatted(sch) : strdup("{}");
    } else if (strcmp(ty->valuestring, "json_object")) {
        srv_error(rep, 400, "invalid_request_error", "response_format.type",
                  "response_format.type: expected \"text\", \"json_object\" or \"json_schema\"");
        return false;
    }
    r->mask = jmask_new(s->tok, schema, NULL, NULL, err, sizeof err);
    free(schema);
    if (!r->mask) {
        srv_error(rep, 400, "invalid_request_error", "response_format.json_schema.schema",
                  "response_format.json_schema.schema: %s", err);
        return false;
    }
    return true;
}

/* ---------------- running a request ---------------- */

static void make_id(char *buf, size_t cap, const char *prefix) {
    static atomic_uint_fast64_t ctr;
    uint64_t x = atomic_fetch_add(&ctr, 1) + (uint64_t)time(NULL) * 1000003ull + (uint64_t)getpid();
    x *= 0x9E3779B97F4A7C15ull;
    snprintf(buf, cap, "%s%016llx", prefix, (unsigned long long)x);
}

/* Submit; for non-stream requests wait until done (polling gone()). */
static bool run_req(srv *s, srv_req *r, srv_reply *rep, bool stream, srv_gone_fn gone, void *gu) {
    if (r->mask) {
        r->gp.mask = jmask_apply;
        r->gp.mask_user = r->mask;
    }
    r->t_submit = srv_now_ms();
    if (!srv_sched_submit(s->sched, r)) {
        srv_error(rep, 429, "rate_limit_exceeded", NULL, "the server is busy: %d requests are queued; retry later",
                  s->p.max_queue);
        rep->retry_after = 1;
        return false;
    }
    if (stream) return true;
    pthread_mutex_lock(&r->mu);
    while (!r->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (!r->done && gone && gone(gu)) atomic_store(&r->cancel, true);
    }
    pthread_mutex_unlock(&r->mu);
    if (r->finish == FIN_ERROR) {
        srv_error(rep, 500, "server_error", NULL, "generation failed: %s", r->err);
        return false;
    }
    return true;
}

static void reply_json(srv_reply *rep, cJSON *o) {
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    rep->status = 200;
    rep->ctype = "application/json";
    if (js) sb_puts(&rep->body, js);
    free(js);
}

void srv_chat(srv *s, const char *body, size_t n, srv_reply *rep, srv_gone_fn gone, void *gu) {
    cJSON *root = cJSON_ParseWithLength(body, n);
    srv_req *r = NULL;
    cJSON *msgs = NULL;
    char *prompt = NULL, *forced = NULL;
    if (!cJSON_IsObject(root)) {
        srv_error(rep, 400, "invalid_request_error", NULL, "the body is not a JSON object");
        goto done;
    }
    if (!check_model(s, root, rep)) goto done;
    msgs = normalize_messages(field(root, "messages"), rep);
    if (!msgs) goto done;
    r = srv_req_new();
    if (!r) {
        srv_error(rep, 503, "server_error", NULL, "out of memory");
        goto done;
    }
    r->endpoint = "chat";
    bool stream = false, logprobs = false, include_usage = false;
    long max_tokens = 0, top_lp = 0;
    if (!get_bool(root, "stream", &stream, rep) || !get_bool(root, "logprobs", &logprobs, rep) ||
        !get_int(root, "max_tokens", 1, 1 << 24, &max_tokens, rep) ||
        !get_int(root, "max_completion_tokens", 1, 1 << 24, &max_tokens, rep) ||
        !get_int(root, "top_logprobs", 0, 20, &top_lp, rep) || !parse_sampling(s, root, r, rep))
        goto done;
    cJSON *so = field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) {
            srv_error(rep, 400, "invalid_request_error", "stream_options", "stream_options: expected an object");
            goto done;
        }
        if (!get_bool(so, "include_usage", &include_usage, rep)) goto done;
    }
    cJSON *tools = NULL;
    if (!parse_tools(root, &tools, &forced, rep)) goto done;
    if (!parse_stop(s, root, r, rep) || !parse_response_format(s, root, r, forced, rep)) goto done;
    prompt = render_chat(s, msgs, tools, rep);
    if (!prompt) goto done;
    int32_t bos = mtplx_token_bos(s->tok);
    const char *bp = bos >= 0 ? mtplx_token_piece(s->tok, bos) : NULL;
    bool has_bos = bp && *bp && !strncmp(prompt, bp, strlen(bp));
    if (!tokenize(s, prompt, !has_bos, r, rep) || !check_length(s, r, "messages", rep)) goto done;
    r->gp.max_tokens = (int32_t)max_tokens;
    r->top_logprobs = logprobs ? (int)top_lp : 0;
    r->tok = mtplx_model_tokenizer(s->model);
    char id[64];
    make_id(id, sizeof id, "chatcmpl-");
    if (stream) {
        rep->stream = stream_new(s, r, true, id, s->model_id, include_usage, logprobs, tools != NULL, false, NULL);
        if (!rep->stream) {
            srv_error(rep, 503, "server_error", NULL, "out of memory");
            goto done;
        }
        if (!run_req(s, r, rep, true, gone, gu)) {
            stream_free(rep->stream);
            rep->stream = NULL;
            goto done;
        }
        rep->status = 200;
        goto done;
    }
    if (!run_req(s, r, rep, false, gone, gu)) goto done;
    /* split content and tool calls */
    sbuf content = {0};
    tool_call *calls = NULL;
    int n_calls = 0;
    const char *text = r->out.p ? r->out.p : "";
    if (tools) {
        toolparse tp = {0};
        toolparse_feed(&tp, text, r->released, &content, &calls, &n_calls, true);
        toolparse_free(&tp);
    } else {
        sb_put(&content, text, r->released);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "chat.completion");
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON_AddStringToObject(o, "system_fingerprint", "mtplx-" MTPLX_VERSION);
    cJSON *ch = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(ch, c);
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON *msg = cJSON_AddObjectToObject(c, "message");
    cJSON_AddStringToObject(msg, "role", "assistant");
    if (n_calls && content.n == 0) cJSON_AddNullToObject(msg, "content");
    else cJSON_AddStringToObject(msg, "content", sb_str(&content));
    if (n_calls) {
        cJSON *arr = cJSON_AddArrayToObject(msg, "tool_calls");
        for (int i = 0; i < n_calls; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "id", calls[i].id);
            cJSON_AddStringToObject(e, "type", "function");
            cJSON *f = cJSON_AddObjectToObject(e, "function");
            cJSON_AddStringToObject(f, "name", calls[i].name);
            cJSON_AddStringToObject(f, "arguments", calls[i].arguments);
            cJSON_AddItemToArray(arr, e);
            tool_call_free(&calls[i]);
        }
    }
    free(calls);
    sb_free(&content);
    if (logprobs) cJSON_AddItemToObject(c, "logprobs", srv_chat_logprobs(r, srv_req_tokens_released(r)));
    else cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", srv_finish_name(r->finish, n_calls > 0));
    cJSON_AddItemToObject(o, "usage", srv_usage(r));
    cJSON_AddItemToObject(o, "mtplx", srv_mtp_summary(r));
    reply_json(rep, o);
done:
    free(forced);
    free(prompt);
    cJSON_Delete(msgs);
    cJSON_Delete(root);
    srv_req_unref(r);
}

void srv_completions(srv *s, const char *body, size_t n, srv_reply *rep, srv_gone_fn gone, void *gu) {
    cJSON *root = cJSON_ParseWithLength(body, n);
    srv_req *r = NULL;
    char *prompt_text = NULL;
    if (!cJSON_IsObject(root)) {
        srv_error(rep, 400, "invalid_request_error", NULL, "the body is not a JSON object");
        goto done;
    }
    if (!check_model(s, root, rep)) goto done;
    r = srv_req_new();
    if (!r) {
        srv_error(rep, 503, "server_error", NULL, "out of memory");
        goto done;
    }
    r->endpoint = "completions";
    bool stream = false, echo = false, include_usage = false;
    long max_tokens = 16, logprobs = -1;
    if (!get_bool(root, "stream", &stream, rep) || !get_bool(root, "echo", &echo, rep) ||
        !get_int(root, "max_tokens", 0, 1 << 24, &max_tokens, rep) ||
        !get_int(root, "logprobs", 0, 20, &logprobs, rep) || !parse_sampling(s, root, r, rep) ||
        !parse_stop(NULL, root, r, rep))
        goto done;
    cJSON *so = field(root, "stream_options");
    if (so && (!cJSON_IsObject(so) || !get_bool(so, "include_usage", &include_usage, rep))) {
        if (!cJSON_IsObject(so))
            srv_error(rep, 400, "invalid_request_error", "stream_options", "stream_options: expected an object");
        goto done;
    }
    cJSON *p = field(root, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0)))
        p = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsString(p)) {
        prompt_text = strdup(p->valuestring);
        if (!prompt_text || !tokenize(s, prompt_text, true, r, rep)) goto done;
    } else if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0) {
        int np = cJSON_GetArraySize(p), i = 0;
        r->prompt = malloc((size_t)np * sizeof(int32_t));
        if (!r->prompt) {
            srv_error(rep, 503, "server_error", NULL, "out of memory");
            goto done;
        }
        int32_t V = mtplx_tokenizer_vocab_size(s->tok);
        cJSON *e;
        cJSON_ArrayForEach(e, p) {
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
                e->valuedouble >= V) {
                srv_error(rep, 400, "invalid_request_error", "prompt",
                          "prompt[%d]: expected a token id in 0..%d (or the prompt as one string)", i, V - 1);
                goto done;
            }
            r->prompt[i++] = (int32_t)e->valuedouble;
        }
        r->n_prompt = np;
        if (echo) {
            size_t len = 0;
            pthread_mutex_lock(&s->tok_mu);
            mtplx_detokenize(s->tok, r->prompt, (size_t)np, true, &prompt_text, &len);
            pthread_mutex_unlock(&s->tok_mu);
        }
    } else {
        srv_error(rep, 400, "invalid_request_error", "prompt",
                  "prompt: expected a string or an array of token ids");
        goto done;
    }
    if (!check_length(s, r, "prompt", rep)) goto done;
    r->gp.max_tokens = max_tokens > 0 ? (int32_t)max_tokens : 1;
    r->top_logprobs = logprobs > 0 ? (int)logprobs : 0;
    r->tok = mtplx_model_tokenizer(s->model);
    char id[64];
    make_id(id, sizeof id, "cmpl-");
    if (stream) {
        rep->stream = stream_new(s, r, false, id, s->model_id, include_usage, logprobs >= 0, false, echo,
                                 prompt_text);
        if (!rep->stream) {
            srv_error(rep, 503, "server_error", NULL, "out of memory");
            goto done;
        }
        if (!run_req(s, r, rep, true, gone, gu)) {
            stream_free(rep->stream);
            rep->stream = NULL;
            goto done;
        }
        rep->status = 200;
        goto done;
    }
    if (!run_req(s, r, rep, false, gone, gu)) goto done;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)time(NULL));
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON *ch = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(ch, c);
    sbuf t = {0};
    size_t base = 0;
    if (echo && prompt_text) {
        sb_puts(&t, prompt_text);
        base = strlen(prompt_text);
    }
    sb_put(&t, r->out.p ? r->out.p : "", r->released);
    cJSON_AddStringToObject(c, "text", sb_str(&t));
    sb_free(&t);
    cJSON_AddNumberToObject(c, "index", 0);
    if (logprobs >= 0) cJSON_AddItemToObject(c, "logprobs", srv_completion_logprobs(r, srv_req_tokens_released(r), base));
    else cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", srv_finish_name(r->finish, false));
    cJSON_AddItemToObject(o, "usage", srv_usage(r));
    cJSON_AddItemToObject(o, "mtplx", srv_mtp_summary(r));
    reply_json(rep, o);
done:
    free(prompt_text);
    cJSON_Delete(root);
    srv_req_unref(r);
}

void srv_models(srv *s, srv_reply *rep) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    const char *ids[3] = {s->model_id, s->emb_model ? s->emb_id : NULL, s->rr_model ? s->rr_id : NULL};
    for (int i = 0; i < 3; i++) {
        if (!ids[i]) continue;
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", ids[i]);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "mtplx");
        if (i == 0) {
            mtplx_model_info info;
            mtplx_model_get_info(s->model, &info);
            cJSON *meta = cJSON_AddObjectToObject(m, "meta");
            cJSON_AddStringToObject(meta, "arch", info.arch);
            cJSON_AddNumberToObject(meta, "n_ctx", s->n_ctx);
            cJSON_AddNumberToObject(meta, "n_vocab", info.n_vocab);
            cJSON_AddNumberToObject(meta, "n_params", (double)info.n_params);
            cJSON_AddNumberToObject(meta, "n_mtp", info.n_mtp);
            cJSON_AddNumberToObject(meta, "draft_depth", s->draft_depth < 0 ? (info.n_mtp ? 3 : 0) : s->draft_depth);
            cJSON_AddNumberToObject(meta, "n_parallel", s->p.n_parallel);
            cJSON_AddStringToObject(meta, "kv_type", mtplx_kv_type_name(s->p.kv_type));
            cJSON_AddBoolToObject(meta, "chat_template", s->tmpl != NULL);
        }
        cJSON_AddItemToArray(d, m);
    }
    reply_json(rep, o);
}
