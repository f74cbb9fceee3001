/* Losses of the classification heads that every model shares. Cross-entropy is a backend op
 * (softmax_xent); the regression loss (one output per row, e.g. STS-B) is computed on the
 * host, since a batch holds only B numbers. */
#ifndef MDL_HEADS_H
#define MDL_HEADS_H

#include "runtime/rt_backend.h"
#include "runtime/rt_batch.h"

/* MSE as HF's MSELoss(logits.squeeze(), labels) summed over the labelled rows (target not
 * NaN): loss (z - y)^2, dlogits 2 (z - y) grad_scale, 0 for unlabelled rows. logits and
 * dlogits are (B) backend buffers, targets (B) host; host_scratch holds 2 B floats. */
void mdl_mse_head(rt_backend *be, const float *logits, float *dlogits, const float *targets, int B, float grad_scale,
                  float *host_scratch, double *loss_sum);

/* A classification batch checked before any work: a regression head (num_labels 1) needs float
 * targets (RT_ERR_CONFIG), and every label must be -100 or in [0, num_labels) (RT_ERR_FORMAT
 * "family: label 7 of example 12 is not in [0, 2)"). */
rt_status mdl_cls_check_batch(const char *family, const rt_batch *b, int num_labels);

/* The classification loss HF's heads take, summed over the labelled rows: CrossEntropyLoss over
 * num_labels (b's labels go to dev_labels; the per-row losses stay in dev_losses until
 * mdl_cls_loss_read), or with one label mdl_mse_head on b's targets (*loss_sum now). logits,
 * dlogits (B, num_labels) and dev_losses (B) are backend buffers; host_scratch holds 2 B floats. */
void mdl_cls_loss(rt_backend *be, const rt_batch *b, int num_labels, const float *logits, float *dlogits,
                  float *dev_losses, int32_t *dev_labels, float *host_scratch, float grad_scale, double *loss_sum);
/* mdl_cls_loss's cross-entropy summed over the B rows in order into *loss_sum (nothing to do for
 * the regression head). Reading waits for the device: a training step calls it once its backward
 * is queued, so a GPU never idles on the host in the middle of a step. */
void mdl_cls_loss_read(rt_backend *be, int B, int num_labels, const float *dev_losses, float *host_scratch,
                       double *loss_sum);

#endif
