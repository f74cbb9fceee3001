/* SuperGLUE metrics (see metric_superglue.h). Accuracy and binary F1 come from
 * metric_glue.c; this file adds CB's macro-F1, MultiRC's EM and the per-task table. */
#include "metrics/metric_superglue.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metric_glue.h"

double metric_macro_f1(const int32_t *pred, const int32_t *label, size_t n, int n_classes) {
    RT_CHECK(n_classes > 0 && n_classes <= 64, "n_classes=%d", n_classes);
    double tp[64] = {0}, fp[64] = {0}, fn[64] = {0};
    bool present[64] = {false};
    for (size_t i = 0; i < n; i++) {
        if (label[i] < 0) continue;
        int p = pred[i], l = label[i];
        RT_CHECK(p >= 0 && p < n_classes && l < n_classes, "row %zu: pred %d label %d (classes 0..%d)", i, p, l,
                 n_classes - 1);
        present[p] = present[l] = true;
        if (p == l) {
            tp[p] += 1;
        } else {
            fp[p] += 1;
            fn[l] += 1;
        }
    }
    double sum = 0;
    int k = 0;
    for (int c = 0; c < n_classes; c++) {
        if (!present[c]) continue;
        double denom = 2 * tp[c] + fp[c] + fn[c];
        sum += denom > 0 ? 2 * tp[c] / denom : 0.0;
        k++;
    }
    return k ? sum / k : 0.0;
}

typedef struct {
    int32_t q;
    int right;
} em_row;

static int em_cmp(const void *a, const void *b) {
    const em_row *x = a, *y = b;
    return (x->q > y->q) - (x->q < y->q);
}

rt_status metric_multirc_em(const int32_t *pred, const int32_t *label, const int32_t *question, size_t n, double *out) {
    *out = 0.0;
    em_row *rows = malloc((n ? n : 1) * sizeof *rows);
    if (!rows) return rt_errorf(RT_ERR_NOMEM, "multirc em: out of memory for %zu rows", n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (label[i] < 0) continue;
        rows[m].q = question[i];
        rows[m].right = pred[i] == label[i];
        m++;
    }
    qsort(rows, m, sizeof *rows, em_cmp);
    size_t questions = 0, exact = 0;
    for (size_t s = 0; s < m;) {
        size_t e = s;
        int all = 1;
        for (; e < m && rows[e].q == rows[s].q; e++) all &= rows[e].right;
        questions++;
        exact += (size_t)all;
        s = e;
    }
    free(rows);
    *out = questions ? (double)exact / (double)questions : 0.0;
    return RT_OK;
}

rt_status metric_superglue(const char *task, const int32_t *pred, const int32_t *label, const int32_t *question,
                           size_t n, metric_sg_score out[METRIC_SG_MAX_SCORES], int *n_out) {
    rt_status st = RT_OK;
    *n_out = 0;
    bool cb = strcmp(task, "cb") == 0, multirc = strcmp(task, "multirc") == 0;
    bool acc_only = strcmp(task, "boolq") == 0 || strcmp(task, "copa") == 0 || strcmp(task, "rte") == 0 ||
                    strcmp(task, "wic") == 0 || strcmp(task, "wsc") == 0;
    if (!cb && !multirc && !acc_only)
        return rt_errorf(RT_ERR_CONFIG,
                         "metrics: '%s' is not a SuperGLUE task (boolq, cb, copa, multirc, rte, wic, wsc)", task);
    /* metric_glue.c skips the loss's -100; unlabelled SuperGLUE rows say -1. */
    int32_t *lab = malloc((n ? n : 1) * sizeof *lab);
    if (!lab) return rt_errorf(RT_ERR_NOMEM, "metrics: out of memory for %zu rows", n);
    for (size_t i = 0; i < n; i++) lab[i] = label[i] < 0 ? -100 : label[i];
    double acc = metric_accuracy(pred, lab, n);
    if (multirc) {
        RT_CHECK(question != NULL, "multirc metrics need question ids");
        double em;
        st = metric_multirc_em(pred, lab, question, n, &em);
        if (st != RT_OK) goto fail;
        out[0] = (metric_sg_score){"f1a", metric_f1_binary(pred, lab, n)};
        out[1] = (metric_sg_score){"em", em};
        out[2] = (metric_sg_score){"accuracy", acc};
        *n_out = 3;
    } else {
        out[0] = (metric_sg_score){"accuracy", acc};
        *n_out = 1;
        if (cb) {
            out[1] = (metric_sg_score){"f1-macro", metric_macro_f1(pred, lab, n, 3)};
            *n_out = 2;
        }
    }
fail:
    free(lab);
    return st;
}
