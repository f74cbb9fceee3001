/* GLM's Chinese tokenizer (tokenizers/tok_glm.c) against the references: the plain SentencePiece
 * vectors (sentencepiece 0.1.97) over cog-pretrain.model, which GLM must reproduce since it adds
 * no preprocessing, and FlagAI's GLMLargeChTokenizer itself (goldens from
 * scripts/golden/gen_glm_tok_golden.py): 300 texts with command tokens, newlines, full-width
 * punctuation, numbers and emoji, their decodes, 200 random id runs to decode, and the other
 * flag layouts read from tokenizer_config.json. Also tok_load's ways to find GLM's model without
 * taking a T5 one for it, and the errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "tests/toktest.h"
#include "tokenizers/tok.h"

#define GLM_MODEL "glm-chinese-spm/cog-pretrain.model" /* under assets/ */
#define VEC_INP "tokenizer-test-vectors/ggml-vocab-gpt-2.gguf.inp"

typedef struct {
    const tok_tokenizer *t;
    size_t good;
} vec_ctx;

static void vec_one(const char *text, size_t len, const tok_ids *want, void *vctx) {
    vec_ctx *c = vctx;
    tok_ids got = {0};
    TZ_EXPECT_OK(tok_encode(c->t, text, len, &got));
    c->good += (size_t)tzt_check_ids("glm vectors", text, len, &got, want);
    tok_ids_free(&got);
}

/* (a) The sentencepiece 0.1.97 vectors: none of the 46 inputs holds a command token, so GLM's
 * ids are SentencePiece's, whitespace-only inputs included (both give nothing). */
static void test_vectors(const tok_tokenizer *t) {
    vec_ctx c = {t, 0};
    size_t n =
        tzt_for_each_vector(VEC_INP, "tokenizer-test-vectors/glm-cog-pretrain.sentencepiece-0.1.97.out", vec_one, &c);
    TZ_EXPECT(n == 46 && c.good == n, "glm vectors: %zu of %zu match", c.good, n);
}

static void test_basics(const tok_tokenizer *t) {
    TZ_EXPECT(strcmp(tok_kind_name(t), "glm-chinese-spm") == 0, "kind %s", tok_kind_name(t));
    TZ_EXPECT(tok_vocab_size(t) == 50010, "vocab size %d", tok_vocab_size(t));
    TZ_EXPECT(tok_eos_id(t) == 50000 && tok_pad_id(t) == 50000 && tok_bos_id(t) == -1, "eos %d pad %d bos %d",
              tok_eos_id(t), tok_pad_id(t), tok_bos_id(t));
    static const char *const names[] = {
        "<|endoftext|>",    "[SEP]",          "[CLS]",   "[MASK]", "[UNK]", "[UNUSED50005]",
        "<|startofpiece|>", "<|endofpiece|>", "[sMASK]", "[gMASK]"};
    for (int i = 0; i < 10; i++) {
        const char *p = tok_id_to_piece(t, 50000 + i);
        TZ_EXPECT(p && strcmp(p, names[i]) == 0, "id %d is %s", 50000 + i, p ? p : "(null)");
        TZ_EXPECT(tok_piece_to_id(t, names[i]) == 50000 + i, "%s -> %d", names[i], tok_piece_to_id(t, names[i]));
        TZ_EXPECT(tok_is_special(t, 50000 + i) == (i != 5), "special %d", 50000 + i);
    }
    TZ_EXPECT(strcmp(tok_id_to_piece(t, 3), "<n>") == 0 && tok_piece_to_id(t, "\xe4\xba\xba") == 43371,
              "pieces <n> and 人 (FlagAI's test: 43371)");
    TZ_EXPECT(!tok_is_special(t, 3) && !tok_is_special(t, 43371), "pieces are not special");

    /* FlagAI's own unit test (tests/test_tokenizer.py) */
    tok_ids got = {0};
    const char *text = "\xe4\xbb\x8a\xe5\xa4\xa9\xe5\x90\x83\xe9\xa5\xad\xe5\x90\x83\xe4\xba\x86\xe8\x82\xaf\xe5\xbe"
                       "\xb7\xe5\x9f\xba"; /* 今天吃饭吃了肯德基 */
    TZ_EXPECT_OK(tok_encode(t, text, strlen(text), &got));
    static const int32_t want[] = {3378, 1567, 2613, 20282};
    TZ_EXPECT(got.n == 4 && memcmp(got.ids, want, sizeof want) == 0, "FlagAI's example");
    char *s = NULL;
    TZ_EXPECT_OK(tok_decode(t, got.ids, got.n, &s));
    TZ_EXPECT(s && strcmp(s, text) == 0, "FlagAI's example decodes: %s", s ? s : "(null)");
    free(s);
    s = NULL;

    /* a command token in the text: [MASK] eats the spaces before it, not after */
    const char *m = "a  [MASK]  b";
    tok_ids_clear(&got);
    TZ_EXPECT_OK(tok_encode(t, m, strlen(m), &got));
    TZ_EXPECT(got.n >= 3 && got.ids[1] == 50003, "[MASK] in text");

    /* decode: command tokens glued to the text, skip_special drops them */
    const int32_t ids[] = {50002, 3378, 50003, 1567, 50000};
    TZ_EXPECT_OK(tok_decode(t, ids, 5, &s));
    TZ_EXPECT(s && strcmp(s, "[CLS]\xe4\xbb\x8a\xe5\xa4\xa9[MASK]\xe5\x90\x83\xe9\xa5\xad<|endoftext|>") == 0,
              "decode with command tokens: %s", s ? s : "(null)");
    free(s);
    s = NULL;
    TZ_EXPECT_OK(tok_decode_skip_special(t, ids, 5, &s));
    TZ_EXPECT(s && strcmp(s, "\xe4\xbb\x8a\xe5\xa4\xa9\xe5\x90\x83\xe9\xa5\xad") == 0, "skip special: %s",
              s ? s : "(null)");
    free(s);
    s = NULL;

    /* errors: an id GLM leaves unused or out of range, and pairs */
    const int32_t bad[] = {3378, 50005};
    TZ_EXPECT(tok_decode(t, bad, 2, &s) == RT_ERR_FORMAT && s == NULL, "id 50005 does not decode");
    TZ_EXPECT(strstr(rt_error_message(), "50005") != NULL, "message names the id: %s", rt_error_message());
    const int32_t big = 50010;
    TZ_EXPECT(tok_decode(t, &big, 1, &s) == RT_ERR_FORMAT && s == NULL, "id 50010 does not decode");
    tok_ids_clear(&got);
    TZ_EXPECT(tok_encode_pair(t, "a", "b", &got) == RT_ERR_UNSUPPORTED && got.n == 0, "pairs are unsupported");
    TZ_EXPECT(strstr(rt_error_message(), "glm-chinese-spm") != NULL, "%s", rt_error_message());
    tok_ids_free(&got);
}

/* (b) glm_extra.tsv: hex input, FlagAI's EncodeAsIds, hex of its DecodeIds of those ids. */
static void test_extra(const tok_tokenizer *t) {
    size_t n = 0, dec = 0;
    size_t good = tzt_check_extra_file(t, "tests/golden/tok/glm_extra.tsv", "glm extra", tok_encode, &n, &dec);
    TZ_EXPECT(n == 300 && good == n && dec == n, "glm extra: %zu ids and %zu decodes of %zu match FlagAI", good, dec,
              n);
}

/* glm_decode.tsv: random id runs (pieces, <unk>, <s>, </s>, <n>, command tokens) and DecodeIds. */
static void test_decode(const tok_tokenizer *t) {
    size_t n = 0, good = tzt_check_decode_file(t, "tests/golden/tok/glm_decode.tsv", "glm decode", &n);
    TZ_EXPECT(n == 200 && good == n, "glm decode: %zu of %zu match FlagAI", good, n);
}

/* A folder holding cog-pretrain.model (a link) and, when cfg is not NULL, this tokenizer_config.json. */
static const char *glm_dir(const char *cfg) {
    const char *dir = tz_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/cog-pretrain.model", dir);
    TZ_EXPECT(symlink(tz_asset_path(GLM_MODEL), path) == 0, "symlink %s", path);
    if (cfg) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        tz_write_file(path, cfg, strlen(cfg));
    }
    return dir;
}

/* glm_alt.tsv: flags TAB hex input TAB ids, each flag set through tokenizer_config.json. */
static void test_alt_layouts(void) {
    char *data = tzt_read_all(tz_source_path("tests/golden/tok/glm_alt.tsv"), NULL);
    if (!data) return;
    size_t n = 0, good = 0;
    tok_ids want = {0}, got = {0};
    char *cur = data;
    for (char *line; (line = tzt_next_line(&cur)) != NULL; n++) {
        int block, task, decoder, fix;
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        TZ_EXPECT(t2 && sscanf(line, "block=%d,task=%d,decoder=%d,fix=%d", &block, &task, &decoder, &fix) == 4,
                  "glm_alt.tsv line %zu", n + 1);
        if (!t2) break;
        char cfg[256], *text = malloc((size_t)(t2 - t1) / 2 + 1);
        snprintf(cfg, sizeof cfg,
                 "{\"tokenizer_class\": \"GLMLargeChTokenizer\", \"add_block_symbols\": %s, \"add_task_mask\": %s, "
                 "\"add_decoder_mask\": %s, \"fix_command_token\": %s}",
                 block ? "true" : "false", task ? "true" : "false", decoder ? "true" : "false", fix ? "true" : "false");
        size_t len = tzt_unhex(t1 + 1, (size_t)(t2 - t1 - 1), text);
        tzt_parse_ids(t2 + 1, &want);
        tok_tokenizer *t = tzt_load_ok(glm_dir(cfg));
        if (t) {
            tok_ids_clear(&got);
            TZ_EXPECT_OK(tok_encode(t, text, len, &got));
            good += (size_t)tzt_check_ids("glm alt", text, len, &got, &want);
        }
        tok_free(t);
        free(text);
    }
    TZ_EXPECT(n == 12 && good == n, "glm alt layouts: %zu of %zu match FlagAI", good, n);
    tok_ids_free(&want);
    tok_ids_free(&got);
    free(data);

    /* glm-10b's layout: [gMASK] takes <|endofpiece|>'s id 50007 and decodes as [gMASK] */
    tok_tokenizer *t = tzt_load_ok(glm_dir("{\"fix_command_token\": false}"));
    if (t) {
        TZ_EXPECT(tok_vocab_size(t) == 50009 && tok_piece_to_id(t, "[gMASK]") == 50007 &&
                      tok_piece_to_id(t, "[sMASK]") == 50008,
                  "fix_command_token=false layout");
        const int32_t ids[] = {50007};
        char *s = NULL;
        TZ_EXPECT_OK(tok_decode(t, ids, 1, &s));
        TZ_EXPECT(s && strcmp(s, "[gMASK]") == 0, "50007 decodes as %s", s ? s : "(null)");
        free(s);
    }
    tok_free(t);
}

/* tok_load: cog-pretrain.model by name, in a folder, under another name (by its pieces), a
 * tokenizer_config.json that names the class, and a T5 model that must stay T5. */
static void test_loaders(void) {
    tok_tokenizer *t = tzt_load_ok(glm_dir(NULL));
    TZ_EXPECT(t && strcmp(tok_kind_name(t), "glm-chinese-spm") == 0, "folder with cog-pretrain.model");
    tok_free(t);

    const char *dir = tz_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/other-name.model", dir);
    TZ_EXPECT(symlink(tz_asset_path(GLM_MODEL), path) == 0, "symlink %s", path);
    t = tzt_load_ok(path);
    TZ_EXPECT(t && strcmp(tok_kind_name(t), "glm-chinese-spm") == 0, "GLM model under another name");
    tok_free(t);

    /* a config naming another class sends even GLM's model to the T5 loader (which then finds no
     * <pad> in it); T5's model and sentencepiece's test model (1000 pieces) are not taken for GLM's */
    tok_tokenizer *bad = NULL;
    dir = tz_tmpdir();
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    tz_write_file(path, "{\"tokenizer_class\": \"T5Tokenizer\"}", 34);
    snprintf(path, sizeof path, "%s/x.model", dir);
    TZ_EXPECT(symlink(tz_asset_path(GLM_MODEL), path) == 0, "symlink %s", path);
    TZ_EXPECT(tok_load(path, &bad) == RT_ERR_FORMAT && bad == NULL && strstr(rt_error_message(), "pad_token"),
              "tokenizer_class T5Tokenizer wins: %s", rt_error_message());
    t = tzt_load_ok(tz_asset_path("t5-spiece/spiece.model"));
    TZ_EXPECT(t && strcmp(tok_kind_name(t), "t5-spiece") == 0, "T5 model stays T5");
    tok_free(t);
    TZ_EXPECT(tok_load(tz_data_path("sentencepiece-testdata/test_model.model"), &bad) == RT_ERR_FORMAT &&
                  strstr(rt_error_message(), "pad_token"),
              "another SentencePiece model goes to the T5 loader: %s", rt_error_message());

    /* a T5 model that a config calls GLM's loads as GLM (ids after its own pieces) */
    dir = tz_tmpdir();
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    const char *cfg = "{\"tokenizer_class\": \"ChineseSPTokenizer\"}";
    tz_write_file(path, cfg, strlen(cfg));
    snprintf(path, sizeof path, "%s/spiece.model", dir);
    TZ_EXPECT(symlink(tz_asset_path("t5-spiece/spiece.model"), path) == 0, "symlink %s", path);
    t = tzt_load_ok(dir);
    TZ_EXPECT(t && strcmp(tok_kind_name(t), "glm-chinese-spm") == 0 && tok_eos_id(t) == 32000,
              "tokenizer_class ChineseSPTokenizer wins");
    tok_free(t);

    /* a flag that is not a boolean names the file and the field */
    dir = glm_dir("{\"add_task_mask\": \"yes\"}");
    TZ_EXPECT(tok_load(dir, &bad) == RT_ERR_FORMAT && bad == NULL &&
                  strstr(rt_error_message(), "tokenizer_config.json: add_task_mask") != NULL,
              "bad flag: %s", rt_error_message());
}

int main(void) {
    tok_tokenizer *t = tzt_load_ok(tz_asset_path(GLM_MODEL));
    if (t) {
        test_vectors(t);
        test_basics(t);
        test_extra(t);
        test_decode(t);
    }
    tok_free(t);
    test_alt_layouts();
    test_loaders();
    return tz_test_result("test_tok_glm");
}
