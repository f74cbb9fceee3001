/* The optimizer step on the backend (runtime/backend/rt_step_state.h, the backend's sumsq_into,
 * step_finish and adamw_step), which the trainer takes where one rank's gradients are the whole
 * norm, held on the CPU backend to the host path it replaces, bit for bit:
 * - rt_step_finish's norm and factor against the trainer's host arithmetic (sqrt of the sum of
 *   squares over the loss scale, rt_clip_factor over the loss scale), clipping on and off, with
 *   and without loss scaling, and its skip for a norm that is not finite;
 * - sumsq_into adds onto the running sum, the host's sumsq's bits; loss_into adds a micro-batch's
 *   losses, summed in order from 0, onto the step's loss: the sum the trainer made on the host;
 * - rt_adamw_step_on over a parameter slab with decay and no-decay runs and a frozen parameter,
 *   against rt_adamw_step with the host's factor: the same weights and moments over three steps;
 * - a step whose gradients hold an inf leaves weights and moments as they were.
 * The CUDA kernels run the same functions (test_cuda_ops holds their ops to these). */
#include <math.h>
#include <string.h>

#include "runtime/train/rt_optim.h"
#include "runtime/train/rt_params.h"
#include "tests/testutil.h"

static void test_finish(void) {
    const double sums[] = {0.0, 1e-12, 0.25, 4.0, 1e6, 3.7e11, INFINITY, NAN};
    const double clips[] = {0.0, 1.0, 0.5, 1e9};
    const double scales[] = {1.0, 65536.0, 0.5};
    int bad = 0;
    for (size_t i = 0; i < sizeof sums / sizeof *sums; i++)
        for (size_t c = 0; c < sizeof clips / sizeof *clips; c++)
            for (size_t k = 0; k < sizeof scales / sizeof *scales; k++) {
                rt_step_state s = {.sumsq = sums[i]};
                rt_step_finish(&s, clips[c], scales[k]);
                /* the trainer's host path: norm = sqrt(sumsq) / S, coef = clip factor / S */
                const double norm = sqrt(sums[i]) / scales[k];
                const float coef = (float)(rt_clip_factor(norm, clips[c]) / scales[k]);
                const bool skip = !isfinite(norm);
                if (memcmp(&s.norm, &norm, sizeof norm) != 0 || s.skip != skip ||
                    (!skip && memcmp(&s.coef, &coef, sizeof coef) != 0))
                    bad++;
            }
    TZ_EXPECT(bad == 0, "%d step records differ from the host's arithmetic", bad);
    /* the factor itself: PyTorch's float formula */
    TZ_EXPECT(rt_clip_factor(2.0, 1.0) == 1.0f / (2.0f + 1e-6f), "clip factor at norm 2, max 1: %.9g",
              rt_clip_factor(2.0, 1.0));
    TZ_EXPECT(rt_clip_factor(0.5, 1.0) == 1.0f && rt_clip_factor(5.0, 0.0) == 1.0f, "no clipping below max or off");
}

/* A slab of five parameters: two with decay, a frozen one between them, two without. */
static void declare(rt_params *p, rt_backend *be) {
    const int64_t sizes[5] = {1000, 37, 3000, 129, 500};
    const bool no_decay[5] = {false, true, false, true, false};
    const char *names[5] = {"w1", "b1", "w2", "ln", "w3"};
    rt_params_init(p, be);
    for (int i = 0; i < 5; i++) rt_params_add(p, names[i], 1, &sizes[i], RT_TP_NONE, no_decay[i], RT_INIT_ZEROS, 0.0f);
    p->specs[2].frozen = true; /* the runs skip it */
}

static void fill(rt_params *p, unsigned seed, bool with_inf) {
    for (size_t i = 0; i < p->numel; i++) p->param[i] = 0.1f * tz_uniform(&seed);
    for (size_t i = 0; i < p->train_numel; i++) p->grad[i] = 3.0f * tz_uniform(&seed);
    if (with_inf) p->grad[p->train_numel / 2] = INFINITY;
}

static void test_adamw(rt_backend *be, bool with_inf) {
    rt_params a, b;
    declare(&a, be);
    declare(&b, be);
    TZ_EXPECT_OK(rt_params_alloc(&a));
    TZ_EXPECT_OK(rt_params_alloc(&b));
    const rt_adamw_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    rt_step_state *dev = NULL;
    TZ_EXPECT_OK(rt_backend_alloc(be, sizeof *dev, "step state", (void **)&dev));
    for (int64_t t = 1; t <= 3; t++) {
        const unsigned seed = 11u * (unsigned)t;
        fill(&a, seed, with_inf && t == 2);
        fill(&b, seed, with_inf && t == 2);
        /* the host path: the norm, then AdamW with its factor (clipping at 1 and a loss scale of 8) */
        const double S = 8.0, norm = rt_grad_norm(&a) / S;
        if (isfinite(norm)) TZ_EXPECT_OK(rt_adamw_step(&a, &hp, (float)(rt_clip_factor(norm, 1.0) / S), t));
        /* the backend's */
        rt_step_state h;
        rt_step_scalars(&h, &hp, t);
        rt_to_device(be, dev, &h, sizeof h);
        be->ops->sumsq_into(be->ctx, dev, b.grad, b.train_numel);
        be->ops->step_finish(be->ctx, dev, 1.0, S);
        TZ_EXPECT_OK(rt_adamw_step_on(&b, dev));
        rt_to_host(be, &h, dev, sizeof h);
        TZ_EXPECT(h.skip == !isfinite(norm), "step %lld: skip %d, norm %g", (long long)t, h.skip, norm);
        TZ_EXPECT(memcmp(&h.norm, &norm, sizeof norm) == 0 || (!isfinite(norm) && !isfinite(h.norm)),
                  "step %lld: norm %.17g, the host's %.17g", (long long)t, h.norm, norm);
    }
    TZ_EXPECT(memcmp(a.param, b.param, a.numel * sizeof(float)) == 0, "weights differ%s",
              with_inf ? " (a skipped step)" : "");
    TZ_EXPECT(memcmp(a.m, b.m, a.train_numel * sizeof(float)) == 0 &&
                  memcmp(a.v, b.v, a.train_numel * sizeof(float)) == 0,
              "AdamW moments differ%s", with_inf ? " (a skipped step)" : "");
    rt_free_device(be, dev);
    rt_params_free(&a);
    rt_params_free(&b);
}

static void test_sumsq_into(rt_backend *be) {
    enum { N = 5000 };
    static float x[N];
    unsigned seed = 3;
    for (int i = 0; i < N; i++) x[i] = tz_uniform(&seed);
    rt_step_state s = {.sumsq = 0.0};
    be->ops->sumsq_into(be->ctx, &s, x, N);
    const double once = rt_sumsq(be, x, N);
    TZ_EXPECT(s.sumsq == once, "sumsq_into %.17g, sumsq %.17g", s.sumsq, once);
    be->ops->sumsq_into(be->ctx, &s, x, 1000);
    TZ_EXPECT(s.sumsq == once + rt_sumsq(be, x, 1000), "sumsq_into does not add onto the running sum");
}

static void test_loss_into(rt_backend *be) {
    enum { N = 777 };
    static float l[N];
    unsigned seed = 4;
    for (int i = 0; i < N; i++) l[i] = 5.0f * tz_uniform(&seed) + 5.0f;
    /* the host path: each micro-batch's losses summed from 0 in order, then added to the step's */
    double host = 0, part = 0;
    for (int i = 0; i < 300; i++) part += l[i];
    host += part;
    part = 0;
    for (int i = 300; i < N; i++) part += l[i];
    host += part;
    double *acc = NULL;
    TZ_EXPECT_OK(rt_backend_alloc(be, sizeof *acc, "loss", (void **)&acc));
    be->ops->loss_into(be->ctx, acc, l, 300);
    be->ops->loss_into(be->ctx, acc, l + 300, N - 300);
    double got = 0;
    rt_to_host(be, &got, acc, sizeof got);
    TZ_EXPECT(memcmp(&got, &host, sizeof got) == 0, "loss_into %.17g, the host's sum %.17g", got, host);
    rt_free_device(be, acc);
}

int main(void) {
    test_finish();
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 2, &be));
    if (!be) return tz_test_result("test_step_state");
    TZ_EXPECT(be->ops->sumsq_into && be->ops->loss_into && be->ops->step_finish && be->ops->adamw_step,
              "the CPU backend has the step ops");
    test_sumsq_into(be);
    test_loss_into(be);
    test_adamw(be, false);
    test_adamw(be, true);
    rt_backend_free(be);
    return tz_test_result("test_step_state");
}
