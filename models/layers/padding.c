#include "models/layers/padding.h"

#include <stdlib.h>

#include "runtime/base/rt_status.h"

/* key_len stays: the model's arena may have set it already */
void mdl_padding_init(mdl_padding *p, int max_B) {
    p->h_len = rt_xmalloc((size_t)max_B * sizeof(int32_t));
    p->masked = p->right = false;
}

void mdl_padding_free(mdl_padding *p) {
    free(p->h_len);
    p->h_len = NULL;
}

void mdl_padding_upload(mdl_padding *p, rt_backend *be, const int32_t *mask, int B, int T) {
    bool masked = false, right = true;
    for (int b = 0; b < B; b++) {
        const int32_t *row = mask ? mask + (size_t)b * T : NULL;
        p->h_len[b] = mdl_mask_right_len(row, T);
        right &= p->h_len[b] > 0;
        for (int t = 0; row && t < T; t++) masked |= !row[t];
    }
    p->masked = masked;
    p->right = masked && right;
    if (p->right) rt_to_device(be, p->key_len, p->h_len, (size_t)B * sizeof(int32_t));
}
