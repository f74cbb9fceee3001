/* GLM's fine-tuning inputs, built as FlagAI builds them (flagai/data/dataset/data_utils.py
 * build_input_from_ids, superglue/pvp.py encode, GLM's seq2seq dataset):
 *
 *   cloze, one token   [CLS] pattern-with-[MASK] <eos> [sop], the [sop] at the [MASK]'s position
 *                      with block position 1, the context bidirectional (sep = its length); the
 *                      verbalizer tokens are scored at the [sop] (FlagAI's GLMForSingleTokenCloze
 *                      reads outputs[b, attention_mask[b]], attention_mask being sep)
 *   cloze, choices     per candidate answer: [CLS] pattern-with-[MASK] <eos> [sop] answer, the
 *                      context bidirectional (sep = its length), the answer at the [MASK]'s
 *                      position with block positions 1, 2, ...; labels answer + [eop]
 *   span (WSC)         one row as a choice row, the answer span1's text: GLM without candidate
 *                      lists (THUDM/GLM tasks/superglue/finetune.py) trains it with the language-
 *                      model loss on the True examples only, and predicts True when every
 *                      answer token is the argmax under teacher forcing (classify_evaluate)
 *   seq2seq            [CLS] source [gMASK] [sop] target, labels target + [eop] on the span
 *
 * A data_glm_rows set holds the rows of all examples; an example owns n_rows consecutive rows
 * (choices: one per candidate). Rows keep their own length; batches pad them. */
#ifndef DATA_GLM_ROWS_H
#define DATA_GLM_ROWS_H

#include <stdbool.h>
#include <stdint.h>

#include "data/data_dataset.h"
#include "data/data_pvp.h"
#include "data/data_seq2seq.h"
#include "data/data_superglue.h"
#include "tokenizers/tok.h"

typedef enum { DATA_GLM_CLOZE, DATA_GLM_CHOICES, DATA_GLM_SPAN, DATA_GLM_SEQ2SEQ } data_glm_task_kind;

typedef struct {
    int32_t *ids, *pos, *block_pos, *labels; /* (len) each; labels -100 off the answer */
    int len, sep, mask_pos;                  /* mask_pos: the blank's index in the context */
} data_glm_row;

typedef struct {
    data_glm_task_kind kind;
    data_glm_row *rows;
    int n_rows;
    int *first_row; /* (n_examples) */
    int *label;     /* (n_examples) class id, the right choice, or -100 */
    int n_examples, rows_per_example;
    int32_t verbalizer[16]; /* cloze: one token per class */
    int n_classes;
    int n_truncated;
} data_glm_rows;

/* The command tokens the inputs need, from the tokenizer ([CLS], [MASK], [gMASK],
 * <|startofpiece|>, <|endofpiece|>, and its end-of-text token); RT_ERR_CONFIG naming a missing
 * one. */
typedef struct {
    int32_t cls, mask, gmask, eos, sop, eop;
} data_glm_specials;
rt_status data_glm_specials_of(const tok_tokenizer *tok, data_glm_specials *out);

/* SuperGLUE examples through the task's pattern: cloze rows (BoolQ, CB, RTE, WiC, MultiRC),
 * choice rows (COPA) or span rows (WSC; for training, those of its True examples only). Rows
 * longer than max_len lose tokens from the pattern's shortenable parts as FlagAI truncates. A
 * verbalizer that is not one token is RT_ERR_CONFIG naming it. */
rt_status data_glm_rows_from_superglue(const data_sg_examples *ex, int pattern, const tok_tokenizer *tok, int max_len,
                                       bool training, data_glm_rows *out);
/* A user's classes through their own cloze pattern (glm-finetune --train-file --cloze): n filled
 * patterns, their class ids (negative: none) and one verbalizer word per class, each one token
 * (RT_ERR_CONFIG naming it otherwise; at most 16 classes). */
rt_status data_glm_rows_from_cloze(const data_pvp_filled *filled, const int32_t *labels, size_t n,
                                   const char *const *verbalizer, int n_classes, const tok_tokenizer *tok, int max_len,
                                   data_glm_rows *out);
/* Line-aligned source/target texts (targets may be NULL: generation rows, span empty). */
rt_status data_glm_rows_from_lines(const data_lines *src, const data_lines *tgt, size_t begin, size_t end,
                                   const tok_tokenizer *tok, int max_source_len, int max_target_len,
                                   data_glm_rows *out);
void data_glm_rows_free(data_glm_rows *r);

/* The rows as DATA_GLM_ROWS_SETS data_tokenized sets, for the tokenized cache (data/data_cache.h):
 * the ids (len_a = sep, labels = mask_pos), the positions, the block positions, the labels, and
 * one row [first_row, label] per example followed by one row of the scalars (kind,
 * rows_per_example, n_classes, n_truncated, the verbalizer). from_sets checks everything the
 * batches and models rely on (matching row lengths, separators and mask positions inside their
 * rows, examples' rows inside the set, labels and the kind in range), so a cache that parses but
 * lies is RT_ERR_FORMAT, never a bad read. */
#define DATA_GLM_ROWS_SETS 5
rt_status data_glm_rows_to_sets(const data_glm_rows *r, data_tokenized *sets);
rt_status data_glm_rows_from_sets(const data_tokenized *sets, data_glm_rows *out);

#endif
