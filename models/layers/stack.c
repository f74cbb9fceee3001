/* The transformer block stack (see stack.h). */
#include "models/layers/stack.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "models/layers/flops.h"
#include "models/layers/lora.h"
#include "models/layers/param.h"
#include "models/layers/parallel.h"
#include "runtime/base/rt_rng.h"

/* an optional buffer's slice: NULL stays NULL */
#define AT(buf, off) ((buf) ? (buf) + (off) : NULL)

void mdl_stack_init(mdl_stack *s, const mdl_stack_config *c, rt_backend *be, rt_comm *tp, rt_params *p) {
    *s = (mdl_stack){.cfg = *c, .be = be, .tp = tp, .params = p};
    s->HS = c->head_size ? c->head_size : c->C / c->n_head;
    s->NH_local = c->n_head / tp->size;
    s->I_local = s->NH_local * s->HS;
    s->F_local = c->F / tp->size;
    s->head_offset = s->NH_local * tp->rank;
    s->layer = rt_xmalloc((size_t)c->n_layer * sizeof *s->layer);
    s->clamped = rt_xcalloc((size_t)c->n_layer * 3, sizeof *s->clamped);
    for (int l = 0; l < c->n_layer; l++) {
        const mdl_lora no = mdl_lora_none();
        const mdl_attn_params none = {-1, -1, -1, -1, -1, -1, no, no, no, no, no};
        const mdl_ffn_params no_ffn = {-1, -1, -1, -1, -1, no, no, no};
        s->layer[l] = (mdl_block_params){.norm1 = {-1, -1},
                                         .norm_cross = {-1, -1},
                                         .norm2 = {-1, -1},
                                         .attn = none,
                                         .cross = none,
                                         .ffn = no_ffn,
                                         .first = -1};
    }
    s->final = (mdl_norm_params){-1, -1};
}

void mdl_stack_compact_sites(mdl_stack_config *c) {
    for (int k = 0; k < MDL_SITE_KINDS; k++) c->site[k] = -1;
    c->site_emb = 0;
    c->site_final = -1;
    c->site[MDL_SITE_SELF_PROBS] = 1;
    c->site[MDL_SITE_SELF_OUT] = 2;
    c->site[MDL_SITE_FFN_OUT] = 3;
    c->site_stride = 3;
}

static int named_add(mdl_stack *s, const ckpt_map *map, const char *fmt, int l, int64_t d0, int64_t d1,
                     rt_init_kind init, float std) {
    char name[RT_PARAM_NAME_MAX];
    snprintf(name, sizeof name, fmt, l);
    int64_t shape[2] = {d0, d1};
    /* weight decay on the matrices only (biases and norms are exempt, HF Trainer's rule) */
    return rt_params_add(s->params, name, d1 ? 2 : 1, shape, ckpt_map_tp_rule(map, name), init != RT_INIT_NORMAL, init,
                         std);
}

static mdl_norm_params named_norm(mdl_stack *s, const ckpt_map *map, const char *w, const char *b, int l) {
    const int C = s->cfg.C;
    return (mdl_norm_params){named_add(s, map, w, l, C, 0, RT_INIT_ONES, 0),
                             named_add(s, map, b, l, C, 0, RT_INIT_ZEROS, 0)};
}

void mdl_stack_declare_named(mdl_stack *s, const mdl_stack_names *n, const ckpt_map *map, float std, float pstd) {
    const mdl_stack_config *c = &s->cfg;
    const int C = c->C, Il = s->I_local, Fl = s->F_local;
    const rt_init_kind N = RT_INIT_NORMAL, Z = RT_INIT_ZEROS;
    for (int l = 0; l < c->n_layer; l++) {
        mdl_block_params *y = &s->layer[l];
        const int g = l + c->layer_offset; /* in the names */
        /* the checkpoints' order: each norm before (pre) or after (post) its sublayer */
        if (!c->post_norm) y->norm1 = named_norm(s, map, n->norm1_w, n->norm1_b, g);
        y->attn.q_w = named_add(s, map, n->qkv_w, g, 3 * (int64_t)Il, C, N, std);
        y->attn.qkv_l = mdl_lora_declare(s->params, c->lora, map, y->attn.q_w, s->tp->size);
        mdl_lora parts[3];
        mdl_lora_declare_parts(s->params, c->lora, map, y->attn.q_w, parts);
        y->attn.q_l = parts[0], y->attn.k_l = parts[1], y->attn.v_l = parts[2];
        y->attn.q_b = named_add(s, map, n->qkv_b, g, 3 * (int64_t)Il, 0, Z, 0);
        y->attn.proj_w = named_add(s, map, n->proj_w, g, C, Il, N, pstd);
        y->attn.proj_l = mdl_lora_declare(s->params, c->lora, map, y->attn.proj_w, s->tp->size);
        y->attn.proj_b = named_add(s, map, n->proj_b, g, C, 0, Z, 0);
        if (c->post_norm) y->norm1 = named_norm(s, map, n->norm1_w, n->norm1_b, g);
        if (!c->post_norm) y->norm2 = named_norm(s, map, n->norm2_w, n->norm2_b, g);
        y->ffn.up_w = named_add(s, map, n->up_w, g, Fl, C, N, std);
        y->ffn.up_l = mdl_lora_declare(s->params, c->lora, map, y->ffn.up_w, s->tp->size);
        y->ffn.up_b = named_add(s, map, n->up_b, g, Fl, 0, Z, 0);
        y->ffn.down_w = named_add(s, map, n->down_w, g, C, Fl, N, pstd);
        y->ffn.down_l = mdl_lora_declare(s->params, c->lora, map, y->ffn.down_w, s->tp->size);
        y->ffn.down_b = named_add(s, map, n->down_b, g, C, 0, Z, 0);
        if (c->post_norm) y->norm2 = named_norm(s, map, n->norm2_w, n->norm2_b, g);
        y->first = c->post_norm ? y->attn.q_w : y->norm1.w;
    }
    if (c->final_norm) s->final = named_norm(s, map, n->final_w, n->final_b, 0);
}

void mdl_stack_free(mdl_stack *s) {
    free(s->layer);
    free(s->clamped);
    s->layer = NULL;
    s->clamped = NULL;
}

void mdl_stack_scratch_layout(const mdl_stack *s, mdl_stack_scratch *sc, rt_arena *a, size_t rows) {
    const size_t C = (size_t)s->cfg.C, Il = (size_t)s->I_local, Fl = (size_t)s->F_local, f = sizeof(float);
    sc->rows = rows;
    const rt_dtype act = rt_act_dtype(s->be);
    /* the branches and their gradients: typed where no all-reduce sums them (a row-parallel
     * output's under tp is floats); 4 bytes a value either way, as decoding reads it as floats */
    sc->tmp = rt_x_of(rt_arena_take(a, rows * C, f), s->tp->size > 1 ? RT_F32 : act);
    sc->dres = rt_arena_take(a, rows * C, f);
    sc->dln = rt_arena_take(a, rows * C, f);
    /* the heads' gradient (floats) is read before the blocks start, and a sublayer's input gradient
     * is typed where tp does not all-reduce it: one buffer serves both */
    sc->dsub = rt_x_of(sc->dln, s->tp->size > 1 ? RT_F32 : act);
    sc->dsum = s->cfg.post_norm ? rt_arena_take(a, rows * C, f) : NULL;
    sc->dqkv = rt_x_of(rt_arena_take(a, rows * 3 * Il, rt_x_size(act)), act);
    sc->datty = rt_x_of(rt_arena_take(a, rows * Il, rt_x_size(act)), act);
    sc->dup = rt_x_of(rt_arena_take(a, rows * Fl, rt_x_size(act)), act);
    sc->dup_lin = rt_x_of(s->cfg.gated ? rt_arena_take(a, rows * Fl, rt_x_size(act)) : NULL, act);
    sc->dhid = rt_x_of(rt_arena_take(a, rows * Fl, rt_x_size(act)), act);
    const ckpt_peft_config *lora = s->cfg.lora;
    sc->lora_t = lora ? rt_arena_take(a, rows * (size_t)lora->r, f) : NULL;
    sc->lora_u = lora ? rt_arena_take(a, rows * (size_t)lora->r, f) : NULL;
    /* the widest input of an adapted linear: C, the attention's I_local or the FFN's F_local */
    const size_t widest = C > Il ? (C > Fl ? C : Fl) : (Il > Fl ? Il : Fl);
    sc->lora_x = lora && lora->dropout > 0 ? rt_arena_take(a, rows * widest, f) : NULL;
}

/* x's buffer: L slots of n values of type t. */
static void stack_take(rt_x *x, rt_arena *a, rt_dtype t, size_t n, size_t L) {
    *x = rt_x_of(rt_arena_take(a, L * n, rt_x_size(t)), t);
}

static rt_attn_desc stack_attn(const mdl_stack *s, int l, int B, int T, const mdl_stack_mask *mask,
                               const mdl_pass *pass, bool cross);

/* Bytes per query row a training pass's attention (self, or cross over S source keys) keeps for
 * the backward, at the most: its description at the longest lengths, with the strides and dropout
 * of the calls and a position bias where the stack has one (what the masks hold does not matter
 * to the answer: a backend decides by the shape, rt_attn_kept_bytes). Tk probabilities, or less
 * where the backend fuses attention. */
static size_t stack_layout_row(const mdl_stack *s, bool cross) {
    static const float bias_marker = 0.0f;
    const mdl_stack_mask probe = {.bias = !cross && s->cfg.position_bias ? &bias_marker : NULL, .S = s->max_S};
    const mdl_pass training = {.training = true};
    const rt_attn_desc d = stack_attn(s, 0, 1, s->max_T, &probe, &training, cross);
    return rt_attn_kept_row_bytes(s->be, &d);
}

/* The same for one decoding query over Tk keys. */
static size_t stack_kept_row(const mdl_stack *s, int Tk, bool bias) {
    static const float bias_marker = 0.0f;
    const rt_attn_desc d = {.B = 1,
                            .NH = 1,
                            .Tq = 1,
                            .Tk = Tk,
                            .HS = s->HS,
                            .scale = 1.0f,
                            .bias = bias ? &bias_marker : NULL,
                            .probs_dtype = s->probs_dtype};
    return rt_attn_kept_row_bytes(s->be, &d);
}

/* Bytes of one slot of probs (cross: cprobs). */
static size_t stack_probs_room(const mdl_stack *s, bool cross) {
    return (size_t)s->max_B * s->NH_local * s->max_T * (cross ? s->cprobs_row : s->probs_row);
}

void mdl_stack_layout(mdl_stack *s, rt_arena *a, int max_B, int max_T, int max_S, mdl_stack_scratch *shared) {
    const mdl_stack_config *c = &s->cfg;
    s->max_B = max_B;
    s->max_T = max_T;
    s->max_S = c->cross ? max_S : 0;
    s->max_BT = (size_t)max_B * (size_t)max_T;
    s->max_BS = (size_t)max_B * (size_t)s->max_S;
    const int K = c->checkpoint_layers;
    s->slots = K > 0 && K < c->n_layer ? K : c->n_layer;
    const size_t L = (size_t)s->slots, BT = s->max_BT, BS = s->max_BS, B = (size_t)max_B, T = (size_t)max_T;
    const size_t C = (size_t)c->C, Il = (size_t)s->I_local, Fl = (size_t)s->F_local, NH = (size_t)s->NH_local;
    const size_t f = sizeof(float);
    const bool layer_norm = c->norm == MDL_NORM_LAYER;
    /* the sublayers' inputs, their own activations, the residual sums inside a block and the
     * residual between blocks at the activation type (post-norm, h1 and h2 are the sums, mid
     * norm1's output); the stack's input and output stay fp32, as the families and pipeline
     * stages hand them over */
    const rt_dtype act = rt_act_dtype(s->be);
    s->res_ends = rt_arena_take(a, 2 * BT * C, f);
    const size_t inner = c->n_layer > 1 ? (size_t)c->n_layer - 1 : 0;
    s->res_inner = rt_x_of(rt_arena_take(a, inner * BT * C, rt_x_size(act)), act);
    stack_take(&s->mid, a, act, BT * C, L);
    if (c->cross) stack_take(&s->mid2, a, act, BT * C, L);
    stack_take(&s->h1, a, act, BT * C, L);
    stack_take(&s->h2, a, act, BT * C, L);
    stack_take(&s->qkv, a, act, BT * 3 * Il, L);
    stack_take(&s->atty, a, act, BT * Il, L);
    if (c->cross) {
        stack_take(&s->hc, a, act, BT * C, L);
        stack_take(&s->cq, a, act, BT * Il, L);
        stack_take(&s->ckv, a, act, BS * 2 * Il, L);
        stack_take(&s->catty, a, act, BT * Il, L);
    }
    stack_take(&s->up, a, act, BT * Fl, L);
    if (c->gated) stack_take(&s->up_lin, a, act, BT * Fl, L);
    stack_take(&s->hid, a, act, BT * Fl, L);
    s->n1_mean = layer_norm ? rt_arena_take(a, L * BT, f) : NULL;
    s->n1_rstd = rt_arena_take(a, L * BT, f);
    s->n2_mean = layer_norm ? rt_arena_take(a, L * BT, f) : NULL;
    s->n2_rstd = rt_arena_take(a, L * BT, f);
    s->probs_dtype = s->be->compute;
    s->probs_row = stack_layout_row(s, false);
    s->probs = rt_arena_take(a, L * B * NH * T, s->probs_row);
    if (c->cross) {
        s->nc_mean = layer_norm ? rt_arena_take(a, L * BT, f) : NULL;
        s->nc_rstd = rt_arena_take(a, L * BT, f);
        s->cprobs_row = stack_layout_row(s, true);
        s->cprobs = rt_arena_take(a, L * B * NH * T, s->cprobs_row);
    }
    if (c->final_norm) {
        s->out = rt_arena_take(a, BT * C, f);
        s->out_mean = layer_norm ? rt_arena_take(a, BT, f) : NULL;
        s->out_rstd = rt_arena_take(a, BT, f);
    } else {
        s->out = (float *)mdl_stack_residual(s, c->n_layer).p; /* fp32: the stack's output */
    }
    if (!shared) mdl_stack_scratch_layout(s, &s->own, a, BT > BS ? BT : BS);
    s->sc = shared ? shared : &s->own;
}

rt_x mdl_stack_residual(const mdl_stack *s, int l) {
    const size_t n = s->max_BT * (size_t)s->cfg.C;
    if (l == 0) return rt_xf(s->res_ends); /* also the output of a stack without blocks */
    if (l == s->cfg.n_layer) return rt_xf(s->res_ends + n);
    return rt_x_at(s->res_inner, (size_t)(l - 1) * n);
}

float *mdl_stack_input(const mdl_stack *s) { return s->res_ends; }

float *mdl_stack_dout(const mdl_stack *s) { return s->cfg.final_norm ? s->sc->dln : s->sc->dres; }

mdl_sublayers mdl_stack_sublayers(const mdl_stack *s) {
    const mdl_stack_config *c = &s->cfg;
    const mdl_stack_scratch *sc = s->sc;
    return (mdl_sublayers){.be = s->be,
                           .tp = s->tp,
                           .params = s->params,
                           .C = c->C,
                           .I_local = s->I_local,
                           .F = c->F,
                           .F_local = s->F_local,
                           .F_offset = s->F_local * s->tp->rank,
                           .norm = c->norm,
                           .norm_eps = c->norm_eps,
                           .act = c->act,
                           .rows = sc->rows,
                           .tmp = sc->tmp,
                           .dqkv = sc->dqkv,
                           .datty = sc->datty,
                           .dup = sc->dup,
                           .dup_lin = sc->dup_lin,
                           .dhid = sc->dhid,
                           .lora = {.r = c->lora ? c->lora->r : 0,
                                    .scale = c->lora ? (float)ckpt_peft_scale(c->lora) : 0.0f,
                                    .t = sc->lora_t,
                                    .u = sc->lora_u,
                                    .x = sc->lora_x}};
}

/* Block l's activation slices: its input and output in res, the rest in its slot. */
typedef struct {
    float *n1_mean, *n1_rstd, *n2_mean, *n2_rstd;
    float *nc_mean, *nc_rstd;
    rt_x in, out, mid, mid2, h1, h2, atty, hc, catty, up, up_lin, hid;
    void *probs, *cprobs;
    mdl_qkv qkv, cqkv;
} stack_slices;

/* Slot o of x (n values a slot). */
static rt_x stack_slot(rt_x x, size_t o, size_t n) { return rt_x_at(x, o * n); }

static stack_slices stack_at(const mdl_stack *s, int l) {
    const size_t BT = s->max_BT, BS = s->max_BS, C = (size_t)s->cfg.C, Il = (size_t)s->I_local;
    const size_t Fl = (size_t)s->F_local, heads = (size_t)s->max_B * s->NH_local * s->max_T;
    const size_t o = (size_t)(l % s->slots);
    const rt_x qkv = stack_slot(s->qkv, o, BT * 3 * Il), ckv = stack_slot(s->ckv, o, BS * 2 * Il);
    /* fused: [q; k; v] per token; apart: three (BT, I_local) blocks */
    const size_t kv_step = mdl_attn_fused(&s->layer[l].attn) ? Il : BT * Il;
    return (stack_slices){.in = mdl_stack_residual(s, l),
                          .out = mdl_stack_residual(s, l + 1),
                          .h1 = stack_slot(s->h1, o, BT * C),
                          .mid = stack_slot(s->mid, o, BT * C),
                          .h2 = stack_slot(s->h2, o, BT * C),
                          .n1_mean = AT(s->n1_mean, o * BT),
                          .n1_rstd = s->n1_rstd + o * BT,
                          .n2_mean = AT(s->n2_mean, o * BT),
                          .n2_rstd = s->n2_rstd + o * BT,
                          .probs = (char *)s->probs + o * heads * s->probs_row,
                          .atty = stack_slot(s->atty, o, BT * Il),
                          .hc = stack_slot(s->hc, o, BT * C),
                          .nc_mean = AT(s->nc_mean, o * BT),
                          .nc_rstd = AT(s->nc_rstd, o * BT),
                          .cprobs = s->cprobs ? (char *)s->cprobs + o * heads * s->cprobs_row : NULL,
                          .catty = stack_slot(s->catty, o, BT * Il),
                          .mid2 = stack_slot(s->mid2, o, BT * C),
                          .up = stack_slot(s->up, o, BT * Fl),
                          .up_lin = stack_slot(s->up_lin, o, BT * Fl),
                          .hid = stack_slot(s->hid, o, BT * Fl),
                          .qkv = {qkv, rt_x_at(qkv, kv_step), rt_x_at(qkv, 2 * kv_step)},
                          .cqkv = {stack_slot(s->cq, o, BT * Il), ckv, rt_x_at(ckv, BS * Il)}};
}

/* The dropout of block l's site `kind` at rate p (none outside training). */
static mdl_drop stack_drop(const mdl_stack *s, const mdl_pass *pass, float p, int l, mdl_site_kind kind) {
    if (!pass->training || !(p > 0)) return (mdl_drop){0};
    int site = s->cfg.site[kind] + (l + s->cfg.layer_offset) * s->cfg.site_stride;
    return (mdl_drop){
        .p = p, .seed = pass->seed, .stream = mdl_dropout_stream(pass, site), .step = mdl_dropout_step(pass)};
}

/* Block l's self-attention (cross: its cross-attention) over B rows of T queries. */
static rt_attn_desc stack_attn(const mdl_stack *s, int l, int B, int T, const mdl_stack_mask *mask,
                               const mdl_pass *pass, bool cross) {
    const mdl_stack_config *c = &s->cfg;
    const size_t ld = !cross && mdl_attn_fused(&s->layer[l].attn) ? 3 * (size_t)s->I_local : (size_t)s->I_local;
    mdl_drop d = stack_drop(s, pass, c->attn_pdrop, l, cross ? MDL_SITE_CROSS_PROBS : MDL_SITE_SELF_PROBS);
    return (rt_attn_desc){.B = B,
                          .NH = s->NH_local,
                          .Tq = T,
                          .Tk = cross ? mask->S : T,
                          .HS = s->HS,
                          .ldq = ld,
                          .ldk = ld,
                          .ldv = ld,
                          .ldo = (size_t)s->I_local,
                          .scale = c->attn_scale > 0 ? c->attn_scale : 1.0f / sqrtf((float)s->HS),
                          .causal = !cross && mask->causal,
                          .prefix = cross ? NULL : mask->prefix,
                          .key_mask = cross ? mask->cross_key_mask : mask->key_mask,
                          .key_len = cross ? mask->cross_key_len : mask->key_len,
                          .bias = cross ? NULL : mask->bias,
                          .dropout_p = d.p,
                          .seed = d.seed,
                          .stream = d.stream,
                          .stream_step = d.step,
                          .head_offset = s->head_offset,
                          .heads_total = c->n_head,
                          .probs_dtype = s->probs_dtype};
}

/* What a pass's attention keeps fits the layout (every block's is the same size): e.g. a position
 * bias on a stack laid out without one, where the fused attention was counted on, stops here. */
static void stack_check_probs(const mdl_stack *s, int B, int T, const mdl_stack_mask *mask, const mdl_pass *pass) {
    for (int cross = 0; cross <= (int)s->cfg.cross; cross++) {
        const rt_attn_desc a = stack_attn(s, 0, B, T, mask, pass, cross);
        RT_CHECK(rt_attn_kept_bytes(s->be, &a) <= stack_probs_room(s, cross),
                 "%s attention keeps %zu bytes of probabilities; %zu were laid out", cross ? "cross" : "self",
                 rt_attn_kept_bytes(s->be, &a), stack_probs_room(s, cross));
    }
}

/* What block l's forward and backward share: its parameters, sublayers, slices, attention
 * descriptions and dropouts. */
typedef struct {
    const mdl_block_params *p;
    mdl_sublayers sub;
    stack_slices a;
    rt_attn_desc self, cross;
    mdl_drop drop_self, drop_cross, drop_inner, drop_ffn;
    size_t BT, n; /* rows, and floats of a (rows, C) activation */
} block_run;

static block_run block_run_of(const mdl_stack *s, int l, int B, int T, const mdl_stack_mask *mask,
                              const mdl_pass *pass) {
    const mdl_stack_config *c = &s->cfg;
    block_run r = {.p = &s->layer[l],
                   .sub = mdl_stack_sublayers(s),
                   .a = stack_at(s, l),
                   .self = stack_attn(s, l, B, T, mask, pass, false),
                   .drop_self = stack_drop(s, pass, c->resid_pdrop, l, MDL_SITE_SELF_OUT),
                   .drop_inner = stack_drop(s, pass, c->ffn_pdrop, l, MDL_SITE_FFN_INNER),
                   .drop_ffn = stack_drop(s, pass, c->resid_pdrop, l, MDL_SITE_FFN_OUT),
                   .BT = (size_t)B * T};
    r.n = r.BT * (size_t)c->C;
    if (c->lora && pass->training && c->lora->dropout > 0)
        r.sub.lora.drop = (mdl_drop){.p = (float)c->lora->dropout,
                                     .seed = pass->seed,
                                     .stream = mdl_lora_stream(pass, c->lora_site + l + c->layer_offset),
                                     .step = mdl_lora_step(pass)};
    if (c->cross) {
        r.cross = stack_attn(s, l, B, T, mask, pass, true);
        r.drop_cross = stack_drop(s, pass, c->resid_pdrop, l, MDL_SITE_CROSS_OUT);
    }
    return r;
}

/* HF T5's fp16 guard on a residual sum x (n values): when x holds an inf, every value is
 * clamped to +-(65504 - 1000); returns whether it was (the backward zeroes those gradients).
 * torch.clamp's limit is HF's float, so the clamped values read 64512, its fp16 rounding. */
#define STACK_FP16_CLAMP (65504.0f - 1000.0f)
static bool stack_clamps(const mdl_stack *s) { return s->cfg.fp16_clamp && s->be->compute == RT_F16; }
static bool stack_clamp(const mdl_stack *s, rt_x x, size_t n) {
    return stack_clamps(s) && rt_clamp_inf(s->be, x, n, STACK_FP16_CLAMP);
}

/* Block r's residual step after a branch in tmp: sum = res + drop(tmp) and, with a norm (p.w >=
 * 0), out = norm(sum), one fused op. Under T5's fp16 guard the sum is clamped before the norm
 * reads it, which the fused op cannot do: the add (with the dropout), the clamp, then the norm.
 * Returns whether it clamped. */
static bool stack_residual_fwd(const mdl_stack *s, const block_run *r, mdl_norm_params p, mdl_drop drop, rt_x sum,
                               rt_x out, float *mean, float *rstd, rt_x res) {
    const rt_residual_desc d = mdl_residual_desc(&r->sub, p, drop, r->BT);
    if (!stack_clamps(s)) {
        rt_residual_fwd(s->be, &d, sum, out, mean, rstd, res, s->sc->tmp);
        return false;
    }
    const rt_residual_desc add = mdl_residual_desc(&r->sub, (mdl_norm_params){-1, -1}, drop, r->BT);
    rt_residual_fwd(s->be, &add, sum, rt_xf(NULL), NULL, NULL, res, s->sc->tmp);
    const bool clamped = stack_clamp(s, sum, r->n);
    if (p.w >= 0) mdl_norm_fwd(&r->sub, p, out, mean, rstd, sum, r->BT);
    return clamped;
}

/* Its backward: dres += the norm's input gradient from dout (with a norm), then the gradient of
 * the branch, which it returns: dropout's backward of dres in tmp, or dres itself. A sum the
 * forward clamped passes no gradient where it clamped, between the two: the ops apart then. */
static rt_x stack_residual_bwd(const mdl_stack *s, const block_run *r, mdl_norm_params p, mdl_drop drop, bool clamped,
                               float *dres, rt_x dout, rt_x sum, const float *mean, const float *rstd) {
    rt_backend *be = s->be;
    const rt_x tmp = s->sc->tmp;
    const rt_residual_desc d = mdl_residual_desc(&r->sub, p, drop, r->BT);
    if (!clamped) {
        rt_residual_bwd(be, &d, dres, tmp, mdl_grad(s->params, p.w), d.rms ? NULL : mdl_grad(s->params, p.b), dout, sum,
                        mean, rstd);
    } else {
        if (p.w >= 0) mdl_norm_bwd(&r->sub, p, dres, dout, sum, mean, rstd, r->BT);
        rt_clamp_abs_bwd(be, dres, sum, r->n, STACK_FP16_CLAMP);
        const rt_residual_desc add = mdl_residual_desc(&r->sub, (mdl_norm_params){-1, -1}, drop, r->BT);
        rt_residual_bwd(be, &add, dres, tmp, NULL, NULL, rt_xf(NULL), rt_xf(NULL), NULL, NULL);
    }
    return drop.p > 0 ? tmp : rt_xf(dres);
}

/* Block l forward from its residual input into its slot; the residual output too when
 * write_out (a recompute leaves the kept one alone). */
static rt_status block_compute(mdl_stack *s, const block_run r, int B, const mdl_stack_mask *mask, int l,
                               bool write_out) {
    rt_status st = RT_OK;
    const stack_slices *a = &r.a;
    if (s->cfg.post_norm) { /* mid = norm1(in + attn(in)); out = norm2(mid + ffn(mid)) */
        /* h1 and h2 are the residual sums */
        RT_TRY(mdl_attn_fwd(&r.sub, &r.p->attn, &r.self, a->in, NULL, 0, a->qkv, a->probs, a->atty, r.BT));
        stack_residual_fwd(s, &r, r.p->norm1, r.drop_self, a->h1, a->mid, a->n1_mean, a->n1_rstd, a->in);
        mdl_ffn_up(&r.sub, &r.p->ffn, a->mid, a->up, a->up_lin, a->hid, r.BT, r.drop_inner);
        RT_TRY(mdl_ffn_down(&r.sub, &r.p->ffn, a->hid, r.BT));
        /* the backward needs only h2 and the statistics; a recompute's output lands in tmp */
        stack_residual_fwd(s, &r, r.p->norm2, r.drop_ffn, a->h2, write_out ? a->out : s->sc->tmp, a->n2_mean,
                           a->n2_rstd, a->mid);
        return RT_OK;
    }
    mdl_norm_fwd(&r.sub, r.p->norm1, a->h1, a->n1_mean, a->n1_rstd, a->in, r.BT);
    RT_TRY(mdl_attn_fwd(&r.sub, &r.p->attn, &r.self, a->h1, NULL, 0, a->qkv, a->probs, a->atty, r.BT));
    bool *clamped = &s->clamped[3 * l];
    rt_x x = a->mid; /* the residual entering the FFN */
    if (s->cfg.cross) {
        clamped[0] =
            stack_residual_fwd(s, &r, r.p->norm_cross, r.drop_self, a->mid, a->hc, a->nc_mean, a->nc_rstd, a->in);
        RT_TRY(mdl_attn_fwd(&r.sub, &r.p->cross, &r.cross, a->hc, mask->cross_in, (size_t)B * mask->S, a->cqkv,
                            a->cprobs, a->catty, r.BT));
        clamped[1] =
            stack_residual_fwd(s, &r, r.p->norm2, r.drop_cross, a->mid2, a->h2, a->n2_mean, a->n2_rstd, a->mid);
        x = a->mid2;
    } else {
        clamped[0] = stack_residual_fwd(s, &r, r.p->norm2, r.drop_self, a->mid, a->h2, a->n2_mean, a->n2_rstd, a->in);
    }
    mdl_ffn_up(&r.sub, &r.p->ffn, a->h2, a->up, a->up_lin, a->hid, r.BT, r.drop_inner);
    if (!write_out) return RT_OK; /* the FFN's output only feeds the next block's kept input */
    RT_TRY(mdl_ffn_down(&r.sub, &r.p->ffn, a->hid, r.BT));
    clamped[2] = stack_residual_fwd(s, &r, (mdl_norm_params){-1, -1}, r.drop_ffn, a->out, rt_xf(NULL), NULL, NULL, x);
fail:
    return st;
}

static rt_status block_fwd(mdl_stack *s, int l, int B, int T, const mdl_stack_mask *mask, const mdl_pass *pass,
                           bool write_out) {
    return block_compute(s, block_run_of(s, l, B, T, mask, pass), B, mask, l, write_out);
}

/* Block l backward from dL/d(its output) in dres, which becomes dL/d(its input). */
static rt_status block_grad(mdl_stack *s, const block_run r, const mdl_stack_mask *mask, int l) {
    rt_status st = RT_OK;
    const int B = r.self.B;
    const stack_slices *a = &r.a;
    rt_backend *be = s->be;
    float *dres = s->sc->dres, *dsum = s->sc->dsum;
    const rt_x dln = s->sc->dsub;
    rt_x g; /* dL/d(the branch a sublayer's backward takes) */
    if (s->cfg.post_norm) {
        /* dsum = dL/dh2, which reaches mid directly and through the FFN */
        rt_clear(be, dsum, r.n * sizeof(float));
        g = stack_residual_bwd(s, &r, r.p->norm2, r.drop_ffn, false, dsum, rt_xf(dres), a->h2, a->n2_mean, a->n2_rstd);
        RT_TRY(mdl_ffn_bwd(&r.sub, &r.p->ffn, g, a->mid, a->up, a->up_lin, a->hid, dln, r.BT, r.drop_inner));
        rt_add(be, rt_xf(dres), rt_xf(dsum), dln, r.n); /* dL/dmid */
        /* dsum = dL/dh1, which reaches in directly and through attention */
        rt_clear(be, dsum, r.n * sizeof(float));
        g = stack_residual_bwd(s, &r, r.p->norm1, r.drop_self, false, dsum, rt_xf(dres), a->h1, a->n1_mean, a->n1_rstd);
        RT_TRY(mdl_attn_bwd(&r.sub, &r.p->attn, &r.self, g, a->in, NULL, 0, NULL, a->qkv, a->probs, a->atty,
                            mask->dbias, dln, r.BT));
        rt_add(be, rt_xf(dres), rt_xf(dsum), dln, r.n); /* dL/din */
        return RT_OK;
    }
    /* each sublayer gives dL/d(its input) in dln; the norm's backward in the residual step that
     * made that input adds it to dres; a clamped residual sum passes no gradient where it clamped */
    const bool *clamped = &s->clamped[3 * l];
    g = stack_residual_bwd(s, &r, (mdl_norm_params){-1, -1}, r.drop_ffn, clamped[2], dres, rt_xf(NULL), a->out, NULL,
                           NULL);
    RT_TRY(mdl_ffn_bwd(&r.sub, &r.p->ffn, g, a->h2, a->up, a->up_lin, a->hid, dln, r.BT, r.drop_inner));
    if (s->cfg.cross) {
        g = stack_residual_bwd(s, &r, r.p->norm2, r.drop_cross, clamped[1], dres, dln, a->mid2, a->n2_mean, a->n2_rstd);
        RT_TRY(mdl_attn_bwd(&r.sub, &r.p->cross, &r.cross, g, a->hc, mask->cross_in, (size_t)B * mask->S,
                            mask->dcross_in, a->cqkv, a->cprobs, a->catty, NULL, dln, r.BT));
        g = stack_residual_bwd(s, &r, r.p->norm_cross, r.drop_self, clamped[0], dres, dln, a->mid, a->nc_mean,
                               a->nc_rstd);
    } else {
        g = stack_residual_bwd(s, &r, r.p->norm2, r.drop_self, clamped[0], dres, dln, a->mid, a->n2_mean, a->n2_rstd);
    }
    RT_TRY(mdl_attn_bwd(&r.sub, &r.p->attn, &r.self, g, a->h1, NULL, 0, NULL, a->qkv, a->probs, a->atty, mask->dbias,
                        dln, r.BT));
    mdl_norm_bwd(&r.sub, r.p->norm1, dres, dln, a->in, a->n1_mean, a->n1_rstd, r.BT);
fail:
    return st;
}

static rt_status block_bwd(mdl_stack *s, int l, int B, int T, const mdl_stack_mask *mask, const mdl_pass *pass) {
    return block_grad(s, block_run_of(s, l, B, T, mask, pass), mask, l);
}

rt_status mdl_stack_forward(mdl_stack *s, int B, int T, const mdl_stack_mask *mask, const mdl_pass *pass) {
    rt_status st = RT_OK;
    const mdl_stack_config *c = &s->cfg;
    const size_t BT = (size_t)B * T, n = BT * (size_t)c->C;
    stack_check_probs(s, B, T, mask, pass); /* the backward and recomputes reuse this pass's sizes */
    if (pass->training && c->emb_pdrop > 0) {
        float *x = mdl_stack_input(s);
        rt_dropout_fwd(s->be, x, x, n, c->emb_pdrop, pass->seed, mdl_dropout_stream(pass, c->site_emb),
                       mdl_dropout_step(pass));
    }
    for (int l = 0; l < c->n_layer; l++) RT_TRY(block_fwd(s, l, B, T, mask, pass, true));
    if (c->final_norm) {
        const mdl_sublayers sub = mdl_stack_sublayers(s);
        mdl_norm_fwd(&sub, s->final, rt_xf(s->out), s->out_mean, s->out_rstd, mdl_stack_residual(s, c->n_layer), BT);
        if (pass->training && c->final_pdrop > 0)
            rt_dropout_fwd(s->be, s->out, s->out, n, c->final_pdrop, pass->seed,
                           mdl_dropout_stream(pass, c->site_final), mdl_dropout_step(pass));
    }
fail:
    return st;
}

rt_status mdl_stack_backward(mdl_stack *s, int B, int T, const mdl_stack_mask *mask, const mdl_pass *pass, float *dout,
                             const float **demb) {
    rt_status st = RT_OK;
    const mdl_stack_config *c = &s->cfg;
    rt_backend *be = s->be;
    const size_t BT = (size_t)B * T, n = BT * (size_t)c->C;
    mdl_stack_scratch *sc = s->sc;
    if (c->final_norm) {
        const mdl_sublayers sub = mdl_stack_sublayers(s);
        if (pass->training && c->final_pdrop > 0)
            rt_dropout_bwd(be, dout, dout, n, c->final_pdrop, pass->seed, mdl_dropout_stream(pass, c->site_final),
                           mdl_dropout_step(pass));
        rt_clear(be, sc->dres, n * sizeof(float));
        mdl_norm_bwd(&sub, s->final, sc->dres, rt_xf(dout), mdl_stack_residual(s, c->n_layer), s->out_mean, s->out_rstd,
                     BT);
        mdl_grads_ready(pass, s->params, s->final.w); /* the final norm and the model's head above it */
    } else if (dout != sc->dres) {
        rt_copy(be, sc->dres, dout, n * sizeof(float));
    }
    const int K = s->slots, last_segment = (c->n_layer - 1) / K * K;
    for (int l = c->n_layer - 1; l >= 0; l--) {
        /* checkpointing: entering a segment, recompute its blocks (the forward left the last
         * segment's in place) */
        if (K < c->n_layer && l % K == K - 1 && l < last_segment)
            for (int j = l - K + 1; j <= l; j++) RT_TRY(block_fwd(s, j, B, T, mask, pass, false));
        RT_TRY(block_bwd(s, l, B, T, mask, pass));
        /* this block and all above it; a shared bias (in block 0) is the caller's to finish */
        if (l > 0 || !mask->dbias) mdl_grads_ready(pass, s->params, s->layer[l].first);
    }
    *demb = sc->dres; /* with the embeddings' dropout, its backward in place */
    if (pass->training && c->emb_pdrop > 0)
        rt_dropout_bwd(be, sc->dres, sc->dres, n, c->emb_pdrop, pass->seed, mdl_dropout_stream(pass, c->site_emb),
                       mdl_dropout_step(pass));
fail:
    return st;
}

double mdl_stack_train_flops(const mdl_stack *s, int B, int T, int S) {
    const mdl_stack_config *c = &s->cfg;
    return (c->layers_total ? c->layers_total : c->n_layer) *
           mdl_layer_train_flops(B, T, c->C, (double)c->n_head * s->HS, c->F, c->gated, T, c->cross ? S : 0);
}

void mdl_stack_final_norm(mdl_stack *s, float *y, float *mean, float *rstd, const float *x, size_t n) {
    const mdl_sublayers sub = mdl_stack_sublayers(s);
    mdl_norm_fwd(&sub, s->final, rt_xf(y), mean, rstd, rt_xf(x), n);
}

/* An attention's projections (p: a block's self- or cross-attention, k0 its first LoRA dropout
 * stream) of n rows of in: q (when its buffer is not NULL), k and v, (n, I_local) each, from the
 * fused [q; k; v] weight's row blocks (and biases) or the three apart, with their adapters. */
static void stack_qkv(mdl_stack *s, const mdl_attn_params *p, int k0, rt_x in, size_t n, rt_x q, rt_x k, rt_x v) {
    const int C = s->cfg.C, Il = s->I_local;
    const bool fused = mdl_attn_fused(p);
    const size_t block = (size_t)Il * C;
    const float *w = mdl_param(s->params, p->q_w), *b = mdl_param(s->params, p->q_b);
    const float *wk = fused ? w + block : mdl_param(s->params, p->k_w);
    const float *wv = fused ? w + 2 * block : mdl_param(s->params, p->v_w);
    if (q.p) mdl_col_linear_fwd(s->be, q, in, w, b, n, C, Il);
    mdl_col_linear_fwd(s->be, k, in, wk, b ? b + Il : NULL, n, C, Il);
    mdl_col_linear_fwd(s->be, v, in, wv, b ? b + 2 * Il : NULL, n, C, Il);
    /* the adapters (no dropout: decoding does not train) */
    const mdl_sublayers sub = mdl_stack_sublayers(s);
    const rt_x parts[3] = {q, k, v};
    mdl_lora_col_fwd_parts(&sub, p->qkv_l, k0 + MDL_LORA_Q, parts, in, n, C, Il);
    if (q.p) mdl_lora_col_fwd(&sub, p->q_l, k0 + MDL_LORA_Q, q, Il, in, n, C, Il);
    mdl_lora_col_fwd(&sub, p->k_l, k0 + MDL_LORA_K, k, Il, in, n, C, Il);
    mdl_lora_col_fwd(&sub, p->v_l, k0 + MDL_LORA_V, v, Il, in, n, C, Il);
}

void mdl_stack_kv(mdl_stack *s, int l, rt_x norm1_rows, size_t n, float *k, float *v) {
    stack_qkv(s, &s->layer[l].attn, 0, norm1_rows, n, rt_xf(NULL), rt_xf(k), rt_xf(v));
}

void mdl_stack_cross_kv(mdl_stack *s, int l, const float *src, size_t n, float *k, float *v) {
    stack_qkv(s, &s->layer[l].cross, MDL_LORA_CROSS, rt_xf(src), n, rt_xf(NULL), rt_xf(k), rt_xf(v));
}

rt_x mdl_stack_norm1(mdl_stack *s, int l, size_t n) {
    const stack_slices a = stack_at(s, l);
    if (s->slots < s->cfg.n_layer) { /* it may hold a later block's */
        const mdl_sublayers sub = mdl_stack_sublayers(s);
        mdl_norm_fwd(&sub, s->layer[l].norm1, a.h1, a.n1_mean, a.n1_rstd, a.in, n);
    }
    return a.h1;
}

mdl_decode_scratch mdl_stack_decode_scratch(const mdl_stack *s, int R, int Tk) {
    const size_t n = (size_t)R, Il = (size_t)s->I_local;
    /* a decoding row is one token: the working buffers hold max_B x max_T of them, so a batch's
     * rows times its beams fit; probs holds R x NH rows of Tk here (or less, rt_attn_kept_bytes):
     * within slot 0 of the forward's */
    RT_CHECK((size_t)R <= s->max_BT &&
                 (size_t)R * s->NH_local * stack_kept_row(s, Tk, s->cfg.position_bias) <= stack_probs_room(s, false),
             "decode: %d rows, %d keys", R, Tk);
    return (mdl_decode_scratch){.ln = s->h1,
                                .tmp = (float *)s->sc->tmp.p,
                                .mean = s->n1_mean,
                                .rstd = s->n1_rstd,
                                .q = s->qkv,
                                .k = rt_x_at(s->qkv, n * Il),
                                .v = rt_x_at(s->qkv, 2 * n * Il),
                                .atty = s->atty,
                                .probs = s->probs,
                                .probs_dtype = s->probs_dtype,
                                .up = s->up,
                                .up_lin = s->up_lin,
                                .hid = s->hid};
}

rt_status mdl_stack_decode(mdl_stack *s, int R, float *x, const mdl_decode_caches *c, const mdl_decode_scratch *w) {
    rt_status st = RT_OK;
    rt_backend *be = s->be;
    const int C = s->cfg.C, Il = s->I_local;
    const size_t n = (size_t)R;
    mdl_sublayers sub = mdl_stack_sublayers(s);
    sub.tmp = rt_xf(w->tmp);
    const mdl_drop none = {0};
    RT_CHECK(!s->cfg.post_norm, "decode: a pre-norm stack");
    rt_attn_desc self = c->self, cross = c->cross; /* over w's probabilities */
    self.probs_dtype = cross.probs_dtype = w->probs_dtype;
    RT_CHECK(rt_attn_kept_bytes(be, &self) <= stack_probs_room(s, false) &&
                 (!s->cfg.cross || rt_attn_kept_bytes(be, &cross) <= stack_probs_room(s, false)),
             "decode: %d rows over %d keys (%d source keys) do not fit the probabilities laid out", R, self.Tk,
             s->cfg.cross ? cross.Tk : 0);
    for (int l = 0; l < s->cfg.n_layer; l++) {
        const mdl_block_params *p = &s->layer[l];
        /* self-attention: the new keys and values join the caches, then x += attn(norm1(x)) */
        mdl_norm_fwd(&sub, p->norm1, w->ln, w->mean, w->rstd, rt_xf(x), n);
        const rt_x k = c->at_idx ? w->k : rt_xf(c->k[l] + c->at), v = c->at_idx ? w->v : rt_xf(c->v[l] + c->at);
        stack_qkv(s, &p->attn, 0, w->ln, n, w->q, k, v);
        if (c->at_idx) {
            rt_scatter_rows_add(be, c->k[l], k, c->at_idx, R, Il);
            rt_scatter_rows_add(be, c->v[l], v, c->at_idx, R, Il);
        }
        rt_attention_fwd(be, &self, w->atty, w->probs, w->q, rt_xf(c->k[l]), rt_xf(c->v[l]));
        RT_TRY(mdl_row_linear_fwd(be, s->tp, sub.tmp, w->atty, mdl_param(s->params, p->attn.proj_w),
                                  mdl_param(s->params, p->attn.proj_b), n, Il, C));
        RT_TRY(mdl_lora_row_fwd(&sub, p->attn.proj_l, MDL_LORA_PROJ, sub.tmp, w->atty, n, Il, C));
        rt_add(be, rt_xf(x), rt_xf(x), sub.tmp, n * C);
        stack_clamp(s, rt_xf(x), n * C);
        if (s->cfg.cross) { /* x += cross(norm_c(x), the source's cached keys and values) */
            mdl_norm_fwd(&sub, p->norm_cross, w->ln, w->mean, w->rstd, rt_xf(x), n);
            mdl_col_linear_fwd(be, w->q, w->ln, mdl_param(s->params, p->cross.q_w), NULL, n, C, Il);
            mdl_lora_col_fwd(&sub, p->cross.q_l, MDL_LORA_CROSS + MDL_LORA_Q, w->q, Il, w->ln, n, C, Il);
            rt_attention_fwd(be, &cross, w->atty, w->probs, w->q, rt_xf(c->ck[l]), rt_xf(c->cv[l]));
            RT_TRY(mdl_row_linear_fwd(be, s->tp, sub.tmp, w->atty, mdl_param(s->params, p->cross.proj_w),
                                      mdl_param(s->params, p->cross.proj_b), n, Il, C));
            RT_TRY(mdl_lora_row_fwd(&sub, p->cross.proj_l, MDL_LORA_CROSS + MDL_LORA_PROJ, sub.tmp, w->atty, n, Il, C));
            rt_add(be, rt_xf(x), rt_xf(x), sub.tmp, n * C);
            stack_clamp(s, rt_xf(x), n * C);
        }
        mdl_norm_fwd(&sub, p->norm2, w->ln, w->mean, w->rstd, rt_xf(x), n);
        mdl_ffn_up(&sub, &p->ffn, w->ln, w->up, w->up_lin, w->hid, n, none);
        RT_TRY(mdl_ffn_down(&sub, &p->ffn, w->hid, n));
        rt_add(be, rt_xf(x), rt_xf(x), sub.tmp, n * C);
        stack_clamp(s, rt_xf(x), n * C);
    }
fail:
    return st;
}
