/* Files and folders (see rt_fs.h). */
#include "runtime/base/rt_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *rt_fs_kind(mode_t m) {
    return S_ISFIFO(m)   ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISDIR(m)  ? "a folder"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

/* mkdir of one level of dir: made, or a folder already there (a file of that name is not). */
static rt_status rt_make_dir(const char *path, const char *dir, const char *what) {
    if (mkdir(path, 0777) == 0) return RT_OK;
    const int err = errno;
    struct stat sb;
    if (err == EEXIST && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return RT_OK;
    if (err == EEXIST && stat(path, &sb) == 0)
        return rt_errorf(RT_ERR_IO, "%s %s: %s is %s, not a folder", what, dir, path,
                         S_ISREG(sb.st_mode) ? "a file" : rt_fs_kind(sb.st_mode));
    return rt_errorf(RT_ERR_IO, "%s %s: cannot create %s: %s", what, dir, path, strerror(err));
}

rt_status rt_make_dirs(const char *dir, const char *what) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return rt_errorf(RT_ERR_USAGE, "%s: path is too long", what);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/' || p[-1] == '/') continue;
        *p = '\0';
        rt_status st = rt_make_dir(path, dir, what);
        *p = '/';
        if (st != RT_OK) return st;
    }
    return rt_make_dir(path, dir, what);
}

rt_status rt_read_file(const char *path, size_t limit, char **data, size_t *n) {
    rt_status st = RT_OK;
    *data = NULL;
    *n = 0;
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return rt_errorf(RT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    char *buf = NULL;
    if (fstat(fd, &sb) != 0) RT_FAIL(RT_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) RT_FAIL(RT_ERR_IO, "%s: %s, not a file to read", path, rt_fs_kind(sb.st_mode));
    const size_t size = (size_t)sb.st_size;
    if (limit && size > limit)
        RT_FAIL(RT_ERR_FORMAT, "%s: %zu bytes, more than the %zu such a file may hold", path, size, limit);
    buf = malloc(size + 1);
    if (!buf) RT_FAIL(RT_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, size + 1);
    size_t done = 0;
    while (done < size) {
        ssize_t r = read(fd, buf + done, size - done);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) RT_FAIL(RT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        if (r == 0) RT_FAIL(RT_ERR_IO, "%s: the file shrank while it was read", path);
        done += (size_t)r;
    }
    buf[size] = '\0';
    *data = buf;
    *n = size;
    buf = NULL;
fail:
    free(buf);
    close(fd);
    return st;
}

rt_status rt_check_readable(const char *path, const char *what) {
    struct stat sb;
    if (stat(path, &sb) != 0) return rt_errorf(RT_ERR_IO, "%s %s: cannot open: %s", what, path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) return rt_errorf(RT_ERR_IO, "%s %s: a folder, not a file to read", what, path);
    if (access(path, R_OK) != 0) return rt_errorf(RT_ERR_IO, "%s %s: cannot read: %s", what, path, strerror(errno));
    return RT_OK;
}

rt_status rt_check_creatable(const char *path, const char *what) {
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return rt_errorf(RT_ERR_USAGE, "%s: path is too long", what);
    struct stat sb;
    for (;;) { /* up to the nearest parent that exists: "" is the current folder */
        char *slash = strrchr(dir, '/');
        if (!slash) {
            snprintf(dir, sizeof dir, ".");
        } else {
            while (slash > dir && slash[-1] == '/') slash--; /* "a//b" */
            slash[slash == dir ? 1 : 0] = '\0';              /* "/x": the root */
        }
        if (stat(dir, &sb) == 0) break;
        if (errno != ENOENT)
            return rt_errorf(RT_ERR_IO, "%s %s: cannot reach %s: %s", what, path, dir, strerror(errno));
        if (!slash) return rt_errorf(RT_ERR_IO, "%s %s: the current folder is gone", what, path);
    }
    if (!S_ISDIR(sb.st_mode))
        return rt_errorf(RT_ERR_IO, "%s %s: %s is %s, not a folder", what, path, dir,
                         S_ISREG(sb.st_mode) ? "a file" : rt_fs_kind(sb.st_mode));
    if (access(dir, W_OK | X_OK) != 0)
        return rt_errorf(RT_ERR_IO, "%s %s: cannot write in %s: %s", what, path, dir, strerror(errno));
    return RT_OK;
}
