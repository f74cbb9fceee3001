/* A batch's padding as the stack's attention reads it, for the families whose masks are the
 * batch's attention_mask (GPT-2 and BERT): whether any key is masked at all (a batch without
 * padding passes no mask, the same numbers, which fused attention kernels take), and when every
 * row is right padding with at least one real token, each row's length on the device
 * (rt_attn_desc.key_len, which cuDNN's SDPA reads as its padding mask; the CPU reads the mask). */
#ifndef MDL_PADDING_H
#define MDL_PADDING_H

#include <stdbool.h>
#include <stdint.h>

#include "models/layers/stack.h"
#include "runtime/backend/rt_backend.h"

typedef struct {
    int32_t *key_len; /* (max_B) device: the model's arena sets it */
    int32_t *h_len;   /* (max_B) host staging */
    bool masked;      /* the uploaded batch masks a key */
    bool right;       /* ... and every row is right padding with a real token: key_len holds the lengths */
} mdl_padding;

/* A row's attention mask (T values, 1 = a real token; NULL: none masked) as right padding: the
 * count of its leading ones when every value after them is 0, else 0 (no length describes it). */
static inline int32_t mdl_mask_right_len(const int32_t *mask, int T) {
    if (!mask) return T;
    int n = 0;
    while (n < T && mask[n]) n++;
    for (int t = n; t < T; t++)
        if (mask[t]) return 0;
    return n;
}

/* The host staging; key_len is the caller's (set before or after). */
void mdl_padding_init(mdl_padding *p, int max_B);
void mdl_padding_free(mdl_padding *p);
/* Reads the batch's mask (B x T, 1 = a real token; NULL: none masked) and uploads the lengths
 * where they describe it. */
void mdl_padding_upload(mdl_padding *p, rt_backend *be, const int32_t *mask, int B, int T);
/* The stack's key mask and lengths for the last upload; key_mask is the model's additive mask. */
static inline void mdl_padding_keys(const mdl_padding *p, const float *key_mask, mdl_stack_mask *out) {
    out->key_mask = p->masked ? key_mask : NULL;
    out->key_len = p->right ? p->key_len : NULL;
}

#endif
