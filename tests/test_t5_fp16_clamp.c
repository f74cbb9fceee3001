/* T5 in fp16 gets HF's clamp (modeling_t5.py's T5Block, transformers #4287 and #9295): after
 * each residual add, a tensor holding an inf is clamped to +-(65504 - 1000), which fp16 stores
 * as 64512, and torch.clamp passes no gradient where it clamped. On the tiny v1.1 golden model
 * with encoder block 0's FFN output weights scaled by 1e5, block 0's output overflows fp16:
 *   - with the clamp the loss and every gradient stay finite, the clamped residual reads
 *     +-64512, and only block 0's output was clamped;
 *   - the same step with the clamp switched off is NaN (so the clamp is what saves it);
 *   - in fp32 nothing is clamped and nothing overflows;
 *   - the clamp op's backward zeroes exactly the clamped positions. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/t5/t5.h"
#include "models/t5/t5_internal.h"
#include "runtime/backend/rt_backend.h"
#include "tests/testutil.h"

enum { B = 2, S = 6, T = 4 };

/* One training step's loss (mean over targets) and gradients' squared norm. */
static double step(t5_model *m, rt_backend *be, double *grad_sumsq) {
    static const int32_t src[B * S] = {5, 17, 33, 8, 1, 0, 42, 7, 9, 21, 64, 1};
    static const int32_t mask[B * S] = {1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1};
    static const int32_t labels[B * T] = {11, 3, 1, -100, 25, 6, 19, 1};
    const t5_batch b = {.B = B, .S = S, .T = T, .src_ids = src, .src_mask = mask, .labels = labels};
    const mdl_pass pass = {.seed = 1, .training = false};
    rt_clear(be, m->params.grad, m->params.numel * sizeof(float));
    double loss = 0;
    int n = 0;
    TZ_EXPECT_OK(t5_step(m, &b, &pass, 1.0f / 7, &loss, &n, NULL));
    *grad_sumsq = rt_sumsq(be, m->params.grad, m->params.numel);
    return n ? loss / n : NAN;
}

int main(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_cpu_backend_init(2, &be));
    t5_model *m = NULL;
    char report[256] = "";
    if (be)
        TZ_EXPECT_OK(t5_model_from_hf(tz_source_path("tests/golden/t5-tiny-v1_1"), be, rt_comm_self(), B, S, T, &m,
                                      report, sizeof report));
    if (!m) return tz_test_result("test_t5_fp16_clamp");
    mdl_stack *enc = &m->enc.blocks;
    const int wo = enc->layer[0].ffn.down_w;
    const rt_param_spec *spec = &m->params.specs[wo];
    rt_scale(be, m->params.param + spec->offset, 1e5f, spec->numel);

    double g32 = 0, g16 = 0, gno = 0;
    const double l32 = step(m, be, &g32);
    TZ_EXPECT(isfinite(l32) && isfinite(g32), "fp32: loss %g, grad sumsq %g", l32, g32);
    for (int i = 0; i < 3 * enc->cfg.n_layer; i++) TZ_EXPECT(!enc->clamped[i], "fp32 clamped site %d", i);

    TZ_EXPECT_OK(rt_set_precision(be, RT_F16));
    const double l16 = step(m, be, &g16);
    TZ_EXPECT(isfinite(l16) && isfinite(g16) && g16 > 0, "fp16 with the clamp: loss %g, grad sumsq %g", l16, g16);
    TZ_EXPECT(enc->clamped[2] && !enc->clamped[0], "block 0: mid clamped %d, out clamped %d", enc->clamped[0],
              enc->clamped[2]);
    const rt_x out0 = mdl_stack_residual(enc, 1); /* between blocks: fp16 values */
    const size_t n = (size_t)B * S * enc->cfg.C;
    int at_limit = 0, past = 0;
    for (size_t i = 0; i < n; i++) {
        const float v = out0.t == RT_F16 ? rt_f16_to_f32(((const uint16_t *)out0.p)[i]) : ((const float *)out0.p)[i];
        at_limit += fabsf(v) == 64512.0f, past += !(fabsf(v) <= 64512.0f);
    }
    TZ_EXPECT(at_limit > 0 && past == 0, "block 0's output: %d values at +-64512, %d past it", at_limit, past);
    printf("fp32 loss %.6f, fp16 clamped loss %.6f, %d of %zu values clamped\n", l32, l16, at_limit, n);

    enc->cfg.fp16_clamp = false;
    const double lno = step(m, be, &gno);
    TZ_EXPECT(!isfinite(lno) || !isfinite(gno), "fp16 without the clamp stays finite (%g, %g): no overflow to guard",
              lno, gno);

    /* the op's backward: the gradient is zero where |y| > limit, untouched elsewhere */
    float y[4] = {64512.0f, -64512.0f, 100.0f, -64480.0f}, dx[4] = {1, 2, 3, 4};
    rt_clamp_abs_bwd(be, dx, rt_xf(y), 4, 65504.0f - 1000.0f);
    TZ_EXPECT(dx[0] == 0 && dx[1] == 0 && dx[2] == 3 && dx[3] == 4, "clamp_abs_bwd: %g %g %g %g", dx[0], dx[1], dx[2],
              dx[3]);
    /* the forward on a 16-bit sum (a typed stack's mid): clamped only where it holds an inf */
    uint16_t h[4] = {rt_f32_to_f16(INFINITY), rt_f32_to_f16(-70000.0f), rt_f32_to_f16(100.0f),
                     rt_f32_to_f16(-64480.0f)};
    TZ_EXPECT(rt_clamp_inf(be, rt_x_of(h, RT_F16), 4, 65504.0f - 1000.0f), "clamp_inf on fp16 values with an inf");
    TZ_EXPECT(rt_f16_to_f32(h[0]) == 64512.0f && rt_f16_to_f32(h[1]) == -64512.0f && rt_f16_to_f32(h[2]) == 100.0f &&
                  rt_f16_to_f32(h[3]) == -64480.0f,
              "clamp_inf on fp16 values: %g %g %g %g", rt_f16_to_f32(h[0]), rt_f16_to_f32(h[1]), rt_f16_to_f32(h[2]),
              rt_f16_to_f32(h[3]));
    TZ_EXPECT(!rt_clamp_inf(be, rt_x_of(h, RT_F16), 4, 65504.0f - 1000.0f), "clamp_inf on finite fp16 values");
    t5_model_free(m);
    rt_backend_free(be);
    return tz_test_result("test_t5_fp16_clamp");
}
