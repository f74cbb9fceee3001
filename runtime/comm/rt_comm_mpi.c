/* MPI communicators over CPU buffers: what mpirun and srun launches use for data and tensor
 * parallelism on CPU, and what bootstraps NCCL on GPU.
 *
 * Every collective is the nonblocking form (MPI_Iallreduce, ...) polled with MPI_Test until
 * the communicator's deadline, because a blocking MPI call waits forever for a rank that
 * died or took another branch. On timeout the call returns RT_ERR_RUNTIME naming the
 * operation; the request cannot be cancelled, so the communicator is marked broken and every
 * later call fails at once. MPI itself reports errors through MPI_CHECK, which aborts with
 * file:line and MPI's message: an MPI failure is not something a program recovers from.
 *
 * MPI counts are int, and a 3B model's slab is past INT_MAX floats, so every collective takes any
 * size_t count: all_reduce and broadcast run in chunks of 2^30; a reduce_scatter or all_gather
 * whose part per rank is larger runs chunk by chunk as one reduce (or broadcast) per rank, all
 * of a chunk's in flight at once. A p2p message above INT_MAX bytes is refused. */
#include "runtime/comm/rt_comm.h"
#include "runtime/comm/rt_launch.h"

#ifdef TZ_USE_MPI

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MPI_CHECK(call)                                                                          \
    do {                                                                                         \
        int rt_mpi_rc_ = (call);                                                                 \
        if (rt_mpi_rc_ != MPI_SUCCESS) {                                                         \
            char rt_mpi_msg_[MPI_MAX_ERROR_STRING];                                              \
            int rt_mpi_len_ = 0;                                                                 \
            MPI_Error_string(rt_mpi_rc_, rt_mpi_msg_, &rt_mpi_len_);                             \
            rt_abort_at(__FILE__, __LINE__, #call, "MPI error %d: %s", rt_mpi_rc_, rt_mpi_msg_); \
        }                                                                                        \
    } while (0)

/* Largest chunk per call: INT_MAX rounded down, so chunks stay aligned. */
#define MPI_CHUNK ((size_t)1 << 30)

/* The chunk this call uses: MPI_CHUNK, or TZ_MPI_CHUNK (a count from 1 up) below it, which lets
 * tests/test_mpi_comm.c run the chunked paths on small buffers. Every rank must see the same. */
static size_t mpi_chunk(void) {
    const char *s = getenv("TZ_MPI_CHUNK");
    if (s && *s) {
        char *end = NULL;
        unsigned long long v = strtoull(s, &end, 10);
        if (*end == '\0' && v >= 1 && v < MPI_CHUNK) return (size_t)v;
    }
    return MPI_CHUNK;
}

typedef struct {
    MPI_Comm comm;
    double timeout_s;
    int rank, size;
    MPI_Request pending; /* left behind by a timed-out call */
    char broken[160];    /* why the communicator is unusable, "" if it is fine */
} mpi_ctx;

static const rt_comm_ops mpi_ops;
static int mpi_we_initialized;
static int mpi_timed_out; /* a collective gave up on a rank: the job cannot finalize */

static double mpi_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static rt_status mpi_usable(mpi_ctx *c, const char *what) {
    if (!c->broken[0]) return RT_OK;
    return rt_errorf(RT_ERR_RUNTIME, "mpi comm (size %d): %s after %s", c->size, what, c->broken);
}

/* Polls the n requests until all complete or the deadline passes. Sleeps grow from 20 us to
 * 1 ms, so an oversubscribed machine is not spent spinning while MPI still makes progress.
 * statuses (n, or NULL) receive the requests' statuses; a request that completed with an error
 * (a truncated receive) returns MPI_ERR_IN_STATUS in *in_status instead of aborting, when
 * in_status is not NULL. */
static rt_status mpi_wait_all(mpi_ctx *c, int n, MPI_Request *req, MPI_Status *statuses, int *in_status,
                              const char *what, size_t count) {
    double deadline = mpi_now() + c->timeout_s;
    long sleep_ns = 20000;
    for (int spins = 0;; spins++) {
        int done = 0;
        int rc = MPI_Testall(n, req, &done, statuses ? statuses : MPI_STATUSES_IGNORE);
        if (rc == MPI_ERR_IN_STATUS && in_status) {
            *in_status = rc;
            return RT_OK;
        }
        MPI_CHECK(rc);
        if (done) return RT_OK;
        if (mpi_now() > deadline) break;
        if (spins > 100) {
            struct timespec ts = {0, sleep_ns};
            nanosleep(&ts, NULL);
            if (sleep_ns < 1000000) sleep_ns *= 2;
        }
    }
    for (int i = 0; i < n; i++)
        if (req[i] != MPI_REQUEST_NULL) c->pending = req[i]; /* one of those still in flight */
    mpi_timed_out = 1;
    snprintf(c->broken, sizeof c->broken, "%s of %zu elements did not complete within %g s", what, count, c->timeout_s);
    /* MPI cannot say which rank is missing from a collective; with two ranks it is the other */
    char who[64];
    if (c->size == 2)
        snprintf(who, sizeof who, "rank %d", 1 - c->rank);
    else
        snprintf(who, sizeof who, "one of the other %d ranks", c->size - 1);
    return rt_errorf(RT_ERR_RUNTIME,
                     "mpi comm (size %d, rank %d): %s of %zu elements did not complete within %g s: %s died, hangs "
                     "or skipped it (--comm-timeout sets the wait)",
                     c->size, c->rank, what, count, c->timeout_s, who);
}

static rt_status mpi_wait(mpi_ctx *c, MPI_Request *req, const char *what, size_t count) {
    return mpi_wait_all(c, 1, req, NULL, NULL, what, count);
}

static MPI_Op mpi_op(rt_reduce_op op) { return op == RT_REDUCE_MAX ? MPI_MAX : MPI_SUM; }

static rt_status mpi_all_reduce(void *vctx, float *buf, size_t n, rt_reduce_op op) {
    mpi_ctx *c = vctx;
    rt_status st = mpi_usable(c, "all_reduce");
    const size_t chunk = mpi_chunk();
    for (size_t off = 0; st == RT_OK && off < n; off += chunk) {
        size_t m = n - off < chunk ? n - off : chunk;
        MPI_Request req;
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf + off, (int)m, MPI_FLOAT, mpi_op(op), c->comm, &req));
        st = mpi_wait(c, &req, "all_reduce", n);
    }
    return st;
}

/* A started collective: its request and what the timeout message names. */
typedef struct {
    MPI_Request req;
    const char *what;
    size_t n;
} mpi_started;

static rt_status mpi_all_reduce_start(void *vctx, float *buf, size_t n, rt_reduce_op op, void **out) {
    mpi_ctx *c = vctx;
    *out = NULL;
    rt_status st = mpi_usable(c, "all_reduce");
    if (st != RT_OK || n == 0) return st;
    if (n > mpi_chunk()) return mpi_all_reduce(vctx, buf, n, op); /* beyond one request: blocking */
    mpi_started *r = rt_xmalloc(sizeof *r);
    *r = (mpi_started){.what = "all_reduce (started earlier)", .n = n};
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, mpi_op(op), c->comm, &r->req));
    *out = r;
    return RT_OK;
}

static rt_status mpi_wait_request(void *vctx, void *vreq) {
    mpi_started *r = vreq;
    rt_status st = mpi_wait(vctx, &r->req, r->what, r->n);
    free(r);
    return st;
}

static rt_status mpi_reduce_scatter(void *vctx, float *out, const float *in, size_t n_out, rt_reduce_op op) {
    mpi_ctx *c = vctx;
    rt_status st = mpi_usable(c, "reduce_scatter");
    if (st != RT_OK) return st;
    const size_t chunk = mpi_chunk();
    if (n_out <= chunk) {
        MPI_Request req;
        MPI_CHECK(MPI_Ireduce_scatter_block(in, out, (int)n_out, MPI_FLOAT, mpi_op(op), c->comm, &req));
        return mpi_wait(c, &req, "reduce_scatter", n_out);
    }
    /* past one call's count: chunk by chunk, rank r's part of the chunk reduced onto rank r */
    MPI_Request *req = rt_xmalloc((size_t)c->size * sizeof *req);
    for (size_t off = 0; st == RT_OK && off < n_out; off += chunk) {
        const size_t m = n_out - off < chunk ? n_out - off : chunk;
        for (int r = 0; r < c->size; r++)
            MPI_CHECK(MPI_Ireduce(in + (size_t)r * n_out + off, r == c->rank ? out + off : NULL, (int)m, MPI_FLOAT,
                                  mpi_op(op), r, c->comm, &req[r]));
        st = mpi_wait_all(c, c->size, req, NULL, NULL, "reduce_scatter", n_out);
    }
    free(req);
    return st;
}

/* MPI's all-gather, in place when in already sits at this rank's spot in out; started only, for
 * n_in within one call's count. */
static rt_status mpi_all_gather_post(mpi_ctx *c, float *out, const float *in, size_t n_in, MPI_Request *req) {
    rt_status st = mpi_usable(c, "all_gather");
    if (st != RT_OK) return st;
    const void *send = in == out + (size_t)c->rank * n_in ? MPI_IN_PLACE : (const void *)in;
    MPI_CHECK(MPI_Iallgather(send, (int)n_in, MPI_FLOAT, out, (int)n_in, MPI_FLOAT, c->comm, req));
    return RT_OK;
}

/* An all-gather past one call's count: this rank's part put in place, then chunk by chunk every
 * rank's part broadcast from it. Blocking. */
static rt_status mpi_all_gather_chunked(mpi_ctx *c, float *out, const float *in, size_t n_in, size_t chunk) {
    rt_status st = mpi_usable(c, "all_gather");
    if (st != RT_OK) return st;
    float *mine = out + (size_t)c->rank * n_in;
    if (in != mine) memmove(mine, in, n_in * sizeof(float));
    MPI_Request *req = rt_xmalloc((size_t)c->size * sizeof *req);
    for (size_t off = 0; st == RT_OK && off < n_in; off += chunk) {
        const size_t m = n_in - off < chunk ? n_in - off : chunk;
        for (int r = 0; r < c->size; r++)
            MPI_CHECK(MPI_Ibcast(out + (size_t)r * n_in + off, (int)m, MPI_FLOAT, r, c->comm, &req[r]));
        st = mpi_wait_all(c, c->size, req, NULL, NULL, "all_gather", n_in);
    }
    free(req);
    return st;
}

static rt_status mpi_all_gather(void *vctx, float *out, const float *in, size_t n_in) {
    mpi_ctx *c = vctx;
    const size_t chunk = mpi_chunk();
    if (n_in > chunk) return mpi_all_gather_chunked(c, out, in, n_in, chunk);
    MPI_Request req;
    rt_status st = mpi_all_gather_post(c, out, in, n_in, &req);
    return st == RT_OK ? mpi_wait(c, &req, "all_gather", n_in) : st;
}

static rt_status mpi_all_gather_start(void *vctx, float *out, const float *in, size_t n_in, void **vreq) {
    *vreq = NULL;
    const size_t chunk = mpi_chunk();
    if (n_in > chunk) return mpi_all_gather_chunked(vctx, out, in, n_in, chunk); /* beyond one request: blocking */
    mpi_started *r = rt_xmalloc(sizeof *r);
    *r = (mpi_started){.what = "all_gather (started earlier)", .n = n_in};
    rt_status st = mpi_all_gather_post(vctx, out, in, n_in, &r->req);
    if (st != RT_OK) {
        free(r);
        r = NULL;
    }
    *vreq = r;
    return st;
}

static rt_status mpi_broadcast(void *vctx, void *buf, size_t bytes, int root) {
    mpi_ctx *c = vctx;
    rt_status st = mpi_usable(c, "broadcast");
    if (st == RT_OK && (root < 0 || root >= c->size))
        return rt_errorf(RT_ERR_RUNTIME, "mpi comm (size %d): broadcast root %d is out of range", c->size, root);
    const size_t chunk = mpi_chunk();
    for (size_t off = 0; st == RT_OK && off < bytes; off += chunk) {
        size_t m = bytes - off < chunk ? bytes - off : chunk;
        MPI_Request req;
        MPI_CHECK(MPI_Ibcast((char *)buf + off, (int)m, MPI_BYTE, root, c->comm, &req));
        st = mpi_wait(c, &req, "broadcast", bytes);
    }
    return st;
}

static rt_status mpi_barrier(void *vctx) {
    mpi_ctx *c = vctx;
    rt_status st = mpi_usable(c, "barrier");
    if (st != RT_OK) return st;
    MPI_Request req;
    MPI_CHECK(MPI_Ibarrier(c->comm, &req));
    return mpi_wait(c, &req, "barrier", 0);
}

#define MPI_P2P_TAG 4242 /* apart from anything else on the duplicated communicator */

static rt_status mpi_p2p(void *vctx, rt_p2p *ops, int n) {
    mpi_ctx *c = vctx;
    rt_status st = mpi_usable(c, "p2p");
    if (st != RT_OK || n == 0) return st;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (ops[i].peer < 0 || ops[i].peer >= c->size || ops[i].peer == c->rank)
            return rt_errorf(RT_ERR_RUNTIME, "mpi comm (size %d): rank %d cannot %s rank %d", c->size, c->rank,
                             ops[i].send ? "send to" : "receive from", ops[i].peer);
        if (ops[i].bytes > INT_MAX)
            return rt_errorf(RT_ERR_UNSUPPORTED, "mpi comm: a p2p message of %zu bytes exceeds MPI's int count",
                             ops[i].bytes);
        total += ops[i].bytes;
    }
    MPI_Request *req = rt_xmalloc((size_t)n * sizeof *req);
    MPI_Status *sts = rt_xmalloc((size_t)n * sizeof *sts);
    for (int i = 0; i < n; i++) {
        if (ops[i].send)
            MPI_CHECK(MPI_Isend(ops[i].buf, (int)ops[i].bytes, MPI_BYTE, ops[i].peer, MPI_P2P_TAG, c->comm, &req[i]));
        else
            MPI_CHECK(MPI_Irecv(ops[i].buf, (int)ops[i].bytes, MPI_BYTE, ops[i].peer, MPI_P2P_TAG, c->comm, &req[i]));
    }
    int in_status = MPI_SUCCESS;
    st = mpi_wait_all(c, n, req, sts, &in_status, "p2p", total);
    for (int i = 0; st == RT_OK && i < n; i++) {
        if (ops[i].send) continue;
        int got = -1;
        if (in_status == MPI_SUCCESS || sts[i].MPI_ERROR == MPI_SUCCESS)
            MPI_CHECK(MPI_Get_count(&sts[i], MPI_BYTE, &got));
        if (got != (int)ops[i].bytes) { /* shorter, or truncated: the ranks disagree on the schedule */
            snprintf(c->broken, sizeof c->broken, "a p2p size mismatch with rank %d", ops[i].peer);
            st = rt_errorf(RT_ERR_RUNTIME, "mpi comm (size %d): rank %d expected %zu bytes from rank %d, %s", c->size,
                           c->rank, ops[i].bytes, ops[i].peer, got < 0 ? "which sent more" : "which sent fewer");
        }
    }
    free(req);
    free(sts);
    return st;
}

static rt_comm *mpi_comm_wrap(MPI_Comm comm, double timeout_s) {
    mpi_ctx *ctx = rt_xcalloc(1, sizeof *ctx);
    ctx->comm = comm;
    ctx->timeout_s = timeout_s;
    ctx->pending = MPI_REQUEST_NULL;
    /* errors come back to MPI_CHECK, which prints MPI's message with our file:line */
    MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(comm, &ctx->rank));
    MPI_CHECK(MPI_Comm_size(comm, &ctx->size));
    rt_comm *c = rt_xmalloc(sizeof *c);
    c->ops = &mpi_ops;
    c->ctx = ctx;
    c->rank = ctx->rank;
    c->size = ctx->size;
    return c;
}

static rt_status mpi_split(void *vctx, int color, int key, rt_comm **out) {
    mpi_ctx *c = vctx;
    *out = NULL;
    rt_status st = mpi_usable(c, "split");
    if (st != RT_OK) return st;
    if (color < 0) return rt_errorf(RT_ERR_CONFIG, "mpi comm: split color %d, expected a non-negative color", color);
    /* MPI_Comm_split has no nonblocking form; a barrier with the timeout first makes a
     * missing rank fail here rather than hang inside the split */
    RT_TRY(mpi_barrier(c));
    MPI_Comm sub;
    MPI_CHECK(MPI_Comm_split(c->comm, color, key, &sub));
    *out = mpi_comm_wrap(sub, c->timeout_s);
fail:
    return st;
}

static void mpi_free(void *vctx) {
    mpi_ctx *c = vctx;
    if (!c) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        int done = 1;
        if (c->pending != MPI_REQUEST_NULL) {
            /* the late ranks may have arrived since: then the request is complete and the
             * communicator can go; otherwise it is leaked, since freeing a communicator
             * with a collective in flight is an error */
            MPI_Test(&c->pending, &done, MPI_STATUS_IGNORE);
        }
        if (done) MPI_Comm_free(&c->comm);
    }
    free(c);
}

static void mpi_set_timeout(void *vctx, double seconds) {
    RT_CHECK(seconds > 0, "timeout %g", seconds);
    ((mpi_ctx *)vctx)->timeout_s = seconds;
}

static const rt_comm_ops mpi_ops = {
    .name = "mpi",
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .split = mpi_split,
    .free = mpi_free,
    .all_reduce_start = mpi_all_reduce_start,
    .wait = mpi_wait_request,
    .set_timeout = mpi_set_timeout,
    .p2p = mpi_p2p,
    .all_gather_start = mpi_all_gather_start,
};

rt_status rt_comm_mpi_init(int *argc, char ***argv, double timeout_s, rt_comm **world) {
    *world = NULL;
    if (!(timeout_s > 0))
        return rt_errorf(RT_ERR_CONFIG, "mpi comm: timeout %g s, expected a positive number", timeout_s);
    int inited = 0;
    MPI_CHECK(MPI_Initialized(&inited));
    if (!inited) {
        int provided = 0;
        /* SERIALIZED: MPI may be called from any one thread at a time (the trainer calls it
         * from the main thread; OpenMP workers never do) */
        MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
        mpi_we_initialized = 1;
    }
    /* a duplicate keeps our traffic apart from any other library using MPI_COMM_WORLD */
    MPI_Comm dup;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    *world = mpi_comm_wrap(dup, timeout_s);
    return RT_OK;
}

void rt_comm_mpi_finalize(void) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (mpi_we_initialized && !finalized) MPI_Finalize();
    mpi_we_initialized = 0;
}

void rt_comm_mpi_end(int exit_code) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    /* MPI_Finalize would wait for the rank that never arrived: end the whole job instead, so
     * that mpirun stops the silent rank too */
    if (mpi_we_initialized && !finalized && mpi_timed_out) MPI_Abort(MPI_COMM_WORLD, exit_code ? exit_code : 1);
    rt_comm_mpi_finalize();
}

#else /* !TZ_USE_MPI */

rt_status rt_comm_mpi_init(int *argc, char ***argv, double timeout_s, rt_comm **world) {
    *world = NULL;
    return rt_errorf(
        RT_ERR_UNSUPPORTED,
        "this build of tunezoo has no MPI: install OpenMPI (libopenmpi-dev) and rebuild with -DUSE_MPI=ON");
}

void rt_comm_mpi_finalize(void) {}

void rt_comm_mpi_end(int exit_code) { (void)exit_code; }

#endif
