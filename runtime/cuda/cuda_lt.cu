/* The ops table's matmuls through cuBLASLt: the plain gemm and the fused linear ops of
 * runtime/rt_backend.h with their epilogues (BIAS, GELU_AUX_BIAS, BGRADB, DGELU_BGRAD). Inputs are
 * fp32, or their bf16/fp16 copies at that compute precision (cuda_precision.cu); C is fp32 and
 * the sums are fp32 (CUBLAS_COMPUTE_32F, no TF32), as on the CPU. The row-major to column-major
 * mapping and the epilogues' arguments are cuda_lt_map.h's pure functions (tested on the CPU).
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
 * slab), rather than cuBLASLt's default of 256 bytes, and asks it once per shape
 * (cuda_lt_plans.h). */
#include <limits.h>

#include "runtime/cuda/cuda_lt_map.h"
#include "runtime/cuda/cuda_lt_plans.h"
#include "runtime/cuda/rt_cuda.h"

#define RT_CUDA_LT_WORKSPACE (32u << 20)

static cublasLtEpilogue_t lt_epilogue_of(lt_epilogue e) {
    switch (e) {
    case LT_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    case LT_EPI_GELU_AUX_BIAS: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case LT_EPI_BGRADB: return CUBLASLT_EPILOGUE_BGRADB;
    case LT_EPI_DGELU_BGRAD: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case LT_EPI_DEFAULT: break;
    }
    return CUBLASLT_EPILOGUE_DEFAULT;
}

static cublasLtMatrixLayout_t lt_layout(cudaDataType_t type, lt_layout_dims d, int batch, long long stride) {
    cublasLtMatrixLayout_t l = NULL;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, (uint64_t)d.rows, (uint64_t)d.cols, d.ld));
    if (batch > 1) {
        const int32_t count = batch;
        const int64_t s = stride;
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s));
    }
    return l;
}

/* cuBLASLt's first choice for these descriptors, told the matrices' real alignments (A, B, C,
 * D) and our workspace; false: none. */
static bool lt_heuristic(rt_cuda_ctx *c, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                         cublasLtMatrixLayout_t lc, const uint32_t align[4], cublasLtMatmulAlgo_t *algo) {
    cublasLtMatmulPreference_t pref = NULL;
    const uint64_t ws_bytes = RT_CUDA_LT_WORKSPACE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                      sizeof ws_bytes));
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align[i], sizeof align[i]));
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(c->cublaslt, op, la, lb, lc, lc, pref, 1, &h, &found);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (st != CUBLAS_STATUS_SUCCESS || found < 1) return false;
    *algo = h.algo;
    return true;
}

/* Runs x; false (nothing run) when cuBLASLt has no algorithm for it. The heuristic runs once per
 * shape: its answers, "none" included, are kept in c->lt_plans (cuda_lt_plans.h). */
static bool lt_matmul(rt_cuda_ctx *c, const lt_call *x, cudaDataType_t type) {
    /* epilogue vectors want 16-byte alignment (a 4-byte-aligned bias has been seen to fault):
     * otherwise the caller composes the plain ops */
    if ((x->bias && (uintptr_t)x->bias % 16) || (x->aux && (uintptr_t)x->aux % 16)) return false;
    const size_t in_bytes = type == CUDA_R_32F ? 4 : 2;
    const uint32_t align[4] = {lt_alignment(x->A, x->sa, in_bytes, x->batch),
                               lt_alignment(x->B, x->sb, in_bytes, x->batch), lt_alignment(x->C, x->sc, 4, x->batch),
                               lt_alignment(x->C, x->sc, 4, x->batch)};
    if (!c->lt_plans) c->lt_plans = (lt_plan_cache *)rt_xcalloc(1, sizeof *c->lt_plans);
    const lt_plan_key key = lt_plan_key_of(x, (int)type, align);
    const lt_plan *plan = lt_plan_find(c->lt_plans, &key);
    if (plan && !plan->found) return false;

    cublasLtMatmulDesc_t op = NULL;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = x->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = x->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const cublasLtEpilogue_t epilogue = lt_epilogue_of(x->epilogue);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    if (x->bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x->bias, sizeof x->bias));
    if (x->aux) {
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &x->aux,
                                                    sizeof x->aux));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &x->ldaux,
                                                    sizeof x->ldaux));
    }
    cublasLtMatrixLayout_t la = lt_layout(type, lt_dims_a(x), x->batch, x->sa);
    cublasLtMatrixLayout_t lb = lt_layout(type, lt_dims_b(x), x->batch, x->sb);
    cublasLtMatrixLayout_t lc = lt_layout(CUDA_R_32F, lt_dims_c(x), x->batch, x->sc);
    cublasLtMatmulAlgo_t algo;
    static_assert(sizeof algo == LT_PLAN_ALGO_WORDS * sizeof(uint64_t), "cublasLtMatmulAlgo_t's size");
    bool ok = true;
    if (plan) {
        memcpy(&algo, plan->algo, sizeof algo);
    } else {
        ok = lt_heuristic(c, op, la, lb, lc, align, &algo);
        lt_plan_store(c->lt_plans, &key, ok, ok ? (const uint64_t *)&algo : NULL);
    }
    if (ok) {
        void *ws = rt_cuda_scratch(c, RT_CUDA_SCRATCH_LT_WORKSPACE, RT_CUDA_LT_WORKSPACE);
        CUBLAS_CHECK(cublasLtMatmul(c->cublaslt, op, &x->alpha, x->A, la, x->B, lb, &x->beta, x->C, lc, x->C, lc,
                                    &algo, ws, RT_CUDA_LT_WORKSPACE, c->stream));
    }
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lc));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(op));
    return ok;
}

/* x's operands at the matmul precision: fp32 as they are (CUDA_R_32F), else their 16-bit copies:
 * a single matrix packed (a weight read from the copy AdamW keeps), a batch (attention's
 * products over heads) as lt_batch_pack_of lays it out. */
static cudaDataType_t lt_inputs(rt_cuda_ctx *c, lt_call *x) {
    if (c->matmul == RT_F32) return CUDA_R_32F;
    const cudaDataType_t type = c->matmul == RT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    if (x->batch > 1) { /* attention's products over heads: activations, never the weights' copy */
        const lt_batch_pack pa = lt_batch_pack_of(lt_dims_a(x), x->batch, x->sa),
                            pb = lt_batch_pack_of(lt_dims_b(x), x->batch, x->sb);
        RT_CHECK(pa.height <= INT_MAX && pb.height <= INT_MAX && pa.width <= INT_MAX && pb.width <= INT_MAX,
                 "a %s batched matmul copying %lld x %lld and %lld x %lld elements", rt_dtype_name(c->matmul),
                 (long long)pa.width, (long long)pa.height, (long long)pb.width, (long long)pb.height);
        /* width columns of height values are a row-major width x height block at row stride src_ld */
        x->A = rt_cuda_round_input(c, RT_CUDA_SCRATCH_GEMM_B, (const float *)x->A, (int)pa.width, (int)pa.height,
                                   (int)pa.src_ld);
        x->B = rt_cuda_round_input(c, RT_CUDA_SCRATCH_GEMM_A, (const float *)x->B, (int)pb.width, (int)pb.height,
                                   (int)pb.src_ld);
        x->lda = pa.ld, x->ldb = pb.ld;
        return type;
    }
    /* a weight comes from the copy AdamW wrote (its own row stride); the rest is converted now
     * into packed scratch. x->A is the row-major product's B, x->B its A. */
    const lt_layout_dims a = lt_dims_a(x), b = lt_dims_b(x);
    int ld16_a = 0, ld16_b = 0;
    /* a column-major (rows x cols) is a row-major (cols x rows) with the same ld */
    x->A = rt_cuda_matmul_input(c, RT_CUDA_SCRATCH_GEMM_B, (const float *)x->A, a.cols, a.rows, (int)a.ld, &ld16_a);
    x->B = rt_cuda_matmul_input(c, RT_CUDA_SCRATCH_GEMM_A, (const float *)x->B, b.cols, b.rows, (int)b.ld, &ld16_b);
    x->lda = ld16_a, x->ldb = ld16_b;
    return type;
}

void rt_cuda_gemm_op(void *ctx, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                     size_t stride_a, const float *B, int ldb, size_t stride_b, float beta, float *C, int ldc,
                     size_t stride_c, int batch) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    RT_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0, "M=%d N=%d K=%d batch=%d", M, N, K, batch);
    RT_CHECK(lda >= (trans_a ? M : K) && lda >= 1 && ldb >= (trans_b ? K : N) && ldb >= 1 && ldc >= N,
             "lda=%d ldb=%d ldc=%d for M=%d N=%d K=%d", lda, ldb, ldc, M, N, K);
    if (M == 0 || N == 0 || batch == 0) return;
    /* K = 0: C = beta C, which cuBLAS does */
    if (K > 0) {
        lt_call x = lt_map_row_major(trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc,
                                     stride_c, batch);
        const cudaDataType_t type = lt_inputs(c, &x);
        if (lt_matmul(c, &x, type)) return;
        /* cuBLAS's fallback below is fp32 only; a 16-bit batch of several that cuBLASLt refuses
         * goes one by one, and splitting a batch of one into batches of one would never end */
        RT_CHECK(c->matmul == RT_F32 || batch > 1, "cuBLASLt has no algorithm for a %s matmul M=%d N=%d K=%d (trans %d %d, ld %d %d %d)",
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
    lt_call x;
    if (!lt_map_linear_fwd(&x, out, pre, X, W, b, N, in, out_f, act != NULL, act && *act == RT_ACT_GELU_TANH))
        return false;
    const cudaDataType_t type = lt_inputs(c, &x);
    return lt_matmul(c, &x, type);
}

/* Adds an epilogue's bias gradient (written, not added, by cuBLASLt) into db. */
static void add_bgrad(rt_cuda_ctx *c, float *db, const float *g, int n) { rt_cuda_axpy(c, db, 1.0f, g, (size_t)n); }

bool rt_cuda_linear_wgrad(void *ctx, float *dW, float *db, const float *dY, const float *X, size_t N, int in,
                          int out_f) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    float *g = db ? (float *)rt_cuda_scratch(c, RT_CUDA_SCRATCH_BGRAD, (size_t)out_f * sizeof(float)) : NULL;
    lt_call x;
    if (!lt_map_linear_wgrad(&x, dW, g, dY, X, N, in, out_f)) return false;
    const cudaDataType_t type = lt_inputs(c, &x);
    if (!lt_matmul(c, &x, type)) return false;
    if (db) add_bgrad(c, db, g, out_f);
    return true;
}

bool rt_cuda_linear_dact(void *ctx, float *dpre, float *db, const float *dY, const float *W, const float *pre,
                         size_t N, int in, int out_f, rt_act_kind act) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    float *g = db ? (float *)rt_cuda_scratch(c, RT_CUDA_SCRATCH_BGRAD, (size_t)in * sizeof(float)) : NULL;
    lt_call x;
    if (!lt_map_linear_dact(&x, dpre, g, dY, W, pre, N, in, out_f, act == RT_ACT_GELU_TANH)) return false;
    const cudaDataType_t type = lt_inputs(c, &x);
    if (!lt_matmul(c, &x, type)) return false;
    add_bgrad(c, db, g, in);
    return true;
}
