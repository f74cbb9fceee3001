/* The CPU's fused residual step (rt_residual_fwd/bwd, runtime/backend/cpu/cpu_residual.c) against the
 * ops it replaces, bit for bit (memcmp): the sequence models/layers/stack.c ran before the op existed
 * (dropout_fwd in place on the branch, add, the norm; the norm's bwd into the residual gradient,
 * dropout_bwd of it), and the wrappers' composition for a backend without the op. Every compute
 * precision (fp32, bf16, fp16), LayerNorm with and without bias, RMSNorm and no norm, dropout 0
 * and 0.1, C of 37 and 768 and N of 1, 5 and 130 (from one row to a parallel region); outputs,
 * statistics, the residual and branch gradients and the accumulated parameter gradients. At bf16
 * and fp16 also with the residual, the branch, the sum, the norm's output gradient and the branch's
 * gradient as 16-bit handles (a typed stack's residual sums and, at tp = 1, its branches and
 * sublayer input gradients), the norms reading a 16-bit input and output gradient, and the add
 * of a 16-bit and an fp32 handle into a 16-bit one: the same bits. Then finite differences of the backward
 * (as tests/test_cpu_grad.c checks every backward op). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/rt_backend.h"
#include "runtime/base/rt_rng.h"
#include "tests/testutil.h"

static rt_backend *g_be;      /* the CPU backend, with the fused op */
static rt_backend g_composed; /* the same context through a table without it */
static rt_backend_ops g_composed_ops;

enum { NORM_LN_BIAS, NORM_LN, NORM_RMS, NORM_NONE, NORM_KINDS };
static const char *const norm_name[NORM_KINDS] = {"layernorm+bias", "layernorm", "rmsnorm", "no norm"};

static float *fill(size_t n, uint64_t stream, float lo, float hi, rt_dtype stored) {
    float *x = rt_xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = rt_round_to(stored, lo + (hi - lo) * rt_rng_uniform(777, stream, i));
    return x;
}

static float *dup(const float *x, size_t n) {
    float *y = rt_xmalloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

static void expect_bits(const char *what, const char *where, const float *got, const float *ref, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &ref[i], sizeof(float)) != 0 && bad++ == 0) first = i;
    TZ_EXPECT(bad == 0, "%s: %s: %zu of %zu differ; first [%zu] fused %.9g, composed %.9g", where, what, bad, n, first,
              bad ? (double)got[first] : 0.0, bad ? (double)ref[first] : 0.0);
}

/* One case's inputs and the results of one way of computing it. */
typedef struct {
    float *sum, *out, *mean, *rstd, *dres, *dbranch, *dw, *db;
} results;

typedef struct {
    size_t N;
    int C;
    rt_residual_desc d;
    float *res, *branch, *dout, *dres0, *dw0, *db0;
} inputs;

static results results_new(const inputs *in) {
    const size_t n = in->N * (size_t)in->C;
    return (results){.sum = rt_xcalloc(n, sizeof(float)),
                     .out = rt_xcalloc(n, sizeof(float)),
                     .mean = rt_xcalloc(in->N, sizeof(float)),
                     .rstd = rt_xcalloc(in->N, sizeof(float)),
                     .dres = dup(in->dres0, n),
                     .dbranch = rt_xcalloc(n, sizeof(float)),
                     .dw = dup(in->dw0, in->C),
                     .db = dup(in->db0, in->C)};
}

static void results_free(results *r) {
    free(r->sum), free(r->out), free(r->mean), free(r->rstd), free(r->dres), free(r->dbranch), free(r->dw), free(r->db);
}

/* The sequence models/layers/stack.c ran before the fused op: the branch dropped in place (tmp), the
 * add, the norm; the norm's backward into dres, dropout's backward of dres into tmp. */
static void run_before(const inputs *in, results *r) {
    const rt_residual_desc *d = &in->d;
    const size_t n = in->N * (size_t)in->C;
    float *tmp = dup(in->branch, n);
    if (d->dropout_p > 0) rt_dropout_fwd(g_be, tmp, tmp, n, d->dropout_p, d->seed, d->stream, NULL);
    rt_add(g_be, rt_xf(r->sum), rt_xf(in->res), rt_xf(tmp), n);
    if (d->weight && d->rms)
        rt_rmsnorm_fwd(g_be, rt_xf(r->out), r->rstd, rt_xf(r->sum), d->weight, in->N, in->C, d->eps);
    else if (d->weight)
        rt_layernorm_fwd(g_be, rt_xf(r->out), r->mean, r->rstd, rt_xf(r->sum), d->weight, d->bias, in->N, in->C,
                         d->eps);
    if (d->weight && d->rms)
        rt_rmsnorm_bwd(g_be, r->dres, r->dw, rt_xf(in->dout), rt_xf(r->sum), d->weight, r->rstd, in->N, in->C);
    else if (d->weight)
        rt_layernorm_bwd(g_be, r->dres, r->dw, d->bias ? r->db : NULL, rt_xf(in->dout), rt_xf(r->sum), d->weight,
                         r->mean, r->rstd, in->N, in->C);
    if (d->dropout_p > 0) rt_dropout_bwd(g_be, r->dbranch, r->dres, n, d->dropout_p, d->seed, d->stream, NULL);
    free(tmp);
}

/* Through the wrappers on backend be (fused, or composed by the wrappers). */
static void run_op(rt_backend *be, const inputs *in, results *r) {
    const rt_residual_desc *d = &in->d;
    rt_residual_fwd(be, d, rt_xf(r->sum), rt_xf(r->out), r->mean, r->rstd, rt_xf(in->res), rt_xf(in->branch));
    rt_residual_bwd(be, d, r->dres, rt_xf(r->dbranch), r->dw, d->bias ? r->db : NULL, rt_xf(in->dout), rt_xf(r->sum),
                    r->mean, r->rstd);
}

/* The fused op with res, branch, sum, dout and dbranch as 16-bit handles of the compute precision,
 * the sum and dbranch widened into r for the comparison. */
static void run_typed(const inputs *in, results *r) {
    const rt_residual_desc *d = &in->d;
    const rt_dtype t = g_be->compute;
    const size_t n = in->N * (size_t)in->C;
    uint16_t *res = tz_narrow16(t, in->res, n), *branch = tz_narrow16(t, in->branch, n);
    uint16_t *dout = tz_narrow16(t, in->dout, n);
    uint16_t *sum = rt_xcalloc(n, sizeof(uint16_t)), *dbranch = rt_xcalloc(n, sizeof(uint16_t));
    rt_residual_fwd(g_be, d, rt_x_of(sum, t), rt_xf(r->out), r->mean, r->rstd, rt_x_of(res, t), rt_x_of(branch, t));
    rt_residual_bwd(g_be, d, r->dres, rt_x_of(dbranch, t), r->dw, d->bias ? r->db : NULL, rt_x_of(dout, t),
                    rt_x_of(sum, t), r->mean, r->rstd);
    rt_convert_to_f32(r->sum, sum, t, n);
    rt_convert_to_f32(r->dbranch, dbranch, t, n);
    free(res), free(branch), free(dout), free(sum), free(dbranch);
}

/* The norms alone over the sum of ref as a 16-bit input, from a 16-bit output gradient, against
 * ref (run_before's). */
static void check_norms_typed(const char *where, const inputs *in, const results *ref) {
    const rt_residual_desc *d = &in->d;
    const rt_dtype t = g_be->compute;
    const size_t n = in->N * (size_t)in->C;
    uint16_t *x = tz_narrow16(t, ref->sum, n), *dout = tz_narrow16(t, in->dout, n);
    results r = results_new(in);
    if (d->rms) {
        rt_rmsnorm_fwd(g_be, rt_xf(r.out), r.rstd, rt_x_of(x, t), d->weight, in->N, in->C, d->eps);
        rt_rmsnorm_bwd(g_be, r.dres, r.dw, rt_x_of(dout, t), rt_x_of(x, t), d->weight, r.rstd, in->N, in->C);
    } else {
        rt_layernorm_fwd(g_be, rt_xf(r.out), r.mean, r.rstd, rt_x_of(x, t), d->weight, d->bias, in->N, in->C, d->eps);
        rt_layernorm_bwd(g_be, r.dres, r.dw, d->bias ? r.db : NULL, rt_x_of(dout, t), rt_x_of(x, t), d->weight, r.mean,
                         r.rstd, in->N, in->C);
    }
    expect_bits("out", where, r.out, ref->out, n);
    expect_bits("rstd", where, r.rstd, ref->rstd, in->N);
    expect_bits("dweight", where, r.dw, ref->dw, (size_t)in->C);
    if (d->bias) expect_bits("dbias", where, r.db, ref->db, (size_t)in->C);
    expect_bits("dres", where, r.dres, ref->dres, n);
    results_free(&r);
    free(x), free(dout);
}

static void compare(const char *where, const inputs *in, const results *got, const results *ref) {
    const size_t n = in->N * (size_t)in->C;
    const rt_residual_desc *d = &in->d;
    expect_bits("sum", where, got->sum, ref->sum, n);
    if (d->weight) {
        expect_bits("out", where, got->out, ref->out, n);
        expect_bits("rstd", where, got->rstd, ref->rstd, in->N);
        if (!d->rms) expect_bits("mean", where, got->mean, ref->mean, in->N);
        expect_bits("dweight", where, got->dw, ref->dw, (size_t)in->C);
        if (d->bias) expect_bits("dbias", where, got->db, ref->db, (size_t)in->C);
    }
    expect_bits("dres", where, got->dres, ref->dres, n);
    if (d->dropout_p > 0) expect_bits("dbranch", where, got->dbranch, ref->dbranch, n);
}

static void check_case(rt_dtype dtype, int norm, float p, size_t N, int C) {
    const size_t n = N * (size_t)C;
    const uint64_t k = (uint64_t)N * 1000 + (uint64_t)C; /* inputs differ from case to case */
    float *w = fill((size_t)C, 10 * k + 1, 0.5f, 1.5f, RT_F32), *b = fill((size_t)C, 10 * k + 2, -0.2f, 0.2f, RT_F32);
    inputs in = {.N = N,
                 .C = C,
                 /* a residual stream with an offset, so LayerNorm's mean matters; activations and
                  * their gradients stored at the compute precision, as a model's are */
                 .res = fill(n, 10 * k + 3, -2.0f, 4.0f, dtype),
                 .branch = fill(n, 10 * k + 4, -1.0f, 1.0f, dtype),
                 .dout = fill(n, 10 * k + 5, -1.0f, 1.0f, dtype),
                 .dres0 = fill(n, 10 * k + 6, -0.5f, 0.5f, dtype),
                 .dw0 = fill((size_t)C, 10 * k + 7, -1.0f, 1.0f, RT_F32),
                 .db0 = fill((size_t)C, 10 * k + 8, -1.0f, 1.0f, RT_F32)};
    in.d = (rt_residual_desc){.N = N,
                              .C = C,
                              .weight = norm == NORM_NONE ? NULL : w,
                              .bias = norm == NORM_LN_BIAS ? b : NULL,
                              .rms = norm == NORM_RMS,
                              .eps = norm == NORM_RMS ? 1e-6f : 1e-5f,
                              .dropout_p = p,
                              .seed = 1234 + k,
                              .stream = 77};
    char where[160];
    snprintf(where, sizeof where, "%s %s p=%g N=%zu C=%d", rt_dtype_name(dtype), norm_name[norm], (double)p, N, C);
    results before = results_new(&in), fused = results_new(&in), composed = results_new(&in);
    run_before(&in, &before);
    run_op(g_be, &in, &fused);
    run_op(&g_composed, &in, &composed);
    compare(where, &in, &fused, &before);
    char where2[200];
    snprintf(where2, sizeof where2, "%s (wrappers' composition)", where);
    compare(where2, &in, &composed, &before);
    if (dtype != RT_F32) {
        results typed = results_new(&in);
        run_typed(&in, &typed);
        snprintf(where2, sizeof where2, "%s (16-bit res, branch, sum and dbranch)", where);
        compare(where2, &in, &typed, &before);
        results_free(&typed);
        snprintf(where2, sizeof where2, "%s (norm of a 16-bit input)", where);
        if (norm != NORM_NONE) check_norms_typed(where2, &in, &before);
    }
    /* a recompute writes the output over the branch (tmp), of either type */
    for (int typed = 0; typed < 2 && norm != NORM_NONE; typed++) {
        if (typed && dtype == RT_F32) break;
        float *branch = dup(in.branch, n);
        uint16_t *branch16 = typed ? tz_narrow16(dtype, in.branch, n) : NULL;
        const rt_x b = typed ? rt_x_of(branch16, dtype) : rt_xf(branch);
        results again = results_new(&in);
        rt_residual_fwd(g_be, &in.d, rt_xf(again.sum), b, again.mean, again.rstd, rt_xf(in.res), b);
        if (typed) rt_convert_to_f32(branch, branch16, dtype, n);
        snprintf(where2, sizeof where2, "%s (out over a%s branch)", where, typed ? " 16-bit" : "n fp32");
        expect_bits("sum", where2, again.sum, before.sum, n);
        expect_bits("out", where2, branch, before.out, n);
        results_free(&again);
        free(branch), free(branch16);
    }
    results_free(&before), results_free(&fused), results_free(&composed);
    free(w), free(b), free(in.res), free(in.branch), free(in.dout), free(in.dres0), free(in.dw0), free(in.db0);
}

/* ---- finite differences: L = <R_out, out> + <R_sum, sum> over (res, branch, weight, bias) ---- */
#define FD_H 1e-2f
#define FD_ATOL 2e-4f
#define FD_RTOL 2e-3f

typedef struct {
    inputs in;
    float *w, *b, *R_out, *R_sum;
    results r;
} fd_st;

static double fd_loss(void *arg) {
    fd_st *s = arg;
    const size_t n = s->in.N * (size_t)s->in.C;
    rt_residual_fwd(g_be, &s->in.d, rt_xf(s->r.sum), rt_xf(s->r.out), s->r.mean, s->r.rstd, rt_xf(s->in.res),
                    rt_xf(s->in.branch));
    double L = 0;
    for (size_t i = 0; i < n; i++) L += (double)s->R_sum[i] * s->r.sum[i];
    if (s->in.d.weight)
        for (size_t i = 0; i < n; i++) L += (double)s->R_out[i] * s->r.out[i];
    return L;
}

/* The finite-difference check (testutil.h) of the loss of s. */
static void fd_check(const char *what, fd_st *s, float *x, size_t nx, const float *analytic) {
    tz_fd_check(what, x, nx, analytic, fd_loss, s, FD_H, FD_ATOL, FD_RTOL);
}

static void fd_case(int norm, float p) {
    const size_t N = 3;
    const int C = 37;
    const size_t n = N * (size_t)C;
    fd_st s = {.w = fill((size_t)C, 91, 0.5f, 1.5f, RT_F32),
               .b = fill((size_t)C, 92, -0.5f, 0.5f, RT_F32),
               .R_out = fill(n, 93, -1.0f, 1.0f, RT_F32),
               .R_sum = fill(n, 94, -1.0f, 1.0f, RT_F32)};
    s.in = (inputs){.N = N,
                    .C = C,
                    .res = fill(n, 95, -1.0f, 2.0f, RT_F32),
                    .branch = fill(n, 96, -1.0f, 1.0f, RT_F32),
                    .dout = s.R_out,
                    .dres0 = s.R_sum,
                    .dw0 = rt_xcalloc((size_t)C, sizeof(float)),
                    .db0 = rt_xcalloc((size_t)C, sizeof(float))};
    s.in.d = (rt_residual_desc){.N = N,
                                .C = C,
                                .weight = norm == NORM_NONE ? NULL : s.w,
                                .bias = norm == NORM_LN_BIAS ? s.b : NULL,
                                .rms = norm == NORM_RMS,
                                .eps = 1e-5f,
                                .dropout_p = p,
                                .seed = 5,
                                .stream = 6};
    s.r = results_new(&s.in);
    /* dres starts at R_sum = dL/dsum directly, so it ends as dL/dsum = dL/dres */
    results g = results_new(&s.in);
    run_op(g_be, &s.in, &g);
    const float *dbranch = p > 0 ? g.dbranch : g.dres;
    char what[128];
    snprintf(what, sizeof what, "residual %s p=%g: dres", norm_name[norm], (double)p);
    fd_check(what, &s, s.in.res, n, g.dres);
    snprintf(what, sizeof what, "residual %s p=%g: dbranch", norm_name[norm], (double)p);
    fd_check(what, &s, s.in.branch, n, dbranch);
    if (norm != NORM_NONE) {
        snprintf(what, sizeof what, "residual %s p=%g: dweight", norm_name[norm], (double)p);
        fd_check(what, &s, s.w, (size_t)C, g.dw);
    }
    if (norm == NORM_LN_BIAS) {
        snprintf(what, sizeof what, "residual %s p=%g: dbias", norm_name[norm], (double)p);
        fd_check(what, &s, s.b, (size_t)C, g.db);
    }
    results_free(&g), results_free(&s.r);
    free(s.w), free(s.b), free(s.R_out), free(s.R_sum), free(s.in.res), free(s.in.branch), free(s.in.dw0),
        free(s.in.db0);
}

int main(void) {
    TZ_EXPECT_OK(rt_backend_init("cpu", 0, &g_be));
    if (!g_be) return tz_test_result("test_cpu_residual");
    TZ_EXPECT(g_be->ops->residual_fwd && g_be->ops->residual_bwd, "the CPU backend has the fused residual ops");
    g_composed_ops = *g_be->ops;
    g_composed_ops.residual_fwd = NULL;
    g_composed_ops.residual_bwd = NULL;
    g_composed = *g_be;
    g_composed.ops = &g_composed_ops;

    const rt_dtype dtypes[3] = {RT_F32, RT_BF16, RT_F16};
    const float ps[2] = {0.0f, 0.1f};
    const size_t Ns[3] = {1, 5, 130};
    const int Cs[2] = {37, 768};
    int cases = 0;
    for (int t = 0; t < 3; t++) {
        TZ_EXPECT_OK(rt_set_precision(g_be, dtypes[t]));
        g_composed.compute = g_be->compute;
        for (int norm = 0; norm < NORM_KINDS; norm++)
            for (int ip = 0; ip < 2; ip++)
                for (int in = 0; in < 3; in++)
                    for (int ic = 0; ic < 2; ic++, cases++) check_case(dtypes[t], norm, ps[ip], Ns[in], Cs[ic]);
    }
    printf("test_cpu_residual: %d cases compared bit for bit\n", cases);

    TZ_EXPECT_OK(rt_set_precision(g_be, RT_F32));
    for (int norm = 0; norm < NORM_KINDS; norm++) {
        fd_case(norm, 0.0f);
        fd_case(norm, 0.1f);
    }
    rt_backend_free(g_be);
    return tz_test_result("test_cpu_residual");
}
