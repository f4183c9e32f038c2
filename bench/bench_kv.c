/* bench_kv.c: what the KV cache type costs and saves at a long context.
 *
 *   bench_kv [-m MODEL] [--pos 2048] [--threads 1,2] [--types f16,q8_0]
 *            [--reps 5] [--gen 64] [--depth 3]
 *
 * For each (KV type, thread count): fill a fresh context with --pos tokens
 * (prefill), then at that position time
 *   - AR decode: 32 single-token forwards (median tok/s over the reps, and
 *     the process's CPU ms per token, steadier on a shared machine),
 *   - one verification-sized forward of depth + 1 tokens,
 *   - greedy generation with MTP at --depth from the cached prefix (--gen
 *     tokens, decode tok/s from the engine's stats; the MTP head's caches
 *     are filled once before timing, as after a first turn),
 * and report the KV bytes per position (trunk, and trunk + depth MTP head
 * streams). Prints a table and one JSON line. A benchmark, not a test:
 * nothing asserts a speed. Public API only. */
#define BENCH_NAME "bench_kv"
#include "bench_util.h"
#include "mtplx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* CPU time of the whole process: on a shared machine it moves less with the
 * other load than wall time does (all threads together with --threads > 1) */
static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

typedef struct result {
    const char *kv;
    int threads;
    double bytes_trunk, bytes_mtp, prefill_tps, ar_tps, ar_cpu_ms, verify_ms, mtp_tps, tok_per_fwd;
} result;

static const char *TEXT =
    "The fishing boats came back to the harbour late in the afternoon, and the men who had "
    "waited on the quay all day began to call out to them. ";

int main(int argc, char **argv) {
    const char *path = arg(argc, argv, "-m", "models/default.gguf");
    int pos = atoi(arg(argc, argv, "--pos", "2048")), reps = atoi(arg(argc, argv, "--reps", "5"));
    int n_gen = atoi(arg(argc, argv, "--gen", "64")), depth = atoi(arg(argc, argv, "--depth", "3"));
    char threads_s[64], types_s[64];
    snprintf(threads_s, sizeof threads_s, "%s", arg(argc, argv, "--threads", "1,2"));
    snprintf(types_s, sizeof types_s, "%s", arg(argc, argv, "--types", "f16,q8_0"));
    if (pos < 64 || reps < 1 || n_gen < 1 || depth < 0 || depth > MTPLX_MAX_DRAFT) {
        fprintf(stderr, "bench_kv: bad arguments\n");
        return 2;
    }
    mtplx_model *m = NULL;
    CHECK(mtplx_model_load(path, NULL, &m));
    mtplx_model_info info;
    mtplx_model_get_info(m, &info);
    if (!info.n_mtp) depth = 0;
    /* the sequence: the text's tokens over and over */
    int32_t *text = NULL;
    size_t n_text = 0;
    CHECK(mtplx_tokenize(mtplx_model_tokenizer(m), TEXT, strlen(TEXT), false, false, &text, &n_text));
    int32_t *seq = malloc((size_t)pos * sizeof *seq);
    for (int i = 0; i < pos; i++) seq[i] = text[(size_t)i % n_text];
    free(text);

    result res[16];
    int nres = 0;
    char *save_t = NULL, *save_k = NULL;
    for (char *ts = strtok_r(threads_s, ",", &save_t); ts; ts = strtok_r(NULL, ",", &save_t)) {
        char types[64];
        snprintf(types, sizeof types, "%s", types_s);
        for (char *ks = strtok_r(types, ",", &save_k); ks && nres < 16; ks = strtok_r(NULL, ",", &save_k)) {
            mtplx_kv_type kv;
            if (!mtplx_kv_type_parse(ks, &kv)) {
                fprintf(stderr, "bench_kv: unknown KV type %s\n", ks);
                return 2;
            }
            result *r = &res[nres++];
            memset(r, 0, sizeof *r);
            r->kv = mtplx_kv_type_name(kv);
            r->threads = atoi(ts);
            int64_t kvd = (int64_t)info.n_head_kv * info.head_dim;
            r->bytes_trunk = (double)mtplx_kv_bytes_per_token(kv, kvd, info.n_layer);
            r->bytes_mtp = (double)mtplx_kv_bytes_per_token(kv, kvd, info.n_layer + depth);
            mtplx_ctx_params cp = mtplx_ctx_default_params();
            cp.n_ctx = pos + n_gen + 64;
            cp.n_threads = r->threads;
            cp.kv_type = kv;
            mtplx_ctx *c = NULL;
            CHECK(mtplx_ctx_new(m, &cp, &c));
            double t0 = now_ms();
            CHECK(mtplx_forward(c, seq, pos, false));
            r->prefill_tps = pos / ((now_ms() - t0) / 1e3);
            enum { AR = 32 };
            double ar[64], arc[64], ver[64], mtp[64], tpf[64];
            int32_t next[AR + MTPLX_MAX_DRAFT + 1];
            for (int i = 0; i < AR + MTPLX_MAX_DRAFT + 1; i++) next[i] = seq[i % pos];
            /* untimed: the MTP head streams catch up over the whole prefix
             * once (a cost of the first turn, not of decoding) */
            mtplx_gen_params warm = mtplx_gen_default_params();
            warm.sampling.temperature = 0;
            warm.max_tokens = 2;
            warm.ignore_eos = true;
            warm.draft_depth = depth;
            CHECK(mtplx_generate(c, seq, pos, &warm, NULL, NULL, NULL));
            CHECK(mtplx_ctx_truncate(c, pos));
            for (int k = 0; k < reps && k < 64; k++) {
                t0 = now_ms();
                double c0 = cpu_ms();
                for (int i = 0; i < AR; i++) CHECK(mtplx_forward(c, next + i, 1, false));
                ar[k] = AR / ((now_ms() - t0) / 1e3);
                arc[k] = (cpu_ms() - c0) / AR;
                CHECK(mtplx_ctx_truncate(c, pos));
                t0 = now_ms();
                CHECK(mtplx_forward(c, next, depth + 1, true));
                ver[k] = now_ms() - t0;
                CHECK(mtplx_ctx_truncate(c, pos));
                mtplx_gen_params gp = mtplx_gen_default_params();
                gp.sampling.temperature = 0;
                gp.max_tokens = n_gen;
                gp.ignore_eos = true;
                gp.draft_depth = depth;
                mtplx_gen_stats st;
                CHECK(mtplx_generate(c, seq, pos, &gp, NULL, NULL, &st)); /* the prefix is cached */
                mtp[k] = st.n_gen / (st.t_decode_ms / 1e3);
                tpf[k] = mtplx_gen_stats_tokens_per_forward(&st);
                CHECK(mtplx_ctx_truncate(c, pos));
            }
            int n = reps < 64 ? reps : 64;
            r->ar_tps = median(ar, n);
            r->ar_cpu_ms = median(arc, n);
            r->verify_ms = median(ver, n);
            r->mtp_tps = median(mtp, n);
            r->tok_per_fwd = median(tpf, n);
            mtplx_ctx_free(c);
        }
    }
    printf("model %s, %d positions, medians of %d, MTP depth %d, %d tokens generated\n", info.name, pos,
           reps, depth, n_gen);
    printf("%-5s %3s %12s %14s %12s %10s %11s %12s %11s %9s\n", "kv", "thr", "B/pos trunk", "B/pos +MTP",
           "prefill t/s", "AR t/s", "AR cpu ms", "verify ms", "MTP t/s", "tok/fwd");
    for (int i = 0; i < nres; i++)
        printf("%-5s %3d %12.0f %14.0f %12.1f %10.1f %11.2f %12.2f %11.1f %9.2f\n", res[i].kv, res[i].threads,
               res[i].bytes_trunk, res[i].bytes_mtp, res[i].prefill_tps, res[i].ar_tps, res[i].ar_cpu_ms,
               res[i].verify_ms, res[i].mtp_tps, res[i].tok_per_fwd);
    printf("{\"bench\":\"kv\",\"model\":\"%s\",\"positions\":%d,\"reps\":%d,\"depth\":%d,\"results\":[", info.name,
           pos, reps, depth);
    for (int i = 0; i < nres; i++)
        printf("%s{\"kv\":\"%s\",\"threads\":%d,\"bytes_per_pos_trunk\":%.0f,\"bytes_per_pos_with_mtp\":%.0f,"
               "\"prefill_tps\":%.2f,\"ar_tps\":%.2f,\"ar_cpu_ms_per_token\":%.3f,\"verify_ms\":%.3f,\"mtp_tps\":%.2f,\"tokens_per_forward\":%.3f}",
               i ? "," : "", res[i].kv, res[i].threads, res[i].bytes_trunk, res[i].bytes_mtp, res[i].prefill_tps,
               res[i].ar_tps, res[i].ar_cpu_ms, res[i].verify_ms, res[i].mtp_tps, res[i].tok_per_fwd);
    printf("]}\n");
    free(seq);
    mtplx_model_free(m);
    return 0;
}
