/* The tied language-model head (see lm_head.h). */
#include "models/layers/lm_head.h"

#include "models/layers/heads.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mdl_lm_head_init(mdl_lm_head *h, rt_backend *be, rt_comm *tp, const mdl_vocab *vocab, int C, int vocab_size,
                      size_t max_rows, const char *model) {
    *h = (mdl_lm_head){
        .be = be, .tp = tp, .vocab = *vocab, .C = C, .vocab_size = vocab_size, .model = model, .max_rows = max_rows};
    const size_t row_bytes = (size_t)vocab->local * sizeof(float);
    h->chunk_rows = MDL_LM_HEAD_CHUNK_BYTES / row_bytes > 0 ? MDL_LM_HEAD_CHUNK_BYTES / row_bytes : 1;
    h->h_idx = rt_xmalloc(max_rows * sizeof(int32_t));
    h->h_targets = rt_xmalloc(max_rows * sizeof(int32_t));
    h->h_losses = rt_xmalloc(max_rows * sizeof(float));
}

void mdl_lm_head_layout(mdl_lm_head *h, rt_arena *a) {
    const size_t R = h->max_rows, C = (size_t)h->C, f = sizeof(float), i = sizeof(int32_t);
    h->rows = rt_arena_take(a, R * C, f);
    h->drows = rt_arena_take(a, R * C, f);
    h->losses = rt_arena_take(a, R, f);
    h->xent_stats = rt_arena_take(a, 3 * R, f);
    h->row_weights = rt_arena_take(a, R, f);
    h->vocab_mask = rt_arena_take(a, (size_t)h->vocab.local, f);
    h->row_idx = rt_arena_take(a, R, i);
    h->targets = rt_arena_take(a, R, i);
}

/* The loss's chunk at the activation type now (a precision set since is followed). */
static rt_status lm_head_chunk_buffer(mdl_lm_head *h) {
    const rt_dtype t = rt_act_dtype(h->be);
    const size_t rows = h->max_rows < h->chunk_rows ? h->max_rows : h->chunk_rows;
    if (rows == 0 || (h->xent_logits.p && h->xent_logits.t == t)) return RT_OK;
    if (h->xent_logits.p) rt_free_device(h->be, h->xent_logits.p);
    h->xent_logits = rt_xf(NULL);
    char what[96];
    snprintf(what, sizeof what, "%s output logits (lower the batch or the length)", h->model);
    void *p = NULL;
    rt_status st = rt_backend_alloc(h->be, rows * (size_t)h->vocab.local * rt_x_size(t), what, &p);
    if (st == RT_OK) h->xent_logits = rt_x_of(p, t);
    return st;
}

rt_status mdl_lm_head_ready(mdl_lm_head *h) {
    mdl_vocab_logit_mask(h->be, &h->vocab, h->vocab_mask, MDL_LM_MASKED);
    /* the loss's chunk now, so that the start-up memory line counts it */
    return lm_head_chunk_buffer(h);
}

void mdl_lm_head_free(mdl_lm_head *h) {
    if (h->logits) rt_free_device(h->be, h->logits);
    if (h->xent_logits.p) rt_free_device(h->be, h->xent_logits.p);
    free(h->h_idx);
    free(h->h_targets);
    free(h->h_losses);
    memset(h, 0, sizeof *h);
}

rt_status mdl_lm_head_logits_rows(mdl_lm_head *h, size_t n) {
    if (n <= h->logits_rows) return RT_OK;
    if (h->logits) rt_free_device(h->be, h->logits);
    h->logits = NULL;
    h->logits_rows = 0;
    char what[96];
    snprintf(what, sizeof what, "%s output logits (lower the batch or the length)", h->model);
    rt_status st = rt_backend_alloc(h->be, n * (size_t)h->vocab.local * sizeof(float), what, (void **)&h->logits);
    if (st == RT_OK) h->logits_rows = n;
    return st;
}

rt_status mdl_lm_head_collect(mdl_lm_head *h, const int32_t *labels, size_t n_pos, int T, int *n_out) {
    size_t n = 0;
    if (n_pos > h->max_rows)
        return rt_errorf(RT_ERR_CONFIG, "%s: %zu positions reach the language-model head, which has room for %zu",
                         h->model, n_pos, h->max_rows);
    for (size_t i = 0; i < n_pos; i++) {
        if (labels[i] == -100) continue;
        if (labels[i] < 0 || labels[i] >= h->vocab_size)
            return rt_errorf(RT_ERR_FORMAT, "%s: label %d at row %zu position %zu is outside the vocab [0, %d)",
                             h->model, labels[i], i / (size_t)T, i % (size_t)T, h->vocab_size);
        h->h_idx[n] = (int32_t)i;
        h->h_targets[n++] = labels[i];
    }
    *n_out = (int)n;
    return RT_OK;
}

/* Rows [r, r + k) of a pass: their logits, the cross-entropy, and with grad their gradients. */
static rt_status lm_head_chunk(mdl_lm_head *h, const float *wte, size_t r, size_t k, const mdl_lm_head_grad *grad) {
    rt_backend *be = h->be;
    const int C = h->C, Vl = h->vocab.local;
    const float *rows = h->rows + r * C;
    const rt_x logits = h->xent_logits; /* then dL/dlogits over them */
    mdl_col_linear_fwd(be, logits, rt_xf(rows), wte, NULL, k, C, Vl);
    rt_status st = mdl_vocab_xent(be, h->tp, h->losses + r, grad ? logits : rt_xf(NULL), h->xent_stats + 3 * r, logits,
                                  h->vocab.padded_here ? h->vocab_mask : NULL, h->targets + r, k, Vl, h->vocab.start,
                                  grad ? grad->grad_scale : 0.0f);
    if (st != RT_OK || !grad) return st;
    if (grad->row_weights) rt_scale_rows(be, logits, grad->row_weights + r, k, Vl);
    /* the output layer's backward without its collective (the self comm): dL/d(rows) is
     * all-reduced once, after the last chunk */
    return mdl_col_linear_bwd(be, rt_comm_self(), h->drows + r * C, grad->dwte, NULL, logits, rt_xf(rows), wte, k, C,
                              Vl);
}

rt_status mdl_lm_head_xent(mdl_lm_head *h, const float *hidden, const float *wte, int n, const mdl_lm_head_grad *grad) {
    rt_status st = RT_OK;
    rt_backend *be = h->be;
    const size_t N = (size_t)n, chunk = h->chunk_rows < N ? h->chunk_rows : N;
    if (N == 0) return RT_OK; /* nothing labelled */
    rt_to_device(be, h->row_idx, h->h_idx, N * sizeof(int32_t));
    rt_to_device(be, h->targets, h->h_targets, N * sizeof(int32_t));
    rt_gather_rows(be, h->rows, hidden, h->row_idx, n, h->C);
    RT_TRY(lm_head_chunk_buffer(h));
    for (size_t r = 0; r < N; r += chunk) RT_TRY(lm_head_chunk(h, wte, r, N - r < chunk ? N - r : chunk, grad));
    if (grad && h->tp->size > 1) RT_TRY(h->tp->ops->all_reduce(h->tp->ctx, h->drows, N * (size_t)h->C, RT_REDUCE_SUM));
fail:
    return st;
}

double mdl_lm_head_losses(mdl_lm_head *h, int n, const mdl_pass *pass) {
    return n > 0 ? mdl_loss_sum(h->be, h->losses, (size_t)n, h->h_losses, pass) : 0.0;
}

void mdl_lm_head_target_stats(mdl_lm_head *h, int n, float *row_max, float *target_logit) {
    const size_t N = (size_t)n, chunk = h->chunk_rows < N ? h->chunk_rows : N;
    for (size_t r = 0; r < N; r += chunk) { /* mdl_vocab_xent's (3, k) of each chunk: maxima, target logits, sums */
        const size_t k = N - r < chunk ? N - r : chunk;
        rt_to_host(h->be, row_max + r, h->xent_stats + 3 * r, k * sizeof(float));
        rt_to_host(h->be, target_logit + r, h->xent_stats + 3 * r + k, k * sizeof(float));
    }
}

void mdl_lm_head_backward(mdl_lm_head *h, float *dhidden, size_t BT, int n) {
    rt_clear(h->be, dhidden, BT * (size_t)h->C * sizeof(float));
    rt_scatter_rows_add(h->be, dhidden, rt_xf(h->drows), h->row_idx, n, h->C);
}

rt_status mdl_lm_head_to_host(mdl_lm_head *h, size_t n, float *host_logits) {
    rt_status st = RT_OK;
    rt_backend *be = h->be;
    rt_comm *tp = h->tp;
    const int Vl = h->vocab.local, V = h->vocab_size;
    const size_t n_local = n * (size_t)Vl;
    float *gathered = NULL, *host = NULL;
    const float *all = h->logits;
    if (tp->size > 1) {
        RT_TRY(
            rt_backend_alloc(be, n_local * (size_t)tp->size * sizeof(float), "logits (gathered)", (void **)&gathered));
        RT_TRY(tp->ops->all_gather(tp->ctx, gathered, h->logits, n_local));
        all = gathered;
    }
    host = rt_xmalloc(n_local * (size_t)tp->size * sizeof(float));
    rt_to_host(be, host, all, n_local * (size_t)tp->size * sizeof(float));
    for (int r = 0; r < tp->size; r++) /* rank-major (tp, n, Vl) -> (n, V), without the padding columns */
        for (size_t t = 0; t < n; t++)
            for (int j = 0; j < Vl; j++) {
                const int v = r * Vl + j;
                if (v < V) host_logits[t * (size_t)V + (size_t)v] = host[((size_t)r * n + t) * Vl + (size_t)j];
            }
fail:
    if (gathered) rt_free_device(be, gathered);
    free(host);
    return st;
}
