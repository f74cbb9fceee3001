/* GLM's collator: the rows of n examples (data_glm_rows.h) as one padded batch, the host
 * arrays GLM's steps take (models/glm/glm.h's glm_inputs points into them). */
#ifndef DATA_GLM_BATCH_H
#define DATA_GLM_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/data_glm_rows.h"
#include "data/data_pad.h"

typedef struct {
    int B, T;                       /* n examples x rows_per_example rows of T tokens */
    int32_t *ids, *pos, *block_pos; /* (B, T) */
    int32_t *labels;                /* (B, T) -100 off the answer and on padding */
    int32_t *sep;                   /* (B) each row's bidirectional context length */
    int32_t *cloze_at;              /* (B) cloze rows: where the verbalizers are scored (the [sop]) */
    int32_t *cand;                  /* (B, n_classes) cloze rows: the verbalizer tokens */
    int32_t *label;                 /* (n) each example's class or right choice, or -100 */
    size_t cap_cells, cap_rows;     /* allocated; the buffers are reused */
} data_glm_batch;

/* The rows of examples ex[0..n), padded to the longest as pad says (data_pad.h) with pad_id
 * at position 0, block position 0, no label: after every row's separator, so no real token
 * sees them. */
void data_glm_collate(const data_glm_rows *R, const int32_t *ex, int n, int32_t pad_id, const data_pad *pad,
                      data_glm_batch *b);
void data_glm_batch_free(data_glm_batch *b);

#endif
