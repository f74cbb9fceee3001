/* The process grid: world = dp x tp, with Megatron's rank order. The tp ranks of one model
 * replica are adjacent (tp_rank = rank % tp, dp_rank = rank / tp), so with one node per
 * replica slice the tensor-parallel all-reduces, the chattiest traffic, stay inside a node.
 *
 * tp groups the ranks holding shards of one replica; dp groups the ranks holding the same
 * shard in different replicas (the gradient all-reduce and ZeRO run over dp). */
#ifndef RT_GRID_H
#define RT_GRID_H

#include "runtime/rt_comm.h"
#include "runtime/rt_status.h"

typedef struct {
    rt_comm *world;   /* not owned */
    rt_comm *tp, *dp; /* owned; rt_comm_self() when that dimension is 1 */
    int tp_size, dp_size;
    int tp_rank, dp_rank;
} rt_grid;

/* Splits world into tp and dp groups; collective over world. RT_ERR_CONFIG when tp < 1 or tp
 * does not divide the world size. */
rt_status rt_grid_init(rt_comm *world, int tp, rt_grid *out);
/* Frees the tp and dp communicators (not world); accepts NULL and a zeroed grid. */
void rt_grid_free(rt_grid *g);

#endif
