/* libFuzzer target for the SuperGLUE JSONL readers and the cloze patterns: any bytes read as a
 * task's .jsonl file must either load, with every example's texts valid UTF-8 and every
 * pattern either filling or failing with a message, or fail with a message; never crash or
 * leak. The first input byte picks the task (low bits) and whether labels are required
 * (bit 7). Built and run by tests/test_fuzz_smoke.sh; by hand from the repository root:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -I. \
 *       tests/fuzz/fuzz_data_superglue.c data/data_superglue.c data/data_pvp.c runtime/base/rt_json.c \
 *       runtime/base/rt_status.c runtime/base/rt_utf8.c runtime/base/rt_fs.c tokenizers/tok_text.c tokenizers/tok_unicode.c \
 *       -ffunction-sections -fdata-sections -Wl,--gc-sections -Wl,-z,start-stop-gc -lcjson -o /tmp/fuzz_sg
 *   /tmp/fuzz_sg -max_total_time=60 tests/fuzz/corpus/fuzz_data_superglue
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_pvp.h"
#include "data/data_superglue.h"
#include "runtime/base/rt_utf8.h"

static void check_text(const char *s) {
    if (s && !rt_utf8_valid(s, strlen(s), NULL)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const data_sg_task *task = data_sg_task_get((data_sg_task_id)((data[0] & 0x7f) % DATA_SG_N_TASKS));
    bool require_labels = data[0] & 0x80;
    data_sg_examples ex;
    rt_status st = data_sg_parse(task, "fuzz.jsonl", (const char *)data + 1, size - 1, require_labels, &ex);
    if (st != RT_OK) {
        if (rt_error_message()[0] == '\0' || ex.n != 0 || ex.ex != NULL) abort(); /* says why, frees all */
        return 0;
    }
    for (size_t i = 0; i < ex.n; i++) {
        const data_sg_example *e = &ex.ex[i];
        check_text(e->text_a);
        check_text(e->text_b);
        check_text(e->text_c);
        if (e->label < DATA_SG_LABEL_NONE || e->label >= task->n_labels) abort();
        if (require_labels && e->label == DATA_SG_LABEL_NONE) abort();
        for (int p = 0; p < data_pvp_n_patterns(task->id); p++) {
            data_pvp_filled f;
            if (data_pvp_fill(task, p, e, &f) != RT_OK) {
                if (rt_error_message()[0] == '\0') abort();
                continue;
            }
            int masks = 0;
            for (int k = 0; k < f.n_parts; k++) {
                masks += f.parts[k].is_mask;
                if (!f.parts[k].is_mask) check_text(f.parts[k].text);
            }
            if (masks != 1) abort();
            data_pvp_filled_free(&f);
        }
    }
    data_sg_examples_free(&ex);
    return 0;
}
