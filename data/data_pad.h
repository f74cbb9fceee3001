/* How a collator picks a batch's padded length (issue 18): the longest row rounded up to a
 * multiple (HF's pad_to_multiple_of: 1, or 8 for tensor-core shapes), or, with length buckets,
 * the smallest bucket that holds it. Buckets keep the shapes a run sees to a handful, one per
 * bucket, which is what a GPU step captured as a CUDA graph per shape needs (and cuDNN's plan
 * cache likes); the price is the padding up to the bucket. */
#ifndef DATA_PAD_H
#define DATA_PAD_H

#include <stdbool.h>

#include "runtime/base/rt_status.h"

enum { DATA_PAD_MAX_BUCKETS = 32 };

typedef struct {
    int multiple;                     /* >= 1 */
    int n_buckets;                    /* 0: no buckets */
    int bucket[DATA_PAD_MAX_BUCKETS]; /* ascending lengths, each a multiple of `multiple` */
} data_pad;

/* No buckets: the longest row rounded up to multiple. */
data_pad data_pad_multiple(int multiple);
/* Buckets from a comma-separated list of ascending lengths ("64,128,256"), each a multiple of
 * multiple; RT_ERR_USAGE naming option and the bad entry. NULL or "" gives no buckets. */
rt_status data_pad_parse(const char *list, int multiple, const char *option, data_pad *out);
/* The padded length of a batch whose longest row has `longest` tokens (at least 1 is used): the
 * smallest bucket >= longest, or, past the last bucket or without buckets, longest rounded up
 * to the multiple. */
int data_pad_length(const data_pad *p, int longest);
/* RT_ERR_USAGE when rows of up to max_len tokens can outgrow the last bucket (what names the
 * length in the message: "--max-len 128"); RT_OK without buckets. */
rt_status data_pad_check_covers(const data_pad *p, int max_len, const char *option, const char *what);

#endif
