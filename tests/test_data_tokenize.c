/* Tokenized datasets with the real GPT-2 tokenizer on MRPC dev: a row is encode(a) then
 * encode(b); truncation to max_len matches HF's fast tokenizer (longest_first). The
 * expected ids were made with the `tokenizers` Python package 0.23.3 from the same
 * encoder.json/vocab.bpe (BPE model, ByteLevel pre-tokenizer without prefix space,
 * enable_truncation(max_length=21), encode(text_a, text_b)). */
#include <stdio.h>
#include <string.h>

#include "data/data_collate.h"
#include "data/data_dataset.h"
#include "data/data_glue.h"
#include "tests/testutil.h"
#include "tokenizers/tok.h"

static const int32_t dev0_full[] = {1544, 531, 262, 2057, 15271, 2508, 1597, 1595, 470,  4197, 262,   1664,
                                    338,  890, 12,  4354, 3349,  4811, 13,   1,    464,  2057, 15271, 2508,
                                    1597, 857, 407, 4197, 674,   890,  12,   4354, 3349, 4811, 13};
/* max_len 21: (19, 16) -> (11, 10); (25, 25) -> (10, 11); (31, 38) -> (10, 11). */
static const int32_t dev_trunc21[3][21] = {
    {1544, 531, 262,  2057,  15271, 2508, 1597, 1595, 470,  4197, 262,
     1,    464, 2057, 15271, 2508,  1597, 857,  407,  4197, 674},
    {48017, 533, 15516, 531, 24746, 291,  313,  16563, 262,  10420, 6653,
     3656,  531, 339,   373, 366,   3064, 1411, 2157,  4502, 5511},
    {464,  8872, 373, 379,   18693, 13,   5892,  28808, 1028, 262, 464,
     8872, 373,  379, 18693, 13,    3695, 28808, 21331, 56,   28},
};

static int row_equals(const data_tokenized *ds, size_t i, const int32_t *want, size_t n) {
    return (size_t)ds->lengths[i] == n && memcmp(ds->ids + ds->offsets[i], want, n * sizeof *want) == 0;
}

int main(void) {
    tok_tokenizer *tok = NULL;
    rt_status st = tok_load(tz_asset_path("gpt2-bpe"), &tok);
    TZ_EXPECT(st == RT_OK, "tok_load: %s", rt_error_message());
    if (st != RT_OK) return tz_test_result("test_data_tokenize");

    data_pair_template tp;
    TZ_EXPECT_OK(data_pair_template_detect(tok, &tp));
    TZ_EXPECT(tp.n_prefix == 0 && tp.n_middle == 0 && tp.n_suffix == 0 && tp.n_single_suffix == 0,
              "GPT-2 adds no special tokens");

    const data_glue_task *mrpc = data_glue_task_find("mrpc");
    data_examples ex;
    TZ_EXPECT_OK(data_glue_load(mrpc, tz_asset_path("glue-mrpc/dev.tsv"), true, &ex));
    if (ex.n != 408) return tz_test_result("test_data_tokenize");

    /* Untruncated: row 0 is encode(a) followed by encode(b). */
    data_tokenized ds;
    TZ_EXPECT_OK(data_tokenize_pairs(&ex, tok, 1024, &ds));
    tok_ids a = {0}, b = {0};
    TZ_EXPECT_OK(tok_encode(tok, ex.text_a[0], strlen(ex.text_a[0]), &a));
    TZ_EXPECT_OK(tok_encode(tok, ex.text_b[0], strlen(ex.text_b[0]), &b));
    TZ_EXPECT(a.n == 19 && b.n == 16, "encode lengths %zu %zu", a.n, b.n);
    int concat = (size_t)ds.lengths[0] == a.n + b.n && memcmp(ds.ids, a.ids, a.n * sizeof *a.ids) == 0 &&
                 memcmp(ds.ids + a.n, b.ids, b.n * sizeof *b.ids) == 0;
    TZ_EXPECT(concat, "row 0 = encode(a) ++ encode(b) (%d ids)", ds.lengths[0]);
    TZ_EXPECT(row_equals(&ds, 0, dev0_full, sizeof dev0_full / sizeof dev0_full[0]), "row 0 matches HF ids");
    TZ_EXPECT(ds.len_a[0] == 19, "len_a %d", ds.len_a[0]);
    TZ_EXPECT(ds.n == 408 && ds.n_truncated == 0 && ds.labels[0] == 1 && ds.labels[1] == 0, "labels carried");
    TZ_EXPECT(ds.longest > 40 && ds.longest < 120, "longest row %d", ds.longest);
    size_t n_labels1 = 0;
    for (size_t i = 0; i < ds.n; i++) n_labels1 += ds.labels[i] == 1;
    TZ_EXPECT(n_labels1 == 279, "label 1 count %zu", n_labels1);

    /* Dynamic padding over real rows, pad = eos. */
    rt_batch batch;
    memset(&batch, 0, sizeof batch);
    const int32_t pick[] = {0, 1, 2, 3};
    TZ_EXPECT_OK(data_collate_classification(&ds, pick, 4, tok_eos_id(tok), &(data_pad){.multiple = 8}, &batch));
    int longest = 0;
    for (int k = 0; k < 4; k++) longest = ds.lengths[k] > longest ? ds.lengths[k] : longest;
    TZ_EXPECT(batch.T == (longest + 7) / 8 * 8 && batch.n_targets == 4, "T=%d longest=%d", batch.T, longest);
    TZ_EXPECT(batch.input_ids[batch.T - 1] == 50256 && batch.attention_mask[batch.T - 1] == 0, "padded with eos");
    data_batch_free(&batch);
    data_tokenized_free(&ds);

    /* Truncated to 21 (an odd budget, where the HF rules differ): the fast tokenizer's ids. */
    TZ_EXPECT_OK(data_tokenize_pairs(&ex, tok, 21, &ds));
    for (int i = 0; i < 3; i++) TZ_EXPECT(row_equals(&ds, (size_t)i, dev_trunc21[i], 21), "row %d at max_len 21", i);
    TZ_EXPECT(ds.len_a[0] == 11 && ds.len_a[1] == 10, "len_a %d %d", ds.len_a[0], ds.len_a[1]);
    int all_fit = 1;
    for (size_t i = 0; i < ds.n; i++) all_fit &= ds.lengths[i] <= 21;
    TZ_EXPECT(all_fit && ds.n_truncated > 300 && ds.longest == 21, "all rows <= 21, %zu truncated", ds.n_truncated);
    data_tokenized_free(&ds);

    /* The slow rule gives a the larger half: (19, 16) -> (11, 10), (25, 25) -> (11, 10). */
    TZ_EXPECT_OK(data_tokenize_pairs_rule(&ex, tok, 21, DATA_TRUNC_HF_SLOW, &ds));
    TZ_EXPECT(ds.len_a[0] == 11 && ds.len_a[1] == 11, "slow len_a %d %d", ds.len_a[0], ds.len_a[1]);
    data_tokenized_free(&ds);

    st = data_tokenize_pairs(&ex, tok, 0, &ds);
    TZ_EXPECT(st == RT_ERR_CONFIG && strstr(rt_error_message(), "max_len 0"), "%s", rt_error_message());
    data_examples_free(&ex);

    /* A single-sentence task: the row is encode(sentence). */
    TZ_EXPECT_OK(data_glue_load(data_glue_task_find("sst2"), tz_data_path("glue-sst2/dev.tsv"), true, &ex));
    TZ_EXPECT_OK(data_tokenize_pairs(&ex, tok, 128, &ds));
    tok_ids_clear(&a);
    TZ_EXPECT_OK(tok_encode(tok, ex.text_a[5], strlen(ex.text_a[5]), &a));
    TZ_EXPECT(row_equals(&ds, 5, a.ids, a.n) && ds.n == 872, "sst2 row 5 = encode(sentence)");
    TZ_EXPECT(ds.targets == NULL, "classification data has no targets");
    data_tokenized_free(&ds);
    data_examples_free(&ex);

    /* STS-B (regression): the float scores travel with the rows; class labels stay -100. */
    TZ_EXPECT_OK(data_glue_load(data_glue_task_find("stsb"), tz_data_path("glue-stsb/dev.tsv"), true, &ex));
    TZ_EXPECT_OK(data_tokenize_pairs(&ex, tok, 128, &ds));
    int same = ds.n == ex.n && ds.targets != NULL;
    for (size_t i = 0; same && i < ds.n; i++) same = ds.targets[i] == ex.targets[i] && ds.labels[i] == DATA_LABEL_NONE;
    TZ_EXPECT(same && ds.n == 300 && ds.targets[1] == 4.75f, "stsb targets carried (%zu rows)", ds.n);
    data_tokenized_free(&ds);
    data_examples_free(&ex);

    tok_ids_free(&a);
    tok_ids_free(&b);
    tok_free(tok);
    return tz_test_result("test_data_tokenize");
}
