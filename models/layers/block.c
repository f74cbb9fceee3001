/* The shared sublayers (see block.h), over the Megatron layers of parallel.h. */
#include "models/layers/block.h"

#include "models/layers/lora.h"
#include "models/layers/parallel.h"

#include "models/layers/param.h"

void mdl_norm_fwd(const mdl_sublayers *s, mdl_norm_params p, rt_x out, float *mean, float *rstd, rt_x in, size_t n) {
    if (s->norm == MDL_NORM_RMS)
        rt_rmsnorm_fwd(s->be, out, rstd, in, mdl_param(s->params, p.w), n, s->C, s->norm_eps);
    else
        rt_layernorm_fwd(s->be, out, mean, rstd, in, mdl_param(s->params, p.w), mdl_param(s->params, p.b), n, s->C,
                         s->norm_eps);
}

void mdl_norm_bwd(const mdl_sublayers *s, mdl_norm_params p, float *din, rt_x dout, rt_x in, const float *mean,
                  const float *rstd, size_t n) {
    if (s->norm == MDL_NORM_RMS)
        rt_rmsnorm_bwd(s->be, din, mdl_grad(s->params, p.w), dout, in, mdl_param(s->params, p.w), rstd, n, s->C);
    else
        rt_layernorm_bwd(s->be, din, mdl_grad(s->params, p.w), mdl_grad(s->params, p.b), dout, in,
                         mdl_param(s->params, p.w), mean, rstd, n, s->C);
}

rt_residual_desc mdl_residual_desc(const mdl_sublayers *s, mdl_norm_params p, mdl_drop drop, size_t n) {
    const bool rms = s->norm == MDL_NORM_RMS;
    return (rt_residual_desc){.N = n,
                              .C = s->C,
                              .weight = mdl_param(s->params, p.w),
                              .bias = rms ? NULL : mdl_param(s->params, p.b),
                              .rms = rms,
                              .eps = s->norm_eps,
                              .dropout_p = drop.p,
                              .seed = drop.seed,
                              .stream = drop.stream,
                              .stream_step = drop.step};
}

/* Backward of n column-parallel linears that read the same input x (N, C): accumulates each
 * weight's (and bias's) gradient and its adapter's (lora[k], dropout stream lora_k[k]), and
 * din = sum_k dout_k W_k (+ its adapter's), written or (accumulate) added, then all-reduced over
 * tp once when reduce is set (an fp32 din then). parts (or NULL): a fused [q; k; v] projection's
 * part adapters, each over its third of dout[0]. */
static rt_status cols_bwd(const mdl_sublayers *s, rt_x din, bool accumulate, bool reduce, int n, const int *w,
                          const int *b, const mdl_lora *lora, const int *lora_k, const mdl_lora *parts,
                          const rt_x *dout, rt_x x, size_t N, int out_local) {
    rt_backend *be = s->be;
    const int C = s->C;
    rt_status st = RT_OK;
    for (int k = 0; k < n; k++) {
        /* din NULL: the weight and bias gradients only, no collective */
        (void)mdl_col_linear_bwd(be, s->tp, NULL, mdl_grad(s->params, w[k]), mdl_grad(s->params, b[k]), dout[k], x,
                                 NULL, N, C, out_local);
        rt_gemm(be, false, false, (int)N, C, out_local, 1.0f, dout[k], out_local, 0, rt_xf(mdl_param(s->params, w[k])),
                C, 0, (k == 0 && !accumulate) ? 0.0f : 1.0f, din, C, 0, 1);
        RT_TRY(mdl_lora_col_bwd(s, lora[k], lora_k[k], din, dout[k], out_local, x, N, C, out_local));
    }
    for (int p = 0; parts && p < 3; p++)
        RT_TRY(mdl_lora_col_bwd(s, parts[p], MDL_LORA_Q + p, din, rt_x_at(dout[0], (size_t)p * (out_local / 3)),
                                out_local, x, N, C, out_local / 3));
    if (reduce && s->tp->size > 1)
        return s->tp->ops->all_reduce(s->tp->ctx, rt_x_floats(din, "a column-parallel input gradient under tp"),
                                      N * (size_t)C, RT_REDUCE_SUM);
fail:
    return st;
}

/* Backward of a row-parallel linear and its adapter: dinp = dL/d(x) (N, in_local) written
 * (NULL: not wanted), the gradients accumulated. The adapter's part is added after the base's
 * product, or with its dropout written before it. */
static rt_status row_bwd(const mdl_sublayers *s, rt_x dinp, int w, int b, mdl_lora lora, int lora_k, rt_x dout, rt_x x,
                         size_t N, int in_local) {
    const bool lora_first = mdl_lora_on(lora) && s->lora.drop.p > 0;
    rt_status st = RT_OK;
    if (lora_first) st = mdl_lora_row_bwd(s, lora, lora_k, dinp, false, dout, x, N, in_local, s->C);
    if (st != RT_OK) return st;
    mdl_row_linear_bwd(s->be, dinp, lora_first, mdl_grad(s->params, w), mdl_grad(s->params, b), dout, x,
                       mdl_param(s->params, w), N, in_local, s->C);
    return lora_first ? RT_OK : mdl_lora_row_bwd(s, lora, lora_k, dinp, true, dout, x, N, in_local, s->C);
}

rt_status mdl_attn_fwd(const mdl_sublayers *s, const mdl_attn_params *p, const rt_attn_desc *d, rt_x in,
                       const float *kv, size_t kv_rows, mdl_qkv a, void *probs, rt_x atty, size_t BT) {
    rt_backend *be = s->be;
    const int C = s->C, Il = s->I_local;
    const int k0 = kv ? MDL_LORA_CROSS : 0; /* a block's cross-attention draws its own LoRA dropout */
    if (mdl_attn_fused(p)) {
        mdl_col_linear_fwd(be, a.q, in, mdl_param(s->params, p->q_w), mdl_param(s->params, p->q_b), BT, C, 3 * Il);
        mdl_lora_col_fwd(s, p->qkv_l, k0 + MDL_LORA_Q, a.q, 3 * Il, in, BT, C, 3 * Il);
        const mdl_lora parts[3] = {p->q_l, p->k_l, p->v_l};
        for (int k = 0; k < 3; k++) /* each part's adapter writes its third of every row */
            mdl_lora_col_fwd(s, parts[k], k0 + MDL_LORA_Q + k, rt_x_at(a.q, (size_t)k * Il), 3 * Il, in, BT, C, Il);
    } else {
        const rt_x kvx = kv ? rt_xf(kv) : in; /* cross-attention reads another stack's output */
        if (!kv) kv_rows = BT;
        mdl_col_linear_fwd(be, a.q, in, mdl_param(s->params, p->q_w), NULL, BT, C, Il);
        mdl_col_linear_fwd(be, a.k, kvx, mdl_param(s->params, p->k_w), NULL, kv_rows, C, Il);
        mdl_col_linear_fwd(be, a.v, kvx, mdl_param(s->params, p->v_w), NULL, kv_rows, C, Il);
        mdl_lora_col_fwd(s, p->q_l, k0 + MDL_LORA_Q, a.q, Il, in, BT, C, Il);
        mdl_lora_col_fwd(s, p->k_l, k0 + MDL_LORA_K, a.k, Il, kvx, kv_rows, C, Il);
        mdl_lora_col_fwd(s, p->v_l, k0 + MDL_LORA_V, a.v, Il, kvx, kv_rows, C, Il);
    }
    rt_attention_fwd(be, d, atty, probs, a.q, a.k, a.v);
    rt_status st = mdl_row_linear_fwd(be, s->tp, s->tmp, atty, mdl_param(s->params, p->proj_w),
                                      mdl_param(s->params, p->proj_b), BT, Il, C);
    if (st != RT_OK) return st;
    return mdl_lora_row_fwd(s, p->proj_l, k0 + MDL_LORA_PROJ, s->tmp, atty, BT, Il, C);
}

rt_status mdl_attn_bwd(const mdl_sublayers *s, const mdl_attn_params *p, const rt_attn_desc *d, rt_x dbranch, rt_x in,
                       const float *kv, size_t kv_rows, float *dkv, mdl_qkv a, const void *probs, rt_x atty,
                       float *dbias, rt_x din, size_t BT) {
    rt_backend *be = s->be;
    const int Il = s->I_local;
    const bool fused = mdl_attn_fused(p);
    const int k0 = kv ? MDL_LORA_CROSS : 0;
    rt_status st = row_bwd(s, s->datty, p->proj_w, p->proj_b, p->proj_l, k0 + MDL_LORA_PROJ, dbranch, atty, BT, Il);
    if (st != RT_OK) return st;
    /* fused: views into one (BT, 3 I_local) buffer; apart: three (rows, I_local) buffers */
    const size_t step = fused ? (size_t)Il : s->rows * (size_t)Il;
    const rt_x dq = s->dqkv, dk = rt_x_at(s->dqkv, step), dv = rt_x_at(s->dqkv, 2 * step);
    rt_attention_bwd(be, d, dq, dk, dv, dbias, s->datty, probs, a.q, a.k, a.v);
    const int lk[3] = {k0 + MDL_LORA_Q, k0 + MDL_LORA_K, k0 + MDL_LORA_V};
    if (fused) {
        const int w[1] = {p->q_w}, b[1] = {p->q_b};
        const rt_x dout[1] = {dq};
        const mdl_lora parts[3] = {p->q_l, p->k_l, p->v_l};
        return cols_bwd(s, din, false, true, 1, w, b, &p->qkv_l, lk, parts, dout, in, BT, 3 * Il);
    }
    const int none[3] = {-1, -1, -1};
    const mdl_lora lora[3] = {p->q_l, p->k_l, p->v_l};
    if (!kv) { /* self-attention: q, k and v all read `in` */
        const int w[3] = {p->q_w, p->k_w, p->v_w};
        const rt_x dout[3] = {dq, dk, dv};
        return cols_bwd(s, din, false, true, 3, w, none, lora, lk, NULL, dout, in, BT, Il);
    }
    const int wq[1] = {p->q_w}, wkv[2] = {p->k_w, p->v_w};
    const rt_x dout_q[1] = {dq}, dout_kv[2] = {dk, dv};
    RT_TRY(cols_bwd(s, din, false, true, 1, wq, none, lora, lk, NULL, dout_q, in, BT, Il));
    RT_TRY(cols_bwd(s, rt_xf(dkv), true, false, 2, wkv, none, lora + 1, lk + 1, NULL, dout_kv, rt_xf(kv), kv_rows, Il));
fail:
    return st;
}

void mdl_ffn_up(const mdl_sublayers *s, const mdl_ffn_params *p, rt_x in, rt_x up, rt_x up_lin, rt_x hidden, size_t BT,
                mdl_drop inner) {
    rt_backend *be = s->be;
    const size_t n = BT * (size_t)s->F_local;
    if (p->up_lin_w >= 0 || mdl_lora_on(p->up_l)) { /* up (and up_lin), their adapters, then the activation */
        mdl_col_linear_fwd(be, up, in, mdl_param(s->params, p->up_w), mdl_param(s->params, p->up_b), BT, s->C,
                           s->F_local);
        mdl_lora_col_fwd(s, p->up_l, MDL_LORA_UP, up, s->F_local, in, BT, s->C, s->F_local);
        if (p->up_lin_w < 0) {
            rt_act_fwd(be, s->act, hidden, up, n);
        } else {
            mdl_col_linear_fwd(be, up_lin, in, mdl_param(s->params, p->up_lin_w), NULL, BT, s->C, s->F_local);
            mdl_lora_col_fwd(s, p->up_lin_l, MDL_LORA_UP_LIN, up_lin, s->F_local, in, BT, s->C, s->F_local);
            rt_gated_act_fwd(be, s->act, hidden, up, up_lin, n);
        }
    } else { /* one fused linear: up = in W^T + b, hidden = act(up) */
        rt_linear_fwd(be, hidden, up, in, mdl_param(s->params, p->up_w), mdl_param(s->params, p->up_b), BT, s->C,
                      s->F_local, &s->act);
    }
    /* drawn at the whole (BT, F) matrix's indices, so that every tp size drops the same; in
     * place, and the same call is its own backward */
    if (inner.p > 0)
        rt_dropout_cols(be, hidden, hidden, BT, s->F_local, s->F, s->F_offset, inner.p, inner.seed, inner.stream,
                        inner.step);
}

rt_status mdl_ffn_down(const mdl_sublayers *s, const mdl_ffn_params *p, rt_x hidden, size_t BT) {
    rt_status st = mdl_row_linear_fwd(s->be, s->tp, s->tmp, hidden, mdl_param(s->params, p->down_w),
                                      mdl_param(s->params, p->down_b), BT, s->F_local, s->C);
    if (st != RT_OK) return st;
    return mdl_lora_row_fwd(s, p->down_l, MDL_LORA_DOWN, s->tmp, hidden, BT, s->F_local, s->C);
}

rt_status mdl_ffn_bwd(const mdl_sublayers *s, const mdl_ffn_params *p, rt_x dbranch, rt_x in, rt_x up, rt_x up_lin,
                      rt_x hidden, rt_x din, size_t BT, mdl_drop inner) {
    rt_backend *be = s->be;
    const int Fl = s->F_local;
    const size_t n = BT * (size_t)Fl;
    /* nothing between the down GEMM and act': no gate, dropout or adapter on down */
    const bool fuse_dact = p->up_lin_w < 0 && !(inner.p > 0) && !mdl_lora_on(p->down_l);
    const int lk[2] = {MDL_LORA_UP, MDL_LORA_UP_LIN};
    const mdl_lora lora[2] = {p->up_l, p->up_lin_l};
    rt_status st = row_bwd(s, fuse_dact ? rt_xf(NULL) : s->dhid, p->down_w, p->down_b, p->down_l, MDL_LORA_DOWN,
                           dbranch, hidden, BT, Fl);
    if (st != RT_OK) return st;
    if (fuse_dact) { /* dup = act'(up) * (dbranch W_down), and the up bias's gradient with it */
        rt_linear_dact(be, s->dup, mdl_grad(s->params, p->up_b), dbranch, mdl_param(s->params, p->down_w), up, BT, Fl,
                       s->C, s->act);
        const int w[1] = {p->up_w}, b[1] = {-1};
        const rt_x dout[1] = {s->dup};
        return cols_bwd(s, din, false, true, 1, w, b, lora, lk, NULL, dout, in, BT, Fl);
    }
    if (inner.p > 0)
        rt_dropout_cols(be, s->dhid, s->dhid, BT, Fl, s->F, s->F_offset, inner.p, inner.seed, inner.stream, inner.step);
    if (p->up_lin_w >= 0) {
        rt_gated_act_bwd(be, s->act, s->dup, s->dup_lin, up, up_lin, s->dhid, n);
        const int w[2] = {p->up_w, p->up_lin_w}, b[2] = {p->up_b, -1};
        const rt_x dout[2] = {s->dup, s->dup_lin};
        return cols_bwd(s, din, false, true, 2, w, b, lora, lk, NULL, dout, in, BT, Fl);
    }
    rt_act_bwd(be, s->act, s->dup, up, s->dhid, n);
    const int w[1] = {p->up_w}, b[1] = {p->up_b};
    const rt_x dout[1] = {s->dup};
    return cols_bwd(s, din, false, true, 1, w, b, lora, lk, NULL, dout, in, BT, Fl);
}
