/* The checks every family's LoRA golden test makes (see lora_family.h). */
#include "tests/lora_family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_peft_weights.h"
#include "checkpoints/ckpt_safetensors.h"
#include "models/layers/lora.h"
#include "runtime/base/rt_fs.h"
#include "runtime/train/rt_optim.h"
#include "tests/loratest.h"
#include "tests/testutil.h"

static ckpt_st_file *tzlf_open(const tzlf_family *f, const char *file) {
    char path[4200];
    ckpt_st_file *g = NULL;
    snprintf(path, sizeof path, "%s/%s", f->dir, file);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    return g;
}

static const char *tzlf_adapter(const tzlf_family *f) {
    static __thread char path[4200]; /* rank threads call it */
    snprintf(path, sizeof path, "%s/adapter", f->dir);
    return path;
}

static void *tzlf_load(const tzlf_family *f, rt_backend *be, const ckpt_peft_config *peft, const char *adapter) {
    void *m = NULL;
    TZ_EXPECT_OK(f->load(be, rt_comm_self(), peft, adapter, &m));
    return m;
}

static void tzlf_check_logits_loss(const tzlf_family *f, const ckpt_st_file *g, const char *what, const float *logits,
                                   float loss) {
    float *ref = rt_xmalloc(f->n_logits * sizeof(float)), ref_loss;
    char name[96];
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "logits", ref, f->n_logits));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "loss", &ref_loss, 1));
    snprintf(name, sizeof name, "%s logits", what);
    tz_check_close(name, logits, ref, f->n_logits, TZL_FWD_ATOL, TZL_FWD_RTOL);
    snprintf(name, sizeof name, "%s loss", what);
    tz_check_close(name, &loss, &ref_loss, 1, TZL_FWD_ATOL, TZL_FWD_RTOL);
    free(ref);
}

/* The trainable tensors: the adapters and the saved modules. */
static int tzlf_trainable(const tzlf_family *f) { return f->n_adapters + f->n_saved; }

/* Only the adapters and the saved modules train: every other parameter frozen, without a
 * gradient. */
static void tzlf_check_frozen(const tzlf_family *f, rt_params *p) {
    int adapters = 0, saved = 0;
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        const bool adapter = mdl_lora_is_adapter(s->name);
        TZ_EXPECT(!adapter || !s->frozen, "%s %s: a frozen adapter", f->name, s->name);
        TZ_EXPECT(s->frozen == (rt_params_grad(p, i) == NULL), "%s %s: a gradient iff trainable", f->name, s->name);
        adapters += adapter;
        saved += !adapter && !s->frozen;
    }
    TZ_EXPECT(adapters == f->n_adapters && saved == f->n_saved,
              "%s: %d adapter and %d saved tensors, expected %d and %d", f->name, adapters, saved, f->n_adapters,
              f->n_saved);
    TZ_EXPECT(p->train_numel * 5 < p->numel, "%s: train_numel %zu of %zu", f->name, p->train_numel, p->numel);
}

void tzlf_against_peft(const tzlf_family *f, rt_backend *be, const ckpt_peft_config *peft) {
    ckpt_st_file *g = tzlf_open(f, "golden.safetensors");
    void *m = g ? tzlf_load(f, be, peft, tzlf_adapter(f)) : NULL;
    if (!m) {
        ckpt_safetensors_close(g);
        return;
    }
    rt_params *p = f->params(m);
    tzlf_check_frozen(f, p);
    tzl_check_merged(f->dir, p, peft, f->map, f->vocab, f->n_heads, f->n_adapters / 2);
    float *base_before = rt_xmalloc(p->numel * sizeof(float));
    memcpy(base_before, p->param, p->numel * sizeof(float));
    float *logits = rt_xmalloc(f->n_logits * sizeof(float)), loss = 0;
    TZ_EXPECT_OK(f->step(m, true, 0, logits, &loss));
    tzlf_check_logits_loss(f, g, f->name, logits, loss);
    tzl_compare_trainable(g, "grad", p, true, f->map, tzlf_trainable(f));
    rt_adamw_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    TZ_EXPECT_OK(rt_adamw_step(p, &hp, 1.0f, 1));
    tzl_compare_trainable(g, "after_step", p, false, f->map, tzlf_trainable(f));
    int moved = 0;
    for (int i = 0; i < p->n; i++)
        if (p->specs[i].frozen)
            moved += memcmp(base_before + p->specs[i].offset, p->param + p->specs[i].offset,
                            p->specs[i].numel * sizeof(float)) != 0;
    TZ_EXPECT(moved == 0, "%s: %d frozen parameters changed in the AdamW step", f->name, moved);
    f->free(m);

    /* five clipped steps from the initial adapters */
    m = tzlf_load(f, be, peft, tzlf_adapter(f));
    if (m) {
        p = f->params(m);
        float losses[5], norms[5], ref_losses[5], ref_norms[5];
        char what[64];
        for (int s = 0; s < 5; s++) {
            TZ_EXPECT_OK(f->step(m, true, s, NULL, &losses[s]));
            const double norm = rt_grad_norm(p);
            norms[s] = (float)norm;
            TZ_EXPECT_OK(rt_adamw_step(p, &hp, rt_clip_factor(norm, 1.0), s + 1));
        }
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "losses5", ref_losses, 5));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "gradnorm5", ref_norms, 5));
        snprintf(what, sizeof what, "%s losses5", f->name);
        tz_check_close(what, losses, ref_losses, 5, TZL_FWD_ATOL, TZL_FWD_RTOL);
        snprintf(what, sizeof what, "%s gradnorm5", f->name);
        tz_check_close(what, norms, ref_norms, 5, TZL_GRAD_ATOL, TZL_GRAD_RTOL);
        f->free(m);
    }
    free(logits);
    free(base_before);
    ckpt_safetensors_close(g);
}

void tzlf_bf16(const tzlf_family *f, rt_backend *be, const ckpt_peft_config *peft) {
    void *m = tzlf_load(f, be, peft, tzlf_adapter(f));
    if (!m) return;
    rt_params *p = f->params(m);
    float *logits[2], loss[2], *grads[2];
    for (int k = 0; k < 2; k++) { /* 0: fp32, 1: bf16 */
        TZ_EXPECT_OK(rt_set_precision(be, k ? RT_BF16 : RT_F32));
        logits[k] = rt_xmalloc(f->n_logits * sizeof(float));
        TZ_EXPECT_OK(f->step(m, true, 0, logits[k], &loss[k]));
        grads[k] = rt_xmalloc(p->train_numel * sizeof(float));
        memcpy(grads[k], p->grad, p->train_numel * sizeof(float));
    }
    TZ_EXPECT_OK(rt_set_precision(be, RT_F32));
    tzl_check_bf16(f->dir, f->name, p, f->map, logits[1], logits[0], f->n_logits, loss[1], loss[0], grads[1], grads[0],
                   tzlf_trainable(f));
    for (int k = 0; k < 2; k++) free(logits[k]), free(grads[k]);
    f->free(m);
}

/* ---- tensor parallelism ---- */

typedef struct {
    const tzlf_family *f;
    const ckpt_peft_config *peft;
    float *logits, loss; /* rank 0's */
    tzl_grads grads;
} tzlf_rank_arg;

static rt_status tzlf_rank(rt_comm *tp, void *arg) {
    tzlf_rank_arg *a = arg;
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    void *m = NULL;
    RT_TRY(rt_backend_init("cpu", 1, &be));
    RT_TRY(a->f->load(be, tp, a->peft, tzlf_adapter(a->f), &m));
    RT_TRY(a->f->step(m, true, 0, a->logits, &a->loss));
    RT_TRY(tzl_gather_trainable(be, tp, a->f->params(m), &a->grads));
fail:
    if (m) a->f->free(m);
    rt_backend_free(be);
    return st;
}

void tzlf_tp(const tzlf_family *f, const ckpt_peft_config *peft) {
    ckpt_st_file *g = tzlf_open(f, "golden.safetensors");
    if (!g) return;
    for (int tp = 2; tp <= 4; tp *= 2) {
        tzlf_rank_arg *args = rt_xcalloc((size_t)tp, sizeof *args);
        for (int r = 0; r < tp; r++)
            args[r] = (tzlf_rank_arg){.f = f, .peft = peft, .logits = rt_xmalloc(f->n_logits * sizeof(float))};
        TZ_EXPECT_OK(tz_run_ranks(tp, 120, tzlf_rank, args, sizeof *args));
        char what[32];
        snprintf(what, sizeof what, "%s tp %d", f->name, tp);
        tzlf_check_logits_loss(f, g, what, args[0].logits, args[0].loss);
        tzl_check_gathered(g, f->map, &args[0].grads, tzlf_trainable(f), what);
        for (int r = 0; r < tp; r++) {
            tzl_grads_free(&args[r].grads);
            free(args[r].logits);
        }
        free(args);
    }
    ckpt_safetensors_close(g);
}

/* ---- the folder ---- */

void tzlf_round_trip(const tzlf_family *f, rt_backend *be, const ckpt_peft_config *peft) {
    void *m = tzlf_load(f, be, peft, tzlf_adapter(f));
    if (!m) return;
    rt_params *p = f->params(m);
    float loss;
    TZ_EXPECT_OK(f->step(m, true, 0, NULL, &loss)); /* trained adapters, not the loaded ones */
    rt_adamw_hparams hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0};
    TZ_EXPECT_OK(rt_adamw_step(p, &hp, 1.0f, 1));
    float *before = rt_xmalloc(f->n_logits * sizeof(float)), *after = rt_xmalloc(f->n_logits * sizeof(float));
    TZ_EXPECT_OK(f->step(m, false, 0, before, &loss));
    const char *keep = getenv("TZ_LORA_EXPORT");
    char dir[4200], what[96];
    if (keep && *keep)
        snprintf(dir, sizeof dir, "%s", keep);
    else
        snprintf(dir, sizeof dir, "%s/%s-lora", tz_tmpdir(), f->name);
    TZ_EXPECT_OK(rt_make_dirs(dir, "the adapter folder"));
    TZ_EXPECT_OK(ckpt_peft_config_write(dir, peft));
    TZ_EXPECT_OK(ckpt_peft_save_weights(dir, f->map, p, rt_comm_self()));
    f->free(m);
    ckpt_peft_config back;
    TZ_EXPECT_OK(ckpt_peft_config_read(dir, &back));
    TZ_EXPECT(back.n_targets == peft->n_targets && back.r == peft->r, "%s: the config read back: %d targets, r %d",
              f->name, back.n_targets, back.r);
    m = tzlf_load(f, be, &back, dir);
    if (m) {
        TZ_EXPECT_OK(f->step(m, false, 0, after, &loss));
        snprintf(what, sizeof what, "%s logits after the folder's round trip", f->name);
        tz_check_close(what, after, before, f->n_logits, 0.0f, 0.0f);
        f->free(m);
    }
    ckpt_peft_config_free(&back);
    free(before), free(after);
}

void tzlf_loads_in_peft(const tzlf_family *f, rt_backend *be) {
    char folder[4200], what[96];
    ckpt_st_file *ref = tzlf_open(f, "from_tunezoo.safetensors");
    snprintf(folder, sizeof folder, "%s/from-tunezoo", f->dir);
    ckpt_peft_config cfg;
    TZ_EXPECT_OK(ckpt_peft_config_read(folder, &cfg));
    void *m = ref ? tzlf_load(f, be, &cfg, folder) : NULL;
    if (m) {
        float *logits = rt_xmalloc(f->n_logits * sizeof(float)), *peft = rt_xmalloc(f->n_logits * sizeof(float)), loss;
        TZ_EXPECT_OK(f->step(m, false, 0, logits, &loss));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(ref, "logits", peft, f->n_logits));
        snprintf(what, sizeof what, "%s logits of the folder written here, in PEFT", f->name);
        tz_check_close(what, logits, peft, f->n_logits, TZL_FWD_ATOL, TZL_FWD_RTOL);
        free(logits), free(peft);
        f->free(m);
    }
    ckpt_peft_config_free(&cfg);
    ckpt_safetensors_close(ref);
}
