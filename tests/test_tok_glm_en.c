/* GLM's English tokenizer (tokenizers/tok_glm_en.c, kind "glm-en-wordpiece") against FlagAI's
 * GLMLargeEnWordPieceTokenizer itself (goldens from scripts/golden/gen_glm_en_tok_golden.py): 264
 * texts (llama.cpp's BERT inputs, GLUE/SuperGLUE lines, command tokens written in the text,
 * accents, Greek, Chinese, punctuation, random mixes) with their DecodeIds, 150 random id runs to
 * decode, and the other flag layouts read from tokenizer_config.json. Also the command token ids,
 * the single-token SuperGLUE verbalizers, tok_load's rule (tokenizer_config.json's
 * tokenizer_class) and the errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "tests/toktest.h"
#include "tokenizers/tok.h"

#define ASSET "assets/glm-en-wordpiece"
#define BERT_VOCAB "bert-wordpiece/bert-base-uncased-vocab.txt" /* under assets/ */

static void test_basics(const tok_tokenizer *t) {
    TZ_EXPECT(strcmp(tok_kind_name(t), "glm-en-wordpiece") == 0, "kind %s", tok_kind_name(t));
    TZ_EXPECT(tok_vocab_size(t) == 30526, "vocab size %d (FlagAI's len(tokenizer): 30526)", tok_vocab_size(t));
    TZ_EXPECT(tok_eos_id(t) == 0 && tok_pad_id(t) == 0 && tok_bos_id(t) == -1, "eos %d pad %d bos %d", tok_eos_id(t),
              tok_pad_id(t), tok_bos_id(t));
    /* FlagAI's command tokens: {'pad': 0, 'cls': 101, 'mask': 103, 'unk': 100, 'sep': 102, 'eos': 0,
     * 'sop': 30522, 'eop': 30523, 'gMASK': 30524, 'sMASK': 30525} */
    static const char *const names[] = {"[PAD]",          "[UNK]",   "[CLS]",  "[SEP]", "[MASK]", "<|startofpiece|>",
                                        "<|endofpiece|>", "[gMASK]", "[sMASK]"};
    static const int32_t ids[] = {0, 100, 101, 102, 103, 30522, 30523, 30524, 30525};
    for (int i = 0; i < 9; i++) {
        const char *p = tok_id_to_piece(t, ids[i]);
        TZ_EXPECT(p && strcmp(p, names[i]) == 0, "id %d is %s", ids[i], p ? p : "(null)");
        TZ_EXPECT(tok_piece_to_id(t, names[i]) == ids[i], "%s -> %d", names[i], tok_piece_to_id(t, names[i]));
        TZ_EXPECT(tok_is_special(t, ids[i]), "%s is special", names[i]);
        tok_ids got = {0};
        TZ_EXPECT_OK(tok_encode(t, names[i], strlen(names[i]), &got));
        TZ_EXPECT(got.n == 1 && got.ids[0] == ids[i], "%s written in the text is one token", names[i]);
        tok_ids_free(&got);
    }
    TZ_EXPECT(!tok_is_special(t, 1996) && !tok_is_special(t, 2748), "pieces are not special");

    /* SuperGLUE's single-token cloze: each verbalizer, with its leading space, is one token */
    static const char *const verbalizers[] = {" Yes", " No", " Maybe", " true", " false"};
    static const int32_t verbalizer_ids[] = {2748, 2053, 2672, 2995, 6270};
    for (int i = 0; i < 5; i++) {
        tok_ids got = {0};
        TZ_EXPECT_OK(tok_encode(t, verbalizers[i], strlen(verbalizers[i]), &got));
        TZ_EXPECT(got.n == 1 && got.ids[0] == verbalizer_ids[i], "\"%s\" -> %zu ids, first %d (want %d)",
                  verbalizers[i], got.n, got.n ? got.ids[0] : -1, verbalizer_ids[i]);
        tok_ids_free(&got);
    }

    /* a cloze input and its decode: FlagAI joins pieces with spaces and does no cleanup */
    const char *text = "The capital of France is [MASK].";
    static const int32_t want[] = {1996, 3007, 1997, 2605, 2003, 103, 1012};
    tok_ids got = {0};
    TZ_EXPECT_OK(tok_encode(t, text, strlen(text), &got));
    TZ_EXPECT(got.n == 7 && memcmp(got.ids, want, sizeof want) == 0, "cloze example");
    char *s = NULL;
    TZ_EXPECT_OK(tok_decode(t, got.ids, got.n, &s));
    TZ_EXPECT(s && strcmp(s, "the capital of france is [MASK] .") == 0, "decode: %s", s ? s : "(null)");
    free(s);
    s = NULL;
    const int32_t run[] = {101, 1996, 30524, 102, 0};
    TZ_EXPECT_OK(tok_decode_skip_special(t, run, 5, &s));
    TZ_EXPECT(s && strcmp(s, "the") == 0, "skip special: %s", s ? s : "(null)");
    free(s);
    s = NULL;

    /* Python's str.lower: a word-final capital sigma is U+03C2 (HF's BertTokenizer keeps U+03C3) */
    const char *greek = "\xce\xa3\xce\x91\xce\xa3"; /* ΣΑΣ */
    static const int32_t greek_ids[] = {1173, 14608, 19579};
    tok_ids_clear(&got);
    TZ_EXPECT_OK(tok_encode(t, greek, strlen(greek), &got));
    TZ_EXPECT(got.n == 3 && memcmp(got.ids, greek_ids, sizeof greek_ids) == 0, "final sigma");

    /* errors: an id past the command tokens, and pairs */
    const int32_t big = 30526;
    TZ_EXPECT(tok_decode(t, &big, 1, &s) == RT_ERR_FORMAT && s == NULL, "id 30526 does not decode");
    tok_ids_clear(&got);
    TZ_EXPECT(tok_encode_pair(t, "a", "b", &got) == RT_ERR_UNSUPPORTED && got.n == 0, "pairs are unsupported");
    TZ_EXPECT(strstr(rt_error_message(), "glm-en-wordpiece") != NULL, "%s", rt_error_message());
    tok_ids_free(&got);
}

/* glm_en_extra.tsv: hex input, FlagAI's EncodeAsIds, hex of its DecodeIds of those ids. */
static void test_extra(const tok_tokenizer *t) {
    size_t n = 0, dec = 0;
    size_t good = tzt_check_extra_file(t, "tests/golden/tok/glm_en_extra.tsv", "glm-en extra", tok_encode, &n, &dec);
    TZ_EXPECT(n == 264 && good == n && dec == n, "glm-en extra: %zu ids and %zu decodes of %zu match FlagAI", good, dec,
              n);
}

/* glm_en_decode.tsv: random id runs (pieces, "##" pieces, command tokens) and DecodeIds. */
static void test_decode(const tok_tokenizer *t) {
    size_t n = 0, good = tzt_check_decode_file(t, "tests/golden/tok/glm_en_decode.tsv", "glm-en decode", &n);
    TZ_EXPECT(n == 150 && good == n, "glm-en decode: %zu of %zu match FlagAI", good, n);
}

/* A folder holding vocab.txt (a link to the uncased BERT vocab) and, when cfg is not NULL, this
 * tokenizer_config.json. */
static const char *vocab_dir(const char *cfg) {
    const char *dir = tz_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    TZ_EXPECT(symlink(tz_source_path(ASSET "/vocab.txt"), path) == 0, "symlink %s", path);
    if (cfg) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        tz_write_file(path, cfg, strlen(cfg));
    }
    return dir;
}

/* glm_en_alt.tsv: flags TAB hex input TAB ids, each flag set through tokenizer_config.json. */
static void test_alt_layouts(void) {
    char *data = tzt_read_all(tz_source_path("tests/golden/tok/glm_en_alt.tsv"), NULL);
    if (!data) return;
    size_t n = 0, good = 0;
    tok_ids want = {0}, got = {0};
    char *cur = data;
    for (char *line; (line = tzt_next_line(&cur)) != NULL; n++) {
        int block, task, decoder;
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        TZ_EXPECT(t2 && sscanf(line, "block=%d,task=%d,decoder=%d", &block, &task, &decoder) == 3,
                  "glm_en_alt.tsv line %zu", n + 1);
        if (!t2) break;
        char cfg[256], *text = malloc((size_t)(t2 - t1) / 2 + 1);
        snprintf(cfg, sizeof cfg,
                 "{\"tokenizer_class\": \"GLMLargeEnWordPieceTokenizer\", \"add_block_symbols\": %s, "
                 "\"add_task_mask\": %s, \"add_decoder_mask\": %s}",
                 block ? "true" : "false", task ? "true" : "false", decoder ? "true" : "false");
        size_t len = tzt_unhex(t1 + 1, (size_t)(t2 - t1 - 1), text);
        tzt_parse_ids(t2 + 1, &want);
        tok_tokenizer *t = tzt_load_ok(vocab_dir(cfg));
        if (t) {
            tok_ids_clear(&got);
            TZ_EXPECT_OK(tok_encode(t, text, len, &got));
            good += (size_t)tzt_check_ids("glm-en alt", text, len, &got, &want);
        }
        tok_free(t);
        free(text);
    }
    TZ_EXPECT(n == 12 && good == n, "glm-en alt layouts: %zu of %zu match FlagAI", good, n);
    tok_ids_free(&want);
    tok_ids_free(&got);
    free(data);

    /* add_decoder_mask: [dBLOCK] right after [sMASK] */
    tok_tokenizer *t = tzt_load_ok(vocab_dir("{\"tokenizer_class\": \"GLMLargeEnWordPieceTokenizer\", "
                                             "\"add_decoder_mask\": true}"));
    TZ_EXPECT(t && tok_vocab_size(t) == 30527 && tok_piece_to_id(t, "[dBLOCK]") == 30526, "[dBLOCK] layout");
    tok_free(t);
}

/* tok_load: the shipped folder, its vocab.txt named directly, the BERT vocab (the same bytes)
 * with a config, and vocab.txt files that must stay BERT's. */
static void test_loaders(void) {
    tok_tokenizer *t = tzt_load_ok(tz_source_path(ASSET "/vocab.txt"));
    TZ_EXPECT(t && strcmp(tok_kind_name(t), "glm-en-wordpiece") == 0, "vocab.txt with its config beside it");
    tok_free(t);

    t = tzt_load_ok(vocab_dir(NULL));
    TZ_EXPECT(t && strcmp(tok_kind_name(t), "bert-wordpiece") == 0 && tok_vocab_size(t) == 30522,
              "vocab.txt alone stays BERT's");
    tok_free(t);
    t = tzt_load_ok(vocab_dir("{\"tokenizer_class\": \"BertTokenizer\"}"));
    TZ_EXPECT(t && strcmp(tok_kind_name(t), "bert-wordpiece") == 0, "BertTokenizer config stays BERT's");
    tok_free(t);

    {
        const char *dir = tz_tmpdir();
        char path[600];
        snprintf(path, sizeof path, "%s/bert-base-uncased-vocab.txt", dir);
        TZ_EXPECT(symlink(tz_asset_path(BERT_VOCAB), path) == 0, "symlink %s", path);
        char cfg[600];
        snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
        const char *json = "{\"tokenizer_class\": \"GLMLargeEnWordPieceTokenizer\"}";
        tz_write_file(cfg, json, strlen(json));
        t = tzt_load_ok(path);
        TZ_EXPECT(t && strcmp(tok_kind_name(t), "glm-en-wordpiece") == 0 && tok_vocab_size(t) == 30526,
                  "the BERT vocab under its own name, with a config");
        tok_free(t);
    }

    /* errors name the file and the field */
    tok_tokenizer *bad = NULL;
    const char *dir = vocab_dir("{\"tokenizer_class\": \"GLMLargeEnWordPieceTokenizer\", \"add_task_mask\": 1}");
    TZ_EXPECT(tok_load(dir, &bad) == RT_ERR_FORMAT && bad == NULL &&
                  strstr(rt_error_message(), "tokenizer_config.json: add_task_mask") != NULL,
              "bad flag: %s", rt_error_message());
    dir = vocab_dir("{\"tokenizer_class\": \"GLMLargeEnWordPieceTokenizer\", \"add_sentinel_token\": 3}");
    TZ_EXPECT(tok_load(dir, &bad) == RT_ERR_UNSUPPORTED && bad == NULL &&
                  strstr(rt_error_message(), "add_sentinel_token") != NULL,
              "sentinel tokens: %s", rt_error_message());
}

int main(void) {
    tok_tokenizer *t = tzt_load_ok(tz_source_path(ASSET));
    if (t) {
        test_basics(t);
        test_extra(t);
        test_decode(t);
    }
    tok_free(t);
    test_alt_layouts();
    test_loaders();
    return tz_test_result("test_tok_glm_en");
}
