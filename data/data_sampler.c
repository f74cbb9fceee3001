/* The seeded shuffle sampler (see data_sampler.h). The permutation of the current epoch is
 * cached and rebuilt only when the epoch changes. */
#include "data/data_sampler.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_rng.h"

struct data_sampler {
    size_t n;
    data_sampler_opts opts;
    uint64_t epoch, position;
    int32_t *order; /* (n) the order of order_epoch */
    uint64_t order_epoch;
    bool order_valid;
};

void data_sampler_permutation(uint64_t seed, uint64_t epoch, bool shuffle, size_t n, int32_t *order) {
    for (size_t i = 0; i < n; i++) order[i] = (int32_t)i;
    if (!shuffle) return;
    const uint64_t stream = RT_STREAM(RT_STREAM_SHUFFLE, epoch);
    /* Fisher-Yates from the top: draw i picks order[i] from the first i + 1 slots. */
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)rt_rng_below(seed, stream, (uint64_t)i, (uint64_t)i + 1);
        int32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* An example and its place in the shuffled order, for a stable longest-first sort. */
typedef struct {
    int32_t length, index;
    size_t place;
} sampler_key;

static int by_length_desc(const void *a, const void *b) {
    const sampler_key *x = a, *y = b;
    if (x->length != y->length) return x->length > y->length ? -1 : 1;
    return x->place < y->place ? -1 : x->place > y->place; /* stable: Python's sorted keeps ties in order */
}

void data_sampler_group_by_length(int32_t *order, size_t n, const int32_t *lengths, int group_by) {
    RT_CHECK(group_by > 0, "group_by=%d", group_by);
    if (n == 0) return;
    size_t mult = n / ((size_t)group_by * 4);
    if (mult > 50) mult = 50;
    if (mult == 0) mult = 1;
    const size_t mega = mult * (size_t)group_by;
    sampler_key *keys = rt_xmalloc((mega < n ? mega : n) * sizeof *keys);
    size_t longest = 0; /* the start of the megabatch whose first (longest) example is the longest of all */
    for (size_t lo = 0; lo < n; lo += mega) {
        const size_t m = n - lo < mega ? n - lo : mega;
        for (size_t k = 0; k < m; k++) keys[k] = (sampler_key){lengths[order[lo + k]], order[lo + k], k};
        qsort(keys, m, sizeof *keys, by_length_desc);
        for (size_t k = 0; k < m; k++) order[lo + k] = keys[k].index;
        if (lengths[order[lo]] > lengths[order[longest]]) longest = lo; /* the first maximum, as torch.argmax */
    }
    free(keys);
    const int32_t t = order[0];
    order[0] = order[longest];
    order[longest] = t;
}

rt_status data_sampler_init(size_t n_examples, const data_sampler_opts *opts, data_sampler **out) {
    rt_status st = RT_OK;
    data_sampler *s = NULL;
    *out = NULL;
    if (n_examples > (size_t)INT32_MAX)
        RT_FAIL(RT_ERR_CONFIG, "sampler: %zu examples, expected at most %d", n_examples, INT32_MAX);
    if (opts->world < 1 || opts->rank < 0 || opts->rank >= opts->world)
        RT_FAIL(RT_ERR_CONFIG, "sampler: rank %d of world %d, expected 0 <= rank < world", opts->rank, opts->world);
    if (opts->group_by < 0 || (opts->group_by > 0 && !opts->lengths))
        RT_FAIL(RT_ERR_CONFIG, "sampler: grouping by length needs the lengths and a group size > 0 (got %d)",
                opts->group_by);
    s = rt_xcalloc(1, sizeof *s);
    s->n = n_examples;
    s->opts = *opts;
    s->order = malloc((n_examples ? n_examples : 1) * sizeof *s->order);
    if (!s->order) RT_FAIL(RT_ERR_NOMEM, "sampler: out of memory for %zu examples", n_examples);
    *out = s;
    return RT_OK;
fail:
    data_sampler_free(s);
    return st;
}

void data_sampler_free(data_sampler *s) {
    if (!s) return;
    free(s->order);
    free(s);
}

static void sampler_ensure_order(data_sampler *s) {
    if (s->order_valid && s->order_epoch == s->epoch) return;
    data_sampler_permutation(s->opts.seed, s->epoch, s->opts.shuffle, s->n, s->order);
    if (s->opts.group_by > 0) data_sampler_group_by_length(s->order, s->n, s->opts.lengths, s->opts.group_by);
    s->order_epoch = s->epoch;
    s->order_valid = true;
}

bool data_sampler_next_batch(data_sampler *s, int batch_size, int32_t *indices, int *count) {
    RT_CHECK(batch_size > 0, "batch_size=%d", batch_size);
    *count = 0;
    uint64_t left = (uint64_t)s->n - s->position;
    uint64_t c = left < (uint64_t)batch_size ? left : (uint64_t)batch_size;
    if (c == 0 || (s->opts.drop_last && c < (uint64_t)batch_size)) {
        s->epoch++;
        s->position = 0;
        return false;
    }
    sampler_ensure_order(s);
    const uint64_t w = (uint64_t)s->opts.world, r = (uint64_t)s->opts.rank;
    uint64_t lo = c * r / w, hi = c * (r + 1) / w;
    for (uint64_t k = lo; k < hi; k++) indices[k - lo] = s->order[s->position + k];
    *count = (int)(hi - lo);
    s->position += c;
    return true;
}

size_t data_sampler_batches_per_epoch(const data_sampler *s, int batch_size) {
    RT_CHECK(batch_size > 0, "batch_size=%d", batch_size);
    size_t b = (size_t)batch_size;
    return s->opts.drop_last ? s->n / b : (s->n + b - 1) / b;
}

data_sampler_state data_sampler_get_state(const data_sampler *s) {
    data_sampler_state st = {s->epoch, s->position, (uint64_t)s->n, s->opts.seed};
    return st;
}

rt_status data_sampler_set_state(data_sampler *s, const data_sampler_state *state) {
    if (state->n_examples != (uint64_t)s->n)
        return rt_errorf(RT_ERR_CONFIG,
                         "sampler state: saved for %llu examples, but the dataset has %zu (resuming on other data?)",
                         (unsigned long long)state->n_examples, s->n);
    if (state->seed != s->opts.seed)
        return rt_errorf(RT_ERR_CONFIG, "sampler state: saved with seed %llu, expected the run's seed %llu",
                         (unsigned long long)state->seed, (unsigned long long)s->opts.seed);
    if (state->position > (uint64_t)s->n)
        return rt_errorf(RT_ERR_CONFIG, "sampler state: position %llu, expected at most %zu",
                         (unsigned long long)state->position, s->n);
    s->epoch = state->epoch;
    s->position = state->position;
    return RT_OK;
}

void data_sampler_set_epoch(data_sampler *s, uint64_t epoch) {
    s->epoch = epoch;
    s->position = 0;
}
