/* Losses of the classification heads that every model shares. Cross-entropy is a backend op
 * (softmax_xent); the regression loss (one output per row, e.g. STS-B) is computed on the
 * host, since a batch holds only B numbers. */
#ifndef MDL_HEADS_H
#define MDL_HEADS_H

#include "runtime/rt_backend.h"

/* MSE as HF's MSELoss(logits.squeeze(), labels) summed over the labelled rows (target not
 * NaN): loss (z - y)^2, dlogits 2 (z - y) grad_scale, 0 for unlabelled rows. logits and
 * dlogits are (B) backend buffers, targets (B) host; host_scratch holds 2 B floats. */
void mdl_mse_head(rt_backend *be, const float *logits, float *dlogits, const float *targets, int B, float grad_scale,
                  float *host_scratch, double *loss_sum);

#endif
