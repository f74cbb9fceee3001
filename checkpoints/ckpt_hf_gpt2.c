/* HF GPT-2 <-> tunezoo name and layout map (see ckpt_hf_gpt2.h). */
#include "checkpoints/ckpt_hf_gpt2.h"

#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_safetensors.h"
#include "checkpoints/ckpt_source.h"
#include "checkpoints/ckpt_tp.h"

/* HF's GPT-2 Conv1D layers store weights [in, out]. */
int ckpt_hf_gpt2_is_conv1d(const char *name) {
    size_t n = strlen(name);
    const char *suffixes[] = {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"};
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
        size_t s = strlen(suffixes[i]);
        if (n >= s && strcmp(name + n - s, suffixes[i]) == 0) return 1;
    }
    return 0;
}

/* Names in the file that are known and deliberately not loaded. */
static int ckpt_gpt2_is_skipped(const char *name) {
    size_t n = strlen(name);
    /* ".attn.bias" is the causal-mask buffer; "c_attn.bias" is a real parameter */
    return strcmp(name, "lm_head.weight") == 0 || (n >= 10 && strcmp(name + n - 10, ".attn.bias") == 0) ||
           (n >= 17 && strcmp(name + n - 17, ".attn.masked_bias") == 0);
}

static const char *ckpt_gpt2_strip(const char *name) {
    return strncmp(name, "transformer.", 12) == 0 ? name + 12 : name;
}

/* Transposes a rows x cols matrix into dst (cols x rows). */
static void ckpt_gpt2_transpose(float *dst, const float *src, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}

/* vocab_size < 0: take it from the file's embedding. */
static rt_status ckpt_gpt2_load_impl(const char *path, rt_params *p, int vocab_size, int tp_rank, int tp_size,
                                     ckpt_hf_load_report *report) {
    rt_status st = RT_OK;
    ckpt_source *f = NULL;
    float *host = NULL, *tr = NULL, *shard = NULL;
    char *seen = rt_xcalloc((size_t)p->n, 1);
    memset(report, 0, sizeof *report);
    RT_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size, "tp rank %d of %d", tp_rank, tp_size);
    RT_TRY(ckpt_source_open(path, &f));
    size_t count = ckpt_source_count(f);
    for (size_t i = 0; i < count; i++) {
        ckpt_st_tensor t;
        ckpt_source_tensor(f, i, &t);
        const char *name = ckpt_gpt2_strip(t.name);
        if (ckpt_gpt2_is_skipped(name)) continue;
        int idx = rt_params_find(p, name);
        if (idx < 0) {
            report->unused++;
            continue;
        }
        const rt_param_spec *s = &p->specs[idx];
        int conv = ckpt_hf_gpt2_is_conv1d(name);
        /* the file's tensor is the full one: it must be exactly what this rank's shard and
         * rule come from (the embedding: vocab_size rows, padded here) */
        ckpt_tp_desc d;
        int vocab = vocab_size >= 0 ? vocab_size : (t.ndim == 2 ? (int)t.shape[0] : -1);
        ckpt_tp_param_desc(s, vocab, tp_rank, tp_size, &d);
        int ok = t.ndim == s->ndim;
        for (int k = 0; ok && k < s->ndim; k++) ok = t.shape[k] == (size_t)d.full[conv ? s->ndim - 1 - k : k];
        if (ok && s->tp == RT_TP_VOCAB) {
            int64_t ls[RT_PARAM_MAX_DIMS];
            ok = vocab >= 1 && ckpt_tp_local_shape(&d, t.name, ls) == RT_OK && ls[0] == s->shape[0];
        }
        if (!ok) {
            char got[96], want[96];
            size_t ws[RT_PARAM_MAX_DIMS];
            for (int k = 0; k < s->ndim; k++) ws[k] = (size_t)d.full[conv ? s->ndim - 1 - k : k];
            if (s->tp == RT_TP_VOCAB && vocab_size < 0)
                RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' has shape %s, which does not pad to the model's %lld rows", path,
                        t.name, ckpt_shape_str(t.ndim, t.shape, got, sizeof got), (long long)s->shape[0] * tp_size);
            RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s for this config", path, t.name,
                    ckpt_shape_str(t.ndim, t.shape, got, sizeof got), ckpt_shape_str(s->ndim, ws, want, sizeof want));
        }
        if (seen[idx]) RT_FAIL(RT_ERR_FORMAT, "%s: parameter '%s' appears twice (with and without 'transformer.')", path, name);
        size_t full_n = t.numel;
        host = rt_xrealloc(host, full_n * sizeof(float));
        RT_TRY(ckpt_source_read_f32(f, t.name, host, full_n));
        const float *full = host;
        if (conv) { /* HF [in, out] -> ours [out, in] */
            tr = rt_xrealloc(tr, full_n * sizeof(float));
            ckpt_gpt2_transpose(tr, host, t.shape[0], t.shape[1]);
            full = tr;
        }
        shard = rt_xrealloc(shard, s->numel * sizeof(float));
        ckpt_tp_shard(&d, shard, full);
        p->be->ops->to_device(p->be->ctx, rt_params_data(p, idx), shard, s->numel * sizeof(float));
        seen[idx] = 1;
        report->loaded++;
    }
    for (int i = 0; i < p->n; i++) {
        if (seen[i]) continue;
        if (report->missing++ == 0) snprintf(report->first_missing, sizeof report->first_missing, "%s", p->specs[i].name);
    }
fail:
    free(seen);
    free(host);
    free(tr);
    free(shard);
    ckpt_source_close(f);
    return st;
}

rt_status ckpt_hf_gpt2_load_tp(const char *path, rt_params *p, int vocab_size, int tp_rank, int tp_size,
                               ckpt_hf_load_report *report) {
    RT_CHECK(vocab_size >= 1, "vocab_size %d", vocab_size);
    return ckpt_gpt2_load_impl(path, p, vocab_size, tp_rank, tp_size, report);
}

rt_status ckpt_hf_gpt2_load(const char *path, rt_params *p, ckpt_hf_load_report *report) {
    return ckpt_gpt2_load_impl(path, p, -1, 0, 1, report);
}

rt_status ckpt_hf_gpt2_save(const char *path, const rt_params *p, int vocab_size, rt_comm *tp) {
    rt_status st = RT_OK;
    const int n = p->n, size = tp->size;
    rt_backend *be = p->be;
    ckpt_st_write_entry *entries = rt_xcalloc((size_t)n, sizeof *entries);
    char (*names)[RT_PARAM_NAME_MAX + 16] = rt_xcalloc((size_t)n, sizeof *names);
    size_t (*shapes)[RT_PARAM_MAX_DIMS] = rt_xcalloc((size_t)n, sizeof *shapes);
    float **bufs = rt_xcalloc((size_t)n, sizeof *bufs);
    ckpt_tp_scratch scr = {0};
    for (int i = 0; i < n; i++) {
        const rt_param_spec *s = &p->specs[i];
        int conv = ckpt_hf_gpt2_is_conv1d(s->name);
        ckpt_tp_desc d;
        ckpt_tp_param_desc(s, vocab_size, tp->rank, size, &d);
        size_t full_n = ckpt_tp_full_numel(&d);
        float *full = tp->rank == 0 ? rt_xmalloc(full_n * sizeof(float)) : NULL;
        bufs[i] = full; /* freed at the end even when the gather fails */
        RT_TRY(ckpt_tp_gather_param(be, tp, &d, p->param + s->offset, s->numel, &scr, full));
        if (tp->rank != 0) continue;
        if (conv) { /* ours [out, in] -> HF [in, out] */
            float *t = rt_xmalloc(full_n * sizeof(float));
            ckpt_gpt2_transpose(t, full, (size_t)d.full[0], (size_t)d.full[1]);
            free(full);
            bufs[i] = full = t;
        }
        const char *prefix = strcmp(s->name, "score.weight") == 0 ? "" : "transformer.";
        snprintf(names[i], sizeof names[i], "%s%s", prefix, s->name);
        for (int k = 0; k < s->ndim; k++) shapes[i][k] = (size_t)d.full[conv ? s->ndim - 1 - k : k];
        entries[i] = (ckpt_st_write_entry){.name = names[i], .ndim = s->ndim, .shape = shapes[i], .data = full};
    }
    if (tp->rank == 0) st = ckpt_safetensors_write(path, (size_t)n, entries, "{\"format\":\"pt\"}");
    st = ckpt_tp_agree(tp, st, path, "HF export");
fail:
    for (int i = 0; i < n; i++) free(bufs[i]);
    ckpt_tp_scratch_free(be, &scr);
    free(bufs);
    free(shapes);
    free(names);
    free(entries);
    return st;
}
