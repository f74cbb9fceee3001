/* The optimizer step's scalars where the optimizer runs, so that a step needs no host round trip
 * between its backward and its update (issue 33): the trainer writes this step's AdamW scalars,
 * the backend sums the gradients' squares into sumsq, rt_step_finish derives the norm, the skip
 * decision and AdamW's gradient factor from it, and AdamW reads them there; the host reads the
 * record back once the step's work is done. The same code computes them on the host (the CPU
 * backend) and in a one-thread kernel (CUDA), so both backends clip with the same numbers, those
 * of the trainer's host path (rt_optim.h). */
#ifndef RT_STEP_STATE_H
#define RT_STEP_STATE_H

#include <math.h>
#include <stdint.h>

#include "runtime/backend/rt_adamw_scalars.h"

#ifdef __CUDACC__
#define RT_STEP_HD __host__ __device__
#else
#define RT_STEP_HD
#endif

/* In backend memory (rt_backend_alloc). */
typedef struct {
    double loss;              /* the step's summed loss: 0, then the heads add each micro-batch's (loss_into) */
    double sumsq;             /* the gradients' squared norm: 0, then sumsq_into adds */
    double norm;              /* sqrt(sumsq) / the loss scale */
    float coef;               /* what AdamW multiplies each gradient by: the clip factor / the loss scale */
    int32_t skip;             /* the norm is not finite: AdamW leaves weights and moments as they were */
    rt_adamw_scalars adam[2]; /* this step's AdamW scalars: [0] with weight decay, [1] without */
    /* the step's part of its dropout streams: RT_STREAM_STEP_DROPOUT and RT_STREAM_STEP_LORA of the
     * loop's step (mdl_pass.stream_step) */
    uint64_t stream_step[2];
} rt_step_state;

/* torch.nn.utils.clip_grad_norm_'s factor, min(1, max_norm / (norm + 1e-6)), computed in float
 * from the float norm as PyTorch does; 1 when max_norm <= 0 (clipping off). */
static inline RT_STEP_HD float rt_clip_factor(double norm, double max_norm) {
    if (max_norm <= 0) return 1.0f;
    const float coef = (float)max_norm / ((float)norm + 1e-6f);
    return coef < 1.0f ? coef : 1.0f;
}

/* norm, skip and coef from s->sumsq, under dynamic loss scaling by loss_scale (1: none; a power of
 * two, so the divisions are exact). */
static inline RT_STEP_HD void rt_step_finish(rt_step_state *s, double max_norm, double loss_scale) {
    s->norm = sqrt(s->sumsq) / loss_scale;
    s->skip = !isfinite(s->norm);
    s->coef = (float)(rt_clip_factor(s->norm, max_norm) / loss_scale);
}

#endif
