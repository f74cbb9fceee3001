/* T5's internals, for the code in models/ that extends t5.c without copying it (generation in
 * t5_generate.c): the model's layout (parameter indices per block, the activation arena of each
 * stack) and the pieces of the forward pass that are shared. Not a public interface: apps and
 * tests use t5.h. */
#ifndef T5_INTERNAL_H
#define T5_INTERNAL_H

#include <math.h>

#include <cjson/cJSON.h>

#include "models/layers/lm_head.h"
#include "models/layers/padding.h"
#include "models/layers/param.h"
#include "models/layers/parallel.h"
#include "models/layers/stack.h"
#include "models/layers/stage.h"
#include "models/t5/t5.h"

/* Added to attention scores at padded keys: exp() of it is exactly 0, and unlike -inf it
 * cannot turn a fully masked row into NaN (HF adds finfo.min, with the same effect). */
#define T5_MASKED (-1e30f)

/* One stack: its blocks (models/layers/stack.h: pre-RMSNorm, q, k, v apart and without biases, the
 * decoder's cross-attention over the encoder's output), the relative position bias every block
 * adds (block 0 owns its table) and the stack's ids. */
typedef struct {
    mdl_stack blocks;
    bool decoder;
    int L, max_T;       /* the blocks held (a pipeline stage's share; 0: none), the longest input */
    int first, L_total; /* the first held block's index in the whole stack, and the stack's blocks */
    bool has_embed;     /* the stack's start: its embedding and block 0's relative bias table */
    bool has_final;     /* its end: the final norm */
    size_t MR;
    int rel_bias;        /* (num_buckets, NH_local) in block 0 */
    float *bias, *dbias; /* (NH_local, T, T) the relative position bias, and its gradient */
    int32_t *buckets;    /* (T*T) */
    int32_t *ids;        /* (MR) */
    int buckets_T;       /* the length buckets holds, 0 for none yet */
} t5_stack;

struct t5_model {
    t5_config cfg; /* cfg.lora points at lora below */
    ckpt_peft_config lora;
    rt_backend *be;
    rt_comm *tp;
    rt_comm *pp;     /* the stages' comm (stage = its rank); not owned */
    mdl_stage stage; /* {0, 1}: the whole model. Else the encoder's blocks fill the first
                          * enc_stages stages and the decoder's the rest (t5_pipe.c) */
    int enc_stages;
    struct mdl_stage_pipe *pipe; /* the pipelined step (models/layers/stage_pipe.h); NULL with one stage */
    rt_params params;
    int shared, lm_head; /* lm_head -1 when tied to shared; each -1 on a stage without it (a stage's
                          * shared past the first is a copy, rt_param_spec.copy) */
    int max_B, max_S, max_T;
    int C, HS, NH_local, I_local, F_local;
    int head_offset, ff_offset; /* this rank's first head and first FFN column */
    mdl_vocab vocab;            /* shared's (and lm_head's) shard */
    t5_stack enc, dec;

    void *act_block;
    size_t act_bytes; /* one slot's activations (a stage keeps one per micro-batch in flight) */
    int act_slots;
    float *cross_in;           /* a decoder stage's copy of the encoder's output (max_B*max_S, C) */
    mdl_lm_head head;          /* the output layer and the loss over the labelled decoder rows (the last stage's) */
    int head_n;                /* the uploaded batch's labelled rows */
    float *key_mask;           /* (max_B, max_S) additive */
    mdl_padding src_pad;       /* the source's padding, per slot; key_len is in the slot's arena */
    mdl_stack_scratch scratch; /* the stacks' backward scratch, shared: they run one after the other */
    float *dtop;               /* (max_B*max_T, C) dL/d(decoder output) */
    float *denc;               /* (max_B*max_S, C) dL/d(encoder output), summed over the decoder's blocks */

    int32_t *h_buckets, *h_dec_ids, *h_targets; /* host staging */
    float *h_mask;
};

/* The pipeline stage's plan: which blocks of each stack it holds (models/t5/t5_pipe.c); the whole
 * model with one stage. */
rt_status t5_stage_plan(t5_model *m);
/* What the decoder's cross-attention reads: the encoder's output, or a decoder stage's copy. */
static inline float *t5_cross_src(const t5_model *m) { return m->enc.L > 0 ? m->enc.blocks.out : m->cross_in; }
/* Points the activation buffers at slot k's (t5.c). */
void t5_use_slot(t5_model *m, int k);
/* The stage as models/layers/stage_pipe.h's runner sees it (t5_pipe.c). */
rt_status t5_pipe_init(t5_model *m, int max_micro);
/* The pieces t5_pipe.c shares with t5_step (t5.c). */
rt_status t5_upload_tgt(t5_model *m, const t5_batch *b, int *n_targets);
/* Their host halves: the checks (and the host staging), without touching the device. */
rt_status t5_check_src(t5_model *m, const int32_t *src_ids, const int32_t *src_mask, int B, int S);
rt_status t5_check_tgt(t5_model *m, const t5_batch *b, int *n_targets);
rt_status t5_stack_bwd(t5_model *m, t5_stack *s, float *dtop, int B, int T, int S, const mdl_pass *pass,
                       const float **demb);
/* Evaluation through the stages (t5_pipe.c): every stage gets the loss and the target count. */
rt_status t5_pipe_eval(t5_model *m, const t5_batch *b, double *loss_sum, int *n_targets);
rt_status t5_head_fwd(t5_model *m, int B, int T, float grad_scale, float *host_logits);
rt_status t5_head_bwd(t5_model *m, int B, int T);

/* The LM head's parameter: lm_head, or `shared` when tied. */
static inline int t5_head_param(const t5_model *m) { return m->lm_head >= 0 ? m->lm_head : m->shared; }
/* HF: sequence_output * d_model^-0.5 with a Python float, i.e. a float32 multiply. */
static inline float t5_decoder_out_scale(const t5_config *c) { return (float)pow((double)c->d_model, -0.5); }

/* The config as HF's config.json (t5_config.c). */
cJSON *t5_config_json(const t5_config *c);
/* Source ids and their additive key mask (m->key_mask, (B, S)) to the device, checked against
 * the vocab and the sizes the model was built for; the encoder's bucket table for length S. */
rt_status t5_upload_src(t5_model *m, const int32_t *src_ids, const int32_t *src_mask, int B, int S);
/* One stack forward from the ids in s->ids (B*T rows) to s->blocks.out; the decoder reads the
 * encoder's output m->enc.blocks.out (B*S rows). */
rt_status t5_stack_fwd(t5_model *m, t5_stack *s, int B, int T, int S, const mdl_pass *pass);
/* logits (R, V_local) on the device to host_logits (R, vocab_size): this rank's columns, or with
 * tp > 1 all ranks' gathered (a collective every rank joins), the padding columns dropped.
 * dev_scratch (tp > 1) and host_scratch, each R * V_local * tp floats, may be NULL: then they are
 * allocated for the call. */
rt_status t5_logits_to_host(t5_model *m, const float *logits, size_t R, float *host_logits, float *dev_scratch,
                            float *host_scratch);

#endif
