/* HF GPT-2 <-> tunezoo name and layout map (see ckpt_hf_gpt2.h). */
#include "checkpoints/ckpt_hf_gpt2.h"

#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_safetensors.h"

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

rt_status ckpt_hf_gpt2_load(const char *path, rt_params *p, ckpt_hf_load_report *report) {
    rt_status st = RT_OK;
    ckpt_st_file *f = NULL;
    float *host = NULL, *tr = NULL;
    char *seen = rt_xcalloc((size_t)p->n, 1);
    memset(report, 0, sizeof *report);
    RT_TRY(ckpt_safetensors_open(path, &f));
    size_t count = ckpt_safetensors_count(f);
    for (size_t i = 0; i < count; i++) {
        ckpt_st_tensor t;
        ckpt_safetensors_tensor(f, i, &t);
        const char *name = ckpt_gpt2_strip(t.name);
        if (ckpt_gpt2_is_skipped(name)) continue;
        int idx = rt_params_find(p, name);
        if (idx < 0) {
            report->unused++;
            continue;
        }
        const rt_param_spec *s = &p->specs[idx];
        int conv = ckpt_hf_gpt2_is_conv1d(name);
        /* the file's shape, after undoing Conv1D's [in, out] */
        int ok = t.ndim == s->ndim;
        for (int d = 0; ok && d < s->ndim; d++) {
            size_t want = (size_t)s->shape[conv ? s->ndim - 1 - d : d];
            ok = t.shape[d] == want;
        }
        if (!ok) {
            char got[96], want[96];
            size_t ws[RT_PARAM_MAX_DIMS];
            for (int d = 0; d < s->ndim; d++) ws[d] = (size_t)s->shape[conv ? s->ndim - 1 - d : d];
            RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s for this config", path, t.name,
                    ckpt_shape_str(t.ndim, t.shape, got, sizeof got), ckpt_shape_str(s->ndim, ws, want, sizeof want));
        }
        if (seen[idx]) RT_FAIL(RT_ERR_FORMAT, "%s: parameter '%s' appears twice (with and without 'transformer.')", path, name);
        host = rt_xrealloc(host, s->numel * sizeof(float));
        RT_TRY(ckpt_safetensors_read_f32(f, t.name, host, s->numel));
        const float *src = host;
        if (conv) {
            size_t rows = (size_t)s->shape[0], cols = (size_t)s->shape[1]; /* ours: [out, in] */
            tr = rt_xrealloc(tr, s->numel * sizeof(float));
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++) tr[r * cols + c] = host[c * rows + r];
            src = tr;
        }
        p->be->ops->to_device(p->be->ctx, rt_params_data(p, idx), src, s->numel * sizeof(float));
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
    ckpt_safetensors_close(f);
    return st;
}

rt_status ckpt_hf_gpt2_save(const char *path, const rt_params *p) {
    rt_status st = RT_OK;
    ckpt_st_write_entry *entries = rt_xcalloc((size_t)p->n, sizeof *entries);
    char (*names)[RT_PARAM_NAME_MAX + 16] = rt_xcalloc((size_t)p->n, sizeof *names);
    size_t (*shapes)[RT_PARAM_MAX_DIMS] = rt_xcalloc((size_t)p->n, sizeof *shapes);
    float **bufs = rt_xcalloc((size_t)p->n, sizeof *bufs);
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        int conv = ckpt_hf_gpt2_is_conv1d(s->name);
        float *host = rt_xmalloc(s->numel * sizeof(float));
        p->be->ops->to_host(p->be->ctx, host, p->param + s->offset, s->numel * sizeof(float));
        if (conv) {
            size_t rows = (size_t)s->shape[0], cols = (size_t)s->shape[1];
            float *tr = rt_xmalloc(s->numel * sizeof(float));
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++) tr[c * rows + r] = host[r * cols + c];
            free(host);
            host = tr;
        }
        bufs[i] = host;
        const char *prefix = strcmp(s->name, "score.weight") == 0 ? "" : "transformer.";
        snprintf(names[i], sizeof names[i], "%s%s", prefix, s->name);
        for (int d = 0; d < s->ndim; d++) shapes[i][d] = (size_t)s->shape[conv ? s->ndim - 1 - d : d];
        entries[i] = (ckpt_st_write_entry){.name = names[i], .ndim = s->ndim, .shape = shapes[i], .data = host};
    }
    RT_TRY(ckpt_safetensors_write(path, (size_t)p->n, entries, "{\"format\":\"pt\"}"));
fail:
    for (int i = 0; i < p->n; i++) free(bufs[i]);
    free(bufs);
    free(shapes);
    free(names);
    free(entries);
    return st;
}
