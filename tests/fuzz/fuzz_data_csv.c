/* libFuzzer target for the RFC 4180 reader (data/data_csv.h): any bytes must either parse into a
 * header and rows of its width whose fields lie inside the buffer and are valid UTF-8, or fail with
 * a message, never crash or leak. The first input byte picks the delimiter (',' or a tab).
 * test_fuzz_smoke builds and runs it briefly; to run it longer, from the repository root:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
 *       -I. tests/fuzz/fuzz_data_csv.c data/data_csv.c data/data_tsv.c runtime/base/rt_status.c \
 *       runtime/base/rt_utf8.c runtime/base/rt_fs.c -o /tmp/fuzz_data_csv
 *   /tmp/fuzz_data_csv -max_total_time=60 tests/fuzz/corpus/fuzz_data_csv
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_csv.h"
#include "runtime/base/rt_utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const char delim = data[0] & 1 ? '\t' : ',';
    data_tsv t;
    rt_status st = data_csv_parse("fuzz.csv", (const char *)data + 1, size - 1, delim, &t);
    if (st != RT_OK) {
        if (rt_error_message()[0] == '\0') abort(); /* every failure says why */
        return 0;
    }
    if (!t.header || t.n_header < 1) abort();
    for (int c = 0; c < t.n_header; c++)
        if (!rt_utf8_valid(t.header[c], strlen(t.header[c]), NULL)) abort();
    for (size_t r = 0; r < t.n_rows; r++) {
        if (data_tsv_ncols(&t, r) != t.n_header || t.row_line[r] < 2) abort();
        for (int c = 0; c < t.n_header; c++) {
            const char *f = data_tsv_field(&t, r, c);
            if (f < t.buf || f > t.buf + size || !rt_utf8_valid(f, strlen(f), NULL)) abort();
        }
    }
    data_tsv_free(&t);
    return 0;
}
