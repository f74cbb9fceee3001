/* Files and folders a user names: making a folder with its parents (mkdir -p), for every place
 * that writes into one (--save-dir, --cache-dir), and reading a whole small file (a config, a
 * tokenizer's vocabulary, an index). */
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

#endif
