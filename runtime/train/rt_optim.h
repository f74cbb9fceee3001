/* AdamW over the whole parameter slab, with weight decay skipped for no_decay parameters
 * (biases and norm weights), and global-norm gradient clipping as
 * torch.nn.utils.clip_grad_norm_ computes it. */
#ifndef RT_OPTIM_H
#define RT_OPTIM_H

#include <stdint.h>

#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_params.h"

typedef struct {
    double lr; /* this step's learning rate (from the schedule) */
    double beta1, beta2, eps, weight_decay;
} rt_adamw_hparams;

/* Global L2 norm of all gradients. */
double rt_grad_norm(const rt_params *p);
/* The same over a tensor-parallel group, for clipping: replicated parameters' squares
 * counted once (every tp rank holds the same gradient), sharded ones summed over the ranks.
 * Collective over tp, the group's host comm (rt_grid.h: the partial sums travel from host
 * memory); every rank gets the same bits (double-float pairs, added in rank order). With one
 * rank this is rt_grad_norm. */
rt_status rt_grad_norm_tp(const rt_params *p, rt_comm *tp, double *norm);
/* The same over pipeline stages too: each stage's squares (rt_grad_norm_tp's sum before the
 * root) added in stage order over pp, the stages' host comm; every rank gets the same bits. */
rt_status rt_grad_norm_grid(const rt_params *p, rt_comm *tp, rt_comm *pp, double *norm);
/* *norm becomes the norm of the concatenation of every rank's part of c (its square summed in
 * rank order, the same bits on every rank): how a stage's ZeRO norm joins the other stages'. */
rt_status rt_norm_over(rt_comm *c, double *norm);
/* One AdamW step t (t >= 1) with gradients multiplied by grad_scale first (the clip factor,
 * rt_clip_factor in runtime/backend/rt_step_state.h). */
rt_status rt_adamw_step(rt_params *p, const rt_adamw_hparams *h, float grad_scale, int64_t t);

/* The same step on the backend without a host round trip (the backend has the step ops):
 * rt_step_scalars fills a host record with step t's AdamW scalars for both decay groups (the
 * numbers rt_adamw_step's calls compute), sumsq 0, for the caller to upload; after the backend's
 * sumsq_into and step_finish, rt_adamw_step_on updates every trainable run from the state s
 * (backend memory), the same weights and moments as rt_adamw_step with s's coef, and none when
 * s->skip. */
void rt_step_scalars(rt_step_state *s, const rt_adamw_hparams *h, int64_t t);
rt_status rt_adamw_step_on(rt_params *p, const rt_step_state *s);

#endif
