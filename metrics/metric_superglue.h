/* SuperGLUE's metrics, as its leaderboard and FlagAI (flagai/metrics.py, the table in
 * flagai/data/dataset/superglue/control.py:75-86) report them: accuracy for BoolQ, COPA,
 * RTE, WiC and WSC; accuracy and macro-F1 for CB (the mean of the per-class F1s,
 * scikit-learn's f1_score(average='macro')); F1a (binary F1 of class 1 over all answer
 * options) and EM (the share of questions whose answer options are all right) for MultiRC.
 * Rows whose label is negative (DATA_SG_LABEL_NONE -1, or the loss's -100) are skipped. */
#ifndef METRIC_SUPERGLUE_H
#define METRIC_SUPERGLUE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/base/rt_status.h"

/* sklearn f1_score(label, pred, average='macro'): the mean F1 over the classes 0..n_classes-1
 * that occur in label or pred (sklearn's default label set); a class's F1 is 0 when it has
 * no true positive (zero_division). 0 for no rows. */
double metric_macro_f1(const int32_t *pred, const int32_t *label, size_t n, int n_classes);

/* MultiRC EM (FlagAI's multirc_em, metrics.py:93-115): rows sharing a question id form one
 * question, right when every one of its rows is; the mean over questions. Rows need not be
 * grouped or sorted. Allocates (RT_ERR_NOMEM). *out = 0 for no rows. */
rt_status metric_multirc_em(const int32_t *pred, const int32_t *label, const int32_t *question, size_t n, double *out);

#define METRIC_SG_MAX_SCORES 3

typedef struct {
    const char *name; /* "accuracy", "f1-macro", "f1a", "em" (FlagAI's names) */
    double value;
} metric_sg_score;

/* The metrics of SuperGLUE task `task` ("boolq", "cb", "copa", "multirc", "rte", "wic",
 * "wsc"), in the order listed above (MultiRC: f1a, em, accuracy). question is MultiRC's
 * question ids (may be NULL for the other tasks). RT_ERR_CONFIG for an unknown task. */
rt_status metric_superglue(const char *task, const int32_t *pred, const int32_t *label, const int32_t *question,
                           size_t n, metric_sg_score out[METRIC_SG_MAX_SCORES], int *n_out);

#endif
