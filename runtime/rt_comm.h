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

#include <stddef.h>

#include "runtime/rt_status.h"

typedef enum { RT_REDUCE_SUM = 0, RT_REDUCE_MAX } rt_reduce_op;

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
} rt_comm_ops;

struct rt_comm {
    const rt_comm_ops *ops;
    void *ctx;
    int rank, size;
};

/* A communicator of one rank (static; rt_comm_free ignores it). */
rt_comm *rt_comm_self(void);
/* Frees a communicator from split or a constructor; accepts NULL and rt_comm_self(). */
void rt_comm_free(rt_comm *c);

#endif
