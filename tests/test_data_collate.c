/* The collator (dynamic padding, multiple of 8, masks, labels, n_targets, buffer reuse) and
 * the longest_first truncation rule against hand-computed cases, including the cases of
 * the Rust `tokenizers` unit test (budget 7 over texts of 0, 2, 4 and 8 tokens), and the
 * token_type_ids and regression targets the collator fills. Length buckets (data_pad.h): the
 * list's checks, the rounding, and the collators (classification, both sides of seq2seq)
 * padding to the bucket with the same rows and masks as without. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_collate.h"
#include "data/data_dataset.h"
#include "data/data_pad.h"
#include "tests/testutil.h"

static void test_truncation(void) {
    /* {len_a, len_b, budget, fast_a, fast_b, slow_a, slow_b} */
    static const size_t cases[][7] = {
        {0, 0, 7, 0, 0, 0, 0},     {0, 8, 7, 0, 7, 0, 7},  {2, 2, 7, 2, 2, 2, 2},  {2, 8, 7, 2, 5, 2, 5},
        {4, 4, 7, 3, 4, 4, 3},     {4, 8, 7, 3, 4, 4, 3},  {8, 2, 7, 5, 2, 5, 2},  {8, 4, 7, 4, 3, 4, 3},
        {8, 8, 7, 3, 4, 4, 3},     {8, 0, 7, 7, 0, 7, 0},  {4, 2, 7, 4, 2, 4, 2},  {6, 5, 9, 5, 4, 5, 4},
        {5, 6, 9, 4, 5, 5, 4},     {10, 3, 9, 6, 3, 6, 3}, {3, 10, 9, 3, 6, 3, 6}, {5, 5, 8, 4, 4, 4, 4},
        {100, 100, 0, 0, 0, 0, 0}, {9, 1, 4, 3, 1, 3, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const size_t *c = cases[k];
        size_t a, b;
        data_truncate_longest_first(c[0], c[1], c[2], DATA_TRUNC_HF_FAST, &a, &b);
        TZ_EXPECT(a == c[3] && b == c[4], "fast (%zu, %zu) budget %zu -> (%zu, %zu), expected (%zu, %zu)", c[0], c[1],
                  c[2], a, b, c[3], c[4]);
        data_truncate_longest_first(c[0], c[1], c[2], DATA_TRUNC_HF_SLOW, &a, &b);
        TZ_EXPECT(a == c[5] && b == c[6], "slow (%zu, %zu) budget %zu -> (%zu, %zu), expected (%zu, %zu)", c[0], c[1],
                  c[2], a, b, c[5], c[6]);
    }
    /* The slow rule is the one-token-at-a-time loop: from the longer, from b on ties. */
    for (size_t la = 0; la < 12; la++)
        for (size_t lb = 0; lb < 12; lb++)
            for (size_t budget = 0; budget < 25; budget++) {
                size_t ra = la, rb = lb;
                while (ra + rb > budget) {
                    if (lb == 0 || ra > rb)
                        ra--;
                    else
                        rb--;
                }
                size_t a, b, fa, fb;
                data_truncate_longest_first(la, lb, budget, DATA_TRUNC_HF_SLOW, &a, &b);
                data_truncate_longest_first(la, lb, budget, DATA_TRUNC_HF_FAST, &fa, &fb);
                if (a != ra || b != rb || fa + fb != (la + lb < budget ? la + lb : budget) || fa > la || fb > lb) {
                    TZ_EXPECT(0, "(%zu, %zu) budget %zu: slow (%zu, %zu) loop (%zu, %zu) fast (%zu, %zu)", la, lb,
                              budget, a, b, ra, rb, fa, fb);
                    return;
                }
            }
    TZ_EXPECT(1, "exhaustive small cases");
}

static void test_collate(void) {
    const int32_t r0[] = {11, 12, 13}, r1[] = {21}, r2[] = {31, 32, 33, 34, 35, 36, 37, 38, 39, 40}, r3[] = {41, 42};
    const int32_t *rows[] = {r0, r1, r2, r3};
    const int32_t lengths[] = {3, 1, 10, 2};
    const int32_t labels[] = {1, 0, DATA_LABEL_NONE, 1};
    data_tokenized ds;
    TZ_EXPECT_OK(data_tokenized_from_rows(rows, lengths, NULL, labels, 4, &ds));
    TZ_EXPECT(ds.n == 4 && ds.offsets[4] == 16 && ds.longest == 10, "packed %zu rows, %zu ids", ds.n, ds.offsets[4]);

    rt_batch batch;
    memset(&batch, 0, sizeof batch);
    const int32_t pick[] = {3, 0, 1};
    TZ_EXPECT_OK(data_collate_classification(&ds, pick, 3, 50256, &(data_pad){.multiple = 1}, &batch));
    const int32_t want_ids[] = {41, 42, 50256, 11, 12, 13, 21, 50256, 50256};
    const int32_t want_mask[] = {1, 1, 0, 1, 1, 1, 1, 0, 0};
    TZ_EXPECT(batch.B == 3 && batch.T == 3, "B=%d T=%d (padded to the longest row)", batch.B, batch.T);
    TZ_EXPECT(memcmp(batch.input_ids, want_ids, sizeof want_ids) == 0, "ids right-padded with pad_id");
    TZ_EXPECT(memcmp(batch.attention_mask, want_mask, sizeof want_mask) == 0, "attention mask");
    TZ_EXPECT(batch.lengths[0] == 2 && batch.lengths[1] == 3 && batch.lengths[2] == 1, "lengths");
    TZ_EXPECT(batch.labels[0] == 1 && batch.labels[1] == 1 && batch.labels[2] == 0, "labels");
    TZ_EXPECT(batch.example_index[0] == 3 && batch.example_index[1] == 0 && batch.example_index[2] == 1,
              "example_index");
    TZ_EXPECT(batch.n_targets == 3 && batch.n_tokens == 6, "n_targets %d n_tokens %zu", batch.n_targets,
              batch.n_tokens);

    /* Multiple of 8 with the long row; the unlabelled row does not count as a target. */
    const int32_t pick2[] = {2, 1};
    TZ_EXPECT_OK(data_collate_classification(&ds, pick2, 2, 0, &(data_pad){.multiple = 8}, &batch));
    TZ_EXPECT(batch.B == 2 && batch.T == 16, "T=%d, expected 10 rounded up to 16", batch.T);
    int ok = 1;
    for (int t = 0; t < 16; t++) {
        ok &= batch.input_ids[t] == (t < 10 ? 31 + t : 0);
        ok &= batch.attention_mask[t] == (t < 10);
        ok &= batch.input_ids[16 + t] == (t < 1 ? 21 : 0);
        ok &= batch.attention_mask[16 + t] == (t < 1);
    }
    TZ_EXPECT(ok, "rows of a multiple-of-8 batch");
    TZ_EXPECT(batch.n_targets == 1 && batch.n_tokens == 11, "n_targets %d (one -100) n_tokens %zu", batch.n_targets,
              batch.n_tokens);

    /* T = 3 rounds up to 8; the buffers are reused, not reallocated, for a smaller batch. */
    int32_t *ids_before = batch.input_ids;
    int capB = batch.capacity_B, capT = batch.capacity_T;
    const int32_t pick3[] = {0};
    TZ_EXPECT_OK(data_collate_classification(&ds, pick3, 1, 0, &(data_pad){.multiple = 8}, &batch));
    TZ_EXPECT(batch.T == 8 && batch.input_ids == ids_before && batch.capacity_B == capB && batch.capacity_T == capT,
              "reuse: T=%d cap %dx%d", batch.T, batch.capacity_B, batch.capacity_T);

    /* A reserve up front means a later batch within it does not allocate. */
    TZ_EXPECT_OK(data_batch_reserve(&batch, 32, 64));
    ids_before = batch.input_ids;
    const int32_t pick4[] = {0, 1, 2, 3, 0, 1, 2, 3};
    TZ_EXPECT_OK(data_collate_classification(&ds, pick4, 8, 0, &(data_pad){.multiple = 8}, &batch));
    TZ_EXPECT(batch.input_ids == ids_before && batch.B == 8 && batch.T == 16 && batch.n_targets == 6,
              "within reserve: B=%d T=%d n_targets=%d", batch.B, batch.T, batch.n_targets);

    /* An empty share (a rank's slice of a short last batch). */
    TZ_EXPECT_OK(data_collate_classification(&ds, NULL, 0, 0, &(data_pad){.multiple = 8}, &batch));
    TZ_EXPECT(batch.B == 0 && batch.n_targets == 0 && batch.n_tokens == 0, "empty batch");

    data_batch_free(&batch);
    TZ_EXPECT(batch.input_ids == NULL && batch.capacity_B == 0, "freed");
    data_batch_free(&batch); /* twice is fine */
    data_batch_free(NULL);
    data_tokenized_free(&ds);
}

/* token_type_ids from len_a (BERT pairs, single texts, padding) and regression targets. */
static void test_types_and_targets(void) {
    /* [CLS] a a [SEP] b b [SEP] | [CLS] a [SEP] (single text) | [CLS] a [SEP] b [SEP] */
    const int32_t r0[] = {101, 5, 6, 102, 7, 8, 102}, r1[] = {101, 5, 102}, r2[] = {101, 9, 102, 10, 102};
    const int32_t *rows[] = {r0, r1, r2};
    const int32_t lengths[] = {7, 3, 5}, len_a[] = {4, 3, 3};
    data_tokenized ds;
    TZ_EXPECT_OK(data_tokenized_from_rows(rows, lengths, len_a, NULL, 3, &ds));
    TZ_EXPECT(ds.targets == NULL, "no targets by default");
    rt_batch batch;
    memset(&batch, 0, sizeof batch);
    const int32_t pick[] = {0, 1, 2};
    TZ_EXPECT_OK(data_collate_classification(&ds, pick, 3, 0, &(data_pad){.multiple = 8}, &batch));
    const int32_t want_types[3][8] = {{0, 0, 0, 0, 1, 1, 1, 0}, {0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 1, 1, 0, 0, 0}};
    TZ_EXPECT(batch.T == 8 && batch.token_type_ids != NULL &&
                  memcmp(batch.token_type_ids, want_types, sizeof want_types) == 0,
              "token_type_ids: 0 over A with its specials, 1 after, 0 on padding");
    TZ_EXPECT(batch.targets == NULL && batch.n_targets == 0, "classification data: targets NULL, n_targets %d",
              batch.n_targets);

    /* Regression: targets follow the picked rows, NaN rows do not count, labels stay -100. */
    const float targets[] = {4.5f, NAN, 0.25f};
    TZ_EXPECT_OK(data_tokenized_set_targets(&ds, targets, 1));
    const int32_t pick2[] = {2, 1, 0, 2};
    TZ_EXPECT_OK(data_collate_classification(&ds, pick2, 4, 0, &(data_pad){.multiple = 1}, &batch));
    TZ_EXPECT(batch.targets != NULL && batch.targets[0] == 0.25f && isnan(batch.targets[1]) &&
                  batch.targets[2] == 4.5f && batch.targets[3] == 0.25f,
              "targets gathered");
    TZ_EXPECT(batch.n_targets == 3, "n_targets %d (one NaN)", batch.n_targets);
    TZ_EXPECT(batch.labels[0] == DATA_LABEL_NONE && batch.labels[3] == DATA_LABEL_NONE, "labels -100");
    TZ_EXPECT(batch.T == 7 && batch.token_type_ids[0 * 7 + 3] == 1 && batch.token_type_ids[2 * 7 + 4] == 1 &&
                  batch.token_type_ids[1 * 7 + 4] == 0,
              "types at T=7");
    /* Growing the buffers keeps targets valid; targets do not overlap the labels. */
    TZ_EXPECT_OK(data_batch_reserve(&batch, 64, 64));
    TZ_EXPECT(batch.targets != NULL && ((void *)batch.targets >= (void *)(batch.labels + 64) ||
                                        (void *)(batch.targets + 4) <= (void *)batch.labels),
              "targets apart from the labels");
    int32_t *pick3 = malloc(64 * sizeof *pick3);
    for (int i = 0; i < 64; i++) pick3[i] = i % 3;
    TZ_EXPECT_OK(data_collate_classification(&ds, pick3, 64, 0, &(data_pad){.multiple = 8}, &batch));
    int ok = 1;
    for (int i = 0; i < 64; i++) {
        float want = targets[i % 3];
        ok &= batch.labels[i] == DATA_LABEL_NONE && (isnan(want) ? isnan(batch.targets[i]) : batch.targets[i] == want);
    }
    TZ_EXPECT(ok && batch.n_targets == 43, "64 rows: labels and targets side by side, n_targets %d", batch.n_targets);
    free(pick3);
    /* Multi-label: a row's 0/1 targets, one a class, follow it; a NaN row is unlabelled. */
    const float multi[] = {1, 0, 1, NAN, NAN, NAN, 0, 1, 0};
    TZ_EXPECT_OK(data_tokenized_set_targets(&ds, multi, 3));
    const int32_t pick4[] = {2, 0, 1};
    TZ_EXPECT_OK(data_collate_classification(&ds, pick4, 3, 0, &(data_pad){.multiple = 1}, &batch));
    const float want_multi[] = {0, 1, 0, 1, 0, 1};
    TZ_EXPECT(batch.target_width == 3 && memcmp(batch.targets, want_multi, sizeof want_multi) == 0 &&
                  isnan(batch.targets[6]) && batch.n_targets == 2,
              "multi-label targets: width %d, n_targets %d", batch.target_width, batch.n_targets);
    /* Back to classification data with the same batch: targets NULL again. */
    TZ_EXPECT_OK(data_tokenized_set_targets(&ds, NULL, 0));
    TZ_EXPECT_OK(data_collate_classification(&ds, pick, 3, 0, &(data_pad){.multiple = 8}, &batch));
    TZ_EXPECT(batch.targets == NULL, "targets NULL for classification");
    data_batch_free(&batch);
    TZ_EXPECT(batch.token_type_ids == NULL && batch.targets == NULL, "freed");
    data_tokenized_free(&ds);
}

static void test_buckets(void) {
    data_pad p;
    TZ_EXPECT_OK(data_pad_parse("16,32,64", 8, "length-buckets", &p));
    TZ_EXPECT(p.multiple == 8 && p.n_buckets == 3 && p.bucket[2] == 64, "parsed 16,32,64");
    const int longest[] = {0, 1, 16, 17, 32, 33, 64, 65, 70}, want[] = {16, 16, 16, 32, 32, 64, 64, 72, 72};
    for (int i = 0; i < 9; i++)
        TZ_EXPECT(data_pad_length(&p, longest[i]) == want[i], "longest %d -> %d, expected %d", longest[i],
                  data_pad_length(&p, longest[i]), want[i]);
    const data_pad none = data_pad_multiple(8);
    TZ_EXPECT(data_pad_length(&none, 9) == 16 && data_pad_length(&none, 0) == 8, "no buckets: multiples of 8");
    TZ_EXPECT_OK(data_pad_parse(NULL, 1, "length-buckets", &p));
    TZ_EXPECT(p.n_buckets == 0 && data_pad_length(&p, 5) == 5, "no list: the longest row");
    static const struct {
        const char *list, *says;
    } bad[] = {{"32,16", "must ascend"},
               {"16,16", "must ascend"},
               {"12,32", "not a multiple of 8"},
               {"16,x", "expected ascending lengths"},
               {"16,", "trailing comma"},
               {"0,16", "outside"},
               {"-8", "outside"},
               {"16;32", "expected ascending lengths"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        TZ_EXPECT(data_pad_parse(bad[k].list, 8, "length-buckets", &p) == RT_ERR_USAGE &&
                      strstr(rt_error_message(), bad[k].says) && strstr(rt_error_message(), "--length-buckets"),
                  "%s: %s", bad[k].list, rt_error_message());
    TZ_EXPECT_OK(data_pad_parse("16,32", 1, "length-buckets", &p));
    TZ_EXPECT_OK(data_pad_check_covers(&p, 32, "length-buckets", "--max-len"));
    TZ_EXPECT(data_pad_check_covers(&p, 33, "length-buckets", "--max-len") == RT_ERR_USAGE &&
                  strstr(rt_error_message(), "the largest bucket, 32, is shorter than --max-len (33 tokens)"),
              "a list that does not cover the longest row: %s", rt_error_message());

    /* the collators pad to the bucket: the same rows, masks and counts as without, more padding */
    const int32_t r0[] = {11, 12, 13}, r1[] = {21}, t0[] = {5, 6, 7, 8, 9}, t1[] = {4};
    const int32_t *rows[] = {r0, r1}, *trows[] = {t0, t1};
    const int32_t lengths[] = {3, 1}, tlengths[] = {5, 1}, labels[] = {1, 0};
    data_tokenized src, tgt;
    TZ_EXPECT_OK(data_tokenized_from_rows(rows, lengths, NULL, labels, 2, &src));
    TZ_EXPECT_OK(data_tokenized_from_rows(trows, tlengths, NULL, labels, 2, &tgt));
    TZ_EXPECT_OK(data_pad_parse("4,8", 1, "length-buckets", &p));
    rt_batch plain = {0}, bucketed = {0};
    const int32_t pick[] = {0, 1};
    TZ_EXPECT_OK(data_collate_seq2seq(&src, &tgt, pick, 2, 0, &(data_pad){.multiple = 1}, &plain));
    TZ_EXPECT_OK(data_collate_seq2seq(&src, &tgt, pick, 2, 0, &p, &bucketed));
    TZ_EXPECT(plain.T == 3 && plain.T_dec == 5 && bucketed.T == 4 && bucketed.T_dec == 8,
              "source 3 -> bucket 4, target 5 -> bucket 8: got %d, %d", bucketed.T, bucketed.T_dec);
    int same = bucketed.n_targets == plain.n_targets && bucketed.n_tokens == plain.n_tokens;
    for (int b = 0; b < 2; b++) {
        for (int t = 0; t < bucketed.T; t++) {
            const bool real = t < plain.T;
            same &= bucketed.input_ids[b * 4 + t] == (real ? plain.input_ids[b * 3 + t] : 0);
            same &= bucketed.attention_mask[b * 4 + t] == (real ? plain.attention_mask[b * 3 + t] : 0);
        }
        for (int t = 0; t < bucketed.T_dec; t++)
            same &= bucketed.dec_labels[b * 8 + t] == (t < plain.T_dec ? plain.dec_labels[b * 5 + t] : -100);
    }
    TZ_EXPECT(same, "the bucketed batch holds the plain batch's rows, masks, labels and counts, padded further");
    data_batch_free(&plain);
    data_batch_free(&bucketed);
    data_tokenized_free(&src);
    data_tokenized_free(&tgt);
}

int main(void) {
    test_truncation();
    test_buckets();
    test_collate();
    test_types_and_targets();
    return tz_test_result("test_data_collate");
}
