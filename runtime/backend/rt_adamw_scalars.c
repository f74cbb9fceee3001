/* AdamW's per-step scalars (see rt_adamw_scalars.h). */
#include "runtime/backend/rt_adamw_scalars.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The double a user most likely meant by a float (rt_adamw_scalars.h). */
static double rt_intended_double(float f) {
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        double d = strtod(buf, NULL);
        if ((float)d == f) return d;
    }
    return (double)f;
}

rt_adamw_scalars rt_adamw_scalars_of(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t) {
    const double dlr = rt_intended_double(lr), db1 = rt_intended_double(beta1), db2 = rt_intended_double(beta2),
                 dwd = rt_intended_double(weight_decay);
    const double bc1 = 1.0 - pow(db1, (double)t), bc2 = 1.0 - pow(db2, (double)t);
    rt_adamw_scalars s;
    s.decay = (float)(1.0 - dlr * dwd);
    s.w1 = (float)(1.0 - db1);
    s.lerp_low = s.w1 < 0.5f;
    s.w2 = (float)(1.0 - db2);
    s.beta2 = (float)db2;
    s.step_size = (float)(dlr / bc1);
    s.bc2_sqrt = (float)sqrt(bc2);
    s.eps = (float)rt_intended_double(eps);
    return s;
}
