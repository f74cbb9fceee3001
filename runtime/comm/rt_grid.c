/* Builds the pp x dp x tp grid from a world communicator by one split per dimension. A
 * dimension of size 1 gets rt_comm_self(), so tp = 1 (or dp = 1, pp = 1) adds no communicator
 * and no traffic. Every rank computes the same decision from (world size, tp, pp), so the
 * splits are entered by all ranks or by none. On CUDA the groups' device comms become NCCL, bootstrapped over the host comms
 * the splits made. */
#include "runtime/comm/rt_grid.h"

#include <stdio.h>
#include <string.h>

#ifdef TZ_USE_CUDA
#include "runtime/comm/rt_comm_nccl.h"
#endif

/* A group of `size` ranks (rt_comm_self() for one): those passing the same color, ordered by
 * rank-in-group. */
static rt_status grid_split(rt_comm *world, int size, int color, int rank, const char *name, rt_comm **out) {
    *out = rt_comm_self();
    if (size == 1) return RT_OK;
    rt_status st = world->ops->split(world->ctx, color, rank, out);
    if (st != RT_OK) {
        *out = rt_comm_self(); /* nothing to free */
        return st;
    }
    RT_CHECK((*out)->size == size && (*out)->rank == rank, "%s comm rank %d/%d, expected %d/%d", name, (*out)->rank,
             (*out)->size, rank, size);
    return RT_OK;
}

rt_status rt_grid_init(rt_comm *world, int tp, int pp, rt_grid *out) {
    rt_status st = RT_OK;
    rt_grid g;
    memset(&g, 0, sizeof g);
    g.world = world;
    g.tp = g.dp = g.pp = rt_comm_self();
    if (tp < 1) RT_FAIL(RT_ERR_CONFIG, "--tp %d: expected a positive tensor-parallel size", tp);
    if (pp < 1) RT_FAIL(RT_ERR_CONFIG, "--pp %d: expected a positive number of pipeline stages", pp);
    if (pp == 1 && world->size % tp != 0)
        RT_FAIL(RT_ERR_CONFIG, "--tp %d does not divide the world size %d (world = dp x tp)", tp, world->size);
    if (world->size % (tp * pp) != 0)
        RT_FAIL(RT_ERR_CONFIG, "--tp %d x --pp %d does not divide the world size %d (world = dp x pp x tp)", tp, pp,
                world->size);
    g.tp_size = tp;
    g.pp_size = pp;
    g.dp_size = world->size / (tp * pp);
    g.tp_rank = world->rank % tp;
    g.dp_rank = world->rank / tp % g.dp_size;
    g.pp_rank = world->rank / (tp * g.dp_size);
    RT_TRY(grid_split(world, g.tp_size, g.pp_rank * g.dp_size + g.dp_rank, g.tp_rank, "tp", &g.tp));
    RT_TRY(grid_split(world, g.dp_size, g.pp_rank * tp + g.tp_rank, g.dp_rank, "dp", &g.dp));
    RT_TRY(grid_split(world, g.pp_size, g.dp_rank * tp + g.tp_rank, g.pp_rank, "pp", &g.pp));
    g.tp_host = g.tp;
    g.dp_host = g.dp;
    g.pp_host = g.pp;
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
    rt_comm *tp = NULL, *dp = NULL, *pp = NULL;
    char why[512] = "";
    if (cuda_device < 0 || g->world->size == 1) return RT_OK;
    char layout[64];
    if (g->pp_size > 1)
        snprintf(layout, sizeof layout, "pp %d x dp %d x tp %d", g->pp_size, g->dp_size, g->tp_size);
    else
        snprintf(layout, sizeof layout, "dp %d x tp %d", g->dp_size, g->tp_size);
    RT_CHECK(g->tp == g->tp_host && g->dp == g->dp_host && g->pp == g->pp_host, "the grid already has device comms");
    /* agree first: a rank that cannot would leave the others waiting in the NCCL init */
    rt_status mine = grid_probe_nccl(cuda_device);
    if (mine != RT_OK) snprintf(why, sizeof why, "%s", rt_error_message());
    float worst = (float)mine;
    RT_TRY(g->world->ops->all_reduce(g->world->ctx, &worst, 1, RT_REDUCE_MAX));
    if (mine != RT_OK)
        RT_FAIL(mine, "--device cuda:%d on %d ranks (%s) needs an NCCL communicator on every rank's GPU: %s",
                cuda_device, g->world->size, layout, why);
    if (worst != 0.0f)
        RT_FAIL((rt_status)(int)worst,
                "--device cuda:%d on %d ranks: another rank cannot make an NCCL communicator "
                "on its GPU (%s; its log says why); every rank stops",
                cuda_device, g->world->size, rt_status_name((rt_status)(int)worst));
    if (g->tp_size > 1) RT_TRY(grid_nccl_init(g->tp_host, cuda_device, timeout_s, &tp));
    if (g->dp_size > 1) RT_TRY(grid_nccl_init(g->dp_host, cuda_device, timeout_s, &dp));
    if (g->pp_size > 1) RT_TRY(grid_nccl_init(g->pp_host, cuda_device, timeout_s, &pp));
    if (tp) g->tp = tp;
    if (dp) g->dp = dp;
    if (pp) g->pp = pp;
    return RT_OK;
fail:
    rt_comm_free(tp);
    rt_comm_free(dp);
    rt_comm_free(pp);
    return st;
}

void rt_grid_free(rt_grid *g) {
    if (!g) return;
    rt_comm *tp_host = g->tp_host != g->tp ? g->tp_host : NULL, *dp_host = g->dp_host != g->dp ? g->dp_host : NULL;
    rt_comm *pp_host = g->pp_host != g->pp ? g->pp_host : NULL;
    /* device comms first: an NCCL comm is bootstrapped over its host twin */
    rt_comm_free(g->tp);
    rt_comm_free(g->dp);
    rt_comm_free(g->pp);
    rt_comm_free(tp_host);
    rt_comm_free(dp_host);
    rt_comm_free(pp_host);
    g->tp = g->dp = g->pp = g->tp_host = g->dp_host = g->pp_host = NULL;
}
