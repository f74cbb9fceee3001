/* The language-model head's chunked loss (models/layers/lm_head.c): at tp 1 and 2 (threads, vocab
 * columns split, the last rank's padding column masked), 10 of 14 hidden rows through the tied
 * output layer with a gradient, row weights included. Against a double-precision reference over
 * the full logits: the losses, dL/d(hidden) and the table's gradient. Chunks of 1, 3 and 7 rows
 * (a partial last chunk) agree with one pass to fp32's rounding (a matmul may sum a row in
 * another order at another row count); a chunk as large as the pass gives its bits. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/layers/lm_head.h"
#include "runtime/comm/rt_launch.h"
#include "tests/testutil.h"

enum { C = 8, VOCAB = 37, BT = 14, N_CASES = 5 };
static const size_t k_chunks[N_CASES] = {BT, 1, 3, 7, 10}; /* the first: one pass, the reference */
#define GRAD_SCALE 0.25f

static float g_hidden[BT * C], g_table[VOCAB * C], g_weights[BT];
static int32_t g_labels[BT];

/* The double-precision reference over the full vocab for the labelled rows. */
typedef struct {
    int n;
    float loss[BT], dhidden[BT * C], dtable[VOCAB * C];
} reference;

static void make_reference(reference *r) {
    memset(r, 0, sizeof *r);
    double dtable[VOCAB * C] = {0};
    for (int i = 0; i < BT; i++) {
        if (g_labels[i] == -100) continue;
        const int row = r->n++;
        double logit[VOCAB], mx = -INFINITY, z = 0;
        for (int v = 0; v < VOCAB; v++) {
            logit[v] = 0;
            for (int c = 0; c < C; c++) logit[v] += (double)g_hidden[i * C + c] * g_table[v * C + c];
            mx = logit[v] > mx ? logit[v] : mx;
        }
        for (int v = 0; v < VOCAB; v++) z += exp(logit[v] - mx);
        r->loss[row] = (float)(mx + log(z) - logit[g_labels[i]]);
        for (int v = 0; v < VOCAB; v++) {
            const double d = (exp(logit[v] - mx) / z - (v == g_labels[i])) * GRAD_SCALE * g_weights[row];
            for (int c = 0; c < C; c++) {
                r->dhidden[i * C + c] += (float)(d * g_table[v * C + c]);
                dtable[v * C + c] += d * g_hidden[i * C + c];
            }
        }
    }
    for (int k = 0; k < VOCAB * C; k++) r->dtable[k] = (float)dtable[k];
}

/* One rank's results for every chunk size. */
typedef struct {
    int n;
    float loss[N_CASES][BT], row_max[N_CASES][BT], target[N_CASES][BT];
    float dhidden[N_CASES][BT * C];
    float dtable[N_CASES][VOCAB * C]; /* this rank's vocab rows, at their global places */
    int start, first_pad;
} rank_out;

static rt_status rank_run(rt_comm *tp, void *arg) {
    rank_out *o = arg;
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    void *block = NULL;
    float *hidden = NULL, *table = NULL, *dtable = NULL, *dhidden = NULL;
    mdl_lm_head h;
    const mdl_vocab vocab = mdl_vocab_shard(VOCAB, tp);
    const size_t Vl = (size_t)vocab.local;
    o->start = vocab.start;
    o->first_pad = vocab.first_pad;
    RT_TRY(rt_backend_init("cpu", 1, &be));
    mdl_lm_head_init(&h, be, tp, &vocab, C, VOCAB, BT, "test");
    rt_arena a = {0};
    mdl_lm_head_layout(&h, &a);
    RT_TRY(rt_backend_alloc(be, a.used, "head", &block));
    a = (rt_arena){.base = block};
    mdl_lm_head_layout(&h, &a);
    RT_TRY(mdl_lm_head_ready(&h));
    RT_TRY(rt_backend_alloc(be, sizeof g_hidden, "hidden", (void **)&hidden));
    RT_TRY(rt_backend_alloc(be, sizeof g_hidden, "dhidden", (void **)&dhidden));
    RT_TRY(rt_backend_alloc(be, Vl * C * sizeof(float), "table", (void **)&table));
    RT_TRY(rt_backend_alloc(be, Vl * C * sizeof(float), "dtable", (void **)&dtable));
    rt_to_device(be, hidden, g_hidden, sizeof g_hidden);
    const size_t own = (size_t)vocab.first_pad; /* real vocab rows here; the padding rows stay 0 */
    rt_to_device(be, table, g_table + (size_t)vocab.start * C, own * C * sizeof(float));
    RT_TRY(mdl_lm_head_collect(&h, g_labels, BT, BT, &o->n));
    rt_to_device(be, h.row_weights, g_weights, (size_t)o->n * sizeof(float));
    for (int k = 0; k < N_CASES; k++) {
        h.chunk_rows = k_chunks[k];
        rt_clear(be, dtable, Vl * C * sizeof(float));
        const mdl_lm_head_grad grad = {.dwte = dtable, .grad_scale = GRAD_SCALE, .row_weights = h.row_weights};
        RT_TRY(mdl_lm_head_xent(&h, hidden, table, o->n, &grad));
        (void)mdl_lm_head_losses(&h, o->n, NULL);
        memcpy(o->loss[k], h.h_losses, (size_t)o->n * sizeof(float));
        mdl_lm_head_target_stats(&h, o->n, o->row_max[k], o->target[k]);
        mdl_lm_head_backward(&h, dhidden, BT, o->n);
        rt_to_host(be, o->dhidden[k], dhidden, sizeof g_hidden);
        rt_to_host(be, o->dtable[k] + (size_t)vocab.start * C, dtable, own * C * sizeof(float));
    }
fail:
    if (be) {
        mdl_lm_head_free(&h);
        rt_free_device(be, block);
        rt_free_device(be, hidden);
        rt_free_device(be, dhidden);
        rt_free_device(be, table);
        rt_free_device(be, dtable);
    }
    rt_backend_free(be);
    return st;
}

static void check_tp(int size, const reference *ref) {
    rank_out out[2];
    memset(out, 0, sizeof out);
    TZ_EXPECT_OK(tz_run_ranks(size, 30.0, rank_run, out, sizeof out[0]));
    for (int k = 0; k < N_CASES; k++) {
        char what[96];
        for (int r = 0; r < size; r++) {
            TZ_EXPECT(out[r].n == ref->n, "tp %d rank %d: %d labelled rows, want %d", size, r, out[r].n, ref->n);
            snprintf(what, sizeof what, "tp %d rank %d chunks of %zu: losses", size, r, k_chunks[k]);
            tz_check_close(what, out[r].loss[k], ref->loss, (size_t)ref->n, 1e-5f, 1e-5f);
            snprintf(what, sizeof what, "tp %d rank %d chunks of %zu: dL/d(hidden)", size, r, k_chunks[k]);
            tz_check_close(what, out[r].dhidden[k], ref->dhidden, BT * C, 1e-6f, 1e-5f);
            /* the table's gradient, over this rank's real vocab rows */
            const size_t at = (size_t)out[r].start * C, len = (size_t)out[r].first_pad * C;
            snprintf(what, sizeof what, "tp %d rank %d chunks of %zu: the table's gradient", size, r, k_chunks[k]);
            tz_check_close(what, out[r].dtable[k] + at, ref->dtable + at, len, 1e-6f, 1e-5f);
            if (k == 0) continue;
            /* against the one pass: the matmul may sum a row in another order at another row
             * count, so the losses and statistics agree to fp32's rounding; a chunk of n rows or
             * more is the one pass, bit for bit */
            const size_t n = (size_t)ref->n;
            snprintf(what, sizeof what, "tp %d rank %d chunks of %zu: losses against one pass", size, r, k_chunks[k]);
            tz_check_close(what, out[r].loss[k], out[r].loss[0], n, 1e-6f, 1e-6f);
            snprintf(what, sizeof what, "tp %d rank %d chunks of %zu: row maxima", size, r, k_chunks[k]);
            tz_check_close(what, out[r].row_max[k], out[r].row_max[0], n, 1e-6f, 1e-6f);
            snprintf(what, sizeof what, "tp %d rank %d chunks of %zu: target logits", size, r, k_chunks[k]);
            tz_check_close(what, out[r].target[k], out[r].target[0], n, 1e-6f, 1e-6f);
            if (k_chunks[k] >= n)
                TZ_EXPECT(memcmp(out[r].loss[k], out[r].loss[0], n * sizeof(float)) == 0 &&
                              memcmp(out[r].target[k], out[r].target[0], n * sizeof(float)) == 0 &&
                              memcmp(out[r].dhidden[k], out[r].dhidden[0], sizeof out[r].dhidden[0]) == 0 &&
                              memcmp(out[r].dtable[k], out[r].dtable[0], sizeof out[r].dtable[0]) == 0,
                          "tp %d rank %d: a chunk of %zu rows is not the one pass", size, r, k_chunks[k]);
        }
    }
    /* the statistics: each row's largest logit is at least its target's, and they match once */
    int at_max = 0;
    for (int i = 0; i < ref->n; i++) at_max += out[0].target[0][i] == out[0].row_max[0][i];
    TZ_EXPECT(at_max > 0 && at_max < ref->n, "tp %d: %d of %d targets are their row's maximum; the labels should mix",
              size, at_max, ref->n);
}

int main(void) {
    unsigned st = 5;
    for (int i = 0; i < BT * C; i++) g_hidden[i] = 2.0f * tz_uniform(&st) - 1.0f;
    for (int i = 0; i < VOCAB * C; i++) g_table[i] = 2.0f * tz_uniform(&st) - 1.0f;
    for (int i = 0; i < BT; i++) g_weights[i] = 0.5f + tz_uniform(&st);
    for (int i = 0; i < BT; i++) /* 10 labelled rows; rows 1, 5, 9 and 13 -100 */
        g_labels[i] = i % 4 == 1 ? -100 : (int32_t)((i * 11 + 3) % VOCAB);
    /* a few rows whose target is their largest logit (the span check's case) */
    for (int i = 0; i < BT; i += 3) {
        if (g_labels[i] == -100) continue;
        int best = 0;
        double bv = -INFINITY;
        for (int v = 0; v < VOCAB; v++) {
            double s = 0;
            for (int c = 0; c < C; c++) s += (double)g_hidden[i * C + c] * g_table[v * C + c];
            if (s > bv) bv = s, best = v;
        }
        g_labels[i] = best;
    }
    reference ref;
    make_reference(&ref);
    TZ_EXPECT(ref.n == 10, "%d labelled rows, want 10", ref.n);
    check_tp(1, &ref);
    check_tp(2, &ref);
    return tz_test_result("test_lm_head");
}
