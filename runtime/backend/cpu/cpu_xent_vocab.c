/* The vocab-parallel cross-entropy's per-shard phases on the CPU (see xent_vocab in
 * rt_backend.h): between phases the model all-reduces N-element row statistics, so no rank
 * ever holds more than its own vocab columns of the logits. */
#include <math.h>
#include <string.h>

#include "runtime/backend/cpu/cpu_internal.h"

void rt_cpu_xent_vocab(void *ctx, int phase, float *stats, float *losses, float *dlogits, const float *logits,
                       const int32_t *targets, size_t N, int V, int vocab_start, float grad_scale) {
    (void)ctx;
    RT_CHECK(V > 0 && phase >= 0 && phase <= 2, "V=%d phase=%d", V, phase);
    float *mx = stats, *tl = stats + N, *sum = stats + 2 * N;
#pragma omp parallel for schedule(static) if (N * (size_t)V >= RT_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++) {
        const float *x = logits + n * (size_t)V;
        int32_t t = targets[n];
        int local = t - vocab_start; /* in [0, V) when this shard holds the target */
        if (phase == 0) {
            float m = -INFINITY;
            for (int j = 0; j < V; j++) m = x[j] > m ? x[j] : m;
            mx[n] = m;
            tl[n] = (t != -100 && local >= 0 && local < V) ? x[local] : 0.0f;
        } else if (phase == 1) {
            double s = 0.0;
            for (int j = 0; j < V; j++) s += expf(x[j] - mx[n]);
            sum[n] = (float)s;
        } else {
            if (losses) losses[n] = t == -100 ? 0.0f : (float)((double)mx[n] + log((double)sum[n]) - (double)tl[n]);
            if (!dlogits) continue;
            float *dx = dlogits + n * (size_t)V;
            if (t == -100) {
                memset(dx, 0, (size_t)V * sizeof(float));
                continue;
            }
            float inv = 1.0f / sum[n];
            for (int j = 0; j < V; j++) {
                float pj = expf(x[j] - mx[n]) * inv; /* read x[j] before dx[j] may overwrite it */
                dx[j] = (pj - (j == local ? 1.0f : 0.0f)) * grad_scale;
            }
        }
    }
}
