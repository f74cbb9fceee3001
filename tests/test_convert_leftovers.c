/* tz-convert leaves nothing behind: a SIGTERM or SIGINT during a conversion stops it between
 * tensors with an error and removes the half-built folder (import, reshard, export); the next
 * conversion into a folder removes the OUT.partial-PID-* that a killed one left (its pid gone),
 * keeps a live writer's, and only names one without a pid. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoints/ckpt_convert.h"
#include "runtime/base/rt_signal.h"
#include "tests/testutil.h"

static int exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* Entries of dir whose name starts with prefix. */
static int count_prefixed(const char *dir, const char *prefix) {
    char cmd[1200];
    int n = 0;
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c '^%s'", dir, prefix);
    FILE *p = popen(cmd, "r");
    if (p && fscanf(p, "%d", &n) != 1) n = -1;
    if (p) pclose(p);
    return n;
}

static void make_partial(const char *path) {
    char file[900];
    TZ_EXPECT(mkdir(path, 0755) == 0, "mkdir %s", path);
    snprintf(file, sizeof file, "%s/model-tp00.tzck", path);
    FILE *f = fopen(file, "w");
    TZ_EXPECT(f && fputs("half", f) >= 0 && fclose(f) == 0, "write %s", file);
}

int main(void) {
    const char *dir = tz_tmpdir(), *tiny = tz_data_path("tiny-gpt2");
    char out[700], out2[700], out3[700];
    snprintf(out, sizeof out, "%s/tg", dir);
    snprintf(out2, sizeof out2, "%s/tg-reshard", dir);
    snprintf(out3, sizeof out3, "%s/tg-export", dir);
    ckpt_import_opts o = {.src = tiny, .out = out, .tp = 1, .keep_dtype = true};

    /* a stop request: every conversion fails at its first tensor and leaves nothing */
    rt_signal_guard g;
    rt_signal_catch_stop(&g);
    raise(SIGTERM);
    rt_status st = ckpt_convert_import(&o, NULL);
    TZ_EXPECT(st == RT_ERR_RUNTIME && strstr(rt_error_message(), "import stopped by SIGTERM after 1 of"),
              "import: %s '%s'", rt_status_name(st), rt_error_message());
    TZ_EXPECT(!exists(out) && count_prefixed(dir, "tg.partial-") == 0, "import left %s or a partial folder", out);
    rt_signal_release(&g);
    TZ_EXPECT_OK(ckpt_convert_import(&o, NULL)); /* the source for the other two */
    rt_signal_catch_stop(&g);
    raise(SIGINT);
    st = ckpt_convert_reshard(out, out2, 1, NULL);
    TZ_EXPECT(st == RT_ERR_RUNTIME && strstr(rt_error_message(), "stopped by SIGINT"), "reshard: '%s'",
              rt_error_message());
    st = ckpt_convert_export(out, out3, NULL);
    TZ_EXPECT(st == RT_ERR_RUNTIME && strstr(rt_error_message(), "stopped by SIGINT"), "export: '%s'",
              rt_error_message());
    TZ_EXPECT(!exists(out2) && !exists(out3) && count_prefixed(dir, "tg-") == 0, "reshard or export left a folder");
    rt_signal_release(&g);

    /* leftovers of earlier conversions into out2: a dead writer's goes, a live one's and one
     * without a pid stay */
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char stale[900], live[900], old[900];
    snprintf(stale, sizeof stale, "%s.partial-%ld-AbC123", out2, (long)dead);
    snprintf(live, sizeof live, "%s.partial-%ld-XyZ789", out2, (long)getppid());
    snprintf(old, sizeof old, "%s.partial-Q1w2E3", out2);
    make_partial(stale);
    make_partial(live);
    make_partial(old);
    TZ_EXPECT_OK(ckpt_convert_reshard(out, out2, 1, NULL));
    TZ_EXPECT(exists(out2) && !exists(stale), "the dead writer's folder is removed");
    TZ_EXPECT(exists(live) && exists(old), "a live writer's folder and one without a pid stay");
    return tz_test_result("test_convert_leftovers");
}
