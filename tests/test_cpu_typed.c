/* Typed activations (runtime/rt_x.h) on the CPU backend: every op that takes rt_x handles, given
 * 16-bit ones (bf16 and fp16), gives the bits its fp32 handles give once the wrappers have stored
 * them at the compute precision. So keeping an activation in 2 bytes changes no number:
 *   - gemm with a 16-bit A or B (transposed or not, padded leading dimensions, strided batches),
 *     a 16-bit C written and accumulated into (beta);
 *   - linear_fwd (with and without bias, each activation, and without one), linear_dact with its
 *     bias gradient, linear_wgrad's weight and bias gradients;
 *   - act_fwd/act_bwd (each kind), gated_act_fwd/bwd, dropout_cols (a column shard, in place),
 *     bias_bwd.
 * Inputs are values of the compute type (what an activation holds), the fp32 reference's copies
 * of them floats. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/rt_backend.h"
#include "runtime/rt_dtype.h"
#include "tests/testutil.h"

static rt_backend *be;
static rt_dtype dt;

/* A pair of buffers holding the same n values: f (floats) and h (dtype). */
typedef struct {
    float *f;
    uint16_t *h;
    size_t n;
} pair;

static pair pair_new(size_t n, unsigned *seed, float scale) {
    pair p = {calloc(n, sizeof(float)), calloc(n, sizeof(uint16_t)), n};
    for (size_t i = 0; i < n; i++) {
        float v = rt_round_to(dt, scale * tz_uniform(seed));
        p.f[i] = v;
        p.h[i] = dt == RT_BF16 ? rt_f32_to_bf16(v) : rt_f32_to_f16(v);
    }
    return p;
}
static void pair_free(pair *p) {
    free(p->f);
    free(p->h);
}
static rt_x xf(pair *p) { return rt_xf(p->f); }
static rt_x xh(pair *p) { return rt_x_of(p->h, dt); }

/* The 16-bit buffer's values equal the fp32 one's, bit for bit (so rounding the fp32 one gave the
 * same value the op narrowed to). */
static void expect_same(const char *what, const pair *p) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < p->n; i++) {
        float h = dt == RT_BF16 ? rt_bf16_to_f32(p->h[i]) : rt_f16_to_f32(p->h[i]);
        if (rt_f32_bits(h) != rt_f32_bits(p->f[i]) && !(h != h && p->f[i] != p->f[i]) && !bad++) first = i;
    }
    TZ_EXPECT(bad == 0, "%s %s: %zu of %zu values differ (first at %zu: 16-bit %g, fp32 %g)", rt_dtype_name(dt), what,
              bad, p->n, first,
              (double)(dt == RT_BF16 ? rt_bf16_to_f32(p->h[first]) : rt_f16_to_f32(p->h[first])),
              (double)p->f[first]);
}
static void expect_floats(const char *what, const float *a, const float *b, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += rt_f32_bits(a[i]) != rt_f32_bits(b[i]);
    TZ_EXPECT(bad == 0, "%s %s: %zu of %zu fp32 sums differ", rt_dtype_name(dt), what, bad, n);
}

static void check_gemm(bool ta, bool tb, int batch, float beta, int which16) {
    const int M = 19, N = 37, K = 70;
    const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 5;
    const size_t sa = (size_t)(ta ? K : M) * lda, sb = (size_t)(tb ? N : K) * ldb, sc = (size_t)M * ldc;
    unsigned seed = 7 + 3 * ta + 5 * tb + (unsigned)batch;
    pair A = pair_new(sa * batch, &seed, 1.0f), B = pair_new(sb * batch, &seed, 1.0f);
    pair C = pair_new(sc * batch, &seed, 1.0f);
    rt_gemm(be, ta, tb, M, N, K, 0.5f, xf(&A), lda, sa, xf(&B), ldb, sb, beta, xf(&C), ldc, sc, batch);
    rt_gemm(be, ta, tb, M, N, K, 0.5f, which16 & 1 ? xh(&A) : xf(&A), lda, sa, which16 & 2 ? xh(&B) : xf(&B), ldb, sb,
            beta, xh(&C), ldc, sc, batch);
    char what[96];
    snprintf(what, sizeof what, "gemm ta=%d tb=%d batch=%d beta=%g 16-bit%s%s C", ta, tb, batch, (double)beta,
             which16 & 1 ? " A" : "", which16 & 2 ? " B" : "");
    expect_same(what, &C);
    pair_free(&A);
    pair_free(&B);
    pair_free(&C);
}

static void check_linear(bool bias, const rt_act_kind *act) {
    const int N = 23, in = 48, out_f = 80;
    unsigned seed = 31 + (unsigned)bias + (act ? 2u * *act : 9u);
    pair X = pair_new((size_t)N * in, &seed, 1.0f);
    float *W = malloc(sizeof(float) * out_f * in), *b = malloc(sizeof(float) * out_f);
    for (int i = 0; i < out_f * in; i++) W[i] = 0.2f * tz_uniform(&seed);
    for (int i = 0; i < out_f; i++) b[i] = tz_uniform(&seed);
    pair pre = pair_new((size_t)N * out_f, &seed, 0.0f), out = pair_new((size_t)N * out_f, &seed, 0.0f);
    rt_linear_fwd(be, act ? xf(&out) : rt_xf(NULL), xf(&pre), xf(&X), W, bias ? b : NULL, N, in, out_f, act);
    rt_linear_fwd(be, act ? xh(&out) : rt_xf(NULL), xh(&pre), xh(&X), W, bias ? b : NULL, N, in, out_f, act);
    char what[64];
    snprintf(what, sizeof what, "linear_fwd bias=%d act=%d: pre", bias, act ? (int)*act : -1);
    expect_same(what, &pre);
    if (act) {
        snprintf(what, sizeof what, "linear_fwd bias=%d act=%d: out", bias, (int)*act);
        expect_same(what, &out);
        /* its backward through the activation: dpre = act'(pre) * (dY W), and the bias gradient */
        pair dY = pair_new((size_t)N * in, &seed, 1.0f), dpre = pair_new((size_t)N * out_f, &seed, 0.0f);
        float *W2 = malloc(sizeof(float) * in * out_f), db[2][80] = {{0}};
        for (int i = 0; i < in * out_f; i++) W2[i] = 0.2f * tz_uniform(&seed);
        rt_linear_dact(be, xf(&dpre), db[0], xf(&dY), W2, xf(&pre), N, out_f, in, *act);
        rt_linear_dact(be, xh(&dpre), db[1], xh(&dY), W2, xh(&pre), N, out_f, in, *act);
        snprintf(what, sizeof what, "linear_dact act=%d: dpre", (int)*act);
        expect_same(what, &dpre);
        expect_floats("linear_dact's bias gradient", db[0], db[1], (size_t)out_f);
        /* the weight gradient from 16-bit dY and X */
        float *dW[2] = {calloc((size_t)out_f * in, 4), calloc((size_t)out_f * in, 4)}, dbw[2][80] = {{0}};
        rt_linear_wgrad(be, dW[0], dbw[0], xf(&dpre), xf(&X), N, in, out_f);
        rt_linear_wgrad(be, dW[1], dbw[1], xh(&dpre), xh(&X), N, in, out_f);
        expect_floats("linear_wgrad's weight gradient", dW[0], dW[1], (size_t)out_f * in);
        expect_floats("linear_wgrad's bias gradient", dbw[0], dbw[1], (size_t)out_f);
        free(dW[0]);
        free(dW[1]);
        free(W2);
        pair_free(&dY);
        pair_free(&dpre);
    }
    free(W);
    free(b);
    pair_free(&X);
    pair_free(&pre);
    pair_free(&out);
}

static void check_elementwise(void) {
    const size_t n = 3000; /* past one run of the kernels (1024) and not a multiple of it */
    unsigned seed = 5;
    pair x = pair_new(n, &seed, 3.0f), g = pair_new(n, &seed, 1.0f), dy = pair_new(n, &seed, 1.0f);
    pair y = pair_new(n, &seed, 0.0f), y2 = pair_new(n, &seed, 0.0f);
    for (int k = RT_ACT_GELU_TANH; k <= RT_ACT_TANH; k++) {
        char what[48];
        rt_act_fwd(be, (rt_act_kind)k, xf(&y), xf(&x), n);
        rt_act_fwd(be, (rt_act_kind)k, xh(&y), xh(&x), n);
        snprintf(what, sizeof what, "act_fwd kind %d", k);
        expect_same(what, &y);
        rt_act_bwd(be, (rt_act_kind)k, xf(&y), xf(&x), xf(&dy), n);
        rt_act_bwd(be, (rt_act_kind)k, xh(&y), xh(&x), xh(&dy), n);
        snprintf(what, sizeof what, "act_bwd kind %d", k);
        expect_same(what, &y);
        rt_gated_act_fwd(be, (rt_act_kind)k, xf(&y), xf(&x), xf(&g), n);
        rt_gated_act_fwd(be, (rt_act_kind)k, xh(&y), xh(&x), xh(&g), n);
        snprintf(what, sizeof what, "gated_act_fwd kind %d", k);
        expect_same(what, &y);
        rt_gated_act_bwd(be, (rt_act_kind)k, xf(&y), xf(&y2), xf(&x), xf(&g), xf(&dy), n);
        rt_gated_act_bwd(be, (rt_act_kind)k, xh(&y), xh(&y2), xh(&x), xh(&g), xh(&dy), n);
        snprintf(what, sizeof what, "gated_act_bwd kind %d: dgate", k);
        expect_same(what, &y);
        snprintf(what, sizeof what, "gated_act_bwd kind %d: dlin", k);
        expect_same(what, &y2);
    }
    /* a (rows, 40) column shard of a (rows, 120) matrix at column 40, in place */
    const size_t rows = n / 40;
    rt_dropout_cols(be, xf(&x), xf(&x), rows, 40, 120, 40, 0.3f, 11, 2);
    rt_dropout_cols(be, xh(&x), xh(&x), rows, 40, 120, 40, 0.3f, 11, 2);
    expect_same("dropout_cols", &x);
    float db[2][40] = {{0}};
    rt_bias_bwd(be, db[0], xf(&dy), rows, 40);
    rt_bias_bwd(be, db[1], xh(&dy), rows, 40);
    expect_floats("bias_bwd", db[0], db[1], 40);
    pair_free(&x);
    pair_free(&g);
    pair_free(&dy);
    pair_free(&y);
    pair_free(&y2);
}

int main(void) {
    TZ_EXPECT_OK(rt_cpu_backend_init(2, &be));
    const rt_dtype types[2] = {RT_BF16, RT_F16};
    for (int t = 0; t < 2; t++) {
        dt = types[t];
        TZ_EXPECT_OK(rt_set_precision(be, dt));
        for (int tr = 0; tr < 4; tr++)
            for (int which = 1; which <= 3; which++) check_gemm(tr & 1, tr >> 1, 1, 0.0f, which);
        check_gemm(false, true, 3, 0.0f, 3);
        check_gemm(true, false, 2, 0.5f, 1);
        check_gemm(false, false, 1, 1.0f, 2);
        const rt_act_kind acts[4] = {RT_ACT_GELU_TANH, RT_ACT_GELU_ERF, RT_ACT_RELU, RT_ACT_TANH};
        for (int a = 0; a < 4; a++) check_linear(a % 2 == 0, &acts[a]);
        check_linear(true, NULL);
        check_linear(false, NULL);
        check_elementwise();
    }
    rt_backend_free(be);
    return tz_test_result("test_cpu_typed");
}
