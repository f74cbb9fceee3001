/* ZeRO over the data-parallel group (DeepSpeed's stages 1 and 2, and optimizer offload), for
 * the parameter slab. The slab is cut into dp equal slices (its length padded up to a
 * multiple of dp; the padding, like the slab's alignment gaps, holds zeros). Each step:
 *   1. backward accumulates the full local gradient into p->grad (the model's contract);
 *   2. a reduce-scatter over dp leaves this rank the summed gradient of its slice only;
 *   3. the clipping norm is the sum of squares over the slices, summed over dp (and over tp
 *      for tensor-parallel shards, replicated parameters once), so it is the norm of the
 *      summed gradient, as plain data parallelism computes it;
 *   4. AdamW updates this rank's slice, with m and v kept for that slice only; a slice may cut
 *      through a parameter, so weight decay is applied per parameter sub-range;
 *   5. an all-gather over dp gives every rank the whole updated slab again.
 * Stage 2 also gives back the full gradient buffer between steps on the CPU backend (see
 * rt_zero_init). With offload the slice's fp32 master weights, gradient, m and v live in host
 * memory and the CPU backend's AdamW updates them; on the CPU backend that is the same code
 * path over host copies, so tests exercise it.
 *
 * Checkpoints keep the ordinary full layout: rt_zero_gather_state assembles full m and v in
 * p->m, p->v (collective over dp) for the checkpoint writer, and rt_zero_scatter_state takes
 * this rank's slice of whatever the checkpoint reader loaded, so a ZeRO run resumes at any dp
 * and with ZeRO off, and the reverse. */
#ifndef RT_ZERO_H
#define RT_ZERO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/rt_comm.h"
#include "runtime/rt_optim.h"
#include "runtime/rt_params.h"

typedef struct {
    rt_params *p;
    rt_comm *dp, *tp;   /* device comms (the slab's reduce-scatter and all-gather); not owned */
    rt_comm *dp_host, *tp_host; /* host comms for the norm's partial sums (dp, tp until set) */
    int stage;          /* 1 or 2 */
    bool offload;
    size_t padded;      /* slab length rounded up to a multiple of dp (p->param, p->grad hold this many) */
    size_t shard;       /* padded / dp: floats in every rank's slice */
    size_t begin;       /* this rank's slice is [begin, begin + shard) of the slab */
    float *gshard;      /* (shard) backend memory: the reduce-scatter's output, the summed gradient */
    float *m, *v;       /* (shard) AdamW moments: backend memory, or host memory with offload */
    /* offload: host copies of the slice, updated by host_be's AdamW */
    rt_backend *host_be; /* p->be when that is the CPU backend, else a CPU backend owned here */
    bool own_host_be;
    float *h_master, *h_grad;
    bool grad_released; /* stage 2: p->grad is given back until the next step */
} rt_zero;

/* Sets up ZeRO at stage (1 or 2; 0 only with offload on one rank is refused: offload needs a
 * stage, as in DeepSpeed) for p over dp. Re-allocates p->param and p->grad to the padded
 * length (contents kept), frees full moments if p has them, and allocates the slice's m and v
 * (zeroed). tp may be NULL. Logs the per-rank optimizer memory. */
rt_status rt_zero_init(rt_params *p, rt_comm *dp, rt_comm *tp, int stage, bool offload, rt_zero **out);
/* The groups' host comms (rt_grid.h), same ranks as dp and tp, for the clipping norm's partial
 * sums, which travel from host memory (until set: dp and tp themselves; an NCCL comm hands
 * host buffers to its host twin). Not owned. */
void rt_zero_set_host_comms(rt_zero *z, rt_comm *dp_host, rt_comm *tp_host);
/* Frees the slices; gives p back a gradient buffer if stage 2 had released it (p->m, p->v stay
 * NULL: the full moments exist only in checkpoints). Accepts NULL. */
void rt_zero_free(rt_zero *z);
/* A zeroed full gradient for the next backward (stage 2 allocates it again). */
rt_status rt_zero_begin_step(rt_zero *z);
/* Reduce-scatter of p->grad over dp into the slice's gradient; stage 2 then releases p->grad
 * on the CPU backend. Collective over dp. */
rt_status rt_zero_reduce_grads(rt_zero *z);
/* The global gradient norm for clipping (see above). Collective over dp and tp; every rank
 * gets the same bits. */
rt_status rt_zero_grad_norm(rt_zero *z, double *norm);
/* AdamW step t on this rank's slice (gradients times grad_scale), then the all-gather of the
 * parameters. Collective over dp. */
rt_status rt_zero_step(rt_zero *z, const rt_adamw_hparams *h, float grad_scale, int64_t t);
/* Full m and v in p->m, p->v (p->numel floats) for a checkpoint writer. Collective over dp. */
rt_status rt_zero_gather_state(rt_zero *z);
/* Frees what rt_zero_gather_state made (or what a checkpoint reader allocated). */
void rt_zero_release_state(rt_zero *z);
/* After a checkpoint reader filled p->param (and p->m, p->v when it had them): take this
 * rank's slice of m and v (zeros when absent), refresh the offloaded master weights, and free
 * the full moments. Local, no communication. */
rt_status rt_zero_scatter_state(rt_zero *z);

#endif
