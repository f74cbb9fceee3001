/* The vocab-parallel cross-entropy's per-shard phases on CUDA (see xent_vocab in
 * rt_backend.h and runtime/backend/cpu/cpu_xent_vocab.c, whose semantics these follow): one block
 * per row, like rt_cuda_softmax_xent_kernel. */
#include "runtime/backend/cuda/rt_cuda.h"

__global__ void rt_cuda_xent_vocab_kernel(int phase, float *stats, float *losses, float *dlogits, const float *logits,
                                          const int32_t *targets, size_t N, int V, int vocab_start, float grad_scale) {
    __shared__ float sh[32];
    size_t n = blockIdx.x;
    const float *x = logits + n * (size_t)V;
    float *mx = stats, *tl = stats + N, *sum = stats + 2 * N;
    int32_t t = targets[n];
    int local = t - vocab_start;
    if (phase == 0) {
        float m = -INFINITY;
        for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, x[j]);
        m = rt_cuda_block_max(m, sh);
        if (threadIdx.x == 0) {
            mx[n] = m;
            tl[n] = (t != -100 && local >= 0 && local < V) ? x[local] : 0.0f;
        }
    } else if (phase == 1) {
        float m = mx[n], s = 0.0f;
        for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(x[j] - m);
        s = rt_cuda_block_sum(s, sh);
        if (threadIdx.x == 0) sum[n] = s;
    } else {
        float m = mx[n], s = sum[n];
        if (threadIdx.x == 0 && losses)
            losses[n] = t == -100 ? 0.0f : (float)((double)m + log((double)s) - (double)tl[n]);
        if (!dlogits) return;
        float *dx = dlogits + n * (size_t)V;
        float inv = 1.0f / s;
        for (int j = threadIdx.x; j < V; j += blockDim.x) {
            float pj = expf(x[j] - m) * inv; /* read x[j] before dx[j] may overwrite it */
            dx[j] = t == -100 ? 0.0f : (pj - (j == local ? 1.0f : 0.0f)) * grad_scale;
        }
    }
}

void rt_cuda_xent_vocab(void *ctx, int phase, float *stats, float *losses, float *dlogits, const float *logits,
                        const int32_t *targets, size_t N, int V, int vocab_start, float grad_scale) {
    (void)ctx;
    RT_CHECK(V > 0 && phase >= 0 && phase <= 2, "V=%d phase=%d", V, phase);
    RT_CHECK(N <= 0x7fffffffu, "N=%zu rows is too many for one launch", N);
    if (N == 0) return;
    rt_cuda_xent_vocab_kernel<<<(unsigned)N, RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(
        phase, stats, losses, dlogits, logits, targets, N, V, vocab_start, grad_scale);
    CUDA_LAUNCH_CHECK();
}
