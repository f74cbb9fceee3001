/* A collated batch on the host, as the data collators build it and the models consume it.
 * Shapes are padded: B rows of T tokens (T = longest row, optionally rounded up to 8). */
#ifndef RT_BATCH_H
#define RT_BATCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int B, T;
    int32_t *input_ids;      /* (B, T), padded with the pad id */
    int32_t *attention_mask; /* (B, T), 1 for real tokens, 0 for padding */
    int32_t *lengths;        /* (B) real tokens per row */
    int32_t *labels;         /* (B) class labels (classification), -100 = none */
    float *targets;          /* (B, target_width) float targets, NaN first in a row = none: a regression
                              * score (num_labels 1, STS-B), or a multi-label row's 0/1 per class;
                              * NULL for class-id data */
    int target_width;        /* floats a row in targets */
    int32_t *token_type_ids; /* (B, T) segment ids (BERT: 0 for text A, 1 for text B, 0 on padding);
                              * NULL when the data has no segments */
    int32_t *example_index;  /* (B) row of each example in its dataset */
    /* Seq2seq only (T5): the target side, padded to its own length. input_ids and
     * attention_mask above are the source; labels above are all -100 there. */
    int T_dec;                  /* target tokens per row (0: not a seq2seq batch) */
    int32_t *dec_labels;        /* (B, T_dec) target ids, -100 on padding (HF DataCollatorForSeq2Seq) */
    int capacity_dec;           /* allocated B * T_dec cells of dec_labels */
    int n_targets;              /* labelled targets in this batch (for loss normalisation); seq2seq:
                              * the target tokens that are not -100 */
    size_t n_tokens;            /* real tokens in this batch */
    int capacity_B, capacity_T; /* allocated sizes; the collator reuses the buffers */
    float *target_store;        /* the collator's buffer that targets points into when there are any */
    size_t capacity_targets;    /* floats allocated in target_store */
} rt_batch;

#endif
