/* metrics.jsonl: one JSON record per line, appended as a run goes, checked write by write.
 *
 * A record that cannot be written (a full disk, a quota) is an error, never a silent gap: the
 * caller stops the run. Resuming from step S first cuts the file back to the records of steps
 * up to S (and drops a line a kill left half-written), so the steps the resumed run replays
 * appear once. Records are appended in step order, so the cut is at the first record whose
 * "step" is past S. The file is opened without following a symlink planted at its name.
 *
 *     rt_jsonl *log = NULL;
 *     RT_TRY(rt_jsonl_open(path, resumed ? step : -1, &log));
 *     RT_TRY(rt_jsonl_append(log, "{\"step\":1,...}"));
 *     RT_TRY(rt_jsonl_close(log));   // frees it, success or not
 */
#ifndef RT_JSONL_H
#define RT_JSONL_H

#include <stdint.h>

#include "runtime/base/rt_status.h"

typedef struct rt_jsonl rt_jsonl;

/* Opens path for appending (created if missing). keep_through_step >= 0 first cuts the file
 * after the last complete record with "step" <= keep_through_step; < 0 keeps every line. */
rt_status rt_jsonl_open(const char *path, int64_t keep_through_step, rt_jsonl **out);
/* Appends line and a newline in one write. RT_ERR_IO names the file and the reason. */
rt_status rt_jsonl_append(rt_jsonl *log, const char *line);
/* fsync and close (their errors reported); frees log. Accepts NULL. */
rt_status rt_jsonl_close(rt_jsonl *log);

#endif
