/* The CUDA backend's cache of cuBLASLt's algorithm choices (runtime/backend/cuda/cuda_lt_plans.h),
 * checked on the CPU: the same call at other addresses of the same alignment finds its plan;
 * each thing the heuristic is told (a shape, a transpose, a leading dimension, a batch stride,
 * the type, the epilogue, a vector's presence, an alignment) makes another key; "no algorithm"
 * is remembered; a plan keeps the caller's descriptors; a full set drops its least recently used
 * plan, handing it back with its descriptors, and keeps the one just found; thousands of keys
 * through the cache leave every lookup right. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/cuda/cuda_lt_plans.h"
#include "runtime/base/rt_status.h"
#include "tests/testutil.h"

static lt_call base_call(void) {
    static float C[64];
    lt_call x;
    memset(&x, 0, sizeof x);
    x.m = 48, x.n = 32, x.k = 64, x.batch = 1;
    x.lda = 64, x.ldb = 64, x.ldc = 48;
    x.ta = true;
    x.alpha = 1.0f;
    x.A = (const void *)0x1000, x.B = (const void *)0x2000, x.C = C;
    return x;
}

static const uint32_t ALIGN[4] = {256, 256, 16, 16};

static void fill_algo(uint64_t *a, uint64_t seed) {
    for (int i = 0; i < LT_PLAN_ALGO_WORDS; i++) a[i] = seed * 1000 + (uint64_t)i;
}

/* k's plan is found and holds algo seed's words */
static bool holds(lt_plan_cache *c, const lt_plan_key *k, uint64_t seed) {
    const lt_plan *p = lt_plan_find(c, k);
    uint64_t a[LT_PLAN_ALGO_WORDS];
    fill_algo(a, seed);
    return p && p->found && memcmp(p->algo, a, sizeof a) == 0;
}

static void test_keys(void) {
    lt_plan gone; /* what a store evicted */
    const lt_call x = base_call();
    const lt_plan_key k0 = lt_plan_key_of(&x, 14, ALIGN);
    lt_call moved = x; /* other pointers, same shapes and alignments: the same plan */
    moved.A = (const void *)0x9000, moved.B = (const void *)0xa000, moved.alpha = 0.5f, moved.beta = 1.0f;
    lt_plan_key km = lt_plan_key_of(&moved, 14, ALIGN);
    TZ_EXPECT(memcmp(&k0, &km, sizeof k0) == 0, "pointers, alpha and beta change the key");
    lt_call strided = x; /* a single matrix's strides are not told */
    strided.sa = 77, strided.sb = 5;
    lt_plan_key ks = lt_plan_key_of(&strided, 14, ALIGN);
    TZ_EXPECT(memcmp(&k0, &ks, sizeof k0) == 0, "a batch of one's strides change the key");

    enum { VARIANTS = 22 };
    lt_plan_key v[VARIANTS];
    int nv = 0;
    lt_call y;
#define VARY(stmt)                               \
    do {                                         \
        y = x;                                   \
        stmt;                                    \
        v[nv++] = lt_plan_key_of(&y, 14, ALIGN); \
    } while (0)
    VARY(y.m = 49);
    VARY(y.n = 33);
    VARY(y.k = 65);
    VARY((y.batch = 2, y.sa = 3072, y.sb = 2048, y.sc = 1536));
    VARY((y.batch = 2, y.sa = 3136, y.sb = 2048, y.sc = 1536));
    VARY((y.batch = 2, y.sa = 3072, y.sb = 2112, y.sc = 1536));
    VARY((y.batch = 2, y.sa = 3072, y.sb = 2048, y.sc = 1600));
    VARY(y.lda = 72);
    VARY(y.ldb = 72);
    VARY(y.ldc = 56);
    VARY(y.ta = false);
    VARY(y.tb = true);
    VARY(y.epilogue = LT_EPI_BIAS);
    VARY((y.epilogue = LT_EPI_BIAS, y.bias = (const void *)0x3000));
    VARY((y.epilogue = LT_EPI_GELU_AUX_BIAS, y.bias = (const void *)0x3000, y.aux = (void *)0x4000, y.ldaux = 48));
    VARY((y.epilogue = LT_EPI_GELU_AUX_BIAS, y.bias = (const void *)0x3000, y.aux = (void *)0x4000, y.ldaux = 56));
    VARY(y.epilogue = LT_EPI_BGRADB);
    VARY(y.epilogue = LT_EPI_DGELU_BGRAD);
#undef VARY
    v[nv++] = lt_plan_key_of(&x, 2, ALIGN); /* another input type */
    for (int i = 0; i < 3 && nv < VARIANTS; i++) {
        uint32_t a[4];
        memcpy(a, ALIGN, sizeof a);
        a[i] /= 2;
        v[nv++] = lt_plan_key_of(&x, 14, a);
    }
    TZ_EXPECT(nv == VARIANTS, "%d variants", nv);
    for (int i = 0; i < nv; i++) {
        TZ_EXPECT(memcmp(&v[i], &k0, sizeof k0) != 0, "variant %d has the base call's key", i);
        for (int j = 0; j < i; j++)
            TZ_EXPECT(memcmp(&v[i], &v[j], sizeof k0) != 0, "variants %d and %d share a key", i, j);
    }
    /* the D alignment (the fourth) is C's in every call; a change of it alone must still count */
    uint32_t a4[4] = {256, 256, 16, 8};
    lt_plan_key kd = lt_plan_key_of(&x, 14, a4);
    TZ_EXPECT(memcmp(&kd, &k0, sizeof k0) != 0, "D's alignment is not in the key");

    /* every variant stored beside the base, each found with its own algorithm */
    lt_plan_cache *c = rt_xcalloc(1, sizeof *c);
    uint64_t a[LT_PLAN_ALGO_WORDS];
    fill_algo(a, 1000);
    lt_plan_store(c, &k0, true, a, NULL, &gone);
    for (int i = 0; i < nv; i++) {
        fill_algo(a, (uint64_t)i);
        lt_plan_store(c, &v[i], true, a, NULL, &gone);
    }
    int lost = 0, wrong = 0;
    for (int i = 0; i < nv; i++) {
        const lt_plan *p = lt_plan_find(c, &v[i]);
        if (!p) {
            lost++;
            continue;
        }
        fill_algo(a, (uint64_t)i);
        wrong += memcmp(p->algo, a, sizeof a) != 0;
    }
    TZ_EXPECT(wrong == 0, "%d variants found another key's algorithm", wrong);
    /* 23 keys in 64 sets of 4: none of these sets overflows (the hash is fixed) */
    TZ_EXPECT(lost == 0, "%d of %d variants evicted from a %d x %d cache", lost, nv, LT_PLAN_SETS, LT_PLAN_WAYS);
    TZ_EXPECT(holds(c, &km, 1000), "the moved call does not find the base call's plan");
    free(c);
}

static void test_no_algorithm(void) {
    lt_plan gone; /* what a store evicted */
    lt_plan_cache *c = rt_xcalloc(1, sizeof *c);
    const lt_call x = base_call();
    const lt_plan_key k = lt_plan_key_of(&x, 14, ALIGN);
    TZ_EXPECT(lt_plan_find(c, &k) == NULL, "an empty cache finds a plan");
    lt_plan_store(c, &k, false, NULL, NULL, &gone);
    const lt_plan *p = lt_plan_find(c, &k);
    TZ_EXPECT(p && !p->found, "\"no algorithm\" is not remembered as such");
    TZ_EXPECT(c->hits == 1 && c->misses == 1, "hits %llu misses %llu", (unsigned long long)c->hits,
              (unsigned long long)c->misses);
    free(c);
}

/* Keys of one set, in order of their m: the eviction's test needs more than a set holds. */
static int same_set_keys(lt_plan_key *out, int want) {
    lt_call x = base_call();
    int n = 0;
    unsigned set = 0;
    for (int m = 1; m < 1 << 20 && n < want; m++) {
        x.m = m;
        lt_plan_key k = lt_plan_key_of(&x, 14, ALIGN);
        if (n == 0) set = lt_plan_set_of(&k);
        if (lt_plan_set_of(&k) == set) out[n++] = k;
    }
    return n;
}

static void test_eviction(void) {
    lt_plan gone; /* what a store evicted */
    enum { N = LT_PLAN_WAYS + 1 };
    lt_plan_key k[N];
    TZ_EXPECT(same_set_keys(k, N) == N, "found too few keys of one set");
    lt_plan_cache *c = rt_xcalloc(1, sizeof *c);
    uint64_t a[LT_PLAN_ALGO_WORDS];
    /* each plan with descriptors of its own (any distinct pointers: the cache only keeps them) */
    static char descs[N][4];
    for (int i = 0; i < LT_PLAN_WAYS; i++) {
        fill_algo(a, (uint64_t)i);
        void *d[4] = {&descs[i][0], &descs[i][1], &descs[i][2], &descs[i][3]};
        lt_plan_store(c, &k[i], true, a, d, &gone);
        TZ_EXPECT(!gone.used, "storing key %d into a set with room evicted a plan", i);
    }
    TZ_EXPECT(lt_plan_find(c, &k[2])->desc[1] == &descs[2][1], "a plan lost its descriptors");
    for (int i = 0; i < LT_PLAN_WAYS; i++) TZ_EXPECT(holds(c, &k[i], (uint64_t)i), "a full set lost key %d", i);
    /* key 0 is now the least recently used but is used again: key 1 must go instead */
    TZ_EXPECT(holds(c, &k[0], 0), "key 0 missing");
    fill_algo(a, 99);
    lt_plan_store(c, &k[LT_PLAN_WAYS], true, a, NULL, &gone);
    /* the caller gets the evicted plan back, descriptors and all, to destroy them */
    TZ_EXPECT(gone.used && memcmp(&gone.key, &k[1], sizeof k[1]) == 0 && gone.desc[0] == &descs[1][0] &&
                  gone.desc[3] == &descs[1][3],
              "the evicted plan (key 1) and its descriptors did not come back");
    TZ_EXPECT(holds(c, &k[LT_PLAN_WAYS], 99), "the newest key is not there");
    TZ_EXPECT(holds(c, &k[0], 0), "the key used last before the newest was evicted");
    TZ_EXPECT(lt_plan_find(c, &k[1]) == NULL, "the least recently used key stayed");
    for (int i = 2; i < LT_PLAN_WAYS; i++) TZ_EXPECT(holds(c, &k[i], (uint64_t)i), "key %d evicted out of turn", i);
    free(c);
}

/* Many shapes through the cache, each looked up again at once and a while later: every plan
 * found is its own key's. */
static void test_churn(void) {
    lt_plan gone; /* what a store evicted */
    lt_plan_cache *c = rt_xcalloc(1, sizeof *c);
    lt_call x = base_call();
    uint64_t a[LT_PLAN_ALGO_WORDS];
    int wrong = 0, missing_now = 0;
    for (int i = 0; i < 5000; i++) {
        x.m = 1 + i % 997, x.n = 1 + i / 997;
        lt_plan_key k = lt_plan_key_of(&x, 14, ALIGN);
        const lt_plan *p = lt_plan_find(c, &k);
        fill_algo(a, (uint64_t)(x.m * 10000 + x.n));
        if (p) {
            wrong += memcmp(p->algo, a, sizeof a) != 0;
            continue;
        }
        lt_plan_store(c, &k, true, a, NULL, &gone);
        missing_now += !holds(c, &k, (uint64_t)(x.m * 10000 + x.n));
    }
    TZ_EXPECT(wrong == 0, "%d lookups found another shape's algorithm", wrong);
    TZ_EXPECT(missing_now == 0, "%d plans were gone right after being stored", missing_now);
    free(c);
}

int main(void) {
    test_keys();
    test_no_algorithm();
    test_eviction();
    test_churn();
    return tz_test_result("test_lt_plans");
}
