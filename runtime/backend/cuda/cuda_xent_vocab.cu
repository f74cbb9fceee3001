/* The vocab-parallel cross-entropy's per-shard phases on CUDA (see xent_vocab in
 * rt_backend.h and runtime/backend/cpu/cpu_xent_vocab.c, whose semantics these follow): one block
 * per row, like rt_cuda_softmax_xent_kernel, reading the logits at their handle's type (16-bit
 * logits are half the traffic of fp32 ones) plus the padding columns' mask, in packs of eight
 * (cuda_pack.h) where a row starts aligned. */
#include "runtime/backend/cuda/rt_cuda.h"

__global__ void rt_cuda_xent_vocab_kernel(int phase, float *stats, float *losses, rt_x dlogits, rt_x logits,
                                          const float *col_mask, const int32_t *targets, size_t N, int V,
                                          int vocab_start, float grad_scale) {
    __shared__ float sh[32];
    const size_t n = blockIdx.x, row = n * (size_t)V;
    float *mx = stats, *tl = stats + N, *sum = stats + 2 * N;
    int32_t t = targets[n];
    int local = t - vocab_start;
    /* the row's logits plus the padding mask, by packs where the row's handles start aligned */
    const rt_x x = rt_cuda_x_at(logits, row), mask = rt_pack_xf(col_mask);
    const rt_x dx = dlogits.p ? rt_cuda_x_at(dlogits, row) : dlogits;
    const bool aligned = rt_pack_aligned(x) && rt_pack_aligned(mask) && rt_pack_aligned(dx);
    auto masked = [&](size_t j, int w) {
        rt_pack v = rt_pack_load_n(x, j, w);
        if (col_mask) {
            const rt_pack m = rt_pack_load_n(mask, j, w);
            for (int k = 0; k < w; k++) v.v[k] += m.v[k];
        }
        return v;
    };
    if (phase == 0) {
        float m = -INFINITY;
        rt_cuda_pack_walk_from((size_t)V, aligned, threadIdx.x, blockDim.x, [&](size_t j, int w) {
            const rt_pack v = masked(j, w);
            for (int k = 0; k < w; k++) m = fmaxf(m, v.v[k]);
        });
        m = rt_cuda_block_max(m, sh);
        if (threadIdx.x == 0) {
            mx[n] = m;
            tl[n] = (t != -100 && local >= 0 && local < V) ? rt_cuda_xload(x, (size_t)local) : 0.0f;
        }
    } else if (phase == 1) {
        float m = mx[n], s = 0.0f;
        rt_cuda_pack_walk_from((size_t)V, aligned, threadIdx.x, blockDim.x, [&](size_t j, int w) {
            const rt_pack v = masked(j, w);
            for (int k = 0; k < w; k++) s += expf(v.v[k] - m);
        });
        s = rt_cuda_block_sum(s, sh);
        if (threadIdx.x == 0) sum[n] = s;
    } else {
        float m = mx[n], s = sum[n];
        if (threadIdx.x == 0 && losses)
            losses[n] = t == -100 ? 0.0f : (float)((double)m + log((double)s) - (double)tl[n]);
        if (!dlogits.p) return;
        float inv = 1.0f / s;
        /* a thread reads its logits before it writes their dlogits, which may alias them */
        rt_cuda_pack_walk_from((size_t)V, aligned, threadIdx.x, blockDim.x, [&](size_t j, int w) {
            const rt_pack v = masked(j, w);
            rt_pack g = {};
            for (int k = 0; k < w; k++) {
                const float pj = expf(v.v[k] - m) * inv;
                g.v[k] = t == -100 ? 0.0f : (pj - ((int)j + k == local ? 1.0f : 0.0f)) * grad_scale;
            }
            rt_pack_store_n(dx, j, w, &g);
        });
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
