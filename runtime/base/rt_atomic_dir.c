/* An output folder put in place whole (rt_atomic_dir_replace in rt_atomic.h). renameat2's
 * RENAME_EXCHANGE swaps two paths in one step (Linux 3.15, glibc 2.28), so there is no moment
 * where the final name holds neither folder. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/base/rt_atomic.h"
#include "runtime/base/rt_log.h"

/* An earlier export's weights, which the new folder replaces rather than keeps beside its own
 * (HF's save_pretrained drops such files too): *.safetensors, *.bin and their index files. */
static bool dir_weight_file(const char *name) {
    const size_t n = strlen(name);
    const char *ext[4] = {".safetensors", ".bin", ".safetensors.index.json", ".bin.index.json"};
    for (int i = 0; i < 4; i++) {
        const size_t e = strlen(ext[i]);
        if (n >= e && strcmp(name + n - e, ext[i]) == 0) return true;
    }
    return false;
}

/* Moves the entries of old that fresh lacks (other than weights) into fresh: a user's own files
 * beside an export stay with it. */
static rt_status dir_carry_over(const char *old, const char *fresh) {
    DIR *d = opendir(old);
    if (!d) return rt_errorf(RT_ERR_IO, "%s: cannot read the folder being replaced: %s", old, strerror(errno));
    rt_status st = RT_OK;
    struct dirent *e;
    char from[4096], to[4096];
    struct stat sb;
    while (st == RT_OK && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || dir_weight_file(e->d_name)) continue;
        if ((size_t)snprintf(from, sizeof from, "%s/%s", old, e->d_name) >= sizeof from ||
            (size_t)snprintf(to, sizeof to, "%s/%s", fresh, e->d_name) >= sizeof to)
            continue;
        if (lstat(to, &sb) == 0) continue; /* the new folder's own */
        if (rename(from, to) != 0)
            st = rt_errorf(RT_ERR_IO, "%s: cannot move it into the new folder %s: %s", from, fresh, strerror(errno));
    }
    closedir(d);
    return st;
}

rt_status rt_atomic_dir_replace(const char *partial, const char *final_dir) {
    struct stat sb;
    if (lstat(final_dir, &sb) != 0) {
        if (errno != ENOENT) return rt_errorf(RT_ERR_IO, "%s: %s", final_dir, strerror(errno));
        if (rename(partial, final_dir) != 0)
            return rt_errorf(RT_ERR_IO, "%s: cannot rename %s to it: %s", final_dir, partial, strerror(errno));
        return RT_OK;
    }
    if (S_ISLNK(sb.st_mode))
        return rt_errorf(RT_ERR_IO, "%s is a symbolic link: name the folder it points to", final_dir);
    if (!S_ISDIR(sb.st_mode)) return rt_errorf(RT_ERR_IO, "%s exists and is not a folder", final_dir);
    rt_status st = dir_carry_over(final_dir, partial);
    if (st != RT_OK) return st;
    if (renameat2(AT_FDCWD, partial, AT_FDCWD, final_dir, RENAME_EXCHANGE) != 0)
        return rt_errorf(RT_ERR_IO, "%s: cannot put the new folder %s in its place: %s", final_dir, partial,
                         strerror(errno));
    /* partial now names the old folder: its export files go */
    rt_atomic_partial_dir_remove(partial);
    if (lstat(partial, &sb) == 0) rt_log_warn("%s: the replaced folder's leftovers are kept here", partial);
    return RT_OK;
}
