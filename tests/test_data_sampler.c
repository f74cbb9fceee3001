/* The seeded sampler: each epoch is a permutation, a pure function of (seed, epoch); resume
 * from a saved (epoch, position) continues exactly; rank shards at world sizes 1, 2 and 4
 * give the same global batches; drop_last and shuffle off behave as documented. Length
 * grouping gives HF's get_length_grouped_indices order for the same shuffled order (the golden
 * from scripts/golden/gen_length_grouped_golden.py), and through the sampler it is still a
 * permutation that resumes exactly and shards like the plain one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_sampler.h"
#include "tests/testutil.h"

#define N 103 /* not a multiple of the batch size: the last batch is partial */
#define BS 8

static data_sampler *make(uint64_t seed, bool shuffle, bool drop_last, int rank, int world) {
    data_sampler_opts o = {.seed = seed, .shuffle = shuffle, .drop_last = drop_last, .rank = rank, .world = world};
    data_sampler *s = NULL;
    TZ_EXPECT_OK(data_sampler_init(N, &o, &s));
    if (!s) exit(1);
    return s;
}

/* Runs one epoch, writing the visited indices to seq; returns how many. */
static int run_epoch(data_sampler *s, int bs, int32_t *seq, int *n_batches) {
    int32_t idx[64];
    int count, total = 0, nb = 0;
    while (data_sampler_next_batch(s, bs, idx, &count)) {
        memcpy(seq + total, idx, (size_t)count * sizeof *idx);
        total += count;
        nb++;
    }
    if (n_batches) *n_batches = nb;
    return total;
}

static int is_permutation(const int32_t *seq, int n) {
    char seen[N] = {0};
    for (int i = 0; i < n; i++) {
        if (seq[i] < 0 || seq[i] >= N || seen[seq[i]]) return 0;
        seen[seq[i]] = 1;
    }
    return n == N;
}

static void test_epochs(void) {
    data_sampler *s = make(1234, true, false, 0, 1);
    int32_t e0[N], e1[N], again[N];
    int nb;
    int n0 = run_epoch(s, BS, e0, &nb);
    TZ_EXPECT(n0 == N && is_permutation(e0, n0), "epoch 0 is a permutation (%d)", n0);
    TZ_EXPECT(nb == (N + BS - 1) / BS && (size_t)nb == data_sampler_batches_per_epoch(s, BS), "batches %d", nb);
    int n1 = run_epoch(s, BS, e1, NULL);
    TZ_EXPECT(n1 == N && is_permutation(e1, n1), "epoch 1 is a permutation");
    TZ_EXPECT(memcmp(e0, e1, sizeof e0) != 0, "epochs 0 and 1 differ");
    int identity = 1;
    for (int i = 0; i < N; i++) identity &= e0[i] == i;
    TZ_EXPECT(!identity, "shuffled");
    data_sampler_state st = data_sampler_get_state(s);
    TZ_EXPECT(st.epoch == 2 && st.position == 0, "after two epochs: epoch %llu pos %llu", (unsigned long long)st.epoch,
              (unsigned long long)st.position);
    data_sampler_free(s);

    /* Same seed, same order; the order is the documented permutation. */
    s = make(1234, true, false, 0, 1);
    run_epoch(s, BS, again, NULL);
    TZ_EXPECT(memcmp(e0, again, sizeof e0) == 0, "same seed same order");
    int32_t perm[N];
    data_sampler_permutation(1234, 1, true, N, perm);
    run_epoch(s, 5, again, NULL); /* the batch size does not change the order */
    TZ_EXPECT(memcmp(e1, again, sizeof e1) == 0 && memcmp(e1, perm, sizeof e1) == 0,
              "epoch 1 = data_sampler_permutation(seed, 1)");
    data_sampler_free(s);

    s = make(99, true, false, 0, 1);
    run_epoch(s, BS, again, NULL);
    TZ_EXPECT(memcmp(e0, again, sizeof e0) != 0, "different seed different order");
    data_sampler_free(s);

    /* Shuffle off: 0..n-1 every epoch. */
    s = make(1234, false, false, 0, 1);
    for (int e = 0; e < 2; e++) {
        int n = run_epoch(s, BS, again, NULL);
        int ok = n == N;
        for (int i = 0; i < n; i++) ok &= again[i] == i;
        TZ_EXPECT(ok, "eval order epoch %d", e);
    }
    data_sampler_free(s);

    /* drop_last: 103 / 8 = 12 full batches, the 7 left over are skipped. */
    s = make(1234, true, true, 0, 1);
    int n = run_epoch(s, BS, again, &nb);
    TZ_EXPECT(n == 96 && nb == 12 && data_sampler_batches_per_epoch(s, BS) == 12, "drop_last %d in %d", n, nb);
    TZ_EXPECT(memcmp(again, e0, 96 * sizeof *e0) == 0, "drop_last keeps the same order");
    data_sampler_free(s);
}

static void test_resume(void) {
    int32_t ref[3 * N], got[3 * N];
    data_sampler *s = make(7, true, false, 0, 1);
    int nref = 0;
    for (int e = 0; e < 3; e++) nref += run_epoch(s, BS, ref + nref, NULL);
    data_sampler_free(s);

    /* Stop in the middle of epoch 1, save, resume in a fresh sampler. */
    s = make(7, true, false, 0, 1);
    int32_t idx[BS];
    int count, ngot = run_epoch(s, BS, got, NULL);
    for (int b = 0; b < 5; b++) {
        TZ_EXPECT(data_sampler_next_batch(s, BS, idx, &count), "batch %d", b);
        memcpy(got + ngot, idx, (size_t)count * sizeof *idx);
        ngot += count;
    }
    data_sampler_state saved = data_sampler_get_state(s);
    TZ_EXPECT(saved.epoch == 1 && saved.position == 5 * BS, "saved at epoch %llu pos %llu",
              (unsigned long long)saved.epoch, (unsigned long long)saved.position);
    data_sampler_free(s);

    s = make(7, true, false, 0, 1);
    TZ_EXPECT_OK(data_sampler_set_state(s, &saved));
    while (data_sampler_next_batch(s, BS, idx, &count)) {
        memcpy(got + ngot, idx, (size_t)count * sizeof *idx);
        ngot += count;
    }
    ngot += run_epoch(s, BS, got + ngot, NULL);
    TZ_EXPECT(ngot == nref && memcmp(ref, got, sizeof ref) == 0, "resume continues exactly (%d vs %d)", ngot, nref);

    /* A state from other data or another seed is refused. */
    data_sampler_state bad = saved;
    bad.n_examples = N + 1;
    rt_status st = data_sampler_set_state(s, &bad);
    TZ_EXPECT(st == RT_ERR_CONFIG && strstr(rt_error_message(), "saved for 104 examples"), "%s", rt_error_message());
    bad = saved;
    bad.seed = 8;
    TZ_EXPECT(data_sampler_set_state(s, &bad) == RT_ERR_CONFIG, "other seed refused");
    bad = saved;
    bad.position = N + 1;
    TZ_EXPECT(data_sampler_set_state(s, &bad) == RT_ERR_CONFIG, "position past the end refused");
    data_sampler_free(s);

    data_sampler_opts o = {.seed = 1, .shuffle = true, .drop_last = false, .rank = 2, .world = 2};
    TZ_EXPECT(data_sampler_init(N, &o, &s) == RT_ERR_CONFIG && s == NULL, "rank >= world refused");
}

/* For every global batch, the union of the ranks' shards (in rank order) must equal the
 * world-1 batch, and the shards must be disjoint. */
static void test_shards(void) {
    for (int drop = 0; drop < 2; drop++) {
        data_sampler *ref = make(42, true, drop, 0, 1);
        int worlds[2] = {2, 4};
        for (int wi = 0; wi < 2; wi++) {
            int w = worlds[wi];
            data_sampler *ranks[4];
            for (int r = 0; r < w; r++) ranks[r] = make(42, true, drop, r, w);
            data_sampler_set_epoch(ref, 3);
            for (int r = 0; r < w; r++) data_sampler_set_epoch(ranks[r], 3);
            int32_t want[BS], got[BS], idx[BS];
            int nwant, batches = 0, ok = 1;
            for (;;) {
                bool more = data_sampler_next_batch(ref, BS, want, &nwant);
                int ngot = 0;
                for (int r = 0; r < w; r++) {
                    int c;
                    bool m = data_sampler_next_batch(ranks[r], BS, idx, &c);
                    ok &= m == more;
                    ok &= c <= BS / w + 1;
                    memcpy(got + ngot, idx, (size_t)c * sizeof *idx);
                    ngot += c;
                }
                if (!more) break;
                batches++;
                ok &= ngot == nwant && memcmp(got, want, (size_t)nwant * sizeof *want) == 0;
            }
            TZ_EXPECT(ok, "world %d drop_last %d: shards rebuild the global batches", w, drop);
            TZ_EXPECT(batches == (drop ? N / BS : (N + BS - 1) / BS), "world %d: %d batches", w, batches);
            for (int r = 0; r < w; r++) data_sampler_free(ranks[r]);
        }
        data_sampler_free(ref);
    }

    /* The last partial batch (7 examples) over 4 ranks: slices 1, 2, 2, 2. */
    int sizes[4];
    for (int r = 0; r < 4; r++) {
        data_sampler *s = make(42, true, false, r, 4);
        data_sampler_state st = {0, 96, N, 42};
        TZ_EXPECT_OK(data_sampler_set_state(s, &st));
        int32_t idx[BS];
        data_sampler_next_batch(s, BS, idx, &sizes[r]);
        data_sampler_free(s);
    }
    TZ_EXPECT(sizes[0] == 1 && sizes[1] == 2 && sizes[2] == 2 && sizes[3] == 2, "slices %d %d %d %d", sizes[0],
              sizes[1], sizes[2], sizes[3]);
}

/* tests/golden/length-grouped/cases.txt: "n group_by", lengths, the shuffled order, HF's order. */
static void test_group_golden(void) {
    FILE *f = fopen(tz_source_path("tests/golden/length-grouped/cases.txt"), "r");
    TZ_EXPECT(f != NULL, "no golden file");
    if (!f) return;
    int cases = 0, c;
    while ((c = fgetc(f)) == '#')
        while ((c = fgetc(f)) != '\n' && c != EOF) {
        }
    ungetc(c, f);
    size_t n;
    int g;
    while (fscanf(f, "%zu %d", &n, &g) == 2) {
        int32_t *len = malloc(n * 4), *order = malloc(n * 4), *want = malloc(n * 4);
        bool ok = true;
        for (size_t i = 0; i < n; i++) ok &= fscanf(f, "%d", &len[i]) == 1;
        for (size_t i = 0; i < n; i++) ok &= fscanf(f, "%d", &order[i]) == 1;
        for (size_t i = 0; i < n; i++) ok &= fscanf(f, "%d", &want[i]) == 1;
        TZ_EXPECT(ok, "case %d is cut short", cases);
        data_sampler_group_by_length(order, n, len, g);
        size_t first = n;
        for (size_t i = 0; i < n && first == n; i++)
            if (order[i] != want[i]) first = i;
        TZ_EXPECT(first == n, "n %zu group %d: position %zu is example %d, HF's is %d", n, g, first,
                  first < n ? order[first] : -1, first < n ? want[first] : -1);
        free(len), free(order), free(want);
        cases++;
    }
    fclose(f);
    TZ_EXPECT(cases == 5, "%d golden cases, expected 5", cases);
}

/* Through the sampler: every epoch a permutation, the longest example first, resume exact, and
 * the dp shards' union the global batch. */
static void test_group_sampler(void) {
    int32_t len[N];
    for (int i = 0; i < N; i++) len[i] = 5 + (i * 37) % 60;
    data_sampler_opts o = {.seed = 9, .shuffle = true, .rank = 0, .world = 1, .lengths = len, .group_by = BS};
    data_sampler *s = NULL, *r = NULL;
    TZ_EXPECT_OK(data_sampler_init(N, &o, &s));
    int32_t ep[2][N];
    int nb;
    for (int e = 0; e < 2; e++) {
        TZ_EXPECT(run_epoch(s, BS, ep[e], &nb) == N && is_permutation(ep[e], N), "grouped epoch %d", e);
        TZ_EXPECT(len[ep[e][0]] == 64, "epoch %d starts with length %d, not the longest (64)", e, len[ep[e][0]]);
    }
    TZ_EXPECT(memcmp(ep[0], ep[1], sizeof ep[0]) != 0, "two epochs grouped the same");
    /* resume in the middle of epoch 1 */
    TZ_EXPECT_OK(data_sampler_init(N, &o, &r));
    data_sampler_state st = {1, 5 * BS, N, 9};
    TZ_EXPECT_OK(data_sampler_set_state(r, &st));
    int32_t rest[N];
    int got = run_epoch(r, BS, rest, &nb);
    TZ_EXPECT(got == N - 5 * BS && memcmp(rest, ep[1] + 5 * BS, (size_t)got * 4) == 0, "grouped resume");
    data_sampler_free(r);
    /* two dp ranks: their slices of each global batch, in rank order, are the one-rank batch */
    data_sampler *sh[2];
    for (int k = 0; k < 2; k++) {
        data_sampler_opts ok = o;
        ok.rank = k, ok.world = 2;
        TZ_EXPECT_OK(data_sampler_init(N, &ok, &sh[k]));
        data_sampler_set_epoch(sh[k], 0);
    }
    int pos = 0, bad = 0, c0, c1;
    int32_t i0[BS], i1[BS];
    while (data_sampler_next_batch(sh[0], BS, i0, &c0) && data_sampler_next_batch(sh[1], BS, i1, &c1)) {
        for (int k = 0; k < c0; k++) bad += i0[k] != ep[0][pos++];
        for (int k = 0; k < c1; k++) bad += i1[k] != ep[0][pos++];
    }
    TZ_EXPECT(bad == 0 && pos == N, "dp shards: %d differ, %d of %d seen", bad, pos, N);
    for (int k = 0; k < 2; k++) data_sampler_free(sh[k]);
    data_sampler_opts bad_opts = o;
    bad_opts.lengths = NULL;
    TZ_EXPECT(data_sampler_init(N, &bad_opts, &r) == RT_ERR_CONFIG, "grouping without lengths is refused");
    data_sampler_free(s);
}

int main(void) {
    test_group_golden();
    test_group_sampler();
    test_epochs();
    test_resume();
    test_shards();
    return tz_test_result("test_data_sampler");
}
