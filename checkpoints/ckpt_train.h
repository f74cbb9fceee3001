/* Training checkpoints: the parameter slab, AdamW moments and the loop's metadata in one
 * native .tzck file, one record per parameter ("param/h.0.ln_1.weight", "exp_avg/...",
 * "exp_avg_sq/..."), so a later resharder can split or merge them by name. This is the
 * rt_train_io the shared training loop uses. */
#ifndef CKPT_TRAIN_H
#define CKPT_TRAIN_H

#include "runtime/rt_trainer.h"

rt_status ckpt_train_save(const char *path, const rt_params *p, const char *meta_json);
/* Every parameter must be present with its shape; errors name the file and the record. */
rt_status ckpt_train_load(const char *path, rt_params *p, char **meta_json);
/* The rt_train_io backed by the functions above and ckpt_native's directory helpers. */
const rt_train_io *ckpt_train_io(void);

#endif
