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

rt_status mdl_cls_check_batch(const char *family, const rt_batch *b, int num_labels) {
    if (num_labels == 1)
        return b->targets ? RT_OK
                          : rt_errorf(RT_ERR_CONFIG, "%s: a regression head (num_labels 1) needs float targets (e.g. "
                                      "STS-B)", family);
    for (int i = 0; i < b->B; i++)
        if (b->labels[i] != -100 && (b->labels[i] < 0 || b->labels[i] >= num_labels))
            return rt_errorf(RT_ERR_FORMAT, "%s: label %d of example %d is not in [0, %d)", family, b->labels[i],
                             b->example_index ? b->example_index[i] : i, num_labels);
    return RT_OK;
}

void mdl_cls_loss(rt_backend *be, const rt_batch *b, int num_labels, const float *logits, float *dlogits,
                  float *dev_losses, int32_t *dev_labels, float *host_scratch, float grad_scale, double *loss_sum) {
    const int B = b->B;
    if (num_labels == 1) {
        mdl_mse_head(be, logits, dlogits, b->targets, B, grad_scale, host_scratch, loss_sum);
        return;
    }
    rt_to_device(be, dev_labels, b->labels, (size_t)B * sizeof(int32_t));
    rt_softmax_xent(be, dev_losses, dlogits, NULL, logits, dev_labels, (size_t)B, num_labels, grad_scale);
}

void mdl_cls_loss_read(rt_backend *be, int B, int num_labels, const float *dev_losses, float *host_scratch,
                       double *loss_sum) {
    if (num_labels == 1) return; /* the regression head's sum is in already */
    rt_to_host(be, host_scratch, dev_losses, (size_t)B * sizeof(float));
    double sum = 0;
    for (int i = 0; i < B; i++) sum += host_scratch[i];
    *loss_sum = sum;
}
