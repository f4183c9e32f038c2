/* fuzz_gguf.c: libFuzzer target for the GGUF reader (from memory). A parsed
 * file is also walked (every kv, every tensor byte) and written back and
 * re-read, so a container the reader accepts must be self-consistent. */
#include "formats/gguf.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mtplx_gguf *g = NULL;
    if (mtplx_gguf_open_memory(data, size, "fuzz.gguf", &g) != MTPLX_OK) return 0;
    /* touch everything the reader handed out */
    volatile uint64_t sum = 0;
    for (int64_t i = 0; i < g->n_kv; i++) {
        const mtplx_gguf_kv *kv = &g->kv[i];
        sum += strlen(kv->key);
        if (kv->type == GGUF_TYPE_STRING) sum += kv->v.str.len + (uint8_t)kv->v.str.data[kv->v.str.len];
        if (kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_STRING)
            for (uint64_t k = 0; k < kv->arr_n; k++)
                sum += ((const mtplx_gguf_str *)kv->arr_data)[k].len;
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const uint8_t *p = g->tensors[i].data;
        if (g->tensors[i].nbytes) sum += p[0] + p[g->tensors[i].nbytes - 1];
    }
    (void)sum;
    mtplx_gguf_get_arch_int(g, "block_count", 0);
    /* write and read back (small inputs only, to keep the fuzzer fast) */
    if (size < 4096) {
        char path[64];
        /* tmpfs when there is one: the writer fsyncs */
        snprintf(path, sizeof path, "%s/fuzz_gguf_%d.gguf",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
        if (mtplx_gguf_write(g, path) == MTPLX_OK) {
            mtplx_gguf *r = NULL;
            if (mtplx_gguf_open(path, &r) != MTPLX_OK || r->n_tensors != g->n_tensors ||
                r->n_kv < g->n_kv)
                __builtin_trap(); /* we wrote something we cannot read */
            mtplx_gguf_free(r);
            unlink(path);
        }
    }
    mtplx_gguf_free(g);
    return 0;
}
