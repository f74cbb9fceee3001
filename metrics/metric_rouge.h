/* ROUGE-1, ROUGE-2 and ROUGE-L exactly as Google's rouge_score package (0.1.x) computes them:
 * RougeScorer(['rouge1', 'rouge2', 'rougeL'], use_stemmer=...).score(target, prediction) per
 * pair. Its default tokenizer lower-cases (Python's str.lower), turns every run of characters
 * outside [a-z0-9] into a space, splits, and with the stemmer replaces each token longer than
 * 3 characters by its Porter stem (NLTK's, see metric_porter.h). ROUGE-N counts the n-gram
 * multiset overlap; ROUGE-L is the sentence-level longest common subsequence (not rougeLsum).
 * P = overlap / prediction count, R = overlap / target count, F = 2PR / (P + R).
 *
 * The corpus numbers are plain means over the pairs. HF's run_summarization reports
 * 100 * the mid F-measure of rouge_score's BootstrapAggregator (evaluate's default), which is
 * a resampled estimate of this same mean; use_aggregator=False gives the per-pair scores
 * whose mean this is. */
#ifndef METRIC_ROUGE_H
#define METRIC_ROUGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/base/rt_status.h"

typedef struct {
    double precision, recall, fmeasure; /* 0..1 */
} metric_rouge_score;

typedef struct {
    metric_rouge_score rouge1, rouge2, rougeL;
} metric_rouge_scores;

/* The integers the scores of one pair come from. */
typedef struct {
    int64_t target_len, prediction_len; /* tokens */
    int64_t overlap1, overlap2;         /* unigram and bigram multiset overlap */
    int64_t lcs;                        /* longest common subsequence, in tokens */
} metric_rouge_counts;

/* rouge_score's tokenizer; the tokens joined by single spaces into a malloc'd *out. Invalid
 * UTF-8 is RT_ERR_FORMAT. */
rt_status metric_rouge_tokenize(const char *text, bool use_stemmer, char **out);

rt_status metric_rouge_pair_counts(const char *prediction, const char *target, bool use_stemmer,
                                   metric_rouge_counts *out);
void metric_rouge_scores_from_counts(const metric_rouge_counts *c, metric_rouge_scores *out);
/* One pair (rouge_score's score(target, prediction); note the order there). */
rt_status metric_rouge_pair(const char *prediction, const char *target, bool use_stemmer, metric_rouge_scores *out);

/* Scores n pairs; per_pair (n entries) may be NULL; *mean gets the mean of each precision,
 * recall and F-measure. n == 0 is RT_ERR_CONFIG. */
rt_status metric_rouge_corpus(const char *const *predictions, const char *const *targets, size_t n, bool use_stemmer,
                              metric_rouge_scores *per_pair, metric_rouge_scores *mean);

#endif
