/* Byte-level BPE (tokenizers/tok_bpe.c) against Hugging Face: llama.cpp's GPT-2 and RoBERTa test
 * vectors, every MRPC sentence and a set of edge cases (goldens from
 * scripts/golden/gen_tok_golden.py), both merge paths (stack scan and heap), decoding with
 * U+FFFD replacement, the loaders (directory, single files, tokenizer.json, tokenizer_config.json)
 * and the errors for broken or missing files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "tests/testutil.h"
#include "tests/toktest.h"
#include "tokenizers/tok.h"
#include "tokenizers/tok_internal.h"

/* llama.cpp's vectors: inputs split by "\n__ggml_vocab_test__\n", one output line per input. */
static void test_vectors(const tok_tokenizer *t, const char *name) {
    char inp_path[256], out_path[256];
    snprintf(inp_path, sizeof inp_path, "tokenizer-test-vectors/ggml-vocab-%s.gguf.inp", name);
    snprintf(out_path, sizeof out_path, "tokenizer-test-vectors/ggml-vocab-%s.gguf.out", name);
    char *inp = tzt_read_all(tz_data_path(inp_path), NULL);
    char *outs = tzt_read_all(tz_data_path(out_path), NULL);
    if (!inp || !outs) goto done;
    const char *marker = "\n__ggml_vocab_test__\n";
    char *p = inp, *o = outs;
    int n = 0, good = 0;
    tok_ids want = {0};
    for (char *m; (m = strstr(p, marker)) != NULL; p = m + strlen(marker)) {
        char *nl = strchr(o, '\n');
        if (!nl) break;
        *nl = '\0';
        tzt_parse_ids(o, &want);
        o = nl + 1;
        n++;
        good += tzt_check_encode(t, name, p, (size_t)(m - p), &want);
        tzt_check_roundtrip(t, p, (size_t)(m - p));
    }
    tok_ids_free(&want);
    TZ_EXPECT(n == 46 && good == n, "%s vectors: %d of %d match", name, good, n);
done:
    free(inp);
    free(outs);
}

/* Every MRPC sentence (train then dev, columns 4 and 5) against the HF golden ids. */
static void test_mrpc(const tok_tokenizer *t, const char *golden, const char *what) {
    char *gold = tzt_read_gz(tz_source_path(golden));
    if (!gold) return;
    char *g = gold;
    size_t n = 0, good = 0, trips = 0;
    tok_ids want = {0};
    static const char *const files[] = {"glue-mrpc/train.tsv", "glue-mrpc/dev.tsv"};
    for (int f = 0; f < 2; f++) {
        char *data = tzt_read_all(tz_asset_path(files[f]), NULL);
        if (!data) break;
        char *line = strchr(data, '\n'); /* skip the header */
        for (line = line ? line + 1 : NULL; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = '\0';
            char *cols[5];
            int nc = 0;
            for (char *c = line; nc < 5; nc++) {
                cols[nc] = c;
                char *tab = strchr(c, '\t');
                if (!tab) {
                    nc++;
                    break;
                }
                *tab = '\0';
                c = tab + 1;
            }
            TZ_EXPECT(nc == 5, "%s: expected 5 columns", files[f]);
            for (int k = 3; k < 5 && nc == 5; k++) {
                char *gnl = strchr(g, '\n');
                if (!gnl) break;
                *gnl = '\0';
                tzt_parse_ids(g, &want);
                g = gnl + 1;
                n++;
                good += (size_t)tzt_check_encode(t, what, cols[k], strlen(cols[k]), &want);
                trips += (size_t)tzt_check_roundtrip(t, cols[k], strlen(cols[k]));
            }
            line = nl ? nl + 1 : NULL;
        }
        free(data);
    }
    tok_ids_free(&want);
    TZ_EXPECT(n == 8152 && good == n, "%s: %zu of %zu MRPC sentences match HF", what, good, n);
    TZ_EXPECT(trips == n, "%s: %zu of %zu MRPC sentences round-trip", what, trips, n);
    free(gold);
}

/* extra.tsv: hex input, GPT-2 ids, RoBERTa ids. */
static void test_extra(const tok_tokenizer *gpt2, const tok_tokenizer *rob) {
    char *data = tzt_read_all(tz_source_path("tests/golden/tok/extra.tsv"), NULL);
    if (!data) return;
    size_t n = 0, good = 0;
    tok_ids want = {0};
    for (char *line = data; *line;) {
        char *nl = strchr(line, '\n');
        *nl = '\0';
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        TZ_EXPECT(t2 != NULL, "extra.tsv: expected 3 columns");
        if (!t2) break;
        char *text = malloc((size_t)(t1 - line) / 2 + 1);
        size_t len = tzt_unhex(line, (size_t)(t1 - line), text);
        tzt_parse_ids(t1 + 1, &want);
        int ok = tzt_check_encode(gpt2, "gpt2 extra", text, len, &want);
        tzt_parse_ids(t2 + 1, &want);
        ok &= tzt_check_encode(rob, "roberta extra", text, len, &want);
        ok &= tzt_check_roundtrip(gpt2, text, len);
        good += (size_t)ok;
        n++;
        free(text);
        line = nl + 1;
    }
    tok_ids_free(&want);
    TZ_EXPECT(n > 300 && good == n, "%zu of %zu extra cases match HF", good, n);
    free(data);
}

/* decode.tsv: random ids and HF's decoded text (with U+FFFD for broken UTF-8). */
static void test_decode_golden(const tok_tokenizer *t) {
    char *data = tzt_read_all(tz_source_path("tests/golden/tok/decode.tsv"), NULL);
    if (!data) return;
    size_t n = 0, good = 0;
    tok_ids ids = {0};
    for (char *line = data; *line;) {
        char *nl = strchr(line, '\n');
        *nl = '\0';
        char *tab = strchr(line, '\t');
        *tab = '\0';
        tzt_parse_ids(line, &ids);
        char *want = malloc(strlen(tab + 1) / 2 + 1);
        size_t wl = tzt_unhex(tab + 1, strlen(tab + 1), want);
        char *got = NULL;
        int ok = tok_decode(t, ids.ids, ids.n, &got) == RT_OK && strlen(got) == wl && memcmp(got, want, wl) == 0;
        if (!ok && tzt_n_reported++ < 8) fprintf(stderr, "decode mismatch for ids %s: got \"%s\"\n", line, got);
        good += (size_t)ok;
        n++;
        free(got);
        free(want);
        line = nl + 1;
    }
    tok_ids_free(&ids);
    TZ_EXPECT(n == 300 && good == n, "%zu of %zu decode cases match HF", good, n);
    free(data);
}

static void expect_ids(const tok_tokenizer *t, const char *text, const int32_t *want, size_t n, const char *what) {
    tok_ids w = {(int32_t *)want, n, n};
    TZ_EXPECT(tzt_check_encode(t, what, text, strlen(text), &w), "%s", what);
}

static void expect_pair(const tok_tokenizer *t, const char *a, const char *b, const int32_t *want, size_t n,
                        const char *what) {
    tok_ids got = {0};
    TZ_EXPECT_OK(tok_encode_pair(t, a, b, &got));
    tok_ids w = {(int32_t *)want, n, n};
    TZ_EXPECT(tzt_ids_equal(&got, &w), "%s", what);
    if (!tzt_ids_equal(&got, &w)) tzt_print_ids("got", &got);
    tok_ids_free(&got);
}

/* Expects the load to fail with code, and the message to contain each of needles. */
static void expect_load_error(const char *path, rt_status code, const char *needle1, const char *needle2) {
    tok_tokenizer *t = NULL;
    rt_status st = tok_load(path, &t);
    const char *msg = rt_error_message();
    TZ_EXPECT(st == code, "loading %s: want %s, got %s (%s)", path, rt_status_name(code), rt_status_name(st), msg);
    TZ_EXPECT(t == NULL, "no tokenizer on failure");
    TZ_EXPECT(strstr(msg, needle1) != NULL, "message \"%s\" should contain \"%s\"", msg, needle1);
    if (needle2) TZ_EXPECT(strstr(msg, needle2) != NULL, "message \"%s\" should contain \"%s\"", msg, needle2);
    tok_free(t);
}

/* A hand-made tokenizer.json and vocab/merges pairs: formats, flags and error messages. */
static void test_small_files(void) {
    const char *dir = tz_tmpdir();
    char path[512], path2[512];
    /* vocab: a few byte symbols and merges; 'x' is missing so it is dropped, as HF does */
    const char *vocab = "{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"abc\":4,\"\\u0120\":5,\"\\u0120ab\":6}";
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    char json[2048];
    snprintf(json, sizeof json,
             "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":7,\"content\":\"<eot>\",\"special\":true,"
             "\"lstrip\":false,\"rstrip\":true}],\"normalizer\":null,"
             "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
             "\"post_processor\":null,\"model\":{\"type\":\"BPE\",\"vocab\":%s,"
             "\"merges\":[\"a b\",[\"ab\",\"c\"],[\"\\u0120\",\"ab\"]]}}",
             vocab);
    tz_write_file(path, json, strlen(json));
    tok_tokenizer *t = tzt_load_ok(dir);
    if (t) {
        static const int32_t want[] = {4, 6, 7, 2, 3};
        expect_ids(t, "abc ab<eot>  cxab", want, 5, "tokenizer.json with string and pair merges");
        TZ_EXPECT(tok_vocab_size(t) == 8, "vocab size %d", tok_vocab_size(t));
        TZ_EXPECT(strcmp(tok_kind_name(t), "gpt2-bpe") == 0, "kind");
        TZ_EXPECT(tok_bos_id(t) == -1 && tok_pad_id(t) == -1, "no specials");
        TZ_EXPECT(tok_piece_to_id(t, "<eot>") == 7, "added token in the vocab");
    }
    tok_free(t);

    /* RobertaProcessing names the pair ids */
    snprintf(json, sizeof json,
             "{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,"
             "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true},"
             "\"post_processor\":{\"type\":\"RobertaProcessing\",\"sep\":[\"c\",2],\"cls\":[\"b\",1]},"
             "\"model\":{\"type\":\"BPE\",\"vocab\":%s,\"merges\":[\"a b\",\"\\u0120 ab\"]}}",
             vocab);
    snprintf(path, sizeof path, "%s/rob.json", dir);
    tz_write_file(path, json, strlen(json));
    t = tzt_load_ok(path);
    if (t) {
        static const int32_t want[] = {1, 6, 2, 2, 6, 2}; /* add_prefix_space turns "ab" into " ab" */
        expect_pair(t, "ab", "ab", want, 6, "RobertaProcessing pair");
        TZ_EXPECT(strcmp(tok_kind_name(t), "roberta-bpe") == 0, "kind %s", tok_kind_name(t));
    }
    tok_free(t);

    snprintf(json, sizeof json, "{\"version\":\"1.0\",\"model\":{\"type\":\"WordPiece\",\"vocab\":%s}}", vocab);
    tz_write_file(path, json, strlen(json));
    expect_load_error(path, RT_ERR_UNSUPPORTED, "model.type", "WordPiece");

    snprintf(json, sizeof json,
             "{\"version\":\"1.0\",\"pre_tokenizer\":{\"type\":\"ByteLevel\"},"
             "\"model\":{\"type\":\"BPE\",\"vocab\":%s,\"merges\":[\"a b\",[\"ab\",\"q\"]]}}",
             vocab);
    tz_write_file(path, json, strlen(json));
    expect_load_error(path, RT_ERR_FORMAT, "model.merges[1]", "\"q\"");

    /* vocab.json + merges.txt: #version header, broken lines name file:line */
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    tz_write_file(path, vocab, strlen(vocab));
    snprintf(path2, sizeof path2, "%s/merges.txt", dir);
    tz_write_file(path2, "#version: 0.2\na b\nab c\n", strlen("#version: 0.2\na b\nab c\n"));
    /* the directory also holds tokenizer.json (preferred); the vocab file picks its merges */
    t = tzt_load_ok(path);
    if (t) {
        static const int32_t want[] = {4, 5, 3};
        expect_ids(t, "abc ab", want, 3, "vocab.json + merges.txt");
    }
    tok_free(t);
    t = tzt_load_ok(path2); /* the merges file finds its vocab */
    tok_free(t);

    tz_write_file(path2, "#version: 0.2\na b\nab c extra\n", strlen("#version: 0.2\na b\nab c extra\n"));
    expect_load_error(path, RT_ERR_FORMAT, "merges.txt:3:", "two space-separated");
    tz_write_file(path2, "a b\nab q\n", strlen("a b\nab q\n"));
    expect_load_error(path, RT_ERR_FORMAT, "merges.txt:2:", "\"q\"");
    tz_write_file(path2, "a b\n\nab c\n", strlen("a b\n\nab c\n"));
    expect_load_error(path, RT_ERR_FORMAT, "merges.txt:2:", "two space-separated");
    tz_write_file(path2, "a c\n", strlen("a c\n")); /* "ac" is not in the vocab */
    expect_load_error(path, RT_ERR_FORMAT, "merges.txt:1:", "\"ac\"");
    tz_write_file(path2, "a b\n", strlen("a b\n"));
    tz_write_file(path, "{\"a\":0,\n\"b\":1,\n\"c\" 2}", strlen("{\"a\":0,\n\"b\":1,\n\"c\" 2}"));
    expect_load_error(path, RT_ERR_FORMAT, "vocab.json:3:", "invalid JSON");
    tz_write_file(path, "{\"a\":0,\"b\":\"one\"}", strlen("{\"a\":0,\"b\":\"one\"}"));
    expect_load_error(path, RT_ERR_FORMAT, "vocab.json", "\"b\"");
    /* an id past any vocabulary says so (it was "expected a non-negative integer id"); two pieces
     * with one id are named (one was lost, blamed later on a merges.txt line) (issue 34) */
    tz_write_file(path, "{\"a\":0,\"b\":2e9}", strlen("{\"a\":0,\"b\":2e9}"));
    expect_load_error(path, RT_ERR_FORMAT, "entry \"b\": id 2000000000 is past the largest", NULL);
    tz_write_file(path, "{\"a\":0,\"b\":1,\"c\":1}", strlen("{\"a\":0,\"b\":1,\"c\":1}"));
    expect_load_error(path, RT_ERR_FORMAT, "entry \"c\": id 1 is also the id of \"b\"", NULL);

    /* missing files */
    expect_load_error("/nonexistent/tokenizer/dir", RT_ERR_IO, "/nonexistent/tokenizer/dir", NULL);
    snprintf(path, sizeof path, "%s/empty", dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", path);
    TZ_EXPECT(system(cmd) == 0, "mkdir");
    expect_load_error(path, RT_ERR_IO, "no tokenizer found", NULL);
    snprintf(path, sizeof path, "%s/empty/encoder.json", dir);
    tz_write_file(path, vocab, strlen(vocab));
    expect_load_error(path, RT_ERR_IO, "no merges file", NULL);
}

int main(void) {
    char gpt2_dir[512], rob_vocab[512];
    snprintf(gpt2_dir, sizeof gpt2_dir, "%s", tz_asset_path("gpt2-bpe"));
    snprintf(rob_vocab, sizeof rob_vocab, "%s", tz_data_path("roberta-bpe/roberta-vocab.json"));
    tok_tokenizer *gpt2 = tzt_load_ok(gpt2_dir);
    tok_tokenizer *rob = tzt_load_ok(rob_vocab);
    if (!gpt2 || !rob) return tz_test_result("test_tok_bpe");

    TZ_EXPECT(tok_vocab_size(gpt2) == 50257, "gpt2 vocab %d", tok_vocab_size(gpt2));
    TZ_EXPECT(tok_bos_id(gpt2) == 50256 && tok_eos_id(gpt2) == 50256 && tok_pad_id(gpt2) == -1, "gpt2 specials");
    TZ_EXPECT(strcmp(tok_kind_name(gpt2), "gpt2-bpe") == 0, "gpt2 kind");
    TZ_EXPECT(strcmp(tok_id_to_piece(gpt2, 262), "\xc4\xa0the") == 0, "piece 262 is Ġthe");
    TZ_EXPECT(tok_piece_to_id(gpt2, "\xc4\xa0the") == 262, "Ġthe is 262");
    TZ_EXPECT(tok_piece_to_id(gpt2, "no such piece") == -1, "unknown piece");
    TZ_EXPECT(tok_id_to_piece(gpt2, 50257) == NULL && tok_id_to_piece(gpt2, -1) == NULL, "out of range");
    TZ_EXPECT(tok_vocab_size(rob) == 50265, "roberta vocab %d", tok_vocab_size(rob));
    TZ_EXPECT(tok_bos_id(rob) == 0 && tok_eos_id(rob) == 2 && tok_pad_id(rob) == 1, "roberta specials");
    TZ_EXPECT(strcmp(tok_kind_name(rob), "roberta-bpe") == 0, "roberta kind");

    test_vectors(gpt2, "gpt-2");
    test_vectors(rob, "roberta-bpe");
    test_mrpc(gpt2, "tests/golden/tok/mrpc_gpt2.ids.gz", "gpt2");
    test_mrpc(rob, "tests/golden/tok/mrpc_roberta.ids.gz", "roberta");
    test_extra(gpt2, rob);
    /* the heap merge path must agree with the stack scan on every word */
    size_t saved = tok_bpe_heap_min;
    tok_bpe_heap_min = 2;
    test_mrpc(gpt2, "tests/golden/tok/mrpc_gpt2.ids.gz", "gpt2 (heap merges)");
    test_extra(gpt2, rob);
    tok_bpe_heap_min = saved;
    test_decode_golden(gpt2);

    /* specials and pairs, as HF's GPT2Tokenizer / RobertaTokenizer (add_special_tokens=True) */
    static const int32_t g_pair[] = {31373, 6894}, r_pair[] = {0, 42891, 2, 2, 8331, 2}, r_one[] = {0, 42891, 2};
    expect_pair(gpt2, "hello", "world", g_pair, 2, "gpt2 pair is a + b");
    expect_pair(gpt2, "hello", NULL, g_pair, 1, "gpt2 single");
    expect_pair(rob, "hello", "world", r_pair, 6, "roberta pair");
    expect_pair(rob, "hello", NULL, r_one, 3, "roberta single");
    static const int32_t g_eot[] = {64, 220, 50256, 275}, r_mask[] = {31414, 50264, 232};
    expect_ids(gpt2, "a <|endoftext|> b", g_eot, 4, "<|endoftext|> is split out");
    expect_ids(rob, "Hello <mask> world", r_mask, 3, "<mask> eats the space before it (roberta-base)");

    /* decoding errors and odd input */
    int32_t bad = 50257;
    char *s = NULL;
    TZ_EXPECT(tok_decode(gpt2, &bad, 1, &s) == RT_ERR_FORMAT, "out-of-range id");
    free(s);
    s = NULL;
    tok_ids ids = {0};
    TZ_EXPECT_OK(tok_encode(gpt2, "\xff\xfe abc \xe2\x82", 9, &ids));
    TZ_EXPECT(ids.n >= 4, "invalid UTF-8 still encodes byte by byte (%zu ids)", ids.n);
    TZ_EXPECT_OK(tok_decode(gpt2, ids.ids, ids.n, &s));
    TZ_EXPECT(s && strcmp(s, "\xef\xbf\xbd\xef\xbf\xbd abc \xef\xbf\xbd") == 0, "decoded \"%s\"", s);
    free(s);
    s = NULL;
    TZ_EXPECT_OK(tok_decode(gpt2, NULL, 0, &s));
    TZ_EXPECT(s && s[0] == '\0', "empty decode");
    free(s);

    /* a long word takes the heap path and stays fast (quadratic would take minutes) */
    size_t big = 200000;
    char *longw = malloc(big + 1);
    for (size_t i = 0; i < big; i++) longw[i] = "!?"[i % 7 == 0];
    longw[big] = '\0';
    TZ_EXPECT(tzt_check_roundtrip(gpt2, longw, big), "200 KB punctuation word round-trips");
    free(longw);
    tok_ids_free(&ids);

    /* the other ways to name the GPT-2 files, and tiny-gpt2's HF directory */
    tok_tokenizer *t = tzt_load_ok(tz_asset_path("gpt2-bpe/vocab.bpe"));
    static const int32_t hw[] = {15496, 995};
    if (t) expect_ids(t, "Hello world", hw, 2, "loaded from vocab.bpe");
    tok_free(t);
    t = tzt_load_ok(tz_data_path("tiny-gpt2"));
    if (t) {
        expect_ids(t, "Hello world", hw, 2, "tiny-gpt2");
        TZ_EXPECT(tok_vocab_size(t) == 50257 && tok_eos_id(t) == 50256 && tok_bos_id(t) == 50256, "tiny-gpt2 ids");
        TZ_EXPECT(tok_pad_id(t) == -1, "tiny-gpt2 has no pad (pad_token null)");
    }
    tok_free(t);

    test_small_files();
    tok_free(gpt2);
    tok_free(rob);
    return tz_test_result("test_tok_bpe");
}
