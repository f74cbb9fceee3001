/* Classification metrics (see rt_metrics.h). Degenerate cases return 0 as sklearn does. */
#include "runtime/rt_metrics.h"

#include <math.h>

typedef struct {
    double tp, fp, tn, fn, n;
} rt_confusion;

static rt_confusion rt_confusion_count(const int32_t *pred, const int32_t *label, size_t n) {
    rt_confusion c = {0};
    for (size_t i = 0; i < n; i++) {
        if (label[i] == -100) continue;
        int p = pred[i] == 1, l = label[i] == 1;
        c.tp += p && l;
        c.fp += p && !l;
        c.fn += !p && l;
        c.tn += !p && !l;
        c.n += 1;
    }
    return c;
}

double rt_metric_accuracy(const int32_t *pred, const int32_t *label, size_t n) {
    double ok = 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        if (label[i] == -100) continue;
        ok += pred[i] == label[i];
        total += 1;
    }
    return total > 0 ? ok / total : 0.0;
}

double rt_metric_f1_binary(const int32_t *pred, const int32_t *label, size_t n) {
    rt_confusion c = rt_confusion_count(pred, label, n);
    double denom = 2 * c.tp + c.fp + c.fn;
    return denom > 0 ? 2 * c.tp / denom : 0.0;
}

double rt_metric_mcc_binary(const int32_t *pred, const int32_t *label, size_t n) {
    rt_confusion c = rt_confusion_count(pred, label, n);
    double denom = sqrt((c.tp + c.fp) * (c.tp + c.fn) * (c.tn + c.fp) * (c.tn + c.fn));
    return denom > 0 ? (c.tp * c.tn - c.fp * c.fn) / denom : 0.0;
}
