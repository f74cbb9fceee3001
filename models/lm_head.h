/* The tied language-model head over a vocab-parallel embedding, shared by GLM and GPT-2: the
 * hidden rows that reach it (gathered from the body's output), their logits over this rank's
 * vocab columns (padding columns masked), and the vocab-parallel cross-entropy (parallel.h),
 * which never gathers the full logits. The backward gives dL/d(rows), all-reduced over tp,
 * scattered back into dL/d(body output), and the embedding table's gradient.
 *
 * Device buffers for max_rows rows come from the model's arena (mdl_lm_head_layout); the logits
 * are allocated apart and grown to the rows that reach the head, since a batch of long rows
 * would otherwise hold B x T x vocab floats that a cloze step never uses. */
#ifndef MDL_LM_HEAD_H
#define MDL_LM_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/parallel.h"
#include "runtime/rt_arena.h"
#include "runtime/rt_backend.h"
#include "runtime/rt_comm.h"

/* Added to the logits of vocab padding columns: they never win a softmax. */
#define MDL_LM_MASKED (-1e30f)

typedef struct {
    rt_backend *be;
    rt_comm *tp;
    mdl_vocab vocab;            /* the embedding table's shard */
    int C, vocab_size;
    const char *model;          /* in messages: "GLM", "GPT-2" */
    size_t max_rows;
    float *rows, *drows;        /* (max_rows, C) the hidden rows at the head, and their gradient */
    float *logits;              /* (logits_rows, V_local), grown on demand */
    size_t logits_rows;
    float *losses, *xent_stats; /* (max_rows), (3 max_rows) */
    float *vocab_mask;          /* (V_local) 0, or MDL_LM_MASKED on padding columns */
    int32_t *row_idx, *targets; /* (max_rows) the rows' positions in the body's output, their targets */
    int32_t *h_idx, *h_targets; /* host staging of those (max_rows) */
    float *h_losses;            /* host: per-row losses (max_rows) */
} mdl_lm_head;

/* The host side, before the device layout. */
void mdl_lm_head_init(mdl_lm_head *h, rt_backend *be, rt_comm *tp, const mdl_vocab *vocab, int C, int vocab_size,
                      size_t max_rows, const char *model);
/* Takes the device buffers from a (the model's arena pass); after the real pass,
 * mdl_lm_head_ready writes the padding mask. */
void mdl_lm_head_layout(mdl_lm_head *h, rt_arena *a);
void mdl_lm_head_ready(mdl_lm_head *h);
void mdl_lm_head_free(mdl_lm_head *h);

/* Makes h->logits hold n rows. */
rt_status mdl_lm_head_logits_rows(mdl_lm_head *h, size_t n);
/* The labelled positions of labels (n_pos host ints, -100 = none; T per row, for messages) into
 * h_idx / h_targets; RT_ERR_FORMAT naming a label outside the vocab, RT_ERR_CONFIG when n_pos is
 * past max_rows (a head made without rows: GPT-2's classifier). *n_out gets the count. */
rt_status mdl_lm_head_collect(mdl_lm_head *h, const int32_t *labels, size_t n_pos, int T, int *n_out);
/* The n collected rows of hidden (the body's output) through the tied output layer wte and the
 * vocab-parallel cross-entropy: per-row losses in h_losses; with backward, h->logits then holds
 * dL/dlogits scaled by grad_scale. */
rt_status mdl_lm_head_xent(mdl_lm_head *h, const float *hidden, const float *wte, int n, bool backward,
                           float grad_scale);
/* Backward from dL/dlogits of the n rows in h->logits: dwte accumulates, and dhidden (BT rows of
 * the body's output) is cleared and gets dL/d(rows) at their positions. */
rt_status mdl_lm_head_backward(mdl_lm_head *h, const float *wte, float *dwte, float *dhidden, size_t BT, int n);
/* h->logits (n rows of this rank's vocab columns) to the host as (n, vocab_size), gathered over tp. */
rt_status mdl_lm_head_to_host(mdl_lm_head *h, size_t n, float *host_logits);

#endif
