/* ZeRO over the data-parallel group (DeepSpeed's stages 1, 2 and 3, and offload), for the
 * parameter slab.
 *
 * Stages 1 and 2: the slab is cut into dp equal slices (its length padded up to a multiple of
 * dp; the padding, like the slab's alignment gaps, holds zeros). Each step:
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
 * Stage 3 (rt_zero3.c) shards the parameters too, block by block, as FSDP and DeepSpeed do.
 * A block is a run of parameters that share a numbered name prefix ("h.3.", "encoder.block.3.";
 * the unnumbered runs, embeddings and heads, are blocks of their own). Each block is cut into
 * dp equal pieces and this rank keeps its piece of every block: the shard (with LoRA a block's
 * trainable and frozen parameters are two spans, cut each on its own: the frozen pieces have
 * values only, no gradient or moments; rt_zero_block). p->param and
 * p->grad are freed; the model reaches its parameters through p->source (rt_params.h), which
 *   - all-gathers a block when the model first asks for one of its parameters, and starts the
 *     all-gather of the next block in the pass's direction (one block ahead; asynchronous
 *     where the comm has all_gather_start, so it arrives while the model works on this one),
 *     keeping a window of RT_ZERO3_WINDOW blocks and dropping the least recently used;
 *   - hands out a zeroed gradient buffer for a block, and reduce-scatters it into this rank's
 *     gradient shard when the backward says the block is final (rt_zero_grads_ready), when
 *     the window needs its room, or at the end of the backward. Gradients add linearly, so
 *     a block flushed twice in a step still sums to the same gradient.
 * The gathers are in step with the model's calls, so every dp rank must make the same calls:
 * a rank with no examples in a micro-batch runs a stand-in whose gradients flush as zeros
 * (rt_zero_discard_grads, rt_trainer.c), or under pipeline stages, where micro-batches
 * interleave, one whose labels are all ignored. With --offload-params the shard lives in host memory and the host's AdamW
 * updates it in place; a gather copies the piece up first.
 *
 * Checkpoints keep the ordinary full layout: rt_zero_gather_state assembles full m and v in
 * p->m, p->v (and at stage 3 the full p->param) for the checkpoint writer, and
 * rt_zero_scatter_state takes this rank's slice of whatever the checkpoint reader loaded, so a
 * ZeRO run resumes at any dp and stage and with ZeRO off, and the reverse. */
#ifndef RT_ZERO_H
#define RT_ZERO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_optim.h"
#include "runtime/train/rt_params.h"

/* A run of the slab that stage 3 cuts into dp pieces: [off, off + n) in pieces of `piece` floats
 * (the last padded); this rank's piece sits at `at` in its shard. */
typedef struct {
    size_t off, n, piece, at;
} rt_zero_span;

/* The blocks stage 3 gathers and frees, from parameter `first` on. A block's trainable
 * parameters and its frozen ones (LoRA's base: they sit after every trainable one in the slab)
 * are two spans, each cut on its own: the trainable pieces have gradients and AdamW state, the
 * frozen ones only values. Gathered, a block is the trainable span's floats, then the frozen
 * span's. A block with nothing trainable has train.n 0 and train.off where the gradients after
 * it begin (rt_params_grad_from), so the blocks' train.off never decrease. */
typedef struct {
    int first;
    rt_zero_span train, frozen;
} rt_zero_block;

enum { RT_ZERO3_WINDOW = 3 };                   /* blocks gathered at once: in use, the one ahead, the one before */
enum { RT_ZERO3_SPARES = 2 * RT_ZERO3_WINDOW }; /* emptied window buffers kept for reuse */

/* An emptied window buffer kept for the next block of its size. */
typedef struct {
    float *buf;
    size_t floats;
} rt_zero_spare;

/* A window entry: a gathered block's values or a block's gradient (block -1: empty). */
typedef struct {
    int block;
    uint64_t used;
    float *buf;    /* (floats) backend memory */
    size_t floats; /* values: both spans' pieces times dp; gradients: the trainable span's */
    void *req[2];  /* a prefetch's all-gathers still under way (rt_comm_all_gather_start), or NULL */
} rt_zero_slot;

typedef struct rt_zero {
    rt_params *p;
    rt_comm *dp, *tp;           /* device comms (the slab's reduce-scatter and all-gather); not owned */
    rt_comm *dp_host, *tp_host; /* host comms for the norm's partial sums (dp, tp until set) */
    int stage;                  /* 1, 2 or 3 */
    bool offload;               /* the optimizer (and at stage 3 with offload_params, the parameters) on the host */
    bool offload_params;
    size_t sharded; /* stages 1-2: the floats cut into slices, the trainable ones (p->train_numel, all of the
                         * slab unless LoRA froze some: frozen ones stay whole on every rank) */
    size_t padded;  /* stages 1-2: sharded rounded up to a multiple of dp (p->grad holds this many; p->param too
                         * when nothing is frozen) */
    float *pgather; /* stages 1-2 with frozen parameters: (padded) the all-gather's buffer, which p->param's
                         * frozen tail cannot be */
    size_t shard;   /* floats in every rank's slice (stage 3: the sum of its trainable pieces) */
    size_t begin;   /* stages 1-2: this rank's slice is [begin, begin + shard) of the slab */
    float *gshard;  /* (shard) backend memory: the reduce-scatter's output, the summed gradient */
    float *m, *v;   /* (shard) AdamW moments: backend memory, or host memory with offload */
    /* offload: host copies of the slice, updated by host_be's AdamW */
    rt_backend *host_be; /* p->be when that is the CPU backend, else a CPU backend owned here */
    bool own_host_be;
    float *h_master, *h_grad;
    bool grad_released; /* stage 2: p->grad is given back until the next step */
    /* stage 3 (rt_zero3.c) */
    int n_blocks;
    rt_zero_block *blocks;
    int *block_of;       /* (p->n) each parameter's block */
    size_t max_piece;    /* the largest trainable piece (at least 1): the reduce-scatter's output */
    size_t max_gathered; /* the most floats a gathered block holds (at least 1) */
    float *pshard;       /* (shard) this rank's trainable pieces: backend memory, or h_master with offload_params */
    size_t frozen_shard; /* floats of this rank's frozen pieces (0 unless LoRA froze some) */
    float *fshard;       /* (frozen_shard) this rank's frozen pieces: backend memory, host memory with offload_params */
    float *rs_out;       /* (largest piece) a reduce-scatter's output, before it joins gshard */
    rt_zero_slot pslots[RT_ZERO3_WINDOW], gslots[RT_ZERO3_WINDOW];
    rt_zero_spare spares[RT_ZERO3_SPARES];
    uint64_t clock;
    int last_block; /* the block asked for last: the pass's direction picks the one to prefetch */
    rt_params_source source;
    rt_status error;     /* the first failed gather or flush (they happen inside the model's calls) */
    char error_msg[512]; /* and its message */
    size_t gathers;      /* blocks gathered so far */
    bool discard;        /* the micro-batch under way is a stand-in: its gradients flush as zeros */
} rt_zero;

typedef struct {
    int stage;              /* 1, 2 or 3 (0 is refused: offload needs a stage, as in DeepSpeed) */
    bool offload_optimizer; /* the shard's master weights, gradient, m and v in host memory */
    bool offload_params;    /* stage 3: the parameter shard in host memory (implies offload_optimizer) */
} rt_zero_opts;

/* Sets up ZeRO for p over dp. Stages 1-2 shard the trainable parameters (with LoRA, the adapters:
 * the frozen base stays whole on every rank, as it has no gradient or moments) and re-allocate
 * p->param and p->grad to the padded length (contents kept; p->param stays as it is when some
 * are frozen); stage 3 keeps this rank's pieces of p->param (the frozen base's too) and frees it
 * and p->grad. Frees
 * full moments if p has them and allocates the slice's m and v (zeroed). tp may be NULL. Logs
 * the per-rank memory. */
rt_status rt_zero_init(rt_params *p, rt_comm *dp, rt_comm *tp, const rt_zero_opts *o, rt_zero **out);
/* The groups' host comms (rt_grid.h), same ranks as dp and tp, for the clipping norm's partial
 * sums, which travel from host memory (until set: dp and tp themselves; an NCCL comm hands
 * host buffers to its host twin). Not owned. */
void rt_zero_set_host_comms(rt_zero *z, rt_comm *dp_host, rt_comm *tp_host);
/* Frees the slices; gives p back a gradient buffer if stage 2 had released it (p->m, p->v stay
 * NULL: the full moments exist only in checkpoints). At stage 3 the parameters stay only where
 * rt_zero_gather_params put them (p->param NULL otherwise) and p->source is cleared. Accepts
 * NULL. */
void rt_zero_free(rt_zero *z);
/* A zeroed full gradient for the next backward (stage 2 allocates it again). */
rt_status rt_zero_begin_step(rt_zero *z);
/* Reduce-scatter of p->grad over dp into the slice's gradient; stage 2 then releases p->grad
 * on the CPU backend; stage 3 flushes the blocks still open and reports a gather or flush that
 * failed during the backward. Collective over dp. */
rt_status rt_zero_reduce_grads(rt_zero *z);
/* Stage 3, from the backward (rt_grads_hook): the gradients at slab offsets >= first are final,
 * so every open block at or above first is reduce-scattered now. No-op below stage 3. */
void rt_zero_grads_ready(rt_zero *z, size_t first);
/* Stage 3: the micro-batch about to run is a stand-in (this rank has no examples in it, but its
 * gathers and flushes must stay in step with the other ranks'): its gradients count as zeros.
 * No-op below stage 3. */
void rt_zero_discard_grads(rt_zero *z);
/* Stage 3, after each micro-batch's backward: every open block is reduce-scattered (the same
 * calls on every rank, so a stand-in's blocks hold nothing of an earlier micro-batch), and
 * discarding ends. No-op below stage 3. */
rt_status rt_zero_micro_done(rt_zero *z);
/* Stage 3: the whole parameters in p->param (an all-gather of every block; collective over dp),
 * read directly by the model until rt_zero_shard_params, for a pass that does not run in step
 * on every rank (evaluation) and for after training. No-op below stage 3. */
rt_status rt_zero_gather_params(rt_zero *z);
/* Stage 3: back to the shard, taking this rank's pieces of p->param when `take` (a checkpoint
 * reader wrote it), and freeing p->param. Local. No-op below stage 3. */
void rt_zero_shard_params(rt_zero *z, bool take);
/* The global gradient norm for clipping (see above). Collective over dp and tp; every rank
 * gets the same bits. */
rt_status rt_zero_grad_norm(rt_zero *z, double *norm);
/* AdamW step t on this rank's slice (gradients times grad_scale), then the all-gather of the
 * parameters. Collective over dp. */
rt_status rt_zero_step(rt_zero *z, const rt_adamw_hparams *h, float grad_scale, int64_t t);
/* Full m and v in p->m, p->v (p->train_numel floats) for a checkpoint writer, and at stage 3 the full
 * p->param (rt_zero_gather_params). Collective over dp. */
rt_status rt_zero_gather_state(rt_zero *z);
/* Frees what rt_zero_gather_state made (or what a checkpoint reader allocated); stage 3 goes
 * back to its shard (rt_zero_shard_params without taking). */
void rt_zero_release_state(rt_zero *z);
/* After a checkpoint reader filled p->param (and p->m, p->v when it had them): take this
 * rank's slice of m and v (zeros when absent), refresh the offloaded master weights (stage 3:
 * take the parameter pieces, rt_zero_shard_params), and free the full moments. Local, no
 * communication. */
rt_status rt_zero_scatter_state(rt_zero *z);

/* rt_zero3.c: stage 3's blocks, window and flushes (the functions above call these). */
/* Cuts the slab into blocks and sets z->shard and z->frozen_shard (the sums of this rank's
 * trainable and frozen pieces). */
void rt_zero3_cut(rt_zero *z);
/* Takes this rank's pieces of p->param into the shard (and the offloaded master copy), frees
 * p->param and p->grad (on staging, a host backend, when the model was built there: see
 * rt_backend.params_staging), and points p->source at the window. */
rt_status rt_zero3_init(rt_zero *z, rt_backend *staging);
void rt_zero3_free(rt_zero *z);
rt_status rt_zero3_flush_all(rt_zero *z);
void rt_zero3_drop_window(rt_zero *z);
/* This rank's piece of a block's span in the slab: [lo, hi), clipped to the span (the last
 * pieces are short or empty where dp does not divide it). */
void rt_zero3_piece(const rt_zero *z, const rt_zero_span *s, size_t *lo, size_t *hi);
/* This rank's piece of a parameter's summed gradient (after rt_zero_reduce_grads), when the
 * parameter is a block of its own (a tied one, rt_param_spec.tied): every stage holding it cuts
 * the same pieces, so the stages sum them piece by piece. */
void rt_zero3_grad_piece(const rt_zero *z, int param, float **grad, size_t *n);
/* Copies this rank's pieces of the trainable spans (or, when `frozen`, of the frozen ones)
 * between a full slab (p->param's layout) and a shard, into the shard when to_shard; each is in
 * host memory when its flag says so, else the backend's. */
void rt_zero3_pieces(rt_zero *z, bool frozen, float *full, bool full_host, float *shard, bool shard_host,
                     bool to_shard);
/* Assembles the full slab `full` (backend memory) from every rank's shard of the trainable
 * spans and, when frozen_shard is not NULL, of the frozen ones: the parameters, or (frozen_shard
 * NULL) m or v. Shards in host memory when on_host. Collective over dp. */
rt_status rt_zero3_gather_full(rt_zero *z, const float *shard, const float *frozen_shard, bool on_host, float *full);

#endif
