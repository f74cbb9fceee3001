/* Element type table and half-precision conversions (bit-exact with PyTorch's casts). */
#include "runtime/base/rt_dtype.h"

#include <string.h>

#include "runtime/base/rt_status.h"

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
