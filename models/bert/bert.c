/* BERT and RoBERTa forward and backward over the backend ops and the Megatron layers (see
 * bert.h). Activations for the largest batch are allocated once at init; a step allocates
 * nothing. The structure is gpt2.c's: one arena layout, a forward body, a backward body and a
 * classification step around them. */
#include "models/bert/bert.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_tp.h"
#include "checkpoints/ckpt_weights.h"
#include "models/layers/heads.h"
#include "models/layers/hf_config.h"
#include "models/layers/lora.h"
#include "models/layers/padding.h"
#include "models/layers/parallel.h"
#include "models/layers/param.h"
#include "models/layers/stack.h"
#include "models/layers/stage_pipe.h"
#include "runtime/base/rt_arena.h"
#include "runtime/base/rt_json.h"
#include "runtime/train/rt_pipe.h"
#include "runtime/base/rt_rng.h"

/* Added to attention scores at padded keys: exp() of it is exactly 0, and unlike -inf it
 * cannot turn a fully masked row into NaN (HF adds finfo.min, with the same effect). */
#define BERT_MASKED (-1e30f)

struct bert_model {
    bert_config cfg; /* cfg.lora points at lora below */
    ckpt_peft_config lora;
    rt_backend *be;
    rt_comm *tp;
    rt_params params;
    mdl_stage stage;                 /* which layers this model holds (models/layers/stage.h) */
    rt_comm *pp;                     /* the stages' comm (stage = its rank); not owned */
    struct mdl_stage_pipe *pipe;     /* the pipelined step (models/layers/stage_pipe.h); NULL with one stage */
    int wte, wpe, wtt, eln_w, eln_b; /* the first stage's; -1 elsewhere */
    mdl_stack blocks;                /* the post-LN encoder layers, their activations and scratch */
    int hd_w, hd_b, ho_w, ho_b; /* head: pooler/classifier.dense, classifier/classifier.out_proj (the last stage's) */
    int max_B, max_T;
    size_t max_BT;
    int C;
    mdl_vocab vocab; /* the word embedding's shard */

    void *act_block;            /* every buffer below (and the blocks') lives in this one allocation, */
    int act_slots;              /* laid out this many times (a pipeline stage's in-flight micro-batches) */
    size_t act_bytes;           /* apart */
    float *emb;                 /* (BT, C) word + type + position, the embedding LayerNorm's input */
    float *emb_mean, *emb_rstd; /* (BT) */
    float *cls, *cls_drop, *hpre, *hact, *hdrop;   /* (B, C) head activations */
    float *logits, *dlogits, *losses;              /* (B, NL), (B, NL), (B) */
    float *dh1, *dh2, *dh3;                        /* (B, C) head gradients */
    float *key_mask;                               /* (B, T) additive */
    mdl_padding padding;                           /* the batch's padding as attention reads it */
    int32_t *ids, *pos, *types, *cls_idx, *labels; /* (BT), (BT), (BT), (B), (B) */

    int32_t *h_pos, *h_types, *h_cls; /* host staging */
    float *h_mask, *h_losses;         /* (BT), (B): the head's per-row losses */
};

/* config.json's plain fields with HF's defaults (bert-base-uncased) and limits (models/layers/hf_config.h);
 * pad_token_id is checked against the vocab by validation */
#define F(member, kind, def, min, max) \
    { #member, offsetof(bert_config, member), kind, def, min, max, false }
static const mdl_field bert_fields[] = {
    F(vocab_size, MDL_FIELD_INT, 30522, 1, MDL_MAX_VOCAB),
    F(hidden_size, MDL_FIELD_INT, 768, 1, MDL_MAX_WIDTH),
    F(num_hidden_layers, MDL_FIELD_INT, 12, 1, MDL_MAX_LAYERS),
    F(num_attention_heads, MDL_FIELD_INT, 12, 1, MDL_MAX_HEADS),
    F(intermediate_size, MDL_FIELD_INT, 3072, 1, MDL_MAX_FFN),
    F(max_position_embeddings, MDL_FIELD_INT, 512, 1, MDL_MAX_POSITIONS),
    F(type_vocab_size, MDL_FIELD_INT, 2, 1, MDL_MAX_VOCAB),
    F(pad_token_id, MDL_FIELD_INT, 0, INT_MIN, INT_MAX),
    F(layer_norm_eps, MDL_FIELD_FLOAT, 1e-12, 1, 0),
    F(initializer_range, MDL_FIELD_FLOAT, 0.02, 0, 0),
    F(hidden_dropout_prob, MDL_FIELD_FLOAT, 0.1, 0, 0),
    F(attention_probs_dropout_prob, MDL_FIELD_FLOAT, 0.1, 0, 0),
};
#undef F
#define BERT_N_FIELDS (sizeof bert_fields / sizeof *bert_fields)

void bert_config_default(bert_config *c) {
    memset(c, 0, sizeof *c);
    mdl_fields_default(bert_fields, BERT_N_FIELDS, c);
    c->classifier_dropout = 0.1f;
    c->act = RT_ACT_GELU_ERF;
    c->num_labels = 2;
}

rt_status bert_config_load(const char *config_json, bert_config *c) {
    rt_status st = RT_OK;
    cJSON *root = NULL;
    const char *path = config_json, *model_type = NULL, *act = NULL, *pe = NULL;
    bert_config_default(c);
    RT_TRY(rt_json_load(path, &root));
    RT_TRY(rt_json_get_string(root, path, "model_type", &model_type, true, NULL));
    if (strcmp(model_type, "bert") == 0) {
        c->roberta = false;
    } else if (strcmp(model_type, "roberta") == 0) {
        c->roberta = true;
        c->vocab_size = 50265;
        c->pad_token_id = 1;
    } else {
        RT_FAIL(RT_ERR_CONFIG, "%s: field 'model_type' is '%s', expected 'bert' or 'roberta'", path, model_type);
    }
    RT_TRY(mdl_fields_read(root, path, bert_fields, BERT_N_FIELDS, c));
    /* null (HF's default) means "use hidden_dropout_prob" */
    RT_TRY(rt_json_get_float(root, path, "classifier_dropout", &c->classifier_dropout, false, c->hidden_dropout_prob));
    RT_TRY(rt_json_get_string(root, path, "hidden_act", &act, false, "gelu"));
    if (!mdl_hf_act_from_name(act, &c->act))
        RT_FAIL(RT_ERR_CONFIG, "%s: field 'hidden_act' is '%s', expected gelu, gelu_new or relu", path, act);
    RT_TRY(rt_json_get_string(root, path, "position_embedding_type", &pe, false, "absolute"));
    if (strcmp(pe, "absolute") != 0)
        RT_FAIL(RT_ERR_CONFIG,
                "%s: field 'position_embedding_type' is '%s', expected 'absolute' (relative positions "
                "are not supported)",
                path, pe);
    RT_TRY(mdl_hf_read_labels(root, path, &c->num_labels));
    st = mdl_hf_config_result(bert_config_validate(c, 1), path, true);
fail:
    st = mdl_hf_config_result(st, path, false);
    cJSON_Delete(root);
    return st;
}

static cJSON *bert_config_json(const bert_config *c) {
    cJSON *o = mdl_hf_config_new(c->roberta ? "roberta" : "bert",
                                 c->roberta ? "RobertaForSequenceClassification" : "BertForSequenceClassification");
    mdl_fields_write(o, bert_fields, BERT_N_FIELDS, c);
    cJSON_AddStringToObject(o, "hidden_act", mdl_hf_act_name(c->act));
    cJSON_AddNumberToObject(o, "classifier_dropout", c->classifier_dropout);
    cJSON_AddStringToObject(o, "position_embedding_type", "absolute");
    mdl_hf_add_labels(o, c->num_labels);
    return o;
}

rt_status bert_config_save(const bert_config *c, const char *path) {
    return mdl_hf_write_json(bert_config_json(c), path);
}

/* Every parameter (unsharded, unpadded vocab) in saturating 64-bit arithmetic. */
static uint64_t bert_param_count(const bert_config *c) {
    const uint64_t C = (uint64_t)c->hidden_size, F = (uint64_t)c->intermediate_size, NL = (uint64_t)c->num_labels;
    /* a layer: qkv and the attention output 4 C^2 + 4 C, the FFN 2 C F + F + C, two LayerNorms 4 C */
    uint64_t layer = mdl_size_add(mdl_size_mul(C, mdl_size_add(4 * C, 2 * F)), F + 9 * C);
    uint64_t rows = (uint64_t)c->vocab_size + (uint64_t)c->max_position_embeddings + (uint64_t)c->type_vocab_size;
    uint64_t n = mdl_size_add(mdl_size_mul(rows, C), 2 * C); /* embeddings and their LayerNorm */
    n = mdl_size_add(n, mdl_size_mul((uint64_t)c->num_hidden_layers, layer));
    return mdl_size_add(n, mdl_size_add(mdl_size_mul(C + 1, C), (C + 1) * NL)); /* the head */
}

rt_status bert_config_validate(const bert_config *c, int tp) {
    const char *what = c->roberta ? "RoBERTa config" : "BERT config";
    rt_status st = mdl_fields_check(what, bert_fields, BERT_N_FIELDS, c);
    if (st != RT_OK) return st;
    if (c->hidden_size % c->num_attention_heads)
        return rt_errorf(RT_ERR_CONFIG, "%s: hidden_size %d is not divisible by num_attention_heads %d", what,
                         c->hidden_size, c->num_attention_heads);
    if (c->num_labels < 1 || c->num_labels > MDL_MAX_LABELS)
        return rt_errorf(RT_ERR_CONFIG, "%s: num_labels %d is not in [1, %d]", what, c->num_labels, MDL_MAX_LABELS);
    st = mdl_check_params(what,
                          "vocab_size, max_position_embeddings, type_vocab_size, hidden_size, "
                          "num_hidden_layers and intermediate_size",
                          bert_param_count(c));
    if (st != RT_OK) return st;
    /* RoBERTa needs a pad id (positions count from it); BERT may have none (-1) */
    if (c->pad_token_id >= c->vocab_size || c->pad_token_id < (c->roberta ? 0 : -1))
        return rt_errorf(RT_ERR_CONFIG, "%s: pad_token_id %d is not in [0, vocab_size %d)", what, c->pad_token_id,
                         c->vocab_size);
    if (c->roberta && c->max_position_embeddings <= c->pad_token_id + 1)
        return rt_errorf(RT_ERR_CONFIG, "%s: max_position_embeddings %d leaves no positions after pad_token_id %d + 1",
                         what, c->max_position_embeddings, c->pad_token_id);
    st = mdl_check_tp(tp, "num_attention_heads", c->num_attention_heads, "intermediate_size", c->intermediate_size);
    if (st != RT_OK) return st;
    const float p[3] = {c->hidden_dropout_prob, c->attention_probs_dropout_prob, c->classifier_dropout};
    return mdl_check_dropouts(what, p, 3);
}

/* The tp rule comes from the BERT map, which the HF loader and tz-convert also read. */
static int bert_add(bert_model *m, const char *name, int64_t d0, int64_t d1, bool no_decay, rt_init_kind init) {
    int64_t shape[2] = {d0, d1};
    return rt_params_add(&m->params, name, d1 ? 2 : 1, shape, ckpt_map_tp_rule(&ckpt_map_bert, name), no_decay, init,
                         init == RT_INIT_NORMAL ? m->cfg.initializer_range : 0.0f);
}

#define BERT_LAYER "encoder.layer.%d."
static const mdl_stack_names bert_block_names = {BERT_LAYER "attention.output.LayerNorm.weight",
                                                 BERT_LAYER "attention.output.LayerNorm.bias",
                                                 BERT_LAYER "attention.self.qkv.weight",
                                                 BERT_LAYER "attention.self.qkv.bias",
                                                 BERT_LAYER "attention.output.dense.weight",
                                                 BERT_LAYER "attention.output.dense.bias",
                                                 BERT_LAYER "output.LayerNorm.weight",
                                                 BERT_LAYER "output.LayerNorm.bias",
                                                 BERT_LAYER "intermediate.dense.weight",
                                                 BERT_LAYER "intermediate.dense.bias",
                                                 BERT_LAYER "output.dense.weight",
                                                 BERT_LAYER "output.dense.bias",
                                                 NULL,
                                                 NULL};

/* HF's _init_weights: Linear and Embedding N(0, initializer_range), LayerNorm 1/0, biases 0.
 * no_decay marks biases and LayerNorm parameters (HF Trainer's rule). The stage's parameters:
 * the embeddings on the first, its layers, the head on the last. */
static void bert_declare_head(bert_model *m);
static void bert_declare_params(bert_model *m, rt_backend *be, rt_comm *tp, int first_block, int n_blocks) {
    const bert_config *c = &m->cfg;
    const int C = m->C;
    const bool first = mdl_stage_is_first(m->stage);
    const rt_init_kind N = RT_INIT_NORMAL, Z = RT_INIT_ZEROS, O = RT_INIT_ONES;
    m->wte = m->wpe = m->wtt = m->eln_w = m->eln_b = m->hd_w = m->hd_b = m->ho_w = m->ho_b = -1;
    if (first) {
        m->wte = bert_add(m, "embeddings.word_embeddings.weight", m->vocab.local, C, false, N);
        m->params.specs[m->wte].vocab_rows = c->vocab_size; /* checkpoints store the unpadded table */
        m->wpe = bert_add(m, "embeddings.position_embeddings.weight", c->max_position_embeddings, C, false, N);
        m->wtt = bert_add(m, "embeddings.token_type_embeddings.weight", c->type_vocab_size, C, false, N);
        m->eln_w = bert_add(m, "embeddings.LayerNorm.weight", C, 0, true, O);
        m->eln_b = bert_add(m, "embeddings.LayerNorm.bias", C, 0, true, Z);
    }
    /* the embeddings' dropout is the stack's (site 0); the head's sites follow the blocks' */
    mdl_stack_config bc = {.n_layer = n_blocks,
                           .C = C,
                           .n_head = c->num_attention_heads,
                           .F = c->intermediate_size,
                           .post_norm = true,
                           .norm = MDL_NORM_LAYER,
                           .norm_eps = c->layer_norm_eps,
                           .act = c->act,
                           .attn_pdrop = c->attention_probs_dropout_prob,
                           .resid_pdrop = c->hidden_dropout_prob,
                           .emb_pdrop = first ? c->hidden_dropout_prob : 0,
                           .checkpoint_layers = c->checkpoint_layers,
                           .layer_offset = first_block,
                           .layers_total = c->num_hidden_layers,
                           .lora = c->lora};
    mdl_stack_compact_sites(&bc);
    mdl_stack_init(&m->blocks, &bc, be, tp, &m->params);
    /* the map's prefix names the adapters as PEFT does (bert., roberta.); the rows are the same */
    const ckpt_map *map = c->roberta ? &ckpt_map_roberta : &ckpt_map_bert;
    mdl_stack_declare_named(&m->blocks, &bert_block_names, map, c->initializer_range, c->initializer_range);
    if (mdl_stage_is_last(m->stage)) bert_declare_head(m);
    mdl_lora_freeze_base(&m->params, c->lora, map);
}

/* The classifier's head (replicated on every tp rank: it is small). */
static void bert_declare_head(bert_model *m) {
    const bert_config *c = &m->cfg;
    const int C = m->C;
    const rt_init_kind N = RT_INIT_NORMAL, Z = RT_INIT_ZEROS;
    const int NL = c->num_labels;
    if (c->roberta) {
        m->hd_w = bert_add(m, "classifier.dense.weight", C, C, false, N);
        m->hd_b = bert_add(m, "classifier.dense.bias", C, 0, true, Z);
        m->ho_w = bert_add(m, "classifier.out_proj.weight", NL, C, false, N);
        m->ho_b = bert_add(m, "classifier.out_proj.bias", NL, 0, true, Z);
    } else {
        m->hd_w = bert_add(m, "pooler.dense.weight", C, C, false, N);
        m->hd_b = bert_add(m, "pooler.dense.bias", C, 0, true, Z);
        m->ho_w = bert_add(m, "classifier.weight", NL, C, false, N);
        m->ho_b = bert_add(m, "classifier.bias", NL, 0, true, Z);
    }
}

/* A stage's parameters draw the init streams the whole model's same-named ones draw: their
 * indices in its declaration, found by declaring it without allocating. */
static void bert_whole_model_streams(bert_model *m) {
    bert_model whole = *m;
    whole.stage = mdl_stage_whole();
    rt_params_init(&whole.params, m->be);
    bert_declare_params(&whole, m->be, m->tp, 0, m->cfg.num_hidden_layers);
    rt_params_streams_from(&m->params, &whole.params);
    rt_params_free(&whole.params);
    mdl_stack_free(&whole.blocks);
}

/* Lays out the activation buffers in the arena (measuring when a->base is NULL). */
static void bert_layout(bert_model *m, rt_arena *a) {
    const size_t BT = m->max_BT, B = (size_t)m->max_B, C = (size_t)m->C, NL = (size_t)m->cfg.num_labels;
    const size_t f = sizeof(float), i = sizeof(int32_t);
    mdl_stack_layout(&m->blocks, a, m->max_B, m->max_T, 0, NULL);
    m->emb = rt_arena_take(a, BT * C, f);
    m->emb_mean = rt_arena_take(a, BT, f);
    m->emb_rstd = rt_arena_take(a, BT, f);
    m->cls = rt_arena_take(a, B * C, f);
    m->cls_drop = rt_arena_take(a, B * C, f);
    m->hpre = rt_arena_take(a, B * C, f);
    m->hact = rt_arena_take(a, B * C, f);
    m->hdrop = rt_arena_take(a, B * C, f);
    m->logits = rt_arena_take(a, B * NL, f);
    m->dlogits = rt_arena_take(a, B * NL, f);
    m->losses = rt_arena_take(a, B, f);
    m->dh1 = rt_arena_take(a, B * C, f);
    m->dh2 = rt_arena_take(a, B * C, f);
    m->dh3 = rt_arena_take(a, B * C, f);
    m->key_mask = rt_arena_take(a, BT, f);
    m->padding.key_len = rt_arena_take(a, B, i);
    m->ids = rt_arena_take(a, BT, i);
    m->pos = rt_arena_take(a, BT, i);
    m->types = rt_arena_take(a, BT, i);
    m->cls_idx = rt_arena_take(a, B, i);
    m->labels = rt_arena_take(a, B, i);
}

/* Points every activation buffer at slot k's copy (models/layers/stage_pipe.h). */
static void bert_use_slot(void *model, int k) {
    bert_model *m = model;
    rt_arena arena = {.base = (char *)m->act_block + (size_t)k * m->act_bytes};
    bert_layout(m, &arena);
    mdl_padding_use_slot(&m->padding, k);
}

/* Zeroes one row of a table (rows of C floats) if it lies in [row0, row0 + rows). */
static void bert_zero_row(bert_model *m, float *table, int row, int row0, int rows) {
    if (table && row >= row0 && row < row0 + rows) /* table NULL: a frozen table's gradient (LoRA) */
        rt_clear(m->be, table + (size_t)(row - row0) * m->C, (size_t)m->C * sizeof(float));
}

/* The widest per-token row of any activation buffer (mdl_check_activations): 3 C for qkv, the
 * FFN, num_heads x T attention probabilities, the head's labels. */
static uint64_t bert_act_width(const bert_config *c, int max_T) {
    uint64_t w = mdl_size_max(3 * (uint64_t)c->hidden_size, (uint64_t)c->intermediate_size);
    w = mdl_size_max(w, (uint64_t)c->num_attention_heads * (uint64_t)max_T);
    return mdl_size_max(w, (uint64_t)c->num_labels);
}

static rt_status bert_stage_pipe(bert_model *m, rt_comm *pp, int max_micro);

rt_status bert_model_init(const bert_config *c, rt_backend *be, rt_comm *tp, int max_B, int max_T, uint64_t seed,
                          bert_model **out) {
    return bert_model_init_stage(c, be, tp, rt_comm_self(), 1, max_B, max_T, seed, out);
}

/* m's own copy of the config's LoRA settings, which cfg.lora then points at. */
static void bert_own_config(bert_model *m, const bert_config *c) {
    m->cfg = *c;
    if (c->lora) {
        ckpt_peft_config_copy(&m->lora, c->lora);
        m->cfg.lora = &m->lora;
    }
}

rt_status bert_params_layout(const bert_config *c, rt_backend *be, rt_comm *tp, rt_params *out) {
    rt_status st = RT_OK;
    bert_model *m = rt_xcalloc(1, sizeof *m);
    memset(out, 0, sizeof *out);
    RT_TRY(bert_config_validate(c, tp->size));
    bert_own_config(m, c);
    m->be = be;
    m->tp = tp;
    m->stage = mdl_stage_whole();
    m->C = c->hidden_size;
    m->vocab = mdl_vocab_shard(c->vocab_size, tp);
    rt_params_init(&m->params, be);
    bert_declare_params(m, be, tp, 0, c->num_hidden_layers);
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

rt_status bert_model_init_stage(const bert_config *c, rt_backend *be, rt_comm *tp, rt_comm *pp, int max_micro,
                                int max_B, int max_T, uint64_t seed, bert_model **out) {
    rt_status st = RT_OK;
    bert_model *m = rt_xcalloc(1, sizeof *m);
    int first_block = 0, n_blocks = 0;
    *out = NULL;
    m->stage = (mdl_stage){pp->rank, pp->size};
    m->pp = pp;
    RT_TRY(bert_config_validate(c, tp->size));
    RT_TRY(mdl_stage_blocks(m->stage, c->num_hidden_layers, c->roberta ? "RoBERTa" : "BERT", &first_block, &n_blocks));
    if (max_B < 1 || max_T < 1) RT_FAIL(RT_ERR_CONFIG, "BERT: batch size %d and length %d must be >= 1", max_B, max_T);
    /* RoBERTa's positions start after the pad id, so pad_token_id + 1 positions are unusable */
    int max_len = c->roberta ? c->max_position_embeddings - c->pad_token_id - 1 : c->max_position_embeddings;
    if (max_T > max_len)
        RT_FAIL(RT_ERR_CONFIG, "%s: max length %d exceeds the model's %d usable positions (max_position_embeddings %d)",
                c->roberta ? "RoBERTa" : "BERT", max_T, max_len, c->max_position_embeddings);
    RT_TRY(mdl_check_activations(c->roberta ? "RoBERTa activations" : "BERT activations",
                                 (uint64_t)c->num_hidden_layers, (uint64_t)max_B, (uint64_t)max_T,
                                 bert_act_width(c, max_T), "lower --batch-size or --max-len"));
    bert_own_config(m, c);
    m->be = be;
    m->tp = tp;
    m->max_B = max_B;
    m->max_T = max_T;
    m->max_BT = (size_t)max_B * (size_t)max_T;
    m->C = c->hidden_size;
    m->vocab = mdl_vocab_shard(c->vocab_size, tp);
    rt_params_init(&m->params, be);
    bert_declare_params(m, be, tp, first_block, n_blocks);
    if (m->stage.count > 1) bert_whole_model_streams(m);
    RT_TRY(rt_params_alloc(&m->params));
    rt_params_init_weights(&m->params, seed);
    if (mdl_stage_is_first(m->stage)) {
        mdl_vocab_clear_padding(be, &m->vocab, P(m->wte), m->C);
        /* HF's nn.Embedding(padding_idx=pad) starts that row at 0 (RoBERTa's positions too) */
        if (c->pad_token_id >= 0) bert_zero_row(m, P(m->wte), c->pad_token_id, m->vocab.start, m->vocab.local);
        if (c->roberta) bert_zero_row(m, P(m->wpe), c->pad_token_id, 0, c->max_position_embeddings);
    }
    rt_arena arena = {0};
    bert_layout(m, &arena);
    m->act_bytes = (arena.used + 63) & ~(size_t)63;
    m->act_slots =
        m->stage.count > 1 && !c->pp_recompute ? rt_pipe_in_flight(m->stage.index, m->stage.count, max_micro) : 1;
    RT_TRY(rt_backend_alloc(be, m->act_bytes * (size_t)m->act_slots,
                            m->stage.count > 1 ? "BERT activations (lower --batch-size or --max-len, or add "
                                                 "--pp-recompute or --checkpoint-activations)"
                                               : "BERT activations (lower --batch-size or --max-len, or add "
                                                 "--checkpoint-activations)",
                            &m->act_block));
    bert_use_slot(m, 0);
    m->h_pos = rt_xmalloc(m->max_BT * sizeof(int32_t));
    m->h_types = rt_xmalloc(m->max_BT * sizeof(int32_t));
    m->h_cls = rt_xmalloc((size_t)max_B * sizeof(int32_t));
    mdl_padding_init(&m->padding, max_B, m->act_slots);
    m->h_mask = rt_xmalloc(m->max_BT * sizeof(float));
    m->h_losses = rt_xmalloc((size_t)max_B * sizeof(float));
    if (m->stage.count > 1) RT_TRY(bert_stage_pipe(m, pp, max_micro));
    *out = m;
    return RT_OK;
fail:
    bert_model_free(m);
    return st;
}

void bert_model_free(bert_model *m) {
    if (!m) return;
    mdl_stage_pipe_free(m->pipe);
    if (m->act_block) rt_free_device(m->be, m->act_block);
    rt_params_free(&m->params);
    mdl_stack_free(&m->blocks);
    ckpt_peft_config_free(&m->lora);
    free(m->h_pos);
    free(m->h_types);
    free(m->h_cls);
    mdl_padding_free(&m->padding);
    free(m->h_mask);
    free(m->h_losses);
    free(m);
}

rt_params *bert_model_params(bert_model *m) { return &m->params; }
rt_comm *bert_model_tp(bert_model *m) { return m->tp; }
const bert_config *bert_model_config(const bert_model *m) { return &m->cfg; }
int bert_model_padded_vocab(const bert_model *m) { return m->vocab.padded; }

/* Dropout sites: 0 the embeddings; per layer 1 + 3l attention probabilities, 2 + 3l the
 * attention output, 3 + 3l the FFN output; then the head's two. */
static int bert_head_site(const bert_model *m, int k) { return 1 + 3 * m->cfg.num_hidden_layers + k; }

/* Uploads ids, token types, positions (BERT: 0..T-1; RoBERTa: HF's
 * create_position_ids_from_input_ids, i.e. pad + the count of non-pad tokens so far, and pad
 * on pad tokens), the additive key mask and the [CLS] rows. */
static rt_status bert_upload(bert_model *m, const int32_t *host_ids, const int32_t *host_mask,
                             const int32_t *host_types, int B, int T) {
    const bert_config *c = &m->cfg;
    if (B < 1 || T < 1 || B > m->max_B || T > m->max_T)
        return rt_errorf(RT_ERR_CONFIG, "BERT: batch %dx%d exceeds the %dx%d the model was sized for", B, T, m->max_B,
                         m->max_T);
    for (int b = 0; b < B; b++) {
        int count = 0;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            int32_t id = host_ids[i], type = host_types ? host_types[i] : 0;
            if (id < 0 || id >= c->vocab_size)
                return rt_errorf(RT_ERR_FORMAT, "BERT: token id %d at row %d position %d is outside the vocab [0, %d)",
                                 id, b, t, c->vocab_size);
            if (type < 0 || type >= c->type_vocab_size)
                return rt_errorf(RT_ERR_FORMAT,
                                 "BERT: token type %d at row %d position %d is not in [0, %d) "
                                 "(type_vocab_size)",
                                 type, b, t, c->type_vocab_size);
            if (c->roberta)
                m->h_pos[i] = id != c->pad_token_id ? c->pad_token_id + ++count : c->pad_token_id;
            else
                m->h_pos[i] = t;
            m->h_types[i] = type;
            m->h_mask[i] = (!host_mask || host_mask[i]) ? 0.0f : BERT_MASKED;
        }
        m->h_cls[b] = b * T;
    }
    rt_backend *be = m->be;
    const size_t BT = (size_t)B * T;
    rt_to_device(be, m->ids, host_ids, BT * sizeof(int32_t));
    rt_to_device(be, m->pos, m->h_pos, BT * sizeof(int32_t));
    rt_to_device(be, m->types, m->h_types, BT * sizeof(int32_t));
    rt_to_device(be, m->key_mask, m->h_mask, BT * sizeof(float));
    rt_to_device(be, m->cls_idx, m->h_cls, (size_t)B * sizeof(int32_t));
    mdl_padding_upload(&m->padding, be, host_mask, B, T);
    return RT_OK;
}

/* BERT attends both ways, with padded keys masked (models/layers/padding.h). */
static mdl_stack_mask bert_mask(const void *model) {
    const bert_model *m = model;
    mdl_stack_mask mask = {0};
    mdl_padding_keys(&m->padding, m->key_mask, &mask);
    return mask;
}

/* HF: (word + token type) + position, then LayerNorm into the blocks' first residual (the
 * stack drops out). Types and positions are replicated: added after the vocab-parallel
 * all-reduce. */
static rt_status bert_embed(bert_model *m, size_t BT) {
    const bert_config *c = &m->cfg;
    rt_backend *be = m->be;
    const int C = m->C;
    rt_status st = mdl_vocab_embedding_fwd(be, m->tp, m->emb, m->ids, P(m->wte), BT, C, m->vocab.start, m->vocab.local);
    if (st != RT_OK) return st;
    rt_embedding_fwd(be, m->emb, m->types, P(m->wtt), BT, C, 0, c->type_vocab_size, true);
    rt_embedding_fwd(be, m->emb, m->pos, P(m->wpe), BT, C, 0, c->max_position_embeddings, true);
    rt_layernorm_fwd(be, rt_xf(mdl_stack_input(&m->blocks)), m->emb_mean, m->emb_rstd, rt_xf(m->emb), P(m->eln_w),
                     P(m->eln_b), BT, C, c->layer_norm_eps);
    return RT_OK;
}

/* From demb = dL/d(LN(emb)). */
static void bert_embed_bwd(bert_model *m, const float *demb, size_t BT) {
    const bert_config *c = &m->cfg;
    rt_backend *be = m->be;
    const int C = m->C;
    float *dsum = m->blocks.sc->dln; /* the stack's dln is free scratch now */
    if (!G(m->eln_w) && !G(m->eln_b) && !G(m->wte) && !G(m->wtt) && !G(m->wpe)) return; /* all frozen (LoRA) */
    rt_clear(be, dsum, BT * C * sizeof(float));
    rt_layernorm_bwd(be, dsum, G(m->eln_w), G(m->eln_b), rt_xf(demb), rt_xf(m->emb), P(m->eln_w), m->emb_mean,
                     m->emb_rstd, BT, C);
    rt_embedding_bwd(be, G(m->wte), dsum, m->ids, BT, C, m->vocab.start, m->vocab.local);
    rt_embedding_bwd(be, G(m->wtt), dsum, m->types, BT, C, 0, c->type_vocab_size);
    rt_embedding_bwd(be, G(m->wpe), dsum, m->pos, BT, C, 0, c->max_position_embeddings);
    /* HF's padding_idx rows get no gradient (the pad row stays 0 through training) */
    if (c->pad_token_id >= 0) bert_zero_row(m, G(m->wte), c->pad_token_id, m->vocab.start, m->vocab.local);
    if (c->roberta) bert_zero_row(m, G(m->wpe), c->pad_token_id, 0, c->max_position_embeddings);
}

static rt_status bert_stack_fwd(bert_model *m, int B, int T, const mdl_pass *pass) {
    const mdl_stack_mask mask = bert_mask(m);
    return mdl_stack_forward(&m->blocks, B, T, &mask, pass);
}

/* From dL/d(encoder output) in mdl_stack_dout(&m->blocks). */
static rt_status bert_stack_bwd(bert_model *m, int B, int T, const mdl_pass *pass, const float **demb) {
    const mdl_stack_mask mask = bert_mask(m);
    return mdl_stack_backward(&m->blocks, B, T, &mask, pass, mdl_stack_dout(&m->blocks), demb);
}

/* Embeddings through the last layer into m->blocks.out. */
static rt_status bert_forward_body(bert_model *m, int B, int T, const mdl_pass *pass) {
    rt_status st = bert_embed(m, (size_t)B * T);
    return st == RT_OK ? bert_stack_fwd(m, B, T, pass) : st;
}

/* The head: first token -> [drop] -> dense -> tanh -> drop -> out. RoBERTa drops out before
 * the dense too; BERT's pooler has no dropout before it. Its loss is queued (bert_cls_loss_read
 * gives the sum). */
static void bert_head_fwd(bert_model *m, const rt_batch *b, const mdl_pass *pass, float grad_scale,
                          float *host_logits) {
    const bert_config *c = &m->cfg;
    rt_backend *be = m->be;
    const int B = b->B, C = m->C, NL = c->num_labels;
    const bool drop = pass->training && c->classifier_dropout > 0;
    const float pc = c->classifier_dropout;
    rt_gather_rows(be, m->cls, m->blocks.out, m->cls_idx, B, C);
    const float *x0 = m->cls;
    if (drop && c->roberta) {
        rt_dropout_fwd(be, m->cls_drop, m->cls, (size_t)B * C, pc, pass->seed,
                       mdl_dropout_stream(pass, bert_head_site(m, 0)), mdl_dropout_step(pass));
        x0 = m->cls_drop;
    }
    mdl_col_linear_fwd(be, rt_xf(m->hpre), rt_xf(x0), P(m->hd_w), P(m->hd_b), (size_t)B, C, C);
    rt_act_fwd(be, RT_ACT_TANH, rt_xf(m->hact), rt_xf(m->hpre), (size_t)B * C);
    const float *x1 = m->hact;
    if (drop) {
        rt_dropout_fwd(be, m->hdrop, m->hact, (size_t)B * C, pc, pass->seed,
                       mdl_dropout_stream(pass, bert_head_site(m, 1)), mdl_dropout_step(pass));
        x1 = m->hdrop;
    }
    mdl_col_linear_fwd(be, rt_xf(m->logits), rt_xf(x1), P(m->ho_w), P(m->ho_b), (size_t)B, C, NL);
    if (host_logits) rt_to_host(be, host_logits, m->logits, (size_t)B * NL * sizeof(float));
    /* the shared head losses (HF: CrossEntropyLoss, or MSELoss(logits.squeeze(), labels)) */
    mdl_cls_loss(be, b, NL, m->logits, m->dlogits, m->losses, m->labels, grad_scale);
}
static void bert_cls_loss_read(bert_model *m, int B, const mdl_pass *pass, double *loss_sum) {
    *loss_sum = mdl_loss_sum(m->be, m->losses, (size_t)B, m->h_losses, pass);
}

/* The head's backward into the stack's dout; the head is replicated, so each rank has all of
 * dL/d(head input). */
static void bert_head_bwd(bert_model *m, const rt_batch *b, const mdl_pass *pass) {
    const bert_config *c = &m->cfg;
    rt_backend *be = m->be;
    const int B = b->B, T = b->T, C = m->C, NL = c->num_labels;
    const bool drop = pass->training && c->classifier_dropout > 0;
    const float pc = c->classifier_dropout;
    const float *x0 = drop && c->roberta ? m->cls_drop : m->cls, *x1 = drop ? m->hdrop : m->hact;
    mdl_row_linear_bwd(be, rt_xf(m->dh1), false, G(m->ho_w), G(m->ho_b), rt_xf(m->dlogits), rt_xf(x1), P(m->ho_w),
                       (size_t)B, C, NL);
    const float *dact = m->dh1;
    if (drop) {
        rt_dropout_bwd(be, m->dh2, m->dh1, (size_t)B * C, pc, pass->seed,
                       mdl_dropout_stream(pass, bert_head_site(m, 1)), mdl_dropout_step(pass));
        dact = m->dh2;
    }
    rt_act_bwd(be, RT_ACT_TANH, rt_xf(m->dh3), rt_xf(m->hpre), rt_xf(dact), (size_t)B * C);
    mdl_row_linear_bwd(be, rt_xf(m->dh1), false, G(m->hd_w), G(m->hd_b), rt_xf(m->dh3), rt_xf(x0), P(m->hd_w),
                       (size_t)B, C, C);
    const float *dcls = m->dh1;
    if (drop && c->roberta) {
        rt_dropout_bwd(be, m->dh2, m->dh1, (size_t)B * C, pc, pass->seed,
                       mdl_dropout_stream(pass, bert_head_site(m, 0)), mdl_dropout_step(pass));
        dcls = m->dh2;
    }
    float *dout = mdl_stack_dout(&m->blocks);
    rt_clear(be, dout, (size_t)B * T * C * sizeof(float));
    rt_scatter_rows_add(be, dout, rt_xf(dcls), m->cls_idx, B, C);
}

rt_status bert_cls_step(bert_model *m, const rt_batch *b, const mdl_pass *pass, float grad_scale, double *loss_sum,
                        float *host_logits) {
    rt_status st = RT_OK;
    const int B = b->B, T = b->T;
    const float *demb = NULL;
    RT_TRY(mdl_cls_check_batch("BERT", b, m->cfg.num_labels));
    if (m->stage.count > 1) {
        if (grad_scale > 0) RT_FAIL(RT_ERR_CONFIG, "BERT: a pipeline stage trains through its pipeline step");
        return mdl_stage_pipe_forward(m->pipe, b, loss_sum, host_logits);
    }
    RT_TRY(bert_upload(m, b->input_ids, b->attention_mask, b->token_type_ids, B, T));
    RT_TRY(bert_forward_body(m, B, T, pass));
    bert_head_fwd(m, b, pass, grad_scale, host_logits);
    if (grad_scale > 0) {
        bert_head_bwd(m, b, pass);
        RT_TRY(bert_stack_bwd(m, B, T, pass, &demb));
        bert_embed_bwd(m, demb, (size_t)B * T);
    }
    bert_cls_loss_read(m, B, pass, loss_sum); /* with the backward queued */
fail:
    return st;
}

/* ---- the classifier as a pipeline stage (models/layers/stage_pipe.h) ---- */

static rt_status bert_sp_upload(void *model, const rt_batch *b) {
    return bert_upload(model, b->input_ids, b->attention_mask, b->token_type_ids, b->B, b->T);
}
static rt_status bert_sp_embed(void *model, const rt_batch *b) { return bert_embed(model, (size_t)b->B * b->T); }
static void bert_sp_embed_bwd(void *model, const rt_batch *b, const float *demb) {
    bert_embed_bwd(model, demb, (size_t)b->B * b->T);
}
static rt_status bert_sp_head_fwd(void *model, const rt_batch *b, const mdl_pass *pass, float grad_scale,
                                  double *loss_sum, float *host_logits) {
    bert_head_fwd(model, b, pass, grad_scale, host_logits);
    bert_cls_loss_read(model, b->B, pass, loss_sum);
    return RT_OK;
}
static rt_status bert_sp_head_bwd(void *model, const rt_batch *b, const mdl_pass *pass) {
    bert_head_bwd(model, b, pass);
    return RT_OK;
}

static rt_status bert_stage_pipe(bert_model *m, rt_comm *pp, int max_micro) {
    const mdl_stage_model sm = {.model = m,
                                .family = m->cfg.roberta ? "RoBERTa" : "BERT",
                                .be = m->be,
                                .pp = pp,
                                .blocks = &m->blocks,
                                .C = m->C,
                                .max_B = m->max_B,
                                .num_labels = m->cfg.num_labels,
                                .max_BT = m->max_BT,
                                .upload = bert_sp_upload,
                                .embed = bert_sp_embed,
                                .embed_bwd = bert_sp_embed_bwd,
                                .mask = bert_mask,
                                .head_fwd = bert_sp_head_fwd,
                                .head_bwd = bert_sp_head_bwd,
                                .slots = m->act_slots,
                                .use_slot = bert_use_slot};
    return mdl_stage_pipe_init(&sm, max_micro, &m->pipe);
}

static rt_status bert_vt_pipeline(void *model, const rt_batch *b, int n, uint64_t seed, int64_t step, float grad_scale,
                                  double *loss_sum) {
    return mdl_stage_pipe_step(((bert_model *)model)->pipe, b, n, seed, step, grad_scale, loss_sum);
}

rt_status bert_hidden(bert_model *m, const int32_t *host_ids, const int32_t *host_mask, const int32_t *host_types,
                      int B, int T, float *host_hidden) {
    rt_status st = RT_OK;
    mdl_pass pass = {0};
    RT_TRY(bert_upload(m, host_ids, host_mask, host_types, B, T));
    RT_TRY(bert_forward_body(m, B, T, &pass));
    rt_to_host(m->be, host_hidden, m->blocks.out, (size_t)B * T * m->C * sizeof(float));
fail:
    return st;
}

rt_status bert_save_hf(bert_model *m, const char *dir) {
    return mdl_hf_save_folder(dir, m->cfg.roberta ? &ckpt_map_roberta : &ckpt_map_bert, &m->params, m->cfg.vocab_size,
                              m->cfg.num_attention_heads, m->tp, m->pp, bert_config_json(&m->cfg));
}

rt_status bert_load_hf(bert_model *m, const char *weights, char *report, size_t size) {
    ckpt_load_report rep;
    rt_status st = ckpt_load_hf(weights, m->cfg.roberta ? &ckpt_map_roberta : &ckpt_map_bert, &m->params,
                                m->cfg.vocab_size, m->cfg.num_attention_heads, m->tp->rank, m->tp->size, NULL, &rep);
    if (st == RT_OK && report) {
        ckpt_load_report_describe(&rep, report, size);
        const size_t n = strlen(report);
        if (rep.unused && n < size) snprintf(report + n, size - n, "; some tensors in the file map to no parameter");
    }
    return st;
}

static rt_status bert_vt_step(void *model, const rt_batch *b, const mdl_pass *pass, float grad_scale, double *loss_sum,
                              float *host_logits) {
    return bert_cls_step(model, b, pass, grad_scale, loss_sum, host_logits);
}
static rt_params *bert_vt_params(void *model) { return bert_model_params(model); }
static rt_status bert_vt_save_hf(void *model, const char *dir) { return bert_save_hf(model, dir); }
static void bert_vt_free(void *model) { bert_model_free(model); }
static double bert_vt_flops(void *model, int B, int T) {
    return mdl_stack_train_flops(&((bert_model *)model)->blocks, B, T, 0);
}

rt_status bert_classifier(bert_model *m, mdl_classifier *out) {
    if (!m) return rt_errorf(RT_ERR_CONFIG, "bert_classifier: no model");
    *out = (mdl_classifier){.model = m,
                            .num_labels = m->cfg.num_labels,
                            .step = bert_vt_step,
                            .params = bert_vt_params,
                            .save_hf = bert_vt_save_hf,
                            .free = bert_vt_free,
                            .train_flops = bert_vt_flops,
                            .pipeline_step = m->stage.count > 1 ? bert_vt_pipeline : NULL};
    return RT_OK;
}
