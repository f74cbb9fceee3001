/* HF BERT / RoBERTa <-> tunezoo name and layout map (see ckpt_hf_bert.h). The loader walks
 * the model's parameters and looks each one up under HF's possible names, so a fused QKV
 * parameter simply looks up three tensors; the file's leftovers are then classified as
 * skipped heads, ignored buffers or unused. */
#include "checkpoints/ckpt_hf_bert.h"

#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_safetensors.h"
#include "checkpoints/ckpt_source.h"
#include "checkpoints/ckpt_tp.h"
#include "runtime/rt_log.h"

#define CKPT_BERT_NAME_MAX (RT_PARAM_NAME_MAX + 32)

static const char *const ckpt_bert_parts[3] = {"query", "key", "value"};

static int ckpt_bert_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The HF name (no prefix) of one part of our parameter: q/k/v of the fused QKV (part 0..2),
 * else the name itself (part 0). */
static void ckpt_bert_hf_name(const char *ours, int qkv, int part, char *out, size_t size) {
    const char *at = qkv ? strstr(ours, ".attention.self.qkv.") : NULL;
    if (!at) {
        snprintf(out, size, "%s", ours);
        return;
    }
    size_t head = (size_t)(at - ours) + strlen(".attention.self.");
    snprintf(out, size, "%.*s%s%s", (int)head, ours, ckpt_bert_parts[part], ours + head + 3);
}

/* Finds an HF name under the prefixes files use, and the old gamma/beta LayerNorm names. */
static long ckpt_bert_lookup(const ckpt_source *f, const char *hf) {
    static const char *const prefixes[] = {"bert.", "roberta.", ""};
    char legacy[CKPT_BERT_NAME_MAX] = "", name[CKPT_BERT_NAME_MAX + 16];
    size_t n = strlen(hf);
    if (ckpt_bert_ends_with(hf, "LayerNorm.weight"))
        snprintf(legacy, sizeof legacy, "%.*sgamma", (int)(n - 6), hf);
    else if (ckpt_bert_ends_with(hf, "LayerNorm.bias"))
        snprintf(legacy, sizeof legacy, "%.*sbeta", (int)(n - 4), hf);
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        snprintf(name, sizeof name, "%s%s", prefixes[i], hf);
        long idx = ckpt_source_index(f, name);
        if (idx < 0 && legacy[0]) {
            snprintf(name, sizeof name, "%s%s", prefixes[i], legacy);
            idx = ckpt_source_index(f, name);
        }
        if (idx >= 0) return idx;
    }
    return -1;
}

static const char *ckpt_bert_strip(const char *name) {
    if (strncmp(name, "bert.", 5) == 0) return name + 5;
    if (strncmp(name, "roberta.", 8) == 0) return name + 8;
    return name;
}

rt_status ckpt_hf_bert_load_tp(const char *path, rt_params *p, int vocab_size, int n_head, int tp_rank, int tp_size,
                               ckpt_hf_load_report *report) {
    rt_status st = RT_OK;
    ckpt_source *f = NULL;
    float *full = NULL, *shard = NULL;
    char *used = NULL;
    memset(report, 0, sizeof *report);
    RT_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size, "tp rank %d of %d", tp_rank, tp_size);
    RT_CHECK(vocab_size >= 1 && n_head >= 1, "vocab_size %d n_head %d", vocab_size, n_head);
    RT_TRY(ckpt_source_open(path, &f));
    const size_t count = ckpt_source_count(f);
    used = rt_xcalloc(count ? count : 1, 1);
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        const int qkv = s->tp == RT_TP_QKV, parts = qkv ? 3 : 1;
        ckpt_tp_desc d;
        ckpt_tp_param_desc(s, vocab_size, tp_rank, tp_size, &d);
        if (qkv) d.n_head = n_head;
        long idx[3];
        int found = 0;
        char hf[CKPT_BERT_NAME_MAX];
        for (int k = 0; k < parts; k++) {
            ckpt_bert_hf_name(s->name, qkv, k, hf, sizeof hf);
            idx[k] = ckpt_bert_lookup(f, hf);
            found += idx[k] >= 0;
        }
        if (found == 0) {
            if (report->missing++ == 0) snprintf(report->first_missing, sizeof report->first_missing, "%s", s->name);
            continue;
        }
        if (found < parts) {
            int k = idx[0] < 0 ? 0 : idx[1] < 0 ? 1 : 2;
            ckpt_bert_hf_name(s->name, qkv, k, hf, sizeof hf);
            RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' is missing while the other attention projections of its layer "
                    "are there", path, hf);
        }
        /* each part is the full tensor's dim 0 divided by parts (q, k, v are equal thirds) */
        size_t want[RT_PARAM_MAX_DIMS];
        for (int k = 0; k < s->ndim; k++) want[k] = (size_t)d.full[k] / (k == 0 ? (size_t)parts : 1);
        size_t part_n = ckpt_tp_full_numel(&d) / (size_t)parts;
        full = rt_xrealloc(full, ckpt_tp_full_numel(&d) * sizeof(float));
        for (int k = 0; k < parts; k++) {
            ckpt_st_tensor t;
            ckpt_source_tensor(f, (size_t)idx[k], &t);
            int ok = t.ndim == s->ndim;
            for (int j = 0; ok && j < s->ndim; j++) ok = t.shape[j] == want[j];
            if (!ok) {
                char got[96], exp[96];
                RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s for this config", path, t.name,
                        ckpt_shape_str(t.ndim, t.shape, got, sizeof got), ckpt_shape_str(s->ndim, want, exp, sizeof exp));
            }
            if (used[idx[k]])
                RT_FAIL(RT_ERR_FORMAT, "%s: tensor '%s' maps to two parameters (a duplicate with another prefix?)",
                        path, t.name);
            used[idx[k]] = 1;
            RT_TRY(ckpt_source_read_f32(f, t.name, full + (size_t)k * part_n, part_n));
        }
        int64_t ls[RT_PARAM_MAX_DIMS];
        RT_TRY(ckpt_tp_local_shape(&d, s->name, ls));
        for (int k = 0; k < s->ndim; k++)
            if (ls[k] != s->shape[k])
                RT_FAIL(RT_ERR_FORMAT, "%s: parameter '%s' shards to %lld rows/cols on tp rank %d, the model has %lld",
                        path, s->name, (long long)ls[k], tp_rank, (long long)s->shape[k]);
        shard = rt_xrealloc(shard, s->numel * sizeof(float));
        ckpt_tp_shard(&d, shard, full);
        p->be->ops->to_device(p->be->ctx, rt_params_data(p, i), shard, s->numel * sizeof(float));
        report->loaded++;
    }
    int skipped = 0;
    for (size_t i = 0; i < count; i++) {
        if (used[i]) continue;
        const char *name = ckpt_bert_strip(ckpt_source_name(f, i));
        if (strncmp(name, "cls.", 4) == 0 || strncmp(name, "lm_head.", 8) == 0)
            skipped++;
        else if (!ckpt_bert_ends_with(name, "position_ids")) /* a buffer, not a parameter */
            report->unused++;
    }
    if (skipped) rt_log_info("%s: skipped %d pre-training head tensors (cls.*, lm_head.*)", path, skipped);
fail:
    free(used);
    free(full);
    free(shard);
    ckpt_source_close(f);
    return st;
}

rt_status ckpt_hf_bert_save(const char *path, const rt_params *p, bool roberta, int vocab_size, rt_comm *tp) {
    rt_status st = RT_OK;
    const int n = p->n;
    rt_backend *be = p->be;
    /* up to three entries per parameter (q, k, v) */
    ckpt_st_write_entry *entries = rt_xcalloc((size_t)n * 3, sizeof *entries);
    char (*names)[CKPT_BERT_NAME_MAX + 16] = rt_xcalloc((size_t)n * 3, sizeof *names);
    size_t (*shapes)[RT_PARAM_MAX_DIMS] = rt_xcalloc((size_t)n * 3, sizeof *shapes);
    float **bufs = rt_xcalloc((size_t)n, sizeof *bufs);
    ckpt_tp_scratch scr = {0};
    size_t ne = 0;
    for (int i = 0; i < n; i++) {
        const rt_param_spec *s = &p->specs[i];
        const int qkv = s->tp == RT_TP_QKV, parts = qkv ? 3 : 1;
        ckpt_tp_desc d;
        ckpt_tp_param_desc(s, vocab_size, tp->rank, tp->size, &d);
        size_t full_n = ckpt_tp_full_numel(&d);
        bufs[i] = tp->rank == 0 ? rt_xmalloc(full_n * sizeof(float)) : NULL; /* freed even when the gather fails */
        RT_TRY(ckpt_tp_gather_param(be, tp, &d, p->param + s->offset, s->numel, &scr, bufs[i]));
        if (tp->rank != 0) continue;
        /* the classification head lives outside the encoder's prefix in HF */
        const char *prefix = strncmp(s->name, "classifier.", 11) == 0 ? "" : roberta ? "roberta." : "bert.";
        for (int k = 0; k < parts; k++, ne++) {
            char hf[CKPT_BERT_NAME_MAX];
            ckpt_bert_hf_name(s->name, qkv, k, hf, sizeof hf);
            snprintf(names[ne], sizeof names[ne], "%s%s", prefix, hf);
            for (int j = 0; j < s->ndim; j++) shapes[ne][j] = (size_t)d.full[j] / (j == 0 ? (size_t)parts : 1);
            entries[ne] = (ckpt_st_write_entry){.name = names[ne], .ndim = s->ndim, .shape = shapes[ne],
                                                .data = bufs[i] + (size_t)k * (full_n / (size_t)parts)};
        }
    }
    if (tp->rank == 0) st = ckpt_safetensors_write(path, ne, entries, "{\"format\":\"pt\"}");
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
