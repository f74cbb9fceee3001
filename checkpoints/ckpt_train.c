/* Training checkpoints over the native container (see ckpt_train.h). Shards travel through
 * ckpt_tp's rules, the same ones HF import and export use, so every layout agrees. */
#include "checkpoints/ckpt_train.h"

#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_native.h"
#include "checkpoints/ckpt_pp.h"
#include "checkpoints/ckpt_tp.h"

static const char *const ckpt_train_kinds[3] = {"param", "exp_avg", "exp_avg_sq"};

static float *ckpt_train_buffer(const rt_params *p, int kind) {
    return kind == 0 ? p->param : kind == 1 ? p->m : p->v;
}

/* The writer's sink: each record under its kind's prefix. */
typedef struct {
    ckpt_native_writer *w;
    int kind;
    const rt_status *wst; /* an earlier kind's write error: write nothing more */
} ckpt_train_sink;

static rt_status ckpt_train_sink_add(void *ctx, const ckpt_pp_record *r, const float *full) {
    const ckpt_train_sink *k = ctx;
    if (*k->wst != RT_OK) return *k->wst;
    char name[RT_PARAM_NAME_MAX + 16];
    size_t shape[RT_PARAM_MAX_DIMS];
    snprintf(name, sizeof name, "%s/%s", ckpt_train_kinds[k->kind], r->name);
    for (int d = 0; d < r->ndim; d++) shape[d] = (size_t)r->shape[d];
    return ckpt_native_writer_add(k->w, name, RT_F32, r->ndim, shape, full);
}

rt_status ckpt_train_save(const char *path, const rt_params *p, rt_comm *tp, rt_comm *pp, const char *meta_json) {
    rt_status st = RT_OK;
    const bool writer = tp->rank == 0 && pp->rank == 0;
    /* the writer's outcome: after a write error it keeps receiving, so every rank still takes
     * part in every transfer, and reports the error at the end */
    rt_status wst = RT_OK;
    ckpt_train_sink k = {.wst = &wst};
    ckpt_tp_scratch scr = {0};
    if (writer) wst = ckpt_native_writer_begin(path, meta_json, &k.w);
    /* kind by kind, stage by stage: the records come in the order one process writes them;
     * moments exist once the optimizer ran */
    for (k.kind = 0; k.kind < 3; k.kind++) {
        rt_status sst = RT_OK;
        RT_TRY(ckpt_pp_gather(path, p, ckpt_train_buffer(p, k.kind), tp, pp, &scr, ckpt_train_sink_add, &k, &sst));
        if (wst == RT_OK) wst = sst;
    }
    if (writer) {
        if (wst == RT_OK) wst = ckpt_native_writer_commit(k.w);
        else ckpt_native_writer_abort(k.w);
        k.w = NULL;
    }
    st = ckpt_pp_agree(tp, pp, wst, path, "checkpoint");
fail:
    if (k.w) ckpt_native_writer_abort(k.w);
    ckpt_tp_scratch_free(p->be, &scr);
    return st;
}

/* This rank's part of ckpt_train_load: no collectives, so a failure cannot strand the others. */
/* A whole checkpoint of another model (a record missing, or of another shape) is RT_ERR_CONFIG,
 * which a resume reports as it is; a damaged one (the container's checks) stays RT_ERR_FORMAT,
 * which a resume skips for an older one. */
static rt_status ckpt_train_load_local(const char *path, rt_params *p, const rt_comm *tp, char **meta_json) {
    rt_status st = RT_OK;
    ckpt_native_file *f = NULL;
    float *full = NULL, *shard = NULL;
    size_t full_cap = 0, shard_cap = 0;
    RT_TRY(ckpt_native_open(path, &f));
    RT_TRY(rt_params_alloc_moments(p));
    for (int kind = 0; kind < 3; kind++) {
        float *buf = ckpt_train_buffer(p, kind);
        for (int i = 0; i < p->n; i++) {
            const rt_param_spec *s = &p->specs[i];
            if (kind > 0 && s->frozen) continue; /* no moments */
            char name[RT_PARAM_NAME_MAX + 16];
            ckpt_native_record r;
            ckpt_tp_desc d;
            RT_TRY(ckpt_tp_spec_desc(path, s, tp, &d));
            snprintf(name, sizeof name, "%s/%s", ckpt_train_kinds[kind], s->name);
            if (!ckpt_native_has(f, name))
                RT_FAIL(RT_ERR_CONFIG, "%s: record '%s' is missing (a checkpoint of another model or config?)", path,
                        name);
            RT_TRY(ckpt_native_find(f, name, &r));
            int same = r.ndim == d.ndim;
            for (int k = 0; same && k < d.ndim; k++) same = r.shape[k] == (size_t)d.full[k];
            if (!same) {
                char got[96], want[96];
                size_t ws[RT_PARAM_MAX_DIMS];
                for (int k = 0; k < d.ndim; k++) ws[k] = (size_t)d.full[k];
                RT_FAIL(RT_ERR_CONFIG, "%s: record '%s' has shape %s, this model needs %s (full, unsharded)", path,
                        name, ckpt_shape_str(r.ndim, r.shape, got, sizeof got),
                        ckpt_shape_str(d.ndim, ws, want, sizeof want));
            }
            size_t n = ckpt_tp_full_numel(&d);
            if (n > full_cap) full = rt_xrealloc(full, (full_cap = n) * sizeof(float));
            if (s->numel > shard_cap) shard = rt_xrealloc(shard, (shard_cap = s->numel) * sizeof(float));
            RT_TRY(ckpt_native_read_f32(f, name, full, n));
            ckpt_tp_shard(&d, shard, full);
            rt_to_device(p->be, buf + s->offset, shard, s->numel * sizeof(float));
        }
    }
    *meta_json = rt_xstrdup(ckpt_native_metadata(f));
fail:
    free(full);
    free(shard);
    ckpt_native_close(f);
    return st;
}

rt_status ckpt_train_load(const char *path, rt_params *p, rt_comm *tp, rt_comm *pp, char **meta_json) {
    *meta_json = NULL;
    rt_status st = ckpt_train_load_local(path, p, tp, meta_json);
    /* agree: a rank that loaded must not train on while another rank stopped */
    float worst = (float)st;
    rt_comm *groups[2] = {tp, pp};
    rt_status cst = RT_OK;
    for (int g = 0; g < 2 && cst == RT_OK; g++)
        if (groups[g]->size > 1) cst = groups[g]->ops->all_reduce(groups[g]->ctx, &worst, 1, RT_REDUCE_MAX);
    if (st == RT_OK && (cst != RT_OK || worst != 0.0f)) {
        free(*meta_json);
        *meta_json = NULL;
        if (cst != RT_OK) return cst;
        return rt_errorf((rt_status)(int)worst, "%s: another tp rank or pipeline stage failed to load the checkpoint (%s)",
                         path, rt_status_name((rt_status)(int)worst));
    }
    return st; /* this rank's own error keeps its message */
}

const rt_train_io *ckpt_train_io(void) {
    static const rt_train_io io = {
        .save = ckpt_train_save,
        .load = ckpt_train_load,
        .resume_list = ckpt_native_resume_list,
        .prune = ckpt_native_prune,
        .step_path = ckpt_native_step_path,
    };
    return &io;
}
