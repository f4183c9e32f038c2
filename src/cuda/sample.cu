/* sample.cu: sampling and the Leviathan-Chen test on the GPU, one block per
 * logits row, so that a sampled step copies back a few bytes per row instead
 * of whole rows (backend.h: sample_rows).
 *
 * The distribution is engine/sampler.c's top-k path, step for step: the k
 * largest logits ranked by (value desc, id asc), e_j = exp((l_j - l_0) / T)
 * dropping those that underflow, Z their sum in double; top-p over the
 * (e desc, id asc) order, min-p against the largest kept e, then e_j / tot in
 * double rounded to float. The draw is sampler.c's inverse CDF in id order,
 * the test and the residual spec.c's mtplx_accept_or_residual. The parallel
 * parts (selection, sorting, exp) give the same values as the CPU's
 * sequential code; the sums run in the same order on one thread. What can
 * differ is exp itself (the CPU's expf against exp in double here, each
 * within an ulp) and the log-sum-exp of the reported log-probability.
 *
 * The k largest are found by radix select on order-preserving integer keys
 * of the floats (four 8-bit passes over the row), ties at the threshold by a
 * second radix select on the ids, then sorted in shared memory (bitonic). */
#include "cuda/cuda_kernels.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace {

constexpr int SR_THREADS = 1024;
constexpr int KMAX = MTPLX_CUDA_TOPK_MAX;

struct sample_smem {
    float v[KMAX];      /* the kept logits, then their e */
    int32_t id[KMAX];
    uint32_t hist[256];
    uint32_t cnt, want, bin;
    int32_t kept;
    double lse_part[SR_THREADS / 32];
    float mx_part[SR_THREADS / 32];
};

/* Larger float, larger key; -0 and +0 share one (the CPU compares them
 * equal and ranks them by id). */
__device__ __forceinline__ uint32_t order_key(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u << 1) == 0) u = 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* What the CPU's top-k path can keep: finite or +inf, not -inf (masked) and
 * not NaN. */
__device__ __forceinline__ bool usable(float x) { return x == x && x != -INFINITY; }

/* Sort s.v / s.id [0, n) so that before(a, b) holds for every a placed
 * before b (padding ranks last: before(pad, x) is false for real x). */
template <class Before>
__device__ void bitonic(float *v, int32_t *id, int n, Before before) {
    int P = 1;
    while (P < n) P <<= 1;
    for (int i = n + (int)threadIdx.x; i < P; i += blockDim.x) v[i] = -INFINITY, id[i] = INT32_MAX;
    __syncthreads();
    for (int k = 2; k <= P; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < P; i += blockDim.x) {
                int l = i ^ j;
                if (l <= i) continue;
                bool up = (i & k) == 0;
                bool sw = up ? before(v[l], id[l], v[i], id[i]) : before(v[i], id[i], v[l], id[l]);
                if (sw) {
                    float tv = v[i];
                    v[i] = v[l], v[l] = tv;
                    int32_t ti = id[i];
                    id[i] = id[l], id[l] = ti;
                }
            }
            __syncthreads();
        }
}

/* f(i, l[i]) for every i < V this thread owns (i = threadIdx.x + j *
 * blockDim.x), eight loads in flight at a time: one block reads a whole
 * row, so each thread must keep several loads going to get near the SM's
 * bandwidth. */
template <class F>
__device__ __forceinline__ void for_row(const float *__restrict__ l, int64_t V, F f) {
    constexpr int U = 8;
    const int64_t bd = blockDim.x;
    int64_t i0 = threadIdx.x;
    for (; i0 + (U - 1) * bd < V; i0 += U * bd) {
        float x[U];
#pragma unroll
        for (int u = 0; u < U; u++) x[u] = __ldg(l + i0 + u * bd);
#pragma unroll
        for (int u = 0; u < U; u++) f(i0 + u * bd, x[u]);
    }
    for (int64_t i = i0; i < V; i += bd) f(i, __ldg(l + i));
}

/* After a histogram in s.hist: the bin holding the want-th entry counted
 * from the top (desc) or the bottom, found by warp 0 (lane L scans bins
 * 8L..8L+7 in that order). Sets s.bin, s.want (rank inside the bin), s.cnt
 * (the bin's size); clamp: want is first cut to the number of entries,
 * which goes to s.kept. */
__device__ void pick_bin(sample_smem &s, uint32_t want, bool desc, bool clamp) {
    if (threadIdx.x >= 32) return;
    const int lane = threadIdx.x;
    uint32_t h[8], t = 0;
#pragma unroll
    for (int u = 0; u < 8; u++) {
        int r = 8 * lane + u;
        h[u] = s.hist[desc ? 255 - r : r];
        t += h[u];
    }
    uint32_t inc = t;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        uint32_t v = __shfl_up_sync(0xFFFFFFFFu, inc, o);
        if (lane >= o) inc += v;
    }
    const uint32_t excl = inc - t, total = __shfl_sync(0xFFFFFFFFu, inc, 31);
    if (clamp && want > total) want = total;
    bool mine = want == 0 ? lane == 0 : (excl < want && want <= inc);
    if (!mine) return;
    uint32_t cum = excl;
    int u = 0;
    if (want > 0)
        for (; u < 7; u++) {
            if (cum + h[u] >= want) break;
            cum += h[u];
        }
    int r = 8 * lane + u;
    s.bin = (uint32_t)(desc ? 255 - r : r);
    s.want = want - cum;
    s.cnt = h[u];
    if (clamp) s.kept = (int32_t)want;
}

/* One 8-bit radix pass: the histogram of digit `shift` among the row's
 * usable entries whose key matches prefix under mask (with eq_key set: whose
 * key equals *eq_key, the digit then being the id's), then pick_bin. */
__device__ void radix_pass(const float *l, int64_t V, sample_smem &s, uint32_t prefix, uint32_t mask,
                           int shift, uint32_t want, bool desc, const uint32_t *eq_key) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) s.hist[b] = 0;
    __syncthreads();
    for_row(l, V, [&](int64_t i, float x) {
        if (!usable(x)) return;
        uint32_t key = order_key(x), d = eq_key ? (uint32_t)i : key;
        if (eq_key && key != *eq_key) return;
        if ((d & mask) == prefix) atomicAdd(&s.hist[(d >> shift) & 255u], 1u);
    });
    __syncthreads();
    pick_bin(s, want, desc, false);
    __syncthreads();
}

/* Inverse-CDF draw over (id asc, p) entries [0, n): mtplx_sample_dist. */
__device__ int32_t draw(const float *p, const int32_t *id, int n, double u) {
    double c = 0;
    int32_t last = -1;
    for (int j = 0; j < n; j++) {
        if (p[j] <= 0) continue;
        c += p[j];
        last = id[j];
        if (u < c) return id[j];
    }
    return last < 0 ? 0 : last;
}

/* p of `id` in a distribution sorted by id (0 when absent). */
__device__ float lookup(const mtplx_cuda_dist *d, int32_t id) {
    int lo = 0, hi = d->n;
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (d->id[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < d->n && d->id[lo] == id ? d->p[lo] : 0.0f;
}

__global__ void __launch_bounds__(SR_THREADS)
    sample_kernel(const float *__restrict__ logits, int64_t V, mtplx_cuda_sample_args a,
                  mtplx_cuda_dist *keep, const mtplx_cuda_dist *test, mtplx_cuda_sample_out *out) {
    __shared__ sample_smem s;
    const int row = blockIdx.x;
    const float *l = logits + (size_t)row * V;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;

    /* one pass: the log-sum-exp of the raw row (for the reported
     * log-probability; online: a running max and a sum scaled to it, in
     * double) and the histogram of the keys' top digit */
    for (int b = threadIdx.x; b < 256; b += blockDim.x) s.hist[b] = 0;
    __syncthreads();
    float mx = -INFINITY;
    double sum = 0;
    for_row(l, V, [&](int64_t i, float x) {
        if (x > mx) {
            sum = sum * exp((double)mx - (double)x) + 1.0; /* exp(-inf) = 0 on the first */
            mx = x;
        } else if (usable(x)) {
            sum += exp((double)x - (double)mx);
        }
        if (usable(x)) atomicAdd(&s.hist[order_key(x) >> 24], 1u);
    });
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(0xFFFFFFFFu, mx, o);
        double os = __shfl_xor_sync(0xFFFFFFFFu, sum, o);
        float m2 = fmaxf(mx, om);
        sum = (mx == -INFINITY ? 0.0 : sum * exp((double)mx - (double)m2)) +
              (om == -INFINITY ? 0.0 : os * exp((double)om - (double)m2));
        mx = m2;
    }
    if (lane == 0) s.mx_part[warp] = mx, s.lse_part[warp] = sum;
    __syncthreads();

    /* K = min(top_k, usable entries); the K-th largest key, and how many of
     * the entries equal to it are taken */
    pick_bin(s, (uint32_t)a.top_k, true, true);
    __syncthreads();
    uint32_t prefix = s.bin << 24, mask = 255u << 24, want = s.want;
    for (int shift = 16; shift >= 0; shift -= 8) {
        radix_pass(l, V, s, prefix, mask, shift, want, true, nullptr);
        prefix |= s.bin << shift;
        mask |= 255u << shift;
        want = s.want;
    }
    const int K = s.kept;
    if (K == 0) { /* every logit masked or NaN: token 0, as the CPU's degenerate case */
        if (threadIdx.x == 0) {
            out[row] = mtplx_cuda_sample_out{0, 0, -INFINITY, 0};
            if (keep) keep[row].n = 0;
        }
        return;
    }
    const uint32_t thr = prefix, n_eq = s.cnt;
    uint32_t id_cut = 0xFFFFFFFFu;
    if (n_eq > want) { /* a tie at the threshold: the lowest ids of it */
        uint32_t ip = 0, im = 0, w = want;
        for (int shift = 24; shift >= 0; shift -= 8) {
            radix_pass(l, V, s, ip, im, shift, w, false, &thr);
            ip |= s.bin << shift;
            im |= 255u << shift;
            w = s.want;
        }
        id_cut = ip;
    }
    __syncthreads(); /* every thread has read s.cnt */
    if (threadIdx.x == 0) s.cnt = 0;
    __syncthreads();
    for_row(l, V, [&](int64_t i, float x) {
        if (!usable(x)) return;
        uint32_t key = order_key(x);
        if (key > thr || (key == thr && (uint32_t)i <= id_cut)) {
            uint32_t slot = atomicAdd(&s.cnt, 1u);
            if (slot < (uint32_t)KMAX) s.v[slot] = x, s.id[slot] = (int32_t)i;
        }
    });
    __syncthreads();
    /* rank: value desc, id asc (sampler.c's cmp_desc) */
    auto by_value = [](float av, int32_t ai, float bv, int32_t bi) {
        return av > bv || (av == bv && ai < bi);
    };
    bitonic(s.v, s.id, K, by_value);
    /* e_j = exp((l_j - l_0) / T); they do not grow with j, so those that
     * underflow to 0 are a tail */
    const float l0 = s.v[0];
    __syncthreads(); /* every thread has l0 before s.v[0] changes */
    for (int j = threadIdx.x; j < K; j += blockDim.x) {
        float arg = (s.v[j] - l0) * a.inv_t;
        s.v[j] = (float)exp((double)arg);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int kept = 0;
        while (kept < K && s.v[kept] > 0) kept++;
        s.kept = kept;
    }
    __syncthreads();
    int kept = s.kept;
    __syncthreads(); /* read before thread 0 rewrites it */
    if (a.top_p < 1.0f) bitonic(s.v, s.id, kept, by_value); /* (e desc, id asc), as the CPU re-sorts */
    if (threadIdx.x == 0) {
        double Z = 0;
        for (int j = 0; j < kept; j++) Z += s.v[j];
        if (a.top_p < 1.0f) {
            double c = 0, target = (double)a.top_p * Z;
            int j = 0;
            while (j < kept && c < target) c += s.v[j++];
            kept = j > 0 ? j : 1;
        }
        if (a.min_p > 0.0f) {
            float mxp = 0;
            for (int j = 0; j < kept; j++)
                if (s.v[j] > mxp) mxp = s.v[j];
            float t = mxp * a.min_p;
            int w = 0;
            for (int j = 0; j < kept; j++)
                if (s.v[j] >= t) s.v[w] = s.v[j], s.id[w++] = s.id[j];
            kept = w;
        }
        double tot = 0;
        for (int j = 0; j < kept; j++) tot += s.v[j];
        for (int j = 0; j < kept; j++) s.v[j] = (float)(s.v[j] / tot);
        s.kept = kept;
    }
    __syncthreads();
    kept = s.kept;
    auto by_id = [](float av, int32_t ai, float bv, int32_t bi) { return ai < bi; };
    bitonic(s.v, s.id, kept, by_id);
    if (keep) {
        for (int j = threadIdx.x; j < kept; j += blockDim.x)
            keep[row].id[j] = s.id[j], keep[row].p[j] = s.v[j];
        if (threadIdx.x == 0) keep[row].n = kept;
    }
    if (threadIdx.x != 0) return;

    float m = s.mx_part[0];
    for (int w = 1; w < nw; w++) m = fmaxf(m, s.mx_part[w]);
    double lse = 0;
    if (m != -INFINITY)
        for (int w = 0; w < nw; w++)
            if (s.mx_part[w] != -INFINITY) lse += s.lse_part[w] * exp((double)s.mx_part[w] - (double)m);
    lse = lse > 0 ? (double)m + log(lse) : -INFINITY;
    const int32_t x = a.draft[row];
    mtplx_cuda_sample_out o = {0, 0, 0.0f, kept};
    if (x >= 0) {
        /* spec.c: accept x ~ q with probability min(1, p(x) / q(x)) */
        const mtplx_cuda_dist *q = &test[row];
        int lo = 0;
        while (lo < kept && s.id[lo] < x) lo++;
        float px = lo < kept && s.id[lo] == x ? s.v[lo] : 0.0f, qx = lookup(q, x);
        if (a.u_accept[row] < (qx > 0 ? (double)px / qx : 0.0)) {
            o.id = x;
            o.accepted = 1;
        } else {
            /* the residual normalize(max(0, p - q)) over p's support, in id
             * order; s <= 0 (rounding only) leaves p */
            double sr = 0;
            for (int j = 0; j < kept; j++) {
                float pj = s.v[j], qj = lookup(q, s.id[j]);
                sr += pj > qj ? pj - qj : 0;
            }
            if (sr > 0)
                for (int j = 0; j < kept; j++) {
                    float pj = s.v[j], qj = lookup(q, s.id[j]);
                    s.v[j] = pj > qj ? (float)((pj - qj) / sr) : 0.0f;
                }
            o.id = draw(s.v, s.id, kept, a.u_sample[row]);
        }
    } else {
        o.id = draw(s.v, s.id, kept, a.u_sample[row]);
    }
    o.logprob = lse == -INFINITY ? -INFINITY : (float)((double)l[o.id] - lse);
    out[row] = o;
}

} // namespace

cudaError_t mtplx_cuda_sample_rows(cudaStream_t s, const float *logits, int64_t V,
                                   const mtplx_cuda_sample_args *a, mtplx_cuda_dist *keep,
                                   const mtplx_cuda_dist *test, mtplx_cuda_sample_out *out) {
    if (a->n <= 0) return cudaSuccess;
    if (a->n > MTPLX_CUDA_SAMPLE_ROWS || a->top_k < 1 || a->top_k > KMAX) return cudaErrorInvalidValue;
    sample_kernel<<<(unsigned)a->n, SR_THREADS, 0, s>>>(logits, V, *a, keep, test, out);
    return cudaGetLastError();
}
