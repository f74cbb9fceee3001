/* LayerNorm (GPT-2, BERT) and RMSNorm (T5) on the CPU, one row per OpenMP iteration.
 * Row statistics are summed in double: C is a few thousand at most, so it costs little and
 * keeps mean/rstd within an ulp of PyTorch's (which uses a float Welford with pairwise
 * blocks). The variance is the biased one, as torch.nn.LayerNorm uses. The weight and bias
 * gradients are sums over rows; they are split by column blocks so no two threads write the
 * same element and the sum order never depends on the thread count. */
#include <math.h>

#include "runtime/cpu/cpu_internal.h"

void rt_cpu_layernorm_fwd(void *ctx, float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, size_t N, int C, float eps) {
    RT_CHECK(C > 0, "C=%d", C);
#pragma omp parallel for schedule(static) if (N * (size_t)C >= RT_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * (size_t)C;
        float *y = out + n * (size_t)C;
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
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = r;
    }
}

void rt_cpu_layernorm_bwd(void *ctx, float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, const float *mean,
                          const float *rstd, size_t N, int C) {
    RT_CHECK(C > 0, "C=%d", C);
    /* dinp = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * w */
#pragma omp parallel for schedule(static) if (N * (size_t)C >= RT_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * (size_t)C;
        const float *dy = dout + n * (size_t)C;
        float *dx = dinp + n * (size_t)C;
        float m = mean[n], r = rstd[n];
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
    if (!dweight && !dbias) return;
    int nblk = (C + RT_CPU_COL_BLOCK - 1) / RT_CPU_COL_BLOCK;
#pragma omp parallel for schedule(static) if (N * (size_t)C >= RT_CPU_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * RT_CPU_COL_BLOCK;
        int c1 = c0 + RT_CPU_COL_BLOCK < C ? c0 + RT_CPU_COL_BLOCK : C;
        for (size_t n = 0; n < N; n++) {
            const float *x = inp + n * (size_t)C;
            const float *dy = dout + n * (size_t)C;
            float m = mean[n], r = rstd[n];
            if (dweight)
                for (int c = c0; c < c1; c++) dweight[c] += dy[c] * ((x[c] - m) * r);
            if (dbias)
                for (int c = c0; c < c1; c++) dbias[c] += dy[c];
        }
    }
}

void rt_cpu_rmsnorm_fwd(void *ctx, float *out, float *rstd, const float *inp, const float *weight,
                        size_t N, int C, float eps) {
    RT_CHECK(C > 0, "C=%d", C);
#pragma omp parallel for schedule(static) if (N * (size_t)C >= RT_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * (size_t)C;
        float *y = out + n * (size_t)C;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += (double)x[c] * x[c];
        float r = (float)(1.0 / sqrt(s / C + (double)eps));
        /* T5LayerNorm: hidden * rsqrt(var + eps), then weight * hidden */
        for (int c = 0; c < C; c++) y[c] = weight[c] * (x[c] * r);
        if (rstd) rstd[n] = r;
    }
}

void rt_cpu_rmsnorm_bwd(void *ctx, float *dinp, float *dweight, const float *dout,
                        const float *inp, const float *weight, const float *rstd, size_t N, int C) {
    RT_CHECK(C > 0, "C=%d", C);
    /* y = w x r with r = (mean(x^2) + eps)^-1/2, dr/dx_i = -r^3 x_i / C, so
     * dx_i = r (dy_i w_i - x_i r^2 mean(dy w x)) */
#pragma omp parallel for schedule(static) if (N * (size_t)C >= RT_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * (size_t)C;
        const float *dy = dout + n * (size_t)C;
        float *dx = dinp + n * (size_t)C;
        float r = rstd[n];
        double a = 0.0;
#pragma omp simd reduction(+ : a)
        for (int c = 0; c < C; c++) a += (double)(dy[c] * weight[c]) * x[c];
        float k = (float)(a / C) * r * r;
        for (int c = 0; c < C; c++) dx[c] += r * (dy[c] * weight[c] - x[c] * k);
    }
    if (!dweight) return;
    int nblk = (C + RT_CPU_COL_BLOCK - 1) / RT_CPU_COL_BLOCK;
#pragma omp parallel for schedule(static) if (N * (size_t)C >= RT_CPU_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * RT_CPU_COL_BLOCK;
        int c1 = c0 + RT_CPU_COL_BLOCK < C ? c0 + RT_CPU_COL_BLOCK : C;
        for (size_t n = 0; n < N; n++) {
            const float *x = inp + n * (size_t)C;
            const float *dy = dout + n * (size_t)C;
            float r = rstd[n];
            for (int c = c0; c < c1; c++) dweight[c] += dy[c] * (x[c] * r);
        }
    }
}
