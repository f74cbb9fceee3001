/* LayerNorm (GPT-2, BERT) and RMSNorm (T5) on the CPU, one row per OpenMP iteration, with the
 * row formulas of cpu_norm_rows.h. Each output row (out, dinp) is stored at the compute precision
 * as it is made, while it is in cache, instead of in a rounding pass after the op. The weight and
 * bias gradients are sums over rows; they are split by column blocks so no two threads write the
 * same element and the sum order never depends on the thread count. */
#include <stdlib.h>

#include "runtime/backend/cpu/cpu_internal.h"
#include "runtime/backend/cpu/cpu_norm_rows.h"

/* A thread's row of C floats: where a 16-bit out is computed before rt_cpu_x_commit stores it,
 * or a 16-bit input is widened (fp32: none, rows are read and computed in place). */
static float *norm_row_buf(rt_x x, int C) { return x.t == RT_F32 ? NULL : rt_xmalloc(sizeof(float) * (size_t)C); }

/* A norm's output rows, out = norm(inp) (LayerNorm with mean, weight and bias; RMSNorm: rms set,
 * mean and bias unused), each stored at the compute precision as it is made. */
static void norm_fwd_rows(void *ctx, bool rms, rt_x out, float *mean, float *rstd, rt_x inp, const float *weight,
                          const float *bias, size_t N, int C, float eps) {
    RT_CHECK(C > 0, "C=%d", C);
    const rt_dtype dtype = rt_cpu_matmul_dtype(ctx);
#pragma omp parallel if (N * (size_t)C >= RT_CPU_PAR_MIN)
    {
        float *buf = norm_row_buf(out, C), *xbuf = norm_row_buf(inp, C);
#pragma omp for schedule(static)
        for (size_t n = 0; n < N; n++) {
            const size_t at = n * (size_t)C;
            const float *x = rt_cpu_x_read(inp, at, (size_t)C, xbuf);
            float *y = rt_cpu_x_dst(out, at, buf);
            if (rms)
                rt_cpu_rmsnorm_row(y, rstd ? rstd + n : NULL, x, weight, C, eps);
            else
                rt_cpu_layernorm_row(y, mean ? mean + n : NULL, rstd ? rstd + n : NULL, x, weight, bias, C, eps);
            rt_cpu_x_store_row(dtype, out, at, (size_t)C, y);
        }
        free(buf);
        free(xbuf);
    }
}

/* Its input gradient rows, dinp += the norm's backward of dout, each stored at the compute
 * precision as it is made. */
static void norm_bwd_rows(void *ctx, bool rms, float *dinp, rt_x dout, rt_x inp, const float *weight, const float *mean,
                          const float *rstd, size_t N, int C) {
    RT_CHECK(C > 0, "C=%d", C);
    const rt_dtype dtype = rt_cpu_matmul_dtype(ctx);
#pragma omp parallel if (N * (size_t)C >= RT_CPU_PAR_MIN)
    {
        float *xbuf = norm_row_buf(inp, C), *gbuf = norm_row_buf(dout, C);
#pragma omp for schedule(static)
        for (size_t n = 0; n < N; n++) {
            const size_t at = n * (size_t)C;
            const float *x = rt_cpu_x_read(inp, at, (size_t)C, xbuf), *dy = rt_cpu_x_read(dout, at, (size_t)C, gbuf);
            if (rms)
                rt_cpu_rmsnorm_bwd_row(dinp + at, dy, x, weight, rstd[n], C);
            else
                rt_cpu_layernorm_bwd_row(dinp + at, dy, x, weight, mean[n], rstd[n], C);
            rt_cpu_store_run(dtype, dinp + at, (size_t)C);
        }
        free(xbuf);
        free(gbuf);
    }
}

void rt_cpu_layernorm_fwd(void *ctx, rt_x out, float *mean, float *rstd, rt_x inp, const float *weight,
                          const float *bias, size_t N, int C, float eps) {
    norm_fwd_rows(ctx, false, out, mean, rstd, inp, weight, bias, N, C, eps);
}

/* Columns [c0, c1) of row n of x as floats, from column c0: its own, or widened into buf. */
static const float *norm_cols(rt_x x, size_t n, int C, int c0, int c1, float *buf) {
    return rt_cpu_x_read(x, n * (size_t)C + (size_t)c0, (size_t)(c1 - c0), buf);
}

void rt_cpu_layernorm_param_bwd(float *dweight, float *dbias, rt_x dout, rt_x inp, const float *mean, const float *rstd,
                                size_t N, int C) {
    if (!dweight && !dbias) return;
    int nblk = (C + RT_CPU_COL_BLOCK - 1) / RT_CPU_COL_BLOCK;
#pragma omp parallel for schedule(static) if (N * (size_t)C >= RT_CPU_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * RT_CPU_COL_BLOCK;
        int c1 = c0 + RT_CPU_COL_BLOCK < C ? c0 + RT_CPU_COL_BLOCK : C;
        float buf[RT_CPU_COL_BLOCK], gbuf[RT_CPU_COL_BLOCK];
        for (size_t n = 0; n < N; n++) {
            const float *x = norm_cols(inp, n, C, c0, c1, buf), *dy = norm_cols(dout, n, C, c0, c1, gbuf);
            float m = mean[n], r = rstd[n];
            if (dweight)
                for (int c = c0; c < c1; c++) dweight[c] += dy[c - c0] * ((x[c - c0] - m) * r);
            if (dbias)
                for (int c = c0; c < c1; c++) dbias[c] += dy[c - c0];
        }
    }
}

void rt_cpu_layernorm_bwd(void *ctx, float *dinp, float *dweight, float *dbias, rt_x dout, rt_x inp,
                          const float *weight, const float *mean, const float *rstd, size_t N, int C) {
    norm_bwd_rows(ctx, false, dinp, dout, inp, weight, mean, rstd, N, C);
    rt_cpu_layernorm_param_bwd(dweight, dbias, dout, inp, mean, rstd, N, C);
}

void rt_cpu_rmsnorm_fwd(void *ctx, rt_x out, float *rstd, rt_x inp, const float *weight, size_t N, int C, float eps) {
    norm_fwd_rows(ctx, true, out, NULL, rstd, inp, weight, NULL, N, C, eps);
}

void rt_cpu_rmsnorm_param_bwd(float *dweight, rt_x dout, rt_x inp, const float *rstd, size_t N, int C) {
    if (!dweight) return;
    int nblk = (C + RT_CPU_COL_BLOCK - 1) / RT_CPU_COL_BLOCK;
#pragma omp parallel for schedule(static) if (N * (size_t)C >= RT_CPU_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * RT_CPU_COL_BLOCK;
        int c1 = c0 + RT_CPU_COL_BLOCK < C ? c0 + RT_CPU_COL_BLOCK : C;
        float buf[RT_CPU_COL_BLOCK], gbuf[RT_CPU_COL_BLOCK];
        for (size_t n = 0; n < N; n++) {
            const float *x = norm_cols(inp, n, C, c0, c1, buf), *dy = norm_cols(dout, n, C, c0, c1, gbuf);
            float r = rstd[n];
            for (int c = c0; c < c1; c++) dweight[c] += dy[c - c0] * (x[c - c0] * r);
        }
    }
}

void rt_cpu_rmsnorm_bwd(void *ctx, float *dinp, float *dweight, rt_x dout, rt_x inp, const float *weight,
                        const float *rstd, size_t N, int C) {
    norm_bwd_rows(ctx, true, dinp, dout, inp, weight, NULL, rstd, N, C);
    rt_cpu_rmsnorm_param_bwd(dweight, dout, inp, rstd, N, C);
}
