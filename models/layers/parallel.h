/* Megatron-style tensor-parallel layers (Shoeybi et al., 2019), written over the backend and
 * the comm vtable so that every model gets tensor parallelism by using them. Weights are
 * [out, in]. With a one-rank comm the collectives are no-ops and these are plain linears.
 *
 *   column-parallel: Y_r = X W_r^T + b_r          f: identity forward, all-reduce dX backward
 *   row-parallel:    Y = sum_r X_r W_r^T, then + b g: all-reduce forward, identity backward
 */
#ifndef MDL_PARALLEL_H
#define MDL_PARALLEL_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_params.h"

/* Activations are typed handles (rt_x), except where a collective reduces them (fp32 floats). */

/* LoRA's adapters (models/layers/lora.h) on a layer split by rule `base`: A (r, in) and B (out, r)
 * follow the layer's split so that no full-width activation crosses ranks.
 *   column-parallel (RT_TP_COL, RT_TP_QKV): A whole on every rank (RT_TP_NONE), B split with
 *     the layer's output rows (base's rule); a rank's u = dY_r B_r is partial and is all-reduced
 *     (tokens x r floats) before dA.
 *   row-parallel (RT_TP_ROW): A split with the layer's input columns (RT_TP_ROW), B whole; the
 *     rank's t = X_r A_r^T is partial and is all-reduced (tokens x r) before B.
 *   neither (RT_TP_NONE): both whole. */
rt_tp_rule mdl_lora_a_rule(rt_tp_rule base);
rt_tp_rule mdl_lora_b_rule(rt_tp_rule base);

/* out (N, out_local) = inp (N, in) w (out_local, in)^T + b; b may be NULL. */
void mdl_col_linear_fwd(rt_backend *be, rt_x out, rt_x inp, const float *w, const float *b, size_t N, int in,
                        int out_local);
/* Accumulates dw, db (db may be NULL); writes dinp (N, in), all-reduced over tp. */
rt_status mdl_col_linear_bwd(rt_backend *be, rt_comm *tp, float *dinp, float *dw, float *db, rt_x dout, rt_x inp,
                             const float *w, size_t N, int in, int out_local);
/* out (N, out) = all_reduce(inp (N, in_local) w (out, in_local)^T) + b; the bias is added once,
 * after the reduce. out is an fp32 handle under tp (the all-reduce sums floats); at tp = 1 it may
 * be a 16-bit one, which the matmul writes at the compute precision. */
rt_status mdl_row_linear_fwd(rt_backend *be, rt_comm *tp, rt_x out, rt_x inp, const float *w, const float *b, size_t N,
                             int in_local, int out_features);
/* Accumulates dw, db; writes dinp (N, in_local), or adds to it (accumulate), unless its buffer
 * is NULL. */
void mdl_row_linear_bwd(rt_backend *be, rt_x dinp, bool accumulate, float *dw, float *db, rt_x dout, rt_x inp,
                        const float *w, size_t N, int in_local, int out_features);
/* This rank's shard of a vocab-parallel table: the vocab padded to `padded` rows over all ranks
 * (ckpt_tp_padded_vocab), `local` of them from row `start` here, of which the ones from
 * `first_pad` on are padding (padded_here when there is any). */
typedef struct {
    int padded, local, start, first_pad;
    bool padded_here;
} mdl_vocab;

mdl_vocab mdl_vocab_shard(int vocab_size, const rt_comm *tp);
/* Zeroes the padding rows of this rank's (local, C) table: never indexed by a real id, they stay
 * out of every result. */
void mdl_vocab_clear_padding(rt_backend *be, const mdl_vocab *v, float *table, int C);
/* The additive logit mask (local floats, backend): 0, or `masked` on padding columns, which then
 * never win a softmax. */
void mdl_vocab_logit_mask(rt_backend *be, const mdl_vocab *v, float *mask, float masked);

/* Vocab-parallel embedding: this rank holds rows [vocab_start, vocab_start + V_local);
 * out (N, C) = all_reduce(partial lookup). accumulate adds into out (before the reduce only
 * the local part is added, so it must be 0 on all but one rank when tp > 1: callers add
 * positions after the reduce). */
rt_status mdl_vocab_embedding_fwd(rt_backend *be, rt_comm *tp, float *out, const int32_t *ids, const float *table,
                                  size_t N, int C, int vocab_start, int V_local);

/* Vocab-parallel cross-entropy (Megatron): logits (N, V_local) are this rank's vocab columns
 * [vocab_start, vocab_start + V_local); targets are global ids or -100. Writes losses (N) and
 * dlogits (N, V_local) = (softmax - onehot) * grad_scale, like softmax_xent over the full
 * vocab, from three all-reduces of N floats each (row max, target logit, sum of exps), never
 * the logits. stats is (3 * N) floats of backend scratch. dlogits may alias logits. Columns
 * that are vocab padding are masked by col_mask (V_local: MDL_LM_MASKED there, else 0; NULL: none). */
rt_status mdl_vocab_xent(rt_backend *be, rt_comm *tp, float *losses, rt_x dlogits, float *stats, rt_x logits,
                         const float *col_mask, const int32_t *targets, size_t N, int V_local, int vocab_start,
                         float grad_scale);

#endif
