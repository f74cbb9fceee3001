/* The process grid: world = pp x dp x tp, with Megatron's rank order (tp fastest, then dp,
 * then pp): tp_rank = rank % tp, dp_rank = (rank / tp) % dp, pp_rank = rank / (tp * dp). The tp
 * ranks of one model replica slice are adjacent, so with one node per slice the
 * tensor-parallel all-reduces, the chattiest traffic, stay inside a node.
 *
 * tp groups the ranks holding shards of one pipeline stage of one replica; dp groups the ranks
 * holding the same shard in different replicas (the gradient all-reduce and ZeRO run over dp);
 * pp groups the stages of one replica's shard, in stage order (pp rank = stage), between which
 * activations and their gradients travel point to point.
 *
 * Each group has two communicators with the same ranks, because the data lives in two places:
 *   device comm (tp, dp): buffers in the backend's memory: activations in the Megatron layers,
 *     the gradient slab's buckets, ZeRO's reduce-scatter and all-gather of the slab, shards
 *     gathered for a checkpoint. NCCL on CUDA (rt_grid_init_device).
 *   host comm (tp_host, dp_host): buffers in host memory: target and token counts, loss sums,
 *     the gradient norm's partial sums, the stop flag, evaluation results, the outcome of a
 *     checkpoint write or load. MPI (or threads, or self).
 * On CPU the two are one object (tp_host == tp), so CPU runs send exactly what they did
 * before there were two. */
#ifndef RT_GRID_H
#define RT_GRID_H

#include "runtime/comm/rt_comm.h"
#include "runtime/base/rt_status.h"

typedef struct {
    rt_comm *world;                       /* not owned; a host comm */
    rt_comm *tp, *dp, *pp;                /* device comms; owned; rt_comm_self() when that dimension is 1 */
    rt_comm *tp_host, *dp_host, *pp_host; /* host comms; owned; the same objects as tp, dp, pp until
                                          * rt_grid_init_device */
    int tp_size, dp_size, pp_size;
    int tp_rank, dp_rank, pp_rank;
} rt_grid;

/* Splits world into tp, dp and pp groups; collective over world. The device comms are the host
 * comms. RT_ERR_CONFIG when tp or pp < 1 or tp x pp does not divide the world size. */
rt_status rt_grid_init(rt_comm *world, int tp, int pp, rt_grid *out);
/* For a backend on cuda_device (its rt_backend.device): gives each group of more than one rank
 * an NCCL device comm, bootstrapped over (and linked to) its host comm. A CPU backend
 * (cuda_device < 0) keeps the host comms: RT_OK, no communication. Collective over world
 * otherwise. Every rank
 * first checks it can (a build with NCCL, the device present) and the ranks agree, so one
 * rank that cannot fails them all at once: RT_ERR_UNSUPPORTED naming what is missing (NCCL or
 * CUDA in the build, a GPU) or RT_ERR_CONFIG (no such device); the grid is then unchanged.
 * A grid of one rank needs no comm: RT_OK at once. Call once, before the comms are used. */
rt_status rt_grid_init_device(rt_grid *g, int cuda_device, double timeout_s);
/* Frees the tp and dp communicators, both kinds (not world); accepts NULL and a zeroed grid. */
void rt_grid_free(rt_grid *g);

#endif
