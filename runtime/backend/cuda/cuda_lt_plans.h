/* cuBLASLt's algorithm choice per matmul, remembered: the heuristic query costs tens of
 * microseconds of host time a call, more than a small matmul takes on the GPU, and a training
 * step asks for the same few dozen shapes every time (attention asks once per batch row). Plain
 * C, so tests/test_lt_plans.c checks the keys and the eviction on machines without a GPU;
 * cuda_lt.cu stores cuBLASLt's algorithm (an opaque 64-byte struct) in LT_PLAN_ALGO_WORDS.
 *
 * A key holds everything the heuristic is told: shapes, transposes, leading dimensions, batch
 * strides, the input type, the epilogue and its vectors' presence, and the alignment of each
 * matrix (the same shape at another alignment may need another kernel). Never a pointer: a
 * plan serves every call of its shape. "cuBLASLt has no algorithm" is remembered too.
 *
 * A plan also holds the backend's cuBLASLt descriptors for its key (the matmul and the three
 * layouts, made once per shape: creating and destroying them took a dozen library calls a
 * matmul); only the bias and aux pointers are set per call.
 *
 * The cache: LT_PLAN_SETS sets of LT_PLAN_WAYS plans, a key's set chosen by its hash; a full
 * set drops its least recently used plan, handing it back so the caller destroys its
 * descriptors. */
#ifndef RT_CUDA_LT_PLANS_H
#define RT_CUDA_LT_PLANS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "runtime/backend/cuda/cuda_lt_map.h"

#define LT_PLAN_SETS 64
#define LT_PLAN_WAYS 4
#define LT_PLAN_ALGO_WORDS 8 /* sizeof(cublasLtMatmulAlgo_t) / 8 */

typedef struct {
    int64_t m, n, k, batch;
    int64_t lda, ldb, ldc, ldaux;
    int64_t sa, sb, sc;
    int64_t type;  /* the inputs' cudaDataType_t */
    int64_t ctype; /* C and D's */
    int64_t ta, tb, epilogue, has_bias, has_aux;
    int64_t align[4]; /* A, B, C, D: as the heuristic was told */
} lt_plan_key;        /* all 8-byte fields: no padding, so memcmp compares keys */

typedef struct {
    lt_plan_key key;
    uint64_t algo[LT_PLAN_ALGO_WORDS];
    bool found;    /* false: cuBLASLt offered no algorithm for this key */
    bool used;     /* the slot holds a plan */
    uint64_t tick; /* last use, for eviction */
    void *desc[4]; /* the caller's descriptors for the key (cuda_lt.cu: the matmul, A, B and C), or NULL */
} lt_plan;

typedef struct lt_plan_cache {
    lt_plan plans[LT_PLAN_SETS][LT_PLAN_WAYS];
    uint64_t tick;
    uint64_t hits, misses;
} lt_plan_cache;

static inline lt_plan_key lt_plan_key_of(const lt_call *x, int type, const uint32_t align[4]) {
    lt_plan_key k;
    memset(&k, 0, sizeof k);
    k.m = x->m, k.n = x->n, k.k = x->k, k.batch = x->batch;
    k.lda = x->lda, k.ldb = x->ldb, k.ldc = x->ldc;
    k.ldaux = x->aux ? x->ldaux : 0;
    if (x->batch > 1) k.sa = x->sa, k.sb = x->sb, k.sc = x->sc; /* a single matrix ignores them */
    k.type = type, k.ctype = x->ctype;
    k.ta = x->ta, k.tb = x->tb, k.epilogue = x->epilogue;
    k.has_bias = x->bias != NULL, k.has_aux = x->aux != NULL;
    for (int i = 0; i < 4; i++) k.align[i] = align[i];
    return k;
}

static inline unsigned lt_plan_set_of(const lt_plan_key *k) {
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
    return (unsigned)(h % LT_PLAN_SETS);
}

/* The plan for k, or NULL; a hit counts as a use. */
static inline lt_plan *lt_plan_find(lt_plan_cache *c, const lt_plan_key *k) {
    lt_plan *set = c->plans[lt_plan_set_of(k)];
    for (int w = 0; w < LT_PLAN_WAYS; w++)
        if (set[w].used && memcmp(&set[w].key, k, sizeof *k) == 0) {
            set[w].tick = ++c->tick;
            c->hits++;
            return &set[w];
        }
    c->misses++;
    return NULL;
}

/* Remembers k's plan (algo: LT_PLAN_ALGO_WORDS words, or NULL with found false) with the caller's
 * descriptors (desc: 4 pointers, or NULL for none), in a free way of its set or in place of the
 * set's least recently used, which is copied to *evicted (used false when none was). Returns the
 * stored plan. */
static inline lt_plan *lt_plan_store(lt_plan_cache *c, const lt_plan_key *k, bool found, const uint64_t *algo,
                                     void *const *desc, lt_plan *evicted) {
    lt_plan *set = c->plans[lt_plan_set_of(k)], *slot = &set[0];
    for (int w = 0; w < LT_PLAN_WAYS; w++) {
        if (!set[w].used) {
            slot = &set[w];
            break;
        }
        if (set[w].tick < slot->tick) slot = &set[w];
    }
    *evicted = *slot; /* a free way: used false */
    memset(slot, 0, sizeof *slot);
    slot->key = *k;
    slot->found = found;
    if (found) memcpy(slot->algo, algo, sizeof slot->algo);
    if (desc) memcpy(slot->desc, desc, sizeof slot->desc);
    slot->used = true;
    slot->tick = ++c->tick;
    return slot;
}

#endif
