/* What every sequence-classification model offers the shared GLUE driver and the training
 * loop: one step over a collated batch (forward, and backward when grad_scale > 0), its
 * parameters, and export back to Hugging Face format. GPT-2 and BERT/RoBERTa implement it;
 * num_labels == 1 means regression with an MSE loss (STS-B). */
#ifndef MDL_CLASSIFIER_H
#define MDL_CLASSIFIER_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/train/rt_batch.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_params.h"
#include "models/layers/pass.h"

typedef struct {
    void *model;
    int num_labels;
    /* Writes the summed loss over labelled rows and, when host_logits is non-NULL, the logits
     * (B, num_labels); accumulates gradients of grad_scale * loss when grad_scale > 0. */
    rt_status (*step)(void *model, const rt_batch *b, const mdl_pass *pass, float grad_scale, double *loss_sum,
                      float *host_logits);
    rt_params *(*params)(void *model);
    /* config.json and model.safetensors in HF's names and layout; collective over tp, the
     * tp rank 0 writes. */
    rt_status (*save_hf)(void *model, const char *dir);
    void (*free)(void *model);
    /* Model FLOPs of training on B rows of T tokens (models/layers/flops.h), for MFU. */
    double (*train_flops)(void *model, int B, int T);
    /* A pipeline stage's training step (mdl_trainable.pipeline_step); NULL: the model is
     * whole. step then evaluates only (grad_scale 0). */
    rt_status (*pipeline_step)(void *model, const rt_batch *b, int n, uint64_t seed, int64_t step, float grad_scale,
                               double *loss_sum);
} mdl_classifier;

#endif
