/* Shared head losses (see heads.h). */
#include "models/heads.h"

#include <math.h>

void mdl_mse_head(rt_backend *be, const float *logits, float *dlogits, const float *targets, int B, float grad_scale,
                  float *host_scratch, double *loss_sum) {
    float *z = host_scratch, *dz = host_scratch + B;
    double sum = 0;
    rt_to_host(be, z, logits, (size_t)B * sizeof(float));
    for (int i = 0; i < B; i++) {
        if (isnan(targets[i])) {
            dz[i] = 0.0f;
            continue;
        }
        float d = z[i] - targets[i]; /* float, as PyTorch's MSELoss computes it */
        sum += (double)(d * d);
        dz[i] = 2.0f * d * grad_scale;
    }
    rt_to_device(be, dlogits, dz, (size_t)B * sizeof(float));
    *loss_sum = sum;
}
