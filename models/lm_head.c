/* The tied language-model head (see lm_head.h). */
#include "models/lm_head.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mdl_lm_head_init(mdl_lm_head *h, rt_backend *be, rt_comm *tp, const mdl_vocab *vocab, int C, int vocab_size,
                      size_t max_rows, const char *model) {
    *h = (mdl_lm_head){.be = be, .tp = tp, .vocab = *vocab, .C = C, .vocab_size = vocab_size, .model = model,
                       .max_rows = max_rows};
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
    h->vocab_mask = rt_arena_take(a, (size_t)h->vocab.local, f);
    h->row_idx = rt_arena_take(a, R, i);
    h->targets = rt_arena_take(a, R, i);
}

void mdl_lm_head_ready(mdl_lm_head *h) { mdl_vocab_logit_mask(h->be, &h->vocab, h->vocab_mask, MDL_LM_MASKED); }

void mdl_lm_head_free(mdl_lm_head *h) {
    if (h->logits) rt_free_device(h->be, h->logits);
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
        return rt_errorf(RT_ERR_CONFIG, "%s: %zu positions reach the language-model head, which has room for %zu", h->model,
                         n_pos, h->max_rows);
    for (size_t i = 0; i < n_pos; i++) {
        if (labels[i] == -100) continue;
        if (labels[i] < 0 || labels[i] >= h->vocab_size)
            return rt_errorf(RT_ERR_FORMAT, "%s: label %d at row %zu position %zu is outside the vocab [0, %d)", h->model,
                             labels[i], i / (size_t)T, i % (size_t)T, h->vocab_size);
        h->h_idx[n] = (int32_t)i;
        h->h_targets[n++] = labels[i];
    }
    *n_out = (int)n;
    return RT_OK;
}

rt_status mdl_lm_head_xent(mdl_lm_head *h, const float *hidden, const float *wte, int n, bool backward,
                           float grad_scale) {
    rt_backend *be = h->be;
    const int C = h->C, Vl = h->vocab.local;
    rt_to_device(be, h->row_idx, h->h_idx, (size_t)n * sizeof(int32_t));
    rt_to_device(be, h->targets, h->h_targets, (size_t)n * sizeof(int32_t));
    rt_gather_rows(be, h->rows, hidden, h->row_idx, n, C);
    rt_status st = mdl_lm_head_logits_rows(h, (size_t)n);
    if (st != RT_OK) return st;
    mdl_col_linear_fwd(be, h->logits, h->rows, wte, NULL, (size_t)n, C, Vl);
    if (h->vocab.padded_here) rt_add_bias(be, h->logits, h->vocab_mask, (size_t)n, Vl);
    st = mdl_vocab_xent(be, h->tp, h->losses, backward ? h->logits : NULL, h->xent_stats, h->logits, h->targets,
                        (size_t)n, Vl, h->vocab.start, grad_scale);
    if (st == RT_OK) rt_to_host(be, h->h_losses, h->losses, (size_t)n * sizeof(float));
    return st;
}

rt_status mdl_lm_head_backward(mdl_lm_head *h, const float *wte, float *dwte, float *dhidden, size_t BT, int n) {
    rt_backend *be = h->be;
    /* the output layer is vocab-parallel: dL/d(rows) is all-reduced over tp */
    rt_status st = mdl_col_linear_bwd(be, h->tp, h->drows, dwte, NULL, h->logits, h->rows, wte, (size_t)n, h->C,
                                      h->vocab.local);
    if (st != RT_OK) return st;
    rt_clear(be, dhidden, BT * (size_t)h->C * sizeof(float));
    rt_scatter_rows_add(be, dhidden, h->drows, h->row_idx, n, h->C);
    return RT_OK;
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
        RT_TRY(rt_backend_alloc(be, n_local * (size_t)tp->size * sizeof(float), "logits (gathered)", (void **)&gathered));
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
