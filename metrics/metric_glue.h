/* Evaluation metrics as GLUE reports them: accuracy (any number of classes), binary F1 of
 * class 1 (MRPC, QQP) and Matthews correlation (CoLA) with scikit-learn's definitions, and
 * Pearson and Spearman correlation (STS-B) with scipy.stats' definitions (Spearman ranks
 * ties by their average rank, as spearmanr does). Sums are taken in double. */
#ifndef METRIC_GLUE_H
#define METRIC_GLUE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/rt_status.h"

/* Rows whose label is -100 are skipped. Degenerate cases (no rows, a zero denominator)
 * return 0, as sklearn does. */
double metric_accuracy(const int32_t *pred, const int32_t *label, size_t n);
double metric_f1_binary(const int32_t *pred, const int32_t *label, size_t n);
double metric_mcc_binary(const int32_t *pred, const int32_t *label, size_t n);

/* Rows whose target is NaN (unlabelled) are skipped. Fewer than two rows, or a constant
 * pred or target, gives NaN, as scipy does (the correlation is undefined there); so does a
 * NaN prediction. */
/* Returns NaN also when its buffer cannot be allocated. */
double metric_pearson(const float *pred, const float *target, size_t n);
/* Spearman's rho: Pearson of the average ranks. Allocates rank buffers (RT_ERR_NOMEM). */
rt_status metric_spearman(const float *pred, const float *target, size_t n, double *out);

#endif
