/* A user's own classification files (see glue_files.h). */
#include "apps/common/glue_files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_atomic.h"
#include "checkpoints/ckpt_json.h"
#include "data/data_cache.h"
#include "models/hf_config.h"
#include "runtime/rt_log.h"

void glue_files_free(glue_files *f) {
    if (!f) return;
    data_table_free(&f->train);
    data_table_free(&f->validation);
    data_user_task_free(&f->task);
}

rt_status glue_files_open(const glue_files_opts *o, glue_files *f) {
    rt_status st = RT_OK;
    memset(f, 0, sizeof *f);
    f->o = *o;
    RT_TRY(data_table_read(o->train, o->format, &f->train));
    if (o->validation) RT_TRY(data_table_read(o->validation, o->format, &f->validation));
    RT_TRY(data_user_task_resolve(&f->train, &o->user, &f->task));
    return RT_OK;
fail:
    glue_files_free(f);
    return st;
}

typedef struct {
    const glue_files *f;
    const tok_tokenizer *tok;
    int max_len;
} files_build;

/* data_cache_build_fn: sets[0] = train, sets[1] = validation. */
static rt_status files_build_sets(void *ctx, data_tokenized *sets, int n_sets) {
    const files_build *b = ctx;
    rt_status st = RT_OK;
    data_examples ex = {0};
    for (int s = 0; s < n_sets; s++) {
        RT_TRY(data_user_examples(&b->f->task, s == 0 ? &b->f->train : &b->f->validation, true, &ex));
        RT_TRY(data_tokenize_pairs(&ex, b->tok, b->max_len, &sets[s]));
        data_examples_free(&ex);
    }
fail:
    data_examples_free(&ex);
    return st;
}

rt_status glue_files_tokenize(const glue_files *f, const tok_tokenizer *tok, const char *tokenizer_path, int max_len,
                              const char *cache_dir, data_tokenized *train, data_tokenized *validation) {
    rt_status st = RT_OK;
    const int n_sets = f->o.validation ? 2 : 1;
    data_tokenized sets[2] = {{0}};
    data_cache_key key;
    data_cache_key_init(&key, "user-pairs");
    data_cache_key_int(&key, DATA_CACHE_TOKENS_REVISION);
    data_cache_key_int(&key, max_len);
    RT_TRY(data_cache_key_tokenizer(&key, tokenizer_path));
    data_user_task_key(&f->task, &key);
    data_cache_key_int(&key, f->train.format);
    RT_TRY(data_cache_key_file(&key, f->o.train));
    if (f->o.validation) {
        data_cache_key_int(&key, f->validation.format);
        RT_TRY(data_cache_key_file(&key, f->o.validation));
    }
    files_build b = {f, tok, max_len};
    st = data_cache_load_or_build(cache_dir, &key, f->o.train, n_sets, 1, files_build_sets, &b, sets);
    *train = sets[0];
    *validation = sets[1];
fail:
    return st;
}

rt_status glue_files_read_test(const glue_files *f, const tok_tokenizer *tok, int max_len, data_table *table,
                               data_tokenized *test) {
    rt_status st = RT_OK;
    data_examples ex = {0};
    memset(test, 0, sizeof *test);
    RT_TRY(data_table_read(f->o.test, f->o.format, table));
    RT_TRY(data_user_examples(&f->task, table, false, &ex));
    RT_TRY(data_tokenize_pairs(&ex, tok, max_len, test));
fail:
    data_examples_free(&ex);
    return st;
}

/* ---- the predictions file ---- */

typedef struct {
    char *buf;
    size_t len, cap;
} out_buf;

static void out_put(out_buf *o, const char *s, size_t n) {
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 1024;
        while (o->len + n + 1 > cap) cap *= 2;
        o->buf = rt_xrealloc(o->buf, cap);
        o->cap = cap;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    o->buf[o->len] = '\0';
}
static void out_str(out_buf *o, const char *s) { out_put(o, s, strlen(s)); }

/* A CSV/TSV field as Python's csv module writes it (QUOTE_MINIMAL): in quotes, with quotes
 * doubled, when it holds the delimiter, a quote or a line break. */
static void out_csv_field(out_buf *o, const char *s, char delim) {
    if (!strchr(s, delim) && !strpbrk(s, "\"\r\n")) {
        out_str(o, s);
        return;
    }
    out_put(o, "\"", 1);
    for (const char *p = s; *p; p++) {
        out_put(o, p, 1);
        if (*p == '"') out_put(o, "\"", 1); /* doubled */
    }
    out_put(o, "\"", 1);
}

/* A JSON string literal: quotes, backslashes and control bytes escaped; UTF-8 as it is. */
static void out_json_string(out_buf *o, const char *s) {
    out_put(o, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            out_put(o, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            out_str(o, esc);
        } else {
            out_put(o, (const char *)p, 1);
        }
    }
    out_put(o, "\"", 1);
}

/* Names of the columns the predictions add: prediction, then prob_NAME per class. */
static void files_added_names(const data_user_task *task, int k, char *buf, size_t cap) {
    if (k == 0)
        snprintf(buf, cap, "prediction");
    else
        snprintf(buf, cap, "prob_%s", task->label_names[k - 1]);
}

/* One cell: a field (csv) or "key": value (jsonl, kind: how to write text). */
static void out_cell(out_buf *o, data_format fmt, int col, const char *name, const char *text, data_cell_kind kind) {
    if (fmt == DATA_FORMAT_JSONL) {
        out_str(o, col ? ", " : "{");
        out_json_string(o, name);
        out_str(o, ": ");
        if (kind == DATA_CELL_TEXT)
            out_json_string(o, text);
        else
            out_str(o, text); /* a number, true/false, a list or an object: its JSON text */
    } else {
        if (col) out_put(o, fmt == DATA_FORMAT_TSV ? "\t" : ",", 1);
        out_csv_field(o, text, fmt == DATA_FORMAT_TSV ? '\t' : ',');
    }
}

rt_status glue_files_write_predictions(const glue_files *f, const data_table *test, const char *save_dir,
                                       const char *path_out, const int32_t *pred, const float *scores,
                                       char *written, size_t written_cap) {
    rt_status st = RT_OK;
    const data_user_task *task = &f->task;
    const bool regression = task->type == DATA_TASK_REGRESSION;
    const int n_added = regression ? 1 : 1 + task->n_labels;
    const data_format fmt = test->format == DATA_FORMAT_JSON ? DATA_FORMAT_JSONL : test->format;
    ckpt_atomic_file *file = NULL;
    out_buf o = {0};
    bool *keep = rt_xcalloc((size_t)test->n_cols + 1, sizeof *keep);
    char name[300];
    if (path_out)
        snprintf(written, written_cap, "%s", path_out);
    else
        snprintf(written, written_cap, "%s/predictions.%s", save_dir, data_format_name(fmt));
    /* the input's columns, but one the predictions add (an earlier predictions file fed back) */
    int dropped = 0;
    for (int c = 0; c < test->n_cols; c++) {
        keep[c] = true;
        for (int k = 0; k < n_added && keep[c]; k++) {
            files_added_names(task, k, name, sizeof name);
            keep[c] = strcmp(name, test->col_names[c]) != 0;
        }
        dropped += !keep[c];
    }
    if (dropped)
        rt_log_warn("%s: %d of its columns have the names of the predictions' columns; the predictions replace them",
                    test->path, dropped);
    RT_TRY(ckpt_atomic_begin(written, &file));
    if (fmt != DATA_FORMAT_JSONL) { /* the header */
        int col = 0;
        for (int c = 0; c < test->n_cols; c++)
            if (keep[c]) out_cell(&o, fmt, col++, NULL, test->col_names[c], DATA_CELL_TEXT);
        for (int k = 0; k < n_added; k++) {
            files_added_names(task, k, name, sizeof name);
            out_cell(&o, fmt, col++, NULL, name, DATA_CELL_TEXT);
        }
        out_str(&o, "\n");
    }
    for (size_t r = 0; r < test->n_rows; r++) {
        int col = 0;
        for (int c = 0; c < test->n_cols; c++) {
            const char *s = data_table_cell(test, r, c);
            if (!keep[c] || (!s && fmt == DATA_FORMAT_JSONL)) continue; /* JSON: a key left out stays out */
            out_cell(&o, fmt, col++, test->col_names[c], s ? s : "", data_table_kind(test, r, c));
        }
        char num[40];
        if (regression) {
            snprintf(num, sizeof num, "%.9g", (double)scores[r]);
            out_cell(&o, fmt, col++, "prediction", isfinite(scores[r]) ? num : "null",
                     fmt == DATA_FORMAT_JSONL ? DATA_CELL_NUMBER : DATA_CELL_TEXT);
        } else {
            out_cell(&o, fmt, col++, "prediction", task->label_names[pred[r]], DATA_CELL_TEXT);
            for (int k = 0; k < task->n_labels; k++) {
                files_added_names(task, k + 1, name, sizeof name);
                snprintf(num, sizeof num, "%.6f", (double)scores[r * (size_t)task->n_labels + (size_t)k]);
                out_cell(&o, fmt, col++, name, num, DATA_CELL_NUMBER);
            }
        }
        out_str(&o, fmt == DATA_FORMAT_JSONL ? "}\n" : "\n");
        if (o.len > (1u << 20) || r + 1 == test->n_rows) {
            RT_TRY(ckpt_atomic_write(file, o.buf, o.len));
            o.len = 0;
        }
    }
    st = ckpt_atomic_commit(file);
    file = NULL;
fail:
    ckpt_atomic_abort(file);
    free(o.buf);
    free(keep);
    return st;
}

rt_status glue_files_label_config(const data_user_task *task, const char *config_path) {
    cJSON *config = NULL;
    rt_status st = ckpt_json_load(config_path, &config);
    if (st != RT_OK) return st;
    mdl_hf_set_labels(config, task->n_labels, task->type == DATA_TASK_REGRESSION ? NULL
                                                                                 : (const char *const *)task->label_names);
    return mdl_hf_write_json(config, config_path);
}
