/* The 1F1B schedule and its executor (see rt_pipe.h). */
#include "runtime/train/rt_pipe.h"

#include <stdbool.h>
#include <stdlib.h>

#include "runtime/comm/rt_launch.h"

void rt_pipe_1f1b(int stage, int stages, int micro, rt_pipe_action *out) {
    RT_CHECK(stages >= 1 && stage >= 0 && stage < stages && micro >= 1, "stage %d of %d, %d micro-batches", stage,
             stages, micro);
    int warm = stages - stage - 1, f = 0, b = 0, k = 0;
    if (warm > micro) warm = micro;
    while (f < warm) out[k++] = (rt_pipe_action){RT_PIPE_FORWARD, f++};
    while (f < micro) {
        out[k++] = (rt_pipe_action){RT_PIPE_FORWARD, f++};
        out[k++] = (rt_pipe_action){RT_PIPE_BACKWARD, b++};
    }
    while (b < micro) out[k++] = (rt_pipe_action){RT_PIPE_BACKWARD, b++};
}

int rt_pipe_in_flight(int stage, int stages, int micro) {
    const int n = stages - stage;
    return n < micro ? n : micro;
}

rt_status rt_pipe_run(rt_comm *pp, int micro, const rt_pipe_stage *stage, const rt_pipe_buffers *buf) {
    rt_status st = RT_OK;
    const int s = pp->rank, P = pp->size, n = 2 * micro;
    const bool first = s == 0, last = s == P - 1;
    rt_pipe_action *acts = rt_xmalloc((size_t)n * sizeof *acts);
    rt_pipe_1f1b(s, P, micro, acts);
    rt_p2p batch[2];
    int k = 0; /* batch[0..k): the send the last action left, then the receive this one needs */
    for (int i = 0; i < n; i++) {
        const rt_pipe_action a = acts[i];
        const size_t in = stage->in_bytes(stage->ctx, a.micro), out = stage->out_bytes(stage->ctx, a.micro);
        if (a.kind == RT_PIPE_FORWARD && !first)
            batch[k++] = (rt_p2p){.send = false, .peer = s - 1, .buf = buf->in, .bytes = in};
        if (a.kind == RT_PIPE_BACKWARD && !last)
            batch[k++] = (rt_p2p){.send = false, .peer = s + 1, .buf = buf->dout, .bytes = out};
        if (k) RT_TRY(rt_comm_p2p(pp, batch, k));
        k = 0;
        if (a.kind == RT_PIPE_FORWARD) {
            RT_TRY(stage->forward(stage->ctx, a.micro, first ? NULL : buf->in, last ? NULL : buf->out));
            if (!last) batch[k++] = (rt_p2p){.send = true, .peer = s + 1, .buf = buf->out, .bytes = out};
        } else {
            RT_TRY(stage->backward(stage->ctx, a.micro, last ? NULL : buf->dout, first ? NULL : buf->din));
            if (!first) batch[k++] = (rt_p2p){.send = true, .peer = s - 1, .buf = buf->din, .bytes = in};
        }
    }
    if (k) RT_TRY(rt_comm_p2p(pp, batch, k)); /* the last action's send */
fail:
    free(acts);
    return st;
}

rt_status rt_pipe_tied_members(rt_comm *pp_host, bool holds, uint64_t *members) {
    float bits[64] = {0};
    *members = 0;
    if (pp_host->size > 64) return rt_errorf(RT_ERR_CONFIG, "%d pipeline stages: at most 64", pp_host->size);
    bits[pp_host->rank] = holds ? 1.0f : 0.0f;
    rt_status st = pp_host->ops->all_reduce(pp_host->ctx, bits, (size_t)pp_host->size, RT_REDUCE_SUM);
    for (int s = 0; st == RT_OK && s < pp_host->size; s++)
        if (bits[s] > 0.5f) *members |= (uint64_t)1 << s;
    return st;
}

rt_status rt_pipe_sum_tied(rt_comm *pp, uint64_t members, rt_backend *be, float *grad, size_t n, float *scratch) {
    rt_status st = RT_OK;
    int owner = 0;
    while (owner < pp->size && !(members >> owner & 1)) owner++;
    if (!(members >> pp->rank & 1)) return RT_OK;
    const size_t bytes = n * sizeof(float);
    if (pp->rank != owner) { /* the copy's gradient to the owner, the sum back */
        rt_p2p send = {.send = true, .peer = owner, .buf = grad, .bytes = bytes};
        rt_p2p recv = {.send = false, .peer = owner, .buf = grad, .bytes = bytes};
        st = rt_comm_p2p(pp, &send, 1);
        return st == RT_OK ? rt_comm_p2p(pp, &recv, 1) : st;
    }
    for (int s = owner + 1; s < pp->size && st == RT_OK; s++) {
        if (!(members >> s & 1)) continue;
        rt_p2p recv = {.send = false, .peer = s, .buf = scratch, .bytes = bytes};
        st = rt_comm_p2p(pp, &recv, 1);
        if (st == RT_OK) rt_axpy(be, grad, 1.0f, scratch, n);
    }
    for (int s = owner + 1; s < pp->size && st == RT_OK; s++) {
        if (!(members >> s & 1)) continue;
        rt_p2p send = {.send = true, .peer = s, .buf = grad, .bytes = bytes};
        st = rt_comm_p2p(pp, &send, 1);
    }
    return st;
}
