/* One tokenizer interface for the whole suite. Byte-level BPE (GPT-2, RoBERTa) lives in
 * tok_bpe.c, WordPiece (BERT) in tok_wordpiece.c, SentencePiece for T5 in tok_t5.c over the
 * libsentencepiece wrapper tok_spm.h, GLM's Chinese SentencePiece in tok_glm.c over that wrapper,
 * GLM's English WordPiece (FlagAI's GLMLargeEnWordPieceTokenizer) in tok_glm_en.c over
 * tok_wordpiece.c; what they share is tok_base.h.
 * A tokenizer is loaded from an HF model directory or a single tokenizer file (tok_load.c picks
 * the kind) and is read-only afterwards, so encoding is thread-safe. */
#ifndef TOK_H
#define TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/base/rt_status.h"

typedef struct tok_tokenizer tok_tokenizer; /* opaque */

/* A growable id buffer; tok_encode appends to it. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
} tok_ids;

void tok_ids_push(tok_ids *v, int32_t id);
void tok_ids_clear(tok_ids *v);
void tok_ids_free(tok_ids *v);

/* path: an HF model directory (tokenizer.json, or vocab.json + merges.txt, or encoder.json +
 * vocab.bpe, or a BERT vocab.txt, or a T5 spiece.model, which wins over a tokenizer.json beside
 * it) or one of those files; a tokenizer.json whose model is WordPiece loads as BERT, and any
 * SentencePiece .model as T5, except GLM's (cog-pretrain.model, or a folder holding it, or its
 * 50000-piece vocabulary, or a tokenizer_config.json naming ChineseSPTokenizer, GLMChineseTokenizer
 * or GLMLargeChTokenizer). A vocab.txt (or a folder holding one) whose tokenizer_config.json says
 * "tokenizer_class": "GLMLargeEnWordPieceTokenizer" loads as GLM's English tokenizer
 * ("glm-en-wordpiece": BERT uncased WordPiece plus GLM's command tokens <|startofpiece|>,
 * <|endofpiece|>, [gMASK], [sMASK] after the vocab; the config's add_block_symbols, add_task_mask
 * and add_decoder_mask flags are honoured, its BERT settings are not: FlagAI's are fixed).
 * Errors name the file and the line or field. */
rt_status tok_load(const char *path, tok_tokenizer **out);
void tok_free(tok_tokenizer *t);

/* Encodes UTF-8 text of len bytes (no special tokens added), appending ids to out. */
rt_status tok_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out);
/* Encodes a sentence pair as the model's HF tokenizer does with add_special_tokens=True
 * (GPT-2: a + b, nothing between; BERT: [CLS] a [SEP] b [SEP]; T5: a </s> b </s>, with no
 * second </s> after a text that already ends with one; GLM, both kinds: RT_ERR_UNSUPPORTED, GLM's
 * tasks build their inputs themselves). b may be NULL for one text. */
rt_status tok_encode_pair(const tok_tokenizer *t, const char *a, const char *b, tok_ids *out);
/* Decodes ids to a malloc'd NUL-terminated UTF-8 string (invalid bytes become U+FFFD, as HF),
 * as HF's decode(ids) with its defaults: special tokens are kept (T5: the slow T5Tokenizer's). */
rt_status tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, char **out);
/* The same without special tokens, as HF's decode(ids, skip_special_tokens=True): bos, eos,
 * pad, unk and the tokenizer's other special tokens (T5's <extra_id_N>) are dropped first. */
rt_status tok_decode_skip_special(const tok_tokenizer *t, const int32_t *ids, size_t n, char **out);
/* Whether id is one of those special tokens. */
bool tok_is_special(const tok_tokenizer *t, int32_t id);

int tok_vocab_size(const tok_tokenizer *t);
/* The token string for id (the BPE piece as stored in the vocab, e.g. "Ġthe"); NULL if out of range. */
const char *tok_id_to_piece(const tok_tokenizer *t, int32_t id);
/* -1 when the piece is unknown. */
int32_t tok_piece_to_id(const tok_tokenizer *t, const char *piece);

/* Special ids, -1 when the tokenizer has none. GPT-2: bos = eos = 50256, pad = -1. */
int32_t tok_bos_id(const tok_tokenizer *t);
int32_t tok_eos_id(const tok_tokenizer *t);
int32_t tok_pad_id(const tok_tokenizer *t);
/* "gpt2-bpe", "roberta-bpe", "bert-wordpiece", "t5-spiece", "glm-chinese-spm", "glm-en-wordpiece" */
const char *tok_kind_name(const tok_tokenizer *t);

/* Text helpers the data readers share with the tokenizers (UTF-8 validity: runtime/base/rt_utf8.h). */
/* s[0..n) lower-cased code point by code point (Unicode's simple and special mappings, as
 * Python's str.lower, except Greek final sigma), malloc'd and NUL-terminated. s must be valid
 * UTF-8 (RT_ERR_FORMAT otherwise). */
rt_status tok_lowercase(const char *s, size_t n, char **out);

#endif
