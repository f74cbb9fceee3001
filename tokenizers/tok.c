/* The tokenizer front door: tok_load finds the tokenizer files in an HF directory (or takes
 * one file and finds its partner beside it) and hands them to the right loader (byte-level BPE,
 * WordPiece for a vocab.txt or a tokenizer.json whose model.type is "WordPiece", or T5's
 * SentencePiece for a spiece.model or any .model file, or GLM's Chinese SentencePiece for its
 * cog-pretrain.model, see tok_glm_wanted, or GLM's English WordPiece for a vocab.txt whose
 * tokenizer_config.json names GLMLargeEnWordPieceTokenizer, see tok_glm_en_wanted); the other
 * public calls dispatch through the tokenizer's vtable or read its vocabulary. Also the
 * helpers every tokenizer needs: the id buffer, the piece <-> id hash map, UTF-8 and files. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizers/tok_internal.h"

/* ---- id buffer ---- */

void tok_ids_reserve(tok_ids *v, size_t more) {
    if (v->n + more <= v->cap) return;
    size_t cap = v->cap ? v->cap : 16;
    while (cap < v->n + more) cap *= 2;
    v->ids = rt_xrealloc(v->ids, cap * sizeof *v->ids);
    v->cap = cap;
}

void tok_ids_push(tok_ids *v, int32_t id) {
    if (v->n == v->cap) tok_ids_reserve(v, 1);
    v->ids[v->n++] = id;
}

void tok_ids_clear(tok_ids *v) { v->n = 0; }

void tok_ids_free(tok_ids *v) {
    if (!v) return;
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

/* ---- vocabulary hash map ---- */

static uint64_t tok_hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a: only used at load and for piece lookups */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

void tok_vocab_init(tok_vocab *v) { memset(v, 0, sizeof *v); }

void tok_vocab_free(tok_vocab *v) {
    if (!v) return;
    for (size_t i = 0; i < v->n_ids; i++) free(v->pieces[i]);
    free(v->pieces);
    free(v->lens);
    free(v->slots);
    tok_vocab_init(v);
}

static void tok_vocab_rehash(tok_vocab *v, size_t n_slots) {
    free(v->slots);
    v->slots = rt_xmalloc(n_slots * sizeof *v->slots);
    for (size_t i = 0; i < n_slots; i++) v->slots[i] = -1;
    v->n_slots = n_slots;
    for (size_t id = 0; id < v->n_ids; id++) {
        if (!v->pieces[id]) continue;
        size_t i = tok_hash_bytes(v->pieces[id], v->lens[id]) & (n_slots - 1);
        while (v->slots[i] >= 0) i = (i + 1) & (n_slots - 1);
        v->slots[i] = (int32_t)id;
    }
}

/* The slot holding piece, or the empty slot where it would go. */
static size_t tok_vocab_slot(const tok_vocab *v, const char *piece, size_t len) {
    size_t mask = v->n_slots - 1, i = tok_hash_bytes(piece, len) & mask;
    for (;;) {
        int32_t id = v->slots[i];
        if (id < 0) return i;
        if (v->lens[id] == len && memcmp(v->pieces[id], piece, len) == 0) return i;
        i = (i + 1) & mask;
    }
}

int32_t tok_vocab_find(const tok_vocab *v, const char *piece, size_t len) {
    if (v->n_slots == 0) return -1;
    return v->slots[tok_vocab_slot(v, piece, len)];
}

void tok_vocab_set(tok_vocab *v, const char *piece, size_t len, int32_t id) {
    RT_CHECK(id >= 0, "id=%d", id);
    if ((size_t)id >= v->n_ids) {
        size_t n = (size_t)id + 1;
        v->pieces = rt_xrealloc(v->pieces, n * sizeof *v->pieces);
        v->lens = rt_xrealloc(v->lens, n * sizeof *v->lens);
        for (size_t i = v->n_ids; i < n; i++) {
            v->pieces[i] = NULL;
            v->lens[i] = 0;
        }
        v->n_ids = n;
    }
    /* keep the table at most half full, counting the entry about to go in */
    if (2 * (v->n_entries + 1) > v->n_slots) tok_vocab_rehash(v, v->n_slots ? 2 * v->n_slots : 1024);
    size_t slot = tok_vocab_slot(v, piece, len);
    int32_t old = v->slots[slot];
    if (old == id) return;
    if (old >= 0) { /* the piece moves to a new id: the old id loses it */
        free(v->pieces[old]);
        v->pieces[old] = NULL;
        v->lens[old] = 0;
        v->n_entries--;
    }
    if (v->pieces[id]) { /* the id had another piece: that piece leaves the table */
        size_t other = tok_vocab_slot(v, v->pieces[id], v->lens[id]);
        free(v->pieces[id]);
        v->pieces[id] = NULL;
        v->n_entries--;
        v->slots[other] = -1;
        tok_vocab_rehash(v, v->n_slots); /* rare; keeps linear probing chains intact */
        slot = tok_vocab_slot(v, piece, len);
    }
    char *p = rt_xmalloc(len + 1);
    memcpy(p, piece, len);
    p[len] = '\0';
    v->pieces[id] = p;
    v->lens[id] = (uint32_t)len;
    v->slots[slot] = id;
    v->n_entries++;
}

/* ---- UTF-8 ---- */

size_t tok_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    /* Unicode Table 3-7: the allowed second byte depends on the lead byte */
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    v = (v << 6) | (s[1] & 0x3F);
    for (size_t i = 2; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}

bool tok_py_isspace(uint32_t cp) {
    if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

size_t tok_py_rstrip_len(const char *s, size_t n) {
    size_t keep = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = tok_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (!l) l = 1, cp = 0xFFFD;
        i += l;
        if (!tok_py_isspace(cp)) keep = i;
    }
    return keep;
}

size_t tok_utf8_encode(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the maximal subpart of an ill-formed sequence at s: the longest prefix that could
 * still begin a well-formed sequence (at least 1). Each such subpart becomes one U+FFFD. */
static size_t tok_utf8_bad_len(const uint8_t *s, size_t n) {
    uint8_t c = s[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 1;
    if (n < 2 || s[1] < lo || s[1] > hi) return 1;
    size_t i = 2;
    while (i < len && i < n && (s[i] & 0xC0) == 0x80) i++;
    return i;
}

char *tok_utf8_lossy(const uint8_t *s, size_t n) {
    char *out = rt_xmalloc(3 * n + 1); /* worst case: every byte becomes EF BF BD */
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) {
            out[o++] = (char)s[i++];
            continue;
        }
        uint32_t cp;
        size_t len = tok_utf8_decode(s + i, n - i, &cp);
        if (len) {
            memcpy(out + o, s + i, len);
            o += len;
            i += len;
        } else {
            out[o++] = (char)0xEF;
            out[o++] = (char)0xBF;
            out[o++] = (char)0xBD;
            i += tok_utf8_bad_len(s + i, n - i);
        }
    }
    out[o] = '\0';
    return out;
}

/* ---- files ---- */

rt_status tok_read_file(const char *path, char **data, size_t *len) {
    rt_status st = RT_OK;
    char *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) RT_FAIL(RT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) RT_FAIL(RT_ERR_IO, "%s: cannot seek: %s", path, strerror(errno));
    long size = ftell(f);
    if (size < 0) RT_FAIL(RT_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    rewind(f);
    buf = malloc((size_t)size + 1);
    if (!buf) RT_FAIL(RT_ERR_NOMEM, "%s: cannot allocate %ld bytes", path, size);
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) RT_FAIL(RT_ERR_IO, "%s: short read", path);
    buf[size] = '\0';
    *data = buf;
    *len = (size_t)size;
    buf = NULL;
fail:
    free(buf);
    if (f) fclose(f);
    return st;
}

rt_status tok_json_load(const char *path, cJSON **out) {
    rt_status st = RT_OK;
    char *data = NULL;
    size_t len;
    *out = NULL;
    RT_TRY(tok_read_file(path, &data, &len));
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(data, len, &end, 0);
    if (!*out) {
        size_t line = 1;
        if (end && end >= data && end <= data + len)
            for (const char *p = data; p < end; p++) line += *p == '\n';
        RT_FAIL(RT_ERR_FORMAT, "%s:%zu: invalid JSON", path, line);
    }
fail:
    free(data);
    return st;
}

bool tok_file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

bool tok_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

char *tok_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = rt_xmalloc(a + b + 2);
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

char *tok_config_class(const char *dir) {
    char *path = tok_path_join(dir, "tokenizer_config.json"), *name = NULL;
    cJSON *cfg = NULL;
    if (tok_file_exists(path) && tok_json_load(path, &cfg) == RT_OK) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(cfg, "tokenizer_class");
        if (cJSON_IsString(c)) name = rt_xstrdup(c->valuestring);
    }
    cJSON_Delete(cfg);
    free(path);
    return name;
}

/* ---- loading ---- */

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
            char *v = tok_path_join(dir, "vocab.json"), *m = tok_path_join(dir, "merges.txt");
            if (tok_file_exists(v) && tok_file_exists(m)) {
                vocab = v;
                merges = m;
            } else {
                free(v);
                free(m);
                v = tok_path_join(dir, "encoder.json");
                m = tok_path_join(dir, "vocab.bpe");
                if (tok_file_exists(v) && tok_file_exists(m)) {
                    vocab = v;
                    merges = m;
                } else {
                    free(v);
                    free(m);
                    wp_vocab = tok_path_join(dir, "vocab.txt");
                    if (!tok_file_exists(wp_vocab))
                        RT_FAIL(RT_ERR_IO,
                                "%s: no tokenizer found: expected tokenizer.json, vocab.json + merges.txt, "
                                "encoder.json + vocab.bpe, vocab.txt (WordPiece), spiece.model (T5 SentencePiece) or "
                                "cog-pretrain.model (GLM SentencePiece) "
                                "in this directory",
                                path);
                }
            }
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
                    RT_FAIL(RT_ERR_IO, "%s: no merges file beside it (expected merges.txt or vocab.bpe in %s)",
                            path, dir);
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
        if (tok_glm_wanted(spm, dir)) RT_TRY(tok_glm_load(spm, dir, out));
        else RT_TRY(tok_t5_load(spm, dir, out));
    } else if (json) {
        /* SentencePiece (Unigram) tokenizer.json files will dispatch on model.type here too */
        if (tok_json_is_wordpiece(json)) RT_TRY(tok_wordpiece_load_json(json, config, out));
        else RT_TRY(tok_bpe_load_json(json, config, out));
    } else if (wp_vocab) {
        if (tok_glm_en_wanted(dir)) RT_TRY(tok_glm_en_load(wp_vocab, dir, out));
        else RT_TRY(tok_wordpiece_load_vocab(wp_vocab, config, out));
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

void tok_free(tok_tokenizer *t) {
    if (!t) return;
    if (t->ops && t->ops->free_impl) t->ops->free_impl(t->impl);
    tok_vocab_free(&t->vocab);
    free(t);
}

rt_status tok_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out) {
    return t->ops->encode(t, text, len, out);
}

rt_status tok_encode_pair(const tok_tokenizer *t, const char *a, const char *b, tok_ids *out) {
    return t->ops->encode_pair(t, a, b, out);
}

rt_status tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, char **out) {
    return t->ops->decode(t, ids, n, out);
}

bool tok_is_special(const tok_tokenizer *t, int32_t id) {
    if (id == t->bos || id == t->eos || id == t->pad || id == t->unk) return id >= 0;
    return t->ops->is_special && t->ops->is_special(t, id);
}

rt_status tok_decode_skip_special(const tok_tokenizer *t, const int32_t *ids, size_t n, char **out) {
    int32_t *kept = rt_xmalloc((n ? n : 1) * sizeof *kept);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!tok_is_special(t, ids[i])) kept[k++] = ids[i];
    rt_status st = t->ops->decode(t, kept, k, out);
    free(kept);
    return st;
}

int tok_vocab_size(const tok_tokenizer *t) { return (int)t->vocab.n_ids; }

const char *tok_id_to_piece(const tok_tokenizer *t, int32_t id) {
    if (id < 0 || (size_t)id >= t->vocab.n_ids) return NULL;
    return t->vocab.pieces[id];
}

int32_t tok_piece_to_id(const tok_tokenizer *t, const char *piece) {
    return tok_vocab_find(&t->vocab, piece, strlen(piece));
}

int32_t tok_bos_id(const tok_tokenizer *t) { return t->bos; }
int32_t tok_eos_id(const tok_tokenizer *t) { return t->eos; }
int32_t tok_pad_id(const tok_tokenizer *t) { return t->pad; }
const char *tok_kind_name(const tok_tokenizer *t) { return t->kind; }
