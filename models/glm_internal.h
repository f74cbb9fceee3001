/* The GLM model's state, shared by glm.c (training and scoring) and glm_generate.c
 * (incremental decoding); no other file includes this. */
#ifndef GLM_INTERNAL_H
#define GLM_INTERNAL_H

#include <stdbool.h>

#include "models/glm.h"
#include "models/lm_head.h"
#include "models/param.h"
#include "models/parallel.h"
#include "models/stack.h"


struct glm_model {
    glm_config cfg;
    rt_backend *be;
    rt_comm *tp;
    rt_params params;
    int wte, wpe, wbpe;
    mdl_stack blocks;
    int max_B, max_T, C, P; /* P: rows of each position table */
    mdl_vocab vocab;                  /* wte's shard */
    size_t max_BT;

    void *act_block;
    mdl_lm_head head;                 /* the tied output layer: rows (BT of them at most), logits, xent */
    float *cand, *dcand;              /* (B*K_MAX, C) cloze candidates' embeddings */
    float *cand_scores;               /* (B, B*K_MAX) */
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
