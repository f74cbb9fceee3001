/* Files and folders a user names: making a folder with its parents (mkdir -p), for every place
 * that writes into one (--save-dir, --cache-dir), reading a whole small file (a config, a
 * tokenizer's vocabulary, an index), and checking early that a data file is there to read. */
#ifndef RT_FS_H
#define RT_FS_H

#include "runtime/base/rt_status.h"

/* Makes dir and its missing parents with the umask's mode. RT_ERR_IO naming `what` (the option,
 * e.g. "--save-dir"), dir and the part that could not be made. */
rt_status rt_make_dirs(const char *dir, const char *what);

/* The whole of a regular file, NUL-terminated (*data malloc'd, *n bytes without the NUL). Anything
 * else (a FIFO, which would wait for a writer; /dev/zero or /dev/urandom, which never end) is
 * RT_ERR_IO naming path and what it is, and a file past limit bytes (0: no limit) RT_ERR_FORMAT
 * naming both sizes, before anything is allocated. */
rt_status rt_read_file(const char *path, size_t limit, char **data, size_t *n);

/* Whether path (named by `what`: an option such as "--train-file", or "SRC") is there to read: a
 * file this process may read, or a pipe (process substitution's /dev/fd/N), not a folder. Checked
 * without opening it (a FIFO's writer would see its reader leave), so that a misspelled data
 * file is one line before the minutes of loading a model's weights. RT_ERR_IO naming both. */
rt_status rt_check_readable(const char *path, const char *what);

/* Whether path (named by `what`: "--save-hf") can be made: the nearest of its parent folders that
 * exists is a folder this process may write in (the missing ones are made then, as rt_make_dirs
 * does). An output written after training is checked before it, so that hours of training do not
 * end in "cannot create". RT_ERR_IO naming both and the folder. */
rt_status rt_check_creatable(const char *path, const char *what);

#endif
