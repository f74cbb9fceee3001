/* The fused attention's kernels and launches: each block is one warp running a block function of
 * cuda_flash_tiles.h (where the algorithm and its rounding points are described) with its tiles in
 * shared memory. The materialized path (cuda_attention.cu) stays the reference and the fallback:
 * for fp32, and for head sizes past 64 (fl_unsupported). */
#include "runtime/backend/cuda/cuda_sdpa_plan.h"
#include "runtime/backend/cuda/rt_cuda.h"

#include "runtime/backend/cuda/cuda_flash_tiles.h"

__global__ void __launch_bounds__(32)
    rt_cuda_flash_fwd_kernel(fl_args a, rt_x out, float *stats, rt_x q, rt_x k, rt_x v) {
    __shared__ fl_smem sm;
    fl_fwd_block(&a, &sm, (long long)blockIdx.x, out, stats, q, k, v);
}

__global__ void __launch_bounds__(32) rt_cuda_flash_bwd_query_kernel(fl_args a, rt_x dq, float *dsum, rt_x dout,
                                                                     const float *stats, rt_x q, rt_x k, rt_x v) {
    __shared__ fl_smem sm;
    fl_bwd_query_block(&a, &sm, (long long)blockIdx.x, dq, dsum, dout, stats, q, k, v);
}

__global__ void __launch_bounds__(32)
    rt_cuda_flash_bwd_key_kernel(fl_args a, rt_x dk, rt_x dv, rt_x dout, const float *stats, const float *dsum, rt_x q,
                                 rt_x k, rt_x v) {
    __shared__ fl_smem sm;
    fl_bwd_key_block(&a, &sm, (long long)blockIdx.x, dk, dv, dout, stats, dsum, q, k, v);
}

__global__ void __launch_bounds__(32)
    rt_cuda_flash_bwd_bias_kernel(fl_args a, float *dbias, rt_x dout, const float *stats, const float *dsum, rt_x q,
                                  rt_x k, rt_x v) {
    __shared__ fl_smem sm;
    fl_bwd_bias_block(&a, &sm, (long long)blockIdx.x, dbias, dout, stats, dsum, q, k, v);
}

bool rt_cuda_attn_fused(const rt_cuda_ctx *c, const rt_attn_desc *d) {
    return c->attn_fused && c->sm_major >= 8 && fl_unsupported(d, c->matmul) == NULL;
}

size_t rt_cuda_attention_kept_row(void *ctx, const rt_attn_desc *d) {
    const rt_cuda_ctx *c = (const rt_cuda_ctx *)ctx;
    if (rt_cuda_attn_fused(c, d)) return 2 * sizeof(float); /* (m, 1/l) */
    /* cuDNN's output and statistics where it takes the shape, else the probabilities */
    return rt_cuda_sdpa_kept_row(c, d);
}

/* The handles' types: fp32, or the compute type the tiles convert at (fl_load copies 16-bit bits). */
static void rt_cuda_flash_types(const rt_cuda_ctx *c, const rt_x *x, int n) {
    for (int i = 0; i < n; i++)
        RT_CHECK(x[i].t == RT_F32 || x[i].t == c->matmul, "fused attention: a %s activation under %s compute",
                 rt_dtype_name(x[i].t), rt_dtype_name(c->matmul));
}

/* Blocks of 16 rows over every (batch row, head). */
static unsigned rt_cuda_flash_blocks(const rt_attn_desc *d, int T) {
    const size_t n = (size_t)d->B * d->NH * (size_t)((T + FL_BQ - 1) / FL_BQ);
    RT_CHECK(n <= 0x7fffffffu, "%zu attention blocks is too many for one launch", n);
    return (unsigned)n;
}

void rt_cuda_flash_fwd(rt_cuda_ctx *c, const rt_attn_desc *d, rt_x out, void *probs, rt_x q, rt_x k, rt_x v) {
    const rt_x handles[4] = {out, q, k, v};
    rt_cuda_flash_types(c, handles, 4);
    const fl_args a = fl_args_of(d, c->matmul);
    rt_cuda_flash_fwd_kernel<<<rt_cuda_flash_blocks(d, d->Tq), 32, 0, c->stream>>>(a, out, (float *)probs, q, k, v);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_flash_bwd(rt_cuda_ctx *c, const rt_attn_desc *d, rt_x dq, rt_x dk, rt_x dv, float *dbias, rt_x dout,
                       const void *probs, rt_x q, rt_x k, rt_x v) {
    const rt_x handles[7] = {dq, dk, dv, dout, q, k, v};
    rt_cuda_flash_types(c, handles, 7);
    const fl_args a = fl_args_of(d, c->matmul);
    const float *stats = (const float *)probs;
    float *dsum = (float *)rt_cuda_scratch(c, RT_CUDA_SCRATCH_ATTN_D, (size_t)d->B * d->NH * d->Tq * sizeof(float));
    rt_cuda_flash_bwd_query_kernel<<<rt_cuda_flash_blocks(d, d->Tq), 32, 0, c->stream>>>(a, dq, dsum, dout, stats, q, k,
                                                                                         v);
    CUDA_LAUNCH_CHECK();
    rt_cuda_flash_bwd_key_kernel<<<rt_cuda_flash_blocks(d, d->Tk), 32, 0, c->stream>>>(a, dk, dv, dout, stats, dsum, q,
                                                                                       k, v);
    CUDA_LAUNCH_CHECK();
    if (dbias) { /* a block per 16 query rows of a head: the batch rows go in order inside it */
        const unsigned blocks = rt_cuda_flash_blocks(d, d->Tq) / (unsigned)d->B;
        rt_cuda_flash_bwd_bias_kernel<<<blocks, 32, 0, c->stream>>>(a, dbias, dout, stats, dsum, q, k, v);
        CUDA_LAUNCH_CHECK();
    }
}
