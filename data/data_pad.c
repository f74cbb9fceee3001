/* Padded lengths: multiples and length buckets (see data_pad.h). */
#include "data/data_pad.h"

#include <errno.h>
#include <stdlib.h>

data_pad data_pad_multiple(int multiple) { return (data_pad){.multiple = multiple >= 1 ? multiple : 1}; }

rt_status data_pad_parse(const char *list, int multiple, const char *option, data_pad *out) {
    *out = data_pad_multiple(multiple);
    const char *c = list;
    while (c && *c) {
        char *end = NULL;
        errno = 0;
        const long v = strtol(c, &end, 10);
        if (end == c || errno || (*end && *end != ','))
            return rt_errorf(RT_ERR_USAGE, "--%s %s: expected ascending lengths separated by commas, e.g. 64,128,256",
                             option, list);
        if (v < 1 || v > (1 << 20))
            return rt_errorf(RT_ERR_USAGE, "--%s %s: length %ld is outside [1, %d]", option, list, v, 1 << 20);
        if (v % out->multiple)
            return rt_errorf(RT_ERR_USAGE, "--%s %s: length %ld is not a multiple of %d (--pad-to-8)", option, list, v,
                             out->multiple);
        if (out->n_buckets > 0 && v <= out->bucket[out->n_buckets - 1])
            return rt_errorf(RT_ERR_USAGE, "--%s %s: lengths must ascend (%ld after %d)", option, list, v,
                             out->bucket[out->n_buckets - 1]);
        if (out->n_buckets == DATA_PAD_MAX_BUCKETS)
            return rt_errorf(RT_ERR_USAGE, "--%s %s: at most %d buckets", option, list, DATA_PAD_MAX_BUCKETS);
        out->bucket[out->n_buckets++] = (int)v;
        c = *end ? end + 1 : end;
        if (*end && !*c) return rt_errorf(RT_ERR_USAGE, "--%s %s: a trailing comma", option, list);
    }
    return RT_OK;
}

int data_pad_length(const data_pad *p, int longest) {
    const int n = longest > 0 ? longest : 1;
    for (int i = 0; i < p->n_buckets; i++)
        if (p->bucket[i] >= n) return p->bucket[i];
    return (n + p->multiple - 1) / p->multiple * p->multiple;
}

rt_status data_pad_check_covers(const data_pad *p, int max_len, const char *option, const char *what) {
    if (p->n_buckets == 0 || p->bucket[p->n_buckets - 1] >= max_len) return RT_OK;
    return rt_errorf(RT_ERR_USAGE,
                     "--%s: the largest bucket, %d, is shorter than %s (%d tokens): add a bucket of at "
                     "least %d",
                     option, p->bucket[p->n_buckets - 1], what, max_len, max_len);
}
