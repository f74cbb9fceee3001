/* oneDNN matmul (see cpu_dnnl.h). Each thread keeps its last few GEMMs ready to run: the
 * primitive, memory objects that are pointed at the caller's buffers on each call, and a stream.
 * Describing a GEMM and fetching its primitive from oneDNN's own cache costs about 10 us, which
 * attention's per-head GEMMs (a few us each at T=20 HS=16, tens at T=128 HS=64) would otherwise
 * pay several times per head (scripts/bench/bench_attention.c). Nothing is shared between
 * threads but the engine and oneDNN's cache. */
#include "runtime/backend/cpu/cpu_dnnl.h"

#include <stdio.h>
#include <string.h>

#ifdef TZ_USE_DNNL
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>

#include <oneapi/dnnl/dnnl.h>

static dnnl_engine_t cpu_engine;
static pthread_once_t dnnl_once = PTHREAD_ONCE_INIT;

static void dnnl_init(void) {
    if (dnnl_engine_create(&cpu_engine, dnnl_cpu, 0) != dnnl_success) cpu_engine = NULL;
}

static rt_status dnnl_fail(dnnl_status_t s, const char *what) {
    return rt_errorf(RT_ERR_UNSUPPORTED, "oneDNN: %s failed (status %d)", what, (int)s);
}

/* The matmul's primitive descriptor: A (M, K) and B (K, N) as strided views, C (M, N). */
static rt_status gemm_pd(cpu_dnnl_type type, bool trans_a, bool trans_b, int M, int N, int K, float alpha, int lda,
                         int ldb, float beta, int ldc, dnnl_primitive_desc_t *pd, dnnl_memory_desc_t mds[3]) {
    pthread_once(&dnnl_once, dnnl_init);
    if (!cpu_engine) return rt_errorf(RT_ERR_UNSUPPORTED, "oneDNN: no CPU engine");
    const dnnl_data_type_t in = type == CPU_DNNL_BF16 ? dnnl_bf16 : dnnl_f32;
    dnnl_dims_t a_dims = {M, K}, b_dims = {K, N}, c_dims = {M, N};
    dnnl_dims_t a_strides = {trans_a ? 1 : lda, trans_a ? lda : 1};
    dnnl_dims_t b_strides = {trans_b ? 1 : ldb, trans_b ? ldb : 1};
    dnnl_dims_t c_strides = {ldc, 1};
    dnnl_status_t s = dnnl_memory_desc_init_by_strides(&mds[0], 2, a_dims, in, a_strides);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_strides(&mds[1], 2, b_dims, in, b_strides);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_strides(&mds[2], 2, c_dims, dnnl_f32, c_strides);
    if (s != dnnl_success) return dnnl_fail(s, "memory descriptor");
    dnnl_matmul_desc_t md;
    if ((s = dnnl_matmul_desc_init(&md, &mds[0], &mds[1], NULL, &mds[2])) != dnnl_success)
        return dnnl_fail(s, "matmul descriptor");
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t post = NULL;
    s = dnnl_primitive_attr_create(&attr);
    if (s == dnnl_success && alpha != 1.0f) s = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha);
    if (s == dnnl_success && beta != 0.0f) { /* C = alpha AB + beta C: the sum post-op */
        s = dnnl_post_ops_create(&post);
        if (s == dnnl_success) s = dnnl_post_ops_append_sum(post, beta);
        if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, post);
    }
    if (s == dnnl_success) s = dnnl_primitive_desc_create(pd, &md, attr, cpu_engine, NULL);
    if (post) dnnl_post_ops_destroy(post);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return s == dnnl_success ? RT_OK : dnnl_fail(s, "matmul primitive descriptor");
}

static bool has_type[2];
static pthread_once_t has_once = PTHREAD_ONCE_INIT;

static void probe_types(void) {
    for (int t = 0; t < 2; t++) {
        dnnl_primitive_desc_t pd = NULL;
        dnnl_memory_desc_t mds[3];
        has_type[t] = gemm_pd((cpu_dnnl_type)t, false, false, 16, 16, 16, 1.0f, 16, 16, 0.0f, 16, &pd, mds) == RT_OK;
        if (pd) dnnl_primitive_desc_destroy(pd);
    }
}

bool cpu_dnnl_has(cpu_dnnl_type type) {
    pthread_once(&has_once, probe_types);
    return has_type[type == CPU_DNNL_BF16];
}

/* One cached GEMM: its description (the key) and what runs it. nthr is the thread count oneDNN
 * would use (1 inside an OpenMP parallel region): a kernel set up for a whole team must not run
 * on one team member. */
typedef struct {
    bool used, trans_a, trans_b;
    cpu_dnnl_type type;
    int M, N, K, lda, ldb, ldc, nthr;
    float alpha, beta;
    dnnl_primitive_t prim;
    dnnl_memory_t mem[3]; /* A, B, C; their data handles are set per call */
} gemm_entry;

/* Attention runs six products per head, and a training step's linears a dozen shapes; eight
 * covers attention's set and keeps a thread's footprint small. Replaced round-robin. */
#define GEMM_CACHE_N 8

typedef struct {
    gemm_entry e[GEMM_CACHE_N];
    int next;
    dnnl_stream_t stream;
} gemm_cache;

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void entry_clear(gemm_entry *e) {
    for (int i = 0; i < 3; i++)
        if (e->mem[i]) dnnl_memory_destroy(e->mem[i]);
    if (e->prim) dnnl_primitive_destroy(e->prim);
    memset(e, 0, sizeof *e);
}

static void cache_free(void *v) {
    gemm_cache *c = v;
    for (int i = 0; i < GEMM_CACHE_N; i++) entry_clear(&c->e[i]);
    if (c->stream) dnnl_stream_destroy(c->stream);
    free(c);
}

static void cache_key_init(void) { RT_CHECK(pthread_key_create(&cache_key, cache_free) == 0, "pthread key"); }

/* This thread's cache with its stream; NULL (status set) when oneDNN cannot make one. */
static gemm_cache *cache_get(rt_status *st) {
    pthread_once(&cache_once, cache_key_init);
    gemm_cache *c = pthread_getspecific(cache_key);
    if (c) return c;
    pthread_once(&dnnl_once, dnnl_init);
    if (!cpu_engine) {
        *st = rt_errorf(RT_ERR_UNSUPPORTED, "oneDNN: no CPU engine");
        return NULL;
    }
    c = calloc(1, sizeof *c);
    RT_CHECK(c != NULL, "out of memory for a oneDNN cache");
    dnnl_status_t s = dnnl_stream_create(&c->stream, cpu_engine, dnnl_stream_default_flags);
    if (s != dnnl_success) {
        free(c);
        *st = dnnl_fail(s, "stream");
        return NULL;
    }
    RT_CHECK(pthread_setspecific(cache_key, c) == 0, "pthread_setspecific");
    return c;
}

/* The cache's entry for this GEMM, made (evicting the oldest) on a miss; NULL with *st set when
 * oneDNN has no such matmul. */
static gemm_entry *cache_find(gemm_cache *c, const gemm_entry *key, rt_status *st) {
    for (int i = 0; i < GEMM_CACHE_N; i++) {
        gemm_entry *e = &c->e[i];
        if (e->used && e->type == key->type && e->trans_a == key->trans_a && e->trans_b == key->trans_b &&
            e->M == key->M && e->N == key->N && e->K == key->K && e->lda == key->lda && e->ldb == key->ldb &&
            e->ldc == key->ldc && e->nthr == key->nthr && memcmp(&e->alpha, &key->alpha, sizeof e->alpha) == 0 &&
            memcmp(&e->beta, &key->beta, sizeof e->beta) == 0)
            return e;
    }
    gemm_entry *e = &c->e[c->next];
    c->next = (c->next + 1) % GEMM_CACHE_N;
    entry_clear(e);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_memory_desc_t mds[3];
    *st = gemm_pd(key->type, key->trans_a, key->trans_b, key->M, key->N, key->K, key->alpha, key->lda, key->ldb,
                  key->beta, key->ldc, &pd, mds);
    if (*st != RT_OK) return NULL;
    *e = *key;
    dnnl_status_t s = dnnl_primitive_create(&e->prim, pd);
    /* DNNL_MEMORY_NONE: no buffer until a call points the object at the caller's */
    for (int i = 0; i < 3 && s == dnnl_success; i++)
        s = dnnl_memory_create(&e->mem[i], &mds[i], cpu_engine, DNNL_MEMORY_NONE);
    dnnl_primitive_desc_destroy(pd);
    if (s != dnnl_success) {
        entry_clear(e);
        *st = dnnl_fail(s, "matmul primitive");
        return NULL;
    }
    e->used = true;
    return e;
}

rt_status cpu_dnnl_gemm(cpu_dnnl_type type, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void *A,
                        int lda, const void *B, int ldb, float beta, float *C, int ldc) {
    RT_CHECK(M >= 0 && N >= 0 && K >= 0, "M=%d N=%d K=%d", M, N, K);
    RT_CHECK(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N, "lda=%d ldb=%d ldc=%d", lda, ldb, ldc);
    if (M == 0 || N == 0) return RT_OK;
    if (K == 0) { /* C = beta C; oneDNN's kernels divide by K (SIGFPE) */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return RT_OK;
    }
    rt_status st = RT_OK;
    gemm_cache *c = cache_get(&st);
    if (!c) return st;
    const gemm_entry key = {.type = type,
                            .trans_a = trans_a,
                            .trans_b = trans_b,
                            .M = M,
                            .N = N,
                            .K = K,
                            .lda = lda,
                            .ldb = ldb,
                            .ldc = ldc,
                            .alpha = alpha,
                            .beta = beta,
                            .nthr = omp_in_parallel() ? 1 : omp_get_max_threads()};
    gemm_entry *e = cache_find(c, &key, &st);
    if (!e) return st;
    void *ptrs[3] = {(void *)A, (void *)B, C};
    dnnl_status_t s = dnnl_success;
    for (int i = 0; i < 3 && s == dnnl_success; i++) s = dnnl_memory_set_data_handle(e->mem[i], ptrs[i]);
    if (s == dnnl_success) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, e->mem[0]}, {DNNL_ARG_WEIGHTS, e->mem[1]}, {DNNL_ARG_DST, e->mem[2]}};
        s = dnnl_primitive_execute(e->prim, c->stream, 3, args);
        if (s == dnnl_success) s = dnnl_stream_wait(c->stream);
    }
    return s == dnnl_success ? RT_OK : dnnl_fail(s, "matmul");
}

rt_status cpu_dnnl_kernel(cpu_dnnl_type type, int M, int N, int K, char *out, size_t size) {
    if (M < 1 || N < 1 || K < 1) return rt_errorf(RT_ERR_CONFIG, "oneDNN: a %dx%dx%d matmul has no kernel", M, N, K);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_memory_desc_t mds[3];
    rt_status st = gemm_pd(type, false, false, M, N, K, 1.0f, K, N, 0.0f, N, &pd, mds);
    if (st != RT_OK) return st;
    const char *impl = NULL;
    dnnl_status_t s = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    snprintf(out, size, "%s", s == dnnl_success && impl ? impl : "unknown");
    dnnl_primitive_desc_destroy(pd);
    return RT_OK;
}

#else /* no oneDNN in this build */

bool cpu_dnnl_has(cpu_dnnl_type type) {
    (void)type;
    return false;
}

rt_status cpu_dnnl_gemm(cpu_dnnl_type type, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void *A,
                        int lda, const void *B, int ldb, float beta, float *C, int ldc) {
    return rt_errorf(RT_ERR_UNSUPPORTED, "this build has no oneDNN (install libdnnl-dev: scripts/setup.sh)");
}

rt_status cpu_dnnl_kernel(cpu_dnnl_type type, int M, int N, int K, char *out, size_t size) {
    snprintf(out, size, "none");
    return rt_errorf(RT_ERR_UNSUPPORTED, "this build has no oneDNN (install libdnnl-dev: scripts/setup.sh)");
}

#endif
