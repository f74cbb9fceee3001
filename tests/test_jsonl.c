/* metrics.jsonl's writer (runtime/base/rt_jsonl.c): a resume cuts the file back to the records of
 * the resumed step (a half-written last line dropped), appends are checked (a refused write is
 * RT_ERR_IO naming the file), and a symlink planted at the name is refused, never followed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/base/rt_jsonl.h"
#include "tests/testutil.h"

static char *read_text(const char *path) {
    static char buf[4096];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    return buf;
}

static const char *k_log = "{\"type\":\"train\",\"step\":2,\"loss\":1}\n"
                           "{\"type\":\"eval\",\"step\":2,\"accuracy\":0.5}\n"
                           "{\"type\":\"train\",\"step\":4,\"loss\":0.9}\n"
                           "{\"type\":\"train\",\"step\":6,\"loss\":0.8}\n"
                           "{\"type\":\"eval\",\"step\":6,\"accuracy\":0.6}\n"
                           "{\"type\":\"train\",\"step\":8,\"lo";

int main(void) {
    const char *dir = tz_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    rt_jsonl *log = NULL;

    /* resume at step 4: steps 6 and 8 (half a line) go, the rest stays byte for byte */
    tz_write_text(path, k_log);
    TZ_EXPECT_OK(rt_jsonl_open(path, 4, &log));
    TZ_EXPECT_OK(rt_jsonl_append(log, "{\"type\":\"train\",\"step\":5}"));
    TZ_EXPECT_OK(rt_jsonl_close(log));
    TZ_EXPECT(strcmp(read_text(path), "{\"type\":\"train\",\"step\":2,\"loss\":1}\n"
                                      "{\"type\":\"eval\",\"step\":2,\"accuracy\":0.5}\n"
                                      "{\"type\":\"train\",\"step\":4,\"loss\":0.9}\n"
                                      "{\"type\":\"train\",\"step\":5}\n") == 0,
              "cut back to step 4, then appended:\n%s", read_text(path));
    /* resume at step 0 (no checkpoint yet): everything the killed run logged goes */
    tz_write_text(path, k_log);
    TZ_EXPECT_OK(rt_jsonl_open(path, 0, &log));
    TZ_EXPECT_OK(rt_jsonl_close(log));
    TZ_EXPECT(read_text(path)[0] == '\0', "cut back to nothing: '%s'", read_text(path));
    /* no resume: nothing is cut, not even a half line (it is the caller's old run) */
    tz_write_text(path, k_log);
    TZ_EXPECT_OK(rt_jsonl_open(path, -1, &log));
    TZ_EXPECT_OK(rt_jsonl_close(log));
    TZ_EXPECT(strcmp(read_text(path), k_log) == 0, "appending keeps every line");
    /* a new file */
    char fresh[600];
    snprintf(fresh, sizeof fresh, "%s/new.jsonl", dir);
    TZ_EXPECT_OK(rt_jsonl_open(fresh, 3, &log));
    TZ_EXPECT_OK(rt_jsonl_append(log, "{}"));
    TZ_EXPECT_OK(rt_jsonl_close(log));
    TZ_EXPECT(strcmp(read_text(fresh), "{}\n") == 0, "new file");
    TZ_EXPECT_OK(rt_jsonl_close(NULL));

    /* a refused write (a file size limit standing in for a full disk) is an error naming the file */
    TZ_EXPECT_OK(rt_jsonl_open(fresh, -1, &log));
    struct rlimit old_limit, small = {8, 8};
    TZ_EXPECT(getrlimit(RLIMIT_FSIZE, &old_limit) == 0, "getrlimit");
    small.rlim_max = old_limit.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    TZ_EXPECT(setrlimit(RLIMIT_FSIZE, &small) == 0, "setrlimit");
    rt_status st = log ? rt_jsonl_append(log, "{\"type\":\"train\",\"step\":1}") : RT_OK;
    TZ_EXPECT(setrlimit(RLIMIT_FSIZE, &old_limit) == 0, "restore the limit");
    signal(SIGXFSZ, SIG_DFL);
    TZ_EXPECT(st == RT_ERR_IO && strstr(rt_error_message(), fresh) && strstr(rt_error_message(), "File too large"),
              "refused write: %s '%s'", rt_status_name(st), rt_error_message());
    TZ_EXPECT_OK(rt_jsonl_close(log));

    /* a symlink planted at the name is refused and its target keeps its bytes */
    char victim[600], link_path[600];
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(link_path, sizeof link_path, "%s/linked.jsonl", dir);
    tz_write_text(victim, "precious\n");
    TZ_EXPECT(symlink(victim, link_path) == 0, "symlink");
    log = NULL;
    st = rt_jsonl_open(link_path, -1, &log);
    TZ_EXPECT(st == RT_ERR_IO && log == NULL && strstr(rt_error_message(), link_path), "planted link: '%s'",
              rt_error_message());
    TZ_EXPECT(strcmp(read_text(victim), "precious\n") == 0, "the victim is untouched");
    return tz_test_result("test_jsonl");
}
