/* LayerNorm (GPT-2, BERT) and RMSNorm (T5) on CUDA, with the same formulas as the CPU
 * backend (runtime/cpu/cpu_norm.c): biased variance from two passes over the row, row sums
 * in double so mean/rstd stay within an ulp of the CPU's, and
 *   LayerNorm: dinp += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout*w
 *   RMSNorm:   dinp += rstd * (dout*w - x * rstd^2 * mean(dout*w*x))
 * One warp per row: C is at most a few thousand, so 32 lanes striding the row are enough and
 * the reductions are shuffles only.
 *
 * dweight and dbias sum over rows. Float atomics would make them depend on scheduling, so
 * they go in two passes instead: each thread sums one column over a fixed chunk of rows
 * into a partial buffer, then one thread per column adds the partials in chunk order. The
 * result depends only on N and C, never on timing. bias_bwd uses the same two passes. */
#include "runtime/cuda/rt_cuda.h"

#define RT_CUDA_ROWS_PER_BLOCK 8 /* warps per block in the row kernels */

static unsigned rt_cuda_row_grid(size_t N) {
    size_t blocks = (N + RT_CUDA_ROWS_PER_BLOCK - 1) / RT_CUDA_ROWS_PER_BLOCK;
    RT_CHECK(blocks <= 0x7fffffffu, "N=%zu rows is too many for one launch", N);
    return (unsigned)blocks;
}

__global__ void rt_cuda_layernorm_fwd_kernel(float *out, float *mean, float *rstd,
                                             const float *inp, const float *weight,
                                             const float *bias, size_t N, int C, float eps) {
    size_t row = (size_t)blockIdx.x * RT_CUDA_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return; /* the whole warp leaves together, so the shuffles stay full */
    const float *x = inp + row * (size_t)C;
    float *y = out + row * (size_t)C;
    double s = 0.0;
    for (int c = lane; c < C; c += 32) s += x[c];
    double mu = rt_cuda_warp_sum_d(s) / C;
    double v = 0.0;
    for (int c = lane; c < C; c += 32) {
        double d = x[c] - mu;
        v += d * d;
    }
    v = rt_cuda_warp_sum_d(v);
    float m = (float)mu;
    float r = (float)(1.0 / sqrt(v / C + (double)eps));
    /* each lane reads x[c] before writing y[c], so out may alias inp */
    for (int c = lane; c < C; c += 32) {
        float o = (x[c] - m) * r * weight[c];
        y[c] = bias ? o + bias[c] : o;
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = r;
    }
}

__global__ void rt_cuda_layernorm_bwd_kernel(float *dinp, const float *dout, const float *inp,
                                             const float *weight, const float *mean,
                                             const float *rstd, size_t N, int C) {
    size_t row = (size_t)blockIdx.x * RT_CUDA_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + row * (size_t)C;
    const float *dy = dout + row * (size_t)C;
    float *dx = dinp + row * (size_t)C;
    float m = mean[row], r = rstd[row];
    double a = 0.0, b = 0.0;
    for (int c = lane; c < C; c += 32) {
        float xhat = (x[c] - m) * r;
        float dn = dy[c] * weight[c];
        a += dn;
        b += (double)dn * xhat;
    }
    a = rt_cuda_warp_sum_d(a);
    b = rt_cuda_warp_sum_d(b);
    float ma = (float)(a / C), mb = (float)(b / C);
    for (int c = lane; c < C; c += 32) {
        float xhat = (x[c] - m) * r;
        dx[c] += r * (dy[c] * weight[c] - ma - xhat * mb);
    }
}

__global__ void rt_cuda_rmsnorm_fwd_kernel(float *out, float *rstd, const float *inp,
                                           const float *weight, size_t N, int C, float eps) {
    size_t row = (size_t)blockIdx.x * RT_CUDA_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + row * (size_t)C;
    float *y = out + row * (size_t)C;
    double s = 0.0;
    for (int c = lane; c < C; c += 32) s += (double)x[c] * x[c];
    s = rt_cuda_warp_sum_d(s);
    float r = (float)(1.0 / sqrt(s / C + (double)eps));
    for (int c = lane; c < C; c += 32) y[c] = weight[c] * (x[c] * r);
    if (lane == 0 && rstd) rstd[row] = r;
}

__global__ void rt_cuda_rmsnorm_bwd_kernel(float *dinp, const float *dout, const float *inp,
                                           const float *weight, const float *rstd, size_t N,
                                           int C) {
    size_t row = (size_t)blockIdx.x * RT_CUDA_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + row * (size_t)C;
    const float *dy = dout + row * (size_t)C;
    float *dx = dinp + row * (size_t)C;
    float r = rstd[row];
    double a = 0.0;
    for (int c = lane; c < C; c += 32) a += (double)(dy[c] * weight[c]) * x[c];
    a = rt_cuda_warp_sum_d(a);
    float k = (float)(a / C) * r * r;
    for (int c = lane; c < C; c += 32) dx[c] += r * (dy[c] * weight[c] - x[c] * k);
}

/* What a column sum adds up, per row n and column c (g = dout[n, c]). */
enum {
    RT_COLSUM_DOUT = 0,   /* g: bias gradients */
    RT_COLSUM_LN = 1,     /* a: g * (x - mean) * rstd (LayerNorm dweight); b: g (dbias) */
    RT_COLSUM_RMS = 2     /* a: g * x * rstd (RMSNorm dweight) */
};

/* Pass 1: grid (column blocks, row chunks); partial sums of chunk y land in row y of pa/pb. */
__global__ void rt_cuda_colsum_partial_kernel(float *pa, float *pb, int mode, const float *dout,
                                              const float *inp, const float *mean,
                                              const float *rstd, size_t N, int C,
                                              size_t rows_per_chunk) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    size_t r0 = (size_t)blockIdx.y * rows_per_chunk;
    size_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
    float sa = 0.0f, sb = 0.0f;
    for (size_t n = r0; n < r1; n++) {
        size_t i = n * (size_t)C + c;
        float g = dout[i];
        if (mode == RT_COLSUM_DOUT) {
            sa += g;
        } else if (mode == RT_COLSUM_LN) {
            sa += g * ((inp[i] - mean[n]) * rstd[n]);
            sb += g;
        } else {
            sa += g * (inp[i] * rstd[n]);
        }
    }
    pa[(size_t)blockIdx.y * C + c] = sa;
    if (pb) pb[(size_t)blockIdx.y * C + c] = sb;
}

/* Pass 2: one thread per column adds the chunks in order into the accumulated outputs. */
__global__ void rt_cuda_colsum_final_kernel(float *out_a, float *out_b, const float *pa,
                                            const float *pb, int chunks, int C) {
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

/* out_a[c] += sum over rows of the mode's term a, out_b[c] (LN only, may be NULL) of b. */
static void rt_cuda_colsum(rt_cuda_ctx *ctx, int mode, float *out_a, float *out_b,
                           const float *dout, const float *inp, const float *mean,
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
    rt_cuda_colsum_partial_kernel<<<grid, RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(pa, pb, mode, dout, inp, mean, rstd,
                                                             N, C, rows_per_chunk);
    CUDA_LAUNCH_CHECK();
    rt_cuda_colsum_final_kernel<<<(C + RT_CUDA_THREADS - 1) / RT_CUDA_THREADS, RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(
        out_a, out_b, pa, pb, chunks, C);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_layernorm_fwd(void *ctx, float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, size_t N, int C, float eps) {
    RT_CHECK(C > 0, "C=%d", C);
    if (N == 0) return;
    rt_cuda_layernorm_fwd_kernel<<<rt_cuda_row_grid(N), 32 * RT_CUDA_ROWS_PER_BLOCK, 0, rt_cuda_stream(ctx)>>>(
        out, mean, rstd, inp, weight, bias, N, C, eps);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_layernorm_bwd(void *ctx, float *dinp, float *dweight, float *dbias,
                           const float *dout, const float *inp, const float *weight,
                           const float *mean, const float *rstd, size_t N, int C) {
    RT_CHECK(C > 0, "C=%d", C);
    if (N == 0) return;
    rt_cuda_layernorm_bwd_kernel<<<rt_cuda_row_grid(N), 32 * RT_CUDA_ROWS_PER_BLOCK, 0, rt_cuda_stream(ctx)>>>(
        dinp, dout, inp, weight, mean, rstd, N, C);
    CUDA_LAUNCH_CHECK();
    rt_cuda_colsum((rt_cuda_ctx *)ctx, RT_COLSUM_LN, dweight, dbias, dout, inp, mean, rstd, N, C);
}

void rt_cuda_rmsnorm_fwd(void *ctx, float *out, float *rstd, const float *inp, const float *weight,
                         size_t N, int C, float eps) {
    RT_CHECK(C > 0, "C=%d", C);
    if (N == 0) return;
    rt_cuda_rmsnorm_fwd_kernel<<<rt_cuda_row_grid(N), 32 * RT_CUDA_ROWS_PER_BLOCK, 0, rt_cuda_stream(ctx)>>>(
        out, rstd, inp, weight, N, C, eps);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_rmsnorm_bwd(void *ctx, float *dinp, float *dweight, const float *dout,
                         const float *inp, const float *weight, const float *rstd, size_t N, int C) {
    RT_CHECK(C > 0, "C=%d", C);
    if (N == 0) return;
    rt_cuda_rmsnorm_bwd_kernel<<<rt_cuda_row_grid(N), 32 * RT_CUDA_ROWS_PER_BLOCK, 0, rt_cuda_stream(ctx)>>>(
        dinp, dout, inp, weight, rstd, N, C);
    CUDA_LAUNCH_CHECK();
    rt_cuda_colsum((rt_cuda_ctx *)ctx, RT_COLSUM_RMS, dweight, NULL, dout, inp, NULL, rstd, N, C);
}

void rt_cuda_bias_bwd(void *ctx, float *dbias, const float *dout, size_t N, int C) {
    rt_cuda_colsum((rt_cuda_ctx *)ctx, RT_COLSUM_DOUT, dbias, NULL, dout, NULL, NULL, NULL, N, C);
}
