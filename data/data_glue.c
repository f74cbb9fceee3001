/* The GLUE task table and the loader that turns a task's TSV file into examples. The table
 * is the only place that knows a task's file layout; the loader is generic over it. */
#include "data/data_glue.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_tsv.h"

/* HF `datasets` glue/rte ClassLabel order, so class ids match models fine-tuned with HF. */
static const char *const rte_labels[] = {"entailment", "not_entailment"};

static const data_glue_task glue_tasks[] = {
    /* MRPC: Quality, #1 ID, #2 ID, #1 String, #2 String; test: index, #1 ID, #2 ID, #1 String, #2 String */
    {"mrpc", "glue-mrpc", "train.tsv", "dev.tsv", "test.tsv",
     {true, 3, 4, 0}, {true, 3, 4, -1}, 2, NULL, DATA_METRIC_ACC_F1},
    /* SST-2: sentence, label; test: index, sentence */
    {"sst2", "glue-sst2", "train.tsv", "dev.tsv", "test.tsv",
     {true, 0, -1, 1}, {true, 1, -1, -1}, 2, NULL, DATA_METRIC_ACC},
    /* RTE: index, sentence1, sentence2, label (string); test: index, sentence1, sentence2 */
    {"rte", "glue-rte", "train.tsv", "dev.tsv", "test.tsv",
     {true, 1, 2, 3}, {true, 1, 2, -1}, 2, rte_labels, DATA_METRIC_ACC},
    /* WNLI: as RTE but numeric labels (1 = entailment); there is no train.tsv in shared data. */
    {"wnli", "glue-wnli", "train.tsv", "dev.tsv", "test.tsv",
     {true, 1, 2, 3}, {true, 1, 2, -1}, 2, NULL, DATA_METRIC_ACC},
    /* CoLA as released (raw/, no header): source, label, original label, sentence. GLUE's dev
     * split is in_domain_dev + out_of_domain_dev; load both and evaluate on the union. GLUE's
     * test.tsv (index, sentence) uses the unlabeled layout. */
    {"cola", "glue-cola", "raw/in_domain_train.tsv", "raw/in_domain_dev.tsv", "test.tsv",
     {false, 3, -1, 1}, {true, 1, -1, -1}, 2, NULL, DATA_METRIC_MCC},
};

const data_glue_task *data_glue_task_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof glue_tasks / sizeof glue_tasks[0]; i++)
        if (strcmp(glue_tasks[i].name, name) == 0) return &glue_tasks[i];
    return NULL;
}

const char *data_glue_task_names(void) { return "mrpc, sst2, rte, wnli, cola"; }

static int max3(int a, int b, int c) {
    int m = a > b ? a : b;
    return m > c ? m : c;
}

/* Class id of a label field, or -1. */
static int32_t glue_parse_label(const data_glue_task *task, const char *s) {
    if (task->label_names) {
        for (int k = 0; k < task->n_labels; k++)
            if (strcmp(task->label_names[k], s) == 0) return k;
        return -1;
    }
    /* Strict decimal: "1" yes; "", " 1", "1.0", "+1" no (none appears in GLUE files). */
    if (!*s) return -1;
    long v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
        if (v >= task->n_labels) return -1;
    }
    return (int32_t)v;
}

static void glue_expected_labels(const data_glue_task *task, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    for (int k = 0; k < task->n_labels && n + 1 < cap; k++) {
        const char *sep = k == 0 ? "" : (k == task->n_labels - 1 ? " or " : ", ");
        int w = task->label_names ? snprintf(buf + n, cap - n, "%s'%s'", sep, task->label_names[k])
                                  : snprintf(buf + n, cap - n, "%s%d", sep, k);
        if (w < 0) break;
        n += (size_t)w;
    }
}

rt_status data_glue_load(const data_glue_task *task, const char *path, bool has_labels, data_examples *out) {
    rt_status st = RT_OK;
    data_tsv tsv;
    memset(out, 0, sizeof *out);
    memset(&tsv, 0, sizeof tsv);
    RT_CHECK(task != NULL && path != NULL, "task=%p path=%p", (const void *)task, (const void *)path);
    const data_glue_layout *L = has_labels ? &task->labeled : &task->unlabeled;
    RT_CHECK(L->text_a >= 0 && (!has_labels || L->label >= 0), "task %s: bad layout", task->name);
    RT_TRY(data_tsv_read(path, L->header, max3(L->text_a, L->text_b, L->label) + 1, &tsv));

    size_t n = tsv.n_rows;
    out->n = n;
    out->n_labels = task->n_labels;
    size_t alloc_n = n ? n : 1;
    out->text_a = malloc(alloc_n * sizeof *out->text_a);
    out->text_b = L->text_b >= 0 ? malloc(alloc_n * sizeof *out->text_b) : NULL;
    out->labels = malloc(alloc_n * sizeof *out->labels);
    out->line = malloc(alloc_n * sizeof *out->line);
    if (!out->text_a || (L->text_b >= 0 && !out->text_b) || !out->labels || !out->line)
        RT_FAIL(RT_ERR_NOMEM, "%s: out of memory for %zu examples", path, n);

    for (size_t i = 0; i < n; i++) {
        out->text_a[i] = data_tsv_field(&tsv, i, L->text_a);
        if (out->text_b) out->text_b[i] = data_tsv_field(&tsv, i, L->text_b);
        out->line[i] = tsv.row_line[i] > INT32_MAX ? INT32_MAX : (int32_t)tsv.row_line[i];
        out->labels[i] = DATA_LABEL_NONE;
        if (L->label >= 0) {
            const char *s = data_tsv_field(&tsv, i, L->label);
            int32_t y = glue_parse_label(task, s);
            if (y < 0) {
                char expected[256];
                glue_expected_labels(task, expected, sizeof expected);
                char colname[80] = "";
                if (tsv.header && L->label < tsv.n_header)
                    snprintf(colname, sizeof colname, " (%s)", tsv.header[L->label]);
                RT_FAIL(RT_ERR_FORMAT, "%s:%zu: field %d%s: expected a %s label %s, found '%.40s'", path,
                        tsv.row_line[i], L->label, colname, task->name, expected, s);
            }
            out->labels[i] = y;
        }
    }
    /* The strings point into the file buffer: keep it, drop the index. */
    out->path = rt_xstrdup(path);
    out->storage = tsv.buf;
    tsv.buf = NULL;
    data_tsv_free(&tsv);
    return RT_OK;

fail:
    data_tsv_free(&tsv);
    data_examples_free(out);
    return st;
}

void data_examples_free(data_examples *ex) {
    if (!ex) return;
    free(ex->text_a);
    free(ex->text_b);
    free(ex->labels);
    free(ex->line);
    free(ex->path);
    free(ex->storage);
    memset(ex, 0, sizeof *ex);
}
