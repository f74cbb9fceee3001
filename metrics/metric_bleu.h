/* Corpus BLEU exactly as sacrebleu (2.x) computes it by default:
 * sacrebleu.corpus_bleu(hyps, [refs]) with tokenize='13a', smooth_method='exp', 4-grams,
 * mixed case, force=False, use_effective_order=False. Each segment is rstripped (Python's
 * whitespace), tokenized by mteval-v13a's rules, and split; n-gram matches are clipped by
 * the largest count in any reference, and the brevity penalty uses the reference length
 * closest to the hypothesis length (the shorter one on a tie). The statistics are plain
 * integer sums, so data-parallel evaluation can add them across ranks and score once.
 *
 * Text is UTF-8; invalid UTF-8 is RT_ERR_FORMAT (Python could not have decoded it). */
#ifndef METRIC_BLEU_H
#define METRIC_BLEU_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/base/rt_status.h"

#define METRIC_BLEU_MAX_ORDER 4

/* Sufficient statistics (sacrebleu's per-segment stats, summed). */
typedef struct {
    int64_t sys_len, ref_len;
    int64_t counts[METRIC_BLEU_MAX_ORDER]; /* clipped matching n-grams, n = 1..4 */
    int64_t totals[METRIC_BLEU_MAX_ORDER]; /* hypothesis n-grams */
} metric_bleu_stats;

/* The fields of sacrebleu's BLEUScore. */
typedef struct {
    double score;                             /* 0..100 */
    double precisions[METRIC_BLEU_MAX_ORDER]; /* percent, exp-smoothed where a count is 0 */
    double bp;                                /* brevity penalty */
    int64_t counts[METRIC_BLEU_MAX_ORDER], totals[METRIC_BLEU_MAX_ORDER];
    int64_t sys_len, ref_len;
} metric_bleu_result;

/* sacrebleu's Tokenizer13a()(line): '<skipped>' and '-\n' removed, '\n' -> ' ', the HTML
 * entities &quot; &amp; &lt; &gt; decoded (in that order, one pass each), ASCII punctuation
 * split off, '.' and ',' split off unless next to a digit on that side, '-' split after a
 * digit, whitespace collapsed to single spaces. *out is malloc'd (free it). */
rt_status metric_bleu_tokenize_13a(const char *line, char **out);

/* Adds one segment: hyp against refs[0..n_refs), where a NULL reference is absent (as
 * sacrebleu's None, for a varying number of references); at least one must be present. */
rt_status metric_bleu_add_segment(metric_bleu_stats *stats, const char *hyp, const char *const *refs, size_t n_refs);

/* sacrebleu's BLEU.compute_bleu with exp smoothing, from summed statistics. */
void metric_bleu_score(const metric_bleu_stats *stats, metric_bleu_result *out);

/* Corpus BLEU of n hypotheses against one reference each. n == 0 is RT_ERR_CONFIG. */
rt_status metric_bleu_corpus(const char *const *hyps, const char *const *refs, size_t n, metric_bleu_result *out);
/* Several reference streams, as corpus_bleu(hyps, [refs_1, ..., refs_k]): the reference r of
 * segment i is refs[r * n + i], NULL when absent. */
rt_status metric_bleu_corpus_multi(const char *const *hyps, const char *const *refs, size_t n_refs, size_t n,
                                   metric_bleu_result *out);

#endif
