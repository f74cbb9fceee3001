/* The small runtime pieces every program leans on: option parsing (both spellings, --config
 * with the command line winning, errors that name the closest option), the LR schedules
 * against HF's formulas, the Philox generator against its published known answers, and the
 * early checks of the files a run reads and writes. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/base/rt_args.h"
#include "runtime/base/rt_fs.h"
#include "runtime/base/rt_rng.h"
#include "runtime/train/rt_sched.h"
#include "tests/testutil.h"

static int64_t o_steps;
static double o_lr;
static const char *o_name, *o_dev;
static bool o_flag;
static const rt_opt opts[] = {
    {"max-steps", RT_OPT_INT, &o_steps, "5", NULL, "steps", NULL, 0, 100},
    {"lr", RT_OPT_FLOAT, &o_lr, "1e-4", NULL, "learning rate", NULL, 0, 1},
    {"save-dir", RT_OPT_STRING, &o_name, "runs", "DIR", "where", NULL, 0, 0},
    {"device", RT_OPT_CHOICE, &o_dev, "cpu", NULL, "device", "cpu|cuda:N", 0, 0},
    {"resume", RT_OPT_FLAG, &o_flag, "false", NULL, "resume", NULL, 0, 0},
};
static const rt_args_spec spec = {
    .prog = "t", .summary = "test", .opts = opts, .n_opts = 5, .max_positional = 1, .positional = "[FILE]"};

static rt_status parse(int argc, char **argv) {
    const char *pos[1];
    int n = 0;
    return rt_args_parse(&spec, argc, argv, pos, &n);
}

static void test_args(void) {
    char *a1[] = {"t", "--max-steps", "7", "--lr=3e-5", "--resume", "--device", "cuda:1", NULL};
    TZ_EXPECT_OK(parse(7, a1));
    TZ_EXPECT(o_steps == 7 && o_lr == 3e-5 && o_flag && strcmp(o_dev, "cuda:1") == 0, "both spellings");
    char *a2[] = {"t", NULL};
    TZ_EXPECT_OK(parse(1, a2));
    TZ_EXPECT(o_steps == 5 && o_lr == 1e-4 && !o_flag && strcmp(o_name, "runs") == 0, "defaults");

    const char *dir = tz_tmpdir();
    char cfg[256], bad[256], unknown[256];
    snprintf(cfg, sizeof cfg, "%s/c.json", dir);
    snprintf(bad, sizeof bad, "%s/bad.json", dir);
    snprintf(unknown, sizeof unknown, "%s/unknown.json", dir);
    FILE *f = fopen(cfg, "w");
    fputs("{\"max_steps\": 9, \"lr\": 0.5, \"save-dir\": \"from_config\", \"resume\": true}", f);
    fclose(f);
    f = fopen(bad, "w");
    fputs("{\n\"lr\": 0.5,\n oops }", f);
    fclose(f);
    f = fopen(unknown, "w");
    fputs("{\"max_stepz\": 3}", f);
    fclose(f);
    char *a3[] = {"t", "--lr", "0.25", "--config", cfg, NULL};
    TZ_EXPECT_OK(parse(5, a3));
    TZ_EXPECT(o_steps == 9 && o_lr == 0.25 && o_flag && strcmp(o_name, "from_config") == 0,
              "config applied, command line wins (lr %g)", o_lr);
    char *a4[] = {"t", "--config", bad, NULL};
    rt_status st = parse(3, a4);
    TZ_EXPECT(st == RT_ERR_CONFIG && strstr(rt_error_message(), "bad.json:3"), "bad JSON: %s", rt_error_message());
    char *a5[] = {"t", "--config", unknown, NULL};
    st = parse(3, a5);
    TZ_EXPECT(st == RT_ERR_USAGE && strstr(rt_error_message(), "did you mean 'max-steps'"), "unknown key: %s",
              rt_error_message());
    char *a6[] = {"t", "--max-step", "3", NULL};
    st = parse(3, a6);
    TZ_EXPECT(st == RT_ERR_USAGE && strstr(rt_error_message(), "did you mean --max-steps"), "closest: %s",
              rt_error_message());
    char *a7[] = {"t", "--max-steps", "101", NULL};
    TZ_EXPECT(parse(3, a7) == RT_ERR_USAGE && strstr(rt_error_message(), "out of range"), "range");
    char *a8[] = {"t", "--lr", "1e-4x", NULL};
    TZ_EXPECT(parse(3, a8) == RT_ERR_USAGE && strstr(rt_error_message(), "expected a number"), "number");
    char *a9[] = {"t", "--device", "tpu", NULL};
    TZ_EXPECT(parse(3, a9) == RT_ERR_USAGE && strstr(rt_error_message(), "not one of"), "choice");
    char *a10[] = {"t", "--lr", NULL};
    TZ_EXPECT(parse(2, a10) == RT_ERR_USAGE && strstr(rt_error_message(), "needs a value"), "missing value");
    char *a11[] = {"t", "one", "two", NULL};
    TZ_EXPECT(parse(3, a11) == RT_ERR_USAGE && strstr(rt_error_message(), "unexpected argument 'two'"), "positional");
    char *json = rt_args_to_json(&spec);
    TZ_EXPECT(strstr(json, "\"save-dir\"") != NULL, "options as JSON: %s", json);
    free(json);
}

/* A spec's presets file: read before --config and the command line (which win), in both the
 * "--opt FILE" and "--opt=FILE" forms, and what it sets is marked RT_ARG_PRESET. */
static const char *g_preset_seen;
static rt_status fake_preset(const rt_args_spec *spec, const char *path) {
    g_preset_seen = path;
    rt_status st = rt_args_set_from(spec, "batch-size", "4", path, RT_ARG_PRESET);
    if (st == RT_OK) st = rt_args_set_from(spec, "lr", "2e-5", path, RT_ARG_PRESET);
    return st;
}

static void test_preset_hook(void) {
    static int64_t bs;
    static double lr;
    static const char *file;
    static const rt_opt opts[] = {
        {"batch-size", RT_OPT_INT, &bs, "16", NULL, "", NULL, 1, 1e6},
        {"lr", RT_OPT_FLOAT, &lr, "1e-4", NULL, "", NULL, 0, 0},
        {"presets", RT_OPT_STRING, &file, NULL, NULL, "", NULL, 0, 0},
    };
    static const rt_args_spec spec = {
        .prog = "t", .opts = opts, .n_opts = 3, .preset_option = "presets", .apply_preset = fake_preset};
    const char *pos[1];
    int n = 0;
    char *argv[] = {"t", "--presets", "p.json", "--lr", "3e-5", NULL};
    TZ_EXPECT_OK(rt_args_parse(&spec, 5, argv, pos, &n));
    TZ_EXPECT(g_preset_seen && strcmp(g_preset_seen, "p.json") == 0 && bs == 4 && lr == 3e-5, "bs %lld lr %g",
              (long long)bs, lr);
    TZ_EXPECT(rt_args_source_of(&spec, "batch-size") == RT_ARG_PRESET, "batch size marked as a preset");
    TZ_EXPECT(rt_args_source_of(&spec, "lr") == RT_ARG_COMMAND_LINE, "lr from the command line");
    g_preset_seen = NULL;
    char *argv2[] = {"t", "--presets=q.json", NULL};
    TZ_EXPECT_OK(rt_args_parse(&spec, 2, argv2, pos, &n));
    TZ_EXPECT(g_preset_seen && strcmp(g_preset_seen, "q.json") == 0 && lr == 2e-5, "--presets=FILE: lr %g", lr);
}

/* HF get_{constant,linear,cosine}_schedule_with_warmup, evaluated by hand. */
static void test_sched(void) {
    rt_sched s;
    TZ_EXPECT_OK(rt_sched_init(&s, "linear", 1.0, 2, 10));
    double lin[] = {0.0, 0.5, 1.0, 7.0 / 8, 6.0 / 8, 5.0 / 8, 4.0 / 8, 3.0 / 8, 2.0 / 8, 1.0 / 8, 0.0, 0.0};
    for (int i = 0; i < 12; i++)
        TZ_EXPECT(fabs(rt_sched_lr(&s, i) - lin[i]) < 1e-12, "linear %d: %g", i, rt_sched_lr(&s, i));
    TZ_EXPECT_OK(rt_sched_init(&s, "cosine", 2.0, 0.1, 20)); /* fraction: ceil(0.1 * 20) = 2 steps */
    TZ_EXPECT(s.warmup_steps == 2, "warmup fraction -> %lld steps", (long long)s.warmup_steps);
    TZ_EXPECT(fabs(rt_sched_lr(&s, 1) - 1.0) < 1e-12, "cosine warmup");
    TZ_EXPECT(fabs(rt_sched_lr(&s, 11) - 2.0 * 0.5 * (1 + cos(M_PI * 9.0 / 18))) < 1e-12, "cosine middle");
    TZ_EXPECT(fabs(rt_sched_lr(&s, 20)) < 1e-12, "cosine end");
    TZ_EXPECT_OK(rt_sched_init(&s, "constant", 3.0, 0, 5));
    TZ_EXPECT(rt_sched_lr(&s, 0) == 3.0 && rt_sched_lr(&s, 4) == 3.0, "constant");
    TZ_EXPECT(rt_sched_init(&s, "step", 1, 0, 5) == RT_ERR_CONFIG, "unknown schedule");
    TZ_EXPECT(rt_sched_init(&s, "linear", 1, 2.5, 5) == RT_ERR_CONFIG, "fractional steps");
}

/* Known-answer tests of Philox4x32-10 from the Random123 distribution (kat_vectors). */
static void test_philox(void) {
    rt_philox_out z = rt_philox4x32(0, 0, 0);
    TZ_EXPECT(z.v[0] == 0x6627e8d5u && z.v[1] == 0xe169c58du && z.v[2] == 0xbc57ac4cu && z.v[3] == 0x9b00dbd8u,
              "philox zeros: %08x %08x %08x %08x", z.v[0], z.v[1], z.v[2], z.v[3]);
    rt_philox_out f = rt_philox4x32(0xffffffffffffffffull, 0xffffffffffffffffull, 0xffffffffffffffffull);
    TZ_EXPECT(f.v[0] == 0x408f276du && f.v[1] == 0x41c83b0eu && f.v[2] == 0xa20bc7c6u && f.v[3] == 0x6d5451fdu,
              "philox ones: %08x %08x %08x %08x", f.v[0], f.v[1], f.v[2], f.v[3]);
    double sum = 0, sq = 0;
    for (int i = 0; i < 100000; i++) {
        float x = rt_rng_normal(7, 3, (uint64_t)i);
        sum += x;
        sq += (double)x * x;
    }
    TZ_EXPECT(fabs(sum / 1e5) < 0.02 && fabs(sq / 1e5 - 1) < 0.02, "normal mean %g var %g", sum / 1e5, sq / 1e5);
}

/* rt_check_readable, rt_check_creatable and rt_make_dirs: each failure is one line naming the
 * option, the path and the folder or file in the way. */
static void test_fs_checks(void) {
    const char *tmp = tz_tmpdir();
    char file[512], missing[512], under_file[512], deep[512], dir_slash[512];
    snprintf(file, sizeof file, "%s/data.txt", tmp);
    snprintf(missing, sizeof missing, "%s/nope.txt", tmp);
    snprintf(under_file, sizeof under_file, "%s/data.txt/hf", tmp);
    snprintf(deep, sizeof deep, "%s/a//b/c/hf", tmp);
    snprintf(dir_slash, sizeof dir_slash, "%s/", tmp);
    tz_write_text(file, "x\n");
    TZ_EXPECT_OK(rt_check_readable(file, "--train-file"));
    TZ_EXPECT(rt_check_readable(missing, "--train-file") == RT_ERR_IO && strstr(rt_error_message(), "--train-file") &&
                  strstr(rt_error_message(), "nope.txt: cannot open"),
              "a missing file: %s", rt_error_message());
    TZ_EXPECT(rt_check_readable(tmp, "SRC") == RT_ERR_IO && strstr(rt_error_message(), "a folder, not a file"),
              "a folder: %s", rt_error_message());
    TZ_EXPECT_OK(rt_check_readable("/dev/null", "TEXT")); /* not a regular file, but readable: pipes pass */
    TZ_EXPECT_OK(rt_check_creatable(deep, "--save-hf"));  /* its missing parents would be made in tmp */
    TZ_EXPECT_OK(rt_check_creatable(dir_slash, "--save-hf"));
    TZ_EXPECT_OK(rt_check_creatable("relative-out", "--save-hf")); /* the current folder */
    TZ_EXPECT(rt_check_creatable(under_file, "--save-hf") == RT_ERR_IO &&
                  strstr(rt_error_message(), "data.txt is a file, not a folder"),
              "a file in the way: %s", rt_error_message());
    TZ_EXPECT(rt_make_dirs(file, "--save-dir") == RT_ERR_IO &&
                  strstr(rt_error_message(), "data.txt is a file, not a folder"),
              "--save-dir a file: %s", rt_error_message());
    TZ_EXPECT(rt_make_dirs(under_file, "--save-dir") == RT_ERR_IO &&
                  strstr(rt_error_message(), "data.txt is a file, not a folder"),
              "--save-dir under a file: %s", rt_error_message());
    TZ_EXPECT_OK(rt_make_dirs(deep, "--save-dir"));
    TZ_EXPECT_OK(rt_make_dirs(deep, "--save-dir")); /* there already */
    rt_status st = rt_check_creatable("/proc/self/status/x", "--predict-out");
    TZ_EXPECT(st == RT_ERR_IO && strstr(rt_error_message(), "/proc/self/status is a file"), "%s", rt_error_message());
}

int main(void) {
    test_args();
    test_fs_checks();
    test_preset_hook();
    test_sched();
    test_philox();
    return tz_test_result("test_runtime_core");
}
