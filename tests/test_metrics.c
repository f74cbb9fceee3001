/* metrics/metric_glue against scikit-learn (accuracy, F1, MCC, macro-F1, per-class precision,
 * recall and F1; multi-label micro-F1, macro-F1, exact match and per-class scores), scipy (Pearson, Spearman with average ranks for ties) and numpy (MSE) on the
 * fixed inputs of scripts/golden/gen_metrics_golden.py, committed as tests/golden/metrics/metrics.txt: seeded random cases, ties, unlabelled rows
 * (-100 labels, NaN targets) and degenerate ones (0 from sklearn, NaN from scipy). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metric_glue.h"
#include "tests/testutil.h"

#define MAX_N 1024

typedef struct {
    char name[64], kind[32];
    int classes; /* multilabel: the matrices' columns */
    size_t n_pred, n_ref;
    double pred[MAX_N], ref[MAX_N]; /* ref: labels or targets */
} golden_case;

/* Parses "word v v v ..." into vals; returns the count. */
static size_t parse_values(char *rest, double *vals) {
    size_t n = 0;
    for (char *tok = strtok(rest, " \n"); tok && n < MAX_N; tok = strtok(NULL, " \n")) vals[n++] = strtod(tok, NULL);
    return n;
}

static void check_value(const golden_case *c, const char *metric, double got, double want) {
    if (isnan(want)) {
        TZ_EXPECT(isnan(got), "%s %s: got %.17g, scipy gives NaN", c->name, metric, got);
        return;
    }
    /* Same float32 inputs, sums in double on both sides: agreement to rounding error. */
    TZ_EXPECT(fabs(got - want) <= 1e-12 + 1e-12 * fabs(want), "%s %s: got %.17g, want %.17g", c->name, metric, got,
              want);
}

/* The classes a case has: one more than its largest label or prediction, as the generator counts. */
static int class_count(const int32_t *p, const int32_t *l, size_t n) {
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] > m) m = p[i];
        if (l[i] > m) m = l[i];
    }
    return m + 1;
}

/* A multi-label case: pred and ref are (n, C) 0/1 matrices, a ref row of NaN unlabelled. */
static void check_multilabel(const golden_case *c, const char *metric, double want) {
    const int C = c->classes;
    const size_t n = C > 0 ? c->n_pred / (size_t)C : 0;
    uint8_t *p = malloc(c->n_pred + 1);
    float *t = malloc((c->n_pred + 1) * sizeof *t);
    for (size_t i = 0; i < c->n_pred; i++) {
        p[i] = c->pred[i] != 0;
        t[i] = (float)c->ref[i];
    }
    const metric_multilabel_scores s = metric_multilabel(p, t, n, C);
    int k;
    if (strcmp(metric, "f1_micro") == 0)
        check_value(c, metric, s.f1_micro, want);
    else if (strcmp(metric, "f1_macro") == 0)
        check_value(c, metric, s.f1_macro, want);
    else if (strcmp(metric, "exact_match") == 0)
        check_value(c, metric, s.exact_match, want);
    else if (sscanf(metric, "precision_%d", &k) == 1)
        check_value(c, metric, metric_multilabel_class(p, t, n, C, k).precision, want);
    else if (sscanf(metric, "recall_%d", &k) == 1)
        check_value(c, metric, metric_multilabel_class(p, t, n, C, k).recall, want);
    else if (sscanf(metric, "f1_%d", &k) == 1)
        check_value(c, metric, metric_multilabel_class(p, t, n, C, k).f1, want);
    else
        TZ_EXPECT(0, "%s: unknown metric %s", c->name, metric);
    free(p);
    free(t);
}

static void check_metric(golden_case *c, const char *metric, double want) {
    size_t n = c->n_pred;
    if (strcmp(c->kind, "multilabel") == 0) {
        check_multilabel(c, metric, want);
        return;
    }
    if (strcmp(c->kind, "regression") == 0) {
        float *p = malloc(n * sizeof *p), *t = malloc(n * sizeof *t);
        for (size_t i = 0; i < n; i++) {
            p[i] = (float)c->pred[i];
            t[i] = (float)c->ref[i];
        }
        if (strcmp(metric, "pearson") == 0) {
            check_value(c, metric, metric_pearson(p, t, n), want);
        } else if (strcmp(metric, "spearman") == 0) {
            double s = 0;
            TZ_EXPECT_OK(metric_spearman(p, t, n, &s));
            check_value(c, metric, s, want);
        } else if (strcmp(metric, "mse") == 0) {
            check_value(c, metric, metric_mse(p, t, n), want);
        } else {
            TZ_EXPECT(0, "%s: unknown metric %s", c->name, metric);
        }
        free(p);
        free(t);
        return;
    }
    int32_t *p = malloc(n * sizeof *p), *l = malloc(n * sizeof *l);
    int k;
    for (size_t i = 0; i < n; i++) {
        p[i] = (int32_t)c->pred[i];
        l[i] = (int32_t)c->ref[i];
    }
    if (strcmp(metric, "accuracy") == 0)
        check_value(c, metric, metric_accuracy(p, l, n), want);
    else if (strcmp(metric, "f1") == 0)
        check_value(c, metric, metric_f1_binary(p, l, n), want);
    else if (strcmp(metric, "mcc") == 0)
        check_value(c, metric, metric_mcc_binary(p, l, n), want);
    else if (strcmp(metric, "f1_macro") == 0)
        check_value(c, metric, metric_f1_macro(p, l, n, class_count(p, l, n)), want);
    else if (sscanf(metric, "precision_%d", &k) == 1)
        check_value(c, metric, metric_class_score(p, l, n, k).precision, want);
    else if (sscanf(metric, "recall_%d", &k) == 1)
        check_value(c, metric, metric_class_score(p, l, n, k).recall, want);
    else if (sscanf(metric, "f1_%d", &k) == 1)
        check_value(c, metric, metric_f1_class(p, l, n, k), want);
    else
        TZ_EXPECT(0, "%s: unknown metric %s", c->name, metric);
    free(p);
    free(l);
}

static void test_golden(void) {
    const char *path = tz_source_path("tests/golden/metrics/metrics.txt");
    FILE *f = fopen(path, "r");
    TZ_EXPECT(f != NULL, "cannot open %s", path);
    if (!f) return;
    static golden_case c;
    char *line = NULL;
    size_t cap = 0;
    int cases = 0, metrics = 0;
    while (getline(&line, &cap, f) > 0) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char word[64];
        if (sscanf(line, "%63s", word) != 1) continue;
        char *rest = line + strlen(word);
        if (strcmp(word, "case") == 0) {
            memset(&c, 0, sizeof c);
            TZ_EXPECT(sscanf(rest, "%63s %31s", c.name, c.kind) == 2, "case line '%s'", line);
        } else if (strcmp(word, "classes") == 0) {
            c.classes = atoi(rest);
        } else if (strcmp(word, "pred") == 0) {
            c.n_pred = parse_values(rest, c.pred);
        } else if (strcmp(word, "label") == 0 || strcmp(word, "target") == 0) {
            c.n_ref = parse_values(rest, c.ref);
            TZ_EXPECT(c.n_ref == c.n_pred, "%s: %zu preds, %zu refs", c.name, c.n_pred, c.n_ref);
        } else if (strcmp(word, "end") == 0) {
            cases++;
        } else {
            check_metric(&c, word, strtod(rest, NULL));
            metrics++;
        }
    }
    free(line);
    fclose(f);
    TZ_EXPECT(cases >= 19 && metrics >= 80, "read %d cases, %d metric values", cases, metrics);
}

/* Hand cases that need no reference: skipped rows change nothing, ties rank by average. */
static void test_small(void) {
    const float p[] = {1, 2, 2, 3, 100}, t[] = {10, 20, 20, 30, NAN};
    double s = 0;
    TZ_EXPECT_OK(metric_spearman(p, t, 5, &s));
    TZ_EXPECT(fabs(s - 1) < 1e-15, "identical ties: spearman %.17g", s);
    TZ_EXPECT(fabs(metric_pearson(p, t, 5) - 1) < 1e-12, "NaN target row skipped: pearson %.17g",
              metric_pearson(p, t, 5));
    TZ_EXPECT(isnan(metric_pearson(p, t, 1)), "one row: NaN");
    TZ_EXPECT_OK(metric_spearman(p, t, 0, &s));
    TZ_EXPECT(isnan(s), "no rows: NaN");
    const float pn[] = {1, NAN, 3}, tn[] = {1, 2, 3};
    TZ_EXPECT(isnan(metric_pearson(pn, tn, 3)), "NaN prediction: NaN");
    TZ_EXPECT_OK(metric_spearman(pn, tn, 3, &s));
    TZ_EXPECT(isnan(s), "NaN prediction: spearman NaN");
    /* A constant that is not exactly representable as a mean of itself. */
    const float pc[] = {0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f}, tc[] = {1, 2, 3, 4, 5, 6, 7};
    TZ_EXPECT(isnan(metric_pearson(pc, tc, 7)), "constant 0.1: NaN");
    const int32_t pred[] = {0, 1, 2, 2, 1}, label[] = {0, 1, 1, 2, -100};
    TZ_EXPECT(fabs(metric_accuracy(pred, label, 5) - 0.75) < 1e-15, "3-class accuracy skipping -100");
}

/* A binary case worked by hand: tp 3, fp 1, fn 1, tn 1 over the 6 labelled rows. */
static void test_hand_binary(void) {
    int32_t pred[] = {1, 1, 0, 0, 1, 0, 1};
    int32_t gold[] = {1, 0, 0, 1, 1, -100, 1};
    TZ_EXPECT(fabs(metric_accuracy(pred, gold, 7) - 4.0 / 6) < 1e-12, "accuracy");
    TZ_EXPECT(fabs(metric_f1_binary(pred, gold, 7) - 6.0 / 8) < 1e-12, "f1");
    TZ_EXPECT(fabs(metric_mcc_binary(pred, gold, 7) - (3.0 - 1.0) / sqrt(4.0 * 4 * 2 * 2)) < 1e-12, "mcc");
}

int main(void) {
    test_golden();
    test_small();
    test_hand_binary();
    return tz_test_result("test_metrics");
}
