/* adapter_model.safetensors into and out of the slab (see ckpt_peft_weights.h). */
#include "checkpoints/ckpt_peft_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoints/ckpt_peft.h"
#include "checkpoints/ckpt_safetensors.h"
#include "checkpoints/ckpt_tp.h"

/* Their (HF) name of our single-tensor, same-layout parameter `ours`. */
static bool peft_export(const ckpt_map *map, const char *ours, char *out, size_t size) {
    long nums[CKPT_MAP_MAX_NUMS];
    int n_nums;
    const ckpt_map_row *row = ckpt_map_find_ours(map, ours, nums, &n_nums);
    return row && ckpt_map_parts(row) == 1 && ckpt_map_export_name(map, ours, 0, out, size);
}

bool ckpt_peft_param_name(const ckpt_map *map, const char *ours, char *out, size_t size) {
    char theirs[CKPT_MAP_NAME_MAX];
    /* an adapter is named after its HF module without the map's prefix (models/layers/lora.h) */
    if (ckpt_peft_adapter_stem(ours, NULL))
        return snprintf(out, size, CKPT_PEFT_PREFIX "%s%s", map->prefix ? map->prefix : "", ours) < (int)size;
    long nums[CKPT_MAP_MAX_NUMS];
    int n_nums;
    const ckpt_map_row *row = ckpt_map_find_ours(map, ours, nums, &n_nums);
    if (row && row->layout == CKPT_LAYOUT_SAME && peft_export(map, ours, theirs, sizeof theirs))
        return snprintf(out, size, CKPT_PEFT_PREFIX "%s", theirs) < (int)size;
    rt_errorf(RT_ERR_CONFIG,
              "parameter '%s' has no PEFT name in the %s map (a trained module must be one HF "
              "tensor in its HF layout)",
              ours, map->arch);
    return false;
}

/* path, or path/adapter_model.safetensors when path is a folder. */
static void peft_weights_path(const char *path, char *file, size_t size) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(file, size, "%s/" CKPT_PEFT_WEIGHTS_FILE, path);
    else
        snprintf(file, size, "%s", path);
}

/* This stage's trainable parameters from file f (tensors used marked in used). */
static rt_status peft_load_local(const ckpt_st_file *f, const char *file, const ckpt_map *map, rt_params *p,
                                 int tp_rank, int tp_size, bool *used) {
    rt_status st = RT_OK;
    float *full = NULL, *shard = NULL;
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        if (s->frozen) continue;
        char name[CKPT_MAP_NAME_MAX + 32];
        if (!ckpt_peft_param_name(map, s->name, name, sizeof name)) RT_FAIL(RT_ERR_CONFIG, "%s", rt_error_message());
        const long idx = ckpt_safetensors_index(f, name);
        if (idx < 0)
            RT_FAIL(RT_ERR_FORMAT,
                    "%s: no tensor '%s' (the model's %s): was the adapter trained with other "
                    "target_modules or modules_to_save?",
                    file, name, s->name);
        ckpt_st_tensor t;
        ckpt_safetensors_tensor(f, (size_t)idx, &t);
        ckpt_tp_desc d;
        ckpt_tp_param_desc(s, s->vocab_rows, tp_rank, tp_size, &d);
        bool same = t.ndim == s->ndim;
        size_t want[CKPT_MAX_DIMS];
        for (int k = 0; k < s->ndim; k++) {
            want[k] = (size_t)d.full[k];
            same = same && t.shape[k] == want[k];
        }
        if (!same) {
            char got[96], exp[96];
            RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s (another rank r or base model?)", file,
                    name, ckpt_shape_str(t.ndim, t.shape, got, sizeof got),
                    ckpt_shape_str(s->ndim, want, exp, sizeof exp));
        }
        full = rt_xrealloc(full, t.numel * sizeof(float));
        RT_TRY(ckpt_safetensors_read_f32(f, name, full, t.numel));
        shard = rt_xrealloc(shard, s->numel * sizeof(float));
        ckpt_tp_shard(&d, shard, full);
        rt_to_device(p->be, rt_params_data(p, i), shard, s->numel * sizeof(float));
        used[idx] = true;
    }
fail:
    free(full);
    free(shard);
    return st;
}

/* Over pipeline stages: a tensor is used when some stage used it; a stage's failure fails all. */
static rt_status peft_used_by_stages(rt_comm *stages, const char *file, size_t count, bool *used, rt_status st) {
    float *flags = rt_xcalloc(count + 1, sizeof *flags);
    for (size_t k = 0; k < count; k++) flags[k] = used[k] ? 1.0f : 0.0f;
    flags[count] = st != RT_OK;
    rt_status cst = stages->ops->all_reduce(stages->ctx, flags, count + 1, RT_REDUCE_SUM);
    for (size_t k = 0; k < count; k++) used[k] = flags[k] > 0;
    const bool other_failed = flags[count] > (st != RT_OK ? 1.0f : 0.0f);
    free(flags);
    if (st != RT_OK) return st;
    if (cst != RT_OK) return cst;
    if (other_failed) return rt_errorf(RT_ERR_FORMAT, "%s: another pipeline stage could not load its adapters", file);
    return RT_OK;
}

rt_status ckpt_peft_load_weights(const char *path, const ckpt_map *map, rt_params *p, int tp_rank, int tp_size,
                                 rt_comm *stages) {
    rt_status st = RT_OK;
    char file[4096];
    ckpt_st_file *f = NULL;
    bool *used = NULL;
    peft_weights_path(path, file, sizeof file);
    st = ckpt_safetensors_open(file, &f);
    const size_t count = f ? ckpt_safetensors_count(f) : 0;
    used = rt_xcalloc(count + 1, sizeof *used);
    if (st == RT_OK) st = peft_load_local(f, file, map, p, tp_rank, tp_size, used);
    if (stages && stages->size > 1) st = peft_used_by_stages(stages, file, count, used, st);
    for (size_t k = 0; st == RT_OK && k < count; k++)
        if (!used[k])
            st = rt_errorf(RT_ERR_FORMAT,
                           "%s: tensor '%s' is no adapter or saved module of this model: was it trained "
                           "with other target_modules, or on another model?",
                           file, ckpt_safetensors_name(f, k));
    free(used);
    ckpt_safetensors_close(f);
    return st;
}

rt_status ckpt_peft_save_weights(const char *dir, const ckpt_map *map, const rt_params *p, rt_comm *tp) {
    rt_status st = RT_OK;
    const int n = p->n;
    ckpt_st_write_entry *entries = rt_xcalloc((size_t)n + 1, sizeof *entries);
    char(*names)[CKPT_MAP_NAME_MAX + 32] = rt_xcalloc((size_t)n + 1, sizeof *names);
    size_t(*shapes)[CKPT_MAX_DIMS] = rt_xcalloc((size_t)n + 1, sizeof *shapes);
    float **bufs = rt_xcalloc((size_t)n + 1, sizeof *bufs);
    ckpt_tp_scratch scr = {0};
    char path[4096];
    size_t ne = 0;
    snprintf(path, sizeof path, "%s/" CKPT_PEFT_WEIGHTS_FILE, dir);
    for (int i = 0; i < n; i++) {
        const rt_param_spec *s = &p->specs[i];
        if (s->frozen) continue;
        if (!ckpt_peft_param_name(map, s->name, names[ne], sizeof names[ne]))
            RT_FAIL(RT_ERR_CONFIG, "%s", rt_error_message());
        ckpt_tp_desc d;
        ckpt_tp_param_desc(s, s->vocab_rows, tp->rank, tp->size, &d);
        for (int k = 0; k < s->ndim; k++) shapes[ne][k] = (size_t)d.full[k];
        bufs[ne] = tp->rank == 0 ? rt_xmalloc(ckpt_tp_full_numel(&d) * sizeof(float)) : NULL;
        RT_TRY(ckpt_tp_gather_param(p->be, tp, &d, rt_params_data(p, i), s->numel, &scr, bufs[ne]));
        entries[ne] = (ckpt_st_write_entry){.name = names[ne], .ndim = s->ndim, .shape = shapes[ne], .data = bufs[ne]};
        ne++;
    }
    if (tp->rank == 0) st = ckpt_safetensors_write(path, ne, entries, "{\"format\":\"pt\"}");
    st = ckpt_tp_agree(tp, st, path, "the LoRA adapter");
fail:
    for (size_t i = 0; i <= (size_t)n; i++) free(bufs[i]);
    ckpt_tp_scratch_free(p->be, &scr);
    free(bufs);
    free(shapes);
    free(names);
    free(entries);
    return st;
}

void ckpt_peft_fold(float *W, const float *B, const float *A, int64_t out, int64_t in, int64_t r, float scale,
                    bool transposed) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < out; i++)
        for (int64_t j = 0; j < in; j++) {
            float d = 0.0f;
            for (int64_t k = 0; k < r; k++) d += B[i * r + k] * A[k * in + j];
            W[transposed ? j * out + i : i * in + j] += d * scale;
        }
}
