/* ROUGE-1/2/L as rouge_score (see metric_rouge.h). */
#include "metrics/metric_rouge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metric_ngram.h"
#include "metrics/metric_porter.h"
#include "runtime/base/rt_utf8.h"

/* What one code point becomes after Python's str.lower() and the [^a-z0-9]+ -> ' '
 * substitution: an ASCII letter or digit, or 0 for a separator. Two non-ASCII code points
 * lower-case to ASCII: U+212A KELVIN SIGN -> 'k', and U+0130 (I with dot above) -> 'i'
 * followed by U+0307, a separator (*then_sep). Every other non-ASCII code point lower-cases
 * to non-ASCII and so becomes a separator. */
static char metric_rouge_fold(uint32_t cp, bool *then_sep) {
    *then_sep = false;
    if (cp >= 'A' && cp <= 'Z') return (char)(cp - 'A' + 'a');
    if ((cp >= 'a' && cp <= 'z') || (cp >= '0' && cp <= '9')) return (char)cp;
    if (cp == 0x212A) return 'k';
    if (cp == 0x0130) {
        *then_sep = true;
        return 'i';
    }
    return 0;
}

/* Folds text into buf (at most as long: every code point maps to at most 2 bytes, and only
 * U+0130, 2 bytes long, maps to 2) as tokens separated by single NULs, and pushes each token
 * (stemmed in place when asked). */
static rt_status metric_rouge_tokens(const char *text, bool use_stemmer, char *buf, metric_token_list *toks) {
    rt_status st = RT_OK;
    size_t len = strlen(text), w = 0, start = 0;
    for (size_t i = 0; i <= len;) {
        bool then_sep = false;
        char c = 0;
        size_t k = 1;
        if (i < len) c = metric_rouge_fold(rt_utf8_decode(text + i, &k), &then_sep);
        if (c) buf[w++] = c;
        if (!c || then_sep) {
            if (w > start) {
                size_t n = w - start;
                /* rouge_score stems only tokens longer than 3 characters. */
                if (use_stemmer && n > 3) n = metric_porter_stem(buf + start, n, buf + start);
                if (n > 0) RT_TRY(metric_token_list_push(toks, buf + start, n));
                w = start + n;
                buf[w++] = '\0';
                start = w;
            }
        }
        i += k;
    }
fail:
    return st;
}

static rt_status metric_rouge_check_utf8(const char *text, const char *what) {
    size_t bad;
    if (!text) return rt_errorf(RT_ERR_CONFIG, "rouge: the %s is NULL", what);
    if (!rt_utf8_valid(text, strlen(text), &bad))
        return rt_errorf(RT_ERR_FORMAT, "rouge: %s: invalid UTF-8 at byte %zu", what, bad);
    return RT_OK;
}

rt_status metric_rouge_tokenize(const char *text, bool use_stemmer, char **out) {
    rt_status st = RT_OK;
    *out = NULL;
    metric_token_list toks = {0};
    char *buf = NULL;
    RT_TRY(metric_rouge_check_utf8(text, "text"));
    buf = malloc(strlen(text) + 2);
    if (!buf) RT_FAIL(RT_ERR_NOMEM, "rouge: out of memory for %zu bytes", strlen(text));
    RT_TRY(metric_rouge_tokens(text, use_stemmer, buf, &toks));
    /* Join in place: the tokens sit in order in buf, each followed by a NUL. */
    size_t w = 0;
    for (size_t t = 0; t < toks.n; t++) {
        if (t) buf[w++] = ' ';
        memmove(buf + w, toks.tok[t].s, toks.tok[t].len);
        w += toks.tok[t].len;
    }
    buf[w] = '\0';
    *out = buf;
    buf = NULL;
fail:
    free(buf);
    metric_token_list_free(&toks);
    return st;
}

rt_status metric_rouge_pair_counts(const char *prediction, const char *target, bool use_stemmer,
                                   metric_rouge_counts *out) {
    rt_status st = RT_OK;
    memset(out, 0, sizeof *out);
    metric_token_list toks = {0};
    char *buf_p = NULL, *buf_t = NULL;
    uint32_t *ids = NULL;
    RT_TRY(metric_rouge_check_utf8(prediction, "prediction"));
    RT_TRY(metric_rouge_check_utf8(target, "target"));
    buf_p = malloc(strlen(prediction) + 2);
    buf_t = malloc(strlen(target) + 2);
    if (!buf_p || !buf_t) RT_FAIL(RT_ERR_NOMEM, "rouge: out of memory for a pair");
    RT_TRY(metric_rouge_tokens(target, use_stemmer, buf_t, &toks));
    size_t nt = toks.n;
    RT_TRY(metric_rouge_tokens(prediction, use_stemmer, buf_p, &toks));
    size_t np = toks.n - nt;
    ids = malloc((toks.n ? toks.n : 1) * sizeof *ids);
    if (!ids) RT_FAIL(RT_ERR_NOMEM, "rouge: out of memory for %zu tokens", toks.n);
    RT_TRY(metric_ngram_intern(toks.tok, toks.n, ids));
    const uint32_t *t_ids = ids, *p_ids = ids + nt;
    out->target_len = (int64_t)nt;
    out->prediction_len = (int64_t)np;
    RT_TRY(metric_ngram_clipped_matches(t_ids, nt, &p_ids, &np, 1, 1, &out->overlap1));
    RT_TRY(metric_ngram_clipped_matches(t_ids, nt, &p_ids, &np, 1, 2, &out->overlap2));
    size_t lcs;
    RT_TRY(metric_ngram_lcs(t_ids, nt, p_ids, np, &lcs));
    out->lcs = (int64_t)lcs;
fail:
    free(buf_p);
    free(buf_t);
    free(ids);
    metric_token_list_free(&toks);
    return st;
}

/* scoring.fmeasure */
static double metric_rouge_f(double p, double r) { return p + r > 0 ? 2 * p * r / (p + r) : 0.0; }

/* _score_ngrams: counts below 1 are taken as 1 in the denominators. */
static metric_rouge_score metric_rouge_ngram_score(int64_t overlap, int64_t pred_count, int64_t target_count) {
    metric_rouge_score s;
    s.precision = (double)overlap / (double)(pred_count > 1 ? pred_count : 1);
    s.recall = (double)overlap / (double)(target_count > 1 ? target_count : 1);
    s.fmeasure = metric_rouge_f(s.precision, s.recall);
    return s;
}

void metric_rouge_scores_from_counts(const metric_rouge_counts *c, metric_rouge_scores *out) {
    int64_t nt = c->target_len, np = c->prediction_len;
    out->rouge1 = metric_rouge_ngram_score(c->overlap1, np, nt);
    out->rouge2 = metric_rouge_ngram_score(c->overlap2, np - 1, nt - 1);
    /* _score_lcs: zero when either side has no tokens. */
    metric_rouge_score l = {0, 0, 0};
    if (nt > 0 && np > 0) {
        l.precision = (double)c->lcs / (double)np;
        l.recall = (double)c->lcs / (double)nt;
        l.fmeasure = metric_rouge_f(l.precision, l.recall);
    }
    out->rougeL = l;
}

rt_status metric_rouge_pair(const char *prediction, const char *target, bool use_stemmer, metric_rouge_scores *out) {
    metric_rouge_counts c;
    memset(out, 0, sizeof *out);
    rt_status st = metric_rouge_pair_counts(prediction, target, use_stemmer, &c);
    if (st == RT_OK) metric_rouge_scores_from_counts(&c, out);
    return st;
}

static void metric_rouge_add(metric_rouge_score *sum, const metric_rouge_score *s) {
    sum->precision += s->precision;
    sum->recall += s->recall;
    sum->fmeasure += s->fmeasure;
}

static void metric_rouge_div(metric_rouge_score *s, double n) {
    s->precision /= n;
    s->recall /= n;
    s->fmeasure /= n;
}

rt_status metric_rouge_corpus(const char *const *predictions, const char *const *targets, size_t n, bool use_stemmer,
                              metric_rouge_scores *per_pair, metric_rouge_scores *mean) {
    memset(mean, 0, sizeof *mean);
    if (n == 0) return rt_errorf(RT_ERR_CONFIG, "rouge: empty corpus (no predictions)");
    metric_rouge_scores sum = {0};
    for (size_t i = 0; i < n; i++) {
        metric_rouge_scores s;
        rt_status st = metric_rouge_pair(predictions[i], targets[i], use_stemmer, &s);
        if (st != RT_OK) return rt_error_wrap(st, "rouge: pair %zu", i);
        if (per_pair) per_pair[i] = s;
        metric_rouge_add(&sum.rouge1, &s.rouge1);
        metric_rouge_add(&sum.rouge2, &s.rouge2);
        metric_rouge_add(&sum.rougeL, &s.rougeL);
    }
    metric_rouge_div(&sum.rouge1, (double)n);
    metric_rouge_div(&sum.rouge2, (double)n);
    metric_rouge_div(&sum.rougeL, (double)n);
    *mean = sum;
    return RT_OK;
}
