/* Pipeline stages' tensors brought together for one writer (issue 19): each stage holds its
 * own parameters, and a checkpoint or an HF export is one file of all of them. ckpt_pp_gather
 * hands every tensor of every stage, full (gathered over tp by ckpt_tp's rules), in stage order,
 * to a sink on the first stage's tp rank 0: its own at once, the later stages' over the pp comm
 * (a header, then the values). Stage order is the whole model's declaration order for the
 * families that have stages (embeddings first, heads last), so the file is the one a single
 * process writes. */
#ifndef CKPT_PP_H
#define CKPT_PP_H

#include <stdint.h>

#include "checkpoints/ckpt_tp.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_params.h"

typedef struct {
    char name[RT_PARAM_NAME_MAX];
    int32_t ndim, tp_rule, no_decay;
    int64_t vocab_rows;                /* the spec's (a vocab-parallel table's real rows) */
    uint64_t shape[RT_PARAM_MAX_DIMS]; /* full, unsharded (a vocab-parallel table: vocab_rows rows) */
} ckpt_pp_record;

/* A tensor for the writer: its record and its full values (valid for the call). After an
 * error the sink is not called again, but the records that follow still arrive, so every rank
 * stays in step; the error is reported at the end. */
typedef rt_status (*ckpt_pp_sink)(void *ctx, const ckpt_pp_record *r, const float *full);

/* Every stage's tensors of one buffer of the slab: buf is p->param, p->m or p->v (NULL on a
 * stage: it sends none); a tied weight's copy (rt_param_spec.copy) is not sent. Collective over tp and pp; on the first stage's tp rank 0 the sink
 * sees every tensor, and *sink_st gets its first error (RT_OK elsewhere). Returns a transfer's
 * error, or RT_ERR_RUNTIME for a malformed header (what names the file for messages). */
rt_status ckpt_pp_gather(const char *what, const rt_params *p, const float *buf, rt_comm *tp, rt_comm *pp,
                         ckpt_tp_scratch *scr, ckpt_pp_sink sink, void *ctx, rt_status *sink_st);
/* The same for the parameters' values, all of them or, with LoRA, the trainable ones (the
 * adapters) or the frozen ones (the base) only. */
typedef enum { CKPT_PP_ALL, CKPT_PP_TRAINABLE, CKPT_PP_FROZEN } ckpt_pp_which;
rt_status ckpt_pp_gather_params(const char *what, const rt_params *p, ckpt_pp_which which, rt_comm *tp, rt_comm *pp,
                                ckpt_tp_scratch *scr, ckpt_pp_sink sink, void *ctx, rt_status *sink_st);
/* The writer's outcome (tp rank 0 of the first stage) to every rank of the stages: over tp,
 * then over pp; what and path for the others' message. */
rt_status ckpt_pp_agree(rt_comm *tp, rt_comm *pp, rt_status written, const char *path, const char *what);

#endif
