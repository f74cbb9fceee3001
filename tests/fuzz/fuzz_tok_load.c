/* libFuzzer target for the tokenizer loaders. The first input byte picks the format, the rest
 * becomes its file(s) in a per-process temporary directory, which tok_load reads:
 *   0: byte-level BPE: merges.txt (up to the first NUL byte, else the first half) + vocab.json
 *   1: WordPiece vocab.txt        2: tokenizer.json (BPE or WordPiece)
 *   3: SentencePiece spiece.model (T5; parsed by libsentencepiece, then tok_t5.c)
 * When they load, a few encodes and decodes run on the result. Any crash, leak or sanitizer
 * report is a bug: a malformed file must come back as RT_ERR_FORMAT/RT_ERR_IO.
 *
 * Not built by CMake or ctest; tests/test_fuzz_smoke.sh builds and runs it, and its
 * fuzz_tok_load line is the one list of the sources it links (tok_spm.cc is C++ over
 * libsentencepiece, so it is compiled with clang++ and the link is clang++'s). To run it
 * longer: FUZZ_SECONDS=60 bash tests/test_fuzz_smoke.sh.
 *
 * libsentencepiece itself is not instrumented: ASan sees its heap only through malloc/free
 * (leaks, double frees), not its out-of-bounds reads. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tokenizers/tok.h"

static char fuzz_dir[64];

static void write_bytes(const char *path, const uint8_t *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
}

static const char *const kinds[] = {"bpe", "wp", "json", "spm"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[128], a[160], b[160];
    if (!fuzz_dir[0]) {
        snprintf(fuzz_dir, sizeof fuzz_dir, "/tmp/fuzz_tok_XXXXXX");
        if (!mkdtemp(fuzz_dir)) abort();
        for (size_t k = 0; k < 4; k++) {
            snprintf(dir, sizeof dir, "%s/%s", fuzz_dir, kinds[k]);
            if (mkdir(dir, 0700) != 0) abort();
        }
    }
    if (size == 0) return 0;
    int kind = data[0] % 4;
    data++;
    size--;
    snprintf(dir, sizeof dir, "%s/%s", fuzz_dir, kinds[kind]);
    if (kind == 0) {
        const uint8_t *nul = memchr(data, 0, size);
        size_t merges_len = nul ? (size_t)(nul - data) : size / 2;
        size_t vocab_off = nul ? merges_len + 1 : merges_len;
        snprintf(a, sizeof a, "%s/merges.txt", dir);
        snprintf(b, sizeof b, "%s/vocab.json", dir);
        write_bytes(a, data, merges_len);
        write_bytes(b, data + vocab_off, size - vocab_off);
    } else {
        static const char *const names[] = {NULL, "vocab.txt", "tokenizer.json", "spiece.model"};
        snprintf(a, sizeof a, "%s/%s", dir, names[kind]);
        write_bytes(a, data, size);
    }

    tok_tokenizer *t = NULL;
    if (tok_load(dir, &t) == RT_OK) {
        static const char *const texts[] = {"",
                                            "ab",
                                            "a b  ab\n",
                                            "'s 're \xff\xfe 123 ",
                                            "<|endoftext|>ab",
                                            "Hello World [CLS] </s> \xe4\xb8\xad\xe6\x96\x87"};
        tok_ids ids = {0};
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
            tok_ids_clear(&ids);
            if (tok_encode(t, texts[i], strlen(texts[i]), &ids) != RT_OK) {
                if (kind == 0) abort(); /* byte-level BPE encodes any bytes; the others may refuse bad UTF-8 */
                continue;
            }
            char *back = NULL;
            if (tok_decode(t, ids.ids, ids.n, &back) != RT_OK) abort();
            free(back);
            if (tok_decode_skip_special(t, ids.ids, ids.n, &back) != RT_OK) abort();
            free(back);
        }
        tok_ids_clear(&ids);
        (void)tok_encode_pair(t, "ab", "ba", &ids); /* GLM: RT_ERR_UNSUPPORTED */
        for (int32_t id = -1; id <= tok_vocab_size(t); id++) {
            const char *piece = tok_id_to_piece(t, id);
            if (piece) (void)tok_piece_to_id(t, piece);
            (void)tok_is_special(t, id);
        }
        (void)tok_kind_name(t);
        tok_ids_free(&ids);
        tok_free(t);
    }
    return 0;
}
