/* glm-finetune's SuperGLUE inputs against FlagAI's: for val examples of every task,
 * data_glm_rows_from_superglue must build the rows FlagAI 1.8.0's PVP.encode builds with the English
 * GLM tokenizer (tests/golden/superglue/glm_rows.json, scripts/golden/gen_glm_rows_golden.py):
 * the same token ids, position and block position ids, separator and labelled targets, the same
 * verbalizer ids and label, truncated alike at 128 tokens. Cloze rows end in the [sop] whose
 * logits FlagAI scores. The val files are the fixtures in tests/data (COPA's in assets/). Then
 * data_glm_collate: rows in example order, padded (to 8, or to a length bucket, when asked) where no
 * real token looks.
 * Every case's rows also go through the tokenized cache's sets (data_glm_rows_to_sets/from_sets)
 * and come back field for field; sets that lie (a mask position past its row, a cloze label past
 * the verbalizer, an example's rows past the end) are RT_ERR_FORMAT. A user's own cloze pattern
 * (--cloze) parses, fails on each malformed pattern, and builds the cloze row from its parts. */
#include <stdio.h>
#include <string.h>

#include "data/data_glm_batch.h"
#include "data/data_glm_rows.h"
#include "runtime/base/rt_json.h"
#include "tests/testutil.h"

static bool ints_equal(const cJSON *arr, const int32_t *got, int n) {
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n) return false;
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) if ((int32_t)v->valuedouble != got[i++]) return false;
    return true;
}

static int json_int(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(v) ? (int)v->valuedouble : -999;
}

static bool rows_equal(const data_glm_rows *a, const data_glm_rows *b) {
    if (a->kind != b->kind || a->n_rows != b->n_rows || a->n_examples != b->n_examples ||
        a->rows_per_example != b->rows_per_example || a->n_classes != b->n_classes ||
        a->n_truncated != b->n_truncated || memcmp(a->verbalizer, b->verbalizer, sizeof a->verbalizer) != 0)
        return false;
    for (int e = 0; e < a->n_examples; e++)
        if (a->first_row[e] != b->first_row[e] || a->label[e] != b->label[e]) return false;
    for (int i = 0; i < a->n_rows; i++) {
        const data_glm_row *x = &a->rows[i], *y = &b->rows[i];
        const size_t n = (size_t)x->len * sizeof(int32_t);
        if (x->len != y->len || x->sep != y->sep || x->mask_pos != y->mask_pos || memcmp(x->ids, y->ids, n) ||
            memcmp(x->pos, y->pos, n) || memcmp(x->block_pos, y->block_pos, n) || memcmp(x->labels, y->labels, n))
            return false;
    }
    return true;
}

/* R through the cache's sets and back; then three lies the sets might tell. */
static void check_cache_sets(const data_glm_rows *R, const char *what) {
    data_tokenized sets[DATA_GLM_ROWS_SETS];
    data_glm_rows back = {0};
    TZ_EXPECT_OK(data_glm_rows_to_sets(R, sets));
    TZ_EXPECT_OK(data_glm_rows_from_sets(sets, &back));
    TZ_EXPECT(rows_equal(R, &back), "%s: the rows changed on their way through the cache's sets", what);
    data_glm_rows_free(&back);
    sets[0].labels[0] = sets[0].lengths[0]; /* the first row's mask position, one past its end */
    TZ_EXPECT(data_glm_rows_from_sets(sets, &back) == RT_ERR_FORMAT, "%s: a mask position past its row loaded", what);
    sets[0].labels[0] = R->rows[0].mask_pos;
    int32_t *ex = sets[4].ids; /* example 0: [first_row, label] */
    ex[0] = R->n_rows;
    TZ_EXPECT(data_glm_rows_from_sets(sets, &back) == RT_ERR_FORMAT, "%s: an example past the rows loaded", what);
    ex[0] = R->first_row[0];
    if (R->kind == DATA_GLM_CLOZE) {
        ex[1] = R->n_classes;
        TZ_EXPECT(data_glm_rows_from_sets(sets, &back) == RT_ERR_FORMAT, "%s: a label past the verbalizer loaded",
                  what);
    }
    for (int k = 0; k < DATA_GLM_ROWS_SETS; k++) data_tokenized_free(&sets[k]);
}

static void check_case(const cJSON *c, const tok_tokenizer *tok, int max_len, int *n_rows) {
    const char *task_name = cJSON_GetObjectItemCaseSensitive(c, "task")->valuestring;
    const int line = json_int(c, "line"), idx = json_int(c, "idx");
    const data_sg_task *task = data_sg_task_find(task_name);
    data_sg_examples all = {0};
    data_glm_rows R = {0};
    TZ_EXPECT_OK(data_sg_load_split(task, tz_superglue_dir(task_name, "val"), "val", &all));
    /* by idx, unique in a val file (MultiRC's numbers answer options): the golden's line is where
     * the example sat in the full file, and a fixture slice may hold it elsewhere */
    size_t e = 0;
    while (e < all.n && all.ex[e].idx != idx) e++;
    TZ_EXPECT(e < all.n, "%s: no val example at line %d with idx %d", task_name, line, idx);
    if (e == all.n) goto done;
    data_sg_examples one = all; /* a view of the one example */
    one.n = 1;
    one.ex = &all.ex[e];
    TZ_EXPECT_OK(data_glm_rows_from_superglue(&one, 0, tok, max_len, false, &R));
    if (R.n_rows > 0 && R.n_examples > 0) check_cache_sets(&R, task_name);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(c, "rows");
    TZ_EXPECT(R.n_examples == 1 && R.n_rows == cJSON_GetArraySize(rows), "%s line %d: %d rows, FlagAI %d", task_name,
              line, R.n_rows, cJSON_GetArraySize(rows));
    TZ_EXPECT(R.n_examples == 1 && R.label[0] == json_int(c, "label"), "%s line %d: label %d, FlagAI %d", task_name,
              line, R.n_examples ? R.label[0] : -1, json_int(c, "label"));
    const cJSON *verb = cJSON_GetObjectItemCaseSensitive(c, "verbalizer_ids");
    TZ_EXPECT((verb != NULL) == (R.kind == DATA_GLM_CLOZE), "%s: row kind %d", task_name, (int)R.kind);
    if (verb) TZ_EXPECT(ints_equal(verb, R.verbalizer, R.n_classes), "%s line %d: verbalizer ids", task_name, line);
    int r = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, rows) {
        if (r >= R.n_rows) break;
        const data_glm_row *g = &R.rows[r];
        TZ_EXPECT(g->sep == json_int(row, "sep"), "%s line %d row %d: sep %d, FlagAI %d", task_name, line, r, g->sep,
                  json_int(row, "sep"));
        TZ_EXPECT(ints_equal(cJSON_GetObjectItemCaseSensitive(row, "ids"), g->ids, g->len),
                  "%s line %d row %d: ids "
                  "(%d of them)",
                  task_name, line, r, g->len);
        TZ_EXPECT(ints_equal(cJSON_GetObjectItemCaseSensitive(row, "pos"), g->pos, g->len),
                  "%s line %d row %d: "
                  "position ids",
                  task_name, line, r);
        TZ_EXPECT(ints_equal(cJSON_GetObjectItemCaseSensitive(row, "block_pos"), g->block_pos, g->len),
                  "%s line %d "
                  "row %d: block position ids",
                  task_name, line, r);
        TZ_EXPECT(ints_equal(cJSON_GetObjectItemCaseSensitive(row, "labels"), g->labels, g->len),
                  "%s line %d row %d: "
                  "labels",
                  task_name, line, r);
        r++;
        (*n_rows)++;
    }
done:
    data_glm_rows_free(&R);
    data_sg_examples_free(&all);
}

/* Two choice examples of two rows each, collated in the order 1, 0. */
static void check_collate(void) {
    int32_t v[4][6] = {{1, 2, 3}, {4, 5, 6, 7, 8}, {9, 10}, {11, 12, 13, 14}};
    int32_t lab[4][6] = {{-100, 2, 3}, {-100, 5, 6, 7, 8}, {-100, 10}, {-100, -100, 13, 14}};
    const int len[4] = {3, 5, 2, 4};
    data_glm_row rows[4];
    for (int r = 0; r < 4; r++)
        rows[r] =
            (data_glm_row){.ids = v[r], .pos = v[r], .block_pos = v[r], .labels = lab[r], .len = len[r], .sep = r + 1};
    int first[2] = {0, 2}, label[2] = {1, 0};
    data_glm_rows R = {.kind = DATA_GLM_CHOICES,
                       .rows = rows,
                       .n_rows = 4,
                       .first_row = first,
                       .label = label,
                       .n_examples = 2,
                       .rows_per_example = 2};
    const int32_t ex[2] = {1, 0};
    data_glm_batch b = {0};
    data_glm_collate(&R, ex, 2, 99, &(data_pad){.multiple = 1}, &b);
    TZ_EXPECT(b.B == 4 && b.T == 5, "batch %d x %d, want 4 x 5", b.B, b.T);
    if (b.B == 4 && b.T == 5) {
        /* row 0 is example 1's first row: 9 10, then padding */
        const int32_t want_ids[5] = {9, 10, 99, 99, 99}, want_labels[5] = {-100, 10, -100, -100, -100};
        for (int t = 0; t < 5; t++)
            TZ_EXPECT(b.ids[t] == want_ids[t] && b.labels[t] == want_labels[t] && b.pos[t] == (t < 2 ? v[2][t] : 0) &&
                          b.block_pos[t] == (t < 2 ? v[2][t] : 0),
                      "row 0 position %d: id %d label %d pos %d", t, b.ids[t], b.labels[t], b.pos[t]);
        TZ_EXPECT(b.ids[3 * 5 + 4] == 8 && b.sep[0] == 3 && b.sep[3] == 2 && b.cloze_at[1] == 4,
                  "row 3 ends in 8 (%d); seps %d, %d", b.ids[19], b.sep[0], b.sep[3]);
        TZ_EXPECT(b.label[0] == 0 && b.label[1] == 1, "labels %d %d follow the examples", b.label[0], b.label[1]);
    }
    data_glm_collate(&R, ex, 1, 99, &(data_pad){.multiple = 8}, &b);
    TZ_EXPECT(b.B == 2 && b.T == 8 && b.ids[2 * 8 - 1] == 99 && b.labels[8 + 3] == 14,
              "one example padded to 8: %d x %d", b.B, b.T);
    data_glm_collate(&R, ex, 1, 99, &(data_pad){.multiple = 1, .n_buckets = 2, .bucket = {3, 12}}, &b);
    TZ_EXPECT(b.B == 2 && b.T == 12 && b.ids[2 * 12 - 1] == 99 && b.labels[12 + 3] == 14 && b.pos[11] == 0,
              "one example padded to its length bucket, 12: %d x %d", b.B, b.T);
    data_glm_batch_free(&b);
}

/* A user's cloze pattern (glm-finetune --train-file --cloze): the parts, the segments, the errors,
 * and the cloze row it makes: [CLS], each part's own tokens in order with [MASK] in the blank,
 * <eos>, then the [sop] at the blank's position whose logits score the verbalizer. */
static void check_user_cloze(const tok_tokenizer *tok) {
    data_pvp_template t;
    TZ_EXPECT_OK(data_pvp_template_parse("{premise} Question: {hypothesis}? {{A}} [MASK].", &t));
    TZ_EXPECT(t.n_parts == 6 && t.n_columns == 2 && strcmp(t.columns[1], "hypothesis") == 0, "template parts: %d",
              t.n_parts);
    TZ_EXPECT(t.parts[0].column == 0 && t.parts[0].segment == 0 && t.parts[2].column == 1 && t.parts[2].segment == 1 &&
                  t.parts[3].segment == 1 && strcmp(t.parts[3].text, "? {A} ") == 0 && t.parts[4].is_mask,
              "template columns, segments and braces");
    data_pvp_template_free(&t);
    static const struct {
        const char *pattern, *needle;
    } bad[] = {{"{a} is good", "no [MASK]"},
               {"{a} [MASK] [MASK]", "two [MASK]s"},
               {"{a [MASK]", "never closed"},
               {"{} [MASK]", "{} names no column"},
               {"{a} {b} {c} [MASK]", "a third column"},
               {"It was [MASK].", "no {COLUMN}"},
               {"{a} } [MASK]", "a '}' with no '{'"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rt_status st = data_pvp_template_parse(bad[i].pattern, &t);
        TZ_EXPECT(st == RT_ERR_USAGE && strstr(rt_error_message(), bad[i].needle), "'%s': %s", bad[i].pattern,
                  rt_error_message());
    }
    TZ_EXPECT_OK(data_pvp_template_parse("{review} It was [MASK].", &t));
    const char *values[1] = {"a fine film"};
    data_pvp_filled f;
    data_pvp_template_fill(&t, values, &f);
    const char *words[2] = {"bad", "good"};
    const int32_t label = 1;
    data_glm_rows R;
    data_glm_specials sp;
    tok_ids a = {0}, b = {0}, c = {0}, w = {0};
    TZ_EXPECT_OK(data_glm_specials_of(tok, &sp));
    TZ_EXPECT_OK(tok_encode(tok, "a fine film", 11, &a));
    TZ_EXPECT_OK(tok_encode(tok, " It was", 7, &b));
    TZ_EXPECT_OK(tok_encode(tok, ".", 1, &c));
    TZ_EXPECT_OK(tok_encode(tok, "good", 4, &w));
    if (data_glm_rows_from_cloze(&f, &label, 1, words, 2, tok, 64, &R) == RT_OK) {
        int32_t want[64];
        int n = 0;
        want[n++] = sp.cls;
        for (size_t k = 0; k < a.n; k++) want[n++] = a.ids[k];
        for (size_t k = 0; k < b.n; k++) want[n++] = b.ids[k];
        const int mask_pos = n;
        want[n++] = sp.mask;
        for (size_t k = 0; k < c.n; k++) want[n++] = c.ids[k];
        want[n++] = sp.eos;
        const int sep = n;
        want[n++] = sp.sop;
        const data_glm_row *row = &R.rows[0];
        TZ_EXPECT(R.kind == DATA_GLM_CLOZE && R.n_examples == 1 && R.label[0] == 1 && R.n_classes == 2 &&
                      R.verbalizer[1] == w.ids[0],
                  "cloze rows: kind, label, verbalizer");
        TZ_EXPECT(row->len == n && row->sep == sep && row->mask_pos == mask_pos &&
                      memcmp(row->ids, want, (size_t)n * sizeof *want) == 0 && row->pos[sep] == mask_pos &&
                      row->block_pos[sep] == 1,
                  "the user cloze row: %d tokens, sep %d, mask %d", row->len, row->sep, row->mask_pos);
        data_glm_rows_free(&R);
    }
    const char *two_tokens[2] = {"bad", "wonderfully awful"};
    rt_status st = data_glm_rows_from_cloze(&f, &label, 1, two_tokens, 2, tok, 64, &R);
    TZ_EXPECT(st == RT_ERR_CONFIG && strstr(rt_error_message(), "--verbalizer: verbalizer \"wonderfully awful\" is"),
              "a verbalizer of two tokens: %s", rt_error_message());
    tok_ids_free(&a);
    tok_ids_free(&b);
    tok_ids_free(&c);
    tok_ids_free(&w);
    data_pvp_filled_free(&f);
    data_pvp_template_free(&t);
}

int main(void) {
    check_collate();
    cJSON *root = NULL;
    tok_tokenizer *tok = NULL;
    int n_cases = 0, n_rows = 0;
    TZ_EXPECT_OK(rt_json_load(tz_source_path("tests/golden/superglue/glm_rows.json"), &root));
    TZ_EXPECT_OK(tok_load(tz_asset_path("glm-en-wordpiece"), &tok));
    if (root && tok) {
        const int max_len = json_int(root, "max_seq_length");
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "cases")) {
            check_case(c, tok, max_len, &n_rows);
            n_cases++;
        }
    }
    TZ_EXPECT(n_cases >= 14 && n_rows >= 16, "the golden holds %d cases, %d rows", n_cases, n_rows);
    if (tok) check_user_cloze(tok);
    tok_free(tok);
    cJSON_Delete(root);
    return tz_test_result("test_glm_tasks");
}
