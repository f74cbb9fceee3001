/* GLM's English WordPiece tokenizer (tok_glm_en.c over tok_wordpiece.h): the probe and loader
 * tok_load uses. */
#ifndef TOK_GLM_EN_H
#define TOK_GLM_EN_H

#include <stdbool.h>

#include "tokenizers/tok.h"

/* True when tokenizer_config.json in dir names FlagAI's GLMLargeEnWordPieceTokenizer. */
bool tok_glm_en_wanted(const char *dir);
/* vocab_path: bert-large-uncased's vocab.txt; the flags add_block_symbols, add_task_mask and
 * add_decoder_mask are read from tokenizer_config.json in dir when present. */
rt_status tok_glm_en_load(const char *vocab_path, const char *dir, tok_tokenizer **out);

#endif
