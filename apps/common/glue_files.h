/* The classification programs on a user's own files (issue 35): --train-file, --validation-file
 * and --test-file in CSV, TSV, JSON Lines or a JSON array, beside the GLUE tasks. This part reads
 * the files, decides the task (data_user.h), tokenizes through the cache, writes the test file's
 * predictions, and puts the class names into an HF export's config.json. glue_app.c runs the
 * model, the training and the evaluation as for a GLUE task. */
#ifndef GLUE_FILES_H
#define GLUE_FILES_H

#include <stdbool.h>

#include "data/data_dataset.h"
#include "data/data_table.h"
#include "data/data_user.h"
#include "tokenizers/tok.h"

typedef struct {
    const char *train, *validation, *test; /* validation and test may be NULL */
    data_format format;                    /* DATA_FORMAT_AUTO: each file's extension */
    data_user_opts user;
} glue_files_opts;

typedef struct {
    glue_files_opts o;
    data_table train, validation; /* validation.n_rows 0 when there is none */
    data_user_task task;
} glue_files;

/* Reads the train and validation files and decides the task. */
rt_status glue_files_open(const glue_files_opts *o, glue_files *f);
/* Decides the task again from the tables already read, with the classes in the order of
 * label_names ("a,b,c", as --label-names): a model's own class order. */
rt_status glue_files_reorder(glue_files *f, const char *label_names);
/* The train set, and the validation set when there is one, tokenized to max_len, or read back from
 * the cache in cache_dir (NULL: none), keyed on the files, the task and the tokenizer at
 * tokenizer_path. */
rt_status glue_files_tokenize(const glue_files *f, const tok_tokenizer *tok, const char *tokenizer_path, int max_len,
                              const char *cache_dir, data_tokenized *train, data_tokenized *validation);
/* Drops the train and validation tables once they are tokenized: training needs only the task
 * and the tokens, so a large file's text does not stay in memory for the run. */
void glue_files_drop_tables(glue_files *f);
/* Reads the test file and tokenizes it (labels are not read); *table keeps the rows the
 * predictions repeat. */
rt_status glue_files_read_test(const glue_files *f, const tok_tokenizer *tok, int max_len, data_table *table,
                               data_tokenized *test);
/* The predictions file for the test table of task (also glm-finetune's): SAVE_DIR/predictions.csv, .tsv or .jsonl as the test
 * file is written (path_out NULL), else path_out in that format. Each row repeats the input's
 * columns, then `prediction` (the class name; multi-label: the classes above 0.5, a JSON list or
 * joined by --label-separator; the score for regression) and `prob_NAME` for each class. pred:
 * (n) class ids; scores: (n, n_labels) probabilities, or (n) scores. */
rt_status glue_files_write_predictions(const data_user_task *task, const data_table *test, const char *save_dir,
                                       const char *path_out, const int32_t *pred, const float *scores, char *written,
                                       size_t written_cap);
/* Puts the classes into an HF config.json: id2label and label2id with names (NULL: LABEL_0 ...),
 * and problem_type as mdl_hf_set_labels writes it. */
rt_status glue_files_label_config(const char *config_path, int n_labels, const char *const *names, bool multi_label);
void glue_files_free(glue_files *f);

#endif
