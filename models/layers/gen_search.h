/* The search of Hugging Face's `model.generate` (transformers 5.x) over any model that decodes
 * incrementally: greedy search (num_beams 1, `_sample` without sampling) and beam search
 * (`_beam_search`), with max_new_tokens and a per-row stop at eos_token_id. T5 and GLM plug in
 * their step (gen_model); this file owns the hypotheses, the scores and which rows go on.
 *
 * HF's semantics matched (transformers/generation/utils.py):
 * - greedy: the next token is the first argmax of the logits (no logits processor); a row stops
 *   after it emits eos or after max_new_tokens tokens.
 * - beam: log_softmax of the logits, plus the beam's running score; the top 2*num_beams
 *   continuations of a source row over all its beams (at step 0 only beam 0 is live). A
 *   continuation ending in eos (or reaching max_new_tokens) is finished: if it is among the
 *   top num_beams, its score sum_logprob / generated_len^length_penalty (generated_len counts
 *   the eos) may enter the row's num_beams best finished hypotheses; the top num_beams
 *   unfinished ones run on. A row accepts no more hypotheses once (early_stopping True) all
 *   num_beams slots are filled, or once the best running score divided by len^length_penalty
 *   (len = tokens generated so far; with "never" and length_penalty > 0, max_new_tokens)
 *   cannot beat the worst of num_beams filled slots. The answer is the best finished
 *   hypothesis; its score is HF's sequences_scores.
 * Rows move after each step: beam search picks parents, and a source row whose search is over
 * leaves the batch, so finished rows cost nothing; the model follows through reorder and
 * squeeze. Every tp rank makes the same choices from the same gathered logits. */
#ifndef GEN_SEARCH_H
#define GEN_SEARCH_H

#include <stdint.h>

#include "runtime/base/rt_status.h"

/* HF's early_stopping: False (a heuristic: stop when the best running beam cannot win even at
 * the current length), True (stop when num_beams hypotheses are finished), "never". */
typedef enum { GEN_EARLY_STOP_HEURISTIC = 0, GEN_EARLY_STOP_TRUE, GEN_EARLY_STOP_NEVER } gen_early_stopping;

typedef struct {
    int max_new_tokens;                /* generated tokens per row at most, eos included */
    int num_beams;                     /* 1: greedy */
    double length_penalty;             /* beam: exponent of the length the score is divided by */
    gen_early_stopping early_stopping; /* beam only */
    int eos_token_id;                  /* a row stops after this token */
} gen_options;

/* What the observer sees after each step's forward: the rows it ran, in order. */
typedef struct {
    int step;               /* 0-based: the index of the token being chosen */
    int n_rows;             /* rows this step (beams of the sources still searching) */
    const int32_t *src_row; /* (n_rows) the source row each row belongs to */
    const int32_t *prefix;  /* row r's inputs at prefix[r * prefix_stride + 0..step]: the start
                             * token, then the row's tokens */
    int prefix_stride;
    const float *logits; /* (n_rows, vocab) the logits at the newest position */
} gen_step;
typedef void (*gen_observer)(void *user, const gen_step *step);

/* A model's incremental step. Rows are ordered by source row, the beams of one source row
 * consecutive. */
typedef struct {
    void *ctx;
    /* Step t for R = n_src * beams rows whose input tokens are ids (R): the rows' new position
     * goes into the model's caches, and the logits (R, vocab) to the host. */
    rt_status (*forward)(void *ctx, int t, int n_src, int beams, const int32_t *ids, float *logits);
    /* After step t: new row r continues old row parent[r] (R_old rows before, R_new after). */
    void (*reorder)(void *ctx, int t, int R_old, int R_new, const int32_t *parent);
    /* Only source rows keep[0..n) (increasing) go on, now numbered 0..n-1. */
    void (*squeeze)(void *ctx, const int32_t *keep, int n);
} gen_model;

typedef struct gen_search gen_search;

/* Host state for up to max_B source rows, max_beams beams and max_new tokens over vocab. */
rt_status gen_search_init(int max_B, int max_beams, int max_new, int vocab, gen_search **out);
void gen_search_free(gen_search *s); /* accepts NULL */

/* Searches for B source rows from start_token. Writes out_ids (B, o->max_new_tokens): each row's
 * generated ids, the eos included when one ended it, then pad_token; out_len (B): the generated
 * count, eos included; out_scores (B, may be NULL): beam, HF's sequences_scores; greedy, the sum
 * of the chosen tokens' log-probabilities. observer (may be NULL) is called after every step. */
rt_status gen_search_run(gen_search *s, const gen_model *m, int B, int32_t start_token, int32_t pad_token,
                         const gen_options *o, gen_observer obs, void *user, int32_t *out_ids, int *out_len,
                         float *out_scores);

#endif
