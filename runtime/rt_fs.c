/* Folders (see rt_fs.h). */
#include "runtime/rt_fs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

rt_status rt_make_dirs(const char *dir, const char *what) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return rt_errorf(RT_ERR_USAGE, "%s: path is too long", what);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return rt_errorf(RT_ERR_IO, "%s %s: cannot create %s: %s", what, dir, path, strerror(errno));
        *p = '/';
    }
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return rt_errorf(RT_ERR_IO, "%s %s: cannot create it: %s", what, dir, strerror(errno));
    return RT_OK;
}
