/* GLM's English tokenizer: bert-large-uncased's WordPiece vocab (30522 pieces, the same file as
 * bert-base-uncased's) with GLM's command tokens, giving the ids of FlagAI's
 * GLMLargeEnWordPieceTokenizer (the tokenizer of GLM-large-en; THUDM/GLM's BertWordPieceTokenizer).
 *
 * Command tokens: [PAD] (pad, and eos) 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103, their ids in
 * the vocab; then, after the vocab (FlagAI's num_tokens = len(vocab)), with FlagAI's defaults
 * add_block_symbols = add_task_mask = true: <|startofpiece|> 30522, <|endofpiece|> 30523,
 * [gMASK] 30524, [sMASK] 30525 (add_task_mask counts only with add_block_symbols); then [dBLOCK]
 * with add_decoder_mask. The flags come from tokenizer_config.json beside the vocab when it has
 * them; add_sentinel_token (extra [MASKi] <|startofpieceI|> pairs) is not supported.
 *
 * Encoding is GLMTokenizer.EncodeAsIds: the command tokens written in the text are single tokens
 * (none of them strips the whitespace around it, unlike the Chinese tokenizer's masks, and no
 * two can overlap, so WordPiece's leftmost-longest scan of added tokens gives FlagAI's cut), and
 * each remaining segment goes through GLMLargeEnTokenizer (pytorch-pretrained-BERT's
 * BasicTokenizer and WordPiece): the WordPiece code of tok_wordpiece.c with Python's lower-casing
 * (tok_wordpiece_load_flagai). Decoding is FlagAI's DecodeIds: pieces joined by spaces, a "##"
 * piece glued to the one before, command tokens written as they are, no other cleanup
 * ("the capital of france is [MASK] ."). An id FlagAI does not know, which its DecodeIds skips,
 * is an error here.
 *
 * tok_encode_pair is not supported: GLM builds its task inputs itself (tok_glm_encode_pair). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizers/tok_base.h"
#include "tokenizers/tok_glm.h"
#include "tokenizers/tok_glm_en.h"
#include "tokenizers/tok_wordpiece.h"

/* The tokenizer_config.json classes that mean this tokenizer. */
static bool tok_glm_en_class_name(const char *name) { return strcmp(name, "GLMLargeEnWordPieceTokenizer") == 0; }

bool tok_glm_en_wanted(const char *dir) {
    char *cls = tok_config_class(dir);
    bool yes = cls && tok_glm_en_class_name(cls);
    free(cls);
    return yes;
}

static bool tok_glm_en_is_command(const tok_tokenizer *t, int32_t id) { return tok_wordpiece_is_added(t, id); }

static const tok_ops tok_glm_en_ops = {tok_wordpiece_encode, tok_glm_encode_pair, tok_wordpiece_decode,
                                       tok_wordpiece_free_impl, tok_glm_en_is_command};

typedef struct {
    bool add_block_symbols, add_task_mask, add_decoder_mask;
} tok_glm_en_flags;

static rt_status tok_glm_en_read_flags(const char *dir, tok_glm_en_flags *f) {
    rt_status st = RT_OK;
    cJSON *cfg = NULL;
    char *path = tok_path_join(dir, "tokenizer_config.json");
    if (tok_file_exists(path)) {
        RT_TRY(tok_json_load(path, &cfg));
        RT_TRY(tok_glm_read_flag(cfg, path, "add_block_symbols", &f->add_block_symbols));
        RT_TRY(tok_glm_read_flag(cfg, path, "add_task_mask", &f->add_task_mask));
        RT_TRY(tok_glm_read_flag(cfg, path, "add_decoder_mask", &f->add_decoder_mask));
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "add_sentinel_token");
        if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble <= 1))
            RT_FAIL(RT_ERR_UNSUPPORTED, "%s: add_sentinel_token: only 0 or 1 (no sentinel tokens) is supported", path);
    }
fail:
    cJSON_Delete(cfg);
    free(path);
    return st;
}

rt_status tok_glm_en_load(const char *vocab_path, const char *dir, tok_tokenizer **out) {
    rt_status st = RT_OK;
    tok_tokenizer *t = NULL;
    tok_glm_en_flags f = {true, true, false};
    *out = NULL;
    RT_TRY(tok_glm_en_read_flags(dir, &f));
    RT_TRY(tok_wordpiece_load_flagai(vocab_path, &t));
    if (t->pad < 0 || tok_piece_to_id(t, "[MASK]") < 0)
        RT_FAIL(RT_ERR_FORMAT, "%s: GLM's English tokenizer needs [PAD] and [MASK] in the vocab", vocab_path);
    t->kind = "glm-en-wordpiece";
    t->ops = &tok_glm_en_ops;
    int32_t n = (int32_t)t->vocab.n_ids; /* FlagAI: num_tokens = len(vocab) */
    if (f.add_block_symbols) {
        tok_wordpiece_add_token(t, "<|startofpiece|>", n++);
        tok_wordpiece_add_token(t, "<|endofpiece|>", n++);
        if (f.add_task_mask) {
            tok_wordpiece_add_token(t, "[gMASK]", n++);
            tok_wordpiece_add_token(t, "[sMASK]", n++);
        }
        if (f.add_decoder_mask) tok_wordpiece_add_token(t, "[dBLOCK]", n++);
    }
    t->bos = -1; /* GLM starts its inputs with [CLS] and ends them with eos = [PAD] */
    t->eos = t->pad;
    *out = t;
    t = NULL;
fail:
    tok_free(t);
    return st;
}
