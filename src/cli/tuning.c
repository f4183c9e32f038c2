/* tuning.c: the tuning store, the embedded prompt suites, the measurement
 * loop, tune's decision rule and the mode presets (see tuning.h).
 * Deliberately not here: any speed threshold (a benchmark reports, it does
 * not assert), and anything about how MTP works inside the engine. */
#include "cli/tuning.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* The store                                                           */
/* ------------------------------------------------------------------ */

const char *tune_store_path(void) {
    static char path[PATH_MAX];
    const char *x = getenv("XDG_CONFIG_HOME");
    if (x && x[0] == '/') snprintf(path, sizeof path, "%s/mtplx/tuning.json", x);
    else snprintf(path, sizeof path, "%s/.config/mtplx/tuning.json",
                  getenv("HOME") ? getenv("HOME") : ".");
    return path;
}

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * FNV_PRIME;
    return h;
}

/* size, first MiB, last MiB of one file into h. */
static bool hash_file(const char *path, uint64_t *h) {
    enum { MIB = 1 << 20 };
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return false;
    }
    uint64_t size = (uint64_t)st.st_size;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(size >> (8 * i));
    *h = fnv(*h, le, 8);
    unsigned char *buf = malloc(MIB);
    if (!buf) {
        fclose(f);
        return false;
    }
    size_t n = fread(buf, 1, MIB, f);
    *h = fnv(*h, buf, n);
    if (size > MIB) {
        off_t off = size > 2 * (uint64_t)MIB ? (off_t)(size - MIB) : (off_t)MIB;
        if (fseeko(f, off, SEEK_SET) == 0) {
            n = fread(buf, 1, MIB, f);
            *h = fnv(*h, buf, n);
        }
    }
    free(buf);
    fclose(f);
    return true;
}

bool tune_model_hash(const char *path, char *out, size_t cap) {
    uint64_t h = FNV_OFFSET;
    struct stat st;
    if (stat(path, &st) != 0) return false;
    if (S_ISDIR(st.st_mode)) {
        struct dirent **names = NULL;
        int n = scandir(path, &names, NULL, alphasort);
        if (n < 0) return false;
        for (int i = 0; i < n; i++) {
            char p[PATH_MAX];
            struct stat fs;
            snprintf(p, sizeof p, "%s/%s", path, names[i]->d_name);
            if (names[i]->d_name[0] != '.' && stat(p, &fs) == 0 && S_ISREG(fs.st_mode)) {
                h = fnv(h, names[i]->d_name, strlen(names[i]->d_name) + 1);
                hash_file(p, &h);
            }
            free(names[i]);
        }
        free(names);
    } else if (!hash_file(path, &h)) {
        return false;
    }
    snprintf(out, cap, "fnv1a64:%016llx", (unsigned long long)h);
    return true;
}

bool tune_key_make(const char *model_path, const char *quant, tune_key *k) {
    memset(k, 0, sizeof *k);
    if (!tune_model_hash(model_path, k->model_hash, sizeof k->model_hash)) return false;
    snprintf(k->quant, sizeof k->quant, "%s", quant);
    mtplx_hwinfo hw;
    mtplx_hwinfo_detect(&hw);
    snprintf(k->hardware, sizeof k->hardware, "%s", hw.key);
    snprintf(k->version, sizeof k->version, "%s", MTPLX_VERSION);
    return true;
}

/* The whole store as JSON: an empty one when the file does not exist; NULL
 * (message printed) when it exists but cannot be read or parsed. */
static cJSON *store_load(void) {
    const char *path = tune_store_path();
    char *text = NULL;
    size_t len = 0;
    if (!mtplx_file_exists(path)) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "format", "mtplx-tuning/1");
        cJSON_AddArrayToObject(root, "entries");
        cJSON_AddArrayToObject(root, "bandwidth");
        return root;
    }
    if (mtplx_read_file(path, &text, &len) != MTPLX_OK) {
        cli_error("cannot read the tuning store");
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root || !cJSON_IsObject(root)) {
        fprintf(stderr, "mtplx: tuning store %s is not a JSON object; delete it or run "
                        "`mtplx tune --retune`\n", path);
        cJSON_Delete(root);
        return NULL;
    }
    if (!cJSON_IsArray(cJSON_GetObjectItem(root, "entries"))) {
        cJSON_DeleteItemFromObject(root, "entries");
        cJSON_AddArrayToObject(root, "entries");
    }
    if (!cJSON_IsArray(cJSON_GetObjectItem(root, "bandwidth"))) {
        cJSON_DeleteItemFromObject(root, "bandwidth");
        cJSON_AddArrayToObject(root, "bandwidth");
    }
    return root;
}

static bool mkdirs(const char *dir) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return false;
        *s = '/';
    }
    return mkdir(p, 0755) == 0 || errno == EEXIST;
}

/* Write to a temporary file beside the store, then rename: a reader never
 * sees half a file, and a crash leaves the old store. */
static bool store_save(cJSON *root) {
    const char *path = tune_store_path();
    char dir[PATH_MAX], tmp[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    if (!mkdirs(dir)) {
        fprintf(stderr, "mtplx: cannot create %s: %s\n", dir, strerror(errno));
        return false;
    }
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    char *text = cJSON_Print(root);
    FILE *f = text ? fopen(tmp, "w") : NULL;
    bool ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) ok = false;
    free(text);
    if (ok && rename(tmp, path) != 0) ok = false;
    if (!ok) {
        fprintf(stderr, "mtplx: cannot write the tuning store %s: %s\n", path, strerror(errno));
        unlink(tmp);
    }
    return ok;
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static bool key_matches(const cJSON *e, const tune_key *k) {
    return !strcmp(jstr(e, "model_hash"), k->model_hash) && !strcmp(jstr(e, "quant"), k->quant) &&
           !strcmp(jstr(e, "hardware"), k->hardware) && !strcmp(jstr(e, "mtplx_version"), k->version);
}

static void entry_from_json(const cJSON *e, tune_entry *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->key.model_hash, sizeof out->key.model_hash, "%s", jstr(e, "model_hash"));
    snprintf(out->key.quant, sizeof out->key.quant, "%s", jstr(e, "quant"));
    snprintf(out->key.hardware, sizeof out->key.hardware, "%s", jstr(e, "hardware"));
    snprintf(out->key.version, sizeof out->key.version, "%s", jstr(e, "mtplx_version"));
    snprintf(out->model, sizeof out->model, "%s", jstr(e, "model"));
    snprintf(out->suite, sizeof out->suite, "%s", jstr(e, "suite"));
    snprintf(out->when, sizeof out->when, "%s", jstr(e, "when"));
    out->depth = (int32_t)jnum(e, "depth");
    out->draft_vocab = (int32_t)jnum(e, "draft_vocab"); /* absent (older entries): 0 */
    out->threads = (int32_t)jnum(e, "threads");
    out->ar_tps = jnum(e, "ar_tokens_per_s");
    out->best_tps = jnum(e, "best_tokens_per_s");
}

int tune_store_get(const tune_key *k, tune_entry *out) {
    cJSON *root = store_load();
    if (!root) return -1;
    int found = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "entries")) {
        if (key_matches(e, k) && jnum(e, "depth") >= 1 && jnum(e, "depth") <= MTPLX_MAX_DRAFT) {
            entry_from_json(e, out);
            found = 1;
            break;
        }
    }
    cJSON_Delete(root);
    return found;
}

static void remove_key(cJSON *entries, const tune_key *k) {
    for (int i = cJSON_GetArraySize(entries) - 1; i >= 0; i--)
        if (key_matches(cJSON_GetArrayItem(entries, i), k)) cJSON_DeleteItemFromArray(entries, i);
}

static void now_utc(char *buf, size_t cap) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

bool tune_store_put(const tune_entry *in) {
    cJSON *root = store_load();
    if (!root) return false;
    cJSON *entries = cJSON_GetObjectItem(root, "entries");
    remove_key(entries, &in->key);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "model_hash", in->key.model_hash);
    cJSON_AddStringToObject(e, "quant", in->key.quant);
    cJSON_AddStringToObject(e, "hardware", in->key.hardware);
    cJSON_AddStringToObject(e, "mtplx_version", in->key.version);
    cJSON_AddStringToObject(e, "model", in->model);
    cJSON_AddNumberToObject(e, "depth", in->depth);
    if (in->draft_vocab > 0) cJSON_AddNumberToObject(e, "draft_vocab", in->draft_vocab);
    cJSON_AddNumberToObject(e, "threads", in->threads);
    cJSON_AddNumberToObject(e, "ar_tokens_per_s", in->ar_tps);
    cJSON_AddNumberToObject(e, "best_tokens_per_s", in->best_tps);
    cJSON_AddStringToObject(e, "suite", in->suite);
    char when[32];
    if (in->when[0]) snprintf(when, sizeof when, "%s", in->when);
    else now_utc(when, sizeof when);
    cJSON_AddStringToObject(e, "when", when);
    cJSON_AddItemToArray(entries, e);
    bool ok = store_save(root);
    cJSON_Delete(root);
    return ok;
}

bool tune_store_remove(const tune_key *k) {
    if (!mtplx_file_exists(tune_store_path())) return true;
    cJSON *root = store_load();
    if (!root) return false;
    remove_key(cJSON_GetObjectItem(root, "entries"), k);
    bool ok = store_save(root);
    cJSON_Delete(root);
    return ok;
}

int tune_store_show(FILE *f) {
    cJSON *root = store_load();
    if (!root) return -1;
    const cJSON *entries = cJSON_GetObjectItem(root, "entries");
    int n = cJSON_GetArraySize(entries);
    fprintf(f, "tuning store: %s (%d entr%s)\n", tune_store_path(), n, n == 1 ? "y" : "ies");
    if (n) fprintf(f, "%-5s %-6s %9s %9s %7s %-6s %-25s %-21s %-7s %s\n", "depth", "vocab",
                   "AR tok/s", "tok/s", "speedup", "quant", "model hash", "when", "version",
                   "model / hardware");
    const cJSON *e;
    cJSON_ArrayForEach(e, entries) {
        tune_entry t;
        entry_from_json(e, &t);
        char vocab[16] = "all";
        if (t.draft_vocab > 0) snprintf(vocab, sizeof vocab, "%d", t.draft_vocab);
        fprintf(f, "%-5d %-6s %9.1f %9.1f %6.2fx %-6s %-25s %-21s %-7s %s\n", t.depth, vocab,
                t.ar_tps, t.best_tps, t.ar_tps > 0 ? t.best_tps / t.ar_tps : 0.0, t.key.quant,
                t.key.model_hash, t.when, t.key.version, t.model);
        fprintf(f, "%83s %s\n", "", t.key.hardware);
    }
    cJSON_Delete(root);
    return n;
}

bool tune_store_get_bandwidth(const char *hw_key, double *g1, double *gall, int *nt) {
    cJSON *root = store_load();
    if (!root) return false;
    bool found = false;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "bandwidth")) {
        if (!strcmp(jstr(e, "hardware"), hw_key) && jnum(e, "gbps_1") > 0) {
            *g1 = jnum(e, "gbps_1");
            *gall = jnum(e, "gbps_all");
            *nt = (int)jnum(e, "threads");
            found = true;
            break;
        }
    }
    cJSON_Delete(root);
    return found;
}

bool tune_store_put_bandwidth(const char *hw_key, double g1, double gall, int nt) {
    cJSON *root = store_load();
    if (!root) return false;
    cJSON *arr = cJSON_GetObjectItem(root, "bandwidth");
    for (int i = cJSON_GetArraySize(arr) - 1; i >= 0; i--)
        if (!strcmp(jstr(cJSON_GetArrayItem(arr, i), "hardware"), hw_key))
            cJSON_DeleteItemFromArray(arr, i);
    cJSON *e = cJSON_CreateObject();
    char when[32];
    now_utc(when, sizeof when);
    cJSON_AddStringToObject(e, "hardware", hw_key);
    cJSON_AddNumberToObject(e, "gbps_1", g1);
    cJSON_AddNumberToObject(e, "gbps_all", gall);
    cJSON_AddNumberToObject(e, "threads", nt);
    cJSON_AddStringToObject(e, "when", when);
    cJSON_AddItemToArray(arr, e);
    bool ok = store_save(root);
    cJSON_Delete(root);
    return ok;
}

/* ------------------------------------------------------------------ */
/* Prompt suites                                                       */
/* ------------------------------------------------------------------ */

/* Written for mtplx (not taken from any corpus the default model was
 * trained on): plain narrative and descriptive prose, and code-like text. */
/* prose and code alternate, so the first n of "all" are a balanced mix */
static const tune_prompt suite_all[] = {
    {"harbour", "prose",
     "The fishing boats came back to the harbour late in the afternoon, and the men who "
     "had waited on the quay all day began to"},
    {"c_loop", "code",
     "/* Return the sum of the first n elements of the array. */\n"
     "int sum(const int *a, int n) {\n    int s = 0;\n    for (int i = 0; i < n; i++)"},
    {"letter", "prose",
     "My dear sister, I write to you from the small inn at the edge of the village, where "
     "the rain has kept us for three days. The landlord is a kind man, but"},
    {"py_func", "code",
     "def count_words(text):\n    \"\"\"Count how often each word occurs in text.\"\"\"\n"
     "    counts = {}\n    for word in text.split():\n"},
    {"winter", "prose",
     "When the first snow fell that year, the children of the farm ran out into the yard "
     "before breakfast, and their mother"},
    {"config", "code",
     "[server]\nhost = \"127.0.0.1\"\nport = 8000\nthreads = 4\n\n[logging]\nlevel = "},
};

const tune_prompt *tune_suite(const char *name, int *n) {
    static tune_prompt prose[6], code[6];
    static int n_prose, n_code;
    if (!n_prose) {
        for (size_t i = 0; i < sizeof suite_all / sizeof *suite_all; i++) {
            if (!strcmp(suite_all[i].kind, "prose")) prose[n_prose++] = suite_all[i];
            else code[n_code++] = suite_all[i];
        }
    }
    if (!name || !strcmp(name, "all")) {
        *n = (int)(sizeof suite_all / sizeof *suite_all);
        return suite_all;
    }
    if (!strcmp(name, "prose")) {
        *n = n_prose;
        return prose;
    }
    if (!strcmp(name, "code")) {
        *n = n_code;
        return code;
    }
    *n = 0;
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Measurement                                                         */
/* ------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tune_median(const double *v, int n) {
    if (n <= 0) return 0;
    double *c = malloc((size_t)n * sizeof *c);
    if (!c) return v[0];
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void progress(const tune_plan *p, int done, int total, double t0) {
    if (!p->progress || !isatty(2)) return;
    enum { W = 30 };
    int fill = total ? done * W / total : W;
    double el = (cli_now_ms() - t0) / 1e3;
    double eta = done ? el / done * (total - done) : 0;
    fprintf(stderr, "\r[");
    for (int i = 0; i < W; i++) fputc(i < fill ? '#' : '.', stderr);
    fprintf(stderr, "] %d/%d  %.0fs elapsed, ETA %.0fs   ", done, total, el, eta);
    if (done == total) fprintf(stderr, "\r%*s\r", W + 50, "");
    fflush(stderr);
}

/* One generation on a fresh context. */
static mtplx_status one_run(mtplx_model *m, const tune_plan *p, const int32_t *ids, int32_t n,
                            const tune_cfg *cfg, int32_t n_tokens, uint64_t seed,
                            mtplx_gen_stats *st) {
    mtplx_ctx_params cp = mtplx_ctx_default_params();
    cp.n_threads = p->n_threads;
    cp.n_ctx = p->n_ctx > 0 ? p->n_ctx : 1024;
    cp.device = p->device;
    mtplx_ctx *ctx = NULL;
    MTPLX_TRY(mtplx_ctx_new(m, &cp, &ctx));
    mtplx_gen_params gp = mtplx_gen_default_params();
    gp.no_event_logits = true; /* ids only: greedy picks may stay on a GPU */
    gp.sampling.temperature = p->temperature;
    gp.sampling.seed = seed;
    gp.max_tokens = n_tokens;
    gp.draft_depth = cfg->depth;
    gp.draft_vocab = cfg->draft_vocab;
    gp.ignore_eos = true; /* every configuration produces the same number of tokens */
    mtplx_status s = mtplx_generate(ctx, ids, n, &gp, NULL, NULL, st);
    mtplx_ctx_free(ctx);
    return s;
}

int32_t tune_cfgs_depths(tune_cfg *out, int32_t max_depth) {
    for (int32_t d = 0; d <= max_depth; d++) out[d] = (tune_cfg){.depth = d};
    return max_depth + 1;
}

int32_t tune_vocab_candidates(int32_t n_vocab, int32_t *out) {
    int32_t n = 0;
    out[n++] = -1;
    for (int32_t div = 2; div <= 4; div *= 2) {
        int32_t v = n_vocab / div / 8 * 8;
        if (v >= 1024) out[n++] = v;
    }
    return n;
}

mtplx_status tune_measure(mtplx_model *m, const tune_prompt *prompts, int n_prompts,
                          const tune_plan *p, tune_cfg *out, int32_t nc) {
    if (nc < 1 || nc > MTPLX_MAX_DRAFT + 1 || n_prompts < 1 || p->reps < 1)
        return mtplx_fail(MTPLX_ERR_ARG, "tune: bad plan");
    for (int32_t i = 0; i < nc; i++) out[i] = (tune_cfg){.depth = out[i].depth,
                                                         .draft_vocab = out[i].draft_vocab};
    const mtplx_tokenizer *tok = mtplx_model_tokenizer(m);
    int32_t **ids = calloc((size_t)n_prompts, sizeof *ids);
    size_t *n_ids = calloc((size_t)n_prompts, sizeof *n_ids);
    mtplx_status s = ids && n_ids ? MTPLX_OK : MTPLX_ERR_NOMEM;
    for (int i = 0; s == MTPLX_OK && i < n_prompts; i++)
        s = mtplx_tokenize(tok, prompts[i].text, strlen(prompts[i].text), true, false, &ids[i],
                           &n_ids[i]);
    int total = (p->warmup ? nc : 0) + p->reps * n_prompts * nc, done = 0;
    double t0 = cli_now_ms();
    mtplx_gen_stats st;
    for (int32_t d = 0; s == MTPLX_OK && p->warmup && d < nc; d++) {
        s = one_run(m, p, ids[0], (int32_t)n_ids[0], &out[d], 16, p->seed, &st);
        progress(p, ++done, total, t0);
    }
    uint64_t rng = p->seed ^ 0x6d74706c78ull;
    for (int r = 0; s == MTPLX_OK && r < p->reps; r++) {
        for (int i = 0; s == MTPLX_OK && i < n_prompts; i++) {
            int32_t order[MTPLX_MAX_DRAFT + 1];
            for (int32_t d = 0; d < nc; d++) order[d] = d;
            for (int32_t d = nc - 1; d > 0; d--) { /* Fisher-Yates */
                int32_t j = (int32_t)(splitmix(&rng) % (uint64_t)(d + 1)), t = order[d];
                order[d] = order[j];
                order[j] = t;
            }
            for (int32_t k = 0; s == MTPLX_OK && k < nc; k++) {
                tune_cfg *c = &out[order[k]];
                s = one_run(m, p, ids[i], (int32_t)n_ids[i], c, p->n_tokens,
                            p->seed + 1000ull * (uint64_t)i + (uint64_t)r, &st);
                if (s != MTPLX_OK) break;
                if (c->n < TUNE_MAX_SAMPLES && st.t_decode_ms > 0)
                    c->tps[c->n++] = st.n_gen / (st.t_decode_ms / 1e3);
                c->n_gen += st.n_gen;
                c->n_forward += st.n_forward;
                c->t_decode_ms += st.t_decode_ms;
                c->t_draft_ms += st.t_draft_ms;
                c->t_verify_ms += st.t_verify_ms;
                for (int q = 0; q < MTPLX_MAX_DRAFT; q++) {
                    c->drafted[q] += st.drafted[q];
                    c->accepted[q] += st.accepted[q];
                }
                progress(p, ++done, total, t0);
            }
        }
    }
    if (s != MTPLX_OK) progress(p, total, total, t0);
    for (int32_t d = 0; d < nc; d++) {
        tune_cfg *c = &out[d];
        c->median = tune_median(c->tps, c->n);
        c->lo = c->hi = c->n ? c->tps[0] : 0;
        for (int i = 1; i < c->n; i++) {
            if (c->tps[i] < c->lo) c->lo = c->tps[i];
            if (c->tps[i] > c->hi) c->hi = c->tps[i];
        }
    }
    for (int i = 0; ids && i < n_prompts; i++) free(ids[i]);
    free(ids);
    free(n_ids);
    return s;
}

int32_t tune_decide(const double *med, int32_t n_depths, double margin, double tie) {
    int32_t best = 0;
    for (int32_t d = 1; d <= n_depths; d++)
        if (med[d] > 0 && (best == 0 || med[d] > med[best])) best = d;
    if (best == 0) return 0;
    for (int32_t d = 1; d < best; d++) /* the smallest depth tied with the fastest */
        if (med[d] > 0 && med[d] >= med[best] * (1 - tie)) {
            best = d;
            break;
        }
    if (med[0] > 0 && med[best] <= med[0] * (1 + margin)) return 0;
    return best;
}

/* ------------------------------------------------------------------ */
/* Modes                                                               */
/* ------------------------------------------------------------------ */

static const char *mode_names[] = {"auto", "turbo", "sustained", "burst"};

bool cli_mode_parse(const char *s, cli_mode *out) {
    if (!s) {
        *out = CLI_MODE_AUTO;
        return true;
    }
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, mode_names[i])) {
            *out = (cli_mode)i;
            return true;
        }
    return false;
}

const char *cli_mode_name(cli_mode m) { return m >= 0 && m <= CLI_MODE_BURST ? mode_names[m] : "?"; }

enum { TURBO_CTX = 4096, BURST_CTX = 2048, SUSTAINED_CTX = 32768, DEFAULT_DEPTH = 3, BURST_DEPTH = 4 };

int32_t cli_mode_depth_at(const cli_mode_plan *p, int32_t n_positions) {
    if (p->mode != CLI_MODE_SUSTAINED || p->set_depth || p->base_depth <= 0) return p->depth;
    if (n_positions > 16384) return 1;
    if (n_positions > 4096) return p->base_depth < 2 ? p->base_depth : 2;
    return p->base_depth;
}

static int32_t min32(int32_t a, int32_t b) { return a < b ? a : b; }

void cli_mode_resolve(cli_mode mode, const cli_mode_env *env, mtplx_gen_params *gp,
                      mtplx_ctx_params *cp, cli_mode_plan *o) {
    memset(o, 0, sizeof *o);
    o->set_depth = gp->draft_depth >= 0;
    o->set_threads = cp->n_threads > 0;
    o->set_batch = cp->n_batch > 0;
    o->set_ctx = cp->n_ctx > 0;
    o->set_kv = cp->kv_f32 || cp->kv_type != CLI_KV_AUTO;
    o->set_adaptive = gp->adaptive_depth;
    int32_t train = env->n_ctx_train > 0 ? env->n_ctx_train : TURBO_CTX;

    if (mode == CLI_MODE_AUTO) {
        if ((o->set_ctx && cp->n_ctx > 8192) || env->n_expected > 4096) {
            mode = CLI_MODE_SUSTAINED;
            snprintf(o->why, sizeof o->why, "auto: long context");
        } else if (env->n_expected > 0 && env->n_expected <= 1536 &&
                   (!o->set_ctx || cp->n_ctx <= BURST_CTX)) {
            mode = CLI_MODE_BURST;
            snprintf(o->why, sizeof o->why, "auto: %d tokens fit a short context", env->n_expected);
        } else {
            mode = CLI_MODE_TURBO;
            snprintf(o->why, sizeof o->why, "auto");
        }
    } else {
        snprintf(o->why, sizeof o->why, "asked");
    }
    o->mode = mode;

    /* depth */
    int32_t base = env->tuned_depth > 0 ? env->tuned_depth : DEFAULT_DEPTH;
    const char *from = env->tuned_depth > 0 ? "tuned" : "default, not tuned";
    if (mode == CLI_MODE_BURST && env->tuned_depth <= 0) {
        /* deeper than the head was trained drafts out of its distribution:
         * on the built-in model (trained to 3) depth 4 ran 333 tok/s where
         * 3 ran 466 (1 thread, 256 greedy tokens) */
        base = BURST_DEPTH;
        from = "burst max, not tuned";
        if (env->depth_trained > 0 && env->depth_trained < BURST_DEPTH) {
            base = env->depth_trained;
            from = "burst: the head's trained depth, not tuned";
        }
    }
    o->base_depth = base;
    o->n_threads = env->n_threads > 0 ? env->n_threads : 1;
    o->kv_type = MTPLX_KV_F16;
    o->adaptive = false;
    if (mode == CLI_MODE_SUSTAINED) {
        if (env->no_q8_kv) o->kv_note = env->no_q8_kv;
        else o->kv_type = MTPLX_KV_Q8_0;
    }
    if (o->set_kv) o->kv_type = cp->kv_f32 ? MTPLX_KV_F32 : cp->kv_type;
    /* env's figure is F16's 2 bytes a value; Q8_0 takes 34 bytes per 32 */
    uint64_t f16 = env->kv_bytes_per_token;
    o->kv_bytes_per_token = o->kv_type == MTPLX_KV_F32    ? 2 * f16
                            : o->kv_type == MTPLX_KV_Q8_0 ? f16 * 17 / 32
                                                          : f16;
    switch (mode) {
    case CLI_MODE_SUSTAINED: {
        o->n_batch = 256;
        o->adaptive = true;
        uint64_t budget = env->mem_available / 2;
        o->mem_budget = budget;
        int64_t fit = SUSTAINED_CTX;
        if (o->kv_bytes_per_token > 0 && budget > 0)
            fit = budget > env->weight_bytes
                      ? (int64_t)((budget - env->weight_bytes) / o->kv_bytes_per_token)
                      : 512;
        if (fit > SUSTAINED_CTX) fit = SUSTAINED_CTX;
        fit = fit / 256 * 256;
        if (fit < 512) fit = 512;
        o->n_ctx = min32(train, (int32_t)fit);
        break;
    }
    case CLI_MODE_BURST: {
        o->n_batch = 512;
        int32_t want = BURST_CTX;
        if (env->n_expected > want) want = (env->n_expected + 255) / 256 * 256;
        o->n_ctx = min32(train, want);
        break;
    }
    default:
        o->n_batch = 512;
        o->n_ctx = min32(train, TURBO_CTX);
        break;
    }
    /* flags win */
    if (o->set_threads) o->n_threads = cp->n_threads;
    if (o->set_batch) o->n_batch = cp->n_batch;
    if (o->set_ctx) o->n_ctx = cp->n_ctx;
    if (o->set_adaptive) o->adaptive = true;
    if (o->set_depth) {
        o->depth = gp->draft_depth;
        from = "flag";
    } else if (!env->has_mtp) {
        o->depth = 0;
        from = "no MTP head";
        o->adaptive = o->set_adaptive;
    } else {
        o->depth = base;
        if (mode == CLI_MODE_SUSTAINED) {
            int32_t at = env->n_expected > 0 ? env->n_expected : o->n_ctx;
            o->depth = cli_mode_depth_at(o, at);
            if (o->depth != base) from = "context rule";
        }
    }
    snprintf(o->depth_from, sizeof o->depth_from, "%s", from);
    /* the stored draft vocabulary was measured at the tuned depth only */
    if (gp->draft_vocab == 0 && env->tuned_draft_vocab > 0 && o->depth > 0 &&
        o->depth == env->tuned_depth) {
        gp->draft_vocab = env->tuned_draft_vocab;
        o->vocab_tuned = true;
    }
    o->draft_vocab = gp->draft_vocab;

    gp->draft_depth = o->depth;
    gp->adaptive_depth = o->adaptive && o->depth > 0;
    cp->n_threads = o->n_threads;
    cp->n_batch = o->n_batch;
    cp->n_ctx = o->n_ctx;
    cp->kv_type = o->kv_type;
    cp->kv_f32 = false;
}

void cli_mode_print(const cli_mode_plan *p, FILE *log) {
    if (!log) return;
    fprintf(log, "mtplx: mode %s (%s) | depth %d (%s) | threads %d%s | n_batch %d%s | kv %s%s",
            cli_mode_name(p->mode), p->why, p->depth, p->depth_from, p->n_threads,
            p->set_threads ? " (flag)" : "", p->n_batch, p->set_batch ? " (flag)" : "",
            mtplx_kv_type_name(p->kv_type), p->set_kv ? " (flag)" : "");
    if (p->kv_bytes_per_token)
        fprintf(log, " %.1f KiB/token", (double)p->kv_bytes_per_token / 1024.0);
    if (p->kv_note && !p->set_kv) fprintf(log, " (not q8_0: %s)", p->kv_note);
    fprintf(log, " | ctx %d%s", p->n_ctx, p->set_ctx ? " (flag)" : "");
    if (p->adaptive && p->depth > 0) fprintf(log, " | adaptive depth%s", p->set_adaptive ? " (flag)" : "");
    if (p->draft_vocab > 0 && p->depth > 0)
        fprintf(log, " | draft vocab %d (%s)", p->draft_vocab, p->vocab_tuned ? "tuned" : "flag");
    if (p->mem_budget)
        fprintf(log, " | memory budget %.1f GiB", (double)p->mem_budget / (1024.0 * 1024 * 1024));
    if (p->device) fprintf(log, " | device %s", p->device);
    fprintf(log, "\n");
}

int cli_apply_mode(const mtplx_model *model, const char *model_path, const char *mode,
                   int32_t n_expected, mtplx_gen_params *gp, mtplx_ctx_params *cp, FILE *log,
                   cli_mode_plan *plan_out) {
    cli_mode m;
    if (!cli_mode_parse(mode, &m)) {
        fprintf(stderr, "mtplx: unknown mode '%s' (turbo, sustained, burst or auto)\n", mode);
        return EXIT_USAGE;
    }
    mtplx_model_info info;
    mtplx_model_get_info(model, &info);
    mtplx_hwinfo hw;
    mtplx_hwinfo_detect(&hw);
    cli_mode_env env = {.n_threads = hw.n_threads, .mem_available = hw.mem_available,
                        .weight_bytes = info.n_bytes, .n_ctx_train = info.n_ctx_train,
                        .has_mtp = info.n_mtp > 0, .n_expected = n_expected,
                        .depth_trained = info.mtp_depth_trained,
                        .no_q8_kv = cp->device && !strcmp(cp->device, "cuda")
                                        ? "q8_0 KV is CPU-only"
                                    : info.head_dim % 32 ? "head_dim is not a multiple of 32"
                                                         : NULL};
    int64_t kv_dim = (int64_t)info.n_head_kv * info.head_dim;
    /* K and V in F16 for every trunk layer plus one per draft position */
    env.kv_bytes_per_token =
        mtplx_kv_bytes_per_token(MTPLX_KV_F16, kv_dim, info.n_layer + (info.n_mtp ? 4 : 0));
    if (info.n_mtp > 0 && gp->draft_depth < 0) {
        tune_key k;
        tune_entry e;
        if (tune_key_make(model_path, info.weight_type, &k) && tune_store_get(&k, &e) == 1) {
            env.tuned_depth = e.depth;
            env.tuned_draft_vocab = e.draft_vocab;
        }
    }
    cli_mode_plan plan;
    cli_mode_resolve(m, &env, gp, cp, &plan);
    plan.device = cp->device ? cp->device : "cpu";
    cli_mode_print(&plan, log);
    if (plan_out) *plan_out = plan;
    return EXIT_OK;
}

/* ---- the server's side (serve, start --web) ---- */

void cli_serve_mode_init(cli_serve_mode *m) {
    memset(m, 0, sizeof *m);
    m->gp = mtplx_gen_default_params();
    m->cp = mtplx_ctx_default_params();
    m->cp.kv_type = CLI_KV_AUTO;
}

static mtplx_status serve_on_model(const mtplx_model *model, mtplx_server_params *sp, void *user) {
    cli_serve_mode *m = user;
    if (cli_apply_mode(model, sp->model_path, m->mode, 0, &m->gp, &m->cp, NULL, &m->plan) != EXIT_OK)
        return mtplx_fail(MTPLX_ERR_ARG, "--mode %s: expected turbo, sustained, burst or auto", m->mode);
    if (m->no_adaptive) m->gp.adaptive_depth = m->plan.adaptive = false;
    cli_mode_print(&m->plan, stderr);
    sp->n_ctx = m->cp.n_ctx;
    sp->n_threads = m->cp.n_threads;
    sp->n_batch = m->cp.n_batch;
    sp->kv_type = m->cp.kv_type;
    sp->device = m->cp.device;
    sp->draft_depth = m->gp.draft_depth;
    sp->draft_vocab = m->gp.draft_vocab;
    sp->adaptive_depth = m->gp.adaptive_depth;
    return MTPLX_OK;
}

static int32_t serve_depth_for(int32_t n_positions, void *user) {
    return cli_mode_depth_at(&((cli_serve_mode *)user)->plan, n_positions);
}

void cli_serve_mode_attach(mtplx_server_params *sp, cli_serve_mode *m) {
    sp->on_model = serve_on_model;
    sp->depth_for = serve_depth_for;
    sp->user = m;
}
