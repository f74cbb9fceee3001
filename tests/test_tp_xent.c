/* The vocab-parallel cross-entropy (models/layers/parallel.c mdl_vocab_xent over the backend's
 * xent_vocab op): at tp = 1, 2 and 4, one thread per rank on the threads communicator, each
 * rank holding only its vocab columns, the losses and the gradient must equal the plain
 * softmax_xent over the full logits (ignored rows included); the padding columns' mask read by the
 * op gives the bits of the mask added to the logits first (how the LM head masked them before); and
 * the op's gradient must match finite differences of its own loss. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "models/layers/parallel.h"
#include "runtime/comm/rt_launch.h"
#include "runtime/base/rt_rng.h"
#include "tests/testutil.h"

enum { N = 6, V = 256 };

static float g_logits[N * V];
static int32_t g_targets[N] = {3, 255, -100, 128, 64, 200};

typedef struct {
    rt_comm *comm;
    float losses[N], dlogits[N * V]; /* this rank's columns, (N, V/tp) */
    rt_status st;
} xent_arg;

static void *rank_main(void *p) {
    xent_arg *a = p;
    rt_comm *tp = a->comm;
    rt_backend *be = NULL;
    int Vl = V / tp->size, start = tp->rank * Vl;
    a->st = rt_backend_init("cpu", 1, &be);
    if (a->st != RT_OK) return NULL;
    float *logits = rt_xmalloc((size_t)N * Vl * sizeof(float)), *stats = rt_xmalloc(3 * N * sizeof(float));
    for (int n = 0; n < N; n++) memcpy(logits + n * Vl, g_logits + n * V + start, (size_t)Vl * sizeof(float));
    /* dlogits aliasing logits, as the op allows */
    a->st = mdl_vocab_xent(be, tp, a->losses, rt_xf(logits), stats, rt_xf(logits), NULL, g_targets, N, Vl, start, 0.5f);
    memcpy(a->dlogits, logits, (size_t)N * Vl * sizeof(float));
    free(logits);
    free(stats);
    rt_backend_free(be);
    return NULL;
}

static void check_tp(int tp, const float *ref_losses, const float *ref_dlogits) {
    rt_comm *comms[4] = {0};
    pthread_t th[4];
    static xent_arg args[4];
    TZ_EXPECT_OK(rt_comm_threads_create(tp, 10.0, comms));
    if (!comms[0]) return;
    for (int r = 0; r < tp; r++) {
        memset(&args[r], 0, sizeof args[r]);
        args[r].comm = comms[r];
        pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (int r = 0; r < tp; r++) pthread_join(th[r], NULL);
    int Vl = V / tp;
    float got[N * V];
    for (int r = 0; r < tp; r++) {
        TZ_EXPECT(args[r].st == RT_OK, "tp=%d rank %d: %s", tp, r, rt_status_name(args[r].st));
        for (int n = 0; n < N; n++) memcpy(got + n * V + r * Vl, args[r].dlogits + n * Vl, (size_t)Vl * sizeof(float));
        char what[64];
        snprintf(what, sizeof what, "tp=%d rank %d losses", tp, r);
        tz_check_close(what, args[r].losses, ref_losses, N, 1e-6f, 1e-5f);
        rt_comm_free(comms[r]);
    }
    char what[64];
    snprintf(what, sizeof what, "tp=%d dlogits", tp);
    tz_check_close(what, got, ref_dlogits, N * V, 1e-7f, 1e-5f);
}

/* The last 17 columns as vocab padding: col_mask against the mask added to the logits beforehand. */
static void check_mask(rt_backend *be) {
    static float mask[V], added[N * V], l1[N], l2[N], d1[N * V], d2[N * V], stats[3 * N];
    for (int j = V - 17; j < V; j++) mask[j] = -1e30f;
    for (int i = 0; i < N * V; i++) added[i] = g_logits[i] + mask[i % V];
    static int32_t targets[N];
    for (int n = 0; n < N; n++) targets[n] = g_targets[n] >= V - 17 ? 7 : g_targets[n]; /* never a padding column */
    TZ_EXPECT_OK(
        mdl_vocab_xent(be, rt_comm_self(), l1, rt_xf(d1), stats, rt_xf(g_logits), mask, targets, N, V, 0, 0.5f));
    TZ_EXPECT_OK(mdl_vocab_xent(be, rt_comm_self(), l2, rt_xf(d2), stats, rt_xf(added), NULL, targets, N, V, 0, 0.5f));
    TZ_EXPECT(memcmp(l1, l2, sizeof l1) == 0 && memcmp(d1, d2, sizeof d1) == 0,
              "the column mask differs from the mask added to the logits");
    int zero = 0;
    for (int n = 0; n < N; n++)
        for (int j = V - 17; j < V; j++) zero += d1[n * V + j] == 0.0f;
    TZ_EXPECT(zero == N * 17, "%d of %d padding columns have a gradient", N * 17 - zero, N * 17);
}

/* sum of the op's losses at tp = 1, in double */
static double op_loss(rt_backend *be, const float *x) {
    float losses[N], stats[3 * N];
    TZ_EXPECT_OK(
        mdl_vocab_xent(be, rt_comm_self(), losses, rt_xf(NULL), stats, rt_xf(x), NULL, g_targets, N, V, 0, 1.0f));
    double s = 0;
    for (int n = 0; n < N; n++) s += losses[n];
    return s;
}

int main(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &be));
    if (!be) return tz_test_result("test_tp_xent");
    for (int i = 0; i < N * V; i++) g_logits[i] = 4.0f * (rt_rng_uniform(5, 0, (uint64_t)i) - 0.5f);
    float ref_losses[N], ref_dlogits[N * V];
    rt_softmax_xent(be, ref_losses, ref_dlogits, NULL, g_logits, g_targets, N, V, 0.5f);
    check_tp(1, ref_losses, ref_dlogits);
    check_tp(2, ref_losses, ref_dlogits);
    check_tp(4, ref_losses, ref_dlogits);

    /* finite differences of the op's own loss (central, step 1e-2 in float: loss in double) */
    float x[N * V], d[N * V], stats[3 * N], losses[N];
    memcpy(x, g_logits, sizeof x);
    TZ_EXPECT_OK(mdl_vocab_xent(be, rt_comm_self(), losses, rt_xf(d), stats, rt_xf(x), NULL, g_targets, N, V, 0, 1.0f));
    const int probe[] = {3, 7, V + 255, V + 10, 2 * V + 5, 3 * V + 128, 4 * V + 64, 5 * V + 199};
    for (size_t k = 0; k < sizeof probe / sizeof *probe; k++) {
        int i = probe[k];
        float h = 1e-2f, save = x[i];
        x[i] = save + h;
        double lp = op_loss(be, x);
        x[i] = save - h;
        double lm = op_loss(be, x);
        x[i] = save;
        float fd = (float)((lp - lm) / (2.0 * h));
        TZ_EXPECT(fabsf(fd - d[i]) <= 1e-3f + 1e-2f * fabsf(d[i]), "d loss / d logit %d: op %g, finite difference %g",
                  i, d[i], fd);
    }
    check_mask(be);
    rt_backend_free(be);
    return tz_test_result("test_tp_xent");
}
