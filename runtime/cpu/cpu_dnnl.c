/* oneDNN matmul (see cpu_dnnl.h). Each call describes its GEMM and lets oneDNN's own primitive
 * cache (keyed by the description) hand back the compiled kernel; memory objects wrap the
 * caller's pointers, so nothing is shared between threads but the engine and the cache. */
#include "runtime/cpu/cpu_dnnl.h"

#include <stdio.h>
#include <string.h>

#ifdef TZ_USE_DNNL
#include <pthread.h>

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

rt_status cpu_dnnl_gemm(cpu_dnnl_type type, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                        const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc) {
    RT_CHECK(M >= 0 && N >= 0 && K >= 0, "M=%d N=%d K=%d", M, N, K);
    RT_CHECK(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N, "lda=%d ldb=%d ldc=%d", lda, ldb,
             ldc);
    if (M == 0 || N == 0) return RT_OK;
    if (K == 0) { /* C = beta C; oneDNN's kernels divide by K (SIGFPE) */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return RT_OK;
    }
    dnnl_primitive_desc_t pd = NULL;
    dnnl_memory_desc_t mds[3];
    rt_status st = gemm_pd(type, trans_a, trans_b, M, N, K, alpha, lda, ldb, beta, ldc, &pd, mds);
    if (st != RT_OK) return st;
    dnnl_primitive_t prim = NULL;
    dnnl_stream_t stream = NULL;
    dnnl_memory_t mem[3] = {NULL, NULL, NULL};
    void *ptrs[3] = {(void *)A, (void *)B, C};
    dnnl_status_t s = dnnl_primitive_create(&prim, pd);
    for (int i = 0; i < 3 && s == dnnl_success; i++) s = dnnl_memory_create(&mem[i], &mds[i], cpu_engine, ptrs[i]);
    if (s == dnnl_success) s = dnnl_stream_create(&stream, cpu_engine, dnnl_stream_default_flags);
    if (s == dnnl_success) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}};
        s = dnnl_primitive_execute(prim, stream, 3, args);
        if (s == dnnl_success) s = dnnl_stream_wait(stream);
    }
    if (stream) dnnl_stream_destroy(stream);
    for (int i = 0; i < 3; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    if (prim) dnnl_primitive_destroy(prim);
    dnnl_primitive_desc_destroy(pd);
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

rt_status cpu_dnnl_gemm(cpu_dnnl_type type, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                        const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc) {
    return rt_errorf(RT_ERR_UNSUPPORTED, "this build has no oneDNN (install libdnnl-dev: scripts/setup.sh)");
}

rt_status cpu_dnnl_kernel(cpu_dnnl_type type, int M, int N, int K, char *out, size_t size) {
    snprintf(out, size, "none");
    return rt_errorf(RT_ERR_UNSUPPORTED, "this build has no oneDNN (install libdnnl-dev: scripts/setup.sh)");
}

#endif
