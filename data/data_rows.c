/* The parts of data_dataset.h that need no tokenizer: the longest_first truncation rule and
 * packing rows of ids into a data_tokenized. Kept apart from data_dataset.c so that code
 * (and tests) using only these do not pull the tokenizer into the link. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "data/data_dataset.h"
#include "runtime/base/rt_mapped.h"

void data_truncate_longest_first(size_t len_a, size_t len_b, size_t budget, data_trunc_rule rule, size_t *keep_a,
                                 size_t *keep_b) {
    *keep_a = len_a;
    *keep_b = len_b;
    if (len_a + len_b <= budget) return;
    if (len_b == 0) {
        *keep_a = budget;
        return;
    }
    if (rule == DATA_TRUNC_HF_SLOW) {
        /* transformers' truncate_sequences: first even out the longer text, then split what is
         * left to remove, b taking the larger half. */
        size_t remove = len_a + len_b - budget;
        size_t diff = len_a > len_b ? len_a - len_b : len_b - len_a;
        size_t first = diff < remove ? diff : remove;
        size_t second = remove - first;
        size_t rm_a, rm_b;
        if (len_a > len_b) {
            rm_a = first + second / 2;
            rm_b = second - second / 2;
        } else {
            rm_a = second / 2;
            rm_b = first + second - second / 2;
        }
        *keep_a = len_a - rm_a;
        *keep_b = len_b - rm_b;
        return;
    }
    /* tokenizers' truncate_encodings (Rust): n1 is the shorter text's share, n2 the longer's. */
    bool swap = len_a > len_b;
    size_t n1 = swap ? len_b : len_a;
    size_t n2;
    if (n1 > budget)
        n2 = n1; /* forces the even split below */
    else
        n2 = n1 > budget - n1 ? n1 : budget - n1;
    if (n1 + n2 > budget) {
        n1 = budget / 2;
        n2 = n1 + budget % 2;
    }
    *keep_a = swap ? n2 : n1;
    *keep_b = swap ? n1 : n2;
}

rt_status data_tokenized_from_rows(const int32_t *const *rows, const int32_t *lengths, const int32_t *len_a,
                                   const int32_t *labels, size_t n, data_tokenized *out) {
    rt_status st = RT_OK;
    memset(out, 0, sizeof *out);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        RT_CHECK(lengths[i] >= 0, "row %zu: length %d", i, lengths[i]);
        total += (size_t)lengths[i];
    }
    out->n = n;
    out->segments = true; /* the caller's len_a marks segment A; data_tokenize_pairs corrects it */
    out->ids = malloc((total ? total : 1) * sizeof *out->ids);
    out->offsets = malloc((n + 1) * sizeof *out->offsets);
    out->lengths = malloc((n ? n : 1) * sizeof *out->lengths);
    out->len_a = malloc((n ? n : 1) * sizeof *out->len_a);
    out->labels = malloc((n ? n : 1) * sizeof *out->labels);
    if (!out->ids || !out->offsets || !out->lengths || !out->len_a || !out->labels)
        RT_FAIL(RT_ERR_NOMEM, "tokenized dataset: out of memory for %zu ids", total);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = (size_t)lengths[i];
        out->offsets[i] = off;
        if (len) memcpy(out->ids + off, rows[i], len * sizeof *out->ids);
        off += len;
        out->lengths[i] = lengths[i];
        out->len_a[i] = len_a ? len_a[i] : lengths[i];
        out->labels[i] = labels ? labels[i] : DATA_LABEL_NONE;
        if (lengths[i] > out->longest) out->longest = lengths[i];
    }
    out->offsets[n] = off;
    out->max_len = out->longest;
    return RT_OK;
fail:
    data_tokenized_free(out);
    return st;
}

rt_status data_tokenized_set_targets(data_tokenized *d, const float *targets, int width) {
    free(d->targets);
    d->targets = NULL;
    d->target_width = 0;
    if (!targets) return RT_OK;
    RT_CHECK(width >= 1, "target width %d", width);
    const size_t cells = d->n * (size_t)width;
    d->targets = malloc((cells ? cells : 1) * sizeof *d->targets);
    if (!d->targets) return rt_errorf(RT_ERR_NOMEM, "tokenized dataset: out of memory for %zu targets", cells);
    if (cells) memcpy(d->targets, targets, cells * sizeof *d->targets);
    d->target_width = width;
    return RT_OK;
}

data_backing *data_backing_new(void *addr, size_t len, data_backing_kind kind) {
    data_backing *b = rt_xmalloc(sizeof *b);
    *b = (data_backing){.addr = addr, .len = len, .kind = kind, .refs = 1};
    return b;
}

void data_backing_release(data_backing *b) {
    if (!b || --b->refs > 0) return;
    if (b->kind == DATA_BACKING_MAPPED) rt_unmap_file(b->addr, b->len);
    if (b->kind == DATA_BACKING_MALLOC) free(b->addr);
    free(b);
}

rt_status data_tokenized_slice(const data_tokenized *d, size_t first, size_t n, data_tokenized *out) {
    memset(out, 0, sizeof *out);
    if (first > d->n || n > d->n - first)
        return rt_errorf(RT_ERR_USAGE, "rows %zu..%zu of a set of %zu rows", first, first + n, d->n);
    if (d->backing) { /* a view: offsets stay absolute into the shared ids */
        *out = *d;
        out->n = n;
        out->offsets = d->offsets + first;
        out->lengths = d->lengths + first;
        out->len_a = d->len_a + first;
        out->labels = d->labels + first;
        out->targets = d->targets ? d->targets + first * (size_t)d->target_width : NULL;
        d->backing->refs++;
    } else {
        const int32_t **rows = rt_xmalloc((n ? n : 1) * sizeof *rows);
        for (size_t i = 0; i < n; i++) rows[i] = d->ids + d->offsets[first + i];
        rt_status st = data_tokenized_from_rows(rows, d->lengths + first, d->len_a + first, d->labels + first, n, out);
        free(rows);
        if (st == RT_OK && d->targets)
            st = data_tokenized_set_targets(out, d->targets + first * (size_t)d->target_width, d->target_width);
        if (st != RT_OK) {
            data_tokenized_free(out);
            return st;
        }
        out->segments = d->segments;
    }
    out->max_len = d->max_len;
    out->n_truncated = 0;
    out->longest = 0;
    for (size_t i = 0; i < n; i++)
        if (out->lengths[i] > out->longest) out->longest = out->lengths[i];
    return RT_OK;
}

void data_tokenized_free(data_tokenized *d) {
    if (!d) return;
    if (d->backing) {
        data_backing_release(d->backing);
        memset(d, 0, sizeof *d);
        return;
    }
    free(d->targets);
    free(d->ids);
    free(d->offsets);
    free(d->lengths);
    free(d->len_a);
    free(d->labels);
    memset(d, 0, sizeof *d);
}
