/* Builds the dp x tp grid from a world communicator by two splits. A dimension of size 1
 * gets rt_comm_self(), so tp = 1 (or dp = 1) adds no communicator and no traffic. Every rank
 * computes the same decision from (world size, tp), so the splits are entered by all ranks
 * or by none. On CUDA the groups' device comms become NCCL, bootstrapped over the host comms
 * the splits made. */
#include "runtime/rt_grid.h"

#include <stdio.h>
#include <string.h>

#ifdef TZ_USE_CUDA
#include "runtime/cuda/rt_comm_nccl.h"
#endif

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
    g.tp_host = g.tp;
    g.dp_host = g.dp;
    *out = g;
    return RT_OK;
fail:
    rt_grid_free(&g);
    memset(out, 0, sizeof *out);
    return st;
}

/* This rank's answer to "can I make NCCL comms on that device?", without communicating. */
static rt_status grid_probe_nccl(int cuda_device) {
#ifdef TZ_USE_CUDA
    return rt_comm_nccl_probe(cuda_device);
#else
    return rt_errorf(RT_ERR_UNSUPPORTED, "this build of tunezoo has no CUDA backend: install the CUDA toolkit and "
                                         "rebuild with -DUSE_CUDA=ON");
#endif
}

static rt_status grid_nccl_init(rt_comm *host, int cuda_device, double timeout_s, rt_comm **out) {
#ifdef TZ_USE_CUDA
    return rt_comm_nccl_init(host, cuda_device, timeout_s, out);
#else
    *out = NULL;
    return grid_probe_nccl(cuda_device);
#endif
}

rt_status rt_grid_init_device(rt_grid *g, int cuda_device, double timeout_s) {
    rt_status st = RT_OK;
    rt_comm *tp = NULL, *dp = NULL;
    char why[512] = "";
    if (cuda_device < 0 || g->tp_size * g->dp_size == 1) return RT_OK;
    RT_CHECK(g->tp == g->tp_host && g->dp == g->dp_host, "the grid already has device comms");
    /* agree first: a rank that cannot would leave the others waiting in the NCCL init */
    rt_status mine = grid_probe_nccl(cuda_device);
    if (mine != RT_OK) snprintf(why, sizeof why, "%s", rt_error_message());
    float worst = (float)mine;
    RT_TRY(g->world->ops->all_reduce(g->world->ctx, &worst, 1, RT_REDUCE_MAX));
    if (mine != RT_OK)
        RT_FAIL(mine, "--device cuda:%d on %d ranks (dp %d x tp %d) needs an NCCL communicator on every rank's GPU: %s",
                cuda_device, g->world->size, g->dp_size, g->tp_size, why);
    if (worst != 0.0f)
        RT_FAIL((rt_status)(int)worst, "--device cuda:%d on %d ranks: another rank cannot make an NCCL communicator "
                "on its GPU (%s; its log says why); every rank stops", cuda_device, g->world->size,
                rt_status_name((rt_status)(int)worst));
    if (g->tp_size > 1) RT_TRY(grid_nccl_init(g->tp_host, cuda_device, timeout_s, &tp));
    if (g->dp_size > 1) RT_TRY(grid_nccl_init(g->dp_host, cuda_device, timeout_s, &dp));
    if (tp) g->tp = tp;
    if (dp) g->dp = dp;
    return RT_OK;
fail:
    rt_comm_free(tp);
    rt_comm_free(dp);
    return st;
}

void rt_grid_free(rt_grid *g) {
    if (!g) return;
    rt_comm *tp_host = g->tp_host != g->tp ? g->tp_host : NULL, *dp_host = g->dp_host != g->dp ? g->dp_host : NULL;
    /* device comms first: an NCCL comm is bootstrapped over its host twin */
    rt_comm_free(g->tp);
    rt_comm_free(g->dp);
    rt_comm_free(tp_host);
    rt_comm_free(dp_host);
    g->tp = g->dp = g->tp_host = g->dp_host = NULL;
}
