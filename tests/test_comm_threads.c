/* The in-process threads communicator: every collective at 1 to 4 ranks against references
 * computed here in rank order (bit for bit, on every rank), reduce_scatter followed by
 * all_gather reproducing all_reduce, splits into Megatron's tp and dp groups through
 * rt_grid, a mismatched call, and a rank that never arrives: the others must fail with an
 * error naming it within the timeout, not hang. Point-to-point: the pipeline exercise
 * (tests/comm_p2p_exercise.h), a receive that nothing answers, a size mismatch and a bad peer.
 *
 * The checks run on the main thread after the rank threads have joined, since the test
 * counters are not thread-safe: each rank thread only records what it got. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runtime/comm/rt_comm.h"
#include "runtime/comm/rt_grid.h"
#include "runtime/comm/rt_launch.h"
#include "tests/comm_p2p_exercise.h"
#include "tests/testutil.h"

#define MAXR 4
#define N 257 /* odd, so nothing lines up with a vector width */

typedef struct {
    rt_comm *c;
    int which; /* scenario */
    rt_status st;
    char msg[512];
    double elapsed;
    float ar_sum[N], ar_max[N];
    float rs[N], ag[MAXR * N];
    unsigned char bc[13];
    int tp_size, dp_size, pp_size, tp_rank, dp_rank, pp_rank;
    float tp_sum, dp_sum, pp_sum, key_rank;
    int split_rank, split_size;
} rank_out;

static float input(int rank, int i) {
    /* mixed magnitudes and signs, so the summation order shows in the low bits */
    uint32_t h = (uint32_t)(rank * 7919 + i * 104729) * 2654435761u;
    float u = (float)(h >> 8) / (float)(1u << 24) - 0.5f;
    return u * (float)(1 + (i % 5) * 1000) + (float)rank * 1e-3f;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define STEP(expr)                     \
    do {                               \
        o->st = (expr);                \
        if (o->st != RT_OK) goto done; \
    } while (0)

static void *run_ops(void *arg) {
    rank_out *o = arg;
    rt_comm *c = o->c;
    int r = c->rank, n = c->size;
    float in[MAXR * N];
    /* many rounds in a row exercise the generation parity of the slots */
    for (int rep = 0; rep < 50; rep++) {
        for (int i = 0; i < N; i++) o->ar_sum[i] = input(r, i);
        STEP(c->ops->all_reduce(c->ctx, o->ar_sum, N, RT_REDUCE_SUM));
    }
    for (int i = 0; i < N; i++) o->ar_max[i] = input(r, i);
    STEP(c->ops->all_reduce(c->ctx, o->ar_max, N, RT_REDUCE_MAX));
    for (int i = 0; i < n * N; i++) in[i] = input(r, i % N);
    STEP(c->ops->reduce_scatter(c->ctx, o->rs, in + 0, N / n, RT_REDUCE_SUM));
    STEP(c->ops->all_gather(c->ctx, o->ag, o->rs, N / n));
    STEP(c->ops->barrier(c->ctx));
    memset(o->bc, r, sizeof o->bc);
    if (r == n - 1)
        for (size_t i = 0; i < sizeof o->bc; i++) o->bc[i] = (unsigned char)(100 + i);
    STEP(c->ops->broadcast(c->ctx, o->bc, sizeof o->bc, n - 1));
    /* zero-sized calls are legal and still synchronize */
    STEP(c->ops->all_reduce(c->ctx, o->ar_max, 0, RT_REDUCE_SUM));
    /* split with keys reversing the order within each color */
    rt_comm *s = NULL;
    STEP(c->ops->split(c->ctx, r % 2, -r, &s));
    o->split_rank = s->rank;
    o->split_size = s->size;
    o->key_rank = (float)r;
    o->st = s->ops->all_gather(s->ctx, in, &o->key_rank, 1);
    if (o->st == RT_OK) o->key_rank = in[0]; /* the old rank of the new rank 0 */
    rt_comm_free(s);
done:
    if (o->st != RT_OK) snprintf(o->msg, sizeof o->msg, "%s", rt_error_message());
    return NULL;
}

/* which = tp + 100 * pp */
static void *run_grid(void *arg) {
    rank_out *o = arg;
    rt_grid g;
    STEP(rt_grid_init(o->c, o->which % 100, o->which / 100, &g));
    o->tp_size = g.tp_size;
    o->dp_size = g.dp_size;
    o->pp_size = g.pp_size;
    o->tp_rank = g.tp_rank;
    o->dp_rank = g.dp_rank;
    o->pp_rank = g.pp_rank;
    o->tp_sum = o->dp_sum = o->pp_sum = (float)o->c->rank;
    o->st = g.tp->ops->all_reduce(g.tp->ctx, &o->tp_sum, 1, RT_REDUCE_SUM);
    if (o->st == RT_OK) o->st = g.dp->ops->all_reduce(g.dp->ctx, &o->dp_sum, 1, RT_REDUCE_SUM);
    if (o->st == RT_OK) o->st = g.pp->ops->all_reduce(g.pp->ctx, &o->pp_sum, 1, RT_REDUCE_SUM);
    /* the stages of one pipeline pass messages to their neighbours */
    if (o->st == RT_OK && g.pp_size > 1) o->st = p2p_exercise(g.pp, 5, o->msg, sizeof o->msg);
    rt_grid_free(&g);
done:
    if (o->st != RT_OK) snprintf(o->msg, sizeof o->msg, "%s", rt_error_message());
    return NULL;
}

/* rank 2 never calls; everyone else all-reduces and must time out */
static void *run_missing(void *arg) {
    rank_out *o = arg;
    float x = 1.0f;
    if (o->c->rank == 2) return NULL;
    double t0 = now_s();
    o->st = o->c->ops->all_reduce(o->c->ctx, &x, 1, RT_REDUCE_SUM);
    o->elapsed = now_s() - t0;
    snprintf(o->msg, sizeof o->msg, "%s", rt_error_message());
    /* the group is broken now: the next call fails at once */
    rt_status again = o->c->ops->barrier(o->c->ctx);
    if (again != RT_ERR_RUNTIME) o->elapsed = 1e9;
    return NULL;
}

static void *run_mismatch(void *arg) {
    rank_out *o = arg;
    float x[4] = {0};
    o->st = o->c->ops->all_reduce(o->c->ctx, x, o->c->rank == 1 ? 3 : 4, RT_REDUCE_SUM);
    snprintf(o->msg, sizeof o->msg, "%s", rt_error_message());
    return NULL;
}

static void *run_p2p(void *arg) {
    rank_out *o = arg;
    o->st = p2p_exercise(o->c, 40, o->msg, sizeof o->msg);
    if (o->st != RT_OK) snprintf(o->msg, sizeof o->msg, "%s", rt_error_message());
    return NULL;
}

/* which 0: rank 1 waits for rank 0, which sends nothing; 1: rank 0 sends 8 bytes, rank 1 expects
 * 4; 2: rank 0 names itself as the peer. */
static void *run_p2p_bad(void *arg) {
    rank_out *o = arg;
    float x[2] = {1, 2};
    rt_p2p op = {.send = o->c->rank == 0, .peer = 1 - o->c->rank, .buf = x, .bytes = o->which == 1 ? 8 : 4};
    if (o->which == 0 && o->c->rank == 0) return NULL;
    if (o->which == 1 && o->c->rank == 1) op.bytes = 4;
    if (o->which == 2) {
        if (o->c->rank == 1) return NULL;
        op.peer = 0;
    }
    double t0 = now_s();
    o->st = rt_comm_p2p(o->c, &op, 1);
    o->elapsed = now_s() - t0;
    if (o->st != RT_OK) snprintf(o->msg, sizeof o->msg, "%s", rt_error_message());
    return NULL;
}

static void run(int n, double timeout_s, void *(*fn)(void *), int which, rank_out *outs) {
    rt_comm *comms[MAXR];
    pthread_t th[MAXR];
    TZ_EXPECT_OK(rt_comm_threads_create(n, timeout_s, comms));
    for (int r = 0; r < n; r++) {
        memset(&outs[r], 0, sizeof outs[r]);
        outs[r].c = comms[r];
        outs[r].which = which;
        TZ_EXPECT(comms[r]->rank == r && comms[r]->size == n, "rank %d/%d", comms[r]->rank, comms[r]->size);
        pthread_create(&th[r], NULL, fn, &outs[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < n; r++) rt_comm_free(comms[r]);
}

static void test_ops(int n) {
    static rank_out o[MAXR];
    run(n, 10.0, run_ops, 0, o);
    float sum[N], mx[N];
    for (int i = 0; i < N; i++) {
        sum[i] = input(0, i);
        mx[i] = input(0, i);
        for (int r = 1; r < n; r++) {
            sum[i] += input(r, i);
            mx[i] = input(r, i) > mx[i] ? input(r, i) : mx[i];
        }
    }
    int chunk = N / n;
    for (int r = 0; r < n; r++) {
        TZ_EXPECT(o[r].st == RT_OK, "size %d rank %d: %s", n, r, o[r].msg);
        if (o[r].st != RT_OK) continue;
        /* bit-identical to the rank-order reference, hence across ranks */
        TZ_EXPECT(memcmp(o[r].ar_sum, sum, sizeof sum) == 0, "size %d rank %d: all_reduce sum bits differ", n, r);
        TZ_EXPECT(memcmp(o[r].ar_max, mx, sizeof mx) == 0, "size %d rank %d: all_reduce max differs", n, r);
        TZ_EXPECT(memcmp(o[r].rs, sum + (size_t)r * chunk, (size_t)chunk * sizeof(float)) == 0,
                  "size %d rank %d: reduce_scatter chunk differs", n, r);
        TZ_EXPECT(memcmp(o[r].ag, sum, (size_t)n * chunk * sizeof(float)) == 0,
                  "size %d rank %d: all_gather of the reduce_scatter chunks is not the all_reduce", n, r);
        for (size_t i = 0; i < sizeof o[r].bc; i++)
            TZ_EXPECT(o[r].bc[i] == 100 + i, "size %d rank %d: broadcast byte %zu = %d", n, r, i, o[r].bc[i]);
        int color_n = (n - r % 2 + 1) / 2; /* ranks with the same parity */
        int highest = r % 2 + 2 * (color_n - 1);
        TZ_EXPECT(o[r].split_size == color_n, "size %d rank %d: split size %d, expected %d", n, r, o[r].split_size,
                  color_n);
        TZ_EXPECT(o[r].split_rank == (highest - r) / 2, "size %d rank %d: split rank %d (keys reverse the order)", n, r,
                  o[r].split_rank);
        TZ_EXPECT(o[r].key_rank == (float)highest, "size %d rank %d: new rank 0 is old rank %g, expected %d", n, r,
                  o[r].key_rank, highest);
    }
}

static void test_grid(int n, int tp, int pp) {
    rank_out o[MAXR];
    run(n, 10.0, run_grid, tp + 100 * pp, o);
    for (int r = 0; r < n; r++) {
        TZ_EXPECT(o[r].st == RT_OK && !o[r].msg[0], "size %d tp %d pp %d rank %d: %s", n, tp, pp, r, o[r].msg);
        if (o[r].st != RT_OK) continue;
        /* Megatron's order: tp fastest, then dp, then pp */
        int dp = n / (tp * pp), tr = r % tp, dr = r / tp % dp, pr = r / (tp * dp);
        TZ_EXPECT(o[r].tp_size == tp && o[r].dp_size == dp && o[r].pp_size == pp && o[r].tp_rank == tr &&
                      o[r].dp_rank == dr && o[r].pp_rank == pr,
                  "size %d rank %d: grid tp %d/%d dp %d/%d pp %d/%d", n, r, o[r].tp_rank, o[r].tp_size, o[r].dp_rank,
                  o[r].dp_size, o[r].pp_rank, o[r].pp_size);
        float tp_sum = 0, dp_sum = 0, pp_sum = 0;
        for (int k = 0; k < tp; k++) tp_sum += (float)((pr * dp + dr) * tp + k);
        for (int k = 0; k < dp; k++) dp_sum += (float)((pr * dp + k) * tp + tr);
        for (int k = 0; k < pp; k++) pp_sum += (float)((k * dp + dr) * tp + tr);
        TZ_EXPECT(o[r].tp_sum == tp_sum, "size %d tp %d rank %d: tp sum %g, expected %g", n, tp, r, o[r].tp_sum,
                  tp_sum);
        TZ_EXPECT(o[r].dp_sum == dp_sum, "size %d tp %d rank %d: dp sum %g, expected %g", n, tp, r, o[r].dp_sum,
                  dp_sum);
        TZ_EXPECT(o[r].pp_sum == pp_sum, "size %d pp %d rank %d: pp sum %g, expected %g", n, pp, r, o[r].pp_sum,
                  pp_sum);
    }
}

static void test_grid_bad_tp(void) {
    rank_out o[MAXR];
    run(4, 10.0, run_grid, 3 + 100, o);
    for (int r = 0; r < 4; r++) {
        TZ_EXPECT(o[r].st == RT_ERR_CONFIG, "tp 3 of 4: got %s", rt_status_name(o[r].st));
        TZ_EXPECT(strstr(o[r].msg, "--tp 3 does not divide the world size 4") != NULL, "message: %s", o[r].msg);
    }
    rt_grid g;
    TZ_EXPECT_OK(rt_grid_init(rt_comm_self(), 1, 1, &g));
    TZ_EXPECT(g.tp == rt_comm_self() && g.dp == rt_comm_self(), "world 1: tp and dp should be rt_comm_self");
    rt_grid_free(&g);
    TZ_EXPECT(rt_grid_init(rt_comm_self(), 0, 1, &g) == RT_ERR_CONFIG, "tp 0 accepted");
    TZ_EXPECT(rt_grid_init(rt_comm_self(), 1, 0, &g) == RT_ERR_CONFIG, "pp 0 accepted");
    run(4, 10.0, run_grid, 1 + 100 * 3, o);
    for (int r = 0; r < 4; r++)
        TZ_EXPECT(o[r].st == RT_ERR_CONFIG && strstr(o[r].msg, "--tp 1 x --pp 3 does not divide the world size 4"),
                  "pp 3 of 4: %s", o[r].msg);
}

static void test_timeout(void) {
    rank_out o[MAXR];
    double t0 = now_s();
    run(4, 0.3, run_missing, 0, o);
    double total = now_s() - t0;
    TZ_EXPECT(total < 3.0, "the timeout case took %.2f s", total);
    for (int r = 0; r < 4; r++) {
        if (r == 2) continue;
        TZ_EXPECT(o[r].st == RT_ERR_RUNTIME, "rank %d: got %s", r, rt_status_name(o[r].st));
        TZ_EXPECT(strstr(o[r].msg, "rank(s) 2 did not reach all_reduce within 0.3 s") != NULL, "rank %d message: %s", r,
                  o[r].msg);
        TZ_EXPECT(o[r].elapsed < 1.5, "rank %d waited %.2f s (or a later call did not fail at once)", r, o[r].elapsed);
    }
}

static void test_mismatch(void) {
    rank_out o[MAXR];
    run(3, 5.0, run_mismatch, 0, o);
    for (int r = 0; r < 3; r++) {
        TZ_EXPECT(o[r].st == RT_ERR_RUNTIME, "rank %d: got %s", r, rt_status_name(o[r].st));
        TZ_EXPECT(strstr(o[r].msg, "disagree") != NULL, "rank %d message: %s", r, o[r].msg);
    }
}

static void test_p2p(void) {
    static rank_out o[MAXR];
    for (int n = 2; n <= MAXR; n++) {
        run(n, 10.0, run_p2p, 0, o);
        for (int r = 0; r < n; r++)
            TZ_EXPECT(o[r].st == RT_OK && !o[r].msg[0], "p2p size %d rank %d: %s", n, r, o[r].msg);
    }
    run(2, 0.3, run_p2p_bad, 0, o);
    TZ_EXPECT(o[1].st == RT_ERR_RUNTIME && strstr(o[1].msg, "rank 1 received nothing from rank 0 within 0.3 s"),
              "p2p timeout: %s", o[1].msg);
    TZ_EXPECT(o[1].elapsed < 1.5, "p2p timeout took %.2f s", o[1].elapsed);
    run(2, 5.0, run_p2p_bad, 1, o);
    TZ_EXPECT(o[0].st == RT_OK, "p2p mismatch: the send itself succeeds: %s", o[0].msg);
    TZ_EXPECT(o[1].st == RT_ERR_RUNTIME && strstr(o[1].msg, "rank 1 expected 4 bytes from rank 0, which sent 8"),
              "p2p mismatch: %s", o[1].msg);
    run(2, 5.0, run_p2p_bad, 2, o);
    TZ_EXPECT(o[0].st == RT_ERR_RUNTIME && strstr(o[0].msg, "rank 0 cannot send to rank 0"), "p2p to itself: %s",
              o[0].msg);
    TZ_EXPECT(rt_comm_p2p(rt_comm_self(), NULL, 0) == RT_ERR_UNSUPPORTED, "the self comm has no p2p");
}

int main(void) {
    for (int n = 1; n <= MAXR; n++) test_ops(n);
    static const int layouts[][3] = {{1, 1, 1}, {2, 1, 1}, {2, 2, 1}, {4, 1, 1}, {4, 2, 1}, {4, 4, 1}, {3, 3, 1},
                                     {2, 1, 2}, {4, 1, 2}, {4, 2, 2}, {4, 1, 4}, {3, 1, 3}}; /* ranks tp pp */
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        test_grid(layouts[i][0], layouts[i][1], layouts[i][2]);
    test_grid_bad_tp();
    test_mismatch();
    test_timeout();
    test_p2p();
    return tz_test_result("test_comm_threads");
}
