/* gpt2-finetune: causal language-model fine-tuning of GPT-2 on plain text, as HF's run_clm.py
 * does with GPT2LMHeadModel: each file's lines (newlines kept, as HF's text loader keeps them)
 * are tokenized and concatenated, the files joined by the end-of-text token, and the stream cut
 * into rows of --block-size tokens (the remainder dropped, as run_clm's group_texts). Every
 * position predicts the next token through the tied head, whose vocab-parallel cross-entropy
 * never gathers the full logits. Evaluation reports the validation loss and perplexity;
 * --generate continues a prompt with the result (greedy or sampled, KV-cached). Tokenizing runs
 * over --threads with a progress bar on a terminal, a piece of the text at a time, and the
 * blocks stream into the tokenized cache, which training then reads through a read-only mapping:
 * memory stays flat however large the corpus. The training loop, options and parallel layout
 * are the ones every program shares (apps/common/train_app.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "apps/common/train_app.h"
#include "apps/common/train_lora.h"
#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_train.h"
#include "checkpoints/ckpt_weights.h"
#include "data/data_cache.h"
#include "data/data_collate.h"
#include "data/data_loader.h"
#include "data/data_seq2seq.h"
#include "data/data_table.h"
#include "models/gpt2/gpt2.h"
#include "runtime/base/rt_args.h"
#include "runtime/base/rt_fs.h"
#include "runtime/base/rt_log.h"
#include "runtime/base/rt_progress.h"
#include "tokenizers/tok.h"

#define LM_PROG "gpt2-finetune"
#define LM_MAX_FILES 64

typedef struct {
    const char *model, *arch, *tokenizer, *val, *save_hf, *generate;
    const char *train_file, *validation_file, *text_column, *data_format;
    int64_t block_size, max_new_tokens, top_k;
    double val_split, temperature, top_p;
    train_app_opts t;
} lm_opts;

static lm_opts O;

/* clang-format off */
static const rt_opt lm_own_options[] = {
    {"model", RT_OPT_STRING, &O.model, NULL, "DIR",
     "HF GPT-2 folder (config.json, model.safetensors or pytorch_model.bin, tokenizer files), e.g. gpt2 or a "
     "--save-hf export; default: a small GPT-2 from scratch", NULL, 0, 0},
    {"arch", RT_OPT_STRING, &O.arch, NULL, "FILE", "HF config.json to build that GPT-2 from scratch (no weights)", NULL,
     0, 0},
    {"tokenizer", RT_OPT_STRING, &O.tokenizer, NULL, "PATH",
     "tokenizer folder or file when --model has none (default: the shipped GPT-2 BPE)", NULL, 0, 0},
    {"val", RT_OPT_STRING, &O.val, NULL, "FILE", "validation text (default: the last --val-split of the blocks)", NULL,
     0, 0},
    {"val-split", RT_OPT_FLOAT, &O.val_split, "0.05", NULL,
     "without --val (--validation-file): the share of the last blocks held out for validation (at least one)", NULL,
     0.0001, 0.9999},
    {"train-file", RT_OPT_STRING, &O.train_file, NULL, "FILE",
     "your texts as records instead of TEXT files: CSV, TSV, JSON Lines or a JSON array, one text a record", NULL, 0,
     0},
    {"validation-file", RT_OPT_STRING, &O.validation_file, NULL, "FILE",
     "with --train-file: validation records (default: the last --val-split of the blocks)", NULL, 0, 0},
    {"text-column", RT_OPT_STRING, &O.text_column, NULL, "NAME",
     "with --train-file: the column of texts (default: text when there is one, else the first column)", NULL, 0, 0},
    TRAIN_APP_DATA_FORMAT_OPT(&O.data_format),
    {"block-size", RT_OPT_INT, &O.block_size, "0", NULL, "tokens per training row (0 = min(1024, n_positions))",
     NULL, 0, 1 << 20},
    {"save-hf", RT_OPT_STRING, &O.save_hf, NULL, "DIR",
     "where the trained model goes as an HF GPT2LMHeadModel folder (default: SAVE_DIR/hf)", NULL, 0, 0},
    {"generate", RT_OPT_STRING, &O.generate, NULL, "PROMPT",
     "after training (or with --epochs 0), continue PROMPT and print the text to stdout", NULL, 0, 0},
    {"max-new-tokens", RT_OPT_INT, &O.max_new_tokens, "50", NULL,
     "--generate: new tokens at most (the prompt and these must fit --block-size)", NULL, 1, 1 << 20},
    {"temperature", RT_OPT_FLOAT, &O.temperature, "0", NULL,
     "--generate: 0 = greedy (HF's default); > 0 samples from softmax(logits / temperature)", NULL, 0, 100},
    {"top-k", RT_OPT_INT, &O.top_k, "50", NULL, "--generate, sampling: keep the k most likely tokens (0 = all)",
     NULL, 0, 1 << 24},
    {"top-p", RT_OPT_FLOAT, &O.top_p, "1.0", NULL,
     "--generate, sampling: keep the most likely tokens up to this probability mass (1 = all)", NULL, 1e-9, 1},
};
/* clang-format on */
#define LM_N_OWN ((int)(sizeof lm_own_options / sizeof lm_own_options[0]))
static rt_opt lm_options[LM_N_OWN + TRAIN_APP_N_OPTS + TRAIN_APP_N_CHECKPOINT_OPTS + TRAIN_APP_N_LORA_OPTS];

static rt_args_spec lm_spec = {
    .prog = LM_PROG,
    .positional = "TEXT...",
    .min_positional = 0,
    .max_positional = LM_MAX_FILES,
    .summary = "Fine-tunes GPT-2 (GPT2LMHeadModel) as a causal language model on plain-text files, as HF's\n"
               "run_clm.py does: the texts joined by <|endoftext|> and cut into --block-size rows; reports the\n"
               "validation loss and perplexity. --train-file takes the texts from a column of CSV, TSV or\n"
               "JSON Lines records instead. Checkpoints and metrics.jsonl go to --save-dir, the trained\n"
               "model to SAVE_DIR/hf (with --lora-r, the adapters as a PEFT folder to SAVE_DIR/lora).",
    .epilog =
        "examples:\n"
        "  gpt2-finetune corpus.txt --model path/to/hf/gpt2 --block-size 512\n"
        "  gpt2-finetune a.txt b.txt --val val.txt --batch-size 8 --precision bf16\n"
        "  gpt2-finetune --train-file assets/examples/summaries-train.jsonl --text-column document --block-size 64\n"
        "  gpt2-finetune a.txt --model runs/gpt2-finetune/hf --epochs 0 --generate \"Once upon\" --temperature 0.8",
    .opts = lm_options,
};

/* ---- the model ---- */

/* The model for batches of max_B rows of `block` tokens (block 0: resolved from the config). */
static rt_status lm_build_model(const train_app_source *src, const tok_tokenizer *tok, const ckpt_peft_config *lora,
                                rt_backend *be, rt_comm *tp, rt_comm *pp, int max_B, int *block, gpt2_model **out) {
    rt_status st = RT_OK;
    gpt2_config cfg;
    if (src->config[0]) {
        RT_TRY(gpt2_config_load(src->config, &cfg));
    } else { /* small enough to train on the shipped samples in a minute on 2 cores */
        gpt2_config_default(&cfg);
        cfg.n_layer = 4;
        cfg.n_embd = 128;
        cfg.n_head = 4;
        cfg.n_positions = 256;
    }
    cfg.num_labels = 0; /* the language model: the tied head only */
    cfg.checkpoint_layers = train_app_checkpoint_layers(&O.t);
    cfg.pp_recompute = O.t.pp_recompute;
    cfg.lora = lora;
    RT_TRY(gpt2_config_validate(&cfg, tp->size));
    if (tok_vocab_size(tok) > cfg.vocab_size)
        RT_FAIL(RT_ERR_CONFIG, "the tokenizer has %d tokens but the model's vocab_size is %d", tok_vocab_size(tok),
                cfg.vocab_size);
    if (*block == 0) *block = cfg.n_positions < 1024 ? cfg.n_positions : 1024;
    if (*block > cfg.n_positions)
        RT_FAIL(RT_ERR_USAGE, "--block-size %d is longer than the model's n_positions %d", *block, cfg.n_positions);
    RT_TRY(gpt2_model_init_stage(&cfg, be, tp, pp, (int)O.t.grad_accum, max_B, *block, (uint64_t)O.t.seed, out));
    if (src->weights[0]) {
        ckpt_load_report rep;
        RT_TRY(ckpt_load_hf(src->weights, &ckpt_map_gpt2, gpt2_model_params(*out), cfg.vocab_size, cfg.n_head, tp->rank,
                            tp->size, NULL, &rep));
        char said[512];
        ckpt_load_report_describe(&rep, said, sizeof said);
        rt_log_info("weights: %s: %s", src->weights, said);
    } else {
        rt_log_info("weights: random init (HF's scheme) of %s", src->config[0] ? src->config : "a small GPT-2");
    }
    rt_log_info("model: GPT-2 LM, %d layers, %d wide, %d heads, vocab %d, %zu parameters%s; blocks of %d tokens",
                cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.vocab_size, gpt2_model_params(*out)->numel,
                train_app_params_scope(tp, pp), *block);
fail:
    return st;
}

/* ---- data ---- */

/* Whether this process draws progress bars (the lead rank). */
static bool lm_lead = true;

/* Text is read and tokenized in pieces of this many bytes, so memory does not grow with the
 * corpus: the blocks stream into the cache file as they fill. */
#define LM_PIECE_BYTES ((size_t)16 << 20)

/* Cuts a stream of tokens into blocks and writes each whole block to the cache writer. */
typedef struct {
    data_cache_writer *w;
    int block;
    int32_t *carry; /* (block) the tokens past the last whole block */
    size_t n_carry, blocks;
} lm_block_sink;

static rt_status lm_sink_push(lm_block_sink *s, const int32_t *ids, size_t n) {
    rt_status st = RT_OK;
    const size_t block = (size_t)s->block;
    if (s->n_carry) {
        const size_t take = n < block - s->n_carry ? n : block - s->n_carry;
        memcpy(s->carry + s->n_carry, ids, take * sizeof *ids);
        s->n_carry += take;
        ids += take;
        n -= take;
        if (s->n_carry < block) return RT_OK;
        RT_TRY(data_cache_write_ids(s->w, s->carry, block));
        s->blocks++;
        s->n_carry = 0;
    }
    const size_t whole = n / block;
    if (whole) RT_TRY(data_cache_write_ids(s->w, ids, whole * block));
    s->blocks += whole;
    memcpy(s->carry, ids + whole * block, (n - whole * block) * sizeof *ids);
    s->n_carry = n - whole * block;
fail:
    return st;
}

/* Tokenizes texts[0..n) in parallel and pushes their ids into the sink in order; on a text that
 * does not tokenize, its status with *bad its index (nothing is pushed). */
static rt_status lm_encode_push(const tok_tokenizer *tok, char *const *texts, size_t n, lm_block_sink *sink,
                                size_t *bad) {
    tok_ids *per = rt_xcalloc(n + 1, sizeof *per);
    rt_status *sts = rt_xcalloc(n + 1, sizeof *sts);
#pragma omp parallel for schedule(dynamic, 64)
    for (size_t i = 0; i < n; i++) sts[i] = tok_encode(tok, texts[i], strlen(texts[i]), &per[i]);
    rt_status st = RT_OK;
    for (size_t i = 0; i < n && st == RT_OK; i++)
        if ((st = sts[i]) != RT_OK) *bad = i;
    for (size_t i = 0; i < n && st == RT_OK; i++) st = lm_sink_push(sink, per[i].ids, per[i].n);
    for (size_t i = 0; i < n; i++) tok_ids_free(&per[i]);
    free(per);
    free(sts);
    return st;
}

/* One piece of whole lines of a streamed file, into the sink. */
typedef rt_status (*lm_piece_fn)(const char *path, const data_lines *lines, const tok_tokenizer *tok,
                                 lm_block_sink *sink, void *state);

/* Streams path a piece of whole lines (about LM_PIECE_BYTES) at a time through piece, with a
 * progress bar over the file's bytes: memory stays flat however large the file. */
static rt_status lm_each_piece(const char *path, const tok_tokenizer *tok, lm_block_sink *sink, lm_piece_fn piece,
                               void *state) {
    rt_status st = RT_OK;
    data_lines_reader reader;
    data_lines lines = {0};
    if ((st = data_lines_reader_open(path, &reader)) != RT_OK) return st;
    struct stat sb;
    rt_progress bar;
    rt_progress_begin(&bar, path, stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0, lm_lead);
    for (;;) {
        bool end = false;
        RT_TRY(data_lines_reader_next(&reader, LM_PIECE_BYTES, &lines, &end));
        if (end) break;
        RT_TRY(piece(path, &lines, tok, sink, state));
        size_t bytes = 0;
        for (size_t i = 0; i < lines.n; i++) bytes += strlen(lines.line[i]) + 1;
        rt_progress_add(&bar, bytes);
        data_lines_free(&lines);
    }
fail:
    rt_progress_end(&bar);
    data_lines_free(&lines);
    data_lines_reader_close(&reader);
    return st;
}

/* lm_piece_fn of a text file: each line with its newline (HF's text loader keeps them). */
static rt_status lm_text_piece(const char *path, const data_lines *lines, const tok_tokenizer *tok, lm_block_sink *sink,
                               void *state) {
    (void)state;
    char **texts = rt_xcalloc(lines->n + 1, sizeof *texts);
    for (size_t i = 0; i < lines->n; i++) {
        const size_t len = strlen(lines->line[i]);
        texts[i] = rt_xmalloc(len + 2);
        memcpy(texts[i], lines->line[i], len);
        memcpy(texts[i] + len, "\n", 2);
    }
    size_t bad = 0;
    rt_status st = lm_encode_push(tok, texts, lines->n, sink, &bad);
    if (st != RT_OK) st = rt_errorf(st, "%s:%zu: cannot tokenize the line", path, lines->first_line + bad);
    for (size_t i = 0; i < lines->n; i++) free(texts[i]);
    free(texts);
    return st;
}

/* The text column: --text-column, else "text" when the train file has it, else the train file's
 * first column; decided from the train file (streamed first), then looked up by name in the
 * validation file. */
static char lm_column[256];
static const char *lm_text_column(const data_table *first) {
    if (O.text_column) return O.text_column;
    if (!lm_column[0])
        snprintf(lm_column, sizeof lm_column, "%s",
                 data_table_col(first, "text") >= 0 || !first->n_cols ? "text" : first->col_names[0]);
    return lm_column;
}

/* A table's text column, each record's text tokenized as it is (run_clm adds no newline and no
 * separator), into the sink; *records counts them. */
static rt_status lm_table_texts(const data_table *t, const tok_tokenizer *tok, lm_block_sink *sink, size_t *records) {
    data_lines texts = {0};
    const char *column = lm_text_column(t);
    rt_status st = data_lines_from_column(t, column, "--text-column", &texts);
    size_t bad = 0;
    if (st == RT_OK && (st = lm_encode_push(tok, texts.line, texts.n, sink, &bad)) != RT_OK) {
        char where[400];
        data_table_where(t, bad, where, sizeof where);
        st = rt_errorf(st, "%s: column '%s': cannot tokenize the text", where, column);
    }
    *records += texts.n;
    data_lines_free(&texts);
    return st;
}

/* A CSV, TSV or JSON array file of records, read whole. */
static rt_status lm_stream_table(const char *path, data_format fmt, const tok_tokenizer *tok, lm_block_sink *sink) {
    data_table t = {0};
    size_t records = 0;
    rt_status st = data_table_read(path, fmt, &t);
    if (st == RT_OK) st = lm_table_texts(&t, tok, sink, &records);
    if (st == RT_OK) rt_log_info("%s: %zu records, the texts in column '%s'", path, records, lm_text_column(&t));
    data_table_free(&t);
    return st;
}

/* lm_piece_fn of a JSON Lines file: the piece's records are a table of their own (their line
 * numbers the file's); state counts the records. */
static rt_status lm_jsonl_piece(const char *path, const data_lines *lines, const tok_tokenizer *tok,
                                lm_block_sink *sink, void *state) {
    size_t len = 0;
    for (size_t i = 0; i < lines->n; i++) len += strlen(lines->line[i]) + 1;
    char *joined = rt_xmalloc(len + 1);
    len = 0;
    for (size_t i = 0; i < lines->n; i++) {
        const size_t n = strlen(lines->line[i]);
        memcpy(joined + len, lines->line[i], n);
        joined[len + n] = '\n';
        len += n + 1;
    }
    data_table t = {0};
    rt_status st = data_table_parse_jsonl_piece(path, joined, len, lines->first_line, &t); /* takes joined */
    if (st == RT_OK) st = lm_table_texts(&t, tok, sink, state);
    data_table_free(&t);
    return st;
}

/* A JSON Lines file streamed as a text file is, so that a corpus larger than memory tokenizes with
 * flat memory. */
static rt_status lm_stream_jsonl(const char *path, const tok_tokenizer *tok, lm_block_sink *sink) {
    size_t records = 0;
    rt_status st = lm_each_piece(path, tok, sink, lm_jsonl_piece, &records);
    if (st == RT_OK)
        rt_log_info("%s: %zu records, the texts in column '%s'", path, records,
                    O.text_column ? O.text_column : lm_column);
    return st;
}

/* A record file by its format: JSON Lines streams, the others are read whole. */
static rt_status lm_stream_records(const char *path, const tok_tokenizer *tok, lm_block_sink *sink) {
    data_format fmt;
    rt_status st = data_format_of(path, (data_format)data_format_parse(O.data_format), &fmt);
    if (st != RT_OK) return st;
    return fmt == DATA_FORMAT_JSONL ? lm_stream_jsonl(path, tok, sink) : lm_stream_table(path, fmt, tok, sink);
}

/* Ends the set of n blocks of `block` tokens just written. */
static rt_status lm_end_blocks(data_cache_writer *w, size_t n, int block) {
    data_tokenized rows = {.n = n, .max_len = block, .longest = n ? block : 0};
    rows.offsets = rt_xmalloc((n + 1) * sizeof *rows.offsets);
    rows.lengths = rt_xmalloc((n + 1) * sizeof *rows.lengths);
    rows.labels = rt_xmalloc((n + 1) * sizeof *rows.labels);
    for (size_t i = 0; i <= n; i++) rows.offsets[i] = i * (size_t)block;
    for (size_t i = 0; i < n; i++) rows.lengths[i] = block, rows.labels[i] = DATA_LABEL_NONE;
    rows.len_a = rows.lengths;
    rt_status st = data_cache_end_set(w, &rows);
    free(rows.offsets);
    free(rows.lengths);
    free(rows.labels);
    return st;
}

/* One set: the files' tokens joined by eos, cut into rows of block tokens (the remainder
 * dropped, as run_clm's group_texts does). */
static rt_status lm_stream_blocks(const char *const *files, int n_files, bool tables, const tok_tokenizer *tok,
                                  int32_t eos, int block, data_cache_writer *w) {
    rt_status st = RT_OK;
    lm_block_sink sink = {.w = w, .block = block, .carry = rt_xmalloc((size_t)block * sizeof(int32_t))};
    size_t tokens = 0;
    for (int f = 0; f < n_files; f++) {
        if (f > 0) RT_TRY(lm_sink_push(&sink, &eos, 1));
        RT_TRY(tables ? lm_stream_records(files[f], tok, &sink)
                      : lm_each_piece(files[f], tok, &sink, lm_text_piece, NULL));
    }
    tokens = sink.blocks * (size_t)block + sink.n_carry;
    if (sink.blocks == 0)
        RT_FAIL(RT_ERR_FORMAT, "%s%s: %zu tokens in all, fewer than one block of %d (lower --block-size)", files[0],
                n_files > 1 ? " and the other texts" : "", tokens, block);
    RT_TRY(lm_end_blocks(w, sink.blocks, block));
fail:
    free(sink.carry);
    return st;
}

typedef struct {
    const char *const *files;
    const char *val;
    bool tables; /* --train-file: the files are records (data_table), not plain text */
    int n_files, block;
    const tok_tokenizer *tok;
    int32_t eos;
} lm_build_ctx;

/* data_cache_stream_fn: the training blocks, and the validation blocks (none without --val). */
static rt_status lm_stream_sets(void *ctx, data_cache_writer *w, int n_sets) {
    const lm_build_ctx *b = ctx;
    RT_CHECK(n_sets == 2, "gpt2-finetune sets: %d", n_sets);
    rt_status st = lm_stream_blocks(b->files, b->n_files, b->tables, b->tok, b->eos, b->block, w);
    if (st == RT_OK)
        st = b->val ? lm_stream_blocks(&b->val, 1, b->tables, b->tok, b->eos, b->block, w)
                    : lm_end_blocks(w, 0, b->block);
    return st;
}

/* ---- training and evaluation ---- */

typedef struct {
    gpt2_model *model;
    int32_t *labels; /* (max_B, block) scratch: the ids, -100 on padding */
} lm_trainer;

/* The batch's labels are its ids (HF's labels = input_ids), -100 where the mask hides a token. */
static const int32_t *lm_labels(lm_trainer *t, const rt_batch *b) {
    for (size_t i = 0; i < (size_t)b->B * b->T; i++) t->labels[i] = b->attention_mask[i] ? b->input_ids[i] : -100;
    return t->labels;
}

static rt_status lm_pipeline_step(void *ctx, const rt_batch *b, int n, uint64_t seed, int64_t step, float grad_scale,
                                  double *loss_sum) {
    return gpt2_lm_pipe_step(((lm_trainer *)ctx)->model, b, n, seed, step, grad_scale, loss_sum);
}

static rt_status lm_train_step(void *ctx, const rt_batch *b, const mdl_pass *pass, float grad_scale, double *loss_sum) {
    lm_trainer *t = ctx;
    int n = 0;
    return gpt2_lm_step(t->model, b->input_ids, b->attention_mask, lm_labels(t, b), b->B, b->T, pass, grad_scale,
                        loss_sum, &n);
}

/* The loader's batches with n_targets = the tokens they predict (each row's real tokens but its
 * last), which the loop normalizes the loss by. */
typedef struct {
    rt_train_data inner;
} lm_data;

static rt_status lm_next(void *ctx, rt_batch *into, bool *end) {
    lm_data *d = ctx;
    rt_status st = d->inner.next(d->inner.ctx, into, end);
    if (st != RT_OK || *end) return st;
    into->n_targets = 0;
    for (int b = 0; b < into->B; b++) into->n_targets += into->lengths[b] > 1 ? into->lengths[b] - 1 : 0;
    return RT_OK;
}

static void lm_get_state(void *ctx, int64_t *epoch, int64_t *position) {
    lm_data *d = ctx;
    d->inner.get_state(d->inner.ctx, epoch, position);
}

static rt_status lm_set_state(void *ctx, int64_t epoch, int64_t position) {
    lm_data *d = ctx;
    return d->inner.set_state(d->inner.ctx, epoch, position);
}

static double lm_flops(void *ctx, const rt_batch *b) {
    return gpt2_lm_train_flops(((lm_trainer *)ctx)->model, b->B, b->T);
}

typedef struct {
    lm_trainer *tr;
    const data_tokenized *val;
    const rt_grid *grid;
    int batch_size;
    rt_batch batch;
    int32_t *idx;
} lm_eval;

/* The mean loss over every predicted token of the validation blocks, and its perplexity. */
static rt_status lm_evaluate(void *ctx, rt_metrics *out) {
    lm_eval *e = ctx;
    rt_status st = RT_OK;
    const size_t n = e->val->n, w = (size_t)e->grid->dp_size, r = (size_t)e->grid->dp_rank;
    const size_t lo = n * r / w, hi = n * (r + 1) / w;
    mdl_pass pass = {.training = false};
    double local = 0, tokens = 0;
    for (size_t start = lo; start < hi; start += (size_t)e->batch_size) {
        const int count = (int)(hi - start < (size_t)e->batch_size ? hi - start : (size_t)e->batch_size);
        for (int i = 0; i < count; i++) e->idx[i] = (int32_t)(start + (size_t)i);
        RT_TRY(data_collate_classification(e->val, e->idx, count, 0, &(data_pad){.multiple = 1}, &e->batch));
        double l = 0;
        int nt = 0;
        RT_TRY(gpt2_lm_step(e->tr->model, e->batch.input_ids, e->batch.attention_mask, lm_labels(e->tr, &e->batch),
                            count, e->batch.T, &pass, 0.0f, &l, &nt));
        local += l;
        tokens += nt;
    }
    double sums[2] = {local, tokens};
    float f[2] = {(float)sums[0], (float)sums[1]};
    if (w > 1) RT_TRY(e->grid->dp_host->ops->all_reduce(e->grid->dp_host->ctx, f, 2, RT_REDUCE_SUM));
    const double loss = f[1] > 0 ? (double)f[0] / (double)f[1] : 0.0;
    out->n = 0;
    out->names[out->n] = "loss";
    out->values[out->n++] = loss;
    out->names[out->n] = "perplexity";
    out->values[out->n++] = exp(loss);
fail:
    return st;
}

/* ---- --generate ---- */

/* Continues O.generate with the model and prints prompt and continuation (the lead rank). */
static rt_status lm_generate(gpt2_model *m, const tok_tokenizer *tok, int32_t eos, const rt_grid *grid) {
    rt_status st = RT_OK;
    tok_ids prompt = {0};
    int32_t *ids = NULL;
    char *text = NULL;
    RT_TRY(tok_encode(tok, O.generate, strlen(O.generate), &prompt));
    if (prompt.n == 0) RT_FAIL(RT_ERR_USAGE, "--generate: the prompt has no tokens");
    gpt2_sample_opts so = {.max_new_tokens = (int)O.max_new_tokens,
                           .temperature = (float)O.temperature,
                           .top_k = (int)O.top_k,
                           .top_p = (float)O.top_p,
                           .seed = (uint64_t)O.t.seed,
                           .eos_token_id = eos};
    ids = rt_xmalloc((prompt.n + (size_t)O.max_new_tokens) * sizeof *ids);
    memcpy(ids, prompt.ids, prompt.n * sizeof *ids);
    int n_new = 0;
    RT_TRY(gpt2_generate(m, prompt.ids, (int)prompt.n, &so, ids + prompt.n, &n_new, NULL));
    rt_log_info("generated %d tokens (%s)", n_new, O.temperature > 0 ? "sampled" : "greedy");
    if (grid->world->rank == 0) {
        RT_TRY(tok_decode(tok, ids, prompt.n + (size_t)n_new, &text));
        printf("%s\n", text);
        fflush(stdout);
    }
fail:
    tok_ids_free(&prompt);
    free(ids);
    free(text);
    return st;
}

/* Decoding has no pipeline path: under --pp the first rank builds the whole model from the
 * folder it has just exported (every stage's tensors) and generates alone. */
static rt_status lm_generate_whole(const char *hf_dir, const tok_tokenizer *tok, int32_t eos, rt_backend *be,
                                   const rt_grid *grid) {
    rt_status st = RT_OK;
    train_app_source src;
    gpt2_model *whole = NULL;
    int block = (int)O.block_size;
    rt_log_info("--generate with %d pipeline stages: the whole model from %s, on this rank", grid->pp_size, hf_dir);
    RT_TRY(train_app_resolve_source(hf_dir, NULL, NULL, TZ_SOURCE_DIR "/assets/gpt2-bpe", "GPT-2", &src));
    RT_TRY(lm_build_model(&src, tok, NULL, be, rt_comm_self(), rt_comm_self(), 1, &block, &whole));
    RT_TRY(lm_generate(whole, tok, eos, grid));
fail:
    gpt2_model_free(whole);
    return st;
}

/* ---- the HF export ---- */

typedef struct {
    gpt2_model *m;
    const char *tokenizer;
    const rt_grid *grid;
} lm_export_job;

static rt_status lm_write_hf(void *ctx, const char *dir) {
    const lm_export_job *x = ctx;
    rt_status st = x->grid->dp_rank == 0 ? gpt2_save_hf(x->m, dir) : RT_OK;
    if (st == RT_OK && x->grid->world->rank == 0) st = train_app_copy_tokenizer(x->tokenizer, dir);
    return st;
}

/* ---- main ---- */

/* TEXT files or --train-file records, and the options of each, not mixed. */
static rt_status lm_check_inputs(int n_pos) {
    if (O.train_file) {
        if (n_pos > 0) return rt_errorf(RT_ERR_USAGE, "give TEXT files or --train-file, not both");
        if (O.val)
            return rt_errorf(RT_ERR_USAGE, "--val goes with TEXT files; with --train-file use --validation-file");
        return RT_OK;
    }
    const char *needs_train[] = {"validation-file", "text-column"};
    const char *given = train_app_first_given(&lm_spec, needs_train, sizeof needs_train / sizeof needs_train[0]);
    if (given) return rt_errorf(RT_ERR_USAGE, "--%s goes with --train-file (your own records)", given);
    if (n_pos == 0) return rt_errorf(RT_ERR_USAGE, "expected TEXT files or --train-file FILE; see --help");
    return RT_OK;
}

static rt_status lm_run(int argc, char **argv, rt_comm *world, int *signal_out) {
    rt_status st = RT_OK;
    const char *pos[LM_MAX_FILES];
    int n_pos = 0;
    char device[32], hf_dir[4200];
    train_app_source src;
    tok_tokenizer *tok = NULL;
    rt_backend *be = NULL;
    gpt2_model *model = NULL;
    data_tokenized sets[2] = {{0}}, train = {0}, val = {0};
    data_loader *loader = NULL;
    lm_trainer tr = {0};
    lm_eval ev = {0};
    char *options_json = NULL;
    rt_grid grid = {0};
    train_app_comm_count comm_count = {0}; /* --comm-stats */
    ckpt_peft_config lora = {0};
    bool lora_on = false;

    RT_TRY(rt_args_parse(&lm_spec, argc, argv, pos, &n_pos));
    lm_lead = world->rank == 0;
    RT_TRY(lm_check_inputs(n_pos));
    for (int i = 0; i < n_pos; i++) RT_TRY(rt_check_readable(pos[i], "TEXT"));
    const train_app_input inputs[] = {
        {O.train_file, "--train-file"}, {O.validation_file, "--validation-file"}, {O.val, "--val"}};
    RT_TRY(train_app_check_paths(inputs, sizeof inputs / sizeof inputs[0], rt_check_readable));
    const train_app_input outputs[] = {{O.save_hf, "--save-hf"}, {O.t.save_lora, "--save-lora"}};
    RT_TRY(train_app_check_paths(outputs, sizeof outputs / sizeof outputs[0], rt_check_creatable));
    if (O.t.length_buckets) /* before the data loads */
        RT_FAIL(RT_ERR_USAGE, "--length-buckets: %s's rows are --block-size blocks, one shape already", LM_PROG);
    RT_TRY(train_app_setup(&O.t, &lm_spec, LM_PROG, world, &grid));
    const train_app_lora_family lora_family = {
        .default_targets = "c_attn", .task_type = "CAUSAL_LM", .base_model = O.model, .fan_in_fan_out = true};
    RT_TRY(train_app_lora_config(&O.t, &lm_spec, &lora_family, &lora, &lora_on));
    if (lora_on && O.generate && grid.pp_size > 1 && !O.save_hf)
        RT_FAIL(RT_ERR_USAGE, "--generate with --pp and LoRA generates from the merged model: give --save-hf DIR");
    RT_TRY(train_app_resolve_source(O.model, O.arch, O.tokenizer, TZ_SOURCE_DIR "/assets/gpt2-bpe", "GPT-2", &src));
    RT_TRY(tok_load(src.tokenizer, &tok));
    const int32_t eos = tok_eos_id(tok);
    if (eos < 0) RT_FAIL(RT_ERR_CONFIG, "%s: the tokenizer has no end-of-text token to join the texts", src.tokenizer);
    RT_TRY(train_app_device(&O.t, &grid, device, sizeof device, &be));
    train_app_comm_count_begin(&O.t, &comm_count, &grid);
    int block = (int)O.block_size;
    RT_TRY(
        lm_build_model(&src, tok, lora_on ? &lora : NULL, be, grid.tp, grid.pp, (int)O.t.batch_size, &block, &model));
    if (lora_on)
        RT_TRY(train_app_lora_ready(&O.t, &lora, &ckpt_map_gpt2, "GPT-2",
                                    "c_attn, c_proj (attention's and the MLP's), c_fc", gpt2_model_params(model),
                                    &grid));
    rt_log_info("tokenizer %s (%s, %d tokens); device %s", src.tokenizer, tok_kind_name(tok), tok_vocab_size(tok),
                device);

    /* the blocks, tokenized or from the cache */
    const char *val_file = O.train_file ? O.validation_file : O.val;
    if (O.train_file) {
        pos[0] = O.train_file;
        n_pos = 1;
    }
    lm_build_ctx bc = {.files = pos,
                       .val = val_file,
                       .tables = O.train_file != NULL,
                       .n_files = n_pos,
                       .block = block,
                       .tok = tok,
                       .eos = eos};
    data_cache_key key;
    data_cache_key_init(&key, "gpt2-lm-blocks");
    data_cache_key_int(&key, DATA_CACHE_TOKENS_REVISION);
    data_cache_key_int(&key, block);
    data_cache_key_int(&key, eos);
    RT_TRY(data_cache_key_tokenizer(&key, src.tokenizer));
    for (int k = 0; k < n_pos; k++) RT_TRY(data_cache_key_file(&key, pos[k]));
    data_cache_key_str(&key, val_file);
    if (val_file) RT_TRY(data_cache_key_file(&key, val_file));
    if (O.train_file) { /* records: the column and the format read */
        data_cache_key_str(&key, O.text_column);
        data_cache_key_str(&key, O.data_format);
    }
    RT_TRY(data_cache_load_or_stream(train_app_cache_dir(&O.t), &key, "text", 2, 1, lm_stream_sets, &bc, sets));
    if (val_file) {
        train = sets[0];
        val = sets[1];
        memset(sets, 0, sizeof sets);
    } else { /* hold out the last blocks: both sets are views of the one mapped cache entry */
        size_t n_val = (size_t)((double)sets[0].n * O.val_split + 0.5);
        if (n_val == 0) n_val = 1;
        if (n_val >= sets[0].n)
            RT_FAIL(RT_ERR_USAGE,
                    "%zu blocks of %d tokens: too few to hold out validation blocks (give %s, or "
                    "lower --block-size)",
                    sets[0].n, block, O.train_file ? "--validation-file" : "--val");
        const size_t n_train = sets[0].n - n_val;
        RT_TRY(data_tokenized_slice(&sets[0], 0, n_train, &train));
        RT_TRY(data_tokenized_slice(&sets[0], n_train, n_val, &val));
    }
    rt_log_info("data: %zu training blocks, %zu validation blocks of %d tokens%s", train.n, val.n, block,
                val_file ? "" : " (held out from the end)");

    data_sampler_opts sopts = {
        .seed = (uint64_t)O.t.seed, .shuffle = true, .rank = grid.dp_rank, .world = grid.dp_size};
    RT_TRY(data_loader_init(&train, &sopts, (int)O.t.batch_size, eos, &(data_pad){.multiple = 1}, &loader));
    tr.model = model;
    tr.labels = rt_xmalloc((size_t)O.t.batch_size * (size_t)block * sizeof(int32_t));
    ev = (lm_eval){.tr = &tr, .val = &val, .grid = &grid, .batch_size = (int)O.t.batch_size};
    ev.idx = rt_xcalloc((size_t)O.t.batch_size, sizeof *ev.idx);

    options_json = rt_args_to_json(&lm_spec);
    rt_train_opts to = train_app_loop_opts(&O.t, LM_PROG, &grid, options_json);
    train_app_model tm_model = {.m = {.model = &tr,
                                      .params = gpt2_model_params(model),
                                      .step = lm_train_step,
                                      .flops = lm_flops,
                                      .pipeline_step = grid.pp_size > 1 ? lm_pipeline_step : NULL}};
    rt_train_model tm = train_app_loop_model(&tm_model);
    lm_data ld = {.inner = data_loader_train_data(loader)};
    rt_train_data td = ld.inner;
    td.ctx = &ld;
    td.next = lm_next;
    td.get_state = lm_get_state;
    td.set_state = lm_set_state;
    rt_train_eval te = {.ctx = &ev, .evaluate = lm_evaluate};
    rt_train_result res;
    RT_TRY(rt_train(&to, &tm, &td, &te, ckpt_train_io(), &res));
    train_app_comm_count_print(&O.t, &comm_count, &grid, gpt2_model_params(model), res.steps);
    *signal_out = res.signal;
    if (res.signal) goto fail;
    if (res.last_eval.n == 2)
        rt_log_info("validation results (%zu blocks, step %lld): loss %.4f perplexity %.3f", val.n,
                    (long long)res.steps, res.last_eval.values[0], res.last_eval.values[1]);
    if (lora_on) { /* the adapters, where --save-lora says or beside the checkpoints */
        char lora_dir[4200];
        snprintf(lora_dir, sizeof lora_dir, "%s/lora", O.t.save_dir);
        RT_TRY(train_app_save_lora(&O.t, &grid, &lora, &ckpt_map_gpt2, gpt2_model_params(model), lora_dir));
    }
    if (!lora_on || O.save_hf) { /* the model; with LoRA, merged */
        if (O.save_hf)
            snprintf(hf_dir, sizeof hf_dir, "%s", O.save_hf);
        else
            snprintf(hf_dir, sizeof hf_dir, "%s/hf", O.t.save_dir);
        lm_export_job job = {model, src.tokenizer, &grid};
        RT_TRY(train_app_export_model(hf_dir, &grid, lora_on ? &lora : NULL, &ckpt_map_gpt2, gpt2_model_params(model),
                                      lm_write_hf, &job));
    }
    if (O.generate && grid.pp_size == 1) RT_TRY(lm_generate(model, tok, eos, &grid));
    if (O.generate && grid.pp_size > 1 && grid.world->rank == 0) RT_TRY(lm_generate_whole(hf_dir, tok, eos, be, &grid));
fail:
    free(options_json);
    free(ev.idx);
    free(tr.labels);
    data_batch_free(&ev.batch);
    data_loader_free(loader);
    gpt2_model_free(model);
    rt_backend_free(be);
    for (int k = 0; k < 2; k++) data_tokenized_free(&sets[k]);
    data_tokenized_free(&train);
    data_tokenized_free(&val);
    tok_free(tok);
    train_app_comm_count_end(&comm_count, &grid);
    rt_grid_free(&grid);
    ckpt_peft_config_free(&lora);
    return st;
}

int main(int argc, char **argv) {
    train_app_defaults defaults = {
        .lr = "5e-5", .batch_size = "8", .epochs = "1", .weight_decay = "0.0", .warmup = "0", .lora = true};
    return train_app_program_main(argc, argv, &lm_spec, lm_options, lm_own_options, LM_N_OWN, &O.t, &defaults, lm_run);
}
