/* LoRA on GLM against HF PEFT (issue 36): FlagAI's tiny GLMModel of tests/golden/glm-tiny as the
 * base, with the PEFT folder tests/golden/glm-tiny-lora/adapter (r 4, alpha 8, on
 * query_key_value, dense, dense_h_to_4h and dense_4h_to_h: every linear of a layer; PEFT over the
 * plain module, so nothing else trains; random A and B) loaded over it, must give PEFT's logits,
 * the LM loss of the blank's labels, the gradient of every adapter, each one after one AdamW step,
 * and the losses and gradient norms of five clipped steps (scripts/golden/gen_lora_golden.py
 * --family glm). Tolerances are DESIGN.md's fp32 ones (tests/loratest.h).
 *
 * Also: the base stays frozen; the merged model (--save-hf with LoRA) is PEFT's merge_and_unload;
 * bf16 is in the band of PEFT under torch's bf16 autocast; at tp = 2 and 4 each rank loads its shards of the base and of the
 * adapters (query_key_value's B split by heads as the fused [Q; K; V] weight is, dense's and
 * dense_4h_to_h's A by their input columns) and the logits, the loss and every gathered gradient
 * are PEFT's; the folder --save-lora writes loads back bit for bit, and in PEFT to the same logits
 * (tests/golden/glm-tiny-lora/from-tunezoo). Decoding through the adapters is the stack's
 * (mdl_stack_decode), which test_golden_lora checks with GPT-2's fused projection. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_peft.h"
#include "checkpoints/ckpt_peft_weights.h"
#include "checkpoints/ckpt_safetensors.h"
#include "models/glm.h"
#include "models/lora.h"
#include "runtime/rt_fs.h"
#include "runtime/rt_optim.h"
#include "tests/loratest.h"
#include "tests/testutil.h"

enum { B = 3, T = 12, V = 128, LAYERS = 2 };
enum { N_TRAIN = 2 * 4 * LAYERS }; /* four adapters a layer, two tensors each */

static char base_path[4096], lora_path[4096], adapter_path[4096];

typedef struct {
    int32_t ids[B * T], pos[B * T], bpos[B * T], sep[B], labels[B * T];
    glm_inputs in;
    int n_targets;
} golden_batch;

static void read_i32(const ckpt_st_file *f, const char *name, int32_t *dst, size_t n) {
    ckpt_st_tensor t;
    TZ_EXPECT_OK(ckpt_safetensors_find(f, name, &t));
    TZ_EXPECT(t.dtype == RT_I32 && t.numel == n, "%s: dtype %d numel %zu", name, (int)t.dtype, t.numel);
    if (t.dtype == RT_I32 && t.numel == n) memcpy(dst, t.data, n * sizeof(int32_t));
}

/* GLMModel's inputs: ids, position_ids (B, 2, T: positions, then block positions), each row's
 * sep as attention_mask; the blank's labels. */
static void load_batch(const ckpt_st_file *g, golden_batch *gb) {
    int32_t pos2[B * 2 * T];
    memset(gb, 0, sizeof *gb);
    read_i32(g, "input_ids", gb->ids, B * T);
    read_i32(g, "position_ids", pos2, B * 2 * T);
    for (int r = 0; r < B; r++)
        for (int t = 0; t < T; t++) {
            gb->pos[r * T + t] = pos2[(r * 2 + 0) * T + t];
            gb->bpos[r * T + t] = pos2[(r * 2 + 1) * T + t];
        }
    read_i32(g, "attention_mask", gb->sep, B);
    read_i32(g, "labels", gb->labels, B * T);
    for (int i = 0; i < B * T; i++) gb->n_targets += gb->labels[i] != -100;
    gb->in = (glm_inputs){.B = B, .T = T, .ids = gb->ids, .pos = gb->pos, .block_pos = gb->bpos, .sep = gb->sep};
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
                              glm_model **out) {
    rt_status st = RT_OK;
    char path[4200];
    glm_config cfg;
    *out = NULL;
    snprintf(path, sizeof path, "%s/config.json", base_path);
    RT_TRY(glm_config_load(path, &cfg));
    cfg.lora = peft;
    RT_TRY(glm_model_init(&cfg, be, tp, B, T, 7, out));
    RT_TRY(glm_model_load_dir(*out, base_path, NULL, 0));
    if (adapter) RT_TRY(ckpt_peft_load_weights(adapter, &ckpt_map_glm, glm_model_params(*out), tp->rank, tp->size, NULL));
    return RT_OK;
fail:
    glm_model_free(*out);
    *out = NULL;
    return st;
}

static glm_model *load_lora(rt_backend *be, const ckpt_peft_config *peft, const char *adapter) {
    glm_model *m = NULL;
    TZ_EXPECT_OK(load_lora_tp(be, rt_comm_self(), peft, adapter, &m));
    return m;
}

/* One training step's mean loss, with the logits (may be NULL) of the same weights first. */
static rt_status train_step(glm_model *m, const golden_batch *gb, int64_t step, float *logits, float *loss) {
    rt_status st = RT_OK;
    mdl_pass pass = {.seed = 1, .step = step, .training = true};
    double loss_sum = 0;
    int n = 0;
    if (logits) RT_TRY(glm_logits(m, &gb->in, logits, NULL));
    rt_params_zero_grad(glm_model_params(m));
    RT_TRY(glm_lm_step(m, &gb->in, gb->labels, &pass, 1.0f / (float)gb->n_targets, &loss_sum, &n));
    if (n != gb->n_targets) RT_FAIL(RT_ERR_FORMAT, "%d targets counted, %d labelled", n, gb->n_targets);
    *loss = (float)(loss_sum / gb->n_targets);
fail:
    return st;
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

static void test_against_peft(rt_backend *be, const ckpt_peft_config *peft) {
    ckpt_st_file *g = open_golden();
    glm_model *m = g ? load_lora(be, peft, adapter_path) : NULL;
    if (!m) {
        ckpt_safetensors_close(g);
        return;
    }
    golden_batch gb;
    load_batch(g, &gb);
    rt_params *p = glm_model_params(m);
    int adapters = 0;
    for (int i = 0; i < p->n; i++) { /* only the adapters train */
        const bool adapter = mdl_lora_is_adapter(p->specs[i].name);
        TZ_EXPECT(p->specs[i].frozen == !adapter && (rt_params_grad(p, i) == NULL) == !adapter, "%s: frozen %d",
                  p->specs[i].name, p->specs[i].frozen);
        adapters += adapter;
    }
    TZ_EXPECT(adapters == N_TRAIN, "%d adapter tensors, expected %d", adapters, N_TRAIN);
    tzl_check_merged(lora_path, p, peft, &ckpt_map_glm, V, glm_model_config(m)->num_attention_heads, N_TRAIN / 2);
    float *base_before = rt_xmalloc(p->numel * sizeof(float));
    memcpy(base_before, p->param, p->numel * sizeof(float));
    float *logits = rt_xmalloc((size_t)B * T * V * sizeof(float)), loss = 0;
    TZ_EXPECT_OK(train_step(m, &gb, 0, logits, &loss));
    check_logits_loss(g, "glm", logits, loss);
    tzl_compare_trainable(g, "grad", p, true, &ckpt_map_glm, N_TRAIN);

    rt_adamw_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    TZ_EXPECT_OK(rt_adamw_step(p, &hp, 1.0f, 1));
    tzl_compare_trainable(g, "after_step", p, false, &ckpt_map_glm, N_TRAIN);
    int moved = 0;
    for (int i = 0; i < p->n; i++)
        if (p->specs[i].frozen)
            moved += memcmp(base_before + p->specs[i].offset, p->param + p->specs[i].offset,
                            p->specs[i].numel * sizeof(float)) != 0;
    TZ_EXPECT(moved == 0, "%d frozen parameters changed in the AdamW step", moved);
    glm_model_free(m);

    /* five clipped steps from the initial adapters */
    m = load_lora(be, peft, adapter_path);
    if (m) {
        p = glm_model_params(m);
        float losses[5], norms[5], ref_losses[5], ref_norms[5];
        for (int s = 0; s < 5; s++) {
            TZ_EXPECT_OK(train_step(m, &gb, s, NULL, &losses[s]));
            const double norm = rt_grad_norm(p);
            norms[s] = (float)norm;
            TZ_EXPECT_OK(rt_adamw_step(p, &hp, rt_clip_coef(norm, 1.0), s + 1));
        }
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "losses5", ref_losses, 5));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "gradnorm5", ref_norms, 5));
        tz_check_close("glm losses5", losses, ref_losses, 5, TZL_FWD_ATOL, TZL_FWD_RTOL);
        tz_check_close("glm gradnorm5", norms, ref_norms, 5, TZL_GRAD_ATOL, TZL_GRAD_RTOL);
        glm_model_free(m);
    }
    free(logits);
    free(base_before);
    ckpt_safetensors_close(g);
}

/* bf16 against PEFT under torch's CPU bf16 autocast, in the full models' bf16 band (tests/loratest.h). */
static void test_bf16(rt_backend *be, const ckpt_peft_config *peft) {
    ckpt_st_file *g = open_golden();
    glm_model *m = g ? load_lora(be, peft, adapter_path) : NULL;
    if (!m) {
        ckpt_safetensors_close(g);
        return;
    }
    golden_batch gb;
    load_batch(g, &gb);
    ckpt_safetensors_close(g);
    rt_params *p = glm_model_params(m);
    float *logits[2], loss[2], *grads[2];
    for (int k = 0; k < 2; k++) { /* 0: fp32, 1: bf16 */
        TZ_EXPECT_OK(rt_set_precision(be, k ? RT_BF16 : RT_F32));
        logits[k] = rt_xmalloc((size_t)B * T * V * sizeof(float));
        TZ_EXPECT_OK(train_step(m, &gb, 0, logits[k], &loss[k]));
        grads[k] = rt_xmalloc(p->train_numel * sizeof(float));
        memcpy(grads[k], p->grad, p->train_numel * sizeof(float));
    }
    TZ_EXPECT_OK(rt_set_precision(be, RT_F32));
    tzl_check_bf16(lora_path, "glm", p, &ckpt_map_glm, logits[1], logits[0], (size_t)B * T * V, loss[1], loss[0],
                   grads[1], grads[0], N_TRAIN);
    for (int k = 0; k < 2; k++) free(logits[k]), free(grads[k]);
    glm_model_free(m);
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
    glm_model *m = NULL;
    RT_TRY(rt_backend_init("cpu", 1, &be));
    RT_TRY(load_lora_tp(be, tp, a->peft, adapter_path, &m));
    RT_TRY(train_step(m, a->gb, 0, a->logits, &a->loss));
    RT_TRY(tzl_gather_trainable(be, tp, glm_model_params(m), &a->grads));
fail:
    glm_model_free(m);
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
        snprintf(what, sizeof what, "glm tp %d", tp);
        check_logits_loss(g, what, args[0].logits, args[0].loss);
        tzl_check_gathered(g, &ckpt_map_glm, &args[0].grads, N_TRAIN, what);
        for (int r = 0; r < tp; r++) tzl_grads_free(&args[r].grads);
        free(args);
    }
    ckpt_safetensors_close(g);
}

/* ---- the folder ---- */

/* The folder written here loads back to the same logits, bit for bit; TZ_LORA_EXPORT=DIR keeps
 * it (how tests/golden/glm-tiny-lora/from-tunezoo was made). */
static void test_save_round_trip(rt_backend *be, const ckpt_peft_config *peft) {
    ckpt_st_file *g = open_golden();
    glm_model *m = g ? load_lora(be, peft, adapter_path) : NULL;
    if (!m) {
        ckpt_safetensors_close(g);
        return;
    }
    golden_batch gb;
    load_batch(g, &gb);
    ckpt_safetensors_close(g);
    rt_params *p = glm_model_params(m);
    float loss;
    TZ_EXPECT_OK(train_step(m, &gb, 0, NULL, &loss)); /* trained adapters, not the loaded ones */
    rt_adamw_hparams hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0};
    TZ_EXPECT_OK(rt_adamw_step(p, &hp, 1.0f, 1));
    float *before = rt_xmalloc((size_t)B * T * V * sizeof(float)), *after = rt_xmalloc((size_t)B * T * V * sizeof(float));
    TZ_EXPECT_OK(glm_logits(m, &gb.in, before, NULL));
    const char *keep = getenv("TZ_LORA_EXPORT");
    char dir[4200];
    if (keep && *keep)
        snprintf(dir, sizeof dir, "%s", keep);
    else
        snprintf(dir, sizeof dir, "%s/glm-lora", tz_tmpdir());
    TZ_EXPECT_OK(rt_make_dirs(dir, "the adapter folder"));
    TZ_EXPECT_OK(ckpt_peft_config_write(dir, peft));
    TZ_EXPECT_OK(ckpt_peft_save_weights(dir, &ckpt_map_glm, p, rt_comm_self()));
    glm_model_free(m);
    ckpt_peft_config back;
    TZ_EXPECT_OK(ckpt_peft_config_read(dir, &back));
    m = load_lora(be, &back, dir);
    if (m) {
        TZ_EXPECT_OK(glm_logits(m, &gb.in, after, NULL));
        tz_check_close("glm logits after the folder's round trip", after, before, (size_t)B * T * V, 0.0f, 0.0f);
        glm_model_free(m);
    }
    ckpt_peft_config_free(&back);
    free(before), free(after);
}

/* That folder, loaded in PEFT over FlagAI's model (gen_lora_golden.py --family glm --from-tunezoo),
 * gives the logits it gives here. */
static void test_loads_in_peft(rt_backend *be) {
    char path[4200], folder[4200];
    ckpt_st_file *g = open_golden(), *ref = NULL;
    snprintf(path, sizeof path, "%s/from_tunezoo.safetensors", lora_path);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &ref));
    snprintf(folder, sizeof folder, "%s/from-tunezoo", lora_path);
    ckpt_peft_config cfg;
    TZ_EXPECT_OK(ckpt_peft_config_read(folder, &cfg));
    glm_model *m = g && ref ? load_lora(be, &cfg, folder) : NULL;
    if (m) {
        golden_batch gb;
        load_batch(g, &gb);
        float *logits = rt_xmalloc((size_t)B * T * V * sizeof(float)), *peft = rt_xmalloc((size_t)B * T * V * sizeof(float));
        TZ_EXPECT_OK(glm_logits(m, &gb.in, logits, NULL));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(ref, "logits", peft, (size_t)B * T * V));
        tz_check_close("glm logits of the folder written here, in PEFT", logits, peft, (size_t)B * T * V, TZL_FWD_ATOL,
                       TZL_FWD_RTOL);
        free(logits), free(peft);
        glm_model_free(m);
    }
    ckpt_peft_config_free(&cfg);
    ckpt_safetensors_close(g);
    ckpt_safetensors_close(ref);
}

int main(void) {
    snprintf(base_path, sizeof base_path, "%s", tz_source_path("tests/golden/glm-tiny"));
    snprintf(lora_path, sizeof lora_path, "%s", tz_source_path("tests/golden/glm-tiny-lora"));
    snprintf(adapter_path, sizeof adapter_path, "%s/adapter", lora_path);
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 2, &be));
    ckpt_peft_config peft;
    TZ_EXPECT_OK(ckpt_peft_config_read(adapter_path, &peft));
    if (!be) return tz_test_result("test_golden_lora_glm");
    test_against_peft(be, &peft);
    test_bf16(be, &peft);
    test_tp(&peft);
    test_save_round_trip(be, &peft);
    test_loads_in_peft(be);
    ckpt_peft_config_free(&peft);
    rt_backend_free(be);
    return tz_test_result("test_golden_lora_glm");
}
