/* Communication accounting: a comm that forwards every call to another one and counts the
 * payload bytes per operation, for the per-step volume tables (the Megatron paper's
 * accounting: what each layout sends per step, next to the formula that predicts it). */
#ifndef RT_COMM_STATS_H
#define RT_COMM_STATS_H

#include <stdint.h>

#include "runtime/comm/rt_comm.h"

typedef enum {
    RT_COMM_OP_ALL_REDUCE = 0,
    RT_COMM_OP_REDUCE_SCATTER,
    RT_COMM_OP_ALL_GATHER,
    RT_COMM_OP_BROADCAST,
    RT_COMM_OP_P2P, /* point-to-point: the bytes this rank sent */
    RT_COMM_OP_COUNT
} rt_comm_op;

typedef struct {
    uint64_t calls[RT_COMM_OP_COUNT];
    uint64_t bytes[RT_COMM_OP_COUNT]; /* payload this rank passed in (all_gather: its input) */
} rt_comm_stats;

/* A counting view of inner (which it does not own): rt_comm_free on it leaves inner alone.
 * Counters are added to *stats. */
rt_comm *rt_comm_stats_wrap(rt_comm *inner, rt_comm_stats *stats);
const char *rt_comm_op_name(rt_comm_op op);

#endif
