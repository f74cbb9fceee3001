/* GLM's Chinese SentencePiece tokenizer (tok_glm.c over tok_spm.h): the probe and loader tok_load
 * uses, and the parts GLM's English tokenizer (tok_glm_en.c) shares with it. */
#ifndef TOK_GLM_H
#define TOK_GLM_H

#include <stdbool.h>

#include "tokenizers/tok.h"

struct cJSON;

/* True when the .model file is GLM's cog-pretrain vocabulary: tokenizer_config.json in dir names
 * a GLM class (ChineseSPTokenizer, GLMChineseTokenizer, GLMLargeChTokenizer; another class says
 * no), else the file is cog-pretrain.model, else (unless it is spiece.model) it has 50000 pieces
 * and <n> at id 3. */
bool tok_glm_wanted(const char *model_path, const char *dir);
/* The flags add_block_symbols, add_task_mask, add_decoder_mask and fix_command_token are read
 * from tokenizer_config.json in dir when present. */
rt_status tok_glm_load(const char *model_path, const char *dir, tok_tokenizer **out);
/* GLM builds its task inputs itself: tok_encode_pair is RT_ERR_UNSUPPORTED, naming t->kind. */
rt_status tok_glm_encode_pair(const tok_tokenizer *t, const char *a, const char *b, tok_ids *out);
/* A boolean flag of tokenizer_config.json (cfg, read from path): true/false sets *flag, absent or
 * null leaves it, anything else is RT_ERR_FORMAT naming path and key. */
rt_status tok_glm_read_flag(const struct cJSON *cfg, const char *path, const char *key, bool *flag);

#endif
