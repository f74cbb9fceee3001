/* Corpus BLEU statistics and score, as sacrebleu's BLEU (see metric_bleu.h). */
#include "metrics/metric_bleu.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metric_ngram.h"
#include "runtime/base/rt_utf8.h"

/* sacrebleu's _preprocess_segment: rstrip (Python whitespace), then 13a. `what` names the
 * text in messages. */
static rt_status metric_bleu_preprocess(const char *text, const char *what, char **out) {
    size_t len = strlen(text), bad;
    if (!rt_utf8_valid(text, len, &bad))
        return rt_errorf(RT_ERR_FORMAT, "%s: invalid UTF-8 at byte %zu of %zu", what, bad, len);
    size_t keep = rt_utf8_rstrip_len(text, len);
    char *stripped = malloc(keep + 1);
    if (!stripped) return rt_errorf(RT_ERR_NOMEM, "%s: out of memory for %zu bytes", what, len);
    memcpy(stripped, text, keep);
    stripped[keep] = '\0';
    rt_status st = metric_bleu_tokenize_13a(stripped, out);
    free(stripped);
    return st;
}

/* Tokens of a 13a output (single spaces between tokens, none at the ends). */
static rt_status metric_bleu_split(const char *s, metric_token_list *toks) {
    rt_status st = RT_OK;
    for (const char *p = s; *p;) {
        const char *e = strchr(p, ' ');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        RT_TRY(metric_token_list_push(toks, p, n));
        p += n + (e != NULL);
    }
fail:
    return st;
}

/* sacrebleu's _get_closest_ref_len: the closest length, the shorter one on a tie. */
static int64_t metric_bleu_closest_ref_len(int64_t hyp_len, const int64_t *lens, size_t n) {
    int64_t best_diff = -1, best = -1;
    for (size_t r = 0; r < n; r++) {
        if (lens[r] < 0) continue; /* absent reference */
        int64_t d = hyp_len > lens[r] ? hyp_len - lens[r] : lens[r] - hyp_len;
        if (best_diff < 0 || d < best_diff) {
            best_diff = d;
            best = lens[r];
        } else if (d == best_diff && lens[r] < best) {
            best = lens[r];
        }
    }
    return best;
}

/* metric_bleu_add_segment, with messages that name only the text ("reference 1: ..."). */
static rt_status metric_bleu_segment(metric_bleu_stats *stats, const char *hyp, const char *const *refs,
                                     size_t n_refs) {
    rt_status st = RT_OK;
    size_t n_texts = n_refs + 1;
    char **texts = calloc(n_texts, sizeof *texts);      /* [0] hyp, [1 + r] refs */
    size_t *first = calloc(n_texts + 1, sizeof *first); /* token offsets per text */
    int64_t *ref_lens = calloc(n_refs ? n_refs : 1, sizeof *ref_lens);
    const uint32_t **ref_ids = calloc(n_refs ? n_refs : 1, sizeof *ref_ids);
    size_t *ref_n = calloc(n_refs ? n_refs : 1, sizeof *ref_n);
    metric_token_list toks = {0};
    uint32_t *ids = NULL;
    if (!texts || !first || !ref_lens || !ref_ids || !ref_n)
        RT_FAIL(RT_ERR_NOMEM, "out of memory for %zu references", n_refs);
    if (!hyp) RT_FAIL(RT_ERR_CONFIG, "the hypothesis is NULL");
    bool any_ref = false;
    for (size_t r = 0; r < n_refs; r++) any_ref |= refs[r] != NULL;
    if (!any_ref) RT_FAIL(RT_ERR_CONFIG, "no reference (all %zu are NULL)", n_refs);

    RT_TRY(metric_bleu_preprocess(hyp, "hypothesis", &texts[0]));
    for (size_t r = 0; r < n_refs; r++) {
        char what[48];
        snprintf(what, sizeof what, "reference %zu", r);
        if (refs[r]) RT_TRY(metric_bleu_preprocess(refs[r], what, &texts[1 + r]));
    }
    for (size_t t = 0; t < n_texts; t++) {
        first[t] = toks.n;
        if (texts[t]) RT_TRY(metric_bleu_split(texts[t], &toks));
    }
    first[n_texts] = toks.n;
    ids = malloc((toks.n ? toks.n : 1) * sizeof *ids);
    if (!ids) RT_FAIL(RT_ERR_NOMEM, "out of memory for %zu tokens", toks.n);
    RT_TRY(metric_ngram_intern(toks.tok, toks.n, ids));

    size_t hyp_len = first[1] - first[0];
    for (size_t r = 0; r < n_refs; r++) {
        ref_n[r] = first[r + 2] - first[r + 1];
        ref_ids[r] = texts[1 + r] ? ids + first[r + 1] : NULL;
        ref_lens[r] = texts[1 + r] ? (int64_t)ref_n[r] : -1;
    }
    metric_bleu_stats s = {.sys_len = (int64_t)hyp_len};
    s.ref_len = metric_bleu_closest_ref_len(s.sys_len, ref_lens, n_refs);
    for (int k = 0; k < METRIC_BLEU_MAX_ORDER; k++) {
        s.totals[k] = hyp_len > (size_t)k ? (int64_t)(hyp_len - (size_t)k) : 0;
        RT_TRY(metric_ngram_clipped_matches(ids, hyp_len, ref_ids, ref_n, n_refs, k + 1, &s.counts[k]));
    }
    stats->sys_len += s.sys_len;
    stats->ref_len += s.ref_len;
    for (int k = 0; k < METRIC_BLEU_MAX_ORDER; k++) {
        stats->counts[k] += s.counts[k];
        stats->totals[k] += s.totals[k];
    }
fail:
    for (size_t t = 0; texts && t < n_texts; t++) free(texts[t]);
    free(texts);
    free(first);
    free(ref_lens);
    free(ref_ids);
    free(ref_n);
    free(ids);
    metric_token_list_free(&toks);
    return st;
}

rt_status metric_bleu_add_segment(metric_bleu_stats *stats, const char *hyp, const char *const *refs, size_t n_refs) {
    rt_status st = metric_bleu_segment(stats, hyp, refs, n_refs);
    return st == RT_OK ? st : rt_error_wrap(st, "bleu");
}

/* sacrebleu's my_log: log, with log(0) floored to -9999999999. */
static double metric_bleu_log(double x) { return x == 0.0 ? -9999999999.0 : log(x); }

void metric_bleu_score(const metric_bleu_stats *s, metric_bleu_result *out) {
    memset(out, 0, sizeof *out);
    out->sys_len = s->sys_len;
    out->ref_len = s->ref_len;
    memcpy(out->counts, s->counts, sizeof out->counts);
    memcpy(out->totals, s->totals, sizeof out->totals);
    out->bp = 1.0;
    if (s->sys_len < s->ref_len) out->bp = s->sys_len > 0 ? exp(1.0 - (double)s->ref_len / (double)s->sys_len) : 0.0;
    bool any = false;
    for (int k = 0; k < METRIC_BLEU_MAX_ORDER; k++) any |= s->counts[k] != 0;
    if (!any) return; /* score 0 and precisions 0, as sacrebleu's early stop (#141) */
    double smooth = 1.0;
    for (int k = 0; k < METRIC_BLEU_MAX_ORDER; k++) {
        if (s->totals[k] == 0) break; /* the remaining precisions stay 0 */
        if (s->counts[k] == 0) {
            smooth *= 2;
            out->precisions[k] = 100.0 / (smooth * (double)s->totals[k]);
        } else {
            out->precisions[k] = 100.0 * (double)s->counts[k] / (double)s->totals[k];
        }
    }
    /* Summed left to right, as Python's sum() over the list. */
    double log_sum = 0.0;
    for (int k = 0; k < METRIC_BLEU_MAX_ORDER; k++) log_sum += metric_bleu_log(out->precisions[k]);
    out->score = out->bp * exp(log_sum / METRIC_BLEU_MAX_ORDER);
}

rt_status metric_bleu_corpus_multi(const char *const *hyps, const char *const *refs, size_t n_refs, size_t n,
                                   metric_bleu_result *out) {
    rt_status st = RT_OK;
    memset(out, 0, sizeof *out);
    if (n == 0) return rt_errorf(RT_ERR_CONFIG, "bleu: empty corpus (no hypotheses)");
    if (n_refs == 0) return rt_errorf(RT_ERR_CONFIG, "bleu: no reference stream");
    const char **seg_refs = malloc(n_refs * sizeof *seg_refs);
    if (!seg_refs) return rt_errorf(RT_ERR_NOMEM, "bleu: out of memory for %zu references", n_refs);
    metric_bleu_stats stats = {0};
    for (size_t i = 0; i < n; i++) {
        for (size_t r = 0; r < n_refs; r++) seg_refs[r] = refs[r * n + i];
        st = metric_bleu_segment(&stats, hyps[i], seg_refs, n_refs);
        if (st != RT_OK) {
            st = rt_error_wrap(st, "bleu: segment %zu", i);
            goto fail;
        }
    }
    metric_bleu_score(&stats, out);
fail:
    free(seg_refs);
    return st;
}

rt_status metric_bleu_corpus(const char *const *hyps, const char *const *refs, size_t n, metric_bleu_result *out) {
    return metric_bleu_corpus_multi(hyps, refs, 1, n, out);
}
