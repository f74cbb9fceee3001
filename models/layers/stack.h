/* The transformer block stack every family runs: n_layer blocks of the sublayers of
 * models/layers/block.h, wired by configuration:
 *
 *   pre-norm (GPT-2, GLM, T5)             post-norm (BERT, RoBERTa)
 *     x = x + attn(norm1(x))                x = norm1(x + attn(x))
 *     x = x + cross(norm_c(x), kv)  [T5's decoder: cross-attention over the encoder's output]
 *     x = x + ffn(norm2(x))                 x = norm2(x + ffn(x))
 *   then an optional final norm (and its dropout) into `out`.
 *
 * Norms are LayerNorm or RMSNorm; attention has a fused or separate q/k/v, with or without
 * biases, causal or not, a per-row bidirectional prefix (GLM), a key mask (padding) and an
 * additive bias shared by every block (T5's relative positions); the FFN is plain or gated.
 *
 * The stack owns what is the same everywhere:
 *   - the activation layout for max_B x max_T, taken once from an arena (llm.c's pattern), so a
 *     step allocates nothing;
 *   - at a 16-bit compute precision, the activations a block keeps for its backward held at that
 *     precision (rt_act_dtype, where the backend's ops read and write 16-bit handles): the
 *     sublayers' own (their inputs, q, k, v, attention's output, the FFN's inner ones), the
 *     residual sums inside the block (mid, mid2; post-norm h1, h2) and the residual entering it
 *     (but for the stack's input, fp32 as the model writes it); norm statistics stay fp32 and
 *     attention probabilities are 16-bit by the op;
 *   - activation checkpointing (checkpoint_layers K > 0): only the residual entering each block
 *     is kept for every block, the other activations have K slots (block l in slot l % K), and
 *     backward recomputes each segment of K blocks from its inputs, with the same dropout bits,
 *     before going back through it, so the gradients are the ones without checkpointing;
 *   - dropout-site numbering (models/layers/pass.h): the embeddings at site_emb, the final norm's at
 *     site_final, block l's kinds at site[kind] + l * site_stride;
 *   - the grads-ready marks: after the final norm, and after each block its first parameter;
 *   - the model FLOPs of its blocks (models/layers/flops.h).
 *
 * The model owns what is outside: embeddings (written into the first residual slice), heads
 * and losses. Forward runs embedding dropout, the blocks and the final norm; backward takes
 * dL/d(out) and gives dL/d(embeddings). Parameters are declared by the family (their names and
 * init are particular) into `layer`, or from printf formats by mdl_stack_declare_named. */
#ifndef MDL_STACK_H
#define MDL_STACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_peft.h"
#include "models/layers/block.h"
#include "models/layers/pass.h"
#include "runtime/base/rt_arena.h"

typedef enum {
    MDL_SITE_SELF_PROBS,
    MDL_SITE_SELF_OUT,
    MDL_SITE_CROSS_PROBS,
    MDL_SITE_CROSS_OUT,
    MDL_SITE_FFN_INNER,
    MDL_SITE_FFN_OUT,
    MDL_SITE_KINDS
} mdl_site_kind;

typedef struct {
    int n_layer, C, n_head, head_size, F; /* full (all ranks) sizes; head_size 0: C / n_head */
    bool post_norm;                       /* normalize after each residual add (BERT), else before each sublayer */
    mdl_norm_kind norm;
    float norm_eps;
    bool final_norm;    /* a norm over the last block's output (its parameters: `final`) */
    bool cross;         /* cross-attention after self-attention (pre-norm only) */
    bool position_bias; /* self-attention adds a position bias (T5: mdl_stack_mask.bias) */
    bool gated;         /* the FFN has up_lin (T5 v1.1) */
    bool fp16_clamp;    /* in fp16, each residual add holding an inf is clamped to +-(65504 - 1000):
                                * HF T5's guard (transformers #4287, #9295); pre-norm only */
    rt_act_kind act;
    float attn_scale; /* 0: 1/sqrt(head_size) */
    float attn_pdrop, resid_pdrop, ffn_pdrop, emb_pdrop, final_pdrop;
    int site_emb, site_final, site[MDL_SITE_KINDS], site_stride; /* dropout sites, -1: none */
    int checkpoint_layers;        /* 0: keep every block's activations; K: recompute K blocks at a time */
    int layer_offset;             /* a pipeline stage's stack: the global index of its first block (n_layer is its
                                * own count); parameter names and dropout sites use global indices */
    int layers_total;             /* a pipeline stage's stack: the whole model's blocks, which its FLOPs count (as a
                                * tp rank counts the whole layer), so every stage reports the model's; 0: n_layer */
    const ckpt_peft_config *lora; /* LoRA adapters on the target linears (models/layers/lora.h); NULL: none. Not owned:
                                   * the model's copy */
    int lora_site;                /* the first block's LoRA dropout site; a block's is lora_site + its index */
} mdl_stack_config;

/* One block's parameters; -1 for what the configuration has not. */
typedef struct {
    mdl_norm_params norm1, norm_cross, norm2;
    mdl_attn_params attn, cross;
    mdl_ffn_params ffn;
    int first; /* the block's first parameter: where its gradients start in the slab */
} mdl_block_params;

/* printf formats with one %d, in the order of mdl_block_params; the final norm's plain names. */
typedef struct {
    const char *norm1_w, *norm1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *norm2_w, *norm2_b, *up_w, *up_b, *down_w, *down_b,
        *final_w, *final_b;
} mdl_stack_names;

/* Which keys a query sees, and the other stack a cross-attention reads. Backend buffers, or NULL. */
typedef struct {
    bool causal;
    const int32_t *prefix;        /* (B) keys before it are seen by every query (causal only) */
    const float *key_mask;        /* (B, T) additive */
    const int32_t *key_len;       /* (B) key_mask as right-padding lengths, or NULL (rt_attn_desc.key_len) */
    const float *bias;            /* (NH_local, T, T) additive, shared by every block */
    float *dbias;                 /* its gradient, summed over the blocks; the caller marks block 0 ready */
    const float *cross_in;        /* (B, S, C) what cross-attention reads */
    float *dcross_in;             /* dL/d(cross_in) added here, not reduced over tp */
    const float *cross_key_mask;  /* (B, S) additive */
    const int32_t *cross_key_len; /* (B) cross_key_mask as right-padding lengths, or NULL */
    int S;
} mdl_stack_mask;

/* Backend scratch for one stack's backward (and its branch outputs), sized for `rows` rows;
 * stacks that run one after the other may share one (T5's encoder and decoder). */
typedef struct {
    size_t rows;
    rt_x tmp;                        /* (rows, C): the branches, at the activation type at tp = 1 */
    float *dres, *dln, *dsum;        /* (rows, C); dsum post-norm only */
    rt_x dsub;                       /* dln's memory in the blocks: a sublayer's input gradient, typed at tp = 1 */
    rt_x dqkv, datty;                /* (rows, 3 I_local), (rows, I_local) at the activation type */
    rt_x dup, dup_lin, dhid;         /* (rows, F_local) at the activation type; dup_lin gated only */
    float *lora_t, *lora_u, *lora_x; /* LoRA only: (rows, r) twice; (rows, widest input) with its dropout */
} mdl_stack_scratch;

typedef struct {
    mdl_stack_config cfg;
    rt_backend *be;
    rt_comm *tp;
    rt_params *params;
    mdl_block_params *layer;
    mdl_norm_params final;
    int HS, NH_local, I_local, F_local, head_offset;
    int max_B, max_T, max_S;
    size_t max_BT, max_BS;
    /* activations: the residual for every block, the rest a slot per block (or per
     * checkpointed block), at rt_act_dtype */
    int slots;       /* n_layer, or checkpoint_layers */
    float *res_ends; /* (2, BT, C) the residual entering block 0 and leaving the last, fp32 */
    rt_x res_inner;  /* (L-1, BT, C) the residual between blocks, at rt_act_dtype (mdl_stack_residual) */
    rt_x h1, h2;     /* (slots, BT, C) around norm1 and norm2: pre-norm, their outputs (the sublayer
                                   * inputs); post-norm, their inputs (the residual sums) */
    rt_x mid;        /* (slots, BT, C) the residual after attention (post-norm: norm1's output) */
    float *n1_mean, *n1_rstd, *n2_mean, *n2_rstd; /* (slots, BT); means LayerNorm only */
    rt_x qkv, atty;                               /* (slots, BT, 3 I_local), (slots, BT, I_local) */
    void *probs;                  /* (slots, B, NH_local, T) rows of probs_row bytes: T probs_dtype values,
                                   * or what a fused attention keeps instead (rt_attn_kept_bytes) */
    size_t probs_row, cprobs_row; /* bytes per query row of probs and cprobs */
    rt_dtype probs_dtype;         /* the compute precision when laid out (rt_attn_desc.probs_dtype) */
    rt_x hc, cq, ckv, catty;      /* cross-attention's (BS rows for ckv) */
    float *nc_mean, *nc_rstd;
    rt_x mid2;                        /* (slots, BT, C) the residual after cross-attention */
    void *cprobs;                     /* (slots, B, NH_local, T) rows of cprobs_row bytes (S values, or less) */
    rt_x up, up_lin, hid;             /* (slots, BT, F_local) */
    float *out, *out_mean, *out_rstd; /* (BT, C) the stack's result: the final norm's output (after its
                                       * dropout), or res[L] */
    mdl_stack_scratch own, *sc;       /* sc: own, or a shared one */
    bool *clamped;                    /* (L, 3) fp16_clamp: whether the forward clamped mid, mid2, out */
} mdl_stack;

/* Sets up s for c over backend be, tp group tp and slab p, with every parameter index -1. The
 * caller has checked that tp divides n_head and F. */
void mdl_stack_init(mdl_stack *s, const mdl_stack_config *c, rt_backend *be, rt_comm *tp, rt_params *p);
/* Declares the blocks' parameters from names (tp rules from map): weights N(0, init_std), the
 * projections into the residual (proj, down) N(0, proj_std), norms 1 and 0; with LoRA (c->lora),
 * each target linear's adapter after its weight (models/layers/lora.h). */
void mdl_stack_declare_named(mdl_stack *s, const mdl_stack_names *names, const ckpt_map *map, float init_std,
                             float proj_std);
/* GPT-2's, GLM's and BERT's dropout sites: 0 the embeddings, 1 + 3l .. 3 + 3l block l's. */
void mdl_stack_compact_sites(mdl_stack_config *c);
void mdl_stack_free(mdl_stack *s);
/* Takes the activation buffers for max_B x max_T (cross-attention over max_S) from a,
 * measuring when a->base is NULL; the scratch too unless `shared` (laid out by
 * mdl_stack_scratch_layout for at least as many rows). */
void mdl_stack_layout(mdl_stack *s, rt_arena *a, int max_B, int max_T, int max_S, mdl_stack_scratch *shared);
void mdl_stack_scratch_layout(const mdl_stack *s, mdl_stack_scratch *sc, rt_arena *a, size_t rows);
/* The residual slice entering block l (l = n_layer: the last block's output). */
rt_x mdl_stack_residual(const mdl_stack *s, int l);
/* The stack's input, residual 0 (fp32): where the model writes its embeddings. */
float *mdl_stack_input(const mdl_stack *s);
/* Where backward wants dL/d(out): the caller may write it there (or pass its own buffer). */
float *mdl_stack_dout(const mdl_stack *s);
rt_status mdl_stack_forward(mdl_stack *s, int B, int T, const mdl_stack_mask *mask, const mdl_pass *pass);
/* From dL/d(out) in dout (overwritten): accumulates the gradients and points *demb at
 * dL/d(embeddings) (one of the scratch buffers, valid until its next use). */
rt_status mdl_stack_backward(mdl_stack *s, int B, int T, const mdl_stack_mask *mask, const mdl_pass *pass, float *dout,
                             const float **demb);
/* The sublayers over this stack's parameters and scratch (models/layers/block.h). */
mdl_sublayers mdl_stack_sublayers(const mdl_stack *s);
/* Training FLOPs of the blocks on B rows of T tokens (cross-attention over S). */
double mdl_stack_train_flops(const mdl_stack *s, int B, int T, int S);

/* Incremental decoding (pre-norm stacks): one new token per row, R rows, against key/value
 * caches the caller lays out and describes. */
typedef struct {
    float *const *k, *const *v;   /* block l's self-attention keys and values */
    const int32_t *at_idx;        /* (R) backend: the new token's key and value are added at these
                                          * cache rows (zeroed slots: GLM's row-major caches), or, NULL: */
    size_t at;                    /* written as R contiguous rows from float `at` of k[l], v[l] (T5's
                                          * time-major caches) */
    rt_attn_desc self;            /* the new queries over k[l], v[l]: strides, masks, bias */
    float *const *ck, *const *cv; /* cross-attention: block l's keys and values of the source */
    rt_attn_desc cross;
} mdl_decode_caches;

/* Backend scratch of a decoding step, for R rows: ln, tmp (R, C); mean (LayerNorm), rstd (R);
 * q, k, v, atty (R, I_local); probs (R, NH_local, keys) stored as probs_dtype (it overrides the
 * caches' descriptions); up, up_lin (gated), hid (R, F_local). */
typedef struct {
    float *tmp, *mean, *rstd;
    rt_x ln, q, k, v, atty, up, up_lin, hid;
    void *probs;
    rt_dtype probs_dtype;
} mdl_decode_scratch;

/* The stack's own first-slot activations as decoding scratch for R rows over Tk keys (the
 * forward's buffers are reused; checked to hold them). */
mdl_decode_scratch mdl_stack_decode_scratch(const mdl_stack *s, int R, int Tk);
/* x (R, C), the residual stream, in and out through every block: each block adds its new key
 * and value to the caches, then attends over them (and over the source with cross-attention). */
rt_status mdl_stack_decode(mdl_stack *s, int R, float *x, const mdl_decode_caches *c, const mdl_decode_scratch *w);
/* The final norm of n rows x into y (mean (LayerNorm), rstd: n floats of scratch). */
void mdl_stack_final_norm(mdl_stack *s, float *y, float *mean, float *rstd, const float *x, size_t n);
/* The keys and values of block l for n rows of its norm1 output, into k and v (n, I_local)
 * each: to fill the caches after a full forward. */
void mdl_stack_kv(mdl_stack *s, int l, rt_x norm1_rows, size_t n, float *k, float *v);
/* The same for block l's cross-attention over n rows of the source stack's output src. */
void mdl_stack_cross_kv(mdl_stack *s, int l, const float *src, size_t n, float *k, float *v);
/* Block l's norm1 output for the last forward's n rows (recomputed from the block's input when
 * checkpointing has reused its slot). */
rt_x mdl_stack_norm1(mdl_stack *s, int l, size_t n);

#endif
