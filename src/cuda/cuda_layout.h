/* cuda_layout.h: what the kernels (cuda_kernels.h) and the backend's
 * callers (cuda_backend.h) both name. The layouts a weight has on the GPU,
 * which the prefill GEMM (kernels.cu's tc_fetch) and the host checks name:
 * each GEMV keeps a weight in the layout it reads fastest, and the prefill
 * GEMM reads that same copy, so no second one is uploaded for it. */
#ifndef MTPLX_CUDA_LAYOUT_H
#define MTPLX_CUDA_LAYOUT_H

#include <stdint.h>

enum {
    MTPLX_CUDA_W_GGUF = 0,    /* as in the file (kernels/kernels.h's blocks) */
    MTPLX_CUDA_W_BF16_TILED,  /* BF16 in mtplx_cuda_tile_bf16's 16-row tiles */
    MTPLX_CUDA_W_Q8_PACKED,   /* Q8_0 as mtplx_cuda_repack_q8_0 writes it (mmv.cu, mmv_tc.cu) */
    MTPLX_CUDA_W_Q8_I8,       /* Q8_0 as mtplx_cuda_repack_q8_0_i8 writes it (mmv_i8.cu) */
};

/* paths.attn_group_from (cuda_backend.h) that no row reaches: the step
 * attention a block per query head throughout */
#define MTPLX_CUDA_ATTN_GROUP_NEVER INT64_MAX

/* the widest RMS norm mmv_tc.cu's GEMV takes fused (its weights staged in
 * shared memory: 24 KB; the hidden size of models up to 32B); the
 * backend's norm_ok and test_cuda name it too */
#define MTPLX_CUDA_TC_NORM_MAX_K 6144

#endif
