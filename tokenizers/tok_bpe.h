/* Byte-level BPE (GPT-2, RoBERTa; tok_bpe.c): the loaders tok_load calls once it has found the
 * files, and the one tuning knob the tests turn. */
#ifndef TOK_BPE_H
#define TOK_BPE_H

#include <stddef.h>

#include "tokenizers/tok.h"

/* config_path (tokenizer_config.json) may be NULL; when present its added tokens and
 * bos/eos/pad names are used. */
rt_status tok_bpe_load_files(const char *vocab_path, const char *merges_path, const char *config_path,
                             tok_tokenizer **out);
rt_status tok_bpe_load_json(const char *json_path, const char *config_path, tok_tokenizer **out);

/* Words of at least this many initial symbols are merged with a heap (O(n log n)) instead of
 * the quadratic scan that is faster for short words. Tests lower it to cover the heap path. */
extern size_t tok_bpe_heap_min;

#endif
