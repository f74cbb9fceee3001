/* Collective communication: a second vtable beside the backend. Implementations: "self"
 * (one rank, every call a no-op) here; MPI for CPU buffers, NCCL for GPU buffers and
 * in-process threads for tests plug in behind the same table. Models call these through the
 * Megatron parallel layers, so tp = 1 costs nothing. */
#ifndef RT_COMM_H
#define RT_COMM_H

#include <stddef.h>

#include "runtime/rt_status.h"

typedef enum { RT_REDUCE_SUM = 0, RT_REDUCE_MAX } rt_reduce_op;

typedef struct rt_comm_ops {
    const char *name;
    rt_status (*all_reduce)(void *ctx, float *buf, size_t n, rt_reduce_op op);
    /* in (size * n_out) -> out (n_out): this rank's reduced chunk */
    rt_status (*reduce_scatter)(void *ctx, float *out, const float *in, size_t n_out, rt_reduce_op op);
    /* in (n_in) from every rank -> out (size * n_in), rank-major */
    rt_status (*all_gather)(void *ctx, float *out, const float *in, size_t n_in);
    rt_status (*broadcast)(void *ctx, void *buf, size_t bytes, int root);
    rt_status (*barrier)(void *ctx);
} rt_comm_ops;

typedef struct rt_comm {
    const rt_comm_ops *ops;
    void *ctx;
    int rank, size;
} rt_comm;

/* A communicator of one rank. */
rt_comm *rt_comm_self(void);

#endif
