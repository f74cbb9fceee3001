/* Pipeline stages' tensors for one writer (see ckpt_pp.h). */
#include "checkpoints/ckpt_pp.h"

#include <stdio.h>
#include <string.h>

static size_t ckpt_pp_numel(const ckpt_pp_record *r) {
    size_t n = 1;
    for (int d = 0; d < r->ndim; d++) n *= (size_t)r->shape[d];
    return n;
}

/* After the sink's first error it is not called again (the records still arrive). */
static void ckpt_pp_deliver(ckpt_pp_sink sink, void *ctx, const ckpt_pp_record *r, const float *full,
                            rt_status *sink_st) {
    if (*sink_st == RT_OK) *sink_st = sink(ctx, r, full);
}

/* This stage's tensors: gathered over tp to its rank 0, which hands them to the sink (the first
 * stage) or sends each to the first stage. */
/* Whether parameter s is sent: not a tied weight's copy (the first stage's tensor), and of the
 * kind asked for. */
static bool ckpt_pp_sends(const rt_param_spec *s, ckpt_pp_which which) {
    return !s->copy && (which == CKPT_PP_ALL || (which == CKPT_PP_TRAINABLE) == !s->frozen);
}

static rt_status ckpt_pp_send_stage(const char *what, const rt_params *p, const float *buf, ckpt_pp_which which,
                                    rt_comm *tp, rt_comm *pp, ckpt_tp_scratch *scr, float **full, size_t *cap,
                                    ckpt_pp_sink sink, void *ctx, rt_status *sink_st) {
    rt_status st = RT_OK;
    const bool lead = tp->rank == 0;
    int32_t count = 0;
    for (int i = 0; buf && i < p->n; i++) count += ckpt_pp_sends(&p->specs[i], which);
    rt_p2p op = {.send = true, .peer = 0, .buf = &count, .bytes = sizeof count};
    if (lead && pp->rank > 0) RT_TRY(rt_comm_p2p(pp, &op, 1));
    for (int i = 0; buf && i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        if (!ckpt_pp_sends(s, which)) continue;
        ckpt_tp_desc d;
        RT_TRY(ckpt_tp_spec_desc(what, s, tp, &d));
        const size_t n = ckpt_tp_full_numel(&d);
        if (lead && n > *cap) *full = rt_xrealloc(*full, (*cap = n) * sizeof(float));
        RT_TRY(ckpt_tp_gather_param(p->be, tp, &d, buf + s->offset, s->numel, scr, lead ? *full : NULL));
        if (!lead) continue;
        ckpt_pp_record r = {
            .ndim = d.ndim, .tp_rule = (int32_t)s->tp, .no_decay = s->no_decay, .vocab_rows = s->vocab_rows};
        snprintf(r.name, sizeof r.name, "%s", s->name);
        for (int j = 0; j < d.ndim; j++) r.shape[j] = (uint64_t)d.full[j];
        if (pp->rank == 0) {
            ckpt_pp_deliver(sink, ctx, &r, *full, sink_st);
            continue;
        }
        op = (rt_p2p){.send = true, .peer = 0, .buf = &r, .bytes = sizeof r};
        RT_TRY(rt_comm_p2p(pp, &op, 1));
        op = (rt_p2p){.send = true, .peer = 0, .buf = *full, .bytes = n * sizeof(float)};
        RT_TRY(rt_comm_p2p(pp, &op, 1));
    }
fail:
    return st;
}

/* The first stage's tp rank 0 receives stage `from`'s tensors. */
static rt_status ckpt_pp_receive_stage(const char *what, rt_comm *pp, int from, float **full, size_t *cap,
                                       ckpt_pp_sink sink, void *ctx, rt_status *sink_st) {
    rt_status st = RT_OK;
    int32_t count = 0;
    ckpt_pp_record r;
    rt_p2p op = {.send = false, .peer = from, .buf = &count, .bytes = sizeof count};
    RT_TRY(rt_comm_p2p(pp, &op, 1));
    for (int i = 0; i < count; i++) {
        op = (rt_p2p){.send = false, .peer = from, .buf = &r, .bytes = sizeof r};
        RT_TRY(rt_comm_p2p(pp, &op, 1));
        if (r.ndim < 1 || r.ndim > RT_PARAM_MAX_DIMS || !memchr(r.name, 0, sizeof r.name))
            RT_FAIL(RT_ERR_RUNTIME, "%s: pipeline stage %d sent a malformed tensor header", what, from);
        const size_t n = ckpt_pp_numel(&r);
        if (n > *cap) *full = rt_xrealloc(*full, (*cap = n) * sizeof(float));
        op = (rt_p2p){.send = false, .peer = from, .buf = *full, .bytes = n * sizeof(float)};
        RT_TRY(rt_comm_p2p(pp, &op, 1));
        ckpt_pp_deliver(sink, ctx, &r, *full, sink_st);
    }
fail:
    return st;
}

/* ckpt_pp_gather of the parameters `which` selects. */
static rt_status ckpt_pp_gather_some(const char *what, const rt_params *p, const float *buf, ckpt_pp_which which,
                                     rt_comm *tp, rt_comm *pp, ckpt_tp_scratch *scr, ckpt_pp_sink sink, void *ctx,
                                     rt_status *sink_st) {
    rt_status st = RT_OK;
    float *full = NULL;
    size_t cap = 0;
    *sink_st = RT_OK;
    RT_TRY(ckpt_pp_send_stage(what, p, buf, which, tp, pp, scr, &full, &cap, sink, ctx, sink_st));
    for (int from = 1; tp->rank == 0 && pp->rank == 0 && from < pp->size; from++)
        RT_TRY(ckpt_pp_receive_stage(what, pp, from, &full, &cap, sink, ctx, sink_st));
fail:
    free(full);
    return st;
}

rt_status ckpt_pp_gather(const char *what, const rt_params *p, const float *buf, rt_comm *tp, rt_comm *pp,
                         ckpt_tp_scratch *scr, ckpt_pp_sink sink, void *ctx, rt_status *sink_st) {
    /* a buffer other than the parameters (m, v) covers the trainable ones only */
    return ckpt_pp_gather_some(what, p, buf, buf != p->param ? CKPT_PP_TRAINABLE : CKPT_PP_ALL, tp, pp, scr, sink, ctx,
                               sink_st);
}

rt_status ckpt_pp_gather_params(const char *what, const rt_params *p, ckpt_pp_which which, rt_comm *tp, rt_comm *pp,
                                ckpt_tp_scratch *scr, ckpt_pp_sink sink, void *ctx, rt_status *sink_st) {
    return ckpt_pp_gather_some(what, p, p->param, which, tp, pp, scr, sink, ctx, sink_st);
}

rt_status ckpt_pp_agree(rt_comm *tp, rt_comm *pp, rt_status written, const char *path, const char *what) {
    rt_status st = ckpt_tp_agree(tp, written, path, what);
    if (pp->size == 1) return st;
    int code = (int)st;
    rt_status bst = pp->ops->broadcast(pp->ctx, &code, sizeof code, 0);
    if (bst != RT_OK) return bst;
    if (pp->rank != 0 && code != RT_OK)
        return rt_errorf((rt_status)code, "%s: the first pipeline stage failed to write the %s", path, what);
    return st;
}
