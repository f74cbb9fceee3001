/* glm-finetune's SuperGLUE inputs against FlagAI's: for val examples of every task,
 * data_glm_rows_from_superglue must build the rows FlagAI 1.8.0's PVP.encode builds with the English
 * GLM tokenizer (tests/golden/superglue/glm_rows.json, scripts/golden/gen_glm_rows_golden.py):
 * the same token ids, position and block position ids, separator and labelled targets, the same
 * verbalizer ids and label, truncated alike at 128 tokens. Cloze rows end in the [sop] whose
 * logits FlagAI scores. The val files are the fixtures in tests/data (COPA's in assets/). */
#include <stdio.h>
#include <string.h>

#include "data/data_glm_rows.h"
#include "checkpoints/ckpt_json.h"
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
        TZ_EXPECT(ints_equal(cJSON_GetObjectItemCaseSensitive(row, "ids"), g->ids, g->len), "%s line %d row %d: ids "
                  "(%d of them)", task_name, line, r, g->len);
        TZ_EXPECT(ints_equal(cJSON_GetObjectItemCaseSensitive(row, "pos"), g->pos, g->len), "%s line %d row %d: "
                  "position ids", task_name, line, r);
        TZ_EXPECT(ints_equal(cJSON_GetObjectItemCaseSensitive(row, "block_pos"), g->block_pos, g->len), "%s line %d "
                  "row %d: block position ids", task_name, line, r);
        TZ_EXPECT(ints_equal(cJSON_GetObjectItemCaseSensitive(row, "labels"), g->labels, g->len), "%s line %d row %d: "
                  "labels", task_name, line, r);
        r++;
        (*n_rows)++;
    }
done:
    data_glm_rows_free(&R);
    data_sg_examples_free(&all);
}

int main(void) {
    cJSON *root = NULL;
    tok_tokenizer *tok = NULL;
    int n_cases = 0, n_rows = 0;
    TZ_EXPECT_OK(ckpt_json_load(tz_source_path("tests/golden/superglue/glm_rows.json"), &root));
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
    tok_free(tok);
    cJSON_Delete(root);
    return tz_test_result("test_glm_tasks");
}
