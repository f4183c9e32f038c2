/* backend_cuda_stub.c: the CUDA backend's entry points in a build without
 * CUDA (MTPLX_CUDA=OFF, or no nvcc): no devices, and asking for one says how
 * to get it. The real ones are in src/cuda/. */
#ifndef MTPLX_HAVE_CUDA
#include "cuda/cuda_backend.h"

mtplx_status mtplx_backend_cuda_new(int device, int64_t max_k, int64_t max_n, int64_t n_ctx,
                                    mtplx_backend **out) {
    (void)device, (void)max_k, (void)max_n, (void)n_ctx;
    *out = NULL;
    return mtplx_fail(MTPLX_ERR_UNSUPPORTED,
                      "cuda: this build has no CUDA backend (configure with -DMTPLX_CUDA=ON and nvcc)");
}

int mtplx_cuda_device_count(void) { return 0; }

mtplx_status mtplx_cuda_device_name(int device, char *buf, size_t cap, size_t *mem_bytes) {
    if (cap) buf[0] = '\0';
    if (mem_bytes) *mem_bytes = 0;
    return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "cuda: device %d: this build has no CUDA backend", device);
}

int mtplx_cuda_deq_row_host(int type, const void *row, int64_t k, float *out) {
    (void)type, (void)row, (void)k, (void)out;
    return -2;
}

int mtplx_cuda_tile_bf16_host(const void *raw, void *out, int64_t m, int64_t k) {
    (void)raw, (void)out, (void)m, (void)k;
    return -2;
}

int mtplx_cuda_deq_layout_row_host(int type, int layout, const void *W, int64_t k, int64_t r,
                                   float *out) {
    (void)type, (void)layout, (void)W, (void)k, (void)r, (void)out;
    return -2;
}

int mtplx_cuda_repack_q8_0_host(const void *raw, void *out, int64_t m, int64_t k, int layout) {
    (void)raw, (void)out, (void)m, (void)k, (void)layout;
    return -2;
}

int mtplx_cuda_mmv_deq_row_host(int type, const void *row, int64_t k, float *out) {
    (void)type, (void)row, (void)k, (void)out;
    return -2;
}

int mtplx_cuda_mmv_row_host(int type, const void *row, int64_t k, const float *x, int64_t n,
                            const float *norm, float eps, float *out) {
    (void)type, (void)row, (void)k, (void)x, (void)n, (void)norm, (void)eps, (void)out;
    return -2;
}

void mtplx_cuda_forget_params(mtplx_backend *be) { (void)be; }
size_t mtplx_cuda_param_bytes(const mtplx_backend *be) { (void)be; return 0; }
void mtplx_cuda_synchronize(mtplx_backend *be) { (void)be; }
void mtplx_cuda_set_graphs(mtplx_backend *be, bool on) { (void)be, (void)on; }
mtplx_cuda_graph_stats mtplx_cuda_get_graph_stats(const mtplx_backend *be) {
    (void)be;
    return (mtplx_cuda_graph_stats){0};
}
mtplx_cuda_paths mtplx_cuda_get_paths(const mtplx_backend *be) {
    (void)be;
    return (mtplx_cuda_paths){.tc = false};
}
void mtplx_cuda_set_paths(mtplx_backend *be, mtplx_cuda_paths p) { (void)be, (void)p; }
bool mtplx_cuda_wgmma_ready(void) { return false; }
mtplx_status mtplx_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = 0;
    return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "cuda: device %d: this build has no CUDA backend", device);
}
#else
typedef int mtplx_backend_cuda_stub_unused; /* ISO C wants a declaration in every file */
#endif
