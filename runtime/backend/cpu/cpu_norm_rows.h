/* One row of LayerNorm (GPT-2, BERT) and RMSNorm (T5), forward and backward: the formulas the
 * norm ops (cpu_norm.c) and the fused residual step (cpu_residual.c) share, so the two give the
 * same bits and there is one copy of each. Row statistics are summed in double: C is a few
 * thousand at most, so it costs little and keeps mean/rstd within an ulp of PyTorch's (which
 * uses a float Welford with pairwise blocks). The variance is the biased one, as
 * torch.nn.LayerNorm uses. Serial: the callers split rows across threads. */
#ifndef RT_CPU_NORM_ROWS_H
#define RT_CPU_NORM_ROWS_H

#include <math.h>
#include <stddef.h>

/* y (C) = LayerNorm(x) with weight and bias (NULL: none); *mean and *rstd when not NULL. */
static inline void rt_cpu_layernorm_row(float *y, float *mean, float *rstd, const float *x, const float *weight,
                                        const float *bias, int C, float eps) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += x[c];
    double mu = s / C;
    /* two passes: the one-pass E[x^2]-E[x]^2 cancels badly when |mean| >> std */
    double v = 0.0;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) {
        double d = x[c] - mu;
        v += d * d;
    }
    float m = (float)mu;
    float r = (float)(1.0 / sqrt(v / C + (double)eps));
    for (int c = 0; c < C; c++) {
        float o = (x[c] - m) * r * weight[c];
        y[c] = bias ? o + bias[c] : o;
    }
    if (mean) *mean = m;
    if (rstd) *rstd = r;
}

/* dx (C) += the LayerNorm input gradient from dy, given the forward's m and r:
 * rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dy * w. */
static inline void rt_cpu_layernorm_bwd_row(float *dx, const float *dy, const float *x, const float *weight, float m,
                                            float r, int C) {
    double a = 0.0, b = 0.0;
#pragma omp simd reduction(+ : a, b)
    for (int c = 0; c < C; c++) {
        float xhat = (x[c] - m) * r;
        float dn = dy[c] * weight[c];
        a += dn;
        b += (double)dn * xhat;
    }
    float ma = (float)(a / C), mb = (float)(b / C);
    for (int c = 0; c < C; c++) {
        float xhat = (x[c] - m) * r;
        dx[c] += r * (dy[c] * weight[c] - ma - xhat * mb);
    }
}

/* y (C) = RMSNorm(x) with weight; *rstd when not NULL. */
static inline void rt_cpu_rmsnorm_row(float *y, float *rstd, const float *x, const float *weight, int C, float eps) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += (double)x[c] * x[c];
    float r = (float)(1.0 / sqrt(s / C + (double)eps));
    /* T5LayerNorm: hidden * rsqrt(var + eps), then weight * hidden */
    for (int c = 0; c < C; c++) y[c] = weight[c] * (x[c] * r);
    if (rstd) *rstd = r;
}

/* dx (C) += the RMSNorm input gradient from dy, given the forward's r. y = w x r with
 * r = (mean(x^2) + eps)^-1/2, dr/dx_i = -r^3 x_i / C, so dx_i = r (dy_i w_i - x_i r^2 mean(dy w x)). */
static inline void rt_cpu_rmsnorm_bwd_row(float *dx, const float *dy, const float *x, const float *weight, float r,
                                          int C) {
    double a = 0.0;
#pragma omp simd reduction(+ : a)
    for (int c = 0; c < C; c++) a += (double)(dy[c] * weight[c]) * x[c];
    float k = (float)(a / C) * r * r;
    for (int c = 0; c < C; c++) dx[c] += r * (dy[c] * weight[c] - x[c] * k);
}

#endif
