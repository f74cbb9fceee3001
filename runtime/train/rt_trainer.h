/* The one training loop every program shares (FlagAI's forward_step idea, in C). A program
 * plugs in a model (one micro-batch forward+backward), a data iterator, an evaluator and the
 * checkpoint I/O; the loop owns accumulation, clipping, AdamW, the LR schedule, logging,
 * metrics.jsonl, periodic evaluation and checkpoints, signals, and bit-exact resume. It never
 * learns which model it runs. */
#ifndef RT_TRAINER_H
#define RT_TRAINER_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/train/rt_batch.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_loss_scale.h"
#include "runtime/train/rt_params.h"

typedef struct {
    void *ctx;
    rt_params *params;
    /* Forward and backward of one micro-batch: accumulates gradients of grad_scale * (summed
     * loss) and writes the summed loss. Dropout draws from (seed, step, micro). */
    rt_status (*forward_backward)(void *ctx, const rt_batch *b, uint64_t seed, int64_t step, int micro,
                                  float grad_scale, double *loss_sum);
    /* Optional: the hook the next forward_backward calls give their backward (mdl_pass.grads),
     * or NULL for none. With it, the data-parallel all-reduce of the finished gradient buckets
     * starts while the backward goes on (on NCCL and MPI; see rt_train_opts.dp_bucket). */
    void (*set_grads_hook)(void *ctx, const rt_grads_hook *hook);
    /* Optional: where the next forward_backward calls' heads add their summed loss on the device
     * (backend memory; they then report 0), or NULL: they report it. The loop sets it where the
     * optimizer step runs on the backend (rt_step_state), so the losses are read back once a
     * step, with the step's record, not once a micro-batch. */
    void (*set_loss_sink)(void *ctx, double *sink);
    /* Optional: where the next forward_backward calls' dropout streams find the step's part
     * (backend memory, mdl_pass.stream_step), or NULL: in the streams. The loop sets it with the
     * step's record, so a replayed step graph (rt_step_graphs.h) draws that step's masks. */
    void (*set_stream_step)(void *ctx, const uint64_t *stream_step);
    /* Optional: model FLOPs of training on one micro-batch (models/layers/flops.h), for the step
     * line's TFLOP/s and MFU: the whole model's, on every tp rank and pipeline stage alike. */
    double (*flops)(void *ctx, const rt_batch *b);
    /* Optional: what the model's host code decides from a batch's attention mask, as a small
     * number equal for two batches of one shape exactly when it decides the same (the
     * step-graph key, rt_step_graphs.h). NULL: the key takes the mask's every bit. */
    int (*padding_kind)(void *ctx, const rt_batch *b);
    /* Pipeline parallelism (rt_train_opts.pp): the forward and backward of a step's non-empty
     * micro-batches b[0..n) through this rank's stage in one call, in place of forward_backward;
     * the summed loss on the last stage, 0 elsewhere (the loop sums it over the stages). */
    rt_status (*pipeline_step)(void *ctx, const rt_batch *b, int n, uint64_t seed, int64_t step, float grad_scale,
                               double *loss_sum);
} rt_train_model;

typedef struct {
    void *ctx;
    int64_t batches_per_epoch;
    /* Collates the next micro-batch of the current epoch into *into (buffers reused); sets
     * *end at the epoch's end instead (the next call starts the next epoch). */
    rt_status (*next)(void *ctx, rt_batch *into, bool *end);
    /* Position for checkpoints: epoch and examples consumed in it. */
    void (*get_state)(void *ctx, int64_t *epoch, int64_t *position);
    rt_status (*set_state)(void *ctx, int64_t epoch, int64_t position);
    void (*batch_free)(rt_batch *b);
} rt_train_data;

#define RT_MAX_METRICS 8
typedef struct {
    int n;
    const char *names[RT_MAX_METRICS]; /* static strings, e.g. "loss", "accuracy", "f1" */
    double values[RT_MAX_METRICS];
} rt_metrics;

typedef struct {
    void *ctx;
    rt_status (*evaluate)(void *ctx, rt_metrics *out); /* NULL: no evaluation */
} rt_train_eval;

/* Checkpoint I/O (checkpoints/ckpt_train.c implements it; kept behind pointers so the loop
 * depends on nothing above runtime/). meta_json carries step, epoch, data position, options.
 * Both are collective over tp and pp: files hold every stage's full tensors, so save gathers
 * the shards and the stages (the first stage's tp rank 0 writes) and load keeps this rank's
 * shard of this stage's tensors; a checkpoint resumes at any tp and pp. */
typedef struct {
    rt_status (*save)(const char *path, const rt_params *p, rt_comm *tp, rt_comm *pp, const char *meta_json);
    rt_status (*load)(const char *path, rt_params *p, rt_comm *tp, rt_comm *pp, char **meta_json); /* meta: malloc'd */
    /* The checkpoints a resume may start from, newest first (malloc'd paths in a malloc'd
     * array; none is not an error); a path to a file lists just that file. */
    rt_status (*resume_list)(const char *dir_or_file, char ***paths, size_t *n);
    rt_status (*prune)(const char *dir, size_t keep);
    rt_status (*step_path)(const char *dir, long long step, char *out, size_t size);
} rt_train_io;

typedef struct {
    const char *prog;
    int64_t epochs, max_steps; /* max_steps > 0 overrides epochs */
    int64_t batch_size, grad_accum;
    double lr, weight_decay, warmup, clip;
    double beta1, beta2, adam_eps;
    const char *schedule; /* constant | linear | cosine */
    uint64_t seed;
    int64_t eval_interval; /* > 0: every N steps; and at each epoch's end and the end unless < 0 */
    int64_t log_interval, save_interval, keep;
    const char *save_dir;
    bool resume;
    /* With resume: this checkpoint file exactly (no fallback), instead of the newest intact
     * one in save_dir. NULL: the newest. */
    const char *resume_from;
    /* Without resume: save_dir's checkpoints (step-N.tzck) and metrics.jsonl are an earlier run's,
     * removed as training starts (--overwrite; the program refused the folder without it). */
    bool start_over;
    const char *options_json; /* resolved options, stored in checkpoints and metrics */
    /* Data-parallel and tensor-parallel groups (NULL = one rank). The data iterator gives each
     * dp rank its slice of the same global batch; gradients are summed over dp, the loss is
     * normalised by the global number of targets, and only the first rank writes files.
     * dp and tp are the device comms (the gradient slab, ZeRO's slab traffic, the shards a
     * checkpoint gathers); dp_host and tp_host the same groups' host comms (counts, the loss
     * sum, the norm's partial sums, the stop flag, a checkpoint load's agreement), NULL = dp,
     * tp: see rt_grid.h. On CPU they are the same objects. */
    rt_comm *dp, *tp;
    rt_comm *dp_host, *tp_host;
    /* Pipeline stages (NULL = one): the model's stage is pp's rank, and the model must offer
     * pipeline_step. Each stage holds its own parameters: the loss is summed over pp, the
     * clipping norm adds every stage's squares, and a checkpoint gathers every stage's tensors
     * into one file (the first stage writes), which loads at any pp. ZeRO shards each stage's
     * own state over its dp group. */
    rt_comm *pp, *pp_host;
    /* ZeRO (runtime/train/rt_zero.h): 1 shards AdamW m and v over dp (reduce-scatter the gradients,
     * update this rank's slice, all-gather the parameters); 2 also gives back the full
     * gradient between steps (CPU backend); 3 shards the parameters and gradients too, block
     * by block, gathering each block as the model reaches it (with pp, each stage its own).
     * offload_optimizer keeps the slice's fp32 master weights, m and v in host memory and runs
     * AdamW there; it needs zero >= 1. offload_params (zero 3) keeps the parameter shard there
     * too. Checkpoints keep the full layout, so they resume at any dp and zero. 0/false: off. */
    int zero;
    bool offload_optimizer, offload_params;
    /* fp16's dynamic loss scaling (runtime/train/rt_loss_scale.h), NULL = none: the loss gradient is
     * scaled, a step whose gradient norm or loss is not finite is skipped (its data consumed,
     * no update; the LR schedule and AdamW's step count follow the updates made), and the
     * norm, clipping and update see the unscaled gradients. The scaler's state is in the
     * checkpoints. No program sets it yet: it waits for the CUDA fp16 path. */
    const rt_loss_scale_opts *loss_scale;
    /* Floats per bucket of the data-parallel gradient all-reduce: 0 picks one (at most 16 MiB,
     * at least 4 buckets per slab), -1 reduces everything after the backward instead of
     * overlapping (the model must offer set_grads_hook to overlap; ZeRO never does). */
    int64_t dp_bucket;
    /* One device's peak TFLOP/s for MFU; 0: the peak at the compute precision (fp32, or the
     * bf16/fp16 tensor cores') of a GPU the table knows (H100, H200, A100, L40S), else no MFU. */
    double peak_tflops;
} rt_train_opts;

typedef struct {
    int64_t steps; /* optimizer steps completed */
    double last_train_loss;
    rt_metrics last_eval;  /* n = 0 when none ran */
    int signal;            /* SIGINT/SIGTERM that stopped training (after a save), else 0 */
    int64_t skipped_steps; /* loss scaling: steps skipped for overflow */
    double loss_scale;     /* loss scaling: the scale at the end, else 0 */
    int64_t early_buckets; /* gradient buckets whose all-reduce started inside a backward */
} rt_train_result;

rt_status rt_train(const rt_train_opts *o, rt_train_model *model, rt_train_data *data, rt_train_eval *eval,
                   const rt_train_io *io, rt_train_result *result);

/* Creates save_dir (and parents) and checks it is writable, before any work starts. */
rt_status rt_train_prepare_dir(const char *dir);

#endif
