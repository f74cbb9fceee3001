/* --deepspeed-config (apps/common/deepspeed_config.c, the presets file every training program's
 * options take): the fields with a meaning here set options, --config and the command line win,
 * the micro-batch is marked as a preset (it is per rank: the program multiplies it by dp), and
 * a bad value names the field, bf16.enabled and fp16.enabled are --precision, and fp16's
 * loss-scale fields are the --loss-scale-* options, and ZeRO stage 3 with offload_param (or the
 * older cpu_offload and cpu_offload_params) is --zero 3 with --offload-params. */
#include <stdio.h>
#include <string.h>

#include "apps/common/deepspeed_config.h"
#include "tests/testutil.h"

static void test_deepspeed(void) {
    static int64_t bs, accum, zero, ls_power, ls_window, ls_hyst;
    static double clip, lr, wd, b1, b2, eps, warmup, ls_min;
    static const char *sched, *dsfile, *precision;
    static bool offload, offload_params;
    static const rt_opt ds_opts[] = {
        {"batch-size", RT_OPT_INT, &bs, "16", NULL, "", NULL, 1, 1e6},
        {"grad-accum", RT_OPT_INT, &accum, "1", NULL, "", NULL, 1, 1e6},
        {"zero", RT_OPT_INT, &zero, "0", NULL, "", NULL, 0, 3},
        {"clip", RT_OPT_FLOAT, &clip, "1", NULL, "", NULL, 0, 0},
        {"lr", RT_OPT_FLOAT, &lr, "1e-4", NULL, "", NULL, 0, 0},
        {"weight-decay", RT_OPT_FLOAT, &wd, "0", NULL, "", NULL, 0, 0},
        {"adam-beta1", RT_OPT_FLOAT, &b1, "0.9", NULL, "", NULL, 0, 0},
        {"adam-beta2", RT_OPT_FLOAT, &b2, "0.999", NULL, "", NULL, 0, 0},
        {"adam-eps", RT_OPT_FLOAT, &eps, "1e-8", NULL, "", NULL, 0, 0},
        {"warmup", RT_OPT_FLOAT, &warmup, "0", NULL, "", NULL, 0, 0},
        {"schedule", RT_OPT_CHOICE, &sched, "linear", NULL, "", "constant|linear|cosine", 0, 0},
        {"offload-optimizer", RT_OPT_FLAG, &offload, "false", NULL, "", NULL, 0, 0},
        {"offload-params", RT_OPT_FLAG, &offload_params, "false", NULL, "", NULL, 0, 0},
        {"deepspeed-config", RT_OPT_STRING, &dsfile, NULL, NULL, "", NULL, 0, 0},
        {"precision", RT_OPT_CHOICE, &precision, "fp32", NULL, "", "fp32|bf16|fp16", 0, 0},
        {"loss-scale-power", RT_OPT_INT, &ls_power, "16", NULL, "", NULL, 0, 100},
        {"loss-scale-window", RT_OPT_INT, &ls_window, "1000", NULL, "", NULL, 1, 1e12},
        {"loss-scale-hysteresis", RT_OPT_INT, &ls_hyst, "2", NULL, "", NULL, 1, 1e6},
        {"min-loss-scale", RT_OPT_FLOAT, &ls_min, "1", NULL, "", NULL, 1e-30, 1e30},
    };
    static const rt_args_spec ds_spec = {.prog = "t",
                                         .opts = ds_opts,
                                         .n_opts = 19,
                                         .preset_option = "deepspeed-config",
                                         .apply_preset = train_app_deepspeed_apply};
    const char *dir = tz_tmpdir();
    char ds[256];
    snprintf(ds, sizeof ds, "%s/ds.json", dir);
    FILE *f = fopen(ds, "w");
    fputs(
        "{\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 8, \"gradient_clipping\": 0.5,"
        " \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}, \"overlap_comm\": true},"
        " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 2e-5, \"betas\": [0.8, 0.95], \"eps\": 1e-6,"
        " \"weight_decay\": 0.1}}, \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"warmup_num_steps\": "
        "50}},"
        " \"fp16\": {\"enabled\": true, \"loss_scale\": 0, \"initial_scale_power\": 12, \"loss_scale_window\": 500,"
        " \"hysteresis\": 1, \"min_loss_scale\": 0.5}, \"steps_per_print\": 10}",
        f);
    fclose(f);
    const char *pos[1];
    int n = 0;
    char *argv[] = {"t", "--deepspeed-config", ds, "--lr", "3e-5", NULL};
    TZ_EXPECT_OK(rt_args_parse(&ds_spec, 5, argv, pos, &n));
    TZ_EXPECT(bs == 4 && accum == 8 && clip == 0.5 && zero == 2 && offload, "batch/accum/clip/zero/offload");
    TZ_EXPECT(b1 == 0.8 && b2 == 0.95 && eps == 1e-6 && wd == 0.1, "optimizer params");
    TZ_EXPECT(warmup == 50 && strcmp(sched, "cosine") == 0, "scheduler");
    TZ_EXPECT(lr == 3e-5, "the command line overrides the DeepSpeed lr (%g)", lr);
    TZ_EXPECT(rt_args_source_of(&ds_spec, "batch-size") == RT_ARG_PRESET, "micro batch marked as per-rank");
    TZ_EXPECT(rt_args_source_of(&ds_spec, "lr") == RT_ARG_COMMAND_LINE, "lr from the command line");
    TZ_EXPECT(strcmp(precision, "fp16") == 0, "fp16.enabled gives --precision fp16 (%s)", precision);
    TZ_EXPECT(ls_power == 12 && ls_window == 500 && ls_hyst == 1 && ls_min == 0.5,
              "fp16's loss-scale fields: power %lld window %lld hysteresis %lld min %g", (long long)ls_power,
              (long long)ls_window, (long long)ls_hyst, ls_min);
    f = fopen(ds, "w");
    fputs("{\"gradient_clipping\": \"lots\"}", f);
    fclose(f);
    char *argv2[] = {"t", "--deepspeed-config", ds, NULL};
    rt_status st = rt_args_parse(&ds_spec, 3, argv2, pos, &n);
    TZ_EXPECT(st == RT_ERR_CONFIG && strstr(rt_error_message(), "gradient_clipping"), "bad value names the field: %s",
              rt_error_message());
    f = fopen(ds, "w");
    fputs("{\"bf16\": {\"enabled\": true}}", f);
    fclose(f);
    TZ_EXPECT_OK(rt_args_parse(&ds_spec, 3, argv2, pos, &n));
    TZ_EXPECT(strcmp(precision, "bf16") == 0, "bf16.enabled gives --precision bf16 (%s)", precision);
    /* the T5-11B seed's ZeRO-3, in today's spelling and in the older one */
    const char *zero3[] = {
        "{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"cpu\"},"
        " \"offload_optimizer\": {\"device\": \"cpu\"}}}",
        "{\"zero_optimization\": {\"stage\": 3, \"cpu_offload\": true, \"cpu_offload_params\": true}}"};
    for (int k = 0; k < 2; k++) {
        zero = 0;
        offload = offload_params = false;
        f = fopen(ds, "w");
        fputs(zero3[k], f);
        fclose(f);
        TZ_EXPECT_OK(rt_args_parse(&ds_spec, 3, argv2, pos, &n));
        TZ_EXPECT(zero == 3 && offload && offload_params, "ZeRO-3 config %d: --zero %lld, offload %d, params %d", k,
                  (long long)zero, offload, offload_params);
    }
}

int main(void) {
    test_deepspeed();
    return tz_test_result("test_deepspeed_config");
}
