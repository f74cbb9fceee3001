/* GLM's fine-tuning inputs from SuperGLUE patterns and from line-aligned texts (see
 * data_glm_rows.h). */
#include "data/data_glm_rows.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_pvp.h"
#include "runtime/base/rt_buf.h"

rt_status data_glm_specials_of(const tok_tokenizer *tok, data_glm_specials *out) {
    static const char *const names[5] = {"[CLS]", "[MASK]", "[gMASK]", "<|startofpiece|>", "<|endofpiece|>"};
    int32_t *slots[5] = {&out->cls, &out->mask, &out->gmask, &out->sop, &out->eop};
    /* eos is the tokenizer's own: <|endoftext|> (Chinese), [PAD] (English WordPiece) */
    out->eos = tok_eos_id(tok);
    if (out->eos < 0)
        return rt_errorf(RT_ERR_CONFIG, "the tokenizer (%s) has no end-of-text token", tok_kind_name(tok));
    for (int i = 0; i < 5; i++) {
        *slots[i] = tok_piece_to_id(tok, names[i]);
        if (*slots[i] < 0)
            return rt_errorf(RT_ERR_CONFIG,
                             "the tokenizer (%s) has no %s token; GLM needs GLM's command tokens (e.g. "
                             "cog-pretrain.model, kind glm-chinese-spm)",
                             tok_kind_name(tok), names[i]);
    }
    return RT_OK;
}

/* ---- building rows ---- */

static data_glm_row *rows_add(data_glm_rows *r, size_t *cap) {
    RT_GROW(r->rows, *cap, (size_t)r->n_rows + 1);
    data_glm_row *row = &r->rows[r->n_rows++];
    memset(row, 0, sizeof *row);
    return row;
}

/* context (n ids, bidirectional) then, when answer is non-NULL, [sop] answer[0 .. m-2] at the
 * mask's position with block positions 1 .. m, labelled answer[0 .. m-1] (-100 where the answer
 * is -100: a cloze row's [sop] alone). */
static void row_fill(data_glm_row *row, const int32_t *ctx, int n, int mask_pos, int32_t sop, const int32_t *answer,
                     int m) {
    int len = n + (answer ? m : 0);
    row->ids = rt_xmalloc((size_t)len * sizeof(int32_t));
    row->pos = rt_xmalloc((size_t)len * sizeof(int32_t));
    row->block_pos = rt_xmalloc((size_t)len * sizeof(int32_t));
    row->labels = rt_xmalloc((size_t)len * sizeof(int32_t));
    for (int i = 0; i < n; i++) {
        row->ids[i] = ctx[i];
        row->pos[i] = i;
        row->block_pos[i] = 0;
        row->labels[i] = -100;
    }
    for (int i = 0; answer && i < m; i++) {
        row->ids[n + i] = i == 0 ? sop : answer[i - 1];
        row->pos[n + i] = mask_pos;
        row->block_pos[n + i] = i + 1;
        row->labels[n + i] = answer[i];
    }
    row->len = len;
    row->sep = n;
    row->mask_pos = mask_pos;
}

typedef struct {
    tok_ids ids;
    bool mask, shortenable;
    int segment;
} enc_part;

/* Tokens of the shortenable parts of one segment. */
static int seg_short_len(const enc_part *p, int n, int segment) {
    int t = 0;
    for (int i = 0; i < n; i++)
        if (p[i].segment == segment && p[i].shortenable) t += (int)p[i].ids.n;
    return t;
}

/* FlagAI's PVP.truncate (pvp.py:469-494): one token at a time from the end of the last non-empty
 * shortenable part of the segment whose shortenable parts are longer (segment b on a tie). */
static bool truncate_parts(enc_part *p, int n, int answer_len, int max_len) {
    int total = 0;
    for (int i = 0; i < n; i++) total += p[i].mask ? 1 : (int)p[i].ids.n;
    total += answer_len + 2 + (answer_len == 0 ? 1 : 0); /* [CLS], <eos>, and [sop] reserved */
    int remove = total - max_len;
    if (remove <= 0) return false;
    for (; remove > 0; remove--) {
        int seg = seg_short_len(p, n, 0) > seg_short_len(p, n, 1) ? 0 : 1;
        int last = -1;
        for (int i = 0; i < n; i++)
            if (p[i].segment == seg && p[i].shortenable && p[i].ids.n > 0) last = i;
        if (last < 0) break; /* nothing left to shorten: the row stays long */
        p[last].ids.n--;
    }
    return true;
}

static rt_status encode_text(const tok_tokenizer *tok, const char *text, tok_ids *out) {
    tok_ids_clear(out);
    return tok_encode(tok, text, strlen(text), out);
}

/* [CLS] parts <eos> into ctx; the mask's index. */
static int join_context(const enc_part *p, int n, const data_glm_specials *sp, tok_ids *ctx) {
    int mask_pos = -1;
    tok_ids_clear(ctx);
    tok_ids_push(ctx, sp->cls);
    for (int i = 0; i < n; i++) {
        if (p[i].mask) {
            mask_pos = (int)ctx->n;
            tok_ids_push(ctx, sp->mask);
        } else {
            for (size_t k = 0; k < p[i].ids.n; k++) tok_ids_push(ctx, p[i].ids.ids[k]);
        }
    }
    tok_ids_push(ctx, sp->eos);
    return mask_pos;
}

/* The verbalizer: one token per class (words[c] for class c). */
static rt_status rows_verbalizer(data_glm_rows *out, const char *const *words, int n, const tok_tokenizer *tok,
                                 const char *what) {
    rt_status st = RT_OK;
    tok_ids answer = {0};
    if (n > (int)(sizeof out->verbalizer / sizeof out->verbalizer[0]))
        RT_FAIL(RT_ERR_CONFIG, "%s: %d classes; single-token cloze scores at most %d", what, n,
                (int)(sizeof out->verbalizer / sizeof out->verbalizer[0]));
    out->n_classes = n;
    for (int c = 0; c < n; c++) {
        RT_TRY(encode_text(tok, words[c], &answer));
        if (answer.n != 1)
            RT_FAIL(RT_ERR_CONFIG,
                    "%s: verbalizer \"%s\" is %zu tokens for this tokenizer; single-token cloze needs one", what,
                    words[c], answer.n);
        out->verbalizer[c] = answer.ids[0];
    }
fail:
    tok_ids_free(&answer);
    return st;
}

/* Per-example scratch of the row builders. */
typedef struct {
    data_glm_specials sp;
    enc_part parts[DATA_PVP_MAX_PARTS];
    tok_ids ctx, answer;
    size_t cap; /* rows allocated */
} rows_scratch;

static void rows_scratch_free(rows_scratch *w) {
    for (int i = 0; i < DATA_PVP_MAX_PARTS; i++) tok_ids_free(&w->parts[i].ids);
    tok_ids_free(&w->ctx);
    tok_ids_free(&w->answer);
}

/* One example's rows from its filled pattern: the cloze row (the [sop] opens the blank; its
 * logits score the verbalizers), or a row per candidate answer. label -100: none. */
static rt_status rows_add_example(data_glm_rows *out, const data_pvp_filled *f, int label, const tok_tokenizer *tok,
                                  int max_len, rows_scratch *w) {
    rt_status st = RT_OK;
    const int n = f->n_parts;
    enc_part *parts = w->parts;
    for (int i = 0; i < n; i++) {
        parts[i].mask = f->parts[i].is_mask;
        parts[i].shortenable = f->parts[i].shortenable;
        parts[i].segment = f->parts[i].segment;
        tok_ids_clear(&parts[i].ids);
        if (!parts[i].mask) RT_TRY(encode_text(tok, f->parts[i].text, &parts[i].ids));
    }
    const int k = out->n_examples++;
    out->first_row[k] = out->n_rows;
    out->label[k] = label;
    if (f->n_candidates == 0) {
        const int32_t no_label = -100;
        out->n_truncated += truncate_parts(parts, n, 0, max_len);
        int mask_pos = join_context(parts, n, &w->sp, &w->ctx);
        row_fill(rows_add(out, &w->cap), w->ctx.ids, (int)w->ctx.n, mask_pos, w->sp.sop, &no_label, 1);
        return RT_OK;
    }
    out->rows_per_example = f->n_candidates;
    for (int c = 0; c < f->n_candidates; c++) {
        RT_TRY(encode_text(tok, f->candidates[c], &w->answer));
        tok_ids_push(&w->answer, w->sp.eop);
        enc_part cut[DATA_PVP_MAX_PARTS];
        memcpy(cut, parts, sizeof cut);
        /* the truncation of one candidate must not shorten the next: lengths only */
        out->n_truncated += truncate_parts(cut, n, (int)w->answer.n, max_len);
        int mask_pos = join_context(cut, n, &w->sp, &w->ctx);
        row_fill(rows_add(out, &w->cap), w->ctx.ids, (int)w->ctx.n, mask_pos, w->sp.sop, w->answer.ids,
                 (int)w->answer.n);
        for (int i = 0; i < n; i++) cut[i].ids.n = parts[i].ids.n; /* parts own the buffers */
    }
fail:
    return st;
}

rt_status data_glm_rows_from_superglue(const data_sg_examples *ex, int pattern, const tok_tokenizer *tok, int max_len,
                                       bool training, data_glm_rows *out) {
    rt_status st = RT_OK;
    data_pvp_filled f = {0};
    rows_scratch w = {0};
    memset(out, 0, sizeof *out);
    const data_sg_task *task = ex->task;
    const bool choices = data_pvp_is_multi_token(task->id);
    out->kind = task->id == DATA_SG_WSC ? DATA_GLM_SPAN : choices ? DATA_GLM_CHOICES : DATA_GLM_CLOZE;
    RT_TRY(data_glm_specials_of(tok, &w.sp));
    if (!choices) { /* one verbalizer token per class */
        const char *words[16];
        RT_CHECK(task->n_labels <= 16, "task %s: %d labels", task->name, task->n_labels);
        for (int c = 0; c < task->n_labels; c++)
            if (!(words[c] = data_pvp_verbalizer(task->id, pattern, c)))
                RT_FAIL(RT_ERR_CONFIG, "task %s has no pattern %d", task->name, pattern);
        char what[64];
        snprintf(what, sizeof what, "task %s", task->name);
        RT_TRY(rows_verbalizer(out, words, task->n_labels, tok, what));
    }
    out->first_row = rt_xcalloc(ex->n + 1, sizeof *out->first_row);
    out->label = rt_xcalloc(ex->n + 1, sizeof *out->label);
    /* GLM trains WSC on the examples whose span1 is the pronoun's referent (dataset.py: cloze_eval
     * skips the others in the train split) */
    const int32_t keep_only = out->kind == DATA_GLM_SPAN && training ? data_sg_label_id(task, "true") : -2;
    for (size_t e = 0; e < ex->n; e++) {
        if (keep_only != -2 && ex->ex[e].label != keep_only) continue;
        RT_TRY(data_pvp_fill(task, pattern, &ex->ex[e], &f));
        RT_TRY(rows_add_example(out, &f, ex->ex[e].label == DATA_SG_LABEL_NONE ? -100 : ex->ex[e].label, tok, max_len,
                                &w));
        data_pvp_filled_free(&f);
    }
    if (out->kind != DATA_GLM_CHOICES) out->rows_per_example = 1;
fail:
    data_pvp_filled_free(&f);
    rows_scratch_free(&w);
    if (st != RT_OK) data_glm_rows_free(out);
    return st;
}

rt_status data_glm_rows_from_cloze(const data_pvp_filled *filled, const int32_t *labels, size_t n,
                                   const char *const *verbalizer, int n_classes, const tok_tokenizer *tok, int max_len,
                                   data_glm_rows *out) {
    rt_status st = RT_OK;
    rows_scratch w = {0};
    memset(out, 0, sizeof *out);
    out->kind = DATA_GLM_CLOZE;
    out->rows_per_example = 1;
    RT_TRY(data_glm_specials_of(tok, &w.sp));
    RT_TRY(rows_verbalizer(out, verbalizer, n_classes, tok, "--verbalizer"));
    out->first_row = rt_xcalloc(n + 1, sizeof *out->first_row);
    out->label = rt_xcalloc(n + 1, sizeof *out->label);
    for (size_t e = 0; e < n; e++)
        RT_TRY(rows_add_example(out, &filled[e], labels[e] < 0 ? -100 : labels[e], tok, max_len, &w));
fail:
    rows_scratch_free(&w);
    if (st != RT_OK) data_glm_rows_free(out);
    return st;
}

rt_status data_glm_rows_from_lines(const data_lines *src, const data_lines *tgt, size_t begin, size_t end,
                                   const tok_tokenizer *tok, int max_source_len, int max_target_len,
                                   data_glm_rows *out) {
    rt_status st = RT_OK;
    data_glm_specials sp;
    tok_ids s = {0}, t = {0}, ctx = {0};
    size_t cap = 0;
    memset(out, 0, sizeof *out);
    out->kind = DATA_GLM_SEQ2SEQ;
    out->rows_per_example = 1;
    RT_TRY(data_glm_specials_of(tok, &sp));
    if (max_source_len < 3 || max_target_len < 1)
        RT_FAIL(RT_ERR_CONFIG, "max source length %d (>= 3) and target length %d (>= 1)", max_source_len,
                max_target_len);
    out->n_examples = (int)(end - begin);
    out->first_row = rt_xcalloc((size_t)out->n_examples + 1, sizeof *out->first_row);
    out->label = rt_xcalloc((size_t)out->n_examples + 1, sizeof *out->label);
    for (size_t i = begin; i < end; i++) {
        RT_TRY(encode_text(tok, src->line[i], &s));
        /* [CLS] source [gMASK]: the source loses its end when too long */
        size_t keep = s.n + 2 > (size_t)max_source_len ? (size_t)max_source_len - 2 : s.n;
        out->n_truncated += keep < s.n;
        tok_ids_clear(&ctx);
        tok_ids_push(&ctx, sp.cls);
        for (size_t k = 0; k < keep; k++) tok_ids_push(&ctx, s.ids[k]);
        tok_ids_push(&ctx, sp.gmask);
        out->first_row[i - begin] = out->n_rows;
        out->label[i - begin] = -100;
        data_glm_row *row = rows_add(out, &cap);
        if (!tgt) {
            row_fill(row, ctx.ids, (int)ctx.n, (int)ctx.n - 1, sp.sop, NULL, 0);
            continue;
        }
        RT_TRY(encode_text(tok, tgt->line[i], &t));
        if (t.n + 1 > (size_t)max_target_len) {
            t.n = (size_t)max_target_len - 1;
            out->n_truncated++;
        }
        tok_ids_push(&t, sp.eop);
        row_fill(row, ctx.ids, (int)ctx.n, (int)ctx.n - 1, sp.sop, t.ids, (int)t.n);
    }
fail:
    tok_ids_free(&s);
    tok_ids_free(&t);
    tok_ids_free(&ctx);
    if (st != RT_OK) data_glm_rows_free(out);
    return st;
}

void data_glm_rows_free(data_glm_rows *r) {
    for (int i = 0; i < r->n_rows; i++) {
        free(r->rows[i].ids);
        free(r->rows[i].pos);
        free(r->rows[i].block_pos);
        free(r->rows[i].labels);
    }
    free(r->rows);
    free(r->first_row);
    free(r->label);
    memset(r, 0, sizeof *r);
}

/* ---- as cache sets ---- */

enum { GLM_SET_IDS, GLM_SET_POS, GLM_SET_BLOCK_POS, GLM_SET_LABELS, GLM_SET_EXAMPLES };

rt_status data_glm_rows_to_sets(const data_glm_rows *r, data_tokenized *sets) {
    rt_status st = RT_OK;
    const int n = r->n_rows, ne = r->n_examples;
    const int32_t **rows = rt_xcalloc((size_t)(n > ne + 1 ? n : ne + 1), sizeof *rows);
    int32_t *len = rt_xcalloc((size_t)(n > ne + 1 ? n : ne + 1), sizeof *len);
    int32_t *sep = rt_xcalloc((size_t)n + 1, sizeof *sep), *mask = rt_xcalloc((size_t)n + 1, sizeof *mask);
    int32_t *ex = rt_xcalloc((size_t)ne * 2 + 1, sizeof *ex), scalars[4 + 16];
    for (int s = 0; s < DATA_GLM_ROWS_SETS; s++) memset(&sets[s], 0, sizeof sets[s]);
    for (int i = 0; i < n; i++) len[i] = r->rows[i].len, sep[i] = r->rows[i].sep, mask[i] = r->rows[i].mask_pos;
    for (int k = GLM_SET_IDS; k <= GLM_SET_LABELS; k++) {
        for (int i = 0; i < n; i++)
            rows[i] = k == GLM_SET_IDS         ? r->rows[i].ids
                      : k == GLM_SET_POS       ? r->rows[i].pos
                      : k == GLM_SET_BLOCK_POS ? r->rows[i].block_pos
                                               : r->rows[i].labels;
        RT_TRY(data_tokenized_from_rows(rows, len, k == GLM_SET_IDS ? sep : NULL, k == GLM_SET_IDS ? mask : NULL,
                                        (size_t)n, &sets[k]));
    }
    sets[GLM_SET_IDS].n_truncated = (size_t)r->n_truncated;
    for (int e = 0; e < ne; e++) {
        ex[2 * e] = r->first_row[e], ex[2 * e + 1] = r->label[e];
        rows[e] = ex + 2 * e, len[e] = 2;
    }
    scalars[0] = r->kind, scalars[1] = r->rows_per_example, scalars[2] = r->n_classes, scalars[3] = r->n_truncated;
    memcpy(scalars + 4, r->verbalizer, sizeof r->verbalizer);
    rows[ne] = scalars, len[ne] = 4 + 16;
    RT_TRY(data_tokenized_from_rows(rows, len, NULL, NULL, (size_t)ne + 1, &sets[GLM_SET_EXAMPLES]));
fail:
    free(rows), free(len), free(sep), free(mask), free(ex);
    return st;
}

/* Row i of set s: its ids. */
static const int32_t *set_row(const data_tokenized *s, size_t i) { return s->ids + s->offsets[i]; }

rt_status data_glm_rows_from_sets(const data_tokenized *sets, data_glm_rows *out) {
    rt_status st = RT_OK;
    memset(out, 0, sizeof *out);
    const data_tokenized *ids = &sets[GLM_SET_IDS], *exs = &sets[GLM_SET_EXAMPLES];
    if (ids->n > INT32_MAX || exs->n < 1 || exs->lengths[exs->n - 1] != 20)
        RT_FAIL(RT_ERR_FORMAT, "GLM rows: %zu rows, or no scalars row", ids->n);
    const int32_t *sc = set_row(exs, exs->n - 1);
    if (sc[0] < DATA_GLM_CLOZE || sc[0] > DATA_GLM_SEQ2SEQ || sc[1] < 1 || sc[2] < 0 || sc[2] > 16 || sc[3] < 0)
        RT_FAIL(RT_ERR_FORMAT, "GLM rows: bad scalars (kind %d, %d rows per example, %d classes)", sc[0], sc[1], sc[2]);
    out->kind = (data_glm_task_kind)sc[0];
    out->rows_per_example = sc[1];
    out->n_classes = sc[2];
    out->n_truncated = sc[3];
    memcpy(out->verbalizer, sc + 4, sizeof out->verbalizer);
    const int n = (int)ids->n, ne = (int)exs->n - 1;
    for (int k = GLM_SET_POS; k <= GLM_SET_LABELS; k++)
        if (sets[k].n != ids->n) RT_FAIL(RT_ERR_FORMAT, "GLM rows: set %d has %zu rows, the ids %d", k, sets[k].n, n);
    out->rows = rt_xcalloc((size_t)n + 1, sizeof *out->rows);
    for (int i = 0; i < n; i++) {
        data_glm_row *row = &out->rows[out->n_rows++];
        row->len = ids->lengths[i], row->sep = ids->len_a[i], row->mask_pos = ids->labels[i];
        for (int k = GLM_SET_POS; k <= GLM_SET_LABELS; k++)
            if (sets[k].lengths[i] != row->len)
                RT_FAIL(RT_ERR_FORMAT, "GLM rows: row %d has %d ids but %d entries in set %d", i, row->len,
                        sets[k].lengths[i], k);
        if (row->mask_pos < -1 || row->mask_pos >= row->len)
            RT_FAIL(RT_ERR_FORMAT, "GLM rows: row %d's mask position %d is outside its %d tokens", i, row->mask_pos,
                    row->len);
        int32_t **dst[4] = {&row->ids, &row->pos, &row->block_pos, &row->labels};
        for (int k = 0; k < 4; k++) {
            *dst[k] = rt_xmalloc(((size_t)row->len + 1) * sizeof(int32_t));
            memcpy(*dst[k], set_row(&sets[k], (size_t)i), (size_t)row->len * sizeof(int32_t));
        }
    }
    out->first_row = rt_xcalloc((size_t)ne + 1, sizeof *out->first_row);
    out->label = rt_xcalloc((size_t)ne + 1, sizeof *out->label);
    for (int e = 0; e < ne; e++) {
        if (exs->lengths[e] != 2)
            RT_FAIL(RT_ERR_FORMAT, "GLM rows: example %d has %d fields, not 2", e, exs->lengths[e]);
        const int32_t first = set_row(exs, (size_t)e)[0], label = set_row(exs, (size_t)e)[1];
        /* a label indexes the verbalizer (cloze) or the choices; span and seq2seq labels index nothing */
        const int classes = out->kind == DATA_GLM_CHOICES ? out->rows_per_example
                            : out->kind == DATA_GLM_CLOZE ? out->n_classes
                                                          : INT32_MAX;
        if (first < 0 || first > n - out->rows_per_example || (label != -100 && (label < 0 || label >= classes)))
            RT_FAIL(RT_ERR_FORMAT, "GLM rows: example %d: first row %d, label %d (of %d rows, %d classes)", e, first,
                    label, n, classes);
        out->first_row[e] = first, out->label[e] = label;
        out->n_examples++;
    }
fail:
    if (st != RT_OK) data_glm_rows_free(out);
    return st;
}
