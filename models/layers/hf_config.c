/* HF config.json conventions shared by the model families (see hf_config.h). */
#include "models/layers/hf_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoints/ckpt_peft_weights.h"
#include "checkpoints/ckpt_pp.h"
#include "checkpoints/ckpt_weights.h"
#include "runtime/base/rt_atomic.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_json.h"

bool mdl_hf_act_from_name(const char *name, rt_act_kind *out) {
    if (strcmp(name, "gelu") == 0)
        *out = RT_ACT_GELU_ERF;
    else if (strcmp(name, "gelu_new") == 0 || strcmp(name, "gelu_pytorch_tanh") == 0 || strcmp(name, "gelu_fast") == 0)
        *out = RT_ACT_GELU_TANH;
    else if (strcmp(name, "relu") == 0)
        *out = RT_ACT_RELU;
    else if (strcmp(name, "tanh") == 0)
        *out = RT_ACT_TANH;
    else
        return false;
    return true;
}

const char *mdl_hf_act_name(rt_act_kind act) {
    switch (act) {
    case RT_ACT_GELU_TANH: return "gelu_new";
    case RT_ACT_GELU_ERF: return "gelu";
    case RT_ACT_RELU: return "relu";
    case RT_ACT_TANH: return "tanh";
    }
    return "unknown";
}

rt_status mdl_hf_config_result(rt_status st, const char *path, bool from_validation) {
    if (st != RT_OK && from_validation) {
        char msg[512]; /* rt_errorf writes the buffer rt_error_message() points into */
        snprintf(msg, sizeof msg, "%s", rt_error_message());
        st = rt_errorf(st, "%s: %s", path, msg);
    }
    if (st != RT_OK && st != RT_ERR_CONFIG && st != RT_ERR_IO && st != RT_ERR_FORMAT) st = RT_ERR_CONFIG;
    return st;
}

#define FIELD(type, f, cfg) ((type *)((char *)(cfg) + (f)->offset))

void mdl_fields_default(const mdl_field *fields, size_t n, void *cfg) {
    for (const mdl_field *f = fields; f < fields + n; f++) {
        if (f->kind == MDL_FIELD_INT) *FIELD(int, f, cfg) = (int)f->def;
        if (f->kind == MDL_FIELD_FLOAT) *FIELD(float, f, cfg) = (float)f->def;
        if (f->kind == MDL_FIELD_BOOL) *FIELD(bool, f, cfg) = f->def != 0;
    }
}

rt_status mdl_fields_read(const cJSON *root, const char *path, const mdl_field *fields, size_t n, void *cfg) {
    rt_status st = RT_OK;
    for (const mdl_field *f = fields; f < fields + n && st == RT_OK; f++) {
        if (f->kind == MDL_FIELD_INT) {
            int *v = FIELD(int, f, cfg);
            st = rt_json_get_int_range(root, path, f->key, v, f->required, *v, f->min, f->max);
        } else if (f->kind == MDL_FIELD_FLOAT) {
            float *v = FIELD(float, f, cfg);
            st = rt_json_get_float(root, path, f->key, v, f->required, *v);
        } else {
            bool *v = FIELD(bool, f, cfg);
            st = rt_json_get_bool(root, path, f->key, v, f->required, *v);
        }
    }
    return st;
}

rt_status mdl_fields_check(const char *what, const mdl_field *fields, size_t n, const void *cfg) {
    for (const mdl_field *f = fields; f < fields + n; f++) {
        if (f->kind == MDL_FIELD_FLOAT) { /* rates, epsilons, scales: finite, and positive where min says so */
            const float x = *FIELD(const float, f, cfg);
            if (!isfinite(x) || x < 0 || (f->min > 0 && !(x > 0)))
                return rt_errorf(RT_ERR_CONFIG, "%s: field '%s' is %g, expected a %s number", what, f->key, (double)x,
                                 f->min > 0 ? "positive" : "finite non-negative");
            continue;
        }
        if (f->kind != MDL_FIELD_INT) continue;
        int v = *FIELD(const int, f, cfg);
        if (v > f->max)
            return rt_errorf(RT_ERR_CONFIG, "%s: field '%s' is %d, more than the limit %d", what, f->key, v, f->max);
        if (v < f->min)
            return rt_errorf(RT_ERR_CONFIG, "%s: field '%s' is %d, less than the minimum %d", what, f->key, v, f->min);
    }
    return RT_OK;
}

void mdl_fields_write(cJSON *config, const mdl_field *fields, size_t n, const void *cfg) {
    for (const mdl_field *f = fields; f < fields + n; f++) {
        if (f->kind == MDL_FIELD_INT) {
            int v = *FIELD(const int, f, cfg);
            if (v == 0 && f->min == 0)
                cJSON_AddNullToObject(config, f->key);
            else
                cJSON_AddNumberToObject(config, f->key, v);
        } else if (f->kind == MDL_FIELD_FLOAT) {
            cJSON_AddNumberToObject(config, f->key, *FIELD(const float, f, cfg));
        } else {
            cJSON_AddBoolToObject(config, f->key, *FIELD(const bool, f, cfg));
        }
    }
}

rt_status mdl_check_params(const char *what, const char *fields, uint64_t params) {
    if (params <= MDL_MAX_PARAMS) return RT_OK;
    if (params == UINT64_MAX)
        return rt_errorf(RT_ERR_CONFIG, "%s: %s give more than 2^64 parameters, more than the limit %llu", what, fields,
                         (unsigned long long)MDL_MAX_PARAMS);
    return rt_errorf(RT_ERR_CONFIG, "%s: %s give %llu parameters, more than the limit %llu", what, fields,
                     (unsigned long long)params, (unsigned long long)MDL_MAX_PARAMS);
}

rt_status mdl_check_activations(const char *what, uint64_t layers, uint64_t rows, uint64_t len, uint64_t width,
                                const char *hint) {
    uint64_t bytes = mdl_size_mul(mdl_size_mul(mdl_size_add(layers, 1), rows), mdl_size_mul(len, width));
    bytes = mdl_size_mul(bytes, sizeof(float));
    if (bytes <= MDL_MAX_ACT_BYTES) {
        /* kernels index token rows (gathers, the pooled rows) with int32 */
        if (mdl_size_mul(rows, len) <= INT32_MAX) return RT_OK;
        return rt_errorf(RT_ERR_CONFIG, "%s: %llu rows of %llu tokens is more than the limit of %d token rows (%s)",
                         what, (unsigned long long)rows, (unsigned long long)len, INT32_MAX, hint);
    }
    return rt_errorf(RT_ERR_NOMEM,
                     "%s: %llu rows of %llu tokens, %llu layer(s) with up to %llu floats per token, "
                     "need more than the limit of 2^56 bytes (%s)",
                     what, (unsigned long long)rows, (unsigned long long)len, (unsigned long long)layers,
                     (unsigned long long)width, hint);
}

rt_status mdl_check_tp(int tp, const char *heads_field, int heads, const char *ffn_field, int ffn) {
    if (tp < 1) return rt_errorf(RT_ERR_CONFIG, "--tp %d must be >= 1", tp);
    if (heads % tp)
        return rt_errorf(RT_ERR_CONFIG,
                         "--tp %d does not divide the model's %s %d (attention heads are split across "
                         "tensor-parallel ranks)",
                         tp, heads_field, heads);
    if (ffn % tp) return rt_errorf(RT_ERR_CONFIG, "--tp %d does not divide the model's %s %d", tp, ffn_field, ffn);
    return RT_OK;
}

rt_status mdl_check_dropouts(const char *what, const float *p, int n) {
    for (int i = 0; i < n; i++)
        if (!(p[i] >= 0 && p[i] < 1)) return rt_errorf(RT_ERR_CONFIG, "%s: dropout %g not in [0, 1)", what, p[i]);
    return RT_OK;
}

rt_status mdl_hf_read_labels(const cJSON *root, const char *path, int *num_labels) {
    const cJSON *id2label = cJSON_GetObjectItemCaseSensitive(root, "id2label");
    int n = cJSON_IsObject(id2label) ? cJSON_GetArraySize(id2label) : 0;
    if (n > MDL_MAX_LABELS)
        return rt_errorf(RT_ERR_CONFIG, "%s: field 'id2label' has %d labels, more than the limit %d", path, n,
                         MDL_MAX_LABELS);
    if (n >= 1) {
        *num_labels = n;
        return RT_OK;
    }
    return rt_json_get_int_range(root, path, "num_labels", num_labels, false, *num_labels, 1, MDL_MAX_LABELS);
}

rt_status mdl_hf_label_names(const char *config_path, char ***names, int *n) {
    cJSON *root = NULL;
    *names = NULL;
    *n = 0;
    rt_status st = rt_json_load(config_path, &root);
    if (st != RT_OK) return st;
    const cJSON *id2label = cJSON_GetObjectItemCaseSensitive(root, "id2label");
    const int count = cJSON_IsObject(id2label) ? cJSON_GetArraySize(id2label) : 0;
    bool named = false;
    char **out = count > 1 && count <= MDL_MAX_LABELS ? rt_xcalloc((size_t)count, sizeof *out) : NULL;
    for (int i = 0; out && i < count; i++) {
        char key[32], dflt[32];
        snprintf(key, sizeof key, "%d", i);
        snprintf(dflt, sizeof dflt, "LABEL_%d", i);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(id2label, key);
        if (!cJSON_IsString(v) || !v->valuestring || !*v->valuestring) { /* not 0..count-1: not names to keep */
            for (int k = 0; k < i; k++) free(out[k]);
            free(out);
            out = NULL;
            break;
        }
        out[i] = rt_xstrdup(v->valuestring);
        named |= strcmp(out[i], dflt) != 0;
    }
    if (out && !named) {
        for (int k = 0; k < count; k++) free(out[k]);
        free(out);
        out = NULL;
    }
    cJSON_Delete(root);
    *names = out;
    *n = out ? count : 0;
    return RT_OK;
}

cJSON *mdl_hf_config_new(const char *model_type, const char *arch) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model_type", model_type);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "architectures"), cJSON_CreateString(arch));
    return o;
}

void mdl_hf_add_labels(cJSON *config, int num_labels) { mdl_hf_set_labels(config, num_labels, NULL, false); }

void mdl_hf_set_labels(cJSON *config, int num_labels, const char *const *names, bool multi_label) {
    cJSON_DeleteItemFromObjectCaseSensitive(config, "problem_type");
    cJSON_DeleteItemFromObjectCaseSensitive(config, "id2label");
    cJSON_DeleteItemFromObjectCaseSensitive(config, "label2id");
    if (num_labels == 1)
        cJSON_AddStringToObject(config, "problem_type", "regression");
    else if (multi_label)
        cJSON_AddStringToObject(config, "problem_type", "multi_label_classification");
    else if (names)
        cJSON_AddStringToObject(config, "problem_type", "single_label_classification");
    cJSON *id2label = cJSON_AddObjectToObject(config, "id2label"),
          *label2id = cJSON_AddObjectToObject(config, "label2id");
    for (int i = 0; i < num_labels; i++) {
        char key[32], name[32];
        snprintf(key, sizeof key, "%d", i);
        snprintf(name, sizeof name, "LABEL_%d", i);
        const char *label = names && num_labels > 1 ? names[i] : name;
        cJSON_AddStringToObject(id2label, key, label);
        cJSON_AddNumberToObject(label2id, label, i);
    }
}

rt_status mdl_hf_write_json(cJSON *config, const char *path) {
    char *text = cJSON_Print(config);
    cJSON_Delete(config);
    rt_status st = rt_atomic_write_file(path, text, strlen(text));
    cJSON_free(text);
    return st;
}

/* The first stage's collection of every stage's tensors, in arrival order. */
typedef struct {
    ckpt_pp_record *recs;
    float **data;
    int n;
    size_t cap_recs, cap_data;
} hf_stage_tensors;

static rt_status hf_collect(void *ctx, const ckpt_pp_record *r, const float *full) {
    hf_stage_tensors *t = ctx;
    RT_GROW(t->recs, t->cap_recs, (size_t)t->n + 1);
    RT_GROW(t->data, t->cap_data, (size_t)t->n + 1);
    size_t n = 1;
    for (int d = 0; d < r->ndim; d++) n *= (size_t)r->shape[d];
    t->recs[t->n] = *r;
    t->data[t->n] = rt_xmalloc(n * sizeof(float));
    memcpy(t->data[t->n++], full, n * sizeof(float));
    return RT_OK;
}

/* The whole model as one process would hold it, on a new host backend (the caller frees both). */
static rt_status hf_whole_params(const hf_stage_tensors *t, rt_backend **host, rt_params *whole) {
    rt_status st = RT_OK;
    RT_TRY(rt_cpu_backend_init(1, host));
    rt_params_init(whole, *host);
    for (int i = 0; i < t->n; i++) {
        const ckpt_pp_record *r = &t->recs[i];
        int64_t shape[RT_PARAM_MAX_DIMS];
        for (int d = 0; d < r->ndim; d++) shape[d] = (int64_t)r->shape[d];
        /* a vocab-parallel table holds tp 1's padded rows; the record has the real ones */
        if (r->tp_rule == RT_TP_VOCAB) shape[0] = ckpt_tp_padded_vocab(r->vocab_rows, 1);
        const int k = rt_params_add(whole, r->name, r->ndim, shape, (rt_tp_rule)r->tp_rule, r->no_decay != 0,
                                    RT_INIT_ZEROS, 0.0f);
        whole->specs[k].vocab_rows = r->vocab_rows;
    }
    RT_TRY(rt_params_alloc(whole)); /* zeroed: the padding rows stay 0 */
    for (int i = 0; i < t->n; i++) {
        size_t n = 1;
        for (int d = 0; d < t->recs[i].ndim; d++) n *= (size_t)t->recs[i].shape[d];
        rt_to_device(*host, whole->param + whole->specs[i].offset, t->data[i], n * sizeof(float));
    }
fail:
    return st;
}

/* What the first stage's tp rank 0 writes from the whole model. */
typedef rt_status (*hf_whole_writer)(void *ctx, rt_params *whole);

/* The pipeline stages' save: every tensor (or every trainable one) to the first stage, whose tp
 * rank 0 writes from the whole model; every rank returns the writer's outcome (what and kind name
 * it in messages). */
static rt_status hf_save_stages(const char *what, const char *kind, const rt_params *params, bool trainable_only,
                                rt_comm *tp, rt_comm *pp, hf_whole_writer write, void *ctx) {
    hf_stage_tensors t = {0};
    ckpt_tp_scratch scr = {0};
    rt_status sst = RT_OK, wst = RT_OK;
    rt_status st = ckpt_pp_gather_params(what, params, trainable_only ? CKPT_PP_TRAINABLE : CKPT_PP_ALL, tp, pp, &scr,
                                         hf_collect, &t, &sst);
    ckpt_tp_scratch_free(params->be, &scr);
    if (st == RT_OK && tp->rank == 0 && pp->rank == 0) {
        rt_backend *host = NULL;
        rt_params whole = {0};
        wst = sst;
        if (wst == RT_OK) wst = hf_whole_params(&t, &host, &whole);
        if (wst == RT_OK) wst = write(ctx, &whole);
        rt_params_free(&whole);
        rt_backend_free(host);
    }
    for (int i = 0; i < t.n; i++) free(t.data[i]);
    free(t.data);
    free(t.recs);
    return st != RT_OK ? st : ckpt_pp_agree(tp, pp, wst, what, kind);
}

typedef struct {
    const char *dir, *path;
    const ckpt_map *map;
    int vocab_size, num_heads;
    cJSON *config;
} hf_write_job;

static rt_status hf_write_folder(void *ctx, rt_params *whole) {
    hf_write_job *j = ctx;
    cJSON *config = j->config;
    j->config = NULL; /* mdl_hf_save_folder deletes it */
    return mdl_hf_save_folder(j->dir, j->map, whole, j->vocab_size, j->num_heads, rt_comm_self(), rt_comm_self(),
                              config);
}

static rt_status hf_write_weights(void *ctx, rt_params *whole) {
    const hf_write_job *j = ctx;
    return ckpt_save_hf(j->path, j->map, whole, j->vocab_size, j->num_heads, rt_comm_self());
}

rt_status mdl_save_weights(const char *path, const ckpt_map *map, rt_params *params, int vocab_size, int num_heads,
                           rt_comm *tp, rt_comm *pp) {
    if (pp->size == 1) return ckpt_save_hf(path, map, params, vocab_size, num_heads, tp);
    hf_write_job job = {.path = path, .map = map, .vocab_size = vocab_size, .num_heads = num_heads};
    return hf_save_stages(path, "weights", params, false, tp, pp, hf_write_weights, &job);
}

rt_status mdl_hf_save_folder(const char *dir, const ckpt_map *map, rt_params *params, int vocab_size, int num_heads,
                             rt_comm *tp, rt_comm *pp, cJSON *config) {
    if (pp->size > 1) {
        hf_write_job job = {.dir = dir, .map = map, .vocab_size = vocab_size, .num_heads = num_heads, .config = config};
        rt_status st = hf_save_stages(dir, "HF folder", params, false, tp, pp, hf_write_folder, &job);
        cJSON_Delete(job.config); /* the ranks that did not write */
        return st;
    }
    char path[4096];
    /* a failure to make dir shows as the weights' write error, which every rank learns (no
     * early return on one rank: the save is a collective) */
    if (tp->rank == 0) (void)mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rt_status st = ckpt_save_hf(path, map, params, vocab_size, num_heads, tp); /* every rank: rank 0's status */
    if (st != RT_OK || tp->rank != 0) {
        cJSON_Delete(config);
        if (st != RT_OK) return st;
    } else {
        snprintf(path, sizeof path, "%s/config.json", dir);
        st = mdl_hf_write_json(config, path);
    }
    if (tp->size > 1) {
        int code = (int)st;
        rt_status bst = tp->ops->broadcast(tp->ctx, &code, sizeof code, 0);
        if (bst != RT_OK) return bst;
        if (tp->rank != 0 && code != RT_OK)
            return rt_errorf((rt_status)code, "%s: tp rank 0 failed to write config.json", dir);
    }
    return st;
}

typedef struct {
    const char *dir;
    const ckpt_map *map;
} peft_write_job;

static rt_status peft_write(void *ctx, rt_params *trainable) {
    const peft_write_job *j = ctx;
    return ckpt_peft_save_weights(j->dir, j->map, trainable, rt_comm_self());
}

rt_status mdl_peft_save_weights(const char *dir, const ckpt_map *map, const rt_params *params, rt_comm *tp,
                                rt_comm *pp) {
    if (pp->size == 1) return ckpt_peft_save_weights(dir, map, params, tp);
    peft_write_job job = {dir, map};
    return hf_save_stages(dir, "PEFT adapter folder", params, true, tp, pp, peft_write, &job);
}
