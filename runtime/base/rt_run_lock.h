/* One run per run folder: an advisory lock (flock) on DIR/.lock, held for the whole run.
 *
 * Two runs writing one --save-dir would interleave metrics.jsonl and overwrite each other's
 * checkpoints. The first run takes the lock and writes "pid PID host HOST" into the file; a
 * second run gets a one-line error naming the folder and that holder. The kernel drops a
 * flock when its process dies, however it dies, so a killed run leaves no stale lock: the
 * file stays, the lock does not. Under mpirun the first rank alone takes it.
 *
 *     rt_run_lock *lock = NULL;
 *     RT_TRY(rt_run_lock_acquire(save_dir, &lock));
 *     ... the run ...
 *     rt_run_lock_release(lock);   // NULL is fine; exiting releases it too
 */
#ifndef RT_RUN_LOCK_H
#define RT_RUN_LOCK_H

#include "runtime/base/rt_status.h"

typedef struct rt_run_lock rt_run_lock;

/* Locks dir (which must exist) or fails with RT_ERR_IO: held by another run (its pid and host
 * named), or the lock file cannot be created. A symlink planted at DIR/.lock is not followed. */
rt_status rt_run_lock_acquire(const char *dir, rt_run_lock **out);
/* Unlocks and frees; the .lock file stays (removing it would race a run that opened it). */
void rt_run_lock_release(rt_run_lock *lock);

#endif
