/* The CUDA backend: the rt_backend_ops table over device memory, with GEMMs from cuBLASLt
 * (cuda_lt.cu; attention's own from cuBLAS) and the other kernels in the sibling .cu files. It is checked op by op against the CPU
 * backend (tests/test_cuda_ops.c), so this first version favours plain, obviously correct
 * kernels and exact fp32 GEMM (no TF32) over speed.
 *
 * Set-up failures (no device, bad index, cuBLAS init) return an rt_status; anything that
 * goes wrong once the backend runs is a fault and aborts through CUDA_CHECK/CUBLAS_CHECK. */
#include "runtime/backend/cuda/rt_cuda.h"
#include "runtime/backend/cuda/cuda_sdpa.h"
#include "runtime/backend/cuda/cuda_devices.h"

#include <stdio.h>
#include <string.h>

void *rt_cuda_scratch(rt_cuda_ctx *c, int slot, size_t bytes) {
    RT_CHECK(slot >= 0 && slot < RT_CUDA_SCRATCH_COUNT, "scratch slot %d", slot);
    if (bytes <= c->scratch_bytes[slot]) return c->scratch[slot];
    /* grow by at least half again so a slowly growing shape does not reallocate each call;
     * cudaFree waits for the device, so kernels still reading the old buffer are done */
    size_t want = c->scratch_bytes[slot] + c->scratch_bytes[slot] / 2;
    if (want < bytes) want = bytes;
    CUDA_CHECK(cudaFree(c->scratch[slot]));
    c->memory_epoch++;
    c->scratch[slot] = NULL;
    c->scratch_bytes[slot] = 0;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, want);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* clear the sticky-free error so it is not reported later */
        want = bytes;             /* the headroom may be what did not fit */
        e = cudaMalloc(&p, want);
    }
    RT_CHECK(e == cudaSuccess, "cuda scratch slot %d: cudaMalloc(%zu bytes) failed: %s", slot, want,
             cudaGetErrorString(e));
    c->scratch[slot] = p;
    c->scratch_bytes[slot] = want;
    return p;
}

/* The backend made last on this thread: NCCL's collectives wait for its stream. */
static thread_local cudaStream_t rt_cuda_thread_stream_ = NULL;
extern "C" cudaStream_t rt_cuda_thread_stream(void) { return rt_cuda_thread_stream_; }

static void *cuda_alloc(void *ctx, size_t bytes) {
    void *p = NULL;
    /* cudaMalloc(0) may give NULL, which callers would read as out of memory */
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return NULL;
    }
    CUDA_CHECK(e);
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, rt_cuda_stream(ctx)));
    return p;
}

static void cuda_free(void *ctx, void *p) {
    if (p) CUDA_CHECK(cudaFree(p));
}

/* Small uploads (a batch's ids, masks and labels) go through the pinned slots, so the copy is
 * truly asynchronous and the host goes on queueing the step; a slot is reused once the copy out
 * of it has run. Larger ones (weights at start-up) copy from the caller's memory: CUDA stages
 * pageable memory itself and returns once the source may be reused. */
static void cuda_to_device(void *ctx, void *dst, const void *host_src, size_t bytes) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    if (!bytes) return;
    if (c->capturing || c->rehearsing) {
        rt_cuda_graph_upload(c, dst, host_src, bytes);
        return;
    }
    if (bytes > RT_CUDA_STAGE_BYTES) {
        CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->stream));
        return;
    }
    const int k = c->stage_next;
    c->stage_next = (k + 1) % RT_CUDA_STAGE_SLOTS;
    CUDA_CHECK(cudaEventSynchronize(c->stage_done[k])); /* the slot's last copy has left it */
    memcpy(c->stage[k], host_src, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, c->stage[k], bytes, cudaMemcpyHostToDevice, c->stream));
    CUDA_CHECK(cudaEventRecord(c->stage_done[k], c->stream));
}

/* The host reads the result at once: wait for the stream. */
static void cuda_to_host(void *ctx, void *host_dst, const void *src, size_t bytes) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    if (!bytes) return;
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
}

static size_t cuda_free_memory(void *ctx) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        (void)cudaGetLastError(); /* the report is best effort: clear the error */
        return 0;
    }
    return free_b;
}

static const char *cuda_device_model(void *ctx) { return ((rt_cuda_ctx *)ctx)->described; }

static void cuda_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src)
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, rt_cuda_stream(ctx)));
}

static void cuda_zero(void *ctx, void *p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, rt_cuda_stream(ctx)));
}

static void cuda_sync(void *ctx) { CUDA_CHECK(cudaStreamSynchronize(rt_cuda_stream(ctx))); }

static uint64_t cuda_memory_epoch(void *ctx) { return ((rt_cuda_ctx *)ctx)->memory_epoch; }

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a row-major matrix
 * with row stride ld is its own transpose in column-major with the same ld. So cuBLAS gets
 * B first, A second, M and N swapped, and each operand keeps its own trans flag. */
void rt_cuda_gemm(void *ctx, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                  size_t stride_a, const float *B, int ldb, size_t stride_b, float beta, float *C, int ldc,
                  size_t stride_c, int batch) {
    rt_cuda_ctx *c = (rt_cuda_ctx *)ctx;
    RT_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0, "M=%d N=%d K=%d batch=%d", M, N, K, batch);
    if (M == 0 || N == 0 || batch == 0) return;
    RT_CHECK(lda >= (trans_a ? M : K) && lda >= 1, "lda=%d M=%d K=%d trans_a=%d", lda, M, K, (int)trans_a);
    RT_CHECK(ldb >= (trans_b ? K : N) && ldb >= 1, "ldb=%d K=%d N=%d trans_b=%d", ldb, K, N, (int)trans_b);
    RT_CHECK(ldc >= N, "ldc=%d N=%d", ldc, N);
    CUBLAS_CHECK(cublasSgemmStridedBatched(
        c->cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb,
        (long long)stride_b, A, lda, (long long)stride_a, &beta, C, ldc, (long long)stride_c, batch));
}

/* Filled by assignment rather than designated initializers, which C++17 lacks. */
static rt_backend_ops rt_cuda_make_ops(void) {
    rt_backend_ops ops;
    rt_backend_ops *o = &ops;
    memset(o, 0, sizeof *o);
    o->name = "cuda";
    o->alloc = cuda_alloc;
    o->free = cuda_free;
    o->free_memory = cuda_free_memory;
    o->device_model = cuda_device_model;
    o->to_device = cuda_to_device;
    o->to_host = cuda_to_host;
    o->copy = cuda_copy;
    o->zero = cuda_zero;
    o->sync = cuda_sync;
    o->set_matmul_precision = rt_cuda_set_matmul_precision;
    o->round_to = rt_cuda_round_to;
    o->gemm = rt_cuda_gemm_op;
    o->linear_fwd = rt_cuda_linear_fwd;
    o->linear_wgrad = rt_cuda_linear_wgrad;
    o->linear_dact = rt_cuda_linear_dact;
    o->layernorm_fwd = rt_cuda_layernorm_fwd;
    o->layernorm_bwd = rt_cuda_layernorm_bwd;
    o->rmsnorm_fwd = rt_cuda_rmsnorm_fwd;
    o->rmsnorm_bwd = rt_cuda_rmsnorm_bwd;
    o->residual_fwd = rt_cuda_residual_fwd;
    o->residual_bwd = rt_cuda_residual_bwd;
    o->act_fwd = rt_cuda_act_fwd;
    o->act_bwd = rt_cuda_act_bwd;
    o->gated_act_fwd = rt_cuda_gated_act_fwd;
    o->gated_act_bwd = rt_cuda_gated_act_bwd;
    o->add_bias = rt_cuda_add_bias;
    o->bias_bwd = rt_cuda_bias_bwd;
    o->add = rt_cuda_add;
    o->axpy = rt_cuda_axpy;
    o->scale = rt_cuda_scale;
    o->scale_rows = rt_cuda_scale_rows;
    o->clamp_inf = rt_cuda_clamp_inf;
    o->clamp_abs_bwd = rt_cuda_clamp_abs_bwd;
    o->attention_fwd = rt_cuda_attention_fwd;
    o->attention_bwd = rt_cuda_attention_bwd;
    o->attention_kept_row = rt_cuda_attention_kept_row;
    o->relbias_fwd = rt_cuda_relbias_fwd;
    o->relbias_bwd = rt_cuda_relbias_bwd;
    o->embedding_fwd = rt_cuda_embedding_fwd;
    o->embedding_bwd = rt_cuda_embedding_bwd;
    o->softmax_xent = rt_cuda_softmax_xent;
    o->mse_loss = rt_cuda_mse_loss;
    o->bce_logits_loss = rt_cuda_bce_logits_loss;
    o->xent_vocab = rt_cuda_xent_vocab;
    o->dropout_fwd = rt_cuda_dropout_fwd;
    o->dropout_bwd = rt_cuda_dropout_bwd;
    o->dropout_cols = rt_cuda_dropout_cols;
    o->gather_rows = rt_cuda_gather_rows;
    o->scatter_rows_add = rt_cuda_scatter_rows_add;
    o->adamw = rt_cuda_adamw;
    o->sumsq = rt_cuda_sumsq;
    o->sumsq_into = rt_cuda_sumsq_into;
    o->loss_into = rt_cuda_loss_into;
    o->step_finish = rt_cuda_step_finish;
    o->adamw_step = rt_cuda_adamw_step;
    o->weight_copy_set = rt_cuda_weight_copy_set;
    o->weight_copy_update = rt_cuda_weight_copy_update;
    o->memory_epoch = cuda_memory_epoch;
    o->graph_capture_begin = rt_cuda_graph_capture_begin;
    o->graph_capture_end = rt_cuda_graph_capture_end;
    o->graph_rehearse_begin = rt_cuda_graph_rehearse_begin;
    o->graph_rehearse_end = rt_cuda_graph_rehearse_end;
    o->graph_launch = rt_cuda_graph_launch;
    o->graph_free = rt_cuda_graph_free;
    return ops;
}

/* A function-local static: C++ initializes it once even when threads race to the first call. */
static const rt_backend_ops *rt_cuda_ops(void) {
    static const rt_backend_ops ops = rt_cuda_make_ops();
    return &ops;
}

extern "C" rt_status rt_cuda_backend_init(int device, rt_backend **out) {
    rt_status st = RT_OK;
    rt_cuda_ctx *c = NULL;
    rt_backend *be = NULL;
    bool have_cublas = false;
    int count = 0;
    cudaError_t e;
    cublasStatus_t bs;
    struct cudaDeviceProp prop;
    *out = NULL;
    const char *attention = getenv("TZ_CUDA_ATTENTION");
    /* TZ_CUDA_ACTIVATIONS=fp32: activations in fp32 buffers, as before the typed kernels, to
     * compare the two on a GPU (the typed ones are the default) */
    const char *acts = getenv("TZ_CUDA_ACTIVATIONS");
    if (attention && *attention && strcmp(attention, "fused") != 0 && strcmp(attention, "materialized") != 0 &&
        strcmp(attention, "cudnn") != 0)
        RT_FAIL(RT_ERR_CONFIG, "TZ_CUDA_ATTENTION=%s: expected materialized, fused or cudnn", attention);
    if (acts && *acts && strcmp(acts, "fp32") != 0 && strcmp(acts, "typed") != 0)
        RT_FAIL(RT_ERR_CONFIG, "TZ_CUDA_ACTIVATIONS=%s: expected typed or fp32", acts);

    if ((st = rt_cuda_device_count(&count)) != RT_OK) {
        rt_error_wrap(st, "cuda:%d", device);
        goto fail;
    }
    if (device < 0 || device >= count)
        RT_FAIL(RT_ERR_CONFIG, "cuda:%d: expected a device index in [0, %d): %d CUDA device%s visible", device, count,
                count, count == 1 ? " is" : "s are");
    e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        RT_FAIL(RT_ERR_RUNTIME, "cuda:%d: cudaSetDevice failed: %s", device, cudaGetErrorString(e));
    }
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));

    c = (rt_cuda_ctx *)rt_xcalloc(1, sizeof *c);
    c->device = device;
    snprintf(c->model, sizeof c->model, "%s", prop.name);
    c->sm_major = prop.major;
    c->sm_minor = prop.minor;
    c->matmul = RT_F32;
    c->attn_fused = attention && strcmp(attention, "fused") == 0;
    if (attention && strcmp(attention, "cudnn") == 0) {
        char why[256];
        if (!(c->sdpa = rt_sdpa_create(why, sizeof why)))
            RT_FAIL(RT_ERR_UNSUPPORTED, "TZ_CUDA_ATTENTION=cudnn: %s", why);
    }
    snprintf(c->described, sizeof c->described, "%s%s", prop.name,
             c->attn_fused ? "; attention: fused kernels at bf16/fp16 (TZ_CUDA_ATTENTION=fused)"
             : c->sdpa     ? "; attention: cuDNN's SDPA at bf16/fp16 (TZ_CUDA_ATTENTION=cudnn)"
                           : "");
    bs = cublasCreate(&c->cublas);
    if (bs != CUBLAS_STATUS_SUCCESS)
        RT_FAIL(RT_ERR_RUNTIME, "cuda:%d (%s): cublasCreate failed: %s", device, prop.name, cublasGetStatusString(bs));
    have_cublas = true;
    bs = cublasLtCreate(&c->cublaslt);
    if (bs != CUBLAS_STATUS_SUCCESS)
        RT_FAIL(RT_ERR_RUNTIME, "cuda:%d (%s): cublasLtCreate failed: %s", device, prop.name,
                cublasGetStatusString(bs));
    /* Plain fp32 (the default mode never uses TF32 tensor cores for Sgemm; set explicitly
     * so nothing inherited changes it) so results track the CPU backend within fp32
     * rounding. TF32 can come once the model tests pin their tolerances. */
    CUBLAS_CHECK(cublasSetMathMode(c->cublas, CUBLAS_DEFAULT_MATH));
    CUBLAS_CHECK(cublasSetPointerMode(c->cublas, CUBLAS_POINTER_MODE_HOST));
    /* one blocking stream for everything (see rt_cuda.h), and the pinned upload slots */
    e = cudaStreamCreate(&c->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        c->stream = NULL;
        RT_FAIL(RT_ERR_RUNTIME, "cuda:%d (%s): cudaStreamCreate failed: %s", device, prop.name, cudaGetErrorString(e));
    }
    CUBLAS_CHECK(cublasSetStream(c->cublas, c->stream));
    for (int k = 0; k < RT_CUDA_STAGE_SLOTS; k++) {
        e = cudaMallocHost(&c->stage[k], RT_CUDA_STAGE_BYTES);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            c->stage[k] = NULL;
            RT_FAIL(RT_ERR_NOMEM, "cuda:%d: %d pinned upload slots of %zu bytes: %s", device, RT_CUDA_STAGE_SLOTS,
                    RT_CUDA_STAGE_BYTES, cudaGetErrorString(e));
        }
        CUDA_CHECK(cudaEventCreateWithFlags(&c->stage_done[k], cudaEventDisableTiming));
    }
    rt_cuda_thread_stream_ = c->stream;

    be = (rt_backend *)rt_xcalloc(1, sizeof *be);
    be->ops = rt_cuda_ops();
    be->ctx = c;
    be->device = device;
    be->native_bf16 = prop.major >= 8; /* Ampere and newer: bf16 tensor cores */
    /* The kernels read and write 16-bit activation handles, so models keep activations in 2 bytes
     * at a 16-bit precision; TZ_CUDA_ACTIVATIONS=fp32 keeps them in fp32 buffers, for comparing. */
    be->typed_acts = !(acts && strcmp(acts, "fp32") == 0);
    c->typed_acts = be->typed_acts;
    *out = be;
    return RT_OK;
fail:
    if (have_cublas) cublasDestroy(c->cublas);
    if (c && c->cublaslt) cublasLtDestroy(c->cublaslt);
    for (int k = 0; c && k < RT_CUDA_STAGE_SLOTS; k++) {
        if (c->stage[k]) cudaFreeHost(c->stage[k]);
        if (c->stage_done[k]) cudaEventDestroy(c->stage_done[k]);
    }
    if (c && c->stream) cudaStreamDestroy(c->stream);
    if (c) rt_sdpa_destroy(c->sdpa);
    if (c) rt_cuda_lt_plans_free(c);
    free(c);
    free(be);
    return st;
}

extern "C" void rt_cuda_backend_free(rt_backend *be) {
    if (!be) return;
    rt_cuda_ctx *c = (rt_cuda_ctx *)be->ctx;
    if (c) {
        CUDA_CHECK(cudaSetDevice(c->device));
        CUDA_CHECK(cudaDeviceSynchronize());
        rt_sdpa_destroy(c->sdpa);
        for (int i = 0; i < RT_CUDA_SCRATCH_COUNT; i++) CUDA_CHECK(cudaFree(c->scratch[i]));
        CUDA_CHECK(cudaFree(c->copy));
        CUBLAS_CHECK(cublasDestroy(c->cublas));
        CUBLAS_CHECK(cublasLtDestroy(c->cublaslt));
        for (int k = 0; k < RT_CUDA_STAGE_SLOTS; k++) {
            CUDA_CHECK(cudaFreeHost(c->stage[k]));
            CUDA_CHECK(cudaEventDestroy(c->stage_done[k]));
        }
        if (rt_cuda_thread_stream_ == c->stream) rt_cuda_thread_stream_ = NULL;
        CUDA_CHECK(cudaStreamDestroy(c->stream));
        rt_cuda_lt_plans_free(c);
        free(c);
    }
    free(be);
}
