/* GPT-2 against Hugging Face Transformers: a tiny random GPT2ForSequenceClassification saved
 * by scripts/golden/gen_gpt2_golden.py (versions in the files' metadata) must give HF's
 * logits, loss, every parameter gradient, the weights after one AdamW step and the losses
 * and gradient norms of 5 clipped training steps; the same config as GPT2LMHeadModel must give
 * HF's language-model loss, logits and gradients (test_tiny_lm), also at tp = 2, and HF's greedy
 * generation (gpt2_generate with a KV cache; top-k 1 and a tiny top-p are greedy, sampling
 * repeats under its seed); and the real HF file
 * tests/data/tiny-gpt2 must give HF's LM logits. Tolerances: docs/architecture.md.
 *
 * bf16 (test_tiny_cls_bf16): the same model and batch at rt_set_precision(be, RT_BF16) against
 * PyTorch's CPU bf16 autocast (tests/golden/gpt2-tiny-cls/bf16_autocast.safetensors,
 * scripts/golden/gen_bf16_autocast_golden.py, torch 1.13 / transformers 4.46.3). Band (testutil.h,
 * tz_check_bf16_band), with d the relative L2 distance over ||HF fp32||: d_ours = d(ours bf16, HF
 * autocast) <= 3 d_ref + 2^-8 where d_ref = d(HF fp32, HF autocast), and d_round = d(ours bf16,
 * ours fp32) >= d_ref / 4 (tensors only).
 * Measured (d_ref / d_ours / d_round):
 *   logits 0.00364 / 0.00486 / 0.00161; loss 2.4e-4 / 2.4e-4 / 7.5e-6
 *   grad wpe 0.00394 / 0.00482 / 0.00567; h.0.ln_1.weight 0.00495 / 0.0065 / 0.00682
 *   grad h.0.attn.c_attn.bias 0.00589 / 0.00863 / 0.00828; h.0.attn.c_proj.weight 0.00627 / 0.00781 / 0.00756
 *   grad h.1.mlp.c_fc.bias 0.00738 / 0.00741 / 0.00544; ln_f.weight 0.0035 / 0.00522 / 0.00521
 *   grad score.weight 0.00391 / 0.00614 / 0.00573
 * Ours moves up to 2.3x as far from fp32 as autocast does: it stores the residual stream and every
 * activation gradient in bf16, autocast keeps residual sums and its fp32-listed ops in fp32.
 * Mutations: forgetting rt_set_precision fails every tensor's d_round check, RT_F16 instead of
 * RT_BF16 nearly all; weights moved by an AdamW step of lr 3e-5 before the bf16 run fail bands in
 * every family, of lr 1e-3 every band. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_weights.h"
#include "checkpoints/ckpt_safetensors.h"
#include "checkpoints/ckpt_tp.h"
#include "models/gpt2/gpt2.h"
#include "runtime/train/rt_optim.h"
#include "tests/testutil.h"

#define FWD_ATOL 1e-5f
#define FWD_RTOL 1e-4f
#define GRAD_ATOL 1e-4f
#define GRAD_RTOL 1e-3f

/* n int32s of tensor `name` into dst: a status and no checks, so rank threads can call it (checks
 * belong on the main thread). */
static rt_status read_ids(const ckpt_st_file *f, const char *name, int32_t *dst, size_t n) {
    ckpt_st_tensor t;
    rt_status st = ckpt_safetensors_find(f, name, &t);
    if (st == RT_OK && (t.dtype != RT_I32 || t.numel != n))
        st = rt_errorf(RT_ERR_FORMAT, "%s: not %zu int32s", name, n);
    if (st == RT_OK) memcpy(dst, t.data, n * sizeof(int32_t));
    return st;
}

static void read_i32(const ckpt_st_file *f, const char *name, int32_t *dst, size_t n) {
    TZ_EXPECT_OK(read_ids(f, name, dst, n));
}

/* The HF name of parameter s (after `prefix`). */
static void hf_name(const rt_param_spec *s, const char *prefix, char *name, size_t size) {
    snprintf(name, size, "%s%s%s", prefix, strcmp(s->name, "score.weight") ? "transformer." : "", s->name);
}

/* The first n values of parameter s in `slab` (the params or grads, or a copy of them), in HF's
 * layout: Conv1D weights back to [in, out]. Freed by the caller. */
static float *hf_layout(const rt_param_spec *s, const float *slab, size_t n) {
    float *got = rt_xmalloc(n * sizeof(float));
    memcpy(got, slab + s->offset, n * sizeof(float));
    long nums[CKPT_MAP_MAX_NUMS];
    int n_nums;
    if (ckpt_map_find_ours(&ckpt_map_gpt2, s->name, nums, &n_nums)->layout ==
        CKPT_LAYOUT_TRANSPOSE) { /* ours [out, in] -> HF [in, out] */
        size_t rows = (size_t)s->shape[0], cols = (size_t)s->shape[1];
        float *tr = rt_xmalloc(s->numel * sizeof(float));
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++) tr[c * rows + r] = got[r * cols + c];
        free(got);
        got = tr;
    }
    return got;
}

/* Compares every parameter (grads or weights, as `prefix`) with the golden file, undoing
 * HF's Conv1D [in, out] layout. */
static void compare_params(const ckpt_st_file *f, const ckpt_st_file *grad_file, const char *prefix, rt_params *p,
                           int use_grad, float atol, float rtol) {
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        char name[256];
        hf_name(s, prefix, name, sizeof name);
        /* the embedding's vocab is padded (to a multiple of 128 rows): HF has the real rows */
        ckpt_st_tensor t;
        TZ_EXPECT_OK(ckpt_safetensors_find(f, name, &t));
        size_t n = strcmp(s->name, "wte.weight") == 0 && t.numel < s->numel ? t.numel : s->numel;
        float *ref = rt_xmalloc(n * sizeof(float));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, name, ref, n));
        float *got = hf_layout(s, use_grad ? p->grad : p->param, n);
        if (!use_grad) { /* got, ref and the gradient are all in HF's layout here */
            char gname[256];
            snprintf(gname, sizeof gname, "grad.%s", name + strlen(prefix));
            float *g = rt_xmalloc(n * sizeof(float));
            TZ_EXPECT_OK(ckpt_safetensors_read_f32(grad_file, gname, g, n));
            tz_check_after_adamw(name, got, ref, g, n, atol, rtol);
            free(g);
        } else {
            tz_check_close(name, got, ref, n, atol, rtol);
        }
        free(ref);
        free(got);
    }
}

static gpt2_model *load_tiny_cls(rt_backend *be, const char *dir) {
    char path[4096];
    gpt2_config cfg;
    gpt2_model *m = NULL;
    ckpt_load_report rep;
    snprintf(path, sizeof path, "%s/config.json", dir);
    TZ_EXPECT_OK(gpt2_config_load(path, &cfg));
    TZ_EXPECT(cfg.n_layer == 2 && cfg.n_embd == 64 && cfg.pad_token_id == 999, "config fields");
    TZ_EXPECT_OK(gpt2_model_init(&cfg, be, rt_comm_self(), 3, 16, 7, &m));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    TZ_EXPECT_OK(
        ckpt_load_hf(path, &ckpt_map_gpt2, gpt2_model_params(m), cfg.vocab_size, cfg.n_head, 0, 1, NULL, &rep));
    TZ_EXPECT(rep.missing == 0 && rep.unused == 0, "loaded %d, missing %d (%s), unused %d", rep.loaded, rep.missing,
              rep.first_missing, rep.unused);
    return m;
}

enum { B = 3, T = 16 };

typedef struct {
    int32_t ids[B * T], mask[B * T], labels[B], lengths[B], index[B];
    rt_batch batch;
} cls_batch;

static void load_batch(const ckpt_st_file *g, cls_batch *cb) {
    memset(cb, 0, sizeof *cb);
    read_i32(g, "input_ids", cb->ids, B * T);
    read_i32(g, "attention_mask", cb->mask, B * T);
    read_i32(g, "labels", cb->labels, B);
    for (int b = 0; b < B; b++) {
        cb->index[b] = b;
        for (int t = 0; t < T; t++) cb->lengths[b] += cb->mask[b * T + t];
    }
    cb->batch = (rt_batch){.B = B,
                           .T = T,
                           .input_ids = cb->ids,
                           .attention_mask = cb->mask,
                           .lengths = cb->lengths,
                           .labels = cb->labels,
                           .example_index = cb->index,
                           .n_targets = B,
                           .n_tokens = 0};
}

static void test_tiny_cls(rt_backend *be) {
    const char *dir = tz_source_path("tests/golden/gpt2-tiny-cls");
    char path[4096];
    ckpt_st_file *g = NULL, *after = NULL;
    snprintf(path, sizeof path, "%s/golden.safetensors", dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    snprintf(path, sizeof path, "%s/after_step.safetensors", dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &after));
    if (!g || !after) return;

    cls_batch cb;
    load_batch(g, &cb);
    rt_batch batch = cb.batch;

    /* forward, loss, gradients */
    gpt2_model *m = load_tiny_cls(be, dir);
    if (!m) return;
    rt_params *p = gpt2_model_params(m);
    mdl_pass pass = {.seed = 1, .step = 0, .micro = 0, .training = true};
    float logits[B * 2], ref_logits[B * 2], ref_loss;
    double loss_sum = 0;
    rt_params_zero_grad(p);
    TZ_EXPECT_OK(gpt2_cls_step(m, &batch, &pass, 1.0f / B, &loss_sum, logits));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "logits", ref_logits, B * 2));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "loss", &ref_loss, 1));
    tz_check_close("logits", logits, ref_logits, B * 2, FWD_ATOL, FWD_RTOL);
    float loss = (float)(loss_sum / B);
    tz_check_close("loss", &loss, &ref_loss, 1, FWD_ATOL, FWD_RTOL);
    compare_params(g, g, "grad.", p, 1, GRAD_ATOL, GRAD_RTOL);

    /* one AdamW step, no clipping */
    rt_adamw_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    TZ_EXPECT_OK(rt_adamw_step(p, &hp, 1.0f, 1));
    compare_params(after, g, "after_step.", p, 0, FWD_ATOL, FWD_RTOL);
    gpt2_model_free(m);

    /* five clipped steps from the initial weights */
    m = load_tiny_cls(be, dir);
    if (!m) return;
    p = gpt2_model_params(m);
    float losses[5], norms[5], ref_losses[5], ref_norms[5];
    for (int s = 0; s < 5; s++) {
        rt_params_zero_grad(p);
        pass.step = s;
        TZ_EXPECT_OK(gpt2_cls_step(m, &batch, &pass, 1.0f / B, &loss_sum, NULL));
        losses[s] = (float)(loss_sum / B);
        double norm = rt_grad_norm(p);
        norms[s] = (float)norm;
        TZ_EXPECT_OK(rt_adamw_step(p, &hp, rt_clip_factor(norm, 1.0), s + 1));
    }
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "losses5", ref_losses, 5));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "gradnorm5", ref_norms, 5));
    tz_check_close("losses5", losses, ref_losses, 5, FWD_ATOL, FWD_RTOL);
    tz_check_close("gradnorm5", norms, ref_norms, 5, GRAD_ATOL, GRAD_RTOL);
    gpt2_model_free(m);
    ckpt_safetensors_close(g);
    ckpt_safetensors_close(after);
}

/* bf16 against PyTorch's CPU bf16 autocast on the same model and batch (bf16_autocast.safetensors,
 * the band of testutil.h's tz_check_bf16_band; the figures are at the top of this file): the
 * logits, the loss and every gradient the file holds, each run at fp32 and at bf16. */
static void test_tiny_cls_bf16(rt_backend *be) {
    const char *dir = tz_source_path("tests/golden/gpt2-tiny-cls");
    char path[4096];
    ckpt_st_file *g = NULL, *a = NULL;
    snprintf(path, sizeof path, "%s/golden.safetensors", dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    snprintf(path, sizeof path, "%s/bf16_autocast.safetensors", dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &a));
    gpt2_model *m = g && a ? load_tiny_cls(be, dir) : NULL;
    if (!m) goto done;
    cls_batch cb;
    load_batch(g, &cb);
    rt_params *p = gpt2_model_params(m);
    mdl_pass pass = {.seed = 1, .step = 0, .micro = 0, .training = true};
    float logits[2][B * 2], loss[2], *grads[2];
    for (int k = 0; k < 2; k++) { /* 0: fp32, 1: bf16 */
        double loss_sum = 0;
        TZ_EXPECT_OK(rt_set_precision(be, k ? RT_BF16 : RT_F32));
        rt_params_zero_grad(p);
        TZ_EXPECT_OK(gpt2_cls_step(m, &cb.batch, &pass, 1.0f / B, &loss_sum, logits[k]));
        loss[k] = (float)(loss_sum / B);
        grads[k] = rt_xmalloc(p->numel * sizeof(float));
        memcpy(grads[k], p->grad, p->numel * sizeof(float));
    }
    TZ_EXPECT_OK(rt_set_precision(be, RT_F32));
    tz_check_bf16_golden(g, a, "gpt2 ", "logits", logits[1], logits[0], B * 2);
    tz_check_bf16_golden(g, a, "gpt2 ", "loss", &loss[1], &loss[0], 1);
    int compared = 0;
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        char name[256];
        ckpt_st_tensor t;
        hf_name(s, "grad.", name, sizeof name);
        if (!ckpt_safetensors_has(a, name)) continue;
        TZ_EXPECT_OK(ckpt_safetensors_find(a, name, &t));
        float *o32 = hf_layout(s, grads[0], t.numel), *o16 = hf_layout(s, grads[1], t.numel);
        tz_check_bf16_golden(g, a, "gpt2 ", name, o16, o32, t.numel);
        compared++;
        free(o32), free(o16);
    }
    TZ_EXPECT(compared > 0 && compared == tz_count_prefixed(a, "grad."), "compared %d of the %d gradients in %s",
              compared, tz_count_prefixed(a, "grad."), path);
    free(grads[0]), free(grads[1]);
done:
    gpt2_model_free(m);
    ckpt_safetensors_close(g);
    ckpt_safetensors_close(a);
}

/* The tiny config as GPT2LMHeadModel (tests/golden/gpt2-tiny-lm): gpt2_lm_step on the padded
 * batch with HF's labels (-100 on padding) gives HF's loss and every parameter gradient (wte's
 * from the embedding and the tied head together), and gpt2_lm_logits HF's logits at the real
 * positions (padded ones see padding keys: the function has no mask). Built as a language model
 * (num_labels 0), it has exactly the checkpoint's parameters. */
static void test_tiny_lm(rt_backend *be) {
    char path[4096];
    gpt2_config cfg;
    gpt2_model *m = NULL;
    ckpt_st_file *g = NULL;
    ckpt_load_report rep = {0};
    TZ_EXPECT_OK(gpt2_config_load(tz_source_path("tests/golden/gpt2-tiny-lm/config.json"), &cfg));
    cfg.num_labels = 0; /* the language model: no score head, the head's rows */
    TZ_EXPECT_OK(gpt2_model_init(&cfg, be, rt_comm_self(), B, T, 7, &m));
    snprintf(path, sizeof path, "%s", tz_source_path("tests/golden/gpt2-tiny-lm/model.safetensors"));
    if (m)
        TZ_EXPECT_OK(
            ckpt_load_hf(path, &ckpt_map_gpt2, gpt2_model_params(m), cfg.vocab_size, cfg.n_head, 0, 1, NULL, &rep));
    TZ_EXPECT(rep.missing == 0 && rep.unused == 0, "missing %d (%s), unused %d", rep.missing, rep.first_missing,
              rep.unused);
    TZ_EXPECT_OK(ckpt_safetensors_open(tz_source_path("tests/golden/gpt2-tiny-lm/golden.safetensors"), &g));
    if (!m || !g) goto done;
    int32_t ids[B * T], mask[B * T], labels[B * T];
    read_i32(g, "input_ids", ids, B * T);
    read_i32(g, "attention_mask", mask, B * T);
    read_i32(g, "labels", labels, B * T);
    int32_t shifted[B * T];
    gpt2_lm_shift_labels(labels, B, T, shifted);
    int want = 0;
    for (int i = 0; i < B * T; i++) want += shifted[i] != -100;
    rt_params *p = gpt2_model_params(m);
    rt_clear(be, p->grad, p->numel * sizeof(float));
    mdl_pass pass = {.seed = 1, .training = true};
    double loss_sum = 0;
    int n = 0;
    TZ_EXPECT_OK(gpt2_lm_step(m, ids, mask, labels, B, T, &pass, 1.0f / (float)want, &loss_sum, &n));
    float loss = n ? (float)(loss_sum / n) : NAN, ref_loss;
    TZ_EXPECT(n == want && n == 31, "predicted %d tokens, expected %d (31: 15 + 10 + 6)", n, want);
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "loss", &ref_loss, 1));
    tz_check_close("LM loss", &loss, &ref_loss, 1, FWD_ATOL, FWD_RTOL);
    compare_params(g, g, "grad.", p, 1, GRAD_ATOL, GRAD_RTOL);
    const size_t V = (size_t)cfg.vocab_size;
    float *logits = rt_xmalloc(B * T * V * sizeof(float)), *ref = rt_xmalloc(B * T * V * sizeof(float));
    TZ_EXPECT_OK(gpt2_lm_logits(m, ids, B, T, logits, NULL));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "logits", ref, B * T * V));
    for (int r = 0; r < B; r++) {
        int real = 0;
        for (int t = 0; t < T; t++) real += mask[r * T + t];
        char what[64];
        snprintf(what, sizeof what, "LM logits, row %d (%d real positions)", r, real);
        tz_check_close(what, logits + (size_t)r * T * V, ref + (size_t)r * T * V, (size_t)real * V, FWD_ATOL, FWD_RTOL);
    }
    free(logits);
    free(ref);
    /* generation: greedy is HF's generate(do_sample=False), token for token and logit for logit at
     * every step; a top-k of 1 and a tiny top-p are greedy too; a sampled run repeats under its
     * seed */
    int32_t prompt[5], want_gen[8], got[8], again[8];
    int n_got = 0, n_again = 0;
    read_i32(g, "gen_prompt", prompt, 5);
    read_i32(g, "gen_greedy", want_gen, 8);
    gpt2_sample_opts so = {
        .max_new_tokens = 8, .temperature = 0, .top_k = 0, .top_p = 1, .seed = 3, .eos_token_id = cfg.eos_token_id};
    float *steps = rt_xmalloc(8 * V * sizeof(float)), *ref_steps = rt_xmalloc(8 * V * sizeof(float));
    TZ_EXPECT_OK(gpt2_generate(m, prompt, 5, &so, got, &n_got, steps));
    TZ_EXPECT(n_got == 8 && memcmp(got, want_gen, sizeof want_gen) == 0, "greedy: %d tokens, first %d (HF %d)", n_got,
              got[0], want_gen[0]);
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "gen_logits", ref_steps, 8 * V));
    tz_check_close("generation: each step's logits (KV cache)", steps, ref_steps, 8 * V, FWD_ATOL, FWD_RTOL);
    free(steps);
    free(ref_steps);
    gpt2_sample_opts top1 = so, tiny_p = so, hot = so;
    top1.temperature = 1, top1.top_k = 1;
    tiny_p.temperature = 0.7f, tiny_p.top_p = 1e-6f;
    hot.temperature = 1.5f, hot.top_k = 0;
    TZ_EXPECT_OK(gpt2_generate(m, prompt, 5, &top1, again, &n_again, NULL));
    TZ_EXPECT(n_again == 8 && memcmp(again, want_gen, sizeof want_gen) == 0, "top-k 1 is not greedy");
    TZ_EXPECT_OK(gpt2_generate(m, prompt, 5, &tiny_p, again, &n_again, NULL));
    TZ_EXPECT(n_again == 8 && memcmp(again, want_gen, sizeof want_gen) == 0, "top-p 1e-6 is not greedy");
    TZ_EXPECT_OK(gpt2_generate(m, prompt, 5, &hot, got, &n_got, NULL));
    TZ_EXPECT_OK(gpt2_generate(m, prompt, 5, &hot, again, &n_again, NULL));
    TZ_EXPECT(n_got == n_again && memcmp(got, again, (size_t)n_got * sizeof *got) == 0, "sampling does not repeat");
    TZ_EXPECT(n_got != 8 || memcmp(got, want_gen, sizeof want_gen) != 0, "temperature 1.5 sampled the greedy tokens");
    so.max_new_tokens = 12; /* 5 + 12 > the 16 positions the model was sized for */
    TZ_EXPECT(gpt2_generate(m, prompt, 5, &so, got, &n_got, NULL) == RT_ERR_USAGE, "generation past max_T");
done:
    ckpt_safetensors_close(g);
    gpt2_model_free(m);
}

/* tp = 2 (two threads over the threads communicator, HF weights sharded on load): the language
 * model's loss and its wte and c_attn gradients, gathered, are HF's. */
typedef struct {
    float loss;
    float *grad_wte, *grad_attn; /* rank 0: full, HF's [in, out] for c_attn */
    size_t n_wte, n_attn;
} lm_tp_result;

static rt_status lm_tp_rank(rt_comm *tp, void *arg) {
    lm_tp_result *res = tp->rank == 0 ? arg : NULL;
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    gpt2_model *m = NULL;
    ckpt_st_file *g = NULL;
    ckpt_tp_scratch scr = {0};
    gpt2_config cfg;
    ckpt_load_report rep;
    RT_TRY(rt_backend_init("cpu", 1, &be));
    RT_TRY(gpt2_config_load(tz_source_path("tests/golden/gpt2-tiny-lm/config.json"), &cfg));
    cfg.num_labels = 0;
    RT_TRY(gpt2_model_init(&cfg, be, tp, B, T, 7, &m));
    RT_TRY(ckpt_load_hf(tz_source_path("tests/golden/gpt2-tiny-lm/model.safetensors"), &ckpt_map_gpt2,
                        gpt2_model_params(m), cfg.vocab_size, cfg.n_head, tp->rank, tp->size, NULL, &rep));
    RT_TRY(ckpt_safetensors_open(tz_source_path("tests/golden/gpt2-tiny-lm/golden.safetensors"), &g));
    int32_t ids[B * T], mask[B * T], labels[B * T];
    RT_TRY(read_ids(g, "input_ids", ids, B * T));
    RT_TRY(read_ids(g, "attention_mask", mask, B * T));
    RT_TRY(read_ids(g, "labels", labels, B * T));
    rt_params *p = gpt2_model_params(m);
    mdl_pass pass = {.seed = 1, .training = true};
    double loss_sum = 0;
    int n = 0;
    RT_TRY(gpt2_lm_step(m, ids, mask, labels, B, T, &pass, 1.0f / 31, &loss_sum, &n));
    if (res) res->loss = (float)(loss_sum / n);
    for (int i = 0; i < p->n; i++) {
        const bool wte = strcmp(p->specs[i].name, "wte.weight") == 0,
                   attn = strcmp(p->specs[i].name, "h.0.attn.c_attn.weight") == 0;
        if (!wte && !attn) continue;
        ckpt_tp_desc d;
        ckpt_tp_param_desc(&p->specs[i], cfg.vocab_size, tp->rank, tp->size, &d);
        const size_t full_n = ckpt_tp_full_numel(&d);
        float *full = res ? rt_xmalloc(full_n * sizeof(float)) : NULL;
        RT_TRY(ckpt_tp_gather_param(be, tp, &d, p->grad + p->specs[i].offset, p->specs[i].numel, &scr, full));
        if (res && wte) res->grad_wte = full, res->n_wte = full_n;
        if (res && attn) res->grad_attn = full, res->n_attn = full_n;
    }
fail:
    ckpt_safetensors_close(g);
    ckpt_tp_scratch_free(be, &scr);
    gpt2_model_free(m);
    rt_backend_free(be);
    return st;
}

static void test_tiny_lm_tp2(void) {
    lm_tp_result res[2] = {{0}};
    ckpt_st_file *g = NULL;
    TZ_EXPECT_OK(tz_run_ranks(2, 60.0, lm_tp_rank, res, sizeof res[0]));
    TZ_EXPECT_OK(ckpt_safetensors_open(tz_source_path("tests/golden/gpt2-tiny-lm/golden.safetensors"), &g));
    TZ_EXPECT(res[0].grad_wte && res[0].grad_attn, "tp=2: rank 0 gathered no gradients");
    if (g && res[0].grad_wte && res[0].grad_attn) {
        float ref_loss;
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "loss", &ref_loss, 1));
        tz_check_close("tp=2 LM loss", &res[0].loss, &ref_loss, 1, FWD_ATOL, FWD_RTOL);
        float *ref = rt_xmalloc(res[0].n_wte * sizeof(float));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "grad.transformer.wte.weight", ref, res[0].n_wte));
        tz_check_close("tp=2 grad wte", res[0].grad_wte, ref, res[0].n_wte, GRAD_ATOL, GRAD_RTOL);
        free(ref);
        /* ours [out, in] -> HF's Conv1D [in, out] */
        const size_t in = 64, out = res[0].n_attn / 64;
        float *hf = rt_xmalloc(res[0].n_attn * sizeof(float)), *got = rt_xmalloc(res[0].n_attn * sizeof(float));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "grad.transformer.h.0.attn.c_attn.weight", hf, res[0].n_attn));
        for (size_t r = 0; r < out; r++)
            for (size_t c = 0; c < in; c++) got[c * out + r] = res[0].grad_attn[r * in + c];
        tz_check_close("tp=2 grad h.0.attn.c_attn.weight", got, hf, res[0].n_attn, GRAD_ATOL, GRAD_RTOL);
        free(hf);
        free(got);
    }
    free(res[0].grad_wte);
    free(res[0].grad_attn);
    ckpt_safetensors_close(g);
}

/* The real HF file: a GPT2LMHeadModel with n_embd 2 and the full 50257 vocab. */
static void test_tiny_gpt2_lm(rt_backend *be) {
    gpt2_config cfg;
    gpt2_model *m = NULL;
    ckpt_st_file *g = NULL;
    ckpt_load_report rep = {0};
    rt_status st = gpt2_config_load(tz_data_path("tiny-gpt2/config.json"), &cfg);
    TZ_EXPECT(st == RT_OK, "tiny-gpt2 config: %s", rt_error_message());
    if (st != RT_OK) return;
    TZ_EXPECT_OK(gpt2_model_init(&cfg, be, rt_comm_self(), 1, 5, 7, &m));
    if (!m) return;
    st = ckpt_load_hf(tz_data_path("tiny-gpt2/model.safetensors"), &ckpt_map_gpt2, gpt2_model_params(m), cfg.vocab_size,
                      cfg.n_head, 0, 1, NULL, &rep);
    TZ_EXPECT(st == RT_OK, "tiny-gpt2 weights: %s", rt_error_message());
    /* an LM checkpoint has no score head: exactly that one is left at its init */
    TZ_EXPECT(st == RT_OK && rep.missing == 1 && strcmp(rep.first_missing, "score.weight") == 0, "missing %d (%s)",
              rep.missing, rep.first_missing);
    if (st != RT_OK) {
        gpt2_model_free(m);
        return;
    }
    TZ_EXPECT_OK(ckpt_safetensors_open(tz_source_path("tests/golden/tiny-gpt2-logits.safetensors"), &g));
    if (g) {
        int32_t ids[5];
        size_t V = (size_t)cfg.vocab_size;
        float *logits = rt_xmalloc(5 * V * sizeof(float)), *ref = rt_xmalloc(5 * V * sizeof(float));
        float hidden[10], ref_hidden[10];
        read_i32(g, "input_ids", ids, 5);
        TZ_EXPECT_OK(gpt2_lm_logits(m, ids, 1, 5, logits, hidden));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "logits", ref, 5 * V));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "hidden", ref_hidden, 10));
        tz_check_close("tiny-gpt2 hidden", hidden, ref_hidden, 10, FWD_ATOL, FWD_RTOL);
        tz_check_close("tiny-gpt2 logits", logits, ref, 5 * V, FWD_ATOL, FWD_RTOL);
        free(logits);
        free(ref);
    }
    ckpt_safetensors_close(g);
    gpt2_model_free(m);
}

int main(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 2, &be));
    if (!be) return tz_test_result("test_golden_gpt2");
    test_tiny_cls(be);
    test_tiny_cls_bf16(be);
    test_tiny_gpt2_lm(be);
    test_tiny_lm(be);
    test_tiny_lm_tp2();
    rt_backend_free(be);
    return tz_test_result("test_golden_gpt2");
}
