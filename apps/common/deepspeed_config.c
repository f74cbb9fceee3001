/* DeepSpeed JSON -> tunezoo options (see deepspeed_config.h). */
#include "apps/common/deepspeed_config.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "runtime/base/rt_log.h"

typedef struct {
    const rt_args_spec *spec;
    const char *path;
} rt_ds;

/* Sets an option from a JSON number, bool or string; a program without that option gets a
 * warning, not an error (the same ds.json serves every program). */
static rt_status rt_ds_set(rt_ds *d, const char *field, const cJSON *v, const char *option) {
    char text[64], where[512];
    snprintf(where, sizeof where, "%s: field '%s'", d->path, field);
    if (cJSON_IsBool(v)) {
        snprintf(text, sizeof text, "%s", cJSON_IsTrue(v) ? "true" : "false");
    } else if (cJSON_IsNumber(v)) {
        snprintf(text, sizeof text, "%.17g", v->valuedouble);
    } else if (cJSON_IsString(v)) {
        snprintf(text, sizeof text, "%s", v->valuestring);
    } else {
        return rt_errorf(RT_ERR_CONFIG, "%s: expected a number, string or boolean", where);
    }
    rt_status st = rt_args_set_from(d->spec, option, text, where, RT_ARG_PRESET);
    if (st == RT_ERR_UNSUPPORTED) {
        rt_log_warn("%s: ignored (%s has no --%s)", where, d->spec->prog, option);
        return RT_OK;
    }
    return st;
}

static void rt_ds_ignored(rt_ds *d, const char *field, const char *why) {
    rt_log_warn("%s: field '%s' ignored: %s", d->path, field, why);
}

static rt_status rt_ds_zero(rt_ds *d, const cJSON *z) {
    rt_status st = RT_OK;
    if (!cJSON_IsObject(z)) /* "zero_optimization": 3 reads as a stage, but DeepSpeed takes an object */
        return rt_errorf(RT_ERR_CONFIG,
                         "%s: field 'zero_optimization' must be an object such as {\"stage\": 2}, not %s", d->path,
                         cJSON_IsNumber(z) ? "a number" : "this value");
    for (const cJSON *it = z ? z->child : NULL; it; it = it->next) {
        char field[128];
        snprintf(field, sizeof field, "zero_optimization.%s", it->string);
        if (strcmp(it->string, "stage") == 0) {
            RT_TRY(rt_ds_set(d, field, it, "zero"));
        } else if (strcmp(it->string, "cpu_offload") == 0) { /* DeepSpeed's older spelling of each */
            RT_TRY(rt_ds_set(d, field, it, "offload-optimizer"));
        } else if (strcmp(it->string, "cpu_offload_params") == 0) {
            RT_TRY(rt_ds_set(d, field, it, "offload-params"));
        } else if (strcmp(it->string, "offload_optimizer") == 0 || strcmp(it->string, "offload_param") == 0) {
            const cJSON *dev = cJSON_GetObjectItemCaseSensitive(it, "device");
            const bool cpu = cJSON_IsString(dev) && strcmp(dev->valuestring, "cpu") == 0;
            if (cJSON_IsString(dev) && !cpu && strcmp(dev->valuestring, "none") != 0)
                rt_ds_ignored(d, field, "only host memory (\"cpu\") is offered as an offload device");
            cJSON on = {0};
            on.type = cpu ? cJSON_True : cJSON_False;
            RT_TRY(rt_ds_set(d, field, &on,
                             strcmp(it->string, "offload_param") == 0 ? "offload-params" : "offload-optimizer"));
        } else {
            rt_ds_ignored(d, field, "no counterpart here (buckets and overlap are chosen by tunezoo)");
        }
    }
fail:
    return st;
}

static rt_status rt_ds_optimizer(rt_ds *d, const cJSON *o) {
    rt_status st = RT_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    if (cJSON_IsString(type) && strcasecmp(type->valuestring, "adam") != 0 &&
        strcasecmp(type->valuestring, "adamw") != 0)
        rt_ds_ignored(d, "optimizer.type", "tunezoo trains with AdamW");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(o, "params");
    for (const cJSON *it = params ? params->child : NULL; it; it = it->next) {
        char field[128];
        snprintf(field, sizeof field, "optimizer.params.%s", it->string);
        if (strcmp(it->string, "lr") == 0) {
            RT_TRY(rt_ds_set(d, field, it, "lr"));
        } else if (strcmp(it->string, "weight_decay") == 0) {
            RT_TRY(rt_ds_set(d, field, it, "weight-decay"));
        } else if (strcmp(it->string, "eps") == 0) {
            RT_TRY(rt_ds_set(d, field, it, "adam-eps"));
        } else if (strcmp(it->string, "betas") == 0 && cJSON_GetArraySize(it) == 2) {
            RT_TRY(rt_ds_set(d, field, cJSON_GetArrayItem(it, 0), "adam-beta1"));
            RT_TRY(rt_ds_set(d, field, cJSON_GetArrayItem(it, 1), "adam-beta2"));
        } else {
            rt_ds_ignored(d, field, "no counterpart here");
        }
    }
fail:
    return st;
}

static rt_status rt_ds_scheduler(rt_ds *d, const cJSON *s) {
    rt_status st = RT_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(type)) {
        static const char *const map[][2] = {
            {"WarmupLR", "constant"}, {"WarmupDecayLR", "linear"}, {"WarmupCosineLR", "cosine"}};
        const char *ours = NULL;
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
            if (strcmp(type->valuestring, map[i][0]) == 0) ours = map[i][1];
        if (ours) {
            cJSON v = {0};
            v.type = cJSON_String;
            v.valuestring = (char *)ours;
            RT_TRY(rt_ds_set(d, "scheduler.type", &v, "schedule"));
        } else {
            rt_ds_ignored(d, "scheduler.type",
                          "only WarmupLR, WarmupDecayLR and WarmupCosineLR map to a schedule here");
        }
    }
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(s, "params");
    for (const cJSON *it = params ? params->child : NULL; it; it = it->next) {
        char field[128];
        snprintf(field, sizeof field, "scheduler.params.%s", it->string);
        if (strcmp(it->string, "warmup_num_steps") == 0)
            RT_TRY(rt_ds_set(d, field, it, "warmup"));
        else if (strcmp(it->string, "total_num_steps") == 0)
            RT_TRY(rt_ds_set(d, field, it, "max-steps"));
        else if (strcmp(it->string, "warmup_max_lr") == 0)
            RT_TRY(rt_ds_set(d, field, it, "lr"));
        else
            rt_ds_ignored(d, field, "warmup starts at 0 and is linear here");
    }
fail:
    return st;
}

/* bf16.enabled and fp16.enabled are --precision; fp16's loss-scale fields are its options. */
static rt_status rt_ds_precision(rt_ds *d, const char *block, const cJSON *b) {
    rt_status st = RT_OK;
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(b, "enabled");
    /* DeepSpeed's "auto" defers to the launcher; here there is nothing to defer to */
    if (!cJSON_IsTrue(en) && !(cJSON_IsString(en) && strcmp(en->valuestring, "auto") == 0)) return RT_OK;
    const bool fp16 = strcmp(block, "fp16") == 0;
    static const char *const fp16_fields[][2] = {{"initial_scale_power", "loss-scale-power"},
                                                 {"loss_scale_window", "loss-scale-window"},
                                                 {"hysteresis", "loss-scale-hysteresis"},
                                                 {"min_loss_scale", "min-loss-scale"}};
    for (const cJSON *it = b->child; it; it = it->next) {
        char field[128];
        snprintf(field, sizeof field, "%s.%s", block, it->string);
        const char *option = NULL;
        for (size_t i = 0; fp16 && i < sizeof fp16_fields / sizeof fp16_fields[0]; i++)
            if (strcmp(it->string, fp16_fields[i][0]) == 0) option = fp16_fields[i][1];
        if (strcmp(it->string, "enabled") == 0) {
            const cJSON v = {.type = cJSON_String, .valuestring = (char *)block};
            RT_TRY(rt_ds_set(d, field, &v, "precision"));
        } else if (option) {
            RT_TRY(rt_ds_set(d, field, it, option));
        } else if (fp16 && strcmp(it->string, "loss_scale") == 0) {
            if (!cJSON_IsNumber(it) || it->valuedouble != 0)
                rt_ds_ignored(d, field,
                              "tunezoo's fp16 loss scale is always dynamic (from 2^initial_scale_power); "
                              "a static scale is not offered");
        } else if (fp16 && strcmp(it->string, "consecutive_hysteresis") == 0) {
            if (!cJSON_IsFalse(it)) rt_ds_ignored(d, field, "the hysteresis is restored only by a scale change here");
        } else {
            rt_ds_ignored(d, field, "no counterpart in tunezoo");
        }
    }
fail:
    return st;
}

rt_status train_app_deepspeed_apply(const rt_args_spec *spec, const char *path) {
    rt_status st = RT_OK;
    cJSON *root = NULL;
    rt_ds d = {spec, path};
    RT_TRY(rt_args_read_json_object(path, "--deepspeed-config", &root));
    /* both on is no precision at all: DeepSpeed itself refuses it */
    const cJSON *on[2] = {cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "fp16"), "enabled"),
                          cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "bf16"), "enabled")};
    if (cJSON_IsTrue(on[0]) && cJSON_IsTrue(on[1]))
        RT_FAIL(RT_ERR_CONFIG, "%s: fp16.enabled and bf16.enabled are both true; enable one", path);
    for (const cJSON *it = root->child; it; it = it->next) {
        const char *k = it->string;
        if (strcmp(k, "train_micro_batch_size_per_gpu") == 0)
            RT_TRY(rt_ds_set(&d, k, it, "batch-size"));
        else if (strcmp(k, "gradient_accumulation_steps") == 0)
            RT_TRY(rt_ds_set(&d, k, it, "grad-accum"));
        else if (strcmp(k, "gradient_clipping") == 0)
            RT_TRY(rt_ds_set(&d, k, it, "clip"));
        else if (strcmp(k, "zero_optimization") == 0)
            RT_TRY(rt_ds_zero(&d, it));
        else if (strcmp(k, "optimizer") == 0)
            RT_TRY(rt_ds_optimizer(&d, it));
        else if (strcmp(k, "scheduler") == 0)
            RT_TRY(rt_ds_scheduler(&d, it));
        else if (strcmp(k, "fp16") == 0 || strcmp(k, "bf16") == 0)
            RT_TRY(rt_ds_precision(&d, k, it));
        else if (strcmp(k, "train_batch_size") == 0)
            rt_ds_ignored(&d, k, "derived here as micro-batch x accumulation x data-parallel size");
        else
            rt_ds_ignored(&d, k, "no counterpart in tunezoo");
    }
fail:
    cJSON_Delete(root);
    return st;
}
