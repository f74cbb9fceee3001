/* A user's own classification files (see glue_files.h). */
#include "apps/common/glue_files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_cache.h"
#include "data/data_table_out.h"
#include "models/layers/hf_config.h"
#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_json.h"
#include "runtime/base/rt_log.h"

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

rt_status glue_files_reorder(glue_files *f, const char *label_names) {
    data_user_opts u = f->o.user;
    data_user_task task;
    u.label_names = label_names;
    rt_status st = data_user_task_resolve(&f->train, &u, &task);
    if (st == RT_OK) {
        data_user_task_free(&f->task);
        f->task = task;
    }
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
    char what[8300]; /* names the files the log's row count covers */
    snprintf(what, sizeof what, "%s%s%s", f->o.train, f->o.validation ? " + " : "",
             f->o.validation ? f->o.validation : "");
    st = data_cache_load_or_build(cache_dir, &key, what, n_sets, 1, files_build_sets, &b, sets);
    *train = sets[0];
    *validation = sets[1];
fail:
    return st;
}

void glue_files_drop_tables(glue_files *f) {
    data_table_free(&f->train);
    data_table_free(&f->validation);
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
    const data_user_task *task;
    const int32_t *pred;
    const float *scores;
    bool json;    /* the file is JSON Lines: a multi-label prediction is a list */
    char *joined; /* a multi-label row's classes, written out */
    size_t joined_cap;
} files_predictions;

/* A multi-label row's predicted classes (a probability above 0.5): a JSON list of names, or the
 * names joined by --label-separator (',' without one) for CSV and TSV. */
static const char *files_multi_prediction(files_predictions *p, size_t row, data_cell_kind *kind) {
    const data_user_task *task = p->task;
    const float *prob = p->scores + row * (size_t)task->n_labels;
    cJSON *list = p->json ? cJSON_CreateArray() : NULL;
    const char *sep = task->label_separator ? task->label_separator : ",";
    size_t n = 0;
    for (int k = 0; k < task->n_labels; k++) {
        if (!(prob[k] > 0.5f)) continue;
        if (list) {
            cJSON_AddItemToArray(list, cJSON_CreateString(task->label_names[k]));
            continue;
        }
        const size_t need = n + strlen(sep) + strlen(task->label_names[k]) + 1;
        RT_GROW(p->joined, p->joined_cap, need);
        n += (size_t)snprintf(p->joined + n, p->joined_cap - n, "%s%s", n ? sep : "", task->label_names[k]);
    }
    if (list) {
        char *text = cJSON_PrintUnformatted(list);
        cJSON_Delete(list);
        n = strlen(text);
        RT_GROW(p->joined, p->joined_cap, n + 1);
        memcpy(p->joined, text, n + 1);
        cJSON_free(text);
        *kind = DATA_CELL_LIST;
    }
    if (!n && !list) return "";
    return p->joined;
}

/* data_added_cell_fn: prediction (the class name, or the score), then each class's probability. */
static const char *files_prediction_cell(void *ctx, size_t row, int k, char *scratch, data_cell_kind *kind) {
    files_predictions *p = ctx;
    const data_user_task *task = p->task;
    if (task->type == DATA_TASK_REGRESSION) {
        *kind = DATA_CELL_NUMBER;
        if (!isfinite(p->scores[row])) return "null";
        snprintf(scratch, 64, "%.9g", (double)p->scores[row]);
        return scratch;
    }
    if (k == 0 && task->type == DATA_TASK_MULTI_LABEL) return files_multi_prediction(p, row, kind);
    if (k == 0) return task->label_names[p->pred[row]];
    *kind = DATA_CELL_NUMBER;
    snprintf(scratch, 64, "%.6f", (double)p->scores[row * (size_t)task->n_labels + (size_t)(k - 1)]);
    return scratch;
}

rt_status glue_files_write_predictions(const data_user_task *task, const data_table *test, const char *save_dir,
                                       const char *path_out, const int32_t *pred, const float *scores, char *written,
                                       size_t written_cap) {
    const int n_added = task->type == DATA_TASK_REGRESSION ? 1 : 1 + task->n_labels;
    if (path_out)
        snprintf(written, written_cap, "%s", path_out);
    else
        snprintf(written, written_cap, "%s/predictions.%s", save_dir, data_format_name(data_table_out_format(test)));
    char **names = rt_xcalloc((size_t)n_added, sizeof *names);
    names[0] = rt_xstrdup("prediction");
    for (int k = 1; k < n_added; k++) {
        size_t len = strlen(task->label_names[k - 1]) + 6;
        names[k] = rt_xmalloc(len);
        snprintf(names[k], len, "prob_%s", task->label_names[k - 1]);
    }
    files_predictions p = {task, pred, scores, data_table_out_format(test) == DATA_FORMAT_JSONL, NULL, 0};
    rt_status st = data_table_write_rows(test, written, n_added, (const char *const *)names, files_prediction_cell, &p);
    free(p.joined);
    for (int k = 0; k < n_added; k++) free(names[k]);
    free(names);
    return st;
}

rt_status glue_files_label_config(const char *config_path, int n_labels, const char *const *names, bool multi_label) {
    cJSON *config = NULL;
    rt_status st = rt_json_load(config_path, &config);
    if (st != RT_OK) return st;
    mdl_hf_set_labels(config, n_labels, names, multi_label);
    return mdl_hf_write_json(config, config_path);
}
