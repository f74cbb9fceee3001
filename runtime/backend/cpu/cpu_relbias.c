/* T5's relative position bias on the CPU (relbias_fwd/bwd in rt_backend.h): a gather of the
 * (num_buckets, NH) table by the bucket of every (query, key) pair into the (NH, Tq, Tk) bias
 * the attention adds, and the matching scatter-add for its gradient. The bias is shared by
 * the batch and, within a stack, by every layer, so the model sums dbias over all of them
 * first and calls the backward once per stack. The backward gives each head to one task and
 * walks the pairs in order: no races, and the same sums for any thread count. */
#include <stdlib.h>

#include "runtime/backend/cpu/cpu_internal.h"

static void rt_cpu_relbias_check(int NH, int Tq, int Tk, int num_buckets) {
    RT_CHECK(NH > 0 && Tq > 0 && Tk > 0 && num_buckets > 0, "relbias: NH=%d Tq=%d Tk=%d num_buckets=%d", NH, Tq, Tk,
             num_buckets);
}

void rt_cpu_relbias_fwd(void *ctx, float *bias, const float *table, const int32_t *buckets, int NH, int Tq, int Tk,
                        int num_buckets) {
    rt_cpu_relbias_check(NH, Tq, Tk, num_buckets);
    const size_t tt = (size_t)Tq * Tk;
    const rt_dtype dtype = rt_cpu_matmul_dtype(ctx);
    for (size_t t = 0; t < tt; t++)
        RT_CHECK(buckets[t] >= 0 && buckets[t] < num_buckets, "relbias: bucket %d at [%zu] not in [0, %d)",
                 (int)buckets[t], t, num_buckets);
#pragma omp parallel for schedule(static) if (tt * (size_t)NH >= RT_CPU_PAR_MIN)
    for (int h = 0; h < NH; h++) {
        float *out = bias + (size_t)h * tt;
        for (size_t t = 0; t < tt; t++) out[t] = table[(size_t)buckets[t] * NH + h];
        rt_cpu_store_run(dtype, out, tt); /* stored at the compute precision */
    }
}

void rt_cpu_relbias_bwd(void *ctx, float *dtable, const float *dbias, const int32_t *buckets, int NH, int Tq, int Tk,
                        int num_buckets) {
    rt_cpu_relbias_check(NH, Tq, Tk, num_buckets);
    const size_t tt = (size_t)Tq * Tk;
    for (size_t t = 0; t < tt; t++)
        RT_CHECK(buckets[t] >= 0 && buckets[t] < num_buckets, "relbias: bucket %d at [%zu] not in [0, %d)",
                 (int)buckets[t], t, num_buckets);
#pragma omp parallel for schedule(static) if (tt * (size_t)NH >= RT_CPU_PAR_MIN)
    for (int h = 0; h < NH; h++) {
        /* a head's sums in a private row first: the table's columns interleave the heads */
        float *acc = rt_xcalloc((size_t)num_buckets, sizeof(float));
        const float *g = dbias + (size_t)h * tt;
        for (size_t t = 0; t < tt; t++) acc[buckets[t]] += g[t];
        for (int k = 0; k < num_buckets; k++) dtable[(size_t)k * NH + h] += acc[k];
        free(acc);
    }
}
