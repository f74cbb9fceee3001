/* Pipeline parallelism's 1F1B schedule and executor (runtime/train/rt_pipe.h):
 *   - the schedule of every stage, for 1 to 5 stages and 1 to 8 micro-batches: each forward
 *     and backward once, a micro-batch's forward before its backward, backwards in order, at
 *     most rt_pipe_in_flight micro-batches held, and, run with unit-time actions that wait for
 *     their neighbours, no stall and a makespan of 2 (M + P - 1), the bubble
 *     (P - 1) / (M + P - 1);
 *   - the executor on threads (1 to 4 stages, 1 to 6 micro-batches, fewer micro-batches than
 *     stages included): the toy stages of tests/pipe_toy.h end with the gradients and loss of
 *     running them in one thread, bit for bit;
 *   - a stage that fails stops its pipeline: the others report a timeout instead of hanging. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "runtime/comm/rt_comm.h"
#include "runtime/comm/rt_launch.h"
#include "runtime/train/rt_pipe.h"
#include "tests/pipe_toy.h"
#include "tests/testutil.h"

#define MAXP 5

static void check_schedule(int P, int M) {
    rt_pipe_action acts[MAXP][2 * TOY_MAXM];
    for (int s = 0; s < P; s++) {
        rt_pipe_1f1b(s, P, M, acts[s]);
        int fwd_at[TOY_MAXM], bwd_at[TOY_MAXM], held = 0, most = 0, next_b = 0;
        for (int m = 0; m < M; m++) fwd_at[m] = bwd_at[m] = -1;
        for (int i = 0; i < 2 * M; i++) {
            const rt_pipe_action a = acts[s][i];
            TZ_EXPECT(a.micro >= 0 && a.micro < M, "P %d M %d stage %d: micro %d", P, M, s, a.micro);
            if (a.kind == RT_PIPE_FORWARD) {
                TZ_EXPECT(fwd_at[a.micro] < 0, "P %d M %d stage %d: forward %d twice", P, M, s, a.micro);
                fwd_at[a.micro] = i;
                most = ++held > most ? held : most;
            } else {
                TZ_EXPECT(a.micro == next_b++, "P %d M %d stage %d: backward %d out of order", P, M, s, a.micro);
                TZ_EXPECT(fwd_at[a.micro] >= 0, "P %d M %d stage %d: backward %d before its forward", P, M, s, a.micro);
                bwd_at[a.micro] = i;
                held--;
            }
        }
        for (int m = 0; m < M; m++)
            TZ_EXPECT(fwd_at[m] >= 0 && bwd_at[m] >= 0, "P %d M %d stage %d: micro %d missing", P, M, s, m);
        TZ_EXPECT(most == rt_pipe_in_flight(s, P, M), "P %d M %d stage %d: holds %d, rt_pipe_in_flight says %d", P, M,
                  s, most, rt_pipe_in_flight(s, P, M));
    }
    /* unit-time actions: a forward waits for the previous stage's, a backward for the next
     * stage's (the last stage's for its own forward), finished at an earlier tick */
    int done_f[MAXP][TOY_MAXM], done_b[MAXP][TOY_MAXM], at[MAXP] = {0}, t = 0, finished = 0;
    for (int s = 0; s < P; s++)
        for (int m = 0; m < M; m++) done_f[s][m] = done_b[s][m] = -1;
    while (finished < P && t < 10 * (M + P)) {
        int ran[MAXP] = {0};
        for (int s = 0; s < P; s++) {
            if (at[s] == 2 * M) continue;
            const rt_pipe_action a = acts[s][at[s]];
            int dep = a.kind == RT_PIPE_FORWARD ? (s ? done_f[s - 1][a.micro] : 0)
                                                : (s < P - 1 ? done_b[s + 1][a.micro] : done_f[s][a.micro]);
            ran[s] = dep >= 0 && dep <= t;
        }
        for (int s = 0; s < P; s++)
            if (ran[s]) {
                const rt_pipe_action a = acts[s][at[s]++];
                (a.kind == RT_PIPE_FORWARD ? done_f : done_b)[s][a.micro] = t + 1;
                finished += at[s] == 2 * M;
            }
        t++;
    }
    TZ_EXPECT(finished == P, "P %d M %d: the schedule stalls", P, M);
    TZ_EXPECT(t == 2 * (M + P - 1), "P %d M %d: makespan %d ticks, expected 2 (M + P - 1) = %d", P, M, t,
              2 * (M + P - 1));
}

typedef struct {
    rt_comm *c;
    toy_stage *t;
    int micro;
    int fail_stage; /* this stage's forward of micro 1 fails; -1: none */
    rt_status st;
    char msg[256];
} stage_run;

static rt_status failing_forward(void *ctx, int m, const void *in, void *out) {
    if (m == 1) return rt_errorf(RT_ERR_RUNTIME, "stage failed on purpose");
    return toy_forward(ctx, m, in, out);
}

static void *run_stage(void *arg) {
    stage_run *r = arg;
    rt_pipe_stage st = toy_pipe_stage(r->t);
    if (r->c->rank == r->fail_stage) st.forward = failing_forward;
    const size_t bytes = (size_t)3 * r->t->K * sizeof(float);
    rt_pipe_buffers b = {malloc(bytes), malloc(bytes), malloc(bytes), malloc(bytes)};
    r->st = rt_pipe_run(r->c, r->micro, &st, &b);
    if (r->st != RT_OK) snprintf(r->msg, sizeof r->msg, "%s", rt_error_message());
    free(b.in), free(b.out), free(b.dout), free(b.din);
    return NULL;
}

static void run_pipeline(int P, int M, int fail_stage, double timeout_s, toy_stage *t, stage_run *runs) {
    rt_comm *comms[MAXP];
    pthread_t th[MAXP];
    TZ_EXPECT_OK(rt_comm_threads_create(P, timeout_s, comms));
    for (int s = 0; s < P; s++) {
        runs[s] = (stage_run){.c = comms[s], .t = &t[s], .micro = M, .fail_stage = fail_stage};
        pthread_create(&th[s], NULL, run_stage, &runs[s]);
    }
    for (int s = 0; s < P; s++) pthread_join(th[s], NULL);
    for (int s = 0; s < P; s++) rt_comm_free(comms[s]);
}

static void check_executor(int P, int M) {
    toy_stage ref[MAXP], got[MAXP];
    stage_run runs[MAXP];
    for (int s = 0; s < P; s++) toy_init(&ref[s], s, P, 40), toy_init(&got[s], s, P, 40);
    toy_reference(ref, P, M);
    run_pipeline(P, M, -1, 10.0, got, runs);
    for (int s = 0; s < P; s++) {
        TZ_EXPECT(runs[s].st == RT_OK, "P %d M %d stage %d: %s", P, M, s, runs[s].msg);
        TZ_EXPECT(got[s].forwards == M && got[s].backwards == M, "P %d M %d stage %d: %d forwards, %d backwards", P, M,
                  s, got[s].forwards, got[s].backwards);
        TZ_EXPECT(memcmp(got[s].dw, ref[s].dw, 40 * sizeof(float)) == 0,
                  "P %d M %d stage %d: gradients differ from one thread's", P, M, s);
    }
    TZ_EXPECT(got[P - 1].loss == ref[P - 1].loss && ref[P - 1].loss != 0, "P %d M %d: loss %.17g, one thread %.17g", P,
              M, got[P - 1].loss, ref[P - 1].loss);
    for (int s = 0; s < P; s++) toy_free(&ref[s]), toy_free(&got[s]);
}

/* Stage 1 of 3 fails in its second forward: it reports its own error, its neighbours time out
 * waiting for it, and nothing hangs. */
static void check_failure(void) {
    toy_stage t[3];
    stage_run runs[3];
    for (int s = 0; s < 3; s++) toy_init(&t[s], s, 3, 8);
    run_pipeline(3, 4, 1, 0.3, t, runs);
    TZ_EXPECT(runs[1].st == RT_ERR_RUNTIME && strstr(runs[1].msg, "on purpose"), "failing stage: %s", runs[1].msg);
    for (int s = 0; s < 3; s += 2)
        TZ_EXPECT(runs[s].st == RT_ERR_RUNTIME && strstr(runs[s].msg, "within 0.3 s"), "stage %d: %s", s, runs[s].msg);
    for (int s = 0; s < 3; s++) toy_free(&t[s]);
}

int main(void) {
    for (int P = 1; P <= MAXP; P++)
        for (int M = 1; M <= TOY_MAXM; M++) check_schedule(P, M);
    for (int P = 1; P <= 4; P++)
        for (int M = 1; M <= 6; M++) check_executor(P, M);
    check_failure();
    return tz_test_result("test_pipe");
}
