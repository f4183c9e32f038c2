/* fuzz_safetensors.c: libFuzzer target for the safetensors reader (from
 * memory): header length, JSON header, dtypes, shapes and data offsets. */
#include "formats/formats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mtplx_gguf *g = mtplx_gguf_new();
    if (!g) return 0;
    if (mtplx_safetensors_load_memory(data, size, "fuzz.safetensors", g) == MTPLX_OK) {
        volatile uint64_t sum = 0;
        for (int64_t i = 0; i < g->n_tensors; i++) {
            const uint8_t *p = g->tensors[i].data;
            sum += p[0] + p[g->tensors[i].nbytes - 1];
        }
        (void)sum;
    }
    mtplx_gguf_free(g);
    return 0;
}
