/* LayerNorm (GPT-2, BERT) and RMSNorm (T5) on the CPU, one row per OpenMP iteration, with the
 * row formulas of cpu_norm_rows.h. The weight and bias gradients are sums over rows; they are
 * split by column blocks so no two threads write the same element and the sum order never
 * depends on the thread count. */
#include <stdlib.h>

#include "runtime/backend/cpu/cpu_internal.h"
#include "runtime/backend/cpu/cpu_norm_rows.h"

/* Where a thread computes a row of a 16-bit out before rt_cpu_x_commit stores it (fp32 out: none,
 * rows are computed in place). */
static float *norm_row_buf(rt_x out, int C) { return out.t == RT_F32 ? NULL : rt_xmalloc(sizeof(float) * (size_t)C); }

void rt_cpu_layernorm_fwd(void *ctx, rt_x out, float *mean, float *rstd, const float *inp, const float *weight,
                          const float *bias, size_t N, int C, float eps) {
    RT_CHECK(C > 0, "C=%d", C);
#pragma omp parallel if (N * (size_t)C >= RT_CPU_PAR_MIN)
    {
        float *buf = norm_row_buf(out, C);
#pragma omp for schedule(static)
        for (size_t n = 0; n < N; n++) {
            float *y = rt_cpu_x_dst(out, n * (size_t)C, buf);
            rt_cpu_layernorm_row(y, mean ? mean + n : NULL, rstd ? rstd + n : NULL, inp + n * (size_t)C, weight, bias,
                                 C, eps);
            rt_cpu_x_commit(out, n * (size_t)C, (size_t)C, y);
        }
        free(buf);
    }
}

void rt_cpu_layernorm_param_bwd(float *dweight, float *dbias, const float *dout, const float *inp, const float *mean,
                                const float *rstd, size_t N, int C) {
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

void rt_cpu_layernorm_bwd(void *ctx, float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                          const float *weight, const float *mean, const float *rstd, size_t N, int C) {
    RT_CHECK(C > 0, "C=%d", C);
#pragma omp parallel for schedule(static) if (N * (size_t)C >= RT_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++)
        rt_cpu_layernorm_bwd_row(dinp + n * (size_t)C, dout + n * (size_t)C, inp + n * (size_t)C, weight, mean[n],
                                 rstd[n], C);
    rt_cpu_layernorm_param_bwd(dweight, dbias, dout, inp, mean, rstd, N, C);
}

void rt_cpu_rmsnorm_fwd(void *ctx, rt_x out, float *rstd, const float *inp, const float *weight, size_t N, int C,
                        float eps) {
    RT_CHECK(C > 0, "C=%d", C);
#pragma omp parallel if (N * (size_t)C >= RT_CPU_PAR_MIN)
    {
        float *buf = norm_row_buf(out, C);
#pragma omp for schedule(static)
        for (size_t n = 0; n < N; n++) {
            float *y = rt_cpu_x_dst(out, n * (size_t)C, buf);
            rt_cpu_rmsnorm_row(y, rstd ? rstd + n : NULL, inp + n * (size_t)C, weight, C, eps);
            rt_cpu_x_commit(out, n * (size_t)C, (size_t)C, y);
        }
        free(buf);
    }
}

void rt_cpu_rmsnorm_param_bwd(float *dweight, const float *dout, const float *inp, const float *rstd, size_t N, int C) {
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

void rt_cpu_rmsnorm_bwd(void *ctx, float *dinp, float *dweight, const float *dout, const float *inp,
                        const float *weight, const float *rstd, size_t N, int C) {
    RT_CHECK(C > 0, "C=%d", C);
#pragma omp parallel for schedule(static) if (N * (size_t)C >= RT_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++)
        rt_cpu_rmsnorm_bwd_row(dinp + n * (size_t)C, dout + n * (size_t)C, inp + n * (size_t)C, weight, rstd[n], C);
    rt_cpu_rmsnorm_param_bwd(dweight, dout, inp, rstd, N, C);
}
