/* LayerNorm (GPT-2, BERT) and RMSNorm (T5) on CUDA, a warp per row with the row formulas of
 * cuda_norm_rows.h (the CPU backend's), each output (out, dinp) stored at the compute precision
 * by the kernel that makes it.
 *
 * dweight and dbias sum over rows. Float atomics would make them depend on scheduling, so
 * they go in two passes instead: each thread sums one column over a fixed chunk of rows
 * into a partial buffer, then one thread per column adds the partials in chunk order. The
 * result depends only on N and C, never on timing. bias_bwd and the fused residual step's
 * backward (cuda_residual.cu) use the same two passes. */
#include "runtime/backend/cuda/cuda_norm_rows.h"
#include "runtime/backend/cuda/rt_cuda.h"

__global__ void rt_cuda_layernorm_fwd_kernel(rt_x out, float *mean, float *rstd, rt_x inp, const float *weight,
                                             const float *bias, size_t N, int C, float eps, int kind) {
    size_t row = (size_t)blockIdx.x * RT_CUDA_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return; /* the whole warp leaves together, so the shuffles stay full */
    rt_cuda_layernorm_row(rt_cuda_x_at(out, row * (size_t)C), mean ? mean + row : NULL, rstd ? rstd + row : NULL,
                          rt_cuda_x_at(inp, row * (size_t)C), weight, bias, C, eps, lane, kind);
}

__global__ void rt_cuda_layernorm_bwd_kernel(float *dinp, rt_x dout, rt_x inp, const float *weight, const float *mean,
                                             const float *rstd, size_t N, int C, int kind) {
    size_t row = (size_t)blockIdx.x * RT_CUDA_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    rt_cuda_layernorm_bwd_row(dinp + row * (size_t)C, rt_cuda_x_at(dout, row * (size_t)C),
                              rt_cuda_x_at(inp, row * (size_t)C), weight, mean[row], rstd[row], C, lane, kind);
}

__global__ void rt_cuda_rmsnorm_fwd_kernel(rt_x out, float *rstd, rt_x inp, const float *weight, size_t N, int C,
                                           float eps, int kind) {
    size_t row = (size_t)blockIdx.x * RT_CUDA_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    rt_cuda_rmsnorm_row(rt_cuda_x_at(out, row * (size_t)C), rstd ? rstd + row : NULL,
                        rt_cuda_x_at(inp, row * (size_t)C), weight, C, eps, lane, kind);
}

__global__ void rt_cuda_rmsnorm_bwd_kernel(float *dinp, rt_x dout, rt_x inp, const float *weight, const float *rstd,
                                           size_t N, int C, int kind) {
    size_t row = (size_t)blockIdx.x * RT_CUDA_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    rt_cuda_rmsnorm_bwd_row(dinp + row * (size_t)C, rt_cuda_x_at(dout, row * (size_t)C),
                            rt_cuda_x_at(inp, row * (size_t)C), weight, rstd[row], C, lane, kind);
}

/* Pass 1: grid (column blocks, row chunks); partial sums of chunk y land in row y of pa/pb. */
__global__ void rt_cuda_colsum_partial_kernel(float *pa, float *pb, int mode, rt_x dout, rt_x inp, const float *mean,
                                              const float *rstd, size_t N, int C, size_t rows_per_chunk) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    size_t r0 = (size_t)blockIdx.y * rows_per_chunk;
    size_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
    float sa = 0.0f, sb = 0.0f;
    for (size_t n = r0; n < r1; n++) {
        size_t i = n * (size_t)C + c;
        float g = rt_cuda_xload(dout, i);
        if (mode == RT_COLSUM_DOUT) {
            sa += g;
        } else if (mode == RT_COLSUM_LN) {
            sa += g * ((rt_cuda_xload(inp, i) - mean[n]) * rstd[n]);
            sb += g;
        } else {
            sa += g * (rt_cuda_xload(inp, i) * rstd[n]);
        }
    }
    pa[(size_t)blockIdx.y * C + c] = sa;
    if (pb) pb[(size_t)blockIdx.y * C + c] = sb;
}

/* Pass 2: one thread per column adds the chunks in order into the accumulated outputs. */
__global__ void rt_cuda_colsum_final_kernel(float *out_a, float *out_b, const float *pa, const float *pb, int chunks,
                                            int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    if (out_a) {
        float s = 0.0f;
        for (int r = 0; r < chunks; r++) s += pa[(size_t)r * C + c];
        out_a[c] += s;
    }
    if (out_b) {
        float s = 0.0f;
        for (int r = 0; r < chunks; r++) s += pb[(size_t)r * C + c];
        out_b[c] += s;
    }
}

void rt_cuda_colsum(rt_cuda_ctx *ctx, int mode, float *out_a, float *out_b, rt_x dout, rt_x inp, const float *mean,
                    const float *rstd, size_t N, int C) {
    if (N == 0 || C <= 0 || (!out_a && !out_b)) return;
    /* 64 rows per chunk gives thousands of threads for typical N = B*T; wider chunks only
     * when N would need more than 65535 chunks (the grid's y limit) */
    size_t rows_per_chunk = 64;
    if ((N + rows_per_chunk - 1) / rows_per_chunk > 65535) rows_per_chunk = (N + 65534) / 65535;
    int chunks = (int)((N + rows_per_chunk - 1) / rows_per_chunk);
    size_t part = (size_t)chunks * C;
    float *pa = (float *)rt_cuda_scratch(ctx, RT_CUDA_SCRATCH_COLSUM, 2 * part * sizeof(float));
    float *pb = mode == RT_COLSUM_LN ? pa + part : NULL;
    dim3 grid((unsigned)((C + RT_CUDA_THREADS - 1) / RT_CUDA_THREADS), (unsigned)chunks);
    rt_cuda_colsum_partial_kernel<<<grid, RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(pa, pb, mode, dout, inp, mean,
                                                                                     rstd, N, C, rows_per_chunk);
    CUDA_LAUNCH_CHECK();
    rt_cuda_colsum_final_kernel<<<(C + RT_CUDA_THREADS - 1) / RT_CUDA_THREADS, RT_CUDA_THREADS, 0,
                                  rt_cuda_stream(ctx)>>>(out_a, out_b, pa, pb, chunks, C);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_layernorm_fwd(void *ctx, rt_x out, float *mean, float *rstd, rt_x inp, const float *weight,
                           const float *bias, size_t N, int C, float eps) {
    RT_CHECK(C > 0, "C=%d", C);
    if (N == 0) return;
    rt_cuda_layernorm_fwd_kernel<<<rt_cuda_row_grid(N), 32 * RT_CUDA_ROWS_PER_BLOCK, 0, rt_cuda_stream(ctx)>>>(
        out, mean, rstd, inp, weight, bias, N, C, eps, rt_cuda_store_kind(ctx));
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_layernorm_bwd(void *ctx, float *dinp, float *dweight, float *dbias, rt_x dout, rt_x inp,
                           const float *weight, const float *mean, const float *rstd, size_t N, int C) {
    RT_CHECK(C > 0, "C=%d", C);
    if (N == 0) return;
    rt_cuda_layernorm_bwd_kernel<<<rt_cuda_row_grid(N), 32 * RT_CUDA_ROWS_PER_BLOCK, 0, rt_cuda_stream(ctx)>>>(
        dinp, dout, inp, weight, mean, rstd, N, C, rt_cuda_store_kind(ctx));
    CUDA_LAUNCH_CHECK();
    rt_cuda_colsum((rt_cuda_ctx *)ctx, RT_COLSUM_LN, dweight, dbias, dout, inp, mean, rstd, N, C);
}

void rt_cuda_rmsnorm_fwd(void *ctx, rt_x out, float *rstd, rt_x inp, const float *weight, size_t N, int C, float eps) {
    RT_CHECK(C > 0, "C=%d", C);
    if (N == 0) return;
    rt_cuda_rmsnorm_fwd_kernel<<<rt_cuda_row_grid(N), 32 * RT_CUDA_ROWS_PER_BLOCK, 0, rt_cuda_stream(ctx)>>>(
        out, rstd, inp, weight, N, C, eps, rt_cuda_store_kind(ctx));
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_rmsnorm_bwd(void *ctx, float *dinp, float *dweight, rt_x dout, rt_x inp, const float *weight,
                         const float *rstd, size_t N, int C) {
    RT_CHECK(C > 0, "C=%d", C);
    if (N == 0) return;
    rt_cuda_rmsnorm_bwd_kernel<<<rt_cuda_row_grid(N), 32 * RT_CUDA_ROWS_PER_BLOCK, 0, rt_cuda_stream(ctx)>>>(
        dinp, dout, inp, weight, rstd, N, C, rt_cuda_store_kind(ctx));
    CUDA_LAUNCH_CHECK();
    rt_cuda_colsum((rt_cuda_ctx *)ctx, RT_COLSUM_RMS, dweight, NULL, dout, inp, NULL, rstd, N, C);
}

void rt_cuda_bias_bwd(void *ctx, float *dbias, rt_x dout, size_t N, int C) {
    rt_cuda_colsum((rt_cuda_ctx *)ctx, RT_COLSUM_DOUT, dbias, NULL, dout, rt_xf(NULL), NULL, NULL, N, C);
}
