/* The MPI communicator under mpirun (registered at -np 2 and -np 4): launch detection sees
 * OpenMPI's variables and agrees with MPI, every collective matches a reference computed on
 * each rank and gives the same bits on every rank (the started all-reduce and all-gather, in
 * flight together around a blocking collective, too), the dp x tp grid at tp = 2, and a rank
 * that arrives late makes the others time out with an error instead of hanging. Point-to-point:
 * the pipeline exercise (tests/comm_p2p_exercise.h) and receives of the wrong size.
 *
 * Started without mpirun it runs as one rank on rt_comm_self, which is still a valid run. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/comm/rt_comm.h"
#include "runtime/comm/rt_grid.h"
#include "runtime/comm/rt_launch.h"
#include "tests/comm_p2p_exercise.h"
#include "tests/testutil.h"

#define N 1001

static float input(int rank, int i) {
    uint32_t h = (uint32_t)(rank * 7919 + i * 104729) * 2654435761u;
    float u = (float)(h >> 8) / (float)(1u << 24) - 0.5f;
    return u * (float)(1 + (i % 5) * 1000) + (float)rank * 1e-3f;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Every rank must hold the same n floats: gather them all and compare with rank 0's. */
static void expect_same_on_all_ranks(rt_comm *w, const char *what, const float *x, size_t n) {
    float *all = rt_xmalloc((size_t)w->size * n * sizeof(float));
    TZ_EXPECT_OK(w->ops->all_gather(w->ctx, all, x, n));
    for (int r = 1; r < w->size; r++)
        TZ_EXPECT(memcmp(all, all + (size_t)r * n, n * sizeof(float)) == 0, "%s: rank %d's bits differ from rank 0's",
                  what, r);
    free(all);
}

/* chunked: TZ_MPI_CHUNK is set below every count, so each collective runs chunk by chunk (the
 * paths a slab past INT_MAX floats takes), the started all-gathers blocking. */
static void test_ops(rt_comm *w, bool chunked) {
    int r = w->rank, n = w->size;
    static float sum[N], mx[N], ref_sum[N], ref_max[N], in[4 * N], rs[N], ag[4 * N];
    for (int i = 0; i < N; i++) {
        sum[i] = mx[i] = input(r, i);
        ref_sum[i] = ref_max[i] = input(0, i);
        for (int k = 1; k < n; k++) {
            ref_sum[i] += input(k, i);
            ref_max[i] = input(k, i) > ref_max[i] ? input(k, i) : ref_max[i];
        }
    }
    TZ_EXPECT_OK(w->ops->all_reduce(w->ctx, sum, N, RT_REDUCE_SUM));
    tz_check_close("all_reduce sum", sum, ref_sum, N, 1e-3f, 1e-5f);
    expect_same_on_all_ranks(w, "all_reduce sum", sum, N);
    TZ_EXPECT_OK(w->ops->all_reduce(w->ctx, mx, N, RT_REDUCE_MAX));
    TZ_EXPECT(memcmp(mx, ref_max, sizeof mx) == 0, "all_reduce max differs on rank %d", r);

    int chunk = N / n;
    for (int i = 0; i < n * chunk; i++) in[i] = input(r, i);
    TZ_EXPECT_OK(w->ops->reduce_scatter(w->ctx, rs, in, (size_t)chunk, RT_REDUCE_SUM));
    tz_check_close("reduce_scatter", rs, ref_sum + (size_t)r * chunk, (size_t)chunk, 1e-3f, 1e-5f);
    TZ_EXPECT_OK(w->ops->all_gather(w->ctx, ag, rs, (size_t)chunk));
    tz_check_close("reduce_scatter + all_gather", ag, ref_sum, (size_t)n * chunk, 1e-3f, 1e-5f);
    expect_same_on_all_ranks(w, "all_gather", ag, (size_t)n * chunk);
    /* in place: this rank's chunk already sits at its place in the output */
    for (int i = 0; i < n * chunk; i++) ag[i] = i / chunk == r ? rs[i % chunk] : -1.0f;
    TZ_EXPECT_OK(w->ops->all_gather(w->ctx, ag, ag + (size_t)r * chunk, (size_t)chunk));
    tz_check_close("all_gather in place", ag, ref_sum, (size_t)n * chunk, 1e-3f, 1e-5f);

    /* started collectives: two all-gathers and an all-reduce in flight at once, a blocking
     * collective while they run, then the waits; the results equal the blocking ones */
    static float ag1[4 * N], ag2[4 * N], ar[N];
    void *req[3] = {NULL, NULL, NULL};
    for (int i = 0; i < N; i++) ar[i] = input(r, i);
    for (int i = 0; i < n * chunk; i++) ag2[i] = i / chunk == r ? rs[i % chunk] : -1.0f;
    TZ_EXPECT_OK(rt_comm_all_gather_start(w, ag1, rs, (size_t)chunk, &req[0]));
    TZ_EXPECT_OK(rt_comm_all_reduce_start(w, ar, N, RT_REDUCE_SUM, &req[1]));
    TZ_EXPECT_OK(rt_comm_all_gather_start(w, ag2, ag2 + (size_t)r * chunk, (size_t)chunk, &req[2]));
    TZ_EXPECT(n == 1 || chunked || (req[0] && req[2]), "the MPI comm started its all-gathers (requests %p %p)", req[0],
              req[2]);
    float one = 1.0f;
    TZ_EXPECT_OK(w->ops->all_reduce(w->ctx, &one, 1, RT_REDUCE_SUM));
    TZ_EXPECT(one == (float)n, "a blocking all-reduce among started ones: %g", one);
    for (int k = 0; k < 3; k++) TZ_EXPECT_OK(rt_comm_wait(w, req[k]));
    TZ_EXPECT(memcmp(ag1, ag, (size_t)n * chunk * sizeof(float)) == 0,
              "started all_gather differs from the blocking one");
    TZ_EXPECT(memcmp(ag2, ag, (size_t)n * chunk * sizeof(float)) == 0, "started all_gather in place differs");
    TZ_EXPECT(memcmp(ar, sum, sizeof ar) == 0, "started all_reduce differs from the blocking one");

    unsigned char bc[37];
    memset(bc, r, sizeof bc);
    if (r == n - 1)
        for (size_t i = 0; i < sizeof bc; i++) bc[i] = (unsigned char)(200 - i);
    TZ_EXPECT_OK(w->ops->broadcast(w->ctx, bc, sizeof bc, n - 1));
    for (size_t i = 0; i < sizeof bc; i++) TZ_EXPECT(bc[i] == 200 - i, "rank %d broadcast byte %zu = %d", r, i, bc[i]);
    TZ_EXPECT_OK(w->ops->barrier(w->ctx));
}

static void test_grid(rt_comm *w, int tp) {
    rt_grid g;
    TZ_EXPECT_OK(rt_grid_init(w, tp, 1, &g));
    if (!g.tp) return;
    TZ_EXPECT(g.tp_rank == w->rank % tp && g.dp_rank == w->rank / tp && g.tp->size == tp && g.dp->size == w->size / tp,
              "rank %d: tp %d/%d dp %d/%d", w->rank, g.tp_rank, g.tp->size, g.dp_rank, g.dp->size);
    float t = (float)w->rank, d = (float)w->rank, t_ref = 0, d_ref = 0;
    TZ_EXPECT_OK(g.tp->ops->all_reduce(g.tp->ctx, &t, 1, RT_REDUCE_SUM));
    TZ_EXPECT_OK(g.dp->ops->all_reduce(g.dp->ctx, &d, 1, RT_REDUCE_SUM));
    for (int k = 0; k < tp; k++) t_ref += (float)(g.dp_rank * tp + k);
    for (int k = 0; k < w->size / tp; k++) d_ref += (float)(g.tp_rank + k * tp);
    TZ_EXPECT(t == t_ref && d == d_ref, "rank %d: tp sum %g (expected %g), dp sum %g (expected %g)", w->rank, t, t_ref,
              d, d_ref);
    rt_grid_free(&g);
    rt_grid bad;
    if (w->size % 3 != 0) TZ_EXPECT(rt_grid_init(w, 3, 1, &bad) == RT_ERR_CONFIG, "tp 3 accepted at world %d", w->size);
}

/* A pipeline of pp stages (tp 1): the stage groups hold ranks dp_rank, dp_rank + dp, ... in
 * stage order, and their neighbours exchange the p2p exercise. */
static void test_grid_pp(rt_comm *w, int pp) {
    rt_grid g;
    TZ_EXPECT_OK(rt_grid_init(w, 1, pp, &g));
    if (!g.pp) return;
    const int dp = w->size / pp;
    TZ_EXPECT(g.pp_rank == w->rank / dp && g.dp_rank == w->rank % dp && g.pp->size == pp && g.pp->rank == g.pp_rank,
              "rank %d: pp %d/%d dp %d", w->rank, g.pp_rank, g.pp->size, g.dp_rank);
    char err[256];
    rt_status st = p2p_exercise(g.pp, 10, err, sizeof err);
    TZ_EXPECT(st == RT_OK && !err[0], "pp %d rank %d: %s", pp, w->rank, st == RT_OK ? err : rt_error_message());
    rt_grid_free(&g);
}

/* Rank 0 waits at a barrier the others reach only after 1 s; with a 0.3 s timeout it must
 * fail within about that, and the communicator stays failed. Then the late ranks arrive,
 * so the abandoned barrier completes and everything can be freed. */
static void test_timeout(rt_comm *w, int *argc, char ***argv) {
    rt_comm *quick = NULL;
    TZ_EXPECT_OK(rt_comm_mpi_init(argc, argv, 0.3, &quick));
    if (!quick) return;
    if (w->rank == 0) {
        double t0 = now_s();
        rt_status st = quick->ops->barrier(quick->ctx);
        double dt = now_s() - t0;
        TZ_EXPECT(st == RT_ERR_RUNTIME, "late ranks: got %s", rt_status_name(st));
        TZ_EXPECT(strstr(rt_error_message(), "barrier") && strstr(rt_error_message(), "within 0.3 s"), "message: %s",
                  rt_error_message());
        TZ_EXPECT(dt < 1.0, "rank 0 waited %.2f s with a 0.3 s timeout", dt);
        float x = 1;
        TZ_EXPECT(quick->ops->all_reduce(quick->ctx, &x, 1, RT_REDUCE_SUM) == RT_ERR_RUNTIME,
                  "a timed-out communicator was used again");
    } else {
        usleep(1000000);
        TZ_EXPECT_OK(quick->ops->barrier(quick->ctx));
    }
    TZ_EXPECT_OK(w->ops->barrier(w->ctx));
    rt_comm_free(quick);
}

/* The pipeline exercise, then rank 1 receiving 4 bytes where rank 0 sends 8, and 8 where it
 * sends 4, each on a fresh communicator (a mismatch breaks the one it happens on). */
static void test_p2p(rt_comm *w, int *argc, char ***argv) {
    char err[256];
    rt_status st = p2p_exercise(w, 30, err, sizeof err);
    TZ_EXPECT(st == RT_OK && !err[0], "p2p exercise on rank %d: %s", w->rank, st == RT_OK ? err : rt_error_message());
    for (int k = 0; k < 2; k++) {
        rt_comm *c = NULL;
        TZ_EXPECT_OK(rt_comm_mpi_init(argc, argv, 10.0, &c));
        if (!c) return;
        char buf[8] = {0};
        const size_t sent = k ? 4 : 8, want = k ? 8 : 4;
        if (c->rank < 2) {
            rt_p2p op = {.send = c->rank == 0, .peer = 1 - c->rank, .buf = buf, .bytes = c->rank == 0 ? sent : want};
            st = rt_comm_p2p(c, &op, 1);
            if (c->rank == 1) {
                TZ_EXPECT(st == RT_ERR_RUNTIME, "p2p of %zu bytes received as %zu: got %s", sent, want,
                          rt_status_name(st));
                TZ_EXPECT(strstr(rt_error_message(), k ? "which sent fewer" : "which sent more") != NULL, "message: %s",
                          rt_error_message());
            }
        }
        TZ_EXPECT_OK(w->ops->barrier(w->ctx));
        rt_comm_free(c);
    }
}

int main(int argc, char **argv) {
    rt_launch_info info;
    TZ_EXPECT_OK(rt_launch_detect(&info));
    rt_comm *w = NULL;
    TZ_EXPECT_OK(rt_comm_world_init(&argc, &argv, 30.0, &w));
    if (!w) return tz_test_result("test_mpi_comm");
    TZ_EXPECT(info.world_size == w->size && info.rank == w->rank, "launch says %d/%d, comm says %d/%d", info.rank,
              info.world_size, w->rank, w->size);
    if (w->size > 1) {
        TZ_EXPECT(info.source == RT_LAUNCH_OPENMPI, "launched by %s, expected OpenMPI mpirun",
                  rt_launch_source_name(info.source));
        TZ_EXPECT(strcmp(w->ops->name, "mpi") == 0, "world comm is %s", w->ops->name);
    }
    test_ops(w, false);
    setenv("TZ_MPI_CHUNK", "7", 1); /* every rank alike */
    test_ops(w, true);
    unsetenv("TZ_MPI_CHUNK");
    test_grid(w, 1);
    if (w->size % 2 == 0) test_grid(w, 2);
    test_grid(w, w->size);
    if (w->size > 1) test_p2p(w, &argc, &argv);
    if (w->size % 2 == 0) test_grid_pp(w, 2);
    if (w->size > 1) test_grid_pp(w, w->size);
    if (w->size > 1) test_timeout(w, &argc, &argv);
    rt_comm_free(w);
    rt_comm_mpi_finalize();
    return tz_test_result("test_mpi_comm");
}
