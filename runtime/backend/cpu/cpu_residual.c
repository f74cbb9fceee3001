/* The residual step of a transformer block on the CPU (rt_backend_ops.residual_fwd/bwd): the
 * branch's dropout, the residual add and the norm after it, or the norm's backward and the
 * dropout's, in one pass over rows, where the composed ops make three or four passes over
 * (N, C) buffers plus a rounding pass after each at a 16-bit compute precision. A row is in
 * cache from its first touch to its last.
 *
 * The numbers are the composed ops' bit for bit (tests/test_cpu_residual.c checks it): the same
 * formulas (the dropout run of cpu_internal.h, the norm rows of cpu_norm_rows.h, cpu_norm.c's
 * column blocks for the parameter gradients), the same draws (element (n, c) at index n*C + c),
 * and every stored value rounded to the compute precision at the points where the composed ops'
 * wrappers round (rt_store): the dropped branch, the sum, the norm's output; the residual
 * gradient, the branch's gradient. */
#include <stdlib.h>

#include "runtime/backend/cpu/cpu_internal.h"
#include "runtime/backend/cpu/cpu_norm_rows.h"

static void cpu_residual_check(const rt_residual_desc *d) {
    RT_CHECK(d->C > 0, "residual: C=%d", d->C);
    RT_CHECK(d->dropout_p >= 0.0f && d->dropout_p <= 1.0f, "residual: dropout p=%g", (double)d->dropout_p);
}

void rt_cpu_residual_fwd(void *ctx, const rt_residual_desc *d, rt_x sum, rt_x out, float *mean, float *rstd, rt_x res,
                         rt_x branch) {
    cpu_residual_check(d);
    const size_t N = d->N;
    const int C = d->C;
    const float p = d->dropout_p;
    const uint64_t stream = rt_stream_at_step(d->stream, d->stream_step);
    const rt_dtype dtype = rt_cpu_matmul_dtype(ctx);
#pragma omp parallel if (N * (size_t)C >= RT_CPU_PAR_MIN)
    {
        /* rows of 16-bit handles: the residual and the branch widened, the sum and the normalized
         * row computed in floats before they are stored */
        const size_t row = sizeof(float) * (size_t)C;
        float *xbuf = res.t != RT_F32 ? rt_xmalloc(row) : NULL, *sbuf = sum.t != RT_F32 ? rt_xmalloc(row) : NULL;
        float *bbuf = branch.t != RT_F32 ? rt_xmalloc(row) : NULL;
        float *buf = d->weight && out.t != RT_F32 ? rt_xmalloc(row) : NULL;
#pragma omp for schedule(static)
        for (size_t n = 0; n < N; n++) {
            const size_t at = n * (size_t)C;
            float *s = rt_cpu_x_dst(sum, at, sbuf);
            const float *x = rt_cpu_x_read(res, at, (size_t)C, xbuf), *b = rt_cpu_x_read(branch, at, (size_t)C, bbuf);
            if (p > 0) { /* the dropped branch, stored as dropout_fwd's output is */
                rt_cpu_dropout_run(s, b, (size_t)C, p, d->seed, stream, at);
                rt_cpu_store_run(dtype, s, (size_t)C);
                b = s;
            }
            for (int c = 0; c < C; c++) s[c] = x[c] + b[c];
            rt_cpu_store_run(dtype, s, (size_t)C);
            rt_cpu_x_commit(sum, at, (size_t)C, s); /* a 16-bit sum: the rounded values, exactly */
            if (!d->weight) continue;
            /* every read of this row of branch is done: out may alias it */
            float *y = rt_cpu_x_dst(out, at, buf);
            if (d->rms)
                rt_cpu_rmsnorm_row(y, rstd ? rstd + n : NULL, s, d->weight, C, d->eps);
            else
                rt_cpu_layernorm_row(y, mean ? mean + n : NULL, rstd ? rstd + n : NULL, s, d->weight, d->bias, C,
                                     d->eps);
            rt_cpu_x_store_row(dtype, out, at, (size_t)C, y);
        }
        free(xbuf);
        free(sbuf);
        free(bbuf);
        free(buf);
    }
}

void rt_cpu_residual_bwd(void *ctx, const rt_residual_desc *d, float *dres, rt_x dbranch, float *dweight, float *dbias,
                         rt_x dout, rt_x sum, const float *mean, const float *rstd) {
    cpu_residual_check(d);
    const size_t N = d->N;
    const int C = d->C;
    const float p = d->dropout_p;
    const uint64_t stream = rt_stream_at_step(d->stream, d->stream_step);
    const rt_dtype dtype = rt_cpu_matmul_dtype(ctx);
    if (!d->weight && !(p > 0)) return;
    RT_CHECK(!(p > 0) || dbranch.p, "residual_bwd: dropout p=%g and no dbranch", (double)p);
#pragma omp parallel if (N * (size_t)C >= RT_CPU_PAR_MIN)
    {
        /* rows of 16-bit handles: the sum and dout widened, the branch's gradient computed in
         * floats */
        const size_t row = sizeof(float) * (size_t)C;
        float *xbuf = d->weight && sum.t != RT_F32 ? rt_xmalloc(row) : NULL;
        float *dybuf = d->weight && dout.t != RT_F32 ? rt_xmalloc(row) : NULL;
        float *gbuf = p > 0 && dbranch.t != RT_F32 ? rt_xmalloc(row) : NULL;
#pragma omp for schedule(static)
        for (size_t n = 0; n < N; n++) {
            const size_t at = n * (size_t)C;
            float *g = dres + at;
            if (d->weight) {
                const float *x = rt_cpu_x_read(sum, at, (size_t)C, xbuf);
                const float *dy = rt_cpu_x_read(dout, at, (size_t)C, dybuf);
                if (d->rms)
                    rt_cpu_rmsnorm_bwd_row(g, dy, x, d->weight, rstd[n], C);
                else
                    rt_cpu_layernorm_bwd_row(g, dy, x, d->weight, mean[n], rstd[n], C);
                rt_cpu_store_run(dtype, g, (size_t)C);
            }
            if (p > 0) {
                float *gb = rt_cpu_x_dst(dbranch, at, gbuf);
                rt_cpu_dropout_run(gb, g, (size_t)C, p, d->seed, stream, at);
                rt_cpu_x_store_row(dtype, dbranch, at, (size_t)C, gb);
            }
        }
        free(xbuf);
        free(dybuf);
        free(gbuf);
    }
    if (!d->weight) return;
    if (d->rms)
        rt_cpu_rmsnorm_param_bwd(dweight, dout, sum, rstd, N, C);
    else
        rt_cpu_layernorm_param_bwd(dweight, dbias, dout, sum, mean, rstd, N, C);
}
