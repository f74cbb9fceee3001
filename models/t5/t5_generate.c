/* T5 generation with incremental decoding (see t5_generate.h).
 *
 * The device side is one step of the decoder for R rows and one new position t, through the
 * blocks of models/layers/stack.c (mdl_stack_decode) over caches laid out here:
 *  - self-attention reads a key/value cache per block laid out time-major, (position, row,
 *    I_local), with the step's row count as the row stride. Position t's keys and values are
 *    then one contiguous (R, I_local) matrix that the k and v projections write in place, and
 *    the cache is a valid attention operand for "1 batch, R*NH heads, 1 query, t+1 keys": head
 *    r*NH + h of a position row is row r's head h. The relative position bias row of query t
 *    (NH, 1, t+1) is replicated to every row's heads with gather_rows. So no new backend op is
 *    needed.
 *  - cross-attention runs as "n_src batches, beams queries per batch" over each source row's
 *    keys and values (computed once from the encoder output): the beams of a source row are
 *    consecutive decoder rows, so they share the source's keys and its padding mask without
 *    copies.
 *  - after a step, rows move: beam search picks parents, and source rows whose search is over
 *    leave. The self-attention caches are gathered into a second buffer (positions 0..t of the
 *    new rows only; the buffers swap), the cross-attention keys of the leaving sources are
 *    squeezed out by copies (in increasing order: a kept source only moves down).
 * The search itself (hypotheses, scores, which rows go on) is models/layers/gen_search.c's: logits come
 * back each step (gathered over tp), and every rank makes the same choices from the same
 * numbers. */
#include "models/t5/t5_generate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/layers/hf_config.h"
#include "models/layers/parallel.h"
#include "models/t5/t5_internal.h"
#include "runtime/base/rt_arena.h"

struct t5_generator {
    t5_model *m;
    int max_B, max_S, max_beams, max_new, max_rows;
    size_t kv_block;    /* floats of one (max_new, max_rows, I_local) cache block */
    size_t cross_block; /* floats of one (max_B, max_S, I_local) block */

    void *dev;           /* everything below on the device, one allocation */
    float *self_kv[2];   /* each 2L blocks: block 2l layer l's keys, 2l+1 its values */
    float *cross_kv;     /* 2L blocks of (n_src, S, I_local) */
    float *cross_mask;   /* (n_src, S) additive */
    float *x, *ln, *tmp; /* (max_rows, C) */
    float *rstd;         /* (max_rows) */
    float *q, *atty;     /* (max_rows, I_local) */
    float *probs;        /* (max_rows * NH_local * max(max_new, max_S)) */
    float *fa, *fb, *fh; /* (max_rows, F_local); fb when gated */
    float *bias;         /* (NH_local, max_new) query t's bias row */
    float *bias_rows;    /* (max_rows, NH_local, max_new) it, for every row's heads */
    float *logits;       /* (max_rows, V_local) */
    float *logits_all;   /* (max_rows, V_local * tp) gathered, tp > 1 */
    int32_t *ids;        /* (max_rows) this step's input tokens */
    int32_t *zeros;      /* (max_rows) */
    int32_t *buckets;    /* (max_new, max_new): [t * max_new + j] bucket of key j from query t */
    int32_t *gather_idx; /* (max_new * max_rows) */
    int cur;             /* which self_kv buffer holds the cache */
    float **layer_k[2], **layer_v[2], **cross_k, **cross_v; /* (L) host: each layer's blocks of the above */

    /* host */
    int S;                 /* this search's source length */
    float *h_logits_local; /* (max_rows, V_local * tp) staging for t5_logits_to_host */
    int32_t *h_idx;        /* (max_new * max_rows) cache gather indices */
    gen_search *search;    /* the hypotheses, scores and row moves (models/layers/gen_search.c) */
};

void t5_gen_options_default(const t5_config *c, gen_options *o) {
    /* transformers 5's model-agnostic default max_length is 21 with the start token */
    *o = (gen_options){.max_new_tokens = 20,
                       .num_beams = 1,
                       .length_penalty = 1.0f,
                       .early_stopping = GEN_EARLY_STOP_HEURISTIC,
                       .eos_token_id = c->eos_token_id};
}

static void t5_gen_layout(t5_generator *g, rt_arena *a) {
    const t5_model *m = g->m;
    const size_t L = (size_t)m->cfg.num_decoder_layers, R = (size_t)g->max_rows, C = (size_t)m->C;
    const size_t Il = (size_t)m->I_local, Fl = (size_t)m->F_local, NH = (size_t)m->NH_local;
    const size_t T = (size_t)g->max_new, f = sizeof(float), i = sizeof(int32_t);
    const size_t Tk = T > (size_t)g->max_S ? T : (size_t)g->max_S;
    for (int b = 0; b < 2; b++) g->self_kv[b] = rt_arena_take(a, 2 * L * g->kv_block, f);
    g->cross_kv = rt_arena_take(a, 2 * L * g->cross_block, f);
    g->cross_mask = rt_arena_take(a, (size_t)g->max_B * g->max_S, f);
    g->x = rt_arena_take(a, R * C, f);
    g->ln = rt_arena_take(a, R * C, f);
    g->tmp = rt_arena_take(a, R * C, f);
    g->rstd = rt_arena_take(a, R, f);
    g->q = rt_arena_take(a, R * Il, f);
    g->atty = rt_arena_take(a, R * Il, f);
    g->probs = rt_arena_take(a, R * NH * Tk, f);
    g->fa = rt_arena_take(a, R * Fl, f);
    g->fb = m->cfg.gated ? rt_arena_take(a, R * Fl, f) : NULL;
    g->fh = rt_arena_take(a, R * Fl, f);
    g->bias = rt_arena_take(a, NH * T, f);
    g->bias_rows = rt_arena_take(a, R * NH * T, f);
    g->logits = rt_arena_take(a, R * (size_t)m->vocab.local, f);
    g->logits_all = m->tp->size > 1 ? rt_arena_take(a, R * (size_t)m->vocab.local * (size_t)m->tp->size, f) : NULL;
    g->ids = rt_arena_take(a, R, i);
    g->zeros = rt_arena_take(a, R, i);
    g->buckets = rt_arena_take(a, T * T, i);
    g->gather_idx = rt_arena_take(a, T * R, i);
}

rt_status t5_generator_init(t5_model *m, int max_B, int max_src, int max_beams, int max_new_tokens,
                            t5_generator **out) {
    rt_status st = RT_OK;
    const t5_config *c = &m->cfg;
    t5_generator *g = rt_xcalloc(1, sizeof *g);
    *out = NULL;
    if (m->stage.count > 1)
        RT_FAIL(RT_ERR_CONFIG, "T5 generation needs the whole model, not pipeline stage %d of %d", m->stage.index + 1,
                m->stage.count);
    if (max_B < 1 || max_B > m->max_B || max_src < 1 || max_src > m->max_S)
        RT_FAIL(RT_ERR_CONFIG,
                "T5 generation: %d source rows of %d tokens exceed the %d x %d the model was sized "
                "for (or are < 1)",
                max_B, max_src, m->max_B, m->max_S);
    if (max_beams < 1 || max_new_tokens < 1)
        RT_FAIL(RT_ERR_CONFIG, "T5 generation: num_beams %d and max_new_tokens %d must be >= 1", max_beams,
                max_new_tokens);
    /* the caches: 2 x layers of (rows, len, num_heads x d_kv) keys and values, the logits' vocab;
     * this also keeps rows (max_B x max_beams) within int */
    const uint64_t rows = (uint64_t)max_B * (uint64_t)max_beams;
    const uint64_t len = (uint64_t)(max_new_tokens > max_src ? max_new_tokens : max_src);
    const uint64_t width = mdl_size_max(mdl_size_max((uint64_t)m->C, (uint64_t)m->I_local),
                                        mdl_size_max((uint64_t)m->F_local, (uint64_t)m->NH_local * len));
    RT_TRY(mdl_check_activations("T5 generation caches", 2 * (uint64_t)c->num_decoder_layers, rows, len,
                                 mdl_size_max(width, (uint64_t)m->vocab.local * (uint64_t)m->tp->size),
                                 "lower the batch, beams or max_new_tokens"));
    g->m = m;
    g->max_B = max_B;
    g->max_S = max_src;
    g->max_beams = max_beams;
    g->max_new = max_new_tokens;
    g->max_rows = max_B * max_beams;
    g->kv_block = (size_t)max_new_tokens * g->max_rows * m->I_local;
    g->cross_block = (size_t)max_B * max_src * m->I_local;
    rt_arena arena = {0};
    t5_gen_layout(g, &arena);
    RT_TRY(rt_backend_alloc(m->be, arena.used, "T5 generation caches (lower the batch, beams or max_new_tokens)",
                            &g->dev));
    arena = (rt_arena){.base = g->dev};
    t5_gen_layout(g, &arena);
    const int L = c->num_decoder_layers;
    for (int b = 0; b < 2; b++) {
        g->layer_k[b] = rt_xmalloc((size_t)L * sizeof(float *));
        g->layer_v[b] = rt_xmalloc((size_t)L * sizeof(float *));
        for (int l = 0; l < L; l++) {
            g->layer_k[b][l] = g->self_kv[b] + (size_t)(2 * l) * g->kv_block;
            g->layer_v[b][l] = g->layer_k[b][l] + g->kv_block;
        }
    }
    g->cross_k = rt_xmalloc((size_t)L * sizeof(float *));
    g->cross_v = rt_xmalloc((size_t)L * sizeof(float *));
    for (int l = 0; l < L; l++) {
        g->cross_k[l] = g->cross_kv + (size_t)(2 * l) * g->cross_block;
        g->cross_v[l] = g->cross_k[l] + g->cross_block;
    }

    const size_t T = (size_t)max_new_tokens, R = (size_t)g->max_rows;
    int32_t *h_buckets = rt_xcalloc(T * T, sizeof(int32_t));
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j <= t; j++)
            h_buckets[t * T + j] = t5_relative_bucket((int)j - (int)t, false, c->relative_attention_num_buckets,
                                                      c->relative_attention_max_distance);
    rt_to_device(m->be, g->buckets, h_buckets, T * T * sizeof(int32_t));
    free(h_buckets);

    g->h_logits_local = rt_xmalloc(R * (size_t)m->vocab.local * (size_t)m->tp->size * sizeof(float));
    g->h_idx = rt_xmalloc(T * R * sizeof(int32_t));
    RT_TRY(gen_search_init(max_B, max_beams, max_new_tokens, c->vocab_size, &g->search));
    *out = g;
    return RT_OK;
fail:
    t5_generator_free(g);
    return st;
}

void t5_generator_free(t5_generator *g) {
    if (!g) return;
    if (g->dev) rt_free_device(g->m->be, g->dev);
    for (int b = 0; b < 2; b++) {
        free(g->layer_k[b]);
        free(g->layer_v[b]);
    }
    free(g->cross_k);
    free(g->cross_v);
    free(g->h_logits_local);
    free(g->h_idx);
    gen_search_free(g->search);
    free(g);
}

/* ---- the device side ---- */

/* The encoder once, then every decoder block's cross-attention keys and values of its output. */
static rt_status t5_gen_encode(t5_generator *g, const int32_t *src_ids, const int32_t *src_mask, int B, int S) {
    rt_status st = RT_OK;
    t5_model *m = g->m;
    rt_backend *be = m->be;
    const mdl_pass pass = {0};
    RT_TRY(t5_upload_src(m, src_ids, src_mask, B, S));
    RT_TRY(t5_stack_fwd(m, &m->enc, B, S, S, &pass));
    for (int l = 0; l < m->dec.L; l++)
        mdl_stack_cross_kv(&m->dec.blocks, l, m->enc.blocks.out, (size_t)B * S, g->cross_k[l], g->cross_v[l]);
    rt_copy(be, g->cross_mask, m->key_mask, (size_t)B * S * sizeof(float));
fail:
    return st;
}

/* One decoder step at position t for R = n_src * beams rows with input tokens ids: writes the
 * rows' keys and values at position t of the caches and their logits to the host (gen_model's
 * forward). */
static rt_status t5_gen_forward(void *ctx, int t, int n_src, int beams, const int32_t *ids, float *host_logits) {
    t5_generator *g = ctx;
    const int S = g->S;
    rt_status st = RT_OK;
    t5_model *m = g->m;
    const t5_config *c = &m->cfg;
    rt_backend *be = m->be;
    const int R = n_src * beams, C = m->C, Il = m->I_local, NH = m->NH_local, Tk = t + 1;
    t5_stack *dec = &m->dec;

    rt_to_device(be, g->ids, ids, (size_t)R * sizeof(int32_t));
    RT_TRY(
        mdl_vocab_embedding_fwd(be, m->tp, g->x, g->ids, P(m->shared), (size_t)R, C, m->vocab.start, m->vocab.local));
    /* query t's bias row, shared by every block (block 0 owns the table) and by every row */
    rt_relbias_fwd(be, g->bias, P(dec->rel_bias), g->buckets + (size_t)t * g->max_new, NH, 1, Tk,
                   c->relative_attention_num_buckets);
    rt_gather_rows(be, g->bias_rows, g->bias, g->zeros, R, NH * Tk);
    /* self-attention over positions 0..t of the time-major caches, query t's cache rows
     * written in place; cross-attention over each source row's keys */
    const mdl_decode_caches caches = {.k = g->layer_k[g->cur],
                                      .v = g->layer_v[g->cur],
                                      .at = (size_t)t * R * Il,
                                      .self = {.B = 1,
                                               .NH = R * NH,
                                               .Tq = 1,
                                               .Tk = Tk,
                                               .HS = m->HS,
                                               .ldq = (size_t)R * Il,
                                               .ldk = (size_t)R * Il,
                                               .ldv = (size_t)R * Il,
                                               .ldo = (size_t)R * Il,
                                               .scale = 1.0f,
                                               .bias = g->bias_rows},
                                      .ck = g->cross_k,
                                      .cv = g->cross_v,
                                      .cross = {.B = n_src,
                                                .NH = NH,
                                                .Tq = beams,
                                                .Tk = S,
                                                .HS = m->HS,
                                                .ldq = (size_t)Il,
                                                .ldk = (size_t)Il,
                                                .ldv = (size_t)Il,
                                                .ldo = (size_t)Il,
                                                .scale = 1.0f,
                                                .key_mask = g->cross_mask}};
    const mdl_decode_scratch scratch = {.ln = rt_xf(g->ln),
                                        .tmp = g->tmp,
                                        .rstd = g->rstd,
                                        .q = rt_xf(g->q),
                                        .atty = rt_xf(g->atty),
                                        .probs = g->probs,
                                        .up = rt_xf(g->fa),
                                        .up_lin = rt_xf(g->fb),
                                        .hid = rt_xf(g->fh)};
    RT_TRY(mdl_stack_decode(&dec->blocks, R, g->x, &caches, &scratch));
    mdl_stack_final_norm(&dec->blocks, g->ln, NULL, g->rstd, g->x, (size_t)R);
    if (c->scale_decoder_outputs) { /* an activation: stored at the compute precision */
        rt_scale(be, g->ln, t5_decoder_out_scale(c), (size_t)R * C);
        rt_store_n(be, g->ln, (size_t)R * C);
    }
    mdl_col_linear_fwd(be, rt_xf(g->logits), rt_xf(g->ln), P(t5_head_param(m)), NULL, (size_t)R, C, m->vocab.local);
    if (m->vocab.padded_here) rt_add_bias(be, g->logits, m->head.vocab_mask, (size_t)R, m->vocab.local);
    RT_TRY(t5_logits_to_host(m, g->logits, (size_t)R, host_logits, g->logits_all, g->h_logits_local));
fail:
    return st;
}

/* After step t: the new row r continues old row parent[r] (R_old rows before, R_new after). The
 * self-attention caches' positions 0..t are gathered into the other buffer. */
static void t5_gen_reorder_cache(void *ctx, int t, int R_old, int R_new, const int32_t *parent) {
    t5_generator *g = ctx;
    t5_model *m = g->m;
    rt_backend *be = m->be;
    const int n = (t + 1) * R_new;
    for (int j = 0; j <= t; j++)
        for (int r = 0; r < R_new; r++) g->h_idx[(size_t)j * R_new + r] = j * R_old + parent[r];
    rt_to_device(be, g->gather_idx, g->h_idx, (size_t)n * sizeof(int32_t));
    const int other = 1 - g->cur;
    for (int b = 0; b < 2 * m->dec.L; b++)
        rt_gather_rows(be, g->self_kv[other] + (size_t)b * g->kv_block, g->self_kv[g->cur] + (size_t)b * g->kv_block,
                       g->gather_idx, n, m->I_local);
    g->cur = other;
}

/* Source rows keep[0..n) (increasing old indices) move to rows 0..n of the cross-attention
 * keys, values and mask: a kept row only moves down, so copying in order overwrites nothing
 * that is still to be read. */
static void t5_gen_squeeze_sources(void *ctx, const int32_t *keep, int n) {
    t5_generator *g = ctx;
    t5_model *m = g->m;
    const int S = g->S;
    rt_backend *be = m->be;
    const size_t row = (size_t)S * m->I_local;
    for (int i = 0; i < n; i++) {
        if (keep[i] == i) continue;
        for (int b = 0; b < 2 * m->dec.L; b++) {
            float *blk = g->cross_kv + (size_t)b * g->cross_block;
            rt_copy(be, blk + (size_t)i * row, blk + (size_t)keep[i] * row, row * sizeof(float));
        }
        rt_copy(be, g->cross_mask + (size_t)i * S, g->cross_mask + (size_t)keep[i] * S, (size_t)S * sizeof(float));
    }
}

rt_status t5_generate(t5_generator *g, const int32_t *src_ids, const int32_t *src_mask, int B, int S,
                      const gen_options *opt, gen_observer observer, void *user, int32_t *out_ids, int *out_len,
                      float *out_scores) {
    rt_status st = RT_OK;
    const t5_config *c = &g->m->cfg;
    if (B < 1 || B > g->max_B || S < 1 || S > g->max_S)
        return rt_errorf(RT_ERR_CONFIG,
                         "T5 generation: %d source rows of %d tokens exceed the %d x %d the generator "
                         "was sized for (or are < 1)",
                         B, S, g->max_B, g->max_S);
    g->cur = 0;
    g->S = S;
    RT_TRY(t5_gen_encode(g, src_ids, src_mask, B, S));
    gen_model gm = {
        .ctx = g, .forward = t5_gen_forward, .reorder = t5_gen_reorder_cache, .squeeze = t5_gen_squeeze_sources};
    RT_TRY(gen_search_run(g->search, &gm, B, c->decoder_start_token_id, c->pad_token_id, opt, observer, user, out_ids,
                          out_len, out_scores));
fail:
    return st;
}
