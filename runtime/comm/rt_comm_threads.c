/* In-process communicators: n threads of one test play n ranks, so the parallel layers and
 * the data-parallel code run their real collectives without MPI.
 *
 * Every collective is one round of a generation barrier. On arrival a rank copies what it
 * contributes into its own slot (under the group mutex), and the last rank to arrive checks
 * that everyone called the same operation with the same size, does the work that needs all
 * ranks at once (split), and bumps the generation. Then each rank builds its own result from
 * the slots outside the lock. Reductions run in rank order, so all ranks compute the same
 * bits and the result never depends on which thread came first. Slots alternate between two
 * sets by the generation's parity: a rank can only write set p again two rounds later, when
 * every rank has arrived at the round in between and so has finished reading set p.
 *
 * A rank that does not arrive within the timeout breaks the group: the waiting ranks return
 * RT_ERR_RUNTIME naming the missing ranks, and every later call on the group fails at once,
 * since the ranks no longer agree on which round they are in.
 *
 * Point-to-point transfers are not rounds: a send copies its message into the mailbox of its
 * (sender, receiver) pair at once (so sends never block), and a receive takes the oldest
 * message of its pair, waiting for one until the timeout. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runtime/comm/rt_comm.h"
#include "runtime/comm/rt_launch.h"

typedef enum { THR_ALL_REDUCE = 0, THR_REDUCE_SCATTER, THR_ALL_GATHER, THR_BROADCAST, THR_BARRIER, THR_SPLIT } thr_op;

static const char *const thr_op_names[] = {"all_reduce", "reduce_scatter", "all_gather",
                                           "broadcast",  "barrier",        "split"};

typedef struct thr_group thr_group;

typedef struct {
    thr_op op;
    size_t n; /* elements (or bytes for broadcast) each rank passes */
    int arg;  /* reduce op, broadcast root */
    int color, key;
} thr_call;

typedef struct {
    void *data; /* what this rank contributed this round */
    size_t cap;
    thr_call call;
    /* split results, filled by the last rank to arrive */
    thr_group *new_group;
    int new_rank;
} thr_slot;

/* A point-to-point message waiting in its pair's mailbox. */
typedef struct thr_msg {
    struct thr_msg *next;
    size_t bytes;
    unsigned char data[];
} thr_msg;

struct thr_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size;
    double timeout_s;
    int refs;                         /* live contexts; the last free destroys the group */
    unsigned long gen;                /* rounds completed */
    int arrived;                      /* ranks arrived in the current round */
    unsigned char *here;              /* (size) arrived in the current round */
    thr_slot *slots[2];               /* (size) each, by the round's parity */
    thr_msg **mail_head, **mail_tail; /* (size * size) [sender * size + receiver], oldest first */
    int broken;
    char err[256]; /* why the group broke, reported by every later call */
};

typedef struct {
    thr_group *g;
    int rank;
} thr_ctx;

static const rt_comm_ops thr_ops;

static thr_group *thr_group_new(int size, double timeout_s) {
    thr_group *g = rt_xcalloc(1, sizeof *g);
    pthread_condattr_t attr;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_init(&attr);
    /* deadlines are measured on the monotonic clock, so a clock change cannot fire them */
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &attr);
    pthread_condattr_destroy(&attr);
    g->size = size;
    g->timeout_s = timeout_s;
    g->here = rt_xcalloc((size_t)size, 1);
    g->slots[0] = rt_xcalloc((size_t)size, sizeof(thr_slot));
    g->slots[1] = rt_xcalloc((size_t)size, sizeof(thr_slot));
    g->mail_head = rt_xcalloc((size_t)size * (size_t)size, sizeof(thr_msg *));
    g->mail_tail = rt_xcalloc((size_t)size * (size_t)size, sizeof(thr_msg *));
    return g;
}

static void thr_group_destroy(thr_group *g) {
    for (int p = 0; p < 2; p++) {
        for (int r = 0; r < g->size; r++) free(g->slots[p][r].data);
        free(g->slots[p]);
    }
    for (size_t i = 0; i < (size_t)g->size * (size_t)g->size; i++)
        for (thr_msg *m = g->mail_head[i], *next; m; m = next) {
            next = m->next;
            free(m);
        }
    free(g->mail_head);
    free(g->mail_tail);
    free(g->here);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static rt_comm *thr_comm_new(thr_group *g, int rank) {
    thr_ctx *ctx = rt_xmalloc(sizeof *ctx);
    ctx->g = g;
    ctx->rank = rank;
    rt_comm *c = rt_xmalloc(sizeof *c);
    c->ops = &thr_ops;
    c->ctx = ctx;
    c->rank = rank;
    c->size = g->size;
    return c;
}

/* Under the lock, by the last rank to arrive: validates the round and performs splits.
 * Returns 0 and fills g->err when the ranks disagree. */
static int thr_finish_round(thr_group *g, thr_slot *slots) {
    const thr_call *c0 = &slots[0].call;
    for (int r = 1; r < g->size; r++) {
        const thr_call *c = &slots[r].call;
        if (c->op != c0->op || (c->op != THR_BROADCAST && c->n != c0->n) || c->arg != c0->arg) {
            snprintf(g->err, sizeof g->err,
                     "threads comm (size %d): ranks disagree on the collective: rank 0 called %s(n=%zu, arg=%d), "
                     "rank %d called %s(n=%zu, arg=%d)",
                     g->size, thr_op_names[c0->op], c0->n, c0->arg, r, thr_op_names[c->op], c->n, c->arg);
            return 0;
        }
    }
    if (c0->op != THR_SPLIT) return 1;
    /* Each color becomes a group; members are ordered by (key, old rank) as MPI does. */
    int *order = rt_xmalloc((size_t)g->size * sizeof *order);
    for (int r = 0; r < g->size; r++) slots[r].new_group = NULL;
    for (int r = 0; r < g->size; r++) {
        if (slots[r].new_group) continue;
        int color = slots[r].call.color, m = 0;
        for (int s = 0; s < g->size; s++)
            if (slots[s].call.color == color) {
                /* insertion by (key, rank): groups are small */
                int pos = m++;
                while (pos > 0 && slots[order[pos - 1]].call.key > slots[s].call.key) {
                    order[pos] = order[pos - 1];
                    pos--;
                }
                order[pos] = s;
            }
        thr_group *ng = thr_group_new(m, g->timeout_s);
        ng->refs = m;
        for (int i = 0; i < m; i++) {
            slots[order[i]].new_group = ng;
            slots[order[i]].new_rank = i;
        }
    }
    free(order);
    return 1;
}

static double thr_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static struct timespec thr_deadline(double timeout_s) {
    double deadline = thr_now() + timeout_s;
    struct timespec ts;
    ts.tv_sec = (time_t)deadline;
    ts.tv_nsec = (long)((deadline - (double)ts.tv_sec) * 1e9);
    return ts;
}

/* One round: contribute `bytes` of `data` and wait for every rank. On success *slots_out is
 * the round's slot set, readable until this rank's next call. */
static rt_status thr_round(thr_ctx *ctx, const thr_call *call, const void *data, size_t bytes, thr_slot **slots_out) {
    thr_group *g = ctx->g;
    rt_status st = RT_OK;
    pthread_mutex_lock(&g->mu);
    if (g->broken) {
        st = rt_errorf(RT_ERR_RUNTIME, "%s (rank %d called %s after that)", g->err, ctx->rank, thr_op_names[call->op]);
        goto out;
    }
    unsigned long my_gen = g->gen;
    thr_slot *slots = g->slots[my_gen & 1], *me = &slots[ctx->rank];
    RT_CHECK(!g->here[ctx->rank], "rank %d entered a collective twice (shared by two threads?)", ctx->rank);
    if (bytes > me->cap) {
        free(me->data);
        me->data = rt_xmalloc(bytes);
        me->cap = bytes;
    }
    if (bytes) memcpy(me->data, data, bytes);
    me->call = *call;
    g->here[ctx->rank] = 1;
    if (++g->arrived == g->size) {
        if (!thr_finish_round(g, slots)) g->broken = 1;
        g->arrived = 0;
        memset(g->here, 0, (size_t)g->size);
        g->gen++;
        pthread_cond_broadcast(&g->cv);
    } else {
        const struct timespec ts = thr_deadline(g->timeout_s);
        while (g->gen == my_gen && !g->broken) {
            int rc = pthread_cond_timedwait(&g->cv, &g->mu, &ts);
            if (rc == ETIMEDOUT && g->gen == my_gen && !g->broken) {
                char missing[128] = "";
                size_t len = 0;
                for (int r = 0; r < g->size && len + 12 < sizeof missing; r++)
                    if (!g->here[r])
                        len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d", len ? ", " : "", r);
                snprintf(g->err, sizeof g->err, "threads comm (size %d): rank(s) %s did not reach %s within %g s",
                         g->size, missing, thr_op_names[call->op], g->timeout_s);
                g->broken = 1;
                pthread_cond_broadcast(&g->cv);
            }
        }
    }
    /* Not completed (a timeout), or completed with the ranks disagreeing on it
     * (thr_finish_round): either way every rank reports the group's error. */
    if (g->gen == my_gen || g->broken) {
        st = rt_errorf(RT_ERR_RUNTIME, "%s", g->err);
        goto out;
    }
    *slots_out = slots;
out:
    pthread_mutex_unlock(&g->mu);
    return st;
}

static void thr_reduce(float *out, thr_slot *slots, int size, size_t offset, size_t n, rt_reduce_op op) {
    const float *first = (const float *)slots[0].data + offset;
    memcpy(out, first, n * sizeof(float));
    for (int r = 1; r < size; r++) {
        const float *x = (const float *)slots[r].data + offset;
        if (op == RT_REDUCE_SUM)
            for (size_t i = 0; i < n; i++) out[i] += x[i];
        else
            for (size_t i = 0; i < n; i++) out[i] = x[i] > out[i] ? x[i] : out[i];
    }
}

static rt_status thr_all_reduce(void *vctx, float *buf, size_t n, rt_reduce_op op) {
    thr_ctx *ctx = vctx;
    thr_slot *slots;
    thr_call call = {.op = THR_ALL_REDUCE, .n = n, .arg = (int)op};
    rt_status st = thr_round(ctx, &call, buf, n * sizeof(float), &slots);
    if (st != RT_OK) return st;
    thr_reduce(buf, slots, ctx->g->size, 0, n, op);
    return RT_OK;
}

static rt_status thr_reduce_scatter(void *vctx, float *out, const float *in, size_t n_out, rt_reduce_op op) {
    thr_ctx *ctx = vctx;
    thr_slot *slots;
    thr_call call = {.op = THR_REDUCE_SCATTER, .n = n_out, .arg = (int)op};
    rt_status st = thr_round(ctx, &call, in, (size_t)ctx->g->size * n_out * sizeof(float), &slots);
    if (st != RT_OK) return st;
    thr_reduce(out, slots, ctx->g->size, (size_t)ctx->rank * n_out, n_out, op);
    return RT_OK;
}

static rt_status thr_all_gather(void *vctx, float *out, const float *in, size_t n_in) {
    thr_ctx *ctx = vctx;
    thr_slot *slots;
    thr_call call = {.op = THR_ALL_GATHER, .n = n_in};
    rt_status st = thr_round(ctx, &call, in, n_in * sizeof(float), &slots);
    if (st != RT_OK) return st;
    for (int r = 0; r < ctx->g->size; r++)
        if (n_in) memcpy(out + (size_t)r * n_in, slots[r].data, n_in * sizeof(float));
    return RT_OK;
}

static rt_status thr_broadcast(void *vctx, void *buf, size_t bytes, int root) {
    thr_ctx *ctx = vctx;
    thr_slot *slots;
    if (root < 0 || root >= ctx->g->size)
        return rt_errorf(RT_ERR_RUNTIME, "threads comm (size %d): broadcast root %d is out of range", ctx->g->size,
                         root);
    thr_call call = {.op = THR_BROADCAST, .n = bytes, .arg = root};
    /* only the root contributes data; the sizes are compared below, not in the round,
     * so that a mismatch names the ranks */
    rt_status st = thr_round(ctx, &call, buf, ctx->rank == root ? bytes : 0, &slots);
    if (st != RT_OK) return st;
    if (slots[root].call.n != bytes)
        return rt_errorf(RT_ERR_RUNTIME,
                         "threads comm (size %d): broadcast of %zu bytes on rank %d, but root %d sent %zu",
                         ctx->g->size, bytes, ctx->rank, root, slots[root].call.n);
    if (ctx->rank != root && bytes) memcpy(buf, slots[root].data, bytes);
    return RT_OK;
}

static rt_status thr_barrier(void *vctx) {
    thr_slot *slots;
    thr_call call = {.op = THR_BARRIER};
    return thr_round(vctx, &call, NULL, 0, &slots);
}

static rt_status thr_split(void *vctx, int color, int key, rt_comm **out) {
    thr_ctx *ctx = vctx;
    thr_slot *slots;
    *out = NULL;
    /* as MPI: a negative color (MPI_UNDEFINED) would leave this rank without a group */
    if (color < 0)
        return rt_errorf(RT_ERR_CONFIG, "threads comm: split color %d, expected a non-negative color", color);
    thr_call call = {.op = THR_SPLIT, .color = color, .key = key};
    rt_status st = thr_round(ctx, &call, NULL, 0, &slots);
    if (st != RT_OK) return st;
    *out = thr_comm_new(slots[ctx->rank].new_group, slots[ctx->rank].new_rank);
    return RT_OK;
}

/* Under the lock: breaks the group with the message, waking every waiting rank. */
static rt_status thr_break(thr_group *g, const char *msg) {
    snprintf(g->err, sizeof g->err, "%s", msg);
    g->broken = 1;
    pthread_cond_broadcast(&g->cv);
    return rt_errorf(RT_ERR_RUNTIME, "%s", g->err);
}

static rt_status thr_p2p(void *vctx, rt_p2p *ops, int n) {
    thr_ctx *ctx = vctx;
    thr_group *g = ctx->g;
    const int me = ctx->rank, size = g->size;
    char msg[256];
    for (int i = 0; i < n; i++)
        if (ops[i].peer < 0 || ops[i].peer >= size || ops[i].peer == me)
            return rt_errorf(RT_ERR_RUNTIME, "threads comm (size %d): rank %d cannot %s rank %d", size, me,
                             ops[i].send ? "send to" : "receive from", ops[i].peer);
    rt_status st = RT_OK;
    pthread_mutex_lock(&g->mu);
    if (g->broken) {
        st = rt_errorf(RT_ERR_RUNTIME, "%s (rank %d called p2p after that)", g->err, me);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        if (!ops[i].send) continue;
        thr_msg *m = rt_xmalloc(sizeof *m + ops[i].bytes);
        m->next = NULL;
        m->bytes = ops[i].bytes;
        if (ops[i].bytes) memcpy(m->data, ops[i].buf, ops[i].bytes);
        const size_t box = (size_t)me * size + ops[i].peer;
        if (g->mail_tail[box])
            g->mail_tail[box]->next = m;
        else
            g->mail_head[box] = m;
        g->mail_tail[box] = m;
    }
    pthread_cond_broadcast(&g->cv);
    const struct timespec ts = thr_deadline(g->timeout_s);
    for (int i = 0; i < n && st == RT_OK; i++) {
        if (ops[i].send) continue;
        const size_t box = (size_t)ops[i].peer * size + me;
        while (!g->mail_head[box] && !g->broken)
            if (pthread_cond_timedwait(&g->cv, &g->mu, &ts) == ETIMEDOUT && !g->mail_head[box] && !g->broken) {
                snprintf(msg, sizeof msg, "threads comm (size %d): rank %d received nothing from rank %d within %g s",
                         size, me, ops[i].peer, g->timeout_s);
                st = thr_break(g, msg);
                goto out;
            }
        if (!g->mail_head[box]) { /* broken while waiting */
            st = rt_errorf(RT_ERR_RUNTIME, "%s", g->err);
            goto out;
        }
        thr_msg *m = g->mail_head[box];
        if (m->bytes != ops[i].bytes) {
            snprintf(msg, sizeof msg, "threads comm (size %d): rank %d expected %zu bytes from rank %d, which sent %zu",
                     size, me, ops[i].bytes, ops[i].peer, m->bytes);
            st = thr_break(g, msg);
            goto out;
        }
        if (!(g->mail_head[box] = m->next)) g->mail_tail[box] = NULL;
        if (m->bytes) memcpy(ops[i].buf, m->data, m->bytes);
        free(m);
    }
out:
    pthread_mutex_unlock(&g->mu);
    return st;
}

static void thr_free(void *vctx) {
    thr_ctx *ctx = vctx;
    if (!ctx) return;
    thr_group *g = ctx->g;
    pthread_mutex_lock(&g->mu);
    int last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (last) thr_group_destroy(g);
    free(ctx);
}

static const rt_comm_ops thr_ops = {
    .name = "threads",
    .all_reduce = thr_all_reduce,
    .reduce_scatter = thr_reduce_scatter,
    .all_gather = thr_all_gather,
    .broadcast = thr_broadcast,
    .barrier = thr_barrier,
    .split = thr_split,
    .free = thr_free,
    .p2p = thr_p2p,
};

rt_status rt_comm_threads_create(int n, double timeout_s, rt_comm **comms) {
    if (n < 1) return rt_errorf(RT_ERR_CONFIG, "threads comm: size %d, expected at least 1", n);
    if (!(timeout_s > 0))
        return rt_errorf(RT_ERR_CONFIG, "threads comm: timeout %g s, expected a positive number", timeout_s);
    thr_group *g = thr_group_new(n, timeout_s);
    g->refs = n;
    for (int i = 0; i < n; i++) comms[i] = thr_comm_new(g, i);
    return RT_OK;
}
