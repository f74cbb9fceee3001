/* Row kernels on the CPU: embedding lookup and its scatter-add gradient over a vocab shard,
 * the fused softmax cross-entropy, and gather/scatter of rows. Gradients that scatter into
 * rows chosen by ids (several ids may repeat) are split by column blocks and walk the ids in
 * order: no races, no atomics, and the same sum order for any thread count. */
#include <math.h>
#include <string.h>

#include "runtime/backend/cpu/cpu_internal.h"
#include "runtime/backend/rt_bce.h"

/* Each row stored at the compute precision as it is written (every row, as a rounding pass over
 * out would: one this shard leaves alone is rounded too). */
void rt_cpu_embedding_fwd(void *ctx, float *out, const int32_t *ids, const float *table, size_t N, int C,
                          int vocab_start, int V, bool accumulate) {
    const rt_dtype dtype = rt_cpu_matmul_dtype(ctx);
#pragma omp parallel for schedule(static) if (N * (size_t)C >= RT_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++) {
        float *y = out + n * (size_t)C;
        /* 64-bit so that id - vocab_start cannot overflow for any int32 id */
        int64_t local = (int64_t)ids[n] - vocab_start;
        if (local < 0 || local >= V) { /* another shard's row (or padding): contributes 0 */
            if (!accumulate) memset(y, 0, (size_t)C * sizeof(float));
        } else if (accumulate) {
            const float *row = table + (size_t)local * C;
            for (int c = 0; c < C; c++) y[c] += row[c];
        } else {
            memcpy(y, table + (size_t)local * C, (size_t)C * sizeof(float));
        }
        rt_cpu_store_run(dtype, y, (size_t)C);
    }
}

void rt_cpu_embedding_bwd(void *ctx, float *dtable, const float *dout, const int32_t *ids, size_t N, int C,
                          int vocab_start, int V) {
    int nblk = (C + RT_CPU_COL_BLOCK - 1) / RT_CPU_COL_BLOCK;
#pragma omp parallel for schedule(static) if (N * (size_t)C >= RT_CPU_PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        int c0 = blk * RT_CPU_COL_BLOCK;
        int c1 = c0 + RT_CPU_COL_BLOCK < C ? c0 + RT_CPU_COL_BLOCK : C;
        for (size_t n = 0; n < N; n++) {
            int64_t local = (int64_t)ids[n] - vocab_start;
            if (local < 0 || local >= V) continue;
            float *drow = dtable + (size_t)local * C;
            const float *dy = dout + n * (size_t)C;
            for (int c = c0; c < c1; c++) drow[c] += dy[c];
        }
    }
}

void rt_cpu_mse_loss(void *ctx, float *losses, float *dlogits, const float *z, const float *targets, size_t N,
                     float grad_scale) {
    (void)ctx;
    for (size_t i = 0; i < N; i++) {
        const float t = targets[i], d = z[i] - t; /* float, as PyTorch's MSELoss computes it */
        const bool labelled = !isnan(t);
        losses[i] = labelled ? d * d : 0.0f;
        dlogits[i] = labelled ? 2.0f * d * grad_scale : 0.0f;
    }
}

/* A row at a time (runtime/backend/rt_bce.h, the CUDA kernel's code too). */
void rt_cpu_bce_logits_loss(void *ctx, float *losses, float *dlogits, const float *z, const float *targets, size_t N,
                            int C, float grad_scale) {
    (void)ctx;
    RT_CHECK(C > 0, "C=%d", C); /* a row's first target decides whether it is labelled */
    for (size_t i = 0; i < N; i++)
        losses[i] = rt_bce_logits_row(dlogits + i * (size_t)C, z + i * (size_t)C, targets + i * (size_t)C, C,
                                      grad_scale / (float)C);
}

/* loss = logsumexp(x) - x[t]; dlogits = (softmax(x) - onehot(t)) * grad_scale. Each row reads
 * all its logits (max, then sum of exps, then x[t]) before writing any output element, and
 * writes element j only after reading it, which is what lets dlogits alias logits. */
void rt_cpu_softmax_xent(void *ctx, float *losses, float *dlogits, float *probs, const float *logits,
                         const int32_t *targets, size_t N, int V, float grad_scale) {
    RT_CHECK(V > 0, "V=%d", V);
#pragma omp parallel for schedule(static) if (N * (size_t)V >= RT_CPU_PAR_MIN)
    for (size_t n = 0; n < N; n++) {
        const float *x = logits + n * (size_t)V;
        float *dx = dlogits ? dlogits + n * (size_t)V : NULL;
        float *pr = probs ? probs + n * (size_t)V : NULL;
        int32_t t = targets[n];
        RT_CHECK(t == -100 || (t >= 0 && t < V), "row %zu: target %d outside [0, %d) and not -100", n, (int)t, V);
        float mx = -INFINITY;
        for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        double sum = 0.0;
        for (int j = 0; j < V; j++) sum += expf(x[j] - mx);
        double lse = (double)mx + log(sum);
        if (losses) losses[n] = t == -100 ? 0.0f : (float)(lse - (double)x[t]);
        float inv = (float)(1.0 / sum);
        if (t == -100) {
            /* no loss, no gradient; probs still useful for evaluation */
            if (pr)
                for (int j = 0; j < V; j++) pr[j] = expf(x[j] - mx) * inv;
            if (dx) memset(dx, 0, (size_t)V * sizeof(float));
            continue;
        }
        for (int j = 0; j < V; j++) {
            float pj = expf(x[j] - mx) * inv; /* read x[j] before dx[j] may overwrite it */
            if (pr) pr[j] = pj;
            if (dx) dx[j] = (pj - (j == t ? 1.0f : 0.0f)) * grad_scale;
        }
    }
}

void rt_cpu_gather_rows(void *ctx, float *out, const float *inp, const int32_t *idx, int B, int C) {
    const rt_dtype dtype = rt_cpu_matmul_dtype(ctx);
    for (int b = 0; b < B; b++) {
        RT_CHECK(idx[b] >= 0, "gather_rows: idx[%d]=%d", b, (int)idx[b]);
        memcpy(out + (size_t)b * C, inp + (size_t)idx[b] * C, (size_t)C * sizeof(float));
        rt_cpu_store_run(dtype, out + (size_t)b * C, (size_t)C);
    }
}

void rt_cpu_scatter_rows_add(void *ctx, float *dinp, rt_x dout, const int32_t *idx, int B, int C) {
    /* serial over b: idx may repeat, and B (e.g. one row per sequence) is small */
    float buf[RT_CPU_X_RUN];
    for (int b = 0; b < B; b++) {
        RT_CHECK(idx[b] >= 0, "scatter_rows_add: idx[%d]=%d", b, (int)idx[b]);
        float *d = dinp + (size_t)idx[b] * C;
        for (int c0 = 0; c0 < C; c0 += RT_CPU_X_RUN) {
            const int m = C - c0 < RT_CPU_X_RUN ? C - c0 : RT_CPU_X_RUN;
            const float *g = rt_cpu_x_read(dout, (size_t)b * C + (size_t)c0, (size_t)m, buf);
            for (int c = 0; c < m; c++) d[c0 + c] += g[c];
        }
    }
}
