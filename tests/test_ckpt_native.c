/* The .tzck container: round trip, corruption (every single byte flipped) and truncation
 * (every length) detected with RT_ERR_FORMAT-family errors, a failed atomic write leaving
 * the previous file byte-identical, and the keep-last-K directory helpers. */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "checkpoints/ckpt_native.h"
#include "runtime/base/rt_atomic.h"
#include "tests/testutil.h"

#define EXPECT_MSG(sub) \
    TZ_EXPECT(strstr(rt_error_message(), (sub)) != NULL, "message '%s' lacks '%s'", rt_error_message(), (sub))

static const char *g_dir;
static const char *g_meta = "{\"step\": 120, \"rng\": [1, 2, 3], \"options\": {\"lr\": 0.0001}}";

static float g_wte[15];
static uint16_t g_m[7];
static int64_t g_rng[4] = {1, -2, 1LL << 40, 7};

static rt_status write_sample(const char *path, const char *meta) {
    rt_status st = RT_OK;
    ckpt_native_writer *w = NULL;
    size_t s_wte[2] = {5, 3}, s_m[1] = {7}, s_rng[1] = {4}, s_empty[2] = {0, 9};
    RT_TRY(ckpt_native_writer_begin(path, meta, &w));
    RT_TRY(ckpt_native_writer_add(w, "wte", RT_F32, 2, s_wte, g_wte));
    RT_TRY(ckpt_native_writer_add(w, "adam.m", RT_BF16, 1, s_m, g_m));
    RT_TRY(ckpt_native_writer_add(w, "empty", RT_F32, 2, s_empty, NULL));
    RT_TRY(ckpt_native_writer_add(w, "rng", RT_I64, 1, s_rng, g_rng));
    float scalar = 3.5f;
    RT_TRY(ckpt_native_writer_add(w, "loss_scale", RT_F32, 0, NULL, &scalar));
    st = ckpt_native_writer_commit(w);
    w = NULL;
fail:
    ckpt_native_writer_abort(w);
    return st;
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, fp);
    fclose(fp);
    return b;
}

static void spit(const char *path, const unsigned char *b, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (n) fwrite(b, 1, n, fp);
    fclose(fp);
}

/* The threaded CRC (pieces joined by crc32_combine) equals zlib's one pass, below, at and above
 * the size where it splits. */
static void test_crc32(void) {
    const size_t sizes[] = {0, 1, 4095, ((size_t)16 << 20) - 1, (size_t)16 << 20, ((size_t)16 << 20) + 17, 100000007};
    unsigned char *b = rt_xmalloc(100000007);
    for (size_t j = 0; j < 100000007; j++) b[j] = (unsigned char)((j * 2654435761u) >> 13);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        uLong c = crc32(0L, Z_NULL, 0);
        for (size_t o = 0; o < sizes[i]; o += 1u << 20)
            c = crc32(c, b + o, (uInt)(sizes[i] - o < (1u << 20) ? sizes[i] - o : (1u << 20)));
        TZ_EXPECT((uint32_t)c == ckpt_native_crc32(b, sizes[i]), "crc32 of %zu bytes", sizes[i]);
    }
    free(b);
}

static void test_round_trip(const char *path) {
    TZ_EXPECT_OK(write_sample(path, g_meta));
    ckpt_native_file *f = NULL;
    TZ_EXPECT_OK(ckpt_native_open(path, &f));
    if (!f) return;
    TZ_EXPECT(strcmp(ckpt_native_metadata(f), g_meta) == 0, "metadata '%s'", ckpt_native_metadata(f));
    TZ_EXPECT(ckpt_native_count(f) == 5, "5 records");
    ckpt_native_record r;
    ckpt_native_record_at(f, 1, &r);
    TZ_EXPECT(strcmp(r.name, "adam.m") == 0, "file order");
    for (size_t i = 0; i < ckpt_native_count(f); i++) {
        ckpt_native_record_at(f, i, &r);
        TZ_EXPECT((uintptr_t)r.data % CKPT_NATIVE_ALIGN == 0, "record %s is 64-byte aligned", r.name);
    }
    TZ_EXPECT_OK(ckpt_native_find(f, "wte", &r));
    TZ_EXPECT(r.dtype == RT_F32 && r.ndim == 2 && r.shape[0] == 5 && r.shape[1] == 3 && r.numel == 15 && r.nbytes == 60,
              "wte record");
    float got[15];
    TZ_EXPECT_OK(ckpt_native_read_f32(f, "wte", got, 15));
    TZ_EXPECT(memcmp(got, g_wte, sizeof got) == 0, "wte bits");
    TZ_EXPECT_OK(ckpt_native_find(f, "adam.m", &r));
    TZ_EXPECT(r.dtype == RT_BF16 && memcmp(r.data, g_m, sizeof g_m) == 0, "bf16 raw bits");
    TZ_EXPECT_OK(ckpt_native_read_f32(f, "adam.m", got, 7));
    TZ_EXPECT(got[3] == rt_bf16_to_f32(g_m[3]), "bf16 converts");
    int64_t rng[4];
    TZ_EXPECT_OK(ckpt_native_read_raw(f, "rng", RT_I64, rng, 4));
    TZ_EXPECT(memcmp(rng, g_rng, sizeof rng) == 0, "rng words");
    TZ_EXPECT_OK(ckpt_native_find(f, "empty", &r));
    TZ_EXPECT(r.numel == 0 && r.shape[1] == 9, "empty record");
    TZ_EXPECT_OK(ckpt_native_read_f32(f, "loss_scale", got, 1));
    TZ_EXPECT(got[0] == 3.5f, "scalar");

    TZ_EXPECT(!ckpt_native_has(f, "nope") && ckpt_native_has(f, "rng"), "has");
    TZ_EXPECT(ckpt_native_find(f, "nope", &r) == RT_ERR_FORMAT, "missing record");
    EXPECT_MSG("no record 'nope'");
    TZ_EXPECT(ckpt_native_read_f32(f, "wte", got, 14) == RT_ERR_FORMAT, "size check");
    EXPECT_MSG("record 'wte' has shape [5, 3] (15 elements), expected 14 elements");
    TZ_EXPECT(ckpt_native_read_f32(f, "rng", got, 4) == RT_ERR_FORMAT, "I64 is not float");
    TZ_EXPECT(ckpt_native_read_raw(f, "rng", RT_I32, rng, 4) == RT_ERR_FORMAT, "dtype must match");
    EXPECT_MSG("has dtype I64, expected I32");
    ckpt_native_close(f);

    /* no records and default metadata */
    char p2[600];
    snprintf(p2, sizeof p2, "%s/empty.tzck", g_dir);
    ckpt_native_writer *w = NULL;
    TZ_EXPECT_OK(ckpt_native_writer_begin(p2, NULL, &w));
    TZ_EXPECT_OK(ckpt_native_writer_commit(w));
    TZ_EXPECT_OK(ckpt_native_open(p2, &f));
    if (f) TZ_EXPECT(ckpt_native_count(f) == 0 && strcmp(ckpt_native_metadata(f), "{}") == 0, "empty checkpoint");
    ckpt_native_close(f);
    TZ_EXPECT(ckpt_native_writer_begin(p2, "{\"step\": }", &w) == RT_ERR_FORMAT, "metadata must be JSON");
    TZ_EXPECT(w == NULL, "no writer on error");
}

static void test_corruption(const char *path) {
    size_t n = 0;
    unsigned char *good = slurp(path, &n);
    TZ_EXPECT(good && n > 200, "sample file read (%zu bytes)", n);
    if (!good) return;
    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad.tzck", g_dir);
    unsigned char *b = malloc(n);
    ckpt_native_file *f = NULL;

    /* a flipped byte anywhere: data, metadata, table, padding, footer */
    size_t undetected = 0, unnamed = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(b, good, n);
        b[i] ^= 0x20;
        spit(bad, b, n);
        rt_status st = ckpt_native_open(bad, &f);
        if (st == RT_OK) {
            if (undetected++ == 0) fprintf(stderr, "flip at byte %zu of %zu not detected\n", i, n);
            ckpt_native_close(f);
            f = NULL;
        } else if (strstr(rt_error_message(), bad) != rt_error_message()) {
            unnamed++;
        }
    }
    TZ_EXPECT(undetected == 0, "%zu of %zu single-byte flips not detected", undetected, n);
    TZ_EXPECT(unnamed == 0, "%zu errors do not start with the path", unnamed);

    /* the specific messages */
    memcpy(b, good, n);
    b[((24 + strlen(g_meta) + 63) & ~(size_t)63) + 5] ^= 1; /* inside the first record (wte) */
    spit(bad, b, n);
    TZ_EXPECT(ckpt_native_open(bad, &f) == RT_ERR_FORMAT, "data flip");
    EXPECT_MSG("record 'wte': CRC mismatch");
    memcpy(b, good, n);
    b[30] ^= 1;
    spit(bad, b, n);
    TZ_EXPECT(ckpt_native_open(bad, &f) == RT_ERR_FORMAT, "metadata flip");
    EXPECT_MSG("metadata CRC mismatch");
    memcpy(b, good, n);
    b[n - 60] ^= 1;
    spit(bad, b, n);
    TZ_EXPECT(ckpt_native_open(bad, &f) == RT_ERR_FORMAT, "table flip");
    EXPECT_MSG("record table CRC mismatch");
    memcpy(b, good, n);
    b[0] = 'X';
    spit(bad, b, n);
    TZ_EXPECT(ckpt_native_open(bad, &f) == RT_ERR_FORMAT, "magic");
    EXPECT_MSG("not a tunezoo checkpoint");
    memcpy(b, good, n);
    b[8] = 2;
    spit(bad, b, n);
    TZ_EXPECT(ckpt_native_open(bad, &f) == RT_ERR_UNSUPPORTED, "version 2");
    EXPECT_MSG("version 2 (this build reads version 1)");

    /* truncated at every length */
    size_t missed = 0;
    for (size_t len = 0; len < n; len++) {
        spit(bad, good, len);
        rt_status st = ckpt_native_open(bad, &f);
        if (st != RT_ERR_FORMAT) {
            if (missed++ == 0)
                fprintf(stderr, "truncation to %zu bytes: %s (%s)\n", len, rt_status_name(st), rt_error_message());
            ckpt_native_close(f);
            f = NULL;
        }
    }
    TZ_EXPECT(missed == 0, "%zu of %zu truncations not reported as format errors", missed, n);
    spit(bad, good, n - 1);
    ckpt_native_open(bad, &f);
    EXPECT_MSG("truncated");

    snprintf(bad, sizeof bad, "%s/missing.tzck", g_dir);
    TZ_EXPECT(ckpt_native_open(bad, &f) == RT_ERR_IO, "missing file");
    EXPECT_MSG("missing.tzck: cannot open");
    free(b);
    free(good);
}

static int count_tmp_files(const char *dir) {
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) n += strstr(de->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

static void test_atomic_failure(void) {
    char sub[600], path[700], tmp[800];
    snprintf(sub, sizeof sub, "%s/atomic", g_dir);
    mkdir(sub, 0755);
    snprintf(path, sizeof path, "%s/step-000001.tzck", sub);
    TZ_EXPECT_OK(write_sample(path, g_meta));
    size_t n0 = 0, n1 = 0;
    unsigned char *before = slurp(path, &n0);

    /* links planted at this process's first temp names (one to a victim file, one to /dev/full)
     * are not followed: the write goes to a fresh name and the victim keeps its bytes */
    char victim[800];
    snprintf(victim, sizeof victim, "%s/victim", sub);
    FILE *vf = fopen(victim, "w");
    TZ_EXPECT(vf && fputs("precious\n", vf) >= 0 && fclose(vf) == 0, "victim written");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.0", path, (long)getpid());
    TZ_EXPECT(symlink(victim, tmp) == 0, "symlink to the victim");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.1", path, (long)getpid());
    TZ_EXPECT(symlink("/dev/full", tmp) == 0, "symlink to /dev/full");
    rt_status st = write_sample(path, g_meta);
    TZ_EXPECT(st == RT_OK, "write beside planted links: %s", rt_error_message());
    struct stat sb;
    TZ_EXPECT(stat(victim, &sb) == 0 && sb.st_size == 9, "the victim is untouched (%lld bytes)", (long long)sb.st_size);
    TZ_EXPECT(lstat(tmp, &sb) == 0 && S_ISLNK(sb.st_mode), "the planted link is left as it was");
    unsigned char *after = slurp(path, &n1);
    TZ_EXPECT(after && n0 == n1 && memcmp(before, after, n0) == 0, "the checkpoint written in full");
    free(after);
    unlink(tmp);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.0", path, (long)getpid());
    unlink(tmp);
    unlink(victim);

    /* a write the kernel refuses (a file size limit stands in for a full disk: the same failed
     * write(2), without root or a small file system) gives RT_ERR_IO and leaves the old file */
    struct rlimit old_limit, small = {16, 16};
    TZ_EXPECT(getrlimit(RLIMIT_FSIZE, &old_limit) == 0, "getrlimit");
    small.rlim_max = old_limit.rlim_max;
    signal(SIGXFSZ, SIG_IGN); /* EFBIG from write(2) instead of the signal */
    TZ_EXPECT(setrlimit(RLIMIT_FSIZE, &small) == 0, "setrlimit");
    st = write_sample(path, "{\"step\": 2}");
    TZ_EXPECT(setrlimit(RLIMIT_FSIZE, &old_limit) == 0, "restore the limit");
    signal(SIGXFSZ, SIG_DFL);
    TZ_EXPECT(st == RT_ERR_IO, "a refused write gives RT_ERR_IO, got %s", rt_status_name(st));
    EXPECT_MSG(path);
    EXPECT_MSG("File too large");
    TZ_EXPECT(!count_tmp_files(sub), "temp file removed");
    after = slurp(path, &n1);
    TZ_EXPECT(after && n0 == n1 && memcmp(before, after, n0) == 0, "old file byte-identical after the failed write");
    free(after);

    /* an unwritable directory (root ignores permissions, so only checked as a user) */
    if (geteuid() != 0) {
        chmod(sub, 0555);
        st = write_sample(path, "{\"step\": 3}");
        TZ_EXPECT(st == RT_ERR_IO, "unwritable dir gives RT_ERR_IO, got %s", rt_status_name(st));
        EXPECT_MSG("Permission denied");
        chmod(sub, 0755);
        after = slurp(path, &n1);
        TZ_EXPECT(after && n0 == n1 && memcmp(before, after, n0) == 0, "old file byte-identical after EACCES");
        free(after);
    }
    /* a directory that does not exist, and a path whose parent is a file */
    char nodir[800];
    snprintf(nodir, sizeof nodir, "%s/missing/step-000001.tzck", sub);
    TZ_EXPECT(write_sample(nodir, "{}") == RT_ERR_IO, "missing directory");
    EXPECT_MSG("missing/step-000001.tzck");
    snprintf(nodir, sizeof nodir, "%s/x.tzck", path);
    TZ_EXPECT(write_sample(nodir, "{}") == RT_ERR_IO, "parent is a file");
    TZ_EXPECT(!count_tmp_files(sub), "no temp files left behind");

    ckpt_native_file *f = NULL;
    TZ_EXPECT_OK(ckpt_native_open(path, &f));
    ckpt_native_close(f);
    free(before);
}

static void touch(const char *dir, const char *name) {
    char p[800];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    fclose(fopen(p, "wb"));
}

static int exists(const char *dir, const char *name) {
    char p[800];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0;
}

static void test_directory(void) {
    char d[600], p[800];
    snprintf(d, sizeof d, "%s/run", g_dir);
    mkdir(d, 0755);
    char **paths = NULL;
    size_t n_paths = 9;
    TZ_EXPECT_OK(ckpt_native_resume_list(d, &paths, &n_paths));
    TZ_EXPECT(n_paths == 0, "nothing to resume: %zu", n_paths);
    free(paths);
    for (int s = 1; s <= 12; s++) {
        if (s == 7) continue;
        TZ_EXPECT_OK(ckpt_native_step_path(d, s * 10, p, sizeof p));
        TZ_EXPECT_OK(write_sample(p, g_meta));
    }
    touch(d, "step-70.tzck"); /* unpadded number: sorts by value, not by name */
    touch(d, "notes.txt");
    touch(d, "step-abc.tzck");
    touch(d, "step-000999.tzck.tmp.4242");
    touch(d, "other-000500.tzck");
    mkdir(strcat(strcpy(p, d), "/step-000990.tzck"), 0755); /* a directory is not a checkpoint */

    ckpt_native_entry *list = NULL;
    size_t n = 0;
    TZ_EXPECT_OK(ckpt_native_list(d, NULL, &list, &n));
    TZ_EXPECT(n == 12, "12 checkpoints, got %zu", n);
    int sorted = 1;
    for (size_t i = 0; i < n; i++) sorted &= list[i].step == (long long)(i + 1) * 10;
    TZ_EXPECT(sorted, "sorted by step");
    TZ_EXPECT(n >= 7 && strstr(list[6].path, "/step-70.tzck") != NULL, "unpadded name in place");
    ckpt_native_list_free(list, n);
    TZ_EXPECT_OK(ckpt_native_list(d, "other-", &list, &n));
    TZ_EXPECT(n == 1 && list[0].step == 500, "other prefix");
    ckpt_native_list_free(list, n);

    /* resume candidates: newest first; a file path lists itself; a missing path is an error */
    TZ_EXPECT_OK(ckpt_native_resume_list(d, &paths, &n_paths));
    TZ_EXPECT(n_paths == 12 && strstr(paths[0], "/step-000120.tzck") && strstr(paths[1], "/step-000110.tzck") &&
                  strstr(paths[11], "/step-000010.tzck"),
              "%zu candidates, newest %s", n_paths, n_paths ? paths[0] : "none");
    char latest[800];
    snprintf(latest, sizeof latest, "%s", n_paths ? paths[0] : "");
    for (size_t i = 0; i < n_paths; i++) free(paths[i]);
    free(paths);
    TZ_EXPECT_OK(ckpt_native_resume_list(latest, &paths, &n_paths));
    TZ_EXPECT(n_paths == 1 && strcmp(paths[0], latest) == 0, "a file path resumes from itself");
    for (size_t i = 0; i < n_paths; i++) free(paths[i]);
    free(paths);
    snprintf(p, sizeof p, "%s/no-such-run", g_dir);
    TZ_EXPECT(ckpt_native_resume_list(p, &paths, &n_paths) == RT_ERR_IO && paths == NULL, "missing path");
    EXPECT_MSG("no-such-run");

    TZ_EXPECT_OK(ckpt_native_prune(d, 3));
    TZ_EXPECT(!exists(d, "step-000010.tzck") && !exists(d, "step-70.tzck") && !exists(d, "step-000090.tzck"),
              "old removed");
    TZ_EXPECT(exists(d, "step-000100.tzck") && exists(d, "step-000110.tzck") && exists(d, "step-000120.tzck"),
              "newest 3 kept");
    TZ_EXPECT(exists(d, "notes.txt") && exists(d, "step-abc.tzck") && exists(d, "step-000999.tzck.tmp.4242") &&
                  exists(d, "other-000500.tzck") && exists(d, "step-000990.tzck"),
              "unrelated files untouched");
    TZ_EXPECT_OK(ckpt_native_prune(d, 5));
    TZ_EXPECT(exists(d, "step-000100.tzck"), "keep more than present removes nothing");
    TZ_EXPECT_OK(ckpt_native_prune(d, 0));
    TZ_EXPECT(!exists(d, "step-000110.tzck") && exists(d, "step-000120.tzck"), "keep 0 still keeps the newest");
    TZ_EXPECT_OK(ckpt_native_list(d, NULL, &list, &n));
    TZ_EXPECT(n == 1, "one left");
    ckpt_native_list_free(list, n);
    snprintf(p, sizeof p, "%s/nope", d);
    TZ_EXPECT(ckpt_native_prune(p, 1) == RT_ERR_IO, "prune of a missing dir");
}

/* A killed writer's temp files go (its links too, unfollowed); everything else stays. */
static void test_remove_stale(void) {
    char d[600], p[800], victim[800];
    snprintf(d, sizeof d, "%s/stale", g_dir);
    mkdir(d, 0755);
    touch(d, "step-000010.tzck.tmp.4242.0");
    touch(d, "metrics.jsonl.tmp.77"); /* the older name */
    touch(d, "step-000010.tzck");
    touch(d, "notes.tmp.txt");
    touch(d, "a.tmp.12x");
    snprintf(victim, sizeof victim, "%s/victim", g_dir);
    FILE *f = fopen(victim, "w");
    TZ_EXPECT(f && fputs("precious\n", f) >= 0 && fclose(f) == 0, "victim written");
    snprintf(p, sizeof p, "%s/step-000020.tzck.tmp.9.1", d);
    TZ_EXPECT(symlink(victim, p) == 0, "symlink");
    snprintf(p, sizeof p, "%s/dir.tmp.5", d);
    mkdir(p, 0755); /* a folder is not a temp file */
    int n = -1;
    TZ_EXPECT_OK(rt_atomic_remove_stale(d, &n));
    TZ_EXPECT(n == 3, "removed %d", n);
    TZ_EXPECT(!exists(d, "step-000010.tzck.tmp.4242.0") && !exists(d, "metrics.jsonl.tmp.77"), "temp files removed");
    struct stat sb;
    TZ_EXPECT(lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode), "folder kept");
    snprintf(p, sizeof p, "%s/step-000020.tzck.tmp.9.1", d);
    TZ_EXPECT(lstat(p, &sb) != 0, "the planted link removed");
    TZ_EXPECT(stat(victim, &sb) == 0 && sb.st_size == 9, "its target untouched");
    TZ_EXPECT(exists(d, "step-000010.tzck") && exists(d, "notes.tmp.txt") && exists(d, "a.tmp.12x"), "others kept");
    snprintf(p, sizeof p, "%s/no-such", d);
    TZ_EXPECT(rt_atomic_remove_stale(p, &n) == RT_ERR_IO && strstr(rt_error_message(), p), "missing folder");
}

int main(void) {
    test_crc32();
    g_dir = tz_tmpdir();
    for (int i = 0; i < 15; i++) g_wte[i] = (float)i * 0.25f - 1.0f;
    for (int i = 0; i < 7; i++) g_m[i] = rt_f32_to_bf16((float)i / 3.0f);
    char path[600];
    snprintf(path, sizeof path, "%s/sample.tzck", g_dir);
    test_round_trip(path);
    test_corruption(path);
    test_atomic_failure();
    test_directory();
    test_remove_stale();
    return tz_test_result("test_ckpt_native");
}
