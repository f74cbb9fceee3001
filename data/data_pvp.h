/* Cloze patterns and verbalizers (PET's pattern-verbalizer pairs) for SuperGLUE, as GLM
 * fine-tunes it through FlagAI 1.8 (flagai/data/dataset/superglue/pvp.py, "pvp.py" below).
 * A pattern turns an example into an ordered list of parts: texts and one [MASK] slot. The
 * program tokenizes each text part on its own and joins the ids in order, the mask slot
 * being the tokenizer's [MASK] id, as FlagAI's PVP.encode does (pvp.py:198-226). Parts are
 * in two segments (FlagAI's parts_a and parts_b); a part marked shortenable may lose tokens
 * from its end when the input is too long: FlagAI's truncate (pvp.py:469-494) drops one
 * token at a time from the last non-empty shortenable part of the segment whose shortenable
 * parts are longer (segment b on a tie).
 *
 * Single-token tasks (BoolQ, CB, MultiRC, RTE, WiC) score the vocabulary at the mask: each
 * label has one verbalizer word (" Yes", " No", ...; the leading space is part of the word,
 * the tokenizer sees it). Multi-token tasks (COPA, WSC) instead score candidate answers by
 * the summed log-probability of their tokens put in the mask's place (pvp.py:227-344);
 * data_pvp_fill lists those candidates.
 *
 * The texts are cleaned as FlagAI's processors (flagai/data/dataset/superglue/processor.py)
 * clean them before the patterns see them: punctuation standardization (curly quotes to
 * straight, en dash to '-') of the fields they standardize, and WSC's repair of a pronoun
 * index that is one word off. FlagAI's default pattern id is 0 for every task
 * (CollateArguments.pattern_id, flagai/test_utils.py:118). Continuous-prompt tokens (the
 * None entries of FlagAI's parts) are not produced: FlagAI drops them unless p-tuning is on. */
#ifndef DATA_PVP_H
#define DATA_PVP_H

#include <stdbool.h>

#include "data/data_superglue.h"
#include "runtime/base/rt_status.h"

#define DATA_PVP_MAX_PARTS 12
#define DATA_PVP_MAX_CANDIDATES 2

typedef struct {
    char *text;       /* owned; NULL for the mask slot */
    bool is_mask;     /* the [MASK] slot: no text, one mask token */
    bool shortenable; /* may lose tokens from its end (FlagAI's shortenable) */
    int segment;      /* 0: FlagAI's parts_a, 1: parts_b (RTE and CB patterns 0-3 only) */
} data_pvp_part;

typedef struct {
    int n_parts;
    data_pvp_part parts[DATA_PVP_MAX_PARTS];
    /* Multi-token tasks: the answers to score in the mask's place (owned). COPA: choice1 and
     * choice2, the label is the right one's index. WSC: span1's text alone, the label says
     * whether the pronoun refers to it. 0 for single-token tasks. */
    int n_candidates;
    char *candidates[DATA_PVP_MAX_CANDIDATES];
} data_pvp_filled;

/* Patterns 0 .. n-1 exist for task (FlagAI's available_patterns()). */
int data_pvp_n_patterns(data_sg_task_id task);
/* FlagAI's default: 0. */
int data_pvp_default_pattern(data_sg_task_id task);
/* COPA and WSC (FlagAI's is_multi_token). */
bool data_pvp_is_multi_token(data_sg_task_id task);
/* The verbalizer word of class id label (data_superglue.h's label order) under pattern:
 * FlagAI's verbalize(label)[0]. NULL for multi-token tasks, an unknown pattern or label. */
const char *data_pvp_verbalizer(data_sg_task_id task, int pattern, int label);

/* Applies pattern to ex (an example of task). RT_ERR_CONFIG for a pattern the task does not
 * have; RT_ERR_FORMAT when the example cannot be patterned (a WSC pronoun index that does not
 * point at the pronoun even after FlagAI's repair), naming the example's line and idx. */
rt_status data_pvp_fill(const data_sg_task *task, int pattern, const data_sg_example *ex, data_pvp_filled *out);
void data_pvp_filled_free(data_pvp_filled *f);
/* The parts concatenated, the mask slot written as mask_text (logging and tests); malloc'd. */
char *data_pvp_join(const data_pvp_filled *f, const char *mask_text);

/* A user's own cloze pattern (glm-finetune --cloze, as FlagAI's custom tasks write a PVP): text
 * with one [MASK] and {COLUMN} placeholders for at most two columns, e.g.
 * "{review} All in all, it was [MASK]." A placeholder's text is shortenable; the parts from the
 * second column's first placeholder on are segment b (FlagAI's parts_b), the rest segment a.
 * "{{" and "}}" write a brace. */
typedef struct {
    int n_parts;
    struct {
        char *text; /* owned: fixed text; NULL for a column or the mask */
        int column; /* 0 or 1: a placeholder of columns[column]; -1: text or the mask */
        bool is_mask;
        int segment;
    } parts[DATA_PVP_MAX_PARTS];
    int n_columns;
    char *columns[2]; /* owned */
} data_pvp_template;

/* RT_ERR_USAGE naming what is wrong: no [MASK] or two, a brace never closed, an empty {},
 * three columns, more than DATA_PVP_MAX_PARTS parts. */
rt_status data_pvp_template_parse(const char *pattern, data_pvp_template *out);
/* The pattern with values[k] for columns[k]. */
void data_pvp_template_fill(const data_pvp_template *t, const char *const *values, data_pvp_filled *out);
void data_pvp_template_free(data_pvp_template *t);

#endif
