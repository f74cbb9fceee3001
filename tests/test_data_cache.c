/* The tokenized cache's format and keys (data/data_cache.c): sets round-trip bit for bit,
 * regression targets and segments included; every truncation of a file, a flipped bit
 * anywhere, a file made for another key and a header that lies are RT_ERR_FORMAT with a message,
 * never a crash; keys change with each input (a file's content, a string, an integer, NULL
 * against ""), and load_or_build builds once, then loads, rebuilds a damaged entry, and with no
 * folder only builds. A stream (load_or_stream) written in pieces equals the sets it describes,
 * is mapped from its file on every later run, and a stream that fails leaves no entry behind;
 * slices share a mapped set's storage and copy a malloc'd one. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_cache.h"
#include "tests/testutil.h"

/* Two small sets: pairs with segments and labels, and a set with two float targets a row (as
 * multi-label rows have one a class; regression has one a row). */
static void make_sets(data_tokenized *sets) {
    const int32_t r0[] = {101, 7, 8, 102, 9, 102}, r1[] = {101, 5, 102}, r2[] = {3, 4, 5, 6, 7};
    const int32_t *rows[3] = {r0, r1, r2};
    const int32_t lens[3] = {6, 3, 5}, len_a[3] = {4, 3, 5}, labels[3] = {1, 0, 1};
    TZ_EXPECT_OK(data_tokenized_from_rows(rows, lens, len_a, labels, 3, &sets[0]));
    sets[0].segments = true;
    sets[0].n_truncated = 1;
    TZ_EXPECT_OK(data_tokenized_from_rows(rows + 1, lens + 1, NULL, NULL, 2, &sets[1]));
    const float targets[4] = {0.5f, 4.25f, 1.0f, 0.0f};
    TZ_EXPECT_OK(data_tokenized_set_targets(&sets[1], targets, 2));
}

/* The same rows (ids, lengths, segments, labels, targets) and header fields; offsets may differ
 * by a constant, as a slice's do. */
static bool same_set(const data_tokenized *a, const data_tokenized *b) {
    if (a->n != b->n || a->segments != b->segments || a->max_len != b->max_len || a->longest != b->longest ||
        a->n_truncated != b->n_truncated || (a->targets == NULL) != (b->targets == NULL) ||
        a->target_width != b->target_width)
        return false;
    const size_t n = a->n;
    for (size_t i = 0; i < n; i++)
        if (a->offsets[i + 1] - a->offsets[i] != b->offsets[i + 1] - b->offsets[i] ||
            memcmp(a->ids + a->offsets[i], b->ids + b->offsets[i], (a->offsets[i + 1] - a->offsets[i]) * 4) != 0)
            return false;
    return memcmp(a->lengths, b->lengths, n * 4) == 0 && memcmp(a->len_a, b->len_a, n * 4) == 0 &&
           memcmp(a->labels, b->labels, n * 4) == 0 &&
           (!a->targets || memcmp(a->targets, b->targets, n * (size_t)a->target_width * 4) == 0);
}

static void test_format(void) {
    data_tokenized sets[2] = {{0}}, back[3] = {{0}}; /* back: room for the wrong count below */
    make_sets(sets);
    data_cache_key key;
    data_cache_key_init(&key, "test");
    void *bytes = NULL;
    size_t len = 0;
    TZ_EXPECT_OK(data_cache_serialize(&key, sets, 2, &bytes, &len));
    TZ_EXPECT_OK(data_cache_parse("t.tzds", bytes, len, &key, 2, back));
    TZ_EXPECT(same_set(&sets[0], &back[0]) && same_set(&sets[1], &back[1]), "the round trip changed a set");
    for (int s = 0; s < 2; s++) data_tokenized_free(&back[s]);
    /* every truncation */
    int bad = 0;
    for (size_t cut = 0; cut < len; cut++) {
        rt_status st = data_cache_parse("t.tzds", bytes, cut, &key, 2, back);
        bad += st != RT_ERR_FORMAT || rt_error_message()[0] == '\0';
    }
    TZ_EXPECT(bad == 0, "%d truncations were not a format error with a message", bad);
    /* a flipped bit in every byte: the checksums (or the header checks) catch each */
    unsigned char *copy = malloc(len);
    bad = 0;
    for (size_t i = 0; i < len; i++) {
        memcpy(copy, bytes, len);
        copy[i] ^= (unsigned char)(1u << (i % 8));
        bad += data_cache_parse("t.tzds", copy, len, &key, 2, back) != RT_ERR_FORMAT;
    }
    TZ_EXPECT(bad == 0, "%d bit flips parsed", bad);
    free(copy);
    data_cache_key other = key;
    data_cache_key_int(&other, 1);
    TZ_EXPECT(data_cache_parse("t.tzds", bytes, len, &other, 2, back) == RT_ERR_FORMAT, "another key's file parsed");
    TZ_EXPECT(data_cache_parse("t.tzds", bytes, len, &key, 3, back) == RT_ERR_FORMAT, "a set count that differs");
    free(bytes);
    for (int s = 0; s < 2; s++) data_tokenized_free(&sets[s]);
}

static void test_keys(void) {
    const char *dir = tz_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/in.txt", dir);
    tz_write_file(path, "hello\n", 6);
    data_cache_key a, b, c, d, e;
    data_cache_key_init(&a, "k");
    TZ_EXPECT_OK(data_cache_key_file(&a, path));
    data_cache_key_init(&b, "k");
    TZ_EXPECT_OK(data_cache_key_file(&b, path));
    TZ_EXPECT(memcmp(&a, &b, sizeof a) == 0, "the same file gave two keys");
    tz_write_file(path, "hellp\n", 6); /* same size, other content */
    data_cache_key_init(&c, "k");
    TZ_EXPECT_OK(data_cache_key_file(&c, path));
    TZ_EXPECT(memcmp(&a, &c, sizeof a) != 0, "a content change kept the key");
    data_cache_key_init(&d, "k");
    data_cache_key_str(&d, NULL);
    data_cache_key_init(&e, "k");
    data_cache_key_str(&e, "");
    TZ_EXPECT(memcmp(&d, &e, sizeof d) != 0, "NULL and \"\" gave one key");
    data_cache_key_init(&d, "k");
    data_cache_key_str(&d, "ab");
    data_cache_key_str(&d, "c");
    data_cache_key_init(&e, "k");
    data_cache_key_str(&e, "a");
    data_cache_key_str(&e, "bc");
    TZ_EXPECT(memcmp(&d, &e, sizeof d) != 0, "(ab, c) and (a, bc) gave one key");
    TZ_EXPECT(data_cache_key_file(&a, dir) == RT_ERR_IO && strstr(rt_error_message(), "directory"),
              "a directory as an input: %s", rt_error_message());
    snprintf(path, sizeof path, "%s/missing.txt", dir);
    TZ_EXPECT(data_cache_key_file(&a, path) == RT_ERR_IO && strstr(rt_error_message(), "missing.txt"),
              "a missing input: %s", rt_error_message());
}

static int builds;
static rt_status build_two(void *ctx, data_tokenized *sets, int n_sets) {
    builds++;
    make_sets(sets);
    return n_sets == 2 ? RT_OK : RT_ERR_CONFIG;
}

static void test_load_or_build(void) {
    const char *dir = tz_tmpdir();
    char cache[512];
    snprintf(cache, sizeof cache, "%s/cache/sub", dir); /* made on first use */
    data_cache_key key;
    data_cache_key_init(&key, "lob");
    data_tokenized sets[2] = {{0}}, ref[2] = {{0}};
    make_sets(ref);
    builds = 0;
    for (int run = 0; run < 2; run++) {
        TZ_EXPECT_OK(data_cache_load_or_build(cache, &key, "test", 2, 1, build_two, NULL, sets));
        TZ_EXPECT(same_set(&sets[0], &ref[0]) && same_set(&sets[1], &ref[1]), "run %d: the sets differ", run);
        for (int s = 0; s < 2; s++) data_tokenized_free(&sets[s]);
    }
    TZ_EXPECT(builds == 1, "built %d times, expected once then a hit", builds);
    /* a damaged entry is rebuilt (and rewritten: the next run is a hit again) */
    char path[700];
    snprintf(path, sizeof path, "%s/%016llx%016llx.tzds", cache, (unsigned long long)key.h[0],
             (unsigned long long)key.h[1]);
    tz_write_file(path, "TZDSET", 6);
    for (int run = 0; run < 2; run++) {
        TZ_EXPECT_OK(data_cache_load_or_build(cache, &key, "test", 2, 1, build_two, NULL, sets));
        TZ_EXPECT(same_set(&sets[0], &ref[0]), "after the damage, run %d", run);
        for (int s = 0; s < 2; s++) data_tokenized_free(&sets[s]);
    }
    TZ_EXPECT(builds == 2, "a damaged entry: %d builds in all, expected 2", builds);
    /* no folder: build every time */
    for (int run = 0; run < 2; run++) {
        TZ_EXPECT_OK(data_cache_load_or_build(NULL, &key, "test", 2, 1, build_two, NULL, sets));
        for (int s = 0; s < 2; s++) data_tokenized_free(&sets[s]);
    }
    TZ_EXPECT(builds == 4, "no cache: %d builds, expected 4", builds);
    for (int s = 0; s < 2; s++) data_tokenized_free(&ref[s]);
}

/* A stream of set 0 in three pieces of ids, then set 1 as the last two rows of make_sets' first
 * set (a slice: its offsets start past 0). fail_at > 0 fails after that many pieces. */
static int streams, fail_at;
static rt_status stream_two(void *ctx, data_cache_writer *w, int n_sets) {
    (void)ctx;
    streams++;
    data_tokenized ref[2] = {{0}}, tail = {0};
    make_sets(ref);
    rt_status st = RT_OK;
    const size_t n_ids = ref[0].offsets[ref[0].n];
    for (size_t at = 0, piece = 0; at < n_ids; at += 5, piece++) {
        if (fail_at && (int)piece == fail_at) {
            st = rt_errorf(RT_ERR_FORMAT, "in.txt:3: a bad line");
            goto fail;
        }
        RT_TRY(data_cache_write_ids(w, ref[0].ids + at, n_ids - at < 5 ? n_ids - at : 5));
    }
    RT_TRY(data_cache_end_set(w, &ref[0]));
    RT_TRY(data_tokenized_slice(&ref[0], 1, 2, &tail));
    RT_TRY(data_cache_write_set(w, &tail));
    if (n_sets != 2) st = RT_ERR_CONFIG;
fail:
    data_tokenized_free(&tail);
    for (int s = 0; s < 2; s++) data_tokenized_free(&ref[s]);
    return st;
}

static size_t files_in(const char *dir) {
    size_t n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void test_stream(void) {
    const char *dir = tz_tmpdir();
    char cache[512];
    snprintf(cache, sizeof cache, "%s/streamed", dir);
    data_cache_key key;
    data_cache_key_init(&key, "stream");
    data_tokenized sets[2] = {{0}}, ref[2] = {{0}}, tail = {0};
    make_sets(ref);
    TZ_EXPECT_OK(data_tokenized_slice(&ref[0], 1, 2, &tail));
    /* a failing stream: its error, and no entry or temporary file left (the lock file stays) */
    fail_at = 2;
    TZ_EXPECT(data_cache_load_or_stream(cache, &key, "test", 2, 1, stream_two, NULL, sets) == RT_ERR_FORMAT &&
                  strstr(rt_error_message(), "in.txt:3"),
              "a failing stream: %s", rt_error_message());
    TZ_EXPECT(files_in(cache) == 1, "a failing stream left %zu files (expected the lock only)", files_in(cache));
    fail_at = 0;
    streams = 0;
    for (int run = 0; run < 2; run++) {
        TZ_EXPECT_OK(data_cache_load_or_stream(cache, &key, "test", 2, 1, stream_two, NULL, sets));
        TZ_EXPECT(same_set(&sets[0], &ref[0]) && same_set(&sets[1], &tail), "run %d: the streamed sets differ", run);
        TZ_EXPECT(sets[0].backing && sets[0].backing->kind == DATA_BACKING_MAPPED && sets[1].backing == sets[0].backing,
                  "run %d: the sets are not read from the mapped entry", run);
        /* a slice of a mapped set shares the mapping, and outlives the set it came from */
        data_tokenized view = {0};
        TZ_EXPECT_OK(data_tokenized_slice(&sets[0], 1, 2, &view));
        for (int s = 0; s < 2; s++) data_tokenized_free(&sets[s]);
        TZ_EXPECT(view.backing && view.backing->refs == 1 && same_set(&view, &tail), "run %d: the view", run);
        data_tokenized_free(&view);
    }
    TZ_EXPECT(streams == 1, "streamed %d times, expected once then a hit", streams);
    /* no folder: into memory */
    TZ_EXPECT_OK(data_cache_load_or_stream(NULL, &key, "test", 2, 1, stream_two, NULL, sets));
    TZ_EXPECT(same_set(&sets[1], &tail) && sets[0].backing->kind == DATA_BACKING_MALLOC, "the stream in memory");
    for (int s = 0; s < 2; s++) data_tokenized_free(&sets[s]);
    TZ_EXPECT(data_tokenized_slice(&ref[0], 2, 2, &tail) == RT_ERR_USAGE, "a slice past the end");
    data_tokenized_free(&tail);
    for (int s = 0; s < 2; s++) data_tokenized_free(&ref[s]);
}

int main(void) {
    test_format();
    test_keys();
    test_load_or_build();
    test_stream();
    return tz_test_result("test_data_cache");
}
