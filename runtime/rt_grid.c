/* Builds the dp x tp grid from a world communicator by two splits. A dimension of size 1
 * gets rt_comm_self(), so tp = 1 (or dp = 1) adds no communicator and no traffic. Every rank
 * computes the same decision from (world size, tp), so the splits are entered by all ranks
 * or by none. */
#include "runtime/rt_grid.h"

#include <string.h>

rt_status rt_grid_init(rt_comm *world, int tp, rt_grid *out) {
    rt_status st = RT_OK;
    rt_grid g;
    memset(&g, 0, sizeof g);
    g.world = world;
    if (tp < 1) RT_FAIL(RT_ERR_CONFIG, "--tp %d: expected a positive tensor-parallel size", tp);
    if (world->size % tp != 0)
        RT_FAIL(RT_ERR_CONFIG, "--tp %d does not divide the world size %d (world = dp x tp)", tp, world->size);
    g.tp_size = tp;
    g.dp_size = world->size / tp;
    g.tp_rank = world->rank % tp;
    g.dp_rank = world->rank / tp;
    g.tp = rt_comm_self();
    g.dp = rt_comm_self();
    if (g.tp_size > 1) RT_TRY(world->ops->split(world->ctx, g.dp_rank, g.tp_rank, &g.tp));
    if (g.dp_size > 1) RT_TRY(world->ops->split(world->ctx, g.tp_rank, g.dp_rank, &g.dp));
    RT_CHECK(g.tp->size == g.tp_size && g.tp->rank == g.tp_rank, "tp comm rank %d/%d, expected %d/%d", g.tp->rank,
             g.tp->size, g.tp_rank, g.tp_size);
    RT_CHECK(g.dp->size == g.dp_size && g.dp->rank == g.dp_rank, "dp comm rank %d/%d, expected %d/%d", g.dp->rank,
             g.dp->size, g.dp_rank, g.dp_size);
    *out = g;
    return RT_OK;
fail:
    rt_grid_free(&g);
    memset(out, 0, sizeof *out);
    return st;
}

void rt_grid_free(rt_grid *g) {
    if (!g) return;
    rt_comm_free(g->tp);
    rt_comm_free(g->dp);
    g->tp = g->dp = NULL;
}
