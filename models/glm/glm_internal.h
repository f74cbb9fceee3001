/* The GLM model's state, shared by glm.c (training and scoring) and glm_generate.c
 * (incremental decoding); no other file includes this. */
#ifndef GLM_INTERNAL_H
#define GLM_INTERNAL_H

#include <stdbool.h>

#include "models/glm/glm.h"
#include "models/layers/lm_head.h"
#include "models/layers/param.h"
#include "models/layers/parallel.h"
#include "models/layers/stack.h"
#include "models/layers/stage.h"
#include "runtime/train/rt_batch.h"

struct glm_model {
    glm_config cfg; /* cfg.lora points at lora below */
    ckpt_peft_config lora;
    rt_backend *be;
    rt_comm *tp;
    rt_comm *pp;                 /* the stages' comm (stage = its rank); not owned */
    mdl_stage stage;             /* which layers this model holds */
    struct mdl_stage_pipe *pipe; /* the pipelined step; NULL with one stage */
    int max_micro;               /* its most micro-batches per step */
    rt_params params;
    int wte, wpe, wbpe; /* -1 on stages without them (the last stage's wte is a copy) */
    mdl_stack blocks;
    int max_B, max_T, C, P; /* P: rows of each position table */
    mdl_vocab vocab;        /* wte's shard */
    size_t max_BT;

    void *act_block;
    size_t act_bytes;           /* one slot's activations */
    int act_slots;              /* laid out this many times (a stage's in-flight micro-batches) */
    int head_n;                 /* the uploaded batch's rows through the output layer */
    const glm_task *pipe_tasks; /* a pipelined step's micro-batches, and the views the */
    rt_batch *pipe_views;       /* stage runner hands back (max_micro of them) */
    mdl_lm_head head;           /* the tied output layer: rows (BT of them at most), logits, xent */
    float *cand, *dcand;        /* (B*K_MAX, C) cloze candidates' embeddings */
    float *cand_scores;         /* (B, B*K_MAX) */
    int32_t *ids, *pos, *bpos, *sep, *cand_ids;

    float *h_scores; /* host staging */
};

/* Cloze candidates per row: verbalizers have a handful of words. */
#define GLM_K_MAX 16

/* Checks a batch and uploads ids, positions, block positions and separators. */
rt_status glm_upload(glm_model *m, const glm_inputs *in);
/* Embeddings through the final LayerNorm into m->blocks.out (the blocks keep their activations). */
rt_status glm_forward_body(glm_model *m, int B, int T, const mdl_pass *pass);

#endif
