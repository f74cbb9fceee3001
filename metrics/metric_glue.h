/* Evaluation metrics as GLUE reports them, and as a user's own classes need them: accuracy (any
 * number of classes), F1 of one class (class 1 for MRPC, QQP), macro-F1, per-class precision and
 * recall, and Matthews correlation (CoLA) with scikit-learn's definitions; Pearson and Spearman
 * correlation (STS-B) with scipy.stats' definitions (Spearman ranks ties by their average rank, as
 * spearmanr does), and the mean squared error. Sums are taken in double. */
#ifndef METRIC_GLUE_H
#define METRIC_GLUE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/base/rt_status.h"

/* Rows whose label is -100 are skipped. Degenerate cases (no rows, a zero denominator)
 * return 0, as sklearn does. */
double metric_accuracy(const int32_t *pred, const int32_t *label, size_t n);
double metric_f1_binary(const int32_t *pred, const int32_t *label, size_t n);
double metric_mcc_binary(const int32_t *pred, const int32_t *label, size_t n);
/* One class against the rest, as sklearn's classification_report gives it. */
typedef struct {
    double precision, recall, f1;
    size_t support; /* labelled rows of the class */
} metric_class_scores;
metric_class_scores metric_class_score(const int32_t *pred, const int32_t *label, size_t n, int32_t k);
/* F1 of class k (f1_binary is class 1's). */
double metric_f1_class(const int32_t *pred, const int32_t *label, size_t n, int32_t k);
/* sklearn's f1_score(average='macro'): the mean F1 over the classes 0..n_classes-1 that occur in
 * the labels or the predictions. NaN when its buffer cannot be allocated. */
double metric_f1_macro(const int32_t *pred, const int32_t *label, size_t n, int n_classes);

/* Multi-label classification over (n, C) row-major 0/1 matrices: pred bytes, truth floats (the
 * data path's multi-hot targets); a row whose truth[i * C] is NaN is unlabelled and skipped. As
 * sklearn computes them on indicator matrices: f1_score(average='micro') from the counts summed
 * over every class; average='macro' the mean over all C classes, a class with no true and no
 * predicted positive scoring 0 (sklearn's zero_division default); accuracy_score, the rows whose
 * predicted set is exactly theirs. No labelled row gives 0. */
typedef struct {
    double f1_micro, f1_macro, exact_match;
} metric_multilabel_scores;
metric_multilabel_scores metric_multilabel(const uint8_t *pred, const float *truth, size_t n, int C);
/* Class k of a multi-label task against its absence, as precision_recall_fscore_support gives it. */
metric_class_scores metric_multilabel_class(const uint8_t *pred, const float *truth, size_t n, int C, int k);

/* Mean squared error over the rows whose target is not NaN; NaN when there is none. */
double metric_mse(const float *pred, const float *target, size_t n);
/* Rows whose target is NaN (unlabelled) are skipped. Fewer than two rows, or a constant
 * pred or target, gives NaN, as scipy does (the correlation is undefined there); so does a
 * NaN prediction. */
/* Returns NaN also when its buffer cannot be allocated. */
double metric_pearson(const float *pred, const float *target, size_t n);
/* Spearman's rho: Pearson of the average ranks. Allocates rank buffers (RT_ERR_NOMEM). */
rt_status metric_spearman(const float *pred, const float *target, size_t n, double *out);

#endif
