/* Pipeline parallelism's schedule and its executor (issue 19): the 1F1B order of one stage
 * (PipeDream-Flush, Megatron's non-interleaved schedule) and the loop that runs it, moving
 * activations forward and their gradients back between neighbouring stages over the grid's pp
 * comm (rt_comm_p2p).
 *
 * Stage s of P over M micro-batches runs min(P - s - 1, M) forwards to fill the pipeline, then
 * alternates one forward and one backward while forwards remain, then the remaining
 * backwards. Every stage runs micro-batches' backwards in order 0..M-1, so gradients
 * accumulate in the order one process accumulates them, and holds at most min(P - s, M)
 * micro-batches between their forward and backward. With a forward and a backward of equal
 * length the pipeline idles (P - 1) / (M + P - 1) of the step (the bubble).
 *
 * The executor knows nothing of models: a stage is four callbacks. A transfer that the next
 * action needs goes in one batch with the send the last action left (Megatron's
 * send_forward_recv_backward and send_backward_recv_forward), so two neighbours sending to each
 * other at once cannot deadlock however MPI or NCCL buffers. */
#ifndef RT_PIPE_H
#define RT_PIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/base/rt_status.h"

typedef enum { RT_PIPE_FORWARD = 0, RT_PIPE_BACKWARD } rt_pipe_kind;

typedef struct {
    rt_pipe_kind kind;
    int micro;
} rt_pipe_action;

/* The 2M actions of stage `stage` of `stages` over `micro` micro-batches, into out (2M). */
void rt_pipe_1f1b(int stage, int stages, int micro, rt_pipe_action *out);
/* The most micro-batches that stage holds between forward and backward: min(P - s, M). */
int rt_pipe_in_flight(int stage, int stages, int micro);

/* One stage, as the executor sees it. On the first stage `in` and `din` are NULL; on the last,
 * `out` and `dout` are. Buffers are the caller's (backend memory, rt_pipe_buffers). */
typedef struct {
    void *ctx;
    /* Bytes of the activation leaving this stage for micro-batch m (what the next stage
     * receives; the same as the gradient coming back). */
    size_t (*out_bytes)(void *ctx, int micro);
    /* Bytes of the activation entering this stage for micro-batch m. */
    size_t (*in_bytes)(void *ctx, int micro);
    /* Forward of micro-batch m from in into out; keeps what its backward needs. */
    rt_status (*forward)(void *ctx, int micro, const void *in, void *out);
    /* Backward of micro-batch m: from dout, the gradient of its out, accumulates the stage's
     * parameter gradients and writes din, the gradient of its in. */
    rt_status (*backward)(void *ctx, int micro, const void *dout, void *din);
} rt_pipe_stage;

/* Four transfer buffers, each as large as the largest activation crossing that boundary. */
typedef struct {
    void *in, *out;   /* the received activation, the one to send */
    void *dout, *din; /* the received gradient, the one to send */
} rt_pipe_buffers;

/* A weight several stages hold (rt_param_spec.tied: a language model's embedding on the first
 * stage and its head's copy on the last; T5's shared table on three): members has one bit per
 * stage holding it, from each stage's holds (collective over pp, host memory). */
rt_status rt_pipe_tied_members(rt_comm *pp_host, bool holds, uint64_t *members);
/* Every member ends with the sum of all members' grad (n floats, backend memory): the lowest
 * member adds the others' in stage order and sends the sum back, so every copy holds the same
 * bits. Collective over the members (others return at once); scratch (n floats, backend
 * memory) is the lowest member's. */
rt_status rt_pipe_sum_tied(rt_comm *pp, uint64_t members, rt_backend *be, float *grad, size_t n, float *scratch);

/* Runs this rank's stage (pp->rank of pp->size) over `micro` micro-batches in 1F1B order,
 * exchanging with the neighbouring stages over pp. The first error (a callback's, or a
 * transfer's timeout) stops it; the neighbours then time out in turn. */
rt_status rt_pipe_run(rt_comm *pp, int micro, const rt_pipe_stage *stage, const rt_pipe_buffers *buf);

#endif
