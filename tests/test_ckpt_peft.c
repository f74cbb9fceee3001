/* PEFT adapter folders (checkpoints/ckpt_peft.h): the adapter_config.json PEFT 0.21 wrote for the
 * tiny GPT-2 (tests/golden/gpt2-tiny-lora/adapter) reads back as written; the scale, rsLoRA's
 * too; PEFT's target rule on module names; the adapter file's tensor names split into module and
 * kind; a config written here reads back the same; and each refused feature or bad field is one
 * line naming the file and the field. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_peft.h"
#include "checkpoints/ckpt_safetensors.h"
#include "tests/testutil.h"

static void expect_parse_error(const char *text, const char *needle) {
    ckpt_peft_config c;
    rt_status st = ckpt_peft_config_parse(text, strlen(text), "a.json", &c);
    TZ_EXPECT(st == RT_ERR_CONFIG && strstr(rt_error_message(), needle) && !strchr(rt_error_message(), '\n'),
              "'%s': %s '%s', want '%s'", text, rt_status_name(st), rt_error_message(), needle);
}

static void test_golden_folder(void) {
    ckpt_peft_config c;
    const char *dir = tz_source_path("tests/golden/gpt2-tiny-lora/adapter");
    TZ_EXPECT_OK(ckpt_peft_config_read(dir, &c));
    TZ_EXPECT(c.r == 4 && c.alpha == 8.0 && c.dropout == 0.0 && c.fan_in_fan_out && !c.use_rslora,
              "r %d alpha %g dropout %g fan_in_fan_out %d", c.r, c.alpha, c.dropout, c.fan_in_fan_out);
    TZ_EXPECT(c.n_targets == 3 && strcmp(c.targets[0], "c_attn") == 0 && strcmp(c.targets[2], "c_proj") == 0,
              "targets: %d", c.n_targets);
    TZ_EXPECT(c.n_save == 2 && strcmp(c.modules_to_save[1], "score") == 0, "modules_to_save: %d", c.n_save);
    TZ_EXPECT(c.task_type && strcmp(c.task_type, "SEQ_CLS") == 0, "task_type");
    TZ_EXPECT(ckpt_peft_scale(&c) == 2.0, "scale %g", ckpt_peft_scale(&c));
    TZ_EXPECT(ckpt_peft_is_target(&c, "transformer.h.0.attn.c_attn") && ckpt_peft_is_target(&c, "c_fc") &&
                  ckpt_peft_is_target(&c, "transformer.h.1.mlp.c_proj") && !ckpt_peft_is_target(&c, "score") &&
                  !ckpt_peft_is_target(&c, "transformer.h.0.attn.xc_attn") &&
                  !ckpt_peft_is_target(&c, "transformer.h.0.attn.c_attn.lora_A"),
              "PEFT's target rule");
    /* every tensor of the adapter file: a target module's A or B, or the saved head */
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    ckpt_st_file *f = NULL;
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &f));
    int counts[3] = {0, 0, 0};
    for (size_t i = 0; f && i < ckpt_safetensors_count(f); i++) {
        ckpt_st_tensor t;
        ckpt_safetensors_tensor(f, i, &t);
        char module[256];
        ckpt_peft_kind kind;
        TZ_EXPECT_OK(ckpt_peft_tensor_name(t.name, module, sizeof module, &kind));
        counts[kind]++;
        if (kind == CKPT_PEFT_SAVED)
            TZ_EXPECT(strcmp(module, "score.weight") == 0, "saved tensor '%s'", module);
        else
            TZ_EXPECT(ckpt_peft_is_target(&c, module) && t.ndim == 2 && t.shape[kind == CKPT_PEFT_LORA_A ? 0 : 1] == 4,
                      "%s: module '%s', shape %zu x %zu", t.name, module, t.shape[0], t.shape[1]);
    }
    TZ_EXPECT(counts[0] == 8 && counts[1] == 8 && counts[2] == 1, "A %d, B %d, saved %d", counts[0], counts[1],
              counts[2]);
    ckpt_safetensors_close(f);
    /* written here, read back the same */
    const char *out = tz_tmpdir();
    TZ_EXPECT_OK(ckpt_peft_config_write(out, &c));
    ckpt_peft_config back;
    TZ_EXPECT_OK(ckpt_peft_config_read(out, &back));
    TZ_EXPECT(back.task_type && back.base_model && back.n_targets == 3 && back.r == c.r && back.alpha == c.alpha &&
                  back.fan_in_fan_out == c.fan_in_fan_out && back.n_targets == c.n_targets && back.n_save == c.n_save &&
                  strcmp(back.targets[1], c.targets[1]) == 0 && strcmp(back.task_type, "SEQ_CLS") == 0 &&
                  strcmp(back.base_model, c.base_model) == 0,
              "the written config reads back");
    ckpt_peft_config_free(&back);
    ckpt_peft_config_free(&c);
}

static void test_fields(void) {
    ckpt_peft_config c;
    const char *rs =
        "{\"peft_type\": \"LORA\", \"r\": 16, \"lora_alpha\": 32, \"use_rslora\": true, "
        "\"target_modules\": [\"q\", \"v\"], \"bias\": \"none\", \"rank_pattern\": {}, \"use_dora\": false}";
    TZ_EXPECT_OK(ckpt_peft_config_parse(rs, strlen(rs), "rs.json", &c));
    TZ_EXPECT(fabs(ckpt_peft_scale(&c) - 8.0) < 1e-12 && c.n_save == 0 && !c.task_type, "rsLoRA: alpha / sqrt(r)");
    ckpt_peft_config_free(&c);
    const char *dflt = "{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": [\"query\"]}";
    TZ_EXPECT_OK(ckpt_peft_config_parse(dflt, strlen(dflt), "d.json", &c));
    TZ_EXPECT(c.alpha == 8.0 && c.dropout == 0.0, "PEFT's defaults: alpha 8, dropout 0");
    ckpt_peft_config_free(&c);
    expect_parse_error("{\"peft_type\": \"IA3\", \"r\": 8}", "a.json: field 'peft_type' is 'IA3'; tunezoo reads LoRA");
    expect_parse_error("{\"peft_type\": \"LORA\", \"target_modules\": [\"q\"]}", "a.json: field 'r' is missing");
    expect_parse_error("{\"peft_type\": \"LORA\", \"r\": 0, \"target_modules\": [\"q\"]}", "field 'r' is 0");
    expect_parse_error("{\"peft_type\": \"LORA\", \"r\": 8, \"lora_alpha\": -1, \"target_modules\": [\"q\"]}",
                       "field 'lora_alpha' is -1");
    expect_parse_error("{\"peft_type\": \"LORA\", \"r\": 8, \"lora_dropout\": 1.5, \"target_modules\": [\"q\"]}",
                       "field 'lora_dropout' is 1.5");
    expect_parse_error("{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": \".*attn.*\"}",
                       "field 'target_modules' is a regular expression");
    expect_parse_error("{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": [\"q\", 3]}",
                       "field 'target_modules' holds a number");
    expect_parse_error("{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": []}",
                       "'target_modules' names no module");
    expect_parse_error("{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": [\"q\"], \"use_dora\": true}",
                       "field 'use_dora' asks for DoRA");
    expect_parse_error("{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": [\"q\"], \"bias\": \"all\"}",
                       "field 'bias' asks for trained biases");
    expect_parse_error("{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": [\"q\"], \"rank_pattern\": {\"q\": 4}}",
                       "field 'rank_pattern' asks for a rank per module");
    expect_parse_error("{\"peft_type\": \"LORA\", \"r\": 8, \"target_modules\": [\"q\"], \"layers_to_transform\": [0]}",
                       "field 'layers_to_transform'");
    expect_parse_error("[1]", "a.json: the file holds an array");
    ckpt_peft_kind kind;
    char module[16];
    TZ_EXPECT(ckpt_peft_tensor_name("model.h.0.lora_A.weight", module, sizeof module, &kind) == RT_ERR_FORMAT,
              "a name without PEFT's prefix");
    TZ_EXPECT(ckpt_peft_tensor_name("base_model.model.transformer.h.0.attn.c_attn.lora_A.weight", module, sizeof module,
                                    &kind) == RT_ERR_FORMAT,
              "a module name longer than the buffer");
    TZ_EXPECT(ckpt_peft_config_read("/nonexistent/adapter", &c) == RT_ERR_IO, "a missing folder");
}

int main(void) {
    test_golden_folder();
    test_fields();
    return tz_test_result("test_ckpt_peft");
}
