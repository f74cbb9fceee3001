/* Megatron column/row-parallel linears and the vocab-parallel embedding (see parallel.h).
 * Every collective here is on backend memory (activations, their gradients, the xent's
 * per-row stats), so tp is the grid's device comm: NCCL on CUDA (rt_grid.h). */
#include "models/layers/parallel.h"

#include <math.h>
#include <stdlib.h>

#include "checkpoints/ckpt_tp.h"

void mdl_col_linear_fwd(rt_backend *be, rt_x out, rt_x inp, const float *w, const float *b, size_t N, int in,
                        int out_local) {
    rt_linear_fwd(be, rt_xf(NULL), out, inp, w, b, N, in, out_local, NULL);
}

/* Shared by both layer kinds: the local weight, bias and input gradients of Y = X W^T + b. */
static void mdl_linear_bwd_local(rt_backend *be, rt_x dinp, bool accumulate, float *dw, float *db, rt_x dout, rt_x inp,
                                 const float *w, size_t N, int in, int out) {
    /* dW (out, in) += dY^T (out, N) X (N, in), db += column sums of dY */
    rt_linear_wgrad(be, dw, db, dout, inp, N, in, out);
    /* dX (N, in) = dY (N, out) W (out, in), or += */
    if (dinp.p)
        rt_gemm(be, false, false, (int)N, in, out, 1.0f, dout, out, 0, rt_xf(w), in, 0, accumulate ? 1.0f : 0.0f, dinp,
                in, 0, 1);
}

rt_status mdl_col_linear_bwd(rt_backend *be, rt_comm *tp, float *dinp, float *dw, float *db, rt_x dout, rt_x inp,
                             const float *w, size_t N, int in, int out_local) {
    mdl_linear_bwd_local(be, rt_xf(dinp), false, dw, db, dout, inp, w, N, in, out_local);
    if (tp->size > 1 && dinp) return tp->ops->all_reduce(tp->ctx, dinp, N * (size_t)in, RT_REDUCE_SUM);
    return RT_OK;
}

rt_status mdl_row_linear_fwd(rt_backend *be, rt_comm *tp, rt_x out, rt_x inp, const float *w, const float *b, size_t N,
                             int in_local, int out_features) {
    if (tp->size == 1) { /* the bias can ride on the matmul; with tp it follows the all-reduce */
        rt_linear_fwd(be, rt_xf(NULL), out, inp, w, b, N, in_local, out_features, NULL);
        return RT_OK;
    }
    float *sum = rt_x_floats(out, "a row-parallel linear's output under tp");
    rt_gemm(be, false, true, (int)N, out_features, in_local, 1.0f, inp, in_local, 0, rt_xf(w), in_local, 0, 0.0f, out,
            out_features, 0, 1);
    rt_status st = tp->ops->all_reduce(tp->ctx, sum, N * (size_t)out_features, RT_REDUCE_SUM);
    if (st != RT_OK) return st;
    if (b) rt_add_bias(be, sum, b, N, out_features);
    return RT_OK;
}

void mdl_row_linear_bwd(rt_backend *be, rt_x dinp, bool accumulate, float *dw, float *db, rt_x dout, rt_x inp,
                        const float *w, size_t N, int in_local, int out_features) {
    mdl_linear_bwd_local(be, dinp, accumulate, dw, db, dout, inp, w, N, in_local, out_features);
}

rt_status mdl_vocab_embedding_fwd(rt_backend *be, rt_comm *tp, float *out, const int32_t *ids, const float *table,
                                  size_t N, int C, int vocab_start, int V_local) {
    rt_embedding_fwd(be, out, ids, table, N, C, vocab_start, V_local, false);
    if (tp->size > 1) return tp->ops->all_reduce(tp->ctx, out, N * (size_t)C, RT_REDUCE_SUM);
    return RT_OK;
}

rt_status mdl_vocab_xent(rt_backend *be, rt_comm *tp, float *losses, rt_x dlogits, float *stats, rt_x logits,
                         const float *col_mask, const int32_t *targets, size_t N, int V_local, int vocab_start,
                         float grad_scale) {
    rt_status st = RT_OK;
    const rt_x none = rt_xf(NULL);
    rt_xent_vocab(be, 0, stats, NULL, none, logits, col_mask, targets, N, V_local, vocab_start, grad_scale);
    if (tp->size > 1) {
        RT_TRY(tp->ops->all_reduce(tp->ctx, stats, N, RT_REDUCE_MAX));
        RT_TRY(tp->ops->all_reduce(tp->ctx, stats + N, N, RT_REDUCE_SUM));
    }
    rt_xent_vocab(be, 1, stats, NULL, none, logits, col_mask, targets, N, V_local, vocab_start, grad_scale);
    if (tp->size > 1) RT_TRY(tp->ops->all_reduce(tp->ctx, stats + 2 * N, N, RT_REDUCE_SUM));
    rt_xent_vocab(be, 2, stats, losses, dlogits, logits, col_mask, targets, N, V_local, vocab_start, grad_scale);
fail:
    return st;
}

mdl_vocab mdl_vocab_shard(int vocab_size, const rt_comm *tp) {
    mdl_vocab v = {.padded = (int)ckpt_tp_padded_vocab(vocab_size, tp->size)};
    v.local = v.padded / tp->size;
    v.start = v.local * tp->rank;
    v.first_pad = vocab_size <= v.start ? 0 : vocab_size - v.start < v.local ? vocab_size - v.start : v.local;
    v.padded_here = v.first_pad < v.local;
    return v;
}

void mdl_vocab_clear_padding(rt_backend *be, const mdl_vocab *v, float *table, int C) {
    if (v->padded_here)
        rt_clear(be, table + (size_t)v->first_pad * C, (size_t)(v->local - v->first_pad) * C * sizeof(float));
}

void mdl_vocab_logit_mask(rt_backend *be, const mdl_vocab *v, float *mask, float masked) {
    float *h = rt_xcalloc((size_t)v->local, sizeof(float));
    for (int j = v->first_pad; j < v->local; j++) h[j] = masked;
    rt_to_device(be, mask, h, (size_t)v->local * sizeof(float));
    free(h);
}

rt_tp_rule mdl_lora_a_rule(rt_tp_rule base) { return base == RT_TP_ROW ? RT_TP_ROW : RT_TP_NONE; }

rt_tp_rule mdl_lora_b_rule(rt_tp_rule base) { return base == RT_TP_COL || base == RT_TP_QKV ? base : RT_TP_NONE; }
