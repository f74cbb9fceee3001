/* libFuzzer target for the torch zip container (ckpt_zip) and the checkpoint on top of it
 * (ckpt_torch: pickle + storage checks): any byte string must open cleanly or fail with a
 * status, never crash or read out of bounds. Not built by ctest. Build and run:
 *
 *   clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -D_POSIX_C_SOURCE=200809L \
 *     -D_DEFAULT_SOURCE -I. tests/fuzz/fuzz_ckpt_zip.c checkpoints/ckpt_zip.c checkpoints/ckpt_torch.c \
 *     checkpoints/ckpt_pickle.c checkpoints/ckpt_name_index.c runtime/base/rt_status.c runtime/base/rt_dtype.c \
 *     runtime/base/rt_mapped.c -lz -lm -o /tmp/fuzz_zip
 *   cp -r tests/fuzz/corpus/fuzz_ckpt_zip /tmp/zip_corpus
 *   /tmp/fuzz_zip -max_total_time=60 -max_len=8192 /tmp/zip_corpus
 *
 * The readers take a path (they mmap), so each input goes through a per-process temp file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "checkpoints/ckpt_torch.h"
#include "checkpoints/ckpt_zip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "%s/fuzz_zip_%ld.pt", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
                 (long)getpid());
    FILE *fp = fopen(path, "wb");
    if (!fp) return 0;
    if (size) fwrite(data, 1, size, fp);
    fclose(fp);
    ckpt_zip *z = NULL;
    if (ckpt_zip_open(path, &z) == RT_OK) {
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < ckpt_zip_count(z); i++) {
            const void *d = NULL;
            size_t n = 0;
            if (ckpt_zip_find(z, ckpt_zip_name(z, i)) != (long)i) abort();
            if (ckpt_zip_data(z, i, &d, &n) != RT_OK) continue;
            if (n != ckpt_zip_size(z, i)) abort();
            for (size_t b = 0; b < n; b++) sink ^= ((const uint8_t *)d)[b];
        }
        (void)sink;
        ckpt_zip_close(z);
    }
    ckpt_torch_file *t = NULL;
    if (ckpt_torch_open(path, &t) == RT_OK) {
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < ckpt_torch_count(t); i++) {
            ckpt_st_tensor x;
            ckpt_torch_tensor(t, i, &x);
            for (size_t b = 0; b < x.nbytes; b++) sink ^= ((const uint8_t *)x.data)[b];
        }
        (void)sink;
        ckpt_torch_close(t);
    }
    return 0;
}
