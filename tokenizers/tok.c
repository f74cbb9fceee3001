/* The public calls on a loaded tokenizer (tok.h): the id buffer, and encode, decode, free and
 * the vocabulary lookups, each dispatched through the tokenizer's vtable or read from its
 * vocabulary, so this file knows no tokenizer kind. Loading is tok_load.c. */
#include <stdlib.h>
#include <string.h>

#include "runtime/base/rt_buf.h"
#include "tokenizers/tok_base.h"

/* ---- id buffer ---- */

void tok_ids_reserve(tok_ids *v, size_t more) { RT_GROW(v->ids, v->cap, v->n + more); }

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

/* ---- a loaded tokenizer ---- */

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
