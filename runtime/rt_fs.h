/* Folders: making one with its parents (mkdir -p), for every place that writes into a folder a
 * user names (--save-dir, --cache-dir). */
#ifndef RT_FS_H
#define RT_FS_H

#include "runtime/rt_status.h"

/* Makes dir and its missing parents with the umask's mode. RT_ERR_IO naming `what` (the option,
 * e.g. "--save-dir"), dir and the part that could not be made. */
rt_status rt_make_dirs(const char *dir, const char *what);

#endif
