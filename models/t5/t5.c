/* T5 forward and backward over the backend ops and the Megatron layers (see t5.h). The
 * structure is gpt2.c's and bert.c's: parameters declared from one table, activations laid
 * out once in an arena for the largest batch, a forward and a backward per stack, and a step
 * around them. The encoder and the decoder share one block body; the decoder's blocks add
 * cross-attention over the encoder's output, whose gradient the decoder accumulates over all
 * its blocks before the encoder's backward starts. The model's layout and the pieces that
 * generation (t5_generate.c) reuses are declared in t5_internal.h. */
#include "models/t5/t5.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_weights.h"
#include "checkpoints/ckpt_safetensors.h"
#include "checkpoints/ckpt_source.h"
#include "checkpoints/ckpt_tp.h"
#include "models/layers/parallel.h"
#include "models/layers/flops.h"
#include "models/layers/hf_config.h"
#include "models/layers/lora.h"
#include "models/layers/stage_pipe.h"
#include "models/t5/t5_internal.h"
#include "runtime/base/rt_arena.h"
#include "runtime/train/rt_pipe.h"
#include "runtime/base/rt_rng.h"

/* ---- a block's parameters as a table: one row per parameter (their tp rules and HF names
 * are in checkpoints/ckpt_map_tables.c) ---- */

typedef enum {
    T5_SHAPE_C,
    T5_SHAPE_IN_PROJ,
    T5_SHAPE_OUT_PROJ,
    T5_SHAPE_FF_IN,
    T5_SHAPE_FF_OUT,
    T5_SHAPE_BUCKETS
} t5_shape;
typedef enum { T5_STD_NORM, T5_STD_Q, T5_STD_KV, T5_STD_O, T5_STD_WI, T5_STD_WO, T5_STD_REL } t5_std;
typedef enum { T5_SUB_SELF, T5_SUB_CROSS, T5_SUB_FF } t5_sub;
enum { T5_ALL = 0, T5_DECODER = 1, T5_BLOCK0 = 2, T5_GATED = 4, T5_PLAIN = 8 };

typedef struct {
    const char *name; /* after "<stack>.block.<n>.layer.<sub>." */
    size_t field;     /* offsetof(mdl_block_params, ...) */
    size_t lora;      /* a linear's: offsetof its adapter (mdl_lora) in mdl_block_params; T5_NO_LORA */
    t5_shape shape;
    t5_std std;
    t5_sub sub;
    unsigned when;
} t5_param_row;

#define T5_F(x) offsetof(mdl_block_params, x)
#define T5_NO_LORA ((size_t)-1)
/* HF's named_parameters order within a block. */
static const t5_param_row t5_block_rows[] = {
    {"SelfAttention.q.weight", T5_F(attn.q_w), T5_F(attn.q_l), T5_SHAPE_IN_PROJ, T5_STD_Q, T5_SUB_SELF, T5_ALL},
    {"SelfAttention.k.weight", T5_F(attn.k_w), T5_F(attn.k_l), T5_SHAPE_IN_PROJ, T5_STD_KV, T5_SUB_SELF, T5_ALL},
    {"SelfAttention.v.weight", T5_F(attn.v_w), T5_F(attn.v_l), T5_SHAPE_IN_PROJ, T5_STD_KV, T5_SUB_SELF, T5_ALL},
    {"SelfAttention.o.weight", T5_F(attn.proj_w), T5_F(attn.proj_l), T5_SHAPE_OUT_PROJ, T5_STD_O, T5_SUB_SELF, T5_ALL},
    {"SelfAttention.relative_attention_bias.weight", 0 /* the stack's rel_bias */, T5_NO_LORA, T5_SHAPE_BUCKETS,
     T5_STD_REL, T5_SUB_SELF, T5_BLOCK0},
    {"layer_norm.weight", T5_F(norm1.w), T5_NO_LORA, T5_SHAPE_C, T5_STD_NORM, T5_SUB_SELF, T5_ALL},
    {"EncDecAttention.q.weight", T5_F(cross.q_w), T5_F(cross.q_l), T5_SHAPE_IN_PROJ, T5_STD_Q, T5_SUB_CROSS,
     T5_DECODER},
    {"EncDecAttention.k.weight", T5_F(cross.k_w), T5_F(cross.k_l), T5_SHAPE_IN_PROJ, T5_STD_KV, T5_SUB_CROSS,
     T5_DECODER},
    {"EncDecAttention.v.weight", T5_F(cross.v_w), T5_F(cross.v_l), T5_SHAPE_IN_PROJ, T5_STD_KV, T5_SUB_CROSS,
     T5_DECODER},
    {"EncDecAttention.o.weight", T5_F(cross.proj_w), T5_F(cross.proj_l), T5_SHAPE_OUT_PROJ, T5_STD_O, T5_SUB_CROSS,
     T5_DECODER},
    {"layer_norm.weight", T5_F(norm_cross.w), T5_NO_LORA, T5_SHAPE_C, T5_STD_NORM, T5_SUB_CROSS, T5_DECODER},
    {"DenseReluDense.wi.weight", T5_F(ffn.up_w), T5_F(ffn.up_l), T5_SHAPE_FF_IN, T5_STD_WI, T5_SUB_FF, T5_PLAIN},
    {"DenseReluDense.wi_0.weight", T5_F(ffn.up_w), T5_F(ffn.up_l), T5_SHAPE_FF_IN, T5_STD_WI, T5_SUB_FF, T5_GATED},
    {"DenseReluDense.wi_1.weight", T5_F(ffn.up_lin_w), T5_F(ffn.up_lin_l), T5_SHAPE_FF_IN, T5_STD_WI, T5_SUB_FF,
     T5_GATED},
    {"DenseReluDense.wo.weight", T5_F(ffn.down_w), T5_F(ffn.down_l), T5_SHAPE_FF_OUT, T5_STD_WO, T5_SUB_FF, T5_ALL},
    {"layer_norm.weight", T5_F(norm2.w), T5_NO_LORA, T5_SHAPE_C, T5_STD_NORM, T5_SUB_FF, T5_ALL},
};
#undef T5_F

/* ---- relative positions ---- */

int t5_relative_bucket(int relative_position, bool bidirectional, int num_buckets, int max_distance) {
    int bucket = 0, n = num_buckets, rp = relative_position;
    if (bidirectional) {
        n /= 2;
        if (rp > 0) bucket += n;
        rp = rp < 0 ? -rp : rp;
    } else {
        rp = rp < 0 ? -rp : 0; /* -min(rp, 0): a key after the query is bucket 0 (masked anyway) */
    }
    int max_exact = n / 2;
    if (rp < max_exact) return bucket + rp;
    /* torch's float32 ops in HF's order: log(rp / max_exact) / log(max_distance / max_exact) *
     * (n - max_exact), truncated; the Python scalars become float32 where they meet the tensor */
    float scaled = logf((float)rp / (float)max_exact) / (float)log((double)max_distance / (double)max_exact) *
                   (float)(n - max_exact);
    int large = max_exact + (int)scaled;
    return bucket + (large < n - 1 ? large : n - 1);
}

/* ---- construction ---- */

/* The tp rule comes from the T5 map, which the HF loader and tz-convert also read. */
static int t5_add(t5_model *m, const char *name, int64_t d0, int64_t d1, bool no_decay, rt_init_kind init, float std) {
    int64_t shape[2] = {d0, d1};
    return rt_params_add(&m->params, name, d1 ? 2 : 1, shape, ckpt_map_tp_rule(&ckpt_map_t5, name), no_decay, init,
                         std);
}

/* Dropout sites: the stacks' embeddings and final norms, then 8 per block (encoder blocks
 * first, then the decoder's), one per mdl_site_kind. */
enum { T5_SITE_ENC_EMBED = 1, T5_SITE_ENC_FINAL, T5_SITE_DEC_EMBED, T5_SITE_DEC_FINAL, T5_SITE_BLOCKS = 8 };

/* Every dropout of T5 has the one rate (the embeddings' where the stack starts). */
static void t5_stack_set_dropout(t5_stack *s, float p) {
    mdl_stack_config *c = &s->blocks.cfg;
    c->attn_pdrop = c->resid_pdrop = c->ffn_pdrop = c->final_pdrop = p;
    c->emb_pdrop = s->has_embed ? p : 0.0f;
}

/* A stack's blocks: pre-RMSNorm, unscaled attention (T5 folds the scaling into its init), and
 * the decoder's cross-attention. */
static void t5_stack_init(t5_model *m, t5_stack *s) {
    const t5_config *c = &m->cfg;
    mdl_stack_config bc = {.n_layer = s->L,
                           .C = c->d_model,
                           .n_head = c->num_heads,
                           .head_size = c->d_kv,
                           .F = c->d_ff,
                           .norm = MDL_NORM_RMS,
                           .norm_eps = c->layer_norm_epsilon,
                           .final_norm = s->has_final,
                           .layer_offset = s->first,
                           .layers_total = s->L_total,
                           .cross = s->decoder,
                           .position_bias = true,
                           .gated = c->gated,
                           .fp16_clamp = true,
                           .act = c->act,
                           .attn_scale = 1.0f,
                           .site_emb = s->decoder ? T5_SITE_DEC_EMBED : T5_SITE_ENC_EMBED,
                           .site_final = s->decoder ? T5_SITE_DEC_FINAL : T5_SITE_ENC_FINAL,
                           .site_stride = 8,
                           .checkpoint_layers = c->checkpoint_layers,
                           .lora = c->lora,
                           .lora_site = s->decoder ? c->num_layers : 0};
    const int first = T5_SITE_BLOCKS + 8 * (s->decoder ? c->num_layers : 0);
    for (int k = 0; k < MDL_SITE_KINDS; k++) bc.site[k] = first + k;
    mdl_stack_init(&s->blocks, &bc, m->be, m->tp, &m->params);
    t5_stack_set_dropout(s, c->dropout_rate);
}

static void t5_declare_stack(t5_model *m, t5_stack *s, const char *prefix) {
    const t5_config *c = &m->cfg;
    t5_stack_init(m, s);
    const float f = c->initializer_factor;
    const int C = m->C, Il = m->I_local, Fl = m->F_local;
    for (int b = 0; b < s->L; b++) {
        mdl_block_params *bp = &s->blocks.layer[b];
        int first = -1;
        for (size_t r = 0; r < sizeof t5_block_rows / sizeof *t5_block_rows; r++) {
            const t5_param_row *row = &t5_block_rows[r];
            if (((row->when & T5_DECODER) && !s->decoder) || ((row->when & T5_BLOCK0) && b != 0) ||
                ((row->when & T5_GATED) && !c->gated) || ((row->when & T5_PLAIN) && c->gated))
                continue;
            if ((row->when & T5_BLOCK0) && !s->has_embed) continue; /* block 0 is another stage's */
            int sub = row->sub == T5_SUB_SELF ? 0 : row->sub == T5_SUB_CROSS ? 1 : (s->decoder ? 2 : 1);
            char name[RT_PARAM_NAME_MAX];
            snprintf(name, sizeof name, "%s.block.%d.layer.%d.%s", prefix, s->first + b, sub, row->name);
            int64_t d0 = C, d1 = 0;
            switch (row->shape) {
            case T5_SHAPE_C: break;
            case T5_SHAPE_IN_PROJ: d0 = Il, d1 = C; break;
            case T5_SHAPE_OUT_PROJ: d0 = C, d1 = Il; break;
            case T5_SHAPE_FF_IN: d0 = Fl, d1 = C; break;
            case T5_SHAPE_FF_OUT: d0 = C, d1 = Fl; break;
            case T5_SHAPE_BUCKETS: d0 = c->relative_attention_num_buckets, d1 = m->NH_local; break;
            }
            /* HF's T5PreTrainedModel._init_weights */
            float std = 0.0f;
            switch (row->std) {
            case T5_STD_NORM: break;
            case T5_STD_Q: std = f / sqrtf((float)c->d_model * (float)c->d_kv); break;
            case T5_STD_KV: std = f / sqrtf((float)c->d_model); break;
            case T5_STD_O: std = f / sqrtf((float)c->num_heads * (float)c->d_kv); break;
            case T5_STD_WI: std = f / sqrtf((float)c->d_model); break;
            case T5_STD_WO: std = f / sqrtf((float)c->d_ff); break;
            case T5_STD_REL: std = f / sqrtf((float)c->d_model); break;
            }
            bool norm = row->std == T5_STD_NORM;
            int idx = t5_add(m, name, d0, d1, norm, norm ? RT_INIT_ONES : RT_INIT_NORMAL, std);
            *(row->shape == T5_SHAPE_BUCKETS ? &s->rel_bias : (int *)((char *)bp + row->field)) = idx;
            if (row->lora != T5_NO_LORA) /* PEFT's adapter after its weight */
                *(mdl_lora *)((char *)bp + row->lora) =
                    mdl_lora_declare(&m->params, c->lora, &ckpt_map_t5, idx, m->tp->size);
            if (first < 0) first = idx;
        }
        bp->first = first;
    }
    if (!s->has_final) return;
    char name[RT_PARAM_NAME_MAX];
    snprintf(name, sizeof name, "%s.final_layer_norm.weight", prefix);
    s->blocks.final.w = t5_add(m, name, C, 0, true, RT_INIT_ONES, 0);
}

/* The stage's parameters in HF's order: `shared` where a stack starts (the encoder's is the
 * whole model's; the decoder's, on a later stage, a copy) and on the last stage for a tied
 * head; its blocks; lm_head on the last stage. */
static void t5_declare_params(t5_model *m) {
    const t5_config *c = &m->cfg;
    const bool last = mdl_stage_is_last(m->stage);
    m->shared = m->lm_head = m->enc.rel_bias = m->dec.rel_bias = -1;
    if (m->enc.has_embed || m->dec.has_embed || (last && c->tie_word_embeddings)) {
        m->shared = t5_add(m, "shared.weight", m->vocab.local, m->C, false, RT_INIT_NORMAL, c->initializer_factor);
        m->params.specs[m->shared].vocab_rows = c->vocab_size; /* checkpoints store the unpadded table */
        m->params.specs[m->shared].copy = !m->enc.has_embed;
        m->params.specs[m->shared].tied = m->stage.count > 1;
    }
    t5_declare_stack(m, &m->enc, "encoder");
    t5_declare_stack(m, &m->dec, "decoder");
    if (last && !c->tie_word_embeddings) {
        m->lm_head = t5_add(m, "lm_head.weight", m->vocab.local, m->C, false, RT_INIT_NORMAL, c->initializer_factor);
        m->params.specs[m->lm_head].vocab_rows = c->vocab_size;
    }
    mdl_lora_freeze_base(&m->params, c->lora, &ckpt_map_t5);
}

/* Lays out one stack's buffers (measuring when a->base is NULL). */
static void t5_layout_stack(t5_model *m, t5_stack *s, rt_arena *a) {
    const size_t T = (size_t)s->max_T, NH = (size_t)m->NH_local;
    mdl_stack_layout(&s->blocks, a, m->max_B, s->max_T, m->max_S, &m->scratch);
    s->bias = rt_arena_take(a, NH * T * T, sizeof(float));
    s->dbias = rt_arena_take(a, NH * T * T, sizeof(float));
    s->buckets = rt_arena_take(a, T * T, sizeof(int32_t));
    s->ids = rt_arena_take(a, s->MR, sizeof(int32_t));
}

/* A stage lays out the stacks it holds blocks of, the head's buffers on the last stage only. */
static void t5_layout(t5_model *m, rt_arena *a) {
    const size_t BS = (size_t)m->max_B * m->max_S, BT = (size_t)m->max_B * m->max_T, C = (size_t)m->C;
    const size_t f = sizeof(float);
    const bool enc = m->enc.L > 0, dec = m->dec.L > 0, head = mdl_stage_is_last(m->stage);
    const size_t HT = head ? BT : 0;
    if (enc) t5_layout_stack(m, &m->enc, a);
    if (dec) t5_layout_stack(m, &m->dec, a);
    mdl_stack_scratch_layout(enc ? &m->enc.blocks : &m->dec.blocks, &m->scratch, a, BS > BT ? BS : BT);
    mdl_lm_head_layout(&m->head, a);
    m->key_mask = rt_arena_take(a, BS, f);
    m->src_pad.key_len = rt_arena_take(a, (size_t)m->max_B, sizeof(int32_t));
    m->dtop = rt_arena_take(a, HT * C, f);
    m->denc = rt_arena_take(a, dec ? BS * C : 0, f);
    m->cross_in = rt_arena_take(a, dec && !enc ? BS * C : 0, f);
}

void t5_use_slot(t5_model *m, int k) {
    rt_arena arena = {.base = (char *)m->act_block + (size_t)k * m->act_bytes};
    t5_layout(m, &arena);
    mdl_padding_use_slot(&m->src_pad, k);
    m->enc.buckets_T = m->dec.buckets_T = 0; /* each slot has its own bucket tables */
}

/* A stage's parameters draw the init streams the whole model's same-named ones draw: their
 * indices in its declaration, found by declaring it without allocating. */
static void t5_whole_model_streams(t5_model *m) {
    t5_model whole = *m;
    whole.stage = mdl_stage_whole();
    (void)t5_stage_plan(&whole); /* one stage always has a plan */
    rt_params_init(&whole.params, m->be);
    t5_declare_params(&whole);
    rt_params_streams_from(&m->params, &whole.params);
    rt_params_free(&whole.params);
    mdl_stack_free(&whole.enc.blocks);
    mdl_stack_free(&whole.dec.blocks);
}

/* The widest per-token row of any activation buffer (mdl_check_activations): C, the attention's
 * num_heads x d_kv, the FFN, num_heads x len attention probabilities, the logits' vocab. */
static uint64_t t5_act_width(const t5_config *c, int len) {
    uint64_t w = mdl_size_max((uint64_t)c->d_model, (uint64_t)c->num_heads * (uint64_t)c->d_kv);
    w = mdl_size_max(w, (uint64_t)c->d_ff);
    w = mdl_size_max(w, (uint64_t)c->num_heads * (uint64_t)len);
    return mdl_size_max(w, (uint64_t)ckpt_tp_padded_vocab(c->vocab_size, 1));
}

/* m's shape on tp rank tp->rank and stage pp->rank, nothing allocated: the config, the local
 * widths, the vocab shard and the stage's blocks (their activation rows from m->max_B, max_S and
 * max_T, 0 for a layout alone). */
static rt_status t5_model_shape(t5_model *m, const t5_config *c, rt_backend *be, rt_comm *tp, rt_comm *pp) {
    m->cfg = *c;
    if (c->lora) { /* m's own copy, which cfg.lora then points at */
        ckpt_peft_config_copy(&m->lora, c->lora);
        m->cfg.lora = &m->lora;
    }
    m->be = be;
    m->tp = tp;
    m->pp = pp;
    m->stage = (mdl_stage){pp->rank, pp->size};
    m->C = c->d_model;
    m->HS = c->d_kv;
    m->NH_local = c->num_heads / tp->size;
    m->I_local = m->NH_local * c->d_kv;
    m->F_local = c->d_ff / tp->size;
    m->head_offset = m->NH_local * tp->rank;
    m->ff_offset = m->F_local * tp->rank;
    m->vocab = mdl_vocab_shard(c->vocab_size, tp);
    return t5_stage_plan(m);
}

rt_status t5_params_layout(const t5_config *c, rt_backend *be, rt_comm *tp, rt_params *out) {
    rt_status st = RT_OK;
    t5_model *m = rt_xcalloc(1, sizeof *m);
    memset(out, 0, sizeof *out);
    RT_TRY(t5_config_validate(c, tp->size));
    RT_TRY(t5_model_shape(m, c, be, tp, rt_comm_self()));
    rt_params_init(&m->params, be);
    t5_declare_params(m);
    RT_TRY(rt_params_layout(&m->params));
    *out = m->params;
    m->params = (rt_params){0}; /* out owns the specs now */
fail:
    rt_params_free(&m->params);
    mdl_stack_free(&m->enc.blocks);
    mdl_stack_free(&m->dec.blocks);
    ckpt_peft_config_free(&m->lora);
    free(m);
    return st;
}

rt_status t5_model_init(const t5_config *c, rt_backend *be, rt_comm *tp, int max_B, int max_src, int max_tgt,
                        uint64_t seed, t5_model **out) {
    return t5_model_init_stage(c, be, tp, rt_comm_self(), 1, max_B, max_src, max_tgt, seed, out);
}

rt_status t5_model_init_stage(const t5_config *c, rt_backend *be, rt_comm *tp, rt_comm *pp, int max_micro, int max_B,
                              int max_src, int max_tgt, uint64_t seed, t5_model **out) {
    rt_status st = RT_OK;
    t5_model *m = rt_xcalloc(1, sizeof *m);
    *out = NULL;
    RT_TRY(t5_config_validate(c, tp->size));
    if (max_B < 1 || max_src < 1 || max_tgt < 1)
        RT_FAIL(RT_ERR_CONFIG, "T5: batch size %d, source length %d and target length %d must be >= 1", max_B, max_src,
                max_tgt);
    const int max_len = max_src > max_tgt ? max_src : max_tgt;
    RT_TRY(mdl_check_activations("T5 activations", (uint64_t)c->num_layers + (uint64_t)c->num_decoder_layers,
                                 (uint64_t)max_B, (uint64_t)max_len, t5_act_width(c, max_len),
                                 "lower --batch-size or the lengths"));
    m->max_B = max_B;
    m->max_S = max_src;
    m->max_T = max_tgt;
    RT_TRY(t5_model_shape(m, c, be, tp, pp));
    rt_params_init(&m->params, be);
    t5_declare_params(m);
    if (m->stage.count > 1) t5_whole_model_streams(m);
    RT_TRY(rt_params_alloc(&m->params));
    rt_params_init_weights(&m->params, seed);
    if (c->initializer_factor != 1.0f) /* HF sets the norms to the factor itself */
        for (int i = 0; i < m->params.n; i++)
            if (m->params.specs[i].init == RT_INIT_ONES)
                rt_scale(be, P(i), c->initializer_factor, m->params.specs[i].numel);
    mdl_lm_head_init(&m->head, be, tp, &m->vocab, m->C, c->vocab_size,
                     mdl_stage_is_last(m->stage) ? (size_t)max_B * max_tgt : 0, "T5");
    rt_arena arena = {0};
    t5_layout(m, &arena);
    m->act_bytes = (arena.used + 63) & ~(size_t)63;
    m->act_slots =
        m->stage.count > 1 && !c->pp_recompute ? rt_pipe_in_flight(m->stage.index, m->stage.count, max_micro) : 1;
    RT_TRY(rt_backend_alloc(be, m->act_bytes * (size_t)m->act_slots,
                            "T5 activations (lower --batch-size or the lengths, or add --checkpoint-activations)",
                            &m->act_block));
    mdl_padding_init(&m->src_pad, max_B, m->act_slots);
    if (m->shared >= 0) mdl_vocab_clear_padding(be, &m->vocab, P(m->shared), m->C);
    if (m->lm_head >= 0) mdl_vocab_clear_padding(be, &m->vocab, P(m->lm_head), m->C);
    for (int k = m->act_slots - 1; k >= 0; k--) { /* every slot's logit mask; slot 0 last */
        t5_use_slot(m, k);
        if (mdl_stage_is_last(m->stage)) RT_TRY(mdl_lm_head_ready(&m->head));
    }
    if (m->stage.count > 1) RT_TRY(t5_pipe_init(m, max_micro));
    int maxT = max_src > max_tgt ? max_src : max_tgt;
    size_t BS = (size_t)max_B * max_src, BT = (size_t)max_B * max_tgt;
    m->h_buckets = rt_xmalloc((size_t)maxT * maxT * sizeof(int32_t));
    m->h_dec_ids = rt_xmalloc(BT * sizeof(int32_t));
    m->h_targets = rt_xmalloc(BT * sizeof(int32_t));
    m->h_mask = rt_xmalloc(BS * sizeof(float));
    *out = m;
    return RT_OK;
fail:
    t5_model_free(m);
    return st;
}

void t5_model_free(t5_model *m) {
    if (!m) return;
    mdl_stage_pipe_free(m->pipe);
    if (m->act_block) rt_free_device(m->be, m->act_block);
    rt_params_free(&m->params);
    mdl_stack_free(&m->enc.blocks);
    mdl_stack_free(&m->dec.blocks);
    free(m->h_buckets);
    free(m->h_dec_ids);
    free(m->h_targets);
    free(m->h_mask);
    mdl_padding_free(&m->src_pad);
    mdl_lm_head_free(&m->head);
    ckpt_peft_config_free(&m->lora);
    free(m);
}

rt_params *t5_model_params(t5_model *m) { return &m->params; }
rt_comm *t5_model_tp(t5_model *m) { return m->tp; }
const t5_config *t5_model_config(const t5_model *m) { return &m->cfg; }
int t5_model_padded_vocab(const t5_model *m) { return m->vocab.padded; }

rt_status t5_set_dropout(t5_model *m, float p) {
    if (!(p >= 0 && p < 1)) return rt_errorf(RT_ERR_CONFIG, "T5: dropout %g not in [0, 1)", p);
    m->cfg.dropout_rate = p;
    t5_stack_set_dropout(&m->enc, p);
    t5_stack_set_dropout(&m->dec, p);
    return RT_OK;
}

/* ---- HF folders ---- */

/* Whether the weights hold their own LM head: an lm_head.weight that is not a byte copy of the
 * shared table (as transformers 5 decides whether to tie, whatever the config says). */
static rt_status t5_weights_own_head(const char *weights, bool *own_head) {
    rt_status st = RT_OK;
    ckpt_weights *w = NULL;
    *own_head = false;
    RT_TRY(ckpt_weights_open(weights, &ckpt_map_t5, 0, &w));
    long head = ckpt_weights_find(w, "lm_head.weight"), shared = ckpt_weights_find(w, "shared.weight");
    *own_head = head >= 0 && (shared < 0 || !ckpt_weights_same_bytes(w, (size_t)head, (size_t)shared));
fail:
    ckpt_weights_close(w);
    return st;
}

rt_status t5_load_hf(t5_model *m, const char *weights, char *report, size_t report_size) {
    rt_status st = RT_OK;
    ckpt_load_report rep;
    /* a tied model may find the head's copy in the file (T5 v1.0 exports often write one) */
    static const char *const tied_copy[] = {"lm_head.weight", NULL};
    bool own_head = false;
    const bool tied = m->cfg.tie_word_embeddings; /* a stage without the head has neither */
    if (tied) RT_TRY(t5_weights_own_head(weights, &own_head));
    if (own_head)
        RT_FAIL(RT_ERR_FORMAT,
                "%s: lm_head.weight differs from the shared embedding (an untied head, as T5 v1.1 and "
                "flan-t5 have), but the model ties its head to 'shared' (set tie_word_embeddings false, or build "
                "the model with t5_model_from_hf)",
                weights);
    RT_TRY(ckpt_load_hf(weights, &ckpt_map_t5, &m->params, m->cfg.vocab_size, m->cfg.num_heads, m->tp->rank,
                        m->tp->size, tied ? tied_copy : NULL, &rep));
    if (rep.missing)
        RT_FAIL(RT_ERR_FORMAT,
                "%s: no tensor '%s'%s (is this a T5ForConditionalGeneration checkpoint with this "
                "config?)",
                weights, rep.first_missing, rep.missing > 1 ? " and others" : "");
    if (report) /* a pipeline stage leaves the other stages' tensors unused */
        snprintf(report, report_size, "%d tensors loaded, LM head %s%s", rep.loaded,
                 tied ? "tied to shared.weight" : "lm_head.weight",
                 rep.unused && m->stage.count == 1 ? "; some tensors in the file map to no parameter" : "");
fail:
    return st;
}

rt_status t5_config_from_hf(const char *dir, t5_config *c, char *weights, size_t weights_size) {
    rt_status st = RT_OK;
    char path[4096];
    bool own_head = false;
    snprintf(path, sizeof path, "%s/config.json", dir);
    RT_TRY(t5_config_load(path, c));
    RT_TRY(ckpt_source_find_weights(dir, weights, weights_size));
    RT_TRY(t5_weights_own_head(weights, &own_head));
    /* transformers 5 ties the head unless the file holds a different one, whatever the config */
    c->tie_word_embeddings = !own_head;
fail:
    return st;
}

rt_status t5_model_from_hf(const char *dir, rt_backend *be, rt_comm *tp, int max_B, int max_src, int max_tgt,
                           t5_model **out, char *report, size_t report_size) {
    rt_status st = RT_OK;
    char weights[4096];
    t5_config cfg;
    *out = NULL;
    RT_TRY(t5_config_from_hf(dir, &cfg, weights, sizeof weights));
    RT_TRY(t5_model_init(&cfg, be, tp, max_B, max_src, max_tgt, 0, out));
    RT_TRY(t5_load_hf(*out, weights, report, report_size));
    return RT_OK;
fail:
    t5_model_free(*out);
    *out = NULL;
    return st;
}

rt_status t5_save_hf(t5_model *m, const char *dir) {
    return mdl_hf_save_folder(dir, &ckpt_map_t5, &m->params, m->cfg.vocab_size, m->cfg.num_heads, m->tp, m->pp,
                              t5_config_json(&m->cfg));
}

/* ---- the stacks ---- */

/* What a stack's attention sees: the encoder its padding, the decoder causal self-attention
 * and, across, the encoder's output with its padding; both the relative position bias. The
 * padding is also given as lengths where the slot's source is right-padded (cuDNN's SDPA reads
 * them; the CPU reads the mask either way). */
static mdl_stack_mask t5_mask(t5_model *m, t5_stack *s, int S) {
    const int32_t *src_len = mdl_padding_lengths(&m->src_pad);
    return (mdl_stack_mask){.causal = s->decoder,
                            .key_mask = s->decoder ? NULL : m->key_mask,
                            .key_len = s->decoder ? NULL : src_len,
                            .bias = s->bias,
                            .dbias = s->dbias,
                            .cross_in = s->decoder ? t5_cross_src(m) : NULL,
                            .dcross_in = m->denc,
                            .cross_key_mask = m->key_mask,
                            .cross_key_len = src_len,
                            .S = S};
}

rt_status t5_stack_fwd(t5_model *m, t5_stack *s, int B, int T, int S, const mdl_pass *pass) {
    rt_status st = RT_OK;
    const t5_config *c = &m->cfg;
    rt_backend *be = m->be;
    const mdl_stack_mask mask = t5_mask(m, s, S);
    if (s->has_embed) { /* else a pipeline stage received its input and the bias */
        RT_TRY(mdl_vocab_embedding_fwd(be, m->tp, mdl_stack_input(&s->blocks), s->ids, P(m->shared), (size_t)B * T,
                                       m->C, m->vocab.start, m->vocab.local));
        rt_relbias_fwd(be, s->bias, P(s->rel_bias), s->buckets, m->NH_local, T, T, c->relative_attention_num_buckets);
    }
    RT_TRY(mdl_stack_forward(&s->blocks, B, T, &mask, pass));
fail:
    return st;
}

/* One stack backward from dL/d(s->blocks.out) in dtop (overwritten). The decoder adds
 * dL/d(encoder output) of its cross-attention keys and values into m->denc, not yet reduced
 * over tp. The blocks add their bias gradient into s->dbias, which the stage holding the last
 * block clears first (an earlier stage continues the sum it received). Where the stack starts,
 * the bias table and the embedding take their gradients; elsewhere *demb (may be NULL) is
 * dL/d(the stage's input), for the stage before. */
rt_status t5_stack_bwd(t5_model *m, t5_stack *s, float *dtop, int B, int T, int S, const mdl_pass *pass,
                       const float **demb) {
    rt_status st = RT_OK;
    const t5_config *c = &m->cfg;
    rt_backend *be = m->be;
    const int NH = m->NH_local;
    const mdl_stack_mask mask = t5_mask(m, s, S);
    const float *d = NULL;
    if (s->has_final) rt_clear(be, s->dbias, (size_t)NH * T * T * sizeof(float));
    RT_TRY(mdl_stack_backward(&s->blocks, B, T, &mask, pass, dtop, &d));
    if (demb) *demb = d;
    if (!s->has_embed) {
        mdl_grads_ready(pass, &m->params, s->blocks.layer[0].first);
        return RT_OK;
    }
    /* every block added the one bias: its gradient is the sum over blocks, taken once */
    rt_relbias_bwd(be, G(s->rel_bias), s->dbias, s->buckets, NH, T, T, c->relative_attention_num_buckets);
    mdl_grads_ready(pass, &m->params, s->blocks.layer[0].first);
    rt_embedding_bwd(be, G(m->shared), d, s->ids, (size_t)B * T, m->C, m->vocab.start, m->vocab.local);
fail:
    return st;
}

/* ---- inputs ---- */

/* The stack's bucket table for length T (uploaded only when T changes). */
static void t5_upload_buckets(t5_model *m, t5_stack *s, int T) {
    if (s->buckets_T == T || !s->has_embed) return; /* a later stage receives the bias */
    const t5_config *c = &m->cfg;
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++)
            m->h_buckets[(size_t)i * T + j] = t5_relative_bucket(j - i, !s->decoder, c->relative_attention_num_buckets,
                                                                 c->relative_attention_max_distance);
    rt_to_device(m->be, s->buckets, m->h_buckets, (size_t)T * T * sizeof(int32_t));
    s->buckets_T = T;
}

rt_status t5_check_src(t5_model *m, const int32_t *src_ids, const int32_t *src_mask, int B, int S) {
    const t5_config *c = &m->cfg;
    if (B < 1 || S < 1 || B > m->max_B || S > m->max_S)
        return rt_errorf(RT_ERR_CONFIG,
                         "T5: a batch of %d rows of %d source tokens exceeds the %d x %d the model was "
                         "sized for",
                         B, S, m->max_B, m->max_S);
    const size_t BS = (size_t)B * S;
    for (size_t i = 0; i < BS; i++) {
        if (src_ids[i] < 0 || src_ids[i] >= c->vocab_size)
            return rt_errorf(RT_ERR_FORMAT,
                             "T5: source token id %d at row %zu position %zu is outside the vocab "
                             "[0, %d)",
                             (int)src_ids[i], i / (size_t)S, i % (size_t)S, c->vocab_size);
        m->h_mask[i] = (!src_mask || src_mask[i]) ? 0.0f : T5_MASKED;
    }
    return RT_OK;
}

rt_status t5_upload_src(t5_model *m, const int32_t *src_ids, const int32_t *src_mask, int B, int S) {
    rt_status st = t5_check_src(m, src_ids, src_mask, B, S);
    if (st != RT_OK) return st;
    rt_backend *be = m->be;
    const size_t BS = (size_t)B * S;
    if (m->enc.has_embed) rt_to_device(be, m->enc.ids, src_ids, BS * sizeof(int32_t));
    rt_to_device(be, m->key_mask, m->h_mask, BS * sizeof(float));
    mdl_padding_upload(&m->src_pad, be, src_mask, B, S);
    t5_upload_buckets(m, &m->enc, S);
    return RT_OK;
}

/* Targets (ignored ones -100) and decoder inputs (HF's _shift_right unless given). */
rt_status t5_check_tgt(t5_model *m, const t5_batch *b, int *n_targets) {
    const t5_config *c = &m->cfg;
    const int B = b->B, T = b->T;
    if (!b->labels) return rt_errorf(RT_ERR_CONFIG, "T5: the batch has no labels (the decoder needs targets)");
    if (T < 1 || T > m->max_T)
        return rt_errorf(RT_ERR_CONFIG, "T5: %d target tokens exceed the %d the model was sized for", T, m->max_T);
    int n = 0;
    for (int r = 0; r < B; r++)
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)r * T + t;
            int32_t y = b->labels[i];
            if (y != -100 && (y < 0 || y >= c->vocab_size))
                return rt_errorf(RT_ERR_FORMAT,
                                 "T5: label %d at row %d position %d is neither -100 nor in the vocab "
                                 "[0, %d)",
                                 (int)y, r, t, c->vocab_size);
            bool ignored = y == -100 || y == c->pad_token_id;
            m->h_targets[i] = ignored ? -100 : y;
            n += !ignored;
            int32_t prev = t == 0 ? c->decoder_start_token_id : b->labels[i - 1];
            int32_t din = b->decoder_input_ids ? b->decoder_input_ids[i] : prev == -100 ? c->pad_token_id : prev;
            if (din < 0 || din >= c->vocab_size)
                return rt_errorf(RT_ERR_FORMAT,
                                 "T5: decoder input id %d at row %d position %d is outside the vocab "
                                 "[0, %d)",
                                 (int)din, r, t, c->vocab_size);
            m->h_dec_ids[i] = din;
        }
    *n_targets = n;
    return RT_OK;
}

rt_status t5_upload_tgt(t5_model *m, const t5_batch *b, int *n_targets) {
    rt_status st = t5_check_tgt(m, b, n_targets);
    if (st != RT_OK) return st;
    rt_backend *be = m->be;
    const size_t BT = (size_t)b->B * b->T;
    if (mdl_stage_is_last(m->stage)) {
        st = mdl_lm_head_collect(&m->head, m->h_targets, BT, b->T, &m->head_n);
        if (st != RT_OK) return st;
    }
    if (m->dec.has_embed) rt_to_device(be, m->dec.ids, m->h_dec_ids, BT * sizeof(int32_t));
    t5_upload_buckets(m, &m->dec, b->T);
    return RT_OK;
}

rt_status t5_logits_to_host(t5_model *m, const float *logits, size_t R, float *host_logits, float *dev_scratch,
                            float *host_scratch) {
    rt_status st = RT_OK;
    rt_backend *be = m->be;
    rt_comm *tp = m->tp;
    const int Vl = m->vocab.local, V = m->cfg.vocab_size;
    const size_t n_local = R * (size_t)Vl;
    float *gathered = NULL, *host = host_scratch;
    const float *all = logits;
    if (tp->size > 1) {
        if (!dev_scratch)
            RT_TRY(rt_backend_alloc(be, n_local * (size_t)tp->size * sizeof(float), "T5 logits (gathered)",
                                    (void **)&gathered));
        float *dst = dev_scratch ? dev_scratch : gathered;
        RT_TRY(tp->ops->all_gather(tp->ctx, dst, logits, n_local));
        all = dst;
    }
    if (!host_scratch) host = rt_xmalloc(n_local * (size_t)tp->size * sizeof(float));
    rt_to_host(be, host, all, n_local * (size_t)tp->size * sizeof(float));
    /* rank-major (tp, R, Vl) -> (R, V) */
    for (int r = 0; r < tp->size; r++)
        for (size_t t = 0; t < R; t++)
            for (int j = 0; j < Vl; j++) {
                int v = r * Vl + j;
                if (v < V) host_logits[t * (size_t)V + (size_t)v] = host[((size_t)r * R + t) * Vl + (size_t)j];
            }
fail:
    if (gathered) rt_free_device(be, gathered);
    if (!host_scratch) free(host);
    return st;
}

/* ---- the step ---- */

/* The LM head over the decoder's output (the rescale, this rank's vocab columns, padding columns
 * never winning the softmax) and the vocab-parallel cross-entropy of the uploaded targets, in
 * the head's chunks: the per-row losses on the device (mdl_lm_head_losses reads them, once the
 * backward is queued), and with grad_scale > 0 the head's gradients (the output layer's, and the
 * labelled rows' for t5_head_bwd). host_logits: every position's logits too. */
rt_status t5_head_fwd(t5_model *m, int B, int T, float grad_scale, float *host_logits) {
    rt_status st = RT_OK;
    const t5_config *c = &m->cfg;
    rt_backend *be = m->be;
    const int C = m->C, Vl = m->vocab.local, head = t5_head_param(m);
    const size_t R = (size_t)B * T;
    if (c->scale_decoder_outputs) { /* an activation: stored at the compute precision */
        rt_scale(be, m->dec.blocks.out, t5_decoder_out_scale(c), R * C);
        rt_store_n(be, m->dec.blocks.out, R * C);
    }
    if (host_logits) {
        RT_TRY(mdl_lm_head_logits_rows(&m->head, R));
        mdl_col_linear_fwd(be, rt_xf(m->head.logits), rt_xf(m->dec.blocks.out), P(head), NULL, R, C, Vl);
        if (m->vocab.padded_here) rt_add_bias(be, m->head.logits, m->head.vocab_mask, R, Vl);
        RT_TRY(t5_logits_to_host(m, m->head.logits, R, host_logits, NULL, NULL));
    }
    const mdl_lm_head_grad grad = {.dwte = grad_scale > 0 ? G(head) : NULL, .grad_scale = grad_scale};
    RT_TRY(mdl_lm_head_xent(&m->head, m->dec.blocks.out, P(head), m->head_n, grad_scale > 0 ? &grad : NULL));
fail:
    return st;
}

/* dL/d(decoder output) into m->dtop: the labelled rows' gradient from t5_head_fwd (all-reduced
 * over tp there), the other rows 0. */
rt_status t5_head_bwd(t5_model *m, int B, int T) {
    const t5_config *c = &m->cfg;
    rt_backend *be = m->be;
    const size_t R = (size_t)B * T;
    mdl_lm_head_backward(&m->head, m->dtop, R, m->head_n);
    if (c->scale_decoder_outputs) { /* an activation: stored at the compute precision */
        rt_scale(be, m->dtop, t5_decoder_out_scale(c), R * m->C);
        rt_store_n(be, m->dtop, R * m->C);
    }
    return RT_OK;
}

rt_status t5_step(t5_model *m, const t5_batch *b, const mdl_pass *pass, float grad_scale, double *loss_sum,
                  int *n_targets, float *host_logits) {
    rt_status st = RT_OK;
    rt_backend *be = m->be;
    const int B = b->B, S = b->S, T = b->T, C = m->C;
    int n = 0;
    if (m->stage.count > 1) {
        if (grad_scale > 0 || host_logits)
            RT_FAIL(RT_ERR_CONFIG, "T5: a pipeline stage trains through t5_pipe_step and gives the loss only");
        return t5_pipe_eval(m, b, loss_sum, n_targets);
    }
    RT_TRY(t5_upload_src(m, b->src_ids, b->src_mask, B, S));
    RT_TRY(t5_upload_tgt(m, b, &n));
    RT_TRY(t5_stack_fwd(m, &m->enc, B, S, S, pass));
    RT_TRY(t5_stack_fwd(m, &m->dec, B, T, S, pass));
    RT_TRY(t5_head_fwd(m, B, T, grad_scale, host_logits));
    if (n_targets) *n_targets = n;
    if (grad_scale > 0) {
        RT_TRY(t5_head_bwd(m, B, T));
        rt_clear(be, m->denc, (size_t)B * S * C * sizeof(float));
        RT_TRY(t5_stack_bwd(m, &m->dec, m->dtop, B, T, S, pass, NULL));
        if (m->tp->size > 1) RT_TRY(m->tp->ops->all_reduce(m->tp->ctx, m->denc, (size_t)B * S * C, RT_REDUCE_SUM));
        RT_TRY(t5_stack_bwd(m, &m->enc, m->denc, B, S, S, pass, NULL));
    }
    *loss_sum = mdl_lm_head_losses(&m->head, m->head_n, pass); /* with the backward queued */
fail:
    return st;
}

rt_status t5_encode(t5_model *m, const int32_t *src_ids, const int32_t *src_mask, int B, int S, float *host_hidden) {
    rt_status st = RT_OK;
    mdl_pass pass = {0};
    if (m->stage.count > 1) RT_FAIL(RT_ERR_CONFIG, "T5: the encoder's output needs the whole model, not a stage");
    RT_TRY(t5_upload_src(m, src_ids, src_mask, B, S));
    RT_TRY(t5_stack_fwd(m, &m->enc, B, S, S, &pass));
    rt_to_host(m->be, host_hidden, m->enc.blocks.out, (size_t)B * S * m->C * sizeof(float));
fail:
    return st;
}

double t5_train_flops(const t5_model *m, int B, int S, int T) {
    const t5_config *c = &m->cfg;
    return mdl_stack_train_flops(&m->enc.blocks, B, S, 0) + mdl_stack_train_flops(&m->dec.blocks, B, T, S) +
           mdl_head_train_flops((double)B * T, c->d_model, c->vocab_size);
}
