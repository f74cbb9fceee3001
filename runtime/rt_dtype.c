/* Element type table and half-precision conversions (bit-exact with PyTorch's casts). */
#include "runtime/rt_dtype.h"

#include <string.h>

#include "runtime/rt_status.h"

static const struct {
    const char *name;
    size_t size;
} rt_dtype_table[RT_DTYPE_COUNT] = {
    [RT_F32] = {"F32", 4}, [RT_F16] = {"F16", 2}, [RT_BF16] = {"BF16", 2}, [RT_I32] = {"I32", 4},
    [RT_I64] = {"I64", 8}, [RT_U8] = {"U8", 1},   [RT_BOOL] = {"BOOL", 1}, [RT_F64] = {"F64", 8},
};

size_t rt_dtype_size(rt_dtype t) {
    RT_CHECK(t >= 0 && t < RT_DTYPE_COUNT, "dtype %d", (int)t);
    return rt_dtype_table[t].size;
}

const char *rt_dtype_name(rt_dtype t) {
    RT_CHECK(t >= 0 && t < RT_DTYPE_COUNT, "dtype %d", (int)t);
    return rt_dtype_table[t].name;
}

int rt_dtype_from_name(const char *name, rt_dtype *out) {
    for (int i = 0; i < RT_DTYPE_COUNT; i++) {
        if (strcmp(name, rt_dtype_table[i].name) == 0) {
            *out = (rt_dtype)i;
            return 1;
        }
    }
    return 0;
}

static float bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

float rt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0) {
        if (man == 0) return bits_to_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (man << 13));
    return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t rt_f32_to_f16(float f) {
    uint32_t u = f32_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t absu = u & 0x7fffffffu;
    if (absu >= 0x7f800000u) /* inf or nan */
        return sign | 0x7c00 | (absu > 0x7f800000u ? 0x200 : 0);
    if (absu >= 0x477ff000u) return sign | 0x7c00; /* rounds to >= 65520: inf */
    if (absu < 0x38800000u) {                      /* below the smallest normal half */
        /* add 0.5 (as float) so the FPU rounds the subnormal to nearest even for us */
        float v = bits_to_f32(absu) + 0.5f;
        return sign | (uint16_t)(f32_to_bits(v) - 0x3f000000u);
    }
    uint32_t mant_odd = (absu >> 13) & 1;
    absu += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round to nearest even */
    return sign | (uint16_t)(absu >> 13);
}

void rt_convert_to_f32(float *dst, const void *src, rt_dtype from, size_t n) {
    switch (from) {
    case RT_F32: memcpy(dst, src, n * 4); return;
    case RT_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, (const char *)src + 2 * i, 2);
            dst[i] = rt_f16_to_f32(h);
        }
        return;
    case RT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, (const char *)src + 2 * i, 2);
            dst[i] = rt_bf16_to_f32(h);
        }
        return;
    case RT_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, (const char *)src + 8 * i, 8);
            dst[i] = (float)d;
        }
        return;
    default: RT_CHECK(0, "cannot convert %s to F32", rt_dtype_name(from));
    }
}
