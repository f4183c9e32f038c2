/* bench_compare.c: `mtplx bench compare A.json B.json`: every number under
 * "results" of two `mtplx bench --json` outputs side by side (A, B, B - A,
 * B / A), array elements named by their prompt / depth / positions /
 * temperature fields rather than their index, and each difference in the
 * machine, build and model sections flagged first: a ratio across machines
 * or builds compares more than the code. */
#include "cli/bench_suites.h"

#include <string.h>

typedef struct {
    char path[320];
    const cJSON *v;
} leaf;

typedef struct {
    leaf *l;
    int n, cap;
} leaves;

static void add_leaf(leaves *ls, const char *path, const cJSON *v) {
    if (ls->n == ls->cap) {
        int nc = ls->cap ? ls->cap * 2 : 64;
        leaf *p = realloc(ls->l, (size_t)nc * sizeof *p);
        if (!p) return;
        ls->l = p;
        ls->cap = nc;
    }
    snprintf(ls->l[ls->n].path, sizeof ls->l[ls->n].path, "%s", path);
    ls->l[ls->n++].v = v;
}

/* An array element's name: "[prompt=harbour,depth=2]", or "[i]". */
static void elem_name(const cJSON *e, int i, char *buf, size_t cap) {
    static const char *keys[] = {"prompt", "name", "positions", "depth", "temperature", "position"};
    size_t n = 0;
    buf[0] = 0;
    if (cJSON_IsObject(e))
        for (size_t k = 0; k < sizeof keys / sizeof *keys && n + 2 < cap; k++) {
            const cJSON *v = cJSON_GetObjectItem(e, keys[k]);
            if (cJSON_IsString(v))
                n += (size_t)snprintf(buf + n, cap - n, "%s%s=%s", n ? "," : "[", keys[k], v->valuestring);
            else if (cJSON_IsNumber(v))
                n += (size_t)snprintf(buf + n, cap - n, "%s%s=%g", n ? "," : "[", keys[k], v->valuedouble);
        }
    if (n && n + 2 < cap) snprintf(buf + n, cap - n, "]");
    else snprintf(buf, cap, "[%d]", i);
}

static void flatten(leaves *ls, const char *path, const cJSON *v) {
    char p[320], name[200];
    if (cJSON_IsObject(v)) {
        const cJSON *c;
        cJSON_ArrayForEach(c, v) {
            snprintf(p, sizeof p, "%s%s%s", path, *path ? "." : "", c->string ? c->string : "?");
            flatten(ls, p, c);
        }
    } else if (cJSON_IsArray(v)) {
        int i = 0;
        const cJSON *c;
        bool objs = cJSON_IsObject(cJSON_GetArrayItem(v, 0));
        cJSON_ArrayForEach(c, v) {
            if (objs) elem_name(c, i, name, sizeof name);
            else snprintf(name, sizeof name, "[%d]", i);
            snprintf(p, sizeof p, "%s%s", path, name);
            flatten(ls, p, c);
            i++;
        }
    } else {
        add_leaf(ls, path, v);
    }
}

static const cJSON *find_leaf(const leaves *ls, const char *path) {
    for (int i = 0; i < ls->n; i++)
        if (!strcmp(ls->l[i].path, path)) return ls->l[i].v;
    return NULL;
}

static void show(const cJSON *v, char *buf, size_t cap) {
    if (!v) snprintf(buf, cap, "-");
    else if (cJSON_IsNumber(v)) snprintf(buf, cap, "%.6g", v->valuedouble);
    else if (cJSON_IsString(v)) snprintf(buf, cap, "%.100s", v->valuestring);
    else if (cJSON_IsBool(v)) snprintf(buf, cap, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else snprintf(buf, cap, "null");
}

static cJSON *load(const char *path) {
    char *text = NULL;
    size_t len = 0;
    if (mtplx_read_file(path, &text, &len) != MTPLX_OK) {
        cli_error("bench compare");
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(j) || !cJSON_IsObject(cJSON_GetObjectItem(j, "results"))) {
        fprintf(stderr, "mtplx bench compare: %s is not the JSON of `mtplx bench --json`\n", path);
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

int bench_compare(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: mtplx bench compare A.json B.json\n\n"
               "Every number under \"results\" of two `mtplx bench --json` outputs: A, B, B-A and\n"
               "B/A; differences in machine, build and model are flagged first.\n");
        return EXIT_OK;
    }
    if (argc != 3) return cli_usage_error("bench", "compare wants two files: A.json B.json");
    cJSON *a = load(argv[1]), *b = a ? load(argv[2]) : NULL;
    if (!a || !b) {
        cJSON_Delete(a);
        return EXIT_RUNTIME;
    }
    printf("A: %s\nB: %s\n", argv[1], argv[2]);
    int flagged = 0;
    static const char *sections[] = {"suite", "machine", "build", "model"};
    for (size_t s = 0; s < sizeof sections / sizeof *sections; s++) {
        leaves la = {0}, lb = {0};
        flatten(&la, sections[s], cJSON_GetObjectItem(a, sections[s]));
        flatten(&lb, sections[s], cJSON_GetObjectItem(b, sections[s]));
        char x[128], y[128];
        for (int pass = 0; pass < 2; pass++) {
            const leaves *l1 = pass ? &lb : &la, *l2 = pass ? &la : &lb;
            for (int i = 0; i < l1->n; i++) {
                const cJSON *o = find_leaf(l2, l1->l[i].path);
                if (pass && o) continue; /* seen from A's side */
                show(pass ? o : l1->l[i].v, x, sizeof x);
                show(pass ? l1->l[i].v : o, y, sizeof y);
                if (!strcmp(x, y)) continue;
                printf("DIFFERS %-28s A: %s | B: %s\n", l1->l[i].path, x, y);
                flagged++;
            }
        }
        free(la.l);
        free(lb.l);
    }
    if (flagged) printf("note: %d machine / build / model / suite field%s differ: the numbers below "
                        "compare more than the code\n", flagged, flagged == 1 ? "" : "s");
    else printf("same suite, machine, build and model\n");
    leaves ra = {0}, rb = {0};
    flatten(&ra, "", cJSON_GetObjectItem(a, "results"));
    flatten(&rb, "", cJSON_GetObjectItem(b, "results"));
    printf("%-58s %12s %12s %12s %9s\n", "metric", "A", "B", "B-A", "B/A");
    int compared = 0, only = 0;
    char x[128], y[128];
    for (int i = 0; i < ra.n; i++) {
        const cJSON *va = ra.l[i].v, *vb = find_leaf(&rb, ra.l[i].path);
        if (cJSON_IsNumber(va) && cJSON_IsNumber(vb)) {
            double d = vb->valuedouble - va->valuedouble;
            char ratio[32];
            if (va->valuedouble != 0) snprintf(ratio, sizeof ratio, "%.3fx", vb->valuedouble / va->valuedouble);
            else snprintf(ratio, sizeof ratio, "-");
            printf("%-58.58s %12.4g %12.4g %+12.4g %9s\n", ra.l[i].path, va->valuedouble,
                   vb->valuedouble, d, ratio);
            compared++;
        } else {
            show(va, x, sizeof x);
            show(vb, y, sizeof y);
            if (strlen(x) > 40 || strlen(y) > 40) continue; /* long text (outputs) */
            if (!vb) only++;
            if (strcmp(x, y)) printf("%-58.58s %12s %12s %s\n", ra.l[i].path, x, y,
                                     vb ? "CHANGED" : "only in A");
        }
    }
    for (int i = 0; i < rb.n; i++)
        if (!find_leaf(&ra, rb.l[i].path)) {
            show(rb.l[i].v, y, sizeof y);
            if (strlen(y) <= 40) printf("%-58.58s %12s %12s only in B\n", rb.l[i].path, "-", y);
            only++;
        }
    printf("compare: %d metrics in both, %d in one only, %d machine/build/model/suite differences\n",
           compared, only, flagged);
    free(ra.l);
    free(rb.l);
    cJSON_Delete(a);
    cJSON_Delete(b);
    return EXIT_OK;
}
