/* The ops table's matmuls through cuBLASLt: the plain gemm and the fused linear ops of
 * runtime/rt_backend.h with their epilogues (BIAS, GELU_AUX_BIAS, BGRADB, DGELU_BGRAD). Inputs are
 * fp32, or their bf16/fp16 copies at that compute precision (cuda_precision.cu); C is fp32 and
 * the sums are fp32 (CUBLAS_COMPUTE_32F, no TF32), as on the CPU.
 *
 * Row-major to cuBLASLt's column-major: a row-major (r x c) matrix with row stride ld is a
 * column-major (c x r) one with the same ld, so C = op(A) op(B) row-major is C^T = op(B)^T
 * op(A)^T column-major: B goes first, A second, M and N swap, each keeps its own transpose.
 *
 * GELU: the epilogues fuse only RT_ACT_GELU_TANH. cuBLASLt's GELU is the tanh form (PyTorch
 * decomposes its cuBLASLt-backed _addmm_activation(use_gelu=True) on CUDA as
 * gelu(approximate="tanh"), torch/_decomp/decompositions.py); BERT's erf GELU, ReLU and tanh run
 * as separate kernels. test_cuda_ops compares each fused op with the CPU's composition.
 *
 * A fused op returns false, having done nothing, when its shapes break an epilogue's rule (the
 * pre-activation's leading dimension must be a multiple of 8; bias and pre-activation 16-byte
 * aligned) or cuBLASLt offers no algorithm; the wrapper then composes the plain ops. Each call
 * tells the heuristic how its matrices are really aligned (weights sit at any offset in the
 * slab), rather than cuBLASLt's default of 256 bytes. */
#include "runtime/cuda/rt_cuda.h"

#define RT_CUDA_LT_WORKSPACE (32u << 20)

/* One cuBLASLt call in column-major terms: D (m x n, ldc) = alpha op(A) op(B) + beta C, where
 * op(A) is m x k and op(B) is k x n; batch > 1 uses the strides (elements). */
typedef struct {
    bool ta, tb;
    int m, n, k, batch;
    const void *A, *B;
    cudaDataType_t type; /* A's and B's */
    int64_t lda, ldb, ldc;
    long long sa, sb, sc;
    float alpha, beta;
    float *C;
    cublasLtEpilogue_t epilogue;
    const void *bias; /* BIAS: the bias; BGRADB / DGELU_BGRAD: where the bias gradient is written */
    void *aux;        /* GELU_AUX_BIAS: the pre-activation written; DGELU_BGRAD: read */
    int64_t ldaux;
} lt_call;

static cublasLtMatrixLayout_t lt_layout(cudaDataType_t type, int rows, int cols, int64_t ld, int batch,
                                        long long stride) {
    cublasLtMatrixLayout_t l = NULL;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        const int32_t count = batch;
        const int64_t s = stride;
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s));
    }
    return l;
}

/* The largest power of two up to 256 dividing a matrix's byte address (and, batched, its byte
 * stride): what cuBLASLt may assume of its alignment. Its default assumption is 256, which would
 * let the heuristic pick a kernel that faults on a weight at an odd offset in the slab or on a
 * 16-bit copy's block. */
static uint32_t lt_alignment(const void *p, long long stride, size_t elem_bytes, int batch) {
    uint64_t bits = (uint64_t)(uintptr_t)p | 256u;
    if (batch > 1) bits |= (uint64_t)stride * elem_bytes;
    return (uint32_t)(bits & (~bits + 1)); /* the lowest set bit */
}

/* Runs x; false (nothing run) when cuBLASLt has no algorithm for it. */
static bool lt_matmul(rt_cuda_ctx *c, const lt_call *x) {
    /* epilogue vectors want 16-byte alignment (a 4-byte-aligned bias has been seen to fault):
     * otherwise the caller composes the plain ops */
    if ((x->bias && (uintptr_t)x->bias % 16) || (x->aux && (uintptr_t)x->aux % 16)) return false;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = x->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = x->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &x->epilogue, sizeof x->epilogue));
    if (x->bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x->bias, sizeof x->bias));
    if (x->aux) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &x->aux,
                                                    sizeof x->aux));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &x->ldaux,
                                                    sizeof x->ldaux));
    }
    cublasLtMatrixLayout_t la = lt_layout(x->type, x->ta ? x->k : x->m, x->ta ? x->m : x->k, x->lda, x->batch, x->sa);
    cublasLtMatrixLayout_t lb = lt_layout(x->type, x->tb ? x->n : x->k, x->tb ? x->k : x->n, x->ldb, x->batch, x->sb);
    cublasLtMatrixLayout_t lc = lt_layout(CUDA_R_32F, x->m, x->n, x->ldc, x->batch, x->sc);
    void *ws = rt_cuda_scratch(c, RT_CUDA_SCRATCH_LT_WORKSPACE, RT_CUDA_LT_WORKSPACE);
    const uint64_t ws_bytes = RT_CUDA_LT_WORKSPACE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                      sizeof ws_bytes));
    const size_t in_bytes = x->type == CUDA_R_32F ? 4 : 2;
    const uint32_t align[4] = {lt_alignment(x->A, x->sa, in_bytes, x->batch),
                               lt_alignment(x->B, x->sb, in_bytes, x->batch), lt_alignment(x->C, x->sc, 4, x->batch),
                               lt_alignment(x->C, x->sc, 4, x->batch)};
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align[i], sizeof align[i]));
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(c->cublaslt, op, la, lb, lc, lc, pref, 1, &h, &found);
    const bool ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (ok)
        CUBLAS_CHECK(cublasLtMatmul(c->cublaslt, op, &x->alpha, x->A, la, x->B, lb, &x->beta, x->C, lc, x->C, lc,
                                    &h.algo, ws, RT_CUDA_LT_WORKSPACE, 0));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lc));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(op));
    return ok;
}

/* The row-major product C (M x N, ldc) = alpha op(A) op(B) + beta C as an lt_call (B first, A
 * second), with the operands at the matmul precision: fp32 as they are, else their 16-bit copies
 * (a batch of one: the models' only batched products are attention's, which use cuBLAS). */
static lt_call lt_row_major(rt_cuda_ctx *c, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                            const float *A, int lda, size_t stride_a, const float *B, int ldb, size_t stride_b,
                            float beta, float *C, int ldc, size_t stride_c, int batch) {
    lt_call x;
    memset(&x, 0, sizeof x);
    x.ta = trans_b, x.tb = trans_a, x.m = N, x.n = M, x.k = K, x.batch = batch;
    x.A = B, x.B = A, x.lda = ldb, x.ldb = lda, x.ldc = ldc;
    x.sa = (long long)stride_b, x.sb = (long long)stride_a, x.sc = (long long)stride_c;
    x.alpha = alpha, x.beta = beta, x.C = C, x.type = CUDA_R_32F, x.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    if (c->matmul != RT_F32) {
        RT_CHECK(batch == 1, "a %s matmul with batch %d", rt_dtype_name(c->matmul), batch);
        /* a weight comes from the copy AdamW wrote (its own row stride); the rest is converted
         * now into packed scratch */
        int ld16_b = 0, ld16_a = 0;
        x.A = rt_cuda_matmul_input(c, RT_CUDA_SCRATCH_GEMM_B, B, trans_b ? N : K, trans_b ? K : N, ldb, &ld16_b);
        x.B = rt_cuda_matmul_input(c, RT_CUDA_SCRATCH_GEMM_A, A, trans_a ? K : M, trans_a ? M : K, lda, &ld16_a);
        x.lda = ld16_b, x.ldb = ld16_a;
        x.type = c->matmul == RT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    }
    return x;
}

void rt_cuda_gemm_op(void *ctx, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                     size_t stride_a, const float *B, int ldb, size_t stride_b, float beta, float *C, int ldc,
                     size_t stride_c, int batch) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    RT_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0, "M=%d N=%d K=%d batch=%d", M, N, K, batch);
    RT_CHECK(lda >= (trans_a ? M : K) && lda >= 1 && ldb >= (trans_b ? K : N) && ldb >= 1 && ldc >= N,
             "lda=%d ldb=%d ldc=%d for M=%d N=%d K=%d", lda, ldb, ldc, M, N, K);
    if (M == 0 || N == 0 || batch == 0) return;
    /* K = 0: C = beta C, which cuBLAS does; a 16-bit batch of several goes one by one */
    if (K > 0 && (c->matmul == RT_F32 || batch == 1)) {
        lt_call x = lt_row_major(c, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc,
                                 stride_c, batch);
        if (lt_matmul(c, &x)) return;
        /* cuBLAS's fallback below is fp32 only, and splitting a batch of one into batches of one
         * would never end */
        RT_CHECK(c->matmul == RT_F32, "cuBLASLt has no algorithm for a %s matmul M=%d N=%d K=%d (trans %d %d, ld %d %d %d)",
                 rt_dtype_name(c->matmul), M, N, K, trans_a, trans_b, lda, ldb, ldc);
    }
    if (c->matmul != RT_F32 && K > 0) {
        for (int b = 0; b < batch; b++)
            rt_cuda_gemm_op(ctx, trans_a, trans_b, M, N, K, alpha, A + (size_t)b * stride_a, lda, 0,
                            B + (size_t)b * stride_b, ldb, 0, beta, C + (size_t)b * stride_c, ldc, 0, 1);
        return;
    }
    rt_cuda_gemm(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c,
                 batch);
}

bool rt_cuda_linear_fwd(void *ctx, float *out, float *pre, const float *X, const float *W, const float *b, size_t N,
                        int in, int out_f, const rt_act_kind *act) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    if (N == 0 || N > INT32_MAX || in == 0) return false;
    if (act && (*act != RT_ACT_GELU_TANH || !b || out_f % 8 != 0)) return false; /* only GELU_AUX_BIAS fuses */
    lt_call x = lt_row_major(c, false, true, (int)N, out_f, in, 1.0f, X, in, 0, W, in, 0, 0.0f, act ? out : pre, out_f,
                             0, 1);
    x.bias = b;
    x.epilogue = act ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : b ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (act) x.aux = pre, x.ldaux = out_f;
    return lt_matmul(c, &x);
}

/* Adds an epilogue's bias gradient (written, not added, by cuBLASLt) into db. */
static void add_bgrad(rt_cuda_ctx *c, float *db, const float *g, int n) { rt_cuda_axpy(c, db, 1.0f, g, (size_t)n); }

bool rt_cuda_linear_wgrad(void *ctx, float *dW, float *db, const float *dY, const float *X, size_t N, int in,
                          int out_f) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    if (N == 0 || N > INT32_MAX) return false;
    /* dW (out_f x in) += dY^T X: M = out_f, N = in, K = rows */
    lt_call x = lt_row_major(c, true, false, out_f, in, (int)N, 1.0f, dY, out_f, 0, X, in, 0, 1.0f, dW, in, 0, 1);
    float *g = NULL;
    if (db) {
        g = (float *)rt_cuda_scratch(c, RT_CUDA_SCRATCH_BGRAD, (size_t)out_f * sizeof(float));
        x.bias = g, x.epilogue = CUBLASLT_EPILOGUE_BGRADB; /* the column sums of dY, op(B) here */
    }
    if (!lt_matmul(c, &x)) return false;
    if (db) add_bgrad(c, db, g, out_f);
    return true;
}

bool rt_cuda_linear_dact(void *ctx, float *dpre, float *db, const float *dY, const float *W, const float *pre,
                         size_t N, int in, int out_f, rt_act_kind act) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    if (N == 0 || N > INT32_MAX || act != RT_ACT_GELU_TANH || !db || in % 8 != 0) return false;
    /* dpre (rows x in) = dY (rows x out_f) W (out_f x in), then GELU' from the aux and its column sums */
    lt_call x = lt_row_major(c, false, false, (int)N, in, out_f, 1.0f, dY, out_f, 0, W, in, 0, 0.0f, dpre, in, 0, 1);
    float *g = (float *)rt_cuda_scratch(c, RT_CUDA_SCRATCH_BGRAD, (size_t)in * sizeof(float));
    x.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD, x.bias = g, x.aux = (void *)pre, x.ldaux = in;
    if (!lt_matmul(c, &x)) return false;
    add_bgrad(c, db, g, in);
    return true;
}
