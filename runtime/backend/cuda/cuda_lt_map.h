/* How the CUDA backend's matmuls map onto cuBLASLt's arguments, as pure functions of plain C, so
 * that a CPU test (tests/test_cuda_lt_map.c) checks the mapping against the CPU backend with an
 * emulation of cuBLASLt's documented semantics, on machines without a GPU. cuda_lt.cu turns an
 * lt_call into the library's descriptors and runs it.
 *
 * Row-major to cuBLASLt's column-major: a row-major (r x c) matrix with row stride ld is a
 * column-major (c x r) one with the same ld, so C = op(A) op(B) row-major is C^T = op(B)^T
 * op(A)^T column-major: B goes first, A second, M and N swap, each keeps its own transpose.
 *
 * The epilogues, in column-major terms of D (m x n):
 *   BIAS           D += bias (m) on every column;
 *   GELU_AUX_BIAS  aux (m x n, ldaux) = D + bias, then D = GELU-tanh(aux);
 *   BGRADB         bias (n) = the sums of op(B) over k (the gradient of a bias on B's side);
 *   DGELU_BGRAD    D = D * GELU-tanh'(aux), then bias (m) = D's sums over n;
 *   DGELU          D = D * GELU-tanh'(aux), no bias gradient.
 * D (and C, and aux, and a bias or its gradient, which follow D's type) holds floats or 16-bit
 * values (ctype); the sums and the epilogue run in fp32 either way. */
#ifndef RT_CUDA_LT_MAP_H
#define RT_CUDA_LT_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    LT_EPI_DEFAULT = 0,
    LT_EPI_BIAS,
    LT_EPI_GELU_AUX_BIAS,
    LT_EPI_BGRADB,
    LT_EPI_DGELU_BGRAD,
    LT_EPI_DGELU
} lt_epilogue;

/* One cuBLASLt call in column-major terms: D (m x n, ldc) = alpha op(A) op(B) + beta C, where
 * op(A) is m x k and op(B) is k x n; batch > 1 uses the strides (elements). D is C. */
typedef struct {
    bool ta, tb;
    int m, n, k, batch;
    const void *A, *B;
    int64_t lda, ldb, ldc;
    long long sa, sb, sc;
    float alpha, beta;
    void *C;
    int ctype; /* C and D's values as a cudaDataType_t: 0 (CUDA_R_32F) floats, or the 16-bit compute type */
    lt_epilogue epilogue;
    const void *bias; /* BIAS, GELU_AUX_BIAS: the bias; BGRADB, DGELU_BGRAD: where its gradient is written */
    void *aux;        /* GELU_AUX_BIAS: the pre-activation written; DGELU_BGRAD: read */
    int64_t ldaux;
} lt_call;

/* A column-major matrix as cuBLASLt's layout describes it: rows, columns, leading dimension. */
typedef struct {
    int rows, cols;
    int64_t ld;
} lt_layout_dims;

static inline lt_layout_dims lt_dims_a(const lt_call *x) {
    const lt_layout_dims d = {x->ta ? x->k : x->m, x->ta ? x->m : x->k, x->lda};
    return d;
}
static inline lt_layout_dims lt_dims_b(const lt_call *x) {
    const lt_layout_dims d = {x->tb ? x->n : x->k, x->tb ? x->k : x->n, x->ldb};
    return d;
}
static inline lt_layout_dims lt_dims_c(const lt_call *x) {
    const lt_layout_dims d = {x->m, x->n, x->ldc};
    return d;
}

/* The row-major product C (M x N, ldc) = alpha op(A) op(B) + beta C as an lt_call: B first, A
 * second. */
static inline lt_call lt_map_row_major(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void *A,
                                       int lda, size_t stride_a, const void *B, int ldb, size_t stride_b, float beta,
                                       void *C, int ldc, size_t stride_c, int batch) {
    lt_call x;
    memset(&x, 0, sizeof x);
    x.ta = trans_b, x.tb = trans_a, x.m = N, x.n = M, x.k = K, x.batch = batch;
    x.A = B, x.B = A, x.lda = ldb, x.ldb = lda, x.ldc = ldc;
    x.sa = (long long)stride_b, x.sb = (long long)stride_a, x.sc = (long long)stride_c;
    x.alpha = alpha, x.beta = beta, x.C = C, x.epilogue = LT_EPI_DEFAULT;
    return x;
}

/* The fused linear ops of runtime/backend/rt_backend.h as calls; each false where its epilogue's rules
 * refuse the arguments (the wrapper then composes the plain ops). Row-major X (N, in), W (out_f,
 * in), dY (N, out_f). gelu_tanh: the activation is GELU's tanh form, the only one cuBLASLt has. */

/* linear_fwd: pre = X W^T + b, and with an activation out = GELU(pre) and pre kept (aux). */
static inline bool lt_map_linear_fwd(lt_call *x, void *out, void *pre, const void *X, const void *W, const void *b,
                                     size_t N, int in, int out_f, bool act, bool gelu_tanh) {
    if (N == 0 || N > INT32_MAX || in == 0) return false;
    if (act && (!gelu_tanh || !b || out_f % 8 != 0)) return false; /* only GELU_AUX_BIAS fuses */
    *x = lt_map_row_major(false, true, (int)N, out_f, in, 1.0f, X, in, 0, W, in, 0, 0.0f, act ? out : pre, out_f, 0, 1);
    x->bias = b;
    x->epilogue = act ? LT_EPI_GELU_AUX_BIAS : b ? LT_EPI_BIAS : LT_EPI_DEFAULT;
    if (act) x->aux = pre, x->ldaux = out_f;
    return true;
}

/* linear_wgrad: dW (out_f x in) += dY^T X, and with bgrad the column sums of dY written there
 * (the caller adds them into db). */
static inline bool lt_map_linear_wgrad(lt_call *x, float *dW, float *bgrad, const void *dY, const void *X, size_t N,
                                       int in, int out_f) {
    if (N == 0 || N > INT32_MAX) return false;
    *x = lt_map_row_major(true, false, out_f, in, (int)N, 1.0f, dY, out_f, 0, X, in, 0, 1.0f, dW, in, 0, 1);
    if (bgrad) x->bias = bgrad, x->epilogue = LT_EPI_BGRADB; /* the sums of dY, op(B) here, over the rows */
    return true;
}

/* linear_dact: dpre (N x in) = GELU'(pre) * (dY W), and with bgrad the column sums of dpre written
 * there (NULL: DGELU alone, the caller sums what it needs). */
static inline bool lt_map_linear_dact(lt_call *x, void *dpre, void *bgrad, const void *dY, const void *W,
                                      const void *pre, size_t N, int in, int out_f, bool gelu_tanh) {
    if (N == 0 || N > INT32_MAX || !gelu_tanh || in % 8 != 0) return false;
    *x = lt_map_row_major(false, false, (int)N, in, out_f, 1.0f, dY, out_f, 0, W, in, 0, 0.0f, dpre, in, 0, 1);
    x->epilogue = bgrad ? LT_EPI_DGELU_BGRAD : LT_EPI_DGELU, x->bias = bgrad, x->aux = (void *)pre, x->ldaux = in;
    return true;
}

/* How a strided batch of column-major matrices (d, `batch` of them `stride` elements apart) is
 * copied into a packed buffer (its 16-bit copy) that is still a strided batch: `width` columns of
 * `height` elements, read at leading dimension src_ld and written at leading dimension ld; the
 * batch stride stays. Matrices side by side within the leading dimension (attention's heads in
 * q, k or v: stride (batch - 1) + rows <= ld) copy only those columns' first `height` =
 * stride (batch - 1) + rows elements, so q in a fused qkv buffer costs a third of its rows'
 * span; any other batch copies its whole span as one column, every offset kept. */
typedef struct {
    int64_t height, width, src_ld, ld;
} lt_batch_pack;

static inline lt_batch_pack lt_batch_pack_of(lt_layout_dims d, int batch, long long stride) {
    lt_batch_pack p;
    const int64_t side_by_side = (int64_t)stride * (batch - 1) + d.rows;
    if (stride >= 0 && side_by_side <= d.ld) {
        p.height = side_by_side, p.width = d.cols, p.src_ld = d.ld, p.ld = side_by_side;
    } else {
        const int64_t span = (int64_t)(batch - 1) * stride + (int64_t)(d.cols - 1) * d.ld + d.rows;
        p.height = span, p.width = 1, p.src_ld = span, p.ld = d.ld;
    }
    return p;
}

/* The largest power of two up to 256 dividing a matrix's byte address (and, batched, its byte
 * stride): what cuBLASLt may assume of its alignment. Its default assumption is 256, which would
 * let the heuristic pick a kernel that faults on a weight at an odd offset in the slab or on a
 * 16-bit copy's block. */
static inline uint32_t lt_alignment(const void *p, long long stride, size_t elem_bytes, int batch) {
    uint64_t bits = (uint64_t)(uintptr_t)p | 256u;
    if (batch > 1) bits |= (uint64_t)stride * elem_bytes;
    return (uint32_t)(bits & (~bits + 1)); /* the lowest set bit */
}

#endif
