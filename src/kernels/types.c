/* types.c: the tensor type table (GGML ids, names, block sizes) and scalar
 * fp16 / bf16 conversions. Block quantization itself is in ref/quants_ref.c. */
#include "kernels/kernels_impl.h"

#include <ctype.h>

static const mtplx_type_traits traits[MTPLX_TYPE_COUNT] = {
    [MTPLX_TYPE_F32] = {"F32", 1, sizeof(float), false},
    [MTPLX_TYPE_F16] = {"F16", 1, sizeof(uint16_t), false},
    [MTPLX_TYPE_BF16] = {"BF16", 1, sizeof(uint16_t), false},
    [MTPLX_TYPE_Q8_0] = {"Q8_0", QK8_0, sizeof(block_q8_0), true},
    [MTPLX_TYPE_Q4_0] = {"Q4_0", QK4_0, sizeof(block_q4_0), true},
    [MTPLX_TYPE_Q4_K] = {"Q4_K", QK_K, sizeof(block_q4_K), true},
    [MTPLX_TYPE_Q6_K] = {"Q6_K", QK_K, sizeof(block_q6_K), true},
    [MTPLX_TYPE_Q8_K] = {"Q8_K", QK_K, sizeof(block_q8_K), true},
};

/* GGML's sizes, checked at compile time: a padding change would silently
 * break every GGUF file. */
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 layout");
_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 layout");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K layout");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K layout");
_Static_assert(sizeof(block_q8_K) == 292, "block_q8_K layout");

const mtplx_type_traits *mtplx_type_info(int type) {
    if (type < 0 || type >= MTPLX_TYPE_COUNT || !traits[type].name) return NULL;
    return &traits[type];
}

int mtplx_type_from_name(const char *name) {
    if (!name) return -1;
    for (int t = 0; t < MTPLX_TYPE_COUNT; t++) {
        if (!traits[t].name) continue;
        const char *a = traits[t].name, *b = name;
        while (*a && *b && toupper((unsigned char)*a) == toupper((unsigned char)*b)) a++, b++;
        if (!*a && !*b) return t;
    }
    return -1;
}

size_t mtplx_row_size(int type, int64_t n) {
    const mtplx_type_traits *tt = mtplx_type_info(type);
    if (!tt || n < 0 || n % tt->block_size) return 0;
    return (size_t)(n / tt->block_size) * tt->type_size;
}

static inline uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float mtplx_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) { /* zero or subnormal: mant * 2^-24 is exact in float */
        float f = (float)mant * 5.9604644775390625e-8f;
        return u2f(f2u(f) | sign);
    }
    if (exp == 31) return u2f(sign | 0x7f800000u | (mant << 13));
    return u2f(sign | ((exp + 112) << 23) | (mant << 13));
}

/* IEEE round to nearest even, as F16C's vcvtps2ph with imm 0 does. */
uint16_t mtplx_fp32_to_fp16(float f) {
    uint32_t u = f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    u &= 0x7fffffff;
    if (u >= 0x7f800000) return sign | 0x7c00 | (u > 0x7f800000 ? 0x200 : 0); /* inf, NaN */
    if (u >= 0x477ff000) return sign | 0x7c00; /* >= 65520 rounds to inf */
    if (u < 0x38800000) {
        /* subnormal half: adding 0.5f aligns the binary point so that the FPU's
         * own rounding (RNE) produces the 10-bit result in the low bits. */
        float v = u2f(u) + 0.5f;
        return sign | (uint16_t)(f2u(v) - 0x3f000000u);
    }
    uint32_t odd = (u >> 13) & 1;
    u += 0xc8000000u + 0xfff + odd; /* rebias exponent (-112 << 23) and round */
    return sign | (uint16_t)(u >> 13);
}

uint16_t mtplx_fp32_to_bf16(float f) {
    uint32_t u = f2u(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 64); /* quiet NaN */
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}
