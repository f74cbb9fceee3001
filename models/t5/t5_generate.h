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
 * The search (greedy and beam, with HF's semantics) is models/layers/gen_search.h's; this file gives it
 * T5's step. */
#ifndef T5_GENERATE_H
#define T5_GENERATE_H

#include <stdint.h>

#include "models/layers/gen_search.h"
#include "models/t5/t5.h"

/* HF's defaults for the model's config: greedy, 20 new tokens (transformers 5.23 generates up to
 * max_length 21 with the start token when none is given), length_penalty 1, early_stopping
 * False, the config's eos_token_id. */
void t5_gen_options_default(const t5_config *c, gen_options *o);

typedef struct t5_generator t5_generator;

/* Sized for up to max_B source rows of max_src tokens (at most the model's max_B and max_src),
 * max_beams beams and max_new_tokens tokens: the caches and the step's activations are
 * allocated here, once. */
rt_status t5_generator_init(t5_model *m, int max_B, int max_src, int max_beams, int max_new_tokens, t5_generator **out);
void t5_generator_free(t5_generator *g);

/* Generates for B source rows (src_mask as in t5_batch: 1 real, 0 padding; NULL = all real).
 * Writes out_ids (B, opt->max_new_tokens): each row's generated ids without the start token,
 * the eos included when one ended it, then pad_token_id; out_len (B): the generated count, eos
 * included; out_scores (B, may be NULL): beam, HF's sequences_scores; greedy, the sum of the
 * chosen tokens' log-probabilities. observer (may be NULL) is called after every step.
 * Collective over tp: every rank calls it with the same arguments. */
rt_status t5_generate(t5_generator *g, const int32_t *src_ids, const int32_t *src_mask, int B, int S,
                      const gen_options *opt, gen_observer observer, void *user, int32_t *out_ids, int *out_len,
                      float *out_scores);

#endif
