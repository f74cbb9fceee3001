/* libFuzzer target for the safe pickle reader: any byte string must be read or refused
 * with a status, never crash, read out of bounds, leak, or call anything. Not built by
 * ctest. Build and run:
 *
 *   clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -D_POSIX_C_SOURCE=200809L \
 *     -D_DEFAULT_SOURCE -I. tests/fuzz/fuzz_ckpt_pickle.c checkpoints/ckpt_pickle.c \
 *     runtime/base/rt_status.c runtime/base/rt_dtype.c -lm -o /tmp/fuzz_pickle
 *   cp -r tests/fuzz/corpus/fuzz_ckpt_pickle /tmp/pickle_corpus
 *   /tmp/fuzz_pickle -max_total_time=60 -max_len=4096 /tmp/pickle_corpus
 *
 * The corpus holds the data.pkl of torch-written files (plain, FlagAI- and Megatron-style)
 * and the hostile posix.system pickle. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_pickle_state s;
    if (ckpt_pickle_read(data, size, "fuzz.pkl", &s) != RT_OK) {
        if (s.n_tensors || s.n_scalars) abort(); /* a failure leaves nothing behind */
        return 0;
    }
    for (size_t i = 0; i < s.n_tensors; i++) {
        const ckpt_pickle_tensor *t = &s.tensors[i];
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
        if (numel != t->numel || !t->name || !t->storage_key) abort();
        /* a non-empty tensor lies inside its storage */
        if (t->numel && (t->storage_offset > t->storage_numel || t->numel > t->storage_numel - t->storage_offset))
            abort();
    }
    for (size_t i = 0; i < s.n_scalars; i++)
        if (!s.scalars[i].name) abort();
    ckpt_pickle_state_free(&s);
    return 0;
}
