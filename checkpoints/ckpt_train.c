/* Training checkpoints over the native container (see ckpt_train.h). */
#include "checkpoints/ckpt_train.h"

#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_native.h"

static const char *const ckpt_train_kinds[3] = {"param", "exp_avg", "exp_avg_sq"};

static float *ckpt_train_buffer(const rt_params *p, int kind) {
    return kind == 0 ? p->param : kind == 1 ? p->m : p->v;
}

rt_status ckpt_train_save(const char *path, const rt_params *p, const char *meta_json) {
    rt_status st = RT_OK;
    ckpt_native_writer *w = NULL;
    float *host = NULL;
    size_t cap = 0;
    RT_TRY(ckpt_native_writer_begin(path, meta_json, &w));
    for (int kind = 0; kind < 3; kind++) {
        const float *buf = ckpt_train_buffer(p, kind);
        if (!buf) continue; /* moments exist once the optimizer ran */
        for (int i = 0; i < p->n; i++) {
            const rt_param_spec *s = &p->specs[i];
            char name[RT_PARAM_NAME_MAX + 16];
            size_t shape[RT_PARAM_MAX_DIMS];
            snprintf(name, sizeof name, "%s/%s", ckpt_train_kinds[kind], s->name);
            for (int d = 0; d < s->ndim; d++) shape[d] = (size_t)s->shape[d];
            if (s->numel > cap) host = rt_xrealloc(host, (cap = s->numel) * sizeof(float));
            p->be->ops->to_host(p->be->ctx, host, buf + s->offset, s->numel * sizeof(float));
            RT_TRY(ckpt_native_writer_add(w, name, RT_F32, s->ndim, shape, host));
        }
    }
    st = ckpt_native_writer_commit(w);
    w = NULL;
fail:
    if (w) ckpt_native_writer_abort(w);
    free(host);
    return st;
}

rt_status ckpt_train_load(const char *path, rt_params *p, char **meta_json) {
    rt_status st = RT_OK;
    ckpt_native_file *f = NULL;
    float *host = NULL;
    size_t cap = 0;
    *meta_json = NULL;
    RT_TRY(ckpt_native_open(path, &f));
    RT_TRY(rt_params_alloc_moments(p));
    for (int kind = 0; kind < 3; kind++) {
        float *buf = ckpt_train_buffer(p, kind);
        for (int i = 0; i < p->n; i++) {
            const rt_param_spec *s = &p->specs[i];
            char name[RT_PARAM_NAME_MAX + 16];
            ckpt_native_record r;
            snprintf(name, sizeof name, "%s/%s", ckpt_train_kinds[kind], s->name);
            if (!ckpt_native_has(f, name))
                RT_FAIL(RT_ERR_FORMAT, "%s: record '%s' is missing (a checkpoint of another model or config?)", path,
                        name);
            RT_TRY(ckpt_native_find(f, name, &r));
            int same = r.ndim == s->ndim;
            for (int d = 0; same && d < s->ndim; d++) same = r.shape[d] == (size_t)s->shape[d];
            if (!same) {
                char got[96], want[96];
                size_t ws[RT_PARAM_MAX_DIMS];
                for (int d = 0; d < s->ndim; d++) ws[d] = (size_t)s->shape[d];
                RT_FAIL(RT_ERR_FORMAT, "%s: record '%s' has shape %s, this model needs %s", path, name,
                        ckpt_shape_str(r.ndim, r.shape, got, sizeof got),
                        ckpt_shape_str(s->ndim, ws, want, sizeof want));
            }
            if (s->numel > cap) host = rt_xrealloc(host, (cap = s->numel) * sizeof(float));
            RT_TRY(ckpt_native_read_f32(f, name, host, s->numel));
            p->be->ops->to_device(p->be->ctx, buf + s->offset, host, s->numel * sizeof(float));
        }
    }
    *meta_json = rt_xstrdup(ckpt_native_metadata(f));
fail:
    free(host);
    ckpt_native_close(f);
    return st;
}

const rt_train_io *ckpt_train_io(void) {
    static const rt_train_io io = {
        .save = ckpt_train_save,
        .load = ckpt_train_load,
        .latest = ckpt_native_latest,
        .prune = ckpt_native_prune,
        .step_path = ckpt_native_step_path,
    };
    return &io;
}
