/* The NCCL communicator on device buffers. One GPU is already a real NCCL communicator of
 * size 1 (bootstrapped over rt_comm_self); with two or more GPUs, two threads bootstrap a
 * 2-rank NCCL communicator over the threads comm and check every collective against the
 * threads comm's own results, and an all-reduce (blocking and started) behind a CUDA backend's
 * own stream: its staged upload and 8 kernels must come first, its next kernel after. Without
 * NCCL or a GPU the test checks the refusal message and
 * exits 77 (skipped); a GPU that CUDA cannot use (a driver too old for the runtime) fails. */
#include <stdio.h>
#include <string.h>

#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"
#include "tests/testutil.h"

#ifdef TZ_USE_NCCL
#include <cuda_runtime_api.h>
#include <pthread.h>

#include "runtime/backend/cuda/cuda_devices.h"
#include "runtime/comm/rt_comm_nccl.h"
#include "runtime/comm/rt_launch.h"

#define N 1000

static float input(int rank, int i) { return (float)((i * 37 + rank * 11) % 101) * 0.25f - 12.0f + (float)rank; }

typedef struct {
    rt_comm *boot;
    int device;
    rt_status st;
    char msg[512];
    float sum[N], mx[N], rs[N], ag[2 * N];
    float sum_started[N], ag_started[2 * N];      /* all_reduce_start and all_gather_start in flight together */
    float sum_backend[N], sum_backend_started[N]; /* behind a CUDA backend's kernels on its own stream */
    unsigned char bc[33];
    int split_size;
} rank_out;

#define STEP(expr)                     \
    do {                               \
        o->st = (expr);                \
        if (o->st != RT_OK) goto done; \
    } while (0)

/* Runs every op on device buffers; results land in o (host). */
static void *run_rank(void *arg) {
    rank_out *o = arg;
    rt_comm *c = NULL, *s = NULL;
    rt_backend *be = NULL;
    float *d = NULL, *d2 = NULL, *bd = NULL;
    STEP(rt_comm_nccl_init(o->boot, o->device, 20.0, &c));
    int r = c->rank, n = c->size;
    float h[2 * N];
    cudaSetDevice(o->device);
    cudaMalloc((void **)&d, 2 * N * sizeof(float));
    cudaMalloc((void **)&d2, 2 * N * sizeof(float));
    for (int i = 0; i < N; i++) h[i] = input(r, i);
    cudaMemcpy(d, h, N * sizeof(float), cudaMemcpyHostToDevice);
    STEP(c->ops->all_reduce(c->ctx, d, N, RT_REDUCE_SUM));
    cudaMemcpy(o->sum, d, N * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(d, h, N * sizeof(float), cudaMemcpyHostToDevice);
    STEP(c->ops->all_reduce(c->ctx, d, N, RT_REDUCE_MAX));
    cudaMemcpy(o->mx, d, N * sizeof(float), cudaMemcpyDeviceToHost);
    int chunk = N / n;
    for (int i = 0; i < n * chunk; i++) h[i] = input(r, i);
    cudaMemcpy(d, h, (size_t)n * chunk * sizeof(float), cudaMemcpyHostToDevice);
    STEP(c->ops->reduce_scatter(c->ctx, d2, d, (size_t)chunk, RT_REDUCE_SUM));
    cudaMemcpy(o->rs, d2, (size_t)chunk * sizeof(float), cudaMemcpyDeviceToHost);
    STEP(c->ops->all_gather(c->ctx, d, d2, (size_t)chunk));
    cudaMemcpy(o->ag, d, (size_t)n * chunk * sizeof(float), cudaMemcpyDeviceToHost);
    /* the started ones, both in flight at once behind a kernel-free default stream, then waited
     * for: the same bits as the blocking ones (the first NCCL async path a test can fail) */
    {
        float *d3 = NULL;
        void *req[2] = {NULL, NULL};
        cudaMalloc((void **)&d3, 2 * N * sizeof(float));
        for (int i = 0; i < N; i++) h[i] = input(r, i);
        cudaMemcpy(d3, h, N * sizeof(float), cudaMemcpyHostToDevice);
        o->st = rt_comm_all_reduce_start(c, d3, N, RT_REDUCE_SUM, &req[0]);
        if (o->st == RT_OK) o->st = rt_comm_all_gather_start(c, d, d2, (size_t)chunk, &req[1]);
        for (int k = 0; k < 2; k++) {
            rt_status w = rt_comm_wait(c, req[k]);
            if (o->st == RT_OK) o->st = w;
        }
        cudaMemcpy(o->sum_started, d3, N * sizeof(float), cudaMemcpyDeviceToHost);
        cudaMemcpy(o->ag_started, d, (size_t)n * chunk * sizeof(float), cudaMemcpyDeviceToHost);
        cudaFree(d3);
        if (o->st != RT_OK) goto done;
    }
    /* through a CUDA backend: its upload (pinned staging) and kernels run on its own stream, which
     * each collective must wait for (rt_cuda_thread_stream), and the backend's next kernel and
     * read must come after the collective; blocking and started, each behind 8 doubling kernels */
    {
        char name[32];
        snprintf(name, sizeof name, "cuda:%d", o->device);
        STEP(rt_backend_init(name, 1, &be));
        STEP(rt_backend_alloc(be, N * sizeof(float), "test buffer", (void **)&bd));
        for (int started = 0; started < 2; started++) {
            for (int i = 0; i < N; i++) h[i] = input(r, i);
            rt_to_device(be, bd, h, N * sizeof(float));
            for (int k = 0; k < 8; k++) rt_scale(be, bd, 2.0f, N);
            if (started) {
                void *req = NULL;
                STEP(rt_comm_all_reduce_start(c, bd, N, RT_REDUCE_SUM, &req));
                STEP(rt_comm_wait(c, req));
            } else {
                STEP(c->ops->all_reduce(c->ctx, bd, N, RT_REDUCE_SUM));
            }
            rt_scale(be, bd, 1.0f / 256.0f, N);
            rt_to_host(be, started ? o->sum_backend_started : o->sum_backend, bd, N * sizeof(float));
        }
    }
    memset(o->bc, r, sizeof o->bc);
    if (r == 0)
        for (size_t i = 0; i < sizeof o->bc; i++) o->bc[i] = (unsigned char)(7 * i);
    cudaMemcpy(d, o->bc, sizeof o->bc, cudaMemcpyHostToDevice);
    STEP(c->ops->broadcast(c->ctx, d, sizeof o->bc, 0));
    cudaMemcpy(o->bc, d, sizeof o->bc, cudaMemcpyDeviceToHost);
    STEP(c->ops->barrier(c->ctx));
    STEP(c->ops->split(c->ctx, 0, r, &s));
    o->split_size = s->size;
done:
    if (o->st != RT_OK) snprintf(o->msg, sizeof o->msg, "%s", rt_error_message());
    rt_comm_free(s);
    rt_comm_free(c);
    if (bd) rt_free_device(be, bd);
    rt_backend_free(be);
    cudaFree(d);
    cudaFree(d2);
    return NULL;
}

static void check(rank_out *o, int n) {
    int chunk = N / n;
    for (int r = 0; r < n; r++) {
        TZ_EXPECT(o[r].st == RT_OK, "rank %d: %s", r, o[r].msg);
        if (o[r].st != RT_OK) continue;
        float sum[N], mx[N];
        for (int i = 0; i < N; i++) {
            sum[i] = mx[i] = input(0, i);
            for (int k = 1; k < n; k++) {
                sum[i] += input(k, i);
                mx[i] = input(k, i) > mx[i] ? input(k, i) : mx[i];
            }
        }
        /* the inputs are multiples of 0.25 with small sums: every order gives the same bits */
        TZ_EXPECT(memcmp(o[r].sum, sum, sizeof sum) == 0, "size %d rank %d: all_reduce sum", n, r);
        TZ_EXPECT(memcmp(o[r].mx, mx, sizeof mx) == 0, "size %d rank %d: all_reduce max", n, r);
        TZ_EXPECT(memcmp(o[r].rs, sum + (size_t)r * chunk, (size_t)chunk * sizeof(float)) == 0,
                  "size %d rank %d: reduce_scatter", n, r);
        TZ_EXPECT(memcmp(o[r].ag, sum, (size_t)n * chunk * sizeof(float)) == 0, "size %d rank %d: all_gather", n, r);
        TZ_EXPECT(memcmp(o[r].sum_started, sum, sizeof sum) == 0, "size %d rank %d: all_reduce_start", n, r);
        TZ_EXPECT(memcmp(o[r].sum_backend, sum, sizeof sum) == 0,
                  "size %d rank %d: all_reduce behind the backend's stream", n, r);
        TZ_EXPECT(memcmp(o[r].sum_backend_started, sum, sizeof sum) == 0,
                  "size %d rank %d: all_reduce_start behind the backend's stream", n, r);
        TZ_EXPECT(memcmp(o[r].ag_started, sum, (size_t)n * chunk * sizeof(float)) == 0,
                  "size %d rank %d: all_gather_start", n, r);
        for (size_t i = 0; i < sizeof o[r].bc; i++)
            TZ_EXPECT(o[r].bc[i] == (unsigned char)(7 * i), "size %d rank %d: broadcast byte %zu", n, r, i);
        TZ_EXPECT(o[r].split_size == n, "size %d rank %d: split size %d", n, r, o[r].split_size);
    }
}

int main(void) {
    int n_dev = 0;
    rt_status found = rt_cuda_device_count(&n_dev);
    if (found == RT_ERR_UNSUPPORTED) { /* no GPU here; a GPU CUDA cannot use fails below instead */
        rt_comm *c = NULL;
        TZ_EXPECT(rt_comm_nccl_init(rt_comm_self(), 0, 5.0, &c) == RT_ERR_UNSUPPORTED && c == NULL,
                  "nccl init without a device should be unsupported");
        TZ_EXPECT(strstr(rt_error_message(), "no CUDA device") != NULL, "message: %s", rt_error_message());
        fprintf(stderr, "test_comm_nccl: skipped: no CUDA device\n");
        return tz_test_failures ? 1 : 77;
    }
    TZ_EXPECT(found == RT_OK, "CUDA: %s", rt_error_message());
    if (found != RT_OK) return tz_test_result("test_comm_nccl");
    static rank_out o[2];
    memset(o, 0, sizeof o);
    o[0].boot = rt_comm_self();
    run_rank(&o[0]);
    check(o, 1);
    if (n_dev >= 2) {
        rt_comm *boot[2];
        pthread_t th[2];
        TZ_EXPECT_OK(rt_comm_threads_create(2, 20.0, boot));
        memset(o, 0, sizeof o);
        for (int r = 0; r < 2; r++) {
            o[r].boot = boot[r];
            o[r].device = r;
            pthread_create(&th[r], NULL, run_rank, &o[r]);
        }
        for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
        check(o, 2);
        for (int r = 0; r < 2; r++) rt_comm_free(boot[r]);
    }
    return tz_test_result("test_comm_nccl");
}

#else

int main(void) {
    fprintf(stderr, "test_comm_nccl: skipped: built without NCCL\n");
    return 77;
}

#endif
