/* LoRA on T5 against HF PEFT (issue 36): the tiny T5 v1.1 of tests/golden/t5-tiny-v1_1 (gated,
 * its own LM head) as the base, with the PEFT folder tests/golden/t5-tiny-lora/adapter (r 4,
 * alpha 8, on q, k, v, o, wi_0, wi_1 and wo: every linear of a block, the decoder's
 * cross-attention included; SEQ_2_SEQ_LM, so nothing else trains; random A and B) loaded over it.
 * tests/lora_family.h's checks (scripts/golden/gen_lora_golden.py --family t5): PEFT's logits,
 * loss, adapter gradients, AdamW steps and merged model; bf16 against PEFT under autocast; tp 2
 * and 4; the folder both ways. Also: greedy generation (the cross-attention's keys and values
 * computed once, a self-attention cache, both through the adapters) gives at each step the full
 * forward's logits at that position. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_peft.h"
#include "checkpoints/ckpt_peft_weights.h"
#include "checkpoints/ckpt_safetensors.h"
#include "models/t5/t5.h"
#include "models/t5/t5_generate.h"
#include "tests/lora_family.h"
#include "tests/loratest.h"
#include "tests/testutil.h"

enum { B = 3, S = 12, T = 7, V = 100, LAYERS = 2 };

static char base_path[4096];

/* The golden batch: decoder inputs are HF's shift of the labels, as PEFT's run had them. */
static struct {
    int32_t ids[B * S], mask[B * S], labels[B * T];
    t5_batch batch;
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
    ckpt_st_file *g = NULL;
    snprintf(path, sizeof path, "%s/golden.safetensors", lora_dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    if (!g) return;
    read_i32(g, "input_ids", gb.ids, B * S);
    read_i32(g, "attention_mask", gb.mask, B * S);
    read_i32(g, "labels", gb.labels, B * T);
    ckpt_safetensors_close(g);
    for (int i = 0; i < B * T; i++) gb.n_targets += gb.labels[i] != -100;
    gb.batch = (t5_batch){.B = B, .S = S, .T = T, .src_ids = gb.ids, .src_mask = gb.mask, .labels = gb.labels};
}

static rt_status t5_load(rt_backend *be, rt_comm *tp, const ckpt_peft_config *peft, const char *adapter, void **out) {
    rt_status st = RT_OK;
    char weights[4096], report[256];
    t5_config cfg;
    t5_model *m = NULL;
    *out = NULL;
    RT_TRY(t5_config_from_hf(base_path, &cfg, weights, sizeof weights));
    cfg.lora = peft;
    RT_TRY(t5_model_init(&cfg, be, tp, B, S, T, 7, &m));
    RT_TRY(t5_load_hf(m, weights, report, sizeof report));
    if (adapter) RT_TRY(ckpt_peft_load_weights(adapter, &ckpt_map_t5, t5_model_params(m), tp->rank, tp->size, NULL));
    *out = m;
    return RT_OK;
fail:
    t5_model_free(m);
    return st;
}

static void t5_free(void *m) { t5_model_free(m); }
static rt_params *t5_params(void *m) { return t5_model_params(m); }

static rt_status t5_golden_step(void *model, bool train, int64_t step, float *logits, float *loss) {
    t5_model *m = model;
    mdl_pass pass = {.seed = 1, .step = step, .training = train};
    double loss_sum = 0;
    int n = 0;
    if (train) rt_params_zero_grad(t5_model_params(m));
    rt_status st = t5_step(m, &gb.batch, &pass, train ? 1.0f / (float)gb.n_targets : 0.0f, &loss_sum, &n, logits);
    if (st == RT_OK && n != gb.n_targets)
        st = rt_errorf(RT_ERR_FORMAT, "%d targets counted, %d labelled", n, gb.n_targets);
    *loss = (float)(loss_sum / gb.n_targets);
    return st;
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
static void test_generate(const tzlf_family *f, rt_backend *be, const ckpt_peft_config *peft) {
    char adapter[4200];
    snprintf(adapter, sizeof adapter, "%s/adapter", f->dir);
    void *model = NULL;
    TZ_EXPECT_OK(t5_load(be, rt_comm_self(), peft, adapter, &model));
    t5_model *m = model;
    t5_generator *gen = NULL;
    if (m) TZ_EXPECT_OK(t5_generator_init(m, B, S, 1, NEW, &gen));
    if (!gen) {
        t5_model_free(m);
        return;
    }
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
    const t5_batch full_batch = {.B = B,
                                 .S = S,
                                 .T = NEW,
                                 .src_ids = gb.ids,
                                 .src_mask = gb.mask,
                                 .labels = labels,
                                 .decoder_input_ids = dec_in};
    const size_t n = (size_t)B * NEW * V;
    float *full = rt_xmalloc(n * sizeof(float)), *stepwise = rt_xmalloc(n * sizeof(float));
    const mdl_pass eval = {.seed = 1};
    double loss_sum;
    int n_targets;
    TZ_EXPECT_OK(t5_step(m, &full_batch, &eval, 0.0f, &loss_sum, &n_targets, full));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < NEW; t++)
            memcpy(stepwise + ((size_t)b * NEW + t) * V, rec->logits[t] + (size_t)b * V, V * sizeof(float));
    tz_check_close("t5 LoRA: decoding's logits vs the full forward's", stepwise, full, n, TZL_FWD_ATOL, TZL_FWD_RTOL);
    free(full), free(stepwise), free(rec);
    t5_generator_free(gen);
    t5_model_free(m);
}

int main(void) {
    /* adapters: an encoder block's q, k, v, o, wi_0, wi_1, wo; a decoder block's with its
     * cross-attention's q, k, v, o too; two tensors each */
    tzlf_family f = {.name = "t5",
                     .map = &ckpt_map_t5,
                     .n_logits = (size_t)B * T * V,
                     .n_adapters = 2 * (LAYERS * 7 + LAYERS * 11),
                     .n_heads = 4,
                     .vocab = V,
                     .load = t5_load,
                     .free = t5_free,
                     .params = t5_params,
                     .step = t5_golden_step};
    snprintf(base_path, sizeof base_path, "%s", tz_source_path("tests/golden/t5-tiny-v1_1"));
    snprintf(f.dir, sizeof f.dir, "%s", tz_source_path("tests/golden/t5-tiny-lora"));
    char adapter[4200];
    snprintf(adapter, sizeof adapter, "%s/adapter", f.dir);
    load_batch(f.dir);
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 2, &be));
    ckpt_peft_config peft;
    TZ_EXPECT_OK(ckpt_peft_config_read(adapter, &peft));
    if (!be) return tz_test_result("test_golden_lora_t5");
    tzlf_against_peft(&f, be, &peft);
    tzlf_bf16(&f, be, &peft);
    tzlf_tp(&f, &peft);
    tzlf_round_trip(&f, be, &peft);
    tzlf_loads_in_peft(&f, be);
    test_generate(&f, be, &peft);
    ckpt_peft_config_free(&peft);
    rt_backend_free(be);
    return tz_test_result("test_golden_lora_t5");
}
