/* PEFT adapter folders (see ckpt_peft.h): adapter_config.json through cJSON with rt_json's
 * messages, and the tensor names' split. */
#include "checkpoints/ckpt_peft.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/base/rt_atomic.h"
#include "runtime/base/rt_fs.h"
#include "runtime/base/rt_json.h"

double ckpt_peft_scale(const ckpt_peft_config *c) {
    return c->use_rslora ? c->alpha / sqrt((double)c->r) : c->alpha / (double)c->r;
}

void ckpt_peft_config_free(ckpt_peft_config *c) {
    if (!c) return;
    for (int i = 0; i < c->n_targets; i++) free(c->targets[i]);
    for (int i = 0; i < c->n_save; i++) free(c->modules_to_save[i]);
    free(c->targets);
    free(c->modules_to_save);
    free(c->task_type);
    free(c->base_model);
    memset(c, 0, sizeof *c);
}

static char **peft_copy_names(char *const *names, int n) {
    char **out = n ? rt_xmalloc((size_t)n * sizeof *out) : NULL;
    for (int i = 0; i < n; i++) out[i] = rt_xstrdup(names[i]);
    return out;
}

void ckpt_peft_config_copy(ckpt_peft_config *dst, const ckpt_peft_config *src) {
    *dst = *src;
    dst->targets = peft_copy_names(src->targets, src->n_targets);
    dst->modules_to_save = peft_copy_names(src->modules_to_save, src->n_save);
    dst->task_type = src->task_type ? rt_xstrdup(src->task_type) : NULL;
    dst->base_model = src->base_model ? rt_xstrdup(src->base_model) : NULL;
}

/* A list of non-empty module names (key absent or null: none). */
static rt_status peft_names(const cJSON *root, const char *name, const char *key, char ***out, int *n) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = NULL;
    *n = 0;
    if (!v || cJSON_IsNull(v)) return RT_OK;
    if (cJSON_IsString(v))
        return rt_errorf(RT_ERR_CONFIG,
                         "%s: field '%s' is a regular expression ('%.60s'); tunezoo takes a list of "
                         "module names",
                         name, key, v->valuestring);
    if (!cJSON_IsArray(v))
        return rt_errorf(RT_ERR_CONFIG, "%s: field '%s' is %s (expected a list of module names)", name, key,
                         rt_json_type_name(v));
    const int count = cJSON_GetArraySize(v);
    *out = rt_xcalloc((size_t)(count ? count : 1), sizeof **out);
    for (const cJSON *it = v->child; it; it = it->next) {
        if (!cJSON_IsString(it) || !*it->valuestring) {
            rt_status st = rt_errorf(RT_ERR_CONFIG, "%s: field '%s' holds %s (expected module names)", name, key,
                                     cJSON_IsString(it) ? "an empty name" : rt_json_type_name(it));
            for (int i = 0; i < *n; i++) free((*out)[i]);
            free(*out);
            *out = NULL;
            *n = 0;
            return st;
        }
        (*out)[(*n)++] = rt_xstrdup(it->valuestring);
    }
    return RT_OK;
}

/* A key PEFT may write whose non-default value tunezoo does not train: absent, null, false,
 * an empty object or list, or `allowed` (a string) pass. */
static rt_status peft_refuse(const cJSON *root, const char *name, const char *key, const char *allowed,
                             const char *what) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return RT_OK;
    if ((cJSON_IsObject(v) || cJSON_IsArray(v)) && !v->child) return RT_OK;
    if (allowed && cJSON_IsString(v) && strcmp(v->valuestring, allowed) == 0) return RT_OK;
    return rt_errorf(RT_ERR_CONFIG, "%s: field '%s' asks for %s, which tunezoo does not train", name, key, what);
}

static rt_status peft_optional_string(const cJSON *root, const char *name, const char *key, char **out) {
    const char *s = NULL;
    rt_status st = rt_json_get_string(root, name, key, &s, false, NULL);
    *out = st == RT_OK && s ? rt_xstrdup(s) : NULL;
    return st;
}

rt_status ckpt_peft_config_parse(const char *text, size_t len, const char *name, ckpt_peft_config *out) {
    rt_status st = RT_OK;
    cJSON *root = NULL;
    memset(out, 0, sizeof *out);
    RT_TRY(rt_json_parse(text, len, name, &root));
    if (!cJSON_IsObject(root))
        RT_FAIL(RT_ERR_CONFIG, "%s: the file holds %s (expected an object)", name, rt_json_type_name(root));
    const char *type = NULL;
    RT_TRY(rt_json_get_string(root, name, "peft_type", &type, true, NULL));
    if (strcmp(type, "LORA") != 0)
        RT_FAIL(RT_ERR_CONFIG, "%s: field 'peft_type' is '%.40s'; tunezoo reads LoRA adapters (LORA)", name, type);
    RT_TRY(rt_json_get_int_range(root, name, "r", &out->r, true, 0, 1, CKPT_PEFT_MAX_R));
    RT_TRY(rt_json_get_double(root, name, "lora_alpha", &out->alpha, false, 8.0));
    RT_TRY(rt_json_get_double(root, name, "lora_dropout", &out->dropout, false, 0.0));
    if (!isfinite(out->alpha) || out->alpha <= 0 || out->alpha > 1e6)
        RT_FAIL(RT_ERR_CONFIG, "%s: field 'lora_alpha' is %g (expected a number in (0, 1e6])", name, out->alpha);
    if (!(out->dropout >= 0 && out->dropout < 1))
        RT_FAIL(RT_ERR_CONFIG, "%s: field 'lora_dropout' is %g (expected a number in [0, 1))", name, out->dropout);
    RT_TRY(rt_json_get_bool(root, name, "fan_in_fan_out", &out->fan_in_fan_out, false, false));
    RT_TRY(rt_json_get_bool(root, name, "use_rslora", &out->use_rslora, false, false));
    RT_TRY(peft_refuse(root, name, "use_dora", NULL, "DoRA"));
    RT_TRY(peft_refuse(root, name, "bias", "none", "trained biases"));
    RT_TRY(peft_refuse(root, name, "lora_bias", NULL, "a bias on lora_B"));
    RT_TRY(peft_refuse(root, name, "rank_pattern", NULL, "a rank per module"));
    RT_TRY(peft_refuse(root, name, "alpha_pattern", NULL, "an alpha per module"));
    RT_TRY(peft_refuse(root, name, "layers_to_transform", NULL, "adapters on some layers only"));
    RT_TRY(peft_refuse(root, name, "exclude_modules", NULL, "excluded modules"));
    RT_TRY(peft_refuse(root, name, "target_parameters", NULL, "adapters on parameters"));
    RT_TRY(peft_names(root, name, "target_modules", &out->targets, &out->n_targets));
    if (!out->n_targets) RT_FAIL(RT_ERR_CONFIG, "%s: field 'target_modules' names no module", name);
    RT_TRY(peft_names(root, name, "modules_to_save", &out->modules_to_save, &out->n_save));
    RT_TRY(peft_optional_string(root, name, "task_type", &out->task_type));
    RT_TRY(peft_optional_string(root, name, "base_model_name_or_path", &out->base_model));
    cJSON_Delete(root);
    return RT_OK;
fail:
    cJSON_Delete(root);
    ckpt_peft_config_free(out);
    return st;
}

rt_status ckpt_peft_config_read(const char *path, ckpt_peft_config *out) {
    char file[4096];
    struct stat sb;
    memset(out, 0, sizeof *out);
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(file, sizeof file, "%s/adapter_config.json", path);
    else
        snprintf(file, sizeof file, "%s", path);
    char *text = NULL;
    size_t len = 0;
    rt_status st = rt_read_file(file, (size_t)1 << 20, &text, &len);
    if (st == RT_OK) st = ckpt_peft_config_parse(text, len, file, out);
    free(text);
    return st;
}

static cJSON *peft_name_list(char **names, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateString(names[i]));
    return a;
}

char *ckpt_peft_config_json(const ckpt_peft_config *c) {
    /* added in key order, so the file reads as PEFT's sorted one does */
    cJSON *o = cJSON_CreateObject();
    if (c->base_model)
        cJSON_AddStringToObject(o, "base_model_name_or_path", c->base_model);
    else
        cJSON_AddNullToObject(o, "base_model_name_or_path");
    cJSON_AddStringToObject(o, "bias", "none");
    cJSON_AddBoolToObject(o, "fan_in_fan_out", c->fan_in_fan_out);
    cJSON_AddBoolToObject(o, "inference_mode", true);
    cJSON_AddBoolToObject(o, "init_lora_weights", true);
    /* exactly: a value within a rounding unit of a limit must not come back as the limit */
    rt_json_add_number(o, "lora_alpha", c->alpha);
    rt_json_add_number(o, "lora_dropout", c->dropout);
    if (c->n_save)
        cJSON_AddItemToObject(o, "modules_to_save", peft_name_list(c->modules_to_save, c->n_save));
    else
        cJSON_AddNullToObject(o, "modules_to_save");
    cJSON_AddStringToObject(o, "peft_type", "LORA");
    cJSON_AddNumberToObject(o, "r", c->r);
    cJSON_AddItemToObject(o, "target_modules", peft_name_list(c->targets, c->n_targets));
    if (c->task_type)
        cJSON_AddStringToObject(o, "task_type", c->task_type);
    else
        cJSON_AddNullToObject(o, "task_type");
    cJSON_AddBoolToObject(o, "use_dora", false);
    cJSON_AddBoolToObject(o, "use_rslora", c->use_rslora);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    return text;
}

rt_status ckpt_peft_config_write(const char *dir, const ckpt_peft_config *c) {
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char *text = ckpt_peft_config_json(c);
    rt_status st = rt_atomic_write_file(path, text, strlen(text));
    cJSON_free(text);
    return st;
}

/* PEFT's rule for a list of module names: the module's name equal to one, or ending in "." one. */
static bool peft_list_matches(char *const *list, int n, const char *module) {
    const size_t len = strlen(module);
    for (int i = 0; i < n; i++) {
        const char *t = list[i];
        const size_t tl = strlen(t);
        if (strcmp(module, t) == 0) return true;
        if (len > tl && module[len - tl - 1] == '.' && strcmp(module + len - tl, t) == 0) return true;
    }
    return false;
}

const char *const ckpt_peft_lora_suffix[2] = {".lora_A.weight", ".lora_B.weight"};

size_t ckpt_peft_adapter_stem(const char *name, ckpt_peft_kind *kind) {
    const size_t n = strlen(name);
    for (int k = 0; k < 2; k++) {
        const size_t len = strlen(ckpt_peft_lora_suffix[k]);
        if (n > len && strcmp(name + n - len, ckpt_peft_lora_suffix[k]) == 0) {
            if (kind) *kind = (ckpt_peft_kind)k;
            return n - len;
        }
    }
    return 0;
}

bool ckpt_peft_is_target(const ckpt_peft_config *c, const char *module) {
    return peft_list_matches(c->targets, c->n_targets, module);
}

bool ckpt_peft_is_saved(const ckpt_peft_config *c, const char *module) {
    return peft_list_matches(c->modules_to_save, c->n_save, module);
}

rt_status ckpt_peft_tensor_name(const char *name, char *module, size_t cap, ckpt_peft_kind *kind) {
    const size_t plen = strlen(CKPT_PEFT_PREFIX);
    if (strncmp(name, CKPT_PEFT_PREFIX, plen) != 0)
        return rt_errorf(RT_ERR_FORMAT, "adapter tensor '%.120s' does not start with '%s' (a PEFT adapter's names do)",
                         name, CKPT_PEFT_PREFIX);
    const char *rest = name + plen;
    size_t n = ckpt_peft_adapter_stem(rest, kind);
    if (!n) { /* a modules_to_save tensor: its whole name is the module */
        *kind = CKPT_PEFT_SAVED;
        n = strlen(rest);
    }
    if (n == 0 || n >= cap)
        return rt_errorf(RT_ERR_FORMAT, "adapter tensor '%.120s': no module name, or one too long", name);
    memcpy(module, rest, n);
    module[n] = '\0';
    return RT_OK;
}
