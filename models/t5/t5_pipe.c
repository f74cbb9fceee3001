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
 * models/layers/stage_pipe.h's runner, which every family's stages share, runs the schedule:
 * each in-flight micro-batch keeps its activations in its own slot of the activation block
 * (t5_use_slot), or with pp_recompute a stage keeps each in-flight micro-batch's packed input
 * and its backward runs the forward again from it. This file says what a T5 stage sends and
 * how it runs forward and backward. */
#include <stdlib.h>
#include <string.h>

#include "models/layers/stage_pipe.h"
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
            return rt_errorf(RT_ERR_CONFIG,
                             "T5: --pp %d cannot give its %d encoder and %d decoder blocks equal stages "
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

static bool t5_is_enc_stage(const t5_model *m) { return m->stage.index < m->enc_stages; }

/* The bytes stage `from` sends stage from + 1 for batch b (and its gradient back): mdl_stage_ops'. */
static size_t t5_boundary_bytes(void *model, int from, const void *bv) {
    const t5_model *m = model;
    const t5_batch *b = bv;
    const size_t C = (size_t)m->C, NH = (size_t)m->NH_local, B = (size_t)b->B, S = (size_t)b->S, T = (size_t)b->T;
    size_t floats;
    if (from < m->enc_stages - 1)
        floats = B * S * C + NH * S * S;
    else if (from == m->enc_stages - 1)
        floats = B * S * C;
    else
        floats = B * T * C + B * S * C + NH * T * T;
    return floats * sizeof(float);
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
 * packed, as a recompute needs); the last stage adds the loss to *loss_sum instead (mdl_stage_ops'
 * forward; T5's head returns no logits). */
static rt_status t5_stage_fwd(void *model, const void *bv, const mdl_pass *pass, const void *in_v, void *out_v,
                              float grad_scale, double *loss_sum, float *host_logits) {
    rt_status st = RT_OK;
    t5_model *m = model;
    const t5_batch *b = bv;
    const float *in = in_v;
    float *out = out_v;
    (void)host_logits;
    rt_backend *be = m->be;
    const int B = b->B, S = b->S, T = b->T;
    const size_t C = (size_t)m->C, NH = (size_t)m->NH_local, BS = (size_t)B * S, BT = (size_t)B * T;
    int n = 0;
    RT_TRY(t5_upload_src(m, b->src_ids, b->src_mask, B, S));
    RT_TRY(t5_upload_tgt(m, b, &n));
    if (t5_is_enc_stage(m)) {
        t5_stack *s = &m->enc;
        if (!s->has_embed) t5_take(be, s->bias, t5_take(be, mdl_stack_input(&s->blocks), in, BS * C), NH * S * S);
        RT_TRY(t5_stack_fwd(m, s, B, S, S, pass));
        if (out && !s->has_final)
            t5_put(be, t5_put(be, out, s->blocks.out, BS * C), s->bias, NH * S * S);
        else if (out)
            t5_put(be, out, s->blocks.out, BS * C);
        return RT_OK;
    }
    t5_stack *s = &m->dec;
    if (s->has_embed) {
        t5_take(be, m->cross_in, in, BS * C);
    } else {
        const float *at = t5_take(be, mdl_stack_input(&s->blocks), in, BT * C);
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
    *loss_sum += mdl_lm_head_losses(&m->head, m->head_n, pass);
fail:
    return st;
}

/* The backward from dout (NULL on the last stage) into din (NULL on the first): mdl_stage_ops'. */
static rt_status t5_stage_bwd(void *model, const void *bv, const mdl_pass *pass, const void *dout_v, void *din_v) {
    rt_status st = RT_OK;
    t5_model *m = model;
    const t5_batch *b = bv;
    rt_backend *be = m->be;
    const int B = b->B, S = b->S, T = b->T;
    const size_t C = (size_t)m->C, NH = (size_t)m->NH_local, BS = (size_t)B * S, BT = (size_t)B * T;
    float *dout = (float *)dout_v, *din = din_v;
    const float *demb = NULL;
    if (t5_is_enc_stage(m)) {
        t5_stack *s = &m->enc;
        if (!s->has_final) t5_take(be, s->dbias, dout + BS * C, NH * S * S); /* the later blocks' sum */
        RT_TRY(t5_stack_bwd(m, s, dout, B, S, S, pass, &demb));
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
    RT_TRY(t5_stack_bwd(m, s, dtop, B, T, S, pass, &demb));
    if (!s->has_embed) {
        t5_put(be, t5_put(be, t5_put(be, din, demb, BT * C), m->denc, BS * C), s->dbias, NH * T * T);
        return RT_OK;
    }
    if (m->tp->size > 1) RT_TRY(m->tp->ops->all_reduce(m->tp->ctx, m->denc, BS * C, RT_REDUCE_SUM));
    t5_put(be, din, m->denc, BS * C);
fail:
    return st;
}

static void t5_stage_use_slot(void *model, int k) { t5_use_slot(model, k); }

/* Every micro-batch is checked on every stage before any work: a bad one stops all of them with
 * its own message, not a neighbour's timeout. */
static rt_status t5_stage_check(void *model, const void *bv) {
    t5_model *m = model;
    const t5_batch *b = bv;
    int n = 0;
    rt_status st = t5_check_src(m, b->src_ids, b->src_mask, b->B, b->S);
    return st == RT_OK ? t5_check_tgt(m, b, &n) : st;
}

rt_status t5_pipe_init(t5_model *m, int max_micro) {
    const int P = m->stage.count, s = m->stage.index;
    const t5_batch largest = {.B = m->max_B, .S = m->max_S, .T = m->max_T};
    const mdl_stage_ops ops = {.model = m,
                               .family = "T5",
                               .be = m->be,
                               .pp = m->pp,
                               .batch_size = sizeof(t5_batch),
                               .boundary_bytes = t5_boundary_bytes,
                               .max_in_bytes = s > 0 ? t5_boundary_bytes(m, s - 1, &largest) : 0,
                               .max_out_bytes = s < P - 1 ? t5_boundary_bytes(m, s, &largest) : 0,
                               .check = t5_stage_check,
                               .forward = t5_stage_fwd,
                               .backward = t5_stage_bwd,
                               .slots = m->act_slots,
                               .use_slot = t5_stage_use_slot};
    return mdl_stage_pipe_init_ops(&ops, max_micro, &m->pipe);
}

rt_status t5_pipe_step(t5_model *m, const t5_batch *b, int M, uint64_t seed, int64_t step, float grad_scale,
                       double *loss_sum) {
    *loss_sum = 0;
    if (!m->pipe) return rt_errorf(RT_ERR_CONFIG, "T5: t5_pipe_step on a model that is not a pipeline stage");
    return mdl_stage_pipe_step(m->pipe, b, M, seed, step, grad_scale, loss_sum);
}

rt_status t5_pipe_eval(t5_model *m, const t5_batch *b, double *loss_sum, int *n_targets) {
    rt_status st = RT_OK;
    int n = 0;
    *loss_sum = 0;
    RT_TRY(t5_check_src(m, b->src_ids, b->src_mask, b->B, b->S)); /* on every stage, before any transfer */
    RT_TRY(t5_check_tgt(m, b, &n));
    RT_TRY(mdl_stage_pipe_forward(m->pipe, b, loss_sum, NULL)); /* the last stage's loss, exactly */
    if (n_targets) *n_targets = n;
fail:
    return st;
}
