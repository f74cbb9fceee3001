/* Sorted name index (see ckpt_name_index.h). The slots carry their names, so sorting needs no
 * shared state and two files can be opened on two threads at once. */
#include "checkpoints/ckpt_name_index.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_status.h"

static int ckpt_name_slot_cmp(const void *a, const void *b) {
    return strcmp(((const ckpt_name_slot *)a)->name, ((const ckpt_name_slot *)b)->name);
}

const char *ckpt_name_index_build(ckpt_name_index *ix, const void *entries, size_t stride, size_t name_offset,
                                  size_t n) {
    ix->n = n;
    ix->slots = rt_xmalloc((n ? n : 1) * sizeof *ix->slots);
    for (size_t i = 0; i < n; i++) {
        const char *name;
        memcpy(&name, (const char *)entries + i * stride + name_offset, sizeof name);
        ix->slots[i] = (ckpt_name_slot){name, i};
    }
    if (n) qsort(ix->slots, n, sizeof *ix->slots, ckpt_name_slot_cmp);
    for (size_t i = 1; i < n; i++)
        if (strcmp(ix->slots[i].name, ix->slots[i - 1].name) == 0) return ix->slots[i].name;
    return NULL;
}

long ckpt_name_index_find(const ckpt_name_index *ix, const char *name) {
    size_t lo = 0, hi = ix->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ix->slots[mid].name, name);
        if (c == 0) return (long)ix->slots[mid].entry;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

void ckpt_name_index_free(ckpt_name_index *ix) {
    if (!ix) return;
    free(ix->slots);
    ix->slots = NULL;
    ix->n = 0;
}
