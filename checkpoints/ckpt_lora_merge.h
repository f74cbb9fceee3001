/* tz-convert merge: a PEFT LoRA folder folded into the HF folder of its base model, as PEFT's
 * PeftModel.from_pretrained(base, adapter).merge_and_unload() gives it, written as a plain HF
 * folder (issue 36).
 *
 * Each adapter's module M (the adapter file's names after "base_model.model.") takes
 * W += (alpha / r) B A in the base's M.weight (transposed where the config says fan_in_fan_out,
 * GPT-2's Conv1D), and each modules_to_save tensor replaces the base's of that name (or joins
 * the folder when the base has none: a classifier's head). Names are matched as they are, or by
 * their last dotted parts when one side has a prefix the other lacks ("transformer." of a task
 * model, FlagAI's "module."); a module that matches no weight, or several, is an error naming
 * it. The merged tensors keep the base's dtype (computed in fp32, then rounded); the others are
 * copied. Tensors go one at a time, and the output is built under a temporary name and renamed
 * when complete: an existing OUT is never overwritten. config.json and the tokenizer files (every
 * other file of the base folder) are copied. */
#ifndef CKPT_LORA_MERGE_H
#define CKPT_LORA_MERGE_H

#include "checkpoints/ckpt_convert.h"

rt_status ckpt_lora_merge(const char *base_dir, const char *adapter_dir, const char *out_dir,
                          ckpt_convert_stats *stats);

#endif
