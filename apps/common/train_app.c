/* The training options and set-up every program shares (see train_app.h). */
#include "apps/common/train_app.h"
#include "apps/common/train_lora.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "apps/common/deepspeed_config.h"
#include "apps/common/run_dir.h"
#include "checkpoints/ckpt_source.h"
#include "data/data_cache.h"
#include "models/layers/padding.h"
#include "runtime/train/rt_step_graphs.h"
#include "runtime/base/rt_atomic.h"
#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_fs.h"
#include "runtime/comm/rt_launch.h"
#include "runtime/base/rt_log.h"
#include "runtime/base/rt_run_lock.h"
#include "runtime/base/rt_signal.h"
#include "runtime/train/rt_zero.h"

void train_app_add_options(train_app_opts *o, const train_app_defaults *d, rt_args_spec *spec, rt_opt *opts) {
    /* clang-format off */
    const rt_opt shared[TRAIN_APP_N_OPTS] = {
        {"epochs", RT_OPT_INT, &o->epochs, d->epochs ? d->epochs : "1", NULL,
         "training epochs (0: evaluate and predict only)", NULL, 0, 1e6},
        {"max-steps", RT_OPT_INT, &o->max_steps, "0", NULL, "stop after N optimizer steps (> 0 overrides --epochs)", NULL,
         0, 1e12},
        {"batch-size", RT_OPT_INT, &o->batch_size, d->batch_size ? d->batch_size : "16", NULL,
         "examples per optimizer micro-batch, over all data-parallel ranks", NULL, 1, 65536},
        {"grad-accum", RT_OPT_INT, &o->grad_accum, "1", NULL, "micro-batches per optimizer step", NULL, 1, 65536},
        {"lr", RT_OPT_FLOAT, &o->lr, d->lr ? d->lr : "1e-4", NULL, "peak learning rate", NULL, 0, 10},
        {"weight-decay", RT_OPT_FLOAT, &o->weight_decay, d->weight_decay ? d->weight_decay : "0.01", NULL,
         "AdamW weight decay (not on biases and norms)", NULL, 0, 10},
        {"warmup", RT_OPT_FLOAT, &o->warmup, d->warmup ? d->warmup : "0.1", NULL,
         "warmup: steps when >= 1, a fraction of all steps when < 1", NULL, 0, 1e12},
        {"adam-beta1", RT_OPT_FLOAT, &o->adam_beta1, "0.9", NULL, "AdamW beta1", NULL, 0, 0.999999},
        {"adam-beta2", RT_OPT_FLOAT, &o->adam_beta2, "0.999", NULL, "AdamW beta2", NULL, 0, 0.999999},
        {"adam-eps", RT_OPT_FLOAT, &o->adam_eps, "1e-8", NULL, "AdamW epsilon", NULL, 1e-30, 1},
        {"schedule", RT_OPT_CHOICE, &o->schedule, "linear", NULL, "learning-rate decay after warmup",
         "constant|linear|cosine", 0, 0},
        {"clip", RT_OPT_FLOAT, &o->clip, "1.0", NULL, "global gradient-norm clipping (0 = off)", NULL, 0, 1e9},
        {"pad-to-8", RT_OPT_FLAG, &o->pad8, "false", NULL, "pad batch length to a multiple of 8", NULL, 0, 0},
        {"length-buckets", RT_OPT_STRING, &o->length_buckets, NULL, "L1,L2,...",
         "pad each batch to the smallest of these ascending lengths that holds its longest row (seq2seq: each "
         "side on its own), so a run sees only these shapes (one CUDA graph each); the last must cover the "
         "longest row", NULL, 0, 0},
        {"cache-dir", RT_OPT_STRING, &o->cache_dir, NULL, "DIR",
         "where tokenized datasets are cached for the next run with the same data, tokenizer and options "
         "(default $XDG_CACHE_HOME/tunezoo or ~/.cache/tunezoo)",
         NULL, 0, 0},
        {"no-cache", RT_OPT_FLAG, &o->no_cache, "false", NULL, "tokenize every time; read and write no cache", NULL, 0,
         0},
        {"group-by-length", RT_OPT_FLAG, &o->group_by_length, "false", NULL,
         "batch examples of similar length (HF's LengthGroupedSampler: megabatches of up to 50 batches, each sorted "
         "longest first), so less padding is computed",
         NULL, 0, 0},
        {"seed", RT_OPT_INT, &o->seed, "42", NULL, "seed for init, data order and dropout", NULL, 0, 9e15},
        {"eval-interval", RT_OPT_INT, &o->eval_interval, "0", NULL,
         "evaluate every N steps and at each epoch's end (0 = epoch ends only, -1 = never)", NULL, -1, 1e12},
        {"log-interval", RT_OPT_INT, &o->log_interval, "10", NULL, "print a step line every N steps", NULL, 0, 1e12},
        {"save-dir", RT_OPT_STRING, &o->save_dir, NULL, "DIR",
         "checkpoints, metrics.jsonl, predictions (default runs/PROGRAM)", NULL, 0, 0},
        {"save-interval", RT_OPT_INT, &o->save_interval, "0", NULL,
         "checkpoint every N steps and at the end (0 = at the end only, -1 = never)", NULL, -1, 1e12},
        {"keep", RT_OPT_INT, &o->keep, "2", NULL, "keep the newest N checkpoints", NULL, 1, 1e6},
        {"resume", RT_OPT_FLAG, &o->resume, "false", NULL,
         "continue from the newest intact checkpoint in --save-dir (a damaged newer one is kept as NAME.corrupt)", NULL,
         0, 0},
        {"resume-from", RT_OPT_STRING, &o->resume_from, NULL, "FILE",
         "continue from exactly this checkpoint file (implies --resume; no fallback)", NULL, 0, 0},
        {"overwrite", RT_OPT_FLAG, &o->overwrite, "false", NULL,
         "start a new run in a --save-dir that holds an earlier run: its checkpoints and metrics.jsonl are removed "
         "as training starts (without it, and without --resume, such a folder is refused)", NULL, 0, 0},
        {"threads", RT_OPT_INT, &o->threads, "0", NULL, "CPU threads (0 = all cores)", NULL, 0, 4096},
        {"comm-stats", RT_OPT_FLAG, &o->comm_stats, "false", NULL,
         "print the communication volume per step next to its formula (use with --eval-interval -1)", NULL, 0, 0},
        {"comm-timeout", RT_OPT_FLOAT, &o->comm_timeout, "600", NULL,
         "seconds a collective waits for every rank before the run stops with an error naming the wait", NULL, 1,
         1e7},
        {"deepspeed-config", RT_OPT_STRING, &o->deepspeed_config, NULL, "FILE",
         "read a DeepSpeed JSON (micro batch per GPU, accumulation, clipping, ZeRO, optimizer, scheduler); --config "
         "and the command line override it",
         NULL, 0, 0},
        {"tp", RT_OPT_INT, &o->tp, "1", NULL,
         "tensor-parallel size; the ranks of an mpirun/srun launch form a (world/tp) x tp grid", NULL, 1, 4096},
        {"pp", RT_OPT_INT, &o->pp, "1", NULL,
         "pipeline stages: each holds an equal share of the blocks (t5-finetune: the encoder's on the first stages, the decoder's on the rest); a launch's ranks form a "
         "pp x (world/(pp*tp)) x tp grid, and a step runs its micro-batches through the stages in 1F1B order",
         NULL, 1, 4096},
        {"micro-batches", RT_OPT_INT, &o->micro_batches, "0", NULL,
         "micro-batches per optimizer step (ColossalAI's num_microbatches): the same as --grad-accum, which it "
         "sets; with --pp at least the number of stages (0 = --grad-accum's)", NULL, 0, 65536},
        {"pp-recompute", RT_OPT_FLAG, &o->pp_recompute, "false", NULL,
         "with --pp: keep only each micro-batch's stage input and recompute its forward in the backward (one "
         "activation set per stage instead of one per micro-batch in flight, about a third more compute on all but "
         "the last stage)", NULL, 0, 0},
        {"zero", RT_OPT_INT, &o->zero, "0", NULL,
         "ZeRO stage: 1 shards AdamW state over the data-parallel ranks, 2 also the gradients, 3 also the weights, "
         "gathering each block as the model reaches it (0 = off)", NULL, 0, 3},
        {"offload-optimizer", RT_OPT_FLAG, &o->offload_optimizer, "false", NULL,
         "keep fp32 master weights and AdamW state in host memory and update them there (needs --zero 1, 2 or 3)",
         NULL, 0, 0},
        {"offload-params", RT_OPT_FLAG, &o->offload_params, "false", NULL,
         "with --zero 3: keep this rank's weight shard in host memory too (a block is copied up as it is gathered); "
         "implies --offload-optimizer", NULL, 0, 0},
        {"peak-tflops", RT_OPT_FLOAT, &o->peak_tflops, "0", NULL,
         "one device's peak TFLOP/s, for the MFU in the step line (0 = a known GPU's peak at --precision, else none)",
         NULL, 0, 1e6},
        {"device", RT_OPT_CHOICE, &o->device, "cpu", NULL,
         "where to train; cuda = the GPU numbered by the rank's local rank", "cpu|cuda|cuda:N", 0, 0},
        {"precision", RT_OPT_CHOICE, &o->precision, "auto", NULL,
         "compute precision: bf16 or fp16 matmul inputs with fp32 sums, and activations stored in it (the CPU's "
         "native bf16 kernels where it has them); weights, gradients, AdamW state, norms, softmax and losses stay "
         "fp32, so a checkpoint resumes in any precision. fp16 turns on dynamic loss scaling. auto: bf16 on a GPU "
         "with bf16 tensor cores (sm_80 and newer), else fp32 (as HF on the CPU)",
         "auto|fp32|bf16|fp16", 0, 0},
        {"loss-scale-power", RT_OPT_INT, &o->loss_scale_power, "16", NULL,
         "fp16: the first loss scale is 2^N (DeepSpeed's initial_scale_power)", NULL, 0, 100},
        {"loss-scale-window", RT_OPT_INT, &o->loss_scale_window, "1000", NULL,
         "fp16: overflow-free steps before the scale doubles (loss_scale_window)", NULL, 1, 1e12},
        {"loss-scale-hysteresis", RT_OPT_INT, &o->loss_scale_hysteresis, "2", NULL,
         "fp16: overflows tolerated before the scale halves (hysteresis)", NULL, 1, 1e6},
        {"min-loss-scale", RT_OPT_FLOAT, &o->min_loss_scale, "1", NULL,
         "fp16: an overflow at this scale stops the run with an error (min_loss_scale)", NULL, 1e-30, 1e30},
    };
    /* clang-format on */
    memcpy(opts + spec->n_opts, shared, sizeof shared);
    spec->n_opts += TRAIN_APP_N_OPTS;
    spec->preset_option = "deepspeed-config";
    spec->apply_preset = train_app_deepspeed_apply;
}

void train_app_add_checkpoint_options(train_app_opts *o, rt_opt *opts, int *n) {
    /* clang-format off */
    const rt_opt ckpt[TRAIN_APP_N_CHECKPOINT_OPTS] = {
        {"checkpoint-activations", RT_OPT_FLAG, &o->checkpoint_activations, "false", NULL,
         "keep only each block's input and recompute the block in backward: less activation memory, the same "
         "gradients, about a third more compute", NULL, 0, 0},
        {"checkpoint-num-layers", RT_OPT_INT, &o->checkpoint_num_layers, "1", NULL,
         "with --checkpoint-activations: blocks recomputed together (activations of N blocks at once)", NULL, 1,
         1 << 20},
    };
    /* clang-format on */
    memcpy(opts + *n, ckpt, sizeof ckpt);
    *n += TRAIN_APP_N_CHECKPOINT_OPTS;
}

const char *train_app_cache_dir(const train_app_opts *o) {
    if (o->no_cache) return NULL;
    return o->cache_dir ? o->cache_dir : data_cache_default_dir();
}

int train_app_group_by(const train_app_opts *o) {
    return o->group_by_length ? (int)(o->batch_size * o->grad_accum) : 0;
}

int train_app_checkpoint_layers(const train_app_opts *o) {
    return o->checkpoint_activations ? (int)o->checkpoint_num_layers : 0;
}

/* The save dir's lock, held from train_app_setup to the end of train_app_main (first rank). */
static rt_run_lock *run_lock;

rt_status train_app_setup(train_app_opts *o, const rt_args_spec *spec, const char *prog, rt_comm *world,
                          rt_grid *grid) {
    static char default_save_dir[256];
    if (!o->save_dir) {
        snprintf(default_save_dir, sizeof default_save_dir, "runs/%s", prog);
        o->save_dir = default_save_dir;
    }
    if (o->offload_optimizer && o->zero == 0)
        return rt_errorf(RT_ERR_USAGE,
                         "--offload-optimizer needs --zero 1, 2 or 3 (it offloads this rank's optimizer shard)");
    rt_status pst = data_pad_parse(o->length_buckets, o->pad8 ? 8 : 1, "length-buckets", &o->pad);
    if (pst != RT_OK) return pst;
    if (o->offload_params && o->zero != 3)
        return rt_errorf(RT_ERR_USAGE, "--offload-params needs --zero 3 (only stage 3 shards the weights)");
    if (o->checkpoint_num_layers > 1 && !o->checkpoint_activations)
        return rt_errorf(RT_ERR_USAGE, "--checkpoint-num-layers %lld needs --checkpoint-activations",
                         (long long)o->checkpoint_num_layers);
    if (o->micro_batches > 0) {
        if (rt_args_source_of(spec, "grad-accum") == RT_ARG_COMMAND_LINE && o->grad_accum != o->micro_batches)
            return rt_errorf(RT_ERR_USAGE, "--micro-batches %lld and --grad-accum %lld disagree (they are one setting)",
                             (long long)o->micro_batches, (long long)o->grad_accum);
        o->grad_accum = o->micro_batches;
    }
    if (o->pp > 1 && o->grad_accum < o->pp)
        return rt_errorf(RT_ERR_USAGE,
                         "--pp %lld needs at least as many micro-batches per step (--micro-batches or "
                         "--grad-accum, now %lld), or the stages mostly wait",
                         (long long)o->pp, (long long)o->grad_accum);
    /* before the grid splits the world: its sub-communicators inherit the timeout */
    if (world->ops->set_timeout) world->ops->set_timeout(world->ctx, o->comm_timeout);
    rt_status st = rt_grid_init(world, (int)o->tp, (int)o->pp, grid);
    if (st != RT_OK) return st;
    if (rt_args_source_of(spec, "batch-size") == RT_ARG_PRESET) {
        /* DeepSpeed's micro-batch is per GPU; --batch-size is the global one */
        o->batch_size *= grid->dp_size;
        rt_log_info("--deepspeed-config: train_micro_batch_size_per_gpu x %d data-parallel ranks = --batch-size %lld",
                    grid->dp_size, (long long)o->batch_size);
    }
    /* fail early on an unusable or busy save dir, before minutes of tokenizing */
    st = rt_train_prepare_dir(o->save_dir);
    if (st == RT_OK && world->rank == 0) st = rt_run_lock_acquire(o->save_dir, &run_lock);
    /* holding the lock, any temp file in the folder (or its hf/ export) is a killed run's */
    if (st == RT_OK && world->rank == 0) st = rt_atomic_remove_stale(o->save_dir, NULL);
    char hf[4200];
    snprintf(hf, sizeof hf, "%s/hf", o->save_dir);
    if (st == RT_OK && world->rank == 0 && train_app_exists(hf)) st = rt_atomic_remove_stale(hf, NULL);
    /* one run a folder: another run's checkpoints and metrics are refused, or removed with --overwrite */
    const bool trains = o->epochs > 0 || o->max_steps > 0; /* --epochs 0 evaluates or predicts beside a run */
    if (st == RT_OK && world->rank == 0 && trains)
        st = run_dir_claim(o->save_dir, o->resume, o->resume_from, o->overwrite);
    return st;
}

rt_status train_app_device(train_app_opts *o, rt_grid *grid, char *device, size_t device_size, rt_backend **be) {
    rt_status st = rt_launch_device_name(o->device, device, device_size); /* "cuda": this rank's local GPU */
    if (st == RT_OK) st = rt_backend_init(device, (int)o->threads, be);
    if (st == RT_OK && strcmp(o->precision, "auto") == 0)
        o->precision = (*be)->device >= 0 && (*be)->native_bf16 ? "bf16" : "fp32";
    if (st == RT_OK && strcmp(o->precision, "fp32") == 0 && (*be)->native_bf16)
        rt_log_info("hint: this CPU has native bf16 matmuls; --precision bf16 runs them (fp32 sums, fp32 weights)");
    if (st == RT_OK && strcmp(o->precision, "fp32") != 0) {
        rt_dtype dtype = strcmp(o->precision, "bf16") == 0 ? RT_BF16 : RT_F16;
        if ((st = rt_set_precision(*be, dtype)) != RT_OK) {
            char msg[512]; /* rt_errorf writes the buffer rt_error_message() points into */
            snprintf(msg, sizeof msg, "%s", rt_error_message());
            st = rt_errorf(st, "--precision %s: %s", o->precision, msg);
        } else {
            rt_log_info("precision: %s matmul inputs with fp32 accumulation, activations stored in %s; weights, "
                        "gradients, AdamW state, norms, softmax and losses in fp32%s",
                        o->precision, o->precision, dtype == RT_F16 ? "; dynamic loss scaling" : "");
        }
    }
    /* TZ_STEP_GRAPHS's value and the device, checked before the data is read (rt_train reads it) */
    rt_step_graphs_mode graphs;
    if (st == RT_OK) st = rt_step_graphs_mode_of(*be, &graphs);
    /* ZeRO-3 on a GPU: the model is built in host memory and only this rank's pieces go up, so
     * the whole model never has to fit on the device (DeepSpeed's zero.Init does the same job) */
    if (st == RT_OK && o->zero == 3 && (*be)->device >= 0)
        st = rt_cpu_backend_init((int)o->threads, &(*be)->params_staging);
    /* several ranks on GPUs: NCCL for device buffers, the launch's MPI for host values */
    if (st == RT_OK) st = rt_grid_init_device(grid, (*be)->device, o->comm_timeout);
    if (st == RT_OK && (grid->tp != grid->tp_host || grid->dp != grid->dp_host || grid->pp != grid->pp_host))
        rt_log_info("comm: NCCL for device buffers, %s for host values (pp %d x dp %d x tp %d)", grid->world->ops->name,
                    grid->pp_size, grid->dp_size, grid->tp_size);
    return st;
}

static void train_app_set_grads_hook(void *ctx, const rt_grads_hook *hook) { ((train_app_model *)ctx)->grads = hook; }
static void train_app_set_loss_sink(void *ctx, double *sink) { ((train_app_model *)ctx)->loss_sink = sink; }
static void train_app_set_stream_step(void *ctx, const uint64_t *stream_step) {
    ((train_app_model *)ctx)->stream_step = stream_step;
}

static double train_app_flops(void *ctx, const rt_batch *b) {
    const mdl_trainable *m = &((train_app_model *)ctx)->m;
    return m->flops && b->B > 0 ? m->flops(m->model, b) : 0;
}

/* Every family's host code reads the mask through mdl_padding (GLM's heads read the device, which
 * keeps its steps out of graphs anyway) */
static int train_app_padding_kind(void *ctx, const rt_batch *b) {
    (void)ctx;
    return mdl_padding_kind(b->attention_mask, b->B, b->T, NULL);
}

static rt_status train_app_pipeline_step(void *ctx, const rt_batch *b, int n, uint64_t seed, int64_t step,
                                         float grad_scale, double *loss_sum) {
    train_app_model *a = ctx;
    for (int i = 0; i < n; i++) a->padded_tokens += (double)b[i].B * (double)b[i].T;
    return a->m.pipeline_step(a->m.model, b, n, seed, step, grad_scale, loss_sum);
}

static rt_status train_app_forward_backward(void *ctx, const rt_batch *b, uint64_t seed, int64_t step, int micro,
                                            float grad_scale, double *loss_sum) {
    train_app_model *a = ctx;
    *loss_sum = 0;
    if (b->B == 0) return RT_OK;
    a->padded_tokens += (double)b->B * (double)b->T;
    mdl_pass pass = {.seed = seed,
                     .step = step,
                     .micro = micro,
                     .training = true,
                     .grads = a->grads,
                     .loss_sink = a->loss_sink,
                     .stream_step = a->stream_step};
    return a->m.step(a->m.model, b, &pass, grad_scale, loss_sum);
}

rt_train_model train_app_loop_model(train_app_model *a) {
    return (rt_train_model){.ctx = a,
                            .params = a->m.params,
                            .forward_backward = train_app_forward_backward,
                            .set_grads_hook = train_app_set_grads_hook,
                            .set_loss_sink = train_app_set_loss_sink,
                            .set_stream_step = train_app_set_stream_step,
                            .flops = train_app_flops,
                            .padding_kind = train_app_padding_kind,
                            .pipeline_step = a->m.pipeline_step ? train_app_pipeline_step : NULL};
}

/* ---- --comm-stats ---- */

void train_app_comm_count_begin(const train_app_opts *o, train_app_comm_count *cc, rt_grid *grid) {
    memset(cc, 0, sizeof *cc);
    if (!o->comm_stats) return;
    cc->on = true;
    cc->owned = *grid;
    const rt_grid *g = &cc->owned;
    /* host and device comms of a group count into one table; a host comm that is its device
     * comm's object (on the CPU) gets the same view, so each call counts once */
    grid->dp = rt_comm_stats_wrap(g->dp, &cc->dp);
    grid->tp = rt_comm_stats_wrap(g->tp, &cc->tp);
    grid->pp = rt_comm_stats_wrap(g->pp, &cc->pp);
    grid->dp_host = g->dp_host == g->dp ? grid->dp : rt_comm_stats_wrap(g->dp_host, &cc->dp);
    grid->tp_host = g->tp_host == g->tp ? grid->tp : rt_comm_stats_wrap(g->tp_host, &cc->tp);
    grid->pp_host = g->pp_host == g->pp ? grid->pp : rt_comm_stats_wrap(g->pp_host, &cc->pp);
}

void train_app_comm_count_end(train_app_comm_count *cc, rt_grid *grid) {
    if (!cc->on) return;
    if (grid->dp_host != grid->dp) rt_comm_free(grid->dp_host);
    if (grid->tp_host != grid->tp) rt_comm_free(grid->tp_host);
    if (grid->pp_host != grid->pp) rt_comm_free(grid->pp_host);
    rt_comm_free(grid->dp);
    rt_comm_free(grid->tp);
    rt_comm_free(grid->pp);
    *grid = cc->owned;
    cc->on = false;
}

/* Measured payload per optimizer step next to what the layout predicts for dp: the whole
 * gradient slab once per step (plus the target, token and FLOP counts, loss and stop flag), or
 * ZeRO's reduce-scatter and gathers. */
void train_app_comm_count_print(const train_app_opts *o, const train_app_comm_count *cc, const rt_grid *grid,
                                const rt_params *p, int64_t steps) {
    if (!cc->on || grid->world->rank != 0 || steps <= 0) return;
    const double dp_formula = grid->dp_size > 1 ? 4.0 * (double)p->numel + 20.0 : 0.0;
    rt_log_info("communication per optimizer step (rank 0, payload bytes, %lld steps, pp %d x dp %d x tp %d):",
                (long long)steps, grid->pp_size, grid->dp_size, grid->tp_size);
    const rt_comm_stats *groups[3] = {&cc->dp, &cc->tp, &cc->pp};
    const char *names[3] = {"dp", "tp", "pp"};
    for (int g = 0; g < 3; g++)
        for (int op = 0; op < RT_COMM_OP_COUNT; op++)
            if (groups[g]->calls[op])
                rt_log_info("  %s %-14s %8.1f calls  %12.4f MB", names[g], rt_comm_op_name((rt_comm_op)op),
                            (double)groups[g]->calls[op] / (double)steps,
                            (double)groups[g]->bytes[op] / (double)steps / 1e6);
    rt_log_info("  formula dp all_reduce: 4 B x %zu slab floats + 20 B of counts = %.4f MB (ring traffic per rank: "
                "x 2(dp-1)/dp = %.4f MB)",
                p->numel, dp_formula / 1e6, dp_formula * 2.0 * (grid->dp_size - 1) / grid->dp_size / 1e6);
    if (o->zero == 3 && grid->dp_size > 1) {
        /* ZeRO-3 reduce-scatters every block's gradient once per micro-batch and gathers every
         * block for the forward and again for the backward, less the blocks the backward finds
         * still in the window; a rank's pieces add up to about the slab over dp. The whole model
         * is gathered once more at the end of the run (for the export), spread over the steps. */
        const double M = (double)o->grad_accum, slice = (double)p->numel / grid->dp_size;
        rt_log_info(
            "  formula dp with --zero 3: reduce_scatter 4 B x %zu slab floats x %.0f micro-batches = %.4f MB, "
            "all_gather at most 2 x 4 B x %.0f slice floats x %.0f micro-batches + 16 B norm + 4 B x the slice "
            "once a run / %lld steps = %.4f MB (the window saves up to %d blocks' backward gathers), all_reduce "
            "20 B of counts",
            p->numel, M, 4.0 * (double)p->numel * M / 1e6, slice, M, (long long)steps,
            (8.0 * slice * M + 16.0 + 4.0 * slice / (double)steps) / 1e6, RT_ZERO3_WINDOW - 1);
    } else if (o->zero > 0 && grid->dp_size > 1) {
        /* ZeRO replaces the gradient all-reduce by a reduce-scatter of the slab (padded to a
         * multiple of dp) and an all-gather of this rank's updated slice; the clipping norm adds
         * one 16 B all-gather (two double-float pairs). The ring traffic equals the all-reduce's. */
        size_t shard = (p->numel + (size_t)grid->dp_size - 1) / (size_t)grid->dp_size;
        rt_log_info("  formula dp with --zero %lld: reduce_scatter 4 B x %zu padded slab floats = %.4f MB, all_gather "
                    "4 B x %zu slice floats + 16 B norm = %.4f MB, all_reduce 20 B of counts",
                    (long long)o->zero, shard * (size_t)grid->dp_size, 4.0 * (double)shard * grid->dp_size / 1e6, shard,
                    (4.0 * (double)shard + 16.0) / 1e6);
    }
}

rt_train_opts train_app_loop_opts(const train_app_opts *o, const char *prog, const rt_grid *grid,
                                  const char *options_json) {
    rt_train_opts to = {
        .prog = prog,
        .epochs = o->epochs,
        .max_steps = o->max_steps,
        .batch_size = o->batch_size,
        .grad_accum = o->grad_accum,
        .lr = o->lr,
        .weight_decay = o->weight_decay,
        .warmup = o->warmup,
        .clip = o->clip,
        .beta1 = o->adam_beta1,
        .beta2 = o->adam_beta2,
        .adam_eps = o->adam_eps,
        .schedule = o->schedule,
        .seed = (uint64_t)o->seed,
        .eval_interval = o->eval_interval,
        .log_interval = o->log_interval,
        .save_interval = o->save_interval,
        .keep = o->keep,
        .save_dir = o->save_dir,
        .resume = o->resume || o->resume_from,
        .resume_from = o->resume_from,
        .start_over = o->overwrite,
        .options_json = options_json,
        .dp = grid->dp,
        .tp = grid->tp,
        .dp_host = grid->dp_host,
        .tp_host = grid->tp_host,
        .pp = grid->pp,
        .pp_host = grid->pp_host,
        .zero = (int)o->zero,
        .offload_optimizer = o->offload_optimizer,
        .offload_params = o->offload_params,
        .peak_tflops = o->peak_tflops,
    };
    if (strcmp(o->precision, "fp16") == 0) { /* fp16's narrow range needs the loss scaled */
        static rt_loss_scale_opts ls;
        rt_loss_scale_defaults(&ls);
        ls.init_scale = ldexp(1.0, (int)o->loss_scale_power);
        ls.window = o->loss_scale_window;
        ls.hysteresis = (int)o->loss_scale_hysteresis;
        ls.min_scale = o->min_loss_scale;
        to.loss_scale = &ls;
    }
    return to;
}

int train_app_main(int argc, char **argv, const char *prog, train_app_run_fn run) {
    int sig = 0, code;
    rt_signal_ignore_file_limit();
    rt_comm *world = NULL;
    /* the wait until the options are read and --comm-timeout replaces it */
    rt_status st = rt_comm_world_init(&argc, &argv, TRAIN_APP_COMM_TIMEOUT_S, &world);
    if (st == RT_OK) {
        rt_log_set_rank(world->rank, world->size);
        st = run(argc, argv, world, &sig);
    }
    code = (st == RT_OK && sig) ? 128 + sig /* stopped by a signal after saving a checkpoint */
                                : rt_status_exit_code(prog, st);
    rt_run_lock_release(run_lock);
    run_lock = NULL;
    rt_comm_free(world);
    rt_comm_mpi_end(code);
    return code;
}

const char *train_app_params_scope(const rt_comm *tp, const rt_comm *pp) {
    static char scope[128];
    if (tp->size == 1 && pp->size == 1) return "";
    if (pp->size == 1) return " on this rank (its tensor-parallel shard)";
    snprintf(scope, sizeof scope, " on this rank (%spipeline stage %d of %d; the memory line lists every stage)",
             tp->size > 1 ? "a tensor-parallel shard of " : "", pp->rank + 1, pp->size);
    return scope;
}

bool train_app_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

rt_status train_app_check_paths(const train_app_input *paths, size_t n,
                                rt_status (*check)(const char *, const char *)) {
    rt_status st = RT_OK;
    for (size_t i = 0; i < n && st == RT_OK; i++)
        if (paths[i].path) st = check(paths[i].path, paths[i].what);
    return st;
}

/* Whether an HF folder holds a tokenizer of its own. */
static bool has_tokenizer_files(const char *dir) {
    static const char *const names[] = {"tokenizer.json", "vocab.json", "encoder.json", "vocab.txt"};
    char p[4200];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (train_app_exists(p)) return true;
    }
    return false;
}

rt_status train_app_resolve_source(const char *model_dir, const char *arch, const char *tokenizer,
                                   const char *default_tokenizer, const char *family, train_app_source *out) {
    memset(out, 0, sizeof *out);
    if (model_dir && arch) return rt_errorf(RT_ERR_USAGE, "give --model or --arch, not both");
    if (model_dir) {
        struct stat sb;
        if (stat(model_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return rt_errorf(RT_ERR_IO,
                             "--model %s: not a directory (expected an HF %s folder with config.json and "
                             "model.safetensors, as huggingface-cli download writes)",
                             model_dir, family);
        snprintf(out->config, sizeof out->config, "%s/config.json", model_dir);
        rt_status st = ckpt_source_find_weights(model_dir, out->weights, sizeof out->weights);
        if (st != RT_OK) return st;
        if (!tokenizer && has_tokenizer_files(model_dir))
            snprintf(out->tokenizer, sizeof out->tokenizer, "%s", model_dir);
    } else if (arch) {
        snprintf(out->config, sizeof out->config, "%s", arch);
    }
    if (!out->tokenizer[0])
        snprintf(out->tokenizer, sizeof out->tokenizer, "%s", tokenizer ? tokenizer : default_tokenizer);
    return RT_OK;
}

rt_status train_app_copy_file(const char *from, const char *to) {
    rt_status st = RT_OK;
    char *buf = NULL;
    FILE *f = fopen(from, "rb");
    if (!f) return rt_errorf(RT_ERR_IO, "%s: cannot open: %s", from, strerror(errno));
    size_t cap = 0, n = 0, got;
    do {
        RT_GROW(buf, cap, n + (1 << 16));
        n += got = fread(buf + n, 1, cap - n, f);
    } while (got > 0);
    if (ferror(f)) RT_FAIL(RT_ERR_IO, "%s: read failed", from);
    RT_TRY(rt_atomic_write_file(to, buf, n));
fail:
    fclose(f);
    free(buf);
    return st;
}

rt_status train_app_write_lines(const char *path, char *const *texts, size_t n) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += strlen(texts[i]) + 1;
    char *buf = rt_xmalloc(total + 1), *p = buf;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(texts[i]);
        memcpy(p, texts[i], len);
        for (size_t k = 0; k < len; k++)
            if (p[k] == '\n' || p[k] == '\r') p[k] = ' ';
        p += len;
        *p++ = '\n';
    }
    rt_status st = rt_atomic_write_file(path, buf, total);
    free(buf);
    return st;
}

rt_status train_app_copy_tokenizer(const char *tokenizer_path, const char *dir) {
    /* HF's names; GPT-2's encoder.json / vocab.bpe are the same bytes as vocab.json / merges.txt */
    static const char *const names[][2] = {{"tokenizer.json", "tokenizer.json"},
                                           {"tokenizer_config.json", "tokenizer_config.json"},
                                           {"special_tokens_map.json", "special_tokens_map.json"},
                                           {"vocab.json", "vocab.json"},
                                           {"merges.txt", "merges.txt"},
                                           {"vocab.txt", "vocab.txt"},
                                           {"encoder.json", "vocab.json"},
                                           {"vocab.bpe", "merges.txt"},
                                           {"spiece.model", "spiece.model"}};
    char from[4300], to[4300];
    struct stat sb;
    if (stat(tokenizer_path, &sb) == 0 && S_ISREG(sb.st_mode)) { /* one file: under its kind's HF name */
        const size_t n = strlen(tokenizer_path);
        const char *base = strrchr(tokenizer_path, '/') ? strrchr(tokenizer_path, '/') + 1 : tokenizer_path;
        /* the one-file tokenizers tunezoo reads: tokenizer.json, a WordPiece vocab, a SentencePiece model */
        const char *name = strcmp(base, "tokenizer.json") == 0                    ? "tokenizer.json"
                           : n > 4 && strcmp(tokenizer_path + n - 4, ".txt") == 0 ? "vocab.txt"
                                                                                  : "spiece.model";
        snprintf(to, sizeof to, "%s/%s", dir, name);
        return train_app_exists(to) ? RT_OK : train_app_copy_file(tokenizer_path, to);
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(from, sizeof from, "%s/%s", tokenizer_path, names[i][0]);
        snprintf(to, sizeof to, "%s/%s", dir, names[i][1]);
        if (train_app_exists(from) && !train_app_exists(to)) {
            rt_status st = train_app_copy_file(from, to);
            if (st != RT_OK) return st;
        }
    }
    return RT_OK;
}

int train_app_program_main(int argc, char **argv, rt_args_spec *spec, rt_opt *opts, const rt_opt *own, int n_own,
                           train_app_opts *o, const train_app_defaults *d, train_app_run_fn run) {
    memcpy(opts, own, (size_t)n_own * sizeof *own);
    spec->opts = opts;
    spec->n_opts = n_own;
    train_app_add_options(o, d, spec, opts);
    train_app_add_checkpoint_options(o, opts, &spec->n_opts);
    if (d->lora) train_app_add_lora_options(o, opts, &spec->n_opts);
    return train_app_main(argc, argv, spec->prog, run);
}

rt_status train_app_export_hf(const char *dir, const rt_grid *grid, train_app_hf_write write, void *ctx) {
    return train_app_export_dir(dir, "--save-hf", "HF model folder", grid, write, ctx);
}

rt_status train_app_export_dir(const char *dir, const char *option, const char *kind, const rt_grid *grid,
                               train_app_hf_write write, void *ctx) {
    rt_status st = RT_OK;
    const bool writer = grid->world->rank == 0;
    char final_dir[4096], parent[4096];
    char *partial = NULL;
    /* "out/" is the folder out: its partial folder goes beside it, not inside */
    size_t n = (size_t)snprintf(final_dir, sizeof final_dir, "%s", dir);
    while (n > 1 && final_dir[n - 1] == '/') final_dir[--n] = '\0';
    if (writer) {
        snprintf(parent, sizeof parent, "%s", final_dir);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) *slash = '\0';
        if (slash) st = rt_make_dirs(parent, option);
        if (st == RT_OK) st = rt_atomic_partial_dir(final_dir, &partial);
    }
    /* every rank learns whether the first could start, before the collective write */
    float failed = st != RT_OK;
    rt_status agreed = grid->world->ops->all_reduce(grid->world->ctx, &failed, 1, RT_REDUCE_MAX);
    if (agreed != RT_OK) st = agreed;
    if (st == RT_OK && failed > 0) st = rt_errorf(RT_ERR_IO, "%s: the first rank could not start the export", dir);
    if (st == RT_OK && (st = write(ctx, writer ? partial : final_dir)) != RT_OK && writer)
        rt_error_wrap(st, "%s %s%s", option, final_dir,
                      train_app_exists(final_dir) ? " (the folder there is untouched)" : "");
    if (writer && st == RT_OK) st = rt_atomic_dir_replace(partial, final_dir);
    if (writer && st != RT_OK && partial) rt_atomic_partial_dir_remove(partial);
    if (writer && st == RT_OK) rt_log_info("wrote %s %s", kind, final_dir);
    free(partial);
    return st;
}

const char *train_app_first_given(const rt_args_spec *spec, const char *const *names, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (rt_args_source_of(spec, names[k]) != RT_ARG_DEFAULT) return names[k];
    return NULL;
}
