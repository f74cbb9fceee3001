/* The tensor-parallel sharding rules of checkpoints/ckpt_tp.c on small arrays whose values
 * encode their full (row, col): each rule's shard is checked element by element against the
 * layout written out by hand (QKV per head, vocab padded with zero rows), and shard -> gather
 * must give the full tensor back for tp = 1, 2, 4. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_tp.h"
#include "tests/testutil.h"

/* value of full element (r, c): unique and exact in float */
static float val(int64_t r, int64_t c) { return (float)(r * 1000 + c + 1); }

static void fill(float *x, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) x[r * cols + c] = val(r, c);
}

/* shard every rank, check each against expect(rank, local r, local c) -> full (r, c) or -1,
 * then gather and unshard back to the full tensor */
typedef void (*expect_fn)(const ckpt_tp_desc *d, int rank, int64_t r, int64_t c, int64_t *fr, int64_t *fc);

static void check_rule(const char *what, ckpt_tp_desc d, expect_fn expect) {
    int64_t rows = d.full[0], cols = d.ndim == 2 ? d.full[1] : 1;
    float *full = rt_xmalloc((size_t)(rows * cols) * sizeof(float));
    float *back = rt_xcalloc((size_t)(rows * cols), sizeof(float));
    float *back2 = rt_xcalloc((size_t)(rows * cols), sizeof(float));
    fill(full, rows, cols);
    int64_t ls[RT_PARAM_MAX_DIMS];
    d.rank = 0;
    TZ_EXPECT_OK(ckpt_tp_local_shape(&d, what, ls));
    int64_t lr = ls[0], lc = d.ndim == 2 ? ls[1] : 1;
    size_t n = (size_t)(lr * lc);
    float *shards = rt_xmalloc(n * (size_t)d.size * sizeof(float));
    int bad = 0;
    for (int k = 0; k < d.size; k++) {
        d.rank = k;
        float *loc = shards + (size_t)k * n;
        ckpt_tp_shard(&d, loc, full);
        for (int64_t r = 0; r < lr; r++)
            for (int64_t c = 0; c < lc; c++) {
                int64_t fr, fc;
                expect(&d, k, r, c, &fr, &fc);
                float want = fr < 0 ? 0.0f : val(fr, fc);
                if (loc[r * lc + c] != want && bad++ < 3)
                    fprintf(stderr, "%s tp=%d rank %d local (%lld,%lld): %g, expected %g\n", what, d.size, k,
                            (long long)r, (long long)c, loc[r * lc + c], want);
            }
        ckpt_tp_unshard(&d, back2, loc);
    }
    TZ_EXPECT(bad == 0, "%s tp=%d: %d shard elements wrong", what, d.size, bad);
    ckpt_tp_gather(&d, back, shards);
    char name[96];
    snprintf(name, sizeof name, "%s tp=%d gather", what, d.size);
    tz_check_close(name, back, full, (size_t)(rows * cols), 0, 0);
    snprintf(name, sizeof name, "%s tp=%d unshard", what, d.size);
    tz_check_close(name, back2, full, (size_t)(rows * cols), 0, 0);
    free(full);
    free(back);
    free(back2);
    free(shards);
}

static void exp_none(const ckpt_tp_desc *d, int k, int64_t r, int64_t c, int64_t *fr, int64_t *fc) {
    (void)d, (void)k;
    *fr = r, *fc = c;
}
static void exp_col(const ckpt_tp_desc *d, int k, int64_t r, int64_t c, int64_t *fr, int64_t *fc) {
    *fr = k * (d->full[0] / d->size) + r, *fc = c;
}
static void exp_row(const ckpt_tp_desc *d, int k, int64_t r, int64_t c, int64_t *fr, int64_t *fc) {
    *fr = r, *fc = k * (d->full[1] / d->size) + c;
}
static void exp_vocab(const ckpt_tp_desc *d, int k, int64_t r, int64_t c, int64_t *fr, int64_t *fc) {
    int64_t g = k * (ckpt_tp_padded_vocab(d->full[0], d->size) / d->size) + r;
    *fr = g < d->full[0] ? g : -1, *fc = c;
}
/* per head: local rows are [q heads of rank k; k heads; v heads], hs rows per head */
static void exp_qkv(const ckpt_tp_desc *d, int k, int64_t r, int64_t c, int64_t *fr, int64_t *fc) {
    int64_t C = d->full[0] / 3, hs = C / d->n_head, nhl = d->n_head / d->size;
    int64_t part = r / (nhl * hs), within = r % (nhl * hs);
    int64_t head = k * nhl + within / hs;
    *fr = part * C + head * hs + within % hs, *fc = c;
}

int main(void) {
    TZ_EXPECT(ckpt_tp_padded_vocab(1000, 1) == 1024, "pad 1000 tp1");
    TZ_EXPECT(ckpt_tp_padded_vocab(1000, 4) == 1024, "pad 1000 tp4");
    TZ_EXPECT(ckpt_tp_padded_vocab(50257, 1) == 50304, "pad 50257 tp1");
    TZ_EXPECT(ckpt_tp_padded_vocab(50257, 2) == 50432, "pad 50257 tp2");
    TZ_EXPECT(ckpt_tp_padded_vocab(1024, 8) == 1024, "pad 1024 tp8");
    const int sizes[] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        int tp = sizes[i];
        check_rule("none 2d", (ckpt_tp_desc){.rule = RT_TP_NONE, .ndim = 2, .full = {6, 5}, .size = tp}, exp_none);
        check_rule("col 2d", (ckpt_tp_desc){.rule = RT_TP_COL, .ndim = 2, .full = {8, 3}, .size = tp}, exp_col);
        check_rule("col bias", (ckpt_tp_desc){.rule = RT_TP_COL, .ndim = 1, .full = {8}, .size = tp}, exp_col);
        check_rule("row 2d", (ckpt_tp_desc){.rule = RT_TP_ROW, .ndim = 2, .full = {3, 8}, .size = tp}, exp_row);
        check_rule("vocab", (ckpt_tp_desc){.rule = RT_TP_VOCAB, .ndim = 2, .full = {300, 2}, .size = tp}, exp_vocab);
        /* 4 heads of 2: q, k, v each 8 rows */
        check_rule("qkv", (ckpt_tp_desc){.rule = RT_TP_QKV, .ndim = 2, .full = {24, 3}, .n_head = 4, .size = tp},
                   exp_qkv);
        check_rule("qkv bias", (ckpt_tp_desc){.rule = RT_TP_QKV, .ndim = 1, .full = {24}, .n_head = 4, .size = tp},
                   exp_qkv);
    }
    /* hand-written QKV layout at tp=2, hs=1, 4 heads: rank 1 holds q2 q3 k2 k3 v2 v3 */
    {
        float full[12], loc[6];
        for (int i = 0; i < 12; i++) full[i] = (float)i;
        ckpt_tp_desc d = {.rule = RT_TP_QKV, .ndim = 1, .full = {12}, .n_head = 4, .rank = 1, .size = 2};
        ckpt_tp_shard(&d, loc, full);
        const float want[6] = {2, 3, 6, 7, 10, 11};
        tz_check_close("qkv by hand", loc, want, 6, 0, 0);
    }
    /* padded vocab rows beyond the real vocab are zero on the last rank */
    {
        ckpt_tp_desc d = {.rule = RT_TP_VOCAB, .ndim = 2, .full = {200, 1}, .rank = 1, .size = 2};
        int64_t ls[2];
        TZ_EXPECT_OK(ckpt_tp_local_shape(&d, "vocab", ls));
        TZ_EXPECT(ls[0] == 128 && ls[1] == 1, "vocab local %lld x %lld", (long long)ls[0], (long long)ls[1]);
    }
    /* rules that do not divide fail with a message naming the tensor */
    {
        int64_t ls[2];
        ckpt_tp_desc d = {.rule = RT_TP_QKV, .ndim = 2, .full = {36, 4}, .n_head = 3, .size = 2};
        TZ_EXPECT(ckpt_tp_local_shape(&d, "h.0.attn.c_attn.weight", ls) == RT_ERR_CONFIG, "qkv 3 heads over 2");
        TZ_EXPECT(strstr(rt_error_message(), "h.0.attn.c_attn.weight") != NULL, "message: %s", rt_error_message());
        d = (ckpt_tp_desc){.rule = RT_TP_ROW, .ndim = 2, .full = {4, 6}, .size = 4};
        TZ_EXPECT(ckpt_tp_local_shape(&d, "row", ls) == RT_ERR_CONFIG, "row 6 over 4");
    }
    return tz_test_result("test_tp_ckpt");
}
