/* The pre-LayerNorm block stack GPT-2 and GLM share (see preln_stack.h). */
#include "models/preln_stack.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "models/block.h"
#include "models/parallel.h"
#include "runtime/rt_rng.h"

#define P(idx) rt_params_data(s->params, (idx))
#define G(idx) rt_params_grad(s->params, (idx))

static int preln_add(mdl_preln *s, const ckpt_map *map, const char *fmt, int l, int64_t d0, int64_t d1, bool no_decay,
                     rt_init_kind init, float std) {
    char name[RT_PARAM_NAME_MAX];
    snprintf(name, sizeof name, fmt, l);
    int64_t shape[2] = {d0, d1};
    return rt_params_add(s->params, name, d1 ? 2 : 1, shape, ckpt_map_tp_rule(map, name), no_decay, init, std);
}

void mdl_preln_declare(mdl_preln *s, const mdl_preln_config *c, const mdl_preln_names *n, const ckpt_map *map,
                       rt_backend *be, rt_comm *tp, rt_params *p) {
    s->cfg = *c;
    s->be = be;
    s->tp = tp;
    s->params = p;
    s->C_local = c->C / tp->size;
    s->NH_local = c->n_head / tp->size;
    s->HS = c->C / c->n_head;
    s->F_local = c->F / tp->size;
    s->head_offset = s->NH_local * tp->rank;
    const int C = c->C, Cl = s->C_local, Fl = s->F_local;
    const float std = c->init_std, pstd = c->proj_std;
    s->layer = rt_xcalloc((size_t)c->n_layer, sizeof *s->layer);
    for (int l = 0; l < c->n_layer; l++) {
        mdl_preln_layer *y = &s->layer[l];
        y->ln1_w = preln_add(s, map, n->ln1_w, l, C, 0, true, RT_INIT_ONES, 0);
        y->ln1_b = preln_add(s, map, n->ln1_b, l, C, 0, true, RT_INIT_ZEROS, 0);
        y->qkv_w = preln_add(s, map, n->qkv_w, l, 3 * (int64_t)Cl, C, false, RT_INIT_NORMAL, std);
        y->qkv_b = preln_add(s, map, n->qkv_b, l, 3 * (int64_t)Cl, 0, true, RT_INIT_ZEROS, 0);
        y->proj_w = preln_add(s, map, n->proj_w, l, C, Cl, false, RT_INIT_NORMAL, pstd);
        y->proj_b = preln_add(s, map, n->proj_b, l, C, 0, true, RT_INIT_ZEROS, 0);
        y->ln2_w = preln_add(s, map, n->ln2_w, l, C, 0, true, RT_INIT_ONES, 0);
        y->ln2_b = preln_add(s, map, n->ln2_b, l, C, 0, true, RT_INIT_ZEROS, 0);
        y->fc_w = preln_add(s, map, n->fc_w, l, Fl, C, false, RT_INIT_NORMAL, std);
        y->fc_b = preln_add(s, map, n->fc_b, l, Fl, 0, true, RT_INIT_ZEROS, 0);
        y->fcproj_w = preln_add(s, map, n->fcproj_w, l, C, Fl, false, RT_INIT_NORMAL, pstd);
        y->fcproj_b = preln_add(s, map, n->fcproj_b, l, C, 0, true, RT_INIT_ZEROS, 0);
    }
    s->lnf_w = preln_add(s, map, n->lnf_w, 0, C, 0, true, RT_INIT_ONES, 0);
    s->lnf_b = preln_add(s, map, n->lnf_b, 0, C, 0, true, RT_INIT_ZEROS, 0);
}

void mdl_preln_free(mdl_preln *s) {
    free(s->layer);
    s->layer = NULL;
}

void mdl_preln_layout(mdl_preln *s, rt_arena *a, int max_B, int max_T) {
    s->max_B = max_B;
    s->max_T = max_T;
    s->max_BT = (size_t)max_B * (size_t)max_T;
    const int K = s->cfg.checkpoint_layers;
    s->slots = K > 0 && K < s->cfg.n_layer ? K : s->cfg.n_layer;
    const size_t L = (size_t)s->slots, BT = s->max_BT, B = (size_t)max_B, T = (size_t)max_T;
    const size_t C = (size_t)s->cfg.C, Cl = (size_t)s->C_local, Fl = (size_t)s->F_local, f = sizeof(float);
    s->res = rt_arena_take(a, ((size_t)s->cfg.n_layer + 1) * BT * C, f);
    s->xmid = rt_arena_take(a, L * BT * C, f);
    s->ln1 = rt_arena_take(a, L * BT * C, f);
    s->ln1_mean = rt_arena_take(a, L * BT, f);
    s->ln1_rstd = rt_arena_take(a, L * BT, f);
    s->qkv = rt_arena_take(a, L * BT * 3 * Cl, f);
    s->probs = rt_arena_take(a, L * B * (size_t)s->NH_local * T * T, f);
    s->atty = rt_arena_take(a, L * BT * Cl, f);
    s->ln2 = rt_arena_take(a, L * BT * C, f);
    s->ln2_mean = rt_arena_take(a, L * BT, f);
    s->ln2_rstd = rt_arena_take(a, L * BT, f);
    s->fch = rt_arena_take(a, L * BT * Fl, f);
    s->fchg = rt_arena_take(a, L * BT * Fl, f);
    s->out = rt_arena_take(a, BT * C, f);
    s->out_mean = rt_arena_take(a, BT, f);
    s->out_rstd = rt_arena_take(a, BT, f);
    s->tmp = rt_arena_take(a, BT * C, f);
    s->dres = rt_arena_take(a, BT * C, f);
    s->dln = rt_arena_take(a, BT * C, f);
    s->dqkv = rt_arena_take(a, BT * 3 * Cl, f);
    s->datty = rt_arena_take(a, BT * Cl, f);
    s->dfch = rt_arena_take(a, BT * Fl, f);
    s->dfchg = rt_arena_take(a, BT * Fl, f);
}

float *mdl_preln_residual(const mdl_preln *s, int l) { return s->res + (size_t)l * s->max_BT * (size_t)s->cfg.C; }

/* Block l's activation slices. */
typedef struct {
    float *res_in, *res_out, *xmid, *ln1, *ln1_mean, *ln1_rstd, *qkv, *probs, *atty, *ln2, *ln2_mean, *ln2_rstd, *fch,
        *fchg;
} preln_slices;

static preln_slices preln_at(const mdl_preln *s, int block) {
    const size_t MBT = s->max_BT, C = (size_t)s->cfg.C, Cl = (size_t)s->C_local, Fl = (size_t)s->F_local;
    const size_t probs = (size_t)s->max_B * s->NH_local * s->max_T * s->max_T;
    const size_t l = (size_t)(block % s->slots);
    return (preln_slices){.res_in = mdl_preln_residual(s, block), .res_out = mdl_preln_residual(s, block + 1),
                          .xmid = s->xmid + l * MBT * C, .ln1 = s->ln1 + l * MBT * C, .ln1_mean = s->ln1_mean + l * MBT,
                          .ln1_rstd = s->ln1_rstd + l * MBT, .qkv = s->qkv + l * MBT * 3 * Cl,
                          .probs = s->probs + l * probs, .atty = s->atty + l * MBT * Cl, .ln2 = s->ln2 + l * MBT * C,
                          .ln2_mean = s->ln2_mean + l * MBT, .ln2_rstd = s->ln2_rstd + l * MBT,
                          .fch = s->fch + l * MBT * Fl, .fchg = s->fchg + l * MBT * Fl};
}

static rt_attn_desc preln_attn(const mdl_preln *s, int B, int T, const mdl_preln_mask *mask, const mdl_pass *pass,
                               int site) {
    const size_t ld = 3 * (size_t)s->C_local;
    return (rt_attn_desc){.B = B, .NH = s->NH_local, .Tq = T, .Tk = T, .HS = s->HS, .ldq = ld, .ldk = ld, .ldv = ld,
                          .ldo = (size_t)s->C_local, .scale = 1.0f / sqrtf((float)s->HS), .causal = mask->causal,
                          .prefix = mask->prefix, .key_mask = mask->key_mask, .bias = NULL,
                          .dropout_p = pass->training ? s->cfg.attn_pdrop : 0.0f, .seed = pass->seed,
                          .stream = mdl_dropout_stream(pass, site), .head_offset = s->head_offset,
                          .heads_total = s->cfg.n_head};
}

/* The shared sublayers over this stack's scratch (models/block.h). */
static mdl_sublayers preln_sub(const mdl_preln *s) {
    return (mdl_sublayers){.be = s->be, .tp = s->tp, .params = s->params, .C = s->cfg.C, .C_local = s->C_local,
                           .F_local = s->F_local, .tmp = s->tmp, .dqkv = s->dqkv, .datty = s->datty, .dup = s->dfch,
                           .dact = s->dfchg};
}

static mdl_attn_params preln_attn_params(const mdl_preln_layer *p) {
    return (mdl_attn_params){.qkv_w = p->qkv_w, .qkv_b = p->qkv_b, .proj_w = p->proj_w, .proj_b = p->proj_b};
}

static mdl_ffn_params preln_ffn_params(const mdl_preln_layer *p) {
    return (mdl_ffn_params){.up_w = p->fc_w, .up_b = p->fc_b, .down_w = p->fcproj_w, .down_b = p->fcproj_b};
}

/* The residual dropout of call site `site` (none outside training). */
static mdl_branch_drop preln_drop(const mdl_preln *s, const mdl_pass *pass, int site) {
    return (mdl_branch_drop){.p = pass->training ? s->cfg.resid_pdrop : 0.0f, .seed = pass->seed,
                             .stream = mdl_dropout_stream(pass, site)};
}

/* Block l forward from its residual input into its slot; the residual output too when
 * write_out (a recompute leaves the kept one alone). */
static rt_status preln_block_fwd(mdl_preln *s, int l, int B, int T, const mdl_preln_mask *mask, const mdl_pass *pass,
                                 bool write_out) {
    rt_status st = RT_OK;
    const mdl_preln_config *c = &s->cfg;
    rt_backend *be = s->be;
    const size_t BT = (size_t)B * T;
    const int C = c->C;
    const mdl_preln_layer *p = &s->layer[l];
    const mdl_sublayers sub = preln_sub(s);
    const mdl_attn_params ap = preln_attn_params(p);
    const mdl_ffn_params fp = preln_ffn_params(p);
    preln_slices a = preln_at(s, l);
    const int site = 1 + 3 * l;
    rt_layernorm_fwd(be, a.ln1, a.ln1_mean, a.ln1_rstd, a.res_in, P(p->ln1_w), P(p->ln1_b), BT, C, c->ln_eps);
    rt_attn_desc d = preln_attn(s, B, T, mask, pass, site);
    RT_TRY(mdl_attn_fwd(&sub, &ap, &d, a.ln1, a.qkv, a.probs, a.atty, BT, preln_drop(s, pass, site + 1)));
    rt_add(be, a.xmid, a.res_in, s->tmp, BT * C);

    rt_layernorm_fwd(be, a.ln2, a.ln2_mean, a.ln2_rstd, a.xmid, P(p->ln2_w), P(p->ln2_b), BT, C, c->ln_eps);
    mdl_ffn_up(&sub, &fp, c->act, a.ln2, a.fch, a.fchg, BT);
    if (!write_out) return RT_OK; /* the MLP's output only feeds the next block's kept input */
    RT_TRY(mdl_ffn_down(&sub, &fp, a.fchg, BT, preln_drop(s, pass, site + 2)));
    rt_add(be, a.res_out, a.xmid, s->tmp, BT * C);
fail:
    return st;
}

rt_status mdl_preln_forward(mdl_preln *s, int B, int T, const mdl_preln_mask *mask, const mdl_pass *pass) {
    rt_status st = RT_OK;
    const mdl_preln_config *c = &s->cfg;
    rt_backend *be = s->be;
    const size_t BT = (size_t)B * T;
    if (pass->training && c->emb_pdrop > 0) {
        float *x = mdl_preln_residual(s, 0);
        rt_dropout_fwd(be, x, x, BT * c->C, c->emb_pdrop, pass->seed, mdl_dropout_stream(pass, 0));
    }
    for (int l = 0; l < c->n_layer; l++) RT_TRY(preln_block_fwd(s, l, B, T, mask, pass, true));
    rt_layernorm_fwd(be, s->out, s->out_mean, s->out_rstd, mdl_preln_residual(s, c->n_layer), P(s->lnf_w),
                     P(s->lnf_b), BT, c->C, c->ln_eps);
fail:
    return st;
}

void mdl_preln_kv(mdl_preln *s, int l, const float *ln1_rows, size_t n, float *k, float *v) {
    const mdl_preln_layer *p = &s->layer[l];
    const size_t C = (size_t)s->cfg.C, Cl = (size_t)s->C_local;
    /* the fused [q; k; v] weight's k and v row blocks (and their biases) */
    mdl_col_linear_fwd(s->be, k, ln1_rows, P(p->qkv_w) + Cl * C, P(p->qkv_b) + Cl, n, (int)C, (int)Cl);
    mdl_col_linear_fwd(s->be, v, ln1_rows, P(p->qkv_w) + 2 * Cl * C, P(p->qkv_b) + 2 * Cl, n, (int)C, (int)Cl);
}

const float *mdl_preln_ln1(mdl_preln *s, int l, size_t n) {
    preln_slices a = preln_at(s, l);
    if (s->slots < s->cfg.n_layer) /* the slot may hold a later block's */
        rt_layernorm_fwd(s->be, a.ln1, a.ln1_mean, a.ln1_rstd, a.res_in, P(s->layer[l].ln1_w),
                         P(s->layer[l].ln1_b), n, s->cfg.C, s->cfg.ln_eps);
    return a.ln1;
}

rt_status mdl_preln_decode(mdl_preln *s, int B, float *x, float *const *kcache, float *const *vcache, int Tmax,
                           const int32_t *at_idx, const float *key_mask) {
    rt_status st = RT_OK;
    const mdl_preln_config *c = &s->cfg;
    rt_backend *be = s->be;
    const int C = c->C, Cl = s->C_local, Fl = s->F_local;
    const size_t n = (size_t)B;
    /* scratch: the first layer's activation slices, (B, ...) of them */
    float *ln = s->ln1, *mean = s->ln1_mean, *rstd = s->ln1_rstd, *q = s->qkv, *k = s->qkv + n * Cl,
          *v = s->qkv + 2 * n * Cl, *atty = s->atty, *fch = s->fch, *fchg = s->fchg;
    /* probs holds B x NH x Tmax here: within the forward's B x NH x T x T */
    RT_CHECK(B <= s->max_B && (size_t)Tmax <= (size_t)s->max_T * (size_t)s->max_T, "decode: %d rows, %d slots", B, Tmax);
    for (int l = 0; l < c->n_layer; l++) {
        const mdl_preln_layer *p = &s->layer[l];
        rt_layernorm_fwd(be, ln, mean, rstd, x, P(p->ln1_w), P(p->ln1_b), n, C, c->ln_eps);
        mdl_col_linear_fwd(be, q, ln, P(p->qkv_w), P(p->qkv_b), n, C, Cl);
        mdl_preln_kv(s, l, ln, n, k, v);
        rt_scatter_rows_add(be, kcache[l], k, at_idx, B, Cl);
        rt_scatter_rows_add(be, vcache[l], v, at_idx, B, Cl);
        rt_attn_desc d = {.B = B, .NH = s->NH_local, .Tq = 1, .Tk = Tmax, .HS = s->HS, .ldq = (size_t)Cl,
                          .ldk = (size_t)Cl, .ldv = (size_t)Cl, .ldo = (size_t)Cl, .scale = 1.0f / sqrtf((float)s->HS),
                          .key_mask = key_mask, .head_offset = s->head_offset, .heads_total = c->n_head};
        rt_attention_fwd(be, &d, atty, s->probs, q, kcache[l], vcache[l]);
        RT_TRY(mdl_row_linear_fwd(be, s->tp, s->tmp, atty, P(p->proj_w), P(p->proj_b), n, Cl, C));
        rt_add(be, x, x, s->tmp, n * C);
        rt_layernorm_fwd(be, ln, mean, rstd, x, P(p->ln2_w), P(p->ln2_b), n, C, c->ln_eps);
        mdl_col_linear_fwd(be, fch, ln, P(p->fc_w), P(p->fc_b), n, C, Fl);
        rt_act_fwd(be, c->act, fchg, fch, n * Fl);
        RT_TRY(mdl_row_linear_fwd(be, s->tp, s->tmp, fchg, P(p->fcproj_w), P(p->fcproj_b), n, Fl, C));
        rt_add(be, x, x, s->tmp, n * C);
    }
fail:
    return st;
}

void mdl_preln_final_norm(mdl_preln *s, float *y, float *mean, float *rstd, const float *x, size_t n) {
    rt_layernorm_fwd(s->be, y, mean, rstd, x, P(s->lnf_w), P(s->lnf_b), n, s->cfg.C, s->cfg.ln_eps);
}

rt_status mdl_preln_backward(mdl_preln *s, int B, int T, const mdl_preln_mask *mask, const mdl_pass *pass,
                             const float **demb) {
    rt_status st = RT_OK;
    const mdl_preln_config *c = &s->cfg;
    rt_backend *be = s->be;
    const size_t BT = (size_t)B * T;
    const int C = c->C;
    const mdl_sublayers sub = preln_sub(s);
    rt_clear(be, s->dres, BT * C * sizeof(float));
    rt_layernorm_bwd(be, s->dres, G(s->lnf_w), G(s->lnf_b), s->dln, mdl_preln_residual(s, c->n_layer),
                     P(s->lnf_w), s->out_mean, s->out_rstd, BT, C);
    mdl_grads_ready(pass, s->params, s->lnf_w); /* the final norm and the model's head above it */
    const int K = s->slots, last_segment = (c->n_layer - 1) / K * K;
    for (int l = c->n_layer - 1; l >= 0; l--) {
        /* checkpointing: entering a segment, recompute its blocks (the forward left the last
         * segment's in place) */
        if (K < c->n_layer && l % K == K - 1 && l < last_segment)
            for (int j = l - K + 1; j <= l; j++) RT_TRY(preln_block_fwd(s, j, B, T, mask, pass, false));
        const mdl_preln_layer *p = &s->layer[l];
        const mdl_attn_params ap = preln_attn_params(p);
        const mdl_ffn_params fp = preln_ffn_params(p);
        preln_slices a = preln_at(s, l);
        const int site = 1 + 3 * l;
        /* MLP: res_out = xmid + drop(fc_proj(act(fc(ln_2(xmid))))); dres holds dL/dres_out */
        RT_TRY(mdl_ffn_bwd(&sub, &fp, c->act, s->dres, a.ln2, a.fch, a.fchg, s->dln, BT,
                           preln_drop(s, pass, site + 2)));
        rt_layernorm_bwd(be, s->dres, G(p->ln2_w), G(p->ln2_b), s->dln, a.xmid, P(p->ln2_w), a.ln2_mean,
                         a.ln2_rstd, BT, C);
        /* attention: xmid = res_in + drop(proj(attn(qkv(ln_1(res_in))))); dres = dL/dxmid */
        rt_attn_desc d = preln_attn(s, B, T, mask, pass, site);
        RT_TRY(mdl_attn_bwd(&sub, &ap, &d, s->dres, a.ln1, a.qkv, a.probs, a.atty, s->dln, BT,
                            preln_drop(s, pass, site + 1)));
        rt_layernorm_bwd(be, s->dres, G(p->ln1_w), G(p->ln1_b), s->dln, a.res_in, P(p->ln1_w), a.ln1_mean,
                         a.ln1_rstd, BT, C);
        mdl_grads_ready(pass, s->params, p->ln1_w);
    }
    *demb = s->dres;
    if (pass->training && c->emb_pdrop > 0) {
        rt_dropout_bwd(be, s->tmp, s->dres, BT * C, c->emb_pdrop, pass->seed, mdl_dropout_stream(pass, 0));
        *demb = s->tmp;
    }
fail:
    return st;
}
