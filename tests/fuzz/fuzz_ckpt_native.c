/* libFuzzer target for the .tzck reader: any byte string must open cleanly or fail with a
 * status, never crash or read out of bounds. Not built by ctest. Build and run:
 *
 *   clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -D_POSIX_C_SOURCE=200809L \
 *     -D_DEFAULT_SOURCE -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION -I. tests/fuzz/fuzz_ckpt_native.c runtime/base/rt_json.c runtime/base/rt_atomic.c \
 *     checkpoints/ckpt_safetensors.c checkpoints/ckpt_native.c \
 *     runtime/base/rt_status.c runtime/base/rt_dtype.c runtime/base/rt_fs.c runtime/base/rt_mapped.c -lcjson -lz -lm -o /tmp/fuzz_native
 *   mkdir -p /tmp/native_corpus     # seed it with a small .tzck (test_ckpt_native writes some)
 *   /tmp/fuzz_native -max_total_time=60 -max_len=4096 /tmp/native_corpus
 *
 * FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION turns off the CRC comparisons in ckpt_native.c,
 * so mutations get past them to the bounds checks. The reader takes a path (it mmaps), so each input goes through a
 * per-process temp file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/ckpt_native.h"
#include "runtime/base/rt_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) /* tmpfs when there is one: the file round trip dominates each run */
        snprintf(path, sizeof path, "%s/fuzz_native_%ld.tzck", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
                 (long)getpid());
    FILE *fp = fopen(path, "wb");
    if (!fp) return 0;
    if (size) fwrite(data, 1, size, fp);
    fclose(fp);
    ckpt_native_file *f = NULL;
    if (ckpt_native_open(path, &f) != RT_OK) return 0;
    const char *meta = ckpt_native_metadata(f);
    cJSON *j = NULL;
    if (rt_json_parse(meta, strlen(meta), path, &j) == RT_OK) cJSON_Delete(j);
    for (size_t i = 0; i < ckpt_native_count(f); i++) {
        ckpt_native_record r;
        ckpt_native_record_at(f, i, &r);
        volatile uint8_t sink = 0;
        for (size_t b = 0; b < r.nbytes; b++) sink ^= ((const uint8_t *)r.data)[b];
        (void)sink;
        if (!ckpt_native_has(f, r.name)) abort();
        if (r.dtype == RT_F32 || r.dtype == RT_F16 || r.dtype == RT_BF16 || r.dtype == RT_F64) {
            float *dst = malloc((r.numel ? r.numel : 1) * sizeof(float));
            if (ckpt_native_read_f32(f, r.name, dst, r.numel) != RT_OK) abort();
            free(dst);
        }
    }
    ckpt_native_close(f);
    return 0;
}
