/* cmd_models.c: `mtplx models`: list the model store (<home>/models, home =
 * MTPLX_HOME or ~/.mtplx): every .gguf file, HF folder (config.json) and
 * llama2.c .bin, with its size, architecture, quant type and MTP heads, read
 * by loading it (GGUF is mmapped, so this is cheap). Leaves out downloading
 * and deleting: the store is a plain folder. */
#include "cli/cli.h"
#include "core/core.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <getopt.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

static void help(void) {
    printf("usage: mtplx models [--json]\n\n"
           "List the models in %s/models (set MTPLX_HOME to move the store).\n"
           "A name listed here can be given as -m NAME to every command.\n\n"
           "  --json       machine-readable output\n"
           "  -h, --help\n",
           cli_home());
}

static uint64_t du(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    if (!S_ISDIR(st.st_mode)) return (uint64_t)st.st_size;
    uint64_t sum = 0;
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%.3800s/%.255s", path, e->d_name);
        struct stat fs;
        if (stat(p, &fs) == 0 && S_ISREG(fs.st_mode)) sum += (uint64_t)fs.st_size;
    }
    closedir(d);
    return sum;
}

static bool is_model(const char *dir, const char *name) {
    size_t n = strlen(name);
    if (name[0] == '.') return false;
    if (n > 5 && !strcmp(name + n - 5, ".gguf")) return true;
    if (n > 4 && !strcmp(name + n - 4, ".bin")) {
        /* a llama2.c tokenizer beside a checkpoint is not a model */
        return strncmp(name, "tokenizer", 9) && strncmp(name, "tok", 3);
    }
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%.3800s/%.255s/config.json", dir, name);
    return mtplx_file_exists(p);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int cmd_models(int argc, char **argv) {
    enum { O_JSON = 256 };
    static const struct option opts[] = {
        {"json", no_argument, 0, O_JSON}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    bool json = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_JSON: json = true; break;
        case 'h': help(); return EXIT_OK;
        default: return cli_usage_error("models", "unknown option");
        }
    }
    if (optind < argc) return cli_usage_error("models", "unexpected argument '%s'", argv[optind]);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s/models", PATH_MAX - 16, cli_home());
    char **names = NULL;
    size_t n = 0, cap = 0;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!is_model(dir, e->d_name)) continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                char **nn = realloc(names, cap * sizeof *names);
                if (!nn) break;
                names = nn;
            }
            names[n++] = mtplx_strdup(e->d_name);
        }
        closedir(d);
    }
    if (n) qsort(names, n, sizeof *names, cmp_str);
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    if (!json) {
        if (!n) printf("no models in %s (add .gguf files or HF folders there, or use "
                       "`mtplx forge convert`)\n", dir);
        else printf("%-32s %9s %-8s %-6s %4s  %s\n", "name", "size", "arch", "quant", "mtp", "params");
    }
    for (size_t i = 0; i < n; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%.*s/%s", PATH_MAX - 300, dir, names[i]);
        uint64_t size = du(p);
        mtplx_model *m = NULL;
        mtplx_model_params mp = mtplx_model_default_params();
        mtplx_model_info info;
        memset(&info, 0, sizeof info);
        bool ok = mtplx_model_load(p, &mp, &m) == MTPLX_OK;
        if (ok) mtplx_model_get_info(m, &info);
        const char *err = ok ? "" : mtplx_last_error();
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", names[i]);
            cJSON_AddStringToObject(o, "path", p);
            cJSON_AddNumberToObject(o, "size_bytes", (double)size);
            if (ok) {
                cJSON_AddStringToObject(o, "arch", info.arch);
                cJSON_AddStringToObject(o, "format", info.format);
                cJSON_AddStringToObject(o, "quant", info.weight_type);
                cJSON_AddNumberToObject(o, "mtp_heads", info.n_mtp);
                cJSON_AddNumberToObject(o, "params", (double)info.n_params);
            } else {
                cJSON_AddStringToObject(o, "error", err);
            }
            cJSON_AddItemToArray(arr, o);
        } else if (ok) {
            printf("%-32s %8.1fM %-8s %-6s %4d  %.1fM\n", names[i], size / (1024.0 * 1024),
                   info.arch, info.weight_type, info.n_mtp, info.n_params / 1e6);
        } else {
            printf("%-32s %8.1fM (cannot load: %s)\n", names[i], size / (1024.0 * 1024), err);
        }
        mtplx_model_free(m);
        free(names[i]);
    }
    free(names);
    if (json) {
        char *t = cJSON_Print(arr);
        printf("%s\n", t ? t : "[]");
        free(t);
        cJSON_Delete(arr);
    }
    return EXIT_OK;
}
