/* LoRA on GLM against HF PEFT (issue 36): FlagAI's tiny GLMModel of tests/golden/glm-tiny as the
 * base, with the PEFT folder tests/golden/glm-tiny-lora/adapter (r 4, alpha 8, on
 * query_key_value, dense, dense_h_to_4h and dense_4h_to_h: every linear of a layer; PEFT over the
 * plain module, so nothing else trains; random A and B) loaded over it. tests/lora_family.h's
 * checks (scripts/golden/gen_lora_golden.py --family glm): PEFT's logits, the LM loss of the
 * blank's labels, adapter gradients, AdamW steps and merged model; bf16 against PEFT under
 * autocast; tp 2 and 4 (query_key_value's B split by heads as the fused [Q; K; V] weight is,
 * dense's and dense_4h_to_h's A by their input columns); the folder both ways. Decoding through
 * the adapters is the stack's (mdl_stack_decode), which test_golden_lora checks with GPT-2's
 * fused projection. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_peft.h"
#include "checkpoints/ckpt_peft_weights.h"
#include "checkpoints/ckpt_safetensors.h"
#include "models/glm/glm.h"
#include "tests/lora_family.h"
#include "tests/testutil.h"

enum { B = 3, T = 12, V = 128, LAYERS = 2 };

static char base_path[4096];

/* GLMModel's inputs: ids, position_ids (B, 2, T: positions, then block positions), each row's
 * sep as attention_mask; the blank's labels. */
static struct {
    int32_t ids[B * T], pos[B * T], bpos[B * T], sep[B], labels[B * T];
    glm_inputs in;
    int n_targets;
} gb;

static void read_i32(const ckpt_st_file *f, const char *name, int32_t *dst, size_t n) {
    ckpt_st_tensor t;
    TZ_EXPECT_OK(ckpt_safetensors_find(f, name, &t));
    TZ_EXPECT(t.dtype == RT_I32 && t.numel == n, "%s: dtype %d numel %zu", name, (int)t.dtype, t.numel);
    if (t.dtype == RT_I32 && t.numel == n) memcpy(dst, t.data, n * sizeof(int32_t));
}

static void load_batch(const char *lora_dir) {
    char path[4200];
    int32_t pos2[B * 2 * T];
    ckpt_st_file *g = NULL;
    snprintf(path, sizeof path, "%s/golden.safetensors", lora_dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    if (!g) return;
    read_i32(g, "input_ids", gb.ids, B * T);
    read_i32(g, "position_ids", pos2, B * 2 * T);
    read_i32(g, "attention_mask", gb.sep, B);
    read_i32(g, "labels", gb.labels, B * T);
    ckpt_safetensors_close(g);
    for (int r = 0; r < B; r++)
        for (int t = 0; t < T; t++) {
            gb.pos[r * T + t] = pos2[(r * 2 + 0) * T + t];
            gb.bpos[r * T + t] = pos2[(r * 2 + 1) * T + t];
        }
    for (int i = 0; i < B * T; i++) gb.n_targets += gb.labels[i] != -100;
    gb.in = (glm_inputs){.B = B, .T = T, .ids = gb.ids, .pos = gb.pos, .block_pos = gb.bpos, .sep = gb.sep};
}

static rt_status glm_load(rt_backend *be, rt_comm *tp, const ckpt_peft_config *peft, const char *adapter, void **out) {
    rt_status st = RT_OK;
    char path[4200];
    glm_config cfg;
    glm_model *m = NULL;
    *out = NULL;
    snprintf(path, sizeof path, "%s/config.json", base_path);
    RT_TRY(glm_config_load(path, &cfg));
    cfg.lora = peft;
    RT_TRY(glm_model_init(&cfg, be, tp, B, T, 7, &m));
    RT_TRY(glm_model_load_dir(m, base_path, NULL, 0));
    if (adapter) RT_TRY(ckpt_peft_load_weights(adapter, &ckpt_map_glm, glm_model_params(m), tp->rank, tp->size, NULL));
    *out = m;
    return RT_OK;
fail:
    glm_model_free(m);
    return st;
}

static void glm_free(void *m) { glm_model_free(m); }
static rt_params *glm_params(void *m) { return glm_model_params(m); }

/* The logits of the weights as they are, then the LM loss (and its gradients). */
static rt_status glm_golden_step(void *model, bool train, int64_t step, float *logits, float *loss) {
    rt_status st = RT_OK;
    glm_model *m = model;
    mdl_pass pass = {.seed = 1, .step = step, .training = train};
    double loss_sum = 0;
    int n = 0;
    if (logits) RT_TRY(glm_logits(m, &gb.in, logits, NULL));
    if (train) rt_params_zero_grad(glm_model_params(m));
    RT_TRY(glm_lm_step(m, &gb.in, gb.labels, &pass, train ? 1.0f / (float)gb.n_targets : 0.0f, &loss_sum, &n));
    if (n != gb.n_targets) RT_FAIL(RT_ERR_FORMAT, "%d targets counted, %d labelled", n, gb.n_targets);
    *loss = (float)(loss_sum / gb.n_targets);
fail:
    return st;
}

int main(void) {
    tzlf_family f = {.name = "glm",
                     .map = &ckpt_map_glm,
                     .n_logits = (size_t)B * T * V,
                     .n_adapters = 2 * 4 * LAYERS,
                     .n_heads = 4,
                     .vocab = V,
                     .load = glm_load,
                     .free = glm_free,
                     .params = glm_params,
                     .step = glm_golden_step};
    snprintf(base_path, sizeof base_path, "%s", tz_source_path("tests/golden/glm-tiny"));
    snprintf(f.dir, sizeof f.dir, "%s", tz_source_path("tests/golden/glm-tiny-lora"));
    char adapter[4200];
    snprintf(adapter, sizeof adapter, "%s/adapter", f.dir);
    load_batch(f.dir);
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 2, &be));
    ckpt_peft_config peft;
    TZ_EXPECT_OK(ckpt_peft_config_read(adapter, &peft));
    if (!be) return tz_test_result("test_golden_lora_glm");
    tzlf_against_peft(&f, be, &peft);
    tzlf_bf16(&f, be, &peft);
    tzlf_tp(&f, &peft);
    tzlf_round_trip(&f, be, &peft);
    tzlf_loads_in_peft(&f, be);
    ckpt_peft_config_free(&peft);
    rt_backend_free(be);
    return tz_test_result("test_golden_lora_glm");
}
