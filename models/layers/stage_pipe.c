/* The pipeline stage runner (see stage_pipe.h); the schedule and the transfers are
 * runtime/train/rt_pipe.c's. */
#include "models/layers/stage_pipe.h"

#include <stdlib.h>
#include <string.h>

#include "models/layers/heads.h"
#include "runtime/train/rt_pipe.h"

struct mdl_stage_pipe {
    mdl_stage_ops ops;
    mdl_stage_model stack; /* a one-stack family's description: ops.model points here */
    mdl_stage stage;
    int max_micro;
    bool keep;           /* the family keeps micro-batch k's activations in its slot k % ops.slots */
    int saved_slots;     /* recompute: saved inputs, micro-batch k in slot k % saved_slots (not on the first stage) */
    size_t saved_stride; /* bytes between saved inputs */
    void *saved;         /* backend memory */
    rt_pipe_buffers buf;
    unsigned char *h_result; /* host: the last stage's loss (a double) and logits (grown to the largest) */
    size_t result_bytes;
    int held; /* the micro-batch the activations hold, -1: none */
    /* this step's */
    const char *b;
    uint64_t seed;
    int64_t step;
    float grad_scale;
    double loss_sum;
};

static const void *pipe_batch(const mdl_stage_pipe *p, int k) { return p->b + (size_t)k * p->ops.batch_size; }

static mdl_pass pipe_pass(const mdl_stage_pipe *p, int micro) {
    return (mdl_pass){.seed = p->seed, .step = p->step, .micro = micro, .training = true};
}

static size_t pipe_out_bytes(void *ctx, int k) {
    const mdl_stage_pipe *p = ctx;
    return p->ops.boundary_bytes(p->ops.model, p->stage.index, pipe_batch(p, k));
}

static size_t pipe_in_bytes(void *ctx, int k) {
    const mdl_stage_pipe *p = ctx;
    return p->ops.boundary_bytes(p->ops.model, p->stage.index - 1, pipe_batch(p, k));
}

static void pipe_use_slot(const mdl_stage_pipe *p, int k) {
    if (p->ops.use_slot) p->ops.use_slot(p->ops.model, k % p->ops.slots);
}

static void *pipe_saved_input(const mdl_stage_pipe *p, int k) {
    return (char *)p->saved + (size_t)(k % p->saved_slots) * p->saved_stride;
}

static rt_status pipe_forward(void *ctx, int k, const void *in, void *out) {
    mdl_stage_pipe *p = ctx;
    const mdl_pass pass = pipe_pass(p, k);
    double loss = 0;
    pipe_use_slot(p, k);
    if (p->saved && in) rt_copy(p->ops.be, pipe_saved_input(p, k), in, pipe_in_bytes(p, k));
    p->held = k;
    rt_status st = p->ops.forward(p->ops.model, pipe_batch(p, k), &pass, in, out, p->grad_scale, &loss, NULL);
    p->loss_sum += loss;
    return st;
}

static rt_status pipe_backward(void *ctx, int k, const void *dout, void *din) {
    mdl_stage_pipe *p = ctx;
    const mdl_pass pass = pipe_pass(p, k);
    rt_status st = RT_OK;
    pipe_use_slot(p, k);            /* its forward's activations */
    if (!p->keep && p->held != k) { /* recompute: the forward again, from the kept input */
        double unused = 0;
        RT_CHECK(!mdl_stage_is_last(p->stage), "%s: the last stage's backward of %d follows another forward",
                 p->ops.family, k);
        const void *in = p->saved ? pipe_saved_input(p, k) : NULL;
        RT_TRY(p->ops.forward(p->ops.model, pipe_batch(p, k), &pass, in, NULL, 0.0f, &unused, NULL));
        p->held = k;
    }
    RT_TRY(p->ops.backward(p->ops.model, pipe_batch(p, k), &pass, dout, din));
fail:
    return st;
}

void mdl_stage_pipe_free(mdl_stage_pipe *p) {
    if (!p) return;
    free(p->h_result);
    void *bufs[5] = {p->saved, p->buf.in, p->buf.out, p->buf.dout, p->buf.din};
    for (int i = 0; i < 5; i++)
        if (bufs[i]) rt_free_device(p->ops.be, bufs[i]);
    free(p);
}

/* A runner for ops; with a one-stack family's description, ops.model is the runner's copy of it. */
static rt_status pipe_create(const mdl_stage_ops *ops, const mdl_stage_model *stack, int max_micro,
                             mdl_stage_pipe **out) {
    rt_status st = RT_OK;
    mdl_stage_pipe *p = rt_xcalloc(1, sizeof *p);
    *out = NULL;
    p->ops = *ops;
    if (stack) {
        p->stack = *stack;
        p->ops.model = &p->stack;
    }
    ops = &p->ops;
    const char *family = ops->family;
    p->stage = (mdl_stage){ops->pp->rank, ops->pp->size};
    p->held = -1;
    if (max_micro < 1) RT_FAIL(RT_ERR_CONFIG, "%s pipeline: %d micro-batches per step", family, max_micro);
    p->max_micro = max_micro;
    p->result_bytes = sizeof(double);
    p->h_result = rt_xmalloc(p->result_bytes);
    const int in_flight = rt_pipe_in_flight(p->stage.index, p->stage.count, max_micro);
    p->keep = ops->slots > 1;
    if (p->keep && (ops->slots < in_flight || !ops->use_slot))
        RT_FAIL(RT_ERR_CONFIG, "%s pipeline: %d activation slots for %d micro-batches in flight", family, ops->slots,
                in_flight);
    /* nothing comes into the first stage, nothing goes out of the last */
    const size_t in_bytes = mdl_stage_is_first(p->stage) ? 0 : ops->max_in_bytes;
    const size_t out_bytes = mdl_stage_is_last(p->stage) ? 0 : ops->max_out_bytes;
    void **bufs[4] = {&p->buf.in, &p->buf.din, &p->buf.out, &p->buf.dout};
    for (int i = 0; i < 4; i++) {
        const size_t bytes = i < 2 ? in_bytes : out_bytes;
        if (bytes) RT_TRY(rt_backend_alloc(ops->be, bytes, "pipeline: transfer buffers", bufs[i]));
    }
    if (!p->keep && in_bytes) { /* recompute (or one micro-batch in flight): keep the inputs */
        p->saved_slots = in_flight;
        p->saved_stride = (in_bytes + 63) & ~(size_t)63;
        RT_TRY(rt_backend_alloc(ops->be, (size_t)p->saved_slots * p->saved_stride,
                                "pipeline: the micro-batches' stage inputs", &p->saved));
    }
    *out = p;
    return RT_OK;
fail:
    mdl_stage_pipe_free(p);
    return st;
}

rt_status mdl_stage_pipe_init_ops(const mdl_stage_ops *ops, int max_micro, mdl_stage_pipe **out) {
    return pipe_create(ops, NULL, max_micro, out);
}

/* ---- a one-stack family's stage: mdl_stage_model as ops ---- */

static size_t stack_boundary_bytes(void *ctx, int from, const void *bv) {
    const mdl_stage_model *m = ctx;
    const rt_batch *b = bv;
    (void)from; /* the hidden states cross every boundary */
    return (size_t)b->B * b->T * m->C * sizeof(float);
}

static rt_status stack_check(void *ctx, const void *b) {
    const mdl_stage_model *m = ctx;
    return mdl_cls_check_batch(m->family, b, m->num_labels);
}

static rt_status stack_forward(void *ctx, const void *bv, const mdl_pass *pass, const void *in, void *out,
                               float grad_scale, double *loss, float *host_logits) {
    const mdl_stage_model *m = ctx;
    const rt_batch *b = bv;
    rt_status st = m->upload(m->model, b);
    if (st != RT_OK) return st;
    if (in)
        rt_copy(m->be, mdl_stack_input(m->blocks), in, stack_boundary_bytes(ctx, 0, b));
    else
        st = m->embed(m->model, b); /* the first stage */
    const mdl_stack_mask mask = m->mask(m->model);
    if (st == RT_OK) st = mdl_stack_forward(m->blocks, b->B, b->T, &mask, pass);
    if (st != RT_OK) return st;
    if (m->pp->rank < m->pp->size - 1) {
        if (out) rt_copy(m->be, out, m->blocks->out, stack_boundary_bytes(ctx, 0, b));
        return RT_OK;
    }
    return m->head_fwd(m->model, b, pass, grad_scale, loss, host_logits);
}

static rt_status stack_backward(void *ctx, const void *bv, const mdl_pass *pass, const void *dout, void *din) {
    const mdl_stage_model *m = ctx;
    const rt_batch *b = bv;
    const size_t bytes = stack_boundary_bytes(ctx, 0, b);
    rt_status st = RT_OK;
    if (dout)
        rt_copy(m->be, mdl_stack_dout(m->blocks), dout, bytes);
    else
        RT_TRY(m->head_bwd(m->model, b, pass)); /* the last stage: its loss's gradient */
    const float *demb = NULL;
    const mdl_stack_mask mask = m->mask(m->model);
    RT_TRY(mdl_stack_backward(m->blocks, b->B, b->T, &mask, pass, mdl_stack_dout(m->blocks), &demb));
    if (din)
        rt_copy(m->be, din, demb, bytes);
    else
        m->embed_bwd(m->model, b, demb);
fail:
    return st;
}

static void stack_use_slot(void *ctx, int slot) {
    const mdl_stage_model *m = ctx;
    m->use_slot(m->model, slot);
}

static size_t stack_result_floats(void *ctx, const void *bv) {
    const mdl_stage_model *m = ctx;
    const rt_batch *b = bv;
    return m->result_floats ? m->result_floats(m->model, b) : (size_t)b->B * m->num_labels;
}

rt_status mdl_stage_pipe_init(const mdl_stage_model *sm, int max_micro, mdl_stage_pipe **out) {
    const size_t act = sm->max_BT * (size_t)sm->C * sizeof(float);
    const mdl_stage_ops ops = {.family = sm->family,
                               .be = sm->be,
                               .pp = sm->pp,
                               .batch_size = sizeof(rt_batch),
                               .boundary_bytes = stack_boundary_bytes,
                               .max_in_bytes = act,
                               .max_out_bytes = act,
                               .check = sm->num_labels > 0 ? stack_check : NULL,
                               .forward = stack_forward,
                               .backward = stack_backward,
                               .slots = sm->slots,
                               .use_slot = sm->use_slot ? stack_use_slot : NULL,
                               .result_floats = stack_result_floats};
    return pipe_create(&ops, sm, max_micro, out);
}

/* ---- the runner ---- */

rt_status mdl_stage_pipe_step(mdl_stage_pipe *p, const void *b, int M, uint64_t seed, int64_t step, float grad_scale,
                              double *loss_sum) {
    rt_status st = RT_OK;
    *loss_sum = 0;
    if (M < 1 || M > p->max_micro)
        return rt_errorf(RT_ERR_CONFIG, "%s pipeline: %d micro-batches, sized for 1 to %d", p->ops.family, M,
                         p->max_micro);
    p->b = b;
    for (int k = 0; k < M && p->ops.check; k++) RT_TRY(p->ops.check(p->ops.model, pipe_batch(p, k)));
    p->held = -1;
    p->seed = seed;
    p->step = step;
    p->grad_scale = grad_scale;
    p->loss_sum = 0;
    const rt_pipe_stage stage = {.ctx = p,
                                 .out_bytes = pipe_out_bytes,
                                 .in_bytes = pipe_in_bytes,
                                 .forward = pipe_forward,
                                 .backward = pipe_backward};
    RT_TRY(rt_pipe_run(p->ops.pp, M, &stage, &p->buf));
    *loss_sum = p->loss_sum;
fail:
    return st;
}

rt_status mdl_stage_pipe_forward(mdl_stage_pipe *p, const void *b, double *loss_sum, float *host_logits) {
    rt_status st = RT_OK;
    const mdl_stage_ops *ops = &p->ops;
    const int s = p->stage.index;
    const bool last = mdl_stage_is_last(p->stage);
    const size_t floats = ops->result_floats ? ops->result_floats(ops->model, b) : 0;
    const size_t result = sizeof(double) + floats * sizeof(float);
    const mdl_pass pass = {.training = false};
    if (result > p->result_bytes) {
        free(p->h_result);
        p->h_result = rt_xmalloc(result);
        p->result_bytes = result;
    }
    float *logits = (float *)(p->h_result + sizeof(double));
    double loss = 0;
    p->held = -1; /* the activations are evaluation's now */
    pipe_use_slot(p, 0);
    if (s > 0) {
        rt_p2p recv = {
            .send = false, .peer = s - 1, .buf = p->buf.in, .bytes = ops->boundary_bytes(ops->model, s - 1, b)};
        RT_TRY(rt_comm_p2p(ops->pp, &recv, 1));
    }
    RT_TRY(ops->forward(ops->model, b, &pass, s > 0 ? p->buf.in : NULL, last ? NULL : p->buf.out, 0.0f, &loss,
                        last ? logits : NULL));
    if (!last) {
        rt_p2p send = {.send = true, .peer = s + 1, .buf = p->buf.out, .bytes = ops->boundary_bytes(ops->model, s, b)};
        RT_TRY(rt_comm_p2p(ops->pp, &send, 1));
    } else {
        memcpy(p->h_result, &loss, sizeof loss);
    }
    RT_TRY(ops->pp->ops->broadcast(ops->pp->ctx, p->h_result, result, p->stage.count - 1));
    memcpy(loss_sum, p->h_result, sizeof *loss_sum);
    if (host_logits) memcpy(host_logits, logits, floats * sizeof(float));
fail:
    return st;
}
