/* GLUE classification tasks: one table row per task says which files hold each split, which
 * columns hold the texts and the label, and how labels are spelled. Adding a task is adding
 * a row in data_glue.c. The layouts follow the files GLUE's download script produces (and
 * the raw CoLA release, which has no header), as found in ../shared/data/glue-*.
 *
 * Labels become class ids 0..n_labels-1: numeric labels must be one of those integers,
 * string labels (RTE's "entailment"/"not_entailment") are looked up in label_names, in the
 * order HF `datasets` assigns them. Unlabelled splits (test.tsv) get label -100 so that the
 * collator and the loss skip them. STS-B (a float score) is not a classification task and
 * is not in the table yet. */
#ifndef DATA_GLUE_H
#define DATA_GLUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/rt_status.h"

#define DATA_LABEL_NONE (-100) /* the loss's ignore_index */

typedef enum {
    DATA_METRIC_ACC,    /* accuracy */
    DATA_METRIC_ACC_F1, /* accuracy and F1 of class 1 (MRPC, QQP) */
    DATA_METRIC_MCC,    /* Matthews correlation (CoLA) */
} data_metric;

/* Where the fields of one kind of file are. Columns are 0-based; -1 = absent. */
typedef struct {
    bool header;  /* the first line names the columns */
    int text_a;   /* first (or only) sentence */
    int text_b;   /* second sentence; -1 for single-sentence tasks */
    int label;    /* -1 for unlabelled files */
} data_glue_layout;

typedef struct {
    const char *name;     /* "mrpc" */
    const char *dir;      /* the folder name in shared data: "glue-mrpc" */
    const char *train_file, *dev_file, *test_file; /* relative to the task folder; test may be NULL */
    data_glue_layout labeled;   /* train and dev */
    data_glue_layout unlabeled; /* test */
    int n_labels;
    const char *const *label_names; /* NULL: labels are the integers 0..n_labels-1 */
    data_metric metric;
} data_glue_task;

/* The examples of one split. All strings live in storage (owned). */
typedef struct {
    size_t n;
    const char **text_a;  /* (n) */
    const char **text_b;  /* (n) NULL array for single-sentence tasks */
    int32_t *labels;      /* (n) class id, DATA_LABEL_NONE when unlabelled */
    int32_t *line;        /* (n) 1-based line in the source file, for messages */
    int n_labels;
    char *path;           /* the file read, for messages (owned) */
    char *storage;        /* the file's bytes the strings point into */
} data_examples;

/* NULL when name is not a known task (case-sensitive: "mrpc", "sst2", "rte", "cola", "wnli"). */
const data_glue_task *data_glue_task_find(const char *name);
/* The known task names, comma-separated, for usage messages. */
const char *data_glue_task_names(void);

/* Reads one split. has_labels picks the layout: true for train/dev, false for test. */
rt_status data_glue_load(const data_glue_task *task, const char *path, bool has_labels, data_examples *out);
void data_examples_free(data_examples *ex);

#endif
