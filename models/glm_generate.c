/* Greedy generation for GLM with a key/value cache (see glm.h). The contexts run through the
 * model once; each block's keys and values of them fill its cache; then every step runs one
 * new token per row (its position the blank's, its block position 1, 2, ...) through the
 * blocks against the caches. Cache slots are [row][0 .. S) for the padded contexts and
 * [row][S + k] for generated token k, so every row writes the same slot each step; a row's
 * padding slots are masked out. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/glm_internal.h"
#include "models/parallel.h"

struct glm_decoder {
    glm_model *m;
    int max_B, max_S, max_new;
    void *block;            /* backend memory: caches, mask, slot indices */
    float **k, **v;         /* (L) each (max_B, Tmax, C_local) */
    float *key_mask;        /* (max_B, Tmax) */
    int32_t *at_idx;        /* (max_B) */
    float *h_mask, *h_logits;
    int32_t *h_ids, *h_pos, *h_bpos, *h_at;
};

rt_status glm_decoder_init(glm_model *m, int max_B, int max_S, int max_new, glm_decoder **out) {
    rt_status st = RT_OK;
    *out = NULL;
    if (max_B < 1 || max_B > m->max_B || max_S < 1 || max_S > m->max_T || max_new < 1)
        return rt_errorf(RT_ERR_CONFIG, "GLM decoder: %d rows of %d context tokens and %d new ones (the model holds %d x %d)",
                         max_B, max_S, max_new, m->max_B, m->max_T);
    glm_decoder *d = rt_xcalloc(1, sizeof *d);
    const int L = m->cfg.num_layers, Tmax = max_S + max_new, Cl = m->blocks.C_local;
    d->m = m;
    d->max_B = max_B;
    d->max_S = max_S;
    d->max_new = max_new;
    const size_t cache = (size_t)max_B * Tmax * Cl;
    size_t bytes = 2 * (size_t)L * cache * sizeof(float) + (size_t)max_B * Tmax * sizeof(float) + (size_t)max_B * 4 + 64;
    RT_TRY(rt_backend_alloc(m->be, bytes, "GLM generation caches (lower the batch or the lengths)", &d->block));
    d->k = rt_xcalloc((size_t)L, sizeof *d->k);
    d->v = rt_xcalloc((size_t)L, sizeof *d->v);
    float *f = d->block;
    for (int l = 0; l < L; l++) {
        d->k[l] = f;
        f += cache;
        d->v[l] = f;
        f += cache;
    }
    d->key_mask = f;
    f += (size_t)max_B * Tmax;
    d->at_idx = (int32_t *)f;
    d->h_mask = rt_xmalloc((size_t)max_B * Tmax * sizeof(float));
    d->h_logits = rt_xmalloc((size_t)max_B * m->cfg.vocab_size * sizeof(float));
    d->h_ids = rt_xmalloc((size_t)max_B * sizeof(int32_t));
    d->h_pos = rt_xmalloc((size_t)max_B * sizeof(int32_t));
    d->h_bpos = rt_xmalloc((size_t)max_B * sizeof(int32_t));
    d->h_at = rt_xmalloc((size_t)max_B * max_S * sizeof(int32_t));
    *out = d;
    return RT_OK;
fail:
    glm_decoder_free(d);
    return st;
}

void glm_decoder_free(glm_decoder *d) {
    if (!d) return;
    if (d->block) d->m->be->ops->free(d->m->be->ctx, d->block);
    free(d->k);
    free(d->v);
    free(d->h_mask);
    free(d->h_logits);
    free(d->h_ids);
    free(d->h_pos);
    free(d->h_bpos);
    free(d->h_at);
    free(d);
}

/* The contexts through the model, and each block's keys and values of them into the caches. */
static rt_status glm_prefill(glm_decoder *d, const glm_inputs *ctx, int Tmax) {
    rt_status st = RT_OK;
    glm_model *m = d->m;
    rt_backend *be = m->be;
    const int B = ctx->B, S = ctx->T, Cl = m->blocks.C_local;
    const size_t n = (size_t)B * S;
    mdl_pass pass = {0};
    RT_TRY(glm_upload(m, ctx));
    RT_TRY(glm_forward_body(m, B, S, &pass));
    for (int l = 0; l < m->cfg.num_layers; l++) {
        be->ops->zero(be->ctx, d->k[l], (size_t)B * Tmax * Cl * sizeof(float));
        be->ops->zero(be->ctx, d->v[l], (size_t)B * Tmax * Cl * sizeof(float));
    }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < S; t++) d->h_at[b * S + t] = b * Tmax + t;
    be->ops->to_device(be->ctx, m->row_idx, d->h_at, n * sizeof(int32_t));
    /* rows and drows (BT x C floats each) hold the (B*S, C_local) keys and values */
    for (int l = 0; l < m->cfg.num_layers; l++) {
        mdl_preln_kv(&m->blocks, l, mdl_preln_ln1(&m->blocks, l), n, m->rows, m->drows);
        be->ops->scatter_rows_add(be->ctx, d->k[l], m->rows, m->row_idx, (int)n, Cl);
        be->ops->scatter_rows_add(be->ctx, d->v[l], m->drows, m->row_idx, (int)n, Cl);
    }
fail:
    return st;
}

static int glm_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) best = x[i] > x[best] ? i : best;
    return best;
}

rt_status glm_greedy(glm_decoder *d, const glm_inputs *ctx, const int32_t *mask_pos, int32_t sop, int32_t eop,
                     int max_new, int32_t *out_ids, int *out_len, float *step_logits) {
    rt_status st = RT_OK;
    glm_model *m = d->m;
    rt_backend *be = m->be;
    const rt_backend_ops *ops = be->ops;
    const int B = ctx->B, S = ctx->T, C = m->C, V = m->cfg.vocab_size, Tmax = S + max_new;
    bool *done = NULL;
    if (B > d->max_B || S > d->max_S || max_new > d->max_new)
        return rt_errorf(RT_ERR_CONFIG, "GLM decoder: %d x %d + %d exceeds the %d x %d + %d it was sized for", B, S,
                         max_new, d->max_B, d->max_S, d->max_new);
    RT_TRY(glm_prefill(d, ctx, Tmax));
    done = rt_xcalloc((size_t)B, sizeof *done);
    for (int b = 0; b < B; b++) {
        out_len[b] = 0;
        for (int j = 0; j < Tmax; j++) d->h_mask[b * Tmax + j] = j < ctx->sep[b] ? 0.0f : -INFINITY;
    }
    for (int k = 0; k < max_new; k++) {
        bool all = true;
        for (int b = 0; b < B; b++) all &= done[b];
        if (all) break;
        const int at = S + k;
        for (int b = 0; b < B; b++) {
            d->h_ids[b] = k == 0 ? sop : out_ids[b * max_new + k - 1];
            if (done[b]) d->h_ids[b] = eop; /* a finished row runs along; its output is ignored */
            d->h_pos[b] = mask_pos[b];
            d->h_bpos[b] = k + 1;
            d->h_at[b] = b * Tmax + at;
            d->h_mask[b * Tmax + at] = 0.0f;
        }
        ops->to_device(be->ctx, m->ids, d->h_ids, (size_t)B * sizeof(int32_t));
        ops->to_device(be->ctx, m->pos, d->h_pos, (size_t)B * sizeof(int32_t));
        ops->to_device(be->ctx, m->bpos, d->h_bpos, (size_t)B * sizeof(int32_t));
        ops->to_device(be->ctx, d->at_idx, d->h_at, (size_t)B * sizeof(int32_t));
        ops->to_device(be->ctx, d->key_mask, d->h_mask, (size_t)B * Tmax * sizeof(float));
        /* the new tokens' embeddings, through the blocks, the final LayerNorm and the output */
        float *x = m->rows;
        RT_TRY(mdl_vocab_embedding_fwd(be, m->tp, x, m->ids, P(m->wte), (size_t)B, C, m->vocab_start, m->V_local));
        ops->embedding_fwd(be->ctx, x, m->pos, P(m->wpe), (size_t)B, C, 0, m->P, true);
        if (m->wbpe >= 0) ops->embedding_fwd(be->ctx, x, m->bpos, P(m->wbpe), (size_t)B, C, 0, m->P, true);
        RT_TRY(mdl_preln_decode(&m->blocks, B, x, d->k, d->v, Tmax, d->at_idx, d->key_mask));
        mdl_preln_final_norm(&m->blocks, m->blocks.out, m->blocks.out_mean, m->blocks.out_rstd, x, (size_t)B);
        mdl_col_linear_fwd(be, m->logits, m->blocks.out, P(m->wte), NULL, (size_t)B, C, m->V_local);
        RT_TRY(glm_vocab_to_host(m, (size_t)B, d->h_logits));
        if (step_logits) memcpy(step_logits + (size_t)k * B * V, d->h_logits, (size_t)B * V * sizeof(float));
        for (int b = 0; b < B; b++) {
            if (done[b]) continue;
            int32_t next = glm_argmax(d->h_logits + (size_t)b * V, V);
            out_ids[b * max_new + k] = next;
            out_len[b] = k + 1;
            done[b] = next == eop;
        }
    }
fail:
    free(done);
    return st;
}
