/* A task from a user's files (see data_user.h): the columns, then the labels' kind and classes
 * from the train table, then each table's rows as examples. */
#include "data/data_user.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_json.h"

void data_user_task_free(data_user_task *task) {
    if (!task) return;
    for (int k = 0; k < task->n_text; k++) free(task->text_col[k]);
    free(task->label_col);
    free(task->label_separator);
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

/* The classes one multi-label cell names, as class keys (owned): a JSON list's strings and whole
 * numbers, or a text cell split on the separator, each name trimmed of spaces. An empty cell or []
 * names none. *whole stays true while every class is a whole number. */
static rt_status user_cell_classes(const data_table *t, size_t r, int col, const char *label_col, const char *sep,
                                   char ***out, int *n_out, bool *whole) {
    rt_status st = RT_OK;
    char where[400], buf[32];
    const char *s = data_table_cell(t, r, col);
    data_cell_kind kind = data_table_kind(t, r, col);
    cJSON *list = NULL;
    *out = NULL;
    *n_out = 0;
    data_table_where(t, r, where, sizeof where);
    if (!s) RT_FAIL(RT_ERR_FORMAT, "%s: column '%s': the label is missing", where, label_col);
    if (kind == DATA_CELL_LIST) {
        RT_TRY(rt_json_parse(s, strlen(s), where, &list));
        const int n = cJSON_GetArraySize(list);
        *out = rt_xcalloc((size_t)(n ? n : 1), sizeof **out);
        for (const cJSON *it = list->child; it; it = it->next) {
            if (cJSON_IsString(it) && *it->valuestring) {
                *whole = false;
                (*out)[(*n_out)++] = rt_xstrdup(it->valuestring);
            } else if (cJSON_IsNumber(it) && it->valuedouble == floor(it->valuedouble) &&
                       fabs(it->valuedouble) < 9007199254740992.0) {
                snprintf(buf, sizeof buf, "%.0f", it->valuedouble);
                (*out)[(*n_out)++] = rt_xstrdup(buf);
            } else {
                RT_FAIL(RT_ERR_FORMAT, "%s: column '%s': a list label holds %s; a class is a name or a whole number",
                        where, label_col, cJSON_IsString(it) ? "an empty name" : rt_json_type_name(it));
            }
        }
    } else if (kind == DATA_CELL_TEXT && sep) {
        const size_t sep_len = strlen(sep);
        size_t n = 1;
        for (const char *p = strstr(s, sep); p; p = strstr(p + sep_len, sep)) n++;
        *out = rt_xcalloc(n, sizeof **out);
        for (const char *p = s; *s;) { /* an empty cell names no class */
            const char *end = strstr(p, sep);
            const char *a = p, *b = end ? end : p + strlen(p);
            while (a < b && *a == ' ') a++;
            while (b > a && b[-1] == ' ') b--;
            if (a == b)
                RT_FAIL(RT_ERR_FORMAT,
                        "%s: column '%s': the label '%.60s' has an empty class name between "
                        "separators '%s'",
                        where, label_col, s, sep);
            char *name = rt_xmalloc((size_t)(b - a) + 1);
            memcpy(name, a, (size_t)(b - a));
            name[b - a] = '\0';
            double v;
            bool fraction;
            if (!user_number(name, &v, &fraction) || fraction) *whole = false;
            (*out)[(*n_out)++] = name;
            if (!end) break;
            p = end + sep_len;
        }
    } else {
        RT_FAIL(RT_ERR_FORMAT,
                "%s: column '%s': the label is %s, but the task is multi-label (a JSON list of classes%s)", where,
                label_col, data_cell_kind_name(kind), sep ? ", or text split on --label-separator" : "");
    }
fail:
    cJSON_Delete(list);
    if (st != RT_OK) {
        for (int k = 0; *out && k < *n_out; k++) free((*out)[k]);
        free(*out);
        *out = NULL;
        *n_out = 0;
    }
    return st;
}

static void user_free_names(char **names, int n) {
    for (int k = 0; k < n; k++) free(names[k]);
    free(names);
}

/* The distinct names of names[0..n), sorted (by value when whole numbers), in place; frees the
 * rest. Returns how many stay. */
static size_t user_sort_unique(char **names, size_t n, bool by_value) {
    if (n) qsort(names, n, sizeof *names, by_value ? user_cmp_value : user_cmp_text);
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        if (u > 0 && strcmp(names[u - 1], names[i]) == 0) {
            free(names[i]);
            continue;
        }
        names[u++] = names[i];
    }
    return u;
}

/* A multi-label column: each row names any number of classes, the union over the train file in
 * sorted order (or --label-names') being the task's. */
static rt_status user_multi_labels(const data_table *t, const data_user_opts *o, int col, data_user_task *out) {
    rt_status st = RT_OK;
    char **all = NULL, **row = NULL;
    size_t n_all = 0, cap = 0;
    int n_row = 0;
    bool whole = true;
    out->type = DATA_TASK_MULTI_LABEL;
    out->positive = -1;
    if (o->positive_label)
        RT_FAIL(RT_ERR_USAGE, "--positive-label is for two classes; '%s' in %s is multi-label", out->label_col,
                t->path);
    for (size_t r = 0; r < t->n_rows; r++) {
        RT_TRY(user_cell_classes(t, r, col, out->label_col, o->label_separator, &row, &n_row, &whole));
        if (n_all + (size_t)n_row > cap) {
            cap = (n_all + (size_t)n_row) * 2;
            all = rt_xrealloc(all, cap * sizeof *all);
        }
        if (n_row) memcpy(all + n_all, row, (size_t)n_row * sizeof *row); /* all is NULL until a class comes */
        n_all += (size_t)n_row;
        free(row);
        row = NULL;
    }
    out->integer_labels = whole;
    for (size_t i = 0; whole && i < n_all; i++) { /* "09" is class 9 */
        char buf[32];
        const char *key = user_label_key(true, all[i], buf, sizeof buf);
        if (key != all[i]) {
            free(all[i]);
            all[i] = rt_xstrdup(key);
        }
    }
    if (o->label_names) {
        RT_TRY(user_named_classes(o, out));
        for (size_t i = 0; i < n_all; i++)
            if (user_class_of(out, all[i]) < 0)
                RT_FAIL(RT_ERR_FORMAT, "%s: column '%s': the class '%.60s' is not one of --label-names", t->path,
                        out->label_col, all[i]);
    } else {
        const size_t u = user_sort_unique(all, n_all, whole);
        n_all = u;
        if (u < 2)
            RT_FAIL(RT_ERR_FORMAT,
                    "%s: column '%s': the train rows name %s; a multi-label classifier needs two "
                    "classes or more",
                    t->path, out->label_col, u ? "one class only" : "no class");
        if (u > DATA_USER_MAX_LABELS)
            RT_FAIL(RT_ERR_FORMAT, "%s: column '%s' names %zu distinct classes, more than the limit %d", t->path,
                    out->label_col, u, DATA_USER_MAX_LABELS);
        out->label_names = all;
        out->n_labels = (int)u;
        all = NULL;
        n_all = 0;
    }
fail:
    for (size_t i = 0; i < n_all; i++) free(all[i]);
    free(all);
    return st;
}

/* The label column's kind over the train file, then its classes. */
static rt_status user_labels(const data_table *t, const data_user_opts *o, int col, data_user_task *out) {
    rt_status st = RT_OK;
    char where[400];
    bool all_numbers = true, any_fraction = false;
    data_cell_kind first_kind = DATA_CELL_TEXT;
    bool multi = o->label_separator != NULL;
    for (size_t r = 0; r < t->n_rows && !multi; r++) multi = data_table_kind(t, r, col) == DATA_CELL_LIST;
    if (multi) return user_multi_labels(t, o, col, out);
    for (size_t r = 0; r < t->n_rows; r++) {
        const char *s = data_table_cell(t, r, col);
        data_cell_kind kind = data_table_kind(t, r, col);
        data_table_where(t, r, where, sizeof where);
        if (!s || !*s)
            return rt_errorf(RT_ERR_FORMAT, "%s: column '%s': the label is %s (every train row needs one)", where,
                             out->label_col, s ? "empty" : "missing");
        if (kind == DATA_CELL_OBJECT)
            return rt_errorf(RT_ERR_FORMAT, "%s: column '%s': the label is an object (expected a class or a number)",
                             where, out->label_col);
        if (r == 0) first_kind = kind;
        if (t->kinds && kind != first_kind)
            return rt_errorf(RT_ERR_FORMAT,
                             "%s: column '%s': the label is %s, but the first row's is %s (one kind "
                             "of label a column)",
                             where, out->label_col, data_cell_kind_name(kind), data_cell_kind_name(first_kind));
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
        const size_t u = user_sort_unique(names, n, out->integer_labels);
        out->label_names = names;
        out->n_labels = (int)(u < INT_MAX ? u : INT_MAX);
        if (u < 2)
            RT_FAIL(RT_ERR_FORMAT,
                    "%s: column '%s': every train row has the label '%.60s'; a classifier needs two "
                    "classes or more (numbers with a fraction, such as 0.5, mean regression)",
                    t->path, out->label_col, names[0]);
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
            RT_FAIL(RT_ERR_USAGE, "--positive-label: the task has %d classes; F1 of one class is for two",
                    out->n_labels);
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
    if (o->label_separator) out->label_separator = rt_xstrdup(o->label_separator);
    RT_TRY(user_text_columns(train, o, label, out));
    RT_TRY(user_labels(train, o, label, out));
    return RT_OK;
fail:
    data_user_task_free(out);
    return st;
}

/* Row r's classes as 0/1 in dst (n_labels floats); a class outside the task's is an error. */
static rt_status user_multi_hot(const data_user_task *task, const data_table *t, size_t r, int col, float *dst) {
    char **names;
    int n;
    bool whole = true;
    rt_status st = user_cell_classes(t, r, col, task->label_col, task->label_separator, &names, &n, &whole);
    if (st != RT_OK) return st;
    for (int k = 0; k < task->n_labels; k++) dst[k] = 0.0f;
    for (int i = 0; i < n; i++) {
        const int y = user_class_of(task, names[i]);
        if (y < 0) {
            char where[400], classes[256];
            data_table_where(t, r, where, sizeof where);
            data_user_task_describe(task, classes, sizeof classes);
            st = rt_errorf(RT_ERR_FORMAT, "%s: column '%s': the class '%.60s' is not one of the train file's %s", where,
                           task->label_col, names[i], classes);
            break;
        }
        dst[y] = 1.0f;
    }
    user_free_names(names, n);
    return st;
}

rt_status data_user_examples(const data_user_task *task, const data_table *t, bool labelled, data_examples *out) {
    rt_status st = RT_OK;
    memset(out, 0, sizeof *out);
    int cols[2] = {-1, -1};
    for (int k = 0; k < task->n_text; k++)
        if ((cols[k] = data_table_col(t, task->text_col[k])) < 0)
            RT_TRY(data_table_missing_column(t, task->text_col[k], "--text-columns"));
    int label = data_table_col(t, task->label_col);
    if (labelled && label < 0) RT_TRY(data_table_missing_column(t, task->label_col, "--label-column"));
    const size_t n = t->n_rows, alloc_n = n ? n : 1;
    const bool regression = task->type == DATA_TASK_REGRESSION, multi = task->type == DATA_TASK_MULTI_LABEL;
    const size_t W = regression ? 1 : multi ? (size_t)task->n_labels : 0;
    out->n = n;
    out->n_labels = task->n_labels;
    out->target_width = (int)W;
    out->text_a = rt_xcalloc(alloc_n, sizeof *out->text_a);
    out->text_b = task->n_text == 2 ? rt_xcalloc(alloc_n, sizeof *out->text_b) : NULL;
    out->labels = rt_xcalloc(alloc_n, sizeof *out->labels);
    out->targets = W ? rt_xcalloc(alloc_n * W, sizeof *out->targets) : NULL;
    out->line = rt_xcalloc(alloc_n, sizeof *out->line);
    char where[400];
    for (size_t r = 0; r < n; r++) {
        const char **dst[2] = {out->text_a, out->text_b};
        for (int k = 0; k < task->n_text; k++) RT_TRY(data_table_text(t, r, cols[k], &dst[k][r]));
        out->line[r] = t->row_line[r] > INT32_MAX ? INT32_MAX : (int32_t)t->row_line[r];
        out->labels[r] = DATA_LABEL_NONE;
        if (W) out->targets[r * W] = NAN;
        if (!labelled) continue;
        if (multi) {
            RT_TRY(user_multi_hot(task, t, r, label, out->targets + r * W));
            continue;
        }
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
    data_cache_key_str(key, task->label_separator ? task->label_separator : "");
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
    size_t n = (size_t)snprintf(buf, cap, task->type == DATA_TASK_MULTI_LABEL ? "multi-label classes " : "classes ");
    for (int k = 0; k < task->n_labels && n + 8 < cap; k++) {
        int w = snprintf(buf + n, cap - n, "%s'%s'", k ? ", " : "", task->label_names[k]);
        if (w < 0) break;
        n += (size_t)w;
    }
    if (n >= cap - 8) snprintf(buf + cap - 5, 5, "...");
}
