/* GLM forward and backward over the shared pre-LN stack (see glm.h). Activations for the
 * largest batch are allocated once at init; a step allocates nothing. */
#include "models/glm.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_source.h"
#include "checkpoints/ckpt_tp.h"
#include "checkpoints/ckpt_weights.h"
#include "models/flops.h"
#include "models/hf_config.h"
#include "models/parallel.h"
#include "runtime/rt_arena.h"

#include "models/glm_internal.h"


static const mdl_stack_names glm_block_names = {
    "transformer.layers.%d.input_layernorm.weight",    "transformer.layers.%d.input_layernorm.bias",
    "transformer.layers.%d.attention.query_key_value.weight", "transformer.layers.%d.attention.query_key_value.bias",
    "transformer.layers.%d.attention.dense.weight",    "transformer.layers.%d.attention.dense.bias",
    "transformer.layers.%d.post_attention_layernorm.weight", "transformer.layers.%d.post_attention_layernorm.bias",
    "transformer.layers.%d.mlp.dense_h_to_4h.weight",  "transformer.layers.%d.mlp.dense_h_to_4h.bias",
    "transformer.layers.%d.mlp.dense_4h_to_h.weight",  "transformer.layers.%d.mlp.dense_4h_to_h.bias",
    "transformer.final_layernorm.weight",              "transformer.final_layernorm.bias"};

static int glm_add(glm_model *m, const char *name, int64_t d0, int64_t d1, bool no_decay, rt_init_kind init, float std) {
    int64_t shape[2] = {d0, d1};
    return rt_params_add(&m->params, name, d1 ? 2 : 1, shape, ckpt_map_tp_rule(&ckpt_map_glm, name), no_decay, init, std);
}

static void glm_declare_params(glm_model *m) {
    const glm_config *c = &m->cfg;
    const float std = c->init_std;
    m->wte = glm_add(m, "word_embeddings.weight", m->vocab.local, m->C, false, RT_INIT_NORMAL, std);
    m->params.specs[m->wte].vocab_rows = c->vocab_size; /* checkpoints store the unpadded table */
    m->wpe = glm_add(m, "transformer.position_embeddings.weight", m->P, m->C, false, RT_INIT_NORMAL, std);
    m->wbpe = -1;
    if (c->block_position_encoding)
        m->wbpe = glm_add(m, "transformer.block_position_embeddings.weight", m->P, m->C, false, RT_INIT_NORMAL, std);
    /* FlagAI: output layers (attention dense, dense_4h_to_h) scaled by 1/sqrt(2 num_layers) */
    mdl_stack_config bc = {.n_layer = c->num_layers, .C = m->C, .n_head = c->num_attention_heads,
                           .F = 4 * c->hidden_size, .norm = MDL_NORM_LAYER, .norm_eps = c->layernorm_epsilon,
                           .final_norm = true, .act = RT_ACT_GELU_TANH, .attn_pdrop = c->attention_dropout_prob,
                           .resid_pdrop = c->output_dropout_prob, .emb_pdrop = c->embedding_dropout_prob,
                           .checkpoint_layers = c->checkpoint_layers};
    mdl_stack_compact_sites(&bc);
    mdl_stack_init(&m->blocks, &bc, m->be, m->tp, &m->params);
    mdl_stack_declare_named(&m->blocks, &glm_block_names, &ckpt_map_glm, std, std / sqrtf(2.0f * (float)c->num_layers));
}

static void glm_layout(glm_model *m, rt_arena *a) {
    const size_t BT = m->max_BT, B = (size_t)m->max_B, C = (size_t)m->C;
    const size_t f = sizeof(float), i = sizeof(int32_t), K = GLM_K_MAX;
    mdl_stack_layout(&m->blocks, a, m->max_B, m->max_T, 0, NULL);
    mdl_lm_head_layout(&m->head, a);
    m->cand = rt_arena_take(a, B * K * C, f);
    m->dcand = rt_arena_take(a, B * K * C, f);
    m->cand_scores = rt_arena_take(a, B * B * K, f);
    m->ids = rt_arena_take(a, BT, i);
    m->pos = rt_arena_take(a, BT, i);
    m->bpos = rt_arena_take(a, BT, i);
    m->sep = rt_arena_take(a, B, i);
    m->cand_ids = rt_arena_take(a, B * K, i);
}

/* The widest per-token row of any activation buffer (mdl_check_activations): the blocks' 4 C MLP
 * and num_heads x T attention probabilities, the logits' vocab, the candidates' (B, K, C) and
 * (B, B, K) rows. */
static uint64_t glm_act_width(const glm_config *c, int max_B, int max_T) {
    uint64_t w = mdl_size_max(4 * (uint64_t)c->hidden_size, (uint64_t)c->num_attention_heads * (uint64_t)max_T);
    w = mdl_size_max(w, (uint64_t)ckpt_tp_padded_vocab(c->vocab_size, 1));
    return mdl_size_max(w, GLM_K_MAX * mdl_size_max((uint64_t)c->hidden_size, (uint64_t)max_B));
}

rt_status glm_model_init(const glm_config *c, rt_backend *be, rt_comm *tp, int max_B, int max_T, uint64_t seed,
                         glm_model **out) {
    rt_status st = RT_OK;
    glm_model *m = rt_xcalloc(1, sizeof *m);
    *out = NULL;
    RT_TRY(glm_config_validate(c, tp->size));
    m->P = c->block_position_encoding ? c->max_sequence_length + 1 : c->max_sequence_length;
    if (max_B < 1 || max_T < 1) RT_FAIL(RT_ERR_CONFIG, "GLM: batch size %d and length %d must be >= 1", max_B, max_T);
    if (max_T > m->P)
        RT_FAIL(RT_ERR_CONFIG, "GLM: max length %d exceeds the model's max_sequence_length %d", max_T,
                c->max_sequence_length);
    RT_TRY(mdl_check_activations("GLM activations", (uint64_t)c->num_layers, (uint64_t)max_B, (uint64_t)max_T,
                                 glm_act_width(c, max_B, max_T), "lower --batch-size or --max-len"));
    m->cfg = *c;
    m->be = be;
    m->tp = tp;
    m->max_B = max_B;
    m->max_T = max_T;
    m->max_BT = (size_t)max_B * (size_t)max_T;
    m->C = c->hidden_size;
    m->vocab = mdl_vocab_shard(c->vocab_size, tp);
    rt_params_init(&m->params, be);
    glm_declare_params(m);
    RT_TRY(rt_params_alloc(&m->params));
    rt_params_init_weights(&m->params, seed);
    mdl_lm_head_init(&m->head, be, tp, &m->vocab, m->C, c->vocab_size, m->max_BT, "GLM");
    rt_arena arena = {0};
    glm_layout(m, &arena);
    RT_TRY(rt_backend_alloc(be, arena.used, "GLM activations (lower --batch-size or --max-len, or add --checkpoint-activations)", &m->act_block));
    arena = (rt_arena){.base = m->act_block};
    glm_layout(m, &arena);
    mdl_vocab_clear_padding(be, &m->vocab, P(m->wte), m->C);
    mdl_lm_head_ready(&m->head);
    m->h_scores = rt_xmalloc((size_t)max_B * max_B * GLM_K_MAX * sizeof(float));
    *out = m;
    return RT_OK;
fail:
    glm_model_free(m);
    return st;
}

void glm_model_free(glm_model *m) {
    if (!m) return;
    mdl_lm_head_free(&m->head);
    if (m->act_block) rt_free_device(m->be, m->act_block);
    rt_params_free(&m->params);
    mdl_stack_free(&m->blocks);
    free(m->h_scores);
    free(m);
}

rt_params *glm_model_params(glm_model *m) { return &m->params; }
rt_comm *glm_model_tp(glm_model *m) { return m->tp; }
const glm_config *glm_model_config(const glm_model *m) { return &m->cfg; }

/* Checks a batch against the model and uploads ids, positions and separators. */
rt_status glm_upload(glm_model *m, const glm_inputs *in) {
    const int B = in->B, T = in->T;
    if (B < 1 || T < 1 || B > m->max_B || T > m->max_T)
        return rt_errorf(RT_ERR_CONFIG, "GLM: batch %dx%d exceeds the %dx%d the model was sized for", B, T, m->max_B,
                         m->max_T);
    for (int b = 0; b < B; b++) {
        if (in->sep[b] < 0 || in->sep[b] > T)
            return rt_errorf(RT_ERR_FORMAT, "GLM: row %d: separator %d is outside [0, %d]", b, in->sep[b], T);
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            if (in->ids[i] < 0 || in->ids[i] >= m->cfg.vocab_size)
                return rt_errorf(RT_ERR_FORMAT, "GLM: token id %d at row %d position %d is outside the vocab [0, %d)",
                                 in->ids[i], b, t, m->cfg.vocab_size);
            if (in->pos[i] < 0 || in->pos[i] >= m->P || (m->wbpe >= 0 && (in->block_pos[i] < 0 || in->block_pos[i] >= m->P)))
                return rt_errorf(RT_ERR_FORMAT, "GLM: row %d position %d: position %d or block position %d is outside "
                                 "[0, %d)", b, t, in->pos[i], m->wbpe >= 0 ? in->block_pos[i] : 0, m->P);
        }
    }
    rt_backend *be = m->be;
    const size_t BT = (size_t)B * T;
    rt_to_device(be, m->ids, in->ids, BT * sizeof(int32_t));
    rt_to_device(be, m->pos, in->pos, BT * sizeof(int32_t));
    if (m->wbpe >= 0) rt_to_device(be, m->bpos, in->block_pos, BT * sizeof(int32_t));
    rt_to_device(be, m->sep, in->sep, (size_t)B * sizeof(int32_t));
    return RT_OK;
}

static mdl_stack_mask glm_mask(const glm_model *m) { return (mdl_stack_mask){.causal = true, .prefix = m->sep}; }

/* Embeddings through the final LayerNorm into m->blocks.out. */
rt_status glm_forward_body(glm_model *m, int B, int T, const mdl_pass *pass) {
    rt_status st = RT_OK;
    rt_backend *be = m->be;
    const size_t BT = (size_t)B * T;
    const int C = m->C;
    mdl_stack_mask mask = glm_mask(m);
    float *x = mdl_stack_residual(&m->blocks, 0);
    RT_TRY(mdl_vocab_embedding_fwd(be, m->tp, x, m->ids, P(m->wte), BT, C, m->vocab.start, m->vocab.local));
    rt_embedding_fwd(be, x, m->pos, P(m->wpe), BT, C, 0, m->P, true);
    if (m->wbpe >= 0) rt_embedding_fwd(be, x, m->bpos, P(m->wbpe), BT, C, 0, m->P, true);
    RT_TRY(mdl_stack_forward(&m->blocks, B, T, &mask, pass));
fail:
    return st;
}

/* Backward from dL/d(final LayerNorm output) in mdl_stack_dout(&m->blocks). */
static rt_status glm_backward_body(glm_model *m, int B, int T, const mdl_pass *pass) {
    rt_status st = RT_OK;
    rt_backend *be = m->be;
    const size_t BT = (size_t)B * T;
    const int C = m->C;
    const float *demb = NULL;
    mdl_stack_mask mask = glm_mask(m);
    RT_TRY(mdl_stack_backward(&m->blocks, B, T, &mask, pass, mdl_stack_dout(&m->blocks), &demb));
    rt_embedding_bwd(be, G(m->wte), demb, m->ids, BT, C, m->vocab.start, m->vocab.local);
    rt_embedding_bwd(be, G(m->wpe), demb, m->pos, BT, C, 0, m->P);
    if (m->wbpe >= 0) rt_embedding_bwd(be, G(m->wbpe), demb, m->bpos, BT, C, 0, m->P);
fail:
    return st;
}

/* dL/d(rows) (n, C) in m->head.drows back into the body at the rows' positions. */
static rt_status glm_backward_from_rows(glm_model *m, int B, int T, int n, const mdl_pass *pass) {
    rt_backend *be = m->be;
    rt_clear(be, mdl_stack_dout(&m->blocks), (size_t)B * T * m->C * sizeof(float));
    rt_scatter_rows_add(be, mdl_stack_dout(&m->blocks), m->head.drows, m->head.row_idx, (size_t)n, m->C);
    return glm_backward_body(m, B, T, pass);
}

/* The labelled positions of a batch into the head's staging (lm_head.h). */
static rt_status glm_collect_targets(glm_model *m, const glm_inputs *in, const int32_t *labels, int *n_out) {
    return mdl_lm_head_collect(&m->head, labels, (size_t)in->B * in->T, in->T, n_out);
}

/* The n collected rows through the tied output layer and the vocab-parallel cross-entropy. */
static rt_status glm_output_xent(glm_model *m, int n, bool backward, float grad_scale) {
    return mdl_lm_head_xent(&m->head, m->blocks.out, P(m->wte), n, backward, grad_scale);
}

/* Backward from dL/dlogits of the n output rows (in the head's logits) through the body. */
static rt_status glm_output_backward(glm_model *m, int B, int T, int n, const mdl_pass *pass) {
    rt_status st = RT_OK;
    RT_TRY(mdl_lm_head_backward(&m->head, P(m->wte), G(m->wte), mdl_stack_dout(&m->blocks), (size_t)B * T, n));
    RT_TRY(glm_backward_body(m, B, T, pass));
fail:
    return st;
}

rt_status glm_lm_step(glm_model *m, const glm_inputs *in, const int32_t *labels, const mdl_pass *pass, float grad_scale,
                      double *loss_sum, int *n_targets) {
    rt_status st = RT_OK;
    int n = 0;
    *loss_sum = 0;
    if (n_targets) *n_targets = 0;
    RT_TRY(glm_upload(m, in));
    RT_TRY(glm_collect_targets(m, in, labels, &n));
    RT_TRY(glm_forward_body(m, in->B, in->T, pass));
    if (n == 0) return RT_OK;
    const bool backward = grad_scale > 0;
    RT_TRY(glm_output_xent(m, n, backward, grad_scale));
    double sum = 0;
    for (int i = 0; i < n; i++) sum += m->head.h_losses[i];
    *loss_sum = sum;
    if (n_targets) *n_targets = n;
    if (backward) RT_TRY(glm_output_backward(m, in->B, in->T, n, pass));
fail:
    return st;
}

rt_status glm_span_match(glm_model *m, const glm_inputs *in, const int32_t *labels, double *loss_sum, int32_t *match) {
    rt_status st = RT_OK;
    const mdl_pass pass = {0};
    int n = 0;
    float *stats = NULL;
    *loss_sum = 0;
    for (int b = 0; b < in->B; b++) match[b] = 0;
    RT_TRY(glm_upload(m, in));
    RT_TRY(glm_collect_targets(m, in, labels, &n));
    RT_TRY(glm_forward_body(m, in->B, in->T, &pass));
    if (n == 0) return RT_OK;
    RT_TRY(glm_output_xent(m, n, false, 0.0f));
    /* mdl_vocab_xent leaves each target's row maximum in stats[0, n) and its logit in [n, 2n) */
    stats = rt_xmalloc(2 * (size_t)n * sizeof(float));
    rt_to_host(m->be, stats, m->head.xent_stats, 2 * (size_t)n * sizeof(float));
    int32_t *miss = rt_xcalloc((size_t)in->B, sizeof *miss);
    for (int i = 0; i < n; i++) {
        *loss_sum += m->head.h_losses[i];
        miss[m->head.h_idx[i] / in->T] |= stats[n + i] < stats[i];
        match[m->head.h_idx[i] / in->T] = 1;
    }
    for (int b = 0; b < in->B; b++) match[b] &= !miss[b];
    free(miss);
fail:
    free(stats);
    return st;
}

rt_status glm_choice_step(glm_model *m, const glm_inputs *in, const int32_t *labels, int n_choices,
                          const int32_t *label, const mdl_pass *pass, float grad_scale, double *loss_sum, float *scores) {
    rt_status st = RT_OK;
    const int B = in->B, T = in->T, G_n = n_choices > 0 ? B / n_choices : 0;
    int n = 0;
    *loss_sum = 0;
    if (n_choices < 1 || n_choices > GLM_K_MAX || B % n_choices)
        return rt_errorf(RT_ERR_CONFIG, "GLM choices: %d rows do not form groups of %d choices", B, n_choices);
    for (int g = 0; g < G_n; g++)
        if (label[g] != -100 && (label[g] < 0 || label[g] >= n_choices))
            return rt_errorf(RT_ERR_FORMAT, "GLM choices: group %d: label %d is not one of its %d choices", g, label[g],
                             n_choices);
    RT_TRY(glm_upload(m, in));
    RT_TRY(glm_collect_targets(m, in, labels, &n));
    RT_TRY(glm_forward_body(m, B, T, pass));
    if (n == 0) RT_FAIL(RT_ERR_FORMAT, "GLM choices: no answer tokens in the batch");
    const bool backward = grad_scale > 0;
    RT_TRY(glm_output_xent(m, n, backward, 1.0f));
    /* a choice's score: the summed log-probability of its answer tokens */
    double sc[GLM_K_MAX * 64];
    RT_CHECK((size_t)B <= sizeof sc / sizeof *sc, "GLM choices: %d rows", B);
    for (int r = 0; r < B; r++) sc[r] = 0;
    for (int i = 0; i < n; i++) sc[m->head.h_idx[i] / T] -= m->head.h_losses[i];
    if (scores)
        for (int r = 0; r < B; r++) scores[r] = (float)sc[r];
    /* cross-entropy over each group; d loss / d (token loss t of choice c) = -(p_c - y_c) */
    double w[GLM_K_MAX * 64] = {0}, sum = 0;
    for (int g = 0; g < G_n; g++) {
        if (label[g] == -100) continue;
        const double *s = sc + (size_t)g * n_choices;
        double mx = s[0], z = 0;
        for (int k = 1; k < n_choices; k++) mx = s[k] > mx ? s[k] : mx;
        for (int k = 0; k < n_choices; k++) z += exp(s[k] - mx);
        sum += mx + log(z) - s[label[g]];
        for (int k = 0; k < n_choices; k++)
            w[g * n_choices + k] = -(exp(s[k] - mx) / z - (k == label[g] ? 1.0 : 0.0)) * grad_scale;
    }
    *loss_sum = sum;
    if (!backward) return RT_OK;
    for (int i = 0; i < n; i++) m->head.h_losses[i] = (float)w[m->head.h_idx[i] / T]; /* per-target weights */
    rt_to_device(m->be, m->head.losses, m->head.h_losses, (size_t)n * sizeof(float));
    rt_scale_rows(m->be, m->head.logits, m->head.losses, (size_t)n, m->vocab.local);
    RT_TRY(glm_output_backward(m, B, T, n, pass));
fail:
    return st;
}

rt_status glm_cloze_step(glm_model *m, const glm_inputs *in, const int32_t *at, const int32_t *cand, int K,
                         const int32_t *label, const mdl_pass *pass, float grad_scale, double *loss_sum, float *scores) {
    rt_status st = RT_OK;
    rt_backend *be = m->be;
    const int B = in->B, T = in->T, C = m->C, BK = B * K;
    *loss_sum = 0;
    if (K < 1 || K > GLM_K_MAX) return rt_errorf(RT_ERR_CONFIG, "GLM cloze: %d candidates (1 to %d)", K, GLM_K_MAX);
    RT_TRY(glm_upload(m, in));
    for (int b = 0; b < B; b++) {
        if (at[b] < 0 || at[b] >= T)
            RT_FAIL(RT_ERR_FORMAT, "GLM cloze: row %d: scoring position %d is outside [0, %d)", b, at[b], T);
        if (label[b] != -100 && (label[b] < 0 || label[b] >= K))
            RT_FAIL(RT_ERR_FORMAT, "GLM cloze: row %d: label %d is not one of its %d candidates", b, label[b], K);
        for (int k = 0; k < K; k++)
            if (cand[b * K + k] < 0 || cand[b * K + k] >= m->cfg.vocab_size)
                RT_FAIL(RT_ERR_FORMAT, "GLM cloze: row %d: candidate token %d is outside the vocab", b, cand[b * K + k]);
        m->head.h_idx[b] = b * T + at[b];
    }
    RT_TRY(glm_forward_body(m, B, T, pass));
    rt_to_device(be, m->head.row_idx, m->head.h_idx, (size_t)B * sizeof(int32_t));
    rt_to_device(be, m->cand_ids, cand, (size_t)BK * sizeof(int32_t));
    rt_gather_rows(be, m->head.rows, m->blocks.out, m->head.row_idx, B, C);
    /* the candidates' embedding rows on every rank, then every row against every candidate
     * (B x BK, tiny); row b's scores are its own K */
    RT_TRY(mdl_vocab_embedding_fwd(be, m->tp, m->cand, m->cand_ids, P(m->wte), (size_t)BK, C, m->vocab.start, m->vocab.local));
    mdl_col_linear_fwd(be, m->cand_scores, m->head.rows, m->cand, NULL, (size_t)B, C, BK);
    rt_to_host(be, m->h_scores, m->cand_scores, (size_t)B * BK * sizeof(float));
    double sum = 0;
    float *dscore = m->h_scores; /* reused in place: row b keeps only its own K, as gradients */
    for (int b = 0; b < B; b++) {
        float *row = m->h_scores + (size_t)b * BK, s[GLM_K_MAX];
        memcpy(s, row + (size_t)b * K, (size_t)K * sizeof(float));
        if (scores) memcpy(scores + (size_t)b * K, s, (size_t)K * sizeof(float));
        memset(row, 0, (size_t)BK * sizeof(float));
        if (label[b] == -100) continue;
        double mx = s[0], z = 0;
        for (int k = 1; k < K; k++) mx = s[k] > mx ? s[k] : mx;
        for (int k = 0; k < K; k++) z += exp((double)s[k] - mx);
        sum += mx + log(z) - s[label[b]];
        for (int k = 0; k < K; k++)
            dscore[(size_t)b * BK + (size_t)b * K + k] =
                (float)((exp((double)s[k] - mx) / z - (k == label[b] ? 1.0 : 0.0)) * grad_scale);
    }
    *loss_sum = sum;
    if (!(grad_scale > 0)) return RT_OK;
    /* scores = rows cand^T: d rows = dS cand, d cand = dS^T rows (into the owners' vocab rows) */
    rt_to_device(be, m->cand_scores, dscore, (size_t)B * BK * sizeof(float));
    rt_clear(be, m->dcand, (size_t)BK * C * sizeof(float));
    mdl_row_linear_bwd(be, m->head.drows, m->dcand, NULL, m->cand_scores, m->head.rows, m->cand, (size_t)B, C, BK);
    rt_embedding_bwd(be, G(m->wte), m->dcand, m->cand_ids, (size_t)BK, C, m->vocab.start, m->vocab.local);
    RT_TRY(glm_backward_from_rows(m, B, T, B, pass));
fail:
    return st;
}

/* m->head.logits (n rows of this rank's vocab columns) to the host as (n, vocab): the shards are
 * all-gathered over tp (a checking and generation path) and the padding columns dropped. */
rt_status glm_logits(glm_model *m, const glm_inputs *in, float *host_logits, float *host_hidden) {
    rt_status st = RT_OK;
    rt_backend *be = m->be;
    const size_t BT = (size_t)in->B * in->T;
    mdl_pass pass = {0};
    RT_TRY(glm_upload(m, in));
    RT_TRY(glm_forward_body(m, in->B, in->T, &pass));
    if (host_hidden) rt_to_host(be, host_hidden, m->blocks.out, BT * m->C * sizeof(float));
    if (!host_logits) return RT_OK;
    RT_TRY(mdl_lm_head_logits_rows(&m->head, BT));
    mdl_col_linear_fwd(be, m->head.logits, m->blocks.out, P(m->wte), NULL, BT, m->C, m->vocab.local);
    RT_TRY(mdl_lm_head_to_host(&m->head, BT, host_logits));
fail:
    return st;
}

rt_status glm_logits_at(glm_model *m, const glm_inputs *in, const int32_t *at, float *host_logits) {
    rt_status st = RT_OK;
    rt_backend *be = m->be;
    const int B = in->B, T = in->T;
    mdl_pass pass = {0};
    RT_TRY(glm_upload(m, in));
    for (int b = 0; b < B; b++) {
        if (at[b] < 0 || at[b] >= T) RT_FAIL(RT_ERR_CONFIG, "GLM: row %d: position %d outside [0, %d)", b, at[b], T);
        m->head.h_idx[b] = b * T + at[b];
    }
    RT_TRY(glm_forward_body(m, B, T, &pass));
    rt_to_device(be, m->head.row_idx, m->head.h_idx, (size_t)B * sizeof(int32_t));
    rt_gather_rows(be, m->head.rows, m->blocks.out, m->head.row_idx, B, m->C);
    RT_TRY(mdl_lm_head_logits_rows(&m->head, (size_t)B));
    mdl_col_linear_fwd(be, m->head.logits, m->head.rows, P(m->wte), NULL, (size_t)B, m->C, m->vocab.local);
    RT_TRY(mdl_lm_head_to_host(&m->head, (size_t)B, host_logits));
fail:
    return st;
}

rt_status glm_model_load_dir(glm_model *m, const char *dir, char *report, size_t report_size) {
    rt_status st = RT_OK;
    char weights[4096];
    const glm_config *cfg = &m->cfg;
    rt_comm *tp = m->tp;
    ckpt_load_report rep;
    ckpt_weights *w = NULL;
    /* FlagAI's model-parallel files (pytorch_model_00.bin, _01, ...) are joined by the GLM
     * table's tp rules; anything else is one weights source */
    int n_mp = 0;
    char mp[16][4200];
    while (n_mp < 16) {
        struct stat sb;
        snprintf(mp[n_mp], sizeof mp[n_mp], "%s/pytorch_model_%02d.bin", dir, n_mp);
        if (stat(mp[n_mp], &sb) != 0) break;
        n_mp++;
    }
    if (n_mp > 0) {
        const char *paths[16];
        for (int r = 0; r < n_mp; r++) paths[r] = mp[r];
        snprintf(weights, sizeof weights, "%s (%d model-parallel files)", mp[0], n_mp);
        RT_TRY(ckpt_weights_open_ranks(paths, n_mp, &ckpt_map_glm, cfg->num_attention_heads, cfg->vocab_size, &w));
        RT_TRY(ckpt_weights_load_params(w, &m->params, cfg->vocab_size, tp->rank, tp->size, NULL, &rep));
    } else {
        RT_TRY(ckpt_source_find_weights(dir, weights, sizeof weights));
        RT_TRY(ckpt_load_hf(weights, &ckpt_map_glm, &m->params, cfg->vocab_size, cfg->num_attention_heads, tp->rank,
                            tp->size, NULL, &rep));
    }
    if (rep.missing)
        RT_FAIL(RT_ERR_FORMAT, "%s: no tensor '%s'%s (is this a GLM checkpoint with this config?)", weights,
                rep.first_missing, rep.missing > 1 ? " and others" : "");
    if (report)
        snprintf(report, report_size, "%d tensors loaded%s%s", rep.loaded,
                 rep.unused ? "; tensors that map to no parameter, the first: " : "", rep.unused ? rep.first_unused : "");
fail:
    ckpt_weights_close(w);
    return st;
}

rt_status glm_model_from_dir(const char *dir, rt_backend *be, rt_comm *tp, int max_B, int max_T, glm_model **out,
                             char *report, size_t report_size) {
    rt_status st = RT_OK;
    char path[4096];
    glm_config cfg;
    *out = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    RT_TRY(glm_config_load(path, &cfg));
    RT_TRY(glm_model_init(&cfg, be, tp, max_B, max_T, 0, out));
    RT_TRY(glm_model_load_dir(*out, dir, report, report_size));
    return RT_OK;
fail:
    glm_model_free(*out);
    *out = NULL;
    return st;
}

double glm_train_flops(const glm_model *m, int B, int T, int n_targets) {
    return mdl_stack_train_flops(&m->blocks, B, T, 0) +
           mdl_head_train_flops(n_targets, m->cfg.hidden_size, m->cfg.vocab_size);
}
