/* glm-finetune: fine-tunes GLM as GLM and FlagAI do: SuperGLUE tasks as cloze questions (the
 * verbalizer tokens scored at the [MASK]; COPA's answers by their summed log-probability) and
 * seq2seq as blank infilling (source [gMASK], the target generated in the blank). The model,
 * the inputs and the loop are shared code (models/glm/glm.c, apps/glm-finetune/glm_tasks.c,
 * runtime/train/rt_trainer.c); this file wires options, data, evaluation and export. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "apps/common/train_app.h"
#include "apps/common/train_lora.h"
#include "data/data_glm_batch.h"
#include "data/data_cache.h"
#include "data/data_glm_rows.h"
#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_train.h"
#include "checkpoints/ckpt_weights.h"
#include "data/data_pvp.h"
#include "data/data_table.h"
#include "data/data_user.h"
#include "apps/common/glue_files.h"
#include "data/data_sampler.h"
#include "metrics/metric_glue.h"
#include "metrics/metric_rouge.h"
#include "metrics/metric_superglue.h"
#include "models/glm/glm.h"
#include "runtime/base/rt_args.h"
#include "runtime/comm/rt_launch.h"
#include "runtime/base/rt_log.h"
#include "tokenizers/tok.h"

#define GLM_PROG "glm-finetune"

typedef struct {
    const char *task, *data_dir, *model, *arch, *tokenizer, *val_src, *val_tgt, *save_hf;
    const char *train_file, *validation_file, *test_file, *data_format, *label_column, *label_names, *positive_label,
        *cloze, *verbalizer;
    int64_t pattern, max_len, max_target_len, eval_batch_size, num_beams;
    double val_split, length_penalty;
    bool eval_generate;
    train_app_opts t;
} glm_opts;

static glm_opts O;

/* clang-format off */
static const rt_opt glm_own_options[] = {
    {"task", RT_OPT_CHOICE, &O.task, "copa", NULL,
     "copa, rte, boolq, cb, wic, multirc, wsc (cloze, SuperGLUE JSONL in --data-dir) or seq2seq (SRC TGT files)",
     "copa|rte|boolq|cb|wic|multirc|wsc|seq2seq", 0, 0},
    {"data-dir", RT_OPT_STRING, &O.data_dir, NULL, "DIR",
     "folder with the task's train.jsonl and val.jsonl (default: the shipped COPA copy for copa)", NULL, 0, 0},
    {"model", RT_OPT_STRING, &O.model, NULL, "DIR",
     "FlagAI GLM folder (config.json + pytorch_model.bin or model.safetensors) or a tz-convert folder at any tp; "
     "default: a small GLM from scratch", NULL, 0, 0},
    {"arch", RT_OPT_STRING, &O.arch, NULL, "FILE", "GLM config.json (FlagAI's fields) to build from scratch", NULL, 0, 0},
    {"tokenizer", RT_OPT_STRING, &O.tokenizer, NULL, "PATH",
     "GLM tokenizer: GLM's English WordPiece (a folder with vocab.txt and tokenizer_config.json) or Chinese "
     "SentencePiece (cog-pretrain.model); default: --model's, else the shipped English one", NULL, 0, 0},
    {"pattern", RT_OPT_INT, &O.pattern, "0", "N", "cloze pattern id (FlagAI's pattern_id)", NULL, 0, 16},
    {"max-len", RT_OPT_INT, &O.max_len, "256", "N", "tokens per input row (seq2seq: the source's)", NULL, 8, 1 << 16},
    {"max-target-len", RT_OPT_INT, &O.max_target_len, "64", "N", "seq2seq: target tokens, [eop] included", NULL, 2,
     1 << 16},
    {"val-src", RT_OPT_STRING, &O.val_src, NULL, "FILE", "seq2seq validation sources (default: the last 20% of SRC)",
     NULL, 0, 0},
    {"val-tgt", RT_OPT_STRING, &O.val_tgt, NULL, "FILE", "seq2seq validation targets, line-aligned with --val-src", NULL,
     0, 0},
    {"val-split", RT_OPT_FLOAT, &O.val_split, "0.2", "F",
     "seq2seq and --train-file: the share of the last examples held out without --val-src (--validation-file)", NULL,
     0.01, 0.9},
    {"train-file", RT_OPT_STRING, &O.train_file, NULL, "FILE",
     "your own classes instead of --task: CSV, TSV, JSON Lines or a JSON array, put through --cloze and "
     "--verbalizer", NULL, 0, 0},
    {"validation-file", RT_OPT_STRING, &O.validation_file, NULL, "FILE",
     "with --train-file: the validation rows (default: the last --val-split of the train file)", NULL, 0, 0},
    {"test-file", RT_OPT_STRING, &O.test_file, NULL, "FILE",
     "with --train-file: after training, the class of every row into SAVE_DIR/predictions.csv (.tsv, .jsonl as the "
     "file is), its columns then prediction and prob_CLASS", NULL, 0, 0},
    TRAIN_APP_DATA_FORMAT_OPT(&O.data_format),
    {"cloze", RT_OPT_STRING, &O.cloze, NULL, "PATTERN",
     "with --train-file: the cloze question, {COLUMN} for a text column (one or two) and one [MASK], e.g. "
     "\"{review} It was [MASK].\"", NULL, 0, 0},
    {"verbalizer", RT_OPT_STRING, &O.verbalizer, NULL, "CLASS=WORD,...",
     "with --train-file: the one-token word scored at [MASK] for each class (default: the class names)", NULL, 0, 0},
    {"label-column", RT_OPT_STRING, &O.label_column, "label", "NAME", "with --train-file: the label column", NULL, 0,
     0},
    {"label-names", RT_OPT_STRING, &O.label_names, NULL, "A,B,...",
     "with --train-file: the classes in id order (default: the train file's labels, sorted)", NULL, 0, 0},
    {"positive-label", RT_OPT_STRING, &O.positive_label, NULL, "NAME",
     "with --train-file, two classes: the one whose F1 is reported (default: the second)", NULL, 0, 0},
    {"eval-generate", RT_OPT_FLAG, &O.eval_generate, "true", NULL,
     "seq2seq: generate (with a key/value cache) at evaluation and report ROUGE-1/2/L (not with --pp: the loss "
     "only)", NULL, 0, 0},
    {"num-beams", RT_OPT_INT, &O.num_beams, "1", "N", "seq2seq generation: 1 = greedy, else beam search (HF's)", NULL,
     1, 64},
    {"length-penalty", RT_OPT_FLOAT, &O.length_penalty, "1.0", "F",
     "beam search: scores are divided by length^F (HF's length_penalty)", NULL, 0, 0},
    {"eval-batch-size", RT_OPT_INT, &O.eval_batch_size, "0", "N", "examples per evaluation batch (0: --batch-size)",
     NULL, 0, 1 << 20},
    {"save-hf", RT_OPT_STRING, &O.save_hf, NULL, "DIR",
     "where the trained model goes as FlagAI's layout (config.json, pytorch_model.bin holding {'module': ...}, the "
     "tokenizer; default SAVE_DIR/hf)", NULL, 0, 0},
};
/* clang-format on */
#define GLM_N_OWN ((int)(sizeof glm_own_options / sizeof glm_own_options[0]))
static rt_opt glm_options[GLM_N_OWN + TRAIN_APP_N_OPTS + TRAIN_APP_N_CHECKPOINT_OPTS + TRAIN_APP_N_LORA_OPTS];

static rt_args_spec glm_spec = {
    .prog = GLM_PROG,
    .positional = "[SRC TGT]",
    .min_positional = 0,
    .max_positional = 2,
    .summary = "Fine-tunes GLM (FlagAI's GLMModel: GLM-large-chinese, GLM-10B, ...) the way GLM does: SuperGLUE\n"
               "tasks as cloze questions (FlagAI's patterns and verbalizers; COPA by the summed log-probability of\n"
               "each answer) and seq2seq as blank infilling ([CLS] source [gMASK], the target generated in the\n"
               "blank). Reports accuracy (CB: also macro-F1; MultiRC: F1a and EM) or loss and ROUGE-1/2/L.\n"
               "--train-file puts your own classes through a cloze pattern and verbalizer (--cloze, --verbalizer)\n"
               "as FlagAI's custom tasks do.\n"
               "Checkpoints and metrics.jsonl go to --save-dir, the trained model to SAVE_DIR/hf (with --lora-r,\n"
               "the adapters as a PEFT folder to SAVE_DIR/lora).",
    .epilog = "examples:\n"
              "  glm-finetune --task copa                       # small GLM from scratch on the shipped COPA copy\n"
              "  glm-finetune --task rte --data-dir path/to/superglue-rte --model path/to/glm-large-ch\n"
              "  glm-finetune --task seq2seq train.src train.tgt --model path/to/glm-large-ch\n"
              "  glm-finetune --train-file assets/examples/reviews-train.csv --validation-file \\\n"
              "      assets/examples/reviews-validation.csv --label-column sentiment \\\n"
              "      --cloze \"{review} It was [MASK].\" --verbalizer negative=bad,positive=good\n"
              "  glm-finetune --task rte --data-dir path/to/superglue-rte --model path/to/glm-10b --lora-r 8\n"
              "exit status: 0 ok, 1 bad input or run failure, 2 usage error",
    .opts = glm_options,
};

/* ---- data: a sampler over examples; the batch carries their indices ---- */

typedef struct {
    const data_glm_rows *rows;
    data_sampler *sampler;
    int batch_size;
} glm_data;

static void glm_batch_free(rt_batch *b) {
    free(b->example_index);
    free(b->labels);
    memset(b, 0, sizeof *b);
}

/* Labelled targets of examples: cloze and choices count examples; span and seq2seq, trained by
 * the language-model loss, their answer tokens. */
static int glm_targets_of(const data_glm_rows *R, const int32_t *ex, int n) {
    int t = 0;
    for (int i = 0; i < n; i++) {
        if (R->kind == DATA_GLM_CLOZE || R->kind == DATA_GLM_CHOICES) {
            t += R->label[ex[i]] != -100;
            continue;
        }
        const data_glm_row *row = &R->rows[R->first_row[ex[i]]];
        for (int k = 0; k < row->len; k++) t += row->labels[k] != -100;
    }
    return t;
}

static rt_status glm_data_next(void *ctx, rt_batch *into, bool *end) {
    glm_data *d = ctx;
    if (into->capacity_B < d->batch_size) {
        glm_batch_free(into);
        into->example_index = rt_xcalloc((size_t)d->batch_size + 1, sizeof(int32_t));
        into->labels = rt_xcalloc((size_t)d->batch_size + 1, sizeof(int32_t));
        into->capacity_B = d->batch_size;
    }
    int count = 0;
    *end = !data_sampler_next_batch(d->sampler, d->batch_size, into->example_index, &count);
    into->B = count;
    for (int i = 0; i < count; i++) into->labels[i] = d->rows->label[into->example_index[i]];
    into->n_targets = glm_targets_of(d->rows, into->example_index, count);
    into->n_tokens = 0;
    into->T = 0; /* the padded length of its rows (the batch's shape in the logs) */
    for (int i = 0; i < count; i++)
        for (int k = 0; k < d->rows->rows_per_example; k++) {
            int len = d->rows->rows[d->rows->first_row[into->example_index[i]] + k].len;
            into->n_tokens += (size_t)len;
            into->T = len > into->T ? len : into->T;
        }
    if (count > 0) into->T = data_pad_length(&O.t.pad, into->T);
    return RT_OK;
}

static void glm_data_get_state(void *ctx, int64_t *epoch, int64_t *position) {
    data_sampler_state s = data_sampler_get_state(((glm_data *)ctx)->sampler);
    *epoch = (int64_t)s.epoch;
    *position = (int64_t)s.position;
}

static rt_status glm_data_set_state(void *ctx, int64_t epoch, int64_t position) {
    glm_data *d = ctx;
    data_sampler_state s = data_sampler_get_state(d->sampler);
    s.epoch = (uint64_t)epoch;
    s.position = (uint64_t)position;
    return data_sampler_set_state(d->sampler, &s);
}

typedef struct {
    glm_model *model;
    const data_glm_rows *train;
    data_glm_batch *bufs; /* one per micro-batch of a step (a pipeline step holds them all) */
    glm_task *tasks;
    int32_t pad_id;
} glm_trainer;

/* rows x the longest row of the batch (choices: every example's candidate rows) */
static double glm_flops(void *ctx, const rt_batch *b) {
    glm_trainer *g = ctx;
    int per = g->train->rows_per_example;
    return glm_train_flops(g->model, b->B * per, b->T, b->n_targets);
}

/* Examples ex[0..n) collated into buf, and what the model scores them by: training takes the
 * span task's language-model loss on the answer, evaluation its argmax check. */
static glm_task glm_task_of(const data_glm_rows *R, data_glm_batch *buf, const int32_t *ex, int n, int32_t pad_id,
                            bool eval) {
    data_glm_collate(R, ex, n, pad_id, &O.t.pad, buf);
    glm_task t = {
        .in =
            {.B = buf->B, .T = buf->T, .ids = buf->ids, .pos = buf->pos, .block_pos = buf->block_pos, .sep = buf->sep},
        .labels = buf->labels,
        .label = buf->label};
    switch (R->kind) {
    case DATA_GLM_CLOZE: t.kind = GLM_HEAD_CLOZE, t.at = buf->cloze_at, t.cand = buf->cand, t.K = R->n_classes; break;
    case DATA_GLM_CHOICES: t.kind = GLM_HEAD_CHOICE, t.K = R->rows_per_example; break;
    case DATA_GLM_SPAN: t.kind = eval ? GLM_HEAD_SPAN_MATCH : GLM_HEAD_LM; break;
    case DATA_GLM_SEQ2SEQ: t.kind = GLM_HEAD_LM; break;
    }
    return t;
}

/* A pipeline's stand-in for an empty micro-batch (rt_trainer.c) has no targets: it must add
 * nothing, so its labels go (a genuine batch without targets has none to lose). */
static void glm_mute(glm_task *t, data_glm_batch *buf, int n) {
    if (t->kind == GLM_HEAD_CLOZE || t->kind == GLM_HEAD_CHOICE) {
        for (int i = 0; i < n; i++) buf->label[i] = -100;
        return;
    }
    for (size_t i = 0; i < (size_t)buf->B * buf->T; i++) buf->labels[i] = -100;
}

static rt_status glm_train_step(void *ctx, const rt_batch *b, const mdl_pass *pass, float grad_scale,
                                double *loss_sum) {
    glm_trainer *g = ctx;
    const glm_task t = glm_task_of(g->train, &g->bufs[0], b->example_index, b->B, g->pad_id, false);
    return glm_task_step(g->model, &t, pass, grad_scale, loss_sum, NULL);
}

static rt_status glm_pipeline_step(void *ctx, const rt_batch *b, int n, uint64_t seed, int64_t step, float grad_scale,
                                   double *loss_sum) {
    glm_trainer *g = ctx;
    for (int k = 0; k < n; k++) {
        g->tasks[k] = glm_task_of(g->train, &g->bufs[k], b[k].example_index, b[k].B, g->pad_id, false);
        if (b[k].n_targets == 0) glm_mute(&g->tasks[k], &g->bufs[k], b[k].B);
    }
    return glm_pipe_step(g->model, g->tasks, n, seed, step, grad_scale, loss_sum);
}

/* ---- evaluation ---- */

typedef struct {
    glm_model *model;
    const tok_tokenizer *tok;
    const data_glm_rows *val;
    const data_sg_examples *sg; /* SuperGLUE cloze tasks: the examples (MultiRC question ids) */
    const data_user_task *user; /* --train-file: a user's classes */
    const data_lines *refs;     /* seq2seq: reference targets from ref_begin */
    size_t ref_begin;
    data_glm_specials sp;
    data_glm_batch buf;
    int32_t pad_id;
    int batch;
    const char *save_dir;
    rt_grid *grid;
    glm_decoder *decoder; /* seq2seq generation */
} glm_eval;

static int glm_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) best = x[i] > x[best] ? i : best;
    return best;
}

/* n seq2seq examples continued into texts (caller frees each): greedy or beam search, the
 * contexts run once, then one token per row per step against the key/value cache. */
static rt_status glm_eval_generate(glm_eval *e, const int32_t *ex, int n, char **texts) {
    rt_status st = RT_OK;
    const data_glm_rows *R = e->val;
    const int steps = (int)O.max_target_len;
    int S = 1;
    for (int i = 0; i < n; i++) {
        int s = R->rows[R->first_row[ex[i]]].sep;
        S = s > S ? s : S;
    }
    const size_t cells = (size_t)n * S;
    int32_t *ids = rt_xcalloc(cells, sizeof *ids), *pos = rt_xcalloc(cells, sizeof *pos),
            *bpos = rt_xcalloc(cells, sizeof *bpos), *sep = rt_xcalloc((size_t)n, sizeof *sep),
            *mask_pos = rt_xcalloc((size_t)n, sizeof *mask_pos), *out = rt_xcalloc((size_t)n * steps, sizeof *out);
    int *len = rt_xcalloc((size_t)n, sizeof *len);
    for (int i = 0; i < n; i++) {
        const data_glm_row *row = &R->rows[R->first_row[ex[i]]];
        for (int t = 0; t < S; t++) ids[(size_t)i * S + t] = t < row->sep ? row->ids[t] : e->pad_id;
        for (int t = 0; t < row->sep; t++) pos[(size_t)i * S + t] = t;
        sep[i] = row->sep;
        mask_pos[i] = row->mask_pos;
    }
    glm_inputs ctx = {.B = n, .T = S, .ids = ids, .pos = pos, .block_pos = bpos, .sep = sep};
    gen_options go = {.max_new_tokens = steps,
                      .num_beams = (int)O.num_beams,
                      .length_penalty = O.length_penalty,
                      .early_stopping = GEN_EARLY_STOP_HEURISTIC,
                      .eos_token_id = e->sp.eop};
    RT_TRY(glm_generate(e->decoder, &ctx, mask_pos, e->sp.sop, &go, NULL, NULL, out, len, NULL));
    for (int i = 0; i < n; i++) {
        int k = len[i] > 0 && out[(size_t)i * steps + len[i] - 1] == e->sp.eop ? len[i] - 1 : len[i];
        RT_TRY(tok_decode_skip_special(e->tok, out + (size_t)i * steps, (size_t)k, &texts[i]));
    }
fail:
    free(ids);
    free(pos);
    free(bpos);
    free(sep);
    free(mask_pos);
    free(out);
    free(len);
    return st;
}

static rt_status glm_evaluate(void *ctx, rt_metrics *out) {
    rt_status st = RT_OK;
    glm_eval *e = ctx;
    const data_glm_rows *R = e->val;
    const int n_ex = R->n_examples, per = R->rows_per_example;
    const int K = R->kind == DATA_GLM_CLOZE ? R->n_classes : per;
    int32_t *ex = rt_xmalloc((size_t)e->batch * sizeof(int32_t));
    float *scores = rt_xmalloc((size_t)e->batch * per * (K > 0 ? K : 1) * sizeof(float));
    int32_t *pred = rt_xcalloc((size_t)n_ex + 1, sizeof(int32_t)),
            *label = rt_xcalloc((size_t)n_ex + 1, sizeof(int32_t));
    int32_t *question = NULL;
    char **texts = NULL;
    double loss = 0;
    int64_t targets = 0;
    mdl_pass pass = {0};
    for (int b0 = 0; b0 < n_ex; b0 += e->batch) {
        int n = n_ex - b0 < e->batch ? n_ex - b0 : e->batch;
        for (int i = 0; i < n; i++) ex[i] = b0 + i;
        double l = 0;
        const glm_task t = glm_task_of(R, &e->buf, ex, n, e->pad_id, true);
        RT_TRY(glm_task_step(e->model, &t, &pass, 0.0f, &l, scores));
        loss += l;
        targets += glm_targets_of(R, ex, n);
        for (int i = 0; R->kind != DATA_GLM_SEQ2SEQ && i < n; i++) {
            /* span: WSC's labels are false (0) and true (1), its score the match */
            pred[b0 + i] = R->kind == DATA_GLM_SPAN ? scores[i] > 0.5f : glm_argmax(scores + (size_t)i * K, K);
            label[b0 + i] = R->label[b0 + i] == -100 ? (e->user ? -100 : -1) : R->label[b0 + i];
        }
    }
    out->n = 0;
    out->names[out->n] = "loss";
    out->values[out->n++] = targets ? loss / (double)targets : 0.0;
    if (e->user) {
        out->names[out->n] = "accuracy";
        out->values[out->n++] = metric_accuracy(pred, label, (size_t)n_ex);
        out->names[out->n] = "f1_macro";
        out->values[out->n++] = metric_f1_macro(pred, label, (size_t)n_ex, e->user->n_labels);
        if (e->user->positive >= 0) {
            out->names[out->n] = "f1";
            out->values[out->n++] = metric_f1_class(pred, label, (size_t)n_ex, e->user->positive);
        }
    } else if (R->kind != DATA_GLM_SEQ2SEQ) {
        metric_sg_score m[METRIC_SG_MAX_SCORES];
        int nm = 0;
        if (e->sg->task->id == DATA_SG_MULTIRC) {
            question = rt_xmalloc((size_t)n_ex * sizeof(int32_t));
            for (int i = 0; i < n_ex; i++) question[i] = e->sg->ex[i].question_idx;
        }
        RT_TRY(metric_superglue(e->sg->task->name, pred, label, question, (size_t)n_ex, m, &nm));
        for (int i = 0; i < nm && out->n < RT_MAX_METRICS; i++) {
            out->names[out->n] = m[i].name;
            out->values[out->n++] = m[i].value;
        }
    } else if (e->decoder) {
        texts = rt_xcalloc((size_t)n_ex, sizeof *texts);
        for (int b0 = 0; b0 < n_ex; b0 += e->batch) {
            int n = n_ex - b0 < e->batch ? n_ex - b0 : e->batch;
            for (int i = 0; i < n; i++) ex[i] = b0 + i;
            RT_TRY(glm_eval_generate(e, ex, n, texts + b0));
        }
        metric_rouge_scores rouge;
        RT_TRY(metric_rouge_corpus((const char *const *)texts, (const char *const *)(e->refs->line + e->ref_begin),
                                   (size_t)n_ex, true, NULL, &rouge));
        out->names[out->n] = "rouge1";
        out->values[out->n++] = rouge.rouge1.fmeasure;
        out->names[out->n] = "rouge2";
        out->values[out->n++] = rouge.rouge2.fmeasure;
        out->names[out->n] = "rougeL";
        out->values[out->n++] = rouge.rougeL.fmeasure;
        if (e->grid->world->rank == 0 && e->save_dir) {
            char path[4200];
            snprintf(path, sizeof path, "%s/val_predictions.txt", e->save_dir);
            RT_TRY(train_app_write_lines(path, texts, (size_t)n_ex));
        }
    }
fail:
    for (int i = 0; texts && i < n_ex; i++) free(texts[i]);
    free(texts);
    free(question);
    free(ex);
    free(scores);
    free(pred);
    free(label);
    return st;
}

/* ---- model, tokenizer, export ---- */

static rt_status glm_resolve_tokenizer(char *out, size_t size) {
    char p[4200];
    if (O.tokenizer) {
        snprintf(out, size, "%s", O.tokenizer);
        return RT_OK;
    }
    if (O.model) { /* the model's own: GLM's Chinese SentencePiece, or an English vocab.txt */
        static const char *const names[] = {"cog-pretrain.model", "tokenizer_config.json", "vocab.txt"};
        for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
            snprintf(p, sizeof p, "%s/%s", O.model, names[k]);
            if (train_app_exists(p)) {
                snprintf(out, size, "%s", k == 0 ? p : O.model);
                return RT_OK;
            }
        }
    }
    /* SuperGLUE is English: GLM's English WordPiece has one-token verbalizers (" Yes", " No") */
    snprintf(out, size, "%s", TZ_SOURCE_DIR "/assets/glm-en-wordpiece");
    return RT_OK;
}

/* A small GLM for runs from scratch: a COPA epoch takes about a minute on 2 cores. */
static void glm_small_config(glm_config *c, int vocab, int max_len) {
    glm_config_default(c);
    c->vocab_size = vocab;
    c->hidden_size = 128;
    c->num_layers = 2;
    c->num_attention_heads = 4;
    c->max_sequence_length = max_len;
}

static rt_status glm_build_model(rt_backend *be, const rt_grid *grid, const tok_tokenizer *tok,
                                 const ckpt_peft_config *lora, int max_B, int max_T, glm_model **out) {
    rt_status st = RT_OK;
    char report[512] = "", path[4200];
    glm_config cfg;
    if (O.model && O.arch) return rt_errorf(RT_ERR_USAGE, "give --model or --arch, not both");
    if (O.model) {
        snprintf(path, sizeof path, "%s/config.json", O.model);
        RT_TRY(glm_config_load(path, &cfg));
    } else if (O.arch) {
        RT_TRY(glm_config_load(O.arch, &cfg));
    } else {
        glm_small_config(&cfg, tok_vocab_size(tok), max_T > 512 ? max_T : 512);
    }
    /* what the data and the tokenizer need, before any weights are read */
    if (cfg.vocab_size < tok_vocab_size(tok))
        RT_FAIL(RT_ERR_CONFIG,
                "%s: the model's vocab_size %d is smaller than the tokenizer's %d tokens (pass the "
                "model's own tokenizer with --tokenizer)",
                O.model ? O.model : O.arch, cfg.vocab_size, tok_vocab_size(tok));
    if (max_T > cfg.max_sequence_length + 1)
        RT_FAIL(RT_ERR_CONFIG,
                "rows padded to %d tokens exceed the model's max_sequence_length %d (lower --max-len%s%s)", max_T,
                cfg.max_sequence_length, strcmp(O.task, "seq2seq") == 0 ? " or --max-target-len" : "",
                O.t.length_buckets ? ", or the last --length-buckets entry" : "");
    cfg.checkpoint_layers = train_app_checkpoint_layers(&O.t);
    cfg.pp_recompute = O.t.pp_recompute;
    cfg.lora = lora;
    RT_TRY(
        glm_model_init_stage(&cfg, be, grid->tp, grid->pp, (int)O.t.grad_accum, max_B, max_T, (uint64_t)O.t.seed, out));
    if (O.model) {
        RT_TRY(glm_model_load_dir(*out, O.model, report, sizeof report));
        rt_log_info("weights: %s: %s", O.model, report);
    } else {
        rt_log_info("weights: random init (%s)", O.arch ? O.arch : "a small GLM: 2 layers, 128 wide, 4 heads");
    }
    rt_log_info("model: GLM %d layers, %d wide, %d heads, vocab %d, positions %d", cfg.num_layers, cfg.hidden_size,
                cfg.num_attention_heads, cfg.vocab_size, cfg.max_sequence_length);
    return RT_OK;
fail:
    glm_model_free(*out);
    *out = NULL;
    return st;
}

/* SAVE_DIR/hf: config.json, model.safetensors (FlagAI's names) and the tokenizer. */
typedef struct {
    glm_model *m;
    const char *tok_path;
    const rt_grid *grid;
} glm_export_job;

/* config.json, the weights as FlagAI writes them, and the tokenizer. */
static rt_status glm_write_hf(void *ctx, const char *dir) {
    const glm_export_job *x = ctx;
    rt_status st = RT_OK;
    char path[4300];
    const glm_config *c = glm_model_config(x->m);
    snprintf(path, sizeof path, "%s/%s", dir, ckpt_map_weights_file(&ckpt_map_glm));
    if (x->grid->dp_rank == 0) RT_TRY(glm_save_weights(x->m, path)); /* every stage's, through the first */
    if (x->grid->world->rank == 0) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        RT_TRY(glm_config_save(c, path));
        /* the tokenizer: a SentencePiece file, or an English folder's vocab and config */
        static const char *const tok_files[] = {"cog-pretrain.model", "vocab.txt", "tokenizer_config.json"};
        struct stat sb;
        bool is_dir = stat(x->tok_path, &sb) == 0 && S_ISDIR(sb.st_mode);
        for (size_t k = 0; k < sizeof tok_files / sizeof *tok_files; k++) {
            char from[4300];
            if (is_dir)
                snprintf(from, sizeof from, "%s/%s", x->tok_path, tok_files[k]);
            else if (k == 0)
                snprintf(from, sizeof from, "%s", x->tok_path);
            else
                continue;
            if (!train_app_exists(from)) continue;
            snprintf(path, sizeof path, "%s/%s", dir, tok_files[k]);
            RT_TRY(train_app_copy_file(from, path));
        }
    }
fail:
    return st;
}

/* The model as a FlagAI folder; with LoRA, merged. */
static rt_status glm_export(glm_model *m, const char *tok_path, rt_grid *grid, const char *dir,
                            const ckpt_peft_config *lora) {
    glm_export_job x = {m, tok_path, grid};
    return train_app_export_model(dir, grid, lora, &ckpt_map_glm, glm_model_params(m), glm_write_hf, &x);
}

/* ---- main ---- */

static int glm_max_len(const data_glm_rows *r) {
    int T = 1;
    for (int i = 0; i < r->n_rows; i++) T = r->rows[i].len > T ? r->rows[i].len : T;
    return T;
}

/* ---- --train-file: a user's classes through --cloze and --verbalizer ---- */

typedef struct {
    data_table tables[3]; /* train, validation (unused when held out), test (--test-file) */
    data_user_task task;
    data_pvp_template cloze;
    char **words; /* (task.n_labels) the verbalizer, in class order */
    data_pvp_filled *filled[3];
    int32_t *labels[3];
    size_t n[3];
    data_glm_rows test; /* the test rows (labels -100), built before the model so that it holds them */
} glm_user_data;

static void glm_user_free(glm_user_data *u) {
    data_glm_rows_free(&u->test);
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; u->filled[k] && i < u->n[k]; i++) data_pvp_filled_free(&u->filled[k][i]);
        free(u->filled[k]);
        free(u->labels[k]);
        data_table_free(&u->tables[k]);
    }
    for (int c = 0; u->words && c < u->task.n_labels; c++) free(u->words[c]);
    free(u->words);
    data_pvp_template_free(&u->cloze);
    data_user_task_free(&u->task);
    memset(u, 0, sizeof *u);
}

/* --verbalizer CLASS=WORD,...: a word for every class (default: its name). */
static rt_status glm_user_verbalizer(glm_user_data *u) {
    const data_user_task *t = &u->task;
    u->words = rt_xcalloc((size_t)t->n_labels, sizeof *u->words);
    for (const char *p = O.verbalizer; p && *p;) {
        const char *end = strchr(p, ','), *eq = strchr(p, '=');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (!eq || eq >= p + len || eq == p)
            return rt_errorf(RT_ERR_USAGE, "--verbalizer '%s': expected CLASS=WORD pairs, comma-separated",
                             O.verbalizer);
        int c = -1;
        for (int k = 0; k < t->n_labels; k++)
            if (strlen(t->label_names[k]) == (size_t)(eq - p) && strncmp(t->label_names[k], p, (size_t)(eq - p)) == 0)
                c = k;
        if (c < 0) return rt_errorf(RT_ERR_USAGE, "--verbalizer: '%.*s' is not a class", (int)(eq - p), p);
        if (u->words[c])
            return rt_errorf(RT_ERR_USAGE, "--verbalizer: the class '%s' is given twice", t->label_names[c]);
        const size_t wlen = len - (size_t)(eq + 1 - p);
        u->words[c] = rt_xmalloc(wlen + 1);
        memcpy(u->words[c], eq + 1, wlen);
        u->words[c][wlen] = '\0';
        p = end ? end + 1 : p + len;
    }
    for (int c = 0; c < t->n_labels; c++)
        if (!u->words[c]) u->words[c] = rt_xstrdup(t->label_names[c]);
    return RT_OK;
}

/* Examples [lo, hi) of ex through the pattern, as set k. */
static void glm_user_fill(glm_user_data *u, int k, const data_examples *ex, size_t lo, size_t hi) {
    u->n[k] = hi - lo;
    u->filled[k] = rt_xcalloc(u->n[k] + 1, sizeof *u->filled[k]);
    u->labels[k] = rt_xcalloc(u->n[k] + 1, sizeof *u->labels[k]);
    for (size_t i = lo; i < hi; i++) {
        const char *values[2] = {ex->text_a[i], ex->text_b ? ex->text_b[i] : NULL};
        data_pvp_template_fill(&u->cloze, values, &u->filled[k][i - lo]);
        u->labels[k][i - lo] = ex->labels[i];
    }
}

static rt_status glm_user_read(glm_user_data *u) {
    rt_status st = RT_OK;
    data_examples ex[2] = {{0}};
    const data_format fmt = (data_format)data_format_parse(O.data_format);
    RT_TRY(data_pvp_template_parse(O.cloze, &u->cloze));
    char columns[600];
    snprintf(columns, sizeof columns, "%s%s%s", u->cloze.columns[0], u->cloze.n_columns > 1 ? "," : "",
             u->cloze.n_columns > 1 ? u->cloze.columns[1] : "");
    RT_TRY(data_table_read(O.train_file, fmt, &u->tables[0]));
    if (O.validation_file) RT_TRY(data_table_read(O.validation_file, fmt, &u->tables[1]));
    data_user_opts uo = {.text_columns = columns,
                         .label_column = O.label_column,
                         .label_names = O.label_names,
                         .positive_label = O.positive_label};
    RT_TRY(data_user_task_resolve(&u->tables[0], &uo, &u->task));
    if (u->task.type == DATA_TASK_REGRESSION)
        RT_FAIL(RT_ERR_USAGE,
                "%s: the labels in '%s' are numbers with fractions (regression); glm-finetune scores "
                "classes at the [MASK] (name the classes with --label-names to treat them as classes)",
                O.train_file, u->task.label_col);
    if (u->task.type == DATA_TASK_MULTI_LABEL) /* one [MASK] picks one verbalizer word */
        RT_FAIL(RT_ERR_USAGE,
                "%s: the labels in '%s' are lists of classes (multi-label); glm-finetune's cloze picks "
                "one class a row (gpt2-classify and bert-classify train multi-label)",
                O.train_file, u->task.label_col);
    RT_TRY(glm_user_verbalizer(u));
    RT_TRY(data_user_examples(&u->task, &u->tables[0], true, &ex[0]));
    if (O.test_file) { /* labels not read */
        data_examples test = {0};
        st = data_table_read(O.test_file, fmt, &u->tables[2]);
        if (st == RT_OK) st = data_user_examples(&u->task, &u->tables[2], false, &test);
        if (st == RT_OK) glm_user_fill(u, 2, &test, 0, test.n);
        data_examples_free(&test);
        RT_TRY(st);
    }
    if (O.validation_file) {
        RT_TRY(data_user_examples(&u->task, &u->tables[1], true, &ex[1]));
        glm_user_fill(u, 0, &ex[0], 0, ex[0].n);
        glm_user_fill(u, 1, &ex[1], 0, ex[1].n);
    } else {
        size_t n_val = (size_t)((double)ex[0].n * O.val_split + 0.5);
        if (n_val == 0 || n_val >= ex[0].n)
            RT_FAIL(RT_ERR_USAGE, "%s has %zu rows: too few to hold out %.0f%% for validation (give --validation-file)",
                    O.train_file, ex[0].n, 100 * O.val_split);
        glm_user_fill(u, 0, &ex[0], 0, ex[0].n - n_val);
        glm_user_fill(u, 1, &ex[0], ex[0].n - n_val, ex[0].n);
    }
fail:
    data_examples_free(&ex[0]);
    data_examples_free(&ex[1]);
    return st;
}

/* --test-file: each row's class probabilities (a softmax over the verbalizer scores at the
 * blank), written beside the file's columns by the lead rank. */
static rt_status glm_user_predict(glm_user_data *u, glm_eval *e) {
    rt_status st = RT_OK;
    const data_glm_rows *R = &u->test;
    const int n_ex = R->n_examples, K = R->n_classes;
    int32_t *ex = rt_xmalloc((size_t)e->batch * sizeof *ex), *pred = rt_xcalloc((size_t)n_ex + 1, sizeof *pred);
    float *probs = rt_xcalloc((size_t)n_ex * K + 1, sizeof *probs);
    mdl_pass pass = {0};
    for (int b0 = 0; b0 < n_ex; b0 += e->batch) {
        const int n = n_ex - b0 < e->batch ? n_ex - b0 : e->batch;
        for (int i = 0; i < n; i++) ex[i] = b0 + i;
        double unused = 0;
        const glm_task t = glm_task_of(R, &e->buf, ex, n, e->pad_id, true);
        RT_TRY(glm_task_step(e->model, &t, &pass, 0.0f, &unused, probs + (size_t)b0 * K));
        for (int i = b0; i < b0 + n; i++) { /* scores to probabilities, in place */
            float *p = probs + (size_t)i * K;
            pred[i] = glm_argmax(p, K);
            double z = 0, mx = p[pred[i]];
            for (int k = 0; k < K; k++) z += exp((double)p[k] - mx);
            for (int k = 0; k < K; k++) p[k] = (float)(exp((double)p[k] - mx) / z);
        }
    }
    if (e->grid->world->rank == 0) {
        char written[4300];
        RT_TRY(glue_files_write_predictions(&u->task, &u->tables[2], O.t.save_dir, NULL, pred, probs, written,
                                            sizeof written));
        rt_log_info("wrote %d predictions to %s", n_ex, written);
    }
fail:
    free(ex);
    free(pred);
    free(probs);
    return st;
}

/* What the rows are made from, for the tokenized cache: SuperGLUE examples (task set) or
 * line-aligned texts. */
typedef struct {
    const tok_tokenizer *tok;
    const data_sg_task *task;
    const data_sg_examples *sg_train, *sg_val;
    const glm_user_data *user; /* --train-file */
    const data_lines *src, *tgt, *vs, *vt;
    size_t n_train, v_begin;
} glm_build_ctx;

/* data_cache_build_fn: the train and the validation rows, as 2 x DATA_GLM_ROWS_SETS sets. */
static rt_status glm_build_sets(void *ctx, data_tokenized *sets, int n_sets) {
    const glm_build_ctx *b = ctx;
    rt_status st = RT_OK;
    data_glm_rows r[2] = {{0}};
    RT_CHECK(n_sets == 2 * DATA_GLM_ROWS_SETS, "GLM sets: %d", n_sets);
    if (b->user) {
        for (int k = 0; k < 2; k++)
            RT_TRY(data_glm_rows_from_cloze(b->user->filled[k], b->user->labels[k], b->user->n[k],
                                            (const char *const *)b->user->words, b->user->task.n_labels, b->tok,
                                            (int)O.max_len, &r[k]));
    } else if (b->task) {
        RT_TRY(data_glm_rows_from_superglue(b->sg_train, (int)O.pattern, b->tok, (int)O.max_len, true, &r[0]));
        RT_TRY(data_glm_rows_from_superglue(b->sg_val, (int)O.pattern, b->tok, (int)O.max_len, false, &r[1]));
    } else {
        RT_TRY(data_glm_rows_from_lines(b->src, b->tgt, 0, b->n_train, b->tok, (int)O.max_len, (int)O.max_target_len,
                                        &r[0]));
        RT_TRY(data_glm_rows_from_lines(b->vs, b->vt, b->v_begin, b->vs->n, b->tok, (int)O.max_len,
                                        (int)O.max_target_len, &r[1]));
    }
    for (int k = 0; k < 2; k++) RT_TRY(data_glm_rows_to_sets(&r[k], sets + k * DATA_GLM_ROWS_SETS));
fail:
    data_glm_rows_free(&r[0]);
    data_glm_rows_free(&r[1]);
    return st;
}

/* The train and validation rows through the tokenized cache (key: the data's, plus the
 * tokenizer and the options every GLM input depends on). */
static rt_status glm_cached_rows(const glm_build_ctx *bc, data_cache_key *key, const char *tok_path, const char *what,
                                 data_glm_rows *train, data_glm_rows *val) {
    rt_status st = RT_OK;
    data_tokenized sets[2 * DATA_GLM_ROWS_SETS] = {{0}};
    data_cache_key_int(key, DATA_CACHE_TOKENS_REVISION);
    data_cache_key_int(key, O.max_len);
    data_cache_key_int(key, O.max_target_len);
    RT_TRY(data_cache_key_tokenizer(key, tok_path));
    RT_TRY(data_cache_load_or_build(train_app_cache_dir(&O.t), key, what, 2 * DATA_GLM_ROWS_SETS, DATA_GLM_ROWS_SETS,
                                    glm_build_sets, (void *)bc, sets));
    RT_TRY(data_glm_rows_from_sets(sets, train));
    RT_TRY(data_glm_rows_from_sets(sets + DATA_GLM_ROWS_SETS, val));
fail:
    for (int k = 0; k < 2 * DATA_GLM_ROWS_SETS; k++) data_tokenized_free(&sets[k]);
    return st;
}

/* Each example's length for --group-by-length: its longest row (choice tasks have several). */
static int32_t *glm_example_lengths(const data_glm_rows *r) {
    int32_t *len = rt_xcalloc((size_t)r->n_examples + 1, sizeof *len);
    for (int e = 0; e < r->n_examples; e++)
        for (int k = 0; k < r->rows_per_example; k++) {
            const int row = r->first_row[e] + k;
            if (row < r->n_rows && r->rows[row].len > len[e]) len[e] = r->rows[row].len;
        }
    return len;
}

/* --train-file and its options, against --task and the SuperGLUE and seq2seq ones. */
static rt_status glm_check_user_options(int n_pos) {
    const char *needs_train[] = {"validation-file", "test-file",   "cloze",
                                 "verbalizer",      "label-names", "positive-label"};
    if (!O.train_file) {
        const char *stray = train_app_first_given(&glm_spec, needs_train, sizeof needs_train / sizeof needs_train[0]);
        return stray ? rt_errorf(RT_ERR_USAGE, "--%s goes with --train-file (your own classes)", stray) : RT_OK;
    }
    const char *not_with[] = {"task", "data-dir", "pattern", "val-src", "val-tgt"};
    const char *given = train_app_first_given(&glm_spec, not_with, sizeof not_with / sizeof not_with[0]);
    if (given)
        return rt_errorf(RT_ERR_USAGE, "--%s is for the SuperGLUE and seq2seq tasks; with --train-file leave it out",
                         given);
    if (n_pos) return rt_errorf(RT_ERR_USAGE, "SRC TGT are for --task seq2seq, not --train-file");
    if (!O.cloze)
        return rt_errorf(RT_ERR_USAGE, "--train-file needs --cloze PATTERN, the question with {COLUMN} and one [MASK], "
                                       "e.g. --cloze \"{review} It was [MASK].\"");
    return RT_OK;
}

static rt_status glm_run_main(int argc, char **argv, rt_comm *world, int *signal_out) {
    rt_status st = RT_OK;
    const char *pos[2] = {NULL, NULL};
    int n_pos = 0;
    char tok_path[4096], device[32], hf_dir[4200], data_dir[4200];
    tok_tokenizer *tok = NULL;
    rt_backend *be = NULL;
    glm_model *model = NULL;
    data_sg_examples sg_train = {0}, sg_val = {0};
    data_lines src = {0}, tgt = {0}, vsrc = {0}, vtgt = {0};
    data_glm_rows train = {0}, val = {0};
    data_sampler *sampler = NULL;
    int32_t *example_len = NULL; /* read by the sampler while it lives */
    char *options_json = NULL;
    rt_grid grid = {0};
    train_app_comm_count comm_count = {0}; /* --comm-stats */
    glm_trainer tr = {0};
    glm_eval ev = {0};
    glm_user_data ud = {0};
    ckpt_peft_config lora = {0};
    bool lora_on = false;

    RT_TRY(rt_args_parse(&glm_spec, argc, argv, pos, &n_pos));
    RT_TRY(glm_check_user_options(n_pos));
    const bool user = O.train_file != NULL, seq2seq = !user && strcmp(O.task, "seq2seq") == 0;
    if (seq2seq && n_pos != 2)
        RT_FAIL(RT_ERR_USAGE, "--task seq2seq expects SRC TGT (two line-aligned files), got %d argument%s", n_pos,
                n_pos == 1 ? "" : "s");
    if (!seq2seq && !user && n_pos)
        RT_FAIL(RT_ERR_USAGE, "--task %s reads --data-dir; SRC TGT are for --task seq2seq", O.task);
    if (!O.val_src != !O.val_tgt) RT_FAIL(RT_ERR_USAGE, "give --val-src and --val-tgt together");
    const train_app_input inputs[] = {{pos[0], "SRC"},
                                      {pos[1], "TGT"},
                                      {O.val_src, "--val-src"},
                                      {O.val_tgt, "--val-tgt"},
                                      {O.train_file, "--train-file"},
                                      {O.validation_file, "--validation-file"},
                                      {O.test_file, "--test-file"}};
    RT_TRY(train_app_check_paths(inputs, sizeof inputs / sizeof inputs[0], rt_check_readable));
    const train_app_input outputs[] = {{O.save_hf, "--save-hf"}, {O.t.save_lora, "--save-lora"}};
    RT_TRY(train_app_check_paths(outputs, sizeof outputs / sizeof outputs[0], rt_check_creatable));
    RT_TRY(train_app_setup(&O.t, &glm_spec, GLM_PROG, world, &grid));
    /* PEFT's default for GLM (its chatglm entry); FlagAI's GLMModel is a plain module: no task type */
    const train_app_lora_family lora_family = {.default_targets = "query_key_value", .base_model = O.model};
    RT_TRY(train_app_lora_config(&O.t, &glm_spec, &lora_family, &lora, &lora_on));
    RT_TRY(glm_resolve_tokenizer(tok_path, sizeof tok_path));
    RT_TRY(tok_load(tok_path, &tok));
    RT_TRY(data_glm_specials_of(tok, &ev.sp));

    if (user) {
        RT_TRY(glm_user_read(&ud));
        glm_build_ctx bc = {.tok = tok, .user = &ud};
        data_cache_key key;
        data_cache_key_init(&key, "glm-user-cloze-rows");
        data_cache_key_str(&key, O.cloze);
        for (int c = 0; c < ud.task.n_labels; c++) data_cache_key_str(&key, ud.words[c]);
        data_user_task_key(&ud.task, &key);
        data_cache_key_int(&key, ud.tables[0].format);
        data_cache_key_int(&key, (int64_t)ud.n[0]);
        RT_TRY(data_cache_key_file(&key, O.train_file));
        data_cache_key_str(&key, O.validation_file);
        if (O.validation_file) RT_TRY(data_cache_key_file(&key, O.validation_file));
        RT_TRY(glm_cached_rows(&bc, &key, tok_path, O.train_file, &train, &val));
        if (O.test_file)
            RT_TRY(data_glm_rows_from_cloze(ud.filled[2], ud.labels[2], ud.n[2], (const char *const *)ud.words,
                                            ud.task.n_labels, tok, (int)O.max_len, &ud.test));
        ev.user = &ud.task;
        char desc[512];
        data_user_task_describe(&ud.task, desc, sizeof desc);
        rt_log_info("data: %s; train %d, validation %d examples%s through \"%s\"; %d rows truncated", desc,
                    train.n_examples, val.n_examples, O.validation_file ? "" : " (held out from the end)", O.cloze,
                    train.n_truncated + val.n_truncated);
    } else if (seq2seq) {
        RT_TRY(data_lines_read_pair(pos[0], pos[1], &src, &tgt));
        size_t n_train = src.n, v_begin = 0;
        const data_lines *vs = &src, *vt = &tgt;
        if (O.val_src) {
            RT_TRY(data_lines_read_pair(O.val_src, O.val_tgt, &vsrc, &vtgt));
            vs = &vsrc;
            vt = &vtgt;
        } else {
            size_t n_val = (size_t)((double)src.n * O.val_split + 0.5);
            if (n_val == 0 || n_val >= src.n)
                RT_FAIL(RT_ERR_USAGE, "%s has %zu lines: too few to hold out %.0f%% for validation (give --val-src)",
                        pos[0], src.n, 100 * O.val_split);
            n_train = src.n - n_val;
            v_begin = n_train;
        }
        glm_build_ctx bc = {
            .tok = tok, .src = &src, .tgt = &tgt, .n_train = n_train, .vs = vs, .vt = vt, .v_begin = v_begin};
        data_cache_key key;
        data_cache_key_init(&key, "glm-seq2seq-rows");
        data_cache_key_int(&key, (int64_t)n_train);
        data_cache_key_int(&key, (int64_t)v_begin);
        const char *key_files[4] = {pos[0], pos[1], O.val_src, O.val_tgt};
        for (int k = 0; k < 4; k++)
            if (key_files[k]) RT_TRY(data_cache_key_file(&key, key_files[k]));
        RT_TRY(glm_cached_rows(&bc, &key, tok_path, "seq2seq data", &train, &val));
        ev.refs = vt;
        ev.ref_begin = v_begin;
        rt_log_info("data: train %d pairs, validation %d pairs%s; %d rows truncated", train.n_examples, val.n_examples,
                    O.val_src ? "" : " held out from the end", train.n_truncated + val.n_truncated);
    } else {
        const data_sg_task *task = data_sg_task_find(O.task);
        RT_CHECK(task != NULL, "task %s", O.task);
        if (O.data_dir)
            snprintf(data_dir, sizeof data_dir, "%s", O.data_dir);
        else if (task->id == DATA_SG_COPA)
            snprintf(data_dir, sizeof data_dir, "%s", TZ_SOURCE_DIR "/assets/superglue-copa");
        else
            RT_FAIL(RT_ERR_USAGE, "--task %s needs --data-dir DIR with train.jsonl and val.jsonl (SuperGLUE's %s)",
                    O.task, task->zip);
        if (O.pattern >= data_pvp_n_patterns(task->id))
            RT_FAIL(RT_ERR_USAGE, "--pattern %lld: task %s has patterns 0 to %d", (long long)O.pattern, O.task,
                    data_pvp_n_patterns(task->id) - 1);
        RT_TRY(data_sg_load_split(task, data_dir, "train", &sg_train));
        RT_TRY(data_sg_load_split(task, data_dir, "val", &sg_val));
        glm_build_ctx bc = {.tok = tok, .task = task, .sg_train = &sg_train, .sg_val = &sg_val};
        data_cache_key key;
        data_cache_key_init(&key, "glm-superglue-rows");
        data_cache_key_str(&key, task->name);
        data_cache_key_int(&key, O.pattern);
        char split[4300];
        for (int k = 0; k < 2; k++) {
            snprintf(split, sizeof split, "%s/%s.jsonl", data_dir, k ? "val" : "train");
            RT_TRY(data_cache_key_file(&key, split));
        }
        RT_TRY(glm_cached_rows(&bc, &key, tok_path, task->name, &train, &val));
        if (train.n_examples == 0) RT_FAIL(RT_ERR_FORMAT, "%s: no training examples", sg_train.path);
        ev.sg = &sg_val;
        static const char *const how[] = {
            [DATA_GLM_CLOZE] = "verbalizer tokens at [MASK]",
            [DATA_GLM_CHOICES] = "answers scored by log-probability",
            [DATA_GLM_SPAN] = "span1 in the blank: trained on the true examples, true when every token is the argmax",
            [DATA_GLM_SEQ2SEQ] = "",
        };
        rt_log_info("data: %s train %d, val %d examples (pattern %lld, %s); %d rows truncated", task->name,
                    train.n_examples, val.n_examples, (long long)O.pattern, how[train.kind],
                    train.n_truncated + val.n_truncated);
    }

    RT_TRY(train_app_device(&O.t, &grid, device, sizeof device, &be));
    train_app_comm_count_begin(&O.t, &comm_count, &grid);
    const int eval_batch = (int)(O.eval_batch_size ? O.eval_batch_size : O.t.batch_size);
    int max_T = glm_max_len(&train) > glm_max_len(&val) ? glm_max_len(&train) : glm_max_len(&val);
    max_T = glm_max_len(&ud.test) > max_T ? glm_max_len(&ud.test) : max_T; /* --test-file's rows too */
    RT_TRY(data_pad_check_covers(&O.t.pad, max_T, "length-buckets", "the longest row"));
    max_T = data_pad_length(&O.t.pad, max_T);
    max_T = (max_T + 7) / 8 * 8;
    int per = train.rows_per_example;
    int max_B = (int)O.t.batch_size * per > eval_batch * per ? (int)O.t.batch_size * per : eval_batch * per;
    RT_TRY(glm_build_model(be, &grid, tok, lora_on ? &lora : NULL, max_B, max_T, &model));
    if (lora_on)
        RT_TRY(train_app_lora_ready(&O.t, &lora, &ckpt_map_glm, "GLM",
                                    "query_key_value, dense (attention's), dense_h_to_4h, dense_4h_to_h",
                                    glm_model_params(model), &grid));
    rt_log_info("tokenizer %s (%s, %d tokens); device %s", tok_path, tok_kind_name(tok), tok_vocab_size(tok), device);

    example_len = glm_example_lengths(&train);
    data_sampler_opts sopts = {.seed = (uint64_t)O.t.seed,
                               .shuffle = true,
                               .rank = grid.dp_rank,
                               .world = grid.dp_size,
                               .lengths = example_len,
                               .group_by = train_app_group_by(&O.t)};
    RT_TRY(data_sampler_init((size_t)train.n_examples, &sopts, &sampler));
    glm_data gd = {.rows = &train, .sampler = sampler, .batch_size = (int)O.t.batch_size};
    tr = (glm_trainer){.model = model,
                       .train = &train,
                       .pad_id = ev.sp.eos,
                       .bufs = rt_xcalloc((size_t)O.t.grad_accum, sizeof *tr.bufs),
                       .tasks = rt_xcalloc((size_t)O.t.grad_accum, sizeof *tr.tasks)};
    ev.model = model;
    ev.tok = tok;
    ev.val = &val;
    ev.pad_id = ev.sp.eos;
    ev.batch = eval_batch;
    ev.save_dir = O.t.save_dir;
    ev.grid = &grid;
    if (seq2seq && O.eval_generate && grid.pp_size > 1)
        rt_log_info("evaluation: generation needs the whole model on one rank; with --pp %d it reports the loss only "
                    "(generate from the exported model with --pp 1)",
                    grid.pp_size);
    else if (seq2seq && O.eval_generate) {
        int ctx_len = 1;
        for (int i = 0; i < val.n_rows; i++) ctx_len = val.rows[i].sep > ctx_len ? val.rows[i].sep : ctx_len;
        RT_TRY(glm_decoder_init(model, eval_batch, (int)O.num_beams, ctx_len, (int)O.max_target_len, &ev.decoder));
    }

    options_json = rt_args_to_json(&glm_spec);
    rt_train_opts to = train_app_loop_opts(&O.t, GLM_PROG, &grid, options_json);
    train_app_model adapter = {.m = {.model = &tr,
                                     .params = glm_model_params(model),
                                     .step = glm_train_step,
                                     .flops = glm_flops,
                                     .pipeline_step = grid.pp_size > 1 ? glm_pipeline_step : NULL}};
    rt_train_model tm = train_app_loop_model(&adapter);
    rt_train_data td = {.ctx = &gd,
                        .batches_per_epoch = (int64_t)data_sampler_batches_per_epoch(sampler, gd.batch_size),
                        .next = glm_data_next,
                        .get_state = glm_data_get_state,
                        .set_state = glm_data_set_state,
                        .batch_free = glm_batch_free};
    rt_train_eval te = {.ctx = &ev, .evaluate = glm_evaluate};
    rt_train_result res;
    RT_TRY(rt_train(&to, &tm, &td, &te, ckpt_train_io(), &res));
    train_app_comm_count_print(&O.t, &comm_count, &grid, glm_model_params(model), res.steps);
    *signal_out = res.signal;
    if (res.signal) goto fail;
    if (res.last_eval.n) {
        char line[512];
        int n = snprintf(line, sizeof line, "validation results (%s, %d examples, step %lld):",
                         user ? (O.validation_file ? O.validation_file : O.train_file) : O.task, val.n_examples,
                         (long long)res.steps);
        for (int i = 0; i < res.last_eval.n && n < (int)sizeof line; i++)
            n += snprintf(line + n, sizeof line - (size_t)n, " %s %.4f", res.last_eval.names[i],
                          res.last_eval.values[i]);
        rt_log_info("%s", line);
    }
    if (O.test_file) RT_TRY(glm_user_predict(&ud, &ev));
    if (lora_on) { /* the adapters, where --save-lora says or beside the checkpoints */
        char lora_dir[4200];
        snprintf(lora_dir, sizeof lora_dir, "%s/lora", O.t.save_dir);
        RT_TRY(train_app_save_lora(&O.t, &grid, &lora, &ckpt_map_glm, glm_model_params(model), lora_dir));
    }
    if (!lora_on || O.save_hf) {
        if (O.save_hf)
            snprintf(hf_dir, sizeof hf_dir, "%s", O.save_hf);
        else
            snprintf(hf_dir, sizeof hf_dir, "%s/hf", O.t.save_dir);
        RT_TRY(glm_export(model, tok_path, &grid, hf_dir, lora_on ? &lora : NULL));
    }
fail:
    free(options_json);
    for (int k = 0; tr.bufs && k < O.t.grad_accum; k++) data_glm_batch_free(&tr.bufs[k]);
    free(tr.bufs);
    free(tr.tasks);
    data_glm_batch_free(&ev.buf);
    glm_decoder_free(ev.decoder);
    data_sampler_free(sampler);
    free(example_len);
    glm_model_free(model);
    rt_backend_free(be);
    data_glm_rows_free(&train);
    data_glm_rows_free(&val);
    data_sg_examples_free(&sg_train);
    data_sg_examples_free(&sg_val);
    glm_user_free(&ud);
    data_lines_free(&src);
    data_lines_free(&tgt);
    data_lines_free(&vsrc);
    data_lines_free(&vtgt);
    tok_free(tok);
    train_app_comm_count_end(&comm_count, &grid);
    rt_grid_free(&grid);
    ckpt_peft_config_free(&lora);
    return st;
}

int main(int argc, char **argv) {
    train_app_defaults defaults = {
        .lr = "1e-4", .batch_size = "16", .epochs = "1", .weight_decay = "0.01", .warmup = "0.1", .lora = true};
    return train_app_program_main(argc, argv, &glm_spec, glm_options, glm_own_options, GLM_N_OWN, &O.t, &defaults,
                                  glm_run_main);
}
