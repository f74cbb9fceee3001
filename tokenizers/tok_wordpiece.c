/* WordPiece as BERT uses it, giving the same ids as HF BertTokenizer (tokenizers' BertNormalizer,
 * BertPreTokenizer, WordPiece model and decoder, and the [CLS] a [SEP] b [SEP] template).
 *
 * Encoding: the special tokens ([CLS], [SEP], [PAD], [UNK], [MASK] and any added token) are cut
 * out of the raw text first, leftmost-longest, as HF does with tokens that are not normalized.
 * Each remaining segment goes through one pass over its code points that does, in HF's order,
 *   clean_text            drop NUL, U+FFFD and control/format characters, whitespace -> ' '
 *   handle_chinese_chars  a CJK ideograph becomes a word of its own
 *   strip_accents         NFD, then nonspacing marks dropped (default: follows lowercase)
 *   lowercase             per code point, as Rust's char::to_lowercase
 *   pre-tokenize          split on whitespace, every punctuation character is a word
 * with the per-code-point tables of tok_unicode.c, which gen_tok_unicode.py probes from HF so
 * that HF's own (older) Unicode tables are matched. One known gap: HF's NFD also puts runs of
 * combining marks into canonical order; marks are looked at one by one here, which differs only
 * when two marks that strip_accents keeps (new Mn or Mc marks) stand out of canonical order.
 * Each word then takes the longest vocab piece from its start, then the longest "##" piece from
 * where that ended, and so on; a word with no match at some point, or longer than
 * max_input_chars_per_word (100) code points, becomes [UNK]. Invalid UTF-8 bytes count as U+FFFD
 * (HF only ever sees valid text), so clean_text drops them.
 *
 * Decoding is HF's WordPiece decoder: pieces joined by spaces, a "##" piece glued to the one
 * before it, and the decoder's per-token cleanup (" ." -> "." and the like).
 *
 * Settings, as transformers (4.x and 5.x) BertTokenizer resolves them. When a
 * tokenizer_config.json lies beside the vocab.txt or tokenizer.json, its do_lower_case (default
 * true), strip_accents (default null: follows do_lower_case) and tokenize_chinese_chars (default
 * true) decide, and a tokenizer.json's normalizer settings are ignored, as BertTokenizer rebuilds
 * its normalizer from these arguments; the config also names the special tokens. A
 * tokenizer.json alone gives them in its BertNormalizer (lowercase, strip_accents,
 * handle_chinese_chars, clean_text). Its WordPiece model gives unk_token,
 * continuing_subword_prefix and max_input_chars_per_word either way. A vocab.txt alone (no
 * config) is lower-cased, HF's default, unless the vocab file's name, or else its folder's name,
 * says "cased" without "uncased" (bert_base_cased_vocab.txt, bert-base-cased/vocab.txt): there
 * we depart from HF, which would lower-case, because such a name means a cased vocab. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_fs.h"
#include "runtime/base/rt_utf8.h"
#include "tokenizers/tok_base.h"
#include "tokenizers/tok_wordpiece.h"

#define TOK_WP_MAX_PREFIX 16 /* bytes of continuing_subword_prefix */

typedef struct {
    char *content;
    size_t len;
    int32_t id;
} tok_wp_added;

typedef struct {
    bool clean_text, handle_cjk, strip_accents, lowercase;
    char prefix[TOK_WP_MAX_PREFIX + 1]; /* "##" */
    size_t prefix_len;
    size_t max_chars; /* max_input_chars_per_word: longer words are [UNK] */
    size_t max_piece; /* longest vocab piece in bytes: no longer match is worth a lookup */
    bool cleanup;     /* the decoder's " ." -> "." cleanup (HF's; FlagAI's DecodeIds has none) */
    bool final_sigma; /* Python's str.lower: a word-final capital sigma becomes U+03C2 */
    int32_t cls, sep, mask;
    tok_wp_added *added; /* matched in the raw text before normalization */
    size_t n_added;
    uint8_t added_first[256];
} tok_wp;

/* ---- encoding ---- */

/* The word being built and the scratch where "##" + a part of it is looked up. */
typedef struct {
    uint8_t *w;
    size_t n, cap, chars;
    char *scratch;
    size_t scratch_cap;
} tok_wp_word;

static void tok_wp_word_put(tok_wp_word *wd, uint32_t cp) {
    RT_GROW(wd->w, wd->cap, wd->n + 4);
    wd->n += rt_utf8_encode(cp, (char *)wd->w + wd->n);
    wd->chars++;
}

/* Greedy longest-match-first WordPiece over the word, then clears it. */
static void tok_wp_flush(const tok_tokenizer *t, const tok_wp *p, tok_wp_word *wd, tok_ids *out) {
    if (wd->n == 0) return;
    const size_t n = wd->n, mark = out->n;
    if (wd->chars > p->max_chars) goto unk;
    RT_GROW(wd->scratch, wd->scratch_cap, n + p->prefix_len);
    memcpy(wd->scratch, p->prefix, p->prefix_len);
    for (size_t start = 0; start < n;) {
        size_t end = n;
        if (end - start > p->max_piece) { /* back to a character boundary within reach */
            end = start + p->max_piece;
            while (end > start && (wd->w[end] & 0xC0) == 0x80) end--;
        }
        int32_t id = -1;
        while (end > start) {
            if (start == 0) {
                id = tok_vocab_find(&t->vocab, (const char *)wd->w, end);
            } else {
                memcpy(wd->scratch + p->prefix_len, wd->w + start, end - start);
                id = tok_vocab_find(&t->vocab, wd->scratch, p->prefix_len + end - start);
            }
            if (id >= 0) break;
            do end--;
            while (end > start && (wd->w[end] & 0xC0) == 0x80);
        }
        if (id < 0) goto unk;
        tok_ids_push(out, id);
        start = end;
    }
    goto done;
unk:
    out->n = mark;
    tok_ids_push(out, t->unk);
done:
    wd->n = 0;
    wd->chars = 0;
}

/* One code point after normalization: split, isolate or append. */
static inline void tok_wp_pretok(const tok_tokenizer *t, const tok_wp *p, tok_wp_word *wd, uint32_t cp, tok_ids *out) {
    unsigned fl = cp < 128 ? tok_bert_ascii[cp] : tok_bert_class(cp);
    if (fl & TOK_BC_SPLIT) {
        tok_wp_flush(t, p, wd, out);
    } else if (fl & TOK_BC_PUNCT) {
        tok_wp_flush(t, p, wd, out);
        tok_wp_word_put(wd, cp);
        tok_wp_flush(t, p, wd, out);
    } else {
        tok_wp_word_put(wd, cp);
    }
}

/* strip_accents then lowercase of one code point (after clean_text), fed to the pre-tokenizer. */
static void tok_wp_normalize_cp(const tok_tokenizer *t, const tok_wp *p, tok_wp_word *wd, uint32_t cp, unsigned fl,
                                tok_ids *out) {
    uint32_t s[4], l[4];
    size_t ns = 1;
    s[0] = cp;
    if (p->strip_accents) {
        if (fl & TOK_BC_MARK) return;
        if (fl & TOK_BC_DECOMP) ns = tok_bert_strip(cp, s);
    }
    for (size_t i = 0; i < ns; i++) {
        if (p->lowercase && ((s[i] < 128 ? tok_bert_ascii[s[i]] : tok_bert_class(s[i])) & TOK_BC_LOWER)) {
            size_t nl = tok_bert_lower(s[i], l);
            for (size_t k = 0; k < nl; k++) tok_wp_pretok(t, p, wd, l[k], out);
        } else {
            tok_wp_pretok(t, p, wd, s[i], out);
        }
    }
}

/* What Python's final-sigma rule makes of a code point of the word around a capital sigma. */
enum { TOK_SIGMA_STOP, TOK_SIGMA_SKIP, TOK_SIGMA_CASED, TOK_SIGMA_OTHER };

/* Case_Ignorable, approximated: nonspacing marks, the modifier letters and symbols of Latin and
 * Greek, and Word_Break MidLetter/MidNumLet/Single_Quote ('.:·’ and their kin). */
static bool tok_wp_case_ignorable(uint32_t cp, unsigned fl) {
    static const uint32_t single[] = {0x27,   0x2E,   0x3A,   0x5E,   0x60,   0xA8,   0xAF,   0xB4,   0xB7,
                                      0xB8,   0x374,  0x375,  0x37A,  0x384,  0x385,  0x387,  0x5F4,  0x1D78,
                                      0x1FBD, 0x1FFD, 0x1FFE, 0x2018, 0x2019, 0x2024, 0x2027, 0xFE13, 0xFE52,
                                      0xFE55, 0xFF07, 0xFF0E, 0xFF1A, 0xFF3E, 0xFF40};
    static const uint32_t range[][2] = {{0x2B0, 0x36F},   {0x1D2C, 0x1D6A}, {0x1D9B, 0x1DFF}, {0x1FBF, 0x1FC1},
                                        {0x1FCD, 0x1FCF}, {0x1FDD, 0x1FDF}, {0x1FED, 0x1FEF}, {0x20D0, 0x20FF}};
    if (fl & TOK_BC_MARK) return true;
    for (size_t i = 0; i < sizeof single / sizeof single[0]; i++)
        if (cp == single[i]) return true;
    for (size_t i = 0; i < sizeof range / sizeof range[0]; i++)
        if (cp >= range[i][0] && cp <= range[i][1]) return true;
    return false;
}

/* Cased, approximated: a letter of a script with case (Latin, IPA, Greek, Cyrillic, Armenian,
 * Georgian, Cherokee, Glagolitic, Coptic, full-width Latin, Deseret and the like, mathematical
 * letters). */
static bool tok_wp_cased(uint32_t cp) {
    static const uint32_t range[][2] = {{0x41, 0x5A},       {0x61, 0x7A},       {0xAA, 0xAA},       {0xB5, 0xB5},
                                        {0xBA, 0xBA},       {0xC0, 0x2AF},      {0x370, 0x52F},     {0x531, 0x58F},
                                        {0x10A0, 0x10FF},   {0x13A0, 0x13FD},   {0x1C80, 0x1CBF},   {0x1D00, 0x1DBF},
                                        {0x1E00, 0x1FFF},   {0x2C00, 0x2D2F},   {0xA640, 0xA69F},   {0xA720, 0xA7FF},
                                        {0xAB30, 0xAB6F},   {0xFB00, 0xFB06},   {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},
                                        {0x10400, 0x1044F}, {0x104B0, 0x104FF}, {0x10C80, 0x10CFF}, {0x118A0, 0x118DF},
                                        {0x16E40, 0x16E7F}, {0x1D400, 0x1D7FF}, {0x1E900, 0x1E94B}};
    if (tok_unicode_class(cp) != TOK_CC_LETTER) return false;
    for (size_t i = 0; i < sizeof range / sizeof range[0]; i++)
        if (cp >= range[i][0] && cp <= range[i][1]) return true;
    return false;
}

static int tok_wp_sigma_class(uint32_t cp) {
    unsigned fl = cp < 128 ? tok_bert_ascii[cp] : tok_bert_class(cp);
    if (fl & (TOK_BC_SPLIT | TOK_BC_CLEAN_SPACE | TOK_BC_CJK)) return TOK_SIGMA_STOP; /* the word ends */
    if ((fl & TOK_BC_DROP) || tok_wp_case_ignorable(cp, fl)) return TOK_SIGMA_SKIP;   /* clean_text drops it */
    return tok_wp_cased(cp) ? TOK_SIGMA_CASED : TOK_SIGMA_OTHER;
}

/* Python's str.lower, which FlagAI applies to each whitespace-separated word, writes U+03A3 at
 * s[at..end) as the final sigma U+03C2 when a cased letter comes before it and none after it
 * (case-ignorable characters skipped). Invalid bytes count as U+FFFD, which clean_text drops. */
static bool tok_wp_sigma_is_final(const uint8_t *s, size_t n, size_t at, size_t end) {
    int c = TOK_SIGMA_STOP;
    for (size_t j = at; j > 0;) {
        size_t k = j - 1, len;
        while (k > 0 && (s[k] & 0xC0) == 0x80 && j - k < 4) k--;
        uint32_t cp;
        if ((len = rt_utf8_decode_checked((const char *)s + k, j - k, &cp)) != j - k) k = j - 1, cp = 0xFFFD;
        j = k;
        if ((c = tok_wp_sigma_class(cp)) != TOK_SIGMA_SKIP) break;
    }
    if (c != TOK_SIGMA_CASED) return false;
    for (size_t j = end; j < n;) {
        uint32_t cp;
        size_t len = rt_utf8_decode_checked((const char *)s + j, n - j, &cp);
        if (!len) len = 1, cp = 0xFFFD;
        j += len;
        if ((c = tok_wp_sigma_class(cp)) != TOK_SIGMA_SKIP) return c != TOK_SIGMA_CASED;
    }
    return true;
}

static void tok_wp_segment(const tok_tokenizer *t, const tok_wp *p, const uint8_t *s, size_t n, tok_wp_word *wd,
                           tok_ids *out) {
    for (size_t i = 0; i < n;) {
        const size_t at = i;
        uint32_t cp = s[i];
        unsigned fl;
        if (cp < 128) {
            i++;
            fl = tok_bert_ascii[cp];
            if (fl == 0 || fl == TOK_BC_LOWER) { /* the common case: a letter or digit */
                tok_wp_word_put(wd, fl && p->lowercase ? cp + 32 : cp);
                continue;
            }
        } else {
            size_t len = rt_utf8_decode_checked((const char *)s + i, n - i, &cp);
            if (len) {
                i += len;
            } else {
                cp = 0xFFFD;
                i++;
            }
            fl = tok_bert_class(cp);
            if (cp == 0x3A3 && p->final_sigma && p->lowercase && tok_wp_sigma_is_final(s, n, at, i)) {
                tok_wp_word_put(wd, 0x3C2);
                continue;
            }
        }
        if (p->clean_text) {
            if (fl & TOK_BC_DROP) continue;
            if (fl & TOK_BC_CLEAN_SPACE) {
                tok_wp_flush(t, p, wd, out);
                continue;
            }
        }
        if (p->handle_cjk && (fl & TOK_BC_CJK)) {
            tok_wp_flush(t, p, wd, out);
            tok_wp_normalize_cp(t, p, wd, cp, fl, out);
            tok_wp_flush(t, p, wd, out);
            continue;
        }
        tok_wp_normalize_cp(t, p, wd, cp, fl, out);
    }
    tok_wp_flush(t, p, wd, out);
}

rt_status tok_wordpiece_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out) {
    const tok_wp *p = t->impl;
    const uint8_t *s = (const uint8_t *)text;
    tok_wp_word wd = {0};
    size_t seg = 0;
    tok_ids_reserve(out, len / 4 + 4);
    for (size_t i = 0; i < len && p->n_added; i++) {
        if (!p->added_first[s[i]]) continue;
        const tok_wp_added *best = NULL; /* leftmost-longest, like HF's Aho-Corasick */
        for (size_t k = 0; k < p->n_added; k++) {
            const tok_wp_added *a = &p->added[k];
            if (a->len <= len - i && (!best || a->len > best->len) && memcmp(s + i, a->content, a->len) == 0) best = a;
        }
        if (!best) continue;
        tok_wp_segment(t, p, s + seg, i - seg, &wd, out);
        tok_ids_push(out, best->id);
        seg = i + best->len;
        i = seg - 1;
    }
    tok_wp_segment(t, p, s + seg, len - seg, &wd, out);
    free(wd.w);
    free(wd.scratch);
    return RT_OK;
}

static rt_status tok_wp_encode_pair(const tok_tokenizer *t, const char *a, const char *b, tok_ids *out) {
    rt_status st = RT_OK;
    const tok_wp *p = t->impl;
    tok_ids_push(out, p->cls);
    RT_TRY(tok_wordpiece_encode(t, a, strlen(a), out));
    tok_ids_push(out, p->sep);
    if (b) {
        RT_TRY(tok_wordpiece_encode(t, b, strlen(b), out));
        tok_ids_push(out, p->sep);
    }
fail:
    return st;
}

/* ---- decoding ---- */

/* HF's WordPiece decoder cleanup, applied to each token after its leading space is added: the
 * replacements run in this order, each over the whole token. */
static void tok_wp_cleanup(rt_text *tok, rt_text *tmp) {
    static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " do not", " 's", " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", " don't", "'s", "'ve", "'re"};
    for (size_t r = 0; r < sizeof from / sizeof from[0]; r++) {
        if (!strstr(tok->s, from[r])) continue;
        size_t fl = strlen(from[r]), tl = strlen(to[r]);
        tmp->n = 0;
        const char *q = tok->s;
        for (const char *m; (m = strstr(q, from[r])) != NULL; q = m + fl) {
            rt_text_put(tmp, q, (size_t)(m - q));
            rt_text_put(tmp, to[r], tl);
        }
        rt_text_put(tmp, q, strlen(q));
        tok->n = 0;
        rt_text_put(tok, tmp->s, tmp->n);
    }
}

rt_status tok_wordpiece_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, char **out) {
    const tok_wp *p = t->impl;
    rt_text res = {0}, tok = {0}, tmp = {0};
    *out = NULL;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= t->vocab.n_ids || !t->vocab.pieces[id])
            return rt_errorf(RT_ERR_FORMAT, "id %d (position %zu) is not in the vocabulary of %zu ids", id, i,
                             t->vocab.n_ids);
    }
    rt_text_put(&res, "", 0);
    for (size_t i = 0; i < n; i++) {
        const char *piece = t->vocab.pieces[ids[i]];
        size_t len = t->vocab.lens[ids[i]];
        tok.n = 0;
        rt_text_put(&tok, "", 0);
        if (i > 0) {
            if (len >= p->prefix_len && memcmp(piece, p->prefix, p->prefix_len) == 0) {
                piece += p->prefix_len;
                len -= p->prefix_len;
            } else {
                rt_text_put(&tok, " ", 1);
            }
        }
        rt_text_put(&tok, piece, len);
        if (p->cleanup) tok_wp_cleanup(&tok, &tmp);
        rt_text_put(&res, tok.s, tok.n);
    }
    *out = rt_utf8_lossy(res.s, res.n);
    free(res.s);
    free(tok.s);
    free(tmp.s);
    return RT_OK;
}

void tok_wordpiece_free_impl(void *impl) {
    tok_wp *p = impl;
    if (!p) return;
    for (size_t i = 0; i < p->n_added; i++) free(p->added[i].content);
    free(p->added);
    free(p);
}

static const tok_ops tok_wp_ops = {tok_wordpiece_encode, tok_wp_encode_pair, tok_wordpiece_decode,
                                   tok_wordpiece_free_impl, NULL};

/* ---- loading ---- */

static tok_tokenizer *tok_wp_new(void) {
    tok_tokenizer *t = rt_xcalloc(1, sizeof *t);
    tok_vocab_init(&t->vocab);
    t->ops = &tok_wp_ops;
    tok_wp *p = rt_xcalloc(1, sizeof *p);
    t->impl = p;
    t->kind = "bert-wordpiece";
    t->bos = t->eos = t->pad = t->unk = -1;
    p->clean_text = p->handle_cjk = p->lowercase = p->strip_accents = p->cleanup = true;
    memcpy(p->prefix, "##", 3);
    p->prefix_len = 2;
    p->max_chars = 100;
    p->cls = p->sep = p->mask = -1;
    return t;
}

static void tok_wp_add_added(tok_tokenizer *t, const char *content, int32_t id) {
    tok_wp *p = t->impl;
    size_t len = strlen(content);
    if (len == 0 || id < 0) return;
    for (size_t i = 0; i < p->n_added; i++)
        if (p->added[i].len == len && memcmp(p->added[i].content, content, len) == 0) {
            p->added[i].id = id;
            tok_vocab_set(&t->vocab, content, len, id);
            return;
        }
    p->added = rt_xrealloc(p->added, (p->n_added + 1) * sizeof *p->added);
    p->added[p->n_added++] = (tok_wp_added){rt_xstrdup(content), len, id};
    p->added_first[(uint8_t)content[0]] = 1;
    tok_vocab_set(&t->vocab, content, len, id);
}

static rt_status tok_wp_json_parse(const char *path, const char *data, size_t len, cJSON **out) {
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(data, len, &end, 0);
    if (*out) return RT_OK;
    size_t line = 1;
    if (end && end >= data && end <= data + len)
        for (const char *q = data; q < end; q++) line += *q == '\n';
    return rt_errorf(RT_ERR_FORMAT, "%s:%zu: invalid JSON", path, line);
}

/* A special-token name in tokenizer_config.json: "text" or {"content": "text"}; NULL otherwise. */
static const char *tok_wp_config_name(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A boolean setting: true/false sets *out and returns true; absent or null leaves it. */
static rt_status tok_wp_bool(const cJSON *obj, const char *key, const char *where, bool *out, bool *set) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (set) *set = false;
    if (!v || cJSON_IsNull(v)) return RT_OK;
    if (!cJSON_IsBool(v)) return rt_errorf(RT_ERR_FORMAT, "%s: %s: expected true, false or null", where, key);
    *out = cJSON_IsTrue(v);
    if (set) *set = true;
    return RT_OK;
}

/* The special token names, defaults BERT's. */
typedef struct {
    const char *unk, *cls, *sep, *pad, *mask;
} tok_wp_names;

/* Finds the special ids by name; [UNK], [CLS] and [SEP] must exist. Every one found is an added
 * token, as HF BertTokenizer makes them. */
static rt_status tok_wp_specials(tok_tokenizer *t, const tok_wp_names *nm, const char *where) {
    tok_wp *p = t->impl;
    const char *need[3] = {nm->unk, nm->cls, nm->sep};
    int32_t got[3];
    for (size_t i = 0; i < 3; i++) {
        got[i] = tok_vocab_find(&t->vocab, need[i], strlen(need[i]));
        if (got[i] < 0)
            return rt_errorf(RT_ERR_FORMAT, "%s: the vocab has no %s token (a BERT vocab needs %s, %s and %s)", where,
                             need[i], nm->unk, nm->cls, nm->sep);
    }
    t->unk = got[0];
    p->cls = t->bos = got[1];
    p->sep = t->eos = got[2];
    t->pad = tok_vocab_find(&t->vocab, nm->pad, strlen(nm->pad));
    p->mask = tok_vocab_find(&t->vocab, nm->mask, strlen(nm->mask));
    const char *all[5] = {nm->pad, nm->unk, nm->cls, nm->sep, nm->mask};
    for (size_t i = 0; i < 5; i++) tok_wp_add_added(t, all[i], tok_vocab_find(&t->vocab, all[i], strlen(all[i])));
    return RT_OK;
}

static void tok_wp_finish(tok_tokenizer *t) {
    tok_wp *p = t->impl;
    p->max_piece = 1;
    for (size_t i = 0; i < t->vocab.n_ids; i++)
        if (t->vocab.lens[i] > p->max_piece) p->max_piece = t->vocab.lens[i];
}

/* "cased" without "uncased" in s (a file or folder name). */
static bool tok_wp_name_says_cased(const char *s, size_t n) {
    for (size_t i = 0; i + 5 <= n; i++)
        if (strncmp(s + i, "cased", 5) == 0 && !(i >= 2 && strncmp(s + i - 2, "un", 2) == 0)) return true;
    return false;
}

static bool tok_wp_path_says_cased(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strstr(base, "uncased")) return false;
    if (tok_wp_name_says_cased(base, strlen(base))) return true;
    if (base == path) return false;
    const char *dir_end = base - 1, *dir = dir_end;
    while (dir > path && dir[-1] != '/') dir--;
    size_t dn = (size_t)(dir_end - dir);
    for (size_t i = 0; i + 7 <= dn; i++)
        if (strncmp(dir + i, "uncased", 7) == 0) return false;
    return tok_wp_name_says_cased(dir, dn);
}

/* tokenizer_config.json: its settings (BertTokenizer's defaults for those it lacks), added tokens
 * and special token names. */
static rt_status tok_wp_read_config(tok_tokenizer *t, const char *path, tok_wp_names *nm, cJSON **keep) {
    rt_status st = RT_OK;
    tok_wp *p = t->impl;
    char *data = NULL;
    size_t len;
    cJSON *cfg = NULL;
    RT_TRY(rt_read_file(path, 0, &data, &len));
    RT_TRY(tok_wp_json_parse(path, data, len, &cfg));
    bool strip_set = false, strip = false;
    p->lowercase = p->handle_cjk = true;
    RT_TRY(tok_wp_bool(cfg, "do_lower_case", path, &p->lowercase, NULL));
    RT_TRY(tok_wp_bool(cfg, "tokenize_chinese_chars", path, &p->handle_cjk, NULL));
    RT_TRY(tok_wp_bool(cfg, "strip_accents", path, &strip, &strip_set));
    p->strip_accents = strip_set ? strip : p->lowercase;
    const char *v;
    if ((v = tok_wp_config_name(cfg, "unk_token"))) nm->unk = v;
    if ((v = tok_wp_config_name(cfg, "cls_token"))) nm->cls = v;
    if ((v = tok_wp_config_name(cfg, "sep_token"))) nm->sep = v;
    if ((v = tok_wp_config_name(cfg, "pad_token"))) nm->pad = v;
    if ((v = tok_wp_config_name(cfg, "mask_token"))) nm->mask = v;
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder");
    if (cJSON_IsObject(dec))
        for (const cJSON *it = dec->child; it; it = it->next) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
            char *end;
            long id = strtol(it->string, &end, 10);
            if (!cJSON_IsString(c) || *end || end == it->string || id < 0 || id > 16777216)
                RT_FAIL(RT_ERR_FORMAT, "%s: added_tokens_decoder.%s: expected an integer key and a \"content\" string",
                        path, it->string);
            tok_wp_add_added(t, c->valuestring, (int32_t)id);
        }
    *keep = cfg; /* the names point into it */
    cfg = NULL;
fail:
    cJSON_Delete(cfg);
    free(data);
    return st;
}

/* vocab.txt into t->vocab: Python's readlines() in text mode (\n, \r\n and \r end a line), the id
 * is the line index. */
static rt_status tok_wp_read_vocab(tok_tokenizer *t, const char *vocab_path) {
    rt_status st = RT_OK;
    char *data = NULL;
    size_t len;
    RT_TRY(rt_read_file(vocab_path, 0, &data, &len));
    int32_t id = 0;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && data[j] != '\n' && data[j] != '\r') j++;
        tok_vocab_set(&t->vocab, data + i, j - i, id++);
        if (j < len && data[j] == '\r' && j + 1 < len && data[j + 1] == '\n') j++;
        i = j + 1;
    }
    if (id == 0) RT_FAIL(RT_ERR_FORMAT, "%s: the vocab is empty (expected one piece per line)", vocab_path);
fail:
    free(data);
    return st;
}

rt_status tok_wordpiece_load_vocab(const char *vocab_path, const char *config_path, tok_tokenizer **out) {
    rt_status st = RT_OK;
    cJSON *cfg = NULL;
    tok_tokenizer *t = tok_wp_new();
    tok_wp *p = t->impl;
    tok_wp_names nm = {"[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"};
    *out = NULL;
    RT_TRY(tok_wp_read_vocab(t, vocab_path));
    if (config_path) {
        RT_TRY(tok_wp_read_config(t, config_path, &nm, &cfg));
    } else {
        p->lowercase = p->strip_accents = !tok_wp_path_says_cased(vocab_path);
    }
    RT_TRY(tok_wp_specials(t, &nm, vocab_path));
    tok_wp_finish(t);
    *out = t;
    t = NULL;
fail:
    cJSON_Delete(cfg);
    tok_free(t);
    return st;
}

rt_status tok_wordpiece_load_flagai(const char *vocab_path, tok_tokenizer **out) {
    rt_status st = RT_OK;
    tok_tokenizer *t = tok_wp_new();
    tok_wp *p = t->impl;
    const tok_wp_names nm = {"[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"};
    *out = NULL;
    p->final_sigma = true;
    p->cleanup = false;
    RT_TRY(tok_wp_read_vocab(t, vocab_path));
    RT_TRY(tok_wp_specials(t, &nm, vocab_path));
    tok_wp_finish(t);
    *out = t;
    t = NULL;
fail:
    tok_free(t);
    return st;
}

void tok_wordpiece_add_token(tok_tokenizer *t, const char *text, int32_t id) { tok_wp_add_added(t, text, id); }

bool tok_wordpiece_is_added(const tok_tokenizer *t, int32_t id) {
    const tok_wp *p = t->impl;
    for (size_t i = 0; i < p->n_added; i++)
        if (p->added[i].id == id) return true;
    return false;
}

rt_status tok_wordpiece_load_json(const char *json_path, const char *config_path, tok_tokenizer **out) {
    rt_status st = RT_OK;
    char *data = NULL, where[1200];
    size_t len;
    cJSON *root = NULL, *cfg = NULL;
    tok_tokenizer *t = tok_wp_new();
    tok_wp *p = t->impl;
    tok_wp_names nm = {"[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"};
    *out = NULL;
    RT_TRY(rt_read_file(json_path, 0, &data, &len));
    RT_TRY(tok_wp_json_parse(json_path, data, len, &root));
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "WordPiece") != 0)
        RT_FAIL(RT_ERR_FORMAT, "%s: model.type: expected \"WordPiece\"", json_path);

    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    const cJSON *norm_type = cJSON_GetObjectItemCaseSensitive(norm, "type");
    if (!cJSON_IsString(norm_type) || strcmp(norm_type->valuestring, "BertNormalizer") != 0)
        RT_FAIL(RT_ERR_UNSUPPORTED,
                "%s: model.type \"WordPiece\" is supported as BERT's only: normalizer: expected {\"type\": "
                "\"BertNormalizer\"}",
                json_path);
    snprintf(where, sizeof where, "%s: normalizer", json_path);
    bool strip = false, strip_set = false;
    RT_TRY(tok_wp_bool(norm, "clean_text", where, &p->clean_text, NULL));
    RT_TRY(tok_wp_bool(norm, "handle_chinese_chars", where, &p->handle_cjk, NULL));
    RT_TRY(tok_wp_bool(norm, "lowercase", where, &p->lowercase, NULL));
    RT_TRY(tok_wp_bool(norm, "strip_accents", where, &strip, &strip_set));
    p->strip_accents = strip_set ? strip : p->lowercase;
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON *pre_type = cJSON_GetObjectItemCaseSensitive(pre, "type");
    if (!cJSON_IsString(pre_type) || strcmp(pre_type->valuestring, "BertPreTokenizer") != 0)
        RT_FAIL(RT_ERR_UNSUPPORTED,
                "%s: model.type \"WordPiece\" is supported as BERT's only: pre_tokenizer: expected {\"type\": "
                "\"BertPreTokenizer\"}",
                json_path);

    const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (cJSON_IsString(v)) nm.unk = v->valuestring;
    v = cJSON_GetObjectItemCaseSensitive(model, "continuing_subword_prefix");
    if (cJSON_IsString(v)) {
        if (strlen(v->valuestring) > TOK_WP_MAX_PREFIX)
            RT_FAIL(RT_ERR_UNSUPPORTED, "%s: model.continuing_subword_prefix: at most %d bytes are supported",
                    json_path, TOK_WP_MAX_PREFIX);
        p->prefix_len = strlen(v->valuestring);
        memcpy(p->prefix, v->valuestring, p->prefix_len + 1);
    }
    v = cJSON_GetObjectItemCaseSensitive(model, "max_input_chars_per_word");
    if (v) {
        /* the range first: converting a double past long's range to long is undefined (the fuzzer
         * found 1.2e91) */
        const double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (!(d >= 0 && d <= 1e9) || d != (double)(long)d)
            RT_FAIL(RT_ERR_FORMAT, "%s: model.max_input_chars_per_word: expected an integer in [0, 1000000000]",
                    json_path);
        p->max_chars = (size_t)v->valuedouble;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab) || !vocab->child)
        RT_FAIL(RT_ERR_FORMAT, "%s: model.vocab: expected a non-empty JSON object of piece: id", json_path);
    for (const cJSON *it = vocab->child; it; it = it->next) {
        int32_t id = 0;
        char where[4200];
        snprintf(where, sizeof where, "%s: model.vocab", json_path);
        RT_TRY(tok_json_id(it, where, &id));
        tok_vocab_set(&t->vocab, it->string, strlen(it->string), id);
    }
    if (config_path) { /* BertTokenizer's arguments and their defaults replace the normalizer */
        p->clean_text = p->lowercase = p->handle_cjk = true;
        RT_TRY(tok_wp_read_config(t, config_path, &nm, &cfg));
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added && !cJSON_IsArray(added)) RT_FAIL(RT_ERR_FORMAT, "%s: added_tokens: expected an array", json_path);
    int k = 0;
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next, k++) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(a, "content");
        const cJSON *idv = cJSON_GetObjectItemCaseSensitive(a, "id");
        if (!cJSON_IsString(c) || !cJSON_IsNumber(idv) || idv->valuedouble < 0 || idv->valuedouble > 16777216.0)
            RT_FAIL(RT_ERR_FORMAT, "%s: added_tokens[%d]: expected an object with a \"content\" string and an id",
                    json_path, k);
        tok_wp_add_added(t, c->valuestring, (int32_t)idv->valuedouble);
    }
    RT_TRY(tok_wp_specials(t, &nm, json_path));
    tok_wp_finish(t);
    *out = t;
    t = NULL;
fail:
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    free(data);
    tok_free(t);
    return st;
}

bool tok_json_is_wordpiece(const char *path) {
    char *data = NULL;
    size_t len;
    if (rt_read_file(path, 0, &data, &len) != RT_OK) return false;
    cJSON *root = cJSON_ParseWithLength(data, len);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "model"), "type");
    bool yes = cJSON_IsString(type) && strcmp(type->valuestring, "WordPiece") == 0;
    cJSON_Delete(root);
    free(data);
    return yes;
}

bool tok_txt_is_wordpiece_vocab(const char *path) {
    size_t n = strlen(path);
    if (n >= 9 && strcmp(path + n - 9, "vocab.txt") == 0) return true;
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char line[512];
    bool yes = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!yes) return false;
    line[strcspn(line, "\r\n")] = '\0';
    return line[0] && !strchr(line, ' ') && strncmp(line, "#version", 8) != 0;
}
