/* Temporary file + fsync + rename (see rt_atomic.h). A FILE* buffers the many small writes
 * of a checkpoint; errors that stdio defers (ENOSPC on a buffered write) surface at fflush or
 * fsync, and every one of those is checked before the rename. */
#include "runtime/base/rt_atomic.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/base/rt_log.h"

struct rt_atomic_file {
    char *path;     /* target */
    char *tmp_path; /* "<path>.tmp.<pid>.<k>", the first k not taken */
    FILE *fp;
    uint64_t offset;
    uint64_t flushed; /* bytes already handed to the kernel for writeback */
    int failed;       /* a write failed: only abort is meaningful now */
};

static void atomic_free(rt_atomic_file *f) {
    free(f->path);
    free(f->tmp_path);
    free(f);
}

rt_status rt_atomic_begin(const char *path, rt_atomic_file **out) {
    rt_status st = RT_OK;
    *out = NULL;
    rt_atomic_file *f = rt_xcalloc(1, sizeof *f);
    f->path = rt_xstrdup(path);
    size_t n = strlen(path) + 48;
    f->tmp_path = rt_xmalloc(n);
    /* A fresh name, created exclusively: O_EXCL fails on anything already there, a symlink
     * planted at the name included (O_NOFOLLOW says so for the final component), so no write
     * ever lands in a file we did not create. Mode 0666 lets the umask decide, as for any file. */
    int fd = -1;
    for (int k = 0; fd < 0 && k < 1000; k++) {
        snprintf(f->tmp_path, n, "%s.tmp.%ld.%d", path, (long)getpid(), k);
        fd = open(f->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) RT_FAIL(RT_ERR_IO, "%s: cannot create temporary file %s: %s", path, f->tmp_path, strerror(errno));
    f->fp = fdopen(fd, "wb");
    if (!f->fp) {
        int e = errno;
        close(fd);
        unlink(f->tmp_path);
        RT_FAIL(RT_ERR_IO, "%s: fdopen failed: %s", path, strerror(e));
    }
    *out = f;
    return RT_OK;
fail:
    atomic_free(f);
    return st;
}

rt_status rt_atomic_write(rt_atomic_file *f, const void *data, size_t n) {
    if (f->failed) return rt_errorf(RT_ERR_IO, "%s: write after an earlier failure", f->path);
    if (n && fwrite(data, 1, n, f->fp) != n) {
        f->failed = 1;
        return rt_errorf(RT_ERR_IO, "%s: write failed: %s", f->path, strerror(errno));
    }
    f->offset += n;
    /* start the disk writes of every 64 MiB now, so that the fsync at commit waits for the
     * tail only, not for a whole multi-GB checkpoint (POSIX_FADV_DONTNEED starts writeback on
     * Linux, and keeps written checkpoint data from crowding the page cache) */
    if (f->offset - f->flushed >= ((uint64_t)64 << 20)) {
        if (fflush(f->fp) != 0) {
            f->failed = 1;
            return rt_errorf(RT_ERR_IO, "%s: write failed: %s", f->path, strerror(errno));
        }
        (void)posix_fadvise(fileno(f->fp), (off_t)f->flushed, (off_t)(f->offset - f->flushed), POSIX_FADV_DONTNEED);
        f->flushed = f->offset;
    }
    return RT_OK;
}

rt_status rt_atomic_pad(rt_atomic_file *f, size_t align) {
    static const unsigned char zeros[256];
    RT_CHECK(align > 0 && (align & (align - 1)) == 0 && align <= sizeof zeros, "align=%zu", align);
    size_t pad = (size_t)((align - (f->offset & (align - 1))) & (align - 1));
    return rt_atomic_write(f, zeros, pad);
}

uint64_t rt_atomic_tell(const rt_atomic_file *f) { return f->offset; }

/* fsync the directory holding path so the rename itself is durable. Some file systems refuse
 * fsync on a directory (EINVAL); the rename has happened by then, so that is not an error. */
static rt_status fsync_parent_dir(const char *path) {
    char *dir = rt_xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (!slash) {
        strcpy(dir, ".");
    } else if (slash == dir) {
        dir[1] = '\0';
    } else {
        *slash = '\0';
    }
    rt_status st = RT_OK;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
            st = rt_errorf(RT_ERR_IO, "%s: fsync of directory %s failed: %s", path, dir, strerror(errno));
        close(fd);
    }
    free(dir);
    return st;
}

rt_status rt_atomic_commit(rt_atomic_file *f) {
    rt_status st = RT_OK;
    if (f->failed) RT_FAIL(RT_ERR_IO, "%s: not committed: an earlier write failed", f->path);
    if (fflush(f->fp) != 0) RT_FAIL(RT_ERR_IO, "%s: write failed: %s", f->path, strerror(errno));
    if (fsync(fileno(f->fp)) != 0) RT_FAIL(RT_ERR_IO, "%s: fsync failed: %s", f->path, strerror(errno));
    FILE *fp = f->fp;
    f->fp = NULL;
    if (fclose(fp) != 0) RT_FAIL(RT_ERR_IO, "%s: close failed: %s", f->path, strerror(errno));
    if (rename(f->tmp_path, f->path) != 0)
        RT_FAIL(RT_ERR_IO, "%s: cannot rename %s over it: %s", f->path, f->tmp_path, strerror(errno));
    st = fsync_parent_dir(f->path);
    atomic_free(f);
    return st;
fail:
    rt_atomic_abort(f);
    return st;
}

void rt_atomic_abort(rt_atomic_file *f) {
    if (!f) return;
    if (f->fp) fclose(f->fp);
    unlink(f->tmp_path);
    atomic_free(f);
}

rt_status rt_atomic_write_file(const char *path, const void *data, size_t n) {
    rt_status st = RT_OK;
    rt_atomic_file *f = NULL;
    RT_TRY(rt_atomic_begin(path, &f));
    RT_TRY(rt_atomic_write(f, data, n));
    st = rt_atomic_commit(f);
    f = NULL;
fail:
    rt_atomic_abort(f);
    return st;
}

/* "<something>.tmp.<digits>" or "<something>.tmp.<digits>.<digits>": the names begin makes. */
static int is_temp_name(const char *name) {
    const char *t = strstr(name, ".tmp.");
    if (!t || t == name) return 0;
    for (const char *next; (next = strstr(t + 1, ".tmp.")) != NULL;) t = next; /* the last one */
    const char *p = t + 5;
    int dots = 0;
    if (!isdigit((unsigned char)*p)) return 0;
    for (; *p; p++) {
        if (*p == '.' && dots == 0 && isdigit((unsigned char)p[1]))
            dots++;
        else if (!isdigit((unsigned char)*p))
            return 0;
    }
    return 1;
}

/* Whether process pid is gone on this machine (its leftovers are a killed writer's). */
static bool pid_gone(long pid) { return pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH; }

/* The writer's pid in a temporary name ("...tmp.<pid>[.<k>]"), 0 if none. */
static long temp_name_pid(const char *name) {
    const char *t = strstr(name, ".tmp."), *next;
    while (t && (next = strstr(t + 1, ".tmp.")) != NULL) t = next;
    return t ? strtol(t + 5, NULL, 10) : 0;
}

/* The temporary files in dir whose names begin with prefix (NULL: any), all of them or only those
 * whose writer's process is gone. */
static rt_status remove_temps(const char *dir, const char *prefix, bool dead_only, int *n_removed) {
    if (n_removed) *n_removed = 0;
    DIR *d = opendir(dir);
    if (!d) return rt_errorf(RT_ERR_IO, "%s: cannot list it: %s", dir, strerror(errno));
    struct dirent *de;
    char path[4096];
    while ((de = readdir(d)) != NULL) {
        if (!is_temp_name(de->d_name) || (prefix && strncmp(de->d_name, prefix, strlen(prefix)) != 0)) continue;
        if (dead_only) {
            const long pid = temp_name_pid(de->d_name);
            if (!pid_gone(pid)) continue; /* still writing, or no pid to tell */
        }
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) >= (int)sizeof path) continue;
        struct stat sb;
        if (lstat(path, &sb) != 0 || S_ISDIR(sb.st_mode)) continue;
        if (unlink(path) == 0) {
            rt_log_warn("removed %s, a temporary file left by a run that was killed while writing", path);
            if (n_removed) (*n_removed)++;
        } else {
            rt_log_warn("cannot remove %s, a temporary file left by a killed run: %s", path, strerror(errno));
        }
    }
    closedir(d);
    return RT_OK;
}

rt_status rt_atomic_remove_stale(const char *dir, int *n_removed) { return remove_temps(dir, NULL, false, n_removed); }

rt_status rt_atomic_remove_dead(const char *dir, const char *prefix, int *n_removed) {
    return remove_temps(dir, prefix, true, n_removed);
}

void rt_atomic_partial_dir_remove(const char *partial) {
    DIR *d = opendir(partial);
    if (!d) return;
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if ((size_t)snprintf(p, sizeof p, "%s/%s", partial, e->d_name) < sizeof p) (void)unlink(p);
    }
    closedir(d);
    (void)rmdir(partial);
}

/* The partial folders of final_dir whose writer is gone: "<base>.partial-<pid>-<k>" with no
 * process pid. One without a pid (an older tunezoo's) is only named: it may still be in use. */
static void remove_stale_partials(const char *final_dir) {
    char parent[4096] = ".", prefix[512];
    const char *base = final_dir, *slash = strrchr(final_dir, '/');
    if (slash) {
        base = slash + 1;
        int len = slash == final_dir ? 1 : (int)(slash - final_dir); /* "/x": the parent is "/" */
        snprintf(parent, sizeof parent, "%.*s", len, final_dir);
    }
    snprintf(prefix, sizeof prefix, "%s.partial-", base);
    DIR *d = opendir(parent);
    if (!d) return;
    struct dirent *e;
    char path[4600];
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        snprintf(path, sizeof path, "%s/%s", parent, e->d_name);
        char *end = NULL;
        long pid = strtol(e->d_name + strlen(prefix), &end, 10);
        if (end == e->d_name + strlen(prefix) || *end != '-') {
            rt_log_warn("%s looks like an unfinished output folder; remove it if nothing is writing it", path);
            continue;
        }
        if (pid <= 0 || pid_gone(pid)) {
            rt_atomic_partial_dir_remove(path);
            rt_log_warn("removed %s, an unfinished output folder of a process (pid %ld) that was killed", path, pid);
        }
    }
    closedir(d);
}

rt_status rt_atomic_partial_dir(const char *final_dir, char **partial) {
    *partial = NULL;
    remove_stale_partials(final_dir);
    size_t n = strlen(final_dir) + 48;
    char *path = rt_xmalloc(n);
    /* mkdir, not mkdtemp: it fails on anything already at the name (a planted link included)
     * and lets the umask decide the mode, as for any folder we make */
    for (int k = 0; k < 1000; k++) {
        snprintf(path, n, "%s.partial-%ld-%d", final_dir, (long)getpid(), k);
        if (mkdir(path, 0777) == 0) {
            *partial = path;
            return RT_OK;
        }
        if (errno != EEXIST) break;
    }
    rt_status st = rt_errorf(RT_ERR_IO, "%s: cannot create the output folder %s: %s", final_dir, path, strerror(errno));
    free(path);
    return st;
}
