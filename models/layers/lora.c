/* LoRA adapters on the stack's linears (see lora.h). */
#include "models/layers/lora.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_peft_weights.h"
#include "models/layers/param.h"

bool mdl_lora_is_adapter(const char *name) { return ckpt_peft_adapter_stem(name, NULL) > 0; }

/* The HF module of part `part` of our parameter `ours` (its export name without the last dotted
 * part, ".weight"); false when the map has no such part. */
static bool lora_hf_module(const ckpt_map *map, const char *ours, int part, char *out, size_t size) {
    long nums[CKPT_MAP_MAX_NUMS];
    int n_nums;
    const ckpt_map_row *row = ckpt_map_find_ours(map, ours, nums, &n_nums);
    if (!row || part >= ckpt_map_parts(row) || !ckpt_map_export_name(map, ours, part, out, size)) return false;
    char *dot = strrchr(out, '.');
    if (dot) *dot = '\0';
    return true;
}

/* The map's prefix ("transformer."), which adapters' names leave out. */
static const char *lora_prefix(const ckpt_map *map) { return map->prefix ? map->prefix : ""; }

/* Declares an adapter on HF module `module` (which starts with the map's prefix): A (r, in) of a
 * layer whose input is in_total wide on all ranks, B (out, r), named MODULE.lora_A.weight and
 * MODULE.lora_B.weight without the prefix, as PEFT names them after it. */
static mdl_lora lora_add(rt_params *p, const ckpt_map *map, const char *module, int64_t r, int64_t in, int64_t in_total,
                         int64_t out, rt_tp_rule a_rule, rt_tp_rule b_rule) {
    const char *ours = module + strlen(lora_prefix(map));
    char name[RT_PARAM_NAME_MAX];
    const int64_t a_shape[2] = {r, in}, b_shape[2] = {out, r};
    mdl_lora l;
    RT_CHECK(strlen(ours) + strlen(ckpt_peft_lora_suffix[0]) < sizeof name, "LoRA on '%s': a name too long", module);
    snprintf(name, sizeof name, "%s%s", ours, ckpt_peft_lora_suffix[CKPT_PEFT_LORA_A]);
    /* PEFT: kaiming_uniform_(a = sqrt(5)), whose bound gain * sqrt(3 / fan_in) is 1 / sqrt(fan_in) */
    l.a = rt_params_add(p, name, 2, a_shape, a_rule, false, RT_INIT_UNIFORM, 1.0f / sqrtf((float)in_total));
    snprintf(name, sizeof name, "%s%s", ours, ckpt_peft_lora_suffix[CKPT_PEFT_LORA_B]);
    l.b = rt_params_add(p, name, 2, b_shape, b_rule, false, RT_INIT_ZEROS, 0.0f);
    return l;
}

/* Whether part `part` of base weight bs is a target; module gets its HF name. */
static bool lora_targets(const ckpt_peft_config *cfg, const ckpt_map *map, const rt_param_spec *bs, int part,
                         char *module, size_t size) {
    const char *pre = lora_prefix(map);
    return bs->ndim == 2 && lora_hf_module(map, bs->name, part, module, size) &&
           strncmp(module, pre, strlen(pre)) == 0 && ckpt_peft_is_target(cfg, module);
}

mdl_lora mdl_lora_declare(rt_params *p, const ckpt_peft_config *cfg, const ckpt_map *map, int base, int tp_size) {
    if (!cfg || base < 0) return mdl_lora_none();
    const rt_param_spec bs = p->specs[base]; /* a copy: rt_params_add may move the specs */
    long nums[CKPT_MAP_MAX_NUMS];
    int n_nums;
    const ckpt_map_row *row = ckpt_map_find_ours(map, bs.name, nums, &n_nums);
    char module[2 * RT_PARAM_NAME_MAX];
    if (!row || ckpt_map_parts(row) != 1 || !lora_targets(cfg, map, &bs, 0, module, sizeof module))
        return mdl_lora_none();
    const int64_t in = bs.shape[1], in_total = bs.tp == RT_TP_ROW ? in * tp_size : in;
    return lora_add(p, map, module, cfg->r, in, in_total, bs.shape[0], mdl_lora_a_rule(bs.tp), mdl_lora_b_rule(bs.tp));
}

void mdl_lora_declare_parts(rt_params *p, const ckpt_peft_config *cfg, const ckpt_map *map, int base, mdl_lora out[3]) {
    for (int k = 0; k < 3; k++) out[k] = mdl_lora_none();
    if (!cfg || base < 0) return;
    const rt_param_spec bs = p->specs[base];
    long nums[CKPT_MAP_MAX_NUMS];
    int n_nums;
    const ckpt_map_row *row = ckpt_map_find_ours(map, bs.name, nums, &n_nums);
    if (!row || ckpt_map_parts(row) != 3) return; /* one HF module: mdl_lora_declare's */
    RT_CHECK(bs.tp == RT_TP_QKV && bs.shape[0] % 3 == 0, "LoRA parts of '%s': not a fused [q; k; v]", bs.name);
    for (int k = 0; k < 3; k++) {
        char module[2 * RT_PARAM_NAME_MAX];
        /* a part is column-parallel: its rows split by heads as the fused weight's third is */
        if (lora_targets(cfg, map, &bs, k, module, sizeof module))
            out[k] = lora_add(p, map, module, cfg->r, bs.shape[1], bs.shape[1], bs.shape[0] / 3, RT_TP_NONE, RT_TP_COL);
    }
}

/* Whether the HF module or one that holds it (a dotted prefix) is one of cfg's modules_to_save:
 * PEFT trains a saved module's every parameter ("classifier" holds classifier.dense). */
static bool lora_saved(const ckpt_peft_config *cfg, const char *module) {
    char m[2 * RT_PARAM_NAME_MAX];
    snprintf(m, sizeof m, "%s", module);
    for (;;) {
        if (ckpt_peft_is_saved(cfg, m)) return true;
        char *dot = strrchr(m, '.');
        if (!dot) return false;
        *dot = '\0';
    }
}

void mdl_lora_freeze_base(rt_params *p, const ckpt_peft_config *cfg, const ckpt_map *map) {
    if (!cfg) return;
    for (int i = 0; i < p->n; i++) {
        rt_param_spec *s = &p->specs[i];
        char module[2 * RT_PARAM_NAME_MAX];
        const bool saved = lora_hf_module(map, s->name, 0, module, sizeof module) && lora_saved(cfg, module);
        s->frozen = !mdl_lora_is_adapter(s->name) && !saved;
    }
}

/* The adapter (A, B indices) of part `part` of base weight bs, or false. */
static bool lora_of_part(const rt_params *p, const ckpt_map *map, const rt_param_spec *bs, int part, int *a, int *b) {
    char module[2 * RT_PARAM_NAME_MAX], name[3 * RT_PARAM_NAME_MAX];
    const char *pre = lora_prefix(map);
    if (bs->ndim != 2 || !lora_hf_module(map, bs->name, part, module, sizeof module) ||
        strncmp(module, pre, strlen(pre)) != 0)
        return false;
    snprintf(name, sizeof name, "%s%s", module + strlen(pre), ckpt_peft_lora_suffix[CKPT_PEFT_LORA_A]);
    *a = rt_params_find(p, name);
    snprintf(name, sizeof name, "%s%s", module + strlen(pre), ckpt_peft_lora_suffix[CKPT_PEFT_LORA_B]);
    *b = rt_params_find(p, name);
    return *a >= 0 && *b >= 0;
}

void mdl_lora_merge(rt_params *p, const ckpt_peft_config *cfg, const ckpt_map *map, mdl_lora_merged *saved) {
    *saved = (mdl_lora_merged){0};
    const float scale = (float)ckpt_peft_scale(cfg);
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec bs = p->specs[i];
        long nums[CKPT_MAP_MAX_NUMS];
        int n_nums;
        const ckpt_map_row *row = mdl_lora_is_adapter(bs.name) ? NULL : ckpt_map_find_ours(map, bs.name, nums, &n_nums);
        const int parts = row ? ckpt_map_parts(row) : 0;
        float *W = NULL;
        for (int k = 0; k < parts; k++) {
            int a, b;
            if (!lora_of_part(p, map, &bs, k, &a, &b)) continue;
            const rt_param_spec *as = &p->specs[a], *bsp = &p->specs[b];
            const int64_t rows = bs.shape[0] / parts, in = bs.shape[1], r = as->shape[0];
            RT_CHECK(as->shape[1] == in && bsp->shape[0] == rows && bsp->shape[1] == r,
                     "LoRA merge: '%s' [%lld, %lld] with A [%lld, %lld] and B [%lld, %lld]", bs.name,
                     (long long)bs.shape[0], (long long)in, (long long)as->shape[0], (long long)as->shape[1],
                     (long long)bsp->shape[0], (long long)bsp->shape[1]);
            if (!W) { /* the weight as it was, kept; then changed on a host copy */
                W = rt_xmalloc(bs.numel * sizeof(float));
                rt_to_host(p->be, W, p->param + bs.offset, bs.numel * sizeof(float));
                saved->param = rt_xrealloc(saved->param, (size_t)(saved->n + 1) * sizeof(int));
                saved->values = rt_xrealloc(saved->values, (size_t)(saved->n + 1) * sizeof(float *));
                saved->param[saved->n] = i;
                saved->values[saved->n] = rt_xmalloc(bs.numel * sizeof(float));
                memcpy(saved->values[saved->n++], W, bs.numel * sizeof(float));
            }
            float *A = rt_xmalloc(as->numel * sizeof(float)), *B = rt_xmalloc(bsp->numel * sizeof(float));
            rt_to_host(p->be, A, p->param + as->offset, as->numel * sizeof(float));
            rt_to_host(p->be, B, p->param + bsp->offset, bsp->numel * sizeof(float));
            ckpt_peft_fold(W + (size_t)k * (size_t)(rows * in), B, A, rows, in, r, scale, false);
            free(A), free(B);
        }
        if (W) rt_to_device(p->be, p->param + bs.offset, W, bs.numel * sizeof(float));
        free(W);
    }
}

void mdl_lora_unmerge(rt_params *p, mdl_lora_merged *saved) {
    for (int k = 0; k < saved->n; k++) {
        const rt_param_spec *s = &p->specs[saved->param[k]];
        rt_to_device(p->be, p->param + s->offset, saved->values[k], s->numel * sizeof(float));
        free(saved->values[k]);
    }
    free(saved->param);
    free(saved->values);
    *saved = (mdl_lora_merged){0};
}

rt_status mdl_lora_check_targets(const rt_params *p, const ckpt_peft_config *cfg, const ckpt_map *map,
                                 const char *family, const char *hint) {
    for (int t = 0; t < cfg->n_targets; t++) {
        const ckpt_peft_config one = {.n_targets = 1, .targets = cfg->targets + t};
        bool found = false;
        for (int i = 0; i < p->n && !found; i++) {
            const char *name = p->specs[i].name;
            ckpt_peft_kind kind;
            const size_t stem = ckpt_peft_adapter_stem(name, &kind);
            if (!stem || kind != CKPT_PEFT_LORA_A) continue;
            char module[2 * RT_PARAM_NAME_MAX];
            snprintf(module, sizeof module, "%s%.*s", lora_prefix(map), (int)stem, name);
            found = ckpt_peft_is_target(&one, module);
        }
        if (!found)
            return rt_errorf(RT_ERR_USAGE,
                             "LoRA target '%s' matches no linear of this %s that takes an adapter (its "
                             "modules: %s)",
                             cfg->targets[t], family, hint);
    }
    return RT_OK;
}

/* ---- forward and backward ---- */

/* Linear k's input as the adapter sees it: x, or (dropout on) x dropped into the scratch; the
 * mask drawn at the whole (N, in_total) matrix's indices from column in_offset. */
static rt_x lora_input(const mdl_sublayers *s, int k, rt_x x, size_t N, int in, int in_total, int in_offset) {
    const mdl_lora_run *L = &s->lora;
    if (!(L->drop.p > 0)) return x;
    rt_dropout_cols(s->be, rt_xf(L->x), x, N, in, in_total, in_offset, L->drop.p, L->drop.seed,
                    L->drop.stream + (uint64_t)k, L->drop.step);
    return rt_xf(L->x);
}

/* t (N, r) = xd A^T: this rank's part (a row-parallel layer's sums over its columns only). */
static void lora_t(const mdl_sublayers *s, mdl_lora l, rt_x xd, size_t N, int in) {
    const int r = s->lora.r;
    rt_gemm(s->be, false, true, (int)N, r, in, 1.0f, xd, in, 0, rt_xf(mdl_param(s->params, l.a)), in, 0, 0.0f,
            rt_xf(s->lora.t), r, 0, 1);
}

/* out (N, out_f, row stride ld) += scale t B[row0 .. row0 + out_f)^T. */
static void lora_up_rows(const mdl_sublayers *s, mdl_lora l, rt_x out, int ld, size_t N, int row0, int out_f) {
    const int r = s->lora.r;
    rt_gemm(s->be, false, true, (int)N, out_f, r, s->lora.scale, rt_xf(s->lora.t), r, 0,
            rt_xf(mdl_param(s->params, l.b) + (size_t)row0 * r), r, 0, 1.0f, out, ld, 0, 1);
}

/* dB += dout^T (scale t), then u (N, r) = scale dout B: the gradients through B from t; dout
 * (N, out_f) at row stride ld. dB goes through the backend's gemm unrounded (a parameter's
 * gradient, as rt_linear_wgrad's); u is an activation's. */
static void lora_through_b(const mdl_sublayers *s, mdl_lora l, rt_x dout, int ld, size_t N, int out_f) {
    const mdl_lora_run *L = &s->lora;
    rt_scale(s->be, L->t, L->scale, N * (size_t)L->r);
    float *dB = mdl_grad(s->params, l.b);
    if (dB) rt_gemm_grad(s->be, true, false, out_f, L->r, (int)N, 1.0f, dout, ld, rt_xf(L->t), L->r, 1.0f, dB, L->r);
    rt_gemm(s->be, false, false, (int)N, L->r, out_f, L->scale, dout, ld, 0, rt_xf(mdl_param(s->params, l.b)), L->r, 0,
            0.0f, rt_xf(L->u), L->r, 0, 1);
}

void mdl_lora_col_fwd(const mdl_sublayers *s, mdl_lora l, int k, rt_x out, int ld, rt_x x, size_t N, int in,
                      int out_f) {
    if (!mdl_lora_on(l)) return;
    lora_t(s, l, lora_input(s, k, x, N, in, in, 0), N, in);
    lora_up_rows(s, l, out, ld, N, 0, out_f);
}

void mdl_lora_col_fwd_parts(const mdl_sublayers *s, mdl_lora l, int k, const rt_x *out, rt_x x, size_t N, int in,
                            int part) {
    if (!mdl_lora_on(l)) return;
    lora_t(s, l, lora_input(s, k, x, N, in, in, 0), N, in);
    for (int i = 0; i < 3; i++)
        if (out[i].p) lora_up_rows(s, l, out[i], part, N, i * part, part);
}

rt_status mdl_lora_col_bwd(const mdl_sublayers *s, mdl_lora l, int k, rt_x din, rt_x dout, int ld, rt_x x, size_t N,
                           int in, int out_f) {
    if (!mdl_lora_on(l)) return RT_OK;
    const mdl_lora_run *L = &s->lora;
    const bool dropped = L->drop.p > 0, one_rank = s->tp->size == 1;
    const float *A = mdl_param(s->params, l.a);
    float *dA = mdl_grad(s->params, l.a);
    rt_x xd = lora_input(s, k, x, N, in, in, 0);
    lora_t(s, l, xd, N, in);
    lora_through_b(s, l, dout, ld, N, out_f);
    if (one_rank) rt_linear_wgrad(s->be, dA, NULL, rt_xf(L->u), xd, N, in, L->r); /* before the scratch is reused */
    /* dX += drop'(u_r A), this rank's part: the caller's all-reduce of dX sums the ranks' */
    if (dropped) {
        rt_gemm(s->be, false, false, (int)N, in, L->r, 1.0f, rt_xf(L->u), L->r, 0, rt_xf(A), in, 0, 0.0f, rt_xf(L->x),
                in, 0, 1);
        rt_dropout_cols(s->be, rt_xf(L->x), rt_xf(L->x), N, in, in, 0, L->drop.p, L->drop.seed,
                        L->drop.stream + (uint64_t)k, L->drop.step);
        rt_add(s->be, din, din, rt_xf(L->x), N * (size_t)in);
    } else {
        rt_gemm(s->be, false, false, (int)N, in, L->r, 1.0f, rt_xf(L->u), L->r, 0, rt_xf(A), in, 0, 1.0f, din, in, 0,
                1);
    }
    if (one_rank) return RT_OK;
    /* u summed over the ranks, so that dA = u^T drop(x) is the same on every rank */
    rt_status st = s->tp->ops->all_reduce(s->tp->ctx, L->u, N * (size_t)L->r, RT_REDUCE_SUM);
    if (st != RT_OK) return st;
    if (dropped) xd = lora_input(s, k, x, N, in, in, 0); /* the scratch held dX's part */
    rt_linear_wgrad(s->be, dA, NULL, rt_xf(L->u), xd, N, in, L->r);
    return RT_OK;
}

/* t = drop(x_r) A_r^T summed over the tp ranks; returns the dropped input. */
static rt_status lora_row_t(const mdl_sublayers *s, mdl_lora l, int k, rt_x x, size_t N, int in_local, rt_x *xd) {
    *xd = lora_input(s, k, x, N, in_local, in_local * s->tp->size, in_local * s->tp->rank);
    lora_t(s, l, *xd, N, in_local);
    if (s->tp->size > 1) return s->tp->ops->all_reduce(s->tp->ctx, s->lora.t, N * (size_t)s->lora.r, RT_REDUCE_SUM);
    return RT_OK;
}

rt_status mdl_lora_row_fwd(const mdl_sublayers *s, mdl_lora l, int k, rt_x out, rt_x x, size_t N, int in_local,
                           int out_f) {
    if (!mdl_lora_on(l)) return RT_OK;
    rt_x xd;
    rt_status st = lora_row_t(s, l, k, x, N, in_local, &xd);
    if (st != RT_OK) return st;
    lora_up_rows(s, l, out, out_f, N, 0, out_f);
    return RT_OK;
}

rt_status mdl_lora_row_bwd(const mdl_sublayers *s, mdl_lora l, int k, rt_x dinp, bool accumulate, rt_x dout, rt_x x,
                           size_t N, int in_local, int out_f) {
    if (!mdl_lora_on(l)) return RT_OK;
    const mdl_lora_run *L = &s->lora;
    const float *A = mdl_param(s->params, l.a);
    rt_x xd;
    rt_status st = lora_row_t(s, l, k, x, N, in_local, &xd);
    if (st != RT_OK) return st;
    lora_through_b(s, l, dout, out_f, N, out_f);
    rt_linear_wgrad(s->be, mdl_grad(s->params, l.a), NULL, rt_xf(L->u), xd, N, in_local, L->r);
    if (!dinp.p) return RT_OK;
    /* dX_r (+)= drop'(u A_r) */
    if (!(L->drop.p > 0)) {
        rt_gemm(s->be, false, false, (int)N, in_local, L->r, 1.0f, rt_xf(L->u), L->r, 0, rt_xf(A), in_local, 0,
                accumulate ? 1.0f : 0.0f, dinp, in_local, 0, 1);
        return RT_OK;
    }
    RT_CHECK(!accumulate, "LoRA dropout's input gradient is written, never added"); /* no typed add op */
    rt_gemm(s->be, false, false, (int)N, in_local, L->r, 1.0f, rt_xf(L->u), L->r, 0, rt_xf(A), in_local, 0, 0.0f,
            rt_xf(L->x), in_local, 0, 1);
    rt_dropout_cols(s->be, dinp, rt_xf(L->x), N, in_local, in_local * s->tp->size, in_local * s->tp->rank, L->drop.p,
                    L->drop.seed, L->drop.stream + (uint64_t)k, L->drop.step);
    return RT_OK;
}
