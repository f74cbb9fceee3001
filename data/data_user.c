/* A task from a user's files (see data_user.h): the columns, then the labels' kind and classes
 * from the train table, then each table's rows as examples. */
#include "data/data_user.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


void data_user_task_free(data_user_task *task) {
    if (!task) return;
    for (int k = 0; k < task->n_text; k++) free(task->text_col[k]);
    free(task->label_col);
    for (int k = 0; task->label_names && k < task->n_labels; k++) free(task->label_names[k]);
    free(task->label_names);
    memset(task, 0, sizeof *task);
}

/* A number as a CSV cell may write one: [sign] digits [. digits] [e [sign] digits], nothing around
 * it. *fraction: written with a fraction or an exponent. */
static bool user_number(const char *s, double *v, bool *fraction) {
    const char *p = s;
    if (*p == '-' || *p == '+') p++;
    size_t digits = 0;
    while (*p >= '0' && *p <= '9') p++, digits++;
    *fraction = false;
    if (*p == '.') {
        *fraction = true;
        p++;
        while (*p >= '0' && *p <= '9') p++, digits++;
    }
    if (!digits) return false;
    if (*p == 'e' || *p == 'E') {
        *fraction = true;
        p++;
        if (*p == '-' || *p == '+') p++;
        if (!(*p >= '0' && *p <= '9')) return false;
        while (*p >= '0' && *p <= '9') p++;
    }
    if (*p) return false;
    errno = 0;
    *v = strtod(s, NULL);
    return errno == 0 && isfinite(*v);
}

/* A cell read as a number: from JSON only a number, from CSV text that user_number takes. */
static bool user_cell_number(const data_table *t, size_t row, int col, double *v, bool *fraction) {
    const char *s = data_table_cell(t, row, col);
    data_cell_kind kind = data_table_kind(t, row, col);
    if (!s || (kind != DATA_CELL_TEXT && kind != DATA_CELL_NUMBER)) return false;
    if (kind == DATA_CELL_TEXT && t->kinds) return false; /* a JSON string holding digits stays text */
    if (!user_number(s, v, fraction)) return false;
    if (kind == DATA_CELL_NUMBER) *fraction = *v != floor(*v); /* JSON keeps no spelling: 1.0 is whole */
    return true;
}

/* A text column: some train cell holds text that is not a number. */
static bool user_is_text_column(const data_table *t, int col) {
    for (size_t r = 0; r < t->n_rows; r++) {
        double v;
        bool fraction;
        const char *s = data_table_cell(t, r, col);
        if (s && data_table_kind(t, r, col) == DATA_CELL_TEXT && !user_cell_number(t, r, col, &v, &fraction))
            return true;
    }
    return false;
}

static rt_status user_text_columns(const data_table *t, const data_user_opts *o, int label, data_user_task *out) {
    const char *names[2] = {NULL, NULL};
    char spec[512];
    if (o->text_columns) {
        snprintf(spec, sizeof spec, "%s", o->text_columns);
        char *comma = strchr(spec, ',');
        if (comma) *comma = '\0';
        names[0] = spec;
        names[1] = comma ? comma + 1 : NULL;
        if (!*names[0] || (names[1] && (!*names[1] || strchr(names[1], ','))))
            return rt_errorf(RT_ERR_USAGE, "--text-columns '%s': expected one column name or two, as A or A,B",
                             o->text_columns);
        for (int k = 0; k < 2 && names[k]; k++)
            if (data_table_col(t, names[k]) < 0) return data_table_missing_column(t, names[k], "--text-columns");
    } else if (data_table_col(t, "sentence1") >= 0 && data_table_col(t, "sentence2") >= 0) {
        names[0] = "sentence1";
        names[1] = "sentence2";
    } else if (data_table_col(t, "text") >= 0) {
        names[0] = "text";
    } else {
        for (int c = 0, k = 0; c < t->n_cols && k < 2; c++)
            if (c != label && user_is_text_column(t, c)) names[k++] = t->col_names[c];
        if (!names[0]) {
            char cols[512];
            data_table_columns(t, cols, sizeof cols);
            return rt_errorf(RT_ERR_USAGE,
                             "%s: no column holds text (its columns: %s); name the text column, or two, with "
                             "--text-columns A[,B]",
                             t->path, cols);
        }
    }
    for (int k = 0; k < 2 && names[k]; k++) {
        if (data_table_col(t, names[k]) == label)
            return rt_errorf(RT_ERR_USAGE, "--text-columns: '%s' is the label column", names[k]);
        out->text_col[out->n_text++] = rt_xstrdup(names[k]);
    }
    return RT_OK;
}

/* The class name of a label: a whole number's decimal text when the classes are whole numbers
 * ("09" is "9"), else the label itself. Returns s or buf. */
static const char *user_label_key(bool integer, const char *s, char *buf, size_t cap) {
    double v;
    bool fraction;
    if (!integer || !user_number(s, &v, &fraction) || fraction || fabs(v) >= 9007199254740992.0) return s;
    snprintf(buf, cap, "%.0f", v);
    return buf;
}

/* The class id of a label cell, or -1. */
static int user_class_of(const data_user_task *task, const char *s) {
    char buf[32];
    const char *key = user_label_key(task->integer_labels, s, buf, sizeof buf);
    for (int k = 0; k < task->n_labels; k++)
        if (strcmp(task->label_names[k], key) == 0) return k;
    return -1;
}

static int user_cmp_text(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int user_cmp_value(const void *a, const void *b) {
    double x = strtod(*(char *const *)a, NULL), y = strtod(*(char *const *)b, NULL);
    return (x > y) - (x < y);
}

/* The classes in --label-names' order. */
static rt_status user_named_classes(const data_user_opts *o, data_user_task *out) {
    const char *s = o->label_names;
    int n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    if (n < 2 || n > DATA_USER_MAX_LABELS)
        return rt_errorf(RT_ERR_USAGE, "--label-names '%.80s': expected two to %d class names, comma-separated", s,
                         DATA_USER_MAX_LABELS);
    out->label_names = rt_xcalloc((size_t)n, sizeof *out->label_names);
    for (const char *p = s;; p++) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0) return rt_errorf(RT_ERR_USAGE, "--label-names '%.80s': an empty name", s);
        char *name = rt_xmalloc(len + 1), buf[32];
        memcpy(name, p, len);
        name[len] = '\0';
        const char *key = user_label_key(out->integer_labels, name, buf, sizeof buf);
        if (user_class_of(out, key) >= 0) {
            rt_status st = rt_errorf(RT_ERR_USAGE, "--label-names: '%.80s' is given twice", key);
            free(name);
            return st;
        }
        out->label_names[out->n_labels++] = rt_xstrdup(key);
        free(name);
        if (!end) break;
        p = end;
    }
    return RT_OK;
}

/* The label column's kind over the train file, then its classes. */
static rt_status user_labels(const data_table *t, const data_user_opts *o, int col, data_user_task *out) {
    rt_status st = RT_OK;
    char where[400];
    bool all_numbers = true, any_fraction = false;
    data_cell_kind first_kind = DATA_CELL_TEXT;
    for (size_t r = 0; r < t->n_rows; r++) {
        const char *s = data_table_cell(t, r, col);
        data_cell_kind kind = data_table_kind(t, r, col);
        data_table_where(t, r, where, sizeof where);
        if (!s || !*s)
            return rt_errorf(RT_ERR_FORMAT, "%s: column '%s': the label is %s (every train row needs one)", where,
                             out->label_col, s ? "empty" : "missing");
        if (kind == DATA_CELL_LIST)
            return rt_errorf(RT_ERR_FORMAT,
                             "%s: column '%s': the label is a list (multi-label classification), which tunezoo "
                             "does not train yet; give one label a row",
                             where, out->label_col);
        if (kind == DATA_CELL_OBJECT)
            return rt_errorf(RT_ERR_FORMAT, "%s: column '%s': the label is an object (expected a class or a number)",
                             where, out->label_col);
        if (r == 0) first_kind = kind;
        if (t->kinds && kind != first_kind)
            return rt_errorf(RT_ERR_FORMAT, "%s: column '%s': the label is %s, but the first row's is %s (one kind "
                             "of label a column)", where, out->label_col, data_cell_kind_name(kind),
                             data_cell_kind_name(first_kind));
        double v;
        bool fraction;
        if (user_cell_number(t, r, col, &v, &fraction))
            any_fraction |= fraction;
        else
            all_numbers = false;
    }
    if (all_numbers && any_fraction && !o->label_names) {
        out->type = DATA_TASK_REGRESSION;
        out->n_labels = 1;
        out->positive = -1;
        return RT_OK;
    }
    out->type = DATA_TASK_CLASSIFICATION;
    out->integer_labels = all_numbers;
    if (o->label_names) {
        RT_TRY(user_named_classes(o, out));
    } else {
        /* the distinct labels, sorted */
        char **names = rt_xcalloc(t->n_rows, sizeof *names);
        size_t n = 0;
        for (size_t r = 0; r < t->n_rows; r++) {
            char buf[32];
            names[n++] = rt_xstrdup(user_label_key(out->integer_labels, data_table_cell(t, r, col), buf, sizeof buf));
        }
        qsort(names, n, sizeof *names, out->integer_labels ? user_cmp_value : user_cmp_text);
        size_t u = 0;
        for (size_t i = 0; i < n; i++) {
            if (u > 0 && strcmp(names[u - 1], names[i]) == 0) {
                free(names[i]);
                continue;
            }
            names[u++] = names[i];
        }
        out->label_names = names;
        out->n_labels = (int)(u < INT_MAX ? u : INT_MAX);
        if (u < 2)
            RT_FAIL(RT_ERR_FORMAT, "%s: column '%s': every train row has the label '%.60s'; a classifier needs two "
                    "classes or more (numbers with a fraction, such as 0.5, mean regression)", t->path, out->label_col,
                    names[0]);
        if (u > DATA_USER_MAX_LABELS)
            RT_FAIL(RT_ERR_FORMAT, "%s: column '%s' has %zu distinct labels, more than the limit %d", t->path,
                    out->label_col, u, DATA_USER_MAX_LABELS);
    }
    for (size_t r = 0; r < t->n_rows; r++)
        if (user_class_of(out, data_table_cell(t, r, col)) < 0) {
            data_table_where(t, r, where, sizeof where);
            RT_FAIL(RT_ERR_FORMAT, "%s: column '%s': the label '%.60s' is not one of --label-names", where,
                    out->label_col, data_table_cell(t, r, col));
        }
    out->positive = -1;
    if (out->n_labels == 2) out->positive = 1;
    if (o->positive_label) {
        int k = out->n_labels == 2 ? user_class_of(out, o->positive_label) : -1;
        if (out->n_labels != 2)
            RT_FAIL(RT_ERR_USAGE, "--positive-label: the task has %d classes; F1 of one class is for two", out->n_labels);
        if (k < 0)
            RT_FAIL(RT_ERR_USAGE, "--positive-label '%s' is not a class (the classes: '%s', '%s')", o->positive_label,
                    out->label_names[0], out->label_names[1]);
        out->positive = k;
    }
fail:
    return st;
}

rt_status data_user_task_resolve(const data_table *train, const data_user_opts *o, data_user_task *out) {
    rt_status st = RT_OK;
    memset(out, 0, sizeof *out);
    const char *label_name = o->label_column ? o->label_column : "label";
    int label = data_table_col(train, label_name);
    if (label < 0) RT_TRY(data_table_missing_column(train, label_name, "--label-column"));
    out->label_col = rt_xstrdup(label_name);
    RT_TRY(user_text_columns(train, o, label, out));
    RT_TRY(user_labels(train, o, label, out));
    return RT_OK;
fail:
    data_user_task_free(out);
    return st;
}

rt_status data_user_examples(const data_user_task *task, const data_table *t, bool labelled, data_examples *out) {
    rt_status st = RT_OK;
    memset(out, 0, sizeof *out);
    int cols[2] = {-1, -1};
    for (int k = 0; k < task->n_text; k++)
        if ((cols[k] = data_table_col(t, task->text_col[k])) < 0) RT_TRY(data_table_missing_column(t, task->text_col[k], "--text-columns"));
    int label = data_table_col(t, task->label_col);
    if (labelled && label < 0) RT_TRY(data_table_missing_column(t, task->label_col, "--label-column"));
    const size_t n = t->n_rows, alloc_n = n ? n : 1;
    const bool regression = task->type == DATA_TASK_REGRESSION;
    out->n = n;
    out->n_labels = task->n_labels;
    out->text_a = rt_xcalloc(alloc_n, sizeof *out->text_a);
    out->text_b = task->n_text == 2 ? rt_xcalloc(alloc_n, sizeof *out->text_b) : NULL;
    out->labels = rt_xcalloc(alloc_n, sizeof *out->labels);
    out->targets = regression ? rt_xcalloc(alloc_n, sizeof *out->targets) : NULL;
    out->line = rt_xcalloc(alloc_n, sizeof *out->line);
    char where[400];
    for (size_t r = 0; r < n; r++) {
        const char **dst[2] = {out->text_a, out->text_b};
        for (int k = 0; k < task->n_text; k++) RT_TRY(data_table_text(t, r, cols[k], &dst[k][r]));
        out->line[r] = t->row_line[r] > INT32_MAX ? INT32_MAX : (int32_t)t->row_line[r];
        out->labels[r] = DATA_LABEL_NONE;
        if (regression) out->targets[r] = NAN;
        if (!labelled) continue;
        const char *s = data_table_cell(t, r, label);
        double v;
        bool fraction;
        data_table_where(t, r, where, sizeof where);
        if (!s || !*s)
            RT_FAIL(RT_ERR_FORMAT, "%s: column '%s': the label is %s", where, task->label_col, s ? "empty" : "missing");
        if (regression) {
            if (!user_cell_number(t, r, label, &v, &fraction))
                RT_FAIL(RT_ERR_FORMAT, "%s: column '%s': the label '%.60s' is not a number (the task is regression)",
                        where, task->label_col, s);
            out->targets[r] = (float)v;
        } else {
            data_cell_kind kind = data_table_kind(t, r, label);
            int y = kind == DATA_CELL_LIST || kind == DATA_CELL_OBJECT ? -1 : user_class_of(task, s);
            if (y < 0) {
                char classes[256];
                data_user_task_describe(task, classes, sizeof classes);
                RT_FAIL(RT_ERR_FORMAT, "%s: column '%s': the label '%.60s' is not one of the train file's %s", where,
                        task->label_col, s, classes);
            }
            out->labels[r] = y;
        }
    }
    out->path = rt_xstrdup(t->path);
    out->n_files = 1;
    out->files = rt_xmalloc(sizeof *out->files);
    out->files[0] = rt_xstrdup(t->path);
    out->file_end = rt_xmalloc(sizeof *out->file_end);
    out->file_end[0] = n;
    return RT_OK;
fail:
    data_examples_free(out);
    return st;
}

void data_user_task_key(const data_user_task *task, data_cache_key *key) {
    data_cache_key_int(key, task->n_text);
    for (int k = 0; k < task->n_text; k++) data_cache_key_str(key, task->text_col[k]);
    data_cache_key_str(key, task->label_col);
    data_cache_key_int(key, task->type);
    data_cache_key_int(key, task->integer_labels);
    data_cache_key_int(key, task->n_labels);
    for (int k = 0; task->label_names && k < task->n_labels; k++) data_cache_key_str(key, task->label_names[k]);
}

void data_user_task_describe(const data_user_task *task, char *buf, size_t cap) {
    if (task->type == DATA_TASK_REGRESSION) {
        snprintf(buf, cap, "regression on '%s'", task->label_col);
        return;
    }
    size_t n = (size_t)snprintf(buf, cap, "classes ");
    for (int k = 0; k < task->n_labels && n + 8 < cap; k++) {
        int w = snprintf(buf + n, cap - n, "%s'%s'", k ? ", " : "", task->label_names[k]);
        if (w < 0) break;
        n += (size_t)w;
    }
    if (n >= cap - 8) snprintf(buf + cap - 5, 5, "...");
}
