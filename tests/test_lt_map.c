/* The CUDA backend's cuBLASLt argument mapping (runtime/backend/cuda/cuda_lt_map.h), checked on the CPU:
 * an emulation of cuBLASLt's documented semantics (column-major op(A) op(B), strided batches,
 * the BIAS, GELU_AUX_BIAS, BGRADB and DGELU_BGRAD epilogues) run on each mapped call must give
 * what the CPU backend's row-major ops give: rt_gemm over every transpose pair with padded row
 * strides, alpha, beta and a strided batch; rt_linear_fwd with and without bias and GELU;
 * rt_linear_wgrad with and without the bias gradient; rt_linear_dact. The epilogues' rules refuse
 * what they cannot fuse, lt_alignment finds each matrix's real alignment, and a strided batch's
 * packed 16-bit copy (lt_batch_pack_of) keeps every element where its layout says. This is what can
 * be checked without a GPU; test_cuda_ops compares the real calls on one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/cuda/cuda_lt_map.h"
#include "runtime/backend/rt_backend.h"
#include "tests/testutil.h"

static double gelu_tanh(double x) {
    const double c = sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
}
static double gelu_tanh_grad(double x) {
    const double c = sqrt(2.0 / M_PI), u = c * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

/* cuBLASLt on column-major floats: D (m x n, ldc) = alpha op(A) op(B) + beta C, then the
 * epilogue (see cuda_lt_map.h), in double. */
static void lt_emulate(const lt_call *x) {
    for (int b = 0; b < x->batch; b++) {
        const float *A = (const float *)x->A + (size_t)b * x->sa, *B = (const float *)x->B + (size_t)b * x->sb;
        float *D = (float *)x->C + (size_t)b * x->sc;
        for (int j = 0; j < x->n; j++)
            for (int i = 0; i < x->m; i++) {
                double s = 0;
                for (int p = 0; p < x->k; p++) {
                    const double a = x->ta ? A[p + (size_t)i * x->lda] : A[i + (size_t)p * x->lda];
                    const double bb = x->tb ? B[j + (size_t)p * x->ldb] : B[p + (size_t)j * x->ldb];
                    s += a * bb;
                }
                double d = x->alpha * s + (x->beta != 0 ? x->beta * D[i + (size_t)j * x->ldc] : 0.0);
                const float *bias = (const float *)x->bias;
                float *aux = (float *)x->aux;
                if (x->epilogue == LT_EPI_BIAS) d += bias[i];
                if (x->epilogue == LT_EPI_GELU_AUX_BIAS) {
                    aux[i + (size_t)j * x->ldaux] = (float)(d + bias[i]);
                    d = gelu_tanh(d + bias[i]);
                }
                if (x->epilogue == LT_EPI_DGELU_BGRAD || x->epilogue == LT_EPI_DGELU)
                    d *= gelu_tanh_grad(aux[i + (size_t)j * x->ldaux]);
                D[i + (size_t)j * x->ldc] = (float)d;
            }
        float *bias = (float *)x->bias;
        if (x->epilogue == LT_EPI_BGRADB) /* bias (n): op(B) summed over k */
            for (int j = 0; j < x->n; j++) {
                double s = 0;
                for (int p = 0; p < x->k; p++) s += x->tb ? B[j + (size_t)p * x->ldb] : B[p + (size_t)j * x->ldb];
                bias[j] = (float)s;
            }
        if (x->epilogue == LT_EPI_DGELU_BGRAD) /* bias (m): D summed over n */
            for (int i = 0; i < x->m; i++) {
                double s = 0;
                for (int j = 0; j < x->n; j++) s += D[i + (size_t)j * x->ldc];
                bias[i] = (float)s;
            }
    }
}

static float *filled(size_t n, unsigned *st) {
    float *p = rt_xmalloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = 2.0f * tz_uniform(st) - 1.0f;
    return p;
}

#define TOL 1e-5f

/* rt_gemm against the mapped call, over a strided batch with padded row strides. */
static void check_gemm(rt_backend *be, bool ta, bool tb, int batch) {
    enum { M = 5, N = 7, K = 4 };
    unsigned st = 3 + 2 * ta + tb + 4 * (unsigned)batch;
    const int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    const int lda = a_cols + 3, ldb = b_cols + 2, ldc = N + 1;
    const size_t sa = (size_t)a_rows * lda + 5, sb = (size_t)b_rows * ldb + 1, sc = (size_t)M * ldc + 3;
    float *A = filled(sa * batch, &st), *B = filled(sb * batch, &st), *C = filled(sc * batch, &st);
    float *want = rt_xmalloc(sc * batch * sizeof *want);
    memcpy(want, C, sc * batch * sizeof *C);
    rt_gemm(be, ta, tb, M, N, K, 0.5f, rt_xf(A), lda, sa, rt_xf(B), ldb, sb, 0.25f, rt_xf(want), ldc, sc, batch);
    const lt_call x = lt_map_row_major(ta, tb, M, N, K, 0.5f, A, lda, sa, B, ldb, sb, 0.25f, C, ldc, sc, batch);
    lt_emulate(&x);
    char what[80];
    snprintf(what, sizeof what, "gemm trans %d %d, batch %d", ta, tb, batch);
    tz_check_close(what, C, want, sc * batch, TOL, TOL);
    /* the layouts cuBLASLt is told: A and B swap, M and N swap */
    const lt_layout_dims la = lt_dims_a(&x), lb = lt_dims_b(&x), lc = lt_dims_c(&x);
    TZ_EXPECT(la.rows == b_cols && la.cols == b_rows && la.ld == ldb && lb.rows == a_cols && lb.cols == a_rows &&
                  lb.ld == lda && lc.rows == N && lc.cols == M && lc.ld == ldc,
              "%s: layouts A %dx%d/%lld, B %dx%d/%lld, C %dx%d/%lld", what, la.rows, la.cols, (long long)la.ld, lb.rows,
              lb.cols, (long long)lb.ld, lc.rows, lc.cols, (long long)lc.ld);
    free(A);
    free(B);
    free(C);
    free(want);
}

/* The fused linear ops against the CPU's composition of the plain ops. */
static void check_linear(rt_backend *be, bool bias, bool act) {
    enum { NR = 6, IN = 16, OUT = 24 };
    unsigned st = 11 + bias + 2 * act;
    float *X = filled(NR * IN, &st), *W = filled(OUT * IN, &st), *b = filled(OUT, &st);
    float *out = rt_xcalloc(NR * OUT, sizeof *out), *pre = rt_xcalloc(NR * OUT, sizeof *pre);
    float *want_out = rt_xcalloc(NR * OUT, sizeof *want_out), *want_pre = rt_xcalloc(NR * OUT, sizeof *want_pre);
    const rt_act_kind gelu = RT_ACT_GELU_TANH;
    rt_linear_fwd(be, rt_xf(want_out), rt_xf(want_pre), rt_xf(X), W, bias ? b : NULL, NR, IN, OUT, act ? &gelu : NULL);
    lt_call x;
    const bool fused = lt_map_linear_fwd(&x, out, pre, X, W, bias ? b : NULL, NR, IN, OUT, act, true);
    char what[80];
    snprintf(what, sizeof what, "linear_fwd bias %d act %d", bias, act);
    TZ_EXPECT(fused == (!act || bias), "%s: fused %d", what, fused);
    if (fused) {
        TZ_EXPECT(x.epilogue == (act    ? LT_EPI_GELU_AUX_BIAS
                                 : bias ? LT_EPI_BIAS
                                        : LT_EPI_DEFAULT),
                  "%s: epilogue %d", what, (int)x.epilogue);
        lt_emulate(&x);
        tz_check_close(what, act ? out : pre, act ? want_out : want_pre, NR * OUT, TOL, TOL);
        if (act) tz_check_close("linear_fwd's kept pre-activation (aux)", pre, want_pre, NR * OUT, TOL, TOL);
    }
    free(X);
    free(W);
    free(b);
    free(out);
    free(pre);
    free(want_out);
    free(want_pre);
}

static void check_wgrad(rt_backend *be, bool with_db) {
    enum { NR = 9, IN = 12, OUT = 8 };
    unsigned st = 21 + with_db;
    float *dY = filled(NR * OUT, &st), *X = filled(NR * IN, &st), *dW = filled(OUT * IN, &st);
    float *want = rt_xmalloc(OUT * IN * sizeof *want), *db = rt_xcalloc(OUT, sizeof *db), *g = rt_xcalloc(OUT, 4);
    memcpy(want, dW, OUT * IN * sizeof *dW);
    rt_linear_wgrad(be, want, with_db ? db : NULL, rt_xf(dY), rt_xf(X), NR, IN, OUT);
    lt_call x;
    TZ_EXPECT(lt_map_linear_wgrad(&x, dW, with_db ? g : NULL, dY, X, NR, IN, OUT), "wgrad refused");
    lt_emulate(&x);
    tz_check_close(with_db ? "linear_wgrad dW (with BGRADB)" : "linear_wgrad dW", dW, want, OUT * IN, TOL, TOL);
    if (with_db) tz_check_close("linear_wgrad db (BGRADB)", g, db, OUT, TOL, TOL);
    free(dY);
    free(X);
    free(dW);
    free(want);
    free(db);
    free(g);
}

static void check_dact(rt_backend *be) {
    enum { NR = 7, IN = 16, OUT = 10 };
    unsigned st = 31;
    float *dY = filled(NR * OUT, &st), *W = filled(OUT * IN, &st), *pre = filled(NR * IN, &st);
    float *dpre = rt_xcalloc(NR * IN, sizeof *dpre), *want = rt_xcalloc(NR * IN, sizeof *want);
    float *db = rt_xcalloc(IN, sizeof *db), *g = rt_xcalloc(IN, sizeof *g);
    rt_linear_dact(be, rt_xf(want), db, rt_xf(dY), W, rt_xf(pre), NR, IN, OUT, RT_ACT_GELU_TANH);
    lt_call x;
    TZ_EXPECT(lt_map_linear_dact(&x, dpre, g, dY, W, pre, NR, IN, OUT, true), "dact refused");
    lt_emulate(&x);
    tz_check_close("linear_dact dpre (DGELU_BGRAD)", dpre, want, NR * IN, TOL, TOL);
    tz_check_close("linear_dact db (DGELU_BGRAD)", g, db, IN, TOL, TOL);
    /* without a bias gradient (the 16-bit path sums the stored dpre itself): DGELU alone */
    memset(dpre, 0, NR * IN * sizeof *dpre);
    TZ_EXPECT(lt_map_linear_dact(&x, dpre, NULL, dY, W, pre, NR, IN, OUT, true), "dact without bgrad refused");
    TZ_EXPECT(x.epilogue == LT_EPI_DGELU && x.bias == NULL, "dact without bgrad: epilogue %d", (int)x.epilogue);
    lt_emulate(&x);
    tz_check_close("linear_dact dpre (DGELU)", dpre, want, NR * IN, TOL, TOL);
    free(dY);
    free(W);
    free(pre);
    free(dpre);
    free(want);
    free(db);
    free(g);
}

/* What the epilogues cannot take goes back to the composed ops. */
static void check_refusals(void) {
    float f[64];
    lt_call x;
    TZ_EXPECT(!lt_map_linear_fwd(&x, f, f, f, f, f, 4, 8, 12, true, true), "GELU with out_f 12 (not a multiple of 8)");
    TZ_EXPECT(!lt_map_linear_fwd(&x, f, f, f, f, f, 4, 8, 16, true, false), "erf GELU (cuBLASLt's is tanh)");
    TZ_EXPECT(!lt_map_linear_fwd(&x, f, f, f, f, NULL, 4, 8, 16, true, true), "GELU without a bias");
    TZ_EXPECT(!lt_map_linear_fwd(&x, f, f, f, f, f, 0, 8, 16, false, true), "no rows");
    TZ_EXPECT(!lt_map_linear_dact(&x, f, f, f, f, f, 4, 12, 8, true), "dact with in 12");
    TZ_EXPECT(!lt_map_linear_dact(&x, f, f, f, f, f, 4, 16, 8, false), "dact with erf GELU");
    TZ_EXPECT(!lt_map_linear_wgrad(&x, f, f, f, f, 0, 8, 8), "wgrad over no rows");
}

static void check_alignment(void) {
    TZ_EXPECT(lt_alignment((void *)0x1000, 0, 4, 1) == 256, "a 4 KiB-aligned matrix: 256");
    TZ_EXPECT(lt_alignment((void *)0x1004, 0, 4, 1) == 4, "a float at an odd slot: 4");
    TZ_EXPECT(lt_alignment((void *)0x1010, 0, 2, 1) == 16, "16 bytes");
    TZ_EXPECT(lt_alignment((void *)0x1000, 6, 4, 3) == 8, "a batch stride of 6 floats: 8");
    TZ_EXPECT(lt_alignment((void *)0x1000, 6, 4, 1) == 256, "the stride of a batch of one does not count");
}

/* lt_batch_pack_of: the packed copy, made as the CUDA backend makes it (width rows of height
 * values at row stride src_ld, packed), holds every element of every matrix of the batch where
 * the packed layout (ld, the same stride) says; heads side by side copy only their columns'
 * height, a batch of matrices one after another its whole span. */
static void check_batch_pack(void) {
    static const struct {
        int rows, cols, ld, batch, stride;
        bool side_by_side;
    } cases[] = {
        {8, 5, 96, 4, 8, true},  /* q's 4 heads of 8 in a fused qkv buffer (rows of 3 x 32) */
        {8, 5, 32, 4, 8, true},  /* heads filling the leading dimension exactly */
        {6, 4, 7, 3, 28, false}, /* matrices one after another (stride = cols x ld) */
        {6, 4, 6, 2, 30, false}, /* with a gap between them */
        {5, 3, 9, 1, 0, true},   /* a batch of one */
        {4, 3, 20, 3, 0, true},  /* a broadcast operand (stride 0) */
    };
    for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
        const lt_layout_dims d = {cases[t].rows, cases[t].cols, cases[t].ld};
        const int batch = cases[t].batch, stride = cases[t].stride;
        const lt_batch_pack p = lt_batch_pack_of(d, batch, stride);
        TZ_EXPECT((p.width > 1 || d.cols == 1) == cases[t].side_by_side, "case %zu: packed as %s", t,
                  p.width > 1 ? "side by side" : "a span");
        const size_t src_n =
            (size_t)(batch - 1) * (size_t)stride + (size_t)(d.cols - 1) * (size_t)d.ld + (size_t)d.rows;
        float *src = rt_xmalloc(src_n * sizeof(float)),
              *packed = rt_xmalloc((size_t)(p.height * p.width) * sizeof(float));
        for (size_t i = 0; i < src_n; i++) src[i] = (float)i;
        for (int64_t w = 0; w < p.width; w++) /* what rt_cuda_round_input(width, height, src_ld) writes */
            for (int64_t e = 0; e < p.height; e++) packed[w * p.height + e] = src[w * p.src_ld + e];
        int bad = 0;
        for (int b = 0; b < batch; b++)
            for (int j = 0; j < d.cols; j++)
                for (int i = 0; i < d.rows; i++) {
                    const size_t at_src = (size_t)b * stride + (size_t)j * d.ld + i;
                    const size_t at_packed = (size_t)b * stride + (size_t)j * p.ld + i;
                    bad += at_packed >= (size_t)(p.height * p.width) || packed[at_packed] != src[at_src];
                }
        TZ_EXPECT(bad == 0, "case %zu: %d elements not where the packed layout says", t, bad);
        TZ_EXPECT((size_t)(p.height * p.width) <= src_n, "case %zu: the copy (%lld) is larger than the span (%zu)", t,
                  (long long)(p.height * p.width), src_n);
        free(src), free(packed);
    }
}

int main(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_cpu_backend_init(1, &be));
    if (!be) return tz_test_result("test_lt_map");
    for (int t = 0; t < 4; t++) {
        check_gemm(be, t & 1, t >> 1, 1);
        check_gemm(be, t & 1, t >> 1, 3);
    }
    for (int t = 0; t < 4; t++) check_linear(be, t & 1, t >> 1);
    check_wgrad(be, false);
    check_wgrad(be, true);
    check_dact(be);
    check_refusals();
    check_alignment();
    check_batch_pack();
    rt_backend_free(be);
    return tz_test_result("test_lt_map");
}
