/* T5's internals, for the code in models/ that extends t5.c without copying it (generation in
 * t5_generate.c): the model's layout (parameter indices per block, the activation arena of each
 * stack) and the pieces of the forward pass that are shared. Not a public interface: apps and
 * tests use t5.h. */
#ifndef T5_INTERNAL_H
#define T5_INTERNAL_H

#include <math.h>

#include "models/t5.h"

/* Added to attention scores at padded keys: exp() of it is exactly 0, and unlike -inf it
 * cannot turn a fully masked row into NaN (HF adds finfo.min, with the same effect). */
#define T5_MASKED (-1e30f)

/* Parameter indices of one block; -1 where the block has none. */
typedef struct {
    int ln_self, q, k, v, o, rel_bias;  /* layer.0 (rel_bias in block 0 only) */
    int ln_cross, cq, ck, cv, co;       /* decoder layer.1 EncDecAttention */
    int ln_ff, wi, wi1, wo;             /* DenseReluDense: wi (or wi_0), wi_1 when gated */
    int first;                          /* the block's first parameter: its place in the slab */
} t5_block_params;

/* Activations of one stack. R is the stack's rows (B*T), MR its maximum; per-block buffers
 * are `slots` blocks of MR rows: L, or with activation checkpointing K, block l in slot l % K
 * (backward recomputes a segment of K blocks from their kept inputs in res). */
typedef struct {
    bool decoder;
    int L, max_T, slots;
    size_t MR;
    t5_block_params *blk;
    int final_ln;
    float *res;            /* (L+1, MR, C) residual entering each block; res[L] enters the final norm */
    float *mid;            /* (L, MR, C) after self-attention */
    float *mid2;           /* (L, MR, C) after cross-attention (decoder) */
    float *ln1, *ln1_rstd; /* (L, MR, C), (L, MR) */
    float *q, *k, *v;      /* (L, MR, I_local) column-parallel */
    float *probs;          /* (L, B, NH_local, T, T) softmax before dropout */
    float *atty;           /* (L, MR, I_local) attention output, input of o */
    float *lnc, *lnc_rstd; /* (L, MR, C), (L, MR) decoder: the cross-attention's norm */
    float *cq;             /* (L, MR, I_local) */
    float *ck, *cv;        /* (L, B*S max, I_local) from the encoder's output */
    float *cprobs;         /* (L, B, NH_local, T, S) */
    float *catty;          /* (L, MR, I_local) */
    float *ln2, *ln2_rstd; /* (L, MR, C), (L, MR) */
    float *fa, *fb;        /* (L, MR, F_local) wi (wi_0) and wi_1 outputs */
    float *fh;             /* (L, MR, F_local) input of wo: act(fa) (* fb), after dropout */
    float *lnf, *lnf_rstd; /* (MR, C), (MR) the final norm */
    float *out;            /* (MR, C) after the final dropout (decoder: and the rescale) */
    float *bias, *dbias;   /* (NH_local, T, T) the relative position bias, and its gradient */
    int32_t *buckets;      /* (T*T) */
    int32_t *ids;          /* (MR) */
    int buckets_T;         /* the length buckets holds, 0 for none yet */
} t5_stack;

struct t5_model {
    t5_config cfg;
    rt_backend *be;
    rt_comm *tp;
    rt_params params;
    int shared, lm_head; /* lm_head -1 when tied to shared */
    int max_B, max_S, max_T;
    int C, HS, NH_local, I_local, F_local;
    int head_offset, ff_offset;      /* this rank's first head and first FFN column */
    int V_pad, V_local, vocab_start; /* shared/lm_head: V_pad = ckpt_tp_padded_vocab rows over all ranks */
    bool vocab_padded_here;          /* this rank's shard holds padding rows */
    t5_stack enc, dec;

    void *act_block;
    float *logits;      /* (max_B*max_T, V_local); the gradient overwrites it */
    float *losses;      /* (max_B*max_T) */
    float *xent_stats;  /* (3 * max_B*max_T) */
    float *vocab_mask;  /* (V_local) 0, or T5_MASKED on padding columns */
    float *key_mask;    /* (max_B, max_S) additive */
    int32_t *targets;   /* (max_B*max_T) labels with ignored ones -100 */
    float *tmp, *dres, *dln, *dtop; /* (max rows, C) scratch; dtop: dL/d(decoder output) */
    float *denc;        /* (max_B*max_S, C) dL/d(encoder output), summed over the decoder's blocks */
    float *dq, *dk, *dv, *datty; /* (max rows, I_local) */
    float *dfa, *dfb, *dfh;      /* (max rows, F_local); dfb only when gated */

    int32_t *h_buckets, *h_dec_ids, *h_targets; /* host staging */
    float *h_mask, *h_losses;
};

static inline float *t5_param(t5_model *m, int idx) { return rt_params_data(&m->params, idx); }
/* The LM head's parameter: lm_head, or `shared` when tied. */
static inline int t5_head_param(const t5_model *m) { return m->lm_head >= 0 ? m->lm_head : m->shared; }
/* HF: sequence_output * d_model^-0.5 with a Python float, i.e. a float32 multiply. */
static inline float t5_decoder_out_scale(const t5_config *c) { return (float)pow((double)c->d_model, -0.5); }

/* Source ids and their additive key mask (m->key_mask, (B, S)) to the device, checked against
 * the vocab and the sizes the model was built for; the encoder's bucket table for length S. */
rt_status t5_upload_src(t5_model *m, const int32_t *src_ids, const int32_t *src_mask, int B, int S);
/* One stack forward from the ids in s->ids (B*T rows) to s->out; the decoder reads the encoder's
 * output m->enc.out (B*S rows). */
rt_status t5_stack_fwd(t5_model *m, t5_stack *s, int B, int T, int S, const mdl_pass *pass);
/* The FFN sublayer of block l of stack s on R rows: out = in + drop(wo(drop(act(wi h) [* wi_1 h]))),
 * h = norm(in). ln (R, C), rstd (R), fa, fb (gated only) and fh (R, F_local) keep its
 * activations for backward; tmp (R, C) is scratch; out may alias in, or be NULL to stop once
 * fh is kept (a recompute). Collective over tp (wo is row-parallel). */
rt_status t5_ffn_fwd(t5_model *m, const t5_stack *s, int l, const mdl_pass *pass, float *out, const float *in,
                     float *ln, float *rstd, float *fa, float *fb, float *fh, float *tmp, size_t R);
/* logits (R, V_local) on the device to host_logits (R, vocab_size): this rank's columns, or with
 * tp > 1 all ranks' gathered (a collective every rank joins), the padding columns dropped.
 * dev_scratch (tp > 1) and host_scratch, each R * V_local * tp floats, may be NULL: then they are
 * allocated for the call. */
rt_status t5_logits_to_host(t5_model *m, const float *logits, size_t R, float *host_logits, float *dev_scratch,
                            float *host_scratch);

#endif
