/* backend_cuda.c: the CUDA backend: the backend interface (model/backend.h)
 * over the kernels in kernels.cu, one GPU, one stream.
 *
 * Activations and KV caches come from buf_alloc, so they are device memory.
 * Weights, norm vectors, biases and RoPE frequencies are the model's host
 * memory (the mmap, or model-owned f32 arrays): each is uploaded once, on its
 * first use, and found again through a hash map keyed by its host address.
 * The map assumes those host arrays never change while the backend lives
 * (true of a loaded model); mtplx_cuda_forget_params() empties it.
 *
 * Every op is asynchronous on the backend's stream; download() is the one
 * point where the host waits. A CUDA error inside an op is a bug or a dead
 * GPU: it is logged with the op's name and the process stops (ops return
 * nothing to report it through).
 *
 * Left out for now: CUDA graphs for the decode / verify step, the sampler and
 * the acceptance test on the GPU, a tensor-core GEMM for prefill, several
 * GPUs. */
#include "cuda/cuda_backend.h"
#include "cuda/cuda_kernels.h"
#include "kernels/kernels.h"
#include "model/backend.h"

#include <cuda_runtime_api.h>
#include <string.h>

typedef struct {
    const void *host; /* NULL = empty slot */
    void *dev;
    size_t bytes;
} param_slot;

typedef struct {
    mtplx_backend base;
    int device;
    cudaStream_t stream;
    param_slot *map; /* open addressing, capacity a power of two */
    size_t cap, used;
    size_t param_bytes; /* bytes uploaded so far */
} cuda_backend;

static void check(cudaError_t e, const char *what, const char *file, int line) {
    if (e == cudaSuccess) return;
    mtplx_log(MTPLX_LOG_ERROR, "cuda: %s failed: %s (%s)", what, cudaGetErrorName(e),
              cudaGetErrorString(e));
    mtplx_assert_fail(file, line, what);
}
#define CK(call, what) check((call), (what), __FILE__, __LINE__)

static size_t slot_of(const void *p, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (size_t)h & (cap - 1);
}

static void map_put(cuda_backend *c, const void *host, void *dev, size_t bytes) {
    if (2 * (c->used + 1) > c->cap) {
        size_t ncap = c->cap ? 2 * c->cap : 256;
        param_slot *nm = calloc(ncap, sizeof *nm);
        MTPLX_ASSERT(nm != NULL);
        for (size_t i = 0; i < c->cap; i++) {
            if (!c->map[i].host) continue;
            size_t j = slot_of(c->map[i].host, ncap);
            while (nm[j].host) j = (j + 1) & (ncap - 1);
            nm[j] = c->map[i];
        }
        free(c->map);
        c->map = nm;
        c->cap = ncap;
    }
    size_t j = slot_of(host, c->cap);
    while (c->map[j].host && c->map[j].host != host) j = (j + 1) & (c->cap - 1);
    if (!c->map[j].host) c->used++;
    c->map[j] = (param_slot){host, dev, bytes};
}

/* The device copy of a read-only host array of at least `bytes`. */
static const void *param(cuda_backend *c, const void *host, size_t bytes) {
    if (!host) return NULL;
    if (c->cap) {
        size_t j = slot_of(host, c->cap);
        while (c->map[j].host) {
            if (c->map[j].host == host) {
                if (c->map[j].bytes >= bytes) return c->map[j].dev;
                break; /* seen smaller before: upload again, larger */
            }
            j = (j + 1) & (c->cap - 1);
        }
    }
    void *dev = NULL;
    cudaError_t e = cudaMalloc(&dev, bytes);
    if (e != cudaSuccess) {
        mtplx_log(MTPLX_LOG_ERROR, "cuda: out of GPU memory uploading %.1f MB of weights (%.1f MB so far)",
                  (double)bytes / 1e6, (double)c->param_bytes / 1e6);
        CK(e, "cudaMalloc (weights)");
    }
    CK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, c->stream), "weight upload");
    c->param_bytes += bytes;
    map_put(c, host, dev, bytes);
    return dev;
}

static size_t weight_bytes(const mtplx_weight *w) {
    return mtplx_row_size(w->type, w->k) * (size_t)w->m;
}

static void cu_matmul(mtplx_backend *be, const mtplx_weight *w, const float *bias, const float *x,
                      int64_t n, float *y) {
    cuda_backend *c = (cuda_backend *)be;
    const void *W = param(c, w->data, weight_bytes(w));
    const float *b = param(c, bias, (size_t)w->m * sizeof(float));
    CK(mtplx_cuda_matmul(c->stream, w->type, W, mtplx_row_size(w->type, w->k), w->m, w->k, x, n, y,
                         b),
       "matmul");
}

static void cu_rmsnorm(mtplx_backend *be, const float *x, const float *w, float *out, int64_t n,
                       int64_t d, float eps) {
    cuda_backend *c = (cuda_backend *)be;
    const float *wd = param(c, w, (size_t)d * sizeof(float));
    CK(mtplx_cuda_rmsnorm(c->stream, x, wd, out, n, d, eps), "rmsnorm");
}

static void cu_rope(mtplx_backend *be, float *x, int64_t n, int n_head, int head_dim, int64_t pos0,
                    const float *inv_freq, bool neox) {
    cuda_backend *c = (cuda_backend *)be;
    const float *f = param(c, inv_freq, (size_t)(head_dim / 2) * sizeof(float));
    CK(mtplx_cuda_rope(c->stream, x, n, n_head, head_dim, pos0, f, neox), "rope");
}

static void cu_silu_mul(mtplx_backend *be, const float *gate, const float *up, float *out,
                        int64_t n) {
    CK(mtplx_cuda_silu_mul(((cuda_backend *)be)->stream, gate, up, out, n), "silu_mul");
}

static void cu_add(mtplx_backend *be, float *y, const float *x, int64_t n) {
    CK(mtplx_cuda_add(((cuda_backend *)be)->stream, y, x, n), "add");
}

static void cu_kv_store(mtplx_backend *be, int kv_type, void *kv, int64_t row, const float *src,
                        int64_t n, int64_t d) {
    size_t es = kv_type == MTPLX_TYPE_F32 ? 4 : 2;
    CK(mtplx_cuda_store_rows(((cuda_backend *)be)->stream, kv_type, src,
                             (char *)kv + (size_t)row * (size_t)d * es, n, d),
       "kv_store");
}

static void cu_attention(mtplx_backend *be, const float *q, int64_t n_tok, int n_head,
                         int n_head_kv, int head_dim, const void *k, const void *v, int kv_type,
                         int64_t pos0, float scale, float *out) {
    CK(mtplx_cuda_attention(((cuda_backend *)be)->stream, q, n_tok, n_head, n_head_kv, head_dim, k,
                            v, kv_type, pos0, scale, out),
       "attention");
}

static void cu_get_row(mtplx_backend *be, const mtplx_weight *w, int64_t id, float *out) {
    cuda_backend *c = (cuda_backend *)be;
    const void *W = param(c, w->data, weight_bytes(w));
    CK(mtplx_cuda_get_row(c->stream, w->type, W, mtplx_row_size(w->type, w->k), w->k, id, out),
       "get_row");
}

static void *cu_buf_alloc(mtplx_backend *be, size_t bytes) {
    cuda_backend *c = (cuda_backend *)be;
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        return NULL;
    }
    /* zeroed like the CPU backend's buffers */
    CK(cudaMemsetAsync(p, 0, bytes, c->stream), "cudaMemset");
    return p;
}

static void cu_buf_free(mtplx_backend *be, void *p) {
    cuda_backend *c = (cuda_backend *)be;
    if (!p) return;
    CK(cudaStreamSynchronize(c->stream), "synchronize");
    CK(cudaFree(p), "cudaFree");
}

static void cu_upload(mtplx_backend *be, void *dst, const void *src_host, size_t bytes) {
    cuda_backend *c = (cuda_backend *)be;
    if (!bytes) return;
    /* from pageable memory this returns once src_host has been staged */
    CK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, c->stream), "upload");
}

static void cu_download(mtplx_backend *be, void *dst_host, const void *src, size_t bytes) {
    cuda_backend *c = (cuda_backend *)be;
    if (!bytes) return;
    CK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, c->stream), "download");
    CK(cudaStreamSynchronize(c->stream), "download (synchronize)");
}

static void cu_copy(mtplx_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_backend *c = (cuda_backend *)be;
    if (!bytes) return;
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream), "copy");
}

void mtplx_cuda_forget_params(mtplx_backend *be) {
    cuda_backend *c = (cuda_backend *)be;
    CK(cudaStreamSynchronize(c->stream), "synchronize");
    for (size_t i = 0; i < c->cap; i++)
        if (c->map[i].host) CK(cudaFree(c->map[i].dev), "cudaFree (weights)");
    free(c->map);
    c->map = NULL;
    c->cap = c->used = 0;
    c->param_bytes = 0;
}

size_t mtplx_cuda_param_bytes(const mtplx_backend *be) {
    return ((const cuda_backend *)be)->param_bytes;
}

void mtplx_cuda_synchronize(mtplx_backend *be) {
    CK(cudaStreamSynchronize(((cuda_backend *)be)->stream), "synchronize");
}

static void cu_free(mtplx_backend *be) {
    if (!be) return;
    cuda_backend *c = (cuda_backend *)be;
    mtplx_cuda_forget_params(be);
    cudaStreamDestroy(c->stream);
    free(c);
}

int mtplx_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

mtplx_status mtplx_cuda_device_name(int device, char *buf, size_t cap, size_t *mem_bytes) {
    struct cudaDeviceProp pr;
    cudaError_t e = cudaGetDeviceProperties(&pr, device);
    if (e != cudaSuccess)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "cuda: device %d: %s", device, cudaGetErrorString(e));
    snprintf(buf, cap, "%s (sm_%d%d, %d SMs, %.1f GB)", pr.name, pr.major, pr.minor,
             pr.multiProcessorCount, (double)pr.totalGlobalMem / 1e9);
    if (mem_bytes) *mem_bytes = pr.totalGlobalMem;
    return MTPLX_OK;
}

mtplx_status mtplx_backend_cuda_new(int device, int64_t max_k, int64_t max_n, int64_t n_ctx,
                                    mtplx_backend **out) {
    (void)max_k, (void)max_n, (void)n_ctx; /* the kernels need no scratch */
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "cuda: no usable GPU (%s)",
                          e != cudaSuccess ? cudaGetErrorString(e) : "no devices");
    }
    if (device < 0 || device >= n)
        return mtplx_fail(MTPLX_ERR_ARG, "cuda: device %d does not exist (%d found)", device, n);
    e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "cuda: device %d: %s", device, cudaGetErrorString(e));
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c) return mtplx_fail(MTPLX_ERR_NOMEM, "cuda backend: out of memory");
    c->device = device;
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(c);
        return mtplx_fail(MTPLX_ERR_UNSUPPORTED, "cuda: cannot create a stream: %s",
                          cudaGetErrorString(e));
    }
    c->base = (mtplx_backend){
        .name = "cuda",
        .n_threads = 1,
        .matmul = cu_matmul,
        .rmsnorm = cu_rmsnorm,
        .rope = cu_rope,
        .silu_mul = cu_silu_mul,
        .add = cu_add,
        .kv_store = cu_kv_store,
        .attention = cu_attention,
        .get_row = cu_get_row,
        .buf_alloc = cu_buf_alloc,
        .buf_free = cu_buf_free,
        .free = cu_free,
        .upload = cu_upload,
        .download = cu_download,
        .copy = cu_copy,
    };
    *out = &c->base;
    return MTPLX_OK;
}
