/* The backend's side of cuDNN's SDPA (TZ_CUDA_ATTENTION=cudnn): which calls go to it
 * (cuda_sdpa_plan.h), what the stack keeps for attentions of a shape it takes (its output and
 * statistics, not the probabilities), its workspace from the backend's scratch, the bias it reads
 * at the compute type (T5's position bias narrowed, GLM's prefix mask built, both per call: the
 * bias changes with each step and the prefix with each batch), the position bias's gradient added
 * into the fp32 one, and the calls (cuda_sdpa.h). A call it does not take runs on the
 * materialized path (cuda_attention.cu), which recomputes its probabilities in the backward where
 * the stack kept no room for them; the first call for each reason says so in one line. */
#include "runtime/backend/cuda/cuda_sdpa.h"
#include "runtime/backend/cuda/cuda_sdpa_plan.h"
#include "runtime/backend/cuda/rt_cuda.h"

extern "C" {
#include "runtime/base/rt_log.h"
}

/* The type the models' activation handles hold: the compute type where the kernels read 16-bit
 * handles, else fp32 (rt_act_dtype on the backend). */
static rt_dtype rt_cuda_act_type(const rt_cuda_ctx *c) { return c->typed_acts ? c->matmul : RT_F32; }

static void rt_cuda_sdpa_log_once(rt_cuda_ctx *c, const char *why) {
    const int n = (int)(sizeof c->sdpa_logged / sizeof c->sdpa_logged[0]);
    for (int i = 0; i < n; i++) {
        if (c->sdpa_logged[i] == why) return;
        if (!c->sdpa_logged[i]) {
            c->sdpa_logged[i] = why;
            rt_log_info("attention: cuDNN's SDPA does not take %s; the materialized path runs it", why);
            return;
        }
    }
}

bool rt_cuda_attn_cudnn(rt_cuda_ctx *c, const rt_attn_desc *d) {
    if (!c->sdpa) return false;
    const char *why = rt_sdpa_unsupported(d, rt_cuda_act_type(c), c->sm_major, rt_sdpa_version(c->sdpa));
    /* its dropout seed goes up from the host at each call, which a graph would not repeat */
    if (!why && c->capturing && d->dropout_p > 0) why = "dropout inside a step graph's capture";
    if (why) rt_cuda_sdpa_log_once(c, why);
    return why == NULL;
}

bool rt_cuda_sdpa_took(const rt_cuda_ctx *c, const rt_attn_desc *d) {
    return rt_sdpa_took(c->sdpa, d, rt_cuda_act_type(c));
}

size_t rt_cuda_sdpa_kept_row(const rt_cuda_ctx *c, const rt_attn_desc *d) {
    if (!c->sdpa) return 0;
    return rt_sdpa_shape_unsupported(d, rt_cuda_act_type(c), c->sm_major, rt_sdpa_version(c->sdpa))
               ? 0
               : rt_sdpa_kept_row(d);
}

static void *rt_cuda_sdpa_workspace(void *ctx, size_t bytes) {
    return rt_cuda_scratch((rt_cuda_ctx *)ctx, RT_CUDA_SCRATCH_SDPA, bytes);
}

__global__ void rt_cuda_sdpa_fill_kernel(int32_t *p, int n, int32_t v) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v;
}

/* With padding given as lengths, cuDNN's padding mask also wants the query rows' lengths: all Tq
 * (each query row attends, as on the CPU). NULL without. */
static const int32_t *rt_cuda_sdpa_q_len(rt_cuda_ctx *c, const rt_attn_desc *d) {
    if (!d->key_len) return NULL;
    int32_t *p = (int32_t *)rt_cuda_scratch(c, RT_CUDA_SCRATCH_SDPA_LEN, (size_t)d->B * sizeof(int32_t));
    rt_cuda_sdpa_fill_kernel<<<(unsigned)((d->B + 255) / 256), 256, 0, c->stream>>>(p, d->B, d->Tq);
    CUDA_LAUNCH_CHECK();
    return p;
}

__global__ void rt_cuda_sdpa_prefix_kernel(void *mask, int kind, const int32_t *prefix, int Tq, int Tk, size_t n,
                                           float neg) {
    const size_t tt = (size_t)Tq * Tk;
    RT_CUDA_FOR_EACH(e, n) {
        const size_t b = e / tt, ij = e % tt;
        rt_cuda_store16(mask, kind, e, rt_sdpa_prefix_mask((int)(ij / Tk), (int)(ij % Tk), prefix[b], neg));
    }
}

__global__ void rt_cuda_sdpa_dbias_add_kernel(float *dbias, const void *d16, int kind, size_t n) {
    RT_CUDA_FOR_EACH(i, n) dbias[i] += rt_cuda_load16(d16, kind, i);
}

/* The bias cuDNN reads for d at the compute type (rt_sdpa_bias_of), in scratch; NULL where none. */
static const void *rt_cuda_sdpa_bias(rt_cuda_ctx *c, const rt_attn_desc *d) {
    const size_t tt = (size_t)d->Tq * d->Tk;
    switch (rt_sdpa_bias_of(d)) {
    case RT_SDPA_BIAS_NONE: return NULL;
    case RT_SDPA_BIAS_POSITION: {
        const size_t n = (size_t)d->NH * tt;
        void *p = rt_cuda_scratch(c, RT_CUDA_SCRATCH_SDPA_BIAS, n * 2);
        rt_cuda_narrow(c, c->matmul, p, d->bias, n);
        return p;
    }
    case RT_SDPA_BIAS_PREFIX: {
        const size_t n = (size_t)d->B * tt;
        void *p = rt_cuda_scratch(c, RT_CUDA_SCRATCH_SDPA_BIAS, n * 2);
        rt_cuda_sdpa_prefix_kernel<<<rt_cuda_grid(n, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, c->stream>>>(
            p, rt_cuda_kind16(c->matmul), d->prefix, d->Tq, d->Tk, n, rt_sdpa_mask_neg(c->matmul));
        CUDA_LAUNCH_CHECK();
        return p;
    }
    }
    return NULL;
}

static void rt_cuda_sdpa_check_types(const rt_cuda_ctx *c, const rt_x *x, int n) {
    for (int i = 0; i < n; i++)
        RT_CHECK(x[i].t == c->matmul, "cuDNN SDPA: an activation handle of %s under %s compute", rt_dtype_name(x[i].t),
                 rt_dtype_name(c->matmul));
}

bool rt_cuda_sdpa_fwd(rt_cuda_ctx *c, const rt_attn_desc *d, rt_x out, void *kept, rt_x q, rt_x k, rt_x v) {
    const rt_x all[4] = {out, q, k, v};
    rt_cuda_sdpa_check_types(c, all, 4);
    rt_status st = rt_sdpa_fwd(c->sdpa, c->stream, d, c->matmul, out.p, kept, q.p, k.p, v.p, rt_cuda_sdpa_q_len(c, d),
                               rt_cuda_sdpa_bias(c, d), rt_cuda_sdpa_workspace, c);
    if (st == RT_OK) return true;
    /* refused: said the first time (the message names the shape; later ones are empty), and the
     * materialized path runs it */
    if (rt_error_message()[0]) rt_log_warn("%s", rt_error_message());
    return false;
}

void rt_cuda_sdpa_bwd(rt_cuda_ctx *c, const rt_attn_desc *d, rt_x dq, rt_x dk, rt_x dv, float *dbias, rt_x dout,
                      const void *kept, rt_x q, rt_x k, rt_x v) {
    const rt_x all[7] = {dq, dk, dv, dout, q, k, v};
    rt_cuda_sdpa_check_types(c, all, 7);
    /* cuDNN writes the position bias's gradient at the compute type; the model sums it in fp32 */
    const bool want = dbias && rt_sdpa_bias_of(d) == RT_SDPA_BIAS_POSITION;
    const size_t n = (size_t)d->NH * d->Tq * d->Tk;
    void *d16 = want ? rt_cuda_scratch(c, RT_CUDA_SCRATCH_SDPA_DBIAS, n * 2) : NULL;
    rt_status st = rt_sdpa_bwd(c->sdpa, c->stream, d, c->matmul, dq.p, dk.p, dv.p, dout.p, kept, q.p, k.p, v.p,
                               rt_cuda_sdpa_q_len(c, d), rt_cuda_sdpa_bias(c, d), d16, rt_cuda_sdpa_workspace, c);
    /* the forward ran on cuDNN, so only cuDNN's backward can read what it kept */
    RT_CHECK(st == RT_OK, "%s", rt_error_message());
    if (!want) return;
    rt_cuda_sdpa_dbias_add_kernel<<<rt_cuda_grid(n, RT_CUDA_THREADS), RT_CUDA_THREADS, 0, c->stream>>>(
        dbias, d16, rt_cuda_kind16(c->matmul), n);
    CUDA_LAUNCH_CHECK();
}
