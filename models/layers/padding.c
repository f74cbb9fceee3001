#include "models/layers/padding.h"

#include <stdlib.h>

#include "runtime/base/rt_status.h"

/* key_len stays: the model's arena may have set it already */
void mdl_padding_init(mdl_padding *p, int max_B, int slots) {
    p->h_len = rt_xmalloc((size_t)max_B * sizeof(int32_t));
    p->slots = slots;
    p->slot = 0;
    p->masked = rt_xcalloc((size_t)slots, sizeof(bool));
    p->right = rt_xcalloc((size_t)slots, sizeof(bool));
}

void mdl_padding_free(mdl_padding *p) {
    free(p->h_len);
    free(p->masked);
    free(p->right);
    p->h_len = NULL;
    p->masked = p->right = NULL;
}

int mdl_padding_kind(const int32_t *mask, int B, int T, int32_t *lens) {
    bool masked = false, right = true;
    for (int b = 0; b < B; b++) {
        const int32_t *row = mask ? mask + (size_t)b * T : NULL;
        const int32_t len = mdl_mask_right_len(row, T);
        if (lens) lens[b] = len;
        right &= len > 0;
        for (int t = 0; row && t < T; t++) masked |= !row[t];
    }
    return !masked ? 0 : right ? 1 : 2;
}

void mdl_padding_upload(mdl_padding *p, rt_backend *be, const int32_t *mask, int B, int T) {
    const int kind = mdl_padding_kind(mask, B, T, p->h_len);
    p->masked[p->slot] = kind > 0;
    p->right[p->slot] = kind == 1;
    if (p->right[p->slot]) rt_to_device(be, p->key_len, p->h_len, (size_t)B * sizeof(int32_t));
}
