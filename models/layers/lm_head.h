/* The tied language-model head over a vocab-parallel embedding, shared by GLM and GPT-2: the
 * hidden rows that reach it (gathered from the body's output), their logits over this rank's
 * vocab columns (padding columns masked), and the vocab-parallel cross-entropy (parallel.h),
 * which never gathers the full logits. The backward gives dL/d(rows), all-reduced over tp,
 * scattered back into dL/d(body output), and the embedding table's gradient.
 *
 * The loss runs over chunks of at most chunk_rows rows (chunk_rows x V_local floats, about
 * MDL_LM_HEAD_CHUNK_BYTES), as fused linear cross-entropy kernels do: a chunk's logits, its
 * cross-entropy, and with a gradient at once its dL/dlogits through the output layer (the rows'
 * gradient and the table's), so the B x T x vocab logits are never held whole. A pass that
 * fits one chunk computes what one pass over all rows computes, bit for bit. The chunk is held at
 * the activation type (xent_logits: 2-byte values at bf16 and fp16): the matmul writes it, the
 * cross-entropy reads it with the padding columns masked as it reads them and writes dL/dlogits
 * over it, and the output layer's backward reads that; the same numbers as fp32 storage, at a
 * quarter of the memory traffic (no rounding, masking or conversion passes).
 *
 * Device buffers for max_rows rows come from the model's arena (mdl_lm_head_layout); the logits
 * are allocated apart and grown to the rows asked for (a chunk, or every row for callers that
 * want the logits themselves). */
#ifndef MDL_LM_HEAD_H
#define MDL_LM_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/layers/pass.h"
#include "models/layers/parallel.h"
#include "runtime/base/rt_arena.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"

/* Added to the logits of vocab padding columns: they never win a softmax. */
#define MDL_LM_MASKED (-1e30f)
/* The logits one chunk of the loss may hold: 64 MiB is 333 rows of GPT-2's vocab. */
#define MDL_LM_HEAD_CHUNK_BYTES ((size_t)64 << 20)

typedef struct {
    rt_backend *be;
    rt_comm *tp;
    mdl_vocab vocab; /* the embedding table's shard */
    int C, vocab_size;
    const char *model; /* in messages: "GLM", "GPT-2" */
    size_t max_rows;
    float *rows, *drows; /* (max_rows, C) the hidden rows at the head, and their gradient */
    float *logits;       /* (logits_rows, V_local) fp32, for callers that want the logits; grown on demand */
    rt_x xent_logits;    /* (min(max_rows, chunk_rows), V_local) at the activation type: the loss's chunk */
    size_t logits_rows;
    size_t chunk_rows;          /* rows per chunk of the loss (mdl_lm_head_init sets it; tests may lower it) */
    float *losses, *xent_stats; /* (max_rows), (3 max_rows): a chunk from row r keeps its (3, rows) at 3 r */
    float *row_weights;         /* (max_rows) mdl_lm_head_grad's per-row factors, staged by the caller */
    float *vocab_mask;          /* (V_local) 0, or MDL_LM_MASKED on padding columns */
    int32_t *row_idx, *targets; /* (max_rows) the rows' positions in the body's output, their targets */
    int32_t *h_idx, *h_targets; /* host staging of those (max_rows) */
    float *h_losses;            /* host: per-row losses (max_rows) */
} mdl_lm_head;

/* The host side, before the device layout. */
void mdl_lm_head_init(mdl_lm_head *h, rt_backend *be, rt_comm *tp, const mdl_vocab *vocab, int C, int vocab_size,
                      size_t max_rows, const char *model);
/* Takes the device buffers from a (the model's arena pass); after the real pass,
 * mdl_lm_head_ready writes the padding mask and allocates the loss's chunk (xent_logits). */
void mdl_lm_head_layout(mdl_lm_head *h, rt_arena *a);
rt_status mdl_lm_head_ready(mdl_lm_head *h);
void mdl_lm_head_free(mdl_lm_head *h);

/* Makes h->logits hold n rows. */
rt_status mdl_lm_head_logits_rows(mdl_lm_head *h, size_t n);
/* The labelled positions of labels (n_pos host ints, -100 = none; T per row, for messages) into
 * h_idx / h_targets; RT_ERR_FORMAT naming a label outside the vocab, RT_ERR_CONFIG when n_pos is
 * past max_rows (a head made without rows: GPT-2's classifier). *n_out gets the count. */
rt_status mdl_lm_head_collect(mdl_lm_head *h, const int32_t *labels, size_t n_pos, int T, int *n_out);
/* What a pass with a gradient computes besides the losses: dL/dlogits = (softmax - onehot) x
 * grad_scale, times row i's row_weights[i] when row_weights (device, n) is given, carried
 * through the output layer into dwte (accumulated) and the rows' gradient (h->drows, all-reduced
 * over tp). */
typedef struct {
    float *dwte;
    float grad_scale;
    const float *row_weights;
} mdl_lm_head_grad;

/* The n collected rows of hidden (the body's output) through the tied output layer wte and the
 * vocab-parallel cross-entropy, chunk by chunk: per-row losses on the device (mdl_lm_head_losses
 * reads them), and with grad its gradients (then mdl_lm_head_backward hands them to the body). */
rt_status mdl_lm_head_xent(mdl_lm_head *h, const float *hidden, const float *wte, int n, const mdl_lm_head_grad *grad);
/* The last mdl_lm_head_xent's n per-row losses summed in row order (mdl_loss_sum: read back into
 * h_losses, or with pass->loss_sink added on the device and 0; pass NULL: read back). A training
 * step calls it once its backward is queued. */
double mdl_lm_head_losses(mdl_lm_head *h, int n, const mdl_pass *pass);
/* After the last pass over n rows: each row's largest logit and its target's logit, to the host. */
void mdl_lm_head_target_stats(mdl_lm_head *h, int n, float *row_max, float *target_logit);
/* dhidden (BT rows of the body's output) cleared, and the last pass's dL/d(rows) added at their
 * positions. */
void mdl_lm_head_backward(mdl_lm_head *h, float *dhidden, size_t BT, int n);
/* h->logits (n rows of this rank's vocab columns) to the host as (n, vocab_size), gathered over tp. */
rt_status mdl_lm_head_to_host(mdl_lm_head *h, size_t n, float *host_logits);

#endif
