/* GPT-2 forward and backward over the backend ops (see gpt2.h). Activations for the largest
 * batch are allocated once at init; a step allocates nothing. */
#include "models/gpt2/gpt2.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_tp.h"
#include "checkpoints/ckpt_weights.h"
#include "models/layers/flops.h"
#include "models/layers/heads.h"
#include "models/layers/hf_config.h"
#include "models/layers/lm_head.h"
#include "models/layers/lora.h"
#include "models/layers/parallel.h"
#include "models/layers/param.h"
#include "models/layers/stack.h"
#include "models/layers/stage_pipe.h"
#include "runtime/base/rt_arena.h"
#include "runtime/base/rt_json.h"
#include "runtime/train/rt_pipe.h"

#include "models/gpt2/gpt2_internal.h"

/* config.json's plain fields with HF's defaults (gpt2 124M) and limits (models/layers/hf_config.h) */
#define F(member, key, kind, def, min, max) \
    { key, offsetof(gpt2_config, member), kind, def, min, max, false }
static const mdl_field gpt2_fields[] = {
    F(vocab_size, "vocab_size", MDL_FIELD_INT, 50257, 1, MDL_MAX_VOCAB),
    F(n_positions, "n_positions", MDL_FIELD_INT, 1024, 1, MDL_MAX_POSITIONS),
    F(n_embd, "n_embd", MDL_FIELD_INT, 768, 1, MDL_MAX_WIDTH),
    F(n_layer, "n_layer", MDL_FIELD_INT, 12, 1, MDL_MAX_LAYERS),
    F(n_head, "n_head", MDL_FIELD_INT, 12, 1, MDL_MAX_HEADS),
    F(n_inner, "n_inner", MDL_FIELD_INT, 0, 0, MDL_MAX_FFN), /* 0 or null: 4 * n_embd */
    F(layer_norm_eps, "layer_norm_epsilon", MDL_FIELD_FLOAT, 1e-5, 1, 0),
    F(initializer_range, "initializer_range", MDL_FIELD_FLOAT, 0.02, 0, 0),
    F(embd_pdrop, "embd_pdrop", MDL_FIELD_FLOAT, 0.1, 0, 0),
    F(resid_pdrop, "resid_pdrop", MDL_FIELD_FLOAT, 0.1, 0, 0),
    F(attn_pdrop, "attn_pdrop", MDL_FIELD_FLOAT, 0.1, 0, 0),
};
#undef F
#define GPT2_N_FIELDS (sizeof gpt2_fields / sizeof *gpt2_fields)

void gpt2_config_default(gpt2_config *c) {
    memset(c, 0, sizeof *c);
    mdl_fields_default(gpt2_fields, GPT2_N_FIELDS, c);
    c->act = RT_ACT_GELU_TANH;
    c->num_labels = 2;
    c->pad_token_id = -1;
    c->eos_token_id = 50256;
}

/* The MLP width; within int once the sizes are checked (4 * MDL_MAX_WIDTH). */
static int gpt2_inner(const gpt2_config *c) { return c->n_inner > 0 ? c->n_inner : 4 * c->n_embd; }

rt_status gpt2_config_load(const char *path, gpt2_config *c) {
    rt_status st = RT_OK;
    cJSON *root = NULL;
    const char *model_type = NULL, *act = NULL;
    gpt2_config_default(c);
    RT_TRY(rt_json_load(path, &root));
    RT_TRY(rt_json_get_string(root, path, "model_type", &model_type, true, NULL));
    if (strcmp(model_type, "gpt2") != 0)
        RT_FAIL(RT_ERR_CONFIG, "%s: field 'model_type' is '%s', expected 'gpt2' (this program fine-tunes GPT-2)", path,
                model_type);
    RT_TRY(mdl_fields_read(root, path, gpt2_fields, GPT2_N_FIELDS, c));
    RT_TRY(rt_json_get_string(root, path, "activation_function", &act, false, "gelu_new"));
    if (!mdl_hf_act_from_name(act, &c->act))
        RT_FAIL(RT_ERR_CONFIG, "%s: field 'activation_function' is '%s', expected gelu_new, gelu or relu", path, act);
    if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(root, "pad_token_id")))
        RT_TRY(rt_json_get_int(root, path, "pad_token_id", &c->pad_token_id, false, -1));
    if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(root, "eos_token_id")))
        RT_TRY(rt_json_get_int(root, path, "eos_token_id", &c->eos_token_id, false, 50256));
    RT_TRY(mdl_hf_read_labels(root, path, &c->num_labels));
    st = mdl_hf_config_result(gpt2_config_validate(c, 1), path, true);
fail:
    st = mdl_hf_config_result(st, path, false);
    cJSON_Delete(root);
    return st;
}

static cJSON *gpt2_config_json(const gpt2_config *c) {
    cJSON *o = mdl_hf_config_new("gpt2", c->num_labels ? "GPT2ForSequenceClassification" : "GPT2LMHeadModel");
    mdl_fields_write(o, gpt2_fields, GPT2_N_FIELDS, c);
    cJSON_AddStringToObject(o, "activation_function", mdl_hf_act_name(c->act));
    if (c->pad_token_id >= 0) cJSON_AddNumberToObject(o, "pad_token_id", c->pad_token_id);
    cJSON_AddNumberToObject(o, "eos_token_id", c->eos_token_id);
    cJSON_AddNumberToObject(o, "bos_token_id", c->eos_token_id);
    if (c->num_labels) mdl_hf_add_labels(o, c->num_labels);
    return o;
}

rt_status gpt2_config_save(const gpt2_config *c, const char *path) {
    return mdl_hf_write_json(gpt2_config_json(c), path);
}

/* Every parameter (unsharded, unpadded vocab) in saturating 64-bit arithmetic. */
static uint64_t gpt2_param_count(const gpt2_config *c) {
    const uint64_t C = (uint64_t)c->n_embd, F = (uint64_t)gpt2_inner(c);
    /* a block: qkv and proj 4 C^2 + 4 C, the MLP 2 C F + F + C, two LayerNorms 4 C */
    uint64_t block = mdl_size_add(mdl_size_mul(C, mdl_size_add(4 * C, 2 * F)), F + 9 * C);
    uint64_t rows = (uint64_t)c->vocab_size + (uint64_t)c->n_positions + (uint64_t)c->num_labels; /* wte, wpe, score */
    return mdl_size_add(mdl_size_add(mdl_size_mul(rows, C), mdl_size_mul((uint64_t)c->n_layer, block)), 2 * C);
}

rt_status gpt2_config_validate(const gpt2_config *c, int tp) {
    rt_status st = mdl_fields_check("GPT-2 config", gpt2_fields, GPT2_N_FIELDS, c);
    if (st != RT_OK) return st;
    if (c->n_embd % c->n_head)
        return rt_errorf(RT_ERR_CONFIG, "GPT-2 config: n_embd %d is not divisible by n_head %d", c->n_embd, c->n_head);
    if (c->num_labels < 0 || c->num_labels > MDL_MAX_LABELS) /* 0: the language model, no score head */
        return rt_errorf(RT_ERR_CONFIG, "GPT-2 config: num_labels %d is not in [0, %d]", c->num_labels, MDL_MAX_LABELS);
    st = mdl_check_params("GPT-2 config", "vocab_size, n_positions, n_embd, n_layer and n_inner", gpt2_param_count(c));
    if (st != RT_OK) return st;
    /* the vocab needs no check: the embedding is padded to a multiple of 128*tp rows */
    st = mdl_check_tp(tp, "n_head", c->n_head, "FFN width", gpt2_inner(c));
    if (st != RT_OK) return st;
    const float p[3] = {c->embd_pdrop, c->resid_pdrop, c->attn_pdrop};
    return mdl_check_dropouts("GPT-2 config", p, 3);
}

/* The tp rule comes from the GPT-2 map, which the HF loader and tz-convert also read. */
static int gpt2_add(gpt2_model *m, const char *fmt, int l, int64_t d0, int64_t d1, bool no_decay, rt_init_kind init,
                    float std) {
    char name[RT_PARAM_NAME_MAX];
    snprintf(name, sizeof name, fmt, l);
    int64_t shape[2] = {d0, d1};
    return rt_params_add(&m->params, name, d1 ? 2 : 1, shape, ckpt_map_tp_rule(&ckpt_map_gpt2, name), no_decay, init,
                         std);
}

static const mdl_stack_names gpt2_block_names = {"h.%d.ln_1.weight",
                                                 "h.%d.ln_1.bias",
                                                 "h.%d.attn.c_attn.weight",
                                                 "h.%d.attn.c_attn.bias",
                                                 "h.%d.attn.c_proj.weight",
                                                 "h.%d.attn.c_proj.bias",
                                                 "h.%d.ln_2.weight",
                                                 "h.%d.ln_2.bias",
                                                 "h.%d.mlp.c_fc.weight",
                                                 "h.%d.mlp.c_fc.bias",
                                                 "h.%d.mlp.c_proj.weight",
                                                 "h.%d.mlp.c_proj.bias",
                                                 "ln_f.weight",
                                                 "ln_f.bias"};

/* The stage's parameters: wte and wpe on the first, its blocks, ln_f and score on the last. */
static void gpt2_declare_params(gpt2_model *m, int first_block, int n_blocks) {
    const gpt2_config *c = &m->cfg;
    const bool first = mdl_stage_is_first(m->stage), last = mdl_stage_is_last(m->stage);
    float std = c->initializer_range;
    int C = m->C;
    m->wte = m->wpe = m->score = -1;
    if (first) {
        m->wte = gpt2_add(m, "wte.weight", 0, m->vocab.local, C, false, RT_INIT_NORMAL, std);
        m->params.specs[m->wte].vocab_rows = c->vocab_size; /* checkpoints store the unpadded table */
        /* a language model's, tied to its head's copy on the last stage */
        m->params.specs[m->wte].tied = m->stage.count > 1 && !c->num_labels;
        m->wpe = gpt2_add(m, "wpe.weight", 0, c->n_positions, C, false, RT_INIT_NORMAL, std);
    }
    /* HF scales the residual projections by 1/sqrt(2 n_layer) (GPT-2 paper, section 2.3) */
    mdl_stack_config bc = {.n_layer = n_blocks,
                           .C = C,
                           .n_head = c->n_head,
                           .F = gpt2_inner(c),
                           .norm = MDL_NORM_LAYER,
                           .norm_eps = c->layer_norm_eps,
                           .final_norm = last,
                           .act = c->act,
                           .attn_pdrop = c->attn_pdrop,
                           .resid_pdrop = c->resid_pdrop,
                           .emb_pdrop = first ? c->embd_pdrop : 0,
                           .checkpoint_layers = c->checkpoint_layers,
                           .layer_offset = first_block,
                           .layers_total = c->n_layer,
                           .lora = c->lora};
    mdl_stack_compact_sites(&bc);
    mdl_stack_init(&m->blocks, &bc, m->be, m->tp, &m->params);
    mdl_stack_declare_named(&m->blocks, &gpt2_block_names, &ckpt_map_gpt2, std, std / sqrtf(2.0f * (float)c->n_layer));
    /* the classifier's head; a language model (num_labels 0) has only the tied one */
    if (last && c->num_labels) m->score = gpt2_add(m, "score.weight", 0, c->num_labels, C, false, RT_INIT_NORMAL, std);
    if (last && !first && !c->num_labels) { /* the tied head's copy of wte (Megatron keeps one on each end) */
        m->wte = gpt2_add(m, "wte.weight", 0, m->vocab.local, C, false, RT_INIT_NORMAL, std);
        m->params.specs[m->wte].vocab_rows = c->vocab_size;
        m->params.specs[m->wte].copy = m->params.specs[m->wte].tied = true;
    }
    mdl_lora_freeze_base(&m->params, c->lora, &ckpt_map_gpt2);
}

/* m's own copy of the config's LoRA settings, which cfg.lora then points at. */
static void gpt2_own_config(gpt2_model *m, const gpt2_config *c) {
    m->cfg = *c;
    if (c->lora) {
        ckpt_peft_config_copy(&m->lora, c->lora);
        m->cfg.lora = &m->lora;
    }
}

/* A stage's parameters draw the init streams the whole model's same-named ones draw: their
 * indices in its declaration, found by declaring it without allocating. */
static void gpt2_whole_model_streams(gpt2_model *m) {
    gpt2_model whole = *m;
    whole.stage = mdl_stage_whole();
    rt_params_init(&whole.params, m->be);
    gpt2_declare_params(&whole, 0, m->cfg.n_layer);
    rt_params_streams_from(&m->params, &whole.params);
    rt_params_free(&whole.params);
    mdl_stack_free(&whole.blocks);
}

/* Lays out the activation buffers in the arena (measuring when a->base is NULL). */
static void gpt2_layout(gpt2_model *m, rt_arena *a) {
    const size_t BT = m->max_BT, B = (size_t)m->max_B;
    const size_t C = (size_t)m->C, NL = (size_t)m->cfg.num_labels;
    const size_t f = sizeof(float), i = sizeof(int32_t);
    mdl_stack_layout(&m->blocks, a, m->max_B, m->max_T, 0, NULL);
    m->pooled = rt_arena_take(a, B * C, f);
    m->logits = rt_arena_take(a, B * NL, f);
    m->dlogits = rt_arena_take(a, B * NL, f);
    m->losses = rt_arena_take(a, B, f);
    m->dpooled = rt_arena_take(a, B * C, f);
    m->key_mask = rt_arena_take(a, BT, f);
    m->padding.key_len = rt_arena_take(a, B, i);
    m->ids = rt_arena_take(a, BT, i);
    m->pos = rt_arena_take(a, BT, i);
    m->last = rt_arena_take(a, B, i);
    m->labels = rt_arena_take(a, B, i);
    mdl_lm_head_layout(&m->head, a);
}

/* Points every activation buffer at slot k's copy (models/layers/stage_pipe.h). */
static void gpt2_use_slot(void *model, int k) {
    gpt2_model *m = model;
    rt_arena arena = {.base = (char *)m->act_block + (size_t)k * m->act_bytes};
    gpt2_layout(m, &arena);
    mdl_padding_use_slot(&m->padding, k);
}

/* The widest per-token row of any activation buffer (mdl_check_activations): the blocks' 3 C,
 * F and n_head x T attention probabilities, the LM logits' vocab, the head's labels. */
static uint64_t gpt2_act_width(const gpt2_config *c, int max_T) {
    uint64_t w = mdl_size_max(3 * (uint64_t)c->n_embd, (uint64_t)gpt2_inner(c));
    w = mdl_size_max(w, (uint64_t)c->n_head * (uint64_t)max_T);
    w = mdl_size_max(w, (uint64_t)ckpt_tp_padded_vocab(c->vocab_size, 1));
    return mdl_size_max(w, (uint64_t)c->num_labels);
}

static rt_status gpt2_stage_pipe(gpt2_model *m, rt_comm *pp, int max_micro);

rt_status gpt2_params_layout(const gpt2_config *c, rt_backend *be, rt_comm *tp, rt_params *out) {
    rt_status st = RT_OK;
    gpt2_model *m = rt_xcalloc(1, sizeof *m);
    memset(out, 0, sizeof *out);
    RT_TRY(gpt2_config_validate(c, tp->size));
    gpt2_own_config(m, c);
    m->be = be;
    m->tp = tp;
    m->stage = mdl_stage_whole();
    m->C = c->n_embd;
    m->vocab = mdl_vocab_shard(c->vocab_size, tp);
    rt_params_init(&m->params, be);
    gpt2_declare_params(m, 0, c->n_layer);
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

rt_status gpt2_model_init(const gpt2_config *c, rt_backend *be, rt_comm *tp, int max_B, int max_T, uint64_t seed,
                          gpt2_model **out) {
    return gpt2_model_init_stage(c, be, tp, rt_comm_self(), 1, max_B, max_T, seed, out);
}

rt_status gpt2_model_init_stage(const gpt2_config *c, rt_backend *be, rt_comm *tp, rt_comm *pp, int max_micro,
                                int max_B, int max_T, uint64_t seed, gpt2_model **out) {
    rt_status st = RT_OK;
    gpt2_model *m = rt_xcalloc(1, sizeof *m);
    int first_block = 0, n_blocks = 0;
    const mdl_stage stage = {pp->rank, pp->size};
    *out = NULL;
    RT_TRY(gpt2_config_validate(c, tp->size));
    RT_TRY(mdl_stage_blocks(stage, c->n_layer, "GPT-2", &first_block, &n_blocks));
    if (max_B < 1 || max_T < 1) RT_FAIL(RT_ERR_CONFIG, "GPT-2: batch size %d and length %d must be >= 1", max_B, max_T);
    if (max_T > c->n_positions)
        RT_FAIL(RT_ERR_CONFIG, "GPT-2: max length %d exceeds the model's n_positions %d", max_T, c->n_positions);
    RT_TRY(mdl_check_activations("GPT-2 activations", (uint64_t)c->n_layer, (uint64_t)max_B, (uint64_t)max_T,
                                 gpt2_act_width(c, max_T), "lower --batch-size or --max-len"));
    gpt2_own_config(m, c);
    m->be = be;
    m->tp = tp;
    m->stage = stage;
    m->pp = pp;
    m->max_B = max_B;
    m->max_T = max_T;
    m->max_BT = (size_t)max_B * (size_t)max_T;
    m->C = c->n_embd;
    m->vocab = mdl_vocab_shard(c->vocab_size, tp);
    rt_params_init(&m->params, be);
    gpt2_declare_params(m, first_block, n_blocks);
    if (stage.count > 1) gpt2_whole_model_streams(m);
    RT_TRY(rt_params_alloc(&m->params));
    rt_params_init_weights(&m->params, seed);
    if (m->wte >= 0) mdl_vocab_clear_padding(be, &m->vocab, P(m->wte), m->C);
    /* the head's rows for a language model's last stage only: a classifier uses just its logits
     * (gpt2_lm_logits) */
    mdl_lm_head_init(&m->head, be, tp, &m->vocab, m->C, c->vocab_size,
                     c->num_labels || !mdl_stage_is_last(stage) ? 0 : m->max_BT, "GPT-2");
    rt_arena arena = {0};
    gpt2_layout(m, &arena);
    m->act_bytes = (arena.used + 63) & ~(size_t)63;
    m->act_slots = stage.count > 1 && !c->pp_recompute ? rt_pipe_in_flight(stage.index, stage.count, max_micro) : 1;
    RT_TRY(rt_backend_alloc(be, m->act_bytes * (size_t)m->act_slots,
                            stage.count > 1
                                ? "GPT-2 activations (lower --batch-size or --max-len, or add --pp-recompute "
                                  "or --checkpoint-activations)"
                                : "GPT-2 activations (lower --batch-size or --max-len, or add "
                                  "--checkpoint-activations)",
                            &m->act_block));
    for (int k = m->act_slots - 1; k >= 0; k--) { /* every slot's head mask; slot 0 last */
        gpt2_use_slot(m, k);
        RT_TRY(mdl_lm_head_ready(&m->head));
    }
    m->h_pos = rt_xmalloc(m->max_BT * sizeof(int32_t));
    m->h_shifted = rt_xmalloc(m->max_BT * sizeof(int32_t));
    m->h_last = rt_xmalloc((size_t)max_B * sizeof(int32_t));
    mdl_padding_init(&m->padding, max_B, m->act_slots);
    m->h_mask = rt_xmalloc(m->max_BT * sizeof(float));
    m->h_losses = rt_xmalloc((size_t)max_B * sizeof(float)); /* the head's per-row losses */
    if (stage.count > 1) RT_TRY(gpt2_stage_pipe(m, pp, max_micro));
    *out = m;
    return RT_OK;
fail:
    gpt2_model_free(m);
    return st;
}

void gpt2_model_free(gpt2_model *m) {
    if (!m) return;
    mdl_stage_pipe_free(m->pipe);
    mdl_lm_head_free(&m->head);
    if (m->act_block) rt_free_device(m->be, m->act_block);
    rt_params_free(&m->params);
    mdl_stack_free(&m->blocks);
    ckpt_peft_config_free(&m->lora);
    free(m->h_pos);
    free(m->h_shifted);
    free(m->h_last);
    mdl_padding_free(&m->padding);
    free(m->h_mask);
    free(m->h_losses);
    free(m);
}

rt_params *gpt2_model_params(gpt2_model *m) { return &m->params; }
rt_comm *gpt2_model_tp(gpt2_model *m) { return m->tp; }
int gpt2_model_padded_vocab(const gpt2_model *m) { return m->vocab.padded; }
const gpt2_config *gpt2_model_config(const gpt2_model *m) { return &m->cfg; }

/* Uploads ids and builds positions and the key mask; pool_rows gets b*T + the last non-pad
 * position of each row (HF: the last token that is not pad_token_id, 0 when none). */
rt_status gpt2_upload(gpt2_model *m, const int32_t *host_ids, const int32_t *host_mask, int B, int T, bool pool) {
    const gpt2_config *c = &m->cfg;
    if (B < 1 || T < 1 || B > m->max_B || T > m->max_T)
        return rt_errorf(RT_ERR_CONFIG, "GPT-2: batch %dx%d exceeds the %dx%d the model was sized for", B, T, m->max_B,
                         m->max_T);
    int pad = c->pad_token_id >= 0 ? c->pad_token_id : c->eos_token_id;
    for (int b = 0; b < B; b++) {
        int last = 0;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            int32_t id = host_ids[i];
            if (id < 0 || id >= c->vocab_size)
                return rt_errorf(RT_ERR_FORMAT, "GPT-2: token id %d at row %d position %d is outside the vocab [0, %d)",
                                 id, b, t, c->vocab_size);
            m->h_pos[i] = t;
            m->h_mask[i] = (!host_mask || host_mask[i]) ? 0.0f : GPT2_MASKED;
            if (id != pad) last = t;
        }
        m->h_last[b] = b * T + last;
    }
    rt_backend *be = m->be;
    size_t BT = (size_t)B * T;
    rt_to_device(be, m->ids, host_ids, BT * sizeof(int32_t));
    rt_to_device(be, m->pos, m->h_pos, BT * sizeof(int32_t));
    rt_to_device(be, m->key_mask, m->h_mask, BT * sizeof(float));
    if (pool) rt_to_device(be, m->last, m->h_last, (size_t)B * sizeof(int32_t));
    mdl_padding_upload(&m->padding, be, host_mask, B, T);
    return RT_OK;
}

/* GPT-2 attends causally, with padded keys masked (models/layers/padding.h). */
static mdl_stack_mask gpt2_mask(const void *model) {
    const gpt2_model *m = model;
    mdl_stack_mask mask = {.causal = true};
    mdl_padding_keys(&m->padding, m->key_mask, &mask);
    return mask;
}

static rt_status gpt2_embed(gpt2_model *m, size_t BT) {
    rt_backend *be = m->be;
    float *x = mdl_stack_input(&m->blocks);
    rt_status st = mdl_vocab_embedding_fwd(be, m->tp, x, m->ids, P(m->wte), BT, m->C, m->vocab.start, m->vocab.local);
    if (st == RT_OK) rt_embedding_fwd(be, x, m->pos, P(m->wpe), BT, m->C, 0, m->cfg.n_positions, true);
    return st;
}

static void gpt2_embed_bwd(gpt2_model *m, const float *demb, size_t BT) {
    rt_embedding_bwd(m->be, G(m->wte), demb, m->ids, BT, m->C, m->vocab.start, m->vocab.local);
    rt_embedding_bwd(m->be, G(m->wpe), demb, m->pos, BT, m->C, 0, m->cfg.n_positions);
}

static rt_status gpt2_stack_fwd(gpt2_model *m, int B, int T, const mdl_pass *pass) {
    mdl_stack_mask mask = gpt2_mask(m);
    return mdl_stack_forward(&m->blocks, B, T, &mask, pass);
}

/* From dL/d(the stack's output) in mdl_stack_dout(&m->blocks). */
static rt_status gpt2_stack_bwd(gpt2_model *m, int B, int T, const mdl_pass *pass, const float **demb) {
    mdl_stack_mask mask = gpt2_mask(m);
    return mdl_stack_backward(&m->blocks, B, T, &mask, pass, mdl_stack_dout(&m->blocks), demb);
}

/* The transformer body: embeddings through ln_f into m->blocks.out. */
rt_status gpt2_forward_body(gpt2_model *m, int B, int T, const mdl_pass *pass) {
    rt_status st = gpt2_embed(m, (size_t)B * T);
    return st == RT_OK ? gpt2_stack_fwd(m, B, T, pass) : st;
}

/* Backward of the body, from dL/d(ln_f output) in mdl_stack_dout(&m->blocks). */
static rt_status gpt2_backward_body(gpt2_model *m, int B, int T, const mdl_pass *pass) {
    const float *demb = NULL;
    rt_status st = gpt2_stack_bwd(m, B, T, pass, &demb);
    if (st == RT_OK) gpt2_embed_bwd(m, demb, (size_t)B * T);
    return st;
}

/* The head and its loss, queued (gpt2_cls_loss_read gives the sum). */
static void gpt2_cls_head_fwd(gpt2_model *m, const rt_batch *b, float grad_scale, float *host_logits) {
    rt_backend *be = m->be;
    const int B = b->B, C = m->C, NL = m->cfg.num_labels;
    rt_gather_rows(be, m->pooled, m->blocks.out, m->last, B, C);
    /* score has no bias and is replicated: a plain linear */
    mdl_col_linear_fwd(be, rt_xf(m->logits), rt_xf(m->pooled), P(m->score), NULL, (size_t)B, C, NL);
    if (host_logits) rt_to_host(be, host_logits, m->logits, (size_t)B * NL * sizeof(float));
    mdl_cls_loss(be, b, NL, m->logits, m->dlogits, m->losses, m->labels, grad_scale);
}
static void gpt2_cls_loss_read(gpt2_model *m, int B, const mdl_pass *pass, double *loss_sum) {
    *loss_sum = mdl_loss_sum(m->be, m->losses, (size_t)B, m->h_losses, pass);
}

/* logits = pooled score^T; pooled = rows of ln_f's output. score is replicated: each rank
 * already has the whole dL/dpooled, so no all-reduce. */
static void gpt2_cls_head_bwd(gpt2_model *m, int B, int T) {
    rt_backend *be = m->be;
    const int C = m->C;
    mdl_row_linear_bwd(be, rt_xf(m->dpooled), false, G(m->score), NULL, rt_xf(m->dlogits), rt_xf(m->pooled),
                       P(m->score), (size_t)B, C, m->cfg.num_labels);
    rt_clear(be, mdl_stack_dout(&m->blocks), (size_t)B * T * C * sizeof(float));
    rt_scatter_rows_add(be, mdl_stack_dout(&m->blocks), rt_xf(m->dpooled), m->last, B, C);
}

rt_status gpt2_cls_step(gpt2_model *m, const rt_batch *b, const mdl_pass *pass, float grad_scale, double *loss_sum,
                        float *host_logits) {
    rt_status st = RT_OK;
    const int B = b->B, T = b->T;
    if (m->cfg.num_labels == 0) RT_FAIL(RT_ERR_CONFIG, "GPT-2: this model has no classification head (num_labels 0)");
    RT_TRY(mdl_cls_check_batch("GPT-2", b, m->cfg.num_labels));
    if (m->stage.count > 1) {
        if (grad_scale > 0) RT_FAIL(RT_ERR_CONFIG, "GPT-2: a pipeline stage trains through its pipeline step");
        return mdl_stage_pipe_forward(m->pipe, b, loss_sum, host_logits);
    }
    RT_TRY(gpt2_upload(m, b->input_ids, b->attention_mask, B, T, true));
    RT_TRY(gpt2_forward_body(m, B, T, pass));
    gpt2_cls_head_fwd(m, b, grad_scale, host_logits);
    if (grad_scale > 0) {
        gpt2_cls_head_bwd(m, B, T);
        RT_TRY(gpt2_backward_body(m, B, T, pass));
    }
    gpt2_cls_loss_read(m, B, pass, loss_sum); /* with the backward queued */
fail:
    return st;
}

/* ---- the classifier as a pipeline stage (models/layers/stage_pipe.h) ---- */

static rt_status gpt2_sp_upload(void *model, const rt_batch *b) {
    gpt2_model *m = model;
    return gpt2_upload(m, b->input_ids, b->attention_mask, b->B, b->T, mdl_stage_is_last(m->stage));
}
static rt_status gpt2_sp_embed(void *model, const rt_batch *b) { return gpt2_embed(model, (size_t)b->B * b->T); }
static void gpt2_sp_embed_bwd(void *model, const rt_batch *b, const float *demb) {
    gpt2_embed_bwd(model, demb, (size_t)b->B * b->T);
}
static rt_status gpt2_sp_head_fwd(void *model, const rt_batch *b, const mdl_pass *pass, float grad_scale,
                                  double *loss_sum, float *host_logits) {
    gpt2_cls_head_fwd(model, b, grad_scale, host_logits); /* GPT-2's head has no dropout */
    gpt2_cls_loss_read(model, b->B, pass, loss_sum);
    return RT_OK;
}
static rt_status gpt2_sp_head_bwd(void *model, const rt_batch *b, const mdl_pass *pass) {
    (void)pass;
    gpt2_cls_head_bwd(model, b->B, b->T);
    return RT_OK;
}

/* The language model's stages: a batch's labels are its ids where the mask is set (HF's
 * labels = input_ids, -100 on padding), shifted; the last stage's tied head predicts them. */
static rt_status gpt2_sp_upload_lm(void *model, const rt_batch *b) {
    gpt2_model *m = model;
    const int B = b->B, T = b->T;
    rt_status st = gpt2_upload(m, b->input_ids, b->attention_mask, B, T, false);
    m->lm_n = 0;
    if (st != RT_OK || !mdl_stage_is_last(m->stage)) return st;
    for (int r = 0; r < B; r++)
        for (int t = 0; t < T; t++) {
            const size_t i = (size_t)r * T + t;
            m->h_shifted[i] = t + 1 < T && b->attention_mask[i + 1] ? b->input_ids[i + 1] : -100;
        }
    return mdl_lm_head_collect(&m->head, m->h_shifted, (size_t)B * T, T, &m->lm_n);
}
static rt_status gpt2_sp_head_fwd_lm(void *model, const rt_batch *b, const mdl_pass *pass, float grad_scale,
                                     double *loss_sum, float *host_logits) {
    gpt2_model *m = model;
    (void)b, (void)pass, (void)host_logits;
    *loss_sum = 0;
    if (m->lm_n == 0) return RT_OK;
    const mdl_lm_head_grad grad = {.dwte = grad_scale > 0 ? G(m->wte) : NULL, .grad_scale = grad_scale};
    rt_status st = mdl_lm_head_xent(&m->head, m->blocks.out, P(m->wte), m->lm_n, grad_scale > 0 ? &grad : NULL);
    if (st == RT_OK) *loss_sum += mdl_lm_head_losses(&m->head, m->lm_n, pass);
    return st;
}
static rt_status gpt2_sp_head_bwd_lm(void *model, const rt_batch *b, const mdl_pass *pass) {
    gpt2_model *m = model;
    const size_t BT = (size_t)b->B * b->T;
    (void)pass;
    if (m->lm_n == 0) { /* nothing predicted: no gradient, but the stages still pass one back */
        rt_clear(m->be, mdl_stack_dout(&m->blocks), BT * m->C * sizeof(float));
        return RT_OK;
    }
    mdl_lm_head_backward(&m->head, mdl_stack_dout(&m->blocks), BT, m->lm_n);
    return RT_OK;
}

static rt_status gpt2_stage_pipe(gpt2_model *m, rt_comm *pp, int max_micro) {
    const bool lm = m->cfg.num_labels == 0;
    const mdl_stage_model sm = {.model = m,
                                .family = "GPT-2",
                                .be = m->be,
                                .pp = pp,
                                .blocks = &m->blocks,
                                .C = m->C,
                                .max_B = m->max_B,
                                .num_labels = m->cfg.num_labels,
                                .max_BT = m->max_BT,
                                .upload = lm ? gpt2_sp_upload_lm : gpt2_sp_upload,
                                .embed = gpt2_sp_embed,
                                .embed_bwd = gpt2_sp_embed_bwd,
                                .mask = gpt2_mask,
                                .head_fwd = lm ? gpt2_sp_head_fwd_lm : gpt2_sp_head_fwd,
                                .head_bwd = lm ? gpt2_sp_head_bwd_lm : gpt2_sp_head_bwd,
                                .slots = m->act_slots,
                                .use_slot = gpt2_use_slot};
    return mdl_stage_pipe_init(&sm, max_micro, &m->pipe);
}

rt_status gpt2_lm_pipe_step(gpt2_model *m, const rt_batch *b, int n, uint64_t seed, int64_t step, float grad_scale,
                            double *loss_sum) {
    *loss_sum = 0;
    if (!m->pipe || m->cfg.num_labels != 0)
        return rt_errorf(RT_ERR_CONFIG, "GPT-2: gpt2_lm_pipe_step on a model that is not a language model's stage");
    return mdl_stage_pipe_step(m->pipe, b, n, seed, step, grad_scale, loss_sum);
}

void gpt2_lm_shift_labels(const int32_t *labels, int B, int T, int32_t *targets) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const size_t i = (size_t)b * T + t;
            targets[i] = t + 1 < T ? labels[i + 1] : -100;
        }
}

rt_status gpt2_lm_step(gpt2_model *m, const int32_t *host_ids, const int32_t *host_mask, const int32_t *host_labels,
                       int B, int T, const mdl_pass *pass, float grad_scale, double *loss_sum, int *n_targets) {
    rt_status st = RT_OK;
    int n = 0;
    *loss_sum = 0;
    if (n_targets) *n_targets = 0;
    if (m->stage.count > 1) { /* evaluation through the stages; every stage counts the targets itself */
        if (grad_scale > 0) RT_FAIL(RT_ERR_CONFIG, "GPT-2: a pipeline stage trains through gpt2_lm_pipe_step");
        const rt_batch b = {.B = B, .T = T, .input_ids = (int32_t *)host_ids, .attention_mask = (int32_t *)host_mask};
        gpt2_lm_shift_labels(host_labels, B, T, m->h_shifted);
        for (size_t i = 0; n_targets && i < (size_t)B * T; i++) *n_targets += m->h_shifted[i] != -100;
        return mdl_stage_pipe_forward(m->pipe, &b, loss_sum, NULL);
    }
    RT_TRY(gpt2_upload(m, host_ids, host_mask, B, T, false));
    gpt2_lm_shift_labels(host_labels, B, T, m->h_shifted);
    RT_TRY(mdl_lm_head_collect(&m->head, m->h_shifted, (size_t)B * T, T, &n));
    RT_TRY(gpt2_forward_body(m, B, T, pass));
    if (n == 0) return RT_OK;
    const bool backward = grad_scale > 0;
    const mdl_lm_head_grad grad = {.dwte = backward ? G(m->wte) : NULL, .grad_scale = grad_scale};
    RT_TRY(mdl_lm_head_xent(&m->head, m->blocks.out, P(m->wte), n, backward ? &grad : NULL));
    if (n_targets) *n_targets = n;
    if (backward) {
        mdl_lm_head_backward(&m->head, mdl_stack_dout(&m->blocks), (size_t)B * T, n);
        RT_TRY(gpt2_backward_body(m, B, T, pass));
    }
    *loss_sum = mdl_lm_head_losses(&m->head, n, pass); /* with the backward queued */
fail:
    return st;
}

double gpt2_lm_train_flops(gpt2_model *m, int B, int T) {
    /* the tied head: 2 N C V forward, twice that backward (input and table gradients) */
    const double head = 6.0 * (double)B * T * m->C * m->cfg.vocab_size;
    return mdl_stack_train_flops(&m->blocks, B, T, 0) + head;
}

rt_status gpt2_lm_logits(gpt2_model *m, const int32_t *host_ids, int B, int T, float *host_logits, float *host_hidden) {
    rt_status st = RT_OK;
    rt_backend *be = m->be;
    const size_t BT = (size_t)B * T;
    mdl_pass pass = {0};
    RT_TRY(gpt2_upload(m, host_ids, NULL, B, T, false));
    RT_TRY(gpt2_forward_body(m, B, T, &pass));
    if (host_hidden) rt_to_host(be, host_hidden, m->blocks.out, BT * m->C * sizeof(float));
    if (host_logits) { /* every position through the tied head: this rank's vocab columns, gathered */
        RT_TRY(mdl_lm_head_logits_rows(&m->head, BT));
        mdl_col_linear_fwd(be, rt_xf(m->head.logits), rt_xf(m->blocks.out), P(m->wte), NULL, BT, m->C, m->vocab.local);
        RT_TRY(mdl_lm_head_to_host(&m->head, BT, host_logits));
    }
fail:
    return st;
}

/* ---- the model as a classifier for the shared GLUE driver ---- */

static rt_status gpt2_cls_vstep(void *model, const rt_batch *b, const mdl_pass *pass, float grad_scale,
                                double *loss_sum, float *host_logits) {
    return gpt2_cls_step(model, b, pass, grad_scale, loss_sum, host_logits);
}

static rt_params *gpt2_cls_vparams(void *model) { return gpt2_model_params(model); }

rt_status gpt2_save_hf(gpt2_model *m, const char *dir) {
    return mdl_hf_save_folder(dir, &ckpt_map_gpt2, &m->params, m->cfg.vocab_size, m->cfg.n_head, m->tp, m->pp,
                              gpt2_config_json(&m->cfg));
}

static rt_status gpt2_cls_vsave_hf(void *model, const char *dir) { return gpt2_save_hf(model, dir); }

static void gpt2_cls_vfree(void *model) { gpt2_model_free(model); }

static rt_status gpt2_cls_vpipeline(void *model, const rt_batch *b, int n, uint64_t seed, int64_t step,
                                    float grad_scale, double *loss_sum) {
    return mdl_stage_pipe_step(((gpt2_model *)model)->pipe, b, n, seed, step, grad_scale, loss_sum);
}

static double gpt2_cls_vflops(void *model, int B, int T) {
    return mdl_stack_train_flops(&((gpt2_model *)model)->blocks, B, T, 0);
}

void gpt2_classifier(gpt2_model *m, mdl_classifier *out) {
    *out = (mdl_classifier){.model = m,
                            .num_labels = m->cfg.num_labels,
                            .step = gpt2_cls_vstep,
                            .params = gpt2_cls_vparams,
                            .save_hf = gpt2_cls_vsave_hf,
                            .free = gpt2_cls_vfree,
                            .train_flops = gpt2_cls_vflops,
                            .pipeline_step = m->stage.count > 1 ? gpt2_cls_vpipeline : NULL};
}
