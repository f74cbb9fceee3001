/* Learning-rate schedules (see rt_sched.h). */
#include "runtime/train/rt_sched.h"

#include <math.h>
#include <string.h>

rt_status rt_sched_init(rt_sched *s, const char *name, double base_lr, double warmup, int64_t total_steps) {
    if (strcmp(name, "constant") == 0)
        s->kind = RT_SCHED_CONSTANT;
    else if (strcmp(name, "linear") == 0)
        s->kind = RT_SCHED_LINEAR;
    else if (strcmp(name, "cosine") == 0)
        s->kind = RT_SCHED_COSINE;
    else
        return rt_errorf(RT_ERR_CONFIG, "schedule '%s' is not one of constant, linear, cosine", name);
    if (warmup < 0) return rt_errorf(RT_ERR_CONFIG, "warmup %g is negative", warmup);
    if (warmup >= 1 && warmup != floor(warmup))
        return rt_errorf(RT_ERR_CONFIG, "warmup %g: give whole steps (>= 1) or a fraction (< 1)", warmup);
    s->base_lr = base_lr;
    s->total_steps = total_steps;
    /* HF's TrainingArguments.get_warmup_steps rounds a ratio up */
    s->warmup_steps = warmup >= 1 ? (int64_t)warmup : (int64_t)ceil(warmup * (double)total_steps);
    return RT_OK;
}

double rt_sched_lr(const rt_sched *s, int64_t step) {
    if (step < s->warmup_steps) return s->base_lr * (double)step / (double)(s->warmup_steps > 1 ? s->warmup_steps : 1);
    double rest = (double)(s->total_steps - s->warmup_steps);
    if (rest < 1) rest = 1;
    double progress = (double)(step - s->warmup_steps) / rest;
    switch (s->kind) {
    case RT_SCHED_CONSTANT: return s->base_lr;
    case RT_SCHED_LINEAR: return s->base_lr * fmax(0.0, 1.0 - progress);
    case RT_SCHED_COSINE: return s->base_lr * fmax(0.0, 0.5 * (1.0 + cos(M_PI * progress)));
    }
    return s->base_lr;
}
