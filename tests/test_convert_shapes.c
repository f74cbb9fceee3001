/* tz-convert checks every tensor against the model its config.json describes (issue 34: a
 * source without wte, or with a wte of another shape, imported, verify said OK, and a training
 * program refused the folder only later):
 *   - import of a GPT-2 source lacking wte.weight, or whose wte has another width than the
 *     config's n_embd: RT_ERR_FORMAT naming the source, the tensor and both shapes, and no output;
 *   - the same source imported without the check (as an older tz-convert did): verify refuses it;
 *   - the intact source imports and verifies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoints/ckpt_convert.h"
#include "checkpoints/ckpt_safetensors.h"
#include "models/param_check.h"
#include "runtime/base/rt_log.h"
#include "tests/testutil.h"

static char g_src[600];

/* tiny-gpt2's config.json and tensors into g_src/NAME/, without `drop` (NULL: none) and with
 * `narrow` (NULL: none) cut to one column; names as HF writes them. */
static const char *make_source(const char *name, const char *drop, const char *narrow) {
    static char dir[700];
    char path[800], from[800];
    snprintf(dir, sizeof dir, "%s/%s", g_src, name);
    mkdir(dir, 0755);
    snprintf(from, sizeof from, "%s/config.json", tz_data_path("tiny-gpt2"));
    snprintf(path, sizeof path, "%s/config.json", dir);
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, path);
    TZ_EXPECT(system(cmd) == 0, "%s", cmd);
    snprintf(from, sizeof from, "%s/model.safetensors", tz_data_path("tiny-gpt2"));
    ckpt_st_file *f = NULL;
    TZ_EXPECT_OK(ckpt_safetensors_open(from, &f));
    if (!f) return dir;
    const size_t n = ckpt_safetensors_count(f);
    ckpt_st_write_entry *e = calloc(n, sizeof *e);
    float **data = calloc(n, sizeof *data);
    size_t(*shapes)[CKPT_MAX_DIMS] = calloc(n, sizeof *shapes);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        ckpt_st_tensor t;
        ckpt_safetensors_tensor(f, i, &t);
        if (drop && strcmp(t.name, drop) == 0) continue;
        data[k] = malloc(t.numel * sizeof(float) + 4);
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, t.name, data[k], t.numel));
        memcpy(shapes[k], t.shape, sizeof shapes[k]);
        if (narrow && strcmp(t.name, narrow) == 0 && t.ndim == 2) { /* keep column 0 of each row */
            for (size_t r = 0; r < t.shape[0]; r++) data[k][r] = data[k][r * t.shape[1]];
            shapes[k][1] = 1;
        }
        e[k] = (ckpt_st_write_entry){.name = t.name, .ndim = t.ndim, .shape = shapes[k], .data = data[k]};
        k++;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    TZ_EXPECT_OK(ckpt_safetensors_write(path, k, e, NULL));
    for (size_t i = 0; i < k; i++) free(data[i]);
    free(data), free(shapes), free(e);
    ckpt_safetensors_close(f);
    return dir;
}

static bool exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static void check_refused(const char *name, const char *drop, const char *narrow, const char *needle) {
    char src[700], out[800], out2[800];
    snprintf(src, sizeof src, "%s", make_source(name, drop, narrow));
    snprintf(out, sizeof out, "%s-sharded", src);
    ckpt_import_opts o = {.src = src, .out = out, .tp = 1, .keep_dtype = true, .check = mdl_check_tensors};
    rt_status st = ckpt_convert_import(&o, NULL);
    TZ_EXPECT(st == RT_ERR_FORMAT && strstr(rt_error_message(), src) && strstr(rt_error_message(), needle),
              "%s: import: %s '%s'", name, rt_status_name(st), rt_error_message());
    TZ_EXPECT(!exists(out), "%s: the refused import left %s", name, out);
    /* as an older tz-convert wrote it, without the check: verify refuses the folder */
    snprintf(out2, sizeof out2, "%s-unchecked", src);
    o.out = out2, o.check = NULL;
    TZ_EXPECT_OK(ckpt_convert_import(&o, NULL));
    FILE *devnull = fopen("/dev/null", "w");
    st = ckpt_convert_verify(out2, mdl_check_tensors, devnull);
    fclose(devnull);
    TZ_EXPECT(st == RT_ERR_FORMAT && strstr(rt_error_message(), out2) && strstr(rt_error_message(), needle),
              "%s: verify: %s '%s'", name, rt_status_name(st), rt_error_message());
}

int main(void) {
    rt_log_set_quiet(true);
    snprintf(g_src, sizeof g_src, "%s", tz_tmpdir());
    check_refused("no-wte", "transformer.wte.weight", NULL, "no tensor for the parameter 'wte.weight'");
    check_refused("thin-wte", NULL, "transformer.wte.weight",
                  "tensor 'wte.weight' has shape [50257, 1], but the model of");
    /* the intact source imports and verifies */
    char out[800];
    const char *src = make_source("whole", NULL, NULL);
    snprintf(out, sizeof out, "%s-sharded", src);
    ckpt_import_opts o = {.src = src, .out = out, .tp = 1, .keep_dtype = true, .check = mdl_check_tensors};
    TZ_EXPECT_OK(ckpt_convert_import(&o, NULL));
    FILE *devnull = fopen("/dev/null", "w");
    TZ_EXPECT_OK(ckpt_convert_verify(out, mdl_check_tensors, devnull));
    fclose(devnull);
    return tz_test_result("test_convert_shapes");
}
