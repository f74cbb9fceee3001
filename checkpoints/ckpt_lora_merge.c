/* A PEFT LoRA folder merged into its base's HF folder (see ckpt_lora_merge.h). */
#include "checkpoints/ckpt_lora_merge.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "checkpoints/ckpt_peft.h"
#include "checkpoints/ckpt_peft_weights.h"
#include "checkpoints/ckpt_safetensors.h"
#include "checkpoints/ckpt_source.h"
#include "runtime/base/rt_atomic.h"
#include "runtime/base/rt_fs.h"
#include "runtime/base/rt_log.h"

#define MERGE_NAME_MAX 512

/* One module of the adapter file: its lora_A and lora_B (adapter file names), or one saved
 * tensor (a modules_to_save copy); the base tensor it lands on, -1 for none yet. */
typedef struct {
    char module[MERGE_NAME_MAX];
    const char *a, *b, *saved;
    long base;
} merge_item;

typedef struct {
    merge_item *items;
    size_t n;
} merge_plan;

static merge_item *merge_find(merge_plan *p, const char *module, bool saved) {
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->items[i].module, module) == 0 && (p->items[i].saved != NULL) == saved) return &p->items[i];
    p->items = rt_xrealloc(p->items, (p->n + 1) * sizeof *p->items);
    merge_item *it = &p->items[p->n++];
    memset(it, 0, sizeof *it);
    snprintf(it->module, sizeof it->module, "%s", module);
    it->base = -1;
    return it;
}

/* Whether a and b name the same tensor, one perhaps under a prefix the other lacks. */
static bool merge_same(const char *a, const char *b) {
    const size_t la = strlen(a), lb = strlen(b);
    if (la == lb) return strcmp(a, b) == 0;
    const char *longer = la > lb ? a : b, *shorter = la > lb ? b : a;
    const size_t cut = strlen(longer) - strlen(shorter);
    return longer[cut - 1] == '.' && strcmp(longer + cut, shorter) == 0;
}

/* The base tensor named `want` (or by merge_same's rule), exactly one. */
static rt_status merge_locate(const ckpt_source *s, const char *want, const char *what, long *out) {
    *out = -1;
    for (size_t i = 0; i < ckpt_source_count(s); i++)
        if (strcmp(ckpt_source_name(s, i), want) == 0) {
            *out = (long)i;
            return RT_OK;
        }
    for (size_t i = 0; i < ckpt_source_count(s); i++) {
        if (!merge_same(ckpt_source_name(s, i), want)) continue;
        if (*out >= 0)
            return rt_errorf(RT_ERR_FORMAT, "%s: '%s' matches both '%s' and '%s' of the base", what, want,
                             ckpt_source_name(s, (size_t)*out), ckpt_source_name(s, i));
        *out = (long)i;
    }
    return RT_OK;
}

/* The adapter file's tensors as modules, each matched to its base weight. */
static rt_status merge_plan_build(const ckpt_st_file *ad, const char *ad_path, const ckpt_source *base,
                                  const char *base_dir, merge_plan *p) {
    for (size_t i = 0; i < ckpt_safetensors_count(ad); i++) {
        const char *name = ckpt_safetensors_name(ad, i);
        char module[MERGE_NAME_MAX];
        ckpt_peft_kind kind;
        rt_status st = ckpt_peft_tensor_name(name, module, sizeof module, &kind);
        if (st != RT_OK) return rt_errorf(st, "%s: %s", ad_path, rt_error_message());
        merge_item *it = merge_find(p, module, kind == CKPT_PEFT_SAVED);
        if (kind == CKPT_PEFT_LORA_A)
            it->a = name;
        else if (kind == CKPT_PEFT_LORA_B)
            it->b = name;
        else
            it->saved = name;
    }
    for (size_t k = 0; k < p->n; k++) {
        merge_item *it = &p->items[k];
        if (!it->saved && (!it->a || !it->b))
            return rt_errorf(RT_ERR_FORMAT, "%s: module '%s' has lora_%s but no lora_%s", ad_path, it->module,
                             it->a ? "A" : "B", it->a ? "B" : "A");
        char want[MERGE_NAME_MAX + 16];
        snprintf(want, sizeof want, "%s%s", it->module, it->saved ? "" : ".weight");
        rt_status st = merge_locate(base, want, ad_path, &it->base);
        if (st != RT_OK) return st;
        if (!it->saved && it->base < 0)
            return rt_errorf(RT_ERR_FORMAT,
                             "%s: the adapter of '%s' has no weight '%s' in the base %s (another base "
                             "model?)",
                             ad_path, it->module, want, base_dir);
    }
    return RT_OK;
}

/* The adapter (saved false) or saved copy (saved true) landing on base tensor i, or NULL. */
static const merge_item *merge_for(const merge_plan *p, long i, bool saved) {
    for (size_t k = 0; k < p->n; k++)
        if (p->items[k].base == i && (p->items[k].saved != NULL) == saved) return &p->items[k];
    return NULL;
}

/* What output tensor j is: base tensor `base` (or -1), replaced by `saved`'s copy, or with
 * `adapter` folded in. */
typedef struct {
    long base;
    const merge_item *saved, *adapter;
} merge_out;

/* The output tensor's source: the adapter file's saved copy, or the base's. */
static rt_status merge_source(const ckpt_st_file *ad, const ckpt_source *base, const merge_out *o, ckpt_st_tensor *t) {
    if (o->saved) return ckpt_safetensors_find(ad, o->saved->saved, t);
    ckpt_source_tensor(base, (size_t)o->base, t);
    return RT_OK;
}

static rt_dtype merge_store(rt_dtype t) { return t == RT_BF16 || t == RT_F16 ? t : RT_F32; }

/* Reads adapter tensor `name` to fp32, checking it is a matrix of `rows` x `cols` (0: any). */
static rt_status merge_read(const ckpt_st_file *ad, const char *path, const char *name, size_t rows, size_t cols,
                            float **out, size_t shape[2]) {
    ckpt_st_tensor t;
    rt_status st = ckpt_safetensors_find(ad, name, &t);
    if (st != RT_OK) return st;
    if (t.ndim != 2 || (rows && t.shape[0] != rows) || (cols && t.shape[1] != cols))
        return rt_errorf(RT_ERR_FORMAT, "%s: '%s' has %d dims [%zu, %zu], expected [%zu, %zu]", path, name, t.ndim,
                         t.ndim > 0 ? t.shape[0] : 0, t.ndim > 1 ? t.shape[1] : 0, rows, cols);
    shape[0] = t.shape[0], shape[1] = t.shape[1];
    *out = rt_xmalloc(t.numel * sizeof(float));
    return ckpt_safetensors_read_f32(ad, name, *out, t.numel);
}

/* W (the base's tensor, fp32) += scale B A of item it. */
static rt_status merge_fold(const ckpt_st_file *ad, const char *path, const merge_item *it, const ckpt_st_tensor *w,
                            const char *w_name, const ckpt_peft_config *cfg, float *W) {
    rt_status st = RT_OK;
    float *A = NULL, *B = NULL;
    size_t as[2], bs[2];
    RT_TRY(merge_read(ad, path, it->a, (size_t)cfg->r, 0, &A, as));
    RT_TRY(merge_read(ad, path, it->b, 0, (size_t)cfg->r, &B, bs));
    const size_t out = bs[0], in = as[1];
    const size_t w_out = cfg->fan_in_fan_out ? w->shape[1] : w->shape[0],
                 w_in = cfg->fan_in_fan_out ? w->shape[0] : w->shape[1];
    if (w->ndim != 2 || w_out != out || w_in != in)
        RT_FAIL(RT_ERR_FORMAT, "%s: the adapter of '%s' is %zu x %zu (out x in), but the base's '%s' is [%zu, %zu]%s",
                path, it->module, out, in, w_name, w->shape[0], w->ndim > 1 ? w->shape[1] : 0,
                cfg->fan_in_fan_out ? " (fan_in_fan_out: [in, out])" : "");
    ckpt_peft_fold(W, B, A, (int64_t)out, (int64_t)in, cfg->r, (float)ckpt_peft_scale(cfg), cfg->fan_in_fan_out);
fail:
    free(A), free(B);
    return st;
}

/* Whether a file of the base folder holds weights (not copied: the merge writes its own). */
static bool merge_is_weights(const char *name) {
    static const char *const ext[] = {".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".index.json", ".h5", ".msgpack"};
    const size_t n = strlen(name);
    for (size_t k = 0; k < sizeof ext / sizeof *ext; k++) {
        const size_t e = strlen(ext[k]);
        if (n >= e && strcmp(name + n - e, ext[k]) == 0) return true;
    }
    return false;
}

/* config.json, the tokenizer and any other plain file of the base folder, into partial. */
static rt_status merge_copy_side_files(const char *base_dir, const char *partial) {
    rt_status st = RT_OK;
    DIR *d = opendir(base_dir);
    if (!d) return rt_errorf(RT_ERR_IO, "%s: cannot list the folder: %s", base_dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char src[4096], dst[4096];
        struct stat sb;
        snprintf(src, sizeof src, "%s/%s", base_dir, e->d_name);
        if (e->d_name[0] == '.' || merge_is_weights(e->d_name) || lstat(src, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        char *text = NULL;
        size_t len = 0;
        snprintf(dst, sizeof dst, "%s/%s", partial, e->d_name);
        RT_TRY(rt_read_file(src, 0, &text, &len));
        st = rt_atomic_write_file(dst, text, len);
        free(text);
        RT_TRY(st);
    }
fail:
    closedir(d);
    return st;
}

rt_status ckpt_lora_merge(const char *base_dir, const char *adapter_dir, const char *out_dir,
                          ckpt_convert_stats *stats) {
    rt_status st = RT_OK;
    ckpt_peft_config cfg = {0};
    ckpt_st_file *ad = NULL;
    ckpt_source *base = NULL;
    merge_plan plan = {0};
    ckpt_st_write_entry *entries = NULL;
    merge_out *outs = NULL;
    size_t(*shapes)[CKPT_MAX_DIMS] = NULL;
    ckpt_st_writer *w = NULL;
    float *buf = NULL;
    char *partial = NULL, ad_path[4096], path[4200];
    struct stat sb;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    memset(stats, 0, sizeof *stats);
    if (stat(out_dir, &sb) == 0)
        return rt_errorf(RT_ERR_IO,
                         "%s: already exists; tz-convert does not overwrite (remove it or pick another name)", out_dir);
    RT_TRY(ckpt_peft_config_read(adapter_dir, &cfg));
    snprintf(ad_path, sizeof ad_path, "%s/%s", adapter_dir, CKPT_PEFT_WEIGHTS_FILE);
    RT_TRY(ckpt_safetensors_open(ad_path, &ad));
    RT_TRY(ckpt_source_open(base_dir, &base));
    RT_TRY(merge_plan_build(ad, ad_path, base, base_dir, &plan));

    /* the base's tensors in order (a saved module's copy in its place), then saved ones it lacks */
    const size_t nb = ckpt_source_count(base);
    size_t n = 0, n_adapters = 0, n_saved = 0;
    outs = rt_xcalloc(nb + plan.n, sizeof *outs);
    for (size_t i = 0; i < nb; i++)
        outs[n++] = (merge_out){(long)i, merge_for(&plan, (long)i, true), merge_for(&plan, (long)i, false)};
    for (size_t k = 0; k < plan.n; k++)
        if (plan.items[k].saved && plan.items[k].base < 0) outs[n++] = (merge_out){-1, &plan.items[k], NULL};
    entries = rt_xcalloc(n, sizeof *entries);
    shapes = rt_xcalloc(n, sizeof *shapes);
    for (size_t j = 0; j < n; j++) {
        ckpt_st_tensor t;
        RT_TRY(merge_source(ad, base, &outs[j], &t));
        for (int d = 0; d < t.ndim; d++) shapes[j][d] = t.shape[d];
        entries[j] = (ckpt_st_write_entry){.name = outs[j].base >= 0 ? ckpt_source_name(base, (size_t)outs[j].base)
                                                                     : outs[j].saved->module,
                                           .ndim = t.ndim,
                                           .shape = shapes[j],
                                           .store = merge_store(t.dtype)};
    }

    RT_TRY(rt_atomic_partial_dir(out_dir, &partial));
    snprintf(path, sizeof path, "%s/model.safetensors", partial);
    RT_TRY(ckpt_safetensors_writer_begin(path, n, entries, "{\"format\":\"pt\"}", &w));
    for (size_t j = 0; j < n; j++) {
        const merge_out *o = &outs[j];
        ckpt_st_tensor t;
        RT_TRY(merge_source(ad, base, o, &t));
        buf = rt_xrealloc(buf, (t.numel ? t.numel : 1) * sizeof(float));
        if (o->saved)
            RT_TRY(ckpt_safetensors_read_f32(ad, o->saved->saved, buf, t.numel));
        else
            RT_TRY(ckpt_source_read_f32(base, entries[j].name, buf, t.numel));
        if (o->adapter) RT_TRY(merge_fold(ad, ad_path, o->adapter, &t, entries[j].name, &cfg, buf));
        RT_TRY(ckpt_safetensors_writer_put(w, buf));
        if (o->base >= 0) ckpt_source_release(base, (size_t)o->base);
        n_adapters += o->adapter != NULL;
        n_saved += o->saved != NULL;
        stats->tensors++;
        stats->bytes += (double)t.nbytes;
    }
    st = ckpt_safetensors_writer_commit(w);
    w = NULL;
    RT_TRY(st);
    RT_TRY(merge_copy_side_files(base_dir, partial));
    if (rename(partial, out_dir) != 0)
        RT_FAIL(RT_ERR_IO, "%s: cannot move the finished folder into place: %s", out_dir, strerror(errno));
    free(partial);
    partial = NULL;
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    stats->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    rt_log_info("merged %zu LoRA adapters (r %d, scale %g) and %zu saved modules into %s: %zu tensors", n_adapters,
                cfg.r, ckpt_peft_scale(&cfg), n_saved, out_dir, n);
fail:
    ckpt_safetensors_writer_abort(w);
    if (partial) rt_atomic_partial_dir_remove(partial);
    free(partial);
    free(buf);
    free(entries);
    free(shapes);
    free(outs);
    free(plan.items);
    ckpt_source_close(base);
    ckpt_safetensors_close(ad);
    ckpt_peft_config_free(&cfg);
    return st;
}
