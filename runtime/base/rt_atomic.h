/* Atomic file writing for everything tunezoo writes (checkpoints, safetensors, caches).
 *
 * Data goes to a new file "<path>.tmp.<pid>.<k>" next to the target, created exclusively (a
 * file or a symlink already at that name is never opened: the next k is tried); commit
 * flushes and fsyncs it, renames it over path and fsyncs the directory. A crash or an error at any point therefore leaves
 * either the old file or the complete new one under path, never half of one. Any failure
 * (no space, no permission, missing directory) returns RT_ERR_IO naming the path and the
 * system's reason, and removes the temporary file.
 *
 *     rt_atomic_file *f = NULL;
 *     RT_TRY(rt_atomic_begin(path, &f));
 *     RT_TRY(rt_atomic_write(f, buf, n));
 *     st = rt_atomic_commit(f);   // consumes f, success or not
 *     f = NULL;
 *   fail:
 *     rt_atomic_abort(f);         // NULL is fine
 */
#ifndef RT_ATOMIC_H
#define RT_ATOMIC_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/base/rt_status.h"

typedef struct rt_atomic_file rt_atomic_file;

rt_status rt_atomic_begin(const char *path, rt_atomic_file **out);
/* Appends n bytes. After a failure the handle only accepts abort (commit fails too). */
rt_status rt_atomic_write(rt_atomic_file *f, const void *data, size_t n);
/* Appends zero bytes until the file offset is a multiple of align (a power of two). */
rt_status rt_atomic_pad(rt_atomic_file *f, size_t align);
/* Bytes written so far. */
uint64_t rt_atomic_tell(const rt_atomic_file *f);
/* Flush, fsync, rename over the target, fsync the directory. Frees f in every case. */
rt_status rt_atomic_commit(rt_atomic_file *f);
/* Removes the temporary file and frees f; the target is untouched. Accepts NULL. */
void rt_atomic_abort(rt_atomic_file *f);

/* Whole-buffer convenience: begin, write, commit. */
rt_status rt_atomic_write_file(const char *path, const void *data, size_t n);

/* An output folder built beside its final name and renamed into place when complete:
 * "<final>.partial-<pid>-<k>" (the first k free), with the umask's mode. First removes the
 * partial folders of final that a killed writer left (their pid is gone), naming each in a
 * warning. *partial is malloc'd. */
rt_status rt_atomic_partial_dir(const char *final_dir, char **partial);
/* Removes a partial folder and the files in it (links removed, never followed); best effort. */
void rt_atomic_partial_dir_remove(const char *partial);
/* Puts the complete folder partial in final_dir's place in one step (rt_atomic_dir.c): renamed
 * there when final_dir does not exist; else final_dir's entries that partial lacks, other than an
 * earlier export's weights (*.safetensors, *.bin and their indexes), are moved into partial (a
 * user's own files stay), the two are exchanged atomically, and the old folder's files are
 * removed. A failure before the exchange leaves final_dir whole and partial for the caller to
 * remove; a final_dir that is a link or not a folder is refused. */
rt_status rt_atomic_dir_replace(const char *partial, const char *final_dir);

/* Removes the temporary files a killed writer left in dir ("<name>.tmp.<pid>.<k>", and the older
 * "<name>.tmp.<pid>"), logging a warning that names each; links are removed, never followed.
 * Only for a caller that holds dir's run lock (rt_run_lock.h): then no live writer owns them.
 * *n_removed (may be NULL) counts them. A folder that cannot be read is RT_ERR_IO. */
rt_status rt_atomic_remove_stale(const char *dir, int *n_removed);
/* The same for a folder without a run lock (a shared cache): only the temporary files whose names
 * begin with prefix and whose writer (the pid in the name) is gone on this machine. */
rt_status rt_atomic_remove_dead(const char *dir, const char *prefix, int *n_removed);

#endif
