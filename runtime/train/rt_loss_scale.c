/* Dynamic loss scaling (see rt_loss_scale.h). */
#include "runtime/train/rt_loss_scale.h"

void rt_loss_scale_defaults(rt_loss_scale_opts *o) {
    *o = (rt_loss_scale_opts){.init_scale = 65536.0, .factor = 2.0, .window = 1000, .hysteresis = 2, .min_scale = 1.0};
}

rt_status rt_loss_scaler_init(rt_loss_scaler *s, const rt_loss_scale_opts *o) {
    if (!(o->init_scale > 0) || !(o->factor > 1) || !(o->min_scale > 0) || o->window < 1 || o->hysteresis < 1)
        return rt_errorf(RT_ERR_CONFIG,
                         "loss scaling: initial scale %g and minimum %g must be > 0, the factor %g > 1, "
                         "the window %lld and hysteresis %d >= 1",
                         o->init_scale, o->min_scale, o->factor, (long long)o->window, o->hysteresis);
    *s = (rt_loss_scaler){.o = *o, .scale = o->init_scale, .cur_hysteresis = o->hysteresis, .last_overflow_iter = -1};
    return RT_OK;
}

rt_status rt_loss_scaler_update(rt_loss_scaler *s, bool overflow) {
    if (overflow) {
        s->skipped++;
        if (s->cur_hysteresis == 1 || s->o.hysteresis == 1) {
            if (s->scale == s->o.min_scale)
                return rt_errorf(RT_ERR_RUNTIME,
                                 "the gradients overflow at the minimum loss scale %g (step %lld): the "
                                 "model diverged or fp16 cannot hold it; lower --lr or train in bf16 or fp32",
                                 s->scale, (long long)s->iter + 1);
            double next = s->scale / s->o.factor;
            s->scale = next > s->o.min_scale ? next : s->o.min_scale;
        } else {
            s->cur_hysteresis--; /* hysteresis: this overflow only uses up one allowance */
        }
        s->last_overflow_iter = s->iter;
    } else {
        if (s->o.consecutive_hysteresis) s->cur_hysteresis = s->o.hysteresis;
        if ((s->iter - s->last_overflow_iter) % s->o.window == 0) {
            if (!s->o.consecutive_hysteresis) s->cur_hysteresis = s->o.hysteresis;
            s->scale *= s->o.factor;
        }
    }
    s->iter++;
    return RT_OK;
}
