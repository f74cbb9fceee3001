/* libFuzzer target for a user's data files (data/data_table.h, data/data_user.h): any bytes, read
 * as CSV, TSV, JSON Lines or a JSON array (the first input byte picks which, and whether labels
 * split at '|' into multi-label classes), must either give a table whose cells are valid UTF-8
 * without NUL, or fail with a message; a table then goes through the task resolution and, when
 * that works, into examples (a multi-label row's targets are 0 or 1, one a class). Never a crash or a leak.
 * test_fuzz_smoke builds and runs it briefly; to run it longer, from the repository root:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
 *       -I. tests/fuzz/fuzz_data_table.c data/data_table.c data/data_user.c data/data_csv.c \
 *       data/data_tsv.c data/data_jsonl.c data/data_glue.c runtime/base/rt_json.c runtime/base/rt_status.c \
 *       runtime/base/rt_utf8.c runtime/base/rt_fs.c -lcjson -ffunction-sections -fdata-sections \
 *       -Wl,--gc-sections -o /tmp/fuzz_data_table
 *   /tmp/fuzz_data_table -max_total_time=60 tests/fuzz/corpus/fuzz_data_table
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_user.h"
#include "runtime/base/rt_utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const data_format fmt = (data_format)(DATA_FORMAT_CSV + data[0] % 4);
    data_table t;
    rt_status st = data_table_parse("fuzz", fmt, (const char *)data + 1, size - 1, &t);
    if (st != RT_OK) {
        if (rt_error_message()[0] == '\0') abort(); /* every failure says why */
        return 0;
    }
    if (t.n_rows < 1 || t.format != fmt) abort();
    for (int c = 0; c < t.n_cols; c++)
        if (!rt_utf8_valid(t.col_names[c], strlen(t.col_names[c]), NULL)) abort();
    for (size_t r = 0; r < t.n_rows; r++)
        for (int c = 0; c < t.n_cols; c++) {
            const char *s = data_table_cell(&t, r, c);
            if (s && !rt_utf8_valid(s, strlen(s), NULL)) abort();
            if ((unsigned)data_table_kind(&t, r, c) > DATA_CELL_OBJECT) abort();
        }
    data_user_opts o = {.label_separator = data[0] & 4 ? "|" : NULL};
    data_user_task task;
    if (data_user_task_resolve(&t, &o, &task) == RT_OK) {
        data_examples ex;
        const bool multi = task.type == DATA_TASK_MULTI_LABEL;
        if (task.n_text < 1 || (task.type != DATA_TASK_REGRESSION && task.n_labels < 2)) abort();
        if (data_user_examples(&task, &t, true, &ex) == RT_OK) {
            if (multi && ex.target_width != task.n_labels) abort();
            for (size_t i = 0; i < ex.n; i++) {
                if (!ex.text_a[i] || !*ex.text_a[i] ||
                    (task.type == DATA_TASK_CLASSIFICATION && (ex.labels[i] < 0 || ex.labels[i] >= task.n_labels)))
                    abort();
                for (int k = 0; multi && k < task.n_labels; k++) {
                    const float y = ex.targets[i * (size_t)task.n_labels + (size_t)k];
                    if (y != 0.0f && y != 1.0f) abort();
                }
            }
            data_examples_free(&ex);
        } else if (rt_error_message()[0] == '\0') {
            abort();
        }
        data_user_task_free(&task);
    } else if (rt_error_message()[0] == '\0') {
        abort();
    }
    data_table_free(&t);
    return 0;
}
