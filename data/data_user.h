/* A classification or regression task made from a user's own files (issue 35): which columns hold
 * the text and the label, and what the labels are, decided from the train file as HF's run_glue
 * decides it, so that a model fine-tuned here numbers its classes as one fine-tuned there.
 *
 * Text: --text-columns A or A,B (a pair); by default sentence1,sentence2 when both exist, else
 * text, else the first two text columns other than the label (one when there is one). A text
 * column is one whose train cells are not all numbers, true/false or absent.
 *
 * Labels (--label-column, default "label"), from the train file's column:
 *   - numbers of which any is written with a fraction or an exponent (JSON: any not whole) mean
 *     regression: one output, the target the number, MSE;
 *   - whole numbers mean classes sorted by value (7, 9, 10), named by their decimal text;
 *   - text, or JSON true/false, means classes sorted by their bytes, as Python sorts str;
 *   - --label-names a,b,c fixes the classes and their order instead; a label outside is an error.
 * Multi-label (sigmoid and binary cross-entropy, as HF's problem_type multi_label_classification):
 * a JSON list of classes as a label, or a text label split on --label-separator (each name trimmed
 * of spaces); [] or an empty cell names no class. The classes are the union over the train file,
 * sorted as above (whole numbers when every one is), or --label-names. The examples carry each
 * row's classes as 0/1 targets, one a class.
 * A validation label outside the classes is an error; a test file's labels are not read.
 *
 * Every error names file:line (a JSON array's record number) and the column. */
#ifndef DATA_USER_H
#define DATA_USER_H

#include <stdbool.h>

#include "data/data_cache.h"
#include "data/data_glue.h"
#include "data/data_table.h"

/* Classes a task may have: as many as a classifier's config may (models' MDL_MAX_LABELS). */
#define DATA_USER_MAX_LABELS (1 << 16)

typedef struct {
    const char *text_columns;    /* "A" or "A,B"; NULL: the default above */
    const char *label_column;    /* NULL: "label" */
    const char *label_names;     /* "a,b,c": the classes in id order; NULL: from the train file */
    const char *positive_label;  /* two classes: the class whose F1 is reported; NULL: the second */
    const char *label_separator; /* splits a text label into classes (multi-label); NULL: none */
} data_user_opts;

typedef struct {
    char *text_col[2];
    int n_text; /* 1 or 2 */
    char *label_col;
    char *label_separator; /* as given, or NULL */
    data_task_type type;
    bool integer_labels; /* classes are whole numbers: a label matches by value ("01" is 1) */
    int n_labels;        /* classes (multi-label too); 1 for regression */
    char **label_names;  /* (n_labels) classification: the classes in id order; NULL for regression */
    int positive;        /* two classes: the class id whose F1 is reported; else -1 */
} data_user_task;

/* Decides the task from the train table and the options. RT_ERR_USAGE for an option that names
 * what is not there (a column, a positive label), RT_ERR_FORMAT for a train cell that does not
 * fit (an empty label, labels of two kinds, a label outside --label-names). */
rt_status data_user_task_resolve(const data_table *train, const data_user_opts *o, data_user_task *out);
/* The examples of t. labelled: every row's label must be one of the task's (train, validation);
 * otherwise labels are not read (test: DATA_LABEL_NONE, target NaN). The texts point into t,
 * which must outlive the examples (ex->storage stays NULL). */
rt_status data_user_examples(const data_user_task *task, const data_table *t, bool labelled, data_examples *out);
/* Hashes what the task makes of a table's rows into a tokenized-cache key. */
void data_user_task_key(const data_user_task *task, data_cache_key *key);
/* "classes 'neg', 'pos'", "multi-label classes ..." or "regression", for the log. */
void data_user_task_describe(const data_user_task *task, char *buf, size_t cap);
void data_user_task_free(data_user_task *task);

#endif
