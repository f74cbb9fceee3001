/* Scaled-dot-product attention on the CPU (rt_attn_desc in rt_backend.h), one (batch, head)
 * pair per OpenMP task. Each task does its head's products with oneDNN's matmul (fp32, or bf16
 * at bf16: below), which picks AVX2/AVX-512/AMX kernels at run time as our -march loops cannot
 * (OpenBLAS in a build without oneDNN), and the softmax, masks and dropout with plain loops. Inside
 * the parallel region each product runs on its task's thread: Debian's oneDNN and OpenBLAS both
 * run on OpenMP and stay serial in a parallel region, and oneDNN keeps each thread's primitives
 * for the last shapes (cpu_dnnl.c), so a small head pays no set-up per product. oneDNN over
 * OpenBLAS: 3-4x on this Xeon (OpenBLAS 0.3.21 has no kernel for it), 1.2-1.6x over its Haswell
 * kernel, within 10% of its SkylakeX one (scripts/bench/bench_cpu_attention.sh). The
 * probabilities buffer doubles as the scores buffer; only dropout and backward need per-thread
 * scratch.
 *
 * Masking: keys [0, jend) are scored, jend = i + 1 when causal (or the row's prefix length if
 * that is longer: GLM), else Tk; a -inf key mask gives exp(-inf) = 0; a row with no
 * key left gives all-zero probabilities and a zero output (not NaN), and no gradient. The
 * dropout mask on the probabilities is regenerated in backward from the element index
 * ((b*heads_total + head_offset + h)*Tq + i)*Tk + j (the global head, so tensor-parallel
 * ranks drop what one rank would), and CUDA and CPU drop the same elements.
 *
 * 16-bit probabilities (d->probs_dtype): a head's softmax is computed in fp32 scratch and
 * stored rounded; backward widens the head's stored values into scratch. The numbers are those
 * of fp32 probabilities rounded after the op.
 *
 * At a 16-bit compute precision the products read their inputs rounded to it, as every matmul
 * does (rt_set_precision) and as PyTorch's autocast multiplies bf16 probabilities: the
 * probabilities (as stored) and after dropout (for out and dV), and dS (for dQ and dK), are
 * rounded before their product; q, k, v and dout are stored activations, already rounded. dbias
 * takes the fp32 dS. Products of rounded values are exact in fp32, so the CUDA backend's 16-bit
 * matmuls give the same sums up to their order. At bf16 on a CPU with oneDNN's bf16 matmul the
 * products run on it, as the linears do (twice the fp32 kernel's rate, and no widening of the
 * heads): their operands go in as bf16 bits, and only the order of the fp32 sums changes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/cpu/cpu_dnnl.h"
#include "runtime/backend/cpu/cpu_internal.h"
#include "runtime/backend/cpu/cpu_math.h"

/* Whether a call has enough work for a parallel region: tiny heads (tests, short
 * sequences) run faster on one thread than they take to wake the others. */
static bool rt_cpu_attn_parallel(const rt_attn_desc *d) {
    size_t work = (size_t)d->B * d->NH * d->Tq * d->Tk * ((size_t)d->HS + 8);
    return work >= (size_t)RT_CPU_PAR_MIN * 8;
}

/* The counter-RNG index of element (i=0, j=0) of head h of batch row b: global heads. */
static size_t rt_cpu_attn_rng_base(const rt_attn_desc *d, int b, int h) {
    size_t total = d->heads_total > 0 ? (size_t)d->heads_total : (size_t)d->NH;
    return ((size_t)b * total + (size_t)d->head_offset + (size_t)h) * d->Tq * (size_t)d->Tk;
}

/* Rows of the (b, h) probabilities with dropout applied: dst = P * keep / (1 - p), and, when
 * g is non-NULL, the same mask on the gradient rows g (backward). rbase is the RNG index of
 * the head's first element; u is Tk floats of scratch. */
static void rt_cpu_attn_dropout(const rt_attn_desc *d, float *dst, const float *P, float *g, size_t rbase, float *u) {
    const float p = d->dropout_p, s = 1.0f / (1.0f - p);
    const int Tq = d->Tq, Tk = d->Tk;
    for (int i = 0; i < Tq; i++) {
        size_t off = (size_t)i * Tk;
        rt_cpu_uniform_row(d->seed, rt_stream_at_step(d->stream, d->stream_step), rbase + off, (size_t)Tk, u);
        for (int j = 0; j < Tk; j++) {
            float m = u[j] >= p ? s : 0.0f;
            dst[off + j] = P[off + j] * m;
            if (g) g[off + j] *= m;
        }
    }
}

/* Whether a pass's products run on oneDNN's bf16 matmul: at bf16 where this CPU has one, as the
 * linears do. Its operands are then bf16 bits: the heads packed as such, the probabilities and dS
 * narrowed before their products (they hold bf16 values already, so nothing changes but the
 * kernel and the order of its fp32 sums). Elsewhere (fp32, fp16, bf16 without the kernel) the
 * fp32 GEMM over the values as floats. */
static bool rt_cpu_attn_bits16(rt_dtype mm) { return mm == RT_BF16 && cpu_dnnl_has(CPU_DNNL_BF16); }

/* C (M x N, row stride ldc) = alpha op(A) op(B): bf16 bits (bits16) or floats in, fp32 out. */
static void rt_cpu_attn_gemm(bool bits16, bool ta, bool tb, int M, int N, int K, float alpha, const void *A, int lda,
                             const void *B, int ldb, float *C, int ldc) {
    if (!bits16) {
        rt_cpu_gemm_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
        return;
    }
    rt_status st = cpu_dnnl_gemm(CPU_DNNL_BF16, ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
    RT_CHECK(st == RT_OK, "attention's bf16 product M=%d N=%d K=%d: %s", M, N, K, rt_error_message());
}

/* Head h of batch row b of a typed (B, T, NH, HS) buffer x with row stride ld, as the products
 * read it: at fp32, where its rows lie (row stride ld); at a 16-bit compute precision mm,
 * copied into buf, packed (row stride HS) when `in` (as bf16 bits where the products read them,
 * bits16, else as floats; an fp32 handle's values rounded to mm, as every matmul reads its
 * inputs, which changes nothing for a stored activation), else left for head_commit to store
 * from the floats a product writes.
 * Packed whatever the handle's type, so that a 16-bit activation and its fp32 reference meet the
 * same GEMM (oneDNN's kernel, hence its sums, depends on the row stride). */
typedef struct {
    void *p; /* floats, or bf16 bits for an input at bits16 */
    int ld;
} head_view;

static head_view head_at(rt_x x, size_t ld, int b, int T, int h, int HS, float *buf, rt_dtype mm, bool in,
                         bool bits16) {
    const size_t at = (size_t)b * T * ld + (size_t)h * HS;
    if (mm == RT_F32) return (head_view){rt_x_floats(x, "fp32 attention") + at, (int)ld};
    for (int t = 0; in && t < T; t++) {
        const size_t src = at + (size_t)t * ld, dst = (size_t)t * HS;
        if (bits16 && x.t == RT_BF16)
            memcpy((uint16_t *)buf + dst, (const uint16_t *)x.p + src, sizeof(uint16_t) * (size_t)HS);
        else if (bits16)
            rt_cpu_narrow_span(RT_BF16, (uint16_t *)buf + dst, (const float *)x.p + src, (size_t)HS);
        else if (x.t == RT_F32)
            rt_cpu_round_span(mm, buf + dst, (const float *)x.p + src, (size_t)HS);
        else
            rt_cpu_widen_span(x.t, buf + dst, (const uint16_t *)x.p + src, (size_t)HS);
    }
    return (head_view){buf, HS};
}

static void head_commit(rt_x x, size_t ld, int b, int T, int h, int HS, head_view v) {
    const size_t at = (size_t)b * T * ld + (size_t)h * HS;
    if (v.ld == (int)ld && x.t == RT_F32) return; /* written in place */
    for (int t = 0; t < T; t++) {
        const float *row = (const float *)v.p + (size_t)t * HS;
        if (x.t == RT_F32)
            memcpy((float *)x.p + at + (size_t)t * ld, row, sizeof(float) * (size_t)HS);
        else
            rt_cpu_narrow_span(x.t, (uint16_t *)x.p + at + (size_t)t * ld, row, (size_t)HS);
    }
}

/* Floats of scratch for a head's rows of each typed buffer of a pass: n_rows rows of HS. */
static size_t head_scratch(const rt_attn_desc *d, int n_rows) { return (size_t)n_rows * d->HS; }

/* scratch: Tq x Tk for 16-bit probabilities' fp32 softmax, then with dropout Tq x Tk for P'
 * and Tk uniforms; heads (16-bit compute): (2 Tq + 2 Tk) x HS for q, out, k and v; p16 (bits16):
 * Tq x Tk bf16 values for P'. */
static void rt_cpu_attn_fwd_head(const rt_attn_desc *d, rt_dtype mm, int b, int h, rt_x out, void *probs, rt_x q,
                                 rt_x k, rt_x v, float *scratch, float *heads, uint16_t *p16) {
    const int Tq = d->Tq, Tk = d->Tk, HS = d->HS, NH = d->NH;
    const bool bits16 = p16 != NULL;
    const head_view qv = head_at(q, d->ldq, b, Tq, h, HS, heads, mm, true, bits16);
    const head_view kv = head_at(k, d->ldk, b, Tk, h, HS, heads + head_scratch(d, Tq), mm, true, bits16);
    const head_view vv = head_at(v, d->ldv, b, Tk, h, HS, heads + head_scratch(d, Tq + Tk), mm, true, bits16);
    const head_view ov = head_at(out, d->ldo, b, Tq, h, HS, heads + head_scratch(d, Tq + 2 * Tk), mm, false, false);
    const size_t pbase = ((size_t)b * NH + h) * Tq * (size_t)Tk, tt = (size_t)Tq * Tk;
    const bool f32 = d->probs_dtype == RT_F32;
    float *P = f32 ? (float *)probs + pbase : scratch;
    if (!f32) scratch += tt;
    const float *kmask = d->key_mask ? d->key_mask + (size_t)b * Tk : NULL;

    /* S = scale * Q K^T, straight into the probabilities buffer */
    rt_cpu_attn_gemm(bits16, false, true, Tq, Tk, HS, d->scale, qv.p, qv.ld, kv.p, kv.ld, P, Tk);
    for (int i = 0; i < Tq; i++) {
        float *row = P + (size_t)i * Tk;
        const float *bias = d->bias ? d->bias + ((size_t)h * Tq + i) * Tk : NULL;
        int jend = d->causal ? i + 1 : Tk; /* keys j >= jend are excluded */
        if (d->causal && d->prefix && d->prefix[b] > jend) jend = d->prefix[b] < Tk ? d->prefix[b] : Tk;
        if (kmask) {
#pragma omp simd
            for (int j = 0; j < jend; j++) row[j] += kmask[j];
        }
        if (bias) {
#pragma omp simd
            for (int j = 0; j < jend; j++) row[j] += bias[j];
        }
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < jend; j++) mx = row[j] > mx ? row[j] : mx;
        for (int j = jend; j < Tk; j++) row[j] = 0.0f;
        if (mx == -INFINITY) { /* every key masked: zero row, hence zero output */
            for (int j = 0; j < jend; j++) row[j] = 0.0f;
            continue;
        }
#pragma omp simd
        for (int j = 0; j < jend; j++) row[j] = rt_fast_expf(row[j] - mx);
        float sum = 0.0f; /* in order, not vectorized: the same bits at any vector width */
        for (int j = 0; j < jend; j++) sum += row[j];
        float inv = 1.0f / sum;
        for (int j = 0; j < jend; j++) row[j] *= inv;
    }
    /* at a 16-bit precision, P as it is stored (the wrapper rounds fp32 probabilities anyway),
     * so the backward regenerates exactly the P' used here */
    if (mm != RT_F32) rt_cpu_round_span(mm, P, P, tt);
    if (!f32) rt_cpu_narrow_span(d->probs_dtype, (uint16_t *)probs + pbase, P, tt);
    const float *Pd = P;
    if (d->dropout_p > 0.0f) {
        rt_cpu_attn_dropout(d, scratch, P, NULL, rt_cpu_attn_rng_base(d, b, h), scratch + tt);
        if (mm != RT_F32 && !bits16) rt_cpu_round_span(mm, scratch, scratch, tt); /* bits16: narrowed below */
        Pd = scratch;
    }
    /* out = P' V */
    if (bits16) rt_cpu_narrow_span(RT_BF16, p16, Pd, tt);
    rt_cpu_attn_gemm(bits16, false, false, Tq, HS, Tk, 1.0f, bits16 ? (const void *)p16 : Pd, Tk, vv.p, vv.ld, ov.p,
                     ov.ld);
    head_commit(out, d->ldo, b, Tq, h, HS, ov);
}

void rt_cpu_attention_fwd(void *ctx, const rt_attn_desc *d, rt_x out, void *probs, rt_x q, rt_x k, rt_x v) {
    const rt_dtype mm = rt_cpu_matmul_dtype(ctx);
    RT_CHECK(probs != NULL, "attention_fwd needs the probs buffer (B*NH*Tq*Tk values)");
    int tasks = d->B * d->NH;
    const size_t tt = (size_t)d->Tq * d->Tk;
    const size_t scratch_n = (d->probs_dtype != RT_F32 ? tt : 0) + (d->dropout_p > 0.0f ? tt + (size_t)d->Tk : 0);
    const size_t heads_n = mm != RT_F32 ? head_scratch(d, 2 * d->Tq + 2 * d->Tk) : 0;
    const bool bits16 = rt_cpu_attn_bits16(mm);
    int saved = rt_cpu_blas_serial_begin(); /* for a build without oneDNN, whose products are cblas calls */
#pragma omp parallel if (rt_cpu_attn_parallel(d))
    {
        float *scratch = scratch_n ? rt_xmalloc(scratch_n * sizeof(float)) : NULL;
        float *heads = heads_n ? rt_xmalloc(heads_n * sizeof(float)) : NULL;
        uint16_t *p16 = bits16 ? rt_xmalloc(tt * sizeof(uint16_t)) : NULL;
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < tasks; t++)
            rt_cpu_attn_fwd_head(d, mm, t / d->NH, t % d->NH, out, probs, q, k, v, scratch, heads, p16);
        free(scratch);
        free(heads);
        free(p16);
    }
    rt_cpu_blas_serial_end(saved);
}

/* dP' = dO V^T; dP = dP' * keep/(1-p); dV = P'^T dO; dS = P (dP - rowsum(P dP));
 * dQ = scale dS K; dK = scale dS^T Q; dbias += dS. Scratch: dS (Tq x Tk), Pf (Tq x Tk, the
 * widened 16-bit probabilities) and, with dropout, Pd (Tq x Tk for P', then Tk for a row of
 * uniforms); heads (16-bit compute): (3 Tq + 4 Tk) x HS for q, dout, dq, k, v, dk and dv; p16
 * (bits16): Tq x Tk bf16 values for P', then for dS. */
static void rt_cpu_attn_bwd_head(const rt_attn_desc *d, rt_dtype mm, int b, int h, rt_x dq, rt_x dk, rt_x dv,
                                 float *dbias, rt_x dout, const void *probs, rt_x q, rt_x k, rt_x v, float *dS,
                                 float *Pf, float *Pd, float *heads, uint16_t *p16) {
    const int Tq = d->Tq, Tk = d->Tk, HS = d->HS, NH = d->NH;
    const bool bits16 = p16 != NULL;
    const head_view qv = head_at(q, d->ldq, b, Tq, h, HS, heads, mm, true, bits16);
    const head_view dov = head_at(dout, d->ldo, b, Tq, h, HS, heads + head_scratch(d, Tq), mm, true, bits16);
    const head_view dqv = head_at(dq, d->ldq, b, Tq, h, HS, heads + head_scratch(d, 2 * Tq), mm, false, false);
    const head_view kv = head_at(k, d->ldk, b, Tk, h, HS, heads + head_scratch(d, 3 * Tq), mm, true, bits16);
    const head_view vv = head_at(v, d->ldv, b, Tk, h, HS, heads + head_scratch(d, 3 * Tq + Tk), mm, true, bits16);
    const head_view dkv = head_at(dk, d->ldk, b, Tk, h, HS, heads + head_scratch(d, 3 * Tq + 2 * Tk), mm, false, false);
    const head_view dvv = head_at(dv, d->ldv, b, Tk, h, HS, heads + head_scratch(d, 3 * Tq + 3 * Tk), mm, false, false);
    const size_t pbase = ((size_t)b * NH + h) * Tq * (size_t)Tk, tt = (size_t)Tq * Tk;
    const float *P = (const float *)probs + pbase;
    if (d->probs_dtype != RT_F32) {
        rt_cpu_widen_span(d->probs_dtype, Pf, (const uint16_t *)probs + pbase, tt);
        P = Pf;
    }

    /* dP' = dO V^T */
    rt_cpu_attn_gemm(bits16, false, true, Tq, Tk, HS, 1.0f, dov.p, dov.ld, vv.p, vv.ld, dS, Tk);
    const float *Pk = P; /* the probabilities as used in the output (after dropout) */
    if (d->dropout_p > 0.0f) {
        rt_cpu_attn_dropout(d, Pd, P, dS, rt_cpu_attn_rng_base(d, b, h), Pd + tt);
        /* the stored P is rounded already; bits16: narrowed below */
        if (mm != RT_F32 && !bits16) rt_cpu_round_span(mm, Pd, Pd, tt);
        Pk = Pd;
    }
    /* dV = P'^T dO (written) */
    if (bits16) rt_cpu_narrow_span(RT_BF16, p16, Pk, tt);
    rt_cpu_attn_gemm(bits16, true, false, Tk, HS, Tq, 1.0f, bits16 ? (const void *)p16 : Pk, Tk, dov.p, dov.ld, dvv.p,
                     dvv.ld);
    /* softmax backward, in place over dS; masked entries have P = 0 and get dS = 0 */
    for (int i = 0; i < Tq; i++) {
        const float *pr = P + (size_t)i * Tk;
        float *g = dS + (size_t)i * Tk;
        float dot = 0.0f;
        for (int j = 0; j < Tk; j++) dot += pr[j] * g[j];
        for (int j = 0; j < Tk; j++) g[j] = pr[j] * (g[j] - dot);
        if (dbias) {
            float *db = dbias + ((size_t)h * Tq + i) * Tk;
            for (int j = 0; j < Tk; j++) db[j] += g[j];
        }
    }
    /* dbias above took it in fp32; bits16: rounded as it is narrowed */
    if (bits16)
        rt_cpu_narrow_span(RT_BF16, p16, dS, tt);
    else if (mm != RT_F32)
        rt_cpu_round_span(mm, dS, dS, tt);
    const void *dSm = bits16 ? (const void *)p16 : dS;
    /* dQ = scale dS K; dK = scale dS^T Q (written) */
    rt_cpu_attn_gemm(bits16, false, false, Tq, HS, Tk, d->scale, dSm, Tk, kv.p, kv.ld, dqv.p, dqv.ld);
    rt_cpu_attn_gemm(bits16, true, false, Tk, HS, Tq, d->scale, dSm, Tk, qv.p, qv.ld, dkv.p, dkv.ld);
    head_commit(dq, d->ldq, b, Tq, h, HS, dqv);
    head_commit(dk, d->ldk, b, Tk, h, HS, dkv);
    head_commit(dv, d->ldv, b, Tk, h, HS, dvv);
}

void rt_cpu_attention_bwd(void *ctx, const rt_attn_desc *d, rt_x dq, rt_x dk, rt_x dv, float *dbias, rt_x dout,
                          const void *probs, rt_x q, rt_x k, rt_x v) {
    const rt_dtype mm = rt_cpu_matmul_dtype(ctx);
    const int B = d->B, NH = d->NH;
    const size_t tt = (size_t)d->Tq * d->Tk;
    const bool bits16 = rt_cpu_attn_bits16(mm);
    int saved = rt_cpu_blas_serial_begin();
#pragma omp parallel if (rt_cpu_attn_parallel(d))
    {
        float *dS = rt_xmalloc(tt * sizeof(float));
        float *Pf = d->probs_dtype != RT_F32 ? rt_xmalloc(tt * sizeof(float)) : NULL;
        float *Pd = d->dropout_p > 0.0f ? rt_xmalloc((tt + (size_t)d->Tk) * sizeof(float)) : NULL;
        float *heads = mm != RT_F32 ? rt_xmalloc(head_scratch(d, 3 * d->Tq + 4 * d->Tk) * sizeof(float)) : NULL;
        uint16_t *p16 = bits16 ? rt_xmalloc(tt * sizeof(uint16_t)) : NULL;
        if (dbias) {
            /* dbias[h] sums over the batch: each head to one thread, batch in order */
#pragma omp for schedule(dynamic, 1)
            for (int h = 0; h < NH; h++)
                for (int b = 0; b < B; b++)
                    rt_cpu_attn_bwd_head(d, mm, b, h, dq, dk, dv, dbias, dout, probs, q, k, v, dS, Pf, Pd, heads, p16);
        } else {
#pragma omp for schedule(dynamic, 1)
            for (int t = 0; t < B * NH; t++)
                rt_cpu_attn_bwd_head(d, mm, t / NH, t % NH, dq, dk, dv, NULL, dout, probs, q, k, v, dS, Pf, Pd, heads,
                                     p16);
        }
        free(heads);
        free(p16);
        free(dS);
        free(Pf);
        free(Pd);
    }
    rt_cpu_blas_serial_end(saved);
}
