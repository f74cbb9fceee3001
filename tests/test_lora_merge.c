/* tz-convert merge (checkpoints/ckpt_lora_merge.c): each family's PEFT folder of
 * tests/golden/FAMILY-tiny-lora/adapter merged into its base's HF folder gives PEFT's
 * merge_and_unload (merged.safetensors, by scripts/golden/gen_lora_golden.py --merged: the tensors
 * the merge changed) within the fp32 tolerance, every other tensor of the base bit for bit, no
 * adapter tensor, and the base's side files; GPT-2's fan_in_fan_out (Conv1D) and BERT's three
 * adapters on query, key and value included. Bad inputs are refused with the file and the name:
 * an adapter of another model, an existing output, a folder without adapter_config.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoints/ckpt_lora_merge.h"
#include "checkpoints/ckpt_safetensors.h"
#include "checkpoints/ckpt_source.h"
#include "tests/loratest.h"
#include "tests/testutil.h"

/* base, adapter family, tensors PEFT's merge changed */
static const struct {
    const char *base, *lora;
    int changed;
} families[] = {
    {"gpt2-tiny-cls", "gpt2-tiny-lora", 8},
    {"bert-tiny-cls", "bert-tiny-lora", 12},
    {"roberta-tiny-cls", "roberta-tiny-lora", 4},
    {"t5-tiny-v1_1", "t5-tiny-lora", 36},
    {"glm-tiny", "glm-tiny-lora", 8},
};

static void test_family(int f) {
    char base[4096], lora[4096], adapter[4200], out[4200], path[4300];
    snprintf(base, sizeof base, "%s/%s", tz_source_path("tests/golden"), families[f].base);
    snprintf(lora, sizeof lora, "%s/%s", tz_source_path("tests/golden"), families[f].lora);
    snprintf(adapter, sizeof adapter, "%s/adapter", lora);
    snprintf(out, sizeof out, "%s/merged-%s", tz_tmpdir(), families[f].base);
    ckpt_convert_stats stats;
    TZ_EXPECT_OK(ckpt_lora_merge(base, adapter, out, &stats));
    ckpt_st_file *ours = NULL, *peft = NULL;
    ckpt_source *src = NULL;
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &ours));
    snprintf(path, sizeof path, "%s/merged.safetensors", lora);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &peft));
    TZ_EXPECT_OK(ckpt_source_open(base, &src));
    snprintf(path, sizeof path, "%s/config.json", out);
    struct stat sb;
    TZ_EXPECT(stat(path, &sb) == 0, "%s: no config.json copied", out);
    if (!ours || !peft || !src) goto done;
    TZ_EXPECT(ckpt_safetensors_count(ours) == ckpt_source_count(src), "%s: %zu tensors, the base has %zu",
              families[f].base, ckpt_safetensors_count(ours), ckpt_source_count(src));
    TZ_EXPECT((int)ckpt_safetensors_count(peft) == families[f].changed, "%s: %zu changed in PEFT's merge",
              families[f].base, ckpt_safetensors_count(peft));
    int same = 0;
    for (size_t i = 0; i < ckpt_source_count(src); i++) {
        const char *name = ckpt_source_name(src, i);
        ckpt_st_tensor t;
        TZ_EXPECT(!strstr(name, "lora_"), "%s in the merged file", name);
        if (ckpt_safetensors_find(ours, name, &t) != RT_OK) {
            TZ_EXPECT(0, "%s: '%s' missing from the merged file", families[f].base, name);
            continue;
        }
        float *got = rt_xmalloc(t.numel * sizeof(float)), *want = rt_xmalloc(t.numel * sizeof(float));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(ours, name, got, t.numel));
        if (ckpt_safetensors_has(peft, name)) {
            char what[300];
            TZ_EXPECT_OK(ckpt_safetensors_read_f32(peft, name, want, t.numel));
            snprintf(what, sizeof what, "tz-convert merge %s vs PEFT", name);
            tz_check_close(what, got, want, t.numel, TZL_FWD_ATOL, TZL_FWD_RTOL);
        } else {
            TZ_EXPECT_OK(ckpt_source_read_f32(src, name, want, t.numel));
            same += memcmp(got, want, t.numel * sizeof(float)) == 0;
        }
        free(got), free(want);
    }
    TZ_EXPECT(same == (int)ckpt_source_count(src) - families[f].changed, "%s: %d tensors copied unchanged of %zu",
              families[f].base, same, ckpt_source_count(src) - (size_t)families[f].changed);
done:
    ckpt_safetensors_close(ours);
    ckpt_safetensors_close(peft);
    ckpt_source_close(src);
}

static void expect_refused(const char *base, const char *adapter, const char *out, const char *want) {
    ckpt_convert_stats stats;
    rt_status st = ckpt_lora_merge(base, adapter, out, &stats);
    TZ_EXPECT(st != RT_OK && strstr(rt_error_message(), want), "merge %s + %s: status %d, '%s' (want '%s')", base,
              adapter, st, rt_error_message(), want);
    struct stat sb;
    TZ_EXPECT(strstr(want, "already exists") || stat(out, &sb) != 0, "%s was written", out);
}

static void test_refusals(void) {
    char gpt2[4096], bert_adapter[4200], gpt2_adapter[4200], out[4200];
    snprintf(gpt2, sizeof gpt2, "%s", tz_source_path("tests/golden/gpt2-tiny-cls"));
    snprintf(bert_adapter, sizeof bert_adapter, "%s", tz_source_path("tests/golden/bert-tiny-lora/adapter"));
    snprintf(gpt2_adapter, sizeof gpt2_adapter, "%s", tz_source_path("tests/golden/gpt2-tiny-lora/adapter"));
    snprintf(out, sizeof out, "%s/refused", tz_tmpdir());
    expect_refused(gpt2, bert_adapter, out, "has no weight");
    expect_refused(gpt2, gpt2, out, "adapter_config.json");
    expect_refused(gpt2, gpt2_adapter, tz_tmpdir(), "already exists");
}

int main(void) {
    for (int f = 0; f < (int)(sizeof families / sizeof *families); f++) test_family(f);
    test_refusals();
    return tz_test_result("test_lora_merge");
}
