/* A seeded, resumable sampler over the examples of a dataset.
 *
 * The order of epoch e is a Fisher-Yates shuffle whose draws come from the counter RNG
 * (rt_rng_below with stream RT_STREAM(RT_STREAM_SHUFFLE, e)), so it is a pure function of
 * (seed, epoch): nothing but (epoch, position) has to go into a checkpoint, and every rank
 * computes the same order without talking to the others. With shuffle off the order is
 * 0..n-1 (evaluation).
 *
 * Data parallelism: batch_size is the GLOBAL batch. Every rank walks the same global order
 * and cuts the same global batch of c examples (c = batch_size, or what is left at the end
 * of the epoch); rank r of w takes the contiguous slice [c*r/w, c*(r+1)/w) of it. The union
 * over ranks is then the same global batch for any w, so a dp=2 run sees exactly the batches
 * a dp=1 run sees (the loss is normalised by the all-reduced target count). A rank may get
 * fewer examples than another, or none, in the last batch of an epoch.
 *
 * position counts global examples consumed in the current epoch, so a run may resume with a
 * different batch size or world size and still continue at the next unseen example.
 *
 * Length grouping (--group-by-length) has the semantics of HF's LengthGroupedSampler
 * (transformers' get_length_grouped_indices): the epoch's shuffled order is cut into
 * megabatches of min(n / (4 g), 50) (at least 1) groups of g examples, each megabatch is sorted
 * by length, longest first (ties keep their shuffled order), and the longest example of all
 * moves to the front, so the first batch is the largest one and a shortage of memory shows at
 * once. It is still a pure function of (seed, epoch, lengths, g); a resume with another g
 * regroups the epoch. */
#ifndef DATA_SAMPLER_H
#define DATA_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/base/rt_status.h"

typedef struct data_sampler data_sampler; /* opaque */

typedef struct {
    uint64_t seed;
    bool shuffle;           /* false: 0..n-1 every epoch */
    bool drop_last;         /* true: an epoch's last global batch is skipped when it is not full */
    int rank, world;        /* this process's data-parallel rank and the data-parallel size (0, 1 by default) */
    const int32_t *lengths; /* (n) with group_by > 0: each example's length; read while the sampler lives */
    int group_by;           /* > 0: group by length in megabatches of this many examples' groups (HF passes
                             * its batch size times gradient accumulation); 0: plain shuffle */
} data_sampler_opts;

/* What a checkpoint stores. n_examples and seed are stored to catch a resume on other data. */
typedef struct {
    uint64_t epoch;
    uint64_t position; /* global examples consumed in this epoch */
    uint64_t n_examples;
    uint64_t seed;
} data_sampler_state;

/* n_examples must fit in int32 (indices are int32). world >= 1, 0 <= rank < world. */
rt_status data_sampler_init(size_t n_examples, const data_sampler_opts *opts, data_sampler **out);
void data_sampler_free(data_sampler *s);

/* Writes this rank's part of the next global batch of batch_size examples to indices
 * (room for batch_size / world + 1 entries is enough) and its size to *count. At the end of
 * an epoch it returns false with *count = 0 and moves to position 0 of the next epoch, so
 * the next call starts that epoch. Returns true even when this rank's slice is empty but
 * the global batch is not. */
bool data_sampler_next_batch(data_sampler *s, int batch_size, int32_t *indices, int *count);

/* Global batches in one epoch for this batch size (the same on every rank). */
size_t data_sampler_batches_per_epoch(const data_sampler *s, int batch_size);

data_sampler_state data_sampler_get_state(const data_sampler *s);
/* Continues from a saved state. RT_ERR_CONFIG when it was saved for another number of
 * examples or another seed, or when position is past the end of the epoch. */
rt_status data_sampler_set_state(data_sampler *s, const data_sampler_state *state);
/* Starts epoch at position 0 (e.g. for evaluation passes or a fixed epoch count loop). */
void data_sampler_set_epoch(data_sampler *s, uint64_t epoch);

/* The order of epoch for n examples (order has n entries): the permutation the sampler
 * walks. Exposed for tests and for tools that want to reproduce a run's data order. */
void data_sampler_permutation(uint64_t seed, uint64_t epoch, bool shuffle, size_t n, int32_t *order);
/* Regroups an order of n examples by length in place, as above (group_by > 0). */
void data_sampler_group_by_length(int32_t *order, size_t n, const int32_t *lengths, int group_by);

#endif
