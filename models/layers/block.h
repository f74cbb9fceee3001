/* The sublayers of a transformer block, the part every family computes alike; models/layers/stack.h
 * wires them into blocks:
 *
 *   norm       LayerNorm (weight, bias) or RMSNorm (weight only) over rows of C
 *   attention  branch = proj(attention(q(in), k(kv), v(kv)))   kv = in (self) or another
 *              stack's output (cross); q, k, v column-parallel, fused [q; k; v] or apart, this
 *              tp rank's heads; proj row-parallel
 *   FFN        branch = down(drop_inner(act(up(in)) [* up_lin(in)]))   up, up_lin
 *              column-parallel (gated when up_lin is present), down row-parallel
 *   residual   the step after a branch: its dropout, the residual add and the norm that reads
 *              the sum, fused (rt_residual_fwd/bwd; mdl_residual_desc describes it)
 *
 * The branch lands in the scratch `tmp`; the backward takes dL/d(branch) and writes dL/d(in)
 * into `din` (the caller's residual and norm gradients stay with the caller, whose accumulation
 * order the goldens pin down). Parameters are indices into the model's slab, -1 for one a
 * family has not (biases: T5; up_lin: ungated FFNs); activations are the caller's slices: the
 * sublayers' own (their inputs, q, k, v, the attention output, the FFN's inner ones) and the
 * residual stream (a block's input, its sums, its output) typed handles (rt_x) that a typed
 * backend keeps in 16 bits, and so are the branch and its gradient in `tmp` at tp = 1; what
 * crosses ranks or stacks (the branch under tp, gradients that are all-reduced, another stack's
 * output) fp32. */
#ifndef MDL_BLOCK_H
#define MDL_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_params.h"

typedef enum { MDL_NORM_LAYER, MDL_NORM_RMS } mdl_norm_kind;

/* A dropout call: p 0 is none. */
typedef struct {
    float p;
    uint64_t seed, stream;
    const uint64_t *step; /* NULL, or where the step's part of stream is (mdl_pass.stream_step) */
} mdl_drop;

/* A linear's LoRA adapter (models/layers/lora.h): slab indices of A and B; a -1: none. */
typedef struct {
    int a, b;
} mdl_lora;

static inline mdl_lora mdl_lora_none(void) {
    const mdl_lora none = {-1, -1};
    return none;
}
static inline bool mdl_lora_on(mdl_lora l) { return l.a >= 0; }

/* What the sublayers' adapters share in one block (models/layers/lora.h). */
typedef struct {
    int r; /* 0: no adapters anywhere */
    float scale;
    mdl_drop drop; /* this block's LoRA dropout (p 0: none); linear k draws stream drop.stream + k */
    float *t, *u;  /* backend scratch (rows, r) */
    float *x;      /* (rows, the widest input) with dropout only: the dropped input, its gradient */
} mdl_lora_run;

/* What the sublayers of one stack share: its backend, tp group, slab, widths and scratch. */
typedef struct {
    rt_backend *be;
    rt_comm *tp;
    rt_params *params;
    int C, I_local;           /* width; this rank's attention width (its heads x head size) */
    int F, F_local, F_offset; /* FFN width: all ranks', this rank's, and its first column */
    mdl_norm_kind norm;
    float norm_eps;
    rt_act_kind act;
    size_t rows;             /* rows the scratch below holds */
    rt_x tmp;                /* (rows, C): the branch (forward), its dropout's gradient (backward) */
    rt_x dqkv, datty;        /* (rows, 3 I_local), (rows, I_local) */
    rt_x dup, dup_lin, dhid; /* (rows, F_local): d(up output), d(up_lin output), d(FFN hidden) */
    mdl_lora_run lora;
} mdl_sublayers;

typedef struct {
    int w, b;
} mdl_norm_params;

typedef struct {
    int q_w, k_w, v_w; /* k_w -1: q_w is the fused [q; k; v] */
    int q_b;           /* the fused projection's bias, or -1 */
    int proj_w, proj_b;
    mdl_lora qkv_l;                 /* the fused projection's adapter, when it is one module (GPT-2's c_attn) */
    mdl_lora q_l, k_l, v_l, proj_l; /* the others; q_l, k_l, v_l of a fused projection are its parts' (BERT's
                                     * query, key, value), each writing its third */
} mdl_attn_params;

typedef struct {
    int up_w, up_b, up_lin_w, down_w, down_b;
    mdl_lora up_l, up_lin_l, down_l;
} mdl_ffn_params;

/* Where q, k and v of an attention live (strides in the attention's rt_attn_desc). */
typedef struct {
    rt_x q, k, v;
} mdl_qkv;

/* Whether the attention's q, k and v come from one fused projection. */
static inline bool mdl_attn_fused(const mdl_attn_params *p) { return p->k_w < 0; }

/* out = norm(in) over n rows; mean (LayerNorm) and rstd keep its statistics. */
void mdl_norm_fwd(const mdl_sublayers *s, mdl_norm_params p, rt_x out, float *mean, float *rstd, rt_x in, size_t n);
/* din += dL/d(in) from dout; accumulates the norm's parameter gradients. */
void mdl_norm_bwd(const mdl_sublayers *s, mdl_norm_params p, float *din, rt_x dout, rt_x in, const float *mean,
                  const float *rstd, size_t n);

/* The residual step of n rows: the branch's dropout drop, the add, then the norm p (p.w -1: none). */
rt_residual_desc mdl_residual_desc(const mdl_sublayers *s, mdl_norm_params p, mdl_drop drop, size_t n);

/* tmp = proj(attention(q(in), k(kv), v(kv))) over BT query rows and kv_rows key rows (kv NULL:
 * kv = in); q, k, v, probs and atty are kept for the backward. d describes the attention (its
 * strides, masks, bias and dropout on the probabilities). */
rt_status mdl_attn_fwd(const mdl_sublayers *s, const mdl_attn_params *p, const rt_attn_desc *d, rt_x in,
                       const float *kv, size_t kv_rows, mdl_qkv a, void *probs, rt_x atty, size_t BT);
/* din = dL/d(in) from dbranch = dL/d(tmp), given the forward's activations; accumulates the
 * parameter gradients and dbias (when d has a bias). din is an activation's gradient of either
 * type (fp32 under tp, which all-reduces it). Cross-attention adds dL/d(kv) into dkv, not yet
 * reduced over tp. */
rt_status mdl_attn_bwd(const mdl_sublayers *s, const mdl_attn_params *p, const rt_attn_desc *d, rt_x dbranch, rt_x in,
                       const float *kv, size_t kv_rows, float *dkv, mdl_qkv a, const void *probs, rt_x atty,
                       float *dbias, rt_x din, size_t BT);

/* The FFN's first half: hidden = drop_inner(act(up(in)) [* up_lin(in)]); up and up_lin (gated)
 * kept for the backward. */
void mdl_ffn_up(const mdl_sublayers *s, const mdl_ffn_params *p, rt_x in, rt_x up, rt_x up_lin, rt_x hidden, size_t BT,
                mdl_drop inner);
/* Its second half: tmp = down(hidden). */
rt_status mdl_ffn_down(const mdl_sublayers *s, const mdl_ffn_params *p, rt_x hidden, size_t BT);
/* din = dL/d(in) from dbranch = dL/d(tmp) (din as mdl_attn_bwd's); accumulates the parameter
 * gradients. */
rt_status mdl_ffn_bwd(const mdl_sublayers *s, const mdl_ffn_params *p, rt_x dbranch, rt_x in, rt_x up, rt_x up_lin,
                      rt_x hidden, rt_x din, size_t BT, mdl_drop inner);

#endif
