/* GLM generation with a key/value cache, greedy or beam (see glm.h). The contexts run through
 * the model once; each block's keys and values of them fill its cache; then every step runs one
 * new token per row (at the blank's position, block positions 1, 2, ...) through the blocks
 * against the caches. Cache slots are [row][0 .. S) for the padded contexts and [row][S + t]
 * for the token of step t, so every row writes the same slot each step; a row sees its own
 * context slots and the generated ones. The search (which rows go on, beams, scores) is
 * models/layers/gen_search.c's, the one T5 uses; rows follow its reorders by a gather of their cache
 * rows into the second buffer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/layers/gen_search.h"
#include "models/glm/glm_internal.h"
#include "models/layers/hf_config.h"
#include "models/layers/parallel.h"

struct glm_decoder {
    glm_model *m;
    int max_B, max_beams, max_S, max_new, max_rows;
    int S, cur;           /* this search's context length; which cache buffer is live */
    void *block;          /* backend memory: caches, mask, slot and gather indices */
    float **k[2], **v[2]; /* (L) each (max_rows, Tmax, C_local), two buffers */
    float *key_mask;      /* (max_rows, Tmax) */
    int32_t *at_idx;      /* (max_rows) */
    int32_t *gather_idx;  /* (max_rows * Tmax) */
    float *h_mask;
    int32_t *h_ids, *h_pos, *h_bpos, *h_at, *h_idx;
    int32_t *h_sep, *h_mask_pos, *h_tmp; /* (max_rows) per row, following the search's reorders */
    gen_search *search;
};

static int glm_dec_tmax(const glm_decoder *d) { return d->max_S + d->max_new; }

rt_status glm_decoder_init(glm_model *m, int max_B, int max_beams, int max_S, int max_new, glm_decoder **out) {
    rt_status st = RT_OK;
    *out = NULL;
    if (m->stage.count > 1)
        return rt_errorf(RT_ERR_CONFIG, "GLM decoder: generation needs the whole model, not pipeline stage %d of %d",
                         m->stage.index + 1, m->stage.count);
    if (max_B < 1 || max_B > m->max_B || max_S < 1 || max_S > m->max_T || max_new < 1 || max_beams < 1)
        return rt_errorf(RT_ERR_CONFIG,
                         "GLM decoder: %d rows of %d context tokens, %d beams and %d new tokens (the "
                         "model holds %d x %d)",
                         max_B, max_S, max_beams, max_new, m->max_B, m->max_T);
    /* the caches: 4 x layers of (rows, context + new, C_local), and the search's logits; this also
     * keeps rows (max_B x max_beams) and context + new within int */
    const uint64_t n_rows = (uint64_t)max_B * (uint64_t)max_beams, n_len = (uint64_t)max_S + (uint64_t)max_new;
    rt_status cst = mdl_check_activations("GLM generation caches", 4 * (uint64_t)m->cfg.num_layers, n_rows, n_len,
                                          mdl_size_max((uint64_t)m->blocks.I_local, (uint64_t)m->vocab.padded),
                                          "lower the batch, beams or lengths");
    if (cst != RT_OK) return cst;
    glm_decoder *d = rt_xcalloc(1, sizeof *d);
    const int L = m->cfg.num_layers, Cl = m->blocks.I_local;
    d->m = m;
    d->max_B = max_B;
    d->max_beams = max_beams;
    d->max_S = max_S;
    d->max_new = max_new;
    d->max_rows = max_B * max_beams;
    const int Tmax = glm_dec_tmax(d);
    const size_t rows = (size_t)d->max_rows, cache = rows * Tmax * Cl;
    size_t bytes = (4 * (size_t)L * cache + rows * Tmax) * sizeof(float) + (rows + rows * Tmax) * sizeof(int32_t) + 64;
    RT_TRY(rt_backend_alloc(m->be, bytes, "GLM generation caches (lower the batch, beams or lengths)", &d->block));
    float *f = d->block;
    for (int b = 0; b < 2; b++) {
        d->k[b] = rt_xcalloc((size_t)L, sizeof(float *));
        d->v[b] = rt_xcalloc((size_t)L, sizeof(float *));
        for (int l = 0; l < L; l++) {
            d->k[b][l] = f;
            f += cache;
            d->v[b][l] = f;
            f += cache;
        }
    }
    d->key_mask = f;
    f += rows * Tmax;
    d->at_idx = (int32_t *)f;
    d->gather_idx = d->at_idx + rows;
    d->h_mask = rt_xmalloc(rows * Tmax * sizeof(float));
    d->h_ids = rt_xmalloc(rows * sizeof(int32_t));
    d->h_pos = rt_xmalloc(rows * sizeof(int32_t));
    d->h_bpos = rt_xmalloc(rows * sizeof(int32_t));
    d->h_at = rt_xmalloc(rows * sizeof(int32_t));
    d->h_idx = rt_xmalloc(rows * Tmax * sizeof(int32_t));
    d->h_sep = rt_xmalloc(rows * sizeof(int32_t));
    d->h_mask_pos = rt_xmalloc(rows * sizeof(int32_t));
    d->h_tmp = rt_xmalloc(rows * sizeof(int32_t));
    RT_TRY(gen_search_init(max_B, max_beams, max_new, m->cfg.vocab_size, &d->search));
    *out = d;
    return RT_OK;
fail:
    glm_decoder_free(d);
    return st;
}

void glm_decoder_free(glm_decoder *d) {
    if (!d) return;
    if (d->block) rt_free_device(d->m->be, d->block);
    for (int b = 0; b < 2; b++) {
        free(d->k[b]);
        free(d->v[b]);
    }
    free(d->h_mask);
    free(d->h_ids);
    free(d->h_pos);
    free(d->h_bpos);
    free(d->h_at);
    free(d->h_idx);
    free(d->h_sep);
    free(d->h_mask_pos);
    free(d->h_tmp);
    gen_search_free(d->search);
    free(d);
}

/* The contexts through the model, and each block's keys and values of them into the caches. */
static rt_status glm_prefill(glm_decoder *d, const glm_inputs *ctx) {
    rt_status st = RT_OK;
    glm_model *m = d->m;
    rt_backend *be = m->be;
    const int B = ctx->B, S = ctx->T, Cl = m->blocks.I_local, Tmax = glm_dec_tmax(d);
    const size_t n = (size_t)B * S;
    mdl_pass pass = {0};
    RT_TRY(glm_upload(m, ctx));
    RT_TRY(glm_forward_body(m, B, S, &pass));
    d->cur = 0;
    for (int l = 0; l < m->cfg.num_layers; l++) {
        rt_clear(be, d->k[0][l], (size_t)B * Tmax * Cl * sizeof(float));
        rt_clear(be, d->v[0][l], (size_t)B * Tmax * Cl * sizeof(float));
    }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < S; t++) d->h_idx[b * S + t] = b * Tmax + t;
    rt_to_device(be, m->head.row_idx, d->h_idx, n * sizeof(int32_t));
    /* rows and drows (BT x C floats each) hold the (B*S, C_local) keys and values */
    for (int l = 0; l < m->cfg.num_layers; l++) {
        mdl_stack_kv(&m->blocks, l, mdl_stack_norm1(&m->blocks, l, n), n, m->head.rows, m->head.drows);
        rt_scatter_rows_add(be, d->k[0][l], rt_xf(m->head.rows), m->head.row_idx, (int)n, Cl);
        rt_scatter_rows_add(be, d->v[0][l], rt_xf(m->head.drows), m->head.row_idx, (int)n, Cl);
    }
fail:
    return st;
}

/* gen_model's forward: step t's tokens (one per row) into cache slot S + t, and their logits. */
static rt_status glm_dec_forward(void *ctx, int t, int n_src, int beams, const int32_t *ids, float *host_logits) {
    rt_status st = RT_OK;
    glm_decoder *d = ctx;
    glm_model *m = d->m;
    rt_backend *be = m->be;
    const int R = n_src * beams, C = m->C, S = d->S, Tmax = glm_dec_tmax(d);
    for (int r = 0; r < R; r++) {
        d->h_ids[r] = ids[r];
        d->h_pos[r] = d->h_mask_pos[r];
        d->h_bpos[r] = t + 1;
        d->h_at[r] = r * Tmax + S + t;
        for (int j = 0; j < Tmax; j++) /* its context, then the tokens generated so far */
            d->h_mask[(size_t)r * Tmax + j] = j < d->h_sep[r] || (j >= S && j <= S + t) ? 0.0f : -INFINITY;
    }
    rt_to_device(be, m->ids, d->h_ids, (size_t)R * sizeof(int32_t));
    rt_to_device(be, m->pos, d->h_pos, (size_t)R * sizeof(int32_t));
    rt_to_device(be, m->bpos, d->h_bpos, (size_t)R * sizeof(int32_t));
    rt_to_device(be, d->at_idx, d->h_at, (size_t)R * sizeof(int32_t));
    rt_to_device(be, d->key_mask, d->h_mask, (size_t)R * Tmax * sizeof(float));
    float *x = m->head.rows;
    RT_TRY(mdl_vocab_embedding_fwd(be, m->tp, x, m->ids, P(m->wte), (size_t)R, C, m->vocab.start, m->vocab.local));
    rt_embedding_fwd(be, x, m->pos, P(m->wpe), (size_t)R, C, 0, m->P, true);
    if (m->wbpe >= 0) rt_embedding_fwd(be, x, m->bpos, P(m->wbpe), (size_t)R, C, 0, m->P, true);
    const int HS = m->blocks.HS, Il = m->blocks.I_local;
    const mdl_decode_caches caches = {.k = d->k[d->cur],
                                      .v = d->v[d->cur],
                                      .at_idx = d->at_idx,
                                      .self = {.B = R,
                                               .NH = m->blocks.NH_local,
                                               .Tq = 1,
                                               .Tk = Tmax,
                                               .HS = HS,
                                               .ldq = (size_t)Il,
                                               .ldk = (size_t)Il,
                                               .ldv = (size_t)Il,
                                               .ldo = (size_t)Il,
                                               .scale = 1.0f / sqrtf((float)HS),
                                               .key_mask = d->key_mask,
                                               .head_offset = m->blocks.head_offset,
                                               .heads_total = m->cfg.num_attention_heads}};
    const mdl_decode_scratch scratch = mdl_stack_decode_scratch(&m->blocks, R, Tmax);
    RT_TRY(mdl_stack_decode(&m->blocks, R, x, &caches, &scratch));
    mdl_stack_final_norm(&m->blocks, m->blocks.out, m->blocks.out_mean, m->blocks.out_rstd, x, (size_t)R);
    RT_TRY(mdl_lm_head_logits_rows(&m->head, (size_t)R));
    mdl_col_linear_fwd(be, rt_xf(m->head.logits), rt_xf(m->blocks.out), P(m->wte), NULL, (size_t)R, C, m->vocab.local);
    RT_TRY(mdl_lm_head_to_host(&m->head, (size_t)R, host_logits));
fail:
    return st;
}

/* gen_model's reorder: new row r takes old row parent[r]'s cache rows (every slot written so
 * far), context length and blank position. */
static void glm_dec_reorder(void *ctx, int t, int R_old, int R_new, const int32_t *parent) {
    glm_decoder *d = ctx;
    glm_model *m = d->m;
    rt_backend *be = m->be;
    const int Tmax = glm_dec_tmax(d), used = d->S + t + 1, Cl = m->blocks.I_local;
    (void)R_old;
    for (int r = 0; r < R_new; r++)
        for (int j = 0; j < used; j++) d->h_idx[(size_t)r * used + j] = parent[r] * Tmax + j;
    rt_to_device(be, d->gather_idx, d->h_idx, (size_t)R_new * used * sizeof(int32_t));
    const int other = 1 - d->cur;
    for (int l = 0; l < m->cfg.num_layers; l++)
        for (int r = 0; r < R_new; r++) { /* row r's slots 0 .. used-1 (the rest are never read unmasked) */
            rt_gather_rows(be, d->k[other][l] + (size_t)r * Tmax * Cl, d->k[d->cur][l],
                           d->gather_idx + (size_t)r * used, used, Cl);
            rt_gather_rows(be, d->v[other][l] + (size_t)r * Tmax * Cl, d->v[d->cur][l],
                           d->gather_idx + (size_t)r * used, used, Cl);
        }
    d->cur = other;
    for (int r = 0; r < R_new; r++) d->h_tmp[r] = d->h_sep[parent[r]];
    memcpy(d->h_sep, d->h_tmp, (size_t)R_new * sizeof(int32_t));
    for (int r = 0; r < R_new; r++) d->h_tmp[r] = d->h_mask_pos[parent[r]];
    memcpy(d->h_mask_pos, d->h_tmp, (size_t)R_new * sizeof(int32_t));
}

/* gen_model's squeeze: GLM keeps nothing per source row besides its rows. */
static void glm_dec_squeeze(void *ctx, const int32_t *keep, int n) {
    (void)ctx;
    (void)keep;
    (void)n;
}

rt_status glm_generate(glm_decoder *d, const glm_inputs *ctx, const int32_t *mask_pos, int32_t sop,
                       const gen_options *o, gen_observer obs, void *user, int32_t *out_ids, int *out_len,
                       float *out_scores) {
    rt_status st = RT_OK;
    const int B = ctx->B;
    if (B > d->max_B || ctx->T > d->max_S || o->max_new_tokens > d->max_new || o->num_beams > d->max_beams)
        return rt_errorf(RT_ERR_CONFIG,
                         "GLM decoder: %d rows of %d tokens, %d beams, %d new tokens exceed the %d x %d, "
                         "%d, %d it was sized for",
                         B, ctx->T, o->num_beams, o->max_new_tokens, d->max_B, d->max_S, d->max_beams, d->max_new);
    d->S = ctx->T;
    for (int b = 0; b < B; b++) {
        d->h_sep[b] = ctx->sep[b];
        d->h_mask_pos[b] = mask_pos[b];
    }
    RT_TRY(glm_prefill(d, ctx));
    gen_model gm = {.ctx = d, .forward = glm_dec_forward, .reorder = glm_dec_reorder, .squeeze = glm_dec_squeeze};
    const int32_t pad = o->eos_token_id; /* after a row's end: the end token again */
    RT_TRY(gen_search_run(d->search, &gm, B, sop, pad, o, obs, user, out_ids, out_len, out_scores));
fail:
    return st;
}
