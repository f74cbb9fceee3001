/* The CUDA backend's fused attention (runtime/backend/cuda/cuda_flash_tiles.h), checked on the CPU: its
 * block functions run here one block after another, with plain loops for the tensor-core
 * products, and must give what the CPU backend's attention gives at the same compute precision:
 * out, dq, dk and dv within a quarter of a unit of the type (check_close says why). The cases
 * (tests/fused_attn_cases.h, which test_cuda_ops runs on a GPU) cover key masks (-1e9, -inf, a
 * batch row with every key masked), causal and GLM's prefix, cross-attention (Tq != Tk, more than one key tile), a
 * single query (decoding), row strides with padding that must stay untouched, dropout (the same
 * elements dropped) with a tensor-parallel head offset, T5's position bias and its gradient, bf16
 * and fp16, head sizes 16 to 64.
 * Also: which descriptors the fused path refuses. What this cannot check is
 * the GPU's side alone (WMMA fragments, warp syncs): test_cuda_ops runs the kernels against the
 * CPU on a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/cuda/cuda_flash_tiles.h"
#include "runtime/backend/rt_backend.h"
#include "tests/fused_attn_cases.h"
#include "tests/testutil.h"

static const float SENTINEL = 7.0f; /* what padding columns hold, before and after */

static float *rounded_rand(rt_dtype dt, size_t n, unsigned *seed) {
    float *x = rt_xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = rt_round_to(dt, tz_uniform(seed));
    return x;
}

static float *filled(size_t n, float v) {
    float *x = rt_xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = v;
    return x;
}

/* got (16-bit) against ref (fp32, as the blocks left it) rounded to dt: the same bits. */
static void expect_rounded(const char *what, rt_dtype dt, const uint16_t *got, const float *ref, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        const uint16_t want = dt == RT_BF16 ? rt_f32_to_bf16(ref[i]) : rt_f32_to_f16(ref[i]);
        if (got[i] != want && bad++ == 0) first = i;
    }
    TZ_EXPECT(bad == 0, "%s: %zu of %zu values differ from the fp32 handles' rounded; first [%zu]", what, bad, n,
              first);
}

static float max_abs(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabsf(x[i]) > m) m = fabsf(x[i]);
    return m;
}

/* got against ref, both as the ops leave them, before the wrappers round them to the type: within
 * a quarter of a unit of the type of each value plus a quarter of one of the largest. The sums
 * run in the CPU's order here; only exp's last bits differ, which may round a probability the
 * other way. Leaving P unrounded moves most cases past that band. (Compared after the final
 * rounding, one value in 400,000 rounds to its neighbour: a whole unit.) On a GPU (test_cuda_ops)
 * the tensor cores sum in another order, and the band there is a whole unit. */
static void check_close(const char *what, rt_dtype dt, const float *got, const float *ref, size_t n) {
    const float unit = (dt == RT_BF16 ? 1.0f / 128 : 1.0f / 1024) / 4;
    tz_check_close(what, got, ref, n, unit * max_abs(ref, n), unit);
}

static void run_case(rt_backend *cpu, const fused_attn_case *tc) {
    const int B = tc->B, NH = tc->NH, Tq = tc->Tq, Tk = tc->Tk, C = NH * tc->HS;
    const rt_dtype dt = tc->dtype;
    unsigned seed = 1234u + (unsigned)Tq * 7u + (unsigned)Tk;
    rt_attn_desc d = fused_attn_desc(tc);
    const size_t nq = (size_t)B * Tq * d.ldq, nk = (size_t)B * Tk * d.ldk, nv = (size_t)B * Tk * d.ldv;
    const size_t no = (size_t)B * Tq * d.ldo;
    float *x = rounded_rand(dt, nq + (tc->fused_qkv ? 0 : nk + nv), &seed);
    const float *q = x, *k = tc->fused_qkv ? x + C : x + nq, *v = tc->fused_qkv ? x + 2 * C : x + nq + nk;
    float *dout = rounded_rand(dt, no, &seed);
    const size_t ngrad = tc->fused_qkv ? nq : nq + nk + nv;
    float *dx_cpu = filled(ngrad, SENTINEL), *dx_fl = filled(ngrad, SENTINEL);
    float *dq_c = dx_cpu, *dk_c = tc->fused_qkv ? dx_cpu + C : dx_cpu + nq,
          *dv_c = tc->fused_qkv ? dx_cpu + 2 * C : dx_cpu + nq + nk;
    float *dq_f = dx_fl, *dk_f = tc->fused_qkv ? dx_fl + C : dx_fl + nq,
          *dv_f = tc->fused_qkv ? dx_fl + 2 * C : dx_fl + nq + nk;
    float *out_c = filled(no, SENTINEL), *out_f = filled(no, SENTINEL);

    float *mask = NULL;
    if (tc->mask) {
        mask = tz_attention_key_mask(B, Tk, tc->masked_batch);
        d.key_mask = mask;
    }
    if (tc->prefix) d.prefix = FUSED_ATTN_PREFIX;
    const size_t nb = (size_t)NH * Tq * Tk;
    float *bias = NULL, *dbias_c = NULL, *dbias_f = NULL;
    if (tc->bias) { /* dbias accumulates: both start from the same values */
        bias = rounded_rand(RT_F32, nb, &seed);
        dbias_c = rounded_rand(RT_F32, nb, &seed);
        dbias_f = rt_xmalloc(nb * sizeof(float));
        memcpy(dbias_f, dbias_c, nb * sizeof(float));
        d.bias = bias;
    }

    /* the CPU backend */
    TZ_EXPECT_OK(rt_set_precision(cpu, dt));
    const size_t np = (size_t)B * NH * Tq * Tk, pbytes = np * rt_attn_probs_size(d.probs_dtype);
    void *probs = rt_xmalloc(pbytes);
    cpu->ops->attention_fwd(cpu->ctx, &d, rt_xf(out_c), probs, rt_xf(q), rt_xf(k),
                            rt_xf(v)); /* the ops: unrounded outputs */
    cpu->ops->attention_bwd(cpu->ctx, &d, rt_xf(dq_c), rt_xf(dk_c), rt_xf(dv_c), dbias_c, rt_xf(dout), probs, rt_xf(q),
                            rt_xf(k), rt_xf(v));
    TZ_EXPECT_OK(rt_set_precision(cpu, RT_F32));

    /* the fused blocks, in a probabilities buffer of the same size; shared memory starts as NaNs */
    const char *why = fl_unsupported(&d, dt);
    TZ_EXPECT(why == NULL, "%s: the fused path refuses it: %s", tc->name, why ? why : "");
    const fl_args a = fl_args_of(&d, dt);
    fl_smem *sm = aligned_alloc(32, sizeof(fl_smem));
    memset(sm, 0xff, sizeof *sm);
    float *stats = rt_xmalloc(pbytes), *dsum = filled((size_t)B * NH * Tq, NAN);
    const long long nqb = (long long)B * NH * ((Tq + FL_BQ - 1) / FL_BQ),
                    nkb = (long long)B * NH * ((Tk + FL_BQ - 1) / FL_BQ);
    const rt_x Q = rt_xf(q), K = rt_xf(k), V = rt_xf(v), DO = rt_xf(dout);
    for (long long blk = 0; blk < nqb; blk++) fl_fwd_block(&a, sm, blk, rt_xf(out_f), stats, Q, K, V);
    for (long long blk = 0; blk < nqb; blk++) fl_bwd_query_block(&a, sm, blk, rt_xf(dq_f), dsum, DO, stats, Q, K, V);
    for (long long blk = 0; blk < nkb; blk++)
        fl_bwd_key_block(&a, sm, blk, rt_xf(dk_f), rt_xf(dv_f), DO, stats, dsum, Q, K, V);
    for (long long blk = 0; tc->bias && blk < nqb / B; blk++)
        fl_bwd_bias_block(&a, sm, blk, dbias_f, DO, stats, dsum, Q, K, V);

    char what[160];
    snprintf(what, sizeof what, "%s (%s): out", tc->name, rt_dtype_name(dt));
    check_close(what, dt, out_f, out_c, no);
    snprintf(what, sizeof what, "%s (%s): dq, dk, dv", tc->name, rt_dtype_name(dt));
    check_close(what, dt, dx_fl, dx_cpu, ngrad);
    if (tc->bias) {
        snprintf(what, sizeof what, "%s (%s): dbias", tc->name, rt_dtype_name(dt));
        /* fp32 sums of fp32 dS in the CPU's order: the worst seen is 1.5e-7 of the largest; summing
         * dS rounded instead moves it 1.4e-4 and more */
        tz_check_close(what, dbias_f, dbias_c, nb, 1e-5f * max_abs(dbias_c, nb), 1e-4f);
    }

    /* the same blocks on 16-bit handles (a typed stack's): the fp32 run's outputs rounded, bit for
     * bit, and the padding columns untouched */
    uint16_t *x16 = tz_narrow16(dt, x, nq + (tc->fused_qkv ? 0 : nk + nv)), *dout16 = tz_narrow16(dt, dout, no);
    uint16_t *out16 = tz_narrow16(dt, out_c, no),
             *dx16 = tz_narrow16(dt, dx_cpu, ngrad); /* sentinels where untouched */
    const size_t ok = tc->fused_qkv ? (size_t)C : nq, ov = tc->fused_qkv ? 2 * (size_t)C : nq + nk;
    const rt_x Q16 = rt_x_of(x16, dt), K16 = rt_x_of(x16 + ok, dt), V16 = rt_x_of(x16 + ov, dt);
    const rt_x DO16 = rt_x_of(dout16, dt), DQ16 = rt_x_of(dx16, dt), DK16 = rt_x_of(dx16 + ok, dt),
               DV16 = rt_x_of(dx16 + ov, dt);
    float *stats16 = rt_xmalloc(pbytes), *dsum16 = filled((size_t)B * NH * Tq, NAN);
    for (long long blk = 0; blk < nqb; blk++) fl_fwd_block(&a, sm, blk, rt_x_of(out16, dt), stats16, Q16, K16, V16);
    for (long long blk = 0; blk < nqb; blk++)
        fl_bwd_query_block(&a, sm, blk, DQ16, dsum16, DO16, stats16, Q16, K16, V16);
    for (long long blk = 0; blk < nkb; blk++)
        fl_bwd_key_block(&a, sm, blk, DK16, DV16, DO16, stats16, dsum16, Q16, K16, V16);
    snprintf(what, sizeof what, "%s (%s): 16-bit handles", tc->name, rt_dtype_name(dt));
    expect_rounded(what, dt, out16, out_f, no);
    expect_rounded(what, dt, dx16, dx_fl, ngrad);
    TZ_EXPECT(memcmp(stats16, stats, (size_t)B * NH * Tq * 2 * sizeof(float)) == 0, "%s: statistics", what);
    free(x16), free(dout16), free(out16), free(dx16), free(stats16), free(dsum16);

    free(x), free(dout), free(dx_cpu), free(dx_fl), free(out_c), free(out_f), free(mask), free(probs);
    free(sm), free(stats), free(dsum), free(bias), free(dbias_c), free(dbias_f);
}

/* What the fused path takes, and why it refuses the rest. */
static void test_unsupported(void) {
    rt_attn_desc d;
    memset(&d, 0, sizeof d);
    d.B = 1, d.NH = 1, d.Tq = 8, d.Tk = 8, d.HS = 64, d.probs_dtype = RT_BF16;
    TZ_EXPECT(fl_unsupported(&d, RT_BF16) == NULL, "bf16, head size 64: taken");
    TZ_EXPECT(fl_unsupported(&d, RT_F16) && strstr(fl_unsupported(&d, RT_F16), "another type"),
              "bf16 probabilities under fp16 compute: refused");
    d.probs_dtype = RT_F32;
    TZ_EXPECT(fl_unsupported(&d, RT_F16) != NULL, "fp32 probabilities under fp16: refused (the wrapper rounds them)");
    TZ_EXPECT(fl_unsupported(&d, RT_F32) && strstr(fl_unsupported(&d, RT_F32), "fp32"), "fp32 compute: refused");
    d.probs_dtype = RT_BF16;
    float bias = 0.0f;
    d.bias = &bias;
    TZ_EXPECT(fl_unsupported(&d, RT_BF16) == NULL, "a position bias: taken");
    d.bias = NULL;
    const int bad_hs[] = {8, 24, 80, 128};
    for (size_t i = 0; i < sizeof bad_hs / sizeof bad_hs[0]; i++) {
        d.HS = bad_hs[i];
        TZ_EXPECT(fl_unsupported(&d, RT_BF16) != NULL, "head size %d: refused", bad_hs[i]);
    }
    d.HS = 16;
    d.Tk = 3; /* the row's two fp32 statistics need four 16-bit values' room */
    TZ_EXPECT(fl_unsupported(&d, RT_BF16) != NULL, "3 keys, bf16 probabilities: refused");
    d.Tk = 4;
    TZ_EXPECT(fl_unsupported(&d, RT_BF16) == NULL, "4 keys, bf16 probabilities: taken");
}

int main(void) {
    rt_backend *cpu = NULL;
    TZ_EXPECT_OK(rt_cpu_backend_init(2, &cpu));
    for (size_t i = 0; i < FUSED_ATTN_CASE_COUNT; i++) run_case(cpu, &FUSED_ATTN_CASES[i]);
    test_unsupported();
    rt_backend_free(cpu);
    return tz_test_result("test_flash_tiles");
}
