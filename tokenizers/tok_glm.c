/* GLM's Chinese tokenizer: the cog-pretrain SentencePiece model (tok_spm.h, BPE, 50000 pieces)
 * with GLM's command tokens after it, giving the ids of FlagAI's GLMLargeChTokenizer and of
 * THUDM/GLM's ChineseSPTokenizer for glm-large (the code GLM-large-chinese was trained with).
 *
 * Command tokens (FlagAI's defaults add_block_symbols = add_task_mask = fix_command_token = true,
 * add_decoder_mask = false): <|endoftext|> (pad and eos) 50000, [SEP] 50001, [CLS] 50002,
 * [MASK] 50003, [UNK] 50004; block symbols <|startofpiece|> 50006 and <|endofpiece|> 50007 (GLM
 * skips 50005); task masks [sMASK] 50008 and [gMASK] 50009; [dBLOCK] next with add_decoder_mask.
 * fix_command_token = false is GLM's glm-10b layout: [gMASK] 50007, the same id as
 * <|endofpiece|> (GLM's own collision; decode then writes [gMASK]), and [sMASK] 50008. The flags
 * come from tokenizer_config.json beside the model when it has them. An id GLM leaves unused
 * (50005) is "[UNUSED50005]" in the vocab, as THUDM's Tokenizer._tokens names it, and cannot be
 * decoded (GLM hands it to SentencePiece, which refuses it).
 *
 * Encoding is GLM's EncodeAsIds: text that is only whitespace (Python's str.strip) gives no ids;
 * otherwise the command tokens are cut out of the raw text, the text before a [MASK], [sMASK] or
 * [gMASK] loses its trailing whitespace (their lstrip=True; no token has rstrip), and each
 * remaining non-empty segment goes through SentencePiece's EncodeAsIds on its own. GLM splits
 * token by token in list order, but no command token can overlap another in a text, so one
 * left-to-right scan gives the same cut. There is no other preprocessing: '\n' is not mapped to
 * the <n> piece (SentencePiece's nmt_nfkc turns it into a space), and FlagAI's GLMTokenizer
 * does not truncate either.
 *
 * Decoding is FlagAI's DecodeIds (THUDM's with spaces_between_special_tokens = False, its
 * setting for glm-large): the ids are cut at command tokens, each run goes through
 * SentencePiece's DecodeIds, and the pieces are concatenated with the command tokens' text and
 * nothing between ("你好[MASK]世界"). <n> decodes as the three characters "<n>".
 *
 * tok_encode_pair is not supported: GLM builds its task inputs per task (build_input_from_ids:
 * [CLS] a, an optional [SEP], b, <|endoftext|>, with flags a task chooses), not in the tokenizer. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_utf8.h"
#include "tokenizers/tok_base.h"
#include "tokenizers/tok_glm.h"
#include "tokenizers/tok_spm.h"

#define TOK_GLM_MAX_CMDS 12

typedef struct {
    const char *text; /* static */
    size_t len;
    int32_t id;
    bool lstrip; /* eats the whitespace before it */
} tok_glm_cmd;

typedef struct {
    tok_spm *spm;
    int32_t n_spm;                      /* SentencePiece pieces: ids at or above are GLM's */
    tok_glm_cmd cmds[TOK_GLM_MAX_CMDS]; /* in GLM's order; a later one wins an id both have */
    size_t n_cmds;
} tok_glm;

/* GLM's flags (FlagAI GLMLargeChTokenizer's argument names and defaults). */
typedef struct {
    bool add_block_symbols, add_task_mask, add_decoder_mask, fix_command_token;
} tok_glm_flags;

static void tok_glm_add_cmd(tok_glm *p, const char *text, int32_t id, bool lstrip) {
    RT_CHECK(p->n_cmds < TOK_GLM_MAX_CMDS, "n_cmds=%zu", p->n_cmds);
    p->cmds[p->n_cmds++] = (tok_glm_cmd){text, strlen(text), id, lstrip};
}

/* The command token list of GLMLargeChTokenizer.__init__ for these flags. */
static void tok_glm_build_cmds(tok_glm *p, const tok_glm_flags *f) {
    int32_t n = p->n_spm;
    tok_glm_add_cmd(p, "<|endoftext|>", n, false);
    tok_glm_add_cmd(p, "[SEP]", n + 1, false);
    tok_glm_add_cmd(p, "[CLS]", n + 2, false);
    tok_glm_add_cmd(p, "[MASK]", n + 3, true);
    tok_glm_add_cmd(p, "[UNK]", n + 4, false);
    n += 5;
    if (!f->add_block_symbols) return;
    tok_glm_add_cmd(p, "<|startofpiece|>", n + 1, false);
    tok_glm_add_cmd(p, "<|endofpiece|>", n + 2, false);
    n += f->fix_command_token ? 3 : 2;
    if (f->add_task_mask) {
        if (f->fix_command_token) {
            tok_glm_add_cmd(p, "[sMASK]", n, true);
            tok_glm_add_cmd(p, "[gMASK]", n + 1, true);
        } else {
            tok_glm_add_cmd(p, "[gMASK]", n, true);
            tok_glm_add_cmd(p, "[sMASK]", n + 1, true);
        }
        n += 2;
    }
    if (f->add_decoder_mask) tok_glm_add_cmd(p, "[dBLOCK]", n, false);
}

/* The command token GLM maps id to (the last in its list), or NULL. */
static const tok_glm_cmd *tok_glm_cmd_of_id(const tok_glm *p, int32_t id) {
    for (size_t i = p->n_cmds; i-- > 0;)
        if (p->cmds[i].id == id) return &p->cmds[i];
    return NULL;
}

/* The command token written at s[0..n), or NULL. */
static const tok_glm_cmd *tok_glm_match(const tok_glm *p, const char *s, size_t n) {
    if (s[0] != '[' && s[0] != '<') return NULL; /* every command token starts with one */
    for (size_t i = 0; i < p->n_cmds; i++)
        if (p->cmds[i].len <= n && memcmp(s, p->cmds[i].text, p->cmds[i].len) == 0) return &p->cmds[i];
    return NULL;
}

static rt_status tok_glm_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out) {
    const tok_glm *p = t->impl;
    if (rt_utf8_rstrip_len(text, len) == 0) return RT_OK; /* split_on_tokens: `if not text.strip()` */
    size_t seg = 0;                                       /* start of the text segment not yet encoded */
    for (size_t i = 0; i <= len;) {
        const tok_glm_cmd *c = i < len ? tok_glm_match(p, text + i, len - i) : NULL;
        if (!c && i < len) {
            i++;
            continue;
        }
        size_t e = i;
        if (c && c->lstrip) e = seg + rt_utf8_rstrip_len(text + seg, e - seg);
        if (e > seg) {
            rt_status st = tok_spm_encode(p->spm, text + seg, e - seg, out);
            if (st != RT_OK) return st;
        }
        if (!c) break;
        tok_ids_push(out, c->id);
        i += c->len;
        seg = i;
    }
    return RT_OK;
}

rt_status tok_glm_encode_pair(const tok_tokenizer *t, const char *a, const char *b, tok_ids *out) {
    (void)a, (void)b, (void)out;
    return rt_errorf(RT_ERR_UNSUPPORTED,
                     "%s: GLM's tokenizer has no rule for a text or a sentence pair with special "
                     "tokens; GLM builds each task's input itself ([CLS] a [SEP]? b <|endoftext|>, "
                     "build_input_from_ids): encode the texts with tok_encode and add the command tokens",
                     t->kind);
}

static rt_status tok_glm_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, char **out) {
    const tok_glm *p = t->impl;
    rt_status st = RT_OK;
    char *run = NULL;
    rt_text text = {0};
    *out = NULL;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (ids[i] >= p->n_spm && !tok_glm_cmd_of_id(p, ids[i])))
            return rt_errorf(RT_ERR_FORMAT,
                             "cannot decode id %d (position %zu): glm-chinese-spm has %d SentencePiece ids and "
                             "command tokens at %d..%d",
                             ids[i], i, p->n_spm, p->n_spm, (int)t->vocab.n_ids - 1);
    rt_text_put(&text, "", 0);
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        const tok_glm_cmd *c = i < n && ids[i] >= p->n_spm ? tok_glm_cmd_of_id(p, ids[i]) : NULL;
        if (i < n && !c) continue;
        const char *piece = NULL;
        size_t plen = 0;
        if (i > start) {
            RT_TRY(tok_spm_decode_ids(p->spm, ids + start, i - start, &run));
            piece = run;
            plen = strlen(run);
        }
        for (int k = 0; k < 2; k++) {
            if (k == 1) piece = c ? c->text : NULL, plen = c ? c->len : 0;
            if (!piece) continue;
            rt_text_put(&text, piece, plen);
        }
        free(run);
        run = NULL;
        start = i + 1;
    }
    *out = text.s;
    text = (rt_text){0};
fail:
    free(run);
    rt_text_free(&text);
    return st;
}

static bool tok_glm_is_command(const tok_tokenizer *t, int32_t id) {
    const tok_glm *p = t->impl;
    return id >= p->n_spm && tok_glm_cmd_of_id(p, id) != NULL;
}

static void tok_glm_free_impl(void *impl) {
    tok_glm *p = impl;
    if (!p) return;
    tok_spm_free(p->spm);
    free(p);
}

static const tok_ops tok_glm_ops = {tok_glm_encode, tok_glm_encode_pair, tok_glm_decode, tok_glm_free_impl,
                                    tok_glm_is_command};

/* ---- which SentencePiece model is GLM's ---- */

static bool tok_glm_class_name(const char *name) {
    return strcmp(name, "ChineseSPTokenizer") == 0 || strcmp(name, "GLMChineseTokenizer") == 0 ||
           strcmp(name, "GLMLargeChTokenizer") == 0;
}

bool tok_glm_wanted(const char *model_path, const char *dir) {
    char *cls = tok_config_class(dir);
    if (cls) {
        bool glm = tok_glm_class_name(cls);
        free(cls);
        return glm;
    }
    const char *base = strrchr(model_path, '/');
    base = base ? base + 1 : model_path;
    if (strcmp(base, "cog-pretrain.model") == 0) return true;
    if (strcmp(base, "spiece.model") == 0) return false; /* HF's T5 name: not worth opening */
    /* GLM's vocabulary: 50000 pieces with the user-defined <n> at id 3 */
    tok_spm *m = NULL;
    if (tok_spm_load(model_path, &m) != RT_OK) return false; /* tok_t5_load reports the error */
    bool glm = tok_spm_piece_count(m) == 50000 && strcmp(tok_spm_piece(m, 3), "<n>") == 0;
    tok_spm_free(m);
    return glm;
}

/* ---- load ---- */

rt_status tok_glm_read_flag(const cJSON *cfg, const char *path, const char *key, bool *flag) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!v || cJSON_IsNull(v)) return RT_OK;
    if (!cJSON_IsBool(v)) return rt_errorf(RT_ERR_FORMAT, "%s: %s: expected true or false", path, key);
    *flag = cJSON_IsTrue(v);
    return RT_OK;
}

static rt_status tok_glm_read_flags(const char *dir, tok_glm_flags *f) {
    rt_status st = RT_OK;
    cJSON *cfg = NULL;
    char *path = tok_path_join(dir, "tokenizer_config.json");
    if (tok_file_exists(path)) {
        RT_TRY(tok_json_load(path, &cfg));
        RT_TRY(tok_glm_read_flag(cfg, path, "add_block_symbols", &f->add_block_symbols));
        RT_TRY(tok_glm_read_flag(cfg, path, "add_task_mask", &f->add_task_mask));
        RT_TRY(tok_glm_read_flag(cfg, path, "add_decoder_mask", &f->add_decoder_mask));
        RT_TRY(tok_glm_read_flag(cfg, path, "fix_command_token", &f->fix_command_token));
    }
fail:
    cJSON_Delete(cfg);
    free(path);
    return st;
}

rt_status tok_glm_load(const char *model_path, const char *dir, tok_tokenizer **out) {
    rt_status st = RT_OK;
    tok_tokenizer *t = rt_xcalloc(1, sizeof *t);
    tok_glm *p = rt_xcalloc(1, sizeof *p);
    tok_vocab_init(&t->vocab);
    t->kind = "glm-chinese-spm";
    t->ops = &tok_glm_ops;
    t->impl = p;
    *out = NULL;
    tok_glm_flags f = {true, true, false, true};
    RT_TRY(tok_glm_read_flags(dir, &f));
    RT_TRY(tok_spm_load(model_path, &p->spm));
    p->n_spm = tok_spm_piece_count(p->spm);
    for (int32_t id = 0; id < p->n_spm; id++) {
        const char *piece = tok_spm_piece(p->spm, id);
        tok_vocab_set(&t->vocab, piece, strlen(piece), id);
    }
    tok_glm_build_cmds(p, &f);
    for (size_t i = 0; i < p->n_cmds; i++) tok_vocab_set(&t->vocab, p->cmds[i].text, p->cmds[i].len, p->cmds[i].id);
    for (size_t id = (size_t)p->n_spm; id < t->vocab.n_ids; id++)
        if (!t->vocab.pieces[id]) {
            char name[32];
            snprintf(name, sizeof name, "[UNUSED%zu]", id);
            tok_vocab_set(&t->vocab, name, strlen(name), (int32_t)id);
        }
    t->bos = -1;
    t->eos = t->pad = p->n_spm; /* <|endoftext|> */
    t->unk = p->n_spm + 4;      /* [UNK]; SentencePiece's own <unk> (0) is what encode produces */
    *out = t;
    t = NULL;
fail:
    tok_free(t);
    return st;
}
