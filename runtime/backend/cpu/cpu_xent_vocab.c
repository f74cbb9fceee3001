/* The vocab-parallel cross-entropy's per-shard phases on the CPU (see xent_vocab in
 * rt_backend.h): between phases the model all-reduces N-element row statistics, so no rank
 * ever holds more than its own vocab columns of the logits. A row is read in runs (rt_cpu_x_read),
 * so 16-bit logits are widened a run at a time and the sums keep their order. */
#include <math.h>
#include <string.h>

#include "runtime/backend/cpu/cpu_internal.h"

void rt_cpu_xent_vocab(void *ctx, int phase, float *stats, float *losses, rt_x dlogits, rt_x logits,
                       const float *col_mask, const int32_t *targets, size_t N, int V, int vocab_start,
                       float grad_scale) {
    (void)ctx;
    RT_CHECK(V > 0 && phase >= 0 && phase <= 2, "V=%d phase=%d", V, phase);
    float *mx = stats, *tl = stats + N, *sum = stats + 2 * N;
#pragma omp parallel for schedule(static) if (N * (size_t)V >= RT_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++) {
        float in_buf[RT_CPU_X_RUN], out_buf[RT_CPU_X_RUN];
        const size_t row = n * (size_t)V;
        const int32_t t = targets[n];
        const int local = t - vocab_start; /* in [0, V) when this shard holds the target */
        if (phase == 2 && losses)
            losses[n] = t == -100 ? 0.0f : (float)((double)mx[n] + log((double)sum[n]) - (double)tl[n]);
        if (phase == 2 && !dlogits.p) continue;
        if (phase == 0) tl[n] = 0.0f;
        float m = -INFINITY;
        double s = 0.0;
        const float inv = phase == 2 ? 1.0f / sum[n] : 0.0f;
        for (int j0 = 0; j0 < V; j0 += RT_CPU_X_RUN) {
            const int len = V - j0 < RT_CPU_X_RUN ? V - j0 : RT_CPU_X_RUN;
            const float *x = rt_cpu_x_read(logits, row + (size_t)j0, (size_t)len, in_buf);
            const float *cm = col_mask ? col_mask + j0 : NULL;
            if (phase == 0) {
                for (int j = 0; j < len; j++) {
                    const float v = cm ? x[j] + cm[j] : x[j];
                    m = v > m ? v : m;
                }
                if (t != -100 && local >= j0 && local < j0 + len) tl[n] = x[local - j0];
            } else if (phase == 1) {
                for (int j = 0; j < len; j++) s += expf((cm ? x[j] + cm[j] : x[j]) - mx[n]);
            } else {
                float *dx = rt_cpu_x_dst(dlogits, row + (size_t)j0, out_buf);
                if (t == -100) /* an ignored row: no gradient */
                    memset(dx, 0, (size_t)len * sizeof(float));
                else
                    for (int j = 0; j < len; j++) { /* x[j] is read before dx[j] may overwrite it */
                        const float pj = expf((cm ? x[j] + cm[j] : x[j]) - mx[n]) * inv;
                        dx[j] = (pj - (j0 + j == local ? 1.0f : 0.0f)) * grad_scale;
                    }
                rt_cpu_x_commit(dlogits, row + (size_t)j0, (size_t)len, dx);
            }
        }
        if (phase == 0) mx[n] = m;
        if (phase == 1) sum[n] = (float)s;
    }
}
