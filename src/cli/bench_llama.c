/* bench_llama.c: llama.cpp's plain decode of the same GGUF, for `mtplx bench
 * --llama-cpp PATH` (or $MTPLX_LLAMA_CPP). PATH is llama.cpp's llama-bench
 * binary or the folder holding it (a build's bin/). It is run once as
 *   llama-bench -m MODEL -t THREADS -p 0 -n TOKENS -r REPS -o json
 * and the tg row of its JSON array (n_gen > 0: avg_ts, stddev_ts) is read
 * with cJSON. llama.cpp is a peer we measure against, never a dependency:
 * when PATH is absent, not runnable, or llama-bench fails (e.g. a GGUF with
 * tensors it does not know), the comparison is reported as skipped with the
 * reason and the bench itself goes on. Tests use a stand-in script. */
#include "cli/bench_suites.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void why(bench_llama *r, const char *fmt, const char *a) {
    r->ran = false;
    snprintf(r->reason, sizeof r->reason, fmt, a);
}

/* The executable for arg: arg itself, or arg/llama-bench. */
static bool resolve(const char *arg, bench_llama *r) {
    struct stat st;
    if (stat(arg, &st) != 0) {
        why(r, "%.500s does not exist", arg);
        return false;
    }
    if (S_ISDIR(st.st_mode)) snprintf(r->binary, sizeof r->binary, "%.4000s/llama-bench", arg);
    else snprintf(r->binary, sizeof r->binary, "%.4000s", arg);
    if (access(r->binary, X_OK) != 0) {
        why(r, "%.500s is not an executable llama-bench", r->binary);
        return false;
    }
    return true;
}

bool bench_llama_parse(const char *text, bench_llama *r) {
    cJSON *doc = cJSON_Parse(text);
    const cJSON *it, *tg = NULL, *rows = cJSON_IsArray(doc) ? doc : NULL;
    cJSON_ArrayForEach(it, rows) {
        const cJSON *g = cJSON_GetObjectItem(it, "n_gen");
        const cJSON *p = cJSON_GetObjectItem(it, "n_prompt");
        if (cJSON_IsNumber(g) && g->valuedouble > 0 && (!cJSON_IsNumber(p) || p->valuedouble == 0))
            tg = it;
    }
    const cJSON *ts = cJSON_GetObjectItem(tg, "avg_ts");
    if (!cJSON_IsNumber(ts) || !(ts->valuedouble > 0)) {
        cJSON_Delete(doc);
        why(r, "%s", "llama-bench printed no tg row (a JSON array with n_gen > 0 and avg_ts)");
        return false;
    }
    r->tok_s = ts->valuedouble;
    const cJSON *v = cJSON_GetObjectItem(tg, "stddev_ts");
    r->stddev = cJSON_IsNumber(v) ? v->valuedouble : 0;
    v = cJSON_GetObjectItem(tg, "n_gen");
    r->n_gen = (int)v->valuedouble;
    v = cJSON_GetObjectItem(tg, "n_threads");
    r->threads = cJSON_IsNumber(v) ? (int)v->valuedouble : 0;
    v = cJSON_GetObjectItem(tg, "build_commit");
    snprintf(r->commit, sizeof r->commit, "%s", cJSON_IsString(v) ? v->valuestring : "");
    v = cJSON_GetObjectItem(tg, "model_type");
    snprintf(r->model_type, sizeof r->model_type, "%s", cJSON_IsString(v) ? v->valuestring : "");
    cJSON_Delete(doc);
    r->ran = true;
    r->reason[0] = 0;
    return true;
}

bool bench_llama_tg(const char *arg, const char *model, int threads, int n_gen, int reps,
                    bench_llama *r) {
    memset(r, 0, sizeof *r);
    if (!arg || !*arg) {
        why(r, "%s", "no --llama-cpp PATH and no MTPLX_LLAMA_CPP");
        return false;
    }
    if (!resolve(arg, r)) return false;
    if (strchr(r->binary, '\'') || strchr(model, '\'')) {
        why(r, "%s", "a path with a single quote cannot be passed to llama-bench");
        return false;
    }
    char err[64];
    snprintf(err, sizeof err, "/tmp/mtplx-llama-bench.XXXXXX");
    int fd = mkstemp(err);
    if (fd < 0) {
        why(r, "%s", "cannot create a temporary file for llama-bench's messages");
        return false;
    }
    close(fd);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -t %d -p 0 -n %d -r %d -o json 2>'%s' </dev/null",
             r->binary, model, threads, n_gen, reps, err);
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    char *out = NULL;
    size_t len = 0, cap = 0;
    if (p) {
        char buf[4096];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, p)) > 0) {
            if (len + got + 1 > cap) {
                size_t nc = (len + got + 1) * 2;
                char *q = realloc(out, nc);
                if (!q) break;
                out = q;
                cap = nc;
            }
            memcpy(out + len, buf, got);
            len += got;
        }
    }
    int st = p ? pclose(p) : -1;
    if (out) out[len] = 0;
    bool ok = false;
    if (!p) {
        why(r, "%s", "cannot start llama-bench");
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !out) {
        /* the last non-empty line of its messages says why */
        char *msg = NULL;
        size_t ml = 0;
        char last[300] = "";
        if (mtplx_read_file(err, &msg, &ml) == MTPLX_OK) {
            for (char *line = strtok(msg, "\n"); line; line = strtok(NULL, "\n"))
                if (*line) snprintf(last, sizeof last, "%s", line);
            free(msg);
        }
        char m[600];
        snprintf(m, sizeof m, "llama-bench failed (exit %d)%s%.290s",
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1, *last ? ": " : "", last);
        why(r, "%s", m);
    } else {
        ok = bench_llama_parse(out, r);
    }
    unlink(err);
    free(out);
    return ok;
}

cJSON *bench_llama_json(const bench_llama *r) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddBoolToObject(j, "ran", r->ran);
    if (!r->ran) {
        cJSON_AddStringToObject(j, "skipped", r->reason);
        return j;
    }
    cJSON_AddStringToObject(j, "binary", r->binary);
    cJSON_AddStringToObject(j, "build_commit", r->commit);
    cJSON_AddStringToObject(j, "model_type", r->model_type);
    cJSON_AddNumberToObject(j, "threads", r->threads);
    cJSON_AddNumberToObject(j, "tokens", r->n_gen);
    cJSON_AddNumberToObject(j, "tokens_per_s", r->tok_s);
    cJSON_AddNumberToObject(j, "tokens_per_s_stddev", r->stddev);
    return j;
}
