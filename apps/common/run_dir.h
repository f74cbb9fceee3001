/* A run folder (--save-dir) holds one run: its checkpoints, metrics.jsonl and predictions. A new
 * run in a folder where an earlier one left checkpoints would mix with it: the earlier run's
 * newer checkpoints would prune this run's as older, a later --resume would take them, and
 * metrics.jsonl would hold both runs' records. */
#ifndef APPS_RUN_DIR_H
#define APPS_RUN_DIR_H

#include <stdbool.h>

#include "runtime/base/rt_status.h"

/* Claims dir for a run that trains, on the first rank, holding the folder's lock (before minutes
 * of loading and tokenizing). A run that continues one there (--resume, or --resume-from a
 * checkpoint inside dir) takes it as it is; any other run is refused (RT_ERR_USAGE, naming what is
 * there and the three ways out) where dir holds step-N.tzck checkpoints or a non-empty
 * metrics.jsonl, unless overwrite: the trainer removes those as training starts
 * (rt_train_opts.start_over), so a run that fails before that leaves them whole. Damaged
 * checkpoints set aside as NAME.corrupt are no run's and stay. */
rt_status run_dir_claim(const char *dir, bool resume, const char *resume_from, bool overwrite);

#endif
