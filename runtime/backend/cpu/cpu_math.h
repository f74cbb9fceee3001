/* Branch-free exp and erf for the CPU kernels' hot loops. glibc's expf and erff are scalar
 * calls, so a loop that uses them cannot vectorize; these are plain arithmetic on floats and
 * bits, which GCC turns into AVX2 code inside `#pragma omp simd` loops. PyTorch's CPU
 * kernels do the same (their vectorized exp and erf are approximations too), which is why
 * HF goldens made on a CPU already carry errors of this size.
 *
 * Accuracy, checked against double precision on every 257th float bit pattern by
 * tests/test_cpu_math.c: exp within 2 ulp; erf within 5e-7, absolute and relative; tanh within
 * 3e-7 absolute (and 1e-6 relative below 1/16). */
#ifndef RT_CPU_MATH_H
#define RT_CPU_MATH_H

#include <stdint.h>
#include <string.h>

/* Horner steps: one rounding each where the target has FMA (x86-64-v3), else two. */
#ifdef __FMA__
#define RT_MADD(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define RT_MADD(a, b, c) ((a) * (b) + (c))
#endif

/* e^x: x = n ln2 + r with |r| <= ln2/2, e^r by a degree-6 polynomial (Cephes' expf
 * coefficients), 2^n put straight into the exponent bits. Below -87.33 (e^x under the
 * smallest normal float), -inf included, the result is 0, so masked scores give exactly
 * zero probability; above 88.72 it is +inf; NaN stays NaN. */
static inline float rt_fast_expf(float x) {
    const float lo = -87.33654f, hi = 88.7228394f; /* log(FLT_MAX) */
    float xc = x < lo ? lo : (x > hi ? hi : x);
    float n = __builtin_roundf(xc * 1.44269504088896341f);
    float r = xc - n * 0.693359375f; /* ln2, high part (exact product for |n| < 2^9) */
    r = r - n * -2.12194440e-4f;     /* ln2, low part */
    float p = 1.9875691500e-4f;
    p = RT_MADD(p, r, 1.3981999507e-3f);
    p = RT_MADD(p, r, 8.3334519073e-3f);
    p = RT_MADD(p, r, 4.1665795894e-2f);
    p = RT_MADD(p, r, 1.6666665459e-1f);
    p = RT_MADD(p, r, 5.0000001201e-1f);
    float y = p * (r * r) + r + 1.0f;
    /* y in [0.7, 1.42] and n in [-126, 128]: scale by 2^n in two halves so n = -126 and
     * n = 128 need no special exponent */
    int32_t ni = (int32_t)n, n1 = ni / 2, n2 = ni - n1;
    int32_t b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &b1, sizeof s1);
    memcpy(&s2, &b2, sizeof s2);
    y = y * s1 * s2;
    y = x < lo ? 0.0f : y;
    y = x > hi ? __builtin_inff() : y;
    return x != x ? x : y;
}

/* erf(x) as a rational function x P(x^2) / Q(x^2) on [-3.83, 3.83], the fit Eigen and XLA
 * use for float erf; beyond it erf is 1 to within 2e-7. Relative accuracy holds near 0 too,
 * unlike 1 - t P(t) e^(-x^2) forms, which cancel there. */
static inline float rt_fast_erff(float x) {
    const float lim = 3.832506856900711f;
    float xc = x < -lim ? -lim : (x > lim ? lim : x);
    float x2 = xc * xc;
    float p = -2.72614225801306e-10f;
    p = RT_MADD(p, x2, 2.77068142495902e-08f);
    p = RT_MADD(p, x2, -2.10102402082508e-06f);
    p = RT_MADD(p, x2, -5.69250639462346e-05f);
    p = RT_MADD(p, x2, -7.34990630326855e-04f);
    p = RT_MADD(p, x2, -2.95459980854025e-03f);
    p = RT_MADD(p, x2, -1.60960333262415e-02f);
    float q = -1.45660718464996e-05f;
    q = RT_MADD(q, x2, -2.13374055278905e-04f);
    q = RT_MADD(q, x2, -1.68282697438203e-03f);
    q = RT_MADD(q, x2, -7.37332916720468e-03f);
    q = RT_MADD(q, x2, -1.42647390514189e-02f);
    float y = xc * p / q;
    return x != x ? x : y;
}

/* tanh(x) = 1 - 2 / (e^(2|x|) + 1) with rt_fast_expf, the sign put back; below |x| = 1/16 the
 * odd series x - x^3/3 + 2x^5/15 instead, which keeps the relative accuracy the subtraction
 * would lose there. Within 3e-7 absolute everywhere (the GELU-tanh kernels add it to 1). */
static inline float rt_fast_tanhf(float x) {
    float a = x < 0.0f ? -x : x;
    float x2 = x * x;
    float series = x * RT_MADD(x2, RT_MADD(x2, 0.1333333333f, -0.3333333333f), 1.0f);
    float e = rt_fast_expf(2.0f * (a > 44.0f ? 44.0f : a));
    float big = 1.0f - 2.0f / (e + 1.0f);
    big = x < 0.0f ? -big : big;
    float y = a < 0.0625f ? series : big;
    return x != x ? x : y;
}

#endif
