/* GLUE tasks: one table row per task says which files hold each split, which columns hold
 * the texts and the label, how labels are spelled, and how the task is scored. Adding a task
 * is adding a row in data_glue.c. The layouts follow the files GLUE's download script
 * produces (and the raw CoLA release, which has no header), as GLUE's own files are laid out
 * (assets/glue-mrpc, tests/data/glue-*) and as transformers' GLUE processors read them.
 *
 * Classification labels become class ids 0..n_labels-1: numeric labels must be one of those
 * integers, string labels (RTE's "entailment"/"not_entailment") are looked up in
 * label_names, in the order HF `datasets` assigns them, so class ids match models fine-tuned
 * with HF. STS-B is regression (n_labels 1): its score becomes a float target and its class
 * label stays DATA_LABEL_NONE. Unlabelled splits (test files) get label -100 / target NaN so
 * that the collator and the loss skip them.
 *
 * A split may be several files read one after the other (CoLA's GLUE dev set is
 * in_domain_dev + out_of_domain_dev), and a task may have several dev sets (MNLI matched and
 * mismatched), each scored on its own. */
#ifndef DATA_GLUE_H
#define DATA_GLUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/base/rt_status.h"

#define DATA_LABEL_NONE (-100) /* the loss's ignore_index */

typedef enum {
    DATA_METRIC_ACC,              /* accuracy (multi-class too: MNLI, on each dev set) */
    DATA_METRIC_ACC_F1,           /* accuracy and F1 of class 1 (MRPC, QQP) */
    DATA_METRIC_MCC,              /* Matthews correlation (CoLA) */
    DATA_METRIC_PEARSON_SPEARMAN, /* Pearson and Spearman correlation of the scores (STS-B) */
} data_metric;

typedef enum {
    DATA_TASK_CLASSIFICATION = 0, /* labels are class ids, cross-entropy */
    DATA_TASK_REGRESSION = 1,     /* one float target per example, n_labels 1, MSE (STS-B) */
    DATA_TASK_MULTI_LABEL = 2,    /* a 0/1 target per class, sigmoid and binary cross-entropy */
} data_task_type;

/* label column value meaning "the last field of the row": MNLI's gold_label is column 11 of
 * train.tsv but column 15 of dev_*.tsv (five annotator labels come before it). Such files
 * must have exactly as many fields on every row as in their header. */
#define DATA_GLUE_COL_LAST (-2)

/* Where the fields of one kind of file are. Columns are 0-based; -1 = absent. */
typedef struct {
    bool header; /* the first line names the columns */
    int text_a;  /* first (or only) sentence */
    int text_b;  /* second sentence; -1 for single-sentence tasks */
    int label;   /* -1 for unlabelled files; DATA_GLUE_COL_LAST = the last field */
} data_glue_layout;

#define DATA_GLUE_MAX_FILES 2  /* files in one split */
#define DATA_GLUE_MAX_SPLITS 2 /* dev (or test) sets of one task */

/* One evaluation split: a name for reports and the files whose rows, read in this order,
 * make it (paths relative to the task folder; unused slots NULL). */
typedef struct {
    const char *name; /* "dev", "dev_matched", "dev_mismatched", "test", ... */
    const char *files[DATA_GLUE_MAX_FILES];
} data_glue_split;

typedef struct {
    const char *name; /* "mrpc" */
    const char *dir;  /* the task's usual folder name (as in assets/, tests/data/): "glue-mrpc" */
    /* Relative to the task folder; test may be NULL. dev_file is the first file of dev[0]
     * (for CoLA only in_domain_dev; the full GLUE dev set is dev[0]). */
    const char *train_file, *dev_file, *test_file;
    data_glue_layout labeled;       /* train and dev */
    data_glue_layout unlabeled;     /* test */
    int n_labels;                   /* classes; 1 for regression */
    const char *const *label_names; /* NULL: labels are the integers 0..n_labels-1 */
    data_metric metric;
    data_task_type type;
    double target_min, target_max; /* regression: the range a target must lie in (STS-B 0..5) */
    int n_dev;                     /* dev sets, each scored on its own (MNLI: 2) */
    data_glue_split dev[DATA_GLUE_MAX_SPLITS];
    int n_test; /* unlabelled test sets (may be 0) */
    data_glue_split test[DATA_GLUE_MAX_SPLITS];
} data_glue_task;

/* The examples of one split. All strings live in storage (owned). */
typedef struct {
    size_t n;
    const char **text_a; /* (n) */
    const char **text_b; /* (n) NULL array for single-sentence tasks */
    int32_t *labels;     /* (n) class id, DATA_LABEL_NONE when unlabelled or for regression */
    float *targets;      /* (n, target_width) a regression target, or a multi-label row's 0/1 per
                           * class; NaN first when unlabelled; NULL for class ids */
    int target_width;    /* floats a row in targets: 1 for regression, n_labels for multi-label */
    int32_t *line;       /* (n) 1-based line in its source file, for messages */
    int n_labels;
    char *path;       /* the file read, for messages (owned); several files: "a.tsv + b.tsv" */
    char *storage;    /* the file's bytes the strings point into */
    size_t n_files;   /* source files, in order (1 unless a multi-file split) */
    char **files;     /* (n_files) their paths (owned) */
    size_t *file_end; /* (n_files) one past the last row of each file */
} data_examples;

/* NULL when name is not a known task (case-sensitive: see data_glue_task_names). */
const data_glue_task *data_glue_task_find(const char *name);
/* The layout of task that dir holds: CoLA comes as its public release (raw/in_domain_*.tsv)
 * or as GLUE's CoLA folder (train.tsv, dev.tsv); every other task has one layout and comes
 * back as it is. */
const data_glue_task *data_glue_task_for_dir(const data_glue_task *task, const char *dir);
/* The known task names, comma-separated, for usage messages. */
const char *data_glue_task_names(void);

/* Reads one file. has_labels picks the layout: true for train/dev, false for test. A path
 * that does not exist is RT_ERR_IO with a message listing the task's files and where GLUE
 * can be downloaded; a bad row (too few columns, a bad label, invalid UTF-8) is RT_ERR_FORMAT
 * naming path:line (see data_tsv.h). */
rt_status data_glue_load(const data_glue_task *task, const char *path, bool has_labels, data_examples *out);
/* Reads the files of split from the task folder dir, one after the other, into one set of
 * examples (line numbers stay per file; see data_examples_row_path). */
rt_status data_glue_load_split(const data_glue_task *task, const char *dir, const data_glue_split *split,
                               bool has_labels, data_examples *out);
/* RT_OK when dir holds the task's train file and every dev file; otherwise RT_ERR_IO naming
 * what is missing, the files the task expects and where GLUE can be downloaded. */
rt_status data_glue_check_dir(const data_glue_task *task, const char *dir);
/* The file row i came from. */
const char *data_examples_row_path(const data_examples *ex, size_t i);
void data_examples_free(data_examples *ex);

#endif
