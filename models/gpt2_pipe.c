/* The GPT-2 classifier as a pipeline stage (gpt2_pipe_step in gpt2.h; the schedule and the
 * transfers are runtime/rt_pipe.c's), and its forward-only pass for evaluation.
 *
 * Training: A forward keeps only its micro-batch's input (the
 * embeddings' output on the first stage, the received activation elsewhere) in one of
 * rt_pipe_in_flight slots; the backward recomputes the stage's forward from it, with the same
 * dropout bits, unless the blocks' activations still hold that micro-batch (always so on the
 * last stage, whose forward and backward of a micro-batch are adjacent). */
#include <stdlib.h>
#include <string.h>

#include "models/gpt2.h"
#include "models/gpt2_internal.h"
#include "models/heads.h"
#include "runtime/rt_pipe.h"

struct gpt2_pipe {
    gpt2_model *m;
    int max_micro;
    int slots;       /* saved inputs: micro-batch k in slot k % slots */
    float *saved;    /* (slots, max_BT, C) backend memory */
    rt_pipe_buffers buf; /* each (max_BT, C) */
    unsigned char *h_result; /* host: the last stage's loss (a double) and logits (max_B, num_labels) */
    int held;        /* the micro-batch the blocks' activations hold, -1: none */
    /* this step's */
    const rt_batch *b;
    uint64_t seed;
    int64_t step;
    float grad_scale;
    double loss_sum;
};

static size_t pipe_bytes(void *ctx, int micro) {
    const gpt2_pipe *p = ctx;
    return (size_t)p->b[micro].B * p->b[micro].T * p->m->C * sizeof(float);
}

static mdl_pass pipe_pass(const gpt2_pipe *p, int micro) {
    return (mdl_pass){.seed = p->seed, .step = p->step, .micro = micro, .training = true};
}

/* Uploads micro-batch k and runs the blocks from its input (slot k's copy, or kept there). */
static rt_status pipe_stage_fwd(gpt2_pipe *p, int k, const void *in, bool keep) {
    gpt2_model *m = p->m;
    const rt_batch *b = &p->b[k];
    const size_t n = (size_t)b->B * b->T * m->C;
    float *x = mdl_stack_residual(&m->blocks, 0), *slot = p->saved + (size_t)(k % p->slots) * m->max_BT * m->C;
    const mdl_pass pass = pipe_pass(p, k);
    rt_status st = gpt2_upload(m, b->input_ids, b->attention_mask, b->B, b->T, mdl_stage_is_last(m->stage));
    if (st != RT_OK) return st;
    if (in) rt_copy(m->be, x, in, n * sizeof(float));
    else if (keep && mdl_stage_is_first(m->stage)) st = gpt2_embed(m, (size_t)b->B * b->T);
    else rt_copy(m->be, x, slot, n * sizeof(float)); /* a recompute */
    if (st != RT_OK) return st;
    if (keep && !mdl_stage_is_last(m->stage)) rt_copy(m->be, slot, x, n * sizeof(float));
    p->held = k;
    return gpt2_stack_fwd(m, b->B, b->T, &pass);
}

static rt_status pipe_forward(void *ctx, int k, const void *in, void *out) {
    gpt2_pipe *p = ctx;
    gpt2_model *m = p->m;
    const rt_batch *b = &p->b[k];
    rt_status st = pipe_stage_fwd(p, k, in, true);
    if (st != RT_OK) return st;
    if (out) {
        rt_copy(m->be, out, m->blocks.out, pipe_bytes(p, k));
        return RT_OK;
    }
    double loss = 0;
    gpt2_cls_head_fwd(m, b, p->grad_scale, &loss, NULL);
    p->loss_sum += loss;
    return RT_OK;
}

static rt_status pipe_backward(void *ctx, int k, const void *dout, void *din) {
    gpt2_pipe *p = ctx;
    gpt2_model *m = p->m;
    const rt_batch *b = &p->b[k];
    const mdl_pass pass = pipe_pass(p, k);
    rt_status st = RT_OK;
    if (p->held != k) {
        RT_CHECK(!mdl_stage_is_last(m->stage), "the last stage's backward of %d follows another forward", k);
        RT_TRY(pipe_stage_fwd(p, k, NULL, false));
    }
    if (dout) rt_copy(m->be, mdl_stack_dout(&m->blocks), dout, pipe_bytes(p, k));
    else gpt2_cls_head_bwd(m, b->B, b->T); /* the last stage: its loss's gradient */
    const float *demb = NULL;
    RT_TRY(gpt2_stack_bwd(m, b->B, b->T, &pass, &demb));
    if (din) rt_copy(m->be, din, demb, pipe_bytes(p, k));
    else gpt2_embed_bwd(m, demb, (size_t)b->B * b->T);
fail:
    return st;
}

void gpt2_pipe_free(gpt2_pipe *p) {
    if (!p) return;
    free(p->h_result);
    void *bufs[5] = {p->saved, p->buf.in, p->buf.out, p->buf.dout, p->buf.din};
    for (int i = 0; i < 5; i++)
        if (bufs[i]) rt_free_device(p->m->be, bufs[i]);
    free(p);
}

rt_status gpt2_pipe_init(gpt2_model *m, int max_micro, gpt2_pipe **out) {
    rt_status st = RT_OK;
    gpt2_pipe *p = rt_xcalloc(1, sizeof *p);
    *out = NULL;
    p->m = m;
    if (max_micro < 1) RT_FAIL(RT_ERR_CONFIG, "GPT-2 pipeline: %d micro-batches per step", max_micro);
    p->h_result = rt_xmalloc(sizeof(double) + (size_t)m->max_B * (size_t)m->cfg.num_labels * sizeof(float));
    p->max_micro = max_micro;
    p->slots = rt_pipe_in_flight(m->stage.index, m->stage.count, max_micro);
    const size_t act = m->max_BT * (size_t)m->C * sizeof(float);
    RT_TRY(rt_backend_alloc(m->be, (size_t)p->slots * act, "GPT-2 pipeline: the micro-batches' stage inputs",
                            (void **)&p->saved));
    void **bufs[4] = {&p->buf.in, &p->buf.out, &p->buf.dout, &p->buf.din};
    for (int i = 0; i < 4; i++) RT_TRY(rt_backend_alloc(m->be, act, "GPT-2 pipeline: transfer buffers", bufs[i]));
    p->held = -1;
    *out = p;
    return RT_OK;
fail:
    gpt2_pipe_free(p);
    return st;
}

rt_status gpt2_pipe_step(gpt2_model *m, const rt_batch *b, int M, uint64_t seed, int64_t step, float grad_scale,
                         double *loss_sum) {
    rt_status st = RT_OK;
    gpt2_pipe *p = m->pipe;
    *loss_sum = 0;
    if (!p) return rt_errorf(RT_ERR_CONFIG, "GPT-2: gpt2_pipe_step on a model without pipeline stages");
    if (M < 1 || M > p->max_micro)
        return rt_errorf(RT_ERR_CONFIG, "GPT-2 pipeline: %d micro-batches, sized for at most %d", M, p->max_micro);
    for (int k = 0; k < M; k++) RT_TRY(mdl_cls_check_batch("GPT-2", &b[k], p->m->cfg.num_labels));
    p->held = -1;
    p->b = b;
    p->seed = seed;
    p->step = step;
    p->grad_scale = grad_scale;
    p->loss_sum = 0;
    const rt_pipe_stage stage = {.ctx = p, .out_bytes = pipe_bytes, .in_bytes = pipe_bytes, .forward = pipe_forward,
                                 .backward = pipe_backward};
    RT_TRY(rt_pipe_run(m->pp, M, &stage, &p->buf));
    *loss_sum = p->loss_sum;
fail:
    return st;
}

/* Evaluation: the batch through the stages one after another (no schedule: nothing to
 * overlap without a backward), then the last stage's loss and logits broadcast to all. */
rt_status gpt2_pipe_forward(gpt2_model *m, const rt_batch *b, double *loss_sum, float *host_logits) {
    rt_status st = RT_OK;
    gpt2_pipe *p = m->pipe;
    const int B = b->B, T = b->T, s = m->stage.index, NL = m->cfg.num_labels;
    const size_t bytes = (size_t)B * T * m->C * sizeof(float), result = sizeof(double) + (size_t)B * NL * sizeof(float);
    const mdl_pass pass = {.training = false};
    float *x = mdl_stack_residual(&m->blocks, 0), *logits = (float *)(p->h_result + sizeof(double));
    double loss = 0;
    RT_TRY(gpt2_upload(m, b->input_ids, b->attention_mask, B, T, mdl_stage_is_last(m->stage)));
    if (mdl_stage_is_first(m->stage)) {
        RT_TRY(gpt2_embed(m, (size_t)B * T));
    } else {
        rt_p2p recv = {.send = false, .peer = s - 1, .buf = x, .bytes = bytes};
        RT_TRY(rt_comm_p2p(m->pp, &recv, 1));
    }
    RT_TRY(gpt2_stack_fwd(m, B, T, &pass));
    if (!mdl_stage_is_last(m->stage)) {
        rt_p2p send = {.send = true, .peer = s + 1, .buf = m->blocks.out, .bytes = bytes};
        RT_TRY(rt_comm_p2p(m->pp, &send, 1));
    } else {
        gpt2_cls_head_fwd(m, b, 0.0f, &loss, logits);
        memcpy(p->h_result, &loss, sizeof loss);
    }
    RT_TRY(m->pp->ops->broadcast(m->pp->ctx, p->h_result, result, m->stage.count - 1));
    memcpy(loss_sum, p->h_result, sizeof *loss_sum);
    if (host_logits) memcpy(host_logits, logits, (size_t)B * NL * sizeof(float));
fail:
    return st;
}
