/* cmd_forge.c: `mtplx forge`: checkpoint conversion and quantization.
 *   mtplx forge convert INPUT [--output OUT.gguf] [--quantize TYPE] [--quantize-mtp]
 * INPUT is an HF folder, a llama2.c .bin or a GGUF file. Without --output the
 * result goes to the model store (<home>/models/<name>.gguf). */
#include "cli/cli.h"

#include "forge/forge.h"
#include "kernels/kernels.h"

#include <getopt.h>
#include <libgen.h>
#include <string.h>
#include <sys/stat.h>

static void help(void) {
    printf("usage: mtplx forge convert INPUT [options]\n\n"
           "Convert an HF folder, a llama2.c .bin or a GGUF file to GGUF.\n\n"
           "  -o, --output PATH      output file (default: the model store, %s/models/NAME.gguf)\n"
           "  -q, --quantize TYPE    quantize weight matrices: q8_0, q4_0, q4_k, q6_k, f16, bf16, f32\n"
           "      --quantize-mtp     quantize MTP heads too (default: kept in source precision)\n"
           "      --tokenizer PATH   tokenizer for a llama2.c .bin\n"
           "  -h, --help\n",
           cli_home());
}

typedef struct {
    double t0;
} prog;

static void progress(int64_t done, int64_t total, const char *name, void *user) {
    prog *p = user;
    double el = (cli_now_ms() - p->t0) / 1e3;
    double eta = done ? el / done * (total - done) : 0;
    int w = 30, fill = (int)(w * done / (total ? total : 1));
    fprintf(stderr, "\r[%.*s%*s] %3d%% %lld/%lld tensors  %.1fs  ETA %.1fs  %-28.28s",
            fill, "##############################", w - fill, "", (int)(100 * done / (total ? total : 1)),
            (long long)done, (long long)total, el, eta, name);
    if (done == total) fputc('\n', stderr);
}

int cmd_forge(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        help();
        return argc < 2 ? EXIT_USAGE : EXIT_OK;
    }
    if (strcmp(argv[1], "convert"))
        return cli_usage_error("forge", "unknown subcommand '%s' (have: convert)", argv[1]);
    static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                         {"quantize", required_argument, 0, 'q'},
                                         {"quantize-mtp", no_argument, 0, 'M'},
                                         {"tokenizer", required_argument, 0, 'T'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *out = NULL, *tokp = NULL;
    mtplx_convert_params cp = {.quant_type = -1};
    int c;
    optind = 1;
    argc--;
    argv++;
    while ((c = getopt_long(argc, argv, "o:q:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'q':
            cp.quant_type = mtplx_type_from_name(optarg);
            if (cp.quant_type < 0 || cp.quant_type == MTPLX_TYPE_Q8_K)
                return cli_usage_error("forge", "--quantize: unknown type '%s'", optarg);
            break;
        case 'M': cp.quantize_mtp = true; break;
        case 'T': tokp = optarg; break;
        case 'h': help(); return EXIT_OK;
        default: return cli_usage_error("forge", "unknown option");
        }
    }
    if (optind != argc - 1) return cli_usage_error("forge", "convert needs exactly one INPUT");
    const char *in = argv[optind];
    char outbuf[4096];
    if (!out) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s", in);
        size_t n = strlen(tmp);
        while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
        char *base = basename(tmp), *dot = strrchr(base, '.');
        if (dot && dot != base) *dot = 0;
        snprintf(outbuf, sizeof outbuf, "%s/models", cli_home());
        mkdir(cli_home(), 0755);
        mkdir(outbuf, 0755);
        snprintf(outbuf, sizeof outbuf, "%s/models/%s.gguf", cli_home(), base);
        out = outbuf;
    }
    prog pg = {cli_now_ms()};
    cp.progress = progress;
    cp.user = &pg;
    if (mtplx_forge_convert(in, tokp, out, &cp) != MTPLX_OK) {
        fputc('\n', stderr);
        cli_error("forge convert");
        return EXIT_RUNTIME;
    }
    struct stat st;
    stat(out, &st);
    fprintf(stderr, "wrote %s (%.1f MiB) in %.1fs\n", out, st.st_size / 1048576.0,
            (cli_now_ms() - pg.t0) / 1e3);
    return EXIT_OK;
}
