/* What the training loop needs of any model, in the models' own terms: one micro-batch step
 * under a pass (its dropout stream and grads-ready hook, models/layers/pass.h) and the step's model
 * FLOPs. Every program hands one to apps/common's adapter (train_app_loop_model), which turns
 * it into runtime's rt_train_model: the pass, the hook and the empty-batch rule live there once. */
#ifndef MDL_TRAINABLE_H
#define MDL_TRAINABLE_H

#include "models/layers/pass.h"
#include "runtime/train/rt_batch.h"
#include "runtime/train/rt_params.h"

typedef struct {
    void *model;
    rt_params *params;
    /* The summed loss of b's labelled targets; accumulates gradients of grad_scale * loss when
     * grad_scale > 0. b has at least one row. */
    rt_status (*step)(void *model, const rt_batch *b, const mdl_pass *pass, float grad_scale, double *loss_sum);
    /* Model FLOPs of training on b (models/layers/flops.h), for MFU; NULL: unknown. */
    double (*flops)(void *model, const rt_batch *b);
    /* Optional, for a pipeline stage (--pp): one optimizer step's forward and backward of the
     * micro-batches b[0..n) (each with at least one row) through every stage, in place of n
     * step calls with pass {seed, step, micro i, training}; the summed loss on the last stage,
     * 0 on the others. */
    rt_status (*pipeline_step)(void *model, const rt_batch *b, int n, uint64_t seed, int64_t step, float grad_scale,
                               double *loss_sum);
} mdl_trainable;

#endif
