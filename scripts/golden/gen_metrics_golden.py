#!/usr/bin/env python3
"""Reference values for metrics/metric_glue.c: accuracy, binary F1, Matthews correlation,
macro-F1 and per-class precision, recall and F1 from scikit-learn, multi-label micro-F1,
macro-F1, exact match and per-class scores from scikit-learn on indicator matrices, Pearson and
Spearman from scipy.stats, the mean squared error from numpy, on fixed inputs (seeded random
ones, many ties, unlabelled rows, and degenerate ones where a metric is 0 or undefined).

Writes tests/golden/metrics/metrics.txt, read by tests/test_metrics.c. Format, one item a
line: `case NAME KIND` (KIND binary, multiclass, multilabel or regression), for multilabel
`classes C`, `pred ...`, `label ...` or `target ...` (multilabel: the (n, C) 0/1 matrices row
by row, a label row of nan unlabelled), then `METRIC VALUE` lines, then `end`. Labels -100 and targets nan mark
unlabelled rows: they are dropped here before calling sklearn/scipy, as the C metrics skip
them. Regression inputs are float32 values printed with 9 significant digits (exact round
trip); the references are computed on those float32 values widened to float64. Values are
printed with 17 significant digits; `nan` where scipy returns NaN (constant input).

    pip install scikit-learn scipy numpy
    python3 scripts/golden/gen_metrics_golden.py

Deterministic: a rerun with the same versions writes the same bytes.
"""
import math
import os
import platform
import sys
import warnings

import numpy as np
import scipy
import scipy.stats
import sklearn
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef, precision_recall_fscore_support

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "golden", "metrics", "metrics.txt")


def fmt(v):
    v = float(v)
    return "nan" if math.isnan(v) else "%.17g" % v


def classification_case(lines, name, kind, pred, label):
    pred = np.asarray(pred, dtype=np.int64)
    label = np.asarray(label, dtype=np.int64)
    keep = label != -100
    p, y = pred[keep], label[keep]
    lines.append("case %s %s" % (name, kind))
    lines.append("pred " + " ".join(str(int(v)) for v in pred))
    lines.append("label " + " ".join(str(int(v)) for v in label))
    lines.append("accuracy " + fmt(accuracy_score(y, p)))
    if kind == "binary":
        # zero_division=0.0 is sklearn's default outcome (with a warning) when there are no
        # positives at all; MCC is 0.0 when its denominator is.
        lines.append("f1 " + fmt(f1_score(y, p, pos_label=1, average="binary", zero_division=0.0)))
        lines.append("mcc " + fmt(matthews_corrcoef(y, p)))
    # what a user's own classes report: macro-F1 (over the classes in labels or predictions, as
    # sklearn averages) and each class's precision, recall and F1
    lines.append("f1_macro " + fmt(f1_score(y, p, average="macro", zero_division=0.0)))
    n_classes = int(max(pred.max(), label.max())) + 1
    prec, rec, f1, _ = precision_recall_fscore_support(y, p, labels=list(range(n_classes)), zero_division=0.0)
    for k in range(n_classes):
        lines.append("precision_%d %s" % (k, fmt(prec[k])))
        lines.append("recall_%d %s" % (k, fmt(rec[k])))
        lines.append("f1_%d %s" % (k, fmt(f1[k])))
    lines.append("end")


def multilabel_case(lines, name, pred, label):
    pred = np.asarray(pred, dtype=np.int64)
    label = np.asarray(label, dtype=np.float64)
    keep = ~np.isnan(label[:, 0])
    p, y = pred[keep], label[keep].astype(np.int64)
    n_classes = pred.shape[1]
    lines.append("case %s multilabel" % name)
    lines.append("classes %d" % n_classes)
    lines.append("pred " + " ".join(str(int(v)) for v in pred.ravel()))
    lines.append("label " + " ".join("nan" if math.isnan(v) else str(int(v)) for v in label.ravel()))
    # the library's defaults: a class with no positive anywhere scores zero_division's 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lines.append("f1_micro " + fmt(f1_score(y, p, average="micro")))
        lines.append("f1_macro " + fmt(f1_score(y, p, average="macro")))
        prec, rec, f1, _ = precision_recall_fscore_support(y, p, average=None)
    lines.append("exact_match " + fmt(accuracy_score(y, p)))
    for k in range(n_classes):
        lines.append("precision_%d %s" % (k, fmt(prec[k])))
        lines.append("recall_%d %s" % (k, fmt(rec[k])))
        lines.append("f1_%d %s" % (k, fmt(f1[k])))
    lines.append("end")


def regression_case(lines, name, pred, target):
    pred = np.asarray(pred, dtype=np.float32)
    target = np.asarray(target, dtype=np.float32)
    keep = ~np.isnan(target)
    x = pred[keep].astype(np.float64)
    y = target[keep].astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant-input warnings: NaN is the recorded answer
        pr = scipy.stats.pearsonr(x, y).statistic
        sr = scipy.stats.spearmanr(x, y).statistic
    lines.append("case %s regression" % name)
    lines.append("pred " + " ".join("%.9g" % v for v in pred))
    lines.append("target " + " ".join("nan" if math.isnan(v) else "%.9g" % v for v in target))
    lines.append("pearson " + fmt(pr))
    lines.append("spearman " + fmt(sr))
    lines.append("mse " + fmt(np.mean((x - y) ** 2)))
    lines.append("end")


def main():
    rng = np.random.default_rng(20240611)
    lines = [
        "# generated by scripts/golden/gen_metrics_golden.py; do not edit",
        "# python %s, numpy %s, scipy %s, scikit-learn %s"
        % (platform.python_version(), np.__version__, scipy.__version__, sklearn.__version__),
    ]

    # Binary: seeded, with some unlabelled rows.
    label = rng.integers(0, 2, 64)
    pred = np.where(rng.random(64) < 0.75, label, 1 - label)
    label[[3, 17, 40]] = -100
    classification_case(lines, "binary_random", "binary", pred, label)
    # Larger and imbalanced, like MRPC's 68% positives.
    label = (rng.random(500) < 0.68).astype(np.int64)
    pred = np.where(rng.random(500) < 0.85, label, 1 - label)
    classification_case(lines, "binary_imbalanced", "binary", pred, label)
    # Degenerate: every prediction 1 (MCC denominator 0), every prediction 0 (no positives
    # predicted: F1 0), no positive labels and no positive predictions (F1 0/0).
    classification_case(lines, "binary_all_one", "binary", [1] * 10, [1, 0, 1, 1, 0, 1, 0, 1, 1, 1])
    classification_case(lines, "binary_all_zero", "binary", [0] * 8, [1, 0, 1, 1, 0, 0, 0, 1])
    classification_case(lines, "binary_no_positive", "binary", [0] * 6, [0] * 6)
    classification_case(lines, "binary_perfect_inverse", "binary", [0, 1, 0, 1, 1], [1, 0, 1, 0, 0])
    # Three classes (MNLI): accuracy only.
    label = rng.integers(0, 3, 90)
    pred = np.where(rng.random(90) < 0.6, label, rng.integers(0, 3, 90))
    label[[0, 50]] = -100
    classification_case(lines, "multiclass_mnli", "multiclass", pred, label)

    # Regression (STS-B scores 0..5).
    target = rng.uniform(0, 5, 200).astype(np.float32)
    pred = (target + rng.normal(0, 1.0, 200)).astype(np.float32)
    regression_case(lines, "stsb_random", pred, target)
    # Ties in both: targets on a 0.2 grid, predictions on a 0.5 grid (spearman average ranks).
    target = (np.round(rng.uniform(0, 5, 120) * 5) / 5).astype(np.float32)
    pred = (np.round((target + rng.normal(0, 0.8, 120)) * 2) / 2).astype(np.float32)
    regression_case(lines, "ties", pred, target)
    # Unlabelled rows (NaN targets) are skipped.
    target = rng.uniform(0, 5, 40).astype(np.float32)
    pred = (target * 0.5 + rng.normal(0, 0.5, 40)).astype(np.float32)
    target[[2, 9, 33]] = np.nan
    regression_case(lines, "nan_targets", pred, target)
    # Monotone but not linear: spearman 1, pearson below 1.
    x = np.linspace(0.1, 5, 30, dtype=np.float32)
    regression_case(lines, "monotone", np.exp(x).astype(np.float32), x)
    # Negative, and all values tied but two.
    regression_case(lines, "anti", [5, 4, 3, 2, 1, 0.5], [0, 1, 2, 3, 4, 4.5])
    regression_case(lines, "mostly_tied", [1, 1, 1, 1, 2, 3], [2, 2, 2, 2, 2, 5])
    regression_case(lines, "two_rows", [0.25, 3.5], [1, 4])
    # Degenerate: a constant prediction (a collapsed regressor) and a constant target.
    regression_case(lines, "constant_pred", [2.5] * 7, [0, 1, 2, 3, 4, 5, 1.5])
    regression_case(lines, "constant_target", [0.1, 0.2, 0.3, 0.4], [3.0] * 4)

    # Multi-label, drawn after every earlier case so that their inputs stay as they were: seeded
    # (classes of different frequencies, some unlabelled rows); a class that never occurs in the
    # labels nor the predictions, and all-zero rows; a perfect and an empty prediction.
    label = (rng.random((50, 5)) < [0.5, 0.3, 0.1, 0.7, 0.2]).astype(np.float64)
    pred = np.where(rng.random((50, 5)) < 0.8, label, 1 - label).astype(np.int64)
    label[[4, 21, 37]] = np.nan
    multilabel_case(lines, "multilabel_random", pred, label)
    label = np.array([[1, 0, 0], [0, 0, 0], [1, 1, 0], [0, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=np.float64)
    pred = np.array([[1, 0, 0], [0, 0, 0], [0, 1, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 0]])
    multilabel_case(lines, "multilabel_unused_class", pred, label)
    multilabel_case(lines, "multilabel_perfect", label.astype(np.int64), label)
    multilabel_case(lines, "multilabel_none_predicted", np.zeros((7, 3), dtype=np.int64), label)

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", os.path.normpath(OUT), file=sys.stderr)


if __name__ == "__main__":
    main()
