/* Interning, n-gram matching and LCS over token ids (see metric_ngram.h). */
#include "metrics/metric_ngram.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_buf.h"

rt_status metric_token_list_push(metric_token_list *l, const char *s, size_t len) {
    metric_token *t = rt_grow_try(l->tok, &l->cap, l->n + 1, sizeof *t);
    if (!t) return rt_errorf(RT_ERR_NOMEM, "token list: out of memory past %zu tokens", l->n);
    l->tok = t;
    l->tok[l->n].s = s;
    l->tok[l->n].len = len;
    l->n++;
    return RT_OK;
}

void metric_token_list_free(metric_token_list *l) {
    if (!l) return;
    free(l->tok);
    l->tok = NULL;
    l->n = l->cap = 0;
}

typedef struct {
    metric_token t;
    size_t i;
} metric_token_at;

static int metric_token_cmp(const metric_token *a, const metric_token *b) {
    size_t m = a->len < b->len ? a->len : b->len;
    int c = m ? memcmp(a->s, b->s, m) : 0;
    if (c) return c;
    return a->len < b->len ? -1 : (a->len > b->len);
}

static int metric_token_at_cmp(const void *a, const void *b) {
    return metric_token_cmp(&((const metric_token_at *)a)->t, &((const metric_token_at *)b)->t);
}

rt_status metric_ngram_intern(const metric_token *toks, size_t n, uint32_t *ids) {
    if (n == 0) return RT_OK;
    if (n > UINT32_MAX) return rt_errorf(RT_ERR_UNSUPPORTED, "ngram: %zu tokens, more than 2^32 - 1", n);
    metric_token_at *v = malloc(n * sizeof *v);
    if (!v) return rt_errorf(RT_ERR_NOMEM, "ngram: out of memory interning %zu tokens", n);
    for (size_t i = 0; i < n; i++) {
        v[i].t = toks[i];
        v[i].i = i;
    }
    qsort(v, n, sizeof *v, metric_token_at_cmp);
    uint32_t id = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && metric_token_cmp(&v[i - 1].t, &v[i].t) != 0) id++;
        ids[v[i].i] = id;
    }
    free(v);
    return RT_OK;
}

/* An n-gram as a fixed-size key, unused orders zero (ids are compared only up to `order`,
 * and all keys in one comparison have the same order). */
typedef struct {
    uint32_t w[METRIC_NGRAM_MAX_ORDER];
} metric_ngram_key;

static int metric_ngram_key_cmp(const void *a, const void *b) {
    const uint32_t *x = ((const metric_ngram_key *)a)->w, *y = ((const metric_ngram_key *)b)->w;
    for (int k = 0; k < METRIC_NGRAM_MAX_ORDER; k++)
        if (x[k] != y[k]) return x[k] < y[k] ? -1 : 1;
    return 0;
}

/* The sorted n-grams of seq; *count of them (0 when the sequence is shorter than order).
 * NULL with *count > 0 only when allocation failed. */
static metric_ngram_key *metric_ngram_sorted(const uint32_t *seq, size_t len, int order, size_t *count) {
    *count = len >= (size_t)order ? len - (size_t)order + 1 : 0;
    if (*count == 0) return NULL;
    metric_ngram_key *keys = calloc(*count, sizeof *keys);
    if (!keys) return NULL;
    for (size_t i = 0; i < *count; i++)
        for (int k = 0; k < order; k++) keys[i].w[k] = seq[i + (size_t)k];
    qsort(keys, *count, sizeof *keys, metric_ngram_key_cmp);
    return keys;
}

/* How many times key occurs in sorted keys[0..n). */
static size_t metric_ngram_count(const metric_ngram_key *keys, size_t n, const metric_ngram_key *key) {
    size_t lo = 0, hi = n; /* first index not below key */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (metric_ngram_key_cmp(&keys[mid], key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t end = lo;
    while (end < n && metric_ngram_key_cmp(&keys[end], key) == 0) end++;
    return end - lo;
}

rt_status metric_ngram_clipped_matches(const uint32_t *hyp, size_t hyp_len, const uint32_t *const *refs,
                                       const size_t *ref_len, size_t n_refs, int order, int64_t *matches) {
    rt_status st = RT_OK;
    RT_CHECK(order >= 1 && order <= METRIC_NGRAM_MAX_ORDER, "order=%d", order);
    *matches = 0;
    size_t nh = 0;
    metric_ngram_key *h = NULL, **r = calloc(n_refs ? n_refs : 1, sizeof *r);
    size_t *nr = calloc(n_refs ? n_refs : 1, sizeof *nr);
    if (!r || !nr) RT_FAIL(RT_ERR_NOMEM, "ngram: out of memory for %zu references", n_refs);
    h = metric_ngram_sorted(hyp, hyp_len, order, &nh);
    if (nh && !h) RT_FAIL(RT_ERR_NOMEM, "ngram: out of memory for %zu %d-grams", nh, order);
    for (size_t j = 0; j < n_refs; j++) {
        r[j] = refs[j] ? metric_ngram_sorted(refs[j], ref_len[j], order, &nr[j]) : NULL;
        if (nr[j] && !r[j]) RT_FAIL(RT_ERR_NOMEM, "ngram: out of memory for %zu %d-grams", nr[j], order);
    }
    for (size_t s = 0; s < nh;) {
        size_t e = s + 1;
        while (e < nh && metric_ngram_key_cmp(&h[e], &h[s]) == 0) e++;
        size_t best = 0;
        for (size_t j = 0; j < n_refs; j++) {
            size_t c = metric_ngram_count(r[j], nr[j], &h[s]);
            if (c > best) best = c;
        }
        *matches += (int64_t)(e - s < best ? e - s : best);
        s = e;
    }
fail:
    free(h);
    for (size_t j = 0; r && j < n_refs; j++) free(r[j]);
    free(r);
    free(nr);
    return st;
}

rt_status metric_ngram_lcs(const uint32_t *a, size_t len_a, const uint32_t *b, size_t len_b, size_t *out) {
    *out = 0;
    if (len_a == 0 || len_b == 0) return RT_OK;
    /* Two rows of the DP table over b: prev[j] = LCS(a[0..i-1), b[0..j)). */
    size_t *prev = calloc(len_b + 1, sizeof *prev), *cur = calloc(len_b + 1, sizeof *cur);
    if (!prev || !cur) {
        free(prev);
        free(cur);
        return rt_errorf(RT_ERR_NOMEM, "lcs: out of memory for %zu tokens", len_b);
    }
    for (size_t i = 1; i <= len_a; i++) {
        for (size_t j = 1; j <= len_b; j++) {
            if (a[i - 1] == b[j - 1])
                cur[j] = prev[j - 1] + 1;
            else
                cur[j] = prev[j] > cur[j - 1] ? prev[j] : cur[j - 1];
        }
        size_t *t = prev;
        prev = cur;
        cur = t;
    }
    *out = prev[len_b];
    free(prev);
    free(cur);
    return RT_OK;
}
