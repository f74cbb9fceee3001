/* GLM forward and backward over the shared pre-LN stack (see glm.h). Activations for the
 * largest batch are allocated once at init; a step allocates nothing. */
#include "models/glm/glm.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_source.h"
#include "checkpoints/ckpt_tp.h"
#include "checkpoints/ckpt_weights.h"
#include "models/layers/flops.h"
#include "models/layers/hf_config.h"
#include "models/layers/parallel.h"
#include "models/layers/stage_pipe.h"
#include "runtime/base/rt_arena.h"
#include "models/layers/lora.h"
#include "runtime/train/rt_pipe.h"

#include "models/glm/glm_internal.h"

static const mdl_stack_names glm_block_names = {"transformer.layers.%d.input_layernorm.weight",
                                                "transformer.layers.%d.input_layernorm.bias",
                                                "transformer.layers.%d.attention.query_key_value.weight",
                                                "transformer.layers.%d.attention.query_key_value.bias",
                                                "transformer.layers.%d.attention.dense.weight",
                                                "transformer.layers.%d.attention.dense.bias",
                                                "transformer.layers.%d.post_attention_layernorm.weight",
                                                "transformer.layers.%d.post_attention_layernorm.bias",
                                                "transformer.layers.%d.mlp.dense_h_to_4h.weight",
                                                "transformer.layers.%d.mlp.dense_h_to_4h.bias",
                                                "transformer.layers.%d.mlp.dense_4h_to_h.weight",
                                                "transformer.layers.%d.mlp.dense_4h_to_h.bias",
                                                "transformer.final_layernorm.weight",
                                                "transformer.final_layernorm.bias"};

static int glm_add(glm_model *m, const char *name, int64_t d0, int64_t d1, bool no_decay, rt_init_kind init,
                   float std) {
    int64_t shape[2] = {d0, d1};
    return rt_params_add(&m->params, name, d1 ? 2 : 1, shape, ckpt_map_tp_rule(&ckpt_map_glm, name), no_decay, init,
                         std);
}

/* The stage's parameters (the whole model with one stage): the embeddings on the first, its
 * layers, the final LayerNorm and, when it is not also the first, the tied output's copy of
 * word_embeddings on the last (Megatron keeps one on each end). */
static void glm_declare_params(glm_model *m, int first_block, int n_blocks) {
    const glm_config *c = &m->cfg;
    const float std = c->init_std;
    const bool first = mdl_stage_is_first(m->stage), last = mdl_stage_is_last(m->stage);
    m->wte = m->wpe = m->wbpe = -1;
    if (first) {
        m->wte = glm_add(m, "word_embeddings.weight", m->vocab.local, m->C, false, RT_INIT_NORMAL, std);
        m->params.specs[m->wte].vocab_rows = c->vocab_size; /* checkpoints store the unpadded table */
        m->params.specs[m->wte].tied = m->stage.count > 1;  /* with the output layer's copy on the last stage */
        m->wpe = glm_add(m, "transformer.position_embeddings.weight", m->P, m->C, false, RT_INIT_NORMAL, std);
        if (c->block_position_encoding)
            m->wbpe =
                glm_add(m, "transformer.block_position_embeddings.weight", m->P, m->C, false, RT_INIT_NORMAL, std);
    }
    /* FlagAI: output layers (attention dense, dense_4h_to_h) scaled by 1/sqrt(2 num_layers) */
    mdl_stack_config bc = {.n_layer = n_blocks,
                           .C = m->C,
                           .n_head = c->num_attention_heads,
                           .F = 4 * c->hidden_size,
                           .norm = MDL_NORM_LAYER,
                           .norm_eps = c->layernorm_epsilon,
                           .final_norm = last,
                           .act = RT_ACT_GELU_TANH,
                           .attn_pdrop = c->attention_dropout_prob,
                           .resid_pdrop = c->output_dropout_prob,
                           .emb_pdrop = first ? c->embedding_dropout_prob : 0,
                           .checkpoint_layers = c->checkpoint_layers,
                           .layer_offset = first_block,
                           .layers_total = c->num_layers,
                           .lora = c->lora};
    mdl_stack_compact_sites(&bc);
    mdl_stack_init(&m->blocks, &bc, m->be, m->tp, &m->params);
    mdl_stack_declare_named(&m->blocks, &glm_block_names, &ckpt_map_glm, std, std / sqrtf(2.0f * (float)c->num_layers));
    if (last && !first) {
        m->wte = glm_add(m, "word_embeddings.weight", m->vocab.local, m->C, false, RT_INIT_NORMAL, std);
        m->params.specs[m->wte].vocab_rows = c->vocab_size;
        m->params.specs[m->wte].copy = m->params.specs[m->wte].tied = true;
    }
    mdl_lora_freeze_base(&m->params, c->lora, &ckpt_map_glm);
}

/* A stage's parameters draw the init streams the whole model's same-named ones draw: their
 * indices in its declaration, found by declaring it without allocating. */
static void glm_whole_model_streams(glm_model *m) {
    glm_model whole = *m;
    whole.stage = mdl_stage_whole();
    rt_params_init(&whole.params, m->be);
    glm_declare_params(&whole, 0, m->cfg.num_layers);
    rt_params_streams_from(&m->params, &whole.params);
    rt_params_free(&whole.params);
    mdl_stack_free(&whole.blocks);
}

/* Lays out the activation buffers in the arena (measuring when a->base is NULL); the output
 * layer's buffers on the last stage only. */
static void glm_layout(glm_model *m, rt_arena *a) {
    const size_t BT = m->max_BT, C = (size_t)m->C;
    const size_t B = mdl_stage_is_last(m->stage) ? (size_t)m->max_B : 0;
    const size_t f = sizeof(float), i = sizeof(int32_t), K = GLM_K_MAX;
    mdl_stack_layout(&m->blocks, a, m->max_B, m->max_T, 0, NULL);
    mdl_lm_head_layout(&m->head, a);
    m->cand = rt_arena_take(a, B * K * C, f);
    m->dcand = rt_arena_take(a, B * K * C, f);
    m->cand_scores = rt_arena_take(a, B * B * K, f);
    m->ids = rt_arena_take(a, BT, i);
    m->pos = rt_arena_take(a, BT, i);
    m->bpos = rt_arena_take(a, BT, i);
    m->sep = rt_arena_take(a, (size_t)m->max_B, i);
    m->cand_ids = rt_arena_take(a, B * K, i);
}

/* Points every activation buffer at slot k's copy (models/layers/stage_pipe.h). */
static void glm_use_slot(void *model, int k) {
    glm_model *m = model;
    rt_arena arena = {.base = (char *)m->act_block + (size_t)k * m->act_bytes};
    glm_layout(m, &arena);
}

/* The widest per-token row of any activation buffer (mdl_check_activations): the blocks' 4 C MLP
 * and num_heads x T attention probabilities, the logits' vocab, the candidates' (B, K, C) and
 * (B, B, K) rows. */
static uint64_t glm_act_width(const glm_config *c, int max_B, int max_T) {
    uint64_t w = mdl_size_max(4 * (uint64_t)c->hidden_size, (uint64_t)c->num_attention_heads * (uint64_t)max_T);
    w = mdl_size_max(w, (uint64_t)ckpt_tp_padded_vocab(c->vocab_size, 1));
    return mdl_size_max(w, GLM_K_MAX * mdl_size_max((uint64_t)c->hidden_size, (uint64_t)max_B));
}

static rt_status glm_stage_pipe(glm_model *m, int max_micro);

/* m's shape on tp rank tp->rank and stage pp->rank, nothing allocated: the config, the position
 * rows, the vocab shard, and the stage's blocks [*first_block, + *n_blocks). */
static rt_status glm_model_shape(glm_model *m, const glm_config *c, rt_backend *be, rt_comm *tp, rt_comm *pp,
                                 int *first_block, int *n_blocks) {
    m->cfg = *c;
    if (c->lora) { /* m's own copy, which cfg.lora then points at */
        ckpt_peft_config_copy(&m->lora, c->lora);
        m->cfg.lora = &m->lora;
    }
    m->be = be;
    m->tp = tp;
    m->pp = pp;
    m->stage = (mdl_stage){pp->rank, pp->size};
    m->P = c->block_position_encoding ? c->max_sequence_length + 1 : c->max_sequence_length;
    m->C = c->hidden_size;
    m->vocab = mdl_vocab_shard(c->vocab_size, tp);
    return mdl_stage_blocks(m->stage, c->num_layers, "GLM", first_block, n_blocks);
}

rt_status glm_params_layout(const glm_config *c, rt_backend *be, rt_comm *tp, rt_params *out) {
    rt_status st = RT_OK;
    glm_model *m = rt_xcalloc(1, sizeof *m);
    int first_block = 0, n_blocks = 0;
    memset(out, 0, sizeof *out);
    RT_TRY(glm_config_validate(c, tp->size));
    RT_TRY(glm_model_shape(m, c, be, tp, rt_comm_self(), &first_block, &n_blocks));
    rt_params_init(&m->params, be);
    glm_declare_params(m, first_block, n_blocks);
    RT_TRY(rt_params_layout(&m->params));
    *out = m->params;
    m->params = (rt_params){0}; /* out owns the specs now */
fail:
    rt_params_free(&m->params);
    mdl_stack_free(&m->blocks);
    ckpt_peft_config_free(&m->lora);
    free(m);
    return st;
}

rt_status glm_model_init(const glm_config *c, rt_backend *be, rt_comm *tp, int max_B, int max_T, uint64_t seed,
                         glm_model **out) {
    return glm_model_init_stage(c, be, tp, rt_comm_self(), 1, max_B, max_T, seed, out);
}

rt_status glm_model_init_stage(const glm_config *c, rt_backend *be, rt_comm *tp, rt_comm *pp, int max_micro, int max_B,
                               int max_T, uint64_t seed, glm_model **out) {
    rt_status st = RT_OK;
    glm_model *m = rt_xcalloc(1, sizeof *m);
    const mdl_stage stage = {pp->rank, pp->size};
    int first_block = 0, n_blocks = 0;
    *out = NULL;
    RT_TRY(glm_config_validate(c, tp->size));
    RT_TRY(glm_model_shape(m, c, be, tp, pp, &first_block, &n_blocks));
    if (max_B < 1 || max_T < 1) RT_FAIL(RT_ERR_CONFIG, "GLM: batch size %d and length %d must be >= 1", max_B, max_T);
    if (max_T > m->P)
        RT_FAIL(RT_ERR_CONFIG, "GLM: max length %d exceeds the model's max_sequence_length %d", max_T,
                c->max_sequence_length);
    RT_TRY(mdl_check_activations("GLM activations", (uint64_t)c->num_layers, (uint64_t)max_B, (uint64_t)max_T,
                                 glm_act_width(c, max_B, max_T), "lower --batch-size or --max-len"));
    m->max_micro = max_micro;
    m->max_B = max_B;
    m->max_T = max_T;
    m->max_BT = (size_t)max_B * (size_t)max_T;
    rt_params_init(&m->params, be);
    glm_declare_params(m, first_block, n_blocks);
    if (stage.count > 1) glm_whole_model_streams(m);
    RT_TRY(rt_params_alloc(&m->params));
    rt_params_init_weights(&m->params, seed);
    if (m->wte >= 0) mdl_vocab_clear_padding(be, &m->vocab, P(m->wte), m->C);
    mdl_lm_head_init(&m->head, be, tp, &m->vocab, m->C, c->vocab_size, mdl_stage_is_last(stage) ? m->max_BT : 0, "GLM");
    rt_arena arena = {0};
    glm_layout(m, &arena);
    m->act_bytes = (arena.used + 63) & ~(size_t)63;
    m->act_slots = stage.count > 1 && !c->pp_recompute ? rt_pipe_in_flight(stage.index, stage.count, max_micro) : 1;
    RT_TRY(rt_backend_alloc(be, m->act_bytes * (size_t)m->act_slots,
                            stage.count > 1 ? "GLM activations (lower --batch-size or --max-len, or add --pp-recompute "
                                              "or --checkpoint-activations)"
                                            : "GLM activations (lower --batch-size or --max-len, or add "
                                              "--checkpoint-activations)",
                            &m->act_block));
    for (int k = m->act_slots - 1; k >= 0; k--) { /* every slot's head mask; slot 0 last */
        glm_use_slot(m, k);
        RT_TRY(mdl_lm_head_ready(&m->head));
    }
    m->h_scores = rt_xmalloc((size_t)max_B * max_B * GLM_K_MAX * sizeof(float));
    if (stage.count > 1) RT_TRY(glm_stage_pipe(m, max_micro));
    *out = m;
    return RT_OK;
fail:
    glm_model_free(m);
    return st;
}

void glm_model_free(glm_model *m) {
    if (!m) return;
    mdl_stage_pipe_free(m->pipe);
    free(m->pipe_views);
    mdl_lm_head_free(&m->head);
    if (m->act_block) rt_free_device(m->be, m->act_block);
    rt_params_free(&m->params);
    mdl_stack_free(&m->blocks);
    free(m->h_scores);
    ckpt_peft_config_free(&m->lora);
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
            if (in->pos[i] < 0 || in->pos[i] >= m->P ||
                (m->wbpe >= 0 && (in->block_pos[i] < 0 || in->block_pos[i] >= m->P)))
                return rt_errorf(RT_ERR_FORMAT,
                                 "GLM: row %d position %d: position %d or block position %d is outside "
                                 "[0, %d)",
                                 b, t, in->pos[i], m->wbpe >= 0 ? in->block_pos[i] : 0, m->P);
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

static mdl_stack_mask glm_mask(const void *model) {
    const glm_model *m = model;
    return (mdl_stack_mask){.causal = true, .prefix = m->sep};
}

/* The uploaded batch's embeddings (words and both position tables) into the blocks' residual 0. */
static rt_status glm_embed(glm_model *m, size_t BT) {
    rt_backend *be = m->be;
    const int C = m->C;
    float *x = mdl_stack_input(&m->blocks);
    rt_status st = mdl_vocab_embedding_fwd(be, m->tp, x, m->ids, P(m->wte), BT, C, m->vocab.start, m->vocab.local);
    if (st != RT_OK) return st;
    rt_embedding_fwd(be, x, m->pos, P(m->wpe), BT, C, 0, m->P, true);
    if (m->wbpe >= 0) rt_embedding_fwd(be, x, m->bpos, P(m->wbpe), BT, C, 0, m->P, true);
    return RT_OK;
}

static void glm_embed_bwd(glm_model *m, const float *demb, size_t BT) {
    rt_backend *be = m->be;
    const int C = m->C;
    rt_embedding_bwd(be, G(m->wte), demb, m->ids, BT, C, m->vocab.start, m->vocab.local);
    rt_embedding_bwd(be, G(m->wpe), demb, m->pos, BT, C, 0, m->P);
    if (m->wbpe >= 0) rt_embedding_bwd(be, G(m->wbpe), demb, m->bpos, BT, C, 0, m->P);
}

static rt_status glm_blocks_fwd(glm_model *m, int B, int T, const mdl_pass *pass) {
    mdl_stack_mask mask = glm_mask(m);
    return mdl_stack_forward(&m->blocks, B, T, &mask, pass);
}

static rt_status glm_blocks_bwd(glm_model *m, int B, int T, const mdl_pass *pass, const float **demb) {
    mdl_stack_mask mask = glm_mask(m);
    return mdl_stack_backward(&m->blocks, B, T, &mask, pass, mdl_stack_dout(&m->blocks), demb);
}

/* Embeddings through the final LayerNorm into m->blocks.out. */
rt_status glm_forward_body(glm_model *m, int B, int T, const mdl_pass *pass) {
    rt_status st = glm_embed(m, (size_t)B * T);
    return st == RT_OK ? glm_blocks_fwd(m, B, T, pass) : st;
}

/* Backward from dL/d(final LayerNorm output) in mdl_stack_dout(&m->blocks). */
static rt_status glm_backward_body(glm_model *m, int B, int T, const mdl_pass *pass) {
    const float *demb = NULL;
    rt_status st = glm_blocks_bwd(m, B, T, pass, &demb);
    if (st == RT_OK) glm_embed_bwd(m, demb, (size_t)B * T);
    return st;
}

/* ---- the heads (glm_task): checked on every stage, staged and run on the last ---- */

/* A task's head inputs against its batch and the model: host checks only, so that every
 * pipeline stage refuses the same batch before any work. */
static rt_status glm_task_check(const glm_model *m, const glm_task *t) {
    const int B = t->in.B, T = t->in.T, K = t->K, V = m->cfg.vocab_size;
    switch (t->kind) {
    case GLM_HEAD_LM:
    case GLM_HEAD_SPAN_MATCH: break; /* labels: mdl_lm_head_collect, below */
    case GLM_HEAD_CHOICE: {
        const int G_n = K > 0 ? B / K : 0;
        if (K < 1 || K > GLM_K_MAX || B % K)
            return rt_errorf(RT_ERR_CONFIG, "GLM choices: %d rows do not form groups of %d choices", B, K);
        for (int g = 0; g < G_n; g++)
            if (t->label[g] != -100 && (t->label[g] < 0 || t->label[g] >= K))
                return rt_errorf(RT_ERR_FORMAT, "GLM choices: group %d: label %d is not one of its %d choices", g,
                                 t->label[g], K);
        size_t answers = 0;
        for (size_t i = 0; i < (size_t)B * T; i++) answers += t->labels[i] != -100;
        if (answers == 0) return rt_errorf(RT_ERR_FORMAT, "GLM choices: no answer tokens in the batch");
        break;
    }
    case GLM_HEAD_CLOZE:
        if (K < 1 || K > GLM_K_MAX) return rt_errorf(RT_ERR_CONFIG, "GLM cloze: %d candidates (1 to %d)", K, GLM_K_MAX);
        for (int b = 0; b < B; b++) {
            if (t->at[b] < 0 || t->at[b] >= T)
                return rt_errorf(RT_ERR_FORMAT, "GLM cloze: row %d: scoring position %d is outside [0, %d)", b,
                                 t->at[b], T);
            if (t->label[b] != -100 && (t->label[b] < 0 || t->label[b] >= K))
                return rt_errorf(RT_ERR_FORMAT, "GLM cloze: row %d: label %d is not one of its %d candidates", b,
                                 t->label[b], K);
            for (int k = 0; k < K; k++)
                if (t->cand[b * K + k] < 0 || t->cand[b * K + k] >= V)
                    return rt_errorf(RT_ERR_FORMAT, "GLM cloze: row %d: candidate token %d is outside the vocab", b,
                                     t->cand[b * K + k]);
        }
        break;
    }
    if (t->kind != GLM_HEAD_CLOZE) /* the labels the output layer predicts, as mdl_lm_head_collect checks them */
        for (size_t i = 0; i < (size_t)B * T; i++)
            if (t->labels[i] != -100 && (t->labels[i] < 0 || t->labels[i] >= V))
                return rt_errorf(RT_ERR_FORMAT, "GLM: label %d at row %d position %d is outside the vocab [0, %d)",
                                 t->labels[i], (int)(i / (size_t)T), (int)(i % (size_t)T), V);
    return RT_OK;
}

/* The rows that reach the output layer, to the device (after glm_upload): the labelled
 * positions, or each cloze row's scoring position and its candidates. */
static rt_status glm_head_stage(glm_model *m, const glm_task *t) {
    const int B = t->in.B, T = t->in.T;
    if (t->kind != GLM_HEAD_CLOZE) return mdl_lm_head_collect(&m->head, t->labels, (size_t)B * T, T, &m->head_n);
    for (int b = 0; b < B; b++) m->head.h_idx[b] = b * T + t->at[b];
    rt_to_device(m->be, m->head.row_idx, m->head.h_idx, (size_t)B * sizeof(int32_t));
    rt_to_device(m->be, m->cand_ids, t->cand, (size_t)B * t->K * sizeof(int32_t));
    m->head_n = B;
    return RT_OK;
}

/* The n collected rows through the tied output layer and the vocab-parallel cross-entropy (the
 * per-row losses stay on the device: mdl_lm_head_losses reads them); with grad_scale > 0 their
 * gradients too, each row's scaled by m->head.row_weights when weighted. */
static rt_status glm_output_xent(glm_model *m, int n, float grad_scale, bool weighted) {
    rt_status st;
    if (grad_scale > 0) { /* (a gradient is only there to name in a backward: ZeRO-3) */
        const mdl_lm_head_grad grad = {
            .dwte = G(m->wte), .grad_scale = grad_scale, .row_weights = weighted ? m->head.row_weights : NULL};
        st = mdl_lm_head_xent(&m->head, m->blocks.out, P(m->wte), n, &grad);
    } else {
        st = mdl_lm_head_xent(&m->head, m->blocks.out, P(m->wte), n, NULL);
    }
    return st;
}

/* The span check (glm_span_match): each labelled token against its row's maximum. */
static rt_status glm_head_span_match(glm_model *m, const glm_task *t, double *loss_sum, float *scores) {
    const int B = t->in.B, T = t->in.T, n = m->head_n;
    int32_t *miss = rt_xcalloc((size_t)B, sizeof *miss), *any = rt_xcalloc((size_t)B, sizeof *any);
    float *stats = NULL;
    rt_status st = n > 0 ? glm_output_xent(m, n, 0.0f, false) : RT_OK;
    if (st == RT_OK && n > 0) {
        (void)mdl_lm_head_losses(&m->head, n, NULL);
        /* each target's row maximum in stats[0, n), its logit in [n, 2n) */
        stats = rt_xmalloc(2 * (size_t)n * sizeof(float));
        mdl_lm_head_target_stats(&m->head, n, stats, stats + n);
        for (int i = 0; i < n; i++) {
            *loss_sum += m->head.h_losses[i];
            miss[m->head.h_idx[i] / T] |= stats[n + i] < stats[i];
            any[m->head.h_idx[i] / T] = 1;
        }
    }
    for (int b = 0; scores && b < B; b++) scores[b] = any[b] && !miss[b] ? 1.0f : 0.0f;
    free(stats);
    free(miss);
    free(any);
    return st;
}

/* Multi-token cloze: each choice's summed log-probability, cross-entropy over each group; with
 * a gradient, the head's dL/dlogits weighted per choice. */
static rt_status glm_head_choice(glm_model *m, const glm_task *t, float grad_scale, double *loss_sum, float *scores) {
    rt_status st = RT_OK;
    const int B = t->in.B, T = t->in.T, K = t->K, G_n = B / K, n = m->head_n;
    const bool backward = grad_scale > 0;
    RT_TRY(glm_output_xent(m, n, 0.0f, false));
    (void)mdl_lm_head_losses(&m->head, n, NULL); /* the choices' scores weigh the backward: read now */
    double sc[GLM_K_MAX * 64];
    RT_CHECK((size_t)B <= sizeof sc / sizeof *sc, "GLM choices: %d rows", B);
    for (int r = 0; r < B; r++) sc[r] = 0;
    for (int i = 0; i < n; i++) sc[m->head.h_idx[i] / T] -= m->head.h_losses[i];
    if (scores)
        for (int r = 0; r < B; r++) scores[r] = (float)sc[r];
    /* cross-entropy over each group; d loss / d (token loss t of choice c) = -(p_c - y_c) */
    double w[GLM_K_MAX * 64] = {0}, sum = 0;
    for (int g = 0; g < G_n; g++) {
        if (t->label[g] == -100) continue;
        const double *s = sc + (size_t)g * K;
        double mx = s[0], z = 0;
        for (int k = 1; k < K; k++) mx = s[k] > mx ? s[k] : mx;
        for (int k = 0; k < K; k++) z += exp(s[k] - mx);
        sum += mx + log(z) - s[t->label[g]];
        for (int k = 0; k < K; k++) w[g * K + k] = -(exp(s[k] - mx) / z - (k == t->label[g] ? 1.0 : 0.0)) * grad_scale;
    }
    *loss_sum = sum;
    if (!backward) return RT_OK;
    /* the gradient: the tokens' cross-entropy again, each row's dL/dlogits times its choice's
     * weight; the weights go up through h_losses */
    for (int i = 0; i < n; i++) m->head.h_losses[i] = (float)w[m->head.h_idx[i] / T];
    rt_to_device(m->be, m->head.row_weights, m->head.h_losses, (size_t)n * sizeof(float));
    RT_TRY(glm_output_xent(m, n, 1.0f, true));
fail:
    return st;
}

/* Single-token cloze: every row against every candidate's embedding (B x BK, tiny), row b's own
 * K scored; with a gradient, dL/dscores stays in h_scores for glm_head_bwd. */
static rt_status glm_head_cloze(glm_model *m, const glm_task *t, float grad_scale, double *loss_sum, float *scores) {
    rt_status st = RT_OK;
    rt_backend *be = m->be;
    const int B = t->in.B, C = m->C, K = t->K, BK = B * K;
    rt_gather_rows(be, m->head.rows, m->blocks.out, m->head.row_idx, B, C);
    RT_TRY(mdl_vocab_embedding_fwd(be, m->tp, m->cand, m->cand_ids, P(m->wte), (size_t)BK, C, m->vocab.start,
                                   m->vocab.local));
    mdl_col_linear_fwd(be, rt_xf(m->cand_scores), rt_xf(m->head.rows), m->cand, NULL, (size_t)B, C, BK);
    rt_to_host(be, m->h_scores, m->cand_scores, (size_t)B * BK * sizeof(float));
    double sum = 0;
    float *dscore = m->h_scores; /* reused in place: row b keeps only its own K, as gradients */
    for (int b = 0; b < B; b++) {
        float *row = m->h_scores + (size_t)b * BK, s[GLM_K_MAX];
        memcpy(s, row + (size_t)b * K, (size_t)K * sizeof(float));
        if (scores) memcpy(scores + (size_t)b * K, s, (size_t)K * sizeof(float));
        memset(row, 0, (size_t)BK * sizeof(float));
        if (t->label[b] == -100) continue;
        double mx = s[0], z = 0;
        for (int k = 1; k < K; k++) mx = s[k] > mx ? s[k] : mx;
        for (int k = 0; k < K; k++) z += exp((double)s[k] - mx);
        sum += mx + log(z) - s[t->label[b]];
        for (int k = 0; k < K; k++)
            dscore[(size_t)b * BK + (size_t)b * K + k] =
                (float)((exp((double)s[k] - mx) / z - (k == t->label[b] ? 1.0 : 0.0)) * grad_scale);
    }
    *loss_sum = sum;
fail:
    return st;
}

/* The head over m->blocks.out: the summed loss, scores, and with grad_scale > 0 what
 * glm_head_bwd needs. The LM head's loss is only queued: glm_lm_loss gives it. */
static rt_status glm_head_fwd(glm_model *m, const glm_task *t, float grad_scale, double *loss_sum, float *scores) {
    *loss_sum = 0;
    switch (t->kind) {
    case GLM_HEAD_CLOZE: return glm_head_cloze(m, t, grad_scale, loss_sum, scores);
    case GLM_HEAD_CHOICE: return glm_head_choice(m, t, grad_scale, loss_sum, scores);
    case GLM_HEAD_SPAN_MATCH: return glm_head_span_match(m, t, loss_sum, scores);
    case GLM_HEAD_LM: break;
    }
    const int n = m->head_n;
    if (n == 0) return RT_OK;
    return glm_output_xent(m, n, grad_scale, false);
}

/* The LM head's summed loss (0 for the other heads, whose glm_head_fwd gave it). Reading waits for
 * the device: a step calls it once its backward is queued. */
static double glm_lm_loss(glm_model *m, const glm_task *t) {
    return t->kind == GLM_HEAD_LM ? mdl_lm_head_losses(&m->head, m->head_n, NULL) : 0.0;
}

/* The head's backward into mdl_stack_dout (dL/d(final LayerNorm output)) and wte's gradient. */
static rt_status glm_head_bwd(glm_model *m, const glm_task *t) {
    rt_backend *be = m->be;
    const int B = t->in.B, C = m->C, BK = B * t->K;
    const size_t BT = (size_t)B * t->in.T;
    float *dout = mdl_stack_dout(&m->blocks);
    if (t->kind == GLM_HEAD_SPAN_MATCH) return rt_errorf(RT_ERR_CONFIG, "GLM: the span check has no backward");
    if (t->kind != GLM_HEAD_CLOZE) {
        if (m->head_n > 0) {
            mdl_lm_head_backward(&m->head, dout, BT, m->head_n);
            return RT_OK;
        }
        rt_clear(be, dout, BT * C * sizeof(float)); /* nothing predicted: the stages still pass a gradient back */
        return RT_OK;
    }
    /* scores = rows cand^T: d rows = dS cand, d cand = dS^T rows (into the owners' vocab rows) */
    rt_to_device(be, m->cand_scores, m->h_scores, (size_t)B * BK * sizeof(float));
    rt_clear(be, m->dcand, (size_t)BK * C * sizeof(float));
    mdl_row_linear_bwd(be, rt_xf(m->head.drows), false, m->dcand, NULL, rt_xf(m->cand_scores), rt_xf(m->head.rows),
                       m->cand, (size_t)B, C, BK);
    rt_embedding_bwd(be, G(m->wte), m->dcand, m->cand_ids, (size_t)BK, C, m->vocab.start, m->vocab.local);
    rt_clear(be, dout, BT * C * sizeof(float));
    rt_scatter_rows_add(be, dout, rt_xf(m->head.drows), m->head.row_idx, (size_t)B, C);
    return RT_OK;
}

static rt_status glm_pipe_eval(glm_model *m, const glm_task *t, double *loss_sum, float *scores);

rt_status glm_task_step(glm_model *m, const glm_task *t, const mdl_pass *pass, float grad_scale, double *loss_sum,
                        float *scores) {
    rt_status st = RT_OK;
    const int B = t->in.B, T = t->in.T;
    *loss_sum = 0;
    RT_TRY(glm_task_check(m, t));
    if (m->stage.count > 1) {
        if (grad_scale > 0) RT_FAIL(RT_ERR_CONFIG, "GLM: a pipeline stage trains through glm_pipe_step");
        return glm_pipe_eval(m, t, loss_sum, scores);
    }
    RT_TRY(glm_upload(m, &t->in));
    RT_TRY(glm_head_stage(m, t));
    RT_TRY(glm_forward_body(m, B, T, pass));
    RT_TRY(glm_head_fwd(m, t, grad_scale, loss_sum, scores));
    if (grad_scale > 0 && !(t->kind == GLM_HEAD_LM && m->head_n == 0)) {
        RT_TRY(glm_head_bwd(m, t));
        RT_TRY(glm_backward_body(m, B, T, pass));
    }
    *loss_sum += glm_lm_loss(m, t); /* with the backward queued */
fail:
    return st;
}

rt_status glm_lm_step(glm_model *m, const glm_inputs *in, const int32_t *labels, const mdl_pass *pass, float grad_scale,
                      double *loss_sum, int *n_targets) {
    const glm_task t = {.in = *in, .kind = GLM_HEAD_LM, .labels = labels};
    m->head_n = 0;
    rt_status st = glm_task_step(m, &t, pass, grad_scale, loss_sum, NULL);
    if (n_targets) *n_targets = st == RT_OK ? m->head_n : 0;
    return st;
}

rt_status glm_span_match(glm_model *m, const glm_inputs *in, const int32_t *labels, double *loss_sum, int32_t *match) {
    const glm_task t = {.in = *in, .kind = GLM_HEAD_SPAN_MATCH, .labels = labels};
    float *scores = rt_xcalloc((size_t)in->B, sizeof *scores);
    const mdl_pass pass = {0};
    rt_status st = glm_task_step(m, &t, &pass, 0.0f, loss_sum, scores);
    for (int b = 0; b < in->B; b++) match[b] = st == RT_OK && scores[b] > 0.5f;
    free(scores);
    return st;
}

rt_status glm_choice_step(glm_model *m, const glm_inputs *in, const int32_t *labels, int n_choices,
                          const int32_t *label, const mdl_pass *pass, float grad_scale, double *loss_sum,
                          float *scores) {
    const glm_task t = {.in = *in, .kind = GLM_HEAD_CHOICE, .labels = labels, .K = n_choices, .label = label};
    return glm_task_step(m, &t, pass, grad_scale, loss_sum, scores);
}

rt_status glm_cloze_step(glm_model *m, const glm_inputs *in, const int32_t *at, const int32_t *cand, int K,
                         const int32_t *label, const mdl_pass *pass, float grad_scale, double *loss_sum,
                         float *scores) {
    const glm_task t = {.in = *in, .kind = GLM_HEAD_CLOZE, .at = at, .cand = cand, .K = K, .label = label};
    return glm_task_step(m, &t, pass, grad_scale, loss_sum, scores);
}

/* ---- the model as a pipeline stage (models/layers/stage_pipe.h) ---- */

/* The runner hands back the views glm_pipe_step made; micro-batch k's task sits beside view k. */
static const glm_task *glm_sp_task(const glm_model *m, const rt_batch *b) { return &m->pipe_tasks[b - m->pipe_views]; }

static rt_status glm_sp_upload(void *model, const rt_batch *b) {
    glm_model *m = model;
    const glm_task *t = glm_sp_task(m, b);
    rt_status st = glm_upload(m, &t->in);
    m->head_n = 0;
    return st == RT_OK && mdl_stage_is_last(m->stage) ? glm_head_stage(m, t) : st;
}
static rt_status glm_sp_embed(void *model, const rt_batch *b) { return glm_embed(model, (size_t)b->B * b->T); }
static void glm_sp_embed_bwd(void *model, const rt_batch *b, const float *demb) {
    glm_embed_bwd(model, demb, (size_t)b->B * b->T);
}
static rt_status glm_sp_head_fwd(void *model, const rt_batch *b, const mdl_pass *pass, float grad_scale,
                                 double *loss_sum, float *host_logits) {
    (void)pass; /* GLM's output layer has no dropout */
    glm_model *m = model;
    const glm_task *t = glm_sp_task(m, b);
    rt_status st = glm_head_fwd(m, t, grad_scale, loss_sum, host_logits);
    if (st == RT_OK) *loss_sum += glm_lm_loss(m, t);
    return st;
}
static rt_status glm_sp_head_bwd(void *model, const rt_batch *b, const mdl_pass *pass) {
    (void)pass;
    return glm_head_bwd(model, glm_sp_task(model, b));
}
static size_t glm_sp_result_floats(void *model, const rt_batch *b) {
    const glm_task *t = glm_sp_task(model, b);
    return t->kind == GLM_HEAD_CLOZE ? (size_t)b->B * t->K : t->kind == GLM_HEAD_LM ? 0 : (size_t)b->B;
}

static rt_status glm_stage_pipe(glm_model *m, int max_micro) {
    const mdl_stage_model sm = {.model = m,
                                .family = "GLM",
                                .be = m->be,
                                .pp = m->pp,
                                .blocks = &m->blocks,
                                .C = m->C,
                                .max_B = m->max_B,
                                .max_BT = m->max_BT,
                                .upload = glm_sp_upload,
                                .embed = glm_sp_embed,
                                .embed_bwd = glm_sp_embed_bwd,
                                .mask = glm_mask,
                                .head_fwd = glm_sp_head_fwd,
                                .head_bwd = glm_sp_head_bwd,
                                .slots = m->act_slots,
                                .use_slot = glm_use_slot,
                                .result_floats = glm_sp_result_floats};
    m->pipe_views = rt_xcalloc((size_t)max_micro, sizeof *m->pipe_views);
    return mdl_stage_pipe_init(&sm, max_micro, &m->pipe);
}

/* The views the runner sizes its transfers by: micro-batch k's rows and length. */
static void glm_pipe_views(glm_model *m, const glm_task *t, int M) {
    for (int k = 0; k < M; k++) m->pipe_views[k] = (rt_batch){.B = t[k].in.B, .T = t[k].in.T};
    m->pipe_tasks = t;
}

rt_status glm_pipe_step(glm_model *m, const glm_task *t, int M, uint64_t seed, int64_t step, float grad_scale,
                        double *loss_sum) {
    *loss_sum = 0;
    if (!m->pipe) return rt_errorf(RT_ERR_CONFIG, "GLM: glm_pipe_step on a model that is not a pipeline stage");
    if (M < 1 || M > m->max_micro)
        return rt_errorf(RT_ERR_CONFIG, "GLM pipeline: %d micro-batches, sized for 1 to %d", M, m->max_micro);
    for (int k = 0; k < M; k++) {
        rt_status st = glm_task_check(m, &t[k]);
        if (st != RT_OK) return st;
        if (t[k].kind == GLM_HEAD_SPAN_MATCH)
            return rt_errorf(RT_ERR_CONFIG, "GLM: the span check is evaluation's, not a training loss");
    }
    glm_pipe_views(m, t, M);
    return mdl_stage_pipe_step(m->pipe, m->pipe_views, M, seed, step, grad_scale, loss_sum);
}

static rt_status glm_pipe_eval(glm_model *m, const glm_task *t, double *loss_sum, float *scores) {
    glm_pipe_views(m, t, 1);
    return mdl_stage_pipe_forward(m->pipe, &m->pipe_views[0], loss_sum, scores);
}

rt_status glm_save_weights(glm_model *m, const char *path) {
    return mdl_save_weights(path, &ckpt_map_glm, &m->params, m->cfg.vocab_size, m->cfg.num_attention_heads, m->tp,
                            m->pp);
}

/* m->head.logits (n rows of this rank's vocab columns) to the host as (n, vocab): the shards are
 * all-gathered over tp (a checking and generation path) and the padding columns dropped. */
rt_status glm_logits(glm_model *m, const glm_inputs *in, float *host_logits, float *host_hidden) {
    rt_status st = RT_OK;
    rt_backend *be = m->be;
    const size_t BT = (size_t)in->B * in->T;
    mdl_pass pass = {0};
    if (m->stage.count > 1) RT_FAIL(RT_ERR_CONFIG, "GLM: full logits need the whole model, not a pipeline stage");
    RT_TRY(glm_upload(m, in));
    RT_TRY(glm_forward_body(m, in->B, in->T, &pass));
    if (host_hidden) rt_to_host(be, host_hidden, m->blocks.out, BT * m->C * sizeof(float));
    if (!host_logits) return RT_OK;
    RT_TRY(mdl_lm_head_logits_rows(&m->head, BT));
    mdl_col_linear_fwd(be, rt_xf(m->head.logits), rt_xf(m->blocks.out), P(m->wte), NULL, BT, m->C, m->vocab.local);
    RT_TRY(mdl_lm_head_to_host(&m->head, BT, host_logits));
fail:
    return st;
}

rt_status glm_logits_at(glm_model *m, const glm_inputs *in, const int32_t *at, float *host_logits) {
    rt_status st = RT_OK;
    rt_backend *be = m->be;
    const int B = in->B, T = in->T;
    mdl_pass pass = {0};
    if (m->stage.count > 1) RT_FAIL(RT_ERR_CONFIG, "GLM: generation needs the whole model, not a pipeline stage");
    RT_TRY(glm_upload(m, in));
    for (int b = 0; b < B; b++) {
        if (at[b] < 0 || at[b] >= T) RT_FAIL(RT_ERR_CONFIG, "GLM: row %d: position %d outside [0, %d)", b, at[b], T);
        m->head.h_idx[b] = b * T + at[b];
    }
    RT_TRY(glm_forward_body(m, B, T, &pass));
    rt_to_device(be, m->head.row_idx, m->head.h_idx, (size_t)B * sizeof(int32_t));
    rt_gather_rows(be, m->head.rows, m->blocks.out, m->head.row_idx, B, m->C);
    RT_TRY(mdl_lm_head_logits_rows(&m->head, (size_t)B));
    mdl_col_linear_fwd(be, rt_xf(m->head.logits), rt_xf(m->head.rows), P(m->wte), NULL, (size_t)B, m->C,
                       m->vocab.local);
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
    /* a pipeline stage leaves the other stages' tensors unused */
    const bool unused = rep.unused && m->stage.count == 1;
    if (report)
        snprintf(report, report_size, "%d tensors loaded%s%s", rep.loaded,
                 unused ? "; tensors that map to no parameter, the first: " : "", unused ? rep.first_unused : "");
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
