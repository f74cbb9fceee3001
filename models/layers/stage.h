/* A model's pipeline stage (issue 19, runtime/train/rt_pipe.h): stage `index` of `count` holds an
 * equal share of the blocks, in order; the first stage also holds the embeddings, the last the
 * final norm and the heads. {0, 1} is the whole model. */
#ifndef MDL_STAGE_H
#define MDL_STAGE_H

#include <stdbool.h>

#include "runtime/base/rt_status.h"

typedef struct {
    int index, count;
} mdl_stage;

static inline mdl_stage mdl_stage_whole(void) { return (mdl_stage){0, 1}; }
static inline bool mdl_stage_is_first(mdl_stage s) { return s.index == 0; }
static inline bool mdl_stage_is_last(mdl_stage s) { return s.index == s.count - 1; }

/* The blocks of stage s: [*first, *first + *n) of n_layer. RT_ERR_CONFIG, naming the model,
 * when the stages cannot share the blocks equally. */
static inline rt_status mdl_stage_blocks(mdl_stage s, int n_layer, const char *model, int *first, int *n) {
    if (s.count < 1 || s.index < 0 || s.index >= s.count)
        return rt_errorf(RT_ERR_CONFIG, "%s: pipeline stage %d of %d", model, s.index, s.count);
    if (n_layer % s.count != 0)
        return rt_errorf(RT_ERR_CONFIG, "%s: --pp %d does not divide its %d layers into equal stages", model, s.count,
                         n_layer);
    *n = n_layer / s.count;
    *first = s.index * *n;
    return RT_OK;
}

#endif
