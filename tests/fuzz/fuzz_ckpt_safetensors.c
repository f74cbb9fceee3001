/* libFuzzer target for the safetensors reader: any byte string must open cleanly or fail
 * with a status, never crash or read out of bounds. Not built by ctest. Build and run:
 *
 *   clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -D_POSIX_C_SOURCE=200809L \
 *     -D_DEFAULT_SOURCE -I. tests/fuzz/fuzz_ckpt_safetensors.c runtime/base/rt_json.c runtime/base/rt_atomic.c \
 *     checkpoints/ckpt_safetensors.c checkpoints/ckpt_native.c \
 *     runtime/base/rt_status.c runtime/base/rt_dtype.c runtime/base/rt_fs.c runtime/base/rt_mapped.c -lcjson -lz -lm -o /tmp/fuzz_st
 *   mkdir -p /tmp/st_corpus && cp tests/data/tiny-gpt2/model.safetensors /tmp/st_corpus/
 *   /tmp/fuzz_st -max_total_time=60 -max_len=8192 /tmp/st_corpus
 *
 * The reader takes a path (it mmaps), so each input goes through a per-process temp file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "checkpoints/ckpt_safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) /* tmpfs when there is one: the file round trip dominates each run */
        snprintf(path, sizeof path, "%s/fuzz_st_%ld.safetensors", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
                 (long)getpid());
    FILE *fp = fopen(path, "wb");
    if (!fp) return 0;
    if (size) fwrite(data, 1, size, fp);
    fclose(fp);
    ckpt_st_file *f = NULL;
    if (ckpt_safetensors_open(path, &f) != RT_OK) return 0;
    for (size_t i = 0; i < ckpt_safetensors_count(f); i++) {
        ckpt_st_tensor t;
        ckpt_safetensors_tensor(f, i, &t);
        /* touch every byte the reader vouched for */
        volatile uint8_t sink = 0;
        for (size_t b = 0; b < t.nbytes; b++) sink ^= ((const uint8_t *)t.data)[b];
        (void)sink;
        ckpt_st_tensor again;
        if (ckpt_safetensors_find(f, t.name, &again) != RT_OK || again.data != t.data) abort();
        if (t.dtype == RT_F32 || t.dtype == RT_F16 || t.dtype == RT_BF16 || t.dtype == RT_F64) {
            float *dst = malloc((t.numel ? t.numel : 1) * sizeof(float));
            if (ckpt_safetensors_read_f32(f, t.name, dst, t.numel) != RT_OK) abort();
            free(dst);
        }
    }
    (void)ckpt_safetensors_metadata(f, "format");
    ckpt_safetensors_close(f);
    return 0;
}
