/* LoRA on T5 against HF PEFT (issue 36): the tiny T5 v1.1 of tests/golden/t5-tiny-v1_1 (gated,
 * its own LM head) as the base, with the PEFT folder tests/golden/t5-tiny-lora/adapter (r 4,
 * alpha 8, on q, k, v, o, wi_0, wi_1 and wo: every linear of a block, the decoder's
 * cross-attention included; SEQ_2_SEQ_LM, so nothing else trains; random A and B) loaded over it,
 * must give PEFT's logits, loss, the gradient of every adapter, each one after one AdamW step, and
 * the losses and gradient norms of five clipped steps (scripts/golden/gen_lora_golden.py --family
 * t5). Tolerances are DESIGN.md's fp32 ones (tests/loratest.h).
 *
 * Also: the base stays frozen (no gradient, bit for bit after a step); the merged model (--save-hf
 * with LoRA) is PEFT's merge_and_unload; bf16 is in the band of PEFT under torch's bf16 autocast; at tp = 2 and 4 each rank
 * loads its shards of the base and the adapters and the logits, the loss and every gathered
 * gradient are PEFT's; the folder --save-lora writes loads back bit for bit, and in PEFT to the
 * same logits (tests/golden/t5-tiny-lora/from-tunezoo); and greedy generation
 * (the cross-attention's keys and values computed once, a self-attention cache, both through the
 * adapters) gives at each step the full forward's logits at that position. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_peft.h"
#include "checkpoints/ckpt_peft_weights.h"
#include "checkpoints/ckpt_safetensors.h"
#include "models/lora.h"
#include "models/t5.h"
#include "models/t5_generate.h"
#include "runtime/rt_fs.h"
#include "runtime/rt_optim.h"
#include "tests/loratest.h"
#include "tests/testutil.h"

enum { B = 3, S = 12, T = 7, V = 100, LAYERS = 2 };
/* adapters: an encoder block's q, k, v, o, wi_0, wi_1, wo; a decoder block's with its
 * cross-attention's q, k, v, o too; two tensors each */
enum { N_TRAIN = 2 * (LAYERS * 7 + LAYERS * 11) };

static char base_path[4096], lora_path[4096], adapter_path[4096];

typedef struct {
    int32_t ids[B * S], mask[B * S], labels[B * T];
    t5_batch batch;
    int n_targets;
} golden_batch;

static void read_i32(const ckpt_st_file *f, const char *name, int32_t *dst, size_t n) {
    ckpt_st_tensor t;
    TZ_EXPECT_OK(ckpt_safetensors_find(f, name, &t));
    TZ_EXPECT(t.dtype == RT_I32 && t.numel == n, "%s: dtype %d numel %zu", name, (int)t.dtype, t.numel);
    if (t.dtype == RT_I32 && t.numel == n) memcpy(dst, t.data, n * sizeof(int32_t));
}

static void load_batch(const ckpt_st_file *g, golden_batch *gb) {
    memset(gb, 0, sizeof *gb);
    read_i32(g, "input_ids", gb->ids, B * S);
    read_i32(g, "attention_mask", gb->mask, B * S);
    read_i32(g, "labels", gb->labels, B * T);
    for (int i = 0; i < B * T; i++) gb->n_targets += gb->labels[i] != -100;
    /* decoder inputs: HF's shift of the labels, as PEFT's run had them */
    gb->batch = (t5_batch){.B = B, .S = S, .T = T, .src_ids = gb->ids, .src_mask = gb->mask, .labels = gb->labels};
}

static ckpt_st_file *open_golden(void) {
    char path[4200];
    ckpt_st_file *g = NULL;
    snprintf(path, sizeof path, "%s/golden.safetensors", lora_path);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    return g;
}

/* The base with the adapters of `adapter` (a PEFT folder; NULL: our own init), this rank's shards
 * over tp; a status and no checks, so rank threads can call it. */
static rt_status load_lora_tp(rt_backend *be, rt_comm *tp, const ckpt_peft_config *peft, const char *adapter,
                              t5_model **out) {
    rt_status st = RT_OK;
    char weights[4096], report[256];
    t5_config cfg;
    *out = NULL;
    RT_TRY(t5_config_from_hf(base_path, &cfg, weights, sizeof weights));
    cfg.lora = peft;
    RT_TRY(t5_model_init(&cfg, be, tp, B, S, T, 7, out));
    RT_TRY(t5_load_hf(*out, weights, report, sizeof report));
    if (adapter) RT_TRY(ckpt_peft_load_weights(adapter, &ckpt_map_t5, t5_model_params(*out), tp->rank, tp->size, NULL));
    return RT_OK;
fail:
    t5_model_free(*out);
    *out = NULL;
    return st;
}

static t5_model *load_lora(rt_backend *be, const ckpt_peft_config *peft, const char *adapter) {
    t5_model *m = NULL;
    TZ_EXPECT_OK(load_lora_tp(be, rt_comm_self(), peft, adapter, &m));
    return m;
}

/* One training step's loss (mean over the targets), logits (may be NULL) and gradients. */
static float train_step(t5_model *m, const golden_batch *gb, int64_t step, float *logits) {
    mdl_pass pass = {.seed = 1, .step = step, .training = true};
    double loss_sum = 0;
    int n = 0;
    rt_params_zero_grad(t5_model_params(m));
    TZ_EXPECT_OK(t5_step(m, &gb->batch, &pass, 1.0f / (float)gb->n_targets, &loss_sum, &n, logits));
    TZ_EXPECT(n == gb->n_targets, "%d targets counted, %d labelled", n, gb->n_targets);
    return (float)(loss_sum / gb->n_targets);
}

static void check_logits_loss(const ckpt_st_file *g, const char *what, const float *logits, float loss) {
    float *ref = rt_xmalloc((size_t)B * T * V * sizeof(float)), ref_loss;
    char name[96];
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "logits", ref, (size_t)B * T * V));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "loss", &ref_loss, 1));
    snprintf(name, sizeof name, "%s logits", what);
    tz_check_close(name, logits, ref, (size_t)B * T * V, TZL_FWD_ATOL, TZL_FWD_RTOL);
    snprintf(name, sizeof name, "%s loss", what);
    tz_check_close(name, &loss, &ref_loss, 1, TZL_FWD_ATOL, TZL_FWD_RTOL);
    free(ref);
}

/* Only the adapters train; every other parameter is frozen, without a gradient. */
static void check_frozen(rt_params *p) {
    int adapters = 0;
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        const bool adapter = mdl_lora_is_adapter(s->name);
        TZ_EXPECT(s->frozen == !adapter, "%s: frozen %d", s->name, s->frozen);
        TZ_EXPECT(s->frozen == (rt_params_grad(p, i) == NULL), "%s: a gradient iff trainable", s->name);
        adapters += adapter;
    }
    TZ_EXPECT(adapters == N_TRAIN, "%d adapter tensors, expected %d", adapters, N_TRAIN);
    TZ_EXPECT(p->train_numel * 5 < p->numel, "train_numel %zu of %zu", p->train_numel, p->numel);
}

static void test_against_peft(rt_backend *be, const ckpt_peft_config *peft) {
    ckpt_st_file *g = open_golden();
    t5_model *m = g ? load_lora(be, peft, adapter_path) : NULL;
    if (!m) {
        ckpt_safetensors_close(g);
        return;
    }
    golden_batch gb;
    load_batch(g, &gb);
    rt_params *p = t5_model_params(m);
    check_frozen(p);
    tzl_check_merged(lora_path, p, peft, &ckpt_map_t5, V, t5_model_config(m)->num_heads, N_TRAIN / 2);
    float *base_before = rt_xmalloc(p->numel * sizeof(float));
    memcpy(base_before, p->param, p->numel * sizeof(float));
    float *logits = rt_xmalloc((size_t)B * T * V * sizeof(float));
    const float loss = train_step(m, &gb, 0, logits);
    check_logits_loss(g, "t5", logits, loss);
    tzl_compare_trainable(g, "grad", p, true, &ckpt_map_t5, N_TRAIN);

    rt_adamw_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    TZ_EXPECT_OK(rt_adamw_step(p, &hp, 1.0f, 1));
    tzl_compare_trainable(g, "after_step", p, false, &ckpt_map_t5, N_TRAIN);
    int moved = 0;
    for (int i = 0; i < p->n; i++)
        if (p->specs[i].frozen)
            moved += memcmp(base_before + p->specs[i].offset, p->param + p->specs[i].offset,
                            p->specs[i].numel * sizeof(float)) != 0;
    TZ_EXPECT(moved == 0, "%d frozen parameters changed in the AdamW step", moved);
    t5_model_free(m);

    /* five clipped steps from the initial adapters */
    m = load_lora(be, peft, adapter_path);
    if (m) {
        p = t5_model_params(m);
        float losses[5], norms[5], ref_losses[5], ref_norms[5];
        for (int s = 0; s < 5; s++) {
            losses[s] = train_step(m, &gb, s, NULL);
            const double norm = rt_grad_norm(p);
            norms[s] = (float)norm;
            TZ_EXPECT_OK(rt_adamw_step(p, &hp, rt_clip_coef(norm, 1.0), s + 1));
        }
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "losses5", ref_losses, 5));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "gradnorm5", ref_norms, 5));
        tz_check_close("t5 losses5", losses, ref_losses, 5, TZL_FWD_ATOL, TZL_FWD_RTOL);
        tz_check_close("t5 gradnorm5", norms, ref_norms, 5, TZL_GRAD_ATOL, TZL_GRAD_RTOL);
        t5_model_free(m);
    }
    free(logits);
    free(base_before);
    ckpt_safetensors_close(g);
}

/* bf16 against PEFT under torch's CPU bf16 autocast, in the full models' bf16 band (tests/loratest.h). */
static void test_bf16(rt_backend *be, const ckpt_peft_config *peft) {
    ckpt_st_file *g = open_golden();
    t5_model *m = g ? load_lora(be, peft, adapter_path) : NULL;
    if (!m) {
        ckpt_safetensors_close(g);
        return;
    }
    golden_batch gb;
    load_batch(g, &gb);
    ckpt_safetensors_close(g);
    rt_params *p = t5_model_params(m);
    float *logits[2], loss[2], *grads[2];
    for (int k = 0; k < 2; k++) { /* 0: fp32, 1: bf16 */
        TZ_EXPECT_OK(rt_set_precision(be, k ? RT_BF16 : RT_F32));
        logits[k] = rt_xmalloc((size_t)B * T * V * sizeof(float));
        loss[k] = train_step(m, &gb, 0, logits[k]);
        grads[k] = rt_xmalloc(p->train_numel * sizeof(float));
        memcpy(grads[k], p->grad, p->train_numel * sizeof(float));
    }
    TZ_EXPECT_OK(rt_set_precision(be, RT_F32));
    tzl_check_bf16(lora_path, "t5", p, &ckpt_map_t5, logits[1], logits[0], (size_t)B * T * V, loss[1], loss[0],
                   grads[1], grads[0], N_TRAIN);
    for (int k = 0; k < 2; k++) free(logits[k]), free(grads[k]);
    t5_model_free(m);
}

/* ---- tensor parallelism ---- */

typedef struct {
    const ckpt_peft_config *peft;
    const golden_batch *gb;
    float logits[B * T * V], loss; /* rank 0's */
    tzl_grads grads;
} tp_arg;

static rt_status lora_rank(rt_comm *tp, void *arg) {
    tp_arg *a = arg;
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    t5_model *m = NULL;
    RT_TRY(rt_backend_init("cpu", 1, &be));
    RT_TRY(load_lora_tp(be, tp, a->peft, adapter_path, &m));
    mdl_pass pass = {.seed = 1, .training = true};
    double loss_sum = 0;
    int n = 0;
    rt_params_zero_grad(t5_model_params(m));
    RT_TRY(t5_step(m, &a->gb->batch, &pass, 1.0f / (float)a->gb->n_targets, &loss_sum, &n, a->logits));
    a->loss = (float)(loss_sum / a->gb->n_targets);
    RT_TRY(tzl_gather_trainable(be, tp, t5_model_params(m), &a->grads));
fail:
    t5_model_free(m);
    rt_backend_free(be);
    return st;
}

static void test_tp(const ckpt_peft_config *peft) {
    ckpt_st_file *g = open_golden();
    if (!g) return;
    golden_batch gb;
    load_batch(g, &gb);
    for (int tp = 2; tp <= 4; tp *= 2) {
        tp_arg *args = rt_xcalloc((size_t)tp, sizeof *args);
        for (int r = 0; r < tp; r++) args[r] = (tp_arg){.peft = peft, .gb = &gb};
        TZ_EXPECT_OK(tz_run_ranks(tp, 120, lora_rank, args, sizeof *args));
        char what[32];
        snprintf(what, sizeof what, "tp %d", tp);
        check_logits_loss(g, what, args[0].logits, args[0].loss);
        tzl_check_gathered(g, &ckpt_map_t5, &args[0].grads, N_TRAIN, what);
        for (int r = 0; r < tp; r++) tzl_grads_free(&args[r].grads);
        free(args);
    }
    ckpt_safetensors_close(g);
}

/* ---- the folder, and generation ---- */

/* The folder written here loads back to the same logits, bit for bit. */
static void test_save_round_trip(rt_backend *be, const ckpt_peft_config *peft) {
    ckpt_st_file *g = open_golden();
    t5_model *m = g ? load_lora(be, peft, adapter_path) : NULL;
    if (!m) {
        ckpt_safetensors_close(g);
        return;
    }
    golden_batch gb;
    load_batch(g, &gb);
    ckpt_safetensors_close(g);
    rt_params *p = t5_model_params(m);
    (void)train_step(m, &gb, 0, NULL); /* trained adapters, not the loaded ones */
    rt_adamw_hparams hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0};
    TZ_EXPECT_OK(rt_adamw_step(p, &hp, 1.0f, 1));
    float *before = rt_xmalloc((size_t)B * T * V * sizeof(float)), *after = rt_xmalloc((size_t)B * T * V * sizeof(float));
    const mdl_pass eval = {.seed = 1};
    double loss_sum;
    int n;
    TZ_EXPECT_OK(t5_step(m, &gb.batch, &eval, 0.0f, &loss_sum, &n, before));
    /* TZ_LORA_EXPORT=DIR keeps the folder: how tests/golden/t5-tiny-lora/from-tunezoo was made */
    const char *keep = getenv("TZ_LORA_EXPORT");
    char dir[4200];
    if (keep && *keep)
        snprintf(dir, sizeof dir, "%s", keep);
    else
        snprintf(dir, sizeof dir, "%s/t5-lora", tz_tmpdir());
    TZ_EXPECT_OK(rt_make_dirs(dir, "the adapter folder"));
    TZ_EXPECT_OK(ckpt_peft_config_write(dir, peft));
    TZ_EXPECT_OK(ckpt_peft_save_weights(dir, &ckpt_map_t5, p, rt_comm_self()));
    t5_model_free(m);
    ckpt_peft_config back;
    TZ_EXPECT_OK(ckpt_peft_config_read(dir, &back));
    TZ_EXPECT(strcmp(back.task_type, "SEQ_2_SEQ_LM") == 0 && back.n_targets == 7, "the config read back: %s, %d targets",
              back.task_type, back.n_targets);
    m = load_lora(be, &back, dir);
    if (m) {
        TZ_EXPECT_OK(t5_step(m, &gb.batch, &eval, 0.0f, &loss_sum, &n, after));
        tz_check_close("t5 logits after the folder's round trip", after, before, (size_t)B * T * V, 0.0f, 0.0f);
        t5_model_free(m);
    }
    ckpt_peft_config_free(&back);
    free(before), free(after);
}

/* The folder written above (with TZ_LORA_EXPORT) loads in PEFT (gen_lora_golden.py --family t5
 * --from-tunezoo) to the logits it gives here. */
static void test_loads_in_peft(rt_backend *be) {
    char path[4200], folder[4200];
    ckpt_st_file *g = open_golden(), *ref = NULL;
    snprintf(path, sizeof path, "%s/from_tunezoo.safetensors", lora_path);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &ref));
    snprintf(folder, sizeof folder, "%s/from-tunezoo", lora_path);
    ckpt_peft_config cfg;
    TZ_EXPECT_OK(ckpt_peft_config_read(folder, &cfg));
    t5_model *m = g && ref ? load_lora(be, &cfg, folder) : NULL;
    if (m) {
        golden_batch gb;
        load_batch(g, &gb);
        float *logits = rt_xmalloc((size_t)B * T * V * sizeof(float)), *peft = rt_xmalloc((size_t)B * T * V * sizeof(float));
        const mdl_pass eval = {.seed = 1};
        double loss_sum;
        int n;
        TZ_EXPECT_OK(t5_step(m, &gb.batch, &eval, 0.0f, &loss_sum, &n, logits));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(ref, "logits", peft, (size_t)B * T * V));
        tz_check_close("t5 logits of the folder written here, in PEFT", logits, peft, (size_t)B * T * V, TZL_FWD_ATOL,
                       TZL_FWD_RTOL);
        free(logits), free(peft);
        t5_model_free(m);
    }
    ckpt_peft_config_free(&cfg);
    ckpt_safetensors_close(g);
    ckpt_safetensors_close(ref);
}

enum { NEW = 6 };

typedef struct {
    float logits[NEW][B * V];
    int steps;
} gen_record;

/* Each step's logits while every row still runs (a row that chose eos leaves the batch). */
static void record_step(void *user, const gen_step *s) {
    gen_record *r = user;
    if (s->n_rows != B || s->step != r->steps || s->step >= NEW) return;
    memcpy(r->logits[s->step], s->logits, (size_t)B * V * sizeof(float));
    r->steps++;
}

/* Greedy decoding through the caches gives, at every step, the full forward's logits at that
 * position (decoder inputs: the start token, then the tokens chosen). */
static void test_generate(rt_backend *be, const ckpt_peft_config *peft) {
    ckpt_st_file *g = open_golden();
    t5_model *m = g ? load_lora(be, peft, adapter_path) : NULL;
    t5_generator *gen = NULL;
    if (m) TZ_EXPECT_OK(t5_generator_init(m, B, S, 1, NEW, &gen));
    if (!gen) {
        t5_model_free(m);
        ckpt_safetensors_close(g);
        return;
    }
    golden_batch gb;
    load_batch(g, &gb);
    ckpt_safetensors_close(g);
    gen_options o;
    t5_gen_options_default(t5_model_config(m), &o);
    o.max_new_tokens = NEW;
    gen_record *rec = rt_xcalloc(1, sizeof *rec);
    int32_t out[B * NEW], dec_in[B * NEW], labels[B * NEW];
    int len[B];
    TZ_EXPECT_OK(t5_generate(gen, gb.ids, gb.mask, B, S, &o, record_step, rec, out, len, NULL));
    TZ_EXPECT(rec->steps == NEW, "%d steps with every row (no eos in this golden batch's greedy outputs)", rec->steps);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < NEW; t++) {
            dec_in[b * NEW + t] = t == 0 ? t5_model_config(m)->decoder_start_token_id : out[b * NEW + t - 1];
            labels[b * NEW + t] = 2; /* any id: the logits do not depend on them */
        }
    const t5_batch full_batch = {.B = B, .S = S, .T = NEW, .src_ids = gb.ids, .src_mask = gb.mask, .labels = labels,
                                 .decoder_input_ids = dec_in};
    float *full = rt_xmalloc((size_t)B * NEW * V * sizeof(float)), *stepwise = rt_xmalloc((size_t)B * NEW * V * sizeof(float));
    const mdl_pass eval = {.seed = 1};
    double loss_sum;
    int n;
    TZ_EXPECT_OK(t5_step(m, &full_batch, &eval, 0.0f, &loss_sum, &n, full));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < NEW; t++)
            memcpy(stepwise + ((size_t)b * NEW + t) * V, rec->logits[t] + (size_t)b * V, V * sizeof(float));
    tz_check_close("t5 LoRA: decoding's logits vs the full forward's", stepwise, full, (size_t)B * NEW * V,
                   TZL_FWD_ATOL, TZL_FWD_RTOL);
    free(full), free(stepwise), free(rec);
    t5_generator_free(gen);
    t5_model_free(m);
}

int main(void) {
    snprintf(base_path, sizeof base_path, "%s", tz_source_path("tests/golden/t5-tiny-v1_1"));
    snprintf(lora_path, sizeof lora_path, "%s", tz_source_path("tests/golden/t5-tiny-lora"));
    snprintf(adapter_path, sizeof adapter_path, "%s/adapter", lora_path);
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 2, &be));
    ckpt_peft_config peft;
    TZ_EXPECT_OK(ckpt_peft_config_read(adapter_path, &peft));
    if (!be) return tz_test_result("test_golden_lora_t5");
    test_against_peft(be, &peft);
    test_bf16(be, &peft);
    test_tp(&peft);
    test_save_round_trip(be, &peft);
    test_loads_in_peft(be);
    test_generate(be, &peft);
    ckpt_peft_config_free(&peft);
    rt_backend_free(be);
    return tz_test_result("test_golden_lora_t5");
}
