/* The tokenizer factory, tok_load (tok.h): it finds the tokenizer files in an HF directory (or
 * takes one file and finds its partner beside it) and hands them to the right kind's loader:
 * byte-level BPE, WordPiece for a vocab.txt or a tokenizer.json whose model.type is "WordPiece",
 * T5's SentencePiece for a spiece.model or any .model file, GLM's Chinese SentencePiece for its
 * cog-pretrain.model (see tok_glm_wanted), or GLM's English WordPiece for a vocab.txt whose
 * tokenizer_config.json names GLMLargeEnWordPieceTokenizer (see tok_glm_en_wanted). The only file
 * that knows every kind, and no kind knows it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizers/tok_internal.h"

static const char *tok_basename(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static char *tok_dirname(const char *path) {
    const char *s = strrchr(path, '/');
    if (!s) return rt_xstrdup(".");
    size_t n = (size_t)(s - path);
    if (n == 0) n = 1; /* "/vocab.json" */
    char *d = rt_xmalloc(n + 1);
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

static bool tok_ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* A sibling of `file` whose name swaps the suffix `from` for `to` ("roberta-vocab.json" ->
 * "roberta-merges.txt"), or NULL if the name lacks the suffix or the file does not exist. */
static char *tok_sibling_swap(const char *file, const char *from, const char *to) {
    if (!tok_ends_with(file, from)) return NULL;
    size_t keep = strlen(file) - strlen(from), tl = strlen(to);
    char *p = rt_xmalloc(keep + tl + 1);
    memcpy(p, file, keep);
    memcpy(p + keep, to, tl + 1);
    if (tok_file_exists(p)) return p;
    free(p);
    return NULL;
}

/* The first of names[] that exists in dir (malloc'd path), or NULL. */
static char *tok_find_in_dir(const char *dir, const char *const *names) {
    for (size_t i = 0; names[i]; i++) {
        char *p = tok_path_join(dir, names[i]);
        if (tok_file_exists(p)) return p;
        free(p);
    }
    return NULL;
}

/* True when head holds "key" followed by ':' and then the character `open` (skipping spaces). */
static bool tok_json_key_then(const char *head, const char *key, char open) {
    for (const char *p = strstr(head, key); p; p = strstr(p + 1, key)) {
        const char *q = p + strlen(key);
        while (*q == ' ' || *q == '\n' || *q == '\r' || *q == '\t') q++;
        if (*q++ != ':') continue;
        while (*q == ' ' || *q == '\n' || *q == '\r' || *q == '\t') q++;
        if (*q == open) return true;
    }
    return false;
}

/* A .json file is a tokenizer.json when it has "version": "..." or "model": {...} near the top;
 * a vocab.json maps every key to an integer, so a piece named "version" never matches. */
static bool tok_json_is_tokenizer_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char head[4096];
    size_t n = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    head[n] = '\0';
    return tok_json_key_then(head, "\"version\"", '"') || tok_json_key_then(head, "\"model\"", '{') ||
           tok_json_key_then(head, "\"added_tokens\"", '[');
}

rt_status tok_load(const char *path, tok_tokenizer **out) {
    rt_status st = RT_OK;
    char *dir = NULL, *vocab = NULL, *merges = NULL, *config = NULL, *json = NULL, *wp_vocab = NULL, *spm = NULL;
    static const char *const json_names[] = {"tokenizer.json", NULL};
    static const char *const vocab_names[] = {"vocab.json", "encoder.json", NULL};
    static const char *const merges_names[] = {"merges.txt", "vocab.bpe", NULL};
    static const char *const config_names[] = {"tokenizer_config.json", NULL};
    static const char *const spm_names[] = {"spiece.model", "cog-pretrain.model", NULL};
    *out = NULL;
    if (tok_is_dir(path)) {
        dir = rt_xstrdup(path);
        /* an HF T5 folder also has a tokenizer.json (a Unigram model): spiece.model comes first */
        spm = tok_find_in_dir(dir, spm_names);
        if (!spm) json = tok_find_in_dir(dir, json_names);
        if (!spm && !json) {
            /* the pairs go together: vocab.json + merges.txt (HF), encoder.json + vocab.bpe (OpenAI) */
            static const char *const bpe_pairs[][2] = {{"vocab.json", "merges.txt"}, {"encoder.json", "vocab.bpe"}};
            for (size_t k = 0; k < sizeof bpe_pairs / sizeof *bpe_pairs && !vocab; k++) {
                char *v = tok_path_join(dir, bpe_pairs[k][0]), *m = tok_path_join(dir, bpe_pairs[k][1]);
                if (tok_file_exists(v) && tok_file_exists(m)) {
                    vocab = v;
                    merges = m;
                } else {
                    free(v);
                    free(m);
                }
            }
            if (!vocab) wp_vocab = tok_path_join(dir, "vocab.txt");
            if (!vocab && !tok_file_exists(wp_vocab))
                RT_FAIL(RT_ERR_IO,
                        "%s: no tokenizer found: expected tokenizer.json, vocab.json + merges.txt, encoder.json + "
                        "vocab.bpe, vocab.txt (WordPiece), spiece.model (T5 SentencePiece) or cog-pretrain.model "
                        "(GLM SentencePiece) in this directory",
                        path);
        }
    } else {
        if (!tok_file_exists(path)) RT_FAIL(RT_ERR_IO, "%s: cannot open: %s", path, strerror(ENOENT));
        dir = tok_dirname(path);
        const char *base = tok_basename(path);
        if (tok_ends_with(base, ".model")) {
            spm = rt_xstrdup(path);
        } else if (tok_ends_with(base, ".json")) {
            if (strcmp(base, "tokenizer.json") == 0 || tok_json_is_tokenizer_json(path)) {
                json = rt_xstrdup(path);
            } else {
                vocab = rt_xstrdup(path);
                merges = tok_sibling_swap(path, "vocab.json", "merges.txt");
                if (!merges) merges = tok_sibling_swap(path, "encoder.json", "vocab.bpe");
                if (!merges) merges = tok_find_in_dir(dir, merges_names);
                if (!merges)
                    RT_FAIL(RT_ERR_IO, "%s: no merges file beside it (expected merges.txt or vocab.bpe in %s)", path,
                            dir);
            }
        } else if (tok_ends_with(base, ".txt") && !tok_ends_with(base, "merges.txt") &&
                   tok_txt_is_wordpiece_vocab(path)) {
            wp_vocab = rt_xstrdup(path);
        } else {
            merges = rt_xstrdup(path);
            vocab = tok_sibling_swap(path, "merges.txt", "vocab.json");
            if (!vocab) vocab = tok_sibling_swap(path, "vocab.bpe", "encoder.json");
            if (!vocab) vocab = tok_find_in_dir(dir, vocab_names);
            if (!vocab)
                RT_FAIL(RT_ERR_IO, "%s: no vocab file beside it (expected vocab.json or encoder.json in %s)", path,
                        dir);
        }
    }
    config = tok_find_in_dir(dir, config_names);
    if (spm) {
        if (tok_glm_wanted(spm, dir))
            RT_TRY(tok_glm_load(spm, dir, out));
        else
            RT_TRY(tok_t5_load(spm, dir, out));
    } else if (json) {
        /* SentencePiece (Unigram) tokenizer.json files will dispatch on model.type here too */
        if (tok_json_is_wordpiece(json))
            RT_TRY(tok_wordpiece_load_json(json, config, out));
        else
            RT_TRY(tok_bpe_load_json(json, config, out));
    } else if (wp_vocab) {
        if (tok_glm_en_wanted(dir))
            RT_TRY(tok_glm_en_load(wp_vocab, dir, out));
        else
            RT_TRY(tok_wordpiece_load_vocab(wp_vocab, config, out));
    } else {
        RT_TRY(tok_bpe_load_files(vocab, merges, config, out));
    }
fail:
    free(dir);
    free(vocab);
    free(merges);
    free(config);
    free(json);
    free(wp_vocab);
    free(spm);
    return st;
}
