/* GPT-2 against Hugging Face Transformers: a tiny random GPT2ForSequenceClassification saved
 * by scripts/golden/gen_gpt2_golden.py (versions in the files' metadata) must give HF's
 * logits, loss, every parameter gradient, the weights after one AdamW step and the losses
 * and gradient norms of 5 clipped training steps; and the real HF file
 * tests/data/tiny-gpt2 must give HF's LM logits. Tolerances are DESIGN.md's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_weights.h"
#include "checkpoints/ckpt_safetensors.h"
#include "models/gpt2.h"
#include "runtime/rt_optim.h"
#include "tests/testutil.h"

#define FWD_ATOL 1e-5f
#define FWD_RTOL 1e-4f
#define GRAD_ATOL 1e-4f
#define GRAD_RTOL 1e-3f

static void read_i32(const ckpt_st_file *f, const char *name, int32_t *dst, size_t n) {
    ckpt_st_tensor t;
    TZ_EXPECT_OK(ckpt_safetensors_find(f, name, &t));
    TZ_EXPECT(t.dtype == RT_I32 && t.numel == n, "%s: dtype %d numel %zu", name, (int)t.dtype, t.numel);
    if (t.dtype == RT_I32 && t.numel == n) memcpy(dst, t.data, n * sizeof(int32_t));
}

/* Compares every parameter (grads or weights, as `prefix`) with the golden file, undoing
 * HF's Conv1D [in, out] layout. */
static void compare_params(const ckpt_st_file *f, const ckpt_st_file *grad_file, const char *prefix, rt_params *p,
                           int use_grad, float atol, float rtol) {
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        char name[256];
        snprintf(name, sizeof name, "%s%s%s", prefix, strcmp(s->name, "score.weight") ? "transformer." : "", s->name);
        /* the embedding's vocab is padded (to a multiple of 128 rows): HF has the real rows */
        ckpt_st_tensor t;
        TZ_EXPECT_OK(ckpt_safetensors_find(f, name, &t));
        size_t n = strcmp(s->name, "wte.weight") == 0 && t.numel < s->numel ? t.numel : s->numel;
        float *ref = rt_xmalloc(n * sizeof(float));
        float *got = rt_xmalloc(n * sizeof(float));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, name, ref, n));
        memcpy(got, (use_grad ? p->grad : p->param) + s->offset, n * sizeof(float));
        long nums[CKPT_MAP_MAX_NUMS];
        int n_nums;
        if (ckpt_map_find_ours(&ckpt_map_gpt2, s->name, nums, &n_nums)->layout == CKPT_LAYOUT_TRANSPOSE) { /* ours [out, in] -> HF [in, out] */
            size_t rows = (size_t)s->shape[0], cols = (size_t)s->shape[1];
            float *tr = rt_xmalloc(s->numel * sizeof(float));
            for (size_t r = 0; r < rows; r++)
                for (size_t c = 0; c < cols; c++) tr[c * rows + r] = got[r * cols + c];
            free(got);
            got = tr;
        }
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
    TZ_EXPECT_OK(ckpt_load_hf(path, &ckpt_map_gpt2, gpt2_model_params(m), cfg.vocab_size, cfg.n_head, 0, 1, NULL, &rep));
    TZ_EXPECT(rep.missing == 0 && rep.unused == 0, "loaded %d, missing %d (%s), unused %d", rep.loaded, rep.missing,
              rep.first_missing, rep.unused);
    return m;
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

    enum { B = 3, T = 16 };
    int32_t ids[B * T], mask[B * T], labels[B], lengths[B], index[B] = {0, 1, 2};
    read_i32(g, "input_ids", ids, B * T);
    read_i32(g, "attention_mask", mask, B * T);
    read_i32(g, "labels", labels, B);
    for (int b = 0; b < B; b++) {
        lengths[b] = 0;
        for (int t = 0; t < T; t++) lengths[b] += mask[b * T + t];
    }
    rt_batch batch = {.B = B, .T = T, .input_ids = ids, .attention_mask = mask, .lengths = lengths, .labels = labels,
                      .example_index = index, .n_targets = B, .n_tokens = 0};

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
        TZ_EXPECT_OK(rt_adamw_step(p, &hp, rt_clip_coef(norm, 1.0), s + 1));
    }
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "losses5", ref_losses, 5));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "gradnorm5", ref_norms, 5));
    tz_check_close("losses5", losses, ref_losses, 5, FWD_ATOL, FWD_RTOL);
    tz_check_close("gradnorm5", norms, ref_norms, 5, GRAD_ATOL, GRAD_RTOL);
    gpt2_model_free(m);
    ckpt_safetensors_close(g);
    ckpt_safetensors_close(after);
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
    test_tiny_gpt2_lm(be);
    rt_backend_free(be);
    return tz_test_result("test_golden_gpt2");
}
