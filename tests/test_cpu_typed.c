/* Typed activations (runtime/backend/rt_x.h) on the CPU backend: every op that takes rt_x handles, given
 * 16-bit ones (bf16 and fp16), gives the bits its fp32 handles give once the wrappers have stored
 * them at the compute precision. So keeping an activation in 2 bytes changes no number:
 *   - gemm with a 16-bit A or B (transposed or not, padded leading dimensions, strided batches),
 *     a 16-bit C written and accumulated into (beta);
 *   - linear_fwd (with and without bias, each activation, and without one), linear_dact with its
 *     bias gradient, linear_wgrad's weight and bias gradients;
 *   - act_fwd/act_bwd (each kind), gated_act_fwd/bwd, dropout_cols (a column shard, in place),
 *     add (16-bit and fp32 handles mixed, out over a), bias_bwd, scatter_rows_add;
 *   - the norms' and the fused residual step's 16-bit outputs (LayerNorm and RMSNorm), and the
 *     norms' backward from a 16-bit output gradient;
 *   - attention forward and backward over 16-bit q, k, v (views into one fused buffer), out,
 *     dout and dq, dk, dv, with a key mask, causal with dropout, and with a position bias and its
 *     gradient;
 *   - the LM head's chunk: xent_vocab's three phases over 16-bit logits (rows past one run, the
 *     padding columns masked, a row ignored) writing 16-bit dL/dlogits over them, then scale_rows
 *     (whose fp32 result a matmul reads rounded: compared rounded).
 * Inputs are values of the compute type (what an activation holds), the fp32 reference's copies
 * of them floats. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/rt_backend.h"
#include "runtime/base/rt_dtype.h"
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
              bad, p->n, first, (double)(dt == RT_BF16 ? rt_bf16_to_f32(p->h[first]) : rt_f16_to_f32(p->h[first])),
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
    rt_dropout_cols(be, xf(&x), xf(&x), rows, 40, 120, 40, 0.3f, 11, 2, NULL);
    rt_dropout_cols(be, xh(&x), xh(&x), rows, 40, 120, 40, 0.3f, 11, 2, NULL);
    expect_same("dropout_cols", &x);
    /* add: out over a 16-bit a with an fp32 b (a sublayer's dX and LoRA's dropped part), and into
     * a 16-bit out from an fp32 a and a 16-bit b */
    rt_add(be, xf(&y), xf(&y), rt_xf(dy.f), n);
    rt_add(be, xh(&y), xh(&y), rt_xf(dy.f), n);
    expect_same("add over a", &y);
    rt_add(be, xf(&y2), rt_xf(dy.f), xf(&g), n);
    rt_add(be, xh(&y2), rt_xf(dy.f), xh(&g), n);
    expect_same("add of an fp32 and a 16-bit handle", &y2);
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

static void check_xent(void) {
    enum { N = 5, V = 2500 }; /* past two runs of the kernels (1024), not a multiple of one */
    unsigned seed = 9;
    pair x = pair_new((size_t)N * V, &seed, 8.0f);
    float mask[V] = {0}, stats[2][3 * N], loss[2][N], w[N] = {0.5f, 3.0f, -1.25f, 1.0f, 0.1f};
    for (int j = V - 40; j < V; j++) mask[j] = -1e30f;
    const int32_t targets[N] = {0, 1500, -100, 2459, 1023};
    for (int side = 0; side < 2; side++) {
        const rt_x logits = side ? xh(&x) : xf(&x); /* dL/dlogits written over them */
        for (int ph = 0; ph < 3; ph++)
            rt_xent_vocab(be, ph, stats[side], loss[side], logits, logits, mask, targets, N, V, 0, 0.25f);
        rt_scale_rows(be, logits, w, N, V);
    }
    expect_floats("xent_vocab statistics", stats[0], stats[1], 3 * N);
    expect_floats("xent_vocab losses", loss[0], loss[1], N);
    for (size_t i = 0; i < x.n; i++) x.f[i] = rt_round_to(dt, x.f[i]);
    expect_same("xent_vocab dlogits, scale_rows", &x);
    pair_free(&x);
}

static void check_norms(void) {
    const int N = 37, C = 96;
    unsigned seed = 3;
    pair x = pair_new((size_t)N * C, &seed, 2.0f), y = pair_new((size_t)N * C, &seed, 0.0f);
    float *w = malloc(sizeof(float) * C), *b = malloc(sizeof(float) * C), *res = malloc(sizeof(float) * N * C);
    float *sum = malloc(sizeof(float) * N * C), st[4][37];
    for (int c = 0; c < C; c++) w[c] = 1 + 0.1f * tz_uniform(&seed), b[c] = 0.1f * tz_uniform(&seed);
    for (int i = 0; i < N * C; i++) res[i] = rt_round_to(dt, tz_uniform(&seed));
    rt_layernorm_fwd(be, xf(&y), st[0], st[1], rt_xf(x.f), w, b, N, C, 1e-5f);
    rt_layernorm_fwd(be, xh(&y), st[2], st[3], rt_xf(x.f), w, b, N, C, 1e-5f);
    expect_same("layernorm_fwd", &y);
    expect_floats("layernorm_fwd's statistics", st[0], st[2], 2 * 37);
    rt_rmsnorm_fwd(be, xf(&y), st[0], rt_xf(x.f), w, N, C, 1e-6f);
    rt_rmsnorm_fwd(be, xh(&y), st[2], rt_xf(x.f), w, N, C, 1e-6f);
    expect_same("rmsnorm_fwd", &y);
    for (int rms = 0; rms < 2; rms++) {
        const rt_residual_desc d = {.N = N,
                                    .C = C,
                                    .weight = w,
                                    .bias = rms ? NULL : b,
                                    .rms = rms,
                                    .eps = 1e-5f,
                                    .dropout_p = 0.1f,
                                    .seed = 4,
                                    .stream = 6};
        rt_residual_fwd(be, &d, rt_xf(sum), xf(&y), st[0], st[1], rt_xf(res), rt_xf(x.f));
        rt_residual_fwd(be, &d, rt_xf(sum), xh(&y), st[2], st[3], rt_xf(res), rt_xf(x.f));
        expect_same(rms ? "residual_fwd (RMSNorm)" : "residual_fwd (LayerNorm)", &y);
    }
    /* the norms' backward from a 16-bit dout (a sublayer's input gradient at tp = 1) */
    for (int rms = 0; rms < 2; rms++) {
        float *dx[2], dw[2][96] = {{0}}, dbias[2][96] = {{0}};
        for (int side = 0; side < 2; side++) {
            const rt_x dout = side ? xh(&y) : xf(&y);
            dx[side] = calloc((size_t)N * C, sizeof(float));
            if (rms)
                rt_rmsnorm_bwd(be, dx[side], dw[side], dout, rt_xf(x.f), w, st[1], N, C);
            else
                rt_layernorm_bwd(be, dx[side], dw[side], dbias[side], dout, rt_xf(x.f), w, st[0], st[1], N, C);
        }
        expect_floats(rms ? "rmsnorm_bwd from a 16-bit dout: dinp" : "layernorm_bwd from a 16-bit dout: dinp", dx[0],
                      dx[1], (size_t)N * C);
        expect_floats(rms ? "rmsnorm_bwd: dweight" : "layernorm_bwd: dweight", dw[0], dw[1], (size_t)C);
        expect_floats("layernorm_bwd: dbias", dbias[0], dbias[1], (size_t)C);
        free(dx[0]);
        free(dx[1]);
    }
    float *rows = calloc((size_t)5 * C, sizeof(float)), *rows16 = calloc((size_t)5 * C, sizeof(float));
    const int32_t idx[4] = {3, 0, 3, 1};
    rt_scatter_rows_add(be, rows, xf(&x), idx, 4, C);
    rt_scatter_rows_add(be, rows16, xh(&x), idx, 4, C);
    expect_floats("scatter_rows_add", rows, rows16, (size_t)5 * C);
    free(rows);
    free(rows16);
    free(w);
    free(b);
    free(res);
    free(sum);
    pair_free(&x);
    pair_free(&y);
}

/* q, k, v as views into one fused (B T, 3 C) buffer; out, dout (B T, C). */
static void check_attention(int variant) {
    enum { B = 2, NH = 3, T = 21, HS = 8, C = NH * HS };
    unsigned seed = 40 + (unsigned)variant;
    pair qkv = pair_new((size_t)B * T * 3 * C, &seed, 1.0f), dout = pair_new((size_t)B * T * C, &seed, 1.0f);
    pair out = pair_new((size_t)B * T * C, &seed, 0.0f), dqkv = pair_new((size_t)B * T * 3 * C, &seed, 0.0f);
    float key_mask[B * T] = {0}, *bias = malloc(sizeof(float) * NH * T * T), *dbias[2];
    for (int j = 15; j < T; j++) key_mask[T + j] = -INFINITY; /* row 1's last keys are padding */
    for (int i = 0; i < NH * T * T; i++) bias[i] = tz_uniform(&seed);
    rt_attn_desc d = {.B = B,
                      .NH = NH,
                      .Tq = T,
                      .Tk = T,
                      .HS = HS,
                      .ldq = 3 * C,
                      .ldk = 3 * C,
                      .ldv = 3 * C,
                      .ldo = C,
                      .scale = 0.35f,
                      .probs_dtype = dt};
    if (variant == 0) d.key_mask = key_mask;
    if (variant == 1) d.causal = true, d.dropout_p = 0.2f, d.seed = 3, d.stream = 8;
    if (variant == 2) d.bias = bias;
    void *probs[2];
    for (int h = 0; h < 2; h++) {
        rt_x (*X)(pair *) = h ? xh : xf;
        probs[h] = calloc((size_t)B * NH * T * T, 2);
        dbias[h] = calloc((size_t)NH * T * T, sizeof(float));
        rt_attention_fwd(be, &d, X(&out), probs[h], X(&qkv), rt_x_at(X(&qkv), C), rt_x_at(X(&qkv), 2 * C));
        rt_attention_bwd(be, &d, X(&dqkv), rt_x_at(X(&dqkv), C), rt_x_at(X(&dqkv), 2 * C),
                         variant == 2 ? dbias[h] : NULL, X(&dout), probs[h], X(&qkv), rt_x_at(X(&qkv), C),
                         rt_x_at(X(&qkv), 2 * C));
    }
    char what[48];
    snprintf(what, sizeof what, "attention variant %d: out", variant);
    expect_same(what, &out);
    snprintf(what, sizeof what, "attention variant %d: dqkv", variant);
    expect_same(what, &dqkv);
    TZ_EXPECT(memcmp(probs[0], probs[1], (size_t)B * NH * T * T * 2) == 0, "%s attention variant %d: probs differ",
              rt_dtype_name(dt), variant);
    expect_floats("attention's dbias", dbias[0], dbias[1], (size_t)NH * T * T);
    for (int h = 0; h < 2; h++) free(probs[h]), free(dbias[h]);
    free(bias);
    pair_free(&qkv);
    pair_free(&dout);
    pair_free(&out);
    pair_free(&dqkv);
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
        check_norms();
        check_xent();
        for (int v = 0; v < 3; v++) check_attention(v);
    }
    rt_backend_free(be);
    return tz_test_result("test_cpu_typed");
}
