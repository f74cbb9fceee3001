/* Token sequences as the text metrics compare them: tokens are byte spans (equal bytes, equal
 * token, which for valid UTF-8 is Python's string equality), interned to small ids, then
 * counted as n-grams (BLEU's clipped matches, ROUGE-N's overlap) or aligned (ROUGE-L's longest
 * common subsequence). Sorting, not hashing, so the cost is O(L log L) and no table has to be
 * sized. */
#ifndef METRIC_NGRAM_H
#define METRIC_NGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/base/rt_status.h"

#define METRIC_NGRAM_MAX_ORDER 4

typedef struct {
    const char *s; /* not NUL-terminated */
    size_t len;
} metric_token;

/* A growable token array (the spans point into text the caller keeps alive). */
typedef struct {
    metric_token *tok;
    size_t n, cap;
} metric_token_list;

rt_status metric_token_list_push(metric_token_list *l, const char *s, size_t len);
void metric_token_list_free(metric_token_list *l);

/* ids[i] for toks[i], i < n: equal tokens get equal ids, distinct ones distinct ids. Intern
 * every sequence that will be compared in one call so that their ids agree. */
rt_status metric_ngram_intern(const metric_token *toks, size_t n, uint32_t *ids);

/* Clipped n-gram matches of order `order` (1..METRIC_NGRAM_MAX_ORDER): the sum over the distinct
 * n-grams of hyp of min(count in hyp, max over the references of the count there), as
 * sacrebleu counts BLEU's matches. With one reference it is the multiset intersection size,
 * ROUGE-N's overlap. refs[r] has ref_len[r] ids; a NULL refs[r] counts as empty. */
rt_status metric_ngram_clipped_matches(const uint32_t *hyp, size_t hyp_len, const uint32_t *const *refs,
                                       const size_t *ref_len, size_t n_refs, int order, int64_t *matches);

/* Length of a longest common subsequence of a and b (O(len_a * len_b) time, O(len_b) memory). */
rt_status metric_ngram_lcs(const uint32_t *a, size_t len_a, const uint32_t *b, size_t len_b, size_t *out);

#endif
