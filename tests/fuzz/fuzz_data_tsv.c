/* libFuzzer target for the GLUE TSV reader: any bytes must either parse into rows whose
 * fields lie inside the buffer, hold no tab and are valid UTF-8, or fail with a message,
 * never crash or leak. The first input byte picks the options (header or not, 1 to 8
 * required columns).
 * Not built by CMake or ctest. Build and run from the repository root with clang:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
 *       -I. tests/fuzz/fuzz_data_tsv.c data/data_tsv.c runtime/base/rt_status.c runtime/base/rt_utf8.c \
 *       -o /tmp/fuzz_data_tsv
 *   mkdir -p /tmp/tsv_corpus && cp assets/glue-mrpc/dev.tsv /tmp/tsv_corpus/
 *   /tmp/fuzz_data_tsv -max_total_time=60 /tmp/tsv_corpus
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_tsv.h"
#include "runtime/base/rt_utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    bool has_header = data[0] & 1;
    int min_cols = 1 + ((data[0] >> 1) & 7);
    data_tsv t;
    rt_status st = data_tsv_parse("fuzz.tsv", (const char *)data + 1, size - 1, has_header, min_cols, &t);
    if (st != RT_OK) {
        if (rt_error_message()[0] == '\0') abort(); /* every failure says why */
        return 0;
    }
    for (size_t r = 0; r < t.n_rows; r++) {
        if (data_tsv_ncols(&t, r) < min_cols) abort();
        for (int c = 0; c < data_tsv_ncols(&t, r); c++) {
            const char *f = data_tsv_field(&t, r, c);
            if (strchr(f, '\t') || strchr(f, '\n') || !rt_utf8_valid(f, strlen(f), NULL)) abort();
        }
    }
    if (has_header && (t.header == NULL || t.n_header < min_cols)) abort();
    for (int c = 0; c < t.n_header; c++)
        if (!rt_utf8_valid(t.header[c], strlen(t.header[c]), NULL)) abort();
    data_tsv_free(&t);
    return 0;
}
