/* WordPiece (BERT; tok_wordpiece.c): the loaders and format probes tok_load uses, and the parts
 * GLM's English tokenizer (tok_glm_en.c) builds on. */
#ifndef TOK_WORDPIECE_H
#define TOK_WORDPIECE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizers/tok.h"

/* vocab.txt (id = line number - 1); config_path (tokenizer_config.json) may be NULL. */
rt_status tok_wordpiece_load_vocab(const char *vocab_path, const char *config_path, tok_tokenizer **out);
/* A tokenizer.json whose model.type is "WordPiece". */
rt_status tok_wordpiece_load_json(const char *json_path, const char *config_path, tok_tokenizer **out);
/* True when the tokenizer.json at path parses and its model.type is "WordPiece". */
bool tok_json_is_wordpiece(const char *path);
/* True when a .txt file looks like a WordPiece vocab.txt rather than a BPE merges file: its
 * name ends in "vocab.txt", or its first line is one piece with no space and not "#version". */
bool tok_txt_is_wordpiece_vocab(const char *path);

/* A vocab.txt with the settings of FlagAI's GLMLargeEnTokenizer (pytorch-pretrained-BERT's
 * BertTokenizer): lower-case with Python's str.lower (a word-final capital sigma becomes
 * U+03C2), strip accents, CJK split, [PAD] [UNK] [CLS] [SEP] [MASK] cut out of the raw text,
 * and a decoder without HF's " ." -> "." cleanup. */
rt_status tok_wordpiece_load_flagai(const char *vocab_path, tok_tokenizer **out);
/* Adds a token that is cut out of the raw text before normalization (an HF added token). */
void tok_wordpiece_add_token(tok_tokenizer *t, const char *text, int32_t id);
/* Whether id is one of those tokens (the specials included). */
bool tok_wordpiece_is_added(const tok_tokenizer *t, int32_t id);
rt_status tok_wordpiece_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out);
rt_status tok_wordpiece_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, char **out);
void tok_wordpiece_free_impl(void *impl);

#endif
