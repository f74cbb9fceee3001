/* The GPT-2 model's state, shared by gpt2.c (training, scoring) and gpt2_generate.c (decoding
 * with a key/value cache); no other file includes this. */
#ifndef GPT2_INTERNAL_H
#define GPT2_INTERNAL_H

#include "models/gpt2/gpt2.h"
#include "models/layers/lm_head.h"
#include "models/layers/padding.h"
#include "models/layers/parallel.h"
#include "models/layers/param.h"
#include "models/layers/stack.h"

/* Added to attention scores at padded keys: exp() of it is exactly 0, and unlike -inf it
 * cannot turn a fully masked row into NaN. */
#define GPT2_MASKED (-1e30f)

struct gpt2_model {
    gpt2_config cfg; /* cfg.lora points at lora below */
    ckpt_peft_config lora;
    rt_backend *be;
    rt_comm *tp;
    rt_params params;
    mdl_stage stage;             /* which blocks this model holds (models/layers/stage.h) */
    rt_comm *pp;                 /* the stages' comm (stage = its rank); not owned */
    struct mdl_stage_pipe *pipe; /* the pipelined step (models/layers/stage_pipe.h); NULL with one stage */
    int lm_n;                    /* a language model's stage: the targets of the uploaded batch (the last stage) */
    int wte, wpe, score;         /* -1 on stages without them */
    mdl_stack blocks;            /* the transformer blocks, their activations and scratch */
    int max_B, max_T;
    int C;
    mdl_vocab vocab; /* wte's shard */
    size_t max_BT;

    void *act_block;                    /* every buffer below (and the blocks') lives in this one allocation, */
    int act_slots;                      /* laid out this many times (a pipeline stage's in-flight micro-batches) */
    size_t act_bytes;                   /* apart */
    float *pooled;                      /* (B, C) */
    float *logits, *dlogits, *losses;   /* (B, NL), (B, NL), (B) */
    float *dpooled;                     /* (B, C) */
    float *key_mask;                    /* (B, T) additive */
    mdl_padding padding;                /* the batch's padding as attention reads it */
    int32_t *ids, *pos, *last, *labels; /* (BT), (BT), (B), (B) */

    mdl_lm_head head; /* the tied language-model head (gpt2_lm_step, gpt2_lm_logits) */

    int32_t *h_pos, *h_last, *h_shifted; /* host staging */
    float *h_mask, *h_losses;
};

/* Checks a batch and uploads ids, positions and the key mask (pool: the classifier's rows). */
rt_status gpt2_upload(gpt2_model *m, const int32_t *host_ids, const int32_t *host_mask, int B, int T, bool pool);
/* Embeddings through ln_f into m->blocks.out. */
rt_status gpt2_forward_body(gpt2_model *m, int B, int T, const mdl_pass *pass);

#endif
