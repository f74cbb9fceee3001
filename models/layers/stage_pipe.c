/* The pipeline stage runner (see stage_pipe.h); the schedule and the transfers are
 * runtime/train/rt_pipe.c's. */
#include "models/layers/stage_pipe.h"

#include <stdlib.h>
#include <string.h>

#include "models/layers/heads.h"
#include "runtime/train/rt_pipe.h"

struct mdl_stage_pipe {
    mdl_stage_model m;
    mdl_stage stage;
    int max_micro;
    int slots;           /* recompute: saved inputs, micro-batch k in slot k % slots (not on the first stage) */
    bool keep;           /* the family keeps micro-batch k's activations in its slot k % m.slots */
    float *saved;        /* (slots, max_BT, C) backend memory */
    rt_pipe_buffers buf; /* each (max_BT, C) */
    unsigned char *h_result; /* host: the last stage's loss (a double) and logits (grown to the largest) */
    size_t result_bytes;
    int held;            /* the micro-batch the blocks' activations hold, -1: none */
    /* this step's */
    const rt_batch *b;
    uint64_t seed;
    int64_t step;
    float grad_scale;
    double loss_sum;
};

static size_t pipe_bytes(void *ctx, int micro) {
    const mdl_stage_pipe *p = ctx;
    return (size_t)p->b[micro].B * p->b[micro].T * p->m.C * sizeof(float);
}

static mdl_pass pipe_pass(const mdl_stage_pipe *p, int micro) {
    return (mdl_pass){.seed = p->seed, .step = p->step, .micro = micro, .training = true};
}

/* Uploads micro-batch k and runs the blocks from its input: in (a forward), or (a recompute)
 * the first stage's embeddings again or slot k's copy; a forward fills the slot. */
static rt_status pipe_stage_fwd(mdl_stage_pipe *p, int k, const void *in, bool forward) {
    const mdl_stage_model *m = &p->m;
    if (p->keep) m->use_slot(m->model, k % m->slots);
    const rt_batch *b = &p->b[k];
    const size_t bytes = pipe_bytes(p, k);
    float *x = mdl_stack_residual(m->blocks, 0);
    float *slot = p->saved ? p->saved + (size_t)(k % p->slots) * m->max_BT * m->C : NULL;
    const mdl_pass pass = pipe_pass(p, k);
    rt_status st = m->upload(m->model, b);
    if (st != RT_OK) return st;
    if (mdl_stage_is_first(p->stage)) st = m->embed(m->model, b);
    else rt_copy(m->be, x, forward ? in : slot, bytes);
    if (st != RT_OK) return st;
    if (forward && slot) rt_copy(m->be, slot, x, bytes);
    p->held = k;
    return m->blocks_fwd(m->model, b, &pass);
}

static rt_status pipe_forward(void *ctx, int k, const void *in, void *out) {
    mdl_stage_pipe *p = ctx;
    const mdl_stage_model *m = &p->m;
    rt_status st = pipe_stage_fwd(p, k, in, true);
    if (st != RT_OK) return st;
    if (out) {
        rt_copy(m->be, out, m->blocks->out, pipe_bytes(p, k));
        return RT_OK;
    }
    double loss = 0;
    const mdl_pass pass = pipe_pass(p, k);
    st = m->head_fwd(m->model, &p->b[k], &pass, p->grad_scale, &loss, NULL);
    p->loss_sum += loss;
    return st;
}

static rt_status pipe_backward(void *ctx, int k, const void *dout, void *din) {
    mdl_stage_pipe *p = ctx;
    const mdl_stage_model *m = &p->m;
    const rt_batch *b = &p->b[k];
    const mdl_pass pass = pipe_pass(p, k);
    rt_status st = RT_OK;
    if (p->keep) {
        m->use_slot(m->model, k % m->slots); /* its forward's activations */
    } else if (p->held != k) {
        RT_CHECK(!mdl_stage_is_last(p->stage), "the last stage's backward of %d follows another forward", k);
        RT_TRY(pipe_stage_fwd(p, k, NULL, false));
    }
    if (dout) rt_copy(m->be, mdl_stack_dout(m->blocks), dout, pipe_bytes(p, k));
    else RT_TRY(m->head_bwd(m->model, b, &pass)); /* the last stage: its loss's gradient */
    const float *demb = NULL;
    RT_TRY(m->blocks_bwd(m->model, b, &pass, &demb));
    if (din) rt_copy(m->be, din, demb, pipe_bytes(p, k));
    else m->embed_bwd(m->model, b, demb);
fail:
    return st;
}

void mdl_stage_pipe_free(mdl_stage_pipe *p) {
    if (!p) return;
    free(p->h_result);
    void *bufs[5] = {p->saved, p->buf.in, p->buf.out, p->buf.dout, p->buf.din};
    for (int i = 0; i < 5; i++)
        if (bufs[i]) rt_free_device(p->m.be, bufs[i]);
    free(p);
}

rt_status mdl_stage_pipe_init(const mdl_stage_model *sm, int max_micro, mdl_stage_pipe **out) {
    rt_status st = RT_OK;
    mdl_stage_pipe *p = rt_xcalloc(1, sizeof *p);
    *out = NULL;
    p->m = *sm;
    p->stage = (mdl_stage){sm->pp->rank, sm->pp->size};
    if (max_micro < 1) RT_FAIL(RT_ERR_CONFIG, "pipeline: %d micro-batches per step", max_micro);
    p->max_micro = max_micro;
    p->result_bytes = sizeof(double) + (size_t)sm->max_B * (size_t)sm->num_labels * sizeof(float);
    p->h_result = rt_xmalloc(p->result_bytes);
    const size_t act = sm->max_BT * (size_t)sm->C * sizeof(float);
    const int in_flight = rt_pipe_in_flight(p->stage.index, p->stage.count, max_micro);
    p->keep = sm->slots > 1;
    if (p->keep && (sm->slots < in_flight || !sm->use_slot))
        RT_FAIL(RT_ERR_CONFIG, "pipeline: %d activation slots for %d micro-batches in flight", sm->slots, in_flight);
    if (!p->keep && !mdl_stage_is_first(p->stage)) {
        p->slots = in_flight;
        RT_TRY(rt_backend_alloc(sm->be, (size_t)p->slots * act, "pipeline: the micro-batches' stage inputs",
                                (void **)&p->saved));
    }
    void **bufs[4] = {&p->buf.in, &p->buf.out, &p->buf.dout, &p->buf.din};
    for (int i = 0; i < 4; i++) RT_TRY(rt_backend_alloc(sm->be, act, "pipeline: transfer buffers", bufs[i]));
    p->held = -1;
    *out = p;
    return RT_OK;
fail:
    mdl_stage_pipe_free(p);
    return st;
}

rt_status mdl_stage_pipe_step(mdl_stage_pipe *p, const rt_batch *b, int M, uint64_t seed, int64_t step,
                              float grad_scale, double *loss_sum) {
    *loss_sum = 0;
    if (M < 1 || M > p->max_micro)
        return rt_errorf(RT_ERR_CONFIG, "pipeline: %d micro-batches, sized for at most %d", M, p->max_micro);
    for (int k = 0; k < M && p->m.num_labels > 0; k++) { /* a classifier's labels */
        rt_status st = mdl_cls_check_batch(p->m.family, &b[k], p->m.num_labels);
        if (st != RT_OK) return st;
    }
    p->held = -1;
    p->b = b;
    p->seed = seed;
    p->step = step;
    p->grad_scale = grad_scale;
    p->loss_sum = 0;
    const rt_pipe_stage stage = {.ctx = p, .out_bytes = pipe_bytes, .in_bytes = pipe_bytes, .forward = pipe_forward,
                                 .backward = pipe_backward};
    rt_status st = rt_pipe_run(p->m.pp, M, &stage, &p->buf);
    if (st == RT_OK) *loss_sum = p->loss_sum;
    return st;
}

rt_status mdl_stage_pipe_forward(mdl_stage_pipe *p, const rt_batch *b, double *loss_sum, float *host_logits) {
    rt_status st = RT_OK;
    const mdl_stage_model *m = &p->m;
    const int s = p->stage.index;
    const size_t bytes = (size_t)b->B * b->T * m->C * sizeof(float);
    const size_t floats = m->result_floats ? m->result_floats(m->model, b) : (size_t)b->B * m->num_labels;
    const size_t result = sizeof(double) + floats * sizeof(float);
    const mdl_pass pass = {.training = false};
    if (result > p->result_bytes) {
        free(p->h_result);
        p->h_result = rt_xmalloc(result);
        p->result_bytes = result;
    }
    float *logits = (float *)(p->h_result + sizeof(double));
    double loss = 0;
    p->held = -1; /* the blocks' activations are evaluation's now */
    if (p->keep) m->use_slot(m->model, 0);
    float *x = mdl_stack_residual(m->blocks, 0); /* slot 0's */
    RT_TRY(m->upload(m->model, b));
    if (mdl_stage_is_first(p->stage)) {
        RT_TRY(m->embed(m->model, b));
    } else {
        rt_p2p recv = {.send = false, .peer = s - 1, .buf = x, .bytes = bytes};
        RT_TRY(rt_comm_p2p(m->pp, &recv, 1));
    }
    RT_TRY(m->blocks_fwd(m->model, b, &pass));
    if (!mdl_stage_is_last(p->stage)) {
        rt_p2p send = {.send = true, .peer = s + 1, .buf = m->blocks->out, .bytes = bytes};
        RT_TRY(rt_comm_p2p(m->pp, &send, 1));
    } else {
        RT_TRY(m->head_fwd(m->model, b, &pass, 0.0f, &loss, logits));
        memcpy(p->h_result, &loss, sizeof loss);
    }
    RT_TRY(m->pp->ops->broadcast(m->pp->ctx, p->h_result, result, p->stage.count - 1));
    memcpy(loss_sum, p->h_result, sizeof *loss_sum);
    if (host_logits) memcpy(host_logits, logits, floats * sizeof(float));
fail:
    return st;
}
