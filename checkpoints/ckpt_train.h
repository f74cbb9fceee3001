/* Training checkpoints: the parameter slab, AdamW moments and the loop's metadata in one
 * native .tzck file, one record per parameter ("param/h.0.ln_1.weight", "exp_avg/...",
 * "exp_avg_sq/..."). This is the rt_train_io the shared training loop uses.
 *
 * Records hold FULL tensors in tunezoo's layout whatever the tensor-parallel size: weights
 * [out, in], QKV as [q; k; v] over all heads, and the vocab-parallel embedding with exactly
 * the real vocab's rows (spec vocab_rows; Megatron's padding rows are dropped, they are zero
 * and depend on tp). So a checkpoint saved at tp=2 resumes at tp=1 or tp=4: the ckpt_tp rules
 * split it again on load. Pipeline stages hold different parameters: the file holds every
 * stage's, so a checkpoint saved at pp=2 resumes at pp=1 or pp=4 too (each stage loads its own
 * records by name). */
#ifndef CKPT_TRAIN_H
#define CKPT_TRAIN_H

#include "runtime/train/rt_trainer.h"

/* Collective over tp and pp: every rank gathers each tensor's shards to its tp rank 0, the
 * other stages' tp rank 0 send theirs to the first stage's, which writes the file; every rank
 * returns the writer's outcome. Call it on one replica (dp replicas skip it). */
rt_status ckpt_train_save(const char *path, const rt_params *p, rt_comm *tp, rt_comm *pp, const char *meta_json);
/* Every rank reads its stage's full tensors and keeps its shard; every parameter must be
 * present with its full shape (errors name the file and the record). Collective over tp and
 * pp (when larger than 1): when any rank fails, every rank fails. */
rt_status ckpt_train_load(const char *path, rt_params *p, rt_comm *tp, rt_comm *pp, char **meta_json);
/* The rt_train_io backed by the functions above and ckpt_native's directory helpers. */
const rt_train_io *ckpt_train_io(void);

#endif
