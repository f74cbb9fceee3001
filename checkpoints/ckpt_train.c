/* Training checkpoints over the native container (see ckpt_train.h). Shards travel through
 * ckpt_tp's rules, the same ones HF import and export use, so every layout agrees. */
#include "checkpoints/ckpt_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_native.h"
#include "checkpoints/ckpt_pp.h"
#include "checkpoints/ckpt_tp.h"
#include "runtime/base/rt_json.h"

static const char *const ckpt_train_kinds[3] = {"param", "exp_avg", "exp_avg_sq"};

static float *ckpt_train_buffer(const rt_params *p, int kind) { return kind == 0 ? p->param : kind == 1 ? p->m : p->v; }

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

/* ---- the frozen base's fingerprint (LoRA) ---- */

/* Each full tensor's name and values through CRC-32, mixed to 64 bits and summed, so neither
 * the tp layout nor the order the stages send them in changes it. */
typedef struct {
    uint64_t sum;
    int64_t tensors;
} ckpt_train_base;

static uint64_t ckpt_train_mix(uint64_t x) { /* splitmix64's finalizer */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static rt_status ckpt_train_base_add(void *ctx, const ckpt_pp_record *r, const float *full) {
    ckpt_train_base *b = ctx;
    size_t n = 1;
    for (int d = 0; d < r->ndim; d++) n *= (size_t)r->shape[d];
    const uint64_t name = ckpt_native_crc32(r->name, strlen(r->name)),
                   data = ckpt_native_crc32(full, n * sizeof(float));
    b->sum += ckpt_train_mix(name << 32 | data);
    b->tensors++;
    return RT_OK;
}

/* The frozen parameters' fingerprint on the first stage's tp rank 0 (collective over tp, pp). */
static rt_status ckpt_train_base_of(const char *path, const rt_params *p, rt_comm *tp, rt_comm *pp,
                                    ckpt_train_base *out) {
    ckpt_tp_scratch scr = {0};
    rt_status sst = RT_OK;
    *out = (ckpt_train_base){0};
    rt_status st = ckpt_pp_gather_params(path, p, CKPT_PP_FROZEN, tp, pp, &scr, ckpt_train_base_add, out, &sst);
    ckpt_tp_scratch_free(p->be, &scr);
    return st != RT_OK ? st : sst;
}

/* meta_json with "frozen_base": {"fingerprint", "tensors"} added (the caller frees it). */
static char *ckpt_train_meta_with_base(const char *meta_json, const ckpt_train_base *b) {
    cJSON *meta = meta_json ? cJSON_Parse(meta_json) : NULL;
    if (!cJSON_IsObject(meta)) {
        cJSON_Delete(meta);
        meta = cJSON_CreateObject();
    }
    char hex[24];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)b->sum);
    cJSON *base = cJSON_AddObjectToObject(meta, "frozen_base");
    cJSON_AddStringToObject(base, "fingerprint", hex);
    cJSON_AddNumberToObject(base, "tensors", (double)b->tensors);
    char *text = cJSON_PrintUnformatted(meta);
    cJSON_Delete(meta);
    char *out = rt_xstrdup(text);
    cJSON_free(text);
    return out;
}

/* A checkpoint's frozen_base, when it has one (written without the frozen parameters). */
static bool ckpt_train_meta_base(const char *meta_json, ckpt_train_base *b) {
    cJSON *meta = meta_json ? cJSON_Parse(meta_json) : NULL;
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(meta, "frozen_base");
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(base, "fingerprint"),
                *n = cJSON_GetObjectItemCaseSensitive(base, "tensors");
    const bool ok = cJSON_IsString(fp) && cJSON_IsNumber(n);
    if (ok) *b = (ckpt_train_base){strtoull(fp->valuestring, NULL, 16), (int64_t)n->valuedouble};
    cJSON_Delete(meta);
    return ok;
}

rt_status ckpt_train_save(const char *path, const rt_params *p, rt_comm *tp, rt_comm *pp, const char *meta_json) {
    rt_status st = RT_OK;
    const bool writer = tp->rank == 0 && pp->rank == 0;
    /* the writer's outcome: after a write error it keeps receiving, so every rank still takes
     * part in every transfer, and reports the error at the end */
    rt_status wst = RT_OK;
    ckpt_train_sink k = {.wst = &wst};
    ckpt_tp_scratch scr = {0};
    char *meta = NULL;
    /* LoRA: the frozen base is not written, only its fingerprint, which a resume checks */
    const bool frozen = rt_params_n_frozen(p) > 0;
    if (frozen) {
        ckpt_train_base base;
        RT_TRY(ckpt_train_base_of(path, p, tp, pp, &base));
        meta = ckpt_train_meta_with_base(meta_json, &base);
    }
    if (writer) wst = ckpt_native_writer_begin(path, meta ? meta : meta_json, &k.w);
    /* kind by kind, stage by stage: the records come in the order one process writes them;
     * moments exist once the optimizer ran */
    for (k.kind = 0; k.kind < 3; k.kind++) {
        rt_status sst = RT_OK;
        if (k.kind == 0 && frozen)
            RT_TRY(ckpt_pp_gather_params(path, p, CKPT_PP_TRAINABLE, tp, pp, &scr, ckpt_train_sink_add, &k, &sst));
        else
            RT_TRY(ckpt_pp_gather(path, p, ckpt_train_buffer(p, k.kind), tp, pp, &scr, ckpt_train_sink_add, &k, &sst));
        if (wst == RT_OK) wst = sst;
    }
    if (writer) {
        if (wst == RT_OK)
            wst = ckpt_native_writer_commit(k.w);
        else
            ckpt_native_writer_abort(k.w);
        k.w = NULL;
    }
    st = ckpt_pp_agree(tp, pp, wst, path, "checkpoint");
fail:
    if (k.w) ckpt_native_writer_abort(k.w);
    ckpt_tp_scratch_free(p->be, &scr);
    free(meta);
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
    ckpt_train_base base;
    RT_TRY(ckpt_native_open(path, &f));
    RT_TRY(rt_params_alloc_moments(p));
    const bool without_base = ckpt_train_meta_base(ckpt_native_metadata(f), &base);
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
            if (s->frozen && without_base && !ckpt_native_has(f, name))
                continue; /* the base as loaded: checked after */
            if (!ckpt_native_has(f, name) && without_base)
                RT_FAIL(RT_ERR_CONFIG,
                        "%s: record '%s' is missing: the checkpoint is a LoRA run's (adapters, no base "
                        "weights); resume it with the LoRA settings it trained with",
                        path, name);
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

/* A checkpoint written without the frozen base (LoRA) resumes only over the base it trained on:
 * the model's frozen parameters against the checkpoint's fingerprint (collective over tp, pp). */
static rt_status ckpt_train_check_base(const char *path, const rt_params *p, rt_comm *tp, rt_comm *pp,
                                       const char *meta_json) {
    ckpt_train_base want, have;
    if (!ckpt_train_meta_base(meta_json, &want) || rt_params_n_frozen(p) == 0) return RT_OK;
    rt_status st = ckpt_train_base_of(path, p, tp, pp, &have);
    if (st == RT_OK && tp->rank == 0 && pp->rank == 0 && (have.sum != want.sum || have.tensors != want.tensors))
        st =
            rt_errorf(RT_ERR_CONFIG,
                      "%s: the checkpoint trained its adapters on another base model (its frozen weights' "
                      "fingerprint %016llx over %lld tensors; this model's %016llx over %lld): resume over the --model "
                      "it started from",
                      path, (unsigned long long)want.sum, (long long)want.tensors, (unsigned long long)have.sum,
                      (long long)have.tensors);
    return ckpt_pp_agree(tp, pp, st, path, "base check");
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
        return rt_errorf((rt_status)(int)worst,
                         "%s: another tp rank or pipeline stage failed to load the checkpoint (%s)", path,
                         rt_status_name((rt_status)(int)worst));
    }
    if (st == RT_OK) st = ckpt_train_check_base(path, p, tp, pp, *meta_json); /* every rank loaded: all take part */
    if (st != RT_OK) {
        free(*meta_json);
        *meta_json = NULL;
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
