/* libFuzzer target for the tokenized cache's parser (data_cache_parse): any payload must either
 * parse into sets whose rows lie inside their ids and agree with their lengths, or fail with a
 * message, never crash or leak. The checksums would stop nearly every input at the start, so the
 * target wraps the fuzzed payload (the sets and their table) in a valid start (magic, version)
 * and trailer (count, size, CRC-32, Adler-32, end mark); the first input byte picks the set count (1 to 4).
 * Built and run by tests/test_fuzz_smoke.sh; by hand, from the repository root:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. tests/fuzz/fuzz_data_cache.c \
 *       data/data_cache.c data/data_cache_format.c data/data_rows.c runtime/base/rt_atomic.c runtime/base/rt_fs.c \
 *       runtime/base/rt_mapped.c runtime/base/rt_status.c runtime/base/rt_log.c -lz -o /tmp/fuzz_data_cache
 *   /tmp/fuzz_data_cache -max_total_time=60 tests/fuzz/corpus/fuzz_data_cache
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/data_cache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const int n_sets = 1 + (data[0] & 3);
    const size_t payload = size - 1;
    unsigned char *buf = malloc(16 + payload + 48); /* malloc'd: 8-byte aligned, as a mapping is */
    memset(buf, 0, 16 + payload + 48);
    memcpy(buf, "TZDSET\0\1", 8);
    const uint32_t version = 2, count = (uint32_t)n_sets;
    const uint64_t len = payload;
    const uint32_t c32 = (uint32_t)crc32(crc32(0L, Z_NULL, 0), data + 1, (uInt)payload);
    const uint32_t a32 = (uint32_t)adler32(adler32(0L, Z_NULL, 0), data + 1, (uInt)payload);
    memcpy(buf + 8, &version, 4);
    memcpy(buf + 16, data + 1, payload);
    unsigned char *t = buf + 16 + payload;
    memcpy(t, &count, 4);
    memcpy(t + 8, &len, 8);
    memcpy(t + 16, &c32, 4);
    memcpy(t + 20, &a32, 4);
    memcpy(t + 40, "TZDS-END", 8);
    data_tokenized sets[4];
    rt_status st = data_cache_parse("fuzz.tzds", buf, 16 + payload + 48, NULL, n_sets, sets);
    if (st != RT_OK) {
        free(buf);
        if (rt_error_message()[0] == '\0') abort(); /* every failure says why */
        return 0;
    }
    for (int s = 0; s < n_sets; s++) {
        const data_tokenized *d = &sets[s];
        for (size_t i = 0; i < d->n; i++) {
            if (d->offsets[i + 1] < d->offsets[i] || d->offsets[i + 1] - d->offsets[i] != (size_t)d->lengths[i])
                abort();
            if (d->len_a[i] < 0 || d->len_a[i] > d->lengths[i] || d->lengths[i] > d->max_len) abort();
            for (size_t k = d->offsets[i]; k < d->offsets[i + 1]; k++) (void)d->ids[k]; /* inside: ASan checks */
        }
        data_tokenized_free(&sets[s]);
    }
    free(buf); /* after the sets, which point into it */
    return 0;
}
