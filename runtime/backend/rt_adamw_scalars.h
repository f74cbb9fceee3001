/* The per-step scalars of torch.optim.AdamW, computed once on the host the way PyTorch computes
 * them, for every backend's AdamW kernel: PyTorch holds lr, betas, eps and weight decay as Python
 * floats and derives 1 - beta1, lr / (1 - beta1^t) and so on in double, casting to float where
 * they meet a float tensor. Our hyperparameters arrive as floats, so each is first taken back to
 * the double a user most likely meant (the shortest decimal that rounds to it: 0.9f -> 0.9, not
 * 0.89999997615814209); starting from the same doubles gives the same float scalars, bit for bit.
 * One copy for the CPU and CUDA backends, so both update weights with the same numbers. */
#ifndef RT_ADAMW_SCALARS_H
#define RT_ADAMW_SCALARS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float decay;     /* 1 - lr * weight_decay: p *= decay first */
    float w1;        /* 1 - beta1, lerp's weight */
    bool lerp_low;   /* w1 < 0.5: torch's lerp takes its first form */
    float w2, beta2; /* v = v * beta2 + w2 * g * g */
    float step_size; /* lr / (1 - beta1^t) */
    float bc2_sqrt;  /* sqrt(1 - beta2^t) */
    float eps;
} rt_adamw_scalars;

/* The scalars of step t (t >= 1). */
rt_adamw_scalars rt_adamw_scalars_of(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t);

#ifdef __cplusplus
}
#endif

#endif
