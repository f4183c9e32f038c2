/* jsonmask.c: constrained decoding for response_format json_object /
 * json_schema and forced tool calls. A pushdown automaton over bytes accepts
 * exactly the prefixes of JSON texts valid for a schema (optionally between
 * a literal prefix and suffix); the mask lets a token through when its text
 * keeps the output such a prefix, and lets end-of-generation through only
 * when the value is complete. The library applies the mask to the target
 * and the draft alike, so MTP stays exact.
 *
 * Schema subset: type (one or several), properties (the object is closed:
 * only those keys, any order, no repeats), required, enum / const (values
 * matched as compact JSON text), items, maxItems, nested objects and arrays. anyOf /
 * oneOf / $ref / pattern / min / max are not enforced (any value there).
 * Whitespace is limited to 2 bytes per gap, none before and after
 * the top-level value, so a small model cannot wander in blanks forever.
 * Token texts are decoded one token at a time (fine for byte-level BPE; a
 * SentencePiece leading space is seen as part of the token). */
#include "server/srv.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_OBJ = 1, T_ARR = 2, T_STR = 4, T_NUM = 8, T_INT = 16, T_BOOL = 32, T_NULL = 64, T_ANY = 127 };
enum { F_VALUE, F_OBJ, F_ARR, F_STR, F_NUM, F_LIT, F_KEY };
enum { P_PRE, P_BODY, P_SUF, P_END, P_DEAD };
#define MAXD 24
#define MAX_WS 2

typedef struct jnode {
    int types;
    int n_props;
    char **keys; /* JSON-escaped, without quotes */
    int *prop;   /* node of each key */
    uint64_t required;
    int items;   /* node or -1 */
    int max_items; /* 0 = no limit */
    int n_enum;
    char **enums; /* compact JSON text */
} jnode;

typedef struct frame {
    uint8_t kind, phase;
    int16_t node;
    int16_t key; /* F_OBJ: key being filled (-1 free) */
    uint32_t pos;
    uint64_t cand, seen;
} frame;

typedef struct jstate {
    uint8_t phase, ws;
    uint16_t depth;
    uint32_t pos; /* in prefix / suffix */
    frame f[MAXD];
} jstate;

typedef struct vocab {
    const mtplx_tokenizer *tok;
    int32_t n;
    char **text;
    uint16_t *len;
    bool *eog;
    bool has_eog;
} vocab;

struct jmask {
    jnode *nodes;
    int n_nodes, root;
    char *prefix, *suffix;
    const vocab *v;
    /* states after each generated prefix, for the ids seen last time */
    int32_t *ids;
    jstate *states;
    int32_t n_cached, cap;
    jstate tmp;
};

static const char *const BUILTIN[] = {"true", "false", "null"};

/* ---------------- vocabulary texts (built once per tokenizer) ---------------- */

static pthread_mutex_t vocab_mu = PTHREAD_MUTEX_INITIALIZER;
static vocab *g_vocab;

static const vocab *get_vocab(const mtplx_tokenizer *tok) {
    pthread_mutex_lock(&vocab_mu);
    if (g_vocab && g_vocab->tok == tok) {
        pthread_mutex_unlock(&vocab_mu);
        return g_vocab;
    }
    vocab *v = calloc(1, sizeof *v);
    int32_t n = mtplx_tokenizer_vocab_size(tok);
    if (v) {
        v->tok = tok;
        v->n = n;
        v->text = calloc((size_t)n, sizeof *v->text);
        v->len = calloc((size_t)n, sizeof *v->len);
        v->eog = calloc((size_t)n, sizeof *v->eog);
    }
    if (!v || !v->text || !v->len || !v->eog) {
        if (v) {
            free(v->text);
            free(v->len);
            free(v->eog);
        }
        free(v);
        pthread_mutex_unlock(&vocab_mu);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++) {
        v->eog[i] = mtplx_token_is_eog(tok, i);
        v->has_eog = v->has_eog || v->eog[i];
        if (mtplx_token_is_special(tok, i)) continue;
        char *t = NULL;
        size_t len = 0;
        if (mtplx_detokenize(tok, &i, 1, true, &t, &len) == MTPLX_OK && len < 65535) {
            v->text[i] = t;
            v->len[i] = (uint16_t)len;
        } else {
            free(t);
        }
    }
    /* one tokenizer per server: the previous table (if any) is kept alive,
     * as masks of other requests may still use it */
    g_vocab = v;
    pthread_mutex_unlock(&vocab_mu);
    return v;
}

/* ---------------- schema ---------------- */

static int new_node(jmask *m) {
    jnode *n = realloc(m->nodes, (size_t)(m->n_nodes + 1) * sizeof *n);
    if (!n) return -1;
    m->nodes = n;
    memset(&n[m->n_nodes], 0, sizeof *n);
    n[m->n_nodes].items = -1;
    n[m->n_nodes].types = T_ANY;
    return m->n_nodes++;
}

static int type_bit(const char *t) {
    static const struct { const char *n; int b; } tab[] = {
        {"object", T_OBJ}, {"array", T_ARR}, {"string", T_STR}, {"number", T_NUM | T_INT},
        {"integer", T_INT}, {"boolean", T_BOOL}, {"null", T_NULL}};
    for (size_t i = 0; i < sizeof tab / sizeof *tab; i++)
        if (!strcmp(t, tab[i].n)) return tab[i].b;
    return 0;
}

static int compile(jmask *m, cJSON *s, int depth, char *err, size_t ecap) {
    int id = new_node(m);
    if (id < 0) {
        snprintf(err, ecap, "out of memory");
        return -1;
    }
    if (!cJSON_IsObject(s)) return id; /* true / absent: anything */
    if (depth > 16) {
        snprintf(err, ecap, "the schema nests deeper than 16 levels");
        return -1;
    }
    cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    if (en || cn) {
        if (en && (!cJSON_IsArray(en) || cJSON_GetArraySize(en) == 0 || cJSON_GetArraySize(en) > 64)) {
            snprintf(err, ecap, "enum: expected an array of 1 to 64 values");
            return -1;
        }
        int k = en ? cJSON_GetArraySize(en) : 1;
        char **e = calloc((size_t)k, sizeof *e);
        if (!e) return -1;
        m->nodes[id].enums = e;
        if (en) {
            cJSON *x;
            cJSON_ArrayForEach(x, en) e[m->nodes[id].n_enum++] = cJSON_PrintUnformatted(x);
        } else {
            e[m->nodes[id].n_enum++] = cJSON_PrintUnformatted(cn);
        }
        return id;
    }
    int types = 0;
    cJSON *ty = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(ty)) {
        types = type_bit(ty->valuestring);
        if (!types) {
            snprintf(err, ecap, "type: unknown type \"%s\"", ty->valuestring);
            return -1;
        }
    } else if (cJSON_IsArray(ty)) {
        cJSON *x;
        cJSON_ArrayForEach(x, ty) if (cJSON_IsString(x)) types |= type_bit(x->valuestring);
    }
    cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    if (!types) types = cJSON_IsObject(props) ? T_OBJ : cJSON_IsObject(items) ? T_ARR : T_ANY;
    m->nodes[id].types = types;
    if ((types & T_OBJ) && cJSON_IsObject(props) && cJSON_GetArraySize(props) > 0) {
        int np = cJSON_GetArraySize(props);
        if (np > 64) {
            snprintf(err, ecap, "properties: at most 64 are enforced");
            return -1;
        }
        char **keys = calloc((size_t)np, sizeof *keys);
        int *pn = calloc((size_t)np, sizeof *pn);
        if (!keys || !pn) {
            free(keys);
            free(pn);
            return -1;
        }
        m->nodes[id].keys = keys;
        m->nodes[id].prop = pn;
        cJSON *p;
        int i = 0;
        cJSON_ArrayForEach(p, props) {
            cJSON *ks = cJSON_CreateString(p->string);
            char *q = cJSON_PrintUnformatted(ks);
            cJSON_Delete(ks);
            if (!q) return -1;
            size_t L = strlen(q);
            memmove(q, q + 1, L - 2);
            q[L - 2] = 0;
            keys[i] = q;
            m->nodes[id].n_props = i + 1;
            int c = compile(m, p, depth + 1, err, ecap);
            if (c < 0) return -1;
            m->nodes[id].prop[i] = c;
            i++;
        }
        cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
        cJSON *r;
        if (cJSON_IsArray(req)) cJSON_ArrayForEach(r, req) {
                if (!cJSON_IsString(r)) continue;
                bool found = false;
                int j = 0;
                cJSON_ArrayForEach(p, props) {
                    if (!strcmp(p->string, r->valuestring)) {
                        m->nodes[id].required |= 1ull << j;
                        found = true;
                    }
                    j++;
                }
                if (!found) {
                    snprintf(err, ecap, "required: \"%s\" is not among the properties", r->valuestring);
                    return -1;
                }
            }
    }
    cJSON *mi = cJSON_GetObjectItemCaseSensitive(s, "maxItems");
    if (cJSON_IsNumber(mi) && mi->valuedouble >= 1) m->nodes[id].max_items = mi->valueint;
    if ((types & T_ARR) && cJSON_IsObject(items)) {
        int c = compile(m, items, depth + 1, err, ecap);
        if (c < 0) return -1;
        m->nodes[id].items = c;
    }
    return id;
}

/* ---------------- the automaton ---------------- */

static bool is_ws(int c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static bool push(jstate *s, uint8_t kind, int node) {
    if (s->depth >= MAXD) return false;
    s->f[s->depth++] = (frame){.kind = kind, .node = (int16_t)node, .key = -1};
    return true;
}

static const char *lit(const jmask *m, const frame *f, int i) {
    return f->node >= 0 && m->nodes[f->node].n_enum ? m->nodes[f->node].enums[i] : BUILTIN[i];
}

/* A value just ended: let the parent frame move on. */
static void value_done(jstate *s) {
    s->depth--;
    s->ws = 0;
    if (s->depth == 0) {
        s->phase = s->phase == P_BODY ? P_SUF : s->phase;
        s->pos = 0;
        return;
    }
    frame *p = &s->f[s->depth - 1];
    if (p->kind == F_OBJ) p->phase = 3;
    else if (p->kind == F_ARR) p->phase = 2;
}

/* Can the frame on top end here (a number or literal needs no closing byte)? */
static bool can_end(const jmask *m, const frame *f) {
    if (f->kind == F_NUM) return f->phase == 2 || f->phase == 3 || f->phase == 5 || f->phase == 8;
    if (f->kind == F_LIT)
        for (int i = 0; i < 64; i++)
            if ((f->cand >> i & 1) && lit(m, f, i)[f->pos] == 0) return true;
    return false;
}

static bool feed(const jmask *m, jstate *s, int c);

/* Start a value of node with byte c. */
static bool start_value(const jmask *m, jstate *s, int c) {
    frame *f = &s->f[s->depth - 1];
    const jnode *n = &m->nodes[f->node];
    if (is_ws(c)) return ++s->ws <= MAX_WS;
    s->ws = 0;
    if (n->n_enum) {
        f->kind = F_LIT;
        f->pos = 0;
        f->cand = n->n_enum >= 64 ? ~0ull : (1ull << n->n_enum) - 1;
        return feed(m, s, c);
    }
    int t = n->types;
    if (c == '{' && (t & T_OBJ)) {
        f->kind = F_OBJ;
        f->phase = 0;
        f->seen = 0;
        return true;
    }
    if (c == '[' && (t & T_ARR)) {
        f->kind = F_ARR;
        f->phase = 0;
        return true;
    }
    if (c == '"' && (t & T_STR)) {
        f->kind = F_STR;
        f->phase = 0;
        return true;
    }
    if ((c == '-' || (c >= '0' && c <= '9')) && (t & (T_NUM | T_INT))) {
        f->kind = F_NUM;
        f->phase = 0;
        f->pos = 0;
        f->key = (t & T_NUM) ? 0 : 1; /* 1: integer only */
        return feed(m, s, c);
    }
    uint64_t cand = 0;
    if (t & T_BOOL) cand |= 3;
    if (t & T_NULL) cand |= 4;
    if (cand && (c == 't' || c == 'f' || c == 'n')) {
        f->kind = F_LIT;
        f->pos = 0;
        f->cand = cand;
        return feed(m, s, c);
    }
    return false;
}

static bool feed(const jmask *m, jstate *s, int c) {
    /* a NUL byte (byte-level vocabularies have a token for it) is never part
     * of JSON text, and must not match a prefix / suffix terminator */
    if (c == 0) return false;
    if (s->phase == P_PRE) {
        if (m->prefix && m->prefix[s->pos]) {
            if (m->prefix[s->pos] != c) return false;
            if (!m->prefix[++s->pos]) s->phase = P_BODY;
            return true;
        }
        s->phase = P_BODY;
    }
    if (s->phase == P_SUF || s->phase == P_END) {
        if (m->suffix && m->suffix[s->pos] == c) {
            if (!m->suffix[++s->pos]) s->phase = P_END;
            return true;
        }
        return false;
    }
    if (s->phase != P_BODY) return false;
    if (s->depth == 0) {
        if (!push(s, F_VALUE, m->root)) return false;
    }
    frame *f = &s->f[s->depth - 1];
    const jnode *n = &m->nodes[f->node];
    switch (f->kind) {
    case F_VALUE: return start_value(m, s, c);
    case F_STR:
    case F_KEY:
        if (f->phase == 1) { /* after a backslash */
            if (c == 'u') {
                f->phase = 2;
                f->pos = 0;
                return f->kind == F_STR || f->cand == 0;
            }
            f->phase = 0;
            return strchr("\"\\/bfnrt", c) != NULL && c != 0 && (f->kind == F_STR || f->cand == 0);
        }
        if (f->phase == 2) {
            bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
            if (!hex) return false;
            if (++f->pos == 4) f->phase = 0;
            return true;
        }
        if (c < 0x20) return false;
        if (f->kind == F_KEY && f->cand) {
            /* a key of a closed object: follow the candidate names */
            const jnode *o = &m->nodes[s->f[s->depth - 2].node];
            if (c == '"') {
                for (int i = 0; i < o->n_props; i++)
                    if ((f->cand >> i & 1) && o->keys[i][f->pos] == 0) {
                        s->f[s->depth - 2].key = (int16_t)i;
                        s->depth--;
                        s->f[s->depth - 1].phase = 1;
                        return true;
                    }
                return false;
            }
            uint64_t nc = 0;
            for (int i = 0; i < o->n_props; i++)
                if ((f->cand >> i & 1) && o->keys[i][f->pos] == c) nc |= 1ull << i;
            if (!nc) return false;
            f->cand = nc;
            f->pos++;
            return true;
        }
        if (c == '\\') {
            f->phase = 1;
            return true;
        }
        if (c == '"') {
            if (f->kind == F_KEY) {
                s->depth--;
                s->f[s->depth - 1].key = -1;
                s->f[s->depth - 1].phase = 1;
                return true;
            }
            value_done(s);
            return true;
        }
        return true;
    case F_NUM: {
        bool digit = c >= '0' && c <= '9';
        bool int_only = f->key == 1;
        if (digit && ++f->pos > 24) return false;
        switch (f->phase) {
        case 0:
            if (c == '-') { f->phase = 1; return true; }
            /* fallthrough */
        case 1:
            if (c == '0') { f->phase = 3; return true; }
            if (digit) { f->phase = 2; return true; }
            return false;
        case 2:
            if (digit) return true;
            /* fallthrough */
        case 3:
            if (c == '.' && !int_only) { f->phase = 4; return true; }
            if ((c == 'e' || c == 'E') && !int_only) { f->phase = 6; return true; }
            break;
        case 4:
            if (digit) { f->phase = 5; return true; }
            return false;
        case 5:
            if (digit) return true;
            if (c == 'e' || c == 'E') { f->phase = 6; return true; }
            break;
        case 6:
            if (c == '+' || c == '-') { f->phase = 7; return true; }
            /* fallthrough */
        case 7:
            if (digit) { f->phase = 8; return true; }
            return false;
        case 8:
            if (digit) return true;
            break;
        }
        if (!can_end(m, f)) return false;
        value_done(s);
        return feed(m, s, c);
    }
    case F_LIT: {
        uint64_t nc = 0;
        for (int i = 0; i < 64; i++)
            if ((f->cand >> i & 1) && lit(m, f, i)[f->pos] == c) nc |= 1ull << i;
        if (nc) {
            f->cand = nc;
            f->pos++;
            return true;
        }
        if (!can_end(m, f)) return false;
        value_done(s);
        return feed(m, s, c);
    }
    case F_OBJ:
        if (is_ws(c)) return ++s->ws <= MAX_WS;
        s->ws = 0;
        if (f->phase == 0 || f->phase == 4) {
            if (c == '}' && f->phase == 0 && (n->required & ~f->seen) == 0) {
                value_done(s);
                return true;
            }
            if (c != '"') return false;
            uint64_t all = n->n_props >= 64 ? ~0ull : (1ull << n->n_props) - 1;
            uint64_t left = all & ~f->seen;
            if (n->n_props && !left) return false;
            if (!push(s, F_KEY, f->node)) return false;
            s->f[s->depth - 1].cand = n->n_props ? left : 0;
            return true;
        }
        if (f->phase == 1) {
            if (c != ':') return false;
            f->phase = 2;
            int child = f->key >= 0 ? n->prop[f->key] : -1;
            if (f->key >= 0) f->seen |= 1ull << f->key;
            if (child < 0) {
                /* a free key: any value; node 0 is reserved as "anything" */
                child = 0;
            }
            return push(s, F_VALUE, child);
        }
        if (f->phase == 3) {
            if (c == ',') {
                uint64_t all = n->n_props >= 64 ? ~0ull : (1ull << n->n_props) - 1;
                if (n->n_props && !(all & ~f->seen)) return false;
                f->phase = 4;
                return true;
            }
            if (c == '}' && (n->required & ~f->seen) == 0) {
                value_done(s);
                return true;
            }
        }
        return false;
    case F_ARR:
        if (is_ws(c)) return ++s->ws <= MAX_WS;
        if (f->phase == 0 && c == ']') {
            value_done(s);
            return true;
        }
        if (f->phase == 0 || f->phase == 1) {
            s->ws = 0;
            f->pos++; /* elements so far */
            if (!push(s, F_VALUE, n->items >= 0 ? n->items : 0)) return false;
            return start_value(m, s, c);
        }
        s->ws = 0;
        if (c == ',' && (!n->max_items || (int)f->pos < n->max_items)) {
            f->phase = 1;
            return true;
        }
        if (c == ']') {
            value_done(s);
            return true;
        }
        return false;
    }
    return false;
}

/* May generation end here? */
static bool accepting(const jmask *m, const jstate *s) {
    if (s->phase == P_END) return true;
    if (s->phase == P_SUF && (!m->suffix || !m->suffix[s->pos])) return true;
    if (s->phase == P_BODY && s->depth == 1 && (!m->suffix || !*m->suffix) && can_end(m, &s->f[0]))
        return true;
    return false;
}

static void init_state(const jmask *m, jstate *s) {
    memset(s, 0, offsetof(jstate, f));
    s->phase = m->prefix && *m->prefix ? P_PRE : P_BODY;
}

static void copy_state(jstate *d, const jstate *s) {
    memcpy(d, s, offsetof(jstate, f) + s->depth * sizeof(frame));
}

static bool feed_text(const jmask *m, jstate *s, const char *t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!feed(m, s, (unsigned char)t[i])) return false;
    return true;
}

jmask *jmask_new(const mtplx_tokenizer *tok, const char *schema_json, const char *prefix,
                 const char *suffix, char *err, size_t err_cap) {
    jmask *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, err_cap, "out of memory");
        return NULL;
    }
    new_node(m); /* node 0: any value */
    cJSON *sch = NULL;
    if (schema_json) {
        sch = cJSON_Parse(schema_json);
        if (!cJSON_IsObject(sch)) {
            snprintf(err, err_cap, "expected a JSON object");
            cJSON_Delete(sch);
            jmask_free(m);
            return NULL;
        }
        m->root = compile(m, sch, 0, err, err_cap);
        cJSON_Delete(sch);
    } else {
        m->root = new_node(m);
        if (m->root >= 0) m->nodes[m->root].types = T_OBJ; /* json_object: an object */
    }
    m->prefix = prefix ? strdup(prefix) : NULL;
    m->suffix = suffix ? strdup(suffix) : NULL;
    m->v = tok ? get_vocab(tok) : NULL;
    if (m->root < 0 || (tok && !m->v)) {
        if (!err[0]) snprintf(err, err_cap, "out of memory");
        jmask_free(m);
        return NULL;
    }
    return m;
}

void jmask_free(jmask *m) {
    if (!m) return;
    for (int i = 0; i < m->n_nodes; i++) {
        jnode *n = &m->nodes[i];
        for (int k = 0; k < n->n_props; k++) free(n->keys[k]);
        for (int k = 0; k < n->n_enum; k++) free(n->enums[k]);
        free(n->keys);
        free(n->prop);
        free(n->enums);
    }
    free(m->nodes);
    free(m->prefix);
    free(m->suffix);
    free(m->ids);
    free(m->states);
    free(m);
}

bool jmask_check_text(jmask *m, const char *text, size_t n, bool *complete) {
    jstate *s = &m->tmp;
    init_state(m, s);
    bool ok = feed_text(m, s, text, n);
    *complete = ok && s->phase == P_END;
    if (ok && !m->suffix && s->phase == P_SUF) *complete = true;
    return ok;
}

/* The state after gen[0..n), reusing the states of the common prefix. */
static const jstate *state_at(jmask *m, const int32_t *gen, int32_t n) {
    if (m->cap < n + 1) {
        int32_t cap = (n + 1) * 2;
        int32_t *ids = realloc(m->ids, (size_t)cap * sizeof *ids);
        if (ids) m->ids = ids;
        jstate *st = realloc(m->states, (size_t)(cap + 1) * sizeof *st);
        if (st) m->states = st;
        if (!ids || !st) return NULL;
        m->cap = cap;
    }
    int32_t k = 0;
    while (k < m->n_cached && k < n && m->ids[k] == gen[k]) k++;
    if (k == 0) init_state(m, &m->states[0]);
    for (int32_t i = k; i < n; i++) {
        jstate *s = &m->states[i + 1];
        copy_state(s, &m->states[i]);
        int32_t id = gen[i];
        m->ids[i] = id;
        if (s->phase == P_DEAD) continue;
        if (id < 0 || id >= m->v->n || !m->v->text[id] || !feed_text(m, s, m->v->text[id], m->v->len[id]))
            s->phase = P_DEAD;
    }
    m->n_cached = n;
    return &m->states[n];
}

void jmask_apply(const int32_t *gen, int32_t n_gen, float *logits, int32_t n_vocab, void *user) {
    jmask *m = user;
    const jstate *cur = state_at(m, gen, n_gen);
    if (!cur || cur->phase == P_DEAD) return; /* lost track: no constraint rather than none allowed */
    bool acc = accepting(m, cur);
    if (acc && !m->v->has_eog) return; /* nothing could end it: the token callback stops instead */
    int32_t V = n_vocab < m->v->n ? n_vocab : m->v->n;
    for (int32_t i = 0; i < V; i++) {
        if (logits[i] == -INFINITY) continue;
        bool ok;
        if (m->v->eog[i]) ok = acc;
        else if (!m->v->text[i] || !m->v->len[i]) ok = false;
        else {
            copy_state(&m->tmp, cur);
            ok = feed_text(m, &m->tmp, m->v->text[i], m->v->len[i]);
        }
        if (!ok) logits[i] = -INFINITY;
    }
    for (int32_t i = V; i < n_vocab; i++) logits[i] = -INFINITY;
}
