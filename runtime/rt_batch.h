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
    float *targets;          /* (B) regression targets (num_labels == 1, e.g. STS-B), NaN = none;
                              * NULL for classification data */
    int32_t *token_type_ids; /* (B, T) segment ids (BERT: 0 for text A, 1 for text B, 0 on padding);
                              * NULL when the data has no segments */
    int32_t *example_index;  /* (B) row of each example in its dataset */
    int n_targets;           /* labelled targets in this batch (for loss normalisation) */
    size_t n_tokens;         /* real tokens in this batch */
    int capacity_B, capacity_T; /* allocated sizes; the collator reuses the buffers */
} rt_batch;

#endif
