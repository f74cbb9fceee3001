/* libFuzzer target for PEFT's adapter_config.json (checkpoints/ckpt_peft.h): any bytes must give an
 * error that says why or a config within its limits (r in [1, CKPT_PEFT_MAX_R], a positive finite
 * alpha, dropout in [0, 1), at least one target, every name non-empty) whose JSON, written back,
 * parses to the same config. Never a crash or a leak. test_fuzz_smoke builds and runs it briefly;
 * to run it longer, from the repository root:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
 *       -I. tests/fuzz/fuzz_ckpt_peft.c checkpoints/ckpt_peft.c runtime/base/rt_json.c \
 *       runtime/base/rt_atomic.c runtime/base/rt_status.c runtime/base/rt_fs.c runtime/base/rt_log.c -lcjson -lm \
 *       -o /tmp/fuzz_ckpt_peft
 *   /tmp/fuzz_ckpt_peft -max_total_time=60 tests/fuzz/corpus/fuzz_ckpt_peft
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "checkpoints/ckpt_peft.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool same(const ckpt_peft_config *a, const ckpt_peft_config *b) {
    if (a->r != b->r || a->alpha != b->alpha || a->dropout != b->dropout || a->fan_in_fan_out != b->fan_in_fan_out ||
        a->use_rslora != b->use_rslora || a->n_targets != b->n_targets || a->n_save != b->n_save ||
        !a->task_type != !b->task_type || !a->base_model != !b->base_model)
        return false;
    for (int i = 0; i < a->n_targets; i++)
        if (strcmp(a->targets[i], b->targets[i]) != 0) return false;
    for (int i = 0; i < a->n_save; i++)
        if (strcmp(a->modules_to_save[i], b->modules_to_save[i]) != 0) return false;
    return (!a->task_type || strcmp(a->task_type, b->task_type) == 0) &&
           (!a->base_model || strcmp(a->base_model, b->base_model) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_peft_config c;
    if (ckpt_peft_config_parse((const char *)data, size, "fuzz", &c) != RT_OK) {
        if (!rt_error_message()[0]) abort(); /* says why (a quoted input string is escaped when printed) */
        return 0;
    }
    if (c.r < 1 || c.r > CKPT_PEFT_MAX_R || !(c.alpha > 0) || !isfinite(c.alpha) ||
        !(c.dropout >= 0 && c.dropout < 1) || c.n_targets < 1)
        abort();
    for (int i = 0; i < c.n_targets; i++)
        if (!c.targets[i][0]) abort();
    char *text = ckpt_peft_config_json(&c);
    ckpt_peft_config back;
    if (ckpt_peft_config_parse(text, strlen(text), "fuzz (written back)", &back) != RT_OK || !same(&c, &back)) abort();
    cJSON_free(text);
    ckpt_peft_config_free(&back);
    ckpt_peft_config_free(&c);
    return 0;
}
