/* Shared head losses (see heads.h). */
#include "models/layers/heads.h"

rt_status mdl_cls_check_batch(const char *family, const rt_batch *b, int num_labels) {
    if (num_labels == 1)
        return b->targets && b->target_width == 1
                   ? RT_OK
                   : rt_errorf(RT_ERR_CONFIG,
                               "%s: a regression head (num_labels 1) needs one float target a row (e.g. "
                               "STS-B)",
                               family);
    if (b->targets) /* multi-label: a 0/1 target for each class */
        return b->target_width == num_labels
                   ? RT_OK
                   : rt_errorf(RT_ERR_CONFIG, "%s: a multi-label batch has %d targets a row, the head %d classes",
                               family, b->target_width, num_labels);
    for (int i = 0; i < b->B; i++)
        if (b->labels[i] != -100 && (b->labels[i] < 0 || b->labels[i] >= num_labels))
            return rt_errorf(RT_ERR_FORMAT, "%s: label %d of example %d is not in [0, %d)", family, b->labels[i],
                             b->example_index ? b->example_index[i] : i, num_labels);
    return RT_OK;
}

void mdl_cls_loss(rt_backend *be, const rt_batch *b, int num_labels, const float *logits, float *dlogits,
                  float *dev_losses, int32_t *dev_labels, float grad_scale) {
    const int B = b->B;
    if (num_labels == 1) { /* the targets go up into dlogits, which the loss overwrites */
        rt_to_device(be, dlogits, b->targets, (size_t)B * sizeof(float));
        rt_mse_loss(be, dev_losses, dlogits, logits, dlogits, (size_t)B, grad_scale);
        return;
    }
    if (b->targets) { /* multi-label: the 0/1 targets go up the same way */
        rt_to_device(be, dlogits, b->targets, (size_t)B * (size_t)num_labels * sizeof(float));
        rt_bce_logits_loss(be, dev_losses, dlogits, logits, dlogits, (size_t)B, num_labels, grad_scale);
        return;
    }
    rt_to_device(be, dev_labels, b->labels, (size_t)B * sizeof(int32_t));
    rt_softmax_xent(be, dev_losses, dlogits, NULL, logits, dev_labels, (size_t)B, num_labels, grad_scale);
}

double mdl_loss_sum(rt_backend *be, const float *dev_losses, size_t n, float *host_scratch, const mdl_pass *pass) {
    if (pass && pass->loss_sink) {
        rt_loss_into(be, pass->loss_sink, dev_losses, n);
        return 0.0;
    }
    rt_to_host(be, host_scratch, dev_losses, n * sizeof(float));
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += host_scratch[i];
    return sum;
}
