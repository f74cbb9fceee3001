/* Collective communication: a second vtable beside the backend. Implementations: "self"
 * (one rank, every call a no-op), in-process threads (tests), MPI (CPU buffers) and NCCL
 * (GPU buffers, bootstrapped over MPI), all behind the same table. Models call these through
 * the Megatron parallel layers, so tp = 1 costs nothing.
 *
 * Every collective carries the communicator's timeout: a rank that never arrives makes the
 * others return RT_ERR_RUNTIME naming the communicator and, where it can be known, the rank,
 * instead of hanging. Buffers are float32 unless said otherwise. */
#ifndef RT_COMM_H
#define RT_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/base/rt_status.h"

typedef enum { RT_REDUCE_SUM = 0, RT_REDUCE_MAX } rt_reduce_op;

/* One point-to-point transfer of a batch (rt_comm_p2p): send `bytes` of buf to rank peer, or
 * receive them from it into buf. Host memory, or device memory on an NCCL comm. */
typedef struct {
    bool send;
    int peer; /* a rank of the communicator other than this one */
    void *buf;
    size_t bytes;
} rt_p2p;

typedef struct rt_comm rt_comm;

typedef struct rt_comm_ops {
    const char *name;
    rt_status (*all_reduce)(void *ctx, float *buf, size_t n, rt_reduce_op op);
    /* in (size * n_out) -> out (n_out): this rank's reduced chunk */
    rt_status (*reduce_scatter)(void *ctx, float *out, const float *in, size_t n_out, rt_reduce_op op);
    /* in (n_in) from every rank -> out (size * n_in), rank-major */
    rt_status (*all_gather)(void *ctx, float *out, const float *in, size_t n_in);
    rt_status (*broadcast)(void *ctx, void *buf, size_t bytes, int root);
    rt_status (*barrier)(void *ctx);
    /* A sub-communicator of the ranks passing the same color, ordered by key (MPI_Comm_split);
     * collective over this communicator. */
    rt_status (*split)(void *ctx, int color, int key, rt_comm **out);
    void (*free)(void *ctx); /* releases ctx (not the rt_comm itself) */
    /* Optional (NULL: the blocking all_reduce stands in): an all-reduce that may still run when
     * this returns, so that it overlaps other work; buf is not to be touched until
     * wait(*req) returns. Requests on one comm are started in the same order on every rank. */
    rt_status (*all_reduce_start)(void *ctx, float *buf, size_t n, rt_reduce_op op, void **req);
    rt_status (*wait)(void *ctx, void *req); /* completes and releases a request, with the timeout */
    /* Optional (NULL: the timeout is fixed): how long a collective waits for every rank from now
     * on; sub-communicators split afterwards inherit it. seconds > 0. */
    void (*set_timeout)(void *ctx, double seconds);
    /* Optional (NULL: none; pipeline stages need it): posts every transfer of ops[0..n) at once
     * and waits for all of them with the timeout (Megatron's batched isend/irecv), so two
     * neighbours that send to each other at the same time cannot deadlock. Between two ranks,
     * messages match in the order they were posted; a receive of another size than its send is
     * an error (except on NCCL, which cannot tell). A timeout breaks the comm, as a
     * collective's does. */
    rt_status (*p2p)(void *ctx, rt_p2p *ops, int n);
    /* Optional (NULL: the blocking all_gather stands in): all_gather that may still run when
     * this returns (ZeRO-3's prefetch of the next block); out is not to be read until
     * wait(*req) returns. Started in the same order on every rank, like all_reduce_start. */
    rt_status (*all_gather_start)(void *ctx, float *out, const float *in, size_t n_in, void **req);
} rt_comm_ops;

struct rt_comm {
    const rt_comm_ops *ops;
    void *ctx;
    int rank, size;
};

/* all_reduce_start where the comm has it, else the blocking all-reduce (*req NULL). */
static inline rt_status rt_comm_all_reduce_start(rt_comm *c, float *buf, size_t n, rt_reduce_op op, void **req) {
    *req = NULL;
    if (c->ops->all_reduce_start) return c->ops->all_reduce_start(c->ctx, buf, n, op, req);
    return c->ops->all_reduce(c->ctx, buf, n, op);
}
/* all_gather_start where the comm has it, else the blocking all-gather (*req NULL). */
static inline rt_status rt_comm_all_gather_start(rt_comm *c, float *out, const float *in, size_t n_in, void **req) {
    *req = NULL;
    if (c->ops->all_gather_start) return c->ops->all_gather_start(c->ctx, out, in, n_in, req);
    return c->ops->all_gather(c->ctx, out, in, n_in);
}
static inline rt_status rt_comm_wait(rt_comm *c, void *req) { return req ? c->ops->wait(c->ctx, req) : RT_OK; }
/* The comm's p2p, or RT_ERR_UNSUPPORTED naming it. */
static inline rt_status rt_comm_p2p(rt_comm *c, rt_p2p *ops, int n) {
    if (!c->ops->p2p) return rt_errorf(RT_ERR_UNSUPPORTED, "the %s comm has no point-to-point transfers", c->ops->name);
    return c->ops->p2p(c->ctx, ops, n);
}

/* A communicator of one rank (static; rt_comm_free ignores it). */
rt_comm *rt_comm_self(void);
/* Frees a communicator from split or a constructor; accepts NULL and rt_comm_self(). */
void rt_comm_free(rt_comm *c);

#endif
