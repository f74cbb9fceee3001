/* Frozen parameters in the slab (runtime/train/rt_params.h; LoRA's base weights, issue 36): the
 * trainable ones laid out first and the frozen ones after, gradients and AdamW moments of
 * train_numel floats, no gradient for a frozen one; AdamW moves only the trainable ones, exactly
 * as it moves the same parameters in a slab with nothing frozen; the gradient norm counts only
 * them; a checkpoint holds the trainable parameters and their moments and the frozen ones'
 * fingerprint, loads back over the same frozen values and is refused over others; ZeRO-1 takes a
 * slab with frozen parameters (it shards the trainable floats), and every ZeRO stage, offloaded
 * or not, steps it as the plain slab steps (stage 3 keeps a frozen span in each block). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_train.h"
#include "runtime/train/rt_optim.h"
#include "runtime/train/rt_params.h"
#include "runtime/train/rt_zero.h"
#include "tests/testutil.h"

/* a (trainable), b (frozen), c (trainable, no decay), d (frozen); with `freeze` false none is. */
static void declare(rt_params *p, rt_backend *be, bool freeze) {
    rt_params_init(p, be);
    const int64_t sa[2] = {5, 7}, sb[2] = {9, 3}, sc[1] = {11}, sd[1] = {4};
    rt_params_add(p, "a", 2, sa, RT_TP_NONE, false, RT_INIT_NORMAL, 0.5f);
    const int b = rt_params_add(p, "b", 2, sb, RT_TP_NONE, false, RT_INIT_NORMAL, 0.5f);
    rt_params_add(p, "c", 1, sc, RT_TP_NONE, true, RT_INIT_NORMAL, 0.5f);
    const int d = rt_params_add(p, "d", 1, sd, RT_TP_NONE, true, RT_INIT_NORMAL, 0.5f);
    p->specs[b].frozen = p->specs[d].frozen = freeze;
    TZ_EXPECT_OK(rt_params_alloc(p));
    rt_params_init_weights(p, 7);
}

/* Gradient i of the trainable parameter named name: a fixed pattern. */
static void set_grad(rt_params *p, const char *name) {
    const int i = rt_params_find(p, name);
    const rt_param_spec *s = &p->specs[i];
    float *g = rt_xmalloc(s->numel * sizeof(float));
    for (size_t j = 0; j < s->numel; j++) g[j] = 0.01f * (float)(j % 7) - 0.02f + (float)i * 0.003f;
    rt_to_device(p->be, rt_params_grad(p, i), g, s->numel * sizeof(float));
    free(g);
}

static void get(const rt_params *p, const char *name, float *out) {
    const int i = rt_params_find(p, name);
    rt_to_host(p->be, out, rt_params_data(p, i), p->specs[i].numel * sizeof(float));
}

/* One AdamW step under ZeRO (opts) over a slab with frozen parameters, on one rank, gives the
 * plain slab's bits: the trainable parameters and their moments (the checkpoint's regather)
 * moved as there, the frozen ones untouched; at stage 3 each is reached through the gathered
 * block, the trainable and the frozen span of it. */
static void check_zero_step(rt_backend *be, const rt_zero_opts *opts, const rt_adamw_hparams *hp) {
    char what[64];
    snprintf(what, sizeof what, "ZeRO-%d%s%s", opts->stage, opts->offload_optimizer ? " --offload-optimizer" : "",
             opts->offload_params ? " --offload-params" : "");
    rt_params plain, q;
    declare(&plain, be, true);
    declare(&q, be, true);
    rt_params_zero_grad(&plain);
    set_grad(&plain, "a");
    set_grad(&plain, "c");
    TZ_EXPECT_OK(rt_adamw_step(&plain, hp, 1.0f, 1));
    rt_zero *z = NULL;
    TZ_EXPECT_OK(rt_zero_init(&q, rt_comm_self(), NULL, opts, &z));
    if (!z) goto done;
    /* one block (no numbered names): a and c (35 + a 13-float gap + 11), b and d (27 + 5 + 4) */
    TZ_EXPECT(opts->stage != 3 || (!q.param && z->shard == 59 && z->frozen_shard == 36),
              "%s: the slab freed, shards of %zu and %zu floats (expected 59 and 36)", what, z->shard, z->frozen_shard);
    TZ_EXPECT_OK(rt_zero_begin_step(z));
    set_grad(&q, "a");
    set_grad(&q, "c");
    TZ_EXPECT_OK(rt_zero_reduce_grads(z));
    TZ_EXPECT_OK(rt_zero_step(z, hp, 1.0f, 1));
    float x[64], y[64];
    const char *names[4] = {"a", "b", "c", "d"};
    for (int k = 0; k < 4; k++) { /* through the window at stage 3 */
        get(&q, names[k], x);
        get(&plain, names[k], y);
        TZ_EXPECT(memcmp(x, y, q.specs[k].numel * sizeof(float)) == 0, "%s: %s differs from the plain step", what,
                  names[k]);
    }
    TZ_EXPECT_OK(rt_zero_gather_state(z));
    if (q.param && q.m && q.v) {
        float m[2][64], v[2][64];
        rt_to_host(be, m[0], q.m, q.train_numel * sizeof(float));
        rt_to_host(be, m[1], plain.m, q.train_numel * sizeof(float));
        rt_to_host(be, v[0], q.v, q.train_numel * sizeof(float));
        rt_to_host(be, v[1], plain.v, q.train_numel * sizeof(float));
        TZ_EXPECT(memcmp(m[0], m[1], sizeof m[0]) == 0 && memcmp(v[0], v[1], sizeof v[0]) == 0,
                  "%s: the gathered moments differ from the plain step's", what);
        float whole[2][112];
        rt_to_host(be, whole[0], q.param, q.numel * sizeof(float));
        rt_to_host(be, whole[1], plain.param, q.numel * sizeof(float));
        TZ_EXPECT(memcmp(whole[0], whole[1], sizeof whole[0]) == 0, "%s: the gathered slab differs", what);
    } else {
        TZ_EXPECT(false, "%s: no slab or moments gathered", what);
    }
    rt_zero_release_state(z);
    rt_zero_free(z);
done:
    rt_params_free(&q);
    rt_params_free(&plain);
}

int main(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_cpu_backend_init(1, &be));
    if (!be) return tz_test_result("test_params_frozen");
    rt_params p, ref;
    declare(&p, be, true);
    declare(&ref, be, false);
    /* layout: a and c first (declaration order), then b and d */
    const rt_param_spec *s = p.specs;
    TZ_EXPECT(s[0].offset == 0 && s[2].offset == 48 && p.train_numel == 64, "trainable first: a %zu c %zu, %zu floats",
              s[0].offset, s[2].offset, p.train_numel);
    TZ_EXPECT(s[1].offset == 64 && s[3].offset == 96 && p.numel == 112, "frozen after: b %zu d %zu, numel %zu",
              s[1].offset, s[3].offset, p.numel);
    TZ_EXPECT(ref.train_numel == ref.numel && rt_params_n_frozen(&ref) == 0 && rt_params_n_frozen(&p) == 2,
              "nothing frozen: the trainable floats are the slab");
    TZ_EXPECT(rt_params_grad(&p, 1) == NULL && rt_params_grad(&p, 3) == NULL && rt_params_grad(&p, 2) != NULL,
              "no gradient for a frozen parameter");
    /* the same init whatever the layout: a parameter draws from its own stream */
    float x[64], y[64];
    const char *names[4] = {"a", "b", "c", "d"};
    for (int k = 0; k < 4; k++) {
        get(&p, names[k], x);
        get(&ref, names[k], y);
        TZ_EXPECT(memcmp(x, y, p.specs[k].numel * sizeof(float)) == 0, "%s: init differs with the layout", names[k]);
    }
    /* the norm and an AdamW step over the trainable ones only, as over the same ones unfrozen
     * (ref's b and d get zero gradients: AdamW's decay still moves them there, not here) */
    rt_params_zero_grad(&p);
    rt_params_zero_grad(&ref);
    set_grad(&p, "a");
    set_grad(&p, "c");
    set_grad(&ref, "a");
    set_grad(&ref, "c");
    TZ_EXPECT(rt_grad_norm(&p) == rt_grad_norm(&ref), "norm %.9g vs %.9g", rt_grad_norm(&p), rt_grad_norm(&ref));
    float b0[27], d0[4];
    get(&p, "b", b0);
    get(&p, "d", d0);
    const rt_adamw_hparams hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
    TZ_EXPECT_OK(rt_adamw_step(&p, &hp, 1.0f, 1));
    TZ_EXPECT_OK(rt_adamw_step(&ref, &hp, 1.0f, 1));
    for (int k = 0; k < 4; k += 2) {
        get(&p, names[k], x);
        get(&ref, names[k], y);
        TZ_EXPECT(memcmp(x, y, p.specs[k].numel * sizeof(float)) == 0, "%s: AdamW differs with frozen neighbours",
                  names[k]);
    }
    get(&p, "b", x);
    get(&p, "d", y);
    TZ_EXPECT(memcmp(x, b0, sizeof b0) == 0 && memcmp(y, d0, sizeof d0) == 0, "AdamW moved a frozen parameter");
    /* a checkpoint: every parameter, the trainable ones' moments; loads back into a fresh slab */
    char path[4096];
    snprintf(path, sizeof path, "%s/frozen.tzck", tz_tmpdir());
    TZ_EXPECT_OK(ckpt_train_save(path, &p, rt_comm_self(), rt_comm_self(), "{}"));
    rt_params back;
    declare(&back, be, true);
    char *meta = NULL;
    TZ_EXPECT_OK(ckpt_train_load(path, &back, rt_comm_self(), rt_comm_self(), &meta));
    free(meta);
    for (int k = 0; k < 4; k++) {
        get(&p, names[k], x);
        get(&back, names[k], y);
        TZ_EXPECT(memcmp(x, y, p.specs[k].numel * sizeof(float)) == 0, "%s: not restored", names[k]);
    }
    float m0[64], m1[64];
    rt_to_host(be, m0, p.m, p.train_numel * sizeof(float));
    rt_to_host(be, m1, back.m, back.train_numel * sizeof(float));
    TZ_EXPECT(memcmp(m0, m1, sizeof m0) == 0, "the moments are not restored");
    /* the frozen values are not in the file: over other ones (another base) it is refused */
    rt_params other;
    declare(&other, be, true);
    float one = 1.0f;
    rt_to_device(be, rt_params_data(&other, 1), &one, sizeof one); /* b, frozen */
    rt_status st = ckpt_train_load(path, &other, rt_comm_self(), rt_comm_self(), &meta);
    TZ_EXPECT(st == RT_ERR_CONFIG && strstr(rt_error_message(), "on another base model"),
              "a checkpoint over other frozen values: %s", rt_error_message());
    free(meta);
    rt_params_free(&other);
    /* ZeRO-1 shards the trainable floats only */
    rt_zero *z = NULL;
    const rt_zero_opts z1 = {.stage = 1};
    TZ_EXPECT_OK(rt_zero_init(&back, rt_comm_self(), NULL, &z1, &z));
    TZ_EXPECT(z && z->sharded == back.train_numel, "ZeRO-1 shards %zu floats, train_numel %zu", z ? z->sharded : 0,
              back.train_numel);
    rt_zero_free(z);
    /* every stage, offloaded or not, steps as the plain slab does */
    const rt_zero_opts zs[] = {{.stage = 1, .offload_optimizer = true},
                               {.stage = 2, .offload_optimizer = true},
                               {.stage = 3},
                               {.stage = 3, .offload_optimizer = true},
                               {.stage = 3, .offload_params = true}};
    for (size_t k = 0; k < sizeof zs / sizeof *zs; k++) check_zero_step(be, &zs[k], &hp);
    rt_params_free(&back);
    rt_params_free(&p);
    rt_params_free(&ref);
    rt_backend_free(be);
    return tz_test_result("test_params_frozen");
}
