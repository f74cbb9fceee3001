/* Byte-level BPE as GPT-2 and RoBERTa use it, giving the same ids as HF `tokenizers` (BPE model
 * + ByteLevel pre-tokenizer and decoder).
 *
 * Encoding runs in three stages. Added tokens ("<|endoftext|>", "<s>", ...) are cut out of the
 * text first, as HF does. The rest is split by a hand-written matcher for GPT-2's regex
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * which needs no regex engine and reads the Unicode classes from tok_unicode.c. Each piece's
 * bytes map to their byte symbols, and adjacent symbols merge by lowest merge rank (leftmost
 * first on ties, like HF's priority queue) until no pair has a merge. There is no word cache.
 * Speed comes from memory layout instead: the merge table is one flat open-addressing array of
 * 8-byte slots keyed by the (left id, right id) pair, a 256x256 table answers the first round
 * of lookups (pairs of raw bytes) directly, and short words merge with a linear scan over a rank
 * array on the stack. Long words (a megabyte of punctuation) switch to a binary heap so that
 * the cost stays O(n log n). */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_utf8.h"
#include "tokenizers/tok_base.h"
#include "tokenizers/tok_bpe.h"
#include "runtime/base/rt_fs.h"

size_t tok_bpe_heap_min = 64;
#define TOK_BPE_STACK 64 /* words shorter than this merge in stack buffers */

/* A merge slot packs the pair and its rank into 64 bits, (left << 43) | (right << 22) | rank, so
 * the 50k GPT-2 merges fit a 1 MB table: the lookups are what encoding waits on (cache misses),
 * so smaller is faster. The merged id comes from merge_id[rank] once a pair is chosen. */
#define TOK_ID_BITS 21
#define TOK_RANK_BITS 22
#define TOK_MAX_IDS (((size_t)1 << TOK_ID_BITS) - 1)
#define TOK_MAX_MERGES (((size_t)1 << TOK_RANK_BITS) - 1)
#define TOK_MERGE_EMPTY UINT64_MAX
#define TOK_NO_RANK INT32_MAX

typedef struct {
    char *content;
    size_t len;
    int32_t id;
    bool lstrip, rstrip; /* the match also eats whitespace on that side (RoBERTa's <mask>) */
} tok_added;

typedef struct {
    int32_t byte_id[256]; /* initial symbol of each byte; -1 when the vocab lacks it */
    uint64_t *merges;     /* power-of-two table of packed slots, at most half full */
    size_t merge_mask;
    int merge_shift;   /* 64 - log2(slots): the top bits of the product index the table */
    size_t n_merges;   /* distinct pairs in the table */
    int32_t *merge_id; /* (ranks) the token each merge makes */
    size_t n_ranks;
    int32_t *byte_rank; /* (256*256) rank of the merge of two bytes' symbols, or TOK_NO_RANK;
                               NULL when some byte lacks a symbol. Most lookups are of this kind. */
    tok_added *added;
    size_t n_added;
    uint8_t added_first[256]; /* 1 when some added token starts with this byte */
    uint8_t *dec;             /* decoded bytes of every id, back to back */
    size_t *dec_off;          /* (n_ids + 1) offsets into dec */
    bool add_prefix_space;
    bool roberta;           /* pair format <s> a </s></s> b </s> */
    int32_t cls_id, sep_id; /* RoBERTa's <s> and </s> */
} tok_bpe;

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68 bytes are shifted
 * to code points 256.. so that every token is a printable string. */
static void tok_bpe_byte_map(uint32_t b2u[256]) {
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        b2u[b] = printable ? b : 256 + n++;
    }
}

/* ---- merge table ---- */

static inline size_t tok_merge_index(const tok_bpe *b, uint64_t key) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> b->merge_shift);
}

/* The rank of merging symbols l and r, or TOK_NO_RANK. */
static inline int32_t tok_merge_rank(const tok_bpe *b, int32_t l, int32_t r) {
    uint64_t key = ((uint64_t)(uint32_t)l << TOK_ID_BITS) | (uint32_t)r;
    size_t i = tok_merge_index(b, key);
    for (;;) {
        uint64_t slot = b->merges[i];
        if ((slot >> TOK_RANK_BITS) == key) return (int32_t)(slot & TOK_MAX_MERGES);
        if (slot == TOK_MERGE_EMPTY) return TOK_NO_RANK;
        i = (i + 1) & b->merge_mask;
    }
}

static void tok_merge_table_init(tok_bpe *b, size_t n_merges_max) {
    size_t slots = 1024;
    int bits = 10;
    while (slots < 2 * n_merges_max + 2) {
        slots *= 2;
        bits++;
    }
    b->merges = rt_xmalloc(slots * sizeof *b->merges);
    for (size_t i = 0; i < slots; i++) b->merges[i] = TOK_MERGE_EMPTY;
    b->merge_mask = slots - 1;
    b->merge_shift = 64 - bits;
    b->merge_id = rt_xmalloc((n_merges_max + 1) * sizeof *b->merge_id);
    b->n_ranks = 0;
}

/* A repeated pair takes the later rank, as HF's HashMap collect does. */
static void tok_merge_insert(tok_bpe *b, int32_t l, int32_t r, int32_t rank, int32_t id) {
    RT_CHECK(2 * (b->n_merges + 1) <= b->merge_mask + 1 && (size_t)rank == b->n_ranks,
             "merge table sized for fewer merges (rank %d)", rank);
    uint64_t key = ((uint64_t)(uint32_t)l << TOK_ID_BITS) | (uint32_t)r;
    size_t i = tok_merge_index(b, key);
    while (b->merges[i] != TOK_MERGE_EMPTY && (b->merges[i] >> TOK_RANK_BITS) != key) i = (i + 1) & b->merge_mask;
    if (b->merges[i] == TOK_MERGE_EMPTY) b->n_merges++;
    b->merges[i] = (key << TOK_RANK_BITS) | (uint64_t)rank;
    b->merge_id[b->n_ranks++] = id;
}

/* Adds merge "a b" (rank = its index). `where` names the file and line for errors. */
static rt_status tok_bpe_add_merge(tok_tokenizer *t, const char *a, size_t al, const char *bs, size_t bl, int32_t rank,
                                   const char *where) {
    tok_bpe *b = t->impl;
    int32_t l = tok_vocab_find(&t->vocab, a, al), r = tok_vocab_find(&t->vocab, bs, bl);
    if (l < 0) return rt_errorf(RT_ERR_FORMAT, "%s: merge token \"%.*s\" is not in the vocab", where, (int)al, a);
    if (r < 0) return rt_errorf(RT_ERR_FORMAT, "%s: merge token \"%.*s\" is not in the vocab", where, (int)bl, bs);
    char stackbuf[256];
    char *cat = al + bl <= sizeof stackbuf ? stackbuf : rt_xmalloc(al + bl);
    memcpy(cat, a, al);
    memcpy(cat + al, bs, bl);
    int32_t id = tok_vocab_find(&t->vocab, cat, al + bl);
    if (cat != stackbuf) free(cat);
    if (id < 0)
        return rt_errorf(RT_ERR_FORMAT, "%s: merged token \"%.*s%.*s\" is not in the vocab", where, (int)al, a, (int)bl,
                         bs);
    if ((size_t)rank >= TOK_MAX_MERGES)
        return rt_errorf(RT_ERR_UNSUPPORTED, "%s: more than %zu merges are not supported", where, TOK_MAX_MERGES);
    tok_merge_insert(b, l, r, rank, id);
    return RT_OK;
}

/* ---- encoding ---- */

static inline void tok_emit(tok_ids *o, int32_t id) {
    if (o->n == o->cap) tok_ids_reserve(o, 1);
    o->ids[o->n++] = id;
}

/* Heap entry for long words: ordered by rank, then by position (leftmost first). */
typedef struct {
    int32_t rank, pos;
} tok_heap_ent;

static inline bool tok_heap_less(tok_heap_ent a, tok_heap_ent b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void tok_heap_push(tok_heap_ent *h, size_t *n, tok_heap_ent e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!tok_heap_less(e, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static tok_heap_ent tok_heap_pop(tok_heap_ent *h, size_t *n) {
    tok_heap_ent top = h[0], last = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && tok_heap_less(h[c + 1], h[c])) c++;
        if (!tok_heap_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = last;
    return top;
}

static void tok_bpe_word_heap(const tok_bpe *b, const uint8_t *s, size_t n, tok_ids *out) {
    /* one block: sym, prev, next (n each) and the heap (at most 3n entries: n-1 initial pairs
     * plus two per merge) */
    int32_t *sym = rt_xmalloc(3 * n * sizeof *sym);
    int32_t *prev = sym + n, *next = sym + 2 * n;
    tok_heap_ent *heap = rt_xmalloc(3 * n * sizeof *heap);
    size_t m = 0, nh = 0;
    int32_t r;
    for (size_t k = 0; k < n; k++) {
        int32_t id = b->byte_id[s[k]];
        if (id >= 0) sym[m++] = id;
    }
    for (size_t k = 0; k < m; k++) {
        prev[k] = (int32_t)k - 1;
        next[k] = k + 1 < m ? (int32_t)k + 1 : -1;
    }
    for (size_t k = 0; k + 1 < m; k++)
        if ((r = tok_merge_rank(b, sym[k], sym[k + 1])) != TOK_NO_RANK)
            tok_heap_push(heap, &nh, (tok_heap_ent){r, (int32_t)k});
    while (nh) {
        tok_heap_ent e = tok_heap_pop(heap, &nh);
        int32_t p = e.pos;
        if (sym[p] < 0) continue;
        int32_t q = next[p];
        if (q < 0) continue;
        /* stale entries (a neighbour has merged since) no longer give the current pair's rank;
         * a rank names exactly one pair, so equal ranks mean the same merge */
        if (tok_merge_rank(b, sym[p], sym[q]) != e.rank) continue;
        sym[p] = b->merge_id[e.rank];
        sym[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        if (prev[p] >= 0 && (r = tok_merge_rank(b, sym[prev[p]], sym[p])) != TOK_NO_RANK)
            tok_heap_push(heap, &nh, (tok_heap_ent){r, prev[p]});
        if (next[p] >= 0 && (r = tok_merge_rank(b, sym[p], sym[next[p]])) != TOK_NO_RANK)
            tok_heap_push(heap, &nh, (tok_heap_ent){r, p});
    }
    if (m)
        for (int32_t k = 0; k >= 0; k = next[k]) tok_emit(out, sym[k]);
    free(heap);
    free(sym);
}

/* BPE over one pre-tokenized piece of n bytes. */
static void tok_bpe_word(const tok_bpe *b, const uint8_t *s, size_t n, tok_ids *out) {
    if (n == 1) {
        if (b->byte_id[s[0]] >= 0) tok_emit(out, b->byte_id[s[0]]);
        return;
    }
    if (n >= tok_bpe_heap_min || n >= TOK_BPE_STACK || !b->byte_rank) {
        tok_bpe_word_heap(b, s, n, out);
        return;
    }
    int32_t sym[TOK_BPE_STACK], rank[TOK_BPE_STACK];
    size_t m = n;
    for (size_t k = 0; k < n; k++) sym[k] = b->byte_id[s[k]];
    for (size_t k = 0; k + 1 < n; k++) rank[k] = b->byte_rank[(size_t)s[k] << 8 | s[k + 1]];
    while (m > 1) {
        int32_t best = TOK_NO_RANK;
        size_t bi = 0;
        for (size_t k = 0; k + 1 < m; k++)
            if (rank[k] < best) {
                best = rank[k];
                bi = k;
            }
        if (best == TOK_NO_RANK) break;
        /* symbols bi and bi+1 become one; pair bi+1 goes away and later pairs shift down */
        sym[bi] = b->merge_id[best];
        for (size_t k = bi + 1; k + 1 < m; k++) sym[k] = sym[k + 1];
        for (size_t k = bi + 1; k + 2 < m; k++) rank[k] = rank[k + 1];
        m--;
        if (bi + 1 < m) rank[bi] = tok_merge_rank(b, sym[bi], sym[bi + 1]);
        if (bi > 0) rank[bi - 1] = tok_merge_rank(b, sym[bi - 1], sym[bi]);
    }
    for (size_t k = 0; k < m; k++) tok_emit(out, sym[k]);
}

/* Class of the code point at s[i]; an invalid UTF-8 byte counts as one OTHER character (HF only
 * ever sees valid text; byte-level BPE can still encode the raw byte). */
static inline int tok_class_at(const uint8_t *s, size_t n, size_t i, size_t *w) {
    uint8_t c = s[i];
    if (c < 0x80) {
        *w = 1;
        return tok_ascii_class[c];
    }
    uint32_t cp;
    size_t l = rt_utf8_decode_checked((const char *)s + i, n - i, &cp);
    if (!l) {
        *w = 1;
        return TOK_CC_OTHER;
    }
    *w = l;
    return tok_unicode_class(cp);
}

/* GPT-2's pre-tokenizer regex, alternative by alternative, then BPE on each piece. */
static void tok_bpe_pretokenize(const tok_bpe *b, const uint8_t *s, size_t n, tok_ids *out) {
    size_t i = 0, w;
    while (i < n) {
        uint8_t c = s[i];
        if (c == '\'' && i + 1 < n) { /* 's 't 're 've 'm 'll 'd (case-sensitive) */
            uint8_t d = s[i + 1], e = i + 2 < n ? s[i + 2] : 0;
            size_t m = 0;
            if (d == 's' || d == 't' || d == 'm' || d == 'd')
                m = 2;
            else if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l'))
                m = 3;
            if (m) {
                tok_bpe_word(b, s + i, m, out);
                i += m;
                continue;
            }
        }
        int cl = tok_class_at(s, n, i, &w);
        size_t j = i + w;
        if (c == ' ' && j < n) { /* " ?X+": the space joins a following letter/number/other run */
            int cl2 = tok_class_at(s, n, j, &w);
            if (cl2 != TOK_CC_SPACE) {
                cl = cl2;
                j += w;
            }
        }
        if (cl != TOK_CC_SPACE) {
            while (j < n) {
                uint8_t cj = s[j];
                int cc = cj < 0x80 ? (w = 1, tok_ascii_class[cj]) : tok_class_at(s, n, j, &w);
                if (cc != cl) break;
                j += w;
            }
            tok_bpe_word(b, s + i, j - i, out);
            i = j;
            continue;
        }
        /* \s+(?!\S)|\s+ : a whitespace run followed by text leaves its last character to start
         * the next piece (so " word" keeps its space); at the end of text it takes everything */
        size_t last = i;
        j = i;
        while (j < n) {
            int cc = tok_class_at(s, n, j, &w);
            if (cc != TOK_CC_SPACE) break;
            last = j;
            j += w;
        }
        if (j < n && last > i) j = last;
        tok_bpe_word(b, s + i, j - i, out);
        i = j;
    }
}

static void tok_bpe_segment(const tok_bpe *b, const uint8_t *s, size_t n, tok_ids *out) {
    if (n == 0) return;
    if (b->add_prefix_space && s[0] != ' ') {
        uint8_t *tmp = rt_xmalloc(n + 1);
        tmp[0] = ' ';
        memcpy(tmp + 1, s, n);
        tok_bpe_pretokenize(b, tmp, n + 1, out);
        free(tmp);
        return;
    }
    tok_bpe_pretokenize(b, s, n, out);
}

/* Start of the whitespace character that ends at s[end] (exclusive), or end if none. */
static size_t tok_space_before(const uint8_t *s, size_t lo, size_t end) {
    if (end <= lo) return end;
    size_t k = end - 1;
    while (k > lo && (s[k] & 0xC0) == 0x80 && end - k < 4) k--;
    size_t w;
    if (tok_class_at(s, end, k, &w) == TOK_CC_SPACE && k + w == end) return k;
    return end;
}

static rt_status tok_bpe_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out) {
    const tok_bpe *b = t->impl;
    const uint8_t *s = (const uint8_t *)text;
    tok_ids_reserve(out, len + 1);
    size_t seg = 0;
    if (b->n_added) {
        for (size_t i = 0; i < len; i++) {
            if (!b->added_first[s[i]]) continue;
            /* leftmost-longest, like HF's Aho-Corasick over the added tokens */
            const tok_added *best = NULL;
            for (size_t k = 0; k < b->n_added; k++) {
                const tok_added *a = &b->added[k];
                if (a->len <= len - i && (!best || a->len > best->len) && memcmp(s + i, a->content, a->len) == 0)
                    best = a;
            }
            if (!best) continue;
            size_t start = i, end = i + best->len, w;
            if (best->lstrip)
                for (size_t k; (k = tok_space_before(s, seg, start)) < start;) start = k;
            if (best->rstrip)
                while (end < len && tok_class_at(s, len, end, &w) == TOK_CC_SPACE) end += w;
            tok_bpe_segment(b, s + seg, start - seg, out);
            tok_emit(out, best->id);
            seg = end;
            i = end - 1;
        }
    }
    tok_bpe_segment(b, s + seg, len - seg, out);
    return RT_OK;
}

static rt_status tok_bpe_encode_pair(const tok_tokenizer *t, const char *a, const char *bs, tok_ids *out) {
    rt_status st = RT_OK;
    const tok_bpe *b = t->impl;
    if (b->roberta) tok_ids_push(out, b->cls_id);
    RT_TRY(tok_bpe_encode(t, a, strlen(a), out));
    if (b->roberta) tok_ids_push(out, b->sep_id);
    if (bs) {
        if (b->roberta) tok_ids_push(out, b->sep_id);
        RT_TRY(tok_bpe_encode(t, bs, strlen(bs), out));
        if (b->roberta) tok_ids_push(out, b->sep_id);
    }
fail:
    return st;
}

static rt_status tok_bpe_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, char **out) {
    const tok_bpe *b = t->impl;
    size_t total = 0;
    *out = NULL;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= t->vocab.n_ids || !t->vocab.pieces[id])
            return rt_errorf(RT_ERR_FORMAT, "id %d (position %zu) is not in the vocabulary of %zu ids", id, i,
                             t->vocab.n_ids);
        total += b->dec_off[id + 1] - b->dec_off[id];
    }
    char *buf = rt_xmalloc(total + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t a = b->dec_off[ids[i]], e = b->dec_off[ids[i] + 1];
        memcpy(buf + o, b->dec + a, e - a);
        o += e - a;
    }
    *out = rt_utf8_lossy(buf, o);
    free(buf);
    return RT_OK;
}

static void tok_bpe_free_impl(void *impl) {
    tok_bpe *b = impl;
    if (!b) return;
    free(b->merges);
    free(b->merge_id);
    free(b->byte_rank);
    for (size_t i = 0; i < b->n_added; i++) free(b->added[i].content);
    free(b->added);
    free(b->dec);
    free(b->dec_off);
    free(b);
}

static const tok_ops tok_bpe_ops = {tok_bpe_encode, tok_bpe_encode_pair, tok_bpe_decode, tok_bpe_free_impl, NULL};

/* ---- loading ---- */

static tok_tokenizer *tok_bpe_new(void) {
    tok_tokenizer *t = rt_xcalloc(1, sizeof *t);
    tok_vocab_init(&t->vocab);
    t->ops = &tok_bpe_ops;
    t->impl = rt_xcalloc(1, sizeof(tok_bpe));
    t->bos = t->eos = t->pad = t->unk = -1;
    t->kind = "gpt2-bpe";
    return t;
}

/* Parses JSON text; a syntax error names file:line. */
static rt_status tok_json_parse(const char *path, const char *data, size_t len, cJSON **out) {
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(data, len, &end, 0);
    if (*out) return RT_OK;
    size_t line = 1;
    if (end && end >= data && end <= data + len)
        for (const char *p = data; p < end; p++) line += *p == '\n';
    return rt_errorf(RT_ERR_FORMAT, "%s:%zu: invalid JSON", path, line);
}

/* Reads a {piece: id} object into the vocab. `where` is "file" or "file: model.vocab". */
static rt_status tok_bpe_read_vocab(tok_tokenizer *t, const cJSON *obj, const char *where) {
    if (!cJSON_IsObject(obj)) return rt_errorf(RT_ERR_FORMAT, "%s: expected a JSON object of piece: id", where);
    rt_status st = RT_OK;
    size_t n = 0;
    /* the entry holding each id so far: two pieces with one id would lose one of them, which
     * showed only later as a merges.txt line naming a piece "not in the vocab" */
    const cJSON **holder = NULL;
    size_t n_holder = 0;
    for (const cJSON *it = obj->child; it; it = it->next) {
        int32_t id = 0;
        RT_TRY(tok_json_id(it, where, &id));
        if ((size_t)id >= TOK_MAX_IDS)
            RT_FAIL(RT_ERR_UNSUPPORTED, "%s: entry \"%s\": ids up to %zu are supported", where, it->string,
                    TOK_MAX_IDS - 1);
        if ((size_t)id >= n_holder) {
            const size_t grown = (size_t)id + 1 > 2 * n_holder ? (size_t)id + 1 : 2 * n_holder;
            holder = rt_xrealloc(holder, grown * sizeof *holder);
            memset(holder + n_holder, 0, (grown - n_holder) * sizeof *holder);
            n_holder = grown;
        }
        if (holder[id])
            RT_FAIL(RT_ERR_FORMAT, "%s: entry \"%s\": id %d is also the id of \"%s\"", where, it->string, (int)id,
                    holder[id]->string);
        holder[id] = it;
        tok_vocab_set(&t->vocab, it->string, strlen(it->string), id);
        n++;
    }
    if (n == 0) RT_FAIL(RT_ERR_FORMAT, "%s: the vocab is empty", where);
fail:
    free(holder);
    return st;
}

static void tok_bpe_add_added(tok_tokenizer *t, const char *content, int32_t id, bool lstrip, bool rstrip) {
    tok_bpe *b = t->impl;
    size_t len = strlen(content);
    if (len == 0) return;
    for (size_t i = 0; i < b->n_added; i++)
        if (b->added[i].len == len && memcmp(b->added[i].content, content, len) == 0) {
            b->added[i].id = id;
            b->added[i].lstrip = lstrip;
            b->added[i].rstrip = rstrip;
            return;
        }
    b->added = rt_xrealloc(b->added, (b->n_added + 1) * sizeof *b->added);
    b->added[b->n_added++] = (tok_added){rt_xstrdup(content), len, id, lstrip, rstrip};
    b->added_first[(uint8_t)content[0]] = 1;
    tok_vocab_set(&t->vocab, content, len, id);
}

/* The special tokens a tokenizer class adds by default when its vocab has them: GPT-2's
 * <|endoftext|>, or RoBERTa's five (with <mask> eating the space before it, as in roberta-base's
 * tokenizer.json). Also picks the kind and the bos/eos/pad ids. */
static void tok_bpe_default_specials(tok_tokenizer *t, bool add_tokens) {
    tok_bpe *b = t->impl;
    int32_t s = tok_vocab_find(&t->vocab, "<s>", 3), e = tok_vocab_find(&t->vocab, "</s>", 4);
    if (s >= 0 && e >= 0) {
        static const char *const names[] = {"<s>", "<pad>", "</s>", "<unk>", "<mask>"};
        b->roberta = true;
        t->kind = "roberta-bpe";
        b->cls_id = t->bos = s;
        b->sep_id = t->eos = e;
        t->pad = tok_vocab_find(&t->vocab, "<pad>", 5);
        t->unk = tok_vocab_find(&t->vocab, "<unk>", 5);
        for (size_t i = 0; add_tokens && i < 5; i++) {
            int32_t id = tok_vocab_find(&t->vocab, names[i], strlen(names[i]));
            if (id >= 0) tok_bpe_add_added(t, names[i], id, i == 4, false);
        }
    } else {
        int32_t eot = tok_vocab_find(&t->vocab, "<|endoftext|>", 13);
        t->kind = "gpt2-bpe";
        t->bos = t->eos = t->unk = eot;
        t->pad = -1;
        if (add_tokens && eot >= 0) tok_bpe_add_added(t, "<|endoftext|>", eot, false, false);
    }
}

/* A special-token field of tokenizer_config.json: "text", {"content": "text"} or null. Sets *id
 * (-1 for null) and returns true when the key is present. */
static bool tok_config_special(const tok_tokenizer *t, const cJSON *cfg, const char *key, int32_t *id) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!v) return false;
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (cJSON_IsString(v)) {
        int32_t found = tok_vocab_find(&t->vocab, v->valuestring, strlen(v->valuestring));
        if (found < 0) return false; /* a name the vocab lacks: keep the default */
        *id = found;
        return true;
    }
    if (cJSON_IsNull(v)) {
        *id = -1;
        return true;
    }
    return false;
}

/* One added-token object ({"id", "content", "lstrip", "rstrip"}), from tokenizer.json's
 * added_tokens or tokenizer_config.json's added_tokens_decoder (where the id is the key). */
static rt_status tok_bpe_read_added(tok_tokenizer *t, const cJSON *tok, const char *key_id, const char *where) {
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(tok, "content");
    const cJSON *idv = cJSON_GetObjectItemCaseSensitive(tok, "id");
    long id = -1;
    if (key_id) {
        char *end;
        id = strtol(key_id, &end, 10);
        if (*end || end == key_id) id = -1;
    } else if (cJSON_IsNumber(idv)) {
        id = (long)idv->valuedouble;
    }
    if (!cJSON_IsString(content) || id < 0 || id > 16777216)
        return rt_errorf(RT_ERR_FORMAT, "%s: expected an object with a \"content\" string and a non-negative id",
                         where);
    tok_bpe_add_added(t, content->valuestring, (int32_t)id,
                      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tok, "lstrip")),
                      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tok, "rstrip")));
    return RT_OK;
}

/* tokenizer_config.json beside vocab.json/merges.txt or tokenizer.json: its added tokens and the
 * names of bos/eos/pad override the class defaults. */
static rt_status tok_bpe_read_config(tok_tokenizer *t, const char *path) {
    rt_status st = RT_OK;
    char *data = NULL, where[1200];
    size_t len;
    cJSON *cfg = NULL;
    RT_TRY(rt_read_file(path, 0, &data, &len));
    RT_TRY(tok_json_parse(path, data, len, &cfg));
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder");
    if (cJSON_IsObject(dec))
        for (const cJSON *it = dec->child; it; it = it->next) {
            snprintf(where, sizeof where, "%s: added_tokens_decoder.%s", path, it->string);
            RT_TRY(tok_bpe_read_added(t, it, it->string, where));
        }
    tok_config_special(t, cfg, "bos_token", &t->bos);
    tok_config_special(t, cfg, "eos_token", &t->eos);
    tok_config_special(t, cfg, "pad_token", &t->pad);
    tok_config_special(t, cfg, "unk_token", &t->unk);
fail:
    cJSON_Delete(cfg);
    free(data);
    return st;
}

/* Per-id decoded bytes: a piece whose every character is in the byte map decodes to those bytes;
 * otherwise (an added token like "<|endoftext|>" is fine either way) to its own UTF-8, as HF's
 * ByteLevel decoder does. Also sets the initial symbol of every byte. */
static void tok_bpe_finish(tok_tokenizer *t) {
    tok_bpe *b = t->impl;
    uint32_t b2u[256];
    int16_t u2b[324];
    tok_bpe_byte_map(b2u);
    for (size_t i = 0; i < 324; i++) u2b[i] = -1;
    for (int i = 0; i < 256; i++) {
        u2b[b2u[i]] = (int16_t)i;
        char u[4];
        size_t l = rt_utf8_encode(b2u[i], u);
        b->byte_id[i] = tok_vocab_find(&t->vocab, u, l);
    }
    bool all_bytes = true;
    for (int i = 0; i < 256; i++) all_bytes &= b->byte_id[i] >= 0;
    if (all_bytes) {
        b->byte_rank = rt_xmalloc(256 * 256 * sizeof *b->byte_rank);
        for (size_t i = 0; i < 256 * 256; i++)
            b->byte_rank[i] = tok_merge_rank(b, b->byte_id[i >> 8], b->byte_id[i & 255]);
    }
    size_t n = t->vocab.n_ids, total = 0;
    for (size_t i = 0; i < n; i++) total += t->vocab.lens[i];
    b->dec = rt_xmalloc(total + 1);
    b->dec_off = rt_xmalloc((n + 1) * sizeof *b->dec_off);
    size_t o = 0;
    for (size_t id = 0; id < n; id++) {
        b->dec_off[id] = o;
        const char *p = t->vocab.pieces[id];
        size_t len = t->vocab.lens[id], start = o;
        bool mapped = true;
        for (size_t k = 0; p && k < len;) {
            uint32_t cp;
            size_t l = rt_utf8_decode_checked(p + k, len - k, &cp);
            if (!l || cp >= 324 || u2b[cp] < 0) {
                mapped = false;
                break;
            }
            b->dec[o++] = (uint8_t)u2b[cp];
            k += l;
        }
        if (!mapped) { /* p is non-NULL here: a NULL piece never fails the map */
            o = start;
            memcpy(b->dec + o, p, len);
            o += len;
        }
    }
    b->dec_off[n] = o;
}

/* Finds the next line in [p, end); sets *len without the newline (and without a trailing \r). */
static const char *tok_next_line(const char *p, const char *end, size_t *len) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *e = nl ? nl : end;
    *len = (size_t)(e - p);
    if (*len && p[*len - 1] == '\r') (*len)--;
    return nl ? nl + 1 : end;
}

static rt_status tok_bpe_read_merges_file(tok_tokenizer *t, const char *path) {
    rt_status st = RT_OK;
    char *data = NULL, where[1100];
    size_t len, n_lines = 1;
    RT_TRY(rt_read_file(path, 0, &data, &len));
    for (size_t i = 0; i < len; i++) n_lines += data[i] == '\n';
    tok_merge_table_init(t->impl, n_lines);
    const char *p = data, *end = data + len;
    int32_t rank = 0;
    for (size_t line = 1; p < end; line++) {
        size_t l;
        const char *s = p;
        p = tok_next_line(p, end, &l);
        if (l >= 8 && memcmp(s, "#version", 8) == 0) continue;
        const char *sp = memchr(s, ' ', l);
        size_t parts = 1;
        for (size_t k = 0; k < l; k++) parts += s[k] == ' ';
        if (l == 0) parts = 0;
        if (parts != 2 || sp == s || sp == s + l - 1)
            RT_FAIL(RT_ERR_FORMAT, "%s:%zu: expected two space-separated tokens, found \"%.*s\"", path, line,
                    (int)(l > 80 ? 80 : l), s);
        snprintf(where, sizeof where, "%s:%zu", path, line);
        RT_TRY(tok_bpe_add_merge(t, s, (size_t)(sp - s), sp + 1, (size_t)(s + l - sp - 1), rank++, where));
    }
fail:
    free(data);
    return st;
}

rt_status tok_bpe_load_files(const char *vocab_path, const char *merges_path, const char *config_path,
                             tok_tokenizer **out) {
    rt_status st = RT_OK;
    char *data = NULL;
    size_t len;
    cJSON *root = NULL;
    tok_tokenizer *t = tok_bpe_new();
    *out = NULL;
    RT_TRY(rt_read_file(vocab_path, 0, &data, &len));
    RT_TRY(tok_json_parse(vocab_path, data, len, &root));
    RT_TRY(tok_bpe_read_vocab(t, root, vocab_path));
    cJSON_Delete(root);
    root = NULL;
    RT_TRY(tok_bpe_read_merges_file(t, merges_path));
    tok_bpe_default_specials(t, true);
    if (config_path) RT_TRY(tok_bpe_read_config(t, config_path));
    tok_bpe_finish(t);
    *out = t;
    t = NULL;
fail:
    cJSON_Delete(root);
    free(data);
    tok_free(t);
    return st;
}

/* A merges entry of tokenizer.json: "a b" (older files) or ["a", "b"] (tokenizers >= 0.20). */
static rt_status tok_bpe_json_merge(tok_tokenizer *t, const cJSON *m, int32_t rank, const char *where) {
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        size_t l = strlen(s);
        if (!sp || sp == s || sp == s + l - 1 || strchr(sp + 1, ' '))
            return rt_errorf(RT_ERR_FORMAT, "%s: expected two space-separated tokens, found \"%s\"", where, s);
        return tok_bpe_add_merge(t, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), rank, where);
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
        const char *a = m->child->valuestring, *b = m->child->next->valuestring;
        return tok_bpe_add_merge(t, a, strlen(a), b, strlen(b), rank, where);
    }
    return rt_errorf(RT_ERR_FORMAT, "%s: expected \"a b\" or [\"a\", \"b\"]", where);
}

rt_status tok_bpe_load_json(const char *json_path, const char *config_path, tok_tokenizer **out) {
    rt_status st = RT_OK;
    char *data = NULL, where[1200];
    size_t len;
    cJSON *root = NULL;
    tok_tokenizer *t = tok_bpe_new();
    tok_bpe *b = t->impl;
    *out = NULL;
    RT_TRY(rt_read_file(json_path, 0, &data, &len));
    RT_TRY(tok_json_parse(json_path, data, len, &root));
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsObject(model)) RT_FAIL(RT_ERR_FORMAT, "%s: model: expected an object", json_path);
    if (type && !(cJSON_IsString(type) && strcmp(type->valuestring, "BPE") == 0))
        RT_FAIL(RT_ERR_UNSUPPORTED, "%s: model.type: expected \"BPE\", found \"%s\"", json_path,
                cJSON_IsString(type) ? type->valuestring : "?");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
        if (cJSON_IsString(a) && a->valuestring[0])
            RT_FAIL(RT_ERR_UNSUPPORTED, "%s: model.%s: only byte-level BPE without affixes is supported", json_path,
                    affixes[i]);
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")))
        RT_FAIL(RT_ERR_UNSUPPORTED, "%s: model.byte_fallback: only byte-level BPE is supported", json_path);
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm))
        RT_FAIL(RT_ERR_UNSUPPORTED, "%s: normalizer: expected null (byte-level BPE has none)", json_path);
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON *pre_type = cJSON_GetObjectItemCaseSensitive(pre, "type");
    if (!cJSON_IsString(pre_type) || strcmp(pre_type->valuestring, "ByteLevel") != 0 ||
        cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(pre, "use_regex")))
        RT_FAIL(RT_ERR_UNSUPPORTED, "%s: pre_tokenizer: expected {\"type\": \"ByteLevel\"} with the GPT-2 regex",
                json_path);
    b->add_prefix_space = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space"));

    snprintf(where, sizeof where, "%s: model.vocab", json_path);
    RT_TRY(tok_bpe_read_vocab(t, cJSON_GetObjectItemCaseSensitive(model, "vocab"), where));
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges)) RT_FAIL(RT_ERR_FORMAT, "%s: model.merges: expected an array", json_path);
    tok_merge_table_init(b, (size_t)cJSON_GetArraySize(merges));
    int32_t rank = 0;
    for (const cJSON *m = merges->child; m; m = m->next, rank++) {
        snprintf(where, sizeof where, "%s: model.merges[%d]", json_path, rank);
        RT_TRY(tok_bpe_json_merge(t, m, rank, where));
    }
    tok_bpe_default_specials(t, false);
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    int k = 0;
    if (added && !cJSON_IsArray(added)) RT_FAIL(RT_ERR_FORMAT, "%s: added_tokens: expected an array", json_path);
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next, k++) {
        snprintf(where, sizeof where, "%s: added_tokens[%d]", json_path, k);
        RT_TRY(tok_bpe_read_added(t, a, NULL, where));
    }
    /* the post-processor, when it is RoBERTa's, names the ids that wrap a pair */
    const cJSON *post = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
    const cJSON *post_type = cJSON_GetObjectItemCaseSensitive(post, "type");
    if (cJSON_IsString(post_type) && strcmp(post_type->valuestring, "RobertaProcessing") == 0) {
        const cJSON *cls = cJSON_GetObjectItemCaseSensitive(post, "cls");
        const cJSON *sep = cJSON_GetObjectItemCaseSensitive(post, "sep");
        if (cJSON_GetArraySize(cls) != 2 || cJSON_GetArraySize(sep) != 2 ||
            !cJSON_IsNumber(cJSON_GetArrayItem(cls, 1)) || !cJSON_IsNumber(cJSON_GetArrayItem(sep, 1)))
            RT_FAIL(RT_ERR_FORMAT, "%s: post_processor: expected cls and sep as [\"token\", id]", json_path);
        b->roberta = true;
        t->kind = "roberta-bpe";
        b->cls_id = t->bos = (int32_t)cJSON_GetArrayItem(cls, 1)->valuedouble;
        b->sep_id = t->eos = (int32_t)cJSON_GetArrayItem(sep, 1)->valuedouble;
    }
    if (config_path) RT_TRY(tok_bpe_read_config(t, config_path));
    tok_bpe_finish(t);
    *out = t;
    t = NULL;
fail:
    cJSON_Delete(root);
    free(data);
    tok_free(t);
    return st;
}
