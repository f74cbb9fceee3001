/* NCCL communicators: collectives on device buffers, with the timeouts NCCL itself lacks.
 *
 * Communicators are created non-blocking (config.blocking = 0): then init, split and every
 * collective return at once, and we poll ncclCommGetAsyncError and cudaStreamQuery against a
 * deadline. On timeout, or when NCCL reports an asynchronous error (a peer died), the
 * communicator is aborted with ncclCommAbort, which also ends kernels stuck waiting for the
 * peer, and every later call fails at once. Splits use ncclCommSplit (NCCL >= 2.18); older
 * NCCL re-initializes from a split of the bootstrap communicator. Host buffers go over the
 * bootstrap (see rt_comm_nccl.h).
 *
 * NCCL_CHECK aborts with file:line for calls that only fail on a broken installation or a
 * programming error; the collectives' own failures come back as rt_status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

/* C headers with C linkage; the guards make rt_comm_nccl.h's own includes no-ops. */
extern "C" {
#include "runtime/backend/cuda/cuda_devices.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/base/rt_status.h"
}
#include "runtime/comm/rt_comm_nccl.h"
#include "runtime/backend/cuda/rt_cuda.h" /* rt_cuda_thread_stream: the backend's stream collectives wait for */

#ifdef TZ_USE_NCCL

#include <nccl.h>

#define NCCL_CHECK(call)                                                                  \
    do {                                                                                  \
        ncclResult_t rt_nccl_rc_ = (call);                                                \
        if (rt_nccl_rc_ != ncclSuccess && rt_nccl_rc_ != ncclInProgress)                  \
            rt_abort_at(__FILE__, __LINE__, #call, "NCCL error %d: %s", (int)rt_nccl_rc_, \
                        ncclGetErrorString(rt_nccl_rc_));                                 \
    } while (0)

#define NCCL_CUDA_CHECK(call)                                                                   \
    do {                                                                                        \
        cudaError_t rt_cuda_err_ = (call);                                                      \
        if (rt_cuda_err_ != cudaSuccess)                                                        \
            rt_abort_at(__FILE__, __LINE__, #call, "%s (%s)", cudaGetErrorString(rt_cuda_err_), \
                        cudaGetErrorName(rt_cuda_err_));                                        \
    } while (0)

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
#define RT_NCCL_HAS_SPLIT 1
#else
#define RT_NCCL_HAS_SPLIT 0
#endif

struct nccl_ctx {
    ncclComm_t comm;
    cudaStream_t stream;
    cudaStream_t async_stream; /* non-blocking, for all_reduce_start; made on first use */
    cudaEvent_t compute_done;  /* recorded on the backend's stream before each collective */
    float *barrier_buf;        /* the barrier's one float, made on its first use and kept */
    int device, rank, size;
    double timeout_s;
    rt_comm *bootstrap; /* the host twin (same ranks); not owned unless own_bootstrap */
    int own_bootstrap;
    int aborted;
    char broken[200]; /* why the communicator is unusable, "" if fine */
};

static const rt_comm_ops *nccl_ops_ptr(void);

static double nccl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nccl_sleep(long *ns) {
    struct timespec ts = {0, *ns};
    nanosleep(&ts, NULL);
    if (*ns < 1000000) *ns *= 2;
}

static void nccl_abort(nccl_ctx *c) {
    if (!c->aborted && c->comm) ncclCommAbort(c->comm);
    c->aborted = 1;
}

/* Waits for the communicator to leave ncclInProgress (init, split, an enqueue) and, when
 * stream_too, for the stream to drain. */
static rt_status nccl_wait(nccl_ctx *c, const char *what, size_t count, int stream_too) {
    double deadline = nccl_now() + c->timeout_s;
    long ns = 10000;
    int comm_done = 0;
    for (;;) {
        if (!comm_done) {
            ncclResult_t ares = ncclSuccess;
            NCCL_CHECK(ncclCommGetAsyncError(c->comm, &ares));
            if (ares == ncclSuccess) {
                comm_done = 1;
            } else if (ares != ncclInProgress) {
                nccl_abort(c);
                snprintf(c->broken, sizeof c->broken, "%s failed: NCCL %s", what, ncclGetErrorString(ares));
                return rt_errorf(RT_ERR_RUNTIME,
                                 "nccl comm (size %d, rank %d, device %d): %s of %zu elements failed: %s", c->size,
                                 c->rank, c->device, what, count, ncclGetErrorString(ares));
            }
        }
        if (comm_done) {
            if (!stream_too) return RT_OK;
            cudaError_t e = cudaStreamQuery(c->stream);
            if (e == cudaSuccess) {
                /* a peer failing mid-kernel shows up only as an async error */
                ncclResult_t ares = ncclSuccess;
                NCCL_CHECK(ncclCommGetAsyncError(c->comm, &ares));
                if (ares == ncclSuccess) return RT_OK;
                comm_done = 0;
                continue;
            }
            if (e != cudaErrorNotReady) NCCL_CUDA_CHECK(e);
        }
        if (nccl_now() > deadline) break;
        nccl_sleep(&ns);
    }
    nccl_abort(c);
    snprintf(c->broken, sizeof c->broken, "%s did not complete within %g s", what, c->timeout_s);
    return rt_errorf(RT_ERR_RUNTIME,
                     "nccl comm (size %d, rank %d, device %d): %s of %zu elements did not complete within %g s "
                     "(a rank died, hangs, or skipped it); the communicator was aborted",
                     c->size, c->rank, c->device, what, count, c->timeout_s);
}

static rt_status nccl_usable(nccl_ctx *c, const char *what) {
    if (!c->broken[0]) return RT_OK;
    return rt_errorf(RT_ERR_RUNTIME, "nccl comm (size %d): %s after %s", c->size, what, c->broken);
}

/* Enqueues a collective: the result is ncclSuccess or ncclInProgress on a healthy comm. */
static rt_status nccl_enqueued(nccl_ctx *c, ncclResult_t rc, const char *what, size_t count) {
    if (rc != ncclSuccess && rc != ncclInProgress) {
        nccl_abort(c);
        snprintf(c->broken, sizeof c->broken, "%s failed: NCCL %s", what, ncclGetErrorString(rc));
        return rt_errorf(RT_ERR_RUNTIME, "nccl comm (size %d, rank %d): %s of %zu elements failed: %s", c->size,
                         c->rank, what, count, ncclGetErrorString(rc));
    }
    return nccl_wait(c, what, count, 1);
}

static ncclRedOp_t nccl_op(rt_reduce_op op) { return op == RT_REDUCE_MAX ? ncclMax : ncclSum; }

/* Host memory, pageable or pinned: NCCL kernels cannot read pageable memory, so such a buffer
 * travels over the host twin. Before CUDA 11 a pageable pointer is an error here (cleared). */
static int nccl_is_host(const void *p) {
    cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    return a.type == cudaMemoryTypeUnregistered || a.type == cudaMemoryTypeHost;
}

/* Both buffers of a gather or scatter on the same side; a mix is a caller's bug. */
static int nccl_is_host2(const void *out, const void *in, const char *what) {
    int ho = nccl_is_host(out), hi = nccl_is_host(in);
    RT_CHECK(ho == hi, "nccl %s: output in %s memory, input in %s memory", what, ho ? "host" : "device",
             hi ? "host" : "device");
    return ho;
}

/* Before a collective on the comm's stream: the device, and the stream waits (on the GPU) for
 * what the CUDA backend on this thread has queued on its own stream, which writes the buffers.
 * The call returns once the collective is done, so what the backend queues next comes after. */
static void nccl_prepare(nccl_ctx *c) {
    NCCL_CUDA_CHECK(cudaSetDevice(c->device));
    cudaStream_t compute = rt_cuda_thread_stream();
    if (!compute) return; /* no backend here: work on the legacy default stream is ordered anyway */
    NCCL_CUDA_CHECK(cudaEventRecord(c->compute_done, compute));
    NCCL_CUDA_CHECK(cudaStreamWaitEvent(c->stream, c->compute_done, 0));
}

static rt_status nccl_all_reduce(void *vctx, float *buf, size_t n, rt_reduce_op op) {
    nccl_ctx *c = (nccl_ctx *)vctx;
    rt_status st = nccl_usable(c, "all_reduce");
    if (st != RT_OK || n == 0) return st;
    if (nccl_is_host(buf)) return c->bootstrap->ops->all_reduce(c->bootstrap->ctx, buf, n, op);
    nccl_prepare(c);
    return nccl_enqueued(c, ncclAllReduce(buf, buf, n, ncclFloat32, nccl_op(op), c->comm, c->stream), "all_reduce", n);
}

/* A collective that overlaps the backend's work (an all-reduce of gradient buckets, ZeRO-3's
 * prefetch all-gather): it waits (on the GPU) for what the backend's stream (the legacy
 * default stream without a backend) queued so far, runs on a non-blocking stream, and its
 * completion is an event the request polls, with the timeout. */
typedef struct {
    cudaEvent_t ready, done;
    size_t n;
    const char *what;
} nccl_request;

/* Enqueues all_reduce (gather false: buf in place) or all_gather (gather true: in -> out) on the
 * async stream behind the default stream's work. */
static rt_status nccl_start(nccl_ctx *c, bool gather, float *out, const float *in, size_t n, rt_reduce_op op,
                            void **req) {
    const char *what = gather ? "all_gather" : "all_reduce";
    rt_status st = RT_OK;
    nccl_prepare(c);
    if (!c->async_stream) NCCL_CUDA_CHECK(cudaStreamCreateWithFlags(&c->async_stream, cudaStreamNonBlocking));
    nccl_request *r = (nccl_request *)rt_xcalloc(1, sizeof *r);
    r->n = n;
    r->what = what;
    NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&r->ready, cudaEventDisableTiming));
    NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    NCCL_CUDA_CHECK(cudaEventRecord(r->ready, rt_cuda_thread_stream())); /* what the backend wrote so far */
    NCCL_CUDA_CHECK(cudaStreamWaitEvent(c->async_stream, r->ready, 0));
    ncclResult_t rc = gather ? ncclAllGather(in, out, n, ncclFloat32, c->comm, c->async_stream)
                             : ncclAllReduce(out, out, n, ncclFloat32, nccl_op(op), c->comm, c->async_stream);
    if (rc == ncclInProgress) {
        /* A non-blocking communicator may return before the kernel is on the stream: the event
         * recorded now could complete before the collective has even started, and the caller
         * would read half-done data. Wait (host side, with the timeout) until NCCL has enqueued
         * it, as the blocking path does, but not for the stream. */
        st = nccl_wait(c, what, n, 0);
    } else if (rc != ncclSuccess) {
        nccl_abort(c);
        snprintf(c->broken, sizeof c->broken, "%s failed: NCCL %s", what, ncclGetErrorString(rc));
        st = rt_errorf(RT_ERR_RUNTIME, "nccl comm (size %d, rank %d): %s of %zu elements failed: %s", c->size, c->rank,
                       what, n, ncclGetErrorString(rc));
    }
    if (st != RT_OK) {
        cudaEventDestroy(r->ready);
        cudaEventDestroy(r->done);
        free(r);
        return st;
    }
    NCCL_CUDA_CHECK(cudaEventRecord(r->done, c->async_stream));
    *req = r;
    return RT_OK;
}

static rt_status nccl_all_reduce_start(void *vctx, float *buf, size_t n, rt_reduce_op op, void **out) {
    nccl_ctx *c = (nccl_ctx *)vctx;
    *out = NULL;
    rt_status st = nccl_usable(c, "all_reduce");
    if (st != RT_OK || n == 0) return st;
    if (nccl_is_host(buf)) return c->bootstrap->ops->all_reduce(c->bootstrap->ctx, buf, n, op);
    return nccl_start(c, false, buf, buf, n, op, out);
}

static rt_status nccl_all_gather_start(void *vctx, float *out, const float *in, size_t n_in, void **req) {
    nccl_ctx *c = (nccl_ctx *)vctx;
    *req = NULL;
    rt_status st = nccl_usable(c, "all_gather");
    if (st != RT_OK || n_in == 0) return st;
    if (nccl_is_host2(out, in, "all_gather")) return c->bootstrap->ops->all_gather(c->bootstrap->ctx, out, in, n_in);
    return nccl_start(c, true, out, in, n_in, RT_REDUCE_SUM, req);
}

static rt_status nccl_wait_request(void *vctx, void *vreq) {
    nccl_ctx *c = (nccl_ctx *)vctx;
    nccl_request *r = (nccl_request *)vreq;
    double deadline = nccl_now() + c->timeout_s;
    long ns = 10000;
    rt_status st = RT_OK;
    nccl_prepare(c);
    for (;;) {
        cudaError_t e = cudaEventQuery(r->done);
        ncclResult_t ares = ncclSuccess;
        NCCL_CHECK(ncclCommGetAsyncError(c->comm, &ares));
        if (ares != ncclSuccess && ares != ncclInProgress) {
            nccl_abort(c);
            snprintf(c->broken, sizeof c->broken, "%s failed: NCCL %s", r->what, ncclGetErrorString(ares));
            st = rt_errorf(RT_ERR_RUNTIME, "nccl comm (size %d, rank %d, device %d): %s of %zu elements failed: %s",
                           c->size, c->rank, c->device, r->what, r->n, ncclGetErrorString(ares));
            break;
        }
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) NCCL_CUDA_CHECK(e);
        if (nccl_now() > deadline) {
            nccl_abort(c);
            snprintf(c->broken, sizeof c->broken, "%s did not complete within %g s", r->what, c->timeout_s);
            st = rt_errorf(RT_ERR_RUNTIME,
                           "nccl comm (size %d, rank %d, device %d): %s of %zu elements did not complete within "
                           "%g s (a rank died, hangs, or skipped it); the communicator was aborted",
                           c->size, c->rank, c->device, r->what, r->n, c->timeout_s);
            break;
        }
        nccl_sleep(&ns);
    }
    cudaEventDestroy(r->ready);
    cudaEventDestroy(r->done);
    free(r);
    return st;
}

static rt_status nccl_reduce_scatter(void *vctx, float *out, const float *in, size_t n_out, rt_reduce_op op) {
    nccl_ctx *c = (nccl_ctx *)vctx;
    rt_status st = nccl_usable(c, "reduce_scatter");
    if (st != RT_OK || n_out == 0) return st;
    if (nccl_is_host2(out, in, "reduce_scatter"))
        return c->bootstrap->ops->reduce_scatter(c->bootstrap->ctx, out, in, n_out, op);
    nccl_prepare(c);
    return nccl_enqueued(c, ncclReduceScatter(in, out, n_out, ncclFloat32, nccl_op(op), c->comm, c->stream),
                         "reduce_scatter", n_out);
}

static rt_status nccl_all_gather(void *vctx, float *out, const float *in, size_t n_in) {
    nccl_ctx *c = (nccl_ctx *)vctx;
    rt_status st = nccl_usable(c, "all_gather");
    if (st != RT_OK || n_in == 0) return st;
    if (nccl_is_host2(out, in, "all_gather")) return c->bootstrap->ops->all_gather(c->bootstrap->ctx, out, in, n_in);
    nccl_prepare(c);
    return nccl_enqueued(c, ncclAllGather(in, out, n_in, ncclFloat32, c->comm, c->stream), "all_gather", n_in);
}

static rt_status nccl_broadcast(void *vctx, void *buf, size_t bytes, int root) {
    nccl_ctx *c = (nccl_ctx *)vctx;
    rt_status st = nccl_usable(c, "broadcast");
    if (st != RT_OK || bytes == 0) return st;
    if (root < 0 || root >= c->size)
        return rt_errorf(RT_ERR_RUNTIME, "nccl comm (size %d): broadcast root %d is out of range", c->size, root);
    if (nccl_is_host(buf)) return c->bootstrap->ops->broadcast(c->bootstrap->ctx, buf, bytes, root);
    nccl_prepare(c);
    return nccl_enqueued(c, ncclBroadcast(buf, buf, bytes, ncclUint8, root, c->comm, c->stream), "broadcast", bytes);
}

/* NCCL has no barrier: an all-reduce of one float does the same job, over a float kept for it
 * (its value does not matter), so a barrier allocates nothing after the first. */
static rt_status nccl_barrier(void *vctx) {
    nccl_ctx *c = (nccl_ctx *)vctx;
    rt_status st = nccl_usable(c, "barrier");
    if (st != RT_OK) return st;
    nccl_prepare(c);
    if (!c->barrier_buf) {
        NCCL_CUDA_CHECK(cudaMalloc((void **)&c->barrier_buf, sizeof(float)));
        NCCL_CUDA_CHECK(cudaMemset(c->barrier_buf, 0, sizeof(float)));
    }
    return nccl_enqueued(c, ncclAllReduce(c->barrier_buf, c->barrier_buf, 1, ncclFloat32, ncclSum, c->comm, c->stream),
                         "barrier", 1);
}

/* Pipeline transfers: one NCCL group of sends and receives on the comm's stream, waited for
 * with the timeout. Host buffers travel over the host twin. NCCL matches only by order, so a
 * receive of another size than its send is not detected here. */
static rt_status nccl_p2p(void *vctx, rt_p2p *ops, int n) {
    nccl_ctx *c = (nccl_ctx *)vctx;
    rt_status st = nccl_usable(c, "p2p");
    if (st != RT_OK || n == 0) return st;
    const int host = nccl_is_host(ops[0].buf);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        RT_CHECK(nccl_is_host(ops[i].buf) == host, "nccl p2p: host and device buffers in one batch");
        if (ops[i].peer < 0 || ops[i].peer >= c->size || ops[i].peer == c->rank)
            return rt_errorf(RT_ERR_RUNTIME, "nccl comm (size %d): rank %d cannot %s rank %d", c->size, c->rank,
                             ops[i].send ? "send to" : "receive from", ops[i].peer);
        total += ops[i].bytes;
    }
    if (host) return rt_comm_p2p(c->bootstrap, ops, n);
    nccl_prepare(c);
    ncclResult_t rc = ncclGroupStart();
    for (int i = 0; i < n && (rc == ncclSuccess || rc == ncclInProgress); i++)
        rc = ops[i].send ? ncclSend(ops[i].buf, ops[i].bytes, ncclUint8, ops[i].peer, c->comm, c->stream)
                         : ncclRecv(ops[i].buf, ops[i].bytes, ncclUint8, ops[i].peer, c->comm, c->stream);
    ncclResult_t end = ncclGroupEnd();
    return nccl_enqueued(c, rc == ncclSuccess || rc == ncclInProgress ? end : rc, "p2p", total);
}

static nccl_ctx *nccl_ctx_new(int device, double timeout_s) {
    nccl_ctx *c = (nccl_ctx *)rt_xcalloc(1, sizeof *c);
    c->device = device;
    c->timeout_s = timeout_s;
    NCCL_CUDA_CHECK(cudaSetDevice(device));
    /* a blocking stream, ordered with the legacy default stream; nccl_prepare orders it after
     * the backend's own stream */
    NCCL_CUDA_CHECK(cudaStreamCreate(&c->stream));
    NCCL_CUDA_CHECK(cudaEventCreateWithFlags(&c->compute_done, cudaEventDisableTiming));
    return c;
}

static ncclConfig_t nccl_config(void) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    return cfg;
}

static void nccl_free(void *vctx);

static rt_comm *nccl_wrap(nccl_ctx *c) {
    rt_comm *out = (rt_comm *)rt_xmalloc(sizeof *out);
    out->ops = nccl_ops_ptr();
    out->ctx = c;
    out->rank = c->rank;
    out->size = c->size;
    return out;
}

/* Fills c->comm from bootstrap: rank 0 makes the id, everyone joins. */
static rt_status nccl_init_from(nccl_ctx *c, rt_comm *bootstrap) {
    rt_status st = RT_OK;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    c->rank = bootstrap->rank;
    c->size = bootstrap->size;
    if (c->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    st = bootstrap->ops->broadcast(bootstrap->ctx, &id, sizeof id, 0);
    if (st != RT_OK)
        return rt_error_wrap(st, "nccl init: broadcasting the unique id over the %s comm", bootstrap->ops->name);
    ncclConfig_t cfg = nccl_config();
    ncclResult_t rc = ncclCommInitRankConfig(&c->comm, c->size, id, c->rank, &cfg);
    if (rc != ncclSuccess && rc != ncclInProgress)
        return rt_errorf(RT_ERR_RUNTIME, "nccl init (rank %d of %d, device %d): %s", c->rank, c->size, c->device,
                         ncclGetErrorString(rc));
    return nccl_wait(c, "init", (size_t)c->size, 0);
}

static rt_status nccl_split(void *vctx, int color, int key, rt_comm **out) {
    nccl_ctx *c = (nccl_ctx *)vctx;
    *out = NULL;
    rt_comm *sub = NULL;
    nccl_ctx *s = NULL;
    rt_status st = nccl_usable(c, "split");
    if (st != RT_OK) return st;
    if (color < 0) return rt_errorf(RT_ERR_CONFIG, "nccl comm: split color %d, expected a non-negative color", color);
    /* the child's host twin first: the same color and key order the ranks the same way in
     * MPI_Comm_split, the threads comm and ncclCommSplit */
    st = c->bootstrap->ops->split(c->bootstrap->ctx, color, key, &sub);
    if (st != RT_OK) return st;
    s = nccl_ctx_new(c->device, c->timeout_s);
    s->bootstrap = sub;
    s->own_bootstrap = 1;
#if RT_NCCL_HAS_SPLIT
    {
        ncclConfig_t cfg = nccl_config();
        ncclResult_t rc = ncclCommSplit(c->comm, color, key, &s->comm, &cfg);
        if (rc != ncclSuccess && rc != ncclInProgress) {
            st = rt_errorf(RT_ERR_RUNTIME, "nccl split (color %d, key %d): %s", color, key, ncclGetErrorString(rc));
            goto fail;
        }
        /* the parent is busy until the split completes, and so is the child */
        st = nccl_wait(c, "split", 0, 0);
        if (st != RT_OK) goto fail;
        st = nccl_wait(s, "split", 0, 0);
        if (st != RT_OK) goto fail;
        NCCL_CHECK(ncclCommUserRank(s->comm, &s->rank));
        NCCL_CHECK(ncclCommCount(s->comm, &s->size));
        RT_CHECK(s->rank == sub->rank && s->size == sub->size, "nccl split rank %d/%d, host twin %d/%d", s->rank,
                 s->size, sub->rank, sub->size);
    }
#else
    st = nccl_init_from(s, sub);
    if (st != RT_OK) goto fail;
#endif
    *out = nccl_wrap(s);
    return RT_OK;
fail:
    if (s)
        nccl_free(s); /* frees sub too */
    else
        rt_comm_free(sub);
    return st;
}

static void nccl_free(void *vctx) {
    nccl_ctx *c = (nccl_ctx *)vctx;
    if (!c) return;
    if (c->comm) {
        cudaSetDevice(c->device);
        if (c->aborted || c->broken[0]) {
            nccl_abort(c);
        } else {
            /* finalize flushes outstanding work; a peer gone by now must not hang us here */
            ncclResult_t rc = ncclCommFinalize(c->comm);
            rt_status st = rc == ncclSuccess || rc == ncclInProgress ? nccl_wait(c, "finalize", 0, 0) : RT_ERR_RUNTIME;
            if (st == RT_OK)
                ncclCommDestroy(c->comm);
            else
                nccl_abort(c);
        }
    }
    if (c->stream) cudaStreamDestroy(c->stream);
    if (c->compute_done) cudaEventDestroy(c->compute_done);
    /* after an abort a dead kernel may still reference it: leak it then */
    if (c->barrier_buf && !c->aborted) cudaFree(c->barrier_buf);
    if (c->async_stream) cudaStreamDestroy(c->async_stream);
    if (c->own_bootstrap) rt_comm_free(c->bootstrap);
    free(c);
}

static const rt_comm_ops nccl_ops = {
    "nccl",
    nccl_all_reduce,
    nccl_reduce_scatter,
    nccl_all_gather,
    nccl_broadcast,
    nccl_barrier,
    nccl_split,
    nccl_free,
    nccl_all_reduce_start,
    nccl_wait_request,
    NULL, /* set_timeout: the wait is fixed when the communicator is made (rt_grid_init_device) */
    nccl_p2p,
    nccl_all_gather_start,
};

static const rt_comm_ops *nccl_ops_ptr(void) { return &nccl_ops; }

extern "C" rt_status rt_comm_nccl_probe(int device) {
    int n_dev = 0;
    rt_status st = rt_cuda_device_count(&n_dev);
    if (st != RT_OK) return rt_error_wrap(st, "nccl comm");
    if (device < 0 || device >= n_dev)
        return rt_errorf(RT_ERR_CONFIG, "nccl comm: device %d, expected 0..%d", device, n_dev - 1);
    return RT_OK;
}

extern "C" rt_status rt_comm_nccl_init(rt_comm *bootstrap, int device, double timeout_s, rt_comm **out) {
    *out = NULL;
    if (!(timeout_s > 0))
        return rt_errorf(RT_ERR_CONFIG, "nccl comm: timeout %g s, expected a positive number", timeout_s);
    rt_status st = rt_comm_nccl_probe(device);
    if (st != RT_OK) return rt_error_wrap(st, "rank %d", bootstrap->rank);
    nccl_ctx *c = nccl_ctx_new(device, timeout_s);
    c->bootstrap = bootstrap;
    st = nccl_init_from(c, bootstrap);
    if (st != RT_OK) {
        nccl_free(c);
        return st;
    }
    *out = nccl_wrap(c);
    return RT_OK;
}

#else /* !TZ_USE_NCCL */

static rt_status nccl_missing(void) {
    return rt_errorf(RT_ERR_UNSUPPORTED,
                     "this build of tunezoo has no NCCL: install NCCL and rebuild with -DUSE_NCCL=ON");
}

extern "C" rt_status rt_comm_nccl_probe(int device) { return nccl_missing(); }

extern "C" rt_status rt_comm_nccl_init(rt_comm *bootstrap, int device, double timeout_s, rt_comm **out) {
    *out = NULL;
    return nccl_missing();
}

#endif
