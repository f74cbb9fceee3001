/* The sublayers of a transformer block, the part every family computes alike, each ending in its
 * residual-branch dropout:
 *
 *   attention  branch = drop(proj(attention(qkv(in))))   qkv column-parallel (fused [q; k; v]),
 *                                                         this tp rank's heads, proj row-parallel
 *   FFN        branch = drop(down(act(up(in))))           up column-parallel, down row-parallel
 *
 * The family wires them: pre-LN (GPT-2, GLM) feeds LN(x) and adds the branch to x; post-LN
 * (BERT, RoBERTa) feeds x, adds, then normalizes. The branch lands in the scratch `tmp`; the
 * backward takes dL/d(branch) and writes dL/d(in) into `din` (the caller's residual and norm
 * gradients stay with the caller, whose accumulation order the goldens pin down). Parameters
 * are indices into the model's slab; activations are the caller's slices for this block. */
#ifndef MDL_BLOCK_H
#define MDL_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/rt_backend.h"
#include "runtime/rt_comm.h"
#include "runtime/rt_params.h"

/* What the sublayers of one model share: its backend, tp group, slab, widths and scratch. */
typedef struct {
    rt_backend *be;
    rt_comm *tp;
    rt_params *params;
    int C, C_local, F_local;  /* width; this rank's attention width and FFN width */
    float *tmp;               /* (BT, C): the branch output (forward), dropout's gradient (backward) */
    float *dqkv, *datty;      /* (BT, 3 C_local), (BT, C_local) */
    float *dup, *dact;        /* (BT, F_local): d(up output), d(act output) */
} mdl_sublayers;

typedef struct {
    int qkv_w, qkv_b, proj_w, proj_b;
} mdl_attn_params;

typedef struct {
    int up_w, up_b, down_w, down_b;
} mdl_ffn_params;

/* Residual-branch dropout: p 0 is none. */
typedef struct {
    float p;
    uint64_t seed, stream;
} mdl_branch_drop;

/* tmp = drop(proj(attention(qkv(in)))); qkv (BT, 3 C_local), probs and atty (BT, C_local) are
 * kept for the backward. d describes the attention over qkv (its dropout on the probabilities). */
rt_status mdl_attn_fwd(const mdl_sublayers *s, const mdl_attn_params *p, const rt_attn_desc *d, const float *in,
                       float *qkv, float *probs, float *atty, size_t BT, mdl_branch_drop drop);
/* din = dL/d(in) from dbranch = dL/d(tmp), given the forward's activations; accumulates the
 * parameter gradients. */
rt_status mdl_attn_bwd(const mdl_sublayers *s, const mdl_attn_params *p, const rt_attn_desc *d, const float *dbranch,
                       const float *in, const float *qkv, const float *probs, const float *atty, float *din, size_t BT,
                       mdl_branch_drop drop);

/* The FFN's first half: hidden = act(up(in)), up (BT, F_local) kept for the backward. */
void mdl_ffn_up(const mdl_sublayers *s, const mdl_ffn_params *p, rt_act_kind act, const float *in, float *up,
                float *hidden, size_t BT);
/* Its second half: tmp = drop(down(hidden)). */
rt_status mdl_ffn_down(const mdl_sublayers *s, const mdl_ffn_params *p, const float *hidden, size_t BT,
                       mdl_branch_drop drop);
/* din = dL/d(in) from dbranch = dL/d(tmp); accumulates the parameter gradients. */
rt_status mdl_ffn_bwd(const mdl_sublayers *s, const mdl_ffn_params *p, rt_act_kind act, const float *dbranch,
                      const float *in, const float *up, const float *hidden, float *din, size_t BT,
                      mdl_branch_drop drop);

#endif
