/* The counting comm (see rt_comm_stats.h). */
#include "runtime/comm/rt_comm_stats.h"

#include <stdlib.h>

typedef struct {
    rt_comm *inner;
    rt_comm_stats *stats;
} rt_stats_ctx;

static void rt_stats_add(rt_stats_ctx *c, rt_comm_op op, size_t bytes) {
    c->stats->calls[op]++;
    c->stats->bytes[op] += bytes;
}

static rt_status stats_all_reduce(void *ctx, float *buf, size_t n, rt_reduce_op op) {
    rt_stats_ctx *c = ctx;
    rt_stats_add(c, RT_COMM_OP_ALL_REDUCE, n * sizeof(float));
    return c->inner->ops->all_reduce(c->inner->ctx, buf, n, op);
}

static rt_status stats_reduce_scatter(void *ctx, float *out, const float *in, size_t n_out, rt_reduce_op op) {
    rt_stats_ctx *c = ctx;
    rt_stats_add(c, RT_COMM_OP_REDUCE_SCATTER, n_out * (size_t)c->inner->size * sizeof(float));
    return c->inner->ops->reduce_scatter(c->inner->ctx, out, in, n_out, op);
}

static rt_status stats_all_gather(void *ctx, float *out, const float *in, size_t n_in) {
    rt_stats_ctx *c = ctx;
    rt_stats_add(c, RT_COMM_OP_ALL_GATHER, n_in * sizeof(float));
    return c->inner->ops->all_gather(c->inner->ctx, out, in, n_in);
}

static rt_status stats_broadcast(void *ctx, void *buf, size_t bytes, int root) {
    rt_stats_ctx *c = ctx;
    rt_stats_add(c, RT_COMM_OP_BROADCAST, bytes);
    return c->inner->ops->broadcast(c->inner->ctx, buf, bytes, root);
}

static rt_status stats_barrier(void *ctx) {
    rt_stats_ctx *c = ctx;
    return c->inner->ops->barrier(c->inner->ctx);
}

static rt_status stats_split(void *ctx, int color, int key, rt_comm **out) {
    rt_stats_ctx *c = ctx;
    return c->inner->ops->split(c->inner->ctx, color, key, out);
}

static rt_status stats_all_reduce_start(void *ctx, float *buf, size_t n, rt_reduce_op op, void **req) {
    rt_stats_ctx *c = ctx;
    rt_stats_add(c, RT_COMM_OP_ALL_REDUCE, n * sizeof(float));
    return rt_comm_all_reduce_start(c->inner, buf, n, op, req);
}

static rt_status stats_all_gather_start(void *ctx, float *out, const float *in, size_t n_in, void **req) {
    rt_stats_ctx *c = ctx;
    rt_stats_add(c, RT_COMM_OP_ALL_GATHER, n_in * sizeof(float));
    return rt_comm_all_gather_start(c->inner, out, in, n_in, req);
}

static rt_status stats_wait(void *ctx, void *req) { return rt_comm_wait(((rt_stats_ctx *)ctx)->inner, req); }

static rt_status stats_p2p(void *ctx, rt_p2p *ops, int n) {
    rt_stats_ctx *c = ctx;
    for (int i = 0; i < n; i++)
        if (ops[i].send) rt_stats_add(c, RT_COMM_OP_P2P, ops[i].bytes);
    return rt_comm_p2p(c->inner, ops, n);
}

static void stats_free(void *ctx) { free(ctx); }

static const rt_comm_ops rt_comm_stats_ops = {
    .name = "stats",
    .all_reduce = stats_all_reduce,
    .reduce_scatter = stats_reduce_scatter,
    .all_gather = stats_all_gather,
    .broadcast = stats_broadcast,
    .barrier = stats_barrier,
    .split = stats_split,
    .free = stats_free,
    .all_reduce_start = stats_all_reduce_start,
    .wait = stats_wait,
    .p2p = stats_p2p,
    .all_gather_start = stats_all_gather_start,
};

rt_comm *rt_comm_stats_wrap(rt_comm *inner, rt_comm_stats *stats) {
    rt_stats_ctx *c = rt_xcalloc(1, sizeof *c);
    c->inner = inner;
    c->stats = stats;
    rt_comm *w = rt_xcalloc(1, sizeof *w);
    w->ops = &rt_comm_stats_ops;
    w->ctx = c;
    w->rank = inner->rank;
    w->size = inner->size;
    return w;
}

const char *rt_comm_op_name(rt_comm_op op) {
    static const char *const names[RT_COMM_OP_COUNT] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                                        "p2p"};
    return op >= 0 && op < RT_COMM_OP_COUNT ? names[op] : "?";
}
