/* SentencePiece (tokenizers/tok_spm.cc) and T5's tokenizer on top of it (tokenizers/tok_t5.c)
 * against the references: the plain SentencePiece vectors made with sentencepiece 0.1.97 for the
 * T5 and GLM models, and Hugging Face's slow T5Tokenizer (goldens from
 * scripts/golden/gen_t5_tok_golden.py) on every Multi30k line of val and the first 2000 of train
 * (the first 50 of each file in full), hand-picked hard cases (sentinels in the text, whitespace, NFKC, unknown characters),
 * random id runs to decode, and pairs. Also the wrapper on its own over three models, tok_load's
 * ways to find a T5 tokenizer, its settings files and its errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "tests/toktest.h"
#include "tokenizers/tok.h"
#include "tokenizers/tok_spm.h"

#define T5_MODEL "t5-spiece/spiece.model"                          /* under assets/ */
#define VEC_INP "tokenizer-test-vectors/ggml-vocab-gpt-2.gguf.inp" /* the three .inp files are one */

/* ---- the wrapper on its own ---- */

typedef struct {
    const tok_spm *m;
    const char *what;
    size_t good;
} vec_ctx;

static void vec_one(const char *text, size_t len, const tok_ids *want, void *vctx) {
    vec_ctx *c = vctx;
    tok_ids got = {0};
    TZ_EXPECT_OK(tok_spm_encode(c->m, text, len, &got));
    c->good += (size_t)tzt_check_ids(c->what, text, len, &got, want);
    tok_ids_free(&got);
}

/* The sentencepiece 0.1.97 vectors: plain SentencePiece ids, no </s>. */
static void test_vectors(const char *model_path, const char *out_rel, const char *what) {
    tok_spm *m = NULL;
    TZ_EXPECT_OK(tok_spm_load(model_path, &m));
    if (!m) return;
    vec_ctx c = {m, what, 0};
    size_t n = tzt_for_each_vector(VEC_INP, out_rel, vec_one, &c);
    TZ_EXPECT(n == 46 && c.good == n, "%s vectors: %zu of %zu match", what, c.good, n);
    tok_spm_free(m);
}

static void test_wrapper(void) {
    tok_spm *m = NULL;
    TZ_EXPECT_OK(tok_spm_load(tz_asset_path(T5_MODEL), &m));
    if (!m) return;
    TZ_EXPECT(tok_spm_piece_count(m) == 32000, "t5 pieces %d", tok_spm_piece_count(m));
    TZ_EXPECT(tok_spm_unk_id(m) == 2 && tok_spm_bos_id(m) == -1 && tok_spm_eos_id(m) == 1 && tok_spm_pad_id(m) == 0,
              "t5 special ids %d %d %d %d", tok_spm_unk_id(m), tok_spm_bos_id(m), tok_spm_eos_id(m), tok_spm_pad_id(m));
    TZ_EXPECT(tok_spm_piece_type(m, 0) == TOK_SPM_CONTROL && tok_spm_piece_type(m, 1) == TOK_SPM_CONTROL &&
                  tok_spm_piece_type(m, 2) == TOK_SPM_UNKNOWN && tok_spm_piece_type(m, 3) == TOK_SPM_NORMAL,
              "t5 piece types");
    TZ_EXPECT(strcmp(tok_spm_piece(m, 3), "\xe2\x96\x81") == 0 && strcmp(tok_spm_piece(m, 1), "</s>") == 0 &&
                  strcmp(tok_spm_piece(m, 8774), "\xe2\x96\x81Hello") == 0,
              "t5 pieces 3, 1, 8774");

    tok_ids ids = {0};
    const char *text = "translate English to German: The house is wonderful.";
    static const int32_t want_tr[] = {13959, 1566, 12, 2968, 10, 37, 629, 19, 1627, 5};
    TZ_EXPECT_OK(tok_spm_encode(m, text, strlen(text), &ids));
    TZ_EXPECT(ids.n == 10 && memcmp(ids.ids, want_tr, sizeof want_tr) == 0, "t5 encode (SOURCES.md example)");
    tok_ids_clear(&ids);

    /* an unknown character is its own surface as a piece, <unk> as an id */
    char **pieces = NULL;
    size_t np = 0;
    const char *hug = "Hello \xf0\x9f\xa4\x97 world";
    TZ_EXPECT_OK(tok_spm_encode_pieces(m, hug, strlen(hug), &pieces, &np));
    TZ_EXPECT(np == 4 && strcmp(pieces[0], "\xe2\x96\x81Hello") == 0 && strcmp(pieces[1], "\xe2\x96\x81") == 0 &&
                  strcmp(pieces[2], "\xf0\x9f\xa4\x97") == 0 && strcmp(pieces[3], "\xe2\x96\x81world") == 0,
              "t5 pieces of \"Hello 🤗 world\" (%zu)", np);
    tok_spm_pieces_free(pieces, np);
    TZ_EXPECT_OK(tok_spm_encode(m, hug, strlen(hug), &ids));
    static const int32_t want_unk[] = {8774, 3, 2, 296};
    TZ_EXPECT(ids.n == 4 && memcmp(ids.ids, want_unk, sizeof want_unk) == 0, "t5 ids with <unk>");

    /* SentencePiece's own decode: <unk> is " ⁇ ", control pieces vanish */
    char *s = NULL;
    TZ_EXPECT_OK(tok_spm_decode_ids(m, ids.ids, ids.n, &s));
    TZ_EXPECT(s && strcmp(s, "Hello  \xe2\x81\x87  world") == 0, "decode ids: \"%s\"", s);
    free(s);
    s = NULL;
    const int32_t ctl[] = {0, 8774, 1, 296};
    TZ_EXPECT_OK(tok_spm_decode_ids(m, ctl, 4, &s));
    TZ_EXPECT(s && strcmp(s, "Hello world") == 0, "control pieces decode to nothing: \"%s\"", s);
    free(s);
    s = NULL;
    /* as Python's sp.decode: a piece not in the model ("▁zzqq") comes out as it is, "▁" included */
    const char *const ps[] = {"Hello", "\xe2\x96\x81world", "\xe2\x96\x81zzqq", "\xe2\x96\x81", ".", "<unk>"};
    TZ_EXPECT_OK(tok_spm_decode_pieces(m, ps, 6, &s));
    TZ_EXPECT(s && strcmp(s, "Hello world\xe2\x96\x81zzqq . \xe2\x81\x87 ") == 0, "decode pieces: \"%s\"", s);
    free(s);
    s = NULL;
    const int32_t bad = 32000;
    TZ_EXPECT(tok_spm_decode_ids(m, &bad, 1, &s) == RT_ERR_FORMAT && s == NULL, "id 32000 is out of range");
    TZ_EXPECT(strstr(rt_error_message(), "32000") != NULL, "message names the id: %s", rt_error_message());
    tok_ids_free(&ids);
    tok_spm_free(m);

    /* other models: sentencepiece's own test model (<unk>=0, <s>=1, </s>=2, no pad) and GLM's BPE model */
    m = NULL;
    TZ_EXPECT_OK(tok_spm_load(tz_data_path("sentencepiece-testdata/test_model.model"), &m));
    if (m) {
        static const int32_t want[] = {9, 459, 11, 939, 44, 11, 4, 142, 82, 8, 28, 21, 132, 6};
        const char *girl = "I saw a girl with a telescope.";
        tok_ids got = {0};
        TZ_EXPECT_OK(tok_spm_encode(m, girl, strlen(girl), &got));
        TZ_EXPECT(got.n == 14 && memcmp(got.ids, want, sizeof want) == 0, "test_model.model ids");
        TZ_EXPECT(tok_spm_piece_count(m) == 1000 && tok_spm_unk_id(m) == 0 && tok_spm_bos_id(m) == 1 &&
                      tok_spm_eos_id(m) == 2 && tok_spm_pad_id(m) == -1,
                  "test_model.model specials");
        TZ_EXPECT_OK(tok_spm_decode_ids(m, got.ids, got.n, &s));
        TZ_EXPECT(s && strcmp(s, girl) == 0, "test_model.model round trip: \"%s\"", s);
        free(s);
        s = NULL;
        tok_ids_free(&got);
    }
    tok_spm_free(m);
    m = NULL;
    TZ_EXPECT_OK(tok_spm_load(tz_asset_path("glm-chinese-spm/cog-pretrain.model"), &m));
    if (m) {
        TZ_EXPECT(tok_spm_piece_count(m) == 50000 && strcmp(tok_spm_piece(m, 3), "<n>") == 0 &&
                      tok_spm_piece_type(m, 1) == TOK_SPM_CONTROL && tok_spm_eos_id(m) == 2,
                  "GLM model");
        char **p = NULL;
        size_t n = 0;
        const char *hello = "Hello world, \xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c";
        TZ_EXPECT_OK(tok_spm_encode_pieces(m, hello, strlen(hello), &p, &n));
        TZ_EXPECT(n == 6 && strcmp(p[0], "\xe2\x96\x81H") == 0 &&
                      strcmp(p[4], "\xe2\x96\x81\xe4\xbd\xa0\xe5\xa5\xbd") == 0,
                  "GLM pieces (SOURCES.md example), %zu", n);
        tok_spm_pieces_free(p, n);
    }
    tok_spm_free(m);

    /* errors name the file */
    m = NULL;
    TZ_EXPECT(tok_spm_load("/nonexistent/x.model", &m) == RT_ERR_IO && m == NULL, "missing model");
    TZ_EXPECT(strstr(rt_error_message(), "/nonexistent/x.model") != NULL, "%s", rt_error_message());
    char path[600];
    snprintf(path, sizeof path, "%s/garbage.model", tz_tmpdir());
    tz_write_file(path, "not a model\n", 12);
    TZ_EXPECT(tok_spm_load(path, &m) == RT_ERR_FORMAT && m == NULL, "garbage model");
    TZ_EXPECT(strstr(rt_error_message(), path) != NULL, "%s", rt_error_message());
    tok_spm_free(NULL);
}

/* ---- T5 through tok.h against HF's slow T5Tokenizer ---- */

/* HF's tokenizer(text)["input_ids"]: encode, then </s> unless the ids already end with it. Text
 * holding a NUL byte cannot go through tok_encode_pair (a C string), so it is done by hand. */
static rt_status encode_with_eos(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out) {
    tok_ids_clear(out);
    if (strlen(text) == len) return tok_encode_pair(t, text, NULL, out);
    rt_status st = tok_encode(t, text, len, out);
    if (st == RT_OK && (out->n == 0 || out->ids[out->n - 1] != tok_eos_id(t))) tok_ids_push(out, tok_eos_id(t));
    return st;
}

/* Multi30k's train captions are a test fixture (the first 2000 lines), val ships in assets/. */
static const char *multi30k_path(const char *file) {
    char rel[64];
    snprintf(rel, sizeof rel, "multi30k-en-de/%s", file);
    return strncmp(file, "val.", 4) == 0 ? tz_asset_path(rel) : tz_data_path(rel);
}

static void test_multi30k_crc(const tok_tokenizer *t, const char *split, const char *lang, size_t want_n) {
    char rel[128], golden[128];
    snprintf(rel, sizeof rel, "%s.%s", split, lang);
    snprintf(golden, sizeof golden, "tests/golden/tok/t5_multi30k_%s_%s.crc32", split, lang);
    size_t len = 0;
    char *crc = tzt_read_all(tz_source_path(golden), &len);
    char *data = tzt_read_all(multi30k_path(rel), NULL);
    if (!crc || !data) goto done;
    const unsigned char *c = (const unsigned char *)crc;
    size_t n = 0, good = 0, n_crc = len / 4;
    tok_ids ids = {0};
    char *cur = data;
    for (char *line; (line = tzt_next_line(&cur)) != NULL; n++) {
        if (n >= n_crc) continue;
        const unsigned char *b = c + 4 * n;
        uint32_t want = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        rt_status st = encode_with_eos(t, line, strlen(line), &ids);
        int ok = st == RT_OK && tzt_crc_ids(&ids) == want;
        if (!ok && tzt_n_reported++ < 8) {
            fprintf(stderr, "%s line %zu differs from HF (crc32): \"%.200s\"\n", rel, n + 1, line);
            tzt_print_ids("got ", &ids);
        }
        good += (size_t)ok;
    }
    tok_ids_free(&ids);
    TZ_EXPECT(n == want_n && n == n_crc && good == n, "%s: %zu of %zu lines match HF (%zu CRCs)", rel, good, n, n_crc);
done:
    free(crc);
    free(data);
}

/* t5_multi30k_head.tsv: ids and decoded text of the first 50 lines of each file, in full. */
static void test_multi30k_head(const tok_tokenizer *t) {
    static const char *const files[] = {"train.en", "train.de", "val.en", "val.de"};
    char *gold = tzt_read_all(tz_source_path("tests/golden/tok/t5_multi30k_head.tsv"), NULL);
    if (!gold) return;
    char *g = gold;
    size_t n = 0, good = 0, dec = 0;
    tok_ids want = {0}, got = {0};
    for (int f = 0; f < 4; f++) {
        char rel[64];
        snprintf(rel, sizeof rel, "multi30k-en-de/%s", files[f]);
        char *data = tzt_read_all(multi30k_path(files[f]), NULL);
        if (!data) break;
        char *cur = data, *line;
        for (int i = 0; i < 50 && (line = tzt_next_line(&cur)) != NULL; i++) {
            char *gl = tzt_next_line(&g), *tab = gl ? strchr(gl, '\t') : NULL;
            TZ_EXPECT(tab != NULL, "t5_multi30k_head.tsv: line %zu", n + 1);
            if (!tab) break;
            *tab = '\0';
            tzt_parse_ids(gl, &want);
            TZ_EXPECT_OK(encode_with_eos(t, line, strlen(line), &got));
            char what[96];
            snprintf(what, sizeof what, "%s line %d", rel, i + 1);
            good += (size_t)tzt_check_ids(what, line, strlen(line), &got, &want);
            dec += (size_t)tzt_check_decode(t, what, &want, tab + 1, strlen(tab + 1));
            n++;
        }
        free(data);
    }
    TZ_EXPECT(n == 200 && good == n && dec == n, "Multi30k heads: %zu ids and %zu decodes of %zu match HF", good, dec,
              n);
    tok_ids_free(&want);
    tok_ids_free(&got);
    free(gold);
}

/* t5_extra.tsv: hex input, ids with </s>, hex of HF's decode of those ids. */
static void test_extra(const tok_tokenizer *t) {
    size_t n = 0, dec = 0;
    size_t good = tzt_check_extra_file(t, "tests/golden/tok/t5_extra.tsv", "t5 extra", encode_with_eos, &n, &dec);
    TZ_EXPECT(n > 400 && good == n && dec == n, "t5 extra: %zu ids and %zu decodes of %zu match HF", good, dec, n);
}

/* t5_decode.tsv: random id runs (pieces, </s>, <pad>, <unk>, "▁", sentinels) and HF's decode. */
static void test_decode(const tok_tokenizer *t) {
    size_t n = 0, good = tzt_check_decode_file(t, "tests/golden/tok/t5_decode.tsv", "t5 decode", &n);
    TZ_EXPECT(n == 300 && good == n, "t5 decode: %zu of %zu match HF", good, n);
    int32_t bad[] = {8774, 32100};
    char *out = NULL;
    TZ_EXPECT(tok_decode(t, bad, 2, &out) == RT_ERR_FORMAT && out == NULL, "id 32100 is an error");
    TZ_EXPECT(strstr(rt_error_message(), "32100") != NULL, "%s", rt_error_message());
    TZ_EXPECT_OK(tok_decode(t, NULL, 0, &out));
    TZ_EXPECT(out && out[0] == '\0', "empty decode");
    free(out);
}

/* t5_pairs.tsv: hex a, hex b, tokenizer(a, b)["input_ids"]. */
static void test_pairs(const tok_tokenizer *t) {
    char *data = tzt_read_all(tz_source_path("tests/golden/tok/t5_pairs.tsv"), NULL);
    if (!data) return;
    size_t n = 0, good = 0;
    tok_ids want = {0}, got = {0};
    char *cur = data;
    for (char *line; (line = tzt_next_line(&cur)) != NULL; n++) {
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        TZ_EXPECT(t2 != NULL, "t5_pairs.tsv: expected 3 columns");
        if (!t2) break;
        char a[256], b[256];
        size_t la = tzt_unhex(line, (size_t)(t1 - line), a), lb = tzt_unhex(t1 + 1, (size_t)(t2 - t1 - 1), b);
        a[la] = b[lb] = '\0';
        tzt_parse_ids(t2 + 1, &want);
        tok_ids_clear(&got);
        TZ_EXPECT_OK(tok_encode_pair(t, a, b, &got));
        good += (size_t)tzt_check_ids("t5 pair", a, la, &got, &want);
    }
    TZ_EXPECT(n == 10 && good == n, "t5 pairs: %zu of %zu match HF", good, n);
    tok_ids_free(&want);
    tok_ids_free(&got);
    free(data);
}

static void test_t5_basics(const tok_tokenizer *t) {
    TZ_EXPECT(strcmp(tok_kind_name(t), "t5-spiece") == 0, "kind %s", tok_kind_name(t));
    TZ_EXPECT(tok_vocab_size(t) == 32100, "vocab size %d", tok_vocab_size(t));
    TZ_EXPECT(tok_bos_id(t) == -1 && tok_eos_id(t) == 1 && tok_pad_id(t) == 0, "special ids %d %d %d", tok_bos_id(t),
              tok_eos_id(t), tok_pad_id(t));
    TZ_EXPECT(tok_piece_to_id(t, "<extra_id_0>") == 32099 && tok_piece_to_id(t, "<extra_id_99>") == 32000 &&
                  tok_piece_to_id(t, "<extra_id_100>") == -1,
              "sentinel ids");
    TZ_EXPECT(strcmp(tok_id_to_piece(t, 32099), "<extra_id_0>") == 0 &&
                  strcmp(tok_id_to_piece(t, 32000), "<extra_id_99>") == 0 && tok_id_to_piece(t, 32100) == NULL &&
                  strcmp(tok_id_to_piece(t, 2), "<unk>") == 0 && strcmp(tok_id_to_piece(t, 1), "</s>") == 0,
              "sentinel pieces");
    TZ_EXPECT(tok_piece_to_id(t, "\xe2\x96\x81Hello") == 8774, "piece lookup");
    /* the example of HF's T5Tokenizer docstring (legacy=True): the "▁" before "." stays */
    tok_ids got = {0};
    TZ_EXPECT_OK(tok_encode_pair(t, "Hello <extra_id_0>.", NULL, &got));
    static const int32_t want[] = {8774, 32099, 3, 5, 1};
    TZ_EXPECT(got.n == 5 && memcmp(got.ids, want, sizeof want) == 0, "HF docstring example");
    tok_ids_free(&got);
}

/* tok_load on a folder: spiece.model before tokenizer.json, tokenizer_config.json and
 * special_tokens_map.json settings, and their errors. */
static void test_loaders(void) {
    const char *dir = tz_tmpdir();
    char model[600], cfg[600], map[600], path[600];
    snprintf(model, sizeof model, "%s/spiece.model", dir);
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    snprintf(map, sizeof map, "%s/special_tokens_map.json", dir);
    TZ_EXPECT(symlink(tz_asset_path(T5_MODEL), model) == 0, "symlink %s", model);
    /* an HF T5 folder's tokenizer.json is a Unigram model we do not read: spiece.model wins */
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    const char *tj = "{\"version\": \"1.0\", \"model\": {\"type\": \"Unigram\", \"vocab\": []}}";
    tz_write_file(path, tj, strlen(tj));
    tok_tokenizer *t = tzt_load_ok(dir);
    if (t) {
        TZ_EXPECT(strcmp(tok_kind_name(t), "t5-spiece") == 0 && tok_vocab_size(t) == 32100, "folder");
        tok_ids got = {0};
        TZ_EXPECT_OK(tok_encode(t, "a <extra_id_1> b", strlen("a <extra_id_1> b"), &got));
        static const int32_t want[] = {3, 9, 32098, 3, 115}; /* "▁", "a", <extra_id_1>, "▁", "b" */
        TZ_EXPECT(got.n == 5 && memcmp(got.ids, want, sizeof want) == 0, "sentinel in a folder's tokenizer");
        tok_ids_free(&got);
    }
    tok_free(t);

    /* extra_ids: 10 -> <extra_id_0> = 32009, and a further added token from added_tokens_decoder */
    const char *c1 = "{\"extra_ids\": 10, \"added_tokens_decoder\": {\"32010\": {\"content\": \"<sep>\", "
                     "\"lstrip\": false, \"rstrip\": false, \"special\": true}}}";
    tz_write_file(cfg, c1, strlen(c1));
    t = tzt_load_ok(model);
    if (t) {
        TZ_EXPECT(tok_vocab_size(t) == 32011 && tok_piece_to_id(t, "<extra_id_0>") == 32009 &&
                      tok_piece_to_id(t, "<extra_id_9>") == 32000 && tok_piece_to_id(t, "<extra_id_10>") == -1 &&
                      tok_piece_to_id(t, "<sep>") == 32010,
                  "extra_ids 10 (vocab %d)", tok_vocab_size(t));
        tok_ids got = {0};
        TZ_EXPECT_OK(tok_encode(t, "a<sep>b", 7, &got));
        TZ_EXPECT(got.n == 5 && got.ids[2] == 32010, "added token in the text");
        char *s = NULL;
        TZ_EXPECT_OK(tok_decode(t, got.ids, got.n, &s));
        TZ_EXPECT(s && strcmp(s, "a <sep> b") == 0, "decode: \"%s\"", s);
        free(s);
        tok_ids_free(&got);
    }
    tok_free(t);

    /* special_tokens_map.json lists 100 sentinels (which must agree with extra_ids) and one more
     * token, which takes the first id after added_tokens.json's */
    char list[4096] = "{\"eos_token\": \"</s>\", \"additional_special_tokens\": [";
    for (int i = 0; i < 100; i++) snprintf(list + strlen(list), sizeof list - strlen(list), "\"<extra_id_%d>\", ", i);
    strcat(list, "{\"content\": \"<hl>\"}]}");
    tz_write_file(map, list, strlen(list));
    tok_tokenizer *bad = NULL;
    TZ_EXPECT(tok_load(dir, &bad) == RT_ERR_FORMAT && bad == NULL, "extra_ids 10 against 100 sentinels");
    TZ_EXPECT(strstr(rt_error_message(), "special_tokens_map.json") && strstr(rt_error_message(), "extra_ids"), "%s",
              rt_error_message());
    remove(cfg);
    snprintf(path, sizeof path, "%s/added_tokens.json", dir);
    tz_write_file(path, "{\"<new>\": 32100}", strlen("{\"<new>\": 32100}"));
    t = tzt_load_ok(dir);
    if (t) {
        TZ_EXPECT(tok_vocab_size(t) == 32102 && tok_piece_to_id(t, "<extra_id_0>") == 32099 &&
                      tok_piece_to_id(t, "<new>") == 32100 && tok_piece_to_id(t, "<hl>") == 32101,
                  "sentinels, added_tokens.json and one more special token (vocab %d)", tok_vocab_size(t));
        tok_ids got = {0};
        TZ_EXPECT_OK(tok_encode(t, "x <hl>y<new>", strlen("x <hl>y<new>"), &got));
        static const int32_t want[] = {3, 226, 32101, 3, 63, 32100};
        TZ_EXPECT(got.n == 6 && memcmp(got.ids, want, sizeof want) == 0, "added tokens in the text");
        tok_ids_free(&got);
    }
    tok_free(t);
    remove(map);
    remove(path);

    const char *c2 = "{\"extra_ids\": 100,\n\"eos_token\": }";
    tz_write_file(cfg, c2, strlen(c2));
    TZ_EXPECT(tok_load(dir, &bad) == RT_ERR_FORMAT && strstr(rt_error_message(), "tokenizer_config.json:2"),
              "broken JSON: %s", rt_error_message());
    const char *c3 = "{\"eos_token\": \"<eos>\"}";
    tz_write_file(cfg, c3, strlen(c3));
    TZ_EXPECT(tok_load(dir, &bad) == RT_ERR_FORMAT && strstr(rt_error_message(), "<eos>"), "unknown eos: %s",
              rt_error_message());
    const char *c4 = "{\"added_tokens_decoder\": {\"32200\": {\"content\": \"<far>\"}}}";
    tz_write_file(cfg, c4, strlen(c4));
    TZ_EXPECT(tok_load(dir, &bad) == RT_ERR_FORMAT && strstr(rt_error_message(), "without a token"), "id gap: %s",
              rt_error_message());
    remove(cfg);

    snprintf(path, sizeof path, "%s/garbage.model", dir);
    tz_write_file(path, "junk", 4);
    TZ_EXPECT(tok_load(path, &bad) == RT_ERR_FORMAT && bad == NULL && strstr(rt_error_message(), path),
              "garbage .model: %s", rt_error_message());
}

int main(void) {
    test_wrapper();
    test_vectors(tz_asset_path(T5_MODEL), "tokenizer-test-vectors/t5-spiece.sentencepiece-0.1.97.out", "t5");
    test_vectors(tz_asset_path("glm-chinese-spm/cog-pretrain.model"),
                 "tokenizer-test-vectors/glm-cog-pretrain.sentencepiece-0.1.97.out", "glm");

    tok_tokenizer *t = tzt_load_ok(tz_asset_path(T5_MODEL));
    if (t) {
        test_t5_basics(t);
        test_multi30k_crc(t, "train", "en", 2000);
        test_multi30k_crc(t, "train", "de", 2000);
        test_multi30k_crc(t, "val", "en", 1014);
        test_multi30k_crc(t, "val", "de", 1014);
        test_multi30k_head(t);
        test_extra(t);
        test_decode(t);
        test_pairs(t);
    }
    tok_free(t);
    test_loaders();
    return tz_test_result("test_tok_spm");
}
