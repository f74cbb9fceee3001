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

/* Per activation slot (a pipeline stage keeps a micro-batch in each; one slot otherwise): a
 * micro-batch's backward reads the flags of its own upload, not of the last one. */
typedef struct {
    int32_t *key_len; /* (max_B) device, the slot's: the model's arena sets it as it points at a slot */
    int32_t *h_len;   /* (max_B) host staging */
    int slots, slot;  /* the model's activation slots, and the one in use (mdl_padding_use_slot) */
    bool *masked;     /* (slots) the slot's uploaded batch masks a key */
    bool *right;      /* (slots) ... and every row is right padding with a real token: key_len holds the lengths */
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

/* What a batch's mask (B x T, 1 = a real token; NULL: none masked) decides on the host: 0 no key
 * is masked, 1 every row is right padding with a real token (lengths describe it), 2 it is
 * masked otherwise. lens (B), if not NULL: each row's mdl_mask_right_len. Two batches of one
 * shape and one kind make the same calls (the step-graph key, rt_train_model.padding_kind). */
int mdl_padding_kind(const int32_t *mask, int B, int T, int32_t *lens);

/* The host staging and the slots' flags, slot 0 in use; key_len is the caller's (set before or
 * after). */
void mdl_padding_init(mdl_padding *p, int max_B, int slots);
void mdl_padding_free(mdl_padding *p);
/* The model points its activations at slot k (its use_slot). */
static inline void mdl_padding_use_slot(mdl_padding *p, int k) { p->slot = k; }
/* Reads the batch's mask (B x T, 1 = a real token; NULL: none masked) into the slot's flags and
 * uploads the lengths where they describe it. */
void mdl_padding_upload(mdl_padding *p, rt_backend *be, const int32_t *mask, int B, int T);
/* The slot's key mask and lengths, from its last upload; key_mask is the model's additive mask. */
static inline const int32_t *mdl_padding_lengths(const mdl_padding *p) { return p->right[p->slot] ? p->key_len : NULL; }
static inline void mdl_padding_keys(const mdl_padding *p, const float *key_mask, mdl_stack_mask *out) {
    out->key_mask = p->masked[p->slot] ? key_mask : NULL;
    out->key_len = mdl_padding_lengths(p);
}

#endif
