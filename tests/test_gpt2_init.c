/* GPT-2 from scratch is initialised as HF's GPT2PreTrainedModel._init_weights does:
 * weights N(0, 0.02), the residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02 /
 * sqrt(2 n_layer)), LayerNorm weight 1 and bias 0, every bias 0; and init depends on the
 * seed only. */
#include <math.h>
#include <string.h>

#include "models/gpt2/gpt2.h"
#include "tests/testutil.h"

static void stats(const rt_param_spec *s, const float *x, double *mean, double *std) {
    double sum = 0, sq = 0;
    for (size_t i = 0; i < s->numel; i++) sum += x[i];
    *mean = sum / (double)s->numel;
    for (size_t i = 0; i < s->numel; i++) sq += (x[i] - *mean) * (x[i] - *mean);
    *std = sqrt(sq / (double)s->numel);
}

int main(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 2, &be));
    if (!be) return tz_test_result("test_gpt2_init");
    gpt2_config c;
    gpt2_config_default(&c);
    c.vocab_size = 2000;
    c.n_positions = 64;
    c.n_embd = 64;
    c.n_layer = 2;
    c.n_head = 4;
    gpt2_model *a = NULL, *b = NULL, *d = NULL;
    TZ_EXPECT_OK(gpt2_model_init(&c, be, rt_comm_self(), 2, 8, 1, &a));
    TZ_EXPECT_OK(gpt2_model_init(&c, be, rt_comm_self(), 2, 8, 1, &b));
    TZ_EXPECT_OK(gpt2_model_init(&c, be, rt_comm_self(), 2, 8, 2, &d));
    if (!a || !b || !d) return tz_test_result("test_gpt2_init");
    rt_params *p = gpt2_model_params(a);
    TZ_EXPECT(memcmp(p->param, gpt2_model_params(b)->param, p->numel * sizeof(float)) == 0, "same seed, same weights");
    TZ_EXPECT(memcmp(p->param, gpt2_model_params(d)->param, p->numel * sizeof(float)) != 0,
              "seeds differ, weights too");
    const double proj_std = 0.02 / sqrt(2.0 * c.n_layer);
    for (int i = 0; i < p->n; i++) {
        rt_param_spec real = p->specs[i];
        const rt_param_spec *s = &real;
        const float *x = p->param + s->offset;
        if (strcmp(s->name, "wte.weight") == 0) { /* vocab rows padded to a multiple of 128: zero */
            size_t n_real = (size_t)c.vocab_size * (size_t)c.n_embd;
            int zero = 1;
            for (size_t j = n_real; j < s->numel; j++) zero &= x[j] == 0.0f;
            TZ_EXPECT(s->numel == (size_t)2048 * c.n_embd && zero, "wte padding: %zu elements, zero %d", s->numel,
                      zero);
            real.numel = n_real;
        }
        double mean, std;
        stats(s, x, &mean, &std);
        const char *n = s->name;
        size_t len = strlen(n);
        int is_bias = len > 5 && strcmp(n + len - 5, ".bias") == 0;
        int is_ln = strstr(n, "ln_") != NULL;
        if (is_bias) {
            TZ_EXPECT(mean == 0 && std == 0, "%s: bias should be 0 (mean %g std %g)", n, mean, std);
        } else if (is_ln) {
            TZ_EXPECT(mean == 1 && std == 0, "%s: LayerNorm weight should be 1 (mean %g std %g)", n, mean, std);
        } else {
            double want = strstr(n, "c_proj.weight") ? proj_std : 0.02;
            /* the sample std of n normals has a relative spread of about 1/sqrt(2n): allow 4 of those */
            TZ_EXPECT(fabs(std - want) < 4.0 / sqrt(2.0 * (double)s->numel) * want, "%s: std %g, want %g", n, std,
                      want);
            TZ_EXPECT(fabs(mean) < 4 * want / sqrt((double)s->numel), "%s: mean %g", n, mean);
        }
    }
    gpt2_model_free(a);
    gpt2_model_free(b);
    gpt2_model_free(d);
    rt_backend_free(be);
    return tz_test_result("test_gpt2_init");
}
