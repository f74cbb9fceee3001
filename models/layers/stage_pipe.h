/* The pipeline stage runner, for every family (issue 19): a training step's micro-batches in
 * 1F1B order through runtime/train/rt_pipe.c, and evaluation's forward through the stages.
 *
 * A family describes its stage with mdl_stage_ops: what crosses each boundary (packed into one
 * buffer: T5 sends the hidden states, the encoder's output and the position bias), the stage's
 * forward from the received input and its backward. The one-stack families (GPT-2, BERT, GLM)
 * describe theirs with mdl_stage_model instead (upload a batch, embed, the mask, the head),
 * which this layer turns into the ops: the hidden states are the only thing that crosses.
 *
 * Training keeps each in-flight micro-batch's activations: the family lays its activation
 * buffers out once per slot (rt_pipe_in_flight of them, use_slot), and micro-batch k lives in
 * slot k % slots from its forward to its backward, as Megatron-LM's 1F1B keeps them. With one
 * slot (the family's pp_recompute) it keeps only each micro-batch's input instead (the received
 * activation; the first stage keeps nothing) and the backward runs the stage's forward again
 * from it, with the same dropout bits (the first stage embeds again), unless the activations
 * still hold that micro-batch: always so on the last stage, whose forward and backward of a
 * micro-batch are adjacent. Backwards run in micro-batch order on every stage, so the gradients
 * are those of one process accumulating the micro-batches one after another, bit for bit. */
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

/* A stage as the runner sees it. b is one of the family's batches (batch_size bytes each). */
typedef struct {
    void *model;
    const char *family; /* for messages: "GPT-2" */
    rt_backend *be;
    rt_comm *pp;       /* the stages' comm: this is stage pp->rank of pp->size */
    size_t batch_size; /* micro-batch k of a step lies at (const char *)b + k * batch_size */
    /* What stage `from` sends stage from + 1 for b (and its gradient back), in bytes, and the
     * most this stage receives and sends for any batch. */
    size_t (*boundary_bytes)(void *model, int from, const void *b);
    size_t max_in_bytes, max_out_bytes;
    /* Optional: a training micro-batch's checks, run on every stage for every micro-batch before
     * any work, so that a bad one stops all stages with its own message. */
    rt_status (*check)(void *model, const void *b);
    /* b through the stage from `in` (the previous stage's output; NULL on the first stage),
     * packing what the next stage needs into `out` (NULL: not wanted, as when the backward runs
     * the forward again). The last stage runs its head instead: *loss is the summed loss,
     * gradients of grad_scale * loss are prepared when grad_scale > 0, and evaluation's logits
     * go to host_logits when it is non-NULL. */
    rt_status (*forward)(void *model, const void *b, const mdl_pass *pass, const void *in, void *out, float grad_scale,
                         double *loss, float *host_logits);
    /* The backward from dout (the next stage's gradient of `out`; NULL on the last stage: the
     * loss's), writing the gradient of `in` to din (NULL on the first stage). */
    rt_status (*backward)(void *model, const void *b, const mdl_pass *pass, const void *dout, void *din);
    /* Activation slots the family laid out (1: recompute) and the call that points its buffers
     * at slot k's; use_slot may be NULL with one slot. */
    int slots;
    void (*use_slot)(void *model, int slot);
    /* Optional: the floats evaluation's last stage writes to host_logits for b; NULL: none. */
    size_t (*result_floats)(void *model, const void *b);
} mdl_stage_ops;

/* A one-stack family's stage: the hidden states (B, T, C) cross each boundary. */
typedef struct {
    void *model;
    const char *family; /* for messages: "GPT-2" */
    rt_backend *be;
    rt_comm *pp;       /* the stages' comm: this is stage pp->rank of pp->size */
    mdl_stack *blocks; /* residual 0 is the stage's input, out its output */
    int C, max_B, num_labels;
    size_t max_BT;
    /* Uploads b (ids, masks; the pooled rows on the last stage). */
    rt_status (*upload)(void *model, const rt_batch *b);
    /* The first stage: the uploaded batch's embeddings into the blocks' residual 0, and their
     * backward from demb (dL/d(residual 0)). */
    rt_status (*embed)(void *model, const rt_batch *b);
    void (*embed_bwd)(void *model, const rt_batch *b, const float *demb);
    /* The uploaded batch's attention mask: the runner runs the blocks over it. */
    mdl_stack_mask (*mask)(const void *model);
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

/* For steps of up to max_micro micro-batches; ops (sm) is copied. */
rt_status mdl_stage_pipe_init_ops(const mdl_stage_ops *ops, int max_micro, mdl_stage_pipe **out);
rt_status mdl_stage_pipe_init(const mdl_stage_model *sm, int max_micro, mdl_stage_pipe **out);
void mdl_stage_pipe_free(mdl_stage_pipe *p);
/* One optimizer step's forward and backward of b[0..M) through every stage, with pass {seed,
 * step, micro m, training} for micro-batch m: accumulates this stage's gradients of
 * grad_scale * loss (a tied weight's, rt_param_spec.tied, are summed over its stages by the
 * caller: rt_pipe_sum_tied); *loss_sum is the summed loss on the last stage, 0 on the others.
 * Every micro-batch is checked first (ops.check; a classifier's labels, models/layers/heads.h),
 * on every stage alike. */
rt_status mdl_stage_pipe_step(mdl_stage_pipe *p, const void *b, int M, uint64_t seed, int64_t step, float grad_scale,
                              double *loss_sum);
/* Evaluation: b through the stages one after another (nothing to overlap without a
 * backward); every stage gets the last stage's summed loss and, when host_logits is non-NULL,
 * its logits (result_floats of them: a one-stack classifier's B x num_labels unless the family
 * says). */
rt_status mdl_stage_pipe_forward(mdl_stage_pipe *p, const void *b, double *loss_sum, float *host_logits);

#endif
