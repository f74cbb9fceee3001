/* Generation for T5 as Hugging Face's `model.generate` does it (transformers 5.x): greedy
 * search (num_beams 1, `_sample` without sampling) and beam search (`_beam_search`), with
 * max_new_tokens, a per-row stop at eos_token_id, and the decoder started from
 * decoder_start_token_id.
 *
 * Decoding is incremental: the source is encoded once; each decoder block's cross-attention
 * keys and values of the encoder output are computed once; each block's self-attention keeps a
 * key/value cache, and a step runs one new token per row against it (its relative position bias
 * row from t5_relative_bucket). Beam search reorders the caches by parent beam after every
 * step, copying only the positions written so far, and a source row whose search is over
 * leaves the batch (its rows are dropped from the caches), so finished rows cost nothing.
 * Everything runs through the backend ops and the Megatron layers, so it works on the CPU and
 * CUDA backends and at any tp size (each rank makes the same choices from the gathered logits).
 *
 * HF's semantics matched (transformers/generation/utils.py):
 * - greedy: the next token is the first argmax of the logits (T5's generation config adds no
 *   logits processor); a row stops after it emits eos or after max_new_tokens tokens.
 * - beam: log_softmax of the logits, plus the beam's running score; the top 2*num_beams
 *   continuations of a source row over all its beams (at step 0 only beam 0 is live). A
 *   continuation ending in eos (or reaching max_new_tokens) is finished: if it is among the
 *   top num_beams, its score sum_logprob / generated_len^length_penalty (generated_len counts
 *   the eos) may enter the row's num_beams best finished hypotheses; the top num_beams
 *   unfinished ones run on. A row accepts no more hypotheses once (early_stopping True) all
 *   num_beams slots are filled, or once the best running score divided by len^length_penalty
 *   (len = tokens generated so far; with "never" and length_penalty > 0, max_new_tokens)
 *   cannot beat the worst of num_beams filled slots. The answer is the best finished
 *   hypothesis; its score is HF's sequences_scores. */
#ifndef T5_GENERATE_H
#define T5_GENERATE_H

#include <stdint.h>

#include "models/t5.h"

/* HF's early_stopping: False (a heuristic: stop when the best running beam cannot win even at
 * the current length), True (stop when num_beams hypotheses are finished), "never". */
typedef enum { T5_EARLY_STOP_HEURISTIC = 0, T5_EARLY_STOP_TRUE, T5_EARLY_STOP_NEVER } t5_early_stopping;

typedef struct {
    int max_new_tokens;                /* generated tokens per row at most, eos included */
    int num_beams;                     /* 1: greedy */
    double length_penalty;             /* beam: exponent of the length the score is divided by (HF's
                                        * Python float: 0.6 here is the same double) */
    t5_early_stopping early_stopping;  /* beam only */
    int eos_token_id;                  /* a row stops after this token */
} t5_gen_options;

/* HF's defaults for the model's config: greedy, 20 new tokens (transformers 5.23 generates up to
 * max_length 21 with the start token when none is given), length_penalty 1, early_stopping
 * False, the config's eos_token_id. */
void t5_gen_options_default(const t5_config *c, t5_gen_options *o);

/* What the observer sees after each step's forward: the decoder rows it ran, in order. */
typedef struct {
    int step;               /* 0-based: the index of the token being chosen */
    int n_rows;             /* decoder rows this step (beams of the sources still searching) */
    const int32_t *src_row; /* (n_rows) the source row each decoder row belongs to */
    const int32_t *prefix;  /* row r's decoder inputs at prefix[r * prefix_stride + 0..step]: the start
                             * token, then the row's tokens */
    int prefix_stride;
    const float *logits;    /* (n_rows, vocab_size) the LM head's output at the newest position */
} t5_gen_step;
typedef void (*t5_gen_observer)(void *user, const t5_gen_step *step);

typedef struct t5_generator t5_generator;

/* Sized for up to max_B source rows of max_src tokens (at most the model's max_B and max_src),
 * max_beams beams and max_new_tokens tokens: the caches and the step's activations are
 * allocated here, once. */
rt_status t5_generator_init(t5_model *m, int max_B, int max_src, int max_beams, int max_new_tokens,
                            t5_generator **out);
void t5_generator_free(t5_generator *g);

/* Generates for B source rows (src_mask as in t5_batch: 1 real, 0 padding; NULL = all real).
 * Writes out_ids (B, opt->max_new_tokens): each row's generated ids without the start token,
 * the eos included when one ended it, then pad_token_id; out_len (B): the generated count, eos
 * included; out_scores (B, may be NULL): beam, HF's sequences_scores; greedy, the sum of the
 * chosen tokens' log-probabilities. observer (may be NULL) is called after every step.
 * Collective over tp: every rank calls it with the same arguments. */
rt_status t5_generate(t5_generator *g, const int32_t *src_ids, const int32_t *src_mask, int B, int S,
                      const t5_gen_options *opt, t5_gen_observer observer, void *user, int32_t *out_ids,
                      int *out_len, float *out_scores);

#endif
