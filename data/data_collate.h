/* The dynamic-padding collator for sequence classification: it gathers the rows a sampler
 * picked into an rt_batch padded to the longest row of that batch (not to max_len), which
 * is what HF's DataCollatorWithPadding does and saves most of the compute on GLUE, whose
 * sentences are short. Padding is on the right; rounding T up to a multiple of 8 keeps
 * tensor-core shapes (HF pad_to_multiple_of=8). The batch's buffers are reused and only
 * grow, so after the first batches (or a data_batch_reserve at set-up) the step loop
 * allocates nothing. */
#ifndef DATA_COLLATE_H
#define DATA_COLLATE_H

#include <stdint.h>

#include "data/data_dataset.h"
#include "data/data_pad.h"
#include "runtime/train/rt_batch.h"
#include "runtime/base/rt_status.h"

/* Fills batch with rows indices[0..count) of ds. T = the longest of those rows padded as pad
 * says (a multiple, or a length bucket: data_pad.h), at least 1. pad_id >= 0 (GPT-2 has no pad token: pass its eos,
 * 50256, as HF scripts do; the attention mask hides it). count may be 0 (a rank with an
 * empty share of the last global batch): B = 0, targets NULL, nothing else is touched.
 * token_type_ids are always filled from ds->len_a (0 over text A with its specials, 1 after,
 * 0 on padding); models without token types ignore them. Data with targets (regression,
 * multi-label): batch->targets holds the rows' target_width floats each and n_targets counts the
 * rows whose first is not NaN; otherwise
 * batch->targets is NULL and n_targets counts labels other than -100. */
rt_status data_collate_classification(const data_tokenized *ds, const int32_t *indices, int count, int32_t pad_id,
                                      const data_pad *pad, rt_batch *batch);
/* Seq2seq (HF DataCollatorForSeq2Seq): the source rows of src as the classification
 * collator lays them out (input_ids, attention_mask, lengths, padded with pad_id; labels all
 * -100), and the same rows of tgt into dec_labels, padded with -100 to the longest target
 * (padded as pad says, on its own: the sides may land in different buckets). The model derives its decoder inputs from the labels.
 * n_targets counts the target tokens; n_tokens both sides' real tokens. */
rt_status data_collate_seq2seq(const data_tokenized *src, const data_tokenized *tgt, const int32_t *indices, int count,
                               int32_t pad_id, const data_pad *pad, rt_batch *batch);
/* Grows the buffers (ids, mask, token types, lengths, labels, example
 * index) to hold B rows of T tokens, so that later batches up to that size never allocate. */
rt_status data_batch_reserve(rt_batch *batch, int B, int T);
/* Frees the buffers; the struct is zeroed. Accepts NULL. */
void data_batch_free(rt_batch *batch);

#endif
