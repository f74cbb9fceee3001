/* The piece <-> id map every tokenizer kind keeps (tok_base.h): an open-addressing hash table
 * of ids over the id -> piece array, so both directions are one lookup. */
#include <stdlib.h>
#include <string.h>

#include "tokenizers/tok_base.h"

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
