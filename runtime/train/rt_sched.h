/* Learning-rate schedules as Hugging Face's get_*_schedule_with_warmup define them: the
 * optimizer step with index s (0-based) uses lr * factor(s). Warmup is given in steps (>= 1)
 * or as a fraction of the total steps (< 1). */
#ifndef RT_SCHED_H
#define RT_SCHED_H

#include <stdint.h>

#include "runtime/base/rt_status.h"

typedef enum { RT_SCHED_CONSTANT = 0, RT_SCHED_LINEAR, RT_SCHED_COSINE } rt_sched_kind;

typedef struct {
    rt_sched_kind kind;
    double base_lr;
    int64_t warmup_steps;
    int64_t total_steps;
} rt_sched;

/* name: "constant", "linear" or "cosine"; warmup: steps when >= 1, a fraction when < 1. */
rt_status rt_sched_init(rt_sched *s, const char *name, double base_lr, double warmup, int64_t total_steps);
double rt_sched_lr(const rt_sched *s, int64_t step);

#endif
