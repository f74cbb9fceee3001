/* Tensor-parallel sharding rules (Megatron's layout, as its tools/checkpoint and
 * FasterTransformer's converters split HF weights): from a full tensor, the shard one tp rank
 * holds, and back. One place knows the rules, so HF loading, HF export and checkpoint
 * resharding (tp=2 saved, tp=4 resumed) agree by construction.
 *
 * Weights are [out, in] (row-major); a 1-D tensor (a bias) is [out].
 *   RT_TP_NONE   replicated: the shard is the full tensor.
 *   RT_TP_COL    dim 0 split in size equal blocks (a column-parallel weight and its bias).
 *   RT_TP_ROW    dim 1 split (a row-parallel weight; its bias is replicated, rule NONE).
 *   RT_TP_VOCAB  dim 0 (vocab rows) padded with zero rows to ckpt_tp_padded_vocab(), then
 *                split; the inverse drops the padding.
 *   RT_TP_QKV    dim 0 is [q; k; v], each n_head*hs rows; rank r takes heads
 *                [r*nh/tp, (r+1)*nh/tp) of q, of k and of v, laid out [q_r; k_r; v_r].
 *                A contiguous third of [q; k; v] would mix q of some heads with k of others.
 */
#ifndef CKPT_TP_H
#define CKPT_TP_H

#include <stdint.h>

#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_params.h"

/* Megatron's --make-vocab-size-divisible-by default: the padded vocab is a multiple of this
 * times tp, so each rank's shard is a multiple of 128 rows (GEMM-friendly). */
#define CKPT_TP_VOCAB_DIVISOR 128

/* round_up(vocab, CKPT_TP_VOCAB_DIVISOR * tp_size). */
int64_t ckpt_tp_padded_vocab(int64_t vocab, int tp_size);

/* One tensor's split: its full (unpadded, e.g. HF's) shape, its rule and this rank. */
typedef struct {
    rt_tp_rule rule;
    int ndim;                        /* 1 or 2 */
    int64_t full[RT_PARAM_MAX_DIMS]; /* full shape, vocab unpadded */
    int n_head;                      /* RT_TP_QKV: heads in each of q, k, v; 0 = skip the check */
    int rank, size;                  /* tp rank and size */
} ckpt_tp_desc;

/* The shard's shape; RT_ERR_CONFIG (naming `what`) when the rule does not divide the tensor. */
rt_status ckpt_tp_local_shape(const ckpt_tp_desc *d, const char *what, int64_t *local);
/* local (the shard's numel) = this rank's shard of full; padding rows are written as 0. */
void ckpt_tp_shard(const ckpt_tp_desc *d, float *local, const float *full);
/* The inverse: writes this rank's part of full from its shard (padding rows dropped). */
void ckpt_tp_unshard(const ckpt_tp_desc *d, float *full, const float *local);
/* full from every rank's shard, back to back in rank order (what all_gather returns);
 * d->rank is ignored. */
void ckpt_tp_gather(const ckpt_tp_desc *d, float *full, const float *shards);

/* The desc of a parameter from its spec (which holds the LOCAL shape) at tp rank/size: the
 * dims the rule splits are multiplied back by size, and an RT_TP_VOCAB table gets vocab_rows
 * rows (the real vocab, unpadded). n_head stays 0: the model checked the heads split. */
void ckpt_tp_param_desc(const rt_param_spec *s, int64_t vocab_rows, int rank, int size, ckpt_tp_desc *d);
/* The same with the spec's own vocab_rows, for files that store full tensors (training
 * checkpoints, the stages' gathering); RT_ERR_CONFIG naming what when a vocab-parallel spec
 * lacks them. */
rt_status ckpt_tp_spec_desc(const char *what, const rt_param_spec *s, const rt_comm *tp, ckpt_tp_desc *d);
/* Elements of the full tensor (vocab unpadded). */
size_t ckpt_tp_full_numel(const ckpt_tp_desc *d);

/* Buffers ckpt_tp_gather_param reuses from one parameter to the next. */
typedef struct {
    float *dev; /* backend memory: every rank's shard, all-gathered */
    size_t dev_cap;
    float *host; /* the same on the host (tp rank 0) */
    size_t host_cap;
} ckpt_tp_scratch;

/* Collective over tp (d->size == tp->size, d->rank == tp->rank): every rank passes its shard
 * `local` (backend memory, local_n floats); tp rank 0 gets the full tensor in `full` (host,
 * ckpt_tp_full_numel floats); other ranks may pass full = NULL. A replicated tensor moves no
 * data: rank 0's copy is the full tensor. HF export and training checkpoints both use it. */
rt_status ckpt_tp_gather_param(rt_backend *be, rt_comm *tp, const ckpt_tp_desc *d, const float *local, size_t local_n,
                               ckpt_tp_scratch *scr, float *full);
void ckpt_tp_scratch_free(rt_backend *be, ckpt_tp_scratch *scr);

/* After tp rank 0 wrote a file (with status `written` there), every rank of the group learns
 * the outcome: rank 0 keeps its own status and message; the others fail with `what` naming
 * path when rank 0 failed. Collective over tp; a one-rank group returns `written`. */
rt_status ckpt_tp_agree(rt_comm *tp, rt_status written, const char *path, const char *what);

#endif
