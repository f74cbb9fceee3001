/* What every training program shares around the one training loop: the training options
 * (optimizer, schedule, batching, evaluation and checkpoint cadence, parallel layout,
 * device), their --help entries, and the set-up from them of the parallel grid, the device
 * and rt_train_opts. gpt2-classify, bert-classify (through glue_app) and t5-finetune list
 * their own options and append these, so each option has one definition and one meaning. */
#ifndef TRAIN_APP_H
#define TRAIN_APP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/data_pad.h"
#include "runtime/base/rt_args.h"
#include "runtime/base/rt_fs.h" /* the checks train_app_check_paths takes */
#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm_stats.h"
#include "runtime/comm/rt_grid.h"
#include "runtime/train/rt_trainer.h"
#include "models/layers/trainable.h"

typedef struct {
    const char *save_dir, *device, *schedule, *deepspeed_config, *resume_from, *precision, *cache_dir, *length_buckets;
    int64_t epochs, max_steps, batch_size, grad_accum, seed, eval_interval, log_interval, save_interval, keep, threads,
        tp, pp, micro_batches, zero, loss_scale_power, loss_scale_window, loss_scale_hysteresis;
    double lr, weight_decay, warmup, clip, adam_beta1, adam_beta2, adam_eps, peak_tflops, comm_timeout, min_loss_scale;
    bool resume, overwrite, pad8, offload_optimizer, offload_params, group_by_length, no_cache;
    bool pp_recompute, comm_stats;
    bool checkpoint_activations; /* train_app_add_checkpoint_options */
    int64_t checkpoint_num_layers;
    int64_t lora_r; /* apps/common/train_lora.h */
    double lora_alpha, lora_dropout;
    const char *lora_targets, *lora_from, *save_lora;
    data_pad pad; /* from --pad-to-8 and --length-buckets, set by train_app_setup: how batches are padded */
} train_app_opts;

/* The program's defaults where they differ between programs (as text, as rt_opt takes them). */
typedef struct {
    const char *lr, *batch_size, *epochs, *weight_decay, *warmup;
    bool lora; /* train_app_program_main adds the LoRA options (apps/common/train_lora.h) */
} train_app_defaults;

/* How many options train_app_add_options appends. */
#define TRAIN_APP_N_OPTS 44

/* Appends the shared options, writing into *o, to opts[spec->n_opts ..] (room for
 * TRAIN_APP_N_OPTS more is the caller's; opts is spec->opts) and makes --deepspeed-config the
 * spec's presets file. spec->n_opts grows by TRAIN_APP_N_OPTS. */
void train_app_add_options(train_app_opts *o, const train_app_defaults *d, rt_args_spec *spec, rt_opt *opts);

/* Activation checkpointing's two options (--checkpoint-activations, --checkpoint-num-layers),
 * for the programs whose models implement it; TRAIN_APP_N_CHECKPOINT_OPTS more entries. */
#define TRAIN_APP_N_CHECKPOINT_OPTS 2
void train_app_add_checkpoint_options(train_app_opts *o, rt_opt *opts, int *n);
/* The sampler's group_by (data_sampler.h) from --group-by-length: HF groups megabatches of its
 * batch size times the gradient accumulation; 0 when off. */
int train_app_group_by(const train_app_opts *o);
/* The tokenized cache's folder (data/data_cache.h): --cache-dir, else the default; NULL with
 * --no-cache (or no default). */
const char *train_app_cache_dir(const train_app_opts *o);
/* The models' checkpoint_layers from those options: 0 when off, else K. */
int train_app_checkpoint_layers(const train_app_opts *o);

/* After rt_args_parse: the default save dir (runs/PROG), option combinations that cannot
 * work, the pp x dp x tp grid over world (--micro-batches becomes --grad-accum), a DeepSpeed micro-batch turned into the global batch,
 * and a usable save dir. */
rt_status train_app_setup(train_app_opts *o, const rt_args_spec *spec, const char *prog, rt_comm *world, rt_grid *grid);
/* The device ("cuda" = this rank's local GPU) and its backend at the compute precision
 * (--precision auto resolved here: bf16 on a GPU with bf16 tensor cores, else fp32); on GPUs
 * with several ranks, NCCL for the grid's device buffers (with --comm-timeout). device gets the
 * resolved name. */
rt_status train_app_device(train_app_opts *o, rt_grid *grid, char *device, size_t device_size, rt_backend **be);
/* The loop's view of a model (models/layers/trainable.h): forward_backward builds the pass with the
 * loop's grads hook and loss sink, and gives an empty micro-batch (this rank's share of a short
 * last batch) a zero loss without calling the model. padded_tokens sums B x T over the batches
 * trained. */
typedef struct {
    mdl_trainable m;
    const rt_grads_hook *grads;
    double *loss_sink;
    const uint64_t *stream_step; /* the loop's (rt_train_model.set_stream_step): mdl_pass.stream_step */
    double padded_tokens;
} train_app_model;
rt_train_model train_app_loop_model(train_app_model *a);

/* --comm-stats: while on, the program's grid holds counting views of its comms (rt_comm_stats),
 * one table per group, so the model, the loop and evaluation are all counted. begin after
 * train_app_device; print after rt_train; end before the grid is freed (it puts the owned
 * comms back). A no-op without the option. */
typedef struct {
    bool on;
    rt_grid owned;
    rt_comm_stats dp, tp, pp;
} train_app_comm_count;
void train_app_comm_count_begin(const train_app_opts *o, train_app_comm_count *cc, rt_grid *grid);
/* On the first rank: the payload per optimizer step of each group's operations, and the dp
 * group's formulas (the gradient's all-reduce, or ZeRO's reduce-scatter and gathers) for the
 * slab p. The tp and pp formulas depend on the family: its program prints them after. */
void train_app_comm_count_print(const train_app_opts *o, const train_app_comm_count *cc, const rt_grid *grid,
                                const rt_params *p, int64_t steps);
void train_app_comm_count_end(train_app_comm_count *cc, rt_grid *grid);

/* The loop's options from these (the grid's comms; options_json stored in checkpoints). */
rt_train_opts train_app_loop_opts(const train_app_opts *o, const char *prog, const rt_grid *grid,
                                  const char *options_json);

/* A training program's main after its options are set up: MPI/launcher world, rank-aware logs,
 * run, and the exit code (128 + signal when a signal stopped training after a checkpoint,
 * else the status's code). */
typedef rt_status (*train_app_run_fn)(int argc, char **argv, rt_comm *world, int *signal_out);
int train_app_main(int argc, char **argv, const char *prog, train_app_run_fn run);
/* A training program's whole main: opts (room for n_own + TRAIN_APP_N_OPTS +
 * TRAIN_APP_N_CHECKPOINT_OPTS, + TRAIN_APP_N_LORA_OPTS with d->lora) gets its own options, the
 * shared ones with the program's defaults, activation checkpointing's and LoRA's; then
 * train_app_main with spec->prog. */
int train_app_program_main(int argc, char **argv, rt_args_spec *spec, rt_opt *opts, const rt_opt *own, int n_own,
                           train_app_opts *o, const train_app_defaults *d, train_app_run_fn run);
/* How long the world's collectives wait before --comm-timeout is read (and its default). */
#define TRAIN_APP_COMM_TIMEOUT_S 600.0

/* What a count of this rank's parameters covers, for the model's log line: "" for the whole
 * model, else " on this rank (a tensor-parallel shard of pipeline stage 1 of 2)" and the like. */
const char *train_app_params_scope(const rt_comm *tp, const rt_comm *pp);

/* Whether path names something that exists (a file or a folder). */
bool train_app_exists(const char *path);

/* A data file a run reads, and what names it ("--train-file", "SRC"); path NULL: not given. */
typedef struct {
    const char *path, *what;
} train_app_input;
/* check (rt_check_readable for the inputs, rt_check_creatable for what is written after training:
 * --save-hf, --predict-out) on every given path, stopping at the first failure: a program checks
 * its files right after its options, so that a misspelled name is one line, not an error after
 * the weights load or the training ends. */
rt_status train_app_check_paths(const train_app_input *paths, size_t n, rt_status (*check)(const char *, const char *));

/* Where a program's model and tokenizer come from. */
typedef struct {
    char config[4200];    /* the config.json to build from; "" = the program's own small default */
    char weights[4096];   /* the weights to load; "" = random init */
    char tokenizer[4096]; /* the tokenizer folder or file */
} train_app_source;
/* The first of names (options of spec) that the command line, a --config or a preset gave, or
 * NULL: for options that go only with another one. */
const char *train_app_first_given(const rt_args_spec *spec, const char *const *names, size_t n);
/* --data-format, as every program that reads a user's files (--train-file) declares it. */
#define TRAIN_APP_DATA_FORMAT_OPT(dest)                                                                            \
    {                                                                                                              \
        "data-format", RT_OPT_CHOICE, (dest), "auto", NULL,                                                        \
            "--train-file's (and the other files') format; auto: from each file's extension (.csv, .tsv, .jsonl, " \
            ".json)",                                                                                              \
            "auto|csv|tsv|jsonl|json", 0, 0                                                                        \
    }
/* --model DIR (an HF folder: its config.json, its weights in HF's order, and its tokenizer files
 * unless --tokenizer names one) or --arch FILE (a config; random weights), not both (RT_ERR_USAGE);
 * with neither, only the tokenizer. The tokenizer is --tokenizer, else the folder's, else
 * default_tokenizer. family names the model in messages ("GPT-2"). */
rt_status train_app_resolve_source(const char *model_dir, const char *arch, const char *tokenizer,
                                   const char *default_tokenizer, const char *family, train_app_source *out);
/* Writes one line per text (a newline or CR the model produced becomes a space, so line i is
 * output i) atomically: the file is complete or absent, never cut short by a full disk. */
rt_status train_app_write_lines(const char *path, char *const *texts, size_t n);
/* Copies a file (atomically: a reader never sees half of it), e.g. tokenizer files into an HF
 * export. */
rt_status train_app_copy_file(const char *from, const char *to);
/* The tokenizer files of a tokenizer folder into an HF model folder, under HF's names (GPT-2's
 * encoder.json and vocab.bpe as vocab.json and merges.txt; T5's spiece.model); a file already
 * there is kept. A tokenizer that is one file goes in under its kind's name: tokenizer.json as it
 * is, a WordPiece vocab (.txt) as vocab.txt, anything else (a SentencePiece model) as spiece.model. */
rt_status train_app_copy_tokenizer(const char *tokenizer_path, const char *dir);
/* An HF export written whole: write(ctx, folder) writes config, weights and tokenizer into a
 * folder built beside dir (DIR.partial-PID-K), which then takes dir's place in one step
 * (rt_atomic_dir_replace), so an export that fails (a full disk) leaves the previous one whole
 * and one that is killed leaves a partial folder the next export removes. Collective like the
 * model's save_hf: every rank calls it and write; world rank 0 writes the files (the others' folder
 * argument is not written to). */
typedef rt_status (*train_app_hf_write)(void *ctx, const char *folder);
rt_status train_app_export_hf(const char *dir, const rt_grid *grid, train_app_hf_write write, void *ctx);
/* The same for any folder: option names it in messages ("--save-lora"), kind in the log line
 * ("PEFT adapter folder"). */
rt_status train_app_export_dir(const char *dir, const char *option, const char *kind, const rt_grid *grid,
                               train_app_hf_write write, void *ctx);

#endif
