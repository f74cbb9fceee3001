/* The per-op precision table: every CPU op that writes an activation, run through its rt_*
 * wrapper in bf16 and in fp16 against the same op in fp32 on the same inputs.
 *
 * Stated tolerances (runtime/backend/rt_backend.h defines where rounding happens):
 *   - an op other than the matmul computes in fp32 and stores its activation outputs rounded,
 *     so each such output must equal the fp32 output rounded to bf16/fp16, bit for bit
 *     (tolerance: 0 after that one rounding, whose relative size is at most u = 2^-8 for bf16
 *     and 2^-11 for fp16 in the normal range, more for fp16 subnormals; the table prints it as
 *     "max rel"). A backward reads what its forward stored, so its inputs are given as stored
 *     values (attention's probabilities, q, k, v and dout are bf16 values, which fp16 holds
 *     exactly: a precision's products then read what fp32's read, and four-term sums of such
 *     exact products come out the same in any kernel's order but in rare corner cases);
 *   - its fp32 outputs (norm statistics, parameter gradients, losses, xent statistics) must
 *     equal fp32's bit for bit;
 *   - the matmul rounds its inputs too: |C - C32| <= (2u + u^2) sum_k |a_k b_k| + u |C32| with
 *     u = 2^-8 (bf16) or 2^-11 (fp16), plus fp32 accumulation's (K + 2) 2^-23 sum |a b|;
 *   - attention's products read their inputs rounded as well (the probabilities for out, dS for
 *     dq and dk), so out and dqkv are checked as products: within a relative L2 distance of 4u
 *     of fp32's (a rounding of the probabilities or of dS, one of the output, and room for the
 *     sums), and so is dbias (the fp32 dS, but from a product whose sums a 16-bit run orders
 *     differently: it packs each head for the GEMM); its stored probabilities stay bit for bit.
 * An fp16 output past 65504 is inf; the clamp op's outputs are checked the same way. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/rt_backend.h"
#include "runtime/base/rt_dtype.h"
#include "tests/testutil.h"

enum { B = 2, T = 5, NH = 2, HS = 4, C = NH * HS, N = B * T, V = 11, F = 16, MAXOUT = 4 };

typedef struct {
    const char *name;
    float *p;
    size_t n;
    bool stored;    /* an activation (rounded) or fp32 (statistics, parameter gradients, losses) */
    double l2_in_u; /* > 0: a product of rounded values, within this many u in relative L2 */
} op_out;

typedef struct {
    float x[N * 3 * C], y[N * 3 * C], w[3 * C * C], g[N * F], u[N * F], big[N * C];
    int32_t ids[N], targets[N], rows[B], buckets[T * T];
    float key_mask[B * T];
    float probs[B * NH * T * T];        /* attention's, as stored in bf16 (make_inputs) */
    float xa[N * 3 * C], ya[N * 3 * C]; /* x and y as stored activations (bf16 values, fp16 ones too) */
} op_inputs;

/* One op: runs it on be (whose precision is set) and lists its outputs (malloc'd by the case). */
typedef int (*op_case)(rt_backend *be, const op_inputs *in, op_out *out);

static float *fresh(size_t n) { return calloc(n, sizeof(float)); }
static float *copy_of(const float *x, size_t n) {
    float *p = malloc(n * sizeof(float));
    memcpy(p, x, n * sizeof(float));
    return p;
}

static int case_layernorm(rt_backend *be, const op_inputs *in, op_out *o) {
    float *out = fresh(N * C), *mean = fresh(N), *rstd = fresh(N), *dx = fresh(N * C), *dw = fresh(C), *db = fresh(C);
    rt_layernorm_fwd(be, rt_xf(out), mean, rstd, rt_xf(in->x), in->w, in->w + C, N, C, 1e-5f);
    rt_layernorm_bwd(be, dx, dw, db, rt_xf(in->y), rt_xf(in->x), in->w, mean, rstd, N, C);
    o[0] = (op_out){"out", out, N * C, true, 0}, o[1] = (op_out){"mean", mean, N, false, 0};
    o[2] = (op_out){"dinp", dx, N * C, true, 0}, o[3] = (op_out){"dweight", dw, C, false, 0};
    free(rstd), free(db);
    return 4;
}

static int case_rmsnorm(rt_backend *be, const op_inputs *in, op_out *o) {
    float *out = fresh(N * C), *rstd = fresh(N), *dx = fresh(N * C), *dw = fresh(C);
    rt_rmsnorm_fwd(be, rt_xf(out), rstd, rt_xf(in->x), in->w, N, C, 1e-6f);
    rt_rmsnorm_bwd(be, dx, dw, rt_xf(in->y), rt_xf(in->x), in->w, rstd, N, C);
    o[0] = (op_out){"out", out, N * C, true, 0}, o[1] = (op_out){"rstd", rstd, N, false, 0};
    o[2] = (op_out){"dinp", dx, N * C, true, 0}, o[3] = (op_out){"dweight", dw, C, false, 0};
    return 4;
}

static int case_act(rt_backend *be, const op_inputs *in, op_out *o) {
    float *out = fresh(4 * N * F), *d = fresh(4 * N * F);
    for (int k = 0; k < 4; k++) {
        rt_act_fwd(be, (rt_act_kind)k, rt_xf(out + k * N * F), rt_xf(in->g), N * F);
        rt_act_bwd(be, (rt_act_kind)k, rt_xf(d + k * N * F), rt_xf(in->g), rt_xf(in->u), N * F);
    }
    o[0] = (op_out){"out (4 kinds)", out, 4 * N * F, true, 0}, o[1] = (op_out){"dinp (4 kinds)", d, 4 * N * F, true, 0};
    return 2;
}

static int case_gated(rt_backend *be, const op_inputs *in, op_out *o) {
    float *out = fresh(N * F), *dg = fresh(N * F), *dl = fresh(N * F);
    rt_gated_act_fwd(be, RT_ACT_GELU_TANH, rt_xf(out), rt_xf(in->g), rt_xf(in->u), N * F);
    rt_gated_act_bwd(be, RT_ACT_GELU_TANH, rt_xf(dg), rt_xf(dl), rt_xf(in->g), rt_xf(in->u), rt_xf(in->x), N * F);
    o[0] = (op_out){"out", out, N * F, true, 0}, o[1] = (op_out){"dgate", dg, N * F, true, 0};
    o[2] = (op_out){"dlin", dl, N * F, true, 0};
    return 3;
}

static int case_bias_add(rt_backend *be, const op_inputs *in, op_out *o) {
    float *out = copy_of(in->x, N * C), *db = fresh(C), *sum = fresh(N * C);
    rt_add_bias(be, out, in->w, N, C);
    rt_bias_bwd(be, db, rt_xf(in->y), N, C);
    rt_add(be, rt_xf(sum), rt_xf(in->x), rt_xf(in->y), N * C);
    o[0] = (op_out){"add_bias out", out, N * C, true, 0}, o[1] = (op_out){"bias_bwd dbias", db, C, false, 0};
    o[2] = (op_out){"add out", sum, N * C, true, 0};
    return 3;
}

/* q, k, v are views into one fused (N, 3C) buffer, as the models call it. */
static const rt_attn_desc attn = {.B = B,
                                  .NH = NH,
                                  .Tq = T,
                                  .Tk = T,
                                  .HS = HS,
                                  .ldq = 3 * C,
                                  .ldk = 3 * C,
                                  .ldv = 3 * C,
                                  .ldo = C,
                                  .scale = 0.5f,
                                  .causal = true,
                                  .key_mask = NULL};

static int case_attention(rt_backend *be, const op_inputs *in, op_out *o) {
    rt_attn_desc d = attn;
    d.key_mask = in->key_mask;
    float *out = fresh(N * C), *probs = fresh(B * NH * T * T), *dqkv = fresh(N * 3 * C), *dbias = fresh(NH * T * T);
    /* q, k, v and dout are stored activations: the products read them as they are at every precision */
    rt_attention_fwd(be, &d, rt_xf(out), probs, rt_xf(in->xa), rt_xf(in->xa + C), rt_xf(in->xa + 2 * C));
    rt_attention_bwd(be, &d, rt_xf(dqkv), rt_xf(dqkv + C), rt_xf(dqkv + 2 * C), dbias, rt_xf(in->ya), in->probs,
                     rt_xf(in->xa), rt_xf(in->xa + C), rt_xf(in->xa + 2 * C));
    o[0] = (op_out){"out", out, N * C, true, 4}, o[1] = (op_out){"probs", probs, B * NH * T * T, true, 0};
    /* dbias is the fp32 dS, unrounded, but dS comes from dO V^T, a product: at 16 bits the heads are packed
     * for the GEMM (cpu_attention.c), whose sums then run in another order than fp32's strided ones */
    o[2] = (op_out){"dqkv", dqkv, N * 3 * C, true, 4}, o[3] = (op_out){"dbias", dbias, NH * T * T, false, 4};
    return 4;
}

static int case_rows(rt_backend *be, const op_inputs *in, op_out *o) {
    float *emb = fresh(N * C), *gath = fresh(B * C), *bias = fresh(NH * T * T), *dtab = fresh(V * C);
    rt_embedding_fwd(be, emb, in->ids, in->w, N, C, 0, V, false);
    rt_embedding_bwd(be, dtab, in->y, in->ids, N, C, 0, V);
    rt_gather_rows(be, gath, in->x, in->rows, B, C);
    rt_relbias_fwd(be, bias, in->w, in->buckets, NH, T, T, 8);
    o[0] = (op_out){"embedding out", emb, N * C, true, 0}, o[1] = (op_out){"embedding dtable", dtab, V * C, false, 0};
    o[2] = (op_out){"gather_rows out", gath, B * C, true, 0},
    o[3] = (op_out){"relbias bias", bias, NH * T * T, true, 0};
    return 4;
}

static int case_xent(rt_backend *be, const op_inputs *in, op_out *o) {
    float *loss = fresh(N), *dl = copy_of(in->g, N * V), *stats = fresh(3 * N), *loss2 = fresh(N), *dl2 = fresh(N * V);
    rt_softmax_xent(be, loss, dl, NULL, dl, in->targets, N, V, 1000.0f);
    for (int ph = 0; ph < 3; ph++)
        rt_xent_vocab(be, ph, stats, loss2, rt_xf(dl2), rt_xf(in->g), NULL, in->targets, N, V, 0, 1000.0f);
    o[0] = (op_out){"softmax_xent loss", loss, N, false, 0},
    o[1] = (op_out){"softmax_xent dlogits", dl, N * V, true, 0};
    o[2] = (op_out){"xent_vocab loss", loss2, N, false, 0}, o[3] = (op_out){"xent_vocab dlogits", dl2, N * V, true, 0};
    free(stats);
    return 4;
}

static int case_dropout_clamp(rt_backend *be, const op_inputs *in, op_out *o) {
    float *f = fresh(N * F), *b = fresh(N * F), *cols = fresh(N * 4), *cl = copy_of(in->big, N * C);
    rt_dropout_fwd(be, f, in->g, N * F, 0.25f, 7, 3, NULL);
    rt_dropout_bwd(be, b, in->u, N * F, 0.25f, 7, 3, NULL);
    rt_dropout_cols(be, rt_xf(cols), rt_xf(in->g), N, 4, F, 4, 0.25f, 7, 5, NULL);
    TZ_EXPECT(rt_clamp_inf(be, rt_xf(cl), N * C, 64504.0f), "clamp_inf: the infs it holds");
    o[0] = (op_out){"dropout out", f, N * F, true, 0}, o[1] = (op_out){"dropout dinp", b, N * F, true, 0};
    o[2] = (op_out){"dropout_cols out", cols, N * 4, true, 0}, o[3] = (op_out){"clamp_inf out", cl, N * C, true, 0};
    return 4;
}

/* The matmul's outputs: checked against the bound in the header, not bit for bit. */
static int case_gemm(rt_backend *be, const op_inputs *in, op_out *o) {
    float *c = fresh(N * 3 * C);
    rt_gemm(be, false, true, N, 3 * C, C, 1.0f, rt_xf(in->x), 3 * C, 0, rt_xf(in->w), C, 0, 0.0f, rt_xf(c), 3 * C, 0,
            1);
    o[0] = (op_out){"gemm C", c, N * 3 * C, true, 0};
    return 1;
}

static const struct {
    const char *name;
    op_case run;
} cases[] = {{"layernorm", case_layernorm},
             {"rmsnorm", case_rmsnorm},
             {"act", case_act},
             {"gated_act", case_gated},
             {"bias/add", case_bias_add},
             {"attention", case_attention},
             {"rows", case_rows},
             {"xent", case_xent},
             {"dropout/clamp", case_dropout_clamp},
             {"gemm", case_gemm}};

static void make_inputs(op_inputs *in) {
    unsigned s = 2024;
    for (size_t i = 0; i < sizeof in->x / 4; i++) in->x[i] = 3 * tz_uniform(&s);
    for (size_t i = 0; i < sizeof in->y / 4; i++) in->y[i] = tz_uniform(&s);
    for (size_t i = 0; i < sizeof in->w / 4; i++) in->w[i] = tz_uniform(&s);
    for (size_t i = 0; i < sizeof in->g / 4; i++) in->g[i] = 4 * tz_uniform(&s);
    for (size_t i = 0; i < sizeof in->u / 4; i++) in->u[i] = tz_uniform(&s);
    for (size_t i = 0; i < sizeof in->big / 4; i++) in->big[i] = 80000 * tz_uniform(&s); /* past fp16's range */
    in->big[3] = INFINITY, in->big[7] = -INFINITY; /* what makes clamp_inf clamp */
    for (int i = 0; i < N; i++) in->ids[i] = (i * 7) % V, in->targets[i] = i == 3 ? -100 : (i * 5) % V;
    for (int b = 0; b < B; b++) in->rows[b] = b * T + 2;
    for (int i = 0; i < T * T; i++) in->buckets[i] = (i * 3) % 8;
    for (int i = 0; i < B * T; i++) in->key_mask[i] = i == 4 ? -1e9f : 0.0f;
}

/* The probabilities attention's backward reads: an fp32 forward's, stored in bf16. */
static void make_probs(rt_backend *be, op_inputs *in) {
    rt_attn_desc d = attn;
    d.key_mask = in->key_mask;
    float out[N * C];
    TZ_EXPECT_OK(rt_set_precision(be, RT_F32));
    for (size_t i = 0; i < N * 3 * C; i++) in->xa[i] = rt_round_bf16(in->x[i]), in->ya[i] = rt_round_bf16(in->y[i]);
    rt_attention_fwd(be, &d, rt_xf(out), in->probs, rt_xf(in->xa), rt_xf(in->xa + C), rt_xf(in->xa + 2 * C));
    for (size_t i = 0; i < sizeof in->probs / 4; i++) in->probs[i] = rt_round_bf16(in->probs[i]);
}

/* |a - b| <= the bound of the header for C = x w^T (x: (N, 3C) rows' first C, w: (3C, C)). */
static int gemm_misses(const op_inputs *in, const float *c, const float *c32, rt_dtype dtype) {
    const double u = dtype == RT_BF16 ? 1.0 / 256 : 1.0 / 2048;
    int misses = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < 3 * C; j++) {
            double mag = 0;
            for (int k = 0; k < C; k++) mag += fabs((double)in->x[i * 3 * C + k] * in->w[j * C + k]);
            const double bound = (2 * u + u * u) * mag + u * fabs(c32[i * 3 * C + j]) + (C + 2) * 1.2e-7 * mag;
            misses += !(fabs((double)c[i * 3 * C + j] - c32[i * 3 * C + j]) <= bound);
        }
    return misses;
}

/* 16-bit attention probabilities (rt_attn_desc.probs_dtype), with a shape big enough for the
 * parallel path: the outputs, gradients and stored values equal those of fp32 probabilities
 * rounded after the op, bit for bit, with dropout and a position bias, and causal with a prefix. */
static void check_probs16(rt_backend *be) {
    enum { PB = 2, PNH = 4, PT = 40, PHS = 16, PC = PNH * PHS, PN = PB * PT };
    const size_t np = (size_t)PB * PNH * PT * PT, nb = (size_t)PNH * PT * PT;
    float *x = malloc(PN * 3 * PC * sizeof(float)), *dy = malloc(PN * PC * sizeof(float)), *bias = malloc(nb * 4);
    unsigned seed = 77;
    for (int i = 0; i < PN * 3 * PC; i++) x[i] = 2 * tz_uniform(&seed);
    for (int i = 0; i < PN * PC; i++) dy[i] = tz_uniform(&seed);
    for (size_t i = 0; i < nb; i++) bias[i] = tz_uniform(&seed);
    const int32_t prefix[PB] = {7, 0};
    int32_t *dprefix = NULL;
    TZ_EXPECT_OK(rt_backend_alloc(be, sizeof prefix, "prefix", (void **)&dprefix));
    memcpy(dprefix, prefix, sizeof prefix);
    const rt_attn_desc base = {.B = PB,
                               .NH = PNH,
                               .Tq = PT,
                               .Tk = PT,
                               .HS = PHS,
                               .ldq = 3 * PC,
                               .ldk = 3 * PC,
                               .ldv = 3 * PC,
                               .ldo = PC,
                               .scale = 0.25f,
                               .dropout_p = 0.2f,
                               .seed = 5,
                               .stream = 9};
    for (int variant = 0; variant < 2; variant++)
        for (int k = 0; k < 2; k++) {
            const rt_dtype dtype = k ? RT_F16 : RT_BF16;
            TZ_EXPECT_OK(rt_set_precision(be, dtype));
            rt_attn_desc d = base;
            if (variant)
                d.causal = true, d.prefix = dprefix;
            else
                d.bias = bias;
            float *out[2], *dqkv[2], *dbias[2];
            void *probs[2];
            for (int w = 0; w < 2; w++) {
                d.probs_dtype = w ? dtype : RT_F32;
                out[w] = fresh(PN * PC), dqkv[w] = fresh(PN * 3 * PC), dbias[w] = fresh(nb);
                probs[w] = calloc(np, rt_attn_probs_size(d.probs_dtype));
                rt_attention_fwd(be, &d, rt_xf(out[w]), probs[w], rt_xf(x), rt_xf(x + PC), rt_xf(x + 2 * PC));
                rt_attention_bwd(be, &d, rt_xf(dqkv[w]), rt_xf(dqkv[w] + PC), rt_xf(dqkv[w] + 2 * PC),
                                 variant ? NULL : dbias[w], rt_xf(dy), probs[w], rt_xf(x), rt_xf(x + PC),
                                 rt_xf(x + 2 * PC));
            }
            int off = 0;
            for (size_t i = 0; i < np; i++) {
                const uint16_t h = ((const uint16_t *)probs[1])[i];
                const float got = dtype == RT_BF16 ? rt_bf16_to_f32(h) : rt_f16_to_f32(h);
                off += memcmp(&got, (const float *)probs[0] + i, 4) != 0;
            }
            TZ_EXPECT(off == 0, "%s probs16 variant %d: %d stored probabilities differ", rt_dtype_name(dtype), variant,
                      off);
            TZ_EXPECT(memcmp(out[0], out[1], PN * PC * 4) == 0, "%s probs16 variant %d: out differs",
                      rt_dtype_name(dtype), variant);
            TZ_EXPECT(memcmp(dqkv[0], dqkv[1], PN * 3 * PC * 4) == 0, "%s probs16 variant %d: dqkv differs",
                      rt_dtype_name(dtype), variant);
            TZ_EXPECT(memcmp(dbias[0], dbias[1], nb * 4) == 0, "%s probs16: dbias differs", rt_dtype_name(dtype));
            for (int w = 0; w < 2; w++) free(out[w]), free(dqkv[w]), free(dbias[w]), free(probs[w]);
        }
    rt_free_device(be, dprefix);
    free(x), free(dy), free(bias);
}

int main(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_cpu_backend_init(2, &be));
    if (!be) return tz_test_result("test_precision_ops");
    static op_inputs in;
    make_inputs(&in);
    make_probs(be, &in);
    printf("%-14s %-24s %-5s %13s %13s\n", "op", "output", "kind", "bf16 max rel", "fp16 max rel");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        op_out ref[MAXOUT], got[2][MAXOUT];
        TZ_EXPECT_OK(rt_set_precision(be, RT_F32));
        const int n = cases[c].run(be, &in, ref);
        for (int d = 0; d < 2; d++) {
            TZ_EXPECT_OK(rt_set_precision(be, d ? RT_F16 : RT_BF16));
            TZ_EXPECT(cases[c].run(be, &in, got[d]) == n, "%s: output count", cases[c].name);
        }
        for (int k = 0; k < n; k++) {
            double worst[2] = {0, 0};
            for (int d = 0; d < 2; d++) {
                const rt_dtype dtype = d ? RT_F16 : RT_BF16;
                const float *r = ref[k].p, *g = got[d][k].p;
                int wrong = 0, rounded = 0;
                for (size_t i = 0; i < ref[k].n; i++) {
                    const float want = ref[k].stored ? rt_round_to(dtype, r[i]) : r[i];
                    rounded += g[i] != r[i];
                    if (isfinite(r[i]) && isfinite(g[i]) && r[i] != 0)
                        worst[d] = fmax(worst[d], fabs((double)g[i] - r[i]) / fabs(r[i]));
                    if (strcmp(cases[c].name, "gemm") != 0 && ref[k].l2_in_u == 0 && memcmp(&want, &g[i], 4) != 0 &&
                        wrong++ < 2)
                        fprintf(stderr, "FAILED: %s %s %s[%zu] = %.9g, want %.9g\n", rt_dtype_name(dtype),
                                cases[c].name, ref[k].name, i, g[i], want);
                }
                if (strcmp(cases[c].name, "gemm") == 0) wrong = gemm_misses(&in, g, r, dtype);
                if (ref[k].l2_in_u > 0) { /* a product of rounded values (attention's) */
                    double diff = 0, norm = 0;
                    for (size_t i = 0; i < ref[k].n; i++)
                        diff += ((double)g[i] - r[i]) * ((double)g[i] - r[i]), norm += (double)r[i] * r[i];
                    const double u = dtype == RT_BF16 ? 1.0 / 256 : 1.0 / 2048, rel = sqrt(diff / norm);
                    wrong = rel > ref[k].l2_in_u * u;
                    if (wrong)
                        fprintf(stderr, "FAILED: %s %s %s: relative L2 distance %.3g > %g u\n", rt_dtype_name(dtype),
                                cases[c].name, ref[k].name, rel, ref[k].l2_in_u);
                }
                TZ_EXPECT(wrong == 0, "%s %s %s: %d elements off", rt_dtype_name(dtype), cases[c].name, ref[k].name,
                          wrong);
                TZ_EXPECT(!ref[k].stored || rounded > 0, "%s %s %s: equals fp32: never rounded", rt_dtype_name(dtype),
                          cases[c].name, ref[k].name);
                free(got[d][k].p);
            }
            printf("%-14s %-24s %-5s %13.3g %13.3g\n", cases[c].name, ref[k].name, ref[k].stored ? "act" : "fp32",
                   worst[0], worst[1]);
            free(ref[k].p);
        }
    }
    check_probs16(be);
    /* fp16's range: a stored value past 65504 is inf, as on a GPU */
    float big[2] = {70000.0f, -1e6f};
    TZ_EXPECT_OK(rt_set_precision(be, RT_F16));
    rt_store_n(be, big, 2);
    TZ_EXPECT(isinf(big[0]) && big[0] > 0 && isinf(big[1]) && big[1] < 0, "fp16 overflow: %g %g", big[0], big[1]);
    rt_backend_free(be);
    return tz_test_result("test_precision_ops");
}
