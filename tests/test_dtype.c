/* fp16/bf16 conversions: round-to-nearest-even, specials, and round trips. */
#include <math.h>
#include <stdio.h>

#include "runtime/base/rt_dtype.h"
#include "tests/testutil.h"

int main(void) {
    TZ_EXPECT(rt_f32_to_f16(1.0f) == 0x3c00, "1.0 -> %04x", rt_f32_to_f16(1.0f));
    TZ_EXPECT(rt_f32_to_f16(-2.0f) == 0xc000, "-2.0");
    TZ_EXPECT(rt_f32_to_f16(65504.0f) == 0x7bff, "max half");
    TZ_EXPECT(rt_f32_to_f16(65520.0f) == 0x7c00, "65520 overflows to inf");
    TZ_EXPECT(rt_f32_to_f16(5.9604645e-08f) == 0x0001, "smallest subnormal");
    TZ_EXPECT(rt_f32_to_f16(1.0f + 1.0f / 2048.0f) == 0x3c00, "tie rounds to even (down)");
    TZ_EXPECT(rt_f32_to_f16(1.0f + 3.0f / 2048.0f) == 0x3c02, "tie rounds to even (up)");
    TZ_EXPECT(isnan(rt_f16_to_f32(rt_f32_to_f16(NAN))), "nan survives");
    TZ_EXPECT(rt_f32_to_bf16(1.0f) == 0x3f80, "bf16 1.0");
    TZ_EXPECT(rt_f32_to_bf16(1.00390625f) == 0x3f80, "bf16 tie to even down");
    TZ_EXPECT(rt_f32_to_bf16(1.01171875f) == 0x3f82, "bf16 tie to even up");
    for (int h = 0; h < 0x7c00; h++) { /* every finite positive half round-trips */
        uint16_t back = rt_f32_to_f16(rt_f16_to_f32((uint16_t)h));
        if (back != h) {
            TZ_EXPECT(back == h, "half %04x -> %04x", h, back);
            break;
        }
    }
    /* every half, against its value from the definition; every non-nan one round-trips */
    int wrong = 0;
    for (int h = 0; h < 0x10000; h++) {
        const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        const float f = rt_f16_to_f32((uint16_t)h);
        if (e == 31 && m) {
            wrong += !isnan(f);
            continue;
        }
        const double mag = e == 31 ? INFINITY : e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
        wrong += f != (float)((h & 0x8000) ? -mag : mag) || !signbit(f) != !(h & 0x8000);
        wrong += rt_f32_to_f16(f) != h;
    }
    TZ_EXPECT(wrong == 0, "%d halves widen or round-trip wrong", wrong);
    rt_dtype t;
    TZ_EXPECT(rt_dtype_from_name("BF16", &t) && t == RT_BF16, "name lookup");
    TZ_EXPECT(!rt_dtype_from_name("Q4", &t), "unknown name");
    return tz_test_result("test_dtype");
}
