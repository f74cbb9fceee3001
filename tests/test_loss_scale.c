/* Dynamic loss scaling (runtime/train/rt_loss_scale.h) and the trainer's use of it, with injected
 * infs:
 * - the scale and hysteresis follow DeepSpeed's DynamicLossScaler step by step (growth after a
 *   window, hysteresis, the drop, the minimum, consecutive hysteresis), sequences worked out by
 *   hand from deepspeed/runtime/fp16/loss_scaler.py;
 * - through rt_train, with a model whose gradients do not depend on its weights: scaling the
 *   loss by powers of two changes no bit of the weights or AdamW moments; a step with an inf
 *   gradient is skipped, the next update uses the schedule and AdamW step count of the updates
 *   made (the same bits as a run that never saw that step); the skips are counted; and a run
 *   stopped and resumed from its checkpoint equals one run, scaler state included. */
#include <math.h>
#include <string.h>

#include "checkpoints/ckpt_train.h"
#include "runtime/train/rt_loss_scale.h"
#include "runtime/train/rt_trainer.h"
#include "tests/testutil.h"

enum { N = 16, MAX_INJECT = 4 };

/* ---- the state machine ---- */

static void test_sequence(void) {
    rt_loss_scale_opts o;
    rt_loss_scale_defaults(&o);
    o.window = 3;
    rt_loss_scaler s;
    TZ_EXPECT_OK(rt_loss_scaler_init(&s, &o));
    /* iter 2 grows ((2 - -1) % 3 == 0); iter 3 uses up the hysteresis; 4 and 5 halve; 8 grows */
    const bool overflow[9] = {false, false, false, true, true, true, false, false, false};
    const double scale[9] = {65536, 65536, 131072, 131072, 65536, 32768, 32768, 32768, 65536};
    const int hyst[9] = {2, 2, 2, 1, 1, 1, 1, 1, 2};
    for (int i = 0; i < 9; i++) {
        TZ_EXPECT_OK(rt_loss_scaler_update(&s, overflow[i]));
        TZ_EXPECT(s.scale == scale[i] && s.cur_hysteresis == hyst[i],
                  "after iter %d: scale %g hysteresis %d, want %g %d", i, s.scale, s.cur_hysteresis, scale[i], hyst[i]);
    }
    TZ_EXPECT(s.skipped == 3 && s.iter == 9, "skipped %lld of %lld", (long long)s.skipped, (long long)s.iter);

    /* the minimum: halving stops there, and overflowing at it is an error */
    o = (rt_loss_scale_opts){.init_scale = 4, .factor = 2, .window = 100, .hysteresis = 1, .min_scale = 2};
    TZ_EXPECT_OK(rt_loss_scaler_init(&s, &o));
    TZ_EXPECT_OK(rt_loss_scaler_update(&s, true));
    TZ_EXPECT(s.scale == 2, "scale %g after one overflow from 4", s.scale);
    TZ_EXPECT(rt_loss_scaler_update(&s, true) == RT_ERR_RUNTIME, "an overflow at the minimum scale is an error");

    /* consecutive hysteresis: a clean step gives the allowance back, so single overflows never
     * lower the scale */
    rt_loss_scale_defaults(&o);
    o.consecutive_hysteresis = true;
    TZ_EXPECT_OK(rt_loss_scaler_init(&s, &o));
    for (int i = 0; i < 6; i++) TZ_EXPECT_OK(rt_loss_scaler_update(&s, i % 2 == 0));
    TZ_EXPECT(s.scale == 65536 && s.cur_hysteresis == 2, "consecutive hysteresis: scale %g hysteresis %d", s.scale,
              s.cur_hysteresis);

    o.factor = 1;
    TZ_EXPECT(rt_loss_scaler_init(&s, &o) == RT_ERR_CONFIG, "a factor of 1 is refused");
}

/* ---- through the trainer ---- */

typedef struct {
    rt_params *p;
    int64_t inject[MAX_INJECT]; /* steps whose gradient gets an inf */
    int n_inject;
    const int64_t *step_map; /* the gradient of step k is g(step_map[k]) (NULL: g(k)) */
} fake_model;

/* grad += scale * g(k), g independent of the weights; loss = g . w (finite). */
static rt_status fake_fwd_bwd(void *ctx, const rt_batch *b, uint64_t seed, int64_t step, int micro, float scale,
                              double *loss) {
    (void)b, (void)seed, (void)micro;
    fake_model *f = ctx;
    const int64_t k = f->step_map ? f->step_map[step] : step;
    float *grad = f->p->grad, *w = f->p->param;
    *loss = 0;
    for (int i = 0; i < N; i++) {
        float g = sinf(0.7f * (float)i + 1.3f * (float)k);
        grad[i] += scale * g;
        *loss += (double)g * w[i];
    }
    for (int j = 0; j < f->n_inject; j++)
        if (f->inject[j] == step) grad[3] = INFINITY;
    return RT_OK;
}

typedef struct {
    int64_t epoch, pos;
} fake_data;

static rt_status fake_next(void *ctx, rt_batch *into, bool *end) {
    fake_data *d = ctx;
    *into = (rt_batch){.B = 1, .T = 1, .n_targets = 1, .n_tokens = 1};
    *end = false;
    d->pos++;
    return RT_OK;
}
static void fake_get_state(void *ctx, int64_t *epoch, int64_t *pos) {
    *epoch = ((fake_data *)ctx)->epoch;
    *pos = ((fake_data *)ctx)->pos;
}
static rt_status fake_set_state(void *ctx, int64_t epoch, int64_t pos) {
    ((fake_data *)ctx)->epoch = epoch;
    ((fake_data *)ctx)->pos = pos;
    return RT_OK;
}
static void fake_batch_free(rt_batch *b) { (void)b; }

typedef struct {
    float w[N], m[N], v[N];
    rt_train_result res;
} run_out;

/* Trains the fake model for max_steps (from a checkpoint in dir when resume). */
static void run(rt_backend *be, const char *dir, int64_t max_steps, bool resume, bool scaling, const int64_t *inject,
                int n_inject, const int64_t *step_map, run_out *out) {
    rt_params p;
    rt_params_init(&p, be);
    int64_t shape[1] = {N};
    rt_params_add(&p, "w", 1, shape, RT_TP_NONE, false, RT_INIT_NORMAL, 0.5f);
    TZ_EXPECT_OK(rt_params_alloc(&p));
    rt_params_init_weights(&p, 9);
    fake_model fm = {.p = &p, .n_inject = n_inject, .step_map = step_map};
    memcpy(fm.inject, inject, (size_t)n_inject * sizeof *inject);
    fake_data fd = {0};
    rt_loss_scale_opts ls;
    rt_loss_scale_defaults(&ls);
    rt_train_opts o = tz_train_opts(max_steps, 1, 1, tz_tmpdir());
    o.lr = 1e-2;
    o.save_interval = 0;
    o.keep = 5;
    o.save_dir = dir;
    o.resume = resume;
    o.loss_scale = scaling ? &ls : NULL;
    rt_train_model tm = {.ctx = &fm, .params = &p, .forward_backward = fake_fwd_bwd};
    rt_train_data td = {.ctx = &fd,
                        .batches_per_epoch = 1000,
                        .next = fake_next,
                        .get_state = fake_get_state,
                        .set_state = fake_set_state,
                        .batch_free = fake_batch_free};
    memset(out, 0, sizeof *out);
    TZ_EXPECT_OK(rt_train(&o, &tm, &td, NULL, ckpt_train_io(), &out->res));
    memcpy(out->w, p.param, sizeof out->w);
    if (p.m) memcpy(out->m, p.m, sizeof out->m);
    if (p.v) memcpy(out->v, p.v, sizeof out->v);
    rt_params_free(&p);
}

static bool same(const run_out *a, const run_out *b) {
    return memcmp(a->w, b->w, sizeof a->w) == 0 && memcmp(a->m, b->m, sizeof a->m) == 0 &&
           memcmp(a->v, b->v, sizeof a->v) == 0;
}

static void test_trainer(rt_backend *be) {
    run_out plain, scaled, skip, ref, two, part, resumed;
    const int64_t none[1] = {0};
    /* scaling by 2^16 is exact: the same bits as no scaling */
    run(be, tz_tmpdir(), 6, false, false, none, 0, NULL, &plain);
    run(be, tz_tmpdir(), 6, false, true, none, 0, NULL, &scaled);
    TZ_EXPECT(same(&plain, &scaled), "6 steps with loss scaling differ from 6 without");
    TZ_EXPECT(scaled.res.skipped_steps == 0 && scaled.res.loss_scale == 65536, "scale %g, %lld skipped",
              scaled.res.loss_scale, (long long)scaled.res.skipped_steps);

    /* step 1 overflows: steps 0 and 2 update, as a run whose steps are g(0) and g(2) */
    const int64_t at1[1] = {1}, map[2] = {0, 2};
    run(be, tz_tmpdir(), 3, false, true, at1, 1, NULL, &skip);
    run(be, tz_tmpdir(), 2, false, false, none, 0, map, &ref);
    TZ_EXPECT(same(&skip, &ref), "a skipped step left a trace: the run differs from one without that step");
    TZ_EXPECT(skip.res.skipped_steps == 1 && skip.res.loss_scale == 65536 && skip.res.steps == 3,
              "one overflow (hysteresis 2 keeps the scale): scale %g, %lld skipped, %lld steps", skip.res.loss_scale,
              (long long)skip.res.skipped_steps, (long long)skip.res.steps);

    /* two overflows in a row halve the scale; stopping after step 1 and resuming gives the
     * same weights, moments and scaler as one run */
    const int64_t at12[2] = {1, 2};
    run(be, tz_tmpdir(), 5, false, true, at12, 2, NULL, &two);
    TZ_EXPECT(two.res.skipped_steps == 2 && two.res.loss_scale == 32768, "two overflows: scale %g, %lld skipped",
              two.res.loss_scale, (long long)two.res.skipped_steps);
    const char *dir = tz_tmpdir();
    run(be, dir, 2, false, true, at12, 2, NULL, &part);
    run(be, dir, 5, true, true, at12, 2, NULL, &resumed);
    TZ_EXPECT(same(&two, &resumed) && resumed.res.loss_scale == two.res.loss_scale &&
                  resumed.res.skipped_steps == two.res.skipped_steps,
              "resumed: scale %g, %lld skipped; one run: %g, %lld", resumed.res.loss_scale,
              (long long)resumed.res.skipped_steps, two.res.loss_scale, (long long)two.res.skipped_steps);

    /* without loss scaling an inf gradient stops the run instead of corrupting the weights */
    rt_params p;
    rt_params_init(&p, be);
    int64_t shape[1] = {N};
    rt_params_add(&p, "w", 1, shape, RT_TP_NONE, false, RT_INIT_NORMAL, 0.5f);
    TZ_EXPECT_OK(rt_params_alloc(&p));
    fake_model fm = {.p = &p, .inject = {0}, .n_inject = 1};
    fake_data fd = {0};
    rt_train_opts o = {.prog = "test",
                       .epochs = 1,
                       .max_steps = 2,
                       .batch_size = 1,
                       .grad_accum = 1,
                       .lr = 1e-2,
                       .clip = 1.0,
                       .beta1 = 0.9,
                       .beta2 = 0.999,
                       .adam_eps = 1e-8,
                       .schedule = "constant",
                       .eval_interval = -1,
                       .save_interval = -1,
                       .keep = 1,
                       .save_dir = tz_tmpdir(),
                       .options_json = "{}"};
    rt_train_model tm = {.ctx = &fm, .params = &p, .forward_backward = fake_fwd_bwd};
    rt_train_data td = {.ctx = &fd,
                        .batches_per_epoch = 1000,
                        .next = fake_next,
                        .get_state = fake_get_state,
                        .set_state = fake_set_state,
                        .batch_free = fake_batch_free};
    rt_train_result res;
    TZ_EXPECT(rt_train(&o, &tm, &td, NULL, ckpt_train_io(), &res) == RT_ERR_RUNTIME &&
                  strstr(rt_error_message(), "gradient norm is inf at step 1") != NULL,
              "an inf gradient without loss scaling: %s", rt_error_message());
    rt_params_free(&p);
}

int main(void) {
    test_sequence();
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &be));
    if (be) test_trainer(be);
    rt_backend_free(be);
    return tz_test_result("test_loss_scale");
}
