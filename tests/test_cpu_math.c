/* The CPU kernels' vectorizable exp and erf (runtime/backend/cpu/cpu_math.h) against double
 * precision, over float bit patterns spread across the whole range (every 257th pattern:
 * about 16.7 million inputs), plus the special values the kernels rely on: exp(-inf) = 0
 * exactly (masked attention scores), overflow to inf, NaN in NaN out. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/backend/cpu/cpu_math.h"
#include "tests/testutil.h"

/* Distance in units in the last place between a float and the float nearest to ref. */
static int64_t ulps(float got, double ref) {
    float r = (float)ref;
    int32_t a, b;
    memcpy(&a, &got, 4);
    memcpy(&b, &r, 4);
    int64_t ia = a < 0 ? (int64_t)INT32_MIN - a : a, ib = b < 0 ? (int64_t)INT32_MIN - b : b;
    return ia > ib ? ia - ib : ib - ia;
}

static void test_exp(void) {
    int64_t worst = 0;
    float worst_x = 0;
    size_t n = 0;
    for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 257) {
        uint32_t b = (uint32_t)bits;
        float x;
        memcpy(&x, &b, 4);
        double ref = exp((double)x);
        /* the normal float range; below it the kernel returns 0 on purpose */
        if (x != x || ref < 1.17549435e-38 || ref > 3.4028234e38) continue;
        int64_t u = ulps(rt_fast_expf(x), ref);
        n++;
        if (u > worst) {
            worst = u;
            worst_x = x;
        }
    }
    TZ_EXPECT(n > 1000000 && worst <= 2, "exp: worst %lld ulp at %.9g over %zu inputs", (long long)worst,
              (double)worst_x, n);
    TZ_EXPECT(rt_fast_expf(-INFINITY) == 0.0f && rt_fast_expf(-100.0f) == 0.0f, "exp underflows to exactly 0");
    TZ_EXPECT(isinf(rt_fast_expf(100.0f)) && isinf(rt_fast_expf(INFINITY)), "exp overflows to inf");
    TZ_EXPECT(isnan(rt_fast_expf(NAN)) && rt_fast_expf(0.0f) == 1.0f, "exp(nan) = nan, exp(0) = 1");
}

static void test_erf(void) {
    double worst_abs = 0, worst_rel = 0;
    size_t n = 0;
    for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 257) {
        uint32_t b = (uint32_t)bits;
        float x;
        memcpy(&x, &b, 4);
        if (x != x || fabsf(x) > 10.0f) continue; /* erf is +-1 to float precision beyond */
        double ref = erf((double)x), d = fabs((double)rt_fast_erff(x) - ref);
        n++;
        if (d > worst_abs) worst_abs = d;
        if (fabs(ref) > 1e-30 && d / fabs(ref) > worst_rel) worst_rel = d / fabs(ref);
    }
    TZ_EXPECT(n > 1000000 && worst_abs <= 5e-7 && worst_rel <= 5e-7, "erf: worst %.3g absolute, %.3g relative over %zu",
              worst_abs, worst_rel, n);
    TZ_EXPECT(isnan(rt_fast_erff(NAN)) && rt_fast_erff(0.0f) == 0.0f, "erf(nan) = nan, erf(0) = 0");
    TZ_EXPECT(fabsf(rt_fast_erff(20.0f) - 1.0f) <= 5e-7f && fabsf(rt_fast_erff(-INFINITY) + 1.0f) <= 5e-7f,
              "erf saturates at +-1");
}

static void test_tanh(void) {
    double worst_abs = 0, worst_rel = 0;
    size_t n = 0;
    for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 257) {
        uint32_t b = (uint32_t)bits;
        float x;
        memcpy(&x, &b, 4);
        if (x != x) continue;
        double ref = tanh((double)x), d = fabs((double)rt_fast_tanhf(x) - ref);
        n++;
        if (d > worst_abs) worst_abs = d;
        if (fabs(x) < 0.0625 && ref != 0 && d / fabs(ref) > worst_rel) worst_rel = d / fabs(ref);
    }
    TZ_EXPECT(n > 1000000 && worst_abs <= 3e-7 && worst_rel <= 1e-6,
              "tanh: worst %.3g absolute, %.3g relative below "
              "1/16, over %zu",
              worst_abs, worst_rel, n);
    TZ_EXPECT(isnan(rt_fast_tanhf(NAN)) && rt_fast_tanhf(0.0f) == 0.0f && rt_fast_tanhf(INFINITY) == 1.0f &&
                  rt_fast_tanhf(-INFINITY) == -1.0f,
              "tanh(nan) = nan, tanh(0) = 0, tanh(+-inf) = +-1");
}

int main(void) {
    test_exp();
    test_erf();
    test_tanh();
    return tz_test_result("test_cpu_math");
}
