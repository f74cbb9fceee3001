/* LoRA (Hu et al., 2021) on the stack's linears, as HF PEFT computes it (issue 36):
 *
 *   y = x W^T + b + scale * (drop(x) A^T) B^T      A (r, in), B (out, r), scale alpha / r
 *
 * The base W and b are frozen (rt_param_spec.frozen: no gradient, no weight-gradient product);
 * A and B are parameters of the slab like any other, named after the base weight as PEFT names
 * them ("h.0.attn.c_attn.weight" -> "h.0.attn.c_attn.lora_A.weight"). The products through A and
 * B are r wide, so the forward keeps nothing: the backward recomputes t = drop(x) A^T (the same
 * dropout bits), an (N, r) product beside the base's (N, out).
 *
 * Tensor parallelism follows the base layer (models/layers/parallel.h):
 *   column-parallel (W split by output rows): A whole on every rank, B split as W's rows. Each
 *     rank's u = scale dY_r B_r is partial; dX takes u_r A before the base's all-reduce of dX,
 *     and u is all-reduced (N x r floats) before dA = u^T drop(x), so A's gradient is the same
 *     on every rank, as a replicated parameter's must be.
 *   row-parallel (W split by input columns): A split as W's columns, B whole. t = x_r A_r^T is
 *     all-reduced (N x r floats) before B; the backward's dY is the same on every rank, so dB and
 *     u are too, and dA_r = u^T drop(x_r), dX_r = drop'(u A_r) need no collective.
 * Dropout draws at the whole (N, in) matrix's indices, so every tp size drops the same. */
#ifndef MDL_LORA_H
#define MDL_LORA_H

#include <stdbool.h>
#include <stddef.h>

#include "checkpoints/ckpt_peft.h"
#include "checkpoints/ckpt_map.h"
#include "models/layers/block.h"
#include "models/layers/parallel.h"
#include "runtime/train/rt_params.h"

/* The A and B tp rules of an adapter: mdl_lora_a_rule and mdl_lora_b_rule in models/layers/parallel.h. */

/* Declares the adapter of base weight `base` (a 2-D [out, in] parameter, one HF tensor) when its
 * HF module (map's export name without ".weight", e.g. "transformer.h.0.attn.c_attn") is one of
 * cfg's targets: A (r, in) Kaiming-uniform as PEFT's (bound 1/sqrt(in), in the whole layer's
 * width), B (out, r) zero, named MODULE.lora_A.weight and MODULE.lora_B.weight with MODULE
 * without the map's prefix ("h.0.attn.c_attn.lora_A.weight"). mdl_lora_none() when it is not a
 * target, or cfg is NULL. */
mdl_lora mdl_lora_declare(rt_params *p, const ckpt_peft_config *cfg, const ckpt_map *map, int base, int tp_size);
/* The same for a fused [q; k; v] weight made of three HF linears (BERT's query, key and value):
 * out[k] the adapter of part k when that module is a target, each writing its third of the fused
 * output; all none for a weight that is one HF tensor. */
void mdl_lora_declare_parts(rt_params *p, const ckpt_peft_config *cfg, const ckpt_map *map, int base, mdl_lora out[3]);

/* Freezes every parameter but the adapters and the modules_to_save (matched on their HF module or
 * one that holds it, as PEFT matches them: "score" keeps score.weight trainable, "classifier"
 * RoBERTa's classifier.dense). Call after declaring, before the layout; nothing happens when cfg
 * is NULL. */
void mdl_lora_freeze_base(rt_params *p, const ckpt_peft_config *cfg, const ckpt_map *map);

/* RT_ERR_USAGE naming the first of cfg's targets for which no adapter was declared in p (PEFT's
 * "Target modules ... not found in the base model"): family names the model, hint the modules
 * that take adapters there ("c_attn, c_proj, c_fc"). */
rt_status mdl_lora_check_targets(const rt_params *p, const ckpt_peft_config *cfg, const ckpt_map *map,
                                 const char *family, const char *hint);

/* The base weights mdl_lora_merge changed, as they were. */
typedef struct {
    int n;
    int *param;     /* (n) slab indices */
    float **values; /* (n) host copies of their values before */
} mdl_lora_merged;

/* Folds every adapter of p into its base weight, W += scale (B A), as PEFT's merge_and_unload
 * does (fp32, on the host): this rank's shards, with no collective, since the split above keeps
 * the product local (a column-parallel base's rows go with B's, a row-parallel one's columns
 * with A's; a fused projection's part adapter adds into its third of the rows). The model then
 * computes what base + adapters computed, and an HF export writes the merged model (adapters
 * are left out of it). saved gets the changed weights' old values for mdl_lora_unmerge. */
void mdl_lora_merge(rt_params *p, const ckpt_peft_config *cfg, const ckpt_map *map, mdl_lora_merged *saved);
/* Puts the merged weights back as they were, bit for bit, and frees saved. */
void mdl_lora_unmerge(rt_params *p, mdl_lora_merged *saved);

/* Whether parameter name is an adapter's (".lora_A.weight" or ".lora_B.weight"). */
bool mdl_lora_is_adapter(const char *name);

/* A block's linears, which number their LoRA dropout streams (mdl_lora_run.drop.stream + k). */
enum {
    MDL_LORA_Q,
    MDL_LORA_K,
    MDL_LORA_V,
    MDL_LORA_PROJ,
    MDL_LORA_UP,
    MDL_LORA_UP_LIN,
    MDL_LORA_DOWN,
    MDL_LORA_CROSS /* + any of the attention's: its cross-attention */
};

/* Column-parallel: out (N, out_f, row stride ld: a part of a fused output) += scale drop(x) A^T
 * B^T; x (N, in), in on every rank. */
void mdl_lora_col_fwd(const mdl_sublayers *s, mdl_lora l, int k, rt_x out, int ld, rt_x x, size_t N, int in, int out_f);
/* The same for a fused [q; k; v] projection computed a part at a time (decoding's key/value
 * caches): out[i] (N, part), NULL to skip, gets rows [i part, (i + 1) part) of B's output. */
void mdl_lora_col_fwd_parts(const mdl_sublayers *s, mdl_lora l, int k, const rt_x *out, rt_x x, size_t N, int in,
                            int part);
/* Its backward from dout (N, out_f, row stride ld): accumulates dA and dB and adds dL/dx into din
 * (N, in), this rank's partial sum (the caller all-reduces din as the base's). */
rt_status mdl_lora_col_bwd(const mdl_sublayers *s, mdl_lora l, int k, rt_x din, rt_x dout, int ld, rt_x x, size_t N,
                           int in, int out_f);
/* Row-parallel: out (N, out_f) += scale drop(x_r) A_r^T (all-reduced) B^T; x_r (N, in_local). */
rt_status mdl_lora_row_fwd(const mdl_sublayers *s, mdl_lora l, int k, rt_x out, rt_x x, size_t N, int in_local,
                           int out_f);
/* Its backward: accumulates dA_r and dB and writes dinp = dL/dx_r (N, in_local), or adds to it
 * (accumulate: after the base's product, which keeps the large GEMM free of a beta; without
 * dropout only, whose masked gradient has no add into a 16-bit buffer: the base then adds). */
rt_status mdl_lora_row_bwd(const mdl_sublayers *s, mdl_lora l, int k, rt_x dinp, bool accumulate, rt_x dout, rt_x x,
                           size_t N, int in_local, int out_f);

#endif
