/* HF T5 <-> tunezoo name map (see ckpt_hf_t5.h). The loader walks the model's parameters
 * and looks each one up under its HF name (and, for `shared`, its aliases); the file's
 * leftovers are then classified as known copies to skip or as unused. */
#include "checkpoints/ckpt_hf_t5.h"

#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_safetensors.h"
#include "checkpoints/ckpt_source.h"
#include "checkpoints/ckpt_tp.h"

/* Where a checkpoint may keep each parameter, first match wins. */
static const char *const ckpt_t5_shared_names[] = {"shared.weight", "encoder.embed_tokens.weight",
                                                   "decoder.embed_tokens.weight"};

/* Tensors HF itself skips or that are copies of a parameter loaded under another name. */
static const char *const ckpt_t5_skipped[] = {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                                              "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight"};

static long ckpt_t5_lookup(const ckpt_source *f, const char *name) {
    if (strcmp(name, "shared.weight") != 0) return ckpt_source_index(f, name);
    for (size_t k = 0; k < sizeof ckpt_t5_shared_names / sizeof *ckpt_t5_shared_names; k++) {
        long i = ckpt_source_index(f, ckpt_t5_shared_names[k]);
        if (i >= 0) return i;
    }
    return -1;
}

/* Whether lm_head.weight is present and not a byte copy of the shared table (alias included). */
static bool ckpt_t5_own_head(const ckpt_source *f) {
    long h = ckpt_source_index(f, "lm_head.weight");
    if (h < 0) return false;
    long s = ckpt_t5_lookup(f, "shared.weight");
    if (s < 0) return true;
    ckpt_st_tensor th, ts;
    ckpt_source_tensor(f, (size_t)h, &th);
    ckpt_source_tensor(f, (size_t)s, &ts);
    return th.dtype != ts.dtype || th.nbytes != ts.nbytes || memcmp(th.data, ts.data, th.nbytes) != 0;
}

rt_status ckpt_hf_t5_has_own_head(const char *path, bool *own_head) {
    rt_status st = RT_OK;
    ckpt_source *f = NULL;
    *own_head = false;
    RT_TRY(ckpt_source_open(path, &f));
    *own_head = ckpt_t5_own_head(f);
fail:
    ckpt_source_close(f);
    return st;
}

rt_status ckpt_hf_t5_load_tp(const char *path, rt_params *p, int vocab_size, int tp_rank, int tp_size,
                             ckpt_hf_load_report *report) {
    rt_status st = RT_OK;
    ckpt_source *f = NULL;
    float *full = NULL, *shard = NULL;
    char *used = NULL;
    memset(report, 0, sizeof *report);
    RT_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size, "tp rank %d of %d", tp_rank, tp_size);
    RT_CHECK(vocab_size >= 1, "vocab_size %d", vocab_size);
    RT_TRY(ckpt_source_open(path, &f));
    const size_t count = ckpt_source_count(f);
    used = rt_xcalloc(count ? count : 1, 1);
    const bool has_head_param = rt_params_find(p, "lm_head.weight") >= 0;
    if (!has_head_param && ckpt_t5_own_head(f))
        RT_FAIL(RT_ERR_FORMAT, "%s: lm_head.weight differs from the shared embedding (an untied head, as T5 v1.1 and "
                "flan-t5 have), but the model ties its head to 'shared' (set tie_word_embeddings false, or build "
                "the model with t5_model_from_hf)", path);
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        long idx = ckpt_t5_lookup(f, s->name);
        if (idx < 0) {
            if (report->missing++ == 0) snprintf(report->first_missing, sizeof report->first_missing, "%s", s->name);
            continue;
        }
        ckpt_tp_desc d;
        ckpt_tp_param_desc(s, vocab_size, tp_rank, tp_size, &d);
        ckpt_st_tensor t;
        ckpt_source_tensor(f, (size_t)idx, &t);
        size_t want[RT_PARAM_MAX_DIMS];
        int ok = t.ndim == s->ndim;
        for (int k = 0; k < s->ndim; k++) {
            want[k] = (size_t)d.full[k];
            ok = ok && t.shape[k] == want[k];
        }
        if (!ok) {
            char got[96], exp[96];
            RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s for this config", path, t.name,
                    ckpt_shape_str(t.ndim, t.shape, got, sizeof got), ckpt_shape_str(s->ndim, want, exp, sizeof exp));
        }
        int64_t ls[RT_PARAM_MAX_DIMS];
        RT_TRY(ckpt_tp_local_shape(&d, s->name, ls));
        for (int k = 0; k < s->ndim; k++)
            if (ls[k] != s->shape[k])
                RT_FAIL(RT_ERR_FORMAT, "%s: parameter '%s' shards to %lld rows/cols on tp rank %d, the model has %lld",
                        path, s->name, (long long)ls[k], tp_rank, (long long)s->shape[k]);
        used[idx] = 1;
        full = rt_xrealloc(full, t.numel * sizeof(float));
        RT_TRY(ckpt_source_read_f32(f, t.name, full, t.numel));
        shard = rt_xrealloc(shard, s->numel * sizeof(float));
        ckpt_tp_shard(&d, shard, full);
        p->be->ops->to_device(p->be->ctx, rt_params_data(p, i), shard, s->numel * sizeof(float));
        report->loaded++;
    }
    for (size_t i = 0; i < count; i++) {
        if (used[i]) continue;
        const char *name = ckpt_source_name(f, i);
        int skip = !has_head_param && strcmp(name, "lm_head.weight") == 0; /* a copy of shared (checked above) */
        for (size_t k = 0; !skip && k < sizeof ckpt_t5_skipped / sizeof *ckpt_t5_skipped; k++)
            skip = strcmp(name, ckpt_t5_skipped[k]) == 0;
        if (!skip) report->unused++;
    }
fail:
    free(used);
    free(full);
    free(shard);
    ckpt_source_close(f);
    return st;
}

rt_status ckpt_hf_t5_save(const char *path, const rt_params *p, int vocab_size, rt_comm *tp) {
    rt_status st = RT_OK;
    const int n = p->n;
    rt_backend *be = p->be;
    ckpt_st_write_entry *entries = rt_xcalloc((size_t)n, sizeof *entries);
    size_t (*shapes)[RT_PARAM_MAX_DIMS] = rt_xcalloc((size_t)n, sizeof *shapes);
    float **bufs = rt_xcalloc((size_t)n, sizeof *bufs);
    ckpt_tp_scratch scr = {0};
    for (int i = 0; i < n; i++) {
        const rt_param_spec *s = &p->specs[i];
        ckpt_tp_desc d;
        ckpt_tp_param_desc(s, vocab_size, tp->rank, tp->size, &d);
        size_t full_n = ckpt_tp_full_numel(&d);
        bufs[i] = tp->rank == 0 ? rt_xmalloc(full_n * sizeof(float)) : NULL; /* freed even when the gather fails */
        RT_TRY(ckpt_tp_gather_param(be, tp, &d, p->param + s->offset, s->numel, &scr, bufs[i]));
        if (tp->rank != 0) continue;
        for (int k = 0; k < s->ndim; k++) shapes[i][k] = (size_t)d.full[k];
        entries[i] = (ckpt_st_write_entry){.name = s->name, .ndim = s->ndim, .shape = shapes[i], .data = bufs[i]};
    }
    if (tp->rank == 0) st = ckpt_safetensors_write(path, (size_t)n, entries, "{\"format\":\"pt\"}");
    st = ckpt_tp_agree(tp, st, path, "HF export");
fail:
    for (int i = 0; i < n; i++) free(bufs[i]);
    ckpt_tp_scratch_free(be, &scr);
    free(bufs);
    free(shapes);
    free(entries);
    return st;
}
