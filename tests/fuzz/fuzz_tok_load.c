/* libFuzzer target for the BPE loaders: the fuzz input becomes a merges file (first half, split
 * at the first NUL byte) and a vocab.json (second half), which tok_load reads from a temporary
 * directory; when they load, a few encodes and decodes run on the result. Any crash, leak or
 * sanitizer report is a bug: a malformed file must come back as RT_ERR_FORMAT/RT_ERR_IO.
 *
 * Not built by CMake or ctest. Build and run with clang from the repository root:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_POSIX_C_SOURCE=200809L \
 *     -D_DEFAULT_SOURCE -I. tests/fuzz/fuzz_tok_load.c tokenizers/tok.c tokenizers/tok_bpe.c \
 *     tokenizers/tok_unicode.c runtime/rt_status.c -lcjson -o /tmp/fuzz_tok_load
 *   mkdir -p /tmp/fuzz_corpus && /tmp/fuzz_tok_load /tmp/fuzz_corpus -max_len=4096 -max_total_time=60
 *
 * A seed helps it reach the merge code quickly: printf 'a b\0{"a":0,"b":1,"ab":2}' > seed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizers/tok.h"

static char fuzz_dir[64];

static void write_bytes(const char *path, const uint8_t *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_dir[0]) {
        snprintf(fuzz_dir, sizeof fuzz_dir, "/tmp/fuzz_tok_XXXXXX");
        if (!mkdtemp(fuzz_dir)) abort();
    }
    const uint8_t *nul = memchr(data, 0, size);
    size_t merges_len = nul ? (size_t)(nul - data) : size / 2;
    size_t vocab_off = nul ? merges_len + 1 : merges_len;
    char merges[128], vocab[128];
    snprintf(merges, sizeof merges, "%s/merges.txt", fuzz_dir);
    snprintf(vocab, sizeof vocab, "%s/vocab.json", fuzz_dir);
    write_bytes(merges, data, merges_len);
    write_bytes(vocab, data + vocab_off, size - vocab_off);

    tok_tokenizer *t = NULL;
    if (tok_load(fuzz_dir, &t) == RT_OK) {
        static const char *const texts[] = {"", "ab", "a b  ab\n", "'s 're \xff\xfe 123 ", "<|endoftext|>ab"};
        tok_ids ids = {0};
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
            tok_ids_clear(&ids);
            if (tok_encode(t, texts[i], strlen(texts[i]), &ids) != RT_OK) abort();
            char *back = NULL;
            if (tok_decode(t, ids.ids, ids.n, &back) != RT_OK) abort();
            free(back);
        }
        tok_ids_clear(&ids);
        if (tok_encode_pair(t, "ab", "ba", &ids) != RT_OK) abort();
        for (int32_t id = -1; id <= tok_vocab_size(t); id++) (void)tok_id_to_piece(t, id);
        tok_ids_free(&ids);
        tok_free(t);
    }
    return 0;
}
