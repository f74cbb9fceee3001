/* The GPT-2 model's state, shared by gpt2.c (training, scoring) and gpt2_generate.c (decoding
 * with a key/value cache); no other file includes this. */
#ifndef GPT2_INTERNAL_H
#define GPT2_INTERNAL_H

#include "models/gpt2.h"
#include "models/lm_head.h"
#include "models/parallel.h"
#include "models/param.h"
#include "models/stack.h"

/* Added to attention scores at padded keys: exp() of it is exactly 0, and unlike -inf it
 * cannot turn a fully masked row into NaN. */
#define GPT2_MASKED (-1e30f)

struct gpt2_model {
    gpt2_config cfg;
    rt_backend *be;
    rt_comm *tp;
    rt_params params;
    mdl_stage stage;    /* which blocks this model holds (models/stage.h) */
    rt_comm *pp;        /* the stages' comm (stage = its rank); not owned */
    struct gpt2_pipe *pipe; /* the pipelined step's buffers (gpt2_pipe.c); NULL with one stage */
    int wte, wpe, score; /* -1 on stages without them */
    mdl_stack blocks;   /* the transformer blocks, their activations and scratch */
    int max_B, max_T;
    int C;
    mdl_vocab vocab;    /* wte's shard */
    size_t max_BT;

    void *act_block;    /* every buffer below (and the blocks') lives in this one allocation */
    float *pooled;      /* (B, C) */
    float *logits, *dlogits, *losses; /* (B, NL), (B, NL), (B) */
    float *dpooled;     /* (B, C) */
    float *key_mask;    /* (B, T) additive */
    int32_t *ids, *pos, *last, *labels; /* (BT), (BT), (B), (B) */

    mdl_lm_head head;   /* the tied language-model head (gpt2_lm_step, gpt2_lm_logits) */

    int32_t *h_pos, *h_last, *h_shifted; /* host staging */
    float *h_mask, *h_losses;
};

/* Checks a batch and uploads ids, positions and the key mask (pool: the classifier's rows). */
rt_status gpt2_upload(gpt2_model *m, const int32_t *host_ids, const int32_t *host_mask, int B, int T, bool pool);
/* Embeddings through ln_f into m->blocks.out. */
rt_status gpt2_forward_body(gpt2_model *m, int B, int T, const mdl_pass *pass);
/* The pieces of a classifier step (gpt2_cls_step, and the pipelined one in gpt2_pipe.c):
 * token and position embeddings of the uploaded batch into the blocks' first residual, and
 * their backward from demb; the stack over the uploaded batch; the head from the stack's
 * output (pool, score, loss) and its backward into the stack's dout. */
rt_status gpt2_embed(gpt2_model *m, size_t BT);
void gpt2_embed_bwd(gpt2_model *m, const float *demb, size_t BT);
rt_status gpt2_stack_fwd(gpt2_model *m, int B, int T, const mdl_pass *pass);
rt_status gpt2_stack_bwd(gpt2_model *m, int B, int T, const mdl_pass *pass, const float **demb);
void gpt2_cls_head_fwd(gpt2_model *m, const rt_batch *b, float grad_scale, double *loss_sum, float *host_logits);
void gpt2_cls_head_bwd(gpt2_model *m, int B, int T);
/* gpt2_pipe.c: the pipelined step's state, and the forward-only pass of gpt2_cls_step. */
typedef struct gpt2_pipe gpt2_pipe;
rt_status gpt2_pipe_init(gpt2_model *m, int max_micro, gpt2_pipe **out);
void gpt2_pipe_free(gpt2_pipe *p);
rt_status gpt2_pipe_forward(gpt2_model *m, const rt_batch *b, double *loss_sum, float *host_logits);

#endif
