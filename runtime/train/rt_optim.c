/* AdamW and clipping over the parameter slab (see rt_optim.h). Contiguous runs of
 * parameters with the same decay setting go to the backend as one call. Gradients, m and v cover
 * the trainable parameters only (rt_params.h), which lie first and together: a run skips the
 * frozen ones between them in declaration order. */
#include "runtime/train/rt_optim.h"

#include <math.h>
#include <stdlib.h>

double rt_grad_norm(const rt_params *p) { return sqrt(rt_sumsq(p->be, p->grad, p->train_numel)); }

/* The run of trainable parameters from i (trainable) on that share key(): [*begin, *end) of the
 * gradient slab; returns the index after it. */
static int rt_train_run(const rt_params *p, int i, int (*key)(const rt_param_spec *), size_t *begin, size_t *end) {
    int j = i + 1, last = i;
    for (; j < p->n && (p->specs[j].frozen || key(&p->specs[j]) == key(&p->specs[i])); j++)
        if (!p->specs[j].frozen) last = j;
    *begin = p->specs[i].offset;
    *end = p->specs[last].offset + p->specs[last].numel;
    return j;
}

static int rt_kind_norm(const rt_param_spec *s) { return (s->tp != RT_TP_NONE) | (s->copy << 1); }
static int rt_kind_decay(const rt_param_spec *s) { return s->no_decay; }

/* x summed over comm c (host memory) as double-float pairs, added in rank order: about 48 bits,
 * the same bits on every rank. */
static rt_status rt_sum_double(rt_comm *c, double *x) {
    if (c->size == 1) return RT_OK;
    float mine[2];
    mine[0] = (float)*x;
    mine[1] = (float)(*x - (double)mine[0]);
    float *all = rt_xmalloc(2 * sizeof(float) * (size_t)c->size);
    rt_status st = c->ops->all_gather(c->ctx, all, mine, 2);
    if (st == RT_OK) {
        *x = 0;
        for (int r = 0; r < c->size; r++) *x += (double)all[2 * r] + (double)all[2 * r + 1];
    }
    free(all);
    return st;
}

/* The squared norm over tp: replicated parameters once, shards summed over the ranks; a tied
 * weight's copy on a later pipeline stage not at all. */
static rt_status rt_grad_sumsq_tp(const rt_params *p, rt_comm *tp, double *sumsq) {
    bool copies = false;
    for (int i = 0; i < p->n; i++) copies |= p->specs[i].copy;
    if ((!tp || tp->size == 1) && !copies) {
        *sumsq = rt_sumsq(p->be, p->grad, p->train_numel);
        return RT_OK;
    }
    double rep = 0, split = 0;
    /* runs of parameters of one kind go to the backend as one sum (the alignment gaps between
     * parameters hold zeros) */
    for (int i = 0; i < p->n;) {
        if (p->specs[i].frozen) {
            i++;
            continue;
        }
        const int sharded = p->specs[i].tp != RT_TP_NONE, copy = p->specs[i].copy;
        size_t begin, end;
        const int j = rt_train_run(p, i, rt_kind_norm, &begin, &end);
        double s = copy ? 0 : rt_sumsq(p->be, p->grad + begin, end - begin);
        if (sharded)
            split += s;
        else
            rep += s;
        i = j;
    }
    if (!tp || tp->size == 1) {
        *sumsq = rep + split;
        return RT_OK;
    }
    /* host memory: tp is the group's host comm (rt_grid.h), so no device buffer per step */
    rt_status st = rt_sum_double(tp, &split);
    *sumsq = rep + split;
    return st;
}

rt_status rt_grad_norm_tp(const rt_params *p, rt_comm *tp, double *norm) {
    if (!tp || tp->size == 1) { /* as before: the single rank's norm, not the root of its square */
        *norm = rt_grad_norm(p);
        return RT_OK;
    }
    double sumsq = 0;
    rt_status st = rt_grad_sumsq_tp(p, tp, &sumsq);
    *norm = sqrt(sumsq);
    return st;
}

rt_status rt_norm_over(rt_comm *c, double *norm) {
    double sumsq = *norm * *norm;
    rt_status st = rt_sum_double(c, &sumsq);
    *norm = sqrt(sumsq);
    return st;
}

rt_status rt_grad_norm_grid(const rt_params *p, rt_comm *tp, rt_comm *pp, double *norm) {
    if (!pp || pp->size == 1) return rt_grad_norm_tp(p, tp, norm);
    double sumsq = 0;
    rt_status st = rt_grad_sumsq_tp(p, tp, &sumsq);
    if (st == RT_OK) st = rt_sum_double(pp, &sumsq);
    *norm = sqrt(sumsq);
    return st;
}

/* f on each run of trainable parameters that share a weight-decay setting: [begin, end) of the
 * slab (the alignment gaps between parameters hold zeros in every buffer, so they stay zero). */
static void rt_decay_runs(rt_params *p, void (*f)(rt_params *p, size_t begin, size_t end, bool no_decay, const void *u),
                          const void *u) {
    for (int i = 0; i < p->n;) {
        if (p->specs[i].frozen) {
            i++;
            continue;
        }
        size_t begin, end;
        const int j = rt_train_run(p, i, rt_kind_decay, &begin, &end);
        f(p, begin, end, p->specs[i].no_decay, u);
        i = j;
    }
}

static void rt_adamw_run_on(rt_params *p, size_t begin, size_t end, bool no_decay, const void *s) {
    p->be->ops->adamw_step(p->be->ctx, (const rt_step_state *)s, no_decay, p->param + begin, p->grad + begin,
                           p->m + begin, p->v + begin, end - begin);
}

rt_status rt_adamw_step_on(rt_params *p, const rt_step_state *s) {
    rt_status st = rt_params_alloc_moments(p);
    if (st == RT_OK) rt_decay_runs(p, rt_adamw_run_on, s);
    return st;
}

void rt_step_scalars(rt_step_state *s, const rt_adamw_hparams *h, int64_t t) {
    const rt_step_state zero = {0};
    *s = zero;
    /* the floats rt_adamw passes the backend, so the scalars are the host path's */
    s->adam[0] =
        rt_adamw_scalars_of((float)h->lr, (float)h->beta1, (float)h->beta2, (float)h->eps, (float)h->weight_decay, t);
    s->adam[1] = rt_adamw_scalars_of((float)h->lr, (float)h->beta1, (float)h->beta2, (float)h->eps, 0.0f, t);
}

typedef struct {
    const rt_adamw_hparams *h;
    float grad_scale;
    int64_t t;
} rt_adamw_call;

static void rt_adamw_run(rt_params *p, size_t begin, size_t end, bool no_decay, const void *u) {
    const rt_adamw_call *c = u;
    rt_adamw(p->be, p->param + begin, p->grad + begin, p->m + begin, p->v + begin, end - begin, (float)c->h->lr,
             (float)c->h->beta1, (float)c->h->beta2, (float)c->h->eps, no_decay ? 0.0f : (float)c->h->weight_decay,
             c->grad_scale, c->t);
}

rt_status rt_adamw_step(rt_params *p, const rt_adamw_hparams *h, float grad_scale, int64_t t) {
    RT_CHECK(t >= 1, "AdamW step %lld", (long long)t);
    rt_status st = rt_params_alloc_moments(p);
    const rt_adamw_call c = {h, grad_scale, t};
    if (st == RT_OK) rt_decay_runs(p, rt_adamw_run, &c);
    return st;
}
