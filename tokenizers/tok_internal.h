/* Everything behind tok.h in one include: the helpers every kind builds on (tok_base.h) and each
 * kind's entry points. The factory (tok_load.c) includes it because it dispatches to every kind,
 * and so do the tests that reach inside; a kind includes only tok_base.h and what it builds on. */
#ifndef TOK_INTERNAL_H
#define TOK_INTERNAL_H

#include "tokenizers/tok_base.h"
#include "tokenizers/tok_bpe.h"
#include "tokenizers/tok_glm.h"
#include "tokenizers/tok_glm_en.h"
#include "tokenizers/tok_t5.h"
#include "tokenizers/tok_wordpiece.h"

#endif
