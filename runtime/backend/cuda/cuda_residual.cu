/* The residual step of a transformer block on CUDA (rt_backend_ops.residual_fwd/bwd): the
 * branch's dropout, the residual add and the norm after it, or the norm's backward and the
 * dropout's, in one kernel, where the composed ops launch three or four kernels over (N, C)
 * buffers plus a rounding pass after each at a 16-bit compute precision.
 *
 * One warp per row, as the norm kernels (cuda_norm_rows.h, whose row formulas it calls). The
 * dropout draws are the dropout kernels' (element (n, c) at index n*C + c, a Philox block of four
 * per draw), so the masks are the same bits as the CPU's and as dropout_fwd's. The lanes move
 * packs of eight values (cuda_pack.h) where a row's handles start aligned. Each stored value is
 * rounded to the compute precision (the context's matmul dtype) where the composed ops' wrappers
 * round it: the dropped branch, the sum, the norm's output; the residual gradient, the branch's
 * gradient. The lanes that write a row's sum (by Philox blocks or packs) need not be those that
 * read it in the norm: __syncwarp orders the two. The parameter gradients are cuda_norm.cu's
 * column sums, deterministic and in its order. */
#include "runtime/backend/cuda/cuda_norm_rows.h"
#include "runtime/backend/cuda/cuda_pack.h"
#include "runtime/backend/cuda/rt_cuda.h"

/* sum = res + drop(branch), each stored; then with weight, out = norm(sum), stored. s is
 * 1/(1-p), or 0 where p >= 1 (u < 1 <= p: every element dropped). */
__global__ void rt_cuda_residual_fwd_kernel(rt_x sum, rt_x out, float *mean, float *rstd, rt_x res, rt_x branch,
                                            const float *weight, const float *bias, bool rms, size_t N, int C,
                                            float eps, float p, float s, uint64_t seed, uint64_t stream_at0,
                                            const uint64_t *step, int kind) {
    const uint64_t stream = rt_stream_at_step(stream_at0, step);
    const size_t row = (size_t)blockIdx.x * RT_CUDA_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= N) return; /* the whole warp leaves together, so the shuffles stay full */
    const size_t at = row * (size_t)C;
    const rt_x y = rt_cuda_x_at(sum, at), x = rt_cuda_x_at(res, at), b = rt_cuda_x_at(branch, at);
    const bool aligned = rt_pack_aligned(y) && rt_pack_aligned(x) && rt_pack_aligned(b);
    if (p > 0.0f)
        rt_cuda_drop_walk(
            seed, stream, at, (size_t)C, aligned, (size_t)lane, 32, [&](size_t c, int w, const rt_pack u) {
                const rt_pack xv = rt_pack_load_n(x, c, w), bv = rt_pack_load_n(b, c, w);
                rt_pack o = {};
                for (int j = 0; j < w; j++) {
                    /* _rn: no multiply-add contracted across the two, which the composed ops store apart */
                    const float dropped = rt_cuda_round16(u.v[j] >= p ? __fmul_rn(bv.v[j], s) : 0.0f, kind);
                    o.v[j] = rt_cuda_round16(__fadd_rn(xv.v[j], dropped), kind);
                }
                rt_pack_store_n(y, c, w, &o);
            });
    else
        rt_cuda_pack_row_walk(C, aligned, lane, [&](size_t c, int w) {
            const rt_pack xv = rt_pack_load_n(x, c, w), bv = rt_pack_load_n(b, c, w);
            rt_pack o = {};
            for (int j = 0; j < w; j++) o.v[j] = rt_cuda_round16(xv.v[j] + bv.v[j], kind);
            rt_pack_store_n(y, c, w, &o);
        });
    if (!weight) return;
    /* the whole row's sum is written, and the branch read (out may alias it) */
    __syncwarp();
    const rt_x o = rt_cuda_x_at(out, at);
    if (rms)
        rt_cuda_rmsnorm_row(o, rstd ? rstd + row : NULL, y, weight, C, eps, lane, kind);
    else
        rt_cuda_layernorm_row(o, mean ? mean + row : NULL, rstd ? rstd + row : NULL, y, weight, bias, C, eps, lane,
                              kind);
}

/* With weight, dres += the norm's input gradient, stored; then with p > 0, dbranch = dropout's
 * backward of dres, stored. */
__global__ void rt_cuda_residual_bwd_kernel(float *dres, rt_x dbranch, rt_x dout, rt_x sum, const float *weight,
                                            const float *mean, const float *rstd, bool rms, size_t N, int C, float p,
                                            float s, uint64_t seed, uint64_t stream_at0, const uint64_t *step,
                                            int kind) {
    const uint64_t stream = rt_stream_at_step(stream_at0, step);
    const size_t row = (size_t)blockIdx.x * RT_CUDA_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t at = row * (size_t)C;
    float *g = dres + at;
    if (weight && rms)
        rt_cuda_rmsnorm_bwd_row(g, rt_cuda_x_at(dout, at), rt_cuda_x_at(sum, at), weight, rstd[row], C, lane, kind);
    else if (weight)
        rt_cuda_layernorm_bwd_row(g, rt_cuda_x_at(dout, at), rt_cuda_x_at(sum, at), weight, mean[row], rstd[row], C,
                                  lane, kind);
    if (!(p > 0.0f)) return;
    __syncwarp(); /* the row's residual gradient is written */
    const rt_x gx = rt_pack_xf(g), gb = rt_cuda_x_at(dbranch, at);
    rt_cuda_drop_walk(seed, stream, at, (size_t)C, rt_pack_aligned(gx) && rt_pack_aligned(gb), (size_t)lane, 32,
                      [&](size_t c, int w, const rt_pack u) {
                          const rt_pack gv = rt_pack_load_n(gx, c, w);
                          rt_pack o = {};
                          for (int j = 0; j < w; j++) o.v[j] = rt_cuda_round16(u.v[j] >= p ? gv.v[j] * s : 0.0f, kind);
                          rt_pack_store_n(gb, c, w, &o);
                      });
}

static float rt_cuda_residual_scale(const rt_residual_desc *d) {
    RT_CHECK(d->C > 0, "residual: C=%d", d->C);
    RT_CHECK(d->dropout_p >= 0.0f && d->dropout_p <= 1.0f, "residual: dropout p=%g", (double)d->dropout_p);
    return d->dropout_p < 1.0f ? 1.0f / (1.0f - d->dropout_p) : 0.0f;
}

void rt_cuda_residual_fwd(void *ctx, const rt_residual_desc *d, rt_x sum, rt_x out, float *mean, float *rstd, rt_x res,
                          rt_x branch) {
    const float s = rt_cuda_residual_scale(d);
    if (d->N == 0) return;
    const rt_cuda_ctx *c = (const rt_cuda_ctx *)ctx;
    rt_cuda_residual_fwd_kernel<<<rt_cuda_row_grid(d->N), 32 * RT_CUDA_ROWS_PER_BLOCK, 0, rt_cuda_stream(ctx)>>>(
        sum, out, mean, rstd, res, branch, d->weight, d->bias, d->rms, d->N, d->C, d->eps, d->dropout_p, s, d->seed,
        d->stream, d->stream_step, rt_cuda_kind16(c->matmul));
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_residual_bwd(void *ctx, const rt_residual_desc *d, float *dres, rt_x dbranch, float *dweight, float *dbias,
                          rt_x dout, rt_x sum, const float *mean, const float *rstd) {
    const float s = rt_cuda_residual_scale(d);
    if (d->N == 0 || (!d->weight && !(d->dropout_p > 0.0f))) return;
    RT_CHECK(!(d->dropout_p > 0.0f) || dbranch.p, "residual_bwd: dropout p=%g and no dbranch", (double)d->dropout_p);
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    rt_cuda_residual_bwd_kernel<<<rt_cuda_row_grid(d->N), 32 * RT_CUDA_ROWS_PER_BLOCK, 0, rt_cuda_stream(ctx)>>>(
        dres, dbranch, dout, sum, d->weight, mean, rstd, d->rms, d->N, d->C, d->dropout_p, s, d->seed, d->stream,
        d->stream_step, rt_cuda_kind16(c->matmul));
    CUDA_LAUNCH_CHECK();
    if (!d->weight) return;
    if (d->rms)
        rt_cuda_colsum(c, RT_COLSUM_RMS, dweight, NULL, dout, sum, NULL, rstd, d->N, d->C);
    else
        rt_cuda_colsum(c, RT_COLSUM_LN, dweight, dbias, dout, sum, mean, rstd, d->N, d->C);
}
