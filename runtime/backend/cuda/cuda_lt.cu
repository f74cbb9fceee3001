/* The ops table's matmuls through cuBLASLt: the plain gemm and the fused linear ops of
 * runtime/backend/rt_backend.h with their epilogues (BIAS, GELU_AUX_BIAS, BGRADB, DGELU_BGRAD, DGELU). The sums
 * are fp32 (CUBLAS_COMPUTE_32F, no TF32), as on the CPU. Operands are typed handles (rt_x): at a
 * 16-bit compute precision a 16-bit activation is read as it is, and an fp32 operand through its
 * 16-bit copy (a weight from the copy AdamW keeps, anything else converted into scratch,
 * cuda_precision.cu); C is written as its handle says, a 16-bit C rounded once from the fp32 sum
 * by cuBLASLt, with the epilogue's aux (GELU's pre-activation) and bias in C's type, as llm.c keeps
 * them. The row-major to column-major mapping and the epilogues' arguments are cuda_lt_map.h's
 * pure functions (tested on the CPU).
 *
 * GELU: the epilogues fuse only RT_ACT_GELU_TANH. cuBLASLt's GELU is the tanh form (PyTorch
 * decomposes its cuBLASLt-backed _addmm_activation(use_gelu=True) on CUDA as
 * gelu(approximate="tanh"), torch/_decomp/decompositions.py); BERT's erf GELU, ReLU and tanh run
 * as separate kernels. test_cuda_ops compares each fused op with the CPU's composition.
 *
 * With 16-bit outputs the bias comes from the weights' 16-bit copy (a bias is rounded to the compute
 * type, as autocast casts it), and linear_dact's bias gradient is summed from the stored dpre by
 * cuda_norm.cu's deterministic column sums, in fp32 (cuBLASLt would write it in dpre's type, which
 * fp16 could overflow). Where cuBLASLt cannot run a 16-bit call (an activation it lacks, a shape,
 * no algorithm, a bias outside the copy) the op composes itself from the fp32 product and one
 * epilogue kernel (rt_cuda_bias_act, rt_cuda_dact), so a 16-bit handle never reaches the wrapper's
 * fp32 composition.
 *
 * A fused op returns false, having done nothing, when its shapes break an epilogue's rule (the
 * pre-activation's leading dimension must be a multiple of 8; bias and pre-activation 16-byte
 * aligned) or cuBLASLt offers no algorithm; the wrapper then composes the plain ops. Each call
 * tells the heuristic how its matrices are really aligned (weights sit at any offset in the
 * slab), rather than cuBLASLt's default of 256 bytes, and asks it once per shape
 * (cuda_lt_plans.h). */
#include <limits.h>

#include "runtime/backend/cuda/cuda_lt_map.h"
#include "runtime/backend/cuda/cuda_lt_plans.h"
#include "runtime/backend/cuda/rt_cuda.h"

#define RT_CUDA_LT_WORKSPACE (32u << 20)
static_assert(CUDA_R_32F == 0, "lt_call.ctype 0 means floats");

static cublasLtEpilogue_t lt_epilogue_of(lt_epilogue e) {
    switch (e) {
    case LT_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    case LT_EPI_GELU_AUX_BIAS: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case LT_EPI_BGRADB: return CUBLASLT_EPILOGUE_BGRADB;
    case LT_EPI_DGELU_BGRAD: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case LT_EPI_DGELU: return CUBLASLT_EPILOGUE_DGELU;
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

/* A plan's descriptors (lt_plan.desc): the matmul, then A's, B's and C's layouts. */
static void lt_desc_destroy(void *const *desc) {
    if (desc[0]) CUBLAS_CHECK(cublasLtMatmulDescDestroy((cublasLtMatmulDesc_t)desc[0]));
    for (int i = 1; i < 4; i++)
        if (desc[i]) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy((cublasLtMatrixLayout_t)desc[i]));
}

/* The descriptors for x's key: the matmul with its transposes, epilogue and aux leading dimension
 * (the bias and aux pointers are set per call), and the three layouts. */
static void lt_desc_create(const lt_call *x, cudaDataType_t type, void *desc[4]) {
    cublasLtMatmulDesc_t op = NULL;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = x->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = x->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const cublasLtEpilogue_t epilogue = lt_epilogue_of(x->epilogue);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    if (x->aux)
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &x->ldaux, sizeof x->ldaux));
    desc[0] = op;
    desc[1] = lt_layout(type, lt_dims_a(x), x->batch, x->sa);
    desc[2] = lt_layout(type, lt_dims_b(x), x->batch, x->sb);
    desc[3] = lt_layout((cudaDataType_t)x->ctype, lt_dims_c(x), x->batch, x->sc);
}

void rt_cuda_lt_plans_free(rt_cuda_ctx *c) {
    if (!c->lt_plans) return;
    for (int s = 0; s < LT_PLAN_SETS; s++)
        for (int w = 0; w < LT_PLAN_WAYS; w++)
            if (c->lt_plans->plans[s][w].used) lt_desc_destroy(c->lt_plans->plans[s][w].desc);
    free(c->lt_plans);
    c->lt_plans = NULL;
}

/* Runs x; false (nothing run) when cuBLASLt has no algorithm for it. The heuristic runs and the
 * descriptors are made once per shape: they, and the answer "none", are kept in c->lt_plans
 * (cuda_lt_plans.h). */
static bool lt_matmul(rt_cuda_ctx *c, const lt_call *x, cudaDataType_t type) {
    /* epilogue vectors want 16-byte alignment (a 4-byte-aligned bias has been seen to fault):
     * otherwise the caller composes the plain ops */
    if ((x->bias && (uintptr_t)x->bias % 16) || (x->aux && (uintptr_t)x->aux % 16)) return false;
    const cudaDataType_t ctype = (cudaDataType_t)x->ctype;
    const size_t in_bytes = type == CUDA_R_32F ? 4 : 2, c_bytes = ctype == CUDA_R_32F ? 4 : 2;
    /* a 16-bit aux wants a leading dimension of 8 values */
    if (x->aux && c_bytes == 2 && x->ldaux % 8) return false;
    const uint32_t align[4] = {
        lt_alignment(x->A, x->sa, in_bytes, x->batch), lt_alignment(x->B, x->sb, in_bytes, x->batch),
        lt_alignment(x->C, x->sc, c_bytes, x->batch), lt_alignment(x->C, x->sc, c_bytes, x->batch)};
    if (!c->lt_plans) c->lt_plans = (lt_plan_cache *)rt_xcalloc(1, sizeof *c->lt_plans);
    const lt_plan_key key = lt_plan_key_of(x, (int)type, align);
    lt_plan *plan = lt_plan_find(c->lt_plans, &key);
    if (plan && !plan->found) return false;
    cublasLtMatmulAlgo_t algo;
    static_assert(sizeof algo == LT_PLAN_ALGO_WORDS * sizeof(uint64_t), "cublasLtMatmulAlgo_t's size");
    if (!plan) {
        void *desc[4];
        lt_desc_create(x, type, desc);
        const bool ok = lt_heuristic(c, (cublasLtMatmulDesc_t)desc[0], (cublasLtMatrixLayout_t)desc[1],
                                     (cublasLtMatrixLayout_t)desc[2], (cublasLtMatrixLayout_t)desc[3], align, &algo);
        if (!ok) lt_desc_destroy(desc); /* "none" keeps no descriptors */
        lt_plan evicted;
        plan = lt_plan_store(c->lt_plans, &key, ok, ok ? (const uint64_t *)&algo : NULL, ok ? desc : NULL, &evicted);
        if (evicted.used) lt_desc_destroy(evicted.desc);
        if (!ok) return false;
    }
    memcpy(&algo, plan->algo, sizeof algo);
    cublasLtMatmulDesc_t op = (cublasLtMatmulDesc_t)plan->desc[0];
    const cublasLtMatrixLayout_t la = (cublasLtMatrixLayout_t)plan->desc[1], lb = (cublasLtMatrixLayout_t)plan->desc[2],
                                 lc = (cublasLtMatrixLayout_t)plan->desc[3];
    /* the vectors' addresses are the call's (their presence is the key's) */
    if (x->bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x->bias, sizeof x->bias));
    if (x->aux)
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &x->aux, sizeof x->aux));
    void *ws = rt_cuda_scratch(c, RT_CUDA_SCRATCH_LT_WORKSPACE, RT_CUDA_LT_WORKSPACE);
    CUBLAS_CHECK(cublasLtMatmul(c->cublaslt, op, &x->alpha, x->A, la, x->B, lb, &x->beta, x->C, lc, x->C, lc, &algo, ws,
                                RT_CUDA_LT_WORKSPACE, c->stream));
    return true;
}

/* x's operands at the matmul precision, A's values of type ta and B's of tb (a 16-bit one holds the
 * compute type): fp32 as they are at fp32 (CUDA_R_32F); else a 16-bit operand as it is, an fp32 one
 * through its 16-bit copy: a single matrix packed (a weight read from the copy AdamW keeps), a
 * batch (attention's products over heads) as lt_batch_pack_of lays it out. */
static cudaDataType_t lt_inputs(rt_cuda_ctx *c, lt_call *x, rt_dtype ta, rt_dtype tb) {
    RT_CHECK((ta == RT_F32 || ta == c->matmul) && (tb == RT_F32 || tb == c->matmul),
             "a matmul of %s and %s activations under %s compute", rt_dtype_name(ta), rt_dtype_name(tb),
             rt_dtype_name(c->matmul));
    if (c->matmul == RT_F32) return CUDA_R_32F;
    const cudaDataType_t type = rt_cuda_x_type(c->matmul);
    if (x->batch > 1) { /* attention's products over heads: activations, never the weights' copy */
        const lt_batch_pack pa = lt_batch_pack_of(lt_dims_a(x), x->batch, x->sa),
                            pb = lt_batch_pack_of(lt_dims_b(x), x->batch, x->sb);
        RT_CHECK(pa.height <= INT_MAX && pb.height <= INT_MAX && pa.width <= INT_MAX && pb.width <= INT_MAX,
                 "a %s batched matmul copying %lld x %lld and %lld x %lld elements", rt_dtype_name(c->matmul),
                 (long long)pa.width, (long long)pa.height, (long long)pb.width, (long long)pb.height);
        /* width columns of height values are a row-major width x height block at row stride src_ld */
        if (ta == RT_F32) {
            x->A = rt_cuda_round_input(c, RT_CUDA_SCRATCH_GEMM_B, (const float *)x->A, (int)pa.width, (int)pa.height,
                                       (int)pa.src_ld);
            x->lda = pa.ld;
        }
        if (tb == RT_F32) {
            x->B = rt_cuda_round_input(c, RT_CUDA_SCRATCH_GEMM_A, (const float *)x->B, (int)pb.width, (int)pb.height,
                                       (int)pb.src_ld);
            x->ldb = pb.ld;
        }
        return type;
    }
    /* a weight comes from the copy AdamW wrote (its own row stride); the rest is converted now
     * into packed scratch. x->A is the row-major product's B, x->B its A. A column-major (rows x
     * cols) is a row-major (cols x rows) with the same ld. */
    const lt_layout_dims a = lt_dims_a(x), b = lt_dims_b(x);
    int ld16 = 0;
    if (ta == RT_F32) {
        x->A = rt_cuda_matmul_input(c, RT_CUDA_SCRATCH_GEMM_B, (const float *)x->A, a.cols, a.rows, (int)a.ld, &ld16);
        x->lda = ld16;
    }
    if (tb == RT_F32) {
        x->B = rt_cuda_matmul_input(c, RT_CUDA_SCRATCH_GEMM_A, (const float *)x->B, b.cols, b.rows, (int)b.ld, &ld16);
        x->ldb = ld16;
    }
    return type;
}

void rt_cuda_gemm_op(void *ctx, bool trans_a, bool trans_b, int M, int N, int K, float alpha, rt_x A, int lda,
                     size_t stride_a, rt_x B, int ldb, size_t stride_b, float beta, rt_x C, int ldc, size_t stride_c,
                     int batch) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    RT_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0, "M=%d N=%d K=%d batch=%d", M, N, K, batch);
    RT_CHECK(lda >= (trans_a ? M : K) && lda >= 1 && ldb >= (trans_b ? K : N) && ldb >= 1 && ldc >= N,
             "lda=%d ldb=%d ldc=%d for M=%d N=%d K=%d", lda, ldb, ldc, M, N, K);
    if (M == 0 || N == 0 || batch == 0) return;
    /* K = 0: C = beta C, which cuBLAS does (on floats) */
    if (K > 0) {
        lt_call x = lt_map_row_major(trans_a, trans_b, M, N, K, alpha, A.p, lda, stride_a, B.p, ldb, stride_b, beta,
                                     C.p, ldc, stride_c, batch);
        x.ctype = (int)rt_cuda_x_type(C.t);
        const cudaDataType_t type = lt_inputs(c, &x, B.t, A.t);
        if (lt_matmul(c, &x, type)) return;
        /* cuBLAS's fallback below is fp32 only; a 16-bit batch of several that cuBLASLt refuses
         * goes one by one, and splitting a batch of one into batches of one would never end */
        RT_CHECK((c->matmul == RT_F32 && C.t == RT_F32) || batch > 1,
                 "cuBLASLt has no algorithm for a %s matmul into %s, M=%d N=%d K=%d (trans %d %d, ld %d %d %d)",
                 rt_dtype_name(c->matmul), rt_dtype_name(C.t), M, N, K, trans_a, trans_b, lda, ldb, ldc);
        if (c->matmul != RT_F32 || C.t != RT_F32) {
            for (int b = 0; b < batch; b++)
                rt_cuda_gemm_op(ctx, trans_a, trans_b, M, N, K, alpha, rt_x_at(A, (size_t)b * stride_a), lda, 0,
                                rt_x_at(B, (size_t)b * stride_b), ldb, 0, beta, rt_x_at(C, (size_t)b * stride_c), ldc,
                                0, 1);
            return;
        }
    }
    rt_cuda_gemm(ctx, trans_a, trans_b, M, N, K, alpha, rt_x_floats(A, "cuda gemm"), lda, stride_a,
                 rt_x_floats(B, "cuda gemm"), ldb, stride_b, beta, rt_x_floats(C, "cuda gemm with K = 0"), ldc,
                 stride_c, batch);
}

/* The 16-bit copy of n parameters at p (a bias), or NULL where the weights' copy does not hold them. */
static const void *lt_weight16(const rt_cuda_ctx *c, const float *p, size_t n) {
    size_t at = 0;
    if (!c->copy || rt_weight_copy_overlap(c->copy_w, c->copy_n, p, n, &at) != n) return NULL;
    return (const char *)c->copy + at * 2;
}

/* The fp32 product of a composed 16-bit linear op: scratch, N x cols floats. */
static float *lt_product(rt_cuda_ctx *c, size_t N, int cols) {
    return (float *)rt_cuda_scratch(c, RT_CUDA_SCRATCH_LINEAR, N * (size_t)cols * sizeof(float));
}

bool rt_cuda_linear_fwd(void *ctx, rt_x out, rt_x pre, rt_x X, const float *W, const float *b, size_t N, int in,
                        int out_f, const rt_act_kind *act) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    const bool gelu_tanh = act && *act == RT_ACT_GELU_TANH;
    lt_call x;
    if (pre.t == RT_F32 && (!act || out.t == RT_F32)) { /* floats out: the wrapper composes what this cannot */
        if (!lt_map_linear_fwd(&x, out.p, pre.p, X.p, W, b, N, in, out_f, act != NULL, gelu_tanh)) return false;
        return lt_matmul(c, &x, lt_inputs(c, &x, RT_F32, X.t));
    }
    /* 16-bit out: the epilogue writes pre (aux) and out in one type, with the bias in that type */
    const void *b16 = b ? lt_weight16(c, b, (size_t)out_f) : NULL;
    if ((!act || out.t == pre.t) && (!b || b16) &&
        lt_map_linear_fwd(&x, out.p, pre.p, X.p, W, b16, N, in, out_f, act != NULL, gelu_tanh)) {
        x.ctype = (int)rt_cuda_x_type(pre.t);
        if (lt_matmul(c, &x, lt_inputs(c, &x, RT_F32, X.t))) return true;
    }
    if (N == 0) return true;
    float *sum = lt_product(c, N, out_f);
    rt_cuda_gemm_op(ctx, false, true, (int)N, out_f, in, 1.0f, X, in, 0, rt_xf(W), in, 0, 0.0f, rt_xf(sum), out_f, 0,
                    1);
    rt_cuda_bias_act(ctx, out, pre, sum, b, N, out_f, act);
    return true;
}

/* Adds an epilogue's bias gradient (written, not added, by cuBLASLt) into db. */
static void add_bgrad(rt_cuda_ctx *c, float *db, const float *g, int n) { rt_cuda_axpy(c, db, 1.0f, g, (size_t)n); }

/* dW and db are fp32 whatever dY and X hold: where cuBLASLt cannot, the wrapper's composition
 * (the gemm and bias_bwd ops, which read typed handles) runs instead. */
bool rt_cuda_linear_wgrad(void *ctx, float *dW, float *db, rt_x dY, rt_x X, size_t N, int in, int out_f) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    float *g = db ? (float *)rt_cuda_scratch(c, RT_CUDA_SCRATCH_BGRAD, (size_t)out_f * sizeof(float)) : NULL;
    lt_call x;
    if (!lt_map_linear_wgrad(&x, dW, g, dY.p, X.p, N, in, out_f)) return false;
    if (!lt_matmul(c, &x, lt_inputs(c, &x, X.t, dY.t))) return false;
    if (db) add_bgrad(c, db, g, out_f);
    return true;
}

bool rt_cuda_linear_dact(void *ctx, rt_x dpre, float *db, rt_x dY, const float *W, rt_x pre, size_t N, int in,
                         int out_f, rt_act_kind act) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    lt_call x;
    if (dpre.t == RT_F32) { /* floats out: the wrapper composes what this cannot */
        RT_CHECK(pre.t == RT_F32, "linear_dact: a %s pre-activation into fp32 dpre", rt_dtype_name(pre.t));
        float *g = db ? (float *)rt_cuda_scratch(c, RT_CUDA_SCRATCH_BGRAD, (size_t)in * sizeof(float)) : NULL;
        if (!g || !lt_map_linear_dact(&x, dpre.p, g, dY.p, W, pre.p, N, in, out_f, act == RT_ACT_GELU_TANH))
            return false;
        if (!lt_matmul(c, &x, lt_inputs(c, &x, RT_F32, dY.t))) return false;
        add_bgrad(c, db, g, in);
        return true;
    }
    /* 16-bit dpre: DGELU reads pre (aux) in dpre's type; the bias gradient sums the stored dpre */
    if (pre.t == dpre.t &&
        lt_map_linear_dact(&x, dpre.p, NULL, dY.p, W, pre.p, N, in, out_f, act == RT_ACT_GELU_TANH)) {
        x.ctype = (int)rt_cuda_x_type(dpre.t);
        if (lt_matmul(c, &x, lt_inputs(c, &x, RT_F32, dY.t))) {
            if (db) rt_cuda_bias_bwd(ctx, db, dpre, N, in);
            return true;
        }
    }
    if (N == 0) return true;
    float *g = lt_product(c, N, in);
    rt_cuda_gemm_op(ctx, false, false, (int)N, in, out_f, 1.0f, dY, out_f, 0, rt_xf(W), in, 0, 0.0f, rt_xf(g), in, 0,
                    1);
    rt_cuda_dact(ctx, act, dpre, g, pre, N * (size_t)in);
    if (db) rt_cuda_bias_bwd(ctx, db, rt_xf(g), N, in); /* from the fp32 product, as the CPU */
    return true;
}
