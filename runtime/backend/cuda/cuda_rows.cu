/* Row kernels on CUDA: embedding lookup and its gradient over a vocab shard, the fused
 * softmax cross-entropy, and gather/scatter of rows, with the CPU backend's semantics
 * (runtime/backend/cpu/cpu_rows.c).
 *
 * The scatter-adds (embedding_bwd, scatter_rows_add) are deterministic without atomics:
 * thread (c, y) owns column c of every destination row whose index is y modulo the grid's
 * y size, and walks the ids in order, adding only those it owns. Each output element so has
 * one writer that adds in id order, like the CPU, whatever the scheduling. The y split gives
 * the parallelism that C columns alone would not; each thread reads every id, which is
 * cheap next to the row data (ids are a few KB and stay in cache).
 *
 * Bad indices cannot abort from a kernel: a target outside [0, V) other than -100 gives a
 * NaN loss (the training loop stops on a non-finite loss), and a negative gather/scatter
 * index gives a zero row / is skipped, where the CPU backend would abort. */
#include "runtime/backend/cuda/rt_cuda.h"
#include "runtime/backend/rt_bce.h"

#define RT_CUDA_SCATTER_SPLIT 32 /* grid y of the scatter-adds: owners per column */

__global__ void rt_cuda_embedding_fwd_kernel(float *out, const int32_t *ids, const float *table, size_t N, int C,
                                             int vocab_start, int V, bool accumulate, int kind) {
    size_t n_all = N * (size_t)C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / (size_t)C;
        int c = (int)(i % (size_t)C);
        /* 64-bit so that id - vocab_start cannot overflow for any int32 id */
        int64_t local = (int64_t)ids[n] - vocab_start;
        float x = (local >= 0 && local < V) ? table[(size_t)local * C + c] : 0.0f;
        out[i] = rt_cuda_round16(accumulate ? out[i] + x : x, kind);
    }
}

/* Thread (c, y): column c of the rows local with local % gridDim.y == y. */
__global__ void rt_cuda_embedding_bwd_kernel(float *dtable, const float *dout, const int32_t *ids, size_t N, int C,
                                             int vocab_start, int V) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int64_t owner = blockIdx.y, split = gridDim.y;
    for (size_t n = 0; n < N; n++) {
        int64_t local = (int64_t)ids[n] - vocab_start;
        if (local < 0 || local >= V || local % split != owner) continue;
        dtable[(size_t)local * C + c] += dout[n * (size_t)C + c];
    }
}

__global__ void rt_cuda_gather_rows_kernel(float *out, const float *inp, const int32_t *idx, int B, int C, int kind) {
    size_t n_all = (size_t)B * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += (size_t)gridDim.x * blockDim.x) {
        size_t b = i / (size_t)C;
        int c = (int)(i % (size_t)C);
        int32_t row = idx[b];
        out[i] = rt_cuda_round16(row >= 0 ? inp[(size_t)row * C + c] : 0.0f, kind);
    }
}

__global__ void rt_cuda_scatter_rows_add_kernel(float *dinp, rt_x dout, const int32_t *idx, int B, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int32_t owner = (int32_t)blockIdx.y, split = (int32_t)gridDim.y;
    for (int b = 0; b < B; b++) {
        int32_t row = idx[b];
        if (row < 0 || row % split != owner) continue;
        dinp[(size_t)row * C + c] += rt_cuda_xload(dout, (size_t)b * C + c);
    }
}

/* One block per row: max, then the sum of exps, then the outputs. Every read of the row
 * (including x[t]) happens before the reductions' __syncthreads, and each thread writes
 * element j only after reading it itself, which is what lets dlogits alias logits. */
__global__ void rt_cuda_softmax_xent_kernel(float *losses, float *dlogits, float *probs, const float *logits,
                                            const int32_t *targets, int V, float grad_scale) {
    __shared__ float sh[32];
    size_t n = blockIdx.x;
    const float *x = logits + n * (size_t)V;
    float *dx = dlogits ? dlogits + n * (size_t)V : NULL;
    float *pr = probs ? probs + n * (size_t)V : NULL;
    int32_t t = targets[n];
    bool ignore = t == -100;
    bool bad = !ignore && (t < 0 || t >= V);
    float xt = (!ignore && !bad) ? x[t] : 0.0f; /* every thread reads it: no broadcast needed */

    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, x[j]);
    mx = rt_cuda_block_max(mx, sh);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(x[j] - mx);
    sum = rt_cuda_block_sum(sum, sh);

    if (threadIdx.x == 0 && losses)
        losses[n] = ignore ? 0.0f : bad ? NAN : (float)((double)mx + log((double)sum) - (double)xt);
    float inv = 1.0f / sum;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float pj = expf(x[j] - mx) * inv; /* read x[j] before dx[j] may overwrite it */
        if (pr) pr[j] = pj;
        if (dx) dx[j] = (ignore || bad) ? 0.0f : (pj - (j == t ? 1.0f : 0.0f)) * grad_scale;
    }
}

void rt_cuda_embedding_fwd(void *ctx, float *out, const int32_t *ids, const float *table, size_t N, int C,
                           int vocab_start, int V, bool accumulate) {
    RT_CHECK(C > 0 && V >= 0, "C=%d V=%d", C, V);
    size_t n = N * (size_t)C;
    if (n == 0) return;
    rt_cuda_embedding_fwd_kernel<<<rt_cuda_grid(n, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(
        out, ids, table, N, C, vocab_start, V, accumulate, rt_cuda_store_kind(ctx));
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_embedding_bwd(void *ctx, float *dtable, const float *dout, const int32_t *ids, size_t N, int C,
                           int vocab_start, int V) {
    RT_CHECK(C > 0 && V >= 0, "C=%d V=%d", C, V);
    if (N == 0 || V == 0) return;
    unsigned split = V < RT_CUDA_SCATTER_SPLIT ? (unsigned)V : RT_CUDA_SCATTER_SPLIT;
    dim3 grid((unsigned)((C + RT_CUDA_THREADS - 1) / RT_CUDA_THREADS), split);
    rt_cuda_embedding_bwd_kernel<<<grid, RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(dtable, dout, ids, N, C,
                                                                                    vocab_start, V);
    CUDA_LAUNCH_CHECK();
}

/* rt_backend_ops.mse_loss, an element per thread (the same float operations as the CPU's) */
__global__ void rt_cuda_mse_loss_kernel(float *losses, float *dlogits, const float *z, const float *targets, size_t N,
                                        float grad_scale) {
    RT_CUDA_FOR_EACH(i, N) {
        const float t = targets[i], d = __fsub_rn(z[i], t);
        const bool labelled = !isnan(t);
        losses[i] = labelled ? __fmul_rn(d, d) : 0.0f;
        dlogits[i] = labelled ? __fmul_rn(__fmul_rn(2.0f, d), grad_scale) : 0.0f;
    }
}

void rt_cuda_mse_loss(void *ctx, float *losses, float *dlogits, const float *z, const float *targets, size_t N,
                      float grad_scale) {
    if (N == 0) return;
    rt_cuda_mse_loss_kernel<<<rt_cuda_grid(N, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(
        losses, dlogits, z, targets, N, grad_scale);
    CUDA_LAUNCH_CHECK();
}

/* rt_backend_ops.bce_logits_loss, a row per thread (a multi-label head has tens of classes), with
 * the CPU's code (runtime/backend/rt_bce.h) */
__global__ void rt_cuda_bce_logits_loss_kernel(float *losses, float *dlogits, const float *z, const float *targets,
                                               size_t N, int C, float grad_scale) {
    RT_CUDA_FOR_EACH(i, N) {
        losses[i] = rt_bce_logits_row(dlogits + i * (size_t)C, z + i * (size_t)C, targets + i * (size_t)C, C,
                                      grad_scale / (float)C);
    }
}

void rt_cuda_bce_logits_loss(void *ctx, float *losses, float *dlogits, const float *z, const float *targets, size_t N,
                             int C, float grad_scale) {
    RT_CHECK(C > 0, "C=%d", C); /* as the CPU's */
    if (N == 0) return;
    rt_cuda_bce_logits_loss_kernel<<<rt_cuda_grid(N, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(
        losses, dlogits, z, targets, N, C, grad_scale);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_softmax_xent(void *ctx, float *losses, float *dlogits, float *probs, const float *logits,
                          const int32_t *targets, size_t N, int V, float grad_scale) {
    RT_CHECK(V > 0, "V=%d", V);
    RT_CHECK(N <= 0x7fffffffu, "N=%zu rows is too many for one launch", N);
    if (N == 0) return;
    rt_cuda_softmax_xent_kernel<<<(unsigned)N, RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(
        losses, dlogits, probs, logits, targets, V, grad_scale);
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_gather_rows(void *ctx, float *out, const float *inp, const int32_t *idx, int B, int C) {
    RT_CHECK(B >= 0 && C > 0, "B=%d C=%d", B, C);
    size_t n = (size_t)B * C;
    if (n == 0) return;
    rt_cuda_gather_rows_kernel<<<rt_cuda_grid(n, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(
        out, inp, idx, B, C, rt_cuda_store_kind(ctx));
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_scatter_rows_add(void *ctx, float *dinp, rt_x dout, const int32_t *idx, int B, int C) {
    RT_CHECK(B >= 0 && C > 0, "B=%d C=%d", B, C);
    if (B == 0) return;
    dim3 grid((unsigned)((C + RT_CUDA_THREADS - 1) / RT_CUDA_THREADS), RT_CUDA_SCATTER_SPLIT);
    rt_cuda_scatter_rows_add_kernel<<<grid, RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(dinp, dout, idx, B, C);
    CUDA_LAUNCH_CHECK();
}
