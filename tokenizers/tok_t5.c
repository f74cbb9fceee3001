/* T5's tokenizer: a SentencePiece model (tok_spm.h) with Hugging Face T5Tokenizer's rules on
 * top, giving the ids of transformers' slow T5Tokenizer (legacy=True, its default; the fast one
 * and transformers 5 encode the same, see tests/golden/tok/README.md).
 *
 * Vocabulary: the SentencePiece pieces (t5-base: 32000, <pad>=0, </s>=1, <unk>=2), then the
 * extra_ids sentinels above them in reverse, <extra_id_0> = last id (32099) ... <extra_id_99> =
 * 32000, and any further tokens of tokenizer_config.json's added_tokens_decoder.
 *
 * Encoding: the added tokens (<pad>, </s>, <unk>, the sentinels, ...) are cut out of the raw text
 * first, leftmost-longest, as HF's trie does. A sentinel strips the whitespace (Python's
 * str.isspace) on both sides of it, as its AddedToken(lstrip=True, rstrip=True) does; </s>,
 * <pad> and <unk> strip nothing. Each remaining non-empty segment is encoded by SentencePiece
 * on its own, so it gets its own dummy-prefix "▁": "Hello <extra_id_0>." is 8774 32099 3 5.
 * tok_encode_pair appends </s> to each text unless its ids already end with </s>
 * (build_inputs_with_special_tokens: a </s> b </s>). There is no bos.
 *
 * Decoding is the slow T5Tokenizer's decode(ids, skip_special_tokens=False): the sentinels (and
 * other added tokens above the SentencePiece vocab) split the ids into runs that are joined with
 * single spaces; inside a run </s>, <pad> and <unk> are written as themselves with a space before
 * the first of a row, the pieces between them go through SentencePiece's decode, and the run
 * loses its leading "▁" and its outer whitespace. The fast tokenizer decodes the spaces around
 * special tokens differently ("Hello<extra_id_0> world" where slow gives "Hello <extra_id_0>
 * world"); nothing is skipped.
 *
 * Settings from tokenizer_config.json, then special_tokens_map.json, in the model's folder:
 * extra_ids (default 100, or the number of <extra_id_N> in additional_special_tokens), the names
 * of eos_token, unk_token and pad_token, added_tokens_decoder (ids, lstrip, rstrip), then
 * added_tokens.json, then any other additional_special_tokens at the next free ids, in the order
 * HF's from_pretrained adds them. The legacy flag is ignored: legacy=False changes the slow
 * tokenizer only, and transformers 5 behaves as legacy=True always. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_utf8.h"
#include "tokenizers/tok_base.h"
#include "tokenizers/tok_spm.h"
#include "tokenizers/tok_t5.h"

#define TOK_T5_SPACE "\xE2\x96\x81" /* "▁", SentencePiece's space */

typedef struct {
    char *content;
    size_t len;
    int32_t id;
    bool lstrip, rstrip; /* eat the whitespace before / after it in the text */
} tok_t5_added;

typedef struct {
    tok_spm *spm;
    int32_t n_spm;           /* SentencePiece pieces: ids at or above are added tokens */
    uint8_t *special_in_spm; /* (n_spm) 1 for an added token that is also a piece: </s>, <pad>, <unk> */
    tok_t5_added *added;     /* cut out of the raw text before SentencePiece sees it */
    size_t n_added;
    uint8_t added_first[256]; /* first bytes of the added tokens */
} tok_t5;

/* ---- Python's str.isspace and strip on UTF-8 ---- */

/* Bytes of leading whitespace in s[0..n) (an invalid UTF-8 byte is not whitespace). */
static size_t tok_t5_space_prefix(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = rt_utf8_decode_checked(s + i, n - i, &cp);
        if (!l || !rt_unicode_is_space(cp)) break;
        i += l;
    }
    return i;
}

/* ---- added tokens ---- */

/* The added token with this text, or NULL. */
static tok_t5_added *tok_t5_find_added(const tok_t5 *p, const char *content) {
    size_t len = strlen(content);
    for (size_t i = 0; i < p->n_added; i++)
        if (p->added[i].len == len && memcmp(p->added[i].content, content, len) == 0) return &p->added[i];
    return NULL;
}

/* Makes content an added token with this id (a later call for the same text wins, as in HF). */
static void tok_t5_add(tok_tokenizer *t, const char *content, int32_t id, bool lstrip, bool rstrip) {
    tok_t5 *p = t->impl;
    size_t len = strlen(content);
    if (len == 0) return;
    tok_t5_added *have = tok_t5_find_added(p, content);
    if (have) {
        have->id = id;
        have->lstrip = lstrip;
        have->rstrip = rstrip;
        tok_vocab_set(&t->vocab, content, len, id);
        return;
    }
    p->added = rt_xrealloc(p->added, (p->n_added + 1) * sizeof *p->added);
    p->added[p->n_added++] = (tok_t5_added){rt_xstrdup(content), len, id, lstrip, rstrip};
    p->added_first[(uint8_t)content[0]] = 1;
    tok_vocab_set(&t->vocab, content, len, id);
}

/* The longest added token at s[0..n), or NULL. */
static const tok_t5_added *tok_t5_match(const tok_t5 *p, const char *s, size_t n) {
    const tok_t5_added *best = NULL;
    if (!p->added_first[(uint8_t)s[0]]) return NULL;
    for (size_t i = 0; i < p->n_added; i++) {
        const tok_t5_added *a = &p->added[i];
        if (a->len <= n && (!best || a->len > best->len) && memcmp(s, a->content, a->len) == 0) best = a;
    }
    return best;
}

/* ---- encode ---- */

static rt_status tok_t5_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out) {
    const tok_t5 *p = t->impl;
    size_t seg = 0;          /* start of the text segment not yet encoded */
    bool strip_left = false; /* the token before the segment eats its leading whitespace */
    for (size_t i = 0; i <= len;) {
        const tok_t5_added *a = i < len ? tok_t5_match(p, text + i, len - i) : NULL;
        if (!a && i < len) {
            i++;
            continue;
        }
        size_t b = seg, e = i;
        if (strip_left) b += tok_t5_space_prefix(text + b, e - b);
        if (a && a->lstrip) e = b + rt_utf8_rstrip_len(text + b, e - b);
        if (e > b) {
            rt_status st = tok_spm_encode(p->spm, text + b, e - b, out);
            if (st != RT_OK) return st;
        }
        if (!a) break;
        tok_ids_push(out, a->id);
        i += a->len;
        seg = i;
        strip_left = a->rstrip;
    }
    return RT_OK;
}

/* Appends </s> unless the ids (from start on) already end with it, as HF's _add_eos_if_not_present. */
static void tok_t5_add_eos(const tok_tokenizer *t, tok_ids *out, size_t start) {
    if (t->eos < 0) return;
    if (out->n > start && out->ids[out->n - 1] == t->eos) return;
    tok_ids_push(out, t->eos);
}

static rt_status tok_t5_encode_pair(const tok_tokenizer *t, const char *a, const char *b, tok_ids *out) {
    size_t start = out->n;
    rt_status st = tok_t5_encode(t, a, strlen(a), out);
    if (st != RT_OK) return st;
    tok_t5_add_eos(t, out, start);
    if (!b) return RT_OK;
    start = out->n;
    st = tok_t5_encode(t, b, strlen(b), out);
    if (st != RT_OK) return st;
    tok_t5_add_eos(t, out, start);
    return RT_OK;
}

/* ---- decode ---- */

/* True for the ids HF writes as their own text inside a run (</s>, <pad>, <unk>). */
static bool tok_t5_is_special(const tok_tokenizer *t, int32_t id) {
    const tok_t5 *p = t->impl;
    return p->special_in_spm[id] != 0;
}

/* T5Tokenizer.convert_tokens_to_string over ids[0..n) (no added token above the SentencePiece
 * vocab among them), appended to b with its outer whitespace stripped. */
static rt_status tok_t5_run_to_string(const tok_tokenizer *t, const int32_t *ids, size_t n, rt_text *b) {
    const tok_t5 *p = t->impl;
    rt_status st = RT_OK;
    rt_text run = {0};
    const char **pieces = rt_xmalloc((n ? n : 1) * sizeof *pieces);
    size_t np = 0;
    bool prev_special = false;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && !tok_t5_is_special(t, ids[i])) {
            const char *piece = tok_spm_piece(p->spm, ids[i]);
            /* the run's first token loses one "▁" (T5Tokenizer adds a prefix space when encoding) */
            if (i == 0 && strncmp(piece, TOK_T5_SPACE, 3) == 0) piece += 3;
            pieces[np++] = piece;
            prev_special = false;
            continue;
        }
        if (i < n && !prev_special) rt_text_put(&run, " ", 1);
        char *text = NULL;
        st = tok_spm_decode_pieces(p->spm, pieces, np, &text);
        if (st != RT_OK) goto fail;
        rt_text_put(&run, text, strlen(text));
        free(text);
        np = 0;
        if (i < n) {
            const char *name = t->vocab.pieces[ids[i]];
            rt_text_put(&run, name, strlen(name));
            prev_special = true;
        }
    }
    size_t lead = run.s ? tok_t5_space_prefix(run.s, run.n) : 0;
    size_t keep = run.s ? rt_utf8_rstrip_len(run.s + lead, run.n - lead) : 0;
    if (keep) rt_text_put(b, run.s + lead, keep);
fail:
    free(run.s);
    free(pieces);
    return st;
}

static rt_status tok_t5_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, char **out) {
    const tok_t5 *p = t->impl;
    rt_status st = RT_OK;
    rt_text b = {0};
    *out = NULL;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= t->vocab.n_ids || !t->vocab.pieces[ids[i]])
            return rt_errorf(RT_ERR_FORMAT, "cannot decode id %d (position %zu): the vocab has %zu ids", ids[i], i,
                             t->vocab.n_ids);
    rt_text_put(&b, "", 0);
    /* sub_texts of HF's _decode: runs between added tokens, and the added tokens themselves,
     * joined by " "; an empty run is left out except at the end */
    bool first = true;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        bool added = i < n && ids[i] >= p->n_spm;
        if (i < n && !added) continue;
        if (i > start) {
            size_t before = b.n;
            if (!first) rt_text_put(&b, " ", 1);
            size_t mark = b.n;
            RT_TRY(tok_t5_run_to_string(t, ids + start, i - start, &b));
            if (b.n == mark && i < n) { /* HF drops an empty run before an added token */
                b.n = before;
                b.s[b.n] = '\0';
            } else {
                first = false;
            }
        }
        if (added) {
            if (!first) rt_text_put(&b, " ", 1);
            rt_text_put(&b, t->vocab.pieces[ids[i]], t->vocab.lens[ids[i]]);
            first = false;
        }
        start = i + 1;
    }
    *out = b.s;
    b.s = NULL;
fail:
    free(b.s);
    return st;
}

static void tok_t5_free_impl(void *impl) {
    tok_t5 *p = impl;
    if (!p) return;
    for (size_t i = 0; i < p->n_added; i++) free(p->added[i].content);
    free(p->added);
    free(p->special_in_spm);
    tok_spm_free(p->spm);
    free(p);
}

/* HF's all_special_ids: </s>, <pad>, <unk> and every added token (the sentinels). */
static bool tok_t5_is_special_or_added(const tok_tokenizer *t, int32_t id) {
    const tok_t5 *p = t->impl;
    return id >= p->n_spm || (id >= 0 && tok_t5_is_special(t, id));
}

static const tok_ops tok_t5_ops = {tok_t5_encode, tok_t5_encode_pair, tok_t5_decode, tok_t5_free_impl,
                                   tok_t5_is_special_or_added};

/* ---- settings ---- */

typedef struct {
    const char *eos, *unk, *pad; /* names, pointing into the configs */
    long extra_ids;              /* -1: not given */
    long n_sentinels;            /* <extra_id_N> in additional_special_tokens, -1: no such list */
    const char *sentinels_from;  /* the file that listed them */
    const cJSON *additional;     /* additional_special_tokens (the last file's) */
} tok_t5_names;

/* A special-token field: "text" or {"content": "text"}; NULL otherwise. */
static const char *tok_t5_config_name(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static rt_status tok_t5_read_names(const cJSON *cfg, const char *path, tok_t5_names *nm) {
    const char *v;
    if ((v = tok_t5_config_name(cfg, "eos_token"))) nm->eos = v;
    if ((v = tok_t5_config_name(cfg, "unk_token"))) nm->unk = v;
    if ((v = tok_t5_config_name(cfg, "pad_token"))) nm->pad = v;
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(cfg, "extra_ids");
    if (x && !cJSON_IsNull(x)) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 65536 ||
            x->valuedouble != (double)(long)x->valuedouble)
            return rt_errorf(RT_ERR_FORMAT, "%s: extra_ids: expected a non-negative integer", path);
        nm->extra_ids = (long)x->valuedouble;
    }
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(cfg, "additional_special_tokens");
    if (cJSON_IsArray(list)) {
        long n = 0;
        for (const cJSON *it = list->child; it; it = it->next) {
            const cJSON *c = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "content") : it;
            if (!cJSON_IsString(c))
                return rt_errorf(RT_ERR_FORMAT, "%s: additional_special_tokens: expected strings", path);
            if (strncmp(c->valuestring, "<extra_id_", 10) == 0) n++;
        }
        nm->n_sentinels = n;
        nm->sentinels_from = path;
        nm->additional = list;
    }
    return RT_OK;
}

/* added_tokens_decoder of tokenizer_config.json: {"id": {"content", "lstrip", "rstrip"}}. */
static rt_status tok_t5_read_added(tok_tokenizer *t, const cJSON *cfg, const char *path) {
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder");
    if (!cJSON_IsObject(dec)) return RT_OK;
    for (const cJSON *it = dec->child; it; it = it->next) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
        char *end;
        long id = strtol(it->string, &end, 10);
        if (!cJSON_IsString(c) || *end || end == it->string || id < 0 || id > 16777216)
            return rt_errorf(RT_ERR_FORMAT,
                             "%s: added_tokens_decoder.%s: expected an integer key and a \"content\" string", path,
                             it->string);
        int32_t have = tok_vocab_find(&t->vocab, c->valuestring, strlen(c->valuestring));
        if (have >= 0 && have != (int32_t)id)
            return rt_errorf(RT_ERR_FORMAT, "%s: added_tokens_decoder.%s: \"%s\" already has id %d", path, it->string,
                             c->valuestring, have);
        tok_t5_add(t, c->valuestring, (int32_t)id, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "lstrip")),
                   cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "rstrip")));
    }
    return RT_OK;
}

/* added_tokens.json (older HF folders): {"content": id}. */
static rt_status tok_t5_read_added_json(tok_tokenizer *t, const char *path) {
    rt_status st = RT_OK;
    cJSON *root = NULL;
    RT_TRY(tok_json_load(path, &root));
    if (!cJSON_IsObject(root)) RT_FAIL(RT_ERR_FORMAT, "%s: expected an object of token: id", path);
    for (const cJSON *it = root->child; it; it = it->next) {
        int32_t id = 0;
        RT_TRY(tok_json_id(it, path, &id));
        tok_t5_add(t, it->string, id, false, false);
    }
fail:
    cJSON_Delete(root);
    return st;
}

/* additional_special_tokens that are not added tokens yet, as HF's _add_tokens: a piece of the
 * model keeps its id, anything else takes the next free id. */
static void tok_t5_add_additional(tok_tokenizer *t, const cJSON *list) {
    tok_t5 *p = t->impl;
    for (const cJSON *it = list ? list->child : NULL; it; it = it->next) {
        const cJSON *c = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "content") : it;
        const char *name = c->valuestring;
        if (!*name || tok_t5_find_added(p, name)) continue;
        int32_t id = tok_vocab_find(&t->vocab, name, strlen(name));
        tok_t5_add(t, name, id >= 0 ? id : (int32_t)t->vocab.n_ids, false, false);
    }
}

static int32_t tok_t5_special_id(const tok_tokenizer *t, const char *name, const char *what, const char *where,
                                 rt_status *st) {
    int32_t id = tok_vocab_find(&t->vocab, name, strlen(name));
    if (id < 0) *st = rt_errorf(RT_ERR_FORMAT, "%s: %s \"%s\" is not in the SentencePiece model", where, what, name);
    return id;
}

rt_status tok_t5_load(const char *model_path, const char *dir, tok_tokenizer **out) {
    rt_status st = RT_OK;
    cJSON *cfg = NULL, *map = NULL;
    char *cfg_path = NULL, *map_path = NULL, *added_path = NULL;
    tok_tokenizer *t = rt_xcalloc(1, sizeof *t);
    tok_t5 *p = rt_xcalloc(1, sizeof *p);
    tok_vocab_init(&t->vocab);
    t->kind = "t5-spiece";
    t->ops = &tok_t5_ops;
    t->impl = p;
    t->bos = -1;
    *out = NULL;
    RT_TRY(tok_spm_load(model_path, &p->spm));
    p->n_spm = tok_spm_piece_count(p->spm);
    for (int32_t id = 0; id < p->n_spm; id++) {
        const char *piece = tok_spm_piece(p->spm, id);
        tok_vocab_set(&t->vocab, piece, strlen(piece), id);
    }

    tok_t5_names nm = {"</s>", "<unk>", "<pad>", -1, -1, NULL, NULL};
    cfg_path = tok_path_join(dir, "tokenizer_config.json");
    map_path = tok_path_join(dir, "special_tokens_map.json");
    added_path = tok_path_join(dir, "added_tokens.json");
    if (tok_file_exists(cfg_path)) {
        RT_TRY(tok_json_load(cfg_path, &cfg));
        RT_TRY(tok_t5_read_names(cfg, cfg_path, &nm));
    }
    if (tok_file_exists(map_path)) {
        RT_TRY(tok_json_load(map_path, &map));
        RT_TRY(tok_t5_read_names(map, map_path, &nm));
    }
    long n_extra = nm.extra_ids >= 0 ? nm.extra_ids : nm.n_sentinels > 0 ? nm.n_sentinels : 100;
    if (nm.extra_ids > 0 && nm.n_sentinels > 0 && nm.n_sentinels != nm.extra_ids)
        RT_FAIL(RT_ERR_FORMAT, "%s: additional_special_tokens has %ld <extra_id_N> tokens but extra_ids is %ld",
                nm.sentinels_from, nm.n_sentinels, nm.extra_ids);

    t->eos = tok_t5_special_id(t, nm.eos, "eos_token", model_path, &st);
    t->unk = tok_t5_special_id(t, nm.unk, "unk_token", model_path, &st);
    t->pad = tok_t5_special_id(t, nm.pad, "pad_token", model_path, &st);
    if (st != RT_OK) goto fail;
    tok_t5_add(t, nm.pad, t->pad, false, false);
    tok_t5_add(t, nm.eos, t->eos, false, false);
    tok_t5_add(t, nm.unk, t->unk, false, false);
    for (long i = 0; i < n_extra; i++) {
        char name[32];
        snprintf(name, sizeof name, "<extra_id_%ld>", i);
        tok_t5_add(t, name, (int32_t)(p->n_spm - 1 + n_extra - i), true, true);
    }
    if (cfg) RT_TRY(tok_t5_read_added(t, cfg, cfg_path));
    if (tok_file_exists(added_path)) RT_TRY(tok_t5_read_added_json(t, added_path));
    tok_t5_add_additional(t, nm.additional);
    for (size_t id = 0; id < t->vocab.n_ids; id++)
        if (!t->vocab.pieces[id]) RT_FAIL(RT_ERR_FORMAT, "%s: the added tokens leave id %zu without a token", dir, id);
    p->special_in_spm = rt_xcalloc((size_t)p->n_spm, 1);
    for (size_t i = 0; i < p->n_added; i++)
        if (p->added[i].id < p->n_spm) p->special_in_spm[p->added[i].id] = 1;
    *out = t;
    t = NULL;
fail:
    cJSON_Delete(cfg);
    cJSON_Delete(map);
    free(cfg_path);
    free(map_path);
    free(added_path);
    tok_free(t);
    return st;
}
