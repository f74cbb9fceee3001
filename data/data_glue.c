/* The GLUE task table and the loader that turns a task's TSV files into examples. The table
 * is the only place that knows a task's file layout; the loader is generic over it. */
#include "data/data_glue.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data_tsv.h"

/* HF `datasets` glue ClassLabel orders, so class ids match models fine-tuned with HF. */
static const char *const rte_labels[] = {"entailment", "not_entailment"};
static const char *const qnli_labels[] = {"entailment", "not_entailment"};
static const char *const mnli_labels[] = {"entailment", "neutral", "contradiction"};

/* clang-format off */
static const data_glue_task glue_tasks[] = {
    /* MRPC: Quality, #1 ID, #2 ID, #1 String, #2 String; test: index, #1 ID, #2 ID, #1 String, #2 String */
    {.name = "mrpc", .dir = "glue-mrpc", .train_file = "train.tsv", .dev_file = "dev.tsv", .test_file = "test.tsv",
     .labeled = {true, 3, 4, 0}, .unlabeled = {true, 3, 4, -1}, .n_labels = 2, .metric = DATA_METRIC_ACC_F1,
     .n_dev = 1, .dev = {{"dev", {"dev.tsv"}}}, .n_test = 1, .test = {{"test", {"test.tsv"}}}},
    /* SST-2: sentence, label; test: index, sentence */
    {.name = "sst2", .dir = "glue-sst2", .train_file = "train.tsv", .dev_file = "dev.tsv", .test_file = "test.tsv",
     .labeled = {true, 0, -1, 1}, .unlabeled = {true, 1, -1, -1}, .n_labels = 2, .metric = DATA_METRIC_ACC,
     .n_dev = 1, .dev = {{"dev", {"dev.tsv"}}}, .n_test = 1, .test = {{"test", {"test.tsv"}}}},
    /* RTE: index, sentence1, sentence2, label (string); test: index, sentence1, sentence2 */
    {.name = "rte", .dir = "glue-rte", .train_file = "train.tsv", .dev_file = "dev.tsv", .test_file = "test.tsv",
     .labeled = {true, 1, 2, 3}, .unlabeled = {true, 1, 2, -1}, .n_labels = 2, .label_names = rte_labels,
     .metric = DATA_METRIC_ACC, .n_dev = 1, .dev = {{"dev", {"dev.tsv"}}}, .n_test = 1,
     .test = {{"test", {"test.tsv"}}}},
    /* WNLI: as RTE but numeric labels (1 = entailment); there is no train.tsv in shared data. */
    {.name = "wnli", .dir = "glue-wnli", .train_file = "train.tsv", .dev_file = "dev.tsv", .test_file = "test.tsv",
     .labeled = {true, 1, 2, 3}, .unlabeled = {true, 1, 2, -1}, .n_labels = 2, .metric = DATA_METRIC_ACC,
     .n_dev = 1, .dev = {{"dev", {"dev.tsv"}}}, .n_test = 1, .test = {{"test", {"test.tsv"}}}},
    /* CoLA as released (raw/, no header): source, label, original label, sentence. GLUE's dev
     * split is in_domain_dev + out_of_domain_dev (byte for byte GLUE's CoLA/dev.tsv): dev[0].
     * dev_file stays the in-domain file alone for callers that read one file. GLUE's test.tsv
     * (index, sentence) uses the unlabeled layout. */
    {.name = "cola", .dir = "glue-cola", .train_file = "raw/in_domain_train.tsv", .dev_file = "raw/in_domain_dev.tsv",
     .test_file = "test.tsv", .labeled = {false, 3, -1, 1}, .unlabeled = {true, 1, -1, -1}, .n_labels = 2,
     .metric = DATA_METRIC_MCC, .n_dev = 1, .dev = {{"dev", {"raw/in_domain_dev.tsv", "raw/out_of_domain_dev.tsv"}}},
     .n_test = 1, .test = {{"test", {"test.tsv"}}}},
    /* STS-B: index, genre, filename, year, old_index, source1, source2, sentence1, sentence2,
     * score (a float 0..5); test: the same without score. */
    {.name = "stsb", .dir = "glue-stsb", .train_file = "train.tsv", .dev_file = "dev.tsv", .test_file = "test.tsv",
     .labeled = {true, 7, 8, 9}, .unlabeled = {true, 7, 8, -1}, .n_labels = 1,
     .metric = DATA_METRIC_PEARSON_SPEARMAN, .type = DATA_TASK_REGRESSION, .target_min = 0.0, .target_max = 5.0,
     .n_dev = 1, .dev = {{"dev", {"dev.tsv"}}}, .n_test = 1, .test = {{"test", {"test.tsv"}}}},
    /* QQP: id, qid1, qid2, question1, question2, is_duplicate; test: id, question1, question2 */
    {.name = "qqp", .dir = "glue-qqp", .train_file = "train.tsv", .dev_file = "dev.tsv", .test_file = "test.tsv",
     .labeled = {true, 3, 4, 5}, .unlabeled = {true, 1, 2, -1}, .n_labels = 2, .metric = DATA_METRIC_ACC_F1,
     .n_dev = 1, .dev = {{"dev", {"dev.tsv"}}}, .n_test = 1, .test = {{"test", {"test.tsv"}}}},
    /* MNLI: index, promptID, pairID, genre, sentence1_binary_parse, sentence2_binary_parse,
     * sentence1_parse, sentence2_parse, sentence1, sentence2, then label1 and gold_label
     * (train) or label1..label5 and gold_label (dev): the label is the last field. Test: the
     * first ten columns. */
    {.name = "mnli", .dir = "glue-mnli", .train_file = "train.tsv", .dev_file = "dev_matched.tsv",
     .test_file = "test_matched.tsv", .labeled = {true, 8, 9, DATA_GLUE_COL_LAST}, .unlabeled = {true, 8, 9, -1},
     .n_labels = 3, .label_names = mnli_labels, .metric = DATA_METRIC_ACC, .n_dev = 2,
     .dev = {{"dev_matched", {"dev_matched.tsv"}}, {"dev_mismatched", {"dev_mismatched.tsv"}}}, .n_test = 2,
     .test = {{"test_matched", {"test_matched.tsv"}}, {"test_mismatched", {"test_mismatched.tsv"}}}},
    /* QNLI: index, question, sentence, label (string); test: index, question, sentence */
    {.name = "qnli", .dir = "glue-qnli", .train_file = "train.tsv", .dev_file = "dev.tsv", .test_file = "test.tsv",
     .labeled = {true, 1, 2, 3}, .unlabeled = {true, 1, 2, -1}, .n_labels = 2, .label_names = qnli_labels,
     .metric = DATA_METRIC_ACC, .n_dev = 1, .dev = {{"dev", {"dev.tsv"}}}, .n_test = 1,
     .test = {{"test", {"test.tsv"}}}},
};
/* clang-format on */

/* CoLA as GLUE's download script writes it (CoLA/train.tsv, dev.tsv: the raw layout, dev =
 * in_domain_dev + out_of_domain_dev already joined); data_glue_task_for_dir picks it. */
/* clang-format off */
static const data_glue_task glue_cola_glue_layout = {
    .name = "cola", .dir = "glue-cola", .train_file = "train.tsv", .dev_file = "dev.tsv", .test_file = "test.tsv",
    .labeled = {false, 3, -1, 1}, .unlabeled = {true, 1, -1, -1}, .n_labels = 2, .metric = DATA_METRIC_MCC,
    .n_dev = 1, .dev = {{"dev", {"dev.tsv"}}}, .n_test = 1, .test = {{"test", {"test.tsv"}}}};
/* clang-format on */

static bool glue_exists(const char *path, bool want_dir);

const data_glue_task *data_glue_task_for_dir(const data_glue_task *task, const char *dir) {
    char raw[4096], glue[4096];
    if (!task || !dir || strcmp(task->name, "cola") != 0) return task;
    snprintf(raw, sizeof raw, "%s/%s", dir, task->train_file);
    snprintf(glue, sizeof glue, "%s/%s", dir, glue_cola_glue_layout.train_file);
    return !glue_exists(raw, false) && glue_exists(glue, false) ? &glue_cola_glue_layout : task;
}

const data_glue_task *data_glue_task_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof glue_tasks / sizeof glue_tasks[0]; i++)
        if (strcmp(glue_tasks[i].name, name) == 0) return &glue_tasks[i];
    return NULL;
}

const char *data_glue_task_names(void) { return "cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte, wnli"; }

/* "train.tsv, dev_matched.tsv, dev_mismatched.tsv (test: test_matched.tsv, ...)" */
static void glue_expected_files(const data_glue_task *task, char *buf, size_t cap) {
    size_t n = 0;
#define GLUE_APPEND(...)                                  \
    do {                                                  \
        int w_ = snprintf(buf + n, cap - n, __VA_ARGS__); \
        if (w_ < 0 || (size_t)w_ >= cap - n) return;      \
        n += (size_t)w_;                                  \
    } while (0)
    buf[0] = '\0';
    GLUE_APPEND("%s", task->train_file);
    for (int s = 0; s < task->n_dev; s++)
        for (int f = 0; f < DATA_GLUE_MAX_FILES && task->dev[s].files[f]; f++)
            GLUE_APPEND(", %s", task->dev[s].files[f]);
    for (int s = 0; s < task->n_test; s++)
        for (int f = 0; f < DATA_GLUE_MAX_FILES && task->test[s].files[f]; f++)
            GLUE_APPEND("%s%s", s == 0 && f == 0 ? " (optional: " : ", ", task->test[s].files[f]);
    if (task->n_test > 0) GLUE_APPEND(")");
#undef GLUE_APPEND
}

/* The error for a missing file or folder: what is missing, what the task expects, where to
 * get it. The program cannot download: it says where to. */
static rt_status glue_missing(const data_glue_task *task, const char *what, const char *dir) {
    char files[512];
    glue_expected_files(task, files, sizeof files);
    const char *source = strcmp(task->name, "cola") == 0
                             ? "the CoLA public release (raw/ folder of cola_public_1.0, from the CoLA site of "
                               "NYU) or GLUE's CoLA folder (train.tsv, dev.tsv; gluebenchmark.com)"
                             : "the GLUE benchmark site (gluebenchmark.com, its download_glue_data.py script) or "
                               "the Hugging Face datasets hub (dataset 'glue', written out as these TSV files)";
    return rt_errorf(RT_ERR_IO,
                     "%s: not found; GLUE task %s expects these files in %s: %s; download them from %s and pass "
                     "that folder as the data directory",
                     what, task->name, dir ? dir : "its folder", files, source);
}

static bool glue_exists(const char *path, bool want_dir) {
    struct stat sb;
    if (stat(path, &sb) != 0) return false;
    return want_dir ? S_ISDIR(sb.st_mode) : true;
}

rt_status data_glue_check_dir(const data_glue_task *task, const char *dir) {
    RT_CHECK(task != NULL && dir != NULL, "task=%p dir=%p", (const void *)task, (const void *)dir);
    if (!glue_exists(dir, true)) return glue_missing(task, dir, dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, task->train_file);
    if (!glue_exists(path, false)) return glue_missing(task, path, dir);
    for (int s = 0; s < task->n_dev; s++)
        for (int f = 0; f < DATA_GLUE_MAX_FILES && task->dev[s].files[f]; f++) {
            snprintf(path, sizeof path, "%s/%s", dir, task->dev[s].files[f]);
            if (!glue_exists(path, false)) return glue_missing(task, path, dir);
        }
    return RT_OK;
}

/* The task folder of path: path without the task's relative file name it ends with (which
 * may hold a folder, as CoLA's raw/...), else without its last component. */
static bool glue_task_dir_of(const data_glue_task *task, const char *path, char *dir, size_t cap) {
    const char *names[2 + 2 * DATA_GLUE_MAX_SPLITS * DATA_GLUE_MAX_FILES];
    size_t k = 0;
    names[k++] = task->train_file;
    for (int s = 0; s < task->n_dev; s++)
        for (int f = 0; f < DATA_GLUE_MAX_FILES && task->dev[s].files[f]; f++) names[k++] = task->dev[s].files[f];
    for (int s = 0; s < task->n_test; s++)
        for (int f = 0; f < DATA_GLUE_MAX_FILES && task->test[s].files[f]; f++) names[k++] = task->test[s].files[f];
    size_t len = strlen(path);
    for (size_t j = 0; j < k; j++) {
        size_t nl = strlen(names[j]);
        if (len > nl && path[len - nl - 1] == '/' && strcmp(path + len - nl, names[j]) == 0) {
            snprintf(dir, cap, "%.*s", (int)(len - nl - 1), path);
            return true;
        }
    }
    const char *slash = strrchr(path, '/');
    if (!slash) return false;
    snprintf(dir, cap, "%.*s", (int)(slash - path), path);
    return true;
}

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

/* A regression target: a finite decimal number in the task's range, nothing around it. */
static bool glue_parse_target(const data_glue_task *task, const char *s, float *out) {
    if (!*s || *s == ' ' || *s == '\t') return false;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v) || v < task->target_min || v > task->target_max) return false;
    *out = (float)v;
    return true;
}

static void glue_expected_labels(const data_glue_task *task, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    if (task->type == DATA_TASK_REGRESSION) {
        snprintf(buf, cap, "number in [%g, %g]", task->target_min, task->target_max);
        return;
    }
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
    RT_CHECK(L->text_a >= 0 && (!has_labels || L->label >= 0 || L->label == DATA_GLUE_COL_LAST), "task %s: bad layout",
             task->name);
    const bool regression = task->type == DATA_TASK_REGRESSION;
    const bool label_last = L->label == DATA_GLUE_COL_LAST;
    if (!glue_exists(path, false)) {
        /* Name the folder when it is the folder that is missing: the usual first-run mistake. */
        char dir[4096];
        bool have_dir = glue_task_dir_of(task, path, dir, sizeof dir);
        RT_TRY(glue_missing(task, have_dir && !glue_exists(dir, true) ? dir : path, have_dir ? dir : NULL));
    }
    /* The last field must come after both texts. */
    int min_cols =
        label_last ? (L->text_a > L->text_b ? L->text_a : L->text_b) + 2 : max3(L->text_a, L->text_b, L->label) + 1;
    RT_TRY(data_tsv_read(path, L->header, min_cols, &tsv));

    size_t n = tsv.n_rows;
    out->n = n;
    out->n_labels = task->n_labels;
    size_t alloc_n = n ? n : 1;
    out->text_a = malloc(alloc_n * sizeof *out->text_a);
    out->text_b = L->text_b >= 0 ? malloc(alloc_n * sizeof *out->text_b) : NULL;
    out->labels = malloc(alloc_n * sizeof *out->labels);
    out->targets = regression ? malloc(alloc_n * sizeof *out->targets) : NULL;
    out->target_width = regression;
    out->line = malloc(alloc_n * sizeof *out->line);
    if (!out->text_a || (L->text_b >= 0 && !out->text_b) || !out->labels || (regression && !out->targets) || !out->line)
        RT_FAIL(RT_ERR_NOMEM, "%s: out of memory for %zu examples", path, n);

    for (size_t i = 0; i < n; i++) {
        int ncols = data_tsv_ncols(&tsv, i);
        /* With the label found from the end, a row short of a field would silently take a
         * text as its label: require the header's width. */
        if (label_last && tsv.header && ncols != tsv.n_header)
            RT_FAIL(RT_ERR_FORMAT, "%s:%zu: expected %d tab-separated columns (as in the header), found %d", path,
                    tsv.row_line[i], tsv.n_header, ncols);
        out->text_a[i] = data_tsv_field(&tsv, i, L->text_a);
        if (out->text_b) out->text_b[i] = data_tsv_field(&tsv, i, L->text_b);
        out->line[i] = tsv.row_line[i] > INT32_MAX ? INT32_MAX : (int32_t)tsv.row_line[i];
        out->labels[i] = DATA_LABEL_NONE;
        if (regression) out->targets[i] = NAN;
        int col = label_last ? ncols - 1 : L->label;
        if (col < 0) continue;
        const char *s = data_tsv_field(&tsv, i, col);
        bool ok;
        if (regression) {
            ok = glue_parse_target(task, s, &out->targets[i]);
        } else {
            int32_t y = glue_parse_label(task, s);
            ok = y >= 0;
            out->labels[i] = y;
        }
        if (!ok) {
            char expected[256];
            glue_expected_labels(task, expected, sizeof expected);
            char colname[80] = "";
            if (tsv.header && col < tsv.n_header) snprintf(colname, sizeof colname, " (%s)", tsv.header[col]);
            RT_FAIL(RT_ERR_FORMAT, "%s:%zu: field %d%s: expected a %s label %s, found '%.40s'", path, tsv.row_line[i],
                    col, colname, task->name, expected, s);
        }
    }
    /* The strings point into the file buffer: keep it, drop the index. */
    out->path = rt_xstrdup(path);
    out->n_files = 1;
    out->files = rt_xmalloc(sizeof *out->files);
    out->files[0] = rt_xstrdup(path);
    out->file_end = rt_xmalloc(sizeof *out->file_end);
    out->file_end[0] = n;
    out->storage = tsv.buf;
    tsv.buf = NULL;
    data_tsv_free(&tsv);
    return RT_OK;

fail:
    data_tsv_free(&tsv);
    data_examples_free(out);
    return st;
}

/* Bytes of ex->storage that its strings use: everything up to the end of the last string. */
static size_t glue_storage_used(const data_examples *ex) {
    size_t used = 0;
    for (size_t i = 0; i < ex->n; i++) {
        size_t end = (size_t)(ex->text_a[i] - ex->storage) + strlen(ex->text_a[i]) + 1;
        if (end > used) used = end;
        if (ex->text_b) {
            end = (size_t)(ex->text_b[i] - ex->storage) + strlen(ex->text_b[i]) + 1;
            if (end > used) used = end;
        }
    }
    return used;
}

rt_status data_glue_load_split(const data_glue_task *task, const char *dir, const data_glue_split *split,
                               bool has_labels, data_examples *out) {
    rt_status st = RT_OK;
    data_examples parts[DATA_GLUE_MAX_FILES];
    memset(parts, 0, sizeof parts);
    memset(out, 0, sizeof *out);
    RT_CHECK(task != NULL && dir != NULL && split != NULL && split->files[0] != NULL, "task, dir and split");
    int nf = 0;
    char path[4096];
    for (; nf < DATA_GLUE_MAX_FILES && split->files[nf]; nf++) {
        snprintf(path, sizeof path, "%s/%s", dir, split->files[nf]);
        RT_TRY(data_glue_load(task, path, has_labels, &parts[nf]));
    }
    if (nf == 1) {
        *out = parts[0];
        return RT_OK;
    }

    /* Several files: one storage buffer holding each file's used bytes back to back, and the
     * string pointers moved into it. */
    size_t n = 0, bytes = 0, used[DATA_GLUE_MAX_FILES];
    for (int f = 0; f < nf; f++) {
        n += parts[f].n;
        used[f] = glue_storage_used(&parts[f]);
        bytes += used[f];
    }
    const bool pair = parts[0].text_b != NULL, regression = parts[0].targets != NULL;
    size_t alloc_n = n ? n : 1;
    out->n = n;
    out->n_labels = parts[0].n_labels;
    out->storage = malloc(bytes ? bytes : 1);
    out->text_a = malloc(alloc_n * sizeof *out->text_a);
    out->text_b = pair ? malloc(alloc_n * sizeof *out->text_b) : NULL;
    out->labels = malloc(alloc_n * sizeof *out->labels);
    out->targets = regression ? malloc(alloc_n * sizeof *out->targets) : NULL;
    out->target_width = regression;
    out->line = malloc(alloc_n * sizeof *out->line);
    if (!out->storage || !out->text_a || (pair && !out->text_b) || !out->labels || (regression && !out->targets) ||
        !out->line)
        RT_FAIL(RT_ERR_NOMEM, "%s/%s: out of memory for %zu examples", dir, split->files[0], n);
    out->n_files = (size_t)nf;
    out->files = rt_xcalloc((size_t)nf, sizeof *out->files);
    out->file_end = rt_xcalloc((size_t)nf, sizeof *out->file_end);

    size_t row = 0, off = 0, path_len = 0;
    for (int f = 0; f < nf; f++) {
        const data_examples *p = &parts[f];
        if (used[f]) memcpy(out->storage + off, p->storage, used[f]);
        for (size_t i = 0; i < p->n; i++, row++) {
            out->text_a[row] = out->storage + off + (size_t)(p->text_a[i] - p->storage);
            if (pair) out->text_b[row] = out->storage + off + (size_t)(p->text_b[i] - p->storage);
            out->labels[row] = p->labels[i];
            if (regression) out->targets[row] = p->targets[i];
            out->line[row] = p->line[i];
        }
        off += used[f];
        out->files[f] = p->path;
        parts[f].path = NULL; /* moved */
        out->file_end[f] = row;
        path_len += strlen(out->files[f]) + 3;
    }
    out->path = rt_xmalloc(path_len + 1);
    out->path[0] = '\0';
    for (int f = 0; f < nf; f++) {
        if (f) strcat(out->path, " + ");
        strcat(out->path, out->files[f]);
    }
    for (int f = 0; f < nf; f++) data_examples_free(&parts[f]);
    return RT_OK;

fail:
    for (int f = 0; f < nf; f++) data_examples_free(&parts[f]);
    data_examples_free(out);
    return st;
}

const char *data_examples_row_path(const data_examples *ex, size_t i) {
    for (size_t f = 0; f < ex->n_files; f++)
        if (i < ex->file_end[f]) return ex->files[f];
    return ex->path ? ex->path : "examples";
}

void data_examples_free(data_examples *ex) {
    if (!ex) return;
    free(ex->text_a);
    free(ex->text_b);
    free(ex->labels);
    free(ex->targets);
    free(ex->line);
    free(ex->path);
    free(ex->storage);
    for (size_t f = 0; f < ex->n_files; f++) free(ex->files[f]);
    free(ex->files);
    free(ex->file_end);
    memset(ex, 0, sizeof *ex);
}
