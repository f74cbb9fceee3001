/* t5-finetune: fine-tunes T5 (v1.0, v1.1, flan-t5) on line-aligned source and target files,
 * as HF's run_translation.py / run_summarization.py do with T5ForConditionalGeneration, and
 * translates or summarizes a file with the result (--predict). Each evaluation reports the
 * validation loss and, from real generation (greedy or beam, KV-cached), corpus BLEU as
 * sacrebleu computes it and ROUGE-1/2/L as rouge_score does. The training loop, options and
 * parallel layout are the ones every program shares (apps/common/train_app.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "apps/common/train_app.h"
#include "apps/common/train_lora.h"
#include "checkpoints/ckpt_train.h"
#include "data/data_cache.h"
#include "data/data_collate.h"
#include "data/data_loader.h"
#include "data/data_seq2seq.h"
#include "data/data_table_out.h"
#include "metrics/metric_bleu.h"
#include "metrics/metric_rouge.h"
#include "models/t5/t5.h"
#include "models/t5/t5_generate.h"
#include "runtime/base/rt_args.h"
#include "runtime/base/rt_atomic.h"
#include "runtime/comm/rt_launch.h"
#include "runtime/base/rt_log.h"
#include "tokenizers/tok.h"

#define T5_PROG "t5-finetune"

typedef struct {
    const char *model, *arch, *tokenizer, *val_src, *val_tgt, *source_prefix, *predict, *predict_out, *save_hf;
    const char *train_file, *validation_file, *test_file, *data_format, *source_column, *target_column;
    int64_t max_source_len, max_target_len, num_beams, max_new_tokens, eval_batch_size;
    double length_penalty, dropout, val_split;
    bool lowercase, eval_generate, early_stopping;
    train_app_opts t;
} t5_opts;

static t5_opts O;

/* clang-format off */
static const rt_opt t5_own_options[] = {
    {"model", RT_OPT_STRING, &O.model, NULL, "DIR",
     "HF T5 folder (config.json, model.safetensors, spiece.model), e.g. t5-small or a --save-hf export, or a "
     "tz-convert folder at any tp; default: a small T5 from scratch", NULL, 0, 0},
    {"arch", RT_OPT_STRING, &O.arch, NULL, "FILE", "HF config.json to build that T5 from scratch (no weights)", NULL, 0,
     0},
    {"tokenizer", RT_OPT_STRING, &O.tokenizer, NULL, "PATH",
     "spiece.model or a folder with one, when --model has none (default: the shipped T5 SentencePiece model)", NULL, 0,
     0},
    {"val-src", RT_OPT_STRING, &O.val_src, NULL, "FILE", "validation sources (default: the last 20% of SRC)", NULL, 0, 0},
    {"val-tgt", RT_OPT_STRING, &O.val_tgt, NULL, "FILE", "validation targets, line-aligned with --val-src", NULL, 0, 0},
    {"val-split", RT_OPT_FLOAT, &O.val_split, "0.2", NULL,
     "without --val-src (--validation-file): the share of the last pairs held out for validation", NULL, 0.0001,
     0.9999},
    {"train-file", RT_OPT_STRING, &O.train_file, NULL, "FILE",
     "your pairs as one file instead of SRC TGT: CSV, TSV, JSON Lines or a JSON array, a column each side", NULL, 0,
     0},
    {"validation-file", RT_OPT_STRING, &O.validation_file, NULL, "FILE",
     "with --train-file: the validation pairs (default: the last --val-split of the train file)", NULL, 0, 0},
    {"test-file", RT_OPT_STRING, &O.test_file, NULL, "FILE",
     "with --train-file: after training, generate for every row into SAVE_DIR/predictions.csv (.tsv, .jsonl as the "
     "file is), its columns then prediction", NULL, 0, 0},
    TRAIN_APP_DATA_FORMAT_OPT(&O.data_format),
    {"source-column", RT_OPT_STRING, &O.source_column, NULL, "NAME",
     "with --train-file: the column of sources (default: the first column)", NULL, 0, 0},
    {"target-column", RT_OPT_STRING, &O.target_column, NULL, "NAME",
     "with --train-file: the column of targets (default: the second column)", NULL, 0, 0},
    {"source-prefix", RT_OPT_STRING, &O.source_prefix, NULL, "TEXT",
     "prepended to every source, e.g. \"translate English to German: \" or \"summarize: \"", NULL, 0, 0},
    {"lowercase", RT_OPT_FLAG, &O.lowercase, "false", NULL, "lower-case sources, targets and references", NULL, 0, 0},
    {"max-source-len", RT_OPT_INT, &O.max_source_len, "128", NULL, "truncate sources to N tokens, </s> included", NULL, 2,
     1 << 16},
    {"max-target-len", RT_OPT_INT, &O.max_target_len, "128", NULL, "truncate targets to N tokens, </s> included", NULL, 2,
     1 << 16},
    {"eval-generate", RT_OPT_FLAG, &O.eval_generate, "true", NULL,
     "on by default: generate for the validation set at each evaluation and report BLEU and ROUGE "
     "(--eval-generate=false, and under --pp: loss only)",
     NULL, 0, 0},
    {"num-beams", RT_OPT_INT, &O.num_beams, "1", NULL, "beam width for generation (1 = greedy)", NULL, 1, 64},
    {"max-new-tokens", RT_OPT_INT, &O.max_new_tokens, "0", NULL,
     "generation length limit (0 = --max-target-len)", NULL, 0, 1 << 16},
    {"length-penalty", RT_OPT_FLOAT, &O.length_penalty, "1.0", NULL,
     "beam search: scores are divided by length^penalty (HF's length_penalty)", NULL, -10, 10},
    {"early-stopping", RT_OPT_FLAG, &O.early_stopping, "false", NULL,
     "beam search: stop a row once num_beams hypotheses are finished (HF's early_stopping=True)", NULL, 0, 0},
    {"eval-batch-size", RT_OPT_INT, &O.eval_batch_size, "0", NULL, "rows per generation batch (0 = --batch-size)",
     NULL, 0, 65536},
    {"dropout", RT_OPT_FLOAT, &O.dropout, "-1", NULL, "dropout rate everywhere (-1 = the config's dropout_rate)", NULL,
     -1, 0.99},
    {"predict", RT_OPT_STRING, &O.predict, NULL, "FILE",
     "generate for every line of FILE with --model and write one output line each (stdout, or --predict-out); "
     "no training", NULL, 0, 0},
    {"predict-out", RT_OPT_STRING, &O.predict_out, NULL, "FILE",
     "where --predict writes (default: stdout), or --test-file (default: SAVE_DIR/predictions.EXT)", NULL, 0, 0},
    {"save-hf", RT_OPT_STRING, &O.save_hf, NULL, "DIR",
     "where the trained model goes as an HF folder (default: SAVE_DIR/hf); --predict --model DIR reads it", NULL, 0,
     0},
};
/* clang-format on */
#define T5_N_OWN ((int)(sizeof t5_own_options / sizeof t5_own_options[0]))
static rt_opt t5_options[T5_N_OWN + TRAIN_APP_N_OPTS + TRAIN_APP_N_CHECKPOINT_OPTS + TRAIN_APP_N_LORA_OPTS];

static rt_args_spec t5_spec = {
    .prog = T5_PROG,
    .positional = "SRC TGT",
    .min_positional = 0,
    .max_positional = 2,
    .summary = "Fine-tunes T5 (T5ForConditionalGeneration: t5-small .. t5-11b, v1.1, flan-t5) on line-aligned\n"
               "source and target files and reports validation loss, BLEU (sacrebleu, 13a) and ROUGE-1/2/L\n"
               "(rouge_score) from generation. Without --val-src the last 20% of the lines are held out.\n"
               "--train-file takes the pairs from two columns of a CSV, TSV or JSON Lines file instead.\n"
               "Checkpoints, metrics.jsonl and val_predictions.txt go to --save-dir; the trained model to\n"
               "SAVE_DIR/hf (with --lora-r, the adapters as a PEFT folder to SAVE_DIR/lora). --predict FILE\n"
               "--model DIR translates or summarizes a file instead (with --lora-from DIR, through adapters).",
    .epilog = "examples:\n"
              "  t5-finetune train.src train.tgt --model path/to/hf/t5-small --source-prefix \"summarize: \"\n"
              "  t5-finetune assets/multi30k-en-de/val.en assets/multi30k-en-de/val.de   # small T5 from scratch\n"
              "  t5-finetune --train-file assets/examples/summaries-train.jsonl --source-column document \\\n"
              "      --target-column summary --source-prefix \"summarize: \" --test-file "
              "assets/examples/summaries-test.jsonl\n"
              "  t5-finetune --predict test.en --model runs/t5-finetune/hf --num-beams 4 > test.de\n"
              "  t5-finetune train.src train.tgt --model path/to/hf/t5-small --lora-r 8   # adapters on q and v",
    .opts = t5_options,
};

/* ---- the model ---- */

/* A small T5 v1.0 for runs from scratch: trains on the shipped Multi30k sample in minutes. */
static void t5_small_config(t5_config *c, int vocab) {
    t5_config_default(c);
    c->vocab_size = vocab;
    c->d_model = 128;
    c->d_kv = 32;
    c->d_ff = 512;
    c->num_heads = 4;
    c->num_layers = 2;
    c->num_decoder_layers = 2;
}

typedef struct {
    char tokenizer[4096];
    const char *what;
} t5_source;

static rt_status t5_build_model(rt_backend *be, const rt_grid *grid, const tok_tokenizer *tok,
                                const ckpt_peft_config *lora, int max_B, int max_src, int max_tgt, t5_model **out) {
    rt_comm *tp = grid->tp;
    const int micro = (int)O.t.grad_accum;
    rt_status st = RT_OK;
    char report[512] = "";
    t5_config cfg;
    if (O.model && O.arch) return rt_errorf(RT_ERR_USAGE, "give --model or --arch, not both");
    if (O.model) {
        char cfg_path[4200];
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", O.model);
        if (!train_app_exists(cfg_path))
            return rt_errorf(RT_ERR_IO,
                             "--model %s: no config.json (expected an HF T5 folder with config.json and "
                             "model.safetensors, or a --save-hf export)",
                             O.model);
        char weights[4096];
        RT_TRY(t5_config_from_hf(O.model, &cfg, weights, sizeof weights));
        cfg.checkpoint_layers = train_app_checkpoint_layers(&O.t);
        cfg.pp_recompute = O.t.pp_recompute;
        cfg.lora = lora;
        RT_TRY(t5_model_init_stage(&cfg, be, tp, grid->pp, micro, max_B, max_src, max_tgt, (uint64_t)O.t.seed, out));
        RT_TRY(t5_load_hf(*out, weights, report, sizeof report));
        rt_log_info("weights: %s: %s", O.model, report);
    } else {
        if (O.arch)
            RT_TRY(t5_config_load(O.arch, &cfg));
        else
            t5_small_config(&cfg, tok_vocab_size(tok));
        RT_TRY(t5_config_validate(&cfg, tp->size));
        cfg.checkpoint_layers = train_app_checkpoint_layers(&O.t);
        cfg.pp_recompute = O.t.pp_recompute;
        cfg.lora = lora;
        RT_TRY(t5_model_init_stage(&cfg, be, tp, grid->pp, micro, max_B, max_src, max_tgt, (uint64_t)O.t.seed, out));
        rt_log_info("weights: random init (HF's scheme) of %s", O.arch ? O.arch : "a small T5 (2+2 layers, 128 wide)");
    }
    const t5_config *c = t5_model_config(*out);
    if (tok_vocab_size(tok) > c->vocab_size)
        RT_FAIL(RT_ERR_CONFIG, "the tokenizer has %d tokens but the model's vocab_size is %d", tok_vocab_size(tok),
                c->vocab_size);
    if (O.dropout >= 0) RT_TRY(t5_set_dropout(*out, (float)O.dropout));
    rt_log_info("model: T5 %s, %d+%d layers, d_model %d, %d heads, d_ff %d, vocab %d, %zu parameters%s",
                c->gated ? "v1.1 (gated)" : "v1.0", c->num_layers, c->num_decoder_layers, c->d_model, c->num_heads,
                c->d_ff, c->vocab_size, t5_model_params(*out)->numel, train_app_params_scope(grid->tp, grid->pp));
fail:
    return st;
}

static rt_status t5_resolve_tokenizer(char *out, size_t size) {
    char p[4200];
    if (O.tokenizer) {
        snprintf(out, size, "%s", O.tokenizer);
        return RT_OK;
    }
    if (O.model) {
        snprintf(p, sizeof p, "%s/spiece.model", O.model);
        if (train_app_exists(p)) {
            snprintf(out, size, "%s", O.model);
            return RT_OK;
        }
    }
    snprintf(out, size, "%s", TZ_SOURCE_DIR "/assets/t5-spiece/spiece.model");
    return RT_OK;
}

/* ---- generation and scoring ---- */

static int t5_eval_rows(void) { return (int)(O.eval_batch_size ? O.eval_batch_size : O.t.batch_size); }
static int t5_new_tokens(void) { return (int)(O.max_new_tokens ? O.max_new_tokens : O.max_target_len); }

static rt_status t5_generator_for(t5_model *m, t5_generator **out) {
    return t5_generator_init(m, t5_eval_rows(), (int)O.max_source_len, (int)O.num_beams, t5_new_tokens(), out);
}

/* Generates for every row of src in batches; texts[i] gets the decoded output (special
 * tokens skipped, as HF's batch_decode(skip_special_tokens=True)). Every rank of a tp group
 * joins; each dp replica generates all rows (the outputs are the same everywhere). */
static rt_status t5_generate_all(t5_model *m, t5_generator *gen, const tok_tokenizer *tok, const data_tokenized *src,
                                 char **texts, size_t *n_generated) {
    rt_status st = RT_OK;
    const int bs = t5_eval_rows(), max_new = t5_new_tokens();
    rt_batch batch = {0};
    int32_t *idx = rt_xcalloc((size_t)bs, sizeof *idx);
    int32_t *ids = rt_xcalloc((size_t)bs * (size_t)max_new, sizeof *ids);
    int *lens = rt_xcalloc((size_t)bs, sizeof *lens);
    gen_options g;
    t5_gen_options_default(t5_model_config(m), &g);
    g.num_beams = (int)O.num_beams;
    g.max_new_tokens = max_new;
    g.length_penalty = (float)O.length_penalty;
    g.early_stopping = O.early_stopping ? GEN_EARLY_STOP_TRUE : GEN_EARLY_STOP_HEURISTIC;
    for (size_t start = 0; start < src->n; start += (size_t)bs) {
        int count = (int)(src->n - start < (size_t)bs ? src->n - start : (size_t)bs);
        for (int i = 0; i < count; i++) idx[i] = (int32_t)(start + (size_t)i);
        RT_TRY(data_collate_classification(src, idx, count, tok_pad_id(tok), &(data_pad){.multiple = 1}, &batch));
        RT_TRY(
            t5_generate(gen, batch.input_ids, batch.attention_mask, count, batch.T, &g, NULL, NULL, ids, lens, NULL));
        for (int i = 0; i < count; i++) {
            RT_TRY(tok_decode_skip_special(tok, ids + (size_t)i * (size_t)max_new, (size_t)lens[i],
                                           &texts[start + (size_t)i]));
            if (n_generated) *n_generated += (size_t)lens[i];
        }
    }
fail:
    data_batch_free(&batch);
    free(idx);
    free(ids);
    free(lens);
    return st;
}

/* ---- evaluation ---- */

typedef struct {
    t5_model *model;
    t5_generator *gen;
    const tok_tokenizer *tok;
    const data_tokenized *src, *tgt;
    const data_lines *ref_lines; /* the references, as read */
    size_t ref_begin;            /* first reference line of the set */
    const rt_grid *grid;
    const char *save_dir;
    rt_batch batch;
    int32_t *idx;
    int batch_size;
} t5_eval;

static rt_status t5_eval_loss(t5_eval *e, double *loss) {
    rt_status st = RT_OK;
    const size_t n = e->src->n, w = (size_t)e->grid->dp_size, r = (size_t)e->grid->dp_rank;
    const size_t lo = n * r / w, hi = n * (r + 1) / w;
    mdl_pass pass = {.training = false};
    float sums[2] = {0, 0}; /* loss sum, target tokens */
    double local = 0, targets = 0;
    for (size_t start = lo; start < hi; start += (size_t)e->batch_size) {
        int count = (int)((hi - start) < (size_t)e->batch_size ? hi - start : (size_t)e->batch_size);
        for (int i = 0; i < count; i++) e->idx[i] = (int32_t)(start + (size_t)i);
        RT_TRY(data_collate_seq2seq(e->src, e->tgt, e->idx, count, tok_pad_id(e->tok), &O.t.pad, &e->batch));
        t5_batch tb = {.B = count,
                       .S = e->batch.T,
                       .T = e->batch.T_dec,
                       .src_ids = e->batch.input_ids,
                       .src_mask = e->batch.attention_mask,
                       .labels = e->batch.dec_labels};
        double l = 0;
        int nt = 0;
        RT_TRY(t5_step(e->model, &tb, &pass, 0.0f, &l, &nt, NULL));
        local += l;
        targets += nt;
    }
    sums[0] = (float)local;
    sums[1] = (float)targets;
    if (w > 1) RT_TRY(e->grid->dp_host->ops->all_reduce(e->grid->dp_host->ctx, sums, 2, RT_REDUCE_SUM));
    *loss = sums[1] > 0 ? (double)sums[0] / (double)sums[1] : 0.0;
fail:
    return st;
}

/* Writes the predictions, one per line, atomically (the lead rank only). */
static rt_status t5_evaluate(void *ctx, rt_metrics *out) {
    t5_eval *e = ctx;
    rt_status st = RT_OK;
    char **hyps = NULL, **refs = NULL;
    size_t n = e->src->n;
    double loss;
    out->n = 0;
    RT_TRY(t5_eval_loss(e, &loss));
    out->names[out->n] = "loss";
    out->values[out->n++] = loss;
    if (!e->gen) return RT_OK;
    hyps = rt_xcalloc(n, sizeof *hyps);
    refs = rt_xcalloc(n, sizeof *refs);
    RT_TRY(t5_generate_all(e->model, e->gen, e->tok, e->src, hyps, NULL));
    for (size_t i = 0; i < n; i++) {
        const char *ref = e->ref_lines->line[e->ref_begin + i];
        if (O.lowercase)
            RT_TRY(tok_lowercase(ref, strlen(ref), &refs[i]));
        else
            refs[i] = rt_xstrdup(ref);
    }
    metric_bleu_result bleu;
    metric_rouge_scores rouge;
    RT_TRY(metric_bleu_corpus((const char *const *)hyps, (const char *const *)refs, n, &bleu));
    RT_TRY(metric_rouge_corpus((const char *const *)hyps, (const char *const *)refs, n, true, NULL, &rouge));
    out->names[out->n] = "bleu";
    out->values[out->n++] = bleu.score;
    out->names[out->n] = "rouge1";
    out->values[out->n++] = 100.0 * rouge.rouge1.fmeasure;
    out->names[out->n] = "rouge2";
    out->values[out->n++] = 100.0 * rouge.rouge2.fmeasure;
    out->names[out->n] = "rougeL";
    out->values[out->n++] = 100.0 * rouge.rougeL.fmeasure;
    if (e->grid->world->rank == 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/val_predictions.txt", e->save_dir);
        RT_TRY(train_app_write_lines(path, hyps, n));
    }
fail:
    for (size_t i = 0; hyps && i < n; i++) free(hyps[i]);
    for (size_t i = 0; refs && i < n; i++) free(refs[i]);
    free(hyps);
    free(refs);
    return st;
}

/* ---- training callbacks ---- */

static double t5_flops(void *model, const rt_batch *b) { return t5_train_flops(model, b->B, b->T, b->T_dec); }

static rt_status t5_train_step(void *model, const rt_batch *b, const mdl_pass *pass, float grad_scale,
                               double *loss_sum) {
    t5_batch tb = {.B = b->B,
                   .S = b->T,
                   .T = b->T_dec,
                   .src_ids = b->input_ids,
                   .src_mask = b->attention_mask,
                   .labels = b->dec_labels};
    int n_targets = 0;
    return t5_step(model, &tb, pass, grad_scale, loss_sum, &n_targets, NULL);
}

static rt_status t5_pipeline_step(void *model, const rt_batch *b, int n, uint64_t seed, int64_t step, float grad_scale,
                                  double *loss_sum) {
    t5_batch *tb = rt_xcalloc((size_t)n, sizeof *tb);
    for (int k = 0; k < n; k++)
        tb[k] = (t5_batch){.B = b[k].B,
                           .S = b[k].T,
                           .T = b[k].T_dec,
                           .src_ids = b[k].input_ids,
                           .src_mask = b[k].attention_mask,
                           .labels = b[k].dec_labels};
    rt_status st = t5_pipe_step(model, tb, n, seed, step, grad_scale, loss_sum);
    free(tb);
    return st;
}

/* ---- HF export ---- */

typedef struct {
    t5_model *m;
    const char *tokenizer_path;
    const rt_grid *grid;
} t5_export_job;

static rt_status t5_write_hf(void *ctx, const char *dir) {
    const t5_export_job *x = ctx;
    rt_status st = RT_OK;
    if (x->grid->dp_rank == 0) RT_TRY(t5_save_hf(x->m, dir));
    if (x->grid->world->rank != 0) return RT_OK;
    RT_TRY(train_app_copy_tokenizer(x->tokenizer_path, dir)); /* a lone SentencePiece file as spiece.model */
fail:
    return st;
}

/* The model as an HF folder; with LoRA, merged. */
static rt_status t5_export(t5_model *m, const char *tokenizer_path, const rt_grid *grid, const char *dir,
                           const ckpt_peft_config *lora) {
    t5_export_job x = {m, tokenizer_path, grid};
    return train_app_export_model(dir, grid, lora, &ckpt_map_t5, t5_model_params(m), t5_write_hf, &x);
}

/* ---- --predict ---- */

/* Generated text for every line of in (sources as training builds them), logged with its speed;
 * *texts has in->n owned strings. */
static rt_status t5_generate_lines(t5_model *m, const tok_tokenizer *tok, const data_lines *in, char ***texts) {
    rt_status st = RT_OK;
    data_tokenized src = {0}, unused = {0};
    t5_generator *gen = NULL;
    *texts = NULL;
    RT_TRY(t5_generator_for(m, &gen));
    data_seq2seq_opts so = {.source_prefix = O.source_prefix,
                            .lowercase = O.lowercase,
                            .max_source_len = (int)O.max_source_len,
                            .max_target_len = 2};
    RT_TRY(data_seq2seq_tokenize(in, in, 0, in->n, tok, &so, &src, &unused));
    *texts = rt_xcalloc(src.n ? src.n : 1, sizeof **texts);
    size_t n_generated = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    RT_TRY(t5_generate_all(m, gen, tok, &src, *texts, &n_generated));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    rt_log_info("generated %zu tokens for %zu inputs in %.2f s (%.1f tokens/s, %lld beam%s)", n_generated, src.n, secs,
                secs > 0 ? (double)n_generated / secs : 0.0, (long long)O.num_beams, O.num_beams == 1 ? "" : "s");
fail:
    t5_generator_free(gen);
    data_tokenized_free(&src);
    data_tokenized_free(&unused);
    return st;
}

static void t5_free_texts(char **texts, size_t n) {
    for (size_t i = 0; texts && i < n; i++) free(texts[i]);
    free(texts);
}

static rt_status t5_predict_file(t5_model *m, const tok_tokenizer *tok, const rt_grid *grid) {
    rt_status st = RT_OK;
    data_lines in = {0};
    char **texts = NULL;
    RT_TRY(data_lines_read(O.predict, &in));
    RT_TRY(t5_generate_lines(m, tok, &in, &texts));
    if (grid->world->rank == 0) {
        if (O.predict_out) {
            RT_TRY(train_app_write_lines(O.predict_out, texts, in.n));
            rt_log_info("wrote %zu outputs to %s", in.n, O.predict_out);
        } else {
            for (size_t i = 0; i < in.n; i++) {
                for (char *p = texts[i]; *p; p++)
                    if (*p == '\n' || *p == '\r') *p = ' ';
                printf("%s\n", texts[i]);
            }
            if (fflush(stdout) != 0) RT_FAIL(RT_ERR_IO, "stdout: write failed: %s", strerror(errno));
        }
    }
fail:
    t5_free_texts(texts, in.n);
    data_lines_free(&in);
    return st;
}

/* ---- a user's files (--train-file) ---- */

/* The source and target columns, decided once from the train file (as named, else its first
 * two) and then looked up by name in the validation and test files. */
static char t5_src_col[256], t5_tgt_col[256];

static rt_status t5_columns(const data_table *train) {
    const char *src = O.source_column ? O.source_column : train->n_cols > 0 ? train->col_names[0] : "";
    const char *tgt = O.target_column ? O.target_column : train->n_cols > 1 ? train->col_names[1] : "";
    if (!*src || !*tgt) {
        char cols[512];
        data_table_columns(train, cols, sizeof cols);
        return rt_errorf(RT_ERR_USAGE,
                         "%s: one column (%s); name the source and target with --source-column and "
                         "--target-column",
                         train->path, cols);
    }
    if (strcmp(src, tgt) == 0) return rt_errorf(RT_ERR_USAGE, "--source-column and --target-column are both '%s'", src);
    snprintf(t5_src_col, sizeof t5_src_col, "%s", src);
    snprintf(t5_tgt_col, sizeof t5_tgt_col, "%s", tgt);
    return RT_OK;
}

static data_format t5_data_format(void) { return (data_format)data_format_parse(O.data_format); }

/* A table file's source and target columns as lines (they point into *t); the train file
 * (train) decides which columns they are. */
static rt_status t5_read_pairs(const char *path, bool train, data_table *t, data_lines *src, data_lines *tgt) {
    rt_status st = data_table_read(path, t5_data_format(), t);
    if (st == RT_OK && train) st = t5_columns(t);
    if (st == RT_OK) st = data_lines_from_column(t, t5_src_col, "--source-column", src);
    if (st == RT_OK) st = data_lines_from_column(t, t5_tgt_col, "--target-column", tgt);
    return st;
}

typedef struct {
    char **texts;
} t5_test_cells;

static const char *t5_test_cell(void *ctx, size_t row, int k, char *scratch, data_cell_kind *kind) {
    (void)k, (void)scratch, (void)kind;
    return ((const t5_test_cells *)ctx)->texts[row];
}

/* --test-file: a generation for every row, written beside the input's columns. */
static rt_status t5_predict_test_file(t5_model *m, const tok_tokenizer *tok, const rt_grid *grid) {
    rt_status st = RT_OK;
    data_table t = {0};
    data_lines in = {0};
    char **texts = NULL;
    RT_TRY(data_table_read(O.test_file, t5_data_format(), &t));
    RT_TRY(data_lines_from_column(&t, t5_src_col, "--source-column", &in)); /* no target needed */
    RT_TRY(t5_generate_lines(m, tok, &in, &texts));
    if (grid->world->rank == 0) {
        char path[4200];
        if (O.predict_out)
            snprintf(path, sizeof path, "%s", O.predict_out);
        else
            snprintf(path, sizeof path, "%s/predictions.%s", O.t.save_dir, data_format_name(data_table_out_format(&t)));
        const char *names[1] = {"prediction"};
        t5_test_cells cells = {texts};
        RT_TRY(data_table_write_rows(&t, path, 1, names, t5_test_cell, &cells));
        rt_log_info("wrote %zu predictions to %s", in.n, path);
    }
fail:
    t5_free_texts(texts, in.n);
    data_lines_free(&in);
    data_table_free(&t);
    return st;
}

/* The options that go with SRC TGT and those that go with --train-file, not mixed. */
static rt_status t5_check_inputs(int n_pos) {
    if (O.predict && (n_pos > 0 || O.train_file))
        return rt_errorf(RT_ERR_USAGE,
                         "--predict FILE takes no SRC TGT or --train-file (it generates; it does not train)");
    if (O.train_file) {
        if (n_pos > 0) return rt_errorf(RT_ERR_USAGE, "give SRC TGT or --train-file, not both");
        if (O.val_src || O.val_tgt)
            return rt_errorf(RT_ERR_USAGE,
                             "--val-src and --val-tgt go with SRC TGT; with --train-file use --validation-file");
        return RT_OK;
    }
    const char *needs_train[] = {"validation-file", "test-file", "source-column", "target-column"};
    const char *given = train_app_first_given(&t5_spec, needs_train, sizeof needs_train / sizeof needs_train[0]);
    if (given) return rt_errorf(RT_ERR_USAGE, "--%s goes with --train-file (your own data file)", given);
    if (!O.predict && n_pos != 2)
        return rt_errorf(RT_ERR_USAGE,
                         "expected SRC TGT (two line-aligned files) or --train-file, got %d argument%s; see "
                         "--help",
                         n_pos, n_pos == 1 ? "" : "s");
    if (!O.val_src != !O.val_tgt) return rt_errorf(RT_ERR_USAGE, "give --val-src and --val-tgt together");
    return RT_OK;
}

/* ---- main ---- */

/* What the tokenized sets are made from, for the cache. */
typedef struct {
    const data_lines *src, *tgt;
    size_t n_train;
    const data_lines *vs, *vt;
    size_t v_begin;
    const tok_tokenizer *tok;
    const data_seq2seq_opts *so;
} t5_build_ctx;

/* data_cache_build_fn: train sources, train targets, validation sources, validation targets. */
static rt_status t5_build_sets(void *ctx, data_tokenized *sets, int n_sets) {
    const t5_build_ctx *b = ctx;
    RT_CHECK(n_sets == 4, "t5 sets: %d", n_sets);
    rt_status st = data_seq2seq_tokenize(b->src, b->tgt, 0, b->n_train, b->tok, b->so, &sets[0], &sets[1]);
    if (st == RT_OK) st = data_seq2seq_tokenize(b->vs, b->vt, b->v_begin, b->vs->n, b->tok, b->so, &sets[2], &sets[3]);
    return st;
}

static rt_status t5_run(int argc, char **argv, rt_comm *world, int *signal_out) {
    rt_status st = RT_OK;
    const char *pos[2] = {NULL, NULL};
    int n_pos = 0;
    char tok_path[4096], device[32], hf_dir[4200];
    tok_tokenizer *tok = NULL;
    rt_backend *be = NULL;
    t5_model *model = NULL;
    data_lines src_lines = {0}, tgt_lines = {0}, vsrc_lines = {0}, vtgt_lines = {0};
    data_table train_table = {0}, val_table = {0}; /* --train-file: the lines point into these */
    data_tokenized train_src = {0}, train_tgt = {0}, val_src = {0}, val_tgt = {0};
    data_loader *loader = NULL;
    t5_eval ev = {0};
    char *options_json = NULL;
    rt_grid grid = {0};
    train_app_comm_count comm_count = {0}; /* --comm-stats */
    ckpt_peft_config lora = {0};
    bool lora_on = false;

    RT_TRY(rt_args_parse(&t5_spec, argc, argv, pos, &n_pos));
    if (O.t.pp > 1 && (O.predict || O.test_file))
        RT_FAIL(RT_ERR_USAGE, "--%s generates with the whole model on one rank: run it without --pp",
                O.predict ? "predict" : "test-file");
    if (O.predict && !O.predict_out) rt_log_info_to_stderr(true); /* stdout carries the outputs */
    RT_TRY(t5_check_inputs(n_pos));
    const train_app_input inputs[] = {{pos[0], "SRC"},
                                      {pos[1], "TGT"},
                                      {O.val_src, "--val-src"},
                                      {O.val_tgt, "--val-tgt"},
                                      {O.train_file, "--train-file"},
                                      {O.validation_file, "--validation-file"},
                                      {O.test_file, "--test-file"},
                                      {O.predict, "--predict"}};
    RT_TRY(train_app_check_paths(inputs, sizeof inputs / sizeof inputs[0], rt_check_readable));
    const train_app_input outputs[] = {
        {O.save_hf, "--save-hf"}, {O.t.save_lora, "--save-lora"}, {O.predict_out, "--predict-out"}};
    RT_TRY(train_app_check_paths(outputs, sizeof outputs / sizeof outputs[0], rt_check_creatable));
    if (O.predict && !O.model) RT_FAIL(RT_ERR_USAGE, "--predict needs --model DIR (a trained model, e.g. SAVE_DIR/hf)");
    RT_TRY(train_app_setup(&O.t, &t5_spec, T5_PROG, world, &grid));
    const train_app_lora_family lora_family = {
        .default_targets = "q,v", .task_type = "SEQ_2_SEQ_LM", .base_model = O.model};
    RT_TRY(train_app_lora_config(&O.t, &t5_spec, &lora_family, &lora, &lora_on));
    RT_TRY(t5_resolve_tokenizer(tok_path, sizeof tok_path));
    RT_TRY(tok_load(tok_path, &tok));
    if (tok_pad_id(tok) < 0 || tok_eos_id(tok) < 0)
        RT_FAIL(RT_ERR_CONFIG, "%s: a T5 tokenizer needs pad and </s> tokens (this one is %s)", tok_path,
                tok_kind_name(tok));

    RT_TRY(train_app_device(&O.t, &grid, device, sizeof device, &be));
    train_app_comm_count_begin(&O.t, &comm_count, &grid);
    RT_TRY(data_pad_check_covers(&O.t.pad, (int)O.max_source_len, "length-buckets", "--max-source-len"));
    RT_TRY(data_pad_check_covers(&O.t.pad, (int)O.max_target_len, "length-buckets", "--max-target-len"));
    int max_src = data_pad_length(&O.t.pad, (int)O.max_source_len);
    int max_tgt = data_pad_length(&O.t.pad, (int)O.max_target_len);
    int gen_rows = t5_eval_rows() * (int)O.num_beams;
    int max_B = (int)O.t.batch_size > gen_rows ? (int)O.t.batch_size : gen_rows;
    RT_TRY(t5_build_model(be, &grid, tok, lora_on ? &lora : NULL, max_B, max_src, max_tgt, &model));
    if (lora_on)
        RT_TRY(train_app_lora_ready(&O.t, &lora, &ckpt_map_t5, "T5",
                                    "q, k, v, o (self- and cross-attention), wi (wi_0, wi_1), wo",
                                    t5_model_params(model), &grid));
    rt_log_info("tokenizer %s (%s, %d tokens); device %s", tok_path, tok_kind_name(tok), tok_vocab_size(tok), device);

    if (O.predict) {
        RT_TRY(t5_predict_file(model, tok, &grid));
        goto fail;
    }

    /* data: SRC/TGT (or --train-file), and the validation set given or held out from their end */
    const char *train_name = O.train_file ? O.train_file : pos[0],
               *val_name = O.train_file ? O.validation_file : O.val_src;
    if (O.train_file)
        RT_TRY(t5_read_pairs(O.train_file, true, &train_table, &src_lines, &tgt_lines));
    else
        RT_TRY(data_lines_read_pair(pos[0], pos[1], &src_lines, &tgt_lines));
    data_seq2seq_opts so = {.source_prefix = O.source_prefix,
                            .lowercase = O.lowercase,
                            .max_source_len = (int)O.max_source_len,
                            .max_target_len = (int)O.max_target_len};
    size_t n_train = src_lines.n;
    const data_lines *vs = &src_lines, *vt = &tgt_lines;
    size_t v_begin;
    if (val_name) {
        if (O.train_file)
            RT_TRY(t5_read_pairs(O.validation_file, false, &val_table, &vsrc_lines, &vtgt_lines));
        else
            RT_TRY(data_lines_read_pair(O.val_src, O.val_tgt, &vsrc_lines, &vtgt_lines));
        vs = &vsrc_lines;
        vt = &vtgt_lines;
        v_begin = 0;
    } else {
        size_t n_val = (size_t)((double)src_lines.n * O.val_split + 0.5);
        if (n_val == 0 || n_val >= src_lines.n)
            RT_FAIL(RT_ERR_USAGE, "%s has %zu pairs: too few to hold out %.0f%% for validation (give %s)", train_name,
                    src_lines.n, 100 * O.val_split, O.train_file ? "--validation-file" : "--val-src/--val-tgt");
        n_train = src_lines.n - n_val;
        v_begin = n_train;
    }
    /* tokenized, or read back from the cache */
    t5_build_ctx bc = {&src_lines, &tgt_lines, n_train, vs, vt, v_begin, tok, &so};
    data_cache_key key;
    data_cache_key_init(&key, "seq2seq-pairs");
    data_cache_key_int(&key, DATA_CACHE_TOKENS_REVISION);
    data_cache_key_int(&key, (int64_t)n_train);
    data_cache_key_int(&key, (int64_t)v_begin);
    data_cache_key_str(&key, so.source_prefix);
    data_cache_key_int(&key, so.lowercase);
    data_cache_key_int(&key, so.max_source_len);
    data_cache_key_int(&key, so.max_target_len);
    RT_TRY(data_cache_key_tokenizer(&key, tok_path));
    const char *key_files[4] = {pos[0], pos[1], O.val_src, O.val_tgt};
    if (O.train_file) { /* the files, their format and the columns read */
        data_cache_key_str(&key, t5_src_col);
        data_cache_key_str(&key, t5_tgt_col);
        data_cache_key_int(&key, train_table.format);
        key_files[0] = O.train_file;
        key_files[1] = O.validation_file;
        key_files[2] = key_files[3] = NULL;
    }
    for (int k = 0; k < 4; k++)
        if (key_files[k]) RT_TRY(data_cache_key_file(&key, key_files[k]));
    data_tokenized sets[4] = {{0}};
    st = data_cache_load_or_build(train_app_cache_dir(&O.t), &key, "seq2seq data", 4, 2, t5_build_sets, &bc, sets);
    train_src = sets[0], train_tgt = sets[1], val_src = sets[2], val_tgt = sets[3];
    if (st != RT_OK) goto fail;
    rt_log_info("data: train %zu pairs (%zu sources, %zu targets truncated), validation %zu pairs%s", train_src.n,
                train_src.n_truncated, train_tgt.n_truncated, val_src.n,
                val_name       ? ""
                : O.train_file ? " held out from the end of --train-file"
                               : " held out from the end of SRC/TGT");

    /* grouped by the source's length, as HF's Seq2SeqTrainer groups by input_ids */
    data_sampler_opts sopts = {.seed = (uint64_t)O.t.seed,
                               .shuffle = true,
                               .drop_last = false,
                               .rank = grid.dp_rank,
                               .world = grid.dp_size,
                               .lengths = train_src.lengths,
                               .group_by = train_app_group_by(&O.t)};
    RT_TRY(data_loader_init_seq2seq(&train_src, &train_tgt, &sopts, (int)O.t.batch_size, tok_pad_id(tok), &O.t.pad,
                                    &loader));
    ev = (t5_eval){.model = model,
                   .tok = tok,
                   .src = &val_src,
                   .tgt = &val_tgt,
                   .ref_lines = vt,
                   .ref_begin = v_begin,
                   .grid = &grid,
                   .save_dir = O.t.save_dir,
                   .batch_size = (int)O.t.batch_size};
    ev.idx = rt_xcalloc((size_t)O.t.batch_size, sizeof *ev.idx);
    if (O.eval_generate && grid.pp_size > 1)
        rt_log_info("evaluation: generation needs the whole model on one rank; with --pp %d it reports the loss only "
                    "(generate from the exported model with --predict)",
                    grid.pp_size);
    else if (O.eval_generate)
        RT_TRY(t5_generator_for(model, &ev.gen));

    options_json = rt_args_to_json(&t5_spec);
    rt_train_opts to = train_app_loop_opts(&O.t, T5_PROG, &grid, options_json);
    train_app_model tr = {.m = {.model = model,
                                .params = t5_model_params(model),
                                .step = t5_train_step,
                                .flops = t5_flops,
                                .pipeline_step = grid.pp_size > 1 ? t5_pipeline_step : NULL}};
    rt_train_model tm = train_app_loop_model(&tr);
    rt_train_data td = data_loader_train_data(loader);
    rt_train_eval te = {.ctx = &ev, .evaluate = t5_evaluate};
    rt_train_result res;
    RT_TRY(rt_train(&to, &tm, &td, &te, ckpt_train_io(), &res));
    train_app_comm_count_print(&O.t, &comm_count, &grid, t5_model_params(model), res.steps);
    *signal_out = res.signal;
    if (res.signal) goto fail;
    if (res.last_eval.n) {
        char line[512];
        int n =
            snprintf(line, sizeof line, "validation results (%zu pairs, step %lld):", val_src.n, (long long)res.steps);
        for (int i = 0; i < res.last_eval.n && n < (int)sizeof line; i++)
            n += snprintf(line + n, sizeof line - (size_t)n, " %s %.4f", res.last_eval.names[i],
                          res.last_eval.values[i]);
        rt_log_info("%s", line);
    }
    if (O.test_file) RT_TRY(t5_predict_test_file(model, tok, &grid));
    if (lora_on) { /* the adapters, where --save-lora says or beside the checkpoints */
        char lora_dir[4200];
        snprintf(lora_dir, sizeof lora_dir, "%s/lora", O.t.save_dir);
        RT_TRY(train_app_save_lora(&O.t, &grid, &lora, &ckpt_map_t5, t5_model_params(model), lora_dir));
    }
    if (!lora_on || O.save_hf) {
        if (O.save_hf)
            snprintf(hf_dir, sizeof hf_dir, "%s", O.save_hf);
        else
            snprintf(hf_dir, sizeof hf_dir, "%s/hf", O.t.save_dir);
        RT_TRY(t5_export(model, tok_path, &grid, hf_dir, lora_on ? &lora : NULL));
    }
fail:
    free(options_json);
    free(ev.idx);
    t5_generator_free(ev.gen);
    data_batch_free(&ev.batch);
    data_loader_free(loader);
    t5_model_free(model);
    rt_backend_free(be);
    data_tokenized_free(&train_src);
    data_tokenized_free(&train_tgt);
    data_tokenized_free(&val_src);
    data_tokenized_free(&val_tgt);
    data_lines_free(&src_lines);
    data_lines_free(&tgt_lines);
    data_lines_free(&vsrc_lines);
    data_lines_free(&vtgt_lines);
    data_table_free(&train_table);
    data_table_free(&val_table);
    tok_free(tok);
    train_app_comm_count_end(&comm_count, &grid);
    rt_grid_free(&grid);
    ckpt_peft_config_free(&lora);
    return st;
}

int main(int argc, char **argv) {
    train_app_defaults defaults = {
        .lr = "5e-4", .batch_size = "16", .epochs = "1", .weight_decay = "0.0", .warmup = "0", .lora = true};
    return train_app_program_main(argc, argv, &t5_spec, t5_options, t5_own_options, T5_N_OWN, &O.t, &defaults, t5_run);
}
