/* T5 split into pipeline stages (issue 19): the plan of which blocks a stage holds, and the
 * stage as runtime/train/rt_pipe.h's executor sees it (t5.h describes the layout). Megatron splits
 * an encoder-decoder the same way: encoder stages first, then decoder stages.
 *
 * What crosses a boundary, for micro-batch k of B rows, S source and T target tokens (NH: this
 * tp rank's heads):
 * - between encoder stages: the hidden states (B, S, C) and the encoder's position bias
 *   (NH, S, S), which only block 0's table makes and every block adds;
 * - from the last encoder stage: the encoder's output (B, S, C), after its final norm;
 * - between decoder stages: the hidden states (B, T, C), the encoder's output (every decoder
 *   block attends to it) and the decoder's bias (NH, T, T).
 * Gradients come back in the same layouts. A stage continues the sums it receives (the bias
 * gradients, dL/d(encoder output) over the decoder's blocks) in the order one process adds
 * them, so they match it bit for bit; the first decoder stage all-reduces the latter over tp,
 * as t5_step does after the whole decoder.
 *
 * Each in-flight micro-batch keeps its activations in its own slot of the activation block
 * (t5_use_slot), as models/layers/stage_pipe.h's runner does for the other families; with
 * pp_recompute a stage keeps one set and each in-flight micro-batch's input only, and its
 * backward runs the forward again from that input (the same dropout bits) unless the
 * activations still hold that micro-batch, as on the last stage, whose forward and backward of a
 * micro-batch are adjacent. */
#include <stdlib.h>
#include <string.h>

#include "models/t5/t5_internal.h"
#include "runtime/train/rt_pipe.h"

rt_status t5_stage_plan(t5_model *m) {
    const t5_config *c = &m->cfg;
    const int P = m->stage.count, s = m->stage.index, E = c->num_layers, D = c->num_decoder_layers;
    t5_stack enc = {.decoder = false, .max_T = m->max_S, .MR = (size_t)m->max_B * m->max_S, .L_total = E};
    t5_stack dec = {.decoder = true, .max_T = m->max_T, .MR = (size_t)m->max_B * m->max_T, .L_total = D};
    m->enc_stages = 1;
    if (P == 1) {
        enc.L = E, dec.L = D;
        enc.has_embed = enc.has_final = dec.has_embed = dec.has_final = true;
    } else {
        /* the encoder's share of the stages is its share of the blocks */
        const int Pe = (int)((int64_t)P * E / (E + D));
        if ((int64_t)P * E % (E + D) != 0 || Pe < 1 || Pe >= P || E % Pe != 0 || D % (P - Pe) != 0)
            return rt_errorf(RT_ERR_CONFIG, "T5: --pp %d cannot give its %d encoder and %d decoder blocks equal stages "
                             "(the encoder takes --pp x %d / %d of the stages, and each stack's blocks must divide "
                             "evenly among its own; with as many decoder as encoder blocks, --pp is even)",
                             P, E, D, E, E + D);
        m->enc_stages = Pe;
        if (s < Pe) {
            enc.L = E / Pe, enc.first = s * enc.L;
            enc.has_embed = s == 0, enc.has_final = s == Pe - 1;
        } else {
            dec.L = D / (P - Pe), dec.first = (s - Pe) * dec.L;
            dec.has_embed = s == Pe, dec.has_final = s == P - 1;
        }
    }
    m->enc = enc;
    m->dec = dec;
    return RT_OK;
}

struct t5_pipe {
    t5_model *m;
    int max_micro;
    rt_pipe_buffers buf;
    float *saved;        /* pp_recompute: the in-flight micro-batches' inputs, micro-batch k in slot k % slots */
    int slots, held;     /* and the micro-batch the activations hold, -1: none */
    size_t in_max;       /* the largest input, in bytes */
    /* this step's */
    const t5_batch *b;
    uint64_t seed;
    int64_t step;
    float grad_scale;
    double loss_sum;
};

static bool t5_is_enc_stage(const t5_model *m) { return m->stage.index < m->enc_stages; }

/* The bytes stage `from` sends stage from + 1 for batch b (and its gradient back). */
static size_t t5_boundary_bytes(const t5_model *m, int from, const t5_batch *b) {
    const size_t C = (size_t)m->C, NH = (size_t)m->NH_local, B = (size_t)b->B, S = (size_t)b->S, T = (size_t)b->T;
    size_t floats;
    if (from < m->enc_stages - 1) floats = B * S * C + NH * S * S;
    else if (from == m->enc_stages - 1) floats = B * S * C;
    else floats = B * T * C + B * S * C + NH * T * T;
    return floats * sizeof(float);
}

static size_t t5_out_bytes(void *ctx, int k) {
    const struct t5_pipe *p = ctx;
    return t5_boundary_bytes(p->m, p->m->stage.index, &p->b[k]);
}

static size_t t5_in_bytes(void *ctx, int k) {
    const struct t5_pipe *p = ctx;
    return t5_boundary_bytes(p->m, p->m->stage.index - 1, &p->b[k]);
}

/* Copies n floats and returns the place after them: packing and unpacking a transfer. */
static float *t5_put(rt_backend *be, float *dst, const float *src, size_t n) {
    rt_copy(be, dst, src, n * sizeof(float));
    return dst + n;
}
static const float *t5_take(rt_backend *be, float *dst, const float *src, size_t n) {
    rt_copy(be, dst, src, n * sizeof(float));
    return src + n;
}

/* Micro-batch b through this stage from `in` (NULL on the first stage) into `out` (NULL: not
 * packed, as a recompute needs); the last stage adds the loss to *loss_sum instead. */
static rt_status t5_stage_fwd(t5_model *m, const t5_batch *b, const mdl_pass *pass, const float *in, float *out,
                              float grad_scale, double *loss_sum) {
    rt_status st = RT_OK;
    rt_backend *be = m->be;
    const int B = b->B, S = b->S, T = b->T;
    const size_t C = (size_t)m->C, NH = (size_t)m->NH_local, BS = (size_t)B * S, BT = (size_t)B * T;
    int n = 0;
    RT_TRY(t5_upload_src(m, b->src_ids, b->src_mask, B, S));
    RT_TRY(t5_upload_tgt(m, b, &n));
    if (t5_is_enc_stage(m)) {
        t5_stack *s = &m->enc;
        if (!s->has_embed) t5_take(be, s->bias, t5_take(be, mdl_stack_residual(&s->blocks, 0), in, BS * C), NH * S * S);
        RT_TRY(t5_stack_fwd(m, s, B, S, S, pass));
        if (out && !s->has_final) t5_put(be, t5_put(be, out, s->blocks.out, BS * C), s->bias, NH * S * S);
        else if (out) t5_put(be, out, s->blocks.out, BS * C);
        return RT_OK;
    }
    t5_stack *s = &m->dec;
    if (s->has_embed) {
        t5_take(be, m->cross_in, in, BS * C);
    } else {
        const float *at = t5_take(be, mdl_stack_residual(&s->blocks, 0), in, BT * C);
        t5_take(be, s->bias, t5_take(be, m->cross_in, at, BS * C), NH * T * T);
    }
    RT_TRY(t5_stack_fwd(m, s, B, T, S, pass));
    if (!mdl_stage_is_last(m->stage)) {
        if (out) {
            float *at = t5_put(be, t5_put(be, out, s->blocks.out, BT * C), m->cross_in, BS * C);
            t5_put(be, at, s->bias, NH * T * T);
        }
        return RT_OK;
    }
    RT_TRY(t5_head_fwd(m, B, T, grad_scale, NULL));
    *loss_sum += mdl_lm_head_losses(&m->head, m->head_n);
fail:
    return st;
}

/* Where micro-batch k's input is kept (pp_recompute). */
static float *t5_saved_input(const struct t5_pipe *p, int k) {
    return p->saved + (size_t)(k % p->slots) * (p->in_max / sizeof(float));
}

static rt_status t5_pipe_forward(void *ctx, int k, const void *in, void *out) {
    struct t5_pipe *p = ctx;
    t5_model *m = p->m;
    const mdl_pass pass = {.seed = p->seed, .step = p->step, .micro = k, .training = true};
    t5_use_slot(m, k % m->act_slots);
    if (p->saved && in) rt_copy(m->be, t5_saved_input(p, k), in, t5_in_bytes(p, k));
    p->held = k;
    return t5_stage_fwd(m, &p->b[k], &pass, in, out, p->grad_scale, &p->loss_sum);
}

static rt_status t5_pipe_backward(void *ctx, int k, const void *dout_v, void *din_v) {
    rt_status st = RT_OK;
    struct t5_pipe *p = ctx;
    t5_model *m = p->m;
    rt_backend *be = m->be;
    const t5_batch *b = &p->b[k];
    const int B = b->B, S = b->S, T = b->T;
    const size_t C = (size_t)m->C, NH = (size_t)m->NH_local, BS = (size_t)B * S, BT = (size_t)B * T;
    const mdl_pass pass = {.seed = p->seed, .step = p->step, .micro = k, .training = true};
    float *dout = (float *)dout_v, *din = din_v;
    const float *demb = NULL;
    t5_use_slot(m, k % m->act_slots); /* its forward's activations */
    if (m->act_slots == 1 && p->held != k) { /* pp_recompute: the forward again, from the kept input */
        const float *in = p->saved ? t5_saved_input(p, k) : NULL;
        double unused = 0;
        RT_CHECK(!mdl_stage_is_last(m->stage), "T5: the last stage's backward of %d follows another forward", k);
        RT_TRY(t5_stage_fwd(m, b, &pass, in, NULL, 0.0f, &unused));
        p->held = k;
    }
    if (t5_is_enc_stage(m)) {
        t5_stack *s = &m->enc;
        if (!s->has_final) t5_take(be, s->dbias, dout + BS * C, NH * S * S); /* the later blocks' sum */
        RT_TRY(t5_stack_bwd(m, s, dout, B, S, S, &pass, &demb));
        if (!s->has_embed) t5_put(be, t5_put(be, din, demb, BS * C), s->dbias, NH * S * S);
        return RT_OK;
    }
    t5_stack *s = &m->dec;
    float *dtop = dout;
    if (s->has_final) { /* the last stage: the loss's gradient starts the sums */
        RT_TRY(t5_head_bwd(m, B, T));
        dtop = m->dtop;
        rt_clear(be, m->denc, BS * C * sizeof(float));
    } else {
        t5_take(be, s->dbias, t5_take(be, m->denc, dout + BT * C, BS * C), NH * T * T);
    }
    RT_TRY(t5_stack_bwd(m, s, dtop, B, T, S, &pass, &demb));
    if (!s->has_embed) {
        t5_put(be, t5_put(be, t5_put(be, din, demb, BT * C), m->denc, BS * C), s->dbias, NH * T * T);
        return RT_OK;
    }
    if (m->tp->size > 1) RT_TRY(m->tp->ops->all_reduce(m->tp->ctx, m->denc, BS * C, RT_REDUCE_SUM));
    t5_put(be, din, m->denc, BS * C);
fail:
    return st;
}

void t5_pipe_free(struct t5_pipe *p) {
    if (!p) return;
    void *bufs[5] = {p->buf.in, p->buf.out, p->buf.dout, p->buf.din, p->saved};
    for (int i = 0; i < 5; i++)
        if (bufs[i]) rt_free_device(p->m->be, bufs[i]);
    free(p);
}

rt_status t5_pipe_init(t5_model *m, int max_micro) {
    rt_status st = RT_OK;
    struct t5_pipe *p = rt_xcalloc(1, sizeof *p);
    const int P = m->stage.count, s = m->stage.index;
    p->m = m;
    p->max_micro = max_micro;
    p->held = -1;
    const t5_batch largest = {.B = m->max_B, .S = m->max_S, .T = m->max_T};
    const size_t in = s > 0 ? t5_boundary_bytes(m, s - 1, &largest) : 0;
    const size_t out = s < P - 1 ? t5_boundary_bytes(m, s, &largest) : 0;
    void **bufs[4] = {&p->buf.in, &p->buf.din, &p->buf.out, &p->buf.dout};
    for (int i = 0; i < 4; i++) {
        const size_t bytes = i < 2 ? in : out;
        if (bytes) RT_TRY(rt_backend_alloc(m->be, bytes, "T5 pipeline: transfer buffers", bufs[i]));
    }
    p->in_max = (in + 63) & ~(size_t)63;
    if (m->act_slots == 1 && s > 0) { /* pp_recompute (or one micro-batch in flight): keep the inputs */
        p->slots = rt_pipe_in_flight(s, P, max_micro);
        RT_TRY(rt_backend_alloc(m->be, (size_t)p->slots * p->in_max, "T5 pipeline: the micro-batches' stage inputs",
                                (void **)&p->saved));
    }
    m->pipe = p;
    return RT_OK;
fail:
    t5_pipe_free(p);
    return st;
}

/* Every micro-batch checked on every stage before any work: a bad one stops all of them with
 * its own message, not a neighbour's timeout. */
static rt_status t5_check_batches(t5_model *m, const t5_batch *b, int M) {
    for (int k = 0; k < M; k++) {
        int n = 0;
        rt_status st = t5_check_src(m, b[k].src_ids, b[k].src_mask, b[k].B, b[k].S);
        if (st == RT_OK) st = t5_check_tgt(m, &b[k], &n);
        if (st != RT_OK) return st;
    }
    return RT_OK;
}

rt_status t5_pipe_step(t5_model *m, const t5_batch *b, int M, uint64_t seed, int64_t step, float grad_scale,
                       double *loss_sum) {
    rt_status st = RT_OK;
    struct t5_pipe *p = m->pipe;
    *loss_sum = 0;
    if (!p) return rt_errorf(RT_ERR_CONFIG, "T5: t5_pipe_step on a model that is not a pipeline stage");
    if (M < 1 || M > p->max_micro)
        return rt_errorf(RT_ERR_CONFIG, "T5 pipeline: %d micro-batches, sized for 1 to %d", M, p->max_micro);
    RT_TRY(t5_check_batches(m, b, M));
    p->b = b;
    p->seed = seed;
    p->step = step;
    p->grad_scale = grad_scale;
    p->loss_sum = 0;
    p->held = -1;
    const rt_pipe_stage stage = {.ctx = p, .out_bytes = t5_out_bytes, .in_bytes = t5_in_bytes,
                                 .forward = t5_pipe_forward, .backward = t5_pipe_backward};
    RT_TRY(rt_pipe_run(m->pp, M, &stage, &p->buf));
    *loss_sum = p->loss_sum;
fail:
    return st;
}

rt_status t5_pipe_eval(t5_model *m, const t5_batch *b, double *loss_sum, int *n_targets) {
    rt_status st = RT_OK;
    struct t5_pipe *p = m->pipe;
    const int s = m->stage.index, P = m->stage.count;
    const mdl_pass pass = {.training = false};
    double loss = 0;
    int n = 0;
    *loss_sum = 0;
    RT_TRY(t5_check_src(m, b->src_ids, b->src_mask, b->B, b->S)); /* on every stage, before any transfer */
    RT_TRY(t5_check_tgt(m, b, &n));
    t5_use_slot(m, 0);
    p->held = -1; /* the activations are evaluation's now */
    if (s > 0) {
        rt_p2p recv = {.send = false, .peer = s - 1, .buf = p->buf.in, .bytes = t5_boundary_bytes(m, s - 1, b)};
        RT_TRY(rt_comm_p2p(m->pp, &recv, 1));
    }
    RT_TRY(t5_stage_fwd(m, b, &pass, p->buf.in, s < P - 1 ? p->buf.out : NULL, 0.0f, &loss));
    if (s < P - 1) {
        rt_p2p send = {.send = true, .peer = s + 1, .buf = p->buf.out, .bytes = t5_boundary_bytes(m, s, b)};
        RT_TRY(rt_comm_p2p(m->pp, &send, 1));
    }
    RT_TRY(m->pp->ops->broadcast(m->pp->ctx, &loss, sizeof loss, P - 1)); /* the last stage's, exactly */
    *loss_sum = loss;
    if (n_targets) *n_targets = n;
fail:
    return st;
}
