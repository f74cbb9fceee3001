/* SentencePiece as T5 uses it (tok_t5.c over tok_spm.h): the loader tok_load calls. */
#ifndef TOK_T5_H
#define TOK_T5_H

#include "tokenizers/tok.h"

/* A .model file; tokenizer_config.json, special_tokens_map.json and added_tokens.json are
 * looked for in dir. */
rt_status tok_t5_load(const char *model_path, const char *dir, tok_tokenizer **out);

#endif
