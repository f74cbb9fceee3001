/* One forward/backward pass as every model sees it: the randomness of its dropout (seed, step,
 * micro-batch) and who wants to hear when gradients are final. One dropout-stream formula for
 * every model, so a call site's mask depends only on (seed, step, micro-batch, site). */
#ifndef MDL_PASS_H
#define MDL_PASS_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/train/rt_params.h"
#include "runtime/base/rt_rng.h"
#include "runtime/base/rt_status.h"

/* Randomness of one forward pass: dropout draws from (seed, step, micro-batch). */
typedef struct {
    uint64_t seed;
    int64_t step;
    int micro;
    bool training;              /* dropout on */
    const rt_grads_hook *grads; /* backward reports finished gradients here (NULL: nobody asks) */
    /* Backend memory (the trainer's step state): the heads add their summed loss there (the
     * backend's loss_into) and report 0, instead of reading the losses back; NULL: they read. */
    double *loss_sink;
    /* Backend memory (the trainer's step state): the step's part of the dropout streams, [0] for
     * mdl_dropout_stream's and [1] for mdl_lora_stream's, which the ops add on the device; the
     * streams are then made at step 0. NULL: they hold the step. */
    const uint64_t *stream_step;
} mdl_pass;

/* Backward: the gradients of parameter `param` and of every one declared after it are final. */
static inline void mdl_grads_ready(const mdl_pass *pass, const rt_params *p, int param) {
    if (pass->grads && pass->grads->ready) pass->grads->ready(pass->grads->user, rt_params_grad_from(p, param));
}

/* The dropout stream of call site `site` (0..4095; each model numbers its own sites). */
static inline uint64_t mdl_dropout_stream(const mdl_pass *p, int site) {
    RT_CHECK(site >= 0 && site < 4096, "dropout site %d", site);
    return RT_STREAM(RT_STREAM_DROPOUT, RT_STREAM_STEP_DROPOUT(p->stream_step ? 0 : p->step) |
                                            ((uint64_t)(p->micro & 0xff) << 12) | (uint64_t)site);
}
/* Where the ops find the step's part of mdl_dropout_stream's streams (NULL: in them) */
static inline const uint64_t *mdl_dropout_step(const mdl_pass *p) { return p->stream_step; }

/* The LoRA dropout streams of block site `site` (models/layers/lora.h): linear k of the block draws
 * this stream + k, k < 16. */
static inline uint64_t mdl_lora_stream(const mdl_pass *p, int site) {
    RT_CHECK(site >= 0 && site < (1 << 16), "LoRA dropout site %d", site);
    return RT_STREAM(RT_STREAM_LORA, RT_STREAM_STEP_LORA(p->stream_step ? 0 : p->step) |
                                         ((uint64_t)(p->micro & 0xff) << 20) | ((uint64_t)site << 4));
}
/* ... and of mdl_lora_stream's */
static inline const uint64_t *mdl_lora_step(const mdl_pass *p) { return p->stream_step ? p->stream_step + 1 : NULL; }

#endif
