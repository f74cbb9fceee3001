/* --deepspeed-config ds.json: reads the DeepSpeed fields that mean something here and sets the
 * matching options, so a FlagAI or DeepSpeed user can bring their config as it is. Applied
 * before --config and the command line, which override it. A field with no meaning here
 * gets a warning that names it; a field asking for something unsupported (ZeRO-3, a static loss scale)
 * gets a warning saying what happens instead. Options set here are marked RT_ARG_PRESET.
 *
 *   train_micro_batch_size_per_gpu -> batch-size (per rank: the program multiplies by dp)
 *   gradient_accumulation_steps -> grad-accum      gradient_clipping -> clip
 *   zero_optimization.stage -> zero                 offload_optimizer / cpu_offload -> offload-optimizer
 *   optimizer.params.{lr, weight_decay, betas, eps} -> lr, weight-decay, adam-beta1/2, adam-eps
 *   scheduler.params.warmup_num_steps -> warmup     scheduler.params.total_num_steps -> max-steps
 *   bf16.enabled / fp16.enabled -> precision
 *   fp16.{initial_scale_power, loss_scale_window, hysteresis, min_loss_scale}
 *     -> loss-scale-power, loss-scale-window, loss-scale-hysteresis, min-loss-scale */
#ifndef TRAIN_APP_DEEPSPEED_CONFIG_H
#define TRAIN_APP_DEEPSPEED_CONFIG_H

#include "runtime/base/rt_args.h"

/* The spec's apply_preset for --deepspeed-config (train_app_add_options wires it). */
rt_status train_app_deepspeed_apply(const rt_args_spec *spec, const char *path);

#endif
