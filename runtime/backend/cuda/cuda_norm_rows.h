/* One row of LayerNorm (GPT-2, BERT) and RMSNorm (T5), forward and backward, by one warp: the
 * device formulas the norm kernels (cuda_norm.cu) and the fused residual step (cuda_residual.cu)
 * share, so there is one copy of each. They are the CPU backend's (runtime/backend/cpu/cpu_norm_rows.h):
 * biased variance from two passes over the row, row sums in double so mean/rstd stay within an
 * ulp of the CPU's, and
 *   LayerNorm: dinp += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout*w
 *   RMSNorm:   dinp += rstd * (dout*w - x * rstd^2 * mean(dout*w*x))
 * One warp per row: C is at most a few thousand, so 32 lanes striding the row are enough and the
 * reductions are shuffles only. The lanes stride it by packs of eight values (cuda_pack.h: a
 * 16-byte load of a 16-bit handle) where every handle starts the row aligned, else a value at a
 * time (rt_cuda_pack_row_walk). Every lane of the warp calls (the shuffles need them all). An
 * output is stored rounded to `kind` (rt_cuda_round16: RT_CUDA_KIND_F32 leaves it), so a kernel
 * stores at the compute precision itself instead of leaving a rounding pass to the op's wrapper;
 * the forward's y is a typed handle (a 16-bit one holds the rounded value), and x, the input, is
 * one too (a residual sum: 16-bit at a typed stack's compute precision). Each lane reads x's
 * values before writing y's at the same places, so y may alias x. */
#ifndef RT_CUDA_NORM_ROWS_H
#define RT_CUDA_NORM_ROWS_H

#include "runtime/backend/cuda/cuda_pack.h"
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
    const rt_x wx = rt_pack_xf(weight), bx = rt_pack_xf(bias);
    const bool aligned = rt_pack_aligned(y) && rt_pack_aligned(x) && rt_pack_aligned(wx) && rt_pack_aligned(bx);
    double s = 0.0;
    rt_cuda_pack_row_walk(C, aligned, lane, [&](size_t c, int w) {
        const rt_pack xv = rt_pack_load_n(x, c, w);
        for (int j = 0; j < w; j++) s += xv.v[j];
    });
    double mu = rt_cuda_warp_sum_d(s) / C;
    double v = 0.0;
    rt_cuda_pack_row_walk(C, aligned, lane, [&](size_t c, int w) {
        const rt_pack xv = rt_pack_load_n(x, c, w);
        for (int j = 0; j < w; j++) {
            const double d = xv.v[j] - mu;
            v += d * d;
        }
    });
    v = rt_cuda_warp_sum_d(v);
    float m = (float)mu;
    float r = (float)(1.0 / sqrt(v / C + (double)eps));
    rt_cuda_pack_row_walk(C, aligned, lane, [&](size_t c, int w) {
        const rt_pack xv = rt_pack_load_n(x, c, w), wv = rt_pack_load_n(wx, c, w);
        const rt_pack bv = bias ? rt_pack_load_n(bx, c, w) : rt_pack{};
        rt_pack o = {};
        for (int j = 0; j < w; j++) {
            const float t = (xv.v[j] - m) * r * wv.v[j];
            o.v[j] = rt_cuda_round16(bias ? t + bv.v[j] : t, kind);
        }
        rt_pack_store_n(y, c, w, &o);
    });
    if (lane == 0) {
        if (mean) *mean = m;
        if (rstd) *rstd = r;
    }
}

/* dx (C) += LayerNorm's input gradient from dyx (a handle of either type), given the forward's m
 * and r; stored. */
__device__ __forceinline__ void rt_cuda_layernorm_bwd_row(float *dx, rt_x dyx, rt_x x, const float *weight, float m,
                                                          float r, int C, int lane, int kind) {
    const rt_x dxx = rt_pack_xf(dx), wx = rt_pack_xf(weight);
    const bool aligned = rt_pack_aligned(dxx) && rt_pack_aligned(dyx) && rt_pack_aligned(x) && rt_pack_aligned(wx);
    double a = 0.0, b = 0.0;
    rt_cuda_pack_row_walk(C, aligned, lane, [&](size_t c, int w) {
        const rt_pack xv = rt_pack_load_n(x, c, w), dyv = rt_pack_load_n(dyx, c, w), wv = rt_pack_load_n(wx, c, w);
        for (int j = 0; j < w; j++) {
            const float xhat = (xv.v[j] - m) * r, dn = dyv.v[j] * wv.v[j];
            a += dn;
            b += (double)dn * xhat;
        }
    });
    a = rt_cuda_warp_sum_d(a);
    b = rt_cuda_warp_sum_d(b);
    float ma = (float)(a / C), mb = (float)(b / C);
    rt_cuda_pack_row_walk(C, aligned, lane, [&](size_t c, int w) {
        const rt_pack xv = rt_pack_load_n(x, c, w), dyv = rt_pack_load_n(dyx, c, w), wv = rt_pack_load_n(wx, c, w);
        rt_pack g = rt_pack_load_n(dxx, c, w);
        for (int j = 0; j < w; j++) {
            const float xhat = (xv.v[j] - m) * r;
            g.v[j] = rt_cuda_round16(g.v[j] + r * (dyv.v[j] * wv.v[j] - ma - xhat * mb), kind);
        }
        rt_pack_store_n(dxx, c, w, &g);
    });
}

/* y (C) = RMSNorm(x) with weight; lane 0 writes *rstd when not NULL. */
__device__ __forceinline__ void rt_cuda_rmsnorm_row(rt_x y, float *rstd, rt_x x, const float *weight, int C, float eps,
                                                    int lane, int kind) {
    const rt_x wx = rt_pack_xf(weight);
    const bool aligned = rt_pack_aligned(y) && rt_pack_aligned(x) && rt_pack_aligned(wx);
    double s = 0.0;
    rt_cuda_pack_row_walk(C, aligned, lane, [&](size_t c, int w) {
        const rt_pack xv = rt_pack_load_n(x, c, w);
        for (int j = 0; j < w; j++) s += (double)xv.v[j] * xv.v[j];
    });
    s = rt_cuda_warp_sum_d(s);
    float r = (float)(1.0 / sqrt(s / C + (double)eps));
    rt_cuda_pack_row_walk(C, aligned, lane, [&](size_t c, int w) {
        const rt_pack xv = rt_pack_load_n(x, c, w), wv = rt_pack_load_n(wx, c, w);
        rt_pack o = {};
        for (int j = 0; j < w; j++) o.v[j] = rt_cuda_round16(wv.v[j] * (xv.v[j] * r), kind);
        rt_pack_store_n(y, c, w, &o);
    });
    if (lane == 0 && rstd) *rstd = r;
}

/* dx (C) += RMSNorm's input gradient from dyx (a handle of either type), given the forward's r;
 * stored. */
__device__ __forceinline__ void rt_cuda_rmsnorm_bwd_row(float *dx, rt_x dyx, rt_x x, const float *weight, float r,
                                                        int C, int lane, int kind) {
    const rt_x dxx = rt_pack_xf(dx), wx = rt_pack_xf(weight);
    const bool aligned = rt_pack_aligned(dxx) && rt_pack_aligned(dyx) && rt_pack_aligned(x) && rt_pack_aligned(wx);
    double a = 0.0;
    rt_cuda_pack_row_walk(C, aligned, lane, [&](size_t c, int w) {
        const rt_pack xv = rt_pack_load_n(x, c, w), dyv = rt_pack_load_n(dyx, c, w), wv = rt_pack_load_n(wx, c, w);
        for (int j = 0; j < w; j++) a += (double)(dyv.v[j] * wv.v[j]) * xv.v[j];
    });
    a = rt_cuda_warp_sum_d(a);
    float k = (float)(a / C) * r * r;
    rt_cuda_pack_row_walk(C, aligned, lane, [&](size_t c, int w) {
        const rt_pack xv = rt_pack_load_n(x, c, w), dyv = rt_pack_load_n(dyx, c, w), wv = rt_pack_load_n(wx, c, w);
        rt_pack g = rt_pack_load_n(dxx, c, w);
        for (int j = 0; j < w; j++) g.v[j] = rt_cuda_round16(g.v[j] + r * (dyv.v[j] * wv.v[j] - xv.v[j] * k), kind);
        rt_pack_store_n(dxx, c, w, &g);
    });
}

#endif
