/* The vocab-parallel cross-entropy's per-shard phases on CUDA (see xent_vocab in
 * rt_backend.h and runtime/backend/cpu/cpu_xent_vocab.c, whose semantics these follow): one block
 * per row, like rt_cuda_softmax_xent_kernel, reading the logits at their handle's type (16-bit
 * logits are half the traffic of fp32 ones) plus the padding columns' mask. */
#include "runtime/backend/cuda/rt_cuda.h"

__device__ __forceinline__ float rt_cuda_masked_logit(rt_x x, size_t row, int j, const float *col_mask) {
    const float v = rt_cuda_xload(x, row + (size_t)j);
    return col_mask ? v + col_mask[j] : v;
}

__global__ void rt_cuda_xent_vocab_kernel(int phase, float *stats, float *losses, rt_x dlogits, rt_x logits,
                                          const float *col_mask, const int32_t *targets, size_t N, int V,
                                          int vocab_start, float grad_scale) {
    __shared__ float sh[32];
    const size_t n = blockIdx.x, row = n * (size_t)V;
    float *mx = stats, *tl = stats + N, *sum = stats + 2 * N;
    int32_t t = targets[n];
    int local = t - vocab_start;
    if (phase == 0) {
        float m = -INFINITY;
        for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, rt_cuda_masked_logit(logits, row, j, col_mask));
        m = rt_cuda_block_max(m, sh);
        if (threadIdx.x == 0) {
            mx[n] = m;
            tl[n] = (t != -100 && local >= 0 && local < V) ? rt_cuda_xload(logits, row + (size_t)local) : 0.0f;
        }
    } else if (phase == 1) {
        float m = mx[n], s = 0.0f;
        for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(rt_cuda_masked_logit(logits, row, j, col_mask) - m);
        s = rt_cuda_block_sum(s, sh);
        if (threadIdx.x == 0) sum[n] = s;
    } else {
        float m = mx[n], s = sum[n];
        if (threadIdx.x == 0 && losses)
            losses[n] = t == -100 ? 0.0f : (float)((double)m + log((double)s) - (double)tl[n]);
        if (!dlogits.p) return;
        float inv = 1.0f / s;
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            /* read logit j before dlogit j may overwrite it */
            float pj = expf(rt_cuda_masked_logit(logits, row, j, col_mask) - m) * inv;
            rt_cuda_xstore(dlogits, row + (size_t)j, t == -100 ? 0.0f : (pj - (j == local ? 1.0f : 0.0f)) * grad_scale);
        }
    }
}

void rt_cuda_xent_vocab(void *ctx, int phase, float *stats, float *losses, rt_x dlogits, rt_x logits,
                        const float *col_mask, const int32_t *targets, size_t N, int V, int vocab_start,
                        float grad_scale) {
    (void)ctx;
    RT_CHECK(V > 0 && phase >= 0 && phase <= 2, "V=%d phase=%d", V, phase);
    RT_CHECK(N <= 0x7fffffffu, "N=%zu rows is too many for one launch", N);
    if (N == 0) return;
    rt_cuda_xent_vocab_kernel<<<(unsigned)N, RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(
        phase, stats, losses, dlogits, logits, col_mask, targets, N, V, vocab_start, grad_scale);
    CUDA_LAUNCH_CHECK();
}
