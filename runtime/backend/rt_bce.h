/* One row of a multi-label head's binary cross-entropy (rt_backend_ops.bce_logits_loss), written
 * once for the CPU backend and the CUDA kernel: each element in float as PyTorch's
 * binary_cross_entropy_with_logits, (1 - y) z - log_sigmoid(z) with log_sigmoid(z) = min(z, 0) -
 * log1p(exp(-|z|)), finite for any z; the row's terms summed in double. The row's first target is
 * read before any write and each target before its gradient, so y may be d (the heads pass the
 * targets in dlogits). CUDA's expf and log1pf may differ from the host's in the last bits. */
#ifndef RT_BCE_H
#define RT_BCE_H

#include <math.h>
#include <stdbool.h>

#ifndef RT_HD
#ifdef __CUDACC__
#define RT_HD __host__ __device__ __forceinline__
#else
#define RT_HD static inline
#endif
#endif

/* Writes d = (sigmoid(x) - y) g for the row's C elements and returns its mean loss; a row whose
 * first target is NaN is unlabelled: d is 0 and the loss 0. */
RT_HD float rt_bce_logits_row(float *d, const float *x, const float *y, int C, float g) {
    const bool labelled = !isnan(y[0]);
    double sum = 0;
    for (int c = 0; c < C; c++) {
        const float e = expf(-fabsf(x[c])), yc = y[c];
        const float log_sigmoid = fminf(x[c], 0.0f) - log1pf(e);
        const float sigmoid = x[c] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        sum += (double)((1.0f - yc) * x[c] - log_sigmoid);
        d[c] = labelled ? (sigmoid - yc) * g : 0.0f;
    }
    return labelled ? (float)(sum / C) : 0.0f;
}

#endif
