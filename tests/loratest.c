/* Helpers the LoRA golden tests share (see loratest.h). */
#include "tests/loratest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_peft_weights.h"
#include "checkpoints/ckpt_tp.h"
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
