/* The shared sublayers (see block.h), over the Megatron layers of parallel.h. */
#include "models/block.h"

#include "models/parallel.h"

#define W(idx) rt_params_data(s->params, (idx))
#define DW(idx) rt_params_grad(s->params, (idx))

/* The gradient entering the branch: dropout's backward into tmp, or dbranch itself. */
static const float *branch_grad(const mdl_sublayers *s, const float *dbranch, size_t BT, mdl_branch_drop drop) {
    if (!(drop.p > 0)) return dbranch;
    rt_dropout_bwd(s->be, s->tmp, dbranch, BT * (size_t)s->C, drop.p, drop.seed, drop.stream);
    return s->tmp;
}

rt_status mdl_attn_fwd(const mdl_sublayers *s, const mdl_attn_params *p, const rt_attn_desc *d, const float *in,
                       float *qkv, float *probs, float *atty, size_t BT, mdl_branch_drop drop) {
    const int C = s->C, Cl = s->C_local;
    mdl_col_linear_fwd(s->be, qkv, in, W(p->qkv_w), W(p->qkv_b), BT, C, 3 * Cl);
    rt_attention_fwd(s->be, d, atty, probs, qkv, qkv + Cl, qkv + 2 * Cl);
    rt_status st = mdl_row_linear_fwd(s->be, s->tp, s->tmp, atty, W(p->proj_w), W(p->proj_b), BT, Cl, C);
    if (st == RT_OK && drop.p > 0)
        rt_dropout_fwd(s->be, s->tmp, s->tmp, BT * (size_t)C, drop.p, drop.seed, drop.stream);
    return st;
}

rt_status mdl_attn_bwd(const mdl_sublayers *s, const mdl_attn_params *p, const rt_attn_desc *d, const float *dbranch,
                       const float *in, const float *qkv, const float *probs, const float *atty, float *din, size_t BT,
                       mdl_branch_drop drop) {
    const int C = s->C, Cl = s->C_local;
    const float *dproj = branch_grad(s, dbranch, BT, drop);
    mdl_row_linear_bwd(s->be, s->datty, DW(p->proj_w), DW(p->proj_b), dproj, atty, W(p->proj_w), BT, Cl, C);
    rt_attention_bwd(s->be, d, s->dqkv, s->dqkv + Cl, s->dqkv + 2 * Cl, NULL, s->datty, probs, qkv, qkv + Cl,
                     qkv + 2 * Cl);
    return mdl_col_linear_bwd(s->be, s->tp, din, DW(p->qkv_w), DW(p->qkv_b), s->dqkv, in, W(p->qkv_w), BT, C, 3 * Cl);
}

void mdl_ffn_up(const mdl_sublayers *s, const mdl_ffn_params *p, rt_act_kind act, const float *in, float *up,
                float *hidden, size_t BT) {
    mdl_col_linear_fwd(s->be, up, in, W(p->up_w), W(p->up_b), BT, s->C, s->F_local);
    rt_act_fwd(s->be, act, hidden, up, BT * (size_t)s->F_local);
}

rt_status mdl_ffn_down(const mdl_sublayers *s, const mdl_ffn_params *p, const float *hidden, size_t BT,
                       mdl_branch_drop drop) {
    rt_status st = mdl_row_linear_fwd(s->be, s->tp, s->tmp, hidden, W(p->down_w), W(p->down_b), BT, s->F_local, s->C);
    if (st == RT_OK && drop.p > 0)
        rt_dropout_fwd(s->be, s->tmp, s->tmp, BT * (size_t)s->C, drop.p, drop.seed, drop.stream);
    return st;
}

rt_status mdl_ffn_bwd(const mdl_sublayers *s, const mdl_ffn_params *p, rt_act_kind act, const float *dbranch,
                      const float *in, const float *up, const float *hidden, float *din, size_t BT,
                      mdl_branch_drop drop) {
    const int C = s->C, Fl = s->F_local;
    const float *ddown = branch_grad(s, dbranch, BT, drop);
    mdl_row_linear_bwd(s->be, s->dact, DW(p->down_w), DW(p->down_b), ddown, hidden, W(p->down_w), BT, Fl, C);
    rt_act_bwd(s->be, act, s->dup, up, s->dact, BT * (size_t)Fl);
    return mdl_col_linear_bwd(s->be, s->tp, din, DW(p->up_w), DW(p->up_b), s->dup, in, W(p->up_w), BT, C, Fl);
}
