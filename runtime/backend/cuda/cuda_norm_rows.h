/* One row of LayerNorm (GPT-2, BERT) and RMSNorm (T5), forward and backward, by one warp: the
 * device formulas the norm kernels (cuda_norm.cu) and the fused residual step (cuda_residual.cu)
 * share, so there is one copy of each. They are the CPU backend's (runtime/backend/cpu/cpu_norm_rows.h):
 * biased variance from two passes over the row, row sums in double so mean/rstd stay within an
 * ulp of the CPU's, and
 *   LayerNorm: dinp += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout*w
 *   RMSNorm:   dinp += rstd * (dout*w - x * rstd^2 * mean(dout*w*x))
 * One warp per row: C is at most a few thousand, so 32 lanes striding the row (c = lane, lane +
 * 32, ...) are enough and the reductions are shuffles only. Every lane of the warp calls (the
 * shuffles need them all). An output is stored rounded to `kind` (rt_cuda_round16:
 * RT_CUDA_KIND_F32 leaves it), so a fused kernel stores at the compute precision where the
 * composed ops round in a pass after; the forward's y is a typed handle (a 16-bit one holds the
 * rounded value), and x, the input, is one too (a residual sum: 16-bit at a typed stack's compute
 * precision). Each lane reads x[c] before writing y[c], so y may alias x. */
#ifndef RT_CUDA_NORM_ROWS_H
#define RT_CUDA_NORM_ROWS_H

#include "runtime/backend/cuda/rt_cuda.h"

#define RT_CUDA_ROWS_PER_BLOCK 8 /* warps per block in the row kernels */

/* Blocks of RT_CUDA_ROWS_PER_BLOCK warps for N rows, a warp each. */
static inline unsigned rt_cuda_row_grid(size_t N) {
    size_t blocks = (N + RT_CUDA_ROWS_PER_BLOCK - 1) / RT_CUDA_ROWS_PER_BLOCK;
    RT_CHECK(blocks <= 0x7fffffffu, "N=%zu rows is too many for one launch", N);
    return (unsigned)blocks;
}

/* y (C) = LayerNorm(x) with weight and bias (NULL: none); lane 0 writes *mean and *rstd (each
 * when not NULL). */
__device__ __forceinline__ void rt_cuda_layernorm_row(rt_x y, float *mean, float *rstd, rt_x x, const float *weight,
                                                      const float *bias, int C, float eps, int lane, int kind) {
    double s = 0.0;
    for (int c = lane; c < C; c += 32) s += rt_cuda_xload(x, c);
    double mu = rt_cuda_warp_sum_d(s) / C;
    double v = 0.0;
    for (int c = lane; c < C; c += 32) {
        double d = rt_cuda_xload(x, c) - mu;
        v += d * d;
    }
    v = rt_cuda_warp_sum_d(v);
    float m = (float)mu;
    float r = (float)(1.0 / sqrt(v / C + (double)eps));
    for (int c = lane; c < C; c += 32) {
        float o = (rt_cuda_xload(x, c) - m) * r * weight[c];
        rt_cuda_xstore(y, c, rt_cuda_round16(bias ? o + bias[c] : o, kind));
    }
    if (lane == 0) {
        if (mean) *mean = m;
        if (rstd) *rstd = r;
    }
}

/* dx (C) += LayerNorm's input gradient from dy, given the forward's m and r; stored. */
__device__ __forceinline__ void rt_cuda_layernorm_bwd_row(float *dx, const float *dy, rt_x x, const float *weight,
                                                          float m, float r, int C, int lane, int kind) {
    double a = 0.0, b = 0.0;
    for (int c = lane; c < C; c += 32) {
        float xhat = (rt_cuda_xload(x, c) - m) * r;
        float dn = dy[c] * weight[c];
        a += dn;
        b += (double)dn * xhat;
    }
    a = rt_cuda_warp_sum_d(a);
    b = rt_cuda_warp_sum_d(b);
    float ma = (float)(a / C), mb = (float)(b / C);
    for (int c = lane; c < C; c += 32) {
        float xhat = (rt_cuda_xload(x, c) - m) * r;
        dx[c] = rt_cuda_round16(dx[c] + r * (dy[c] * weight[c] - ma - xhat * mb), kind);
    }
}

/* y (C) = RMSNorm(x) with weight; lane 0 writes *rstd when not NULL. */
__device__ __forceinline__ void rt_cuda_rmsnorm_row(rt_x y, float *rstd, rt_x x, const float *weight, int C, float eps,
                                                    int lane, int kind) {
    double s = 0.0;
    for (int c = lane; c < C; c += 32) {
        const double v = rt_cuda_xload(x, c);
        s += v * v;
    }
    s = rt_cuda_warp_sum_d(s);
    float r = (float)(1.0 / sqrt(s / C + (double)eps));
    for (int c = lane; c < C; c += 32)
        rt_cuda_xstore(y, c, rt_cuda_round16(weight[c] * (rt_cuda_xload(x, c) * r), kind));
    if (lane == 0 && rstd) *rstd = r;
}

/* dx (C) += RMSNorm's input gradient from dy, given the forward's r; stored. */
__device__ __forceinline__ void rt_cuda_rmsnorm_bwd_row(float *dx, const float *dy, rt_x x, const float *weight,
                                                        float r, int C, int lane, int kind) {
    double a = 0.0;
    for (int c = lane; c < C; c += 32) a += (double)(dy[c] * weight[c]) * rt_cuda_xload(x, c);
    a = rt_cuda_warp_sum_d(a);
    float k = (float)(a / C) * r * r;
    for (int c = lane; c < C; c += 32)
        dx[c] = rt_cuda_round16(dx[c] + r * (dy[c] * weight[c] - rt_cuda_xload(x, c) * k), kind);
}

#endif
