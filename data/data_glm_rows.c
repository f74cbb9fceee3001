/* GLM's fine-tuning inputs from SuperGLUE patterns and from line-aligned texts (see
 * data_glm_rows.h). */
#include "data/data_glm_rows.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_pvp.h"

rt_status data_glm_specials_of(const tok_tokenizer *tok, data_glm_specials *out) {
    static const char *const names[5] = {"[CLS]", "[MASK]", "[gMASK]", "<|startofpiece|>", "<|endofpiece|>"};
    int32_t *slots[5] = {&out->cls, &out->mask, &out->gmask, &out->sop, &out->eop};
    /* eos is the tokenizer's own: <|endoftext|> (Chinese), [PAD] (English WordPiece) */
    out->eos = tok_eos_id(tok);
    if (out->eos < 0) return rt_errorf(RT_ERR_CONFIG, "the tokenizer (%s) has no end-of-text token", tok_kind_name(tok));
    for (int i = 0; i < 5; i++) {
        *slots[i] = tok_piece_to_id(tok, names[i]);
        if (*slots[i] < 0)
            return rt_errorf(RT_ERR_CONFIG, "the tokenizer (%s) has no %s token; GLM needs GLM's command tokens (e.g. "
                             "cog-pretrain.model, kind glm-chinese-spm)", tok_kind_name(tok), names[i]);
    }
    return RT_OK;
}

/* ---- building rows ---- */

static data_glm_row *rows_add(data_glm_rows *r, int *cap) {
    if (r->n_rows == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        r->rows = rt_xrealloc(r->rows, (size_t)*cap * sizeof *r->rows);
    }
    data_glm_row *row = &r->rows[r->n_rows++];
    memset(row, 0, sizeof *row);
    return row;
}

/* context (n ids, bidirectional) then, when answer is non-NULL, [sop] answer[0 .. m-2] at the
 * mask's position with block positions 1 .. m, labelled answer[0 .. m-1] (-100 where the answer
 * is -100: a cloze row's [sop] alone). */
static void row_fill(data_glm_row *row, const int32_t *ctx, int n, int mask_pos, int32_t sop, const int32_t *answer, int m) {
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

rt_status data_glm_rows_from_superglue(const data_sg_examples *ex, int pattern, const tok_tokenizer *tok, int max_len,
                                  bool training, data_glm_rows *out) {
    rt_status st = RT_OK;
    data_glm_specials sp;
    data_pvp_filled f = {0};
    enc_part parts[DATA_PVP_MAX_PARTS];
    tok_ids ctx = {0}, answer = {0};
    int cap = 0;
    memset(out, 0, sizeof *out);
    memset(parts, 0, sizeof parts);
    const data_sg_task *task = ex->task;
    const bool choices = data_pvp_is_multi_token(task->id);
    out->kind = task->id == DATA_SG_WSC ? DATA_GLM_SPAN : choices ? DATA_GLM_CHOICES : DATA_GLM_CLOZE;
    RT_TRY(data_glm_specials_of(tok, &sp));
    if (!choices) { /* one verbalizer token per class */
        out->n_classes = task->n_labels;
        for (int c = 0; c < task->n_labels; c++) {
            const char *word = data_pvp_verbalizer(task->id, pattern, c);
            if (!word) RT_FAIL(RT_ERR_CONFIG, "task %s has no pattern %d", task->name, pattern);
            RT_TRY(encode_text(tok, word, &answer));
            if (answer.n != 1)
                RT_FAIL(RT_ERR_CONFIG, "task %s: verbalizer \"%s\" is %zu tokens for this tokenizer; single-token cloze "
                        "needs one", task->name, word, answer.n);
            out->verbalizer[c] = answer.ids[0];
        }
    }
    out->first_row = rt_xcalloc(ex->n + 1, sizeof *out->first_row);
    out->label = rt_xcalloc(ex->n + 1, sizeof *out->label);
    /* GLM trains WSC on the examples whose span1 is the pronoun's referent (dataset.py: cloze_eval
     * skips the others in the train split) */
    const int32_t keep_only = out->kind == DATA_GLM_SPAN && training ? data_sg_label_id(task, "true") : -2;
    for (size_t e = 0; e < ex->n; e++) {
        if (keep_only != -2 && ex->ex[e].label != keep_only) continue;
        const int k = out->n_examples++;
        RT_TRY(data_pvp_fill(task, pattern, &ex->ex[e], &f));
        int n = f.n_parts;
        for (int i = 0; i < n; i++) {
            parts[i].mask = f.parts[i].is_mask;
            parts[i].shortenable = f.parts[i].shortenable;
            parts[i].segment = f.parts[i].segment;
            tok_ids_clear(&parts[i].ids);
            if (!parts[i].mask) RT_TRY(encode_text(tok, f.parts[i].text, &parts[i].ids));
        }
        out->first_row[k] = out->n_rows;
        out->label[k] = ex->ex[e].label == DATA_SG_LABEL_NONE ? -100 : ex->ex[e].label;
        if (!choices) { /* the [sop] opens the blank; its logits score the verbalizers */
            const int32_t no_label = -100;
            out->n_truncated += truncate_parts(parts, n, 0, max_len);
            int mask_pos = join_context(parts, n, &sp, &ctx);
            row_fill(rows_add(out, &cap), ctx.ids, (int)ctx.n, mask_pos, sp.sop, &no_label, 1);
        } else {
            out->rows_per_example = f.n_candidates;
            for (int c = 0; c < f.n_candidates; c++) {
                RT_TRY(encode_text(tok, f.candidates[c], &answer));
                tok_ids_push(&answer, sp.eop);
                enc_part cut[DATA_PVP_MAX_PARTS];
                memcpy(cut, parts, sizeof cut);
                /* the truncation of one candidate must not shorten the next: lengths only */
                out->n_truncated += truncate_parts(cut, n, (int)answer.n, max_len);
                int mask_pos = join_context(cut, n, &sp, &ctx);
                row_fill(rows_add(out, &cap), ctx.ids, (int)ctx.n, mask_pos, sp.sop, answer.ids, (int)answer.n);
                for (int i = 0; i < n; i++) cut[i].ids.n = parts[i].ids.n; /* parts own the buffers */
            }
        }
        data_pvp_filled_free(&f);
    }
    if (out->kind != DATA_GLM_CHOICES) out->rows_per_example = 1;
fail:
    data_pvp_filled_free(&f);
    for (int i = 0; i < DATA_PVP_MAX_PARTS; i++) tok_ids_free(&parts[i].ids);
    tok_ids_free(&ctx);
    tok_ids_free(&answer);
    if (st != RT_OK) data_glm_rows_free(out);
    return st;
}

rt_status data_glm_rows_from_lines(const data_lines *src, const data_lines *tgt, size_t begin, size_t end,
                              const tok_tokenizer *tok, int max_source_len, int max_target_len, data_glm_rows *out) {
    rt_status st = RT_OK;
    data_glm_specials sp;
    tok_ids s = {0}, t = {0}, ctx = {0};
    int cap = 0;
    memset(out, 0, sizeof *out);
    out->kind = DATA_GLM_SEQ2SEQ;
    out->rows_per_example = 1;
    RT_TRY(data_glm_specials_of(tok, &sp));
    if (max_source_len < 3 || max_target_len < 1)
        RT_FAIL(RT_ERR_CONFIG, "max source length %d (>= 3) and target length %d (>= 1)", max_source_len, max_target_len);
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
