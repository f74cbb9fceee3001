/* The GPT-style pre-LayerNorm transformer stack that GPT-2 and GLM share:
 *
 *     x = x + drop(proj(attn(qkv(ln_1(x)))))      attention over a fused [q; k; v]
 *     x = x + drop(fc_proj(act(fc(ln_2(x)))))     MLP
 *
 * for n_layer blocks, over the backend ops and the Megatron layers of models/parallel.h (qkv
 * and fc column-parallel, the projections row-parallel, heads split over tp), then a final
 * LayerNorm. A model writes its embeddings into the stack's first residual slice and runs
 * forward (embedding dropout, the blocks, the final LayerNorm into `out`); backward takes
 * dL/d(out) in `dln` and gives dL/d(embeddings). The model owns what is outside: embeddings,
 * heads and losses.
 *
 * Activations for max_B x max_T are laid out once (llm.c's pattern); a step allocates
 * nothing. With activation checkpointing (checkpoint_layers K > 0) only the residual entering
 * each block is kept for every block; the other activations have K slots, and backward
 * recomputes each segment of K blocks from its inputs, with the same dropout bits, before
 * going back through it, so the gradients are the ones without checkpointing. Dropout sites
 * (models/pass.h): 0 the embeddings, 1 + 3l .. 3 + 3l block l's. Parameter names come from
 * per-model formats with one %d (the layer), and each parameter's tp rule from the model's
 * checkpoint map (checkpoints/ckpt_map_tables.c). */
#ifndef MDL_PRELN_STACK_H
#define MDL_PRELN_STACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoints/ckpt_map.h"
#include "models/pass.h"
#include "runtime/rt_arena.h"
#include "runtime/rt_backend.h"
#include "runtime/rt_comm.h"
#include "runtime/rt_params.h"

/* printf formats with one %d, in block order; then the final LayerNorm's plain names. */
typedef struct {
    const char *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
    const char *lnf_w, *lnf_b;
} mdl_preln_names;

typedef struct {
    int n_layer, C, n_head, F;  /* full (all ranks) sizes; F is the MLP width */
    float ln_eps;
    rt_act_kind act;
    float attn_pdrop, resid_pdrop;
    float emb_pdrop;            /* dropout on the embeddings the model wrote into the first slice */
    float init_std, proj_std;   /* weights N(0, init_std); both projections N(0, proj_std) */
    int checkpoint_layers;      /* 0: keep every block's activations; K: recompute K blocks at a time */
} mdl_preln_config;

typedef struct {
    int ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
} mdl_preln_layer;

/* Which keys a query sees: causal (with an optional per-row bidirectional prefix, GLM) or
 * all, minus an additive key mask (padding). Backend buffers, or NULL. */
typedef struct {
    bool causal;
    const int32_t *prefix;  /* (B) */
    const float *key_mask;  /* (B, T) */
} mdl_preln_mask;

typedef struct {
    mdl_preln_config cfg;
    rt_backend *be;
    rt_comm *tp;
    rt_params *params;
    mdl_preln_layer *layer;
    int lnf_w, lnf_b;           /* the final LayerNorm */
    int C_local, NH_local, HS, F_local, head_offset;
    int max_B, max_T;
    size_t max_BT;
    /* activations */
    int slots;                         /* L, or checkpoint_layers: the per-block activations kept */
    float *res;                        /* (L+1, BT, C) the residual entering each block, and the output */
    float *xmid;                       /* (slots, BT, C) residual after attention; block l in slot l % slots */
    float *ln1, *ln1_mean, *ln1_rstd;  /* (L, BT, C), (L, BT), (L, BT) */
    float *qkv;                        /* (L, BT, 3*C_local) [q; k; v] per token */
    float *probs;                      /* (L, B, NH_local, T, T) softmax before dropout */
    float *atty;                       /* (L, BT, C_local) */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch, *fchg;                 /* (L, BT, F_local) before and after the activation */
    float *out, *out_mean, *out_rstd;  /* (BT, C) the final LayerNorm's output: the stack's result */
    /* scratch, also lent to the model around the stack */
    float *tmp, *dres, *dln;           /* (BT, C) */
    float *dqkv, *datty, *dfch, *dfchg;
} mdl_preln;

/* Declares the blocks' parameters in p (tp rules from map), sized for tp. The caller has
 * checked that tp divides n_head and F. */
void mdl_preln_declare(mdl_preln *s, const mdl_preln_config *c, const mdl_preln_names *names, const ckpt_map *map,
                       rt_backend *be, rt_comm *tp, rt_params *p);
void mdl_preln_free(mdl_preln *s);
/* Takes the activation buffers for max_B x max_T from a (measuring when a->base is NULL). */
void mdl_preln_layout(mdl_preln *s, rt_arena *a, int max_B, int max_T);
/* The residual slice entering block l (l = n_layer: the stack's output). */
float *mdl_preln_residual(const mdl_preln *s, int l);
rt_status mdl_preln_forward(mdl_preln *s, int B, int T, const mdl_preln_mask *mask, const mdl_pass *pass);
/* From dL/d(out) in s->dln: accumulates the gradients and points *demb at dL/d(embeddings)
 * (one of the stack's scratch buffers, valid until its next use). */
rt_status mdl_preln_backward(mdl_preln *s, int B, int T, const mdl_preln_mask *mask, const mdl_pass *pass,
                             const float **demb);
/* The final LayerNorm of n rows x into y (mean, rstd: n floats of scratch), for decoding. */
void mdl_preln_final_norm(mdl_preln *s, float *y, float *mean, float *rstd, const float *x, size_t n);
/* Incremental decoding: one new token per row, x (B, C) in and out (the residual stream), run
 * through every block against per-layer key and value caches kcache[l], vcache[l] (B, Tmax,
 * C_local each, row b's key j at b*Tmax + j). The new token's key and value are added at cache
 * slot `at` (slots start zeroed and are written once); its query attends to all Tmax slots
 * minus key_mask (B, Tmax, additive: -inf for slots it must not see). at_idx (B) holds b*Tmax +
 * at (backend int32). Uses the stack's first-layer activation buffers as scratch. */
rt_status mdl_preln_decode(mdl_preln *s, int B, float *x, float *const *kcache, float *const *vcache, int Tmax,
                           const int32_t *at_idx, const float *key_mask);
/* The keys and values of block l for n rows of its input LayerNorm output (the forward's ln1
 * activations), into k and v (n, C_local) each: to fill the caches after a full forward. */
void mdl_preln_kv(mdl_preln *s, int l, const float *ln1_rows, size_t n, float *k, float *v);
/* Block l's input-LayerNorm output for the last forward's n rows (recomputed from the block's
 * input when checkpointing has reused its slot). */
const float *mdl_preln_ln1(mdl_preln *s, int l, size_t n);

#endif
