/* Evaluation metrics (see metric_glue.h). Classification degenerate cases return 0 as sklearn
 * does; the correlations return NaN where scipy does. */
#include "metrics/metric_glue.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

typedef struct {
    double tp, fp, tn, fn, n;
} metric_confusion;

/* One labelled row: predicted p, true l. */
static void metric_confusion_add(metric_confusion *c, int p, int l) {
    c->tp += p && l;
    c->fp += p && !l;
    c->fn += !p && l;
    c->tn += !p && !l;
    c->n += 1;
}

/* Class k against the rest. */
static metric_confusion metric_confusion_count(const int32_t *pred, const int32_t *label, size_t n, int32_t k) {
    metric_confusion c = {0};
    for (size_t i = 0; i < n; i++)
        if (label[i] != -100) metric_confusion_add(&c, pred[i] == k, label[i] == k);
    return c;
}

double metric_accuracy(const int32_t *pred, const int32_t *label, size_t n) {
    double ok = 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        if (label[i] == -100) continue;
        ok += pred[i] == label[i];
        total += 1;
    }
    return total > 0 ? ok / total : 0.0;
}

double metric_f1_binary(const int32_t *pred, const int32_t *label, size_t n) {
    return metric_f1_class(pred, label, n, 1);
}

/* Precision, recall and F1 from one confusion count (0 where a denominator is). */
static metric_class_scores metric_scores_of(metric_confusion c) {
    metric_class_scores s = {.support = (size_t)(c.tp + c.fn)};
    s.precision = c.tp + c.fp > 0 ? c.tp / (c.tp + c.fp) : 0.0;
    s.recall = c.tp + c.fn > 0 ? c.tp / (c.tp + c.fn) : 0.0;
    double denom = 2 * c.tp + c.fp + c.fn;
    s.f1 = denom > 0 ? 2 * c.tp / denom : 0.0;
    return s;
}

metric_class_scores metric_class_score(const int32_t *pred, const int32_t *label, size_t n, int32_t k) {
    return metric_scores_of(metric_confusion_count(pred, label, n, k));
}

/* Class k of a multi-label task over the labelled rows. */
static metric_confusion metric_multilabel_count(const uint8_t *pred, const float *truth, size_t n, int C, int k) {
    metric_confusion c = {0};
    for (size_t i = 0; i < n; i++) {
        const float *y = truth + i * (size_t)C;
        if (!isnan(y[0])) metric_confusion_add(&c, pred[i * (size_t)C + (size_t)k] != 0, y[k] != 0.0f);
    }
    return c;
}

metric_class_scores metric_multilabel_class(const uint8_t *pred, const float *truth, size_t n, int C, int k) {
    return metric_scores_of(metric_multilabel_count(pred, truth, n, C, k));
}

metric_multilabel_scores metric_multilabel(const uint8_t *pred, const float *truth, size_t n, int C) {
    metric_multilabel_scores s = {0};
    metric_confusion all = {0};
    for (int k = 0; k < C; k++) {
        metric_confusion c = metric_multilabel_count(pred, truth, n, C, k);
        s.f1_macro += metric_scores_of(c).f1 / C;
        all.tp += c.tp;
        all.fp += c.fp;
        all.fn += c.fn;
    }
    s.f1_micro = metric_scores_of(all).f1;
    double exact = 0, rows = 0;
    for (size_t i = 0; i < n; i++) {
        const float *y = truth + i * (size_t)C;
        if (isnan(y[0])) continue;
        bool same = true;
        for (int k = 0; k < C && same; k++) same = (pred[i * (size_t)C + (size_t)k] != 0) == (y[k] != 0.0f);
        exact += same;
        rows += 1;
    }
    s.exact_match = rows > 0 ? exact / rows : 0.0;
    if (rows == 0) s.f1_macro = 0.0;
    return s;
}

double metric_f1_class(const int32_t *pred, const int32_t *label, size_t n, int32_t k) {
    return metric_class_score(pred, label, n, k).f1;
}

double metric_f1_macro(const int32_t *pred, const int32_t *label, size_t n, int n_classes) {
    /* sklearn averages over the classes found in the labels or the predictions */
    bool *seen = calloc((size_t)(n_classes > 0 ? n_classes : 1), sizeof *seen);
    if (!seen) return NAN;
    for (size_t i = 0; i < n; i++) {
        if (label[i] == -100) continue;
        if (label[i] >= 0 && label[i] < n_classes) seen[label[i]] = true;
        if (pred[i] >= 0 && pred[i] < n_classes) seen[pred[i]] = true;
    }
    double sum = 0;
    int count = 0;
    for (int k = 0; k < n_classes; k++)
        if (seen[k]) {
            sum += metric_f1_class(pred, label, n, k);
            count++;
        }
    free(seen);
    return count ? sum / count : 0.0;
}

double metric_mcc_binary(const int32_t *pred, const int32_t *label, size_t n) {
    metric_confusion c = metric_confusion_count(pred, label, n, 1);
    double denom = sqrt((c.tp + c.fp) * (c.tp + c.fn) * (c.tn + c.fp) * (c.tn + c.fn));
    return denom > 0 ? (c.tp * c.tn - c.fp * c.fn) / denom : 0.0;
}

/* Pearson over m pairs already in double. Two passes (means first, then centred sums) keep
 * the cancellation error of the one-pass formula out of near-constant inputs. */
static double metric_pearson_d(const double *x, const double *y, size_t m) {
    if (m < 2) return NAN;
    double mx = 0, my = 0;
    bool cx = true, cy = true;
    for (size_t i = 0; i < m; i++) {
        mx += x[i];
        my += y[i];
        cx &= x[i] == x[0];
        cy &= y[i] == y[0];
    }
    /* Exactly constant input: scipy warns and returns NaN. Tested on the values, since a mean
     * rounded off the constant would leave tiny nonzero deviations. */
    if (cx || cy) return NAN;
    mx /= (double)m;
    my /= (double)m;
    double sxy = 0, sxx = 0, syy = 0;
    for (size_t i = 0; i < m; i++) {
        double dx = x[i] - mx, dy = y[i] - my;
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    if (sxx == 0 || syy == 0) return NAN;
    double r = sxy / sqrt(sxx * syy);
    return r > 1 ? 1 : (r < -1 ? -1 : r);
}

/* The labelled pairs as doubles; *m of them. NULL only when allocation failed. */
static double *metric_labelled_pairs(const float *pred, const float *target, size_t n, size_t *m, bool *nan_pred) {
    double *xy = malloc(2 * (n ? n : 1) * sizeof *xy);
    *m = 0;
    *nan_pred = false;
    if (!xy) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (isnan(target[i])) continue;
        if (isnan(pred[i])) *nan_pred = true;
        xy[*m] = pred[i];
        xy[n + *m] = target[i];
        (*m)++;
    }
    return xy;
}

double metric_mse(const float *pred, const float *target, size_t n) {
    double sum = 0;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(target[i])) continue;
        double d = (double)pred[i] - (double)target[i];
        sum += d * d;
        m++;
    }
    return m ? sum / (double)m : NAN;
}

double metric_pearson(const float *pred, const float *target, size_t n) {
    size_t m;
    bool nan_pred;
    double *xy = metric_labelled_pairs(pred, target, n, &m, &nan_pred);
    /* Out of memory has no NaN-free answer to give; this is evaluation, not set-up. */
    double r = !xy || nan_pred ? NAN : metric_pearson_d(xy, xy + n, m);
    free(xy);
    return r;
}

typedef struct {
    double v;
    size_t i;
} metric_rank_item;

static int metric_rank_cmp(const void *a, const void *b) {
    const metric_rank_item *x = a, *y = b;
    if (x->v < y->v) return -1;
    if (x->v > y->v) return 1;
    return x->i < y->i ? -1 : (x->i > y->i); /* a total order: qsort is not stable */
}

/* Replaces v[0..m) by its ranks 1..m, tied values by the mean of the ranks they span
 * (scipy.stats.rankdata method='average'). */
static void metric_average_ranks(double *v, size_t m, metric_rank_item *tmp) {
    for (size_t i = 0; i < m; i++) {
        tmp[i].v = v[i];
        tmp[i].i = i;
    }
    qsort(tmp, m, sizeof *tmp, metric_rank_cmp);
    for (size_t s = 0; s < m;) {
        size_t e = s + 1;
        while (e < m && tmp[e].v == tmp[s].v) e++;
        double r = 0.5 * (double)(s + 1 + e); /* mean of ranks s+1 .. e */
        for (size_t k = s; k < e; k++) v[tmp[k].i] = r;
        s = e;
    }
}

rt_status metric_spearman(const float *pred, const float *target, size_t n, double *out) {
    size_t m;
    bool nan_pred;
    *out = NAN;
    double *xy = metric_labelled_pairs(pred, target, n, &m, &nan_pred);
    metric_rank_item *tmp = malloc((m ? m : 1) * sizeof *tmp);
    if (!xy || !tmp) {
        free(xy);
        free(tmp);
        return rt_errorf(RT_ERR_NOMEM, "spearman: out of memory for %zu rows", n);
    }
    if (!nan_pred) {
        /* Targets sit at xy + n (metric_labelled_pairs' layout). */
        metric_average_ranks(xy, m, tmp);
        metric_average_ranks(xy + n, m, tmp);
        *out = metric_pearson_d(xy, xy + n, m);
    }
    free(xy);
    free(tmp);
    return RT_OK;
}
