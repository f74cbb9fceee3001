/* Element types and the fp16/bf16 <-> fp32 conversions used by checkpoint I/O and the
 * mixed-precision paths. Conversions round to nearest even, as PyTorch does. */
#ifndef RT_DTYPE_H
#define RT_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum { RT_F32 = 0, RT_F16, RT_BF16, RT_I32, RT_I64, RT_U8, RT_BOOL, RT_F64, RT_DTYPE_COUNT } rt_dtype;

size_t rt_dtype_size(rt_dtype t);
const char *rt_dtype_name(rt_dtype t);
/* Parses a name as safetensors writes it ("F32", "BF16", ...); returns 0 when unknown. */
int rt_dtype_from_name(const char *name, rt_dtype *out);

static inline uint32_t rt_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float rt_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* fp16 <-> fp32, bit-exact with PyTorch's casts. Inline and written as selects, not branches, so
 * that a loop over them vectorizes (the 2-byte activations of models/layers/stack.h go through them). */
static inline float rt_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    const uint32_t normal = ((e + 112u) << 23) | (m << 13);
    const uint32_t special = 0x7f800000u | (m << 13);                        /* inf, nan */
    const uint32_t subnormal = rt_f32_bits((float)m * (1.0f / 16777216.0f)); /* m * 2^-24, exact */
    return rt_bits_f32(sign | (e == 0 ? subnormal : e == 31 ? special : normal));
}
static inline uint16_t rt_f32_to_f16(float f) {
    const uint32_t u = rt_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    /* normal halves: rebias the exponent (-112 << 23) and round to nearest even */
    const uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;
    /* below the smallest normal half: adding 0.5 makes the FPU round the subnormal to nearest even */
    const uint32_t subnormal = rt_f32_bits(rt_bits_f32(a) + 0.5f) - 0x3f000000u;
    uint32_t r = a < 0x38800000u ? subnormal : normal;
    r = a >= 0x477ff000u ? 0x7c00u : r; /* rounds to 65520 or more: inf */
    r = a > 0x7f800000u ? 0x7e00u : r;  /* nan stays a (quiet) nan */
    return (uint16_t)(sign | r);
}
/* bf16 is the top half of a float: inline, so that a loop over a matmul's inputs vectorizes. */
static inline float rt_bf16_to_f32(uint16_t b) { return rt_bits_f32((uint32_t)b << 16); }
static inline uint16_t rt_f32_to_bf16(float f) {
    uint32_t u = rt_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet nan */
    u += 0x7fffu + ((u >> 16) & 1);                                           /* to nearest even */
    return (uint16_t)(u >> 16);
}

/* x rounded to the nearest bf16 or fp16 value (to nearest even), kept as a float: what storing
 * it in that type and reading it back gives. fp16 overflows to +-inf past 65504 and keeps its
 * subnormals, as a GPU's __float2half_rn does. Inline: the CPU backend rounds every stored
 * activation with them (runtime/backend/rt_backend.h). */
static inline float rt_round_bf16(float x) { return rt_bf16_to_f32(rt_f32_to_bf16(x)); }
static inline float rt_round_f16(float x) {
    const uint32_t u = rt_f32_bits(x);
    const uint32_t a = u & 0x7fffffffu, sign = u & 0x80000000u;
    if (a >= 0x7f800000u) return x; /* inf, nan */
    if (a < 0x38800000u) {          /* below fp16's smallest normal, 2^-14 */
        /* the FPU rounds to a multiple of 2^-24 (ulp at 0.5) to nearest even for us */
        float r = ((x < 0 ? -x : x) + 0.5f) - 0.5f; /* (IEEE: not folded without -ffast-math) */
        return sign ? -r : r;
    }
    uint32_t r = (a + 0xfffu + ((a >> 13) & 1)) & ~0x1fffu; /* 10 mantissa bits, nearest even */
    if (r > 0x477fe000u) r = 0x7f800000u;                   /* past 65504: inf */
    return rt_bits_f32(r | sign);
}
static inline float rt_round_to(rt_dtype t, float x) {
    return t == RT_BF16 ? rt_round_bf16(x) : t == RT_F16 ? rt_round_f16(x) : x;
}

/* Converts n elements of type `from` at src into float32 at dst (F32, F16, BF16, F64). */
void rt_convert_to_f32(float *dst, const void *src, rt_dtype from, size_t n);

#endif
