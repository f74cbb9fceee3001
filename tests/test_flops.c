/* The model FLOPs MFU is measured against (models/layers/flops.h): a GPT-2 124M layer stack equals
 * PaLM's closed form 6 N T + 12 L T^2 C per sequence (N the layers' weights); a gated layer
 * counts its third MLP matrix; cross-attention adds its projections and products; the models'
 * own counts follow their configs (T5: encoder, decoder and head). */
#include <math.h>

#include "models/layers/flops.h"
#include "models/t5/t5.h"
#include "runtime/comm/rt_launch.h"
#include "tests/testutil.h"

static void expect_eq(const char *what, double got, double want) {
    TZ_EXPECT(fabs(got - want) <= 1e-12 * fabs(want), "%s: %.17g, want %.17g", what, got, want);
}

int main(void) {
    const double L = 12, C = 768, F = 3072, T = 1024, B = 8;
    const double N = L * (4 * C * C + 2 * C * F);
    expect_eq("GPT-2 124M, 8 x 1024", L * mdl_layer_train_flops(B, T, C, C, F, 0, T, 0),
              B * (6 * N * T + 12 * L * T * T * C));
    /* gated: 3 C F per token instead of 2 C F */
    expect_eq("gated layer",
              mdl_layer_train_flops(1, T, C, C, F, 1, T, 0) - mdl_layer_train_flops(1, T, C, C, F, 0, T, 0),
              3 * 2 * C * F * T);
    /* cross-attention over S source tokens: q, out on T; k, v on S; QK and AV of T x S */
    const double S = 512;
    expect_eq("cross-attention",
              mdl_layer_train_flops(1, T, C, C, F, 0, T, S) - mdl_layer_train_flops(1, T, C, C, F, 0, T, 0),
              3 * (4 * C * C * T + 4 * C * C * S + 4 * T * S * C));
    expect_eq("head", mdl_head_train_flops(100, C, 50000), 6.0 * 100 * C * 50000);

    /* T5 v1.0 sizes: 2 encoder and 2 decoder blocks */
    t5_config c;
    t5_config_default(&c);
    c.num_layers = c.num_decoder_layers = 2;
    c.vocab_size = 1000;
    rt_backend *be = NULL;
    t5_model *m = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &be));
    if (be) TZ_EXPECT_OK(t5_model_init(&c, be, rt_comm_self(), 2, 16, 8, 1, &m));
    if (m) {
        const double d = c.d_model, I = (double)c.num_heads * c.d_kv, ff = c.d_ff;
        double enc = 3 * 2 * (2 * (4 * d * I + 2 * d * ff) * 16 + 4 * 16.0 * 16 * I);
        double dec =
            3 * 2 *
            (2 * (4 * d * I + 2 * d * ff) * 8 + 4 * 8.0 * 8 * I + 4 * d * I * 8 + 4 * d * I * 16 + 4 * 8.0 * 16 * I);
        double head = 6.0 * 2 * 8 * d * c.vocab_size;
        expect_eq("T5 2+2 layers, 2 x (16, 8)", t5_train_flops(m, 2, 16, 8), 2 * enc + 2 * dec + head);
    }
    t5_model_free(m);
    rt_backend_free(be);
    return tz_test_result("test_flops");
}
