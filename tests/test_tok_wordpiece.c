/* BERT WordPiece (tokenizers/tok_wordpiece.c) against Hugging Face BertTokenizer: llama.cpp's
 * bert-bge vectors, every MRPC sentence and 2872 SST-2 sentences (the fixture's 2000 train rows
 * and all of dev) with the uncased and the cased vocab, normalizer edge cases and random code points, decoding, pair encoding with truncation and token types
 * through data/ (goldens from scripts/golden/gen_tok_golden.py), the loaders (vocab.txt alone, a
 * directory with tokenizer_config.json, tokenizer.json) and the errors for a broken vocab. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "data/data_dataset.h"
#include "tests/testutil.h"
#include "tests/toktest.h"
#include "tokenizers/tok.h"
#include "tokenizers/tok_internal.h"

/* llama.cpp's bert-bge vectors (bge-small-en-v1.5 uses the bert-base-uncased vocab). */
static void test_vectors(const tok_tokenizer *t) {
    char *inp = tzt_read_all(tz_data_path("tokenizer-test-vectors/ggml-vocab-bert-bge.gguf.inp"), NULL);
    char *outs = tzt_read_all(tz_data_path("tokenizer-test-vectors/ggml-vocab-bert-bge.gguf.out"), NULL);
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
        good += tzt_check_encode(t, "bert-bge", p, (size_t)(m - p), &want);
    }
    tok_ids_free(&want);
    TZ_EXPECT(n == 46 && good == n, "bert-bge vectors: %d of %d match", good, n);
done:
    free(inp);
    free(outs);
}

/* Calls fn on each sentence of a GLUE file's columns (header skipped). */
typedef void (*sentence_fn)(const char *text, void *ctx);

static size_t for_each_sentence(const char *path, int n_cols, int first, int last, sentence_fn fn, void *ctx) {
    char *data = tzt_read_all(path, NULL);
    if (!data) return 0;
    size_t n = 0;
    char *line = strchr(data, '\n');
    for (line = line ? line + 1 : NULL; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        char *cols[8];
        int nc = 0;
        for (char *c = line; nc < n_cols; nc++) {
            cols[nc] = c;
            char *tab = strchr(c, '\t');
            if (!tab) {
                nc++;
                break;
            }
            *tab = '\0';
            c = tab + 1;
        }
        TZ_EXPECT(nc == n_cols, "%s: expected %d columns, found %d", path, n_cols, nc);
        for (int k = first; k <= last && nc == n_cols; k++, n++) fn(cols[k], ctx);
        line = nl ? nl + 1 : NULL;
    }
    free(data);
    return n;
}

typedef struct {
    const tok_tokenizer *t;
    const char *what;
    char *gold;               /* MRPC: next golden line */
    const unsigned char *crc; /* SST-2: next golden CRC */
    size_t n_crc, n, good;
    tok_ids want;
} golden_ctx;

static void mrpc_one(const char *text, void *vctx) {
    golden_ctx *c = vctx;
    char *nl = c->gold ? strchr(c->gold, '\n') : NULL;
    c->n++;
    if (!nl) return;
    *nl = '\0';
    tzt_parse_ids(c->gold, &c->want);
    c->gold = nl + 1;
    c->good += (size_t)tzt_check_encode(c->t, c->what, text, strlen(text), &c->want);
}

/* Every MRPC sentence (train then dev, columns 4 and 5) against HF's ids. */
static void test_mrpc(const tok_tokenizer *t, const char *golden, const char *what) {
    char *gold = tzt_read_gz(tz_source_path(golden));
    if (!gold) return;
    golden_ctx c = {t, what, gold, NULL, 0, 0, 0, {0}};
    for_each_sentence(tz_asset_path("glue-mrpc/train.tsv"), 5, 3, 4, mrpc_one, &c);
    for_each_sentence(tz_asset_path("glue-mrpc/dev.tsv"), 5, 3, 4, mrpc_one, &c);
    TZ_EXPECT(c.n == 8152 && c.good == c.n, "%s: %zu of %zu MRPC sentences match HF", what, c.good, c.n);
    tok_ids_free(&c.want);
    free(gold);
}

/* zlib.crc32 of the ids as little-endian int32, as the generator writes it. */
static uint32_t crc_ids(const tok_ids *v) {
    uLong crc = crc32(0L, Z_NULL, 0);
    for (size_t i = 0; i < v->n; i++) {
        uint32_t u = (uint32_t)v->ids[i];
        unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                              (unsigned char)(u >> 24)};
        crc = crc32(crc, b, 4);
    }
    return (uint32_t)crc;
}

static void sst2_one(const char *text, void *vctx) {
    golden_ctx *c = vctx;
    size_t i = c->n++;
    if (i >= c->n_crc) return;
    const unsigned char *b = c->crc + 4 * i;
    uint32_t want = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    tok_ids_clear(&c->want);
    rt_status st = tok_encode(c->t, text, strlen(text), &c->want);
    int ok = st == RT_OK && crc_ids(&c->want) == want;
    if (!ok && tzt_n_reported++ < 8) {
        fprintf(stderr, "%s: SST-2 sentence %zu differs from HF (crc32): \"%.200s\"\n", c->what, i, text);
        tzt_print_ids("got ", &c->want);
    }
    c->good += (size_t)ok;
}

/* Every SST-2 sentence of the fixture (train's 2000 rows then dev, column 1) against the CRC of
 * HF's ids. */
static void test_sst2(const tok_tokenizer *t, const char *golden, const char *what) {
    size_t len = 0;
    char *crc = tzt_read_all(tz_source_path(golden), &len);
    if (!crc) return;
    golden_ctx c = {t, what, NULL, (const unsigned char *)crc, len / 4, 0, 0, {0}};
    for_each_sentence(tz_data_path("glue-sst2/train.tsv"), 2, 0, 0, sst2_one, &c);
    for_each_sentence(tz_data_path("glue-sst2/dev.tsv"), 2, 0, 0, sst2_one, &c);
    TZ_EXPECT(c.n == 2872 && c.n == c.n_crc && c.good == c.n, "%s: %zu of %zu SST-2 sentences match HF (%zu CRCs)",
              what, c.good, c.n, c.n_crc);
    tok_ids_free(&c.want);
    free(crc);
}

/* bert_extra.tsv: hex input, uncased ids, cased ids. */
static void test_extra(const tok_tokenizer *unc, const tok_tokenizer *cas) {
    char *data = tzt_read_all(tz_source_path("tests/golden/tok/bert_extra.tsv"), NULL);
    if (!data) return;
    size_t n = 0, good = 0;
    tok_ids want = {0};
    for (char *line = data; *line;) {
        char *nl = strchr(line, '\n');
        *nl = '\0';
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        TZ_EXPECT(t2 != NULL, "bert_extra.tsv: expected 3 columns");
        if (!t2) break;
        char *text = malloc((size_t)(t1 - line) / 2 + 1);
        size_t len = tzt_unhex(line, (size_t)(t1 - line), text);
        tzt_parse_ids(t1 + 1, &want);
        int ok = tzt_check_encode(unc, "uncased extra", text, len, &want);
        tzt_parse_ids(t2 + 1, &want);
        ok &= tzt_check_encode(cas, "cased extra", text, len, &want);
        good += (size_t)ok;
        n++;
        free(text);
        line = nl + 1;
    }
    tok_ids_free(&want);
    TZ_EXPECT(n > 1000 && good == n, "%zu of %zu BERT extra cases match HF", good, n);
    free(data);
}

/* bert_decode.tsv: ids and HF's decode (the WordPiece decoder with its cleanup). */
static void test_decode(const tok_tokenizer *t) {
    char *data = tzt_read_all(tz_source_path("tests/golden/tok/bert_decode.tsv"), NULL);
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
        want[wl] = '\0';
        char *got = NULL;
        rt_status st = tok_decode(t, ids.ids, ids.n, &got);
        int ok = st == RT_OK && strcmp(got, want) == 0;
        if (!ok && tzt_n_reported++ < 8) fprintf(stderr, "decode %s:\n  want \"%s\"\n  got  \"%s\"\n", line, want, got);
        good += (size_t)ok;
        n++;
        free(got);
        free(want);
        line = nl + 1;
    }
    TZ_EXPECT(n == 300 && good == n, "%zu of %zu decodes match HF", good, n);
    int32_t bad = 999999;
    char *out = NULL;
    TZ_EXPECT(tok_decode(t, &bad, 1, &out) == RT_ERR_FORMAT && out == NULL, "an unknown id is an error");
    tok_ids_free(&ids);
    free(data);
}

/* [CLS] a [SEP] b [SEP], the template data/ finds from it, and HF's truncated pairs with their
 * token_type_ids (bert_pairs.tsv: the first 200 MRPC dev pairs at max_length 24). */
static void test_pairs(const tok_tokenizer *t) {
    tok_ids ids = {0};
    TZ_EXPECT_OK(tok_encode_pair(t, "Hello", "world!", &ids));
    const int32_t want_pair[] = {101, 7592, 102, 2088, 999, 102};
    TZ_EXPECT(ids.n == 6 && memcmp(ids.ids, want_pair, sizeof want_pair) == 0, "pair ids");
    tok_ids_clear(&ids);
    TZ_EXPECT_OK(tok_encode_pair(t, "Hello", NULL, &ids));
    TZ_EXPECT(ids.n == 3 && ids.ids[0] == 101 && ids.ids[1] == 7592 && ids.ids[2] == 102, "single ids");
    tok_ids_free(&ids);
    TZ_EXPECT(tok_bos_id(t) == 101 && tok_eos_id(t) == 102 && tok_pad_id(t) == 0, "special ids %d %d %d", tok_bos_id(t),
              tok_eos_id(t), tok_pad_id(t));
    TZ_EXPECT(strcmp(tok_kind_name(t), "bert-wordpiece") == 0, "kind %s", tok_kind_name(t));
    TZ_EXPECT(tok_vocab_size(t) == 30522 && tok_piece_to_id(t, "[MASK]") == 103 &&
                  strcmp(tok_id_to_piece(t, 2088), "world") == 0,
              "vocab");

    data_pair_template tp;
    TZ_EXPECT_OK(data_pair_template_detect(t, &tp));
    TZ_EXPECT(tp.n_prefix == 1 && tp.prefix[0] == 101 && tp.n_middle == 1 && tp.middle[0] == 102 && tp.n_suffix == 1 &&
                  tp.suffix[0] == 102 && tp.n_single_suffix == 1,
              "BERT template detected");

    enum { N = 200 };
    const char *a[N], *b[N];
    size_t n = 0;
    char *dev = tzt_read_all(tz_asset_path("glue-mrpc/dev.tsv"), NULL);
    char *gold = tzt_read_all(tz_source_path("tests/golden/tok/bert_pairs.tsv"), NULL);
    if (!dev || !gold) goto done;
    char *line = strchr(dev, '\n') + 1;
    while (n < N && line && *line) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        char *c[5] = {line};
        for (int k = 1; k < 5; k++) {
            c[k] = strchr(c[k - 1], '\t');
            if (c[k]) *c[k]++ = '\0';
        }
        a[n] = c[3];
        b[n] = c[4];
        n++;
        line = nl ? nl + 1 : NULL;
    }
    data_examples ex;
    memset(&ex, 0, sizeof ex);
    ex.n = n;
    ex.text_a = a;
    ex.text_b = b;
    data_tokenized d;
    memset(&d, 0, sizeof d);
    TZ_EXPECT_OK(data_tokenize_pairs(&ex, t, 24, &d));
    size_t good = 0;
    tok_ids want = {0}, types = {0};
    char *g = gold;
    for (size_t i = 0; i < d.n && i < n; i++) {
        char *nl = strchr(g, '\n'), *tab = strchr(g, '\t');
        if (!nl || !tab) break;
        *nl = *tab = '\0';
        tzt_parse_ids(g, &want);
        tzt_parse_ids(tab + 1, &types);
        g = nl + 1;
        size_t len = d.offsets[i + 1] - d.offsets[i], len_a = 0;
        while (len_a < types.n && types.ids[len_a] == 0) len_a++;
        int ok = len == want.n && memcmp(d.ids + d.offsets[i], want.ids, len * sizeof(int32_t)) == 0 &&
                 (size_t)d.len_a[i] == len_a;
        if (!ok && tzt_n_reported++ < 8) {
            fprintf(stderr, "pair %zu: len_a %d, want %zu\n", i, d.len_a[i], len_a);
            tzt_print_ids("want", &want);
        }
        good += (size_t)ok;
    }
    TZ_EXPECT(n == N && good == n, "%zu of %zu truncated MRPC pairs match HF (ids and token_type_ids)", good, n);
    tok_ids_free(&want);
    tok_ids_free(&types);
    data_tokenized_free(&d);
done:
    free(dev);
    free(gold);
}

static void expect_ids(const tok_tokenizer *t, const char *text, const int32_t *want, size_t n, const char *what) {
    tok_ids got = {0};
    TZ_EXPECT_OK(tok_encode(t, text, strlen(text), &got));
    TZ_EXPECT(got.n == n && memcmp(got.ids, want, n * sizeof *want) == 0, "%s: %zu ids", what, got.n);
    tok_ids_free(&got);
}

/* A tiny vocab: [PAD] [UNK] [CLS] [SEP] [MASK] then pieces, in a temporary folder. */
static const char *tiny_vocab =
    "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nHello\n##lo\nhel\n!\nwo\n##rld\ncafe\ncafé\n";

static void test_loaders(const char *uncased_path, const char *cased_path) {
    const char *dir = tz_tmpdir();
    char path[1024], cfg[1024], sub[1024];
    tok_tokenizer *t = NULL;
    rt_status st;

    /* vocab.txt alone: lower-cased by default */
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    tz_write_file(path, tiny_vocab, strlen(tiny_vocab));
    t = tzt_load_ok(dir);
    const int32_t lower[] = {5, 9, 12, 10, 11};
    if (t) expect_ids(t, "HELLO! Café world", lower, 5, "default do_lower_case");
    tok_free(t);

    /* tokenizer_config.json turns lower-casing off; strip_accents follows it */
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    const char *c1 = "{\"do_lower_case\": false, \"tokenize_chinese_chars\": true}";
    tz_write_file(cfg, c1, strlen(c1));
    t = tzt_load_ok(path);
    const int32_t cased[] = {6, 9, 13, 10, 11};
    if (t) expect_ids(t, "Hello! café world", cased, 5, "do_lower_case false");
    tok_free(t);
    /* strip_accents set on its own */
    const char *c2 = "{\"do_lower_case\": false, \"strip_accents\": true}";
    tz_write_file(cfg, c2, strlen(c2));
    t = tzt_load_ok(dir);
    const int32_t strip[] = {6, 12};
    if (t) expect_ids(t, "Hello café", strip, 2, "strip_accents without lower-casing");
    tok_free(t);
    const char *c3 = "{\"do_lower_case\": \"yes\"}";
    tz_write_file(cfg, c3, strlen(c3));
    st = tok_load(dir, &t);
    TZ_EXPECT(st == RT_ERR_FORMAT && strstr(rt_error_message(), "do_lower_case"), "bad do_lower_case: %s",
              rt_error_message());
    remove(cfg);

    /* a folder named cased, without a config */
    snprintf(sub, sizeof sub, "%s/bert-base-cased", dir);
    TZ_EXPECT(mkdir(sub, 0755) == 0, "mkdir %s", sub);
    snprintf(path, sizeof path, "%s/vocab.txt", sub);
    tz_write_file(path, tiny_vocab, strlen(tiny_vocab));
    t = tzt_load_ok(sub);
    if (t) expect_ids(t, "Hello", cased, 1, "cased folder name");
    tok_free(t);

    /* tokenizer.json with a WordPiece model */
    snprintf(path, sizeof path, "%s/tokenizer.json", sub);
    const char *js =
        "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 4, \"content\": \"[MASK]\", \"special\": true}],\n"
        " \"normalizer\": {\"type\": \"BertNormalizer\", \"clean_text\": true, \"handle_chinese_chars\": true,\n"
        "   \"strip_accents\": null, \"lowercase\": true},\n"
        " \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"},\n"
        " \"decoder\": {\"type\": \"WordPiece\", \"prefix\": \"##\", \"cleanup\": true},\n"
        " \"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"continuing_subword_prefix\": \"##\",\n"
        "   \"max_input_chars_per_word\": 4, \"vocab\": {\"[PAD]\": 0, \"[UNK]\": 1, \"[CLS]\": 2, \"[SEP]\": 3,\n"
        "   \"[MASK]\": 4, \"hello\": 5, \"hel\": 6, \"##lo\": 7, \"!\": 8}}}\n";
    tz_write_file(path, js, strlen(js));
    t = tzt_load_ok(sub);
    if (t) {
        /* "#" is punctuation, and max_input_chars_per_word 4 makes "hello" [UNK] */
        expect_ids(t, "hel##lo ! [MASK] hello", (const int32_t[]){6, 1, 1, 1, 8, 4, 1}, 7, "tokenizer.json");
        expect_ids(t, "hel!", (const int32_t[]){6, 8}, 2, "tokenizer.json punct");
        TZ_EXPECT(strcmp(tok_kind_name(t), "bert-wordpiece") == 0, "kind");
    }
    tok_free(t);
    t = tzt_load_ok(path);
    if (t) expect_ids(t, "HEL!", (const int32_t[]){6, 8}, 2, "tokenizer.json lowercase");
    tok_free(t);
    /* a tokenizer_config.json beside it decides, as transformers' BertTokenizer does */
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", sub);
    tz_write_file(cfg, c1, strlen(c1));
    t = tzt_load_ok(sub);
    if (t) expect_ids(t, "HEL!", (const int32_t[]){1, 8}, 2, "tokenizer_config.json over tokenizer.json");
    tok_free(t);

    /* max_input_chars_per_word out of any integer's range (the fuzzer's 1.2e91 was undefined
     * behaviour in the check itself), negative, or fractional: RT_ERR_FORMAT naming the field */
    static const char *const bad_max[] = {"1.2e91", "-1", "2.5"};
    for (int i = 0; i < 3; i++) {
        char bad_js[1024];
        snprintf(bad_js, sizeof bad_js,
                 "{\"normalizer\": {\"type\": \"BertNormalizer\"}, \"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"},"
                 " \"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", \"max_input_chars_per_word\": %s,"
                 " \"vocab\": {\"[UNK]\": 0, \"[CLS]\": 1, \"[SEP]\": 2}}}",
                 bad_max[i]);
        snprintf(path, sizeof path, "%s/bad-max%d-tokenizer.json", dir, i);
        tz_write_file(path, bad_js, strlen(bad_js));
        t = NULL;
        st = tok_load(path, &t);
        TZ_EXPECT(st == RT_ERR_FORMAT && t == NULL && strstr(rt_error_message(), "max_input_chars_per_word"),
                  "max_input_chars_per_word %s: %s", bad_max[i], rt_error_message());
    }

    /* a vocab without [CLS], [SEP] or [UNK]: RT_ERR_FORMAT naming the file and the token */
    static const char *const missing[] = {"[CLS]", "[SEP]", "[UNK]"};
    static const char *const vocabs[] = {"[PAD]\n[UNK]\n[SEP]\nx\n", "[PAD]\n[UNK]\n[CLS]\nx\n", "[CLS]\n[SEP]\nx\n"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/broken%d-vocab.txt", dir, i);
        tz_write_file(path, vocabs[i], strlen(vocabs[i]));
        t = NULL;
        st = tok_load(path, &t);
        TZ_EXPECT(st == RT_ERR_FORMAT && t == NULL && strstr(rt_error_message(), path) &&
                      strstr(rt_error_message(), missing[i]),
                  "missing %s: %s", missing[i], rt_error_message());
    }
    snprintf(path, sizeof path, "%s/empty-vocab.txt", dir);
    tz_write_file(path, "", 0);
    st = tok_load(path, &t);
    TZ_EXPECT(st == RT_ERR_FORMAT && strstr(rt_error_message(), path), "empty vocab: %s", rt_error_message());

    /* the shared vocab files: by name, uncased lower-cases and cased does not */
    tok_tokenizer *u = tzt_load_ok(uncased_path), *c = tzt_load_ok(cased_path);
    if (u && c) {
        expect_ids(u, "Hello", (const int32_t[]){7592}, 1, "uncased file");
        expect_ids(c, "Hello", (const int32_t[]){8667}, 1, "cased file");
    }
    tok_free(u);
    tok_free(c);
}

int main(void) {
    char unc_path[1024], cas_path[1024];
    snprintf(unc_path, sizeof unc_path, "%s", tz_asset_path("bert-wordpiece/bert-base-uncased-vocab.txt"));
    snprintf(cas_path, sizeof cas_path, "%s", tz_data_path("bert-wordpiece/bert_base_cased_vocab.txt"));
    tok_tokenizer *unc = tzt_load_ok(unc_path), *cas = tzt_load_ok(cas_path);
    if (unc && cas) {
        test_vectors(unc);
        test_mrpc(unc, "tests/golden/tok/bert_mrpc_uncased.ids.gz", "uncased");
        test_mrpc(cas, "tests/golden/tok/bert_mrpc_cased.ids.gz", "cased");
        test_sst2(unc, "tests/golden/tok/bert_sst2_uncased.crc32", "uncased");
        test_sst2(cas, "tests/golden/tok/bert_sst2_cased.crc32", "cased");
        test_extra(unc, cas);
        test_decode(unc);
        test_pairs(unc);
    }
    tok_free(unc);
    tok_free(cas);
    test_loaders(unc_path, cas_path);
    return tz_test_result("test_tok_wordpiece");
}
