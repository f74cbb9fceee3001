/* The tokenized cache's format and keys (data/data_cache.c): sets round-trip bit for bit,
 * regression targets and segments included; every truncation of a file, a flipped bit
 * anywhere, a file made for another key and a header that lies are RT_ERR_FORMAT with a message,
 * never a crash; keys change with each input (a file's content, a string, an integer, NULL
 * against ""), and load_or_build builds once, then loads, rebuilds a damaged entry, and with no
 * folder only builds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_cache.h"
#include "tests/testutil.h"

/* Two small sets: pairs with segments and labels, and a regression set. */
static void make_sets(data_tokenized *sets) {
    const int32_t r0[] = {101, 7, 8, 102, 9, 102}, r1[] = {101, 5, 102}, r2[] = {3, 4, 5, 6, 7};
    const int32_t *rows[3] = {r0, r1, r2};
    const int32_t lens[3] = {6, 3, 5}, len_a[3] = {4, 3, 5}, labels[3] = {1, 0, 1};
    TZ_EXPECT_OK(data_tokenized_from_rows(rows, lens, len_a, labels, 3, &sets[0]));
    sets[0].segments = true;
    sets[0].n_truncated = 1;
    TZ_EXPECT_OK(data_tokenized_from_rows(rows + 1, lens + 1, NULL, NULL, 2, &sets[1]));
    const float targets[2] = {0.5f, 4.25f};
    TZ_EXPECT_OK(data_tokenized_set_targets(&sets[1], targets));
}

static bool same_set(const data_tokenized *a, const data_tokenized *b) {
    if (a->n != b->n || a->segments != b->segments || a->max_len != b->max_len || a->longest != b->longest ||
        a->n_truncated != b->n_truncated || (a->targets == NULL) != (b->targets == NULL))
        return false;
    const size_t n = a->n, ids = a->offsets[n];
    return memcmp(a->offsets, b->offsets, (n + 1) * sizeof(size_t)) == 0 &&
           memcmp(a->ids, b->ids, ids * 4) == 0 && memcmp(a->lengths, b->lengths, n * 4) == 0 &&
           memcmp(a->len_a, b->len_a, n * 4) == 0 && memcmp(a->labels, b->labels, n * 4) == 0 &&
           (!a->targets || memcmp(a->targets, b->targets, n * 4) == 0);
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

int main(void) {
    test_format();
    test_keys();
    test_load_or_build();
    return tz_test_result("test_data_cache");
}
