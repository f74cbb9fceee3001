/* T5's relative position bias on CUDA (relbias_fwd/bwd in rt_backend.h), with the CPU
 * backend's semantics (runtime/backend/cpu/cpu_relbias.c): a gather of the (num_buckets, NH) table
 * into the (NH, Tq, Tk) bias, and its gradient. The backward has no atomics: one block per
 * table element (bucket, head) sums that head's dbias over the pairs in that bucket, strided
 * by thread and then reduced in a fixed tree, so a run gives the same bits every time. Each
 * block reads all Tq*Tk bucket ids; the table is small (num_buckets * NH blocks) and this runs
 * once per stack per step, so the simple form is kept. Bucket ids are the model's own (never
 * outside [0, num_buckets)); a bad one reads no table row in the backward and, in the
 * forward, gives 0 instead of aborting as the CPU backend does. */
#include "runtime/backend/cuda/rt_cuda.h"

__global__ void rt_cuda_relbias_fwd_kernel(float *bias, const float *table, const int32_t *buckets, int NH, size_t tt,
                                           int num_buckets, int kind) {
    size_t n = tt * (size_t)NH;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t h = i / tt, t = i % tt;
        int32_t b = buckets[t];
        bias[i] = rt_cuda_round16((b >= 0 && b < num_buckets) ? table[(size_t)b * NH + h] : 0.0f, kind);
    }
}

/* Block (bucket k, head h): dtable[k, h] += sum of dbias[h, t] over t with buckets[t] == k. */
__global__ void rt_cuda_relbias_bwd_kernel(float *dtable, const float *dbias, const int32_t *buckets, int NH,
                                           size_t tt) {
    __shared__ float sh[32];
    int k = (int)(blockIdx.x / (unsigned)NH), h = (int)(blockIdx.x % (unsigned)NH);
    const float *g = dbias + (size_t)h * tt;
    float s = 0.0f;
    for (size_t t = threadIdx.x; t < tt; t += blockDim.x)
        if (buckets[t] == k) s += g[t];
    s = rt_cuda_block_sum(s, sh);
    if (threadIdx.x == 0) dtable[(size_t)k * NH + h] += s;
}

static void rt_cuda_relbias_check(int NH, int Tq, int Tk, int num_buckets) {
    RT_CHECK(NH > 0 && Tq > 0 && Tk > 0 && num_buckets > 0, "relbias: NH=%d Tq=%d Tk=%d num_buckets=%d", NH, Tq, Tk,
             num_buckets);
    RT_CHECK((size_t)num_buckets * (size_t)NH <= 0x7fffffffu, "relbias: %d buckets x %d heads", num_buckets, NH);
}

void rt_cuda_relbias_fwd(void *ctx, float *bias, const float *table, const int32_t *buckets, int NH, int Tq, int Tk,
                         int num_buckets) {
    rt_cuda_relbias_check(NH, Tq, Tk, num_buckets);
    size_t tt = (size_t)Tq * Tk;
    rt_cuda_relbias_fwd_kernel<<<rt_cuda_grid(tt * (size_t)NH, RT_CUDA_THREADS), RT_CUDA_THREADS, 0,
                                 rt_cuda_stream(ctx)>>>(bias, table, buckets, NH, tt, num_buckets,
                                                        rt_cuda_store_kind(ctx));
    CUDA_LAUNCH_CHECK();
}

void rt_cuda_relbias_bwd(void *ctx, float *dtable, const float *dbias, const int32_t *buckets, int NH, int Tq, int Tk,
                         int num_buckets) {
    rt_cuda_relbias_check(NH, Tq, Tk, num_buckets);
    size_t tt = (size_t)Tq * Tk;
    rt_cuda_relbias_bwd_kernel<<<(unsigned)(num_buckets * NH), RT_CUDA_THREADS, 0, rt_cuda_stream(ctx)>>>(
        dtable, dbias, buckets, NH, tt);
    CUDA_LAUNCH_CHECK();
}
