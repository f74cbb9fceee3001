/* A classifier's pipeline stage, for any family (issue 19): the family describes its stage
 * with mdl_stage_model (its pieces: upload a batch, embed, the blocks, the head), and the
 * runner does the rest: a training step's micro-batches in 1F1B order through
 * runtime/train/rt_pipe.c, and evaluation's forward through the stages.
 *
 * Training keeps each in-flight micro-batch's activations: the family lays its activation
 * buffers out once per slot (rt_pipe_in_flight of them, use_slot), and micro-batch k lives in
 * slot k % slots from its forward to its backward, as Megatron-LM's 1F1B keeps them. With one
 * slot (the family's pp_recompute) it keeps only each micro-batch's input instead (the received
 * activation; the first stage keeps nothing) and the backward recomputes the stage's forward
 * from it, with the same dropout bits (the first stage embeds again), unless the blocks'
 * activations still hold that micro-batch: always so on the last stage, whose forward and
 * backward of a micro-batch are adjacent. Backwards run in
 * micro-batch order on every stage, so the gradients are those of one process accumulating the
 * micro-batches one after another, bit for bit. */
#ifndef MDL_STAGE_PIPE_H
#define MDL_STAGE_PIPE_H

#include <stddef.h>
#include <stdint.h>

#include "models/layers/pass.h"
#include "models/layers/stack.h"
#include "models/layers/stage.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/train/rt_batch.h"
#include "runtime/comm/rt_comm.h"

typedef struct {
    void *model;
    const char *family; /* for messages: "GPT-2" */
    rt_backend *be;
    rt_comm *pp;        /* the stages' comm: this is stage pp->rank of pp->size */
    mdl_stack *blocks;  /* residual 0 is the stage's input, out its output */
    int C, max_B, num_labels;
    size_t max_BT;
    /* Uploads b (ids, masks; the pooled rows on the last stage). */
    rt_status (*upload)(void *model, const rt_batch *b);
    /* The first stage: the uploaded batch's embeddings into the blocks' residual 0, and their
     * backward from demb (dL/d(residual 0)). */
    rt_status (*embed)(void *model, const rt_batch *b);
    void (*embed_bwd)(void *model, const rt_batch *b, const float *demb);
    /* The blocks over the uploaded batch; the backward from mdl_stack_dout, demb as
     * mdl_stack_backward gives it. */
    rt_status (*blocks_fwd)(void *model, const rt_batch *b, const mdl_pass *pass);
    rt_status (*blocks_bwd)(void *model, const rt_batch *b, const mdl_pass *pass, const float **demb);
    /* The last stage: the head from the blocks' output (the summed loss, gradients of
     * grad_scale * loss prepared when grad_scale > 0, logits to host_logits when non-NULL),
     * and its backward into mdl_stack_dout. */
    rt_status (*head_fwd)(void *model, const rt_batch *b, const mdl_pass *pass, float grad_scale, double *loss_sum,
                          float *host_logits);
    rt_status (*head_bwd)(void *model, const rt_batch *b, const mdl_pass *pass);
    /* Activation slots the family laid out (1: recompute) and the call that points its buffers
     * at slot k's; use_slot may be NULL with one slot. */
    int slots;
    void (*use_slot)(void *model, int slot);
    /* Optional: the floats evaluation's head_fwd writes to host_logits for b; NULL: b->B x
     * num_labels. */
    size_t (*result_floats)(void *model, const rt_batch *b);
} mdl_stage_model;

typedef struct mdl_stage_pipe mdl_stage_pipe;


/* For steps of up to max_micro micro-batches; sm is copied. */
rt_status mdl_stage_pipe_init(const mdl_stage_model *sm, int max_micro, mdl_stage_pipe **out);
void mdl_stage_pipe_free(mdl_stage_pipe *p);
/* One optimizer step's forward and backward of b[0..M) through every stage, with pass {seed,
 * step, micro m, training} for micro-batch m: accumulates this stage's gradients of
 * grad_scale * loss (a tied weight's, rt_param_spec.tied, are summed over its stages by the
 * caller: rt_pipe_sum_tied); *loss_sum is the summed loss on the last stage, 0 on the others. A classifier's batches (num_labels > 0) are checked first
 * (models/layers/heads.h), on every stage alike. */
rt_status mdl_stage_pipe_step(mdl_stage_pipe *p, const rt_batch *b, int M, uint64_t seed, int64_t step,
                              float grad_scale, double *loss_sum);
/* Evaluation: b through the stages one after another (nothing to overlap without a
 * backward); every stage gets the last stage's summed loss and, when host_logits is non-NULL,
 * its logits (B, num_labels; result_floats of them when the family says). */
rt_status mdl_stage_pipe_forward(mdl_stage_pipe *p, const rt_batch *b, double *loss_sum, float *host_logits);

#endif
