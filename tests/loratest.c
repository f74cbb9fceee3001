/* Helpers the LoRA golden tests share (see loratest.h). */
#include "tests/loratest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_peft_weights.h"
#include "checkpoints/ckpt_source.h"
#include "checkpoints/ckpt_tp.h"
#include "checkpoints/ckpt_weights.h"
#include "models/layers/lora.h"
#include "tests/testutil.h"

void tzl_compare_trainable(const ckpt_st_file *g, const char *prefix, rt_params *p, bool grads, const ckpt_map *map,
                           int expected) {
    int checked = 0;
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        if (s->frozen) continue;
        char peft[256], name[320], gname[320];
        TZ_EXPECT(ckpt_peft_param_name(map, s->name, peft, sizeof peft), "%s: no PEFT name", s->name);
        snprintf(name, sizeof name, "%s.%s", prefix, peft);
        snprintf(gname, sizeof gname, "grad.%s", peft);
        float *ref = rt_xmalloc(s->numel * sizeof(float)), *got = rt_xmalloc(s->numel * sizeof(float));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, name, ref, s->numel));
        memcpy(got, (grads ? p->grad : p->param) + s->offset, s->numel * sizeof(float));
        if (grads) {
            tz_check_close(name, got, ref, s->numel, TZL_GRAD_ATOL, TZL_GRAD_RTOL);
        } else {
            float *gr = rt_xmalloc(s->numel * sizeof(float));
            TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, gname, gr, s->numel));
            tz_check_after_adamw(name, got, ref, gr, s->numel, TZL_FWD_ATOL, TZL_FWD_RTOL);
            free(gr);
        }
        free(ref), free(got);
        checked++;
    }
    TZ_EXPECT(checked == expected, "%d trainable tensors compared, expected %d", checked, expected);
}

rt_status tzl_gather_trainable(rt_backend *be, rt_comm *tp, const rt_params *p, tzl_grads *out) {
    rt_status st = RT_OK;
    ckpt_tp_scratch scr = {0};
    out->n = 0;
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        if (s->frozen) continue;
        if (out->n == TZL_MAX_TRAINABLE) RT_FAIL(RT_ERR_CONFIG, "more than %d trainable tensors", TZL_MAX_TRAINABLE);
        ckpt_tp_desc d;
        ckpt_tp_param_desc(s, s->vocab_rows, tp->rank, tp->size, &d);
        const int k = out->n++;
        out->numel[k] = ckpt_tp_full_numel(&d);
        out->grads[k] = tp->rank == 0 ? rt_xmalloc(out->numel[k] * sizeof(float)) : NULL;
        snprintf(out->names[k], sizeof out->names[k], "%s", s->name);
        RT_TRY(ckpt_tp_gather_param(be, tp, &d, rt_params_grad(p, i), s->numel, &scr, out->grads[k]));
    }
fail:
    ckpt_tp_scratch_free(be, &scr);
    return st;
}

void tzl_grads_free(tzl_grads *g) {
    for (int k = 0; k < g->n; k++) free(g->grads[k]);
    g->n = 0;
}

void tzl_check_gathered(const ckpt_st_file *g, const ckpt_map *map, const tzl_grads *got, int expected,
                        const char *label) {
    TZ_EXPECT(got->n == expected, "%s: %d trainable tensors gathered, expected %d", label, got->n, expected);
    for (int k = 0; k < got->n; k++) {
        char peft_name[256], name[320], what[400];
        TZ_EXPECT(ckpt_peft_param_name(map, got->names[k], peft_name, sizeof peft_name), "%s", got->names[k]);
        snprintf(name, sizeof name, "grad.%s", peft_name);
        float *ref = rt_xmalloc(got->numel[k] * sizeof(float));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, name, ref, got->numel[k]));
        snprintf(what, sizeof what, "%s %s", label, name);
        tz_check_close(what, got->grads[k], ref, got->numel[k], TZL_GRAD_ATOL, TZL_GRAD_RTOL);
        free(ref);
    }
}

void tzl_check_merged(const char *lora_dir, rt_params *p, const ckpt_peft_config *cfg, const ckpt_map *map,
                      int vocab_size, int n_head, int expected) {
    char path[4200], out[4200];
    float *before = rt_xmalloc(p->numel * sizeof(float));
    memcpy(before, p->param, p->numel * sizeof(float));
    mdl_lora_merged saved;
    mdl_lora_merge(p, cfg, map, &saved);
    snprintf(out, sizeof out, "%s/merged-%s-%s", tz_tmpdir(), map->arch, ckpt_map_weights_file(map));
    TZ_EXPECT_OK(ckpt_save_hf(out, map, p, vocab_size, n_head, rt_comm_self()));
    mdl_lora_unmerge(p, &saved);
    TZ_EXPECT(memcmp(before, p->param, p->numel * sizeof(float)) == 0, "%s: the merge was not undone bit for bit",
              map->arch);
    free(before);
    ckpt_st_file *peft = NULL;
    ckpt_source *ours = NULL; /* safetensors, or GLM's torch file */
    snprintf(path, sizeof path, "%s/merged.safetensors", lora_dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &peft));
    TZ_EXPECT_OK(ckpt_source_open(out, &ours));
    if (!ours || !peft) goto done;
    for (size_t i = 0; i < ckpt_source_count(ours); i++)
        TZ_EXPECT(!strstr(ckpt_source_name(ours, i), "lora_"), "the export holds '%s'", ckpt_source_name(ours, i));
    TZ_EXPECT((int)ckpt_safetensors_count(peft) == expected, "%s: PEFT's merge changed %zu tensors, expected %d",
              map->arch, ckpt_safetensors_count(peft), expected);
    for (size_t i = 0; i < ckpt_safetensors_count(peft); i++) {
        const char *name = ckpt_safetensors_name(peft, i);
        ckpt_st_tensor t;
        TZ_EXPECT_OK(ckpt_safetensors_find(peft, name, &t));
        float *want = rt_xmalloc(t.numel * sizeof(float)), *got = rt_xmalloc(t.numel * sizeof(float));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(peft, name, want, t.numel));
        char in_ours[320]; /* a torch file's state_dict sits under its wrap key ({"module": ...}: GLM) */
        snprintf(in_ours, sizeof in_ours, "%s%s%s", map->torch_wrap ? map->torch_wrap : "", map->torch_wrap ? "." : "",
                 name);
        TZ_EXPECT_OK(ckpt_source_read_f32(ours, in_ours, got, t.numel));
        char what[300];
        snprintf(what, sizeof what, "merged %s vs PEFT's merge_and_unload", name);
        tz_check_close(what, got, want, t.numel, TZL_FWD_ATOL, TZL_FWD_RTOL);
        free(want), free(got);
    }
done:
    ckpt_source_close(ours);
    ckpt_safetensors_close(peft);
}

void tzl_check_bf16(const char *lora_dir, const char *fam, const rt_params *p, const ckpt_map *map,
                    const float *logits16, const float *logits32, size_t n, float loss16, float loss32,
                    const float *grads16, const float *grads32, int expected) {
    char path[4200], what[64];
    ckpt_st_file *g = NULL, *a = NULL;
    snprintf(path, sizeof path, "%s/golden.safetensors", lora_dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    snprintf(path, sizeof path, "%s/bf16_autocast.safetensors", lora_dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &a));
    if (!g || !a) goto done;
    snprintf(what, sizeof what, "%s LoRA ", fam);
    tz_check_bf16_golden(g, a, what, "logits", logits16, logits32, n);
    tz_check_bf16_golden(g, a, what, "loss", &loss16, &loss32, 1);
    int compared = 0;
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        char peft[256], name[320];
        if (s->frozen) continue;
        TZ_EXPECT(ckpt_peft_param_name(map, s->name, peft, sizeof peft), "%s: no PEFT name", s->name);
        snprintf(name, sizeof name, "grad.%s", peft);
        tz_check_bf16_golden(g, a, what, name, grads16 + s->offset, grads32 + s->offset, s->numel);
        compared++;
    }
    TZ_EXPECT(compared == expected && tz_count_prefixed(a, "grad.") == expected, "%s: %d gradients compared, %d in %s",
              fam, compared, tz_count_prefixed(a, "grad."), path);
done:
    ckpt_safetensors_close(g);
    ckpt_safetensors_close(a);
}
