/* mmv_tile.cuh: what the two tensor-core GEMVs (mmv_tc.cu, bf16 mma; and
 * mmv_i8.cu, s8 mma) share: the weight loads that bypass L1, the map from a
 * block's row slots to (weight, row), the two weight rows a lane reads in
 * each m-tile, the warps' partials into shared memory, the epilogue's
 * store of one result by the job's mode, and whether a job triggers its
 * dependents as it starts.
 * Include after cuda_kernels.h and cuda_util.cuh; like cuda_util.cuh the
 * helpers sit in an anonymous namespace, one copy per file. */
#ifndef MTPLX_CUDA_MMV_TILE_CUH
#define MTPLX_CUDA_MMV_TILE_CUH

namespace {

/* Weights are read once: past L1 (no allocation), which x keeps. */
__device__ __forceinline__ uint4 ld_stream16(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ uint2 ld_stream8(const void *p) {
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];"
                 : "=r"(v.x), "=r"(v.y)
                 : "l"(p));
    return v;
}

/* A job with its trig_start set by the bytes of all its weights, rb bytes
 * a row (cuda_util.cuh's trig_start_bytes): what each GEMV's launcher
 * passes to its kernel. */
inline mtplx_cuda_mmv_job with_trig_start(const mtplx_cuda_mmv_job &job, int64_t rb) {
    int64_t rows = 0;
    for (int s = 0; s < job.nseg; s++) rows += job.m[s];
    mtplx_cuda_mmv_job j = job;
    j.trig_start = trig_start_bytes(rows * rb);
    return j;
}

/* Row slot r_local of the block (0 .. 16 MT - 1) as (segment, row); false
 * when it is past the last row (its result is dropped). */
__device__ __forceinline__ bool slot_row(const mtplx_cuda_mmv_job &job, int MT, int64_t blk,
                                         int r_local, int &seg, int64_t &row) {
    if (job.mode == MTPLX_MMV_SWIGLU) {
        int half = 8 * MT; /* gate rows, then the same rows of up */
        seg = r_local < half ? 0 : 1;
        row = blk * half + (r_local % half);
        return row < job.m[0];
    }
    return stacked_row(job.m[0], job.m[1], job.m[2], job.nseg, blk * 16 * MT + r_local, seg, row);
}

/* The rows lane group g reads in each m-tile t: slots 16 t + g (rlo) and
 * 16 t + g + 8 (rhi), rb bytes a row; a slot past the last row reads row 0
 * of the first weight (its result is dropped). With tiled (BF16 in
 * mtplx_cuda_tile_bf16's layout) the pointer is where the row's bytes of
 * the first k step start for quad position 0 (cuda_util.cuh's
 * tiled_row_off). */
template <int MT>
__device__ __forceinline__ void tile_rows(const mtplx_cuda_mmv_job &job, int64_t blk, int g, int64_t rb,
                                          const uint8_t *(&rlo)[MT], const uint8_t *(&rhi)[MT],
                                          bool tiled = false) {
#pragma unroll
    for (int t = 0; t < MT; t++) {
        int seg;
        int64_t row;
        const uint8_t *p[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (!slot_row(job, MT, blk, 16 * t + g + 8 * h, seg, row)) seg = 0, row = 0;
            p[h] = (const uint8_t *)pick3(seg, job.w[0], job.w[1], job.w[2]) +
                   (tiled ? tiled_row_off(row, rb) : row * rb);
        }
        rlo[t] = p[0], rhi[t] = p[1];
    }
}

/* A warp's mma results into its slice of the block's shared partials:
 * c0, c1 are row slot g, columns 2q, 2q + 1 of the n-tile; c2, c3 row
 * slot g + 8. The caller synchronises before the epilogue reads them. */
template <int W, int MT, int NT>
__device__ __forceinline__ void partials_to_shared(float (&red)[W][16 * MT][8 * NT], const float (&acc)[MT][NT][4],
                                                   int warp, int g, int q) {
#pragma unroll
    for (int t = 0; t < MT; t++)
#pragma unroll
        for (int u = 0; u < NT; u++) {
            red[warp][16 * t + g][8 * u + 2 * q] = acc[t][u][0];
            red[warp][16 * t + g][8 * u + 2 * q + 1] = acc[t][u][1];
            red[warp][16 * t + g + 8][8 * u + 2 * q] = acc[t][u][2];
            red[warp][16 * t + g + 8][8 * u + 2 * q + 1] = acc[t][u][3];
        }
}

/* The epilogue's store of v, x row i's result for (seg, row), by the job's
 * mode; up() gives the SwiGLU's up value. The "+ 0" terms keep the fused
 * results equal to matmul (+ no bias), then add / silu_mul, down to the
 * sign of a zero (mmv.cu does the same). */
template <typename Up>
__device__ __forceinline__ void store_result(const mtplx_cuda_mmv_job &job, int seg, int64_t row, int64_t i,
                                             float v, Up up) {
    const int64_t ms = pick3(seg, job.m[0], job.m[1], job.m[2]);
    float *out = pick3(seg, job.y[0], job.y[1], job.y[2]) + i * ms + row;
    if (job.mode == MTPLX_MMV_STORE) {
        const float *bias = pick3(seg, job.bias[0], job.bias[1], job.bias[2]);
        *out = v + (bias ? bias[row] : 0.f);
    } else if (job.mode == MTPLX_MMV_ADD) {
        *out = *out + (v + 0.f);
    } else {
        float u = up(), gt = v + 0.f;
        *out = gt / (1.f + expf(-gt)) * (u + 0.f);
    }
}

} // namespace

#endif
