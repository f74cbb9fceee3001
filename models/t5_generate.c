/* T5 generation with incremental decoding (see t5_generate.h).
 *
 * The device side is one step of the decoder for R rows and one new position t:
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
 * The host side holds the search: logits come back each step (gathered over tp), and every
 * rank makes the same choices from the same numbers. */
#include "models/t5_generate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/parallel.h"
#include "models/t5_internal.h"
#include "runtime/rt_arena.h"

/* One finished hypothesis of a source row. */
typedef struct {
    float score; /* sum of log-probs / len^length_penalty */
    int len;     /* generated tokens, eos included */
    int32_t *tokens;
} t5_hyp;

/* The beam search of one source row. */
typedef struct {
    t5_hyp *fin;     /* (num_beams) best first */
    int n_fin;
    bool improvable; /* HF's is_early_stop_heuristic_unsatisfied */
    bool done;
} t5_beam_row;

/* A candidate continuation: flat index (beam * V + token) within its source row. */
typedef struct {
    float score;
    int beam, token;
} t5_cand;

struct t5_generator {
    t5_model *m;
    int max_B, max_S, max_beams, max_new, max_rows;
    size_t kv_block;    /* floats of one (max_new, max_rows, I_local) cache block */
    size_t cross_block; /* floats of one (max_B, max_S, I_local) block */

    void *dev;             /* everything below on the device, one allocation */
    float *self_kv[2];     /* each 2L blocks: block 2l layer l's keys, 2l+1 its values */
    float *cross_kv;       /* 2L blocks of (n_src, S, I_local) */
    float *cross_mask;     /* (n_src, S) additive */
    float *x, *mid, *ln, *tmp; /* (max_rows, C) */
    float *rstd;               /* (max_rows) */
    float *q, *atty;           /* (max_rows, I_local) */
    float *probs;              /* (max_rows * NH_local * max(max_new, max_S)) */
    float *fa, *fb, *fh;       /* (max_rows, F_local); fb when gated */
    float *bias;               /* (NH_local, max_new) query t's bias row */
    float *bias_rows;          /* (max_rows, NH_local, max_new) it, for every row's heads */
    float *logits;             /* (max_rows, V_local) */
    float *logits_all;         /* (max_rows, V_local * tp) gathered, tp > 1 */
    int32_t *ids;              /* (max_rows) this step's input tokens */
    int32_t *zeros;            /* (max_rows) */
    int32_t *buckets;          /* (max_new, max_new): [t * max_new + j] bucket of key j from query t */
    int32_t *gather_idx;       /* (max_new * max_rows) */
    int cur;                   /* which self_kv buffer holds the cache */

    /* host */
    float *h_logits;        /* (max_rows, V) */
    float *h_logits_local;  /* (max_rows, V_local * tp) staging for t5_logits_to_host */
    float *h_logprobs;      /* (V) */
    int32_t *h_ids, *h_idx, *h_src;
    int32_t *h_parent, *h_tokens; /* (max_rows) after a step: each new row's old row and its token */
    float *h_new_scores;          /* (max_rows) and its running score (beam) */
    int32_t *h_keep;              /* (max_B) the source rows that go on (beam) */
    float *h_sums;                /* (max_B) greedy: sum of the chosen tokens' log-probs */
    int32_t *h_seq[2];      /* (max_rows, max_new + 1) each row's decoder inputs; swapped on reorder */
    float *h_score[2];      /* (max_rows) running scores */
    int32_t *h_active;      /* (max_B) original index of each source row still searching */
    t5_beam_row *rows;      /* (max_B) */
    int32_t *h_hyp_tokens;  /* (max_B, max_beams, max_new) */
    t5_cand *cands;         /* (2 * max_beams) */
};

void t5_gen_options_default(const t5_config *c, t5_gen_options *o) {
    /* transformers 5's model-agnostic default max_length is 21 with the start token */
    *o = (t5_gen_options){.max_new_tokens = 20, .num_beams = 1, .length_penalty = 1.0f,
                          .early_stopping = T5_EARLY_STOP_HEURISTIC, .eos_token_id = c->eos_token_id};
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
    g->mid = rt_arena_take(a, R * C, f);
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
    g->logits = rt_arena_take(a, R * (size_t)m->V_local, f);
    g->logits_all = m->tp->size > 1 ? rt_arena_take(a, R * (size_t)m->V_local * (size_t)m->tp->size, f) : NULL;
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
    if (max_B < 1 || max_B > m->max_B || max_src < 1 || max_src > m->max_S)
        RT_FAIL(RT_ERR_CONFIG, "T5 generation: %d source rows of %d tokens exceed the %d x %d the model was sized "
                "for (or are < 1)", max_B, max_src, m->max_B, m->max_S);
    if (max_beams < 1 || max_new_tokens < 1)
        RT_FAIL(RT_ERR_CONFIG, "T5 generation: num_beams %d and max_new_tokens %d must be >= 1", max_beams,
                max_new_tokens);
    if (max_beams > 1 && c->vocab_size < 2 * max_beams)
        RT_FAIL(RT_ERR_CONFIG, "T5 generation: beam search keeps 2 * num_beams = %d candidates, more than the %d "
                "tokens of the vocab", 2 * max_beams, c->vocab_size);
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

    const size_t T = (size_t)max_new_tokens, R = (size_t)g->max_rows, V = (size_t)c->vocab_size;
    int32_t *h_buckets = rt_xcalloc(T * T, sizeof(int32_t));
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j <= t; j++)
            h_buckets[t * T + j] = t5_relative_bucket((int)j - (int)t, false, c->relative_attention_num_buckets,
                                                      c->relative_attention_max_distance);
    m->be->ops->to_device(m->be->ctx, g->buckets, h_buckets, T * T * sizeof(int32_t));
    free(h_buckets);

    g->h_logits = rt_xmalloc(R * V * sizeof(float));
    g->h_logits_local = rt_xmalloc(R * (size_t)m->V_local * (size_t)m->tp->size * sizeof(float));
    g->h_logprobs = rt_xmalloc(V * sizeof(float));
    g->h_ids = rt_xmalloc(R * sizeof(int32_t));
    g->h_idx = rt_xmalloc(T * R * sizeof(int32_t));
    g->h_src = rt_xmalloc(R * sizeof(int32_t));
    g->h_parent = rt_xmalloc(R * sizeof(int32_t));
    g->h_tokens = rt_xmalloc(R * sizeof(int32_t));
    g->h_new_scores = rt_xmalloc(R * sizeof(float));
    g->h_keep = rt_xmalloc((size_t)max_B * sizeof(int32_t));
    g->h_sums = rt_xmalloc((size_t)max_B * sizeof(float));
    for (int b = 0; b < 2; b++) {
        g->h_seq[b] = rt_xmalloc(R * (T + 1) * sizeof(int32_t));
        g->h_score[b] = rt_xmalloc(R * sizeof(float));
    }
    g->h_active = rt_xmalloc((size_t)max_B * sizeof(int32_t));
    g->rows = rt_xcalloc((size_t)max_B, sizeof *g->rows);
    g->h_hyp_tokens = rt_xmalloc(R * T * sizeof(int32_t));
    for (int b = 0; b < max_B; b++) {
        g->rows[b].fin = rt_xcalloc((size_t)max_beams, sizeof(t5_hyp));
        for (int k = 0; k < max_beams; k++) g->rows[b].fin[k].tokens = g->h_hyp_tokens + ((size_t)b * max_beams + k) * T;
    }
    g->cands = rt_xmalloc(2 * (size_t)max_beams * sizeof(t5_cand));
    *out = g;
    return RT_OK;
fail:
    t5_generator_free(g);
    return st;
}

void t5_generator_free(t5_generator *g) {
    if (!g) return;
    if (g->dev) g->m->be->ops->free(g->m->be->ctx, g->dev);
    free(g->h_logits);
    free(g->h_logits_local);
    free(g->h_logprobs);
    free(g->h_ids);
    free(g->h_idx);
    free(g->h_src);
    free(g->h_parent);
    free(g->h_tokens);
    free(g->h_new_scores);
    free(g->h_keep);
    free(g->h_sums);
    for (int b = 0; b < 2; b++) {
        free(g->h_seq[b]);
        free(g->h_score[b]);
    }
    free(g->h_active);
    if (g->rows)
        for (int b = 0; b < g->max_B; b++) free(g->rows[b].fin);
    free(g->rows);
    free(g->h_hyp_tokens);
    free(g->cands);
    free(g);
}

/* ---- the device side ---- */

/* The encoder once, then every decoder block's cross-attention keys and values of its output. */
static rt_status t5_gen_encode(t5_generator *g, const int32_t *src_ids, const int32_t *src_mask, int B, int S) {
    rt_status st = RT_OK;
    t5_model *m = g->m;
    rt_backend *be = m->be;
    const mdl_pass pass = {0};
    const int C = m->C, Il = m->I_local;
    RT_TRY(t5_upload_src(m, src_ids, src_mask, B, S));
    RT_TRY(t5_stack_fwd(m, &m->enc, B, S, S, &pass));
    for (int l = 0; l < m->dec.L; l++) {
        const t5_block_params *p = &m->dec.blk[l];
        float *ck = g->cross_kv + (size_t)(2 * l) * g->cross_block, *cv = ck + g->cross_block;
        mdl_col_linear_fwd(be, ck, m->enc.out, t5_param(m, p->ck), NULL, (size_t)B * S, C, Il);
        mdl_col_linear_fwd(be, cv, m->enc.out, t5_param(m, p->cv), NULL, (size_t)B * S, C, Il);
    }
    be->ops->copy(be->ctx, g->cross_mask, m->key_mask, (size_t)B * S * sizeof(float));
fail:
    return st;
}

/* One decoder step at position t for R = n_src * beams rows whose input tokens are in g->h_ids:
 * writes the rows' keys and values at position t of the caches and their logits to g->h_logits. */
static rt_status t5_gen_forward(t5_generator *g, int t, int n_src, int beams, int S) {
    rt_status st = RT_OK;
    t5_model *m = g->m;
    const t5_config *c = &m->cfg;
    rt_backend *be = m->be;
    const rt_backend_ops *ops = be->ops;
    const mdl_pass pass = {0};
    const int R = n_src * beams, C = m->C, Il = m->I_local, NH = m->NH_local, Tk = t + 1;
    const float eps = c->layer_norm_epsilon;
    const t5_stack *dec = &m->dec;

    ops->to_device(be->ctx, g->ids, g->h_ids, (size_t)R * sizeof(int32_t));
    RT_TRY(mdl_vocab_embedding_fwd(be, m->tp, g->x, g->ids, t5_param(m, m->shared), (size_t)R, C, m->vocab_start,
                                   m->V_local));
    /* query t's bias row, shared by every block (block 0 owns the table) and by every row */
    ops->relbias_fwd(be->ctx, g->bias, t5_param(m, dec->blk[0].rel_bias), g->buckets + (size_t)t * g->max_new, NH, 1,
                     Tk, c->relative_attention_num_buckets);
    ops->gather_rows(be->ctx, g->bias_rows, g->bias, g->zeros, R, NH * Tk);
    rt_attn_desc self = {.B = 1, .NH = R * NH, .Tq = 1, .Tk = Tk, .HS = m->HS, .ldq = (size_t)R * Il,
                         .ldk = (size_t)R * Il, .ldv = (size_t)R * Il, .ldo = (size_t)R * Il, .scale = 1.0f,
                         .bias = g->bias_rows};
    rt_attn_desc cross = {.B = n_src, .NH = NH, .Tq = beams, .Tk = S, .HS = m->HS, .ldq = (size_t)Il,
                          .ldk = (size_t)Il, .ldv = (size_t)Il, .ldo = (size_t)Il, .scale = 1.0f,
                          .key_mask = g->cross_mask};

    for (int l = 0; l < dec->L; l++) {
        const t5_block_params *p = &dec->blk[l];
        float *kc = g->self_kv[g->cur] + (size_t)(2 * l) * g->kv_block, *vc = kc + g->kv_block;
        const size_t at_t = (size_t)t * R * Il;
        /* self-attention: mid = x + o(attn(norm(x))) over positions 0..t */
        ops->rmsnorm_fwd(be->ctx, g->ln, g->rstd, g->x, t5_param(m, p->ln_self), (size_t)R, C, eps);
        mdl_col_linear_fwd(be, g->q, g->ln, t5_param(m, p->q), NULL, (size_t)R, C, Il);
        mdl_col_linear_fwd(be, kc + at_t, g->ln, t5_param(m, p->k), NULL, (size_t)R, C, Il);
        mdl_col_linear_fwd(be, vc + at_t, g->ln, t5_param(m, p->v), NULL, (size_t)R, C, Il);
        ops->attention_fwd(be->ctx, &self, g->atty, g->probs, g->q, kc, vc);
        RT_TRY(mdl_row_linear_fwd(be, m->tp, g->tmp, g->atty, t5_param(m, p->o), NULL, (size_t)R, Il, C));
        ops->add(be->ctx, g->mid, g->x, g->tmp, (size_t)R * C);
        /* cross-attention: x = mid + o(attn(norm(mid), the source's cached keys)) */
        const float *ck = g->cross_kv + (size_t)(2 * l) * g->cross_block, *cv = ck + g->cross_block;
        ops->rmsnorm_fwd(be->ctx, g->ln, g->rstd, g->mid, t5_param(m, p->ln_cross), (size_t)R, C, eps);
        mdl_col_linear_fwd(be, g->q, g->ln, t5_param(m, p->cq), NULL, (size_t)R, C, Il);
        ops->attention_fwd(be->ctx, &cross, g->atty, g->probs, g->q, ck, cv);
        RT_TRY(mdl_row_linear_fwd(be, m->tp, g->tmp, g->atty, t5_param(m, p->co), NULL, (size_t)R, Il, C));
        ops->add(be->ctx, g->x, g->mid, g->tmp, (size_t)R * C);
        RT_TRY(t5_ffn_fwd(m, dec, l, &pass, g->x, g->x, g->ln, g->rstd, g->fa, g->fb, g->fh, g->tmp, (size_t)R));
    }
    ops->rmsnorm_fwd(be->ctx, g->ln, g->rstd, g->x, t5_param(m, dec->final_ln), (size_t)R, C, eps);
    if (c->scale_decoder_outputs) ops->scale(be->ctx, g->ln, t5_decoder_out_scale(c), (size_t)R * C);
    mdl_col_linear_fwd(be, g->logits, g->ln, t5_param(m, t5_head_param(m)), NULL, (size_t)R, C, m->V_local);
    if (m->vocab_padded_here) ops->add_bias(be->ctx, g->logits, m->vocab_mask, (size_t)R, m->V_local);
    RT_TRY(t5_logits_to_host(m, g->logits, (size_t)R, g->h_logits, g->logits_all, g->h_logits_local));
fail:
    return st;
}

/* After step t: the new row r continues old row parent[r] (R_old rows before, R_new after). The
 * self-attention caches' positions 0..t are gathered into the other buffer. */
static void t5_gen_reorder_cache(t5_generator *g, int t, int R_old, int R_new, const int32_t *parent) {
    t5_model *m = g->m;
    rt_backend *be = m->be;
    const int n = (t + 1) * R_new;
    for (int j = 0; j <= t; j++)
        for (int r = 0; r < R_new; r++) g->h_idx[(size_t)j * R_new + r] = j * R_old + parent[r];
    be->ops->to_device(be->ctx, g->gather_idx, g->h_idx, (size_t)n * sizeof(int32_t));
    const int other = 1 - g->cur;
    for (int b = 0; b < 2 * m->dec.L; b++)
        be->ops->gather_rows(be->ctx, g->self_kv[other] + (size_t)b * g->kv_block,
                             g->self_kv[g->cur] + (size_t)b * g->kv_block, g->gather_idx, n, m->I_local);
    g->cur = other;
}

/* Source rows keep[0..n) (increasing old indices) move to rows 0..n of the cross-attention
 * keys, values and mask: a kept row only moves down, so copying in order overwrites nothing
 * that is still to be read. */
static void t5_gen_squeeze_sources(t5_generator *g, const int32_t *keep, int n, int S) {
    t5_model *m = g->m;
    rt_backend *be = m->be;
    const size_t row = (size_t)S * m->I_local;
    for (int i = 0; i < n; i++) {
        if (keep[i] == i) continue;
        for (int b = 0; b < 2 * m->dec.L; b++) {
            float *blk = g->cross_kv + (size_t)b * g->cross_block;
            be->ops->copy(be->ctx, blk + (size_t)i * row, blk + (size_t)keep[i] * row, row * sizeof(float));
        }
        be->ops->copy(be->ctx, g->cross_mask + (size_t)i * S, g->cross_mask + (size_t)keep[i] * S,
                      (size_t)S * sizeof(float));
    }
}

/* ---- the host side ---- */

/* log_softmax of a row as torch computes it (x - max - log(sum exp(x - max))), the sum in
 * double, so the result is within an ulp or so of torch's float32 one. */
static void t5_gen_log_softmax(const float *x, int V, float *out) {
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp((double)x[v] - (double)mx);
    const double lse = (double)mx + log(sum);
    for (int v = 0; v < V; v++) out[v] = (float)((double)x[v] - lse);
}

/* One entry of t5_gen_log_softmax. */
static float t5_gen_log_prob(const float *x, int V, int y) {
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp((double)x[v] - (double)mx);
    return (float)((double)x[y] - ((double)mx + log(sum)));
}

static void t5_gen_observe(t5_generator *g, t5_gen_observer obs, void *user, int t, int R, int beams) {
    if (!obs) return;
    for (int r = 0; r < R; r++) g->h_src[r] = g->h_active[r / beams];
    t5_gen_step info = {.step = t, .n_rows = R, .src_row = g->h_src, .prefix = g->h_seq[0],
                        .prefix_stride = g->max_new + 1, .logits = g->h_logits};
    obs(user, &info);
}

/* Drops the rows whose parent is not kept and renumbers: seq and scores follow parent[]. */
static void t5_gen_move_rows(t5_generator *g, int t, int R_new, const int32_t *parent, const int32_t *tokens,
                             const float *scores) {
    const size_t stride = (size_t)g->max_new + 1;
    int32_t *src = g->h_seq[0], *dst = g->h_seq[1];
    for (int r = 0; r < R_new; r++) {
        memcpy(dst + r * stride, src + (size_t)parent[r] * stride, (size_t)(t + 1) * sizeof(int32_t));
        dst[r * stride + (size_t)t + 1] = tokens[r];
        g->h_score[1][r] = scores ? scores[r] : 0.0f;
    }
    int32_t *s = g->h_seq[0];
    g->h_seq[0] = g->h_seq[1];
    g->h_seq[1] = s;
    float *f = g->h_score[0];
    g->h_score[0] = g->h_score[1];
    g->h_score[1] = f;
}

static int t5_gen_argmax(const float *x, int V) {
    int best = 0;
    for (int v = 1; v < V; v++)
        if (x[v] > x[best]) best = v; /* the first of equal maxima, as torch.argmax */
    return best;
}

static rt_status t5_gen_greedy(t5_generator *g, int B, int S, const t5_gen_options *o, t5_gen_observer obs,
                               void *user, int32_t *out_ids, int *out_len, float *out_scores) {
    rt_status st = RT_OK;
    const int V = g->m->cfg.vocab_size, T = o->max_new_tokens;
    const size_t stride = (size_t)g->max_new + 1;
    int R = B;
    for (int b = 0; b < B; b++) g->h_sums[b] = 0.0f;
    for (int t = 0; t < T && R > 0; t++) {
        for (int r = 0; r < R; r++) g->h_ids[r] = g->h_seq[0][(size_t)r * stride + (size_t)t];
        RT_TRY(t5_gen_forward(g, t, R, 1, S));
        t5_gen_observe(g, obs, user, t, R, 1);
        int kept = 0;
        for (int r = 0; r < R; r++) {
            const int b = g->h_active[r];
            const float *x = g->h_logits + (size_t)r * V;
            const int y = t5_gen_argmax(x, V);
            if (out_scores) g->h_sums[b] += t5_gen_log_prob(x, V, y);
            out_ids[(size_t)b * T + (size_t)t] = y;
            out_len[b] = t + 1;
            if (y == o->eos_token_id) continue; /* the row is finished and leaves */
            g->h_parent[kept] = r;
            g->h_tokens[kept] = y;
            g->h_active[kept] = b; /* kept <= r: an entry already read */
            kept++;
        }
        if (t + 1 == T || kept == 0) break;
        if (kept < R) {
            t5_gen_reorder_cache(g, t, R, kept, g->h_parent);
            t5_gen_squeeze_sources(g, g->h_parent, kept, S);
        }
        t5_gen_move_rows(g, t, kept, g->h_parent, g->h_tokens, NULL);
        R = kept;
    }
    if (out_scores)
        for (int b = 0; b < B; b++) out_scores[b] = g->h_sums[b];
fail:
    return st;
}

/* The row's best 2*num_beams continuations over its live beams, best first (ties: the lower
 * beam, then the lower token). */
static int t5_gen_topk(t5_generator *g, int r0, int beams, int K) {
    const int V = g->m->cfg.vocab_size;
    t5_cand *c = g->cands;
    int n = 0;
    for (int k = 0; k < beams; k++) {
        const float base = g->h_score[0][r0 + k];
        t5_gen_log_softmax(g->h_logits + (size_t)(r0 + k) * V, V, g->h_logprobs);
        for (int v = 0; v < V; v++) {
            const float s = g->h_logprobs[v] + base;
            if (n == K && !(s > c[K - 1].score)) continue;
            int i = n < K ? n++ : K - 1;
            while (i > 0 && s > c[i - 1].score) {
                c[i] = c[i - 1];
                i--;
            }
            c[i] = (t5_cand){.score = s, .beam = k, .token = v};
        }
    }
    return n;
}

/* Offers a finished hypothesis to the row's num_beams best (kept best first; an equal score
 * stays behind the ones already there). */
static void t5_gen_offer(t5_beam_row *row, int num_beams, float score, const int32_t *prefix, int len, int32_t last) {
    if (row->n_fin == num_beams && !(score > row->fin[num_beams - 1].score)) return;
    int i = row->n_fin < num_beams ? row->n_fin++ : num_beams - 1;
    int32_t *spare = row->fin[i].tokens; /* the slot that falls off (or the empty one) */
    while (i > 0 && score > row->fin[i - 1].score) {
        row->fin[i] = row->fin[i - 1];
        i--;
    }
    row->fin[i] = (t5_hyp){.score = score, .len = len, .tokens = spare};
    memcpy(spare, prefix, (size_t)(len - 1) * sizeof(int32_t));
    spare[len - 1] = last;
}

static rt_status t5_gen_beam(t5_generator *g, int B, int S, const t5_gen_options *o, t5_gen_observer obs,
                             void *user, int32_t *out_ids, int *out_len, float *out_scores) {
    rt_status st = RT_OK;
    const int T = o->max_new_tokens, NB = o->num_beams, K = 2 * NB;
    const size_t stride = (size_t)g->max_new + 1;
    const double lp = o->length_penalty;
    int n_src = B, beams = 1; /* step 0: only beam 0 is live (HF gives the others -1e9) */
    int32_t *tokens = g->h_tokens, *keep = g->h_keep;
    float *scores = g->h_new_scores;
    for (int b = 0; b < B; b++) {
        g->rows[b].n_fin = 0;
        g->rows[b].improvable = true;
        g->rows[b].done = false;
    }
    for (int t = 0; t < T; t++) {
        const int R = n_src * beams;
        for (int r = 0; r < R; r++) g->h_ids[r] = g->h_seq[0][(size_t)r * stride + (size_t)t];
        RT_TRY(t5_gen_forward(g, t, n_src, beams, S));
        t5_gen_observe(g, obs, user, t, R, beams);
        const bool last = t + 1 == T; /* every continuation reaches max_new_tokens */
        /* HF divides float32 scores by Python floats (int ** float): the divisor rounds to float */
        const float len_div = (float)pow((double)(t + 1), lp);
        const double best_len = o->early_stopping == T5_EARLY_STOP_NEVER && lp > 0 ? (double)T : (double)(t + 1);
        const float best_div = (float)pow(best_len, lp);
        int R_new = 0, kept_src = 0;
        for (int i = 0; i < n_src; i++) {
            t5_beam_row *row = &g->rows[g->h_active[i]];
            const int r0 = i * beams;
            const int n = t5_gen_topk(g, r0, beams, K);
            RT_CHECK(n == K, "beam search: %d candidates of %d", n, K);
            /* finished among the top num_beams: offered unless the row takes no more */
            const bool open = row->improvable && !(o->early_stopping == T5_EARLY_STOP_TRUE && row->n_fin == NB);
            for (int c = 0; c < NB && open; c++) {
                const t5_cand *cd = &g->cands[c];
                if (cd->token == o->eos_token_id || last)
                    t5_gen_offer(row, NB, cd->score / len_div, g->h_seq[0] + (size_t)(r0 + cd->beam) * stride + 1,
                                 t + 1, cd->token);
            }
            if (last) continue;
            /* the best num_beams unfinished ones run on */
            int running = 0;
            float best_running = 0;
            for (int c = 0; c < K && running < NB; c++) {
                const t5_cand *cd = &g->cands[c];
                if (cd->token == o->eos_token_id) continue;
                if (running == 0) best_running = cd->score;
                g->h_parent[R_new + running] = r0 + cd->beam;
                tokens[R_new + running] = cd->token;
                scores[R_new + running] = cd->score;
                running++;
            }
            RT_CHECK(running == NB, "beam search: %d of %d beams left to run", running, NB);
            /* HF's _check_early_stop_heuristic: can the best running beam still beat the worst
             * of num_beams finished ones? */
            if (row->n_fin == NB && !(best_running / best_div > row->fin[NB - 1].score)) row->improvable = false;
            row->done = !row->improvable || (o->early_stopping == T5_EARLY_STOP_TRUE && row->n_fin == NB);
            if (row->done) continue; /* its rows leave the batch */
            keep[kept_src] = i;
            g->h_active[kept_src] = g->h_active[i]; /* kept_src <= i */
            kept_src++;
            R_new += NB;
        }
        if (last || kept_src == 0) break;
        bool same = R_new == R;
        for (int r = 0; r < R_new && same; r++) same = g->h_parent[r] == r;
        if (!same) t5_gen_reorder_cache(g, t, R, R_new, g->h_parent);
        t5_gen_squeeze_sources(g, keep, kept_src, S);
        t5_gen_move_rows(g, t, R_new, g->h_parent, tokens, scores);
        n_src = kept_src;
        beams = NB;
    }
    for (int b = 0; b < B; b++) {
        const t5_beam_row *row = &g->rows[b];
        RT_CHECK(row->n_fin > 0, "beam search: source row %d finished no hypothesis", b);
        const t5_hyp *h = &row->fin[0];
        memcpy(out_ids + (size_t)b * T, h->tokens, (size_t)h->len * sizeof(int32_t));
        out_len[b] = h->len;
        if (out_scores) out_scores[b] = h->score;
    }
fail:
    return st;
}

rt_status t5_generate(t5_generator *g, const int32_t *src_ids, const int32_t *src_mask, int B, int S,
                      const t5_gen_options *opt, t5_gen_observer observer, void *user, int32_t *out_ids,
                      int *out_len, float *out_scores) {
    rt_status st = RT_OK;
    const t5_config *c = &g->m->cfg;
    const int T = opt->max_new_tokens;
    if (B < 1 || B > g->max_B || S < 1 || S > g->max_S)
        return rt_errorf(RT_ERR_CONFIG, "T5 generation: %d source rows of %d tokens exceed the %d x %d the generator "
                         "was sized for (or are < 1)", B, S, g->max_B, g->max_S);
    if (opt->num_beams < 1 || opt->num_beams > g->max_beams || T < 1 || T > g->max_new)
        return rt_errorf(RT_ERR_CONFIG, "T5 generation: num_beams %d and max_new_tokens %d must be in [1, %d] and "
                         "[1, %d] (the generator's sizes)", opt->num_beams, T, g->max_beams, g->max_new);
    if (opt->eos_token_id < 0 || opt->eos_token_id >= c->vocab_size)
        return rt_errorf(RT_ERR_CONFIG, "T5 generation: eos_token_id %d is outside the vocab [0, %d)",
                         opt->eos_token_id, c->vocab_size);
    if (!isfinite(opt->length_penalty))
        return rt_errorf(RT_ERR_CONFIG, "T5 generation: length_penalty %g is not finite", opt->length_penalty);
    for (size_t i = 0; i < (size_t)B * T; i++) out_ids[i] = c->pad_token_id;
    for (int b = 0; b < B; b++) {
        g->h_active[b] = b;
        g->h_seq[0][(size_t)b * (g->max_new + 1)] = c->decoder_start_token_id;
        g->h_score[0][b] = 0.0f;
    }
    g->cur = 0;
    RT_TRY(t5_gen_encode(g, src_ids, src_mask, B, S));
    if (opt->num_beams == 1)
        RT_TRY(t5_gen_greedy(g, B, S, opt, observer, user, out_ids, out_len, out_scores));
    else
        RT_TRY(t5_gen_beam(g, B, S, opt, observer, user, out_ids, out_len, out_scores));
fail:
    return st;
}
