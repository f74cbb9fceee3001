/* Losses of the classification heads that every model shares, as backend ops: cross-entropy
 * (softmax_xent), for a regression head (one output per row, e.g. STS-B) the squared error
 * (mse_loss), and for multi-label data (a 0/1 target per class) the binary cross-entropy of
 * sigmoids (bce_logits_loss), so none sends logits through the host in the middle of a step.
 * The batch decides: targets of width num_labels > 1 are multi-label, as HF's problem_type
 * multi_label_classification. */
#ifndef MDL_HEADS_H
#define MDL_HEADS_H

#include "models/layers/pass.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/train/rt_batch.h"

/* A classification batch checked before any work: a regression head (num_labels 1) needs one float
 * target a row and multi-label targets one a class (RT_ERR_CONFIG), and every label must be -100
 * or in [0, num_labels) (RT_ERR_FORMAT "family: label 7 of example 12 is not in [0, 2)"). */
rt_status mdl_cls_check_batch(const char *family, const rt_batch *b, int num_labels);

/* The classification loss HF's heads take, queued: CrossEntropyLoss over num_labels (b's labels
 * go to dev_labels); with one label HF's MSELoss(logits.squeeze(), labels) terms on b's targets;
 * with multi-label targets BCEWithLogitsLoss, a row's mean over its classes (rows whose first
 * target is NaN unlabelled). The per-row losses stay in dev_losses (B) until
 * mdl_loss_sum; logits and dlogits (B, num_labels) are backend buffers. */
void mdl_cls_loss(rt_backend *be, const rt_batch *b, int num_labels, const float *logits, float *dlogits,
                  float *dev_losses, int32_t *dev_labels, float grad_scale);
/* n per-row losses on the device summed in order: read back into host_scratch (n floats) and
 * summed, which waits for the device, or (pass->loss_sink) added on the device into the sink, and
 * then 0 (the trainer reads the sink once the step's work is queued). A training step calls it
 * once its backward is queued. */
double mdl_loss_sum(rt_backend *be, const float *dev_losses, size_t n, float *host_scratch, const mdl_pass *pass);

#endif
