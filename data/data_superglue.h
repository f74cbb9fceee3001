/* SuperGLUE tasks as their official JSONL files hold them (BoolQ, CB, COPA, MultiRC, RTE,
 * WiC, WSC; the v2 zips from dl.fbaipublicfiles.com/glue/superglue/data/v2/, with their files
 * laid out as in tests/data/superglue-*). Every task reads into one example struct: up to three texts,
 * a class id and the few task-specific numbers (COPA's question, WSC's word positions,
 * MultiRC's passage and question ids). The texts are the file's strings as they are:
 * FlagAI's clean-ups (punctuation standardization, WSC index repair) belong to the cloze
 * patterns (data_pvp.h), which redo them exactly.
 *
 * What each text holds, per task:
 *
 *   task     text_a     text_b       text_c       label names (class id = position)
 *   boolq    passage    question     -            false, true          (JSON booleans)
 *   cb       premise    hypothesis   -            entailment, contradiction, neutral
 *   copa     premise    choice1      choice2      0, 1 (0 = choice1)   (+ copa_effect)
 *   multirc  passage    question     answer       0, 1 (one example per answer option)
 *   rte      premise    hypothesis   -            entailment, not_entailment
 *   wic      sentence1  sentence2    word         false, true          (JSON booleans)
 *   wsc      text       span1_text   span2_text   false, true          (+ span indices)
 *
 * The label orders are FlagAI's processors' get_labels() (flagai/data/dataset/superglue/
 * processor.py), which are also HF `datasets` super_glue ClassLabel orders. A row without a
 * "label" key (the unlabelled test files) gets DATA_SG_LABEL_NONE.
 *
 * Errors are RT_ERR_FORMAT naming path:line and the field: a line that is not a JSON object,
 * a missing or mistyped field, a label outside the task's set, invalid UTF-8 (t5-finetune's
 * "path:line: invalid UTF-8 at byte N of the line"). A BOM is skipped, '\r\n' accepted,
 * blank lines at the end ignored (one in the middle is an error). */
#ifndef DATA_SUPERGLUE_H
#define DATA_SUPERGLUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/base/rt_status.h"

#define DATA_SG_LABEL_NONE (-1) /* unlabelled (test) rows */

typedef enum {
    DATA_SG_BOOLQ,
    DATA_SG_CB,
    DATA_SG_COPA,
    DATA_SG_MULTIRC,
    DATA_SG_RTE,
    DATA_SG_WIC,
    DATA_SG_WSC,
    DATA_SG_N_TASKS
} data_sg_task_id;

typedef struct {
    data_sg_task_id id;
    const char *name; /* "boolq" */
    const char *dir;  /* the task's usual folder name (as in tests/data/): "superglue-boolq" */
    const char *zip;  /* official archive name, for "where to get it": "BoolQ.zip" */
    int n_labels;
    const char *const *label_names; /* (n_labels) see the table above */
} data_sg_task;

/* One example. Strings point into the set's storage (data_sg_examples) and live as long as
 * it; a text a task does not have is NULL. */
typedef struct {
    const char *text_a, *text_b, *text_c; /* see the table above */
    int32_t label;                        /* class id, or DATA_SG_LABEL_NONE */
    int32_t idx;                          /* the record's "idx" (MultiRC: the answer's idx) */
    int32_t line;                         /* 1-based line of the record in its file */
    bool copa_effect;                     /* COPA: question is "effect" (joiner "so"); false: "cause" ("because") */
    int32_t span1_index;                  /* WSC: word positions of span1/span2 in text (split on spaces); else -1 */
    int32_t span2_index;
    int32_t passage_idx;  /* MultiRC: the paragraph's idx; else -1 */
    int32_t question_idx; /* MultiRC: the question's idx (unique in a file: EM groups by it); else -1 */
} data_sg_example;

typedef struct {
    const data_sg_task *task;
    size_t n;
    data_sg_example *ex; /* (n) */
    size_t n_questions;  /* MultiRC: questions read (EM's denominator); else 0 */
    char *path;          /* the file read, for messages (owned) */
    char **strings;      /* (n_strings) owned copies the examples point into */
    size_t n_strings, cap_strings;
} data_sg_examples;

/* NULL when name is not a task (lower case, as data_sg_task_names lists them). */
const data_sg_task *data_sg_task_find(const char *name);
const data_sg_task *data_sg_task_get(data_sg_task_id id);
/* "boolq, cb, copa, multirc, rte, wic, wsc" for usage messages. */
const char *data_sg_task_names(void);
/* The class id of a label name (as the table spells it), or -1. */
int data_sg_label_id(const data_sg_task *task, const char *name);

/* Reads one JSONL file. require_labels: a record without "label" is an error (train and
 * val); otherwise it gets DATA_SG_LABEL_NONE (test). A missing file is RT_ERR_IO saying where
 * the task's files come from. */
rt_status data_sg_load(const data_sg_task *task, const char *path, bool require_labels, data_sg_examples *out);
/* The same over bytes in memory (copied); name stands in for the path in messages. The
 * fuzz target and the tests use this. */
rt_status data_sg_parse(const data_sg_task *task, const char *name, const char *bytes, size_t len, bool require_labels,
                        data_sg_examples *out);
/* Reads dir/<split>.jsonl; split "test" does not require labels, any other split does. */
rt_status data_sg_load_split(const data_sg_task *task, const char *dir, const char *split, data_sg_examples *out);
void data_sg_examples_free(data_sg_examples *ex);

#endif
