/* Tokenizing a split into one flat id array (see data_dataset.h; the tokenizer-free parts
 * are in data_rows.c). Examples are encoded in parallel, a piece at a time, into rows of their
 * own, then packed; errors from worker threads are carried back to the calling thread because
 * the error message buffer is thread-local. */
#include "data/data_dataset.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static bool ids_equal(const tok_ids *v, const int32_t *ref, int n) {
    if (v->n != (size_t)n) return false;
    for (int i = 0; i < n; i++)
        if (v->ids[i] != ref[i]) return false;
    return true;
}

rt_status data_pair_template_detect(const tok_tokenizer *tok, data_pair_template *out) {
    rt_status st = RT_OK;
    tok_ids pair = {0}, single = {0};
    memset(out, 0, sizeof *out);
    RT_TRY(tok_encode_pair(tok, "", "", &pair));
    RT_TRY(tok_encode_pair(tok, "", NULL, &single));
    if (pair.n == 0 && single.n == 0) goto fail; /* GPT-2: no special tokens; st is RT_OK */

    int32_t cls = tok_piece_to_id(tok, "[CLS]"), sep = tok_piece_to_id(tok, "[SEP]");
    int32_t bos = tok_bos_id(tok), eos = tok_eos_id(tok);
    const int32_t bert_pair[3] = {cls, sep, sep}, bert_single[2] = {cls, sep};
    const int32_t roberta_pair[4] = {bos, eos, eos, eos}, roberta_single[2] = {bos, eos};
    if (cls >= 0 && sep >= 0 && ids_equal(&pair, bert_pair, 3) && ids_equal(&single, bert_single, 2)) {
        out->prefix[0] = cls;
        out->n_prefix = 1;
        out->middle[0] = sep;
        out->n_middle = 1;
        out->suffix[0] = sep;
        out->n_suffix = 1;
        out->single_suffix[0] = sep;
        out->n_single_suffix = 1;
        out->segments = true;
    } else if (bos >= 0 && eos >= 0 && ids_equal(&pair, roberta_pair, 4) && ids_equal(&single, roberta_single, 2)) {
        out->prefix[0] = bos;
        out->n_prefix = 1;
        out->middle[0] = eos;
        out->middle[1] = eos;
        out->n_middle = 2;
        out->suffix[0] = eos;
        out->n_suffix = 1;
        out->single_suffix[0] = eos;
        out->n_single_suffix = 1;
    } else {
        RT_FAIL(RT_ERR_UNSUPPORTED,
                "tokenizer %s: its special tokens for a pair (%zu ids for an empty pair) are not one of "
                "the known templates (none, [CLS] a [SEP] b [SEP], <s> a </s></s> b </s>)",
                tok_kind_name(tok), pair.n);
    }
fail:
    tok_ids_free(&pair);
    tok_ids_free(&single);
    return st;
}

/* Joins the kept parts of a and b with the template into a fresh row. */
static int32_t *join_row(const data_pair_template *tp, bool is_pair, const int32_t *a, size_t ka, const int32_t *b,
                         size_t kb, size_t *len, size_t *len_a) {
    size_t n = (size_t)tp->n_prefix + ka +
               (is_pair ? (size_t)tp->n_middle + kb + (size_t)tp->n_suffix : (size_t)tp->n_single_suffix);
    int32_t *row = malloc((n ? n : 1) * sizeof *row);
    if (!row) return NULL;
    size_t k = 0;
    for (int i = 0; i < tp->n_prefix; i++) row[k++] = tp->prefix[i];
    if (ka) memcpy(row + k, a, ka * sizeof *row);
    k += ka;
    if (is_pair) {
        for (int i = 0; i < tp->n_middle; i++) row[k++] = tp->middle[i];
        *len_a = k;
        if (kb) memcpy(row + k, b, kb * sizeof *row);
        k += kb;
        for (int i = 0; i < tp->n_suffix; i++) row[k++] = tp->suffix[i];
    } else {
        for (int i = 0; i < tp->n_single_suffix; i++) row[k++] = tp->single_suffix[i];
        *len_a = k;
    }
    *len = k;
    return row;
}

rt_status data_tokenize_pairs(const data_examples *ex, const tok_tokenizer *tok, int max_len, data_tokenized *out) {
    return data_tokenize_pairs_rule(ex, tok, max_len, DATA_TRUNC_HF_FAST, out);
}

/* Rows per piece: each piece is encoded in parallel into rows of its own, which are packed into
 * the set's one id array and freed before the next piece, so that a large file never holds its
 * ids twice. */
#define DATA_TOKENIZE_PIECE ((size_t)1 << 16)

/* Appends n ids to the set's growing id array (*cap ids allocated). */
static rt_status pack_ids(data_tokenized *out, size_t *used, size_t *cap, const int32_t *ids, size_t n) {
    if (*used + n > *cap) {
        size_t want = *cap + *cap / 2 > *used + n ? *cap + *cap / 2 : *used + n + 4096;
        int32_t *p = realloc(out->ids, want * sizeof *p);
        if (!p) return rt_errorf(RT_ERR_NOMEM, "tokenized dataset: out of memory for %zu ids", want);
        out->ids = p;
        *cap = want;
    }
    if (n) memcpy(out->ids + *used, ids, n * sizeof *ids);
    *used += n;
    return RT_OK;
}

rt_status data_tokenize_pairs_rule(const data_examples *ex, const tok_tokenizer *tok, int max_len, data_trunc_rule rule,
                                   data_tokenized *out) {
    rt_status st = RT_OK;
    data_pair_template tp;
    int32_t **rows = NULL;
    int32_t *lens = NULL, *lens_a = NULL;
    unsigned char *truncated = NULL;
    tok_ids check = {0};
    memset(out, 0, sizeof *out);
    const char *src = ex->path ? ex->path : "examples";
    const bool is_pair = ex->text_b != NULL;
    const size_t n = ex->n, piece = n < DATA_TOKENIZE_PIECE ? (n ? n : 1) : DATA_TOKENIZE_PIECE;

    RT_TRY(data_pair_template_detect(tok, &tp));
    int n_special = is_pair ? tp.n_prefix + tp.n_middle + tp.n_suffix : tp.n_prefix + tp.n_single_suffix;
    if (max_len <= n_special)
        RT_FAIL(RT_ERR_CONFIG, "max_len %d: expected more than the %d special tokens of tokenizer %s", max_len,
                n_special, tok_kind_name(tok));
    const size_t budget = (size_t)(max_len - n_special);

    rows = calloc(piece, sizeof *rows);
    lens = calloc(piece, sizeof *lens);
    lens_a = calloc(piece, sizeof *lens_a);
    truncated = calloc(piece, 1);
    out->n = n;
    out->offsets = malloc((n + 1) * sizeof *out->offsets);
    out->lengths = malloc((n ? n : 1) * sizeof *out->lengths);
    out->len_a = malloc((n ? n : 1) * sizeof *out->len_a);
    out->labels = malloc((n ? n : 1) * sizeof *out->labels);
    if (!rows || !lens || !lens_a || !truncated || !out->offsets || !out->lengths || !out->len_a || !out->labels)
        RT_FAIL(RT_ERR_NOMEM, "%s: out of memory tokenizing %zu examples", src, n);

    size_t used = 0, cap = 0, n_trunc = 0;
    bool checked = false;
    for (size_t p0 = 0; p0 < n; p0 += piece) {
        const size_t m = n - p0 < piece ? n - p0 : piece;
        /* The first failure (lowest example index) wins, so the message does not depend on timing. */
        int failed = 0;
        size_t fail_i = (size_t)-1;
        rt_status fail_st = RT_OK;
        char fail_msg[768] = "";
#pragma omp parallel
        {
            tok_ids a = {0}, b = {0};
#pragma omp for schedule(dynamic, 64)
            for (size_t j = 0; j < m; j++) {
                const size_t i = p0 + j;
                int stop;
#pragma omp atomic read
                stop = failed;
                if (stop) continue;
                tok_ids_clear(&a);
                tok_ids_clear(&b);
                const char *what = "text a";
                const char *ta = ex->text_a[i];
                rt_status s = tok_encode(tok, ta, strlen(ta), &a);
                if (s == RT_OK && is_pair) {
                    what = "text b";
                    const char *tb = ex->text_b[i];
                    s = tok_encode(tok, tb, strlen(tb), &b);
                }
                if (s == RT_OK) {
                    size_t ka, kb;
                    data_truncate_longest_first(a.n, is_pair ? b.n : 0, budget, rule, &ka, &kb);
                    truncated[j] = ka < a.n || kb < (is_pair ? b.n : 0);
                    size_t len = 0, len_a = 0;
                    rows[j] = join_row(&tp, is_pair, a.ids, ka, b.ids, kb, &len, &len_a);
                    lens[j] = (int32_t)len; /* <= max_len */
                    lens_a[j] = (int32_t)len_a;
                    if (!rows[j]) {
                        s = rt_errorf(RT_ERR_NOMEM, "out of memory");
                        what = "row";
                    }
                }
                if (s != RT_OK) {
#pragma omp critical(data_tokenize_error)
                    {
                        if (i < fail_i) {
                            fail_i = i;
                            fail_st = s;
                            snprintf(fail_msg, sizeof fail_msg, "%s:%d: %s: %s", data_examples_row_path(ex, i),
                                     ex->line ? ex->line[i] : (int)i + 1, what, rt_error_message());
                        }
#pragma omp atomic write
                        failed = 1;
                    }
                }
            }
            tok_ids_free(&a);
            tok_ids_free(&b);
        }
        if (failed) RT_FAIL(fail_st, "%s", fail_msg);

        /* Check the join against the tokenizer's own pair encoding once, on the first row that
         * was not truncated: catches a template that detection got wrong. */
        for (size_t j = 0; j < m && !checked; j++) {
            if (truncated[j]) continue;
            const size_t i = p0 + j;
            RT_TRY(tok_encode_pair(tok, ex->text_a[i], is_pair ? ex->text_b[i] : NULL, &check));
            bool same = check.n == (size_t)lens[j] &&
                        (lens[j] == 0 || memcmp(check.ids, rows[j], (size_t)lens[j] * sizeof(int32_t)) == 0);
            if (!same)
                RT_FAIL(RT_ERR_UNSUPPORTED,
                        "%s:%d: tokenizer %s: joining the separately encoded texts gives %d ids but "
                        "tok_encode_pair gives %zu (or different ids)",
                        data_examples_row_path(ex, i), ex->line ? ex->line[i] : (int)i + 1, tok_kind_name(tok), lens[j],
                        check.n);
            checked = true;
        }

        for (size_t j = 0; j < m; j++) { /* packed, and the piece's rows freed */
            const size_t i = p0 + j;
            out->offsets[i] = used;
            RT_TRY(pack_ids(out, &used, &cap, rows[j], (size_t)lens[j]));
            out->lengths[i] = lens[j];
            out->len_a[i] = lens_a[j];
            out->labels[i] = ex->labels ? ex->labels[i] : DATA_LABEL_NONE;
            if (lens[j] > out->longest) out->longest = lens[j];
            n_trunc += truncated[j];
            free(rows[j]);
            rows[j] = NULL;
        }
    }
    out->offsets[n] = used;
    if (!out->ids) RT_TRY(pack_ids(out, &used, &cap, NULL, 0)); /* an empty set still has an array */
    int32_t *fit = realloc(out->ids, (used ? used : 1) * sizeof *fit);
    if (fit) out->ids = fit;
    RT_TRY(data_tokenized_set_targets(out, ex->targets, ex->target_width));
    out->segments = tp.segments;
    out->max_len = max_len;
    out->n_truncated = n_trunc;

fail:
    for (size_t j = 0; rows && j < piece; j++) free(rows[j]);
    free(rows);
    free(lens);
    free(lens_a);
    free(truncated);
    tok_ids_free(&check);
    if (st != RT_OK) data_tokenized_free(out);
    return st;
}
