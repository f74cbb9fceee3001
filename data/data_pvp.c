/* SuperGLUE cloze patterns as data (see data_pvp.h). Each pattern is a list of part
 * templates: a text with {name} slots, or the mask. A task's preparation step computes the
 * named values from an example the way FlagAI's processor and PVP do (the line numbers below
 * are flagai-1.8.0's flagai/data/dataset/superglue/pvp.py and processor.py), then the
 * builder expands the templates. The patterns were read from that file and re-expressed
 * here; nothing is copied from it. */
#include "data/data_pvp.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_utf8.h"
#include "tokenizers/tok.h"

typedef enum { PVP_END = 0, PVP_TEXT, PVP_MASK } pvp_kind;

typedef struct {
    pvp_kind kind;
    const char *fmt; /* PVP_TEXT: literal text with {name} slots */
    bool shortenable;
    int segment;
} pvp_tpl;

typedef struct {
    pvp_tpl p[DATA_PVP_MAX_PARTS]; /* ends at the first PVP_END (the zero entry) */
} pvp_pattern;

#define L(s) \
    { PVP_TEXT, s, false, 0 } /* literal (may hold slots), never shortened */
#define S(s) \
    { PVP_TEXT, s, true, 0 } /* shortenable */
#define LB(s) \
    { PVP_TEXT, s, false, 1 } /* segment b */
#define SB(s) \
    { PVP_TEXT, s, true, 1 }
#define M \
    { PVP_MASK, NULL, false, 0 }
#define MB \
    { PVP_MASK, NULL, false, 1 }

/* BoolQPVP.get_parts, pvp.py:1037-1065: patterns 0-1 and 2-3 and 4-5 share their parts and
 * differ in the verbalizer. */
static const pvp_pattern boolq_patterns[] = {
    {{S("{passage}"), L(" Question:"), S(" {question}"), L("? Answer:"), M, L(".")}},
    {{S("{passage}"), L(" Question:"), S(" {question}"), L("? Answer:"), M, L(".")}},
    {{S("{passage}"), L(" Based on the previous passage,"), S(" {question}"), L("?"), M, L(".")}},
    {{S("{passage}"), L(" Based on the previous passage,"), S(" {question}"), L("?"), M, L(".")}},
    {{L("Based on the following passage"), S(" {question}"), L("?"), M, L("."), S(" {passage}")}},
    {{L("Based on the following passage"), S(" {question}"), L("?"), M, L("."), S(" {passage}")}},
};

/* RtePVP.get_parts, pvp.py:949-985: the hypothesis comes first (without its final
 * punctuation), patterns 0-3 put the mask and the premise in segment b. CbPVP uses 0-3 as
 * they are and has its own 4 (pvp.py:1004-1014), with the whole hypothesis. */
#define RTE_PATTERNS_0_3                                                                          \
    {{L("\""), S("{hypothesis}"), L("\" ?"), MB, LB(","), LB(" \""), SB("{premise}"), LB("\"")}}, \
        {{S("{hypothesis}"), L("?"), MB, LB(","), SB(" {premise}")}},                             \
        {{L("\""), S("{hypothesis}"), L("\" ?"), MB, LB(". \""), SB("{premise}"), LB("\"")}}, {   \
        { S("{hypothesis}"), L("?"), MB, LB("."), SB(" {premise}") }                              \
    }
static const pvp_pattern rte_patterns[] = {
    RTE_PATTERNS_0_3,
    {{S("{premise}"), L(" question:"), S(" {hypothesis}"), L(" True or False?"), L(" answer:"), M}},
};
static const pvp_pattern cb_patterns[] = {
    RTE_PATTERNS_0_3,
    {{S("{premise}"), L(" question:"), S(" {hypothesis_full}"), L(" true, false or neither?"), L(" answer:"), M}},
};

/* CopaPVP.get_parts, pvp.py:593-626. Only 0 and 1 are available_patterns() (pvp.py:563);
 * pattern 2 takes another encode path (pvp.py:643-704) with no joiner part. */
static const pvp_pattern copa_patterns[] = {
    {{L("\""), L("{choice1}"), L("\" or \""), L("{choice2}"), L("\"?"), S(" {premise}"), L("{joiner}"), M, L(".")}},
    {{L("{choice1}"), L(" or"), L(" {choice2}"), L("?"), S(" {premise}"), L("{joiner}"), M, L(".")}},
};

/* WscPVP.get_parts, pvp.py:732-762: the text with the pronoun marked *like this*. */
static const pvp_pattern wsc_patterns[] = {
    {{S("{text}"), L(" The pronoun '*{pronoun}*' refers to"), M, L(".")}},
    {{S("{text}"), L(" In the previous sentence, the pronoun '*{pronoun}*' refers to"), M, L(".")}},
    {{S("{text}"), L(" Question: In the passage above, what does the pronoun '*{pronoun}*' refer to?"), L(" Answer:"),
      M, L(".")}},
};

/* WicPVP.get_parts, pvp.py:1140-1167. */
static const pvp_pattern wic_patterns[] = {
    {{S("\"{sentence1}\" / \"{sentence2}\""), L(" Similar sense of \"{word}\"?"), M, L(".")}},
    {{S("{sentence1}"), S(" {sentence2}"), L(" Does {word} have the same meaning in both sentences?"), M}},
    {{L("{word}"), L(" ."), L(" Sense (1) (a) \""), S("{sentence1}"), L("\""), L(" ("), M, L(") \""), L("{sentence2}"),
      L("\"")}},
};

/* MultiRcPVP.get_parts, pvp.py:1085-1120. */
static const pvp_pattern multirc_patterns[] = {
    {{S("{passage}"), L("."), L(" Question:"), L(" {question}?"), L(" Is it"), L(" {answer}"), L("?"), M, L(".")}},
    {{S("{passage}"), L("."), L(" Question:"), L(" {question}"), L("?"), L(" Is the correct answer \""), L("{answer}"),
      L("\"?"), M, L(".")}},
    {{S("{passage}"), L(". Based on the previous passage,"), L(" {question}"), L("?"), L(" Is \""), L("{answer}"),
      L("\" a correct answer?"), M, L(".")}},
    {{S("{passage}"), L(" {question}"), L("- ["), M, L("]"), L("{answer}")}},
    {{S("{passage}"), L("."), L(" Question:"), L(" {question}"), L("?"), L(" {answer}"), L("?"), M, L(".")}},
};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const pvp_pattern *pvp_patterns(data_sg_task_id task, int *n) {
    switch (task) {
    case DATA_SG_BOOLQ: *n = N_OF(boolq_patterns); return boolq_patterns;
    case DATA_SG_CB: *n = N_OF(cb_patterns); return cb_patterns;
    case DATA_SG_COPA: *n = N_OF(copa_patterns); return copa_patterns;
    case DATA_SG_MULTIRC: *n = N_OF(multirc_patterns); return multirc_patterns;
    case DATA_SG_RTE: *n = N_OF(rte_patterns); return rte_patterns;
    case DATA_SG_WIC: *n = N_OF(wic_patterns); return wic_patterns;
    case DATA_SG_WSC: *n = N_OF(wsc_patterns); return wsc_patterns;
    default: *n = 0; return NULL;
    }
}

int data_pvp_n_patterns(data_sg_task_id task) {
    int n;
    pvp_patterns(task, &n);
    return n;
}

int data_pvp_default_pattern(data_sg_task_id task) {
    (void)task; /* FlagAI: CollateArguments.pattern_id = 0 for every task (test_utils.py:118) */
    return 0;
}

bool data_pvp_is_multi_token(data_sg_task_id task) {
    return task == DATA_SG_COPA || task == DATA_SG_WSC; /* pvp.py:567, 714; properties.py:33 */
}

/* Verbalizers, indexed by class id in data_superglue.h's label order. */
static const char *const verb_no_yes[] = {" No", " Yes"};               /* false/true, 0/1 */
static const char *const verb_false_true_lc[] = {" false", " true"};    /* BoolQ B: pvp.py:1027 */
static const char *const verb_false_true_uc[] = {" False", " True"};    /* MultiRC 3: pvp.py:1124 */
static const char *const verb_wic_b[] = {"2", "b"};                     /* WiC 2: pvp.py:1130 */
static const char *const verb_rte[] = {" Yes", " No"};                  /* entailment, not_: pvp.py:939 */
static const char *const verb_rte_4[] = {" true", " false"};            /* pvp.py:988-989 */
static const char *const verb_cb[] = {" Yes", " No", " Maybe"};         /* pvp.py:994-998 */
static const char *const verb_cb_4[] = {" true", " false", " neither"}; /* pvp.py:1017-1020 */

const char *data_pvp_verbalizer(data_sg_task_id task, int pattern, int label) {
    const data_sg_task *t = data_sg_task_get(task);
    if (!t || pattern < 0 || pattern >= data_pvp_n_patterns(task) || label < 0 || label >= t->n_labels) return NULL;
    switch (task) {
    case DATA_SG_BOOLQ: /* pvp.py:1067-1071: A for 0, 2, 4; B for 1, 3, 5 */
        return (pattern % 2 == 0 ? verb_no_yes : verb_false_true_lc)[label];
    case DATA_SG_RTE: return (pattern == 4 ? verb_rte_4 : verb_rte)[label];
    case DATA_SG_CB: return (pattern == 4 ? verb_cb_4 : verb_cb)[label];
    case DATA_SG_MULTIRC: /* pvp.py:1122-1125 */ return (pattern == 3 ? verb_false_true_uc : verb_no_yes)[label];
    case DATA_SG_WIC: /* pvp.py:1169-1172 */ return (pattern == 2 ? verb_wic_b : verb_no_yes)[label];
    default: return NULL; /* COPA, WSC: verbalize() returns [] (pvp.py:628, 860) */
    }
}

/* ---- text helpers: Python's string operations as FlagAI applies them ---- */

/* A growing string. */
typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} pvp_buf;

static void buf_add(pvp_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (n > SIZE_MAX / 4 || b->n > SIZE_MAX / 4) { /* cannot happen; keeps the size arithmetic bounded */
        b->oom = true;
        return;
    }
    char *p = rt_grow_try(b->s, &b->cap, b->n + n + 1, 1);
    if (!p) {
        b->oom = true;
        return;
    }
    b->s = p;
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void buf_str(pvp_buf *b, const char *s) { buf_add(b, s, strlen(s)); }

/* The string taken out of b (an empty string when nothing was added); NULL when out of memory. */
static char *buf_take(pvp_buf *b) {
    if (!b->oom && !b->s) buf_add(b, "", 0);
    if (b->oom) {
        free(b->s);
        b->s = NULL;
    }
    char *s = b->s;
    memset(b, 0, sizeof *b);
    return s;
}

/* punctuation_standardization (flagai/data/dataset/data_utils.py:337-347): U+201C and U+201D
 * become '"', U+2018 and U+2019 '\'', U+2013 '-'. */
static char *pvp_standardize(const char *s) {
    pvp_buf b = {0};
    for (const char *p = s; *p;) {
        const unsigned char *u = (const unsigned char *)p;
        if (u[0] == 0xE2 && u[1] == 0x80) {
            const char *r = u[2] == 0x9C || u[2] == 0x9D   ? "\""
                            : u[2] == 0x98 || u[2] == 0x99 ? "'"
                            : u[2] == 0x93                 ? "-"
                                                           : NULL;
            if (r) {
                buf_str(&b, r);
                p += 3;
                continue;
            }
        }
        buf_add(&b, p, 1);
        p++;
    }
    return buf_take(&b);
}

/* Python's s.rstrip(string.punctuation) (PVP.remove_final_punc, pvp.py:118-122). */
static size_t pvp_rstrip_punct_len(const char *s, size_t n) {
    static const char punct[] = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
    while (n > 0 && strchr(punct, s[n - 1])) n--;
    return n;
}

static char *pvp_dup_n(const char *s, size_t n) {
    pvp_buf b = {0};
    buf_add(&b, s, n);
    return buf_take(&b);
}

/* PVP.lowercase_first (pvp.py:125-129): the first code point lower-cased as str.lower does. */
static rt_status pvp_lowercase_first(const char *s, char **out) {
    *out = NULL;
    if (!*s) {
        *out = pvp_dup_n(s, 0);
        return *out ? RT_OK : rt_errorf(RT_ERR_NOMEM, "pvp: out of memory");
    }
    size_t len = 0;
    rt_utf8_decode(s, &len);
    char *first = NULL;
    rt_status st = tok_lowercase(s, len, &first);
    if (st != RT_OK) return st;
    pvp_buf b = {0};
    buf_str(&b, first);
    buf_str(&b, s + len);
    free(first);
    *out = buf_take(&b);
    return *out ? RT_OK : rt_errorf(RT_ERR_NOMEM, "pvp: out of memory");
}

/* Python's str.split(): words between runs of whitespace (str.isspace), none empty. */
typedef struct {
    char **w;
    size_t n, cap;
} pvp_words;

static void words_free(pvp_words *w) {
    for (size_t i = 0; i < w->n; i++) free(w->w[i]);
    free(w->w);
    memset(w, 0, sizeof *w);
}

static bool words_push(pvp_words *w, const char *s, size_t n) {
    char **p = rt_grow_try(w->w, &w->cap, w->n + 1, sizeof *p);
    if (!p) return false;
    w->w = p;
    char *d = pvp_dup_n(s, n);
    if (!d) return false;
    w->w[w->n++] = d;
    return true;
}

/* Inserts a copy of s[0..n) at position i. */
static bool words_insert(pvp_words *w, size_t i, const char *s, size_t n) {
    if (!words_push(w, s, n)) return false;
    char *last = w->w[w->n - 1];
    memmove(w->w + i + 1, w->w + i, (w->n - 1 - i) * sizeof *w->w);
    w->w[i] = last;
    return true;
}

static bool pvp_split(const char *s, pvp_words *out) {
    memset(out, 0, sizeof *out);
    size_t n = strlen(s), i = 0;
    while (i < n) {
        size_t len;
        uint32_t cp = rt_utf8_decode(s + i, &len);
        if (rt_unicode_is_space(cp)) {
            i += len;
            continue;
        }
        size_t start = i;
        while (i < n) {
            cp = rt_utf8_decode(s + i, &len);
            if (rt_unicode_is_space(cp)) break;
            i += len;
        }
        if (!words_push(out, s + start, i - start)) return false;
    }
    return true;
}

/* ' '.join(words), word `mark` (if in range) wrapped in '*'. */
static char *pvp_join_words(const pvp_words *w, size_t mark) {
    pvp_buf b = {0};
    for (size_t i = 0; i < w->n; i++) {
        if (i) buf_str(&b, " ");
        if (i == mark) buf_str(&b, "*");
        buf_str(&b, w->w[i]);
        if (i == mark) buf_str(&b, "*");
    }
    return buf_take(&b);
}

/* WSC's text as WscPVP.get_parts sees it: processor.py:308-377 standardizes the text, splits
 * it into words and repairs span2_index (one word either way, or a pronoun glued to the
 * punctuation after it is split off), then joins the words; pvp.py:736-738 splits that
 * again and marks the pronoun. One difference: Python would read words[-1] for an index
 * one below 0; here it is just not a match. */
static rt_status pvp_wsc_text(const data_sg_example *ex, char **out) {
    rt_status st = RT_OK;
    pvp_words w = {0}, w2 = {0};
    char *std = NULL, *joined = NULL;
    const char *pron = ex->text_c;
    *out = NULL;
    std = pvp_standardize(ex->text_a);
    if (!std || !pvp_split(std, &w)) RT_FAIL(RT_ERR_NOMEM, "pvp: out of memory");
    long i = ex->span2_index;
    const long nw = (long)w.n;
    if (i < 0 || i >= nw)
        RT_FAIL(RT_ERR_FORMAT, "wsc line %d (idx %d): span2_index %ld is past the text's %ld words", ex->line, ex->idx,
                i, nw);
    if (strcmp(w.w[i], pron) != 0) {
        for (int off = -1; off <= 1; off += 2)
            if (i + off >= 0 && i + off < nw && strcmp(w.w[i + off], pron) == 0) i += off;
        size_t pl = strlen(pron);
        if (strcmp(w.w[i], pron) != 0 && strncmp(w.w[i], pron, pl) == 0) {
            /* "him," -> "him" ","  */
            if (!words_insert(&w, (size_t)i + 1, w.w[i] + pl, strlen(w.w[i] + pl)))
                RT_FAIL(RT_ERR_NOMEM, "pvp: out of memory");
            w.w[i][pl] = '\0';
        }
    }
    if (strcmp(w.w[i], pron) != 0)
        RT_FAIL(RT_ERR_FORMAT, "wsc line %d (idx %d): span2_text '%.40s' is not word %d of the text (found '%.40s')",
                ex->line, ex->idx, pron, ex->span2_index, w.w[i]);
    joined = pvp_join_words(&w, (size_t)-1);
    if (!joined || !pvp_split(joined, &w2)) RT_FAIL(RT_ERR_NOMEM, "pvp: out of memory");
    if (i >= (long)w2.n) /* a repair that left an empty word shifts the second split */
        RT_FAIL(RT_ERR_FORMAT, "wsc line %d (idx %d): span2_index %ld is past the text's %zu words", ex->line, ex->idx,
                i, w2.n);
    *out = pvp_join_words(&w2, (size_t)i);
    if (!*out) RT_FAIL(RT_ERR_NOMEM, "pvp: out of memory");
fail:
    words_free(&w);
    words_free(&w2);
    free(std);
    free(joined);
    return st;
}

/* ---- named values and template expansion ---- */

#define PVP_MAX_VALUES 6

typedef struct {
    const char *name[PVP_MAX_VALUES];
    char *value[PVP_MAX_VALUES]; /* owned */
    int n;
} pvp_values;

static bool vals_set(pvp_values *v, const char *name, char *value) {
    RT_CHECK(v->n < PVP_MAX_VALUES, "too many pattern values");
    v->name[v->n] = name;
    v->value[v->n++] = value;
    return value != NULL;
}

static void vals_free(pvp_values *v) {
    for (int i = 0; i < v->n; i++) free(v->value[i]);
    memset(v, 0, sizeof *v);
}

/* s with its final ASCII punctuation removed, after Python's rstrip() when ws is set. */
static char *pvp_strip(const char *s, bool ws) {
    size_t n = strlen(s);
    if (ws) n = rt_utf8_rstrip_len(s, n);
    return pvp_dup_n(s, pvp_rstrip_punct_len(s, n));
}

/* A standardized copy, optionally stripped (see pvp_strip). */
static char *pvp_std_strip(const char *s, bool strip, bool ws) {
    char *t = pvp_standardize(s);
    if (!t || !strip) return t;
    char *u = pvp_strip(t, ws);
    free(t);
    return u;
}

#define VAL(name, expr)                                                              \
    do {                                                                             \
        if (!vals_set(v, name, (expr))) RT_FAIL(RT_ERR_NOMEM, "pvp: out of memory"); \
    } while (0)

/* The values a task's templates use, from ex as FlagAI's processor and get_parts make them. */
static rt_status pvp_values_for(const data_sg_task *task, const data_sg_example *ex, pvp_values *v) {
    rt_status st = RT_OK;
    char *lc = NULL;
    switch (task->id) {
    case DATA_SG_BOOLQ: /* processor.py:412-413 standardize both */
        VAL("passage", pvp_standardize(ex->text_a));
        VAL("question", pvp_standardize(ex->text_b));
        break;
    case DATA_SG_RTE:
    case DATA_SG_CB: /* processor.py:182-185; the hypothesis loses its final punctuation: pvp.py:952 */
        VAL("premise", pvp_standardize(ex->text_a));
        VAL("hypothesis", pvp_std_strip(ex->text_b, true, false));
        VAL("hypothesis_full", pvp_standardize(ex->text_b)); /* CB pattern 4: pvp.py:1007 */
        break;
    case DATA_SG_COPA: /* processor.py:497-502: no standardization; pvp.py:595-607 */
        VAL("premise", pvp_strip(ex->text_a, false));
        for (int c = 0; c < 2; c++) {
            RT_TRY(pvp_lowercase_first(c == 0 ? ex->text_b : ex->text_c, &lc));
            VAL(c == 0 ? "choice1" : "choice2", pvp_strip(lc, false));
            free(lc);
            lc = NULL;
        }
        VAL("joiner", pvp_dup_n(ex->copa_effect ? ", so" : " because", ex->copa_effect ? 4 : 8));
        break;
    case DATA_SG_WSC: { /* processor.py:300-377, pvp.py:733-739; span2_text is not standardized */
        char *text = NULL;
        RT_TRY(pvp_wsc_text(ex, &text));
        VAL("text", text);
        VAL("pronoun", pvp_dup_n(ex->text_c, strlen(ex->text_c)));
        break;
    }
    case DATA_SG_WIC: /* processor.py:254-256: the sentences standardized, the word not */
        VAL("sentence1", pvp_standardize(ex->text_a));
        VAL("sentence2", pvp_standardize(ex->text_b));
        VAL("word", pvp_dup_n(ex->text_c, strlen(ex->text_c)));
        break;
    case DATA_SG_MULTIRC: /* processor.py:548-571 standardize; pvp.py:1086-1088 strip */
        VAL("passage", pvp_std_strip(ex->text_a, true, true));
        VAL("question", pvp_std_strip(ex->text_b, true, true));
        VAL("answer", pvp_standardize(ex->text_c));
        break;
    default: RT_CHECK(false, "task %d has no patterns", (int)task->id);
    }
    return RT_OK;
fail:
    free(lc);
    return st;
}

/* fmt with each {name} replaced by its value. */
static char *pvp_expand(const char *fmt, const pvp_values *v) {
    pvp_buf b = {0};
    for (const char *p = fmt; *p;) {
        const char *close = *p == '{' ? strchr(p, '}') : NULL;
        int k = -1;
        for (int i = 0; close && i < v->n; i++)
            if ((size_t)(close - p - 1) == strlen(v->name[i]) &&
                strncmp(p + 1, v->name[i], (size_t)(close - p - 1)) == 0)
                k = i;
        RT_CHECK(!close || k >= 0, "pattern slot '%.*s' has no value", (int)(close - p + 1), p);
        if (close) {
            buf_str(&b, v->value[k]);
            p = close + 1;
        } else {
            buf_add(&b, p, 1);
            p++;
        }
    }
    return buf_take(&b);
}

rt_status data_pvp_fill(const data_sg_task *task, int pattern, const data_sg_example *ex, data_pvp_filled *out) {
    rt_status st = RT_OK;
    pvp_values v = {0};
    memset(out, 0, sizeof *out);
    RT_CHECK(task != NULL && ex != NULL, "task=%p ex=%p", (const void *)task, (const void *)ex);
    int n_patterns;
    const pvp_pattern *pats = pvp_patterns(task->id, &n_patterns);
    if (pattern < 0 || pattern >= n_patterns)
        RT_FAIL(RT_ERR_CONFIG, "pattern id %d: SuperGLUE task %s has patterns 0 to %d", pattern, task->name,
                n_patterns - 1);
    RT_TRY(pvp_values_for(task, ex, &v));
    const pvp_pattern *pat = &pats[pattern];
    for (int i = 0; i < DATA_PVP_MAX_PARTS && pat->p[i].kind != PVP_END; i++) {
        data_pvp_part *part = &out->parts[out->n_parts++];
        part->is_mask = pat->p[i].kind == PVP_MASK;
        part->shortenable = pat->p[i].shortenable;
        part->segment = pat->p[i].segment;
        if (!part->is_mask && !(part->text = pvp_expand(pat->p[i].fmt, &v)))
            RT_FAIL(RT_ERR_NOMEM, "pvp: out of memory");
    }
    /* The candidates: CopaPVP.get_answers (pvp.py:586-591), WscPVP.get_answers (pvp.py:721-730). */
    if (task->id == DATA_SG_COPA || task->id == DATA_SG_WSC) {
        const char *answers[DATA_PVP_MAX_CANDIDATES] = {ex->text_b, NULL}; /* WSC: span1_text as read */
        int n = 1;
        if (task->id == DATA_SG_COPA) { /* the choices as the pattern shows them (v: choice1, choice2) */
            for (int k = 0; k < v.n; k++)
                if (strncmp(v.name[k], "choice", 6) == 0) answers[v.name[k][6] - '1'] = v.value[k];
            n = 2;
        }
        for (int c = 0; c < n; c++) {
            pvp_buf b = {0};
            buf_str(&b, " ");
            buf_str(&b, answers[c]);
            if (!(out->candidates[c] = buf_take(&b))) RT_FAIL(RT_ERR_NOMEM, "pvp: out of memory");
            out->n_candidates++;
        }
    }
    vals_free(&v);
    return RT_OK;
fail:
    vals_free(&v);
    data_pvp_filled_free(out);
    return st;
}

void data_pvp_filled_free(data_pvp_filled *f) {
    if (!f) return;
    for (int i = 0; i < f->n_parts; i++) free(f->parts[i].text);
    for (int i = 0; i < f->n_candidates; i++) free(f->candidates[i]);
    memset(f, 0, sizeof *f);
}

char *data_pvp_join(const data_pvp_filled *f, const char *mask_text) {
    pvp_buf b = {0};
    for (int i = 0; i < f->n_parts; i++) buf_str(&b, f->parts[i].is_mask ? mask_text : f->parts[i].text);
    return buf_take(&b);
}
