/* The GLM model's state, shared by glm.c (training and scoring) and glm_generate.c
 * (incremental decoding); no other file includes this. */
#ifndef GLM_INTERNAL_H
#define GLM_INTERNAL_H

#include <stdbool.h>

#include "models/glm.h"
#include "models/param.h"
#include "models/parallel.h"
#include "models/stack.h"

/* Added to the logits of vocab padding columns: they never win a softmax. */
#define GLM_MASKED (-1e30f)

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
    float *rows, *drows;              /* (BT, C) the hidden states that reach the output layer */
    float *logits;                    /* (logits_rows, V_local): grown on demand (glm_logits_rows) */
    size_t logits_rows;
    float *losses, *xent_stats;       /* (BT), (3 BT) */
    float *vocab_mask;                /* (V_local) 0, or GLM_MASKED on padding columns */
    float *cand, *dcand;              /* (B*K_MAX, C) cloze candidates' embeddings */
    float *cand_scores;               /* (B, B*K_MAX) */
    int32_t *ids, *pos, *bpos, *sep, *row_idx, *targets, *cand_ids;

    int32_t *h_idx, *h_targets; /* host staging */
    float *h_losses, *h_scores;
};

/* Cloze candidates per row: verbalizers have a handful of words. */
#define GLM_K_MAX 16


/* Checks a batch and uploads ids, positions, block positions and separators. */
rt_status glm_upload(glm_model *m, const glm_inputs *in);
/* Embeddings through the final LayerNorm into m->blocks.out (the blocks keep their activations). */
rt_status glm_forward_body(glm_model *m, int B, int T, const mdl_pass *pass);
/* Makes m->logits hold n rows of this rank's vocab columns. The output layer's buffer is sized
 * by the rows that reach it (labelled targets, generated rows), not by B x T: a GLM-large batch
 * of 8 x 512 would otherwise hold 800 MB of logits that single-token cloze never uses. */
rt_status glm_logits_rows(glm_model *m, size_t n);
/* m->logits (n rows of this rank's vocab columns) to the host as (n, vocab), gathered over tp. */
rt_status glm_vocab_to_host(glm_model *m, size_t n, float *host_logits);

#endif
