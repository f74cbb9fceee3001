/* Dynamic loss scaling for fp16 training, with the semantics of DeepSpeed's DynamicLossScaler
 * (deepspeed/runtime/fp16/loss_scaler.py) and its fp16 config block: the loss gradient is
 * multiplied by `scale`; a step whose gradients overflow (an inf or NaN on any rank) is skipped
 * and lowers the scale by `factor`, unless `hysteresis` overflows are still allowed; `window`
 * overflow-free steps since the last overflow raise it by `factor`. Overflowing at min_scale is
 * an error, as DeepSpeed raises by default. The trainer runs it when rt_train_opts.loss_scale
 * is set (runtime/train/rt_trainer.h). */
#ifndef RT_LOSS_SCALE_H
#define RT_LOSS_SCALE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/base/rt_status.h"

typedef struct {
    double init_scale;           /* 2^initial_scale_power: 2^16 */
    double factor;               /* 2 */
    int64_t window;              /* loss_scale_window: 1000 */
    int hysteresis;              /* DeepSpeed's delayed_shift: 2 */
    double min_scale;            /* min_loss_scale: 1 */
    bool consecutive_hysteresis; /* an overflow-free step restores the hysteresis: false */
} rt_loss_scale_opts;

/* DeepSpeed's fp16 defaults, listed above. */
void rt_loss_scale_defaults(rt_loss_scale_opts *o);

typedef struct {
    rt_loss_scale_opts o;
    double scale;
    int cur_hysteresis;
    int64_t iter, last_overflow_iter; /* steps seen; the last that overflowed (-1: none) */
    int64_t skipped;                  /* steps skipped so far */
} rt_loss_scaler;

/* RT_ERR_CONFIG naming a bad option (a scale or factor that is not positive, ...). */
rt_status rt_loss_scaler_init(rt_loss_scaler *s, const rt_loss_scale_opts *o);
/* After a step's gradients: overflow means the step is skipped. Moves the scale for the next
 * step; RT_ERR_RUNTIME when the gradients overflow at the minimum scale. */
rt_status rt_loss_scaler_update(rt_loss_scaler *s, bool overflow);

#endif
