/* Claiming a run folder for one run (see run_dir.h). */
#include "apps/common/run_dir.h"

#include <errno.h>
#include <limits.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoints/ckpt_native.h"
#include "runtime/base/rt_log.h"

/* Whether --resume-from names dir itself or a file inside it: that run continues there. */
static bool run_dir_contains(const char *dir, const char *from) {
    struct stat sb;
    char *copy = rt_xstrdup(from);
    const bool is_dir = stat(from, &sb) == 0 && S_ISDIR(sb.st_mode);
    char *d = realpath(dir, NULL), *fd = realpath(is_dir ? from : dirname(copy), NULL);
    const bool same = d && fd && strcmp(d, fd) == 0;
    free(d);
    free(fd);
    free(copy);
    return same;
}

rt_status run_dir_claim(const char *dir, bool resume, const char *resume_from, bool overwrite) {
    if (overwrite && (resume || resume_from))
        return rt_errorf(RT_ERR_USAGE, "--overwrite starts a new run in --save-dir, --resume%s continues one: pass one",
                         resume_from ? "-from" : "");
    if (resume && !resume_from) return RT_OK;
    if (resume_from && run_dir_contains(dir, resume_from)) return RT_OK;
    rt_status st = RT_OK;
    ckpt_native_entry *list = NULL;
    size_t n = 0;
    RT_TRY(ckpt_native_list(dir, NULL, &list, &n));
    char metrics[PATH_MAX + 32];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);
    struct stat sb;
    /* anything but an empty regular file counts: a link or a FIFO there is not this run's either */
    const bool has_metrics = lstat(metrics, &sb) == 0 && !(S_ISREG(sb.st_mode) && sb.st_size == 0);
    if (n == 0 && !has_metrics) goto fail;
    if (!overwrite) {
        char what[PATH_MAX + 64] = "";
        if (n) {
            char *copy = rt_xstrdup(list[n - 1].path);
            snprintf(what, sizeof what, "%s%s", basename(copy), n > 1 ? " and older checkpoints" : "");
            free(copy);
        }
        RT_FAIL(RT_ERR_USAGE,
                "--save-dir %s holds an earlier run (%s%s%s): pass --resume to continue it, --overwrite to remove "
                "its checkpoints and metrics.jsonl and start over, or another --save-dir",
                dir, what, n && has_metrics ? ", " : "", has_metrics ? "metrics.jsonl" : "");
    }
    rt_log_info("--overwrite: %s's %zu checkpoint%s%s go once training starts", dir, n, n == 1 ? "" : "s",
                has_metrics ? " and metrics.jsonl" : "");
fail:
    ckpt_native_list_free(list, n);
    return st;
}
