/* Classification metrics as GLUE reports them (sklearn's definitions): accuracy, binary F1
 * of class 1 (MRPC, QQP) and Matthews correlation (CoLA). */
#ifndef RT_METRICS_H
#define RT_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* Rows whose label is -100 are skipped. */
double rt_metric_accuracy(const int32_t *pred, const int32_t *label, size_t n);
double rt_metric_f1_binary(const int32_t *pred, const int32_t *label, size_t n);
double rt_metric_mcc_binary(const int32_t *pred, const int32_t *label, size_t n);

#endif
