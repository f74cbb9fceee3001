/* A tokenized classification dataset: every example's ids, back to back in one int32 array
 * with offsets, plus its label. Built once at start-up from data_examples; the collator
 * slices rows out of it without copying the dataset again.
 *
 * Pairs are tokenized as HF does with truncation=True (strategy 'longest_first'): text a and
 * text b are encoded separately, cut down to max_len minus the special tokens, then joined
 * with the tokenizer's special tokens, [prefix] a [middle] b [suffix]:
 *   GPT-2     a b                       (no special tokens)
 *   BERT      [CLS] a [SEP] b [SEP]     single: [CLS] a [SEP]
 *   RoBERTa   <s> a </s></s> b </s>     single: <s> a </s>
 * The template is found by asking tok_encode_pair for an empty pair (see
 * data_pair_template_detect), and the first example is checked against tok_encode_pair, so
 * a tokenizer whose template is not one of these fails loudly instead of training on
 * wrongly joined ids. */
#ifndef DATA_DATASET_H
#define DATA_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "data/data_glue.h"
#include "runtime/base/rt_status.h"
#include "tokenizers/tok.h"

/* How longest_first splits the budget when both texts are too long; the two HF code paths
 * differ when the budget is odd:
 *   HF_FAST (Rust `tokenizers`, what AutoTokenizer gives by default): if only the longer
 *     text must shrink, it keeps budget - shorter; otherwise the text that was longer keeps
 *     ceil(budget/2) and the other floor(budget/2); on equal lengths b keeps the ceil.
 *   HF_SLOW (Python truncate_sequences, use_fast=False): remove from the longer text, from b
 *     on ties, one token at a time; the net effect is that a keeps ceil(budget/2).
 * Tokens are always removed from the end (truncation_side='right'). */
typedef enum { DATA_TRUNC_HF_FAST = 0, DATA_TRUNC_HF_SLOW = 1 } data_trunc_rule;

/* How many tokens of a and b to keep so that keep_a + keep_b <= budget. Pure; len_b = 0 with
 * no second text truncates a alone. */
void data_truncate_longest_first(size_t len_a, size_t len_b, size_t budget, data_trunc_rule rule, size_t *keep_a,
                                 size_t *keep_b);

/* Special tokens around a pair and around a single text (HF TemplateProcessing, restricted
 * to the shapes above). */
typedef struct {
    int32_t prefix[2], middle[2], suffix[2];
    int n_prefix, n_middle, n_suffix;
    int32_t single_suffix[2];
    int n_single_suffix; /* single text: [prefix] a [single_suffix] */
    bool segments;       /* text B gets token type 1 (BERT); RoBERTa and GPT-2 use 0 everywhere, as HF */
} data_pair_template;

/* Finds the template from tok_encode_pair("", "") and the tokenizer's special ids:
 * empty -> none (GPT-2); [CLS][SEP][SEP] -> BERT; <s></s></s></s> -> RoBERTa. Anything
 * else is RT_ERR_UNSUPPORTED naming the tokenizer kind. */
rt_status data_pair_template_detect(const tok_tokenizer *tok, data_pair_template *out);

/* Storage that datasets share instead of owning their arrays: a tokenized-cache file mapped
 * read-only into memory (data_cache.h), a malloc'd buffer holding such a file, or bytes the
 * caller owns. It is released with the last set that refers to it; a mapped corpus larger than
 * RAM is paged in from disk as the loader reads rows, so memory stays flat. */
typedef enum { DATA_BACKING_BORROWED, DATA_BACKING_MALLOC, DATA_BACKING_MAPPED } data_backing_kind;
typedef struct {
    void *addr;
    size_t len;
    data_backing_kind kind;
    int refs; /* the sets that refer to it (set-up is single-threaded) */
} data_backing;

/* A new backing with one reference (rt_xmalloc'd). */
data_backing *data_backing_new(void *addr, size_t len, data_backing_kind kind);
/* Drops a reference; the last one unmaps or frees the storage. NULL is fine. */
void data_backing_release(data_backing *b);

typedef struct {
    size_t n;
    int32_t *ids;          /* all rows back to back (from ids[offsets[0]]: 0 but in a slice) */
    size_t *offsets;       /* (n + 1) row i is ids[offsets[i] .. offsets[i+1]) */
    int32_t *lengths;      /* (n) tokens in row i, specials included, <= max_len */
    int32_t *len_a;        /* (n) tokens of segment A with its specials (token_type_id 0 for BERT) */
    bool segments;         /* token types: 1 after len_a (BERT); false = 0 everywhere (RoBERTa, GPT-2) */
    int32_t *labels;       /* (n) class id or DATA_LABEL_NONE (always DATA_LABEL_NONE with targets) */
    float *targets;        /* (n, target_width) a regression score (width 1) or a multi-label row's 0/1
                         * per class (width n_labels); NaN first = unlabelled; NULL for class ids */
    int target_width;      /* floats a row in targets; 0 without them */
    int max_len;           /* the limit it was built with */
    int longest;           /* longest row after truncation */
    size_t n_truncated;    /* rows that lost tokens to max_len */
    data_backing *backing; /* non-NULL: every array lies in this shared, read-only storage */
} data_tokenized;

/* Tokenizes every example (OpenMP over examples; the tokenizer is read-only), truncating
 * with DATA_TRUNC_HF_FAST to max_len tokens including special tokens. Labels and, for
 * regression data (ex->targets), targets are copied. */
rt_status data_tokenize_pairs(const data_examples *ex, const tok_tokenizer *tok, int max_len, data_tokenized *out);
/* The same with an explicit truncation rule. */
rt_status data_tokenize_pairs_rule(const data_examples *ex, const tok_tokenizer *tok, int max_len, data_trunc_rule rule,
                                   data_tokenized *out);
/* Builds a dataset from rows of ids already made (tests, cached data). rows[i] has
 * lengths[i] ids; len_a may be NULL (= lengths), labels may be NULL (all DATA_LABEL_NONE).
 * Copies everything; max_len is set to the longest row. */
rt_status data_tokenized_from_rows(const int32_t *const *rows, const int32_t *lengths, const int32_t *len_a,
                                   const int32_t *labels, size_t n, data_tokenized *out);
/* Copies d->n rows of width floats of targets into d (a row whose first is NaN is unlabelled),
 * replacing any it had; targets NULL makes d class-id data again. */
rt_status data_tokenized_set_targets(data_tokenized *d, const float *targets, int width);
/* Rows [first, first + n) of d as a set of their own (n_truncated 0: it is not known per row).
 * A set in shared storage is shared, not copied, so slicing a mapped corpus costs no memory;
 * other sets are copied. RT_ERR_USAGE when the rows are not all in d. */
rt_status data_tokenized_slice(const data_tokenized *d, size_t first, size_t n, data_tokenized *out);
/* Frees the arrays, or drops the set's reference to its shared storage. */
void data_tokenized_free(data_tokenized *d);

#endif
