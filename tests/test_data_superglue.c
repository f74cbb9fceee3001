/* SuperGLUE: the JSONL readers on every real file (counts and label counts of each fixture,
 * a few exact fields), every kind of bad line and its message, the metrics against
 * scikit-learn, and the cloze patterns against what FlagAI 1.8.0's own pvp.py builds
 * (tests/golden/superglue/pvp_golden.json, from scripts/golden/gen_superglue_golden.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/data_pvp.h"
#include "data/data_superglue.h"
#include "metrics/metric_superglue.h"
#include "runtime/base/rt_json.h"
#include "tests/testutil.h"

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* ---- real files ---- */

typedef struct {
    const char *task, *split;
    size_t n;            /* examples (MultiRC: answer options) */
    size_t per_label[3]; /* count of each class id; unused for test files */
    size_t n_questions;  /* MultiRC */
} sg_count;

/* Counted in the fixtures with Python's json module. Whole files hold the official split sizes
 * of their SOURCES.md; the slices hold their first rows (each folder's SOURCES.md says which). */
static const sg_count counts[] = {
    {"boolq", "val", 51, {11, 40}, 0},
    {"boolq", "test", 50, {0}, 0},
    {"cb", "train", 50, {41, 8, 1}, 0},
    {"cb", "val", 56, {23, 28, 5}, 0},
    {"cb", "test", 50, {0}, 0},
    {"copa", "train", 400, {195, 205}, 0},
    {"copa", "val", 100, {55, 45}, 0},
    {"copa", "test", 50, {0}, 0},
    {"multirc", "train", 278, {159, 119}, 46},
    {"multirc", "val", 216, {110, 106}, 49},
    {"multirc", "test", 266, {0}, 38},
    {"rte", "train", 50, {25, 25}, 0},
    {"rte", "val", 277, {146, 131}, 0},
    {"rte", "test", 50, {0}, 0},
    {"wic", "train", 50, {27, 23}, 0},
    {"wic", "val", 638, {319, 319}, 0},
    {"wic", "test", 50, {0}, 0},
    {"wsc", "train", 50, {29, 21}, 0},
    {"wsc", "val", 104, {66, 38}, 0},
    {"wsc", "test", 50, {0}, 0},
};

static void test_real_counts(void) {
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        const sg_count *k = &counts[c];
        const data_sg_task *t = data_sg_task_find(k->task);
        data_sg_examples ex;
        rt_status st = data_sg_load_split(t, tz_superglue_dir(k->task, k->split), k->split, &ex);
        TZ_EXPECT(st == RT_OK, "%s %s: %s", k->task, k->split, rt_error_message());
        if (st != RT_OK) continue;
        TZ_EXPECT(ex.n == k->n, "%s %s: %zu examples, expected %zu", k->task, k->split, ex.n, k->n);
        size_t per[3] = {0}, none = 0;
        for (size_t i = 0; i < ex.n; i++) {
            if (ex.ex[i].label == DATA_SG_LABEL_NONE)
                none++;
            else
                per[ex.ex[i].label]++;
        }
        bool test = strcmp(k->split, "test") == 0;
        if (test) {
            TZ_EXPECT(none == ex.n, "%s test: %zu unlabelled of %zu", k->task, none, ex.n);
        } else {
            for (int l = 0; l < t->n_labels; l++)
                TZ_EXPECT(per[l] == k->per_label[l], "%s %s: label %s x%zu, expected %zu", k->task, k->split,
                          t->label_names[l], per[l], k->per_label[l]);
        }
        TZ_EXPECT(ex.n_questions == k->n_questions, "%s %s: %zu questions, expected %zu", k->task, k->split,
                  ex.n_questions, k->n_questions);
        data_sg_examples_free(&ex);
    }
}

static data_sg_examples load_val(const char *task) {
    data_sg_examples ex;
    TZ_EXPECT_OK(data_sg_load_split(data_sg_task_find(task), tz_superglue_dir(task, "val"), "val", &ex));
    return ex;
}

static void test_real_fields(void) {
    data_sg_examples ex = load_val("boolq");
    if (ex.n) {
        const data_sg_example *e = &ex.ex[0];
        TZ_EXPECT(strcmp(e->text_b, "does ethanol take more energy make that produces") == 0, "boolq q '%s'",
                  e->text_b);
        TZ_EXPECT(strncmp(e->text_a, "Ethanol fuel -- All biomass goes through", 40) == 0, "boolq passage");
        TZ_EXPECT(e->label == 0 && e->idx == 0 && e->line == 1, "boolq label %d idx %d line %d", e->label, e->idx,
                  e->line);
    }
    data_sg_examples_free(&ex);

    ex = load_val("cb");
    if (ex.n > 1) {
        TZ_EXPECT(strcmp(ex.ex[0].text_b, "Valence was helping") == 0 && ex.ex[0].label == 1, "cb[0] '%s' %d",
                  ex.ex[0].text_b, ex.ex[0].label);
        TZ_EXPECT(ex.ex[1].label == 2 && strcmp(ex.ex[1].text_b, "there is a shipment") == 0, "cb[1] neutral");
        TZ_EXPECT(strncmp(ex.ex[1].text_a, "``Who knows?", 12) == 0, "cb[1] premise '%s'", ex.ex[1].text_a);
    }
    data_sg_examples_free(&ex);

    ex = load_val("copa");
    if (ex.n > 2) {
        const data_sg_example *e = &ex.ex[0];
        TZ_EXPECT(strcmp(e->text_a, "The man turned on the faucet.") == 0 &&
                      strcmp(e->text_b, "The toilet filled with water.") == 0 &&
                      strcmp(e->text_c, "Water flowed from the spout.") == 0 && e->copa_effect && e->label == 1,
                  "copa[0]");
        TZ_EXPECT(ex.ex[2].label == 0 && strcmp(ex.ex[2].text_b, "She received her pension.") == 0, "copa[2]");
    }
    data_sg_examples_free(&ex);

    ex = load_val("rte");
    if (ex.n) {
        TZ_EXPECT(strcmp(ex.ex[0].text_b, "Christopher Reeve had an accident.") == 0 && ex.ex[0].label == 1,
                  "rte[0] not_entailment");
        TZ_EXPECT(ex.ex[1].label == 0 &&
                      strcmp(ex.ex[1].text_b, "Bacteria is winning the war against antibiotics.") == 0,
                  "rte[1] entailment");
    }
    data_sg_examples_free(&ex);

    ex = load_val("wic");
    if (ex.n) {
        TZ_EXPECT(strcmp(ex.ex[0].text_c, "class") == 0 &&
                      strcmp(ex.ex[0].text_a, "An emerging professional class.") == 0 && ex.ex[0].label == 0,
                  "wic[0] word '%s'", ex.ex[0].text_c);
        TZ_EXPECT(strcmp(ex.ex[1].text_c, "stripe") == 0, "wic[1] '%s'", ex.ex[1].text_c);
    }
    data_sg_examples_free(&ex);

    ex = load_val("wsc");
    if (ex.n > 1) {
        const data_sg_example *e = &ex.ex[1];
        TZ_EXPECT(strcmp(e->text_b, "Mr. Moncrieff") == 0 && strcmp(e->text_c, "his") == 0 && e->span1_index == 0 &&
                      e->span2_index == 39 && e->label == 1,
                  "wsc[1] '%s' %d '%s' %d label %d", e->text_b, e->span1_index, e->text_c, e->span2_index, e->label);
        TZ_EXPECT(ex.ex[0].span2_index == 47 && ex.ex[0].label == 0, "wsc[0]");
    }
    data_sg_examples_free(&ex);

    ex = load_val("multirc");
    if (ex.n) {
        /* Paragraph 0's first question; its options share the passage string. */
        const data_sg_example *e = &ex.ex[0];
        TZ_EXPECT(strncmp(e->text_a, "What causes a change in motion? The application of a force.", 59) == 0,
                  "multirc passage");
        TZ_EXPECT(e->passage_idx == 0 && e->question_idx == 0 && e->idx == 0, "multirc ids %d %d %d", e->passage_idx,
                  e->question_idx, e->idx);
        TZ_EXPECT(ex.ex[1].text_a == e->text_a && ex.ex[1].question_idx == 0 && ex.ex[1].idx == 1,
                  "options share the passage");
        int32_t last_q = ex.ex[ex.n - 1].question_idx;
        TZ_EXPECT(last_q == 426 && ex.ex[ex.n - 1].passage_idx == 36 && ex.ex[ex.n - 1].line == 6,
                  "last option: question %d passage %d line %d", last_q, ex.ex[ex.n - 1].passage_idx,
                  ex.ex[ex.n - 1].line);
    }
    data_sg_examples_free(&ex);

    TZ_EXPECT(data_sg_task_find("nope") == NULL && data_sg_task_find("cb")->n_labels == 3, "task table");
    TZ_EXPECT(data_sg_label_id(data_sg_task_find("rte"), "not_entailment") == 1, "rte label id");
}

/* ---- bad input ---- */

static void expect_error(const char *task, const char *bytes, bool require_labels, rt_status want, const char *msg1,
                         const char *msg2) {
    data_sg_examples ex;
    rt_status st = data_sg_parse(data_sg_task_find(task), "bad.jsonl", bytes, strlen(bytes), require_labels, &ex);
    TZ_EXPECT(st == want && contains(rt_error_message(), msg1) && (!msg2 || contains(rt_error_message(), msg2)),
              "%s: got %s '%s', want '%s' ... '%s'", task, rt_status_name(st), rt_error_message(), msg1,
              msg2 ? msg2 : "");
    TZ_EXPECT(ex.n == 0 && ex.ex == NULL, "freed on error");
}

static void test_bad_lines(void) {
    const char *rte_ok = "{\"premise\": \"a\", \"hypothesis\": \"b\", \"label\": \"entailment\", \"idx\": 0}\n";
    char buf[1024];
    /* not JSON, on line 2 with its column */
    snprintf(buf, sizeof buf, "%s{\"premise\": \"a\",, }\n", rte_ok);
    expect_error("rte", buf, true, RT_ERR_FORMAT, "bad.jsonl:2:", "invalid JSON");
    /* not an object */
    snprintf(buf, sizeof buf, "%s%s[1, 2]\n", rte_ok, rte_ok);
    expect_error("rte", buf, true, RT_ERR_FORMAT, "bad.jsonl:3: the line is an array", "expected a JSON object");
    /* missing field */
    expect_error("rte", "{\"premise\": \"a\", \"label\": \"entailment\", \"idx\": 0}", true, RT_ERR_FORMAT,
                 "bad.jsonl:1: field 'hypothesis' is missing", "expected a string");
    /* mistyped fields */
    expect_error("rte", "{\"premise\": 3, \"hypothesis\": \"b\", \"label\": \"entailment\", \"idx\": 0}", true,
                 RT_ERR_FORMAT, "bad.jsonl:1: field 'premise' is the number 3", "expected a string");
    expect_error("cb", "{\"premise\": \"a\", \"hypothesis\": \"b\", \"label\": \"entailment\", \"idx\": 1.5}", true,
                 RT_ERR_FORMAT, "field 'idx' is the number 1.5", "integer");
    /* label not in the set, of the wrong type, missing where required */
    expect_error("cb", "{\"premise\": \"a\", \"hypothesis\": \"b\", \"label\": \"maybe\", \"idx\": 0}", true,
                 RT_ERR_FORMAT, "bad.jsonl:1: field 'label' is 'maybe'", "entailment, contradiction or neutral");
    expect_error("boolq", "{\"passage\": \"p\", \"question\": \"q\", \"label\": \"true\", \"idx\": 0}", true,
                 RT_ERR_FORMAT, "field 'label' is a string", "true or false");
    expect_error("copa",
                 "{\"premise\": \"p\", \"choice1\": \"a\", \"choice2\": \"b\", \"question\": \"cause\", \"label\": 2, "
                 "\"idx\": 0}",
                 true, RT_ERR_FORMAT, "field 'label' is the number 2", "0 or 1");
    expect_error("copa",
                 "{\"premise\": \"p\", \"choice1\": \"a\", \"choice2\": \"b\", \"question\": \"why\", \"label\": 0, "
                 "\"idx\": 0}",
                 true, RT_ERR_FORMAT, "field 'question' is 'why'", "cause or effect");
    expect_error("wic", "{\"word\": \"w\", \"sentence1\": \"a\", \"sentence2\": \"b\", \"idx\": 0}", true,
                 RT_ERR_FORMAT, "bad.jsonl:1: field 'label' is missing", NULL);
    /* nested: WSC target and MultiRC answers name their path */
    expect_error("wsc",
                 "{\"text\": \"t\", \"target\": {\"span1_text\": \"t\", \"span2_text\": \"x\", \"span1_index\": 0}, "
                 "\"idx\": 0, \"label\": true}",
                 true, RT_ERR_FORMAT, "bad.jsonl:1: target: field 'span2_index' is missing", NULL);
    expect_error("wsc",
                 "{\"text\": \"t\", \"target\": {\"span1_text\": \"t\", \"span2_text\": \"x\", \"span1_index\": 0, "
                 "\"span2_index\": -1}, \"idx\": 0, \"label\": true}",
                 true, RT_ERR_FORMAT, "field 'span2_index' is -1", "non-negative");
    expect_error("multirc",
                 "{\"idx\": 0, \"passage\": {\"text\": \"p\", \"questions\": [{\"question\": \"q\", \"idx\": 0, "
                 "\"answers\": [{\"text\": \"a\", \"idx\": 0, \"label\": 1}, {\"text\": \"b\", \"idx\": 1, \"label\": "
                 "true}]}]}}",
                 true, RT_ERR_FORMAT, "bad.jsonl:1: passage.questions[0].answers[1]: field 'label' is a boolean",
                 "0 or 1");
    expect_error("multirc", "{\"idx\": 0, \"passage\": {\"text\": \"p\", \"questions\": 3}}", true, RT_ERR_FORMAT,
                 "passage: field 'questions' is a number", "array");
    /* invalid UTF-8, in t5-finetune's words: a sequence cut short, a stray byte inside a string on
     * line 3 after a BOM and a CRLF line (the byte counts from the line's start), an overlong '/',
     * an encoded surrogate, and an escape that decodes to a lone surrogate */
    expect_error("rte", "{\"premise\": \"caf\xC3\", \"hypothesis\": \"b\", \"label\": \"entailment\", \"idx\": 0}",
                 true, RT_ERR_FORMAT, "bad.jsonl:1: invalid UTF-8 at byte 17 of the line", NULL);
    snprintf(buf, sizeof buf, "\xEF\xBB\xBF%.*s\r\n%s{\"premise\": \"a\", \"hypothesis\": \"b\xFF\", \"idx\": 2}\n",
             (int)strlen(rte_ok) - 1, rte_ok, rte_ok);
    expect_error("rte", buf, true, RT_ERR_FORMAT, "bad.jsonl:3: invalid UTF-8 at byte 34 of the line", NULL);
    expect_error("rte", "{\"premise\": \"\xC0\xAF\", \"hypothesis\": \"b\", \"label\": \"entailment\", \"idx\": 0}",
                 true, RT_ERR_FORMAT, "bad.jsonl:1: invalid UTF-8 at byte 14 of the line", NULL);
    expect_error("rte", "{\"premise\": \"\xED\xA0\x80\", \"hypothesis\": \"b\", \"label\": \"entailment\", \"idx\": 0}",
                 true, RT_ERR_FORMAT, "bad.jsonl:1: invalid UTF-8 at byte 14 of the line", NULL);
    expect_error("rte", "{\"premise\": \"\\udc00\", \"hypothesis\": \"b\", \"label\": \"entailment\", \"idx\": 0}",
                 true, RT_ERR_FORMAT, "bad.jsonl:1:", "invalid JSON");
    /* blank line in the middle; empty file */
    snprintf(buf, sizeof buf, "%s\n%s", rte_ok, rte_ok);
    expect_error("rte", buf, true, RT_ERR_FORMAT, "bad.jsonl:2: blank line", NULL);
    expect_error("rte", "\n\n", true, RT_ERR_FORMAT, "bad.jsonl:1: no records", NULL);

    /* Fine: BOM, CRLF, trailing blank lines, test rows without labels, extra keys ignored. */
    data_sg_examples ex;
    const char ok[] =
        "\xEF\xBB\xBF{\"premise\": \"\\u201cp\\u201d\", \"hypothesis\": \"h\", \"idx\": 7, \"x\": [1]}\r\n"
        "{\"premise\": \"q\", \"hypothesis\": \"h\", \"label\": \"not_entailment\", \"idx\": 8}\r\n\r\n";
    TZ_EXPECT_OK(data_sg_parse(data_sg_task_find("rte"), "ok.jsonl", ok, sizeof ok - 1, false, &ex));
    TZ_EXPECT(ex.n == 2 && ex.ex[0].label == DATA_SG_LABEL_NONE && ex.ex[0].idx == 7 && ex.ex[1].label == 1 &&
                  ex.ex[1].line == 2 && strcmp(ex.ex[0].text_a, "\xE2\x80\x9Cp\xE2\x80\x9D") == 0,
              "ok file: n %zu", ex.n);
    data_sg_examples_free(&ex);
    /* the same file where labels are required */
    rt_status st = data_sg_parse(data_sg_task_find("rte"), "ok.jsonl", ok, sizeof ok - 1, true, &ex);
    TZ_EXPECT(st == RT_ERR_FORMAT && contains(rt_error_message(), "ok.jsonl:1: field 'label' is missing"), "%s",
              rt_error_message());

    /* on disk: a bad file written to a temporary folder, and a missing one */
    const char *dir = tz_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/val.jsonl", dir);
    FILE *f = fopen(path, "wb");
    fputs(rte_ok, f);
    fputs("{\"premise\": \"a\", \"hypothesis\": \"b\", \"label\": \"yes\", \"idx\": 1}\n", f);
    fclose(f);
    st = data_sg_load_split(data_sg_task_find("rte"), dir, "val", &ex);
    char want[600];
    snprintf(want, sizeof want, "%s:2: field 'label' is 'yes'", path);
    TZ_EXPECT(st == RT_ERR_FORMAT && contains(rt_error_message(), want), "%s", rt_error_message());
    remove(path);
    st = data_sg_load_split(data_sg_task_find("wic"), dir, "train", &ex);
    TZ_EXPECT(st == RT_ERR_IO && contains(rt_error_message(), "train.jsonl: not found") &&
                  contains(rt_error_message(), "WiC.zip"),
              "%s", rt_error_message());
    rmdir(dir);
}

/* ---- metrics ---- */

static void test_metrics(void) {
    /* Inputs made by these formulas, and the reference numbers printed, by
     * scripts/golden/gen_superglue_golden.py with scikit-learn 1.9.1 (accuracy_score,
     * f1_score(average='macro') and f1_score binary) and FlagAI's multirc_em definition. */
    int32_t lab[64], pred[64], q[64];
    for (int i = 0; i < 60; i++) {
        lab[i] = (i * 7 + 3) % 3;
        pred[i] = (i * 13) % 5 != 0 ? lab[i] : (lab[i] + 1 + i % 2) % 3;
        if (i % 11 == 4) pred[i] = 2;
    }
    metric_sg_score m[METRIC_SG_MAX_SCORES];
    int nm = 0;
    TZ_EXPECT_OK(metric_superglue("cb", pred, lab, NULL, 60, m, &nm));
    TZ_EXPECT(nm == 2 && strcmp(m[0].name, "accuracy") == 0 && strcmp(m[1].name, "f1-macro") == 0, "cb names");
    TZ_EXPECT(fabs(m[0].value - 0.75) < 1e-12, "cb acc %.17g", m[0].value);
    TZ_EXPECT(fabs(m[1].value - 0.75008630700185164) < 1e-12, "cb macro f1 %.17g", m[1].value);

    /* sklearn averages over the classes present: class 2 in neither gives the 2-class mean */
    for (int i = 0; i < 45; i++) {
        lab[i] = (i * 5 + 1) % 2;
        pred[i] = i % 4 != 0 ? lab[i] : 1 - lab[i];
        if (i % 9 == 2) pred[i] = 1;
    }
    double f = metric_macro_f1(pred, lab, 45, 3);
    TZ_EXPECT(fabs(f - 0.70168281489036211) < 1e-12, "two-class macro f1 %.17g", f);

    for (int i = 0; i < 64; i++) {
        q[i] = (i * 5) % 13;
        lab[i] = (i * 3 + i / 7) % 2;
        pred[i] = (i % 6 != 1 && i % 10 != 3) ? lab[i] : 1 - lab[i];
    }
    TZ_EXPECT_OK(metric_superglue("multirc", pred, lab, q, 64, m, &nm));
    TZ_EXPECT(nm == 3 && strcmp(m[0].name, "f1a") == 0 && strcmp(m[1].name, "em") == 0, "multirc names");
    TZ_EXPECT(fabs(m[0].value - 0.7142857142857143) < 1e-12, "f1a %.17g", m[0].value);
    TZ_EXPECT(fabs(m[1].value - 0.15384615384615385) < 1e-12, "em %.17g (2 of 13 questions)", m[1].value);
    TZ_EXPECT(fabs(m[2].value - 0.75) < 1e-12, "multirc acc %.17g", m[2].value);

    /* unlabelled rows (-1) are skipped */
    int32_t l2[4] = {1, -1, 0, -1}, p2[4] = {1, 0, 1, 1};
    TZ_EXPECT_OK(metric_superglue("rte", p2, l2, NULL, 4, m, &nm));
    TZ_EXPECT(nm == 1 && m[0].value == 0.5, "rte acc %.17g", m[0].value);
    TZ_EXPECT(metric_superglue("mnli", p2, l2, NULL, 4, m, &nm) == RT_ERR_CONFIG, "unknown task");
}

/* ---- patterns ---- */

/* The example of task in its val file that a golden case names: by line, or for MultiRC by
 * question and answer idx. */
/* The golden's example, by its idx (and question_idx: MultiRC's idx numbers answer options). Its
 * line is where it sat in the full file; the fixture may hold it on another line. */
static const data_sg_example *find_example(const data_sg_examples *ex, const cJSON *c) {
    int idx = cJSON_GetObjectItem(c, "idx")->valueint, question_idx = cJSON_GetObjectItem(c, "question_idx")->valueint;
    for (size_t i = 0; i < ex->n; i++)
        if (ex->ex[i].idx == idx && ex->ex[i].question_idx == question_idx) return &ex->ex[i];
    return NULL;
}

static void test_pvp_golden(void) {
    cJSON *root = NULL;
    TZ_EXPECT_OK(rt_json_load(tz_source_path("tests/golden/superglue/pvp_golden.json"), &root));
    if (!root) return;
    data_sg_examples sets[DATA_SG_N_TASKS];
    memset(sets, 0, sizeof sets);
    int n_cases = 0, tasks_seen[DATA_SG_N_TASKS] = {0};
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        const data_sg_task *t = data_sg_task_find(cJSON_GetObjectItem(c, "task")->valuestring);
        int pattern = cJSON_GetObjectItem(c, "pattern")->valueint;
        if (!sets[t->id].ex) sets[t->id] = load_val(t->name);
        const data_sg_example *e = find_example(&sets[t->id], c);
        TZ_EXPECT(e != NULL, "%s: golden example not found", t->name);
        if (!e) continue;
        data_pvp_filled got;
        rt_status st = data_pvp_fill(t, pattern, e, &got);
        TZ_EXPECT(st == RT_OK, "%s pattern %d line %d: %s", t->name, pattern, e->line, rt_error_message());
        if (st != RT_OK) continue;
        n_cases++;
        tasks_seen[t->id] = 1;
        const cJSON *parts = cJSON_GetObjectItem(c, "parts");
        int n = cJSON_GetArraySize(parts);
        TZ_EXPECT(got.n_parts == n, "%s pattern %d: %d parts, FlagAI has %d", t->name, pattern, got.n_parts, n);
        for (int i = 0; i < n && i < got.n_parts; i++) {
            const cJSON *p = cJSON_GetArrayItem(parts, i);
            const data_pvp_part *g = &got.parts[i];
            bool mask = cJSON_IsTrue(cJSON_GetObjectItem(p, "mask"));
            int seg = cJSON_GetObjectItem(p, "segment")->valueint;
            TZ_EXPECT(g->is_mask == mask && g->segment == seg, "%s p%d part %d: mask %d/%d segment %d/%d", t->name,
                      pattern, i, g->is_mask, mask, g->segment, seg);
            if (mask || g->is_mask) continue;
            const char *want = cJSON_GetObjectItem(p, "text")->valuestring;
            bool sh = cJSON_IsTrue(cJSON_GetObjectItem(p, "shortenable"));
            TZ_EXPECT(strcmp(g->text, want) == 0 && g->shortenable == sh,
                      "%s p%d part %d:\n  got  '%s' (shortenable %d)\n  want '%s' (%d)", t->name, pattern, i, g->text,
                      g->shortenable, want, sh);
        }
        char *joined = data_pvp_join(&got, "[MASK]");
        const char *want_joined = cJSON_GetObjectItem(c, "joined")->valuestring;
        TZ_EXPECT(joined && strcmp(joined, want_joined) == 0, "%s p%d joined:\n  got  '%s'\n  want '%s'", t->name,
                  pattern, joined, want_joined);
        free(joined);
        const cJSON *verb = cJSON_GetObjectItem(c, "verbalizers");
        for (int l = 0; verb && l < cJSON_GetArraySize(verb); l++) {
            const char *v = data_pvp_verbalizer(t->id, pattern, l);
            const char *want = cJSON_GetArrayItem(verb, l)->valuestring;
            TZ_EXPECT(v && strcmp(v, want) == 0, "%s p%d verbalizer %d: '%s' want '%s'", t->name, pattern, l,
                      v ? v : "(null)", want);
        }
        const cJSON *cand = cJSON_GetObjectItem(c, "candidates");
        TZ_EXPECT((cand != NULL) == data_pvp_is_multi_token(t->id) && got.n_candidates == cJSON_GetArraySize(cand),
                  "%s: %d candidates", t->name, got.n_candidates);
        for (int k = 0; cand && k < cJSON_GetArraySize(cand) && k < got.n_candidates; k++)
            TZ_EXPECT(strcmp(got.candidates[k], cJSON_GetArrayItem(cand, k)->valuestring) == 0, "%s candidate %d '%s'",
                      t->name, k, got.candidates[k]);
        data_pvp_filled_free(&got);
    }
    TZ_EXPECT(n_cases == 39, "golden cases checked: %d", n_cases);
    for (int k = 0; k < DATA_SG_N_TASKS; k++) {
        TZ_EXPECT(tasks_seen[k], "task %s has a golden case", data_sg_task_get((data_sg_task_id)k)->name);
        data_sg_examples_free(&sets[k]);
    }
    cJSON_Delete(root);
}

/* One case written out, so that a reader sees what a pattern makes: FlagAI's RtePVP pattern 0
 * (pvp.py:954-958) on RTE val line 1, as gen_superglue_golden.py printed it. */
static void test_pvp_rte_by_hand(void) {
    data_sg_examples ex = load_val("rte");
    if (!ex.n) return;
    const data_sg_task *t = data_sg_task_find("rte");
    data_pvp_filled f;
    TZ_EXPECT_OK(data_pvp_fill(t, data_pvp_default_pattern(DATA_SG_RTE), &ex.ex[0], &f));
    char *s = data_pvp_join(&f, "[MASK]");
    TZ_EXPECT(strcmp(s, "\"Christopher Reeve had an accident\" ?[MASK], \"Dana Reeve, the widow of the actor "
                        "Christopher Reeve, has died of lung cancer at age 44, according to the Christopher Reeve "
                        "Foundation.\"") == 0,
              "'%s'", s);
    TZ_EXPECT(f.n_parts == 8 && f.parts[3].is_mask && f.parts[3].segment == 1 && f.parts[1].shortenable &&
                  f.parts[6].shortenable && !f.parts[0].shortenable,
              "rte parts");
    free(s);
    data_pvp_filled_free(&f);
    TZ_EXPECT(data_pvp_fill(t, 5, &ex.ex[0], &f) == RT_ERR_CONFIG && contains(rt_error_message(), "patterns 0 to 4"),
              "%s", rt_error_message());
    TZ_EXPECT(data_pvp_n_patterns(DATA_SG_BOOLQ) == 6 && data_pvp_n_patterns(DATA_SG_COPA) == 2 &&
                  data_pvp_n_patterns(DATA_SG_WSC) == 3,
              "pattern counts");
    TZ_EXPECT(data_pvp_verbalizer(DATA_SG_COPA, 0, 0) == NULL && data_pvp_verbalizer(DATA_SG_RTE, 0, 2) == NULL,
              "no verbalizer");
    data_sg_examples_free(&ex);

    /* A WSC pronoun index that no repair fixes is an error naming the example. */
    data_sg_example w = {.text_a = "He said it was fine .",
                         .text_b = "He",
                         .text_c = "they",
                         .span1_index = 0,
                         .span2_index = 2,
                         .idx = 9,
                         .line = 4,
                         .label = 1,
                         .passage_idx = -1,
                         .question_idx = -1};
    TZ_EXPECT(data_pvp_fill(data_sg_task_find("wsc"), 0, &w, &f) == RT_ERR_FORMAT &&
                  contains(rt_error_message(), "wsc line 4 (idx 9): span2_text 'they' is not word 2"),
              "%s", rt_error_message());
    w.text_c = "it";
    w.span2_index = 9;
    TZ_EXPECT(data_pvp_fill(data_sg_task_find("wsc"), 0, &w, &f) == RT_ERR_FORMAT &&
                  contains(rt_error_message(), "span2_index 9 is past the text's 6 words"),
              "%s", rt_error_message());
    /* A pronoun glued to punctuation is split off and marked, as processor.py:356-360 does. */
    w.text_a = "I told him, then left.";
    w.text_c = "him";
    w.span2_index = 2;
    TZ_EXPECT_OK(data_pvp_fill(data_sg_task_find("wsc"), 0, &w, &f));
    TZ_EXPECT(f.n_parts > 0 && strcmp(f.parts[0].text, "I told *him* , then left.") == 0, "'%s'",
              f.n_parts ? f.parts[0].text : "");
    data_pvp_filled_free(&f);
}

int main(void) {
    test_real_counts();
    test_real_fields();
    test_bad_lines();
    test_metrics();
    test_pvp_golden();
    test_pvp_rte_by_hand();
    return tz_test_result("test_data_superglue");
}
