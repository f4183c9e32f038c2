/* x86_avx512.c: kernels for CPUs with AVX-512 VNNI (Ice Lake, Sapphire
 * Rapids, Zen 4 and later).
 *
 * Deliberately small: the only place AVX-512 clearly pays over the AVX2 code
 * in the memory-bound decode regime is the int8 dot, where VNNI's vpdpbusd
 * replaces the maddubs + madd pair (and cannot saturate). So the Q8_0 / Q4_0
 * kernels are the shared template with that one primitive swapped, on 256-bit
 * registers (no frequency penalty, same register blocking as AVX2). Every
 * other entry is NULL and is filled from the AVX2 table by the dispatcher.
 * This machine-independent choice is tested against the reference on
 * machines that have the instructions. */
#include "kernels/cpu/x86_simd.h"

AI __m256i dot_u8_s8_vnni(__m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}
#define DOT_U8_S8(u, s) dot_u8_s8_vnni(u, s)
#define MM_Q8_0_NAME mm_q8_0_avx512
#define MM_Q4_0_NAME mm_q4_0_avx512
#include "kernels/cpu/x86_q8_0_tmpl.h"

const kernel_ops mtplx_kernels_avx512_ops = {
    .name = "avx512",
    .mm =
        {
            [MTPLX_TYPE_Q8_0] = mm_q8_0_avx512,
            [MTPLX_TYPE_Q4_0] = mm_q4_0_avx512,
        },
};
