/* BERT and RoBERTa against Hugging Face Transformers: tiny random Bert/Roberta
 * ForSequenceClassification models saved by scripts/golden/gen_bert_golden.py (versions in the
 * files' metadata), with a classification head (num_labels 2), a regression head (num_labels 1,
 * MSE) and a multi-label head (bert-tiny-ml: 3 classes, BCEWithLogitsLoss on multi-hot float
 * labels, HF's problem_type multi_label_classification), must give HF's logits, loss, every parameter gradient, the weights
 * after one AdamW step and the losses and gradient norms of 5 clipped training steps.
 * Tolerances: docs/architecture.md. Also: the HF export round-trips, a file with the old
 * LayerNorm.gamma/beta names and a cls.* pre-training head loads to the same weights, and
 * tp = 2 (two threads over the threads communicator, HF weights sharded on load) gives HF's
 * numbers, exports HF's file, and with dropout on draws tp = 1's masks.
 *
 * bf16 (test_golden_bf16): the same model and batch at rt_set_precision(be, RT_BF16) against
 * PyTorch's CPU bf16 autocast (tests/golden/bert-tiny-cls/bf16_autocast.safetensors,
 * scripts/golden/gen_bf16_autocast_golden.py, torch 1.13 / transformers 4.46.3). Band (testutil.h,
 * tz_check_bf16_band), with d the relative L2 distance over ||HF fp32||: d_ours = d(ours bf16, HF
 * autocast) <= 3 d_ref + 2^-8 where d_ref = d(HF fp32, HF autocast), and d_round = d(ours bf16,
 * ours fp32) >= d_ref / 4 (tensors only).
 * Measured (d_ref / d_ours / d_round):
 *   logits 0.00267 / 0.0043 / 0.00301; loss 4.8e-5 / 5.8e-5 / 1.0e-5
 *   grad embeddings.position_embeddings 0.00761 / 0.0179 / 0.0166 (the closest to its band, 0.0267)
 *   grad layer.0.attention.output.dense.weight 0.00774 / 0.0145 / 0.0129,
 *     its LayerNorm.weight 0.00518 / 0.0082 / 0.00898
 *   grad layer.1.intermediate.dense.bias 0.00689 / 0.00929 / 0.00756;
 *     pooler.dense.bias 0.00568 / 0.00558 / 0.00438
 *   grad classifier.weight 0.00476 / 0.00844 / 0.00834
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
#include "models/bert/bert.h"
#include "runtime/comm/rt_launch.h"
#include "runtime/train/rt_optim.h"
#include "tests/testutil.h"

#define FWD_ATOL 1e-5f
#define FWD_RTOL 1e-4f
#define GRAD_ATOL 1e-4f
#define GRAD_RTOL 1e-3f

enum { B = 3, T = 16, MAX_NL = 3 };

typedef struct {
    int32_t ids[B * T], mask[B * T], types[B * T], labels[B], lengths[B], index[B];
    float targets[B * MAX_NL];
    rt_batch batch;
} golden_batch;

static void read_i32(const ckpt_st_file *f, const char *name, int32_t *dst, size_t n) {
    ckpt_st_tensor t;
    TZ_EXPECT_OK(ckpt_safetensors_find(f, name, &t));
    TZ_EXPECT(t.dtype == RT_I32 && t.numel == n, "%s: dtype %d numel %zu", name, (int)t.dtype, t.numel);
    if (t.dtype == RT_I32 && t.numel == n) memcpy(dst, t.data, n * sizeof(int32_t));
}

static void load_batch(const ckpt_st_file *g, bool roberta, int num_labels, golden_batch *gb) {
    memset(gb, 0, sizeof *gb);
    read_i32(g, "input_ids", gb->ids, B * T);
    read_i32(g, "attention_mask", gb->mask, B * T);
    read_i32(g, "token_type_ids", gb->types, B * T);
    ckpt_st_tensor t;
    TZ_EXPECT_OK(ckpt_safetensors_find(g, "labels", &t));
    /* float labels: a regression score a row, or a multi-label row's 0/1 a class */
    const int width = t.dtype == RT_F32 ? (int)(t.numel / B) : 0;
    TZ_EXPECT(width == 0 || width == num_labels, "labels: %zu floats for %d rows of %d classes", t.numel, B,
              num_labels);
    if (width) {
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "labels", gb->targets, (size_t)B * (size_t)width));
        for (int b = 0; b < B; b++) gb->labels[b] = -100;
    } else {
        read_i32(g, "labels", gb->labels, B);
    }
    for (int b = 0; b < B; b++) {
        gb->index[b] = b;
        for (int t = 0; t < T; t++) gb->lengths[b] += gb->mask[b * T + t];
    }
    gb->batch = (rt_batch){.B = B,
                           .T = T,
                           .input_ids = gb->ids,
                           .attention_mask = gb->mask,
                           .lengths = gb->lengths,
                           .labels = gb->labels,
                           .targets = width ? gb->targets : NULL,
                           .target_width = width,
                           /* RoBERTa's generator passes no token types: all 0, as NULL means */
                           .token_type_ids = roberta ? NULL : gb->types,
                           .example_index = gb->index,
                           .n_targets = B};
}

/* The HF names of our parameter i (three for the fused QKV), prefixed with `prefix` and the
 * model's "bert."/"roberta." where HF has it. */
static int hf_names(const rt_param_spec *s, bool roberta, const char *prefix, char names[3][256]) {
    const char *model = strncmp(s->name, "classifier.", 11) == 0 ? "" : roberta ? "roberta." : "bert.";
    const char *at = strstr(s->name, ".attention.self.qkv.");
    if (!at) {
        snprintf(names[0], 256, "%s%s%s", prefix, model, s->name);
        return 1;
    }
    static const char *const parts[3] = {"query", "key", "value"};
    int head = (int)(at - s->name) + (int)strlen(".attention.self.");
    for (int k = 0; k < 3; k++)
        snprintf(names[k], 256, "%s%s%.*s%s%s", prefix, model, head, s->name, parts[k], s->name + head + 3);
    return 3;
}

/* Compares every parameter (grads or weights) with the golden file. The word embedding is
 * padded to 128 rows here; HF has the real ones. After the AdamW step, elements whose HF
 * gradient is at noise level (e.g. the key bias, whose exact gradient is 0) may move by any
 * amount in [-lr, lr] in either framework: those are checked against that bound (the same
 * rule as test_golden_gpt2.c). */
static void compare_params(const ckpt_st_file *f, const ckpt_st_file *grad_file, const char *prefix, rt_params *p,
                           bool roberta, int use_grad, float atol, float rtol) {
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        char names[3][256];
        int parts = hf_names(s, roberta, prefix, names);
        ckpt_st_tensor t;
        TZ_EXPECT_OK(ckpt_safetensors_find(f, names[0], &t));
        size_t part_n = s->tp == RT_TP_VOCAB ? t.numel : s->numel / (size_t)parts;
        const float *base = (use_grad ? p->grad : p->param) + s->offset;
        for (int k = 0; k < parts; k++) {
            float *ref = rt_xmalloc(part_n * sizeof(float)), *got = rt_xmalloc(part_n * sizeof(float));
            TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, names[k], ref, part_n));
            memcpy(got, base + (size_t)k * part_n, part_n * sizeof(float));
            if (!use_grad) {
                char gname[300];
                snprintf(gname, sizeof gname, "grad.%s", names[k] + strlen(prefix));
                float *g = rt_xmalloc(part_n * sizeof(float));
                TZ_EXPECT_OK(ckpt_safetensors_read_f32(grad_file, gname, g, part_n));
                tz_check_after_adamw(names[k], got, ref, g, part_n, atol, rtol);
                free(g);
            } else {
                tz_check_close(names[k], got, ref, part_n, atol, rtol);
            }
            free(ref);
            free(got);
        }
    }
}

static bert_model *load_model(rt_backend *be, const char *dir, const char *weights) {
    char path[4096];
    bert_config cfg;
    bert_model *m = NULL;
    ckpt_load_report rep;
    snprintf(path, sizeof path, "%s/config.json", dir);
    TZ_EXPECT_OK(bert_config_load(path, &cfg));
    TZ_EXPECT(cfg.num_hidden_layers == 2 && cfg.hidden_size == 64 && cfg.intermediate_size == 128, "config fields");
    TZ_EXPECT_OK(bert_model_init(&cfg, be, rt_comm_self(), B, T, 7, &m));
    if (!m) return NULL;
    TZ_EXPECT_OK(ckpt_load_hf(weights, cfg.roberta ? &ckpt_map_roberta : &ckpt_map_bert, bert_model_params(m),
                              cfg.vocab_size, cfg.num_attention_heads, 0, 1, NULL, &rep));
    TZ_EXPECT(rep.missing == 0 && rep.unused == 0, "%s: loaded %d, missing %d (%s), unused %d", weights, rep.loaded,
              rep.missing, rep.first_missing, rep.unused);
    return m;
}

static void test_golden(rt_backend *be, const char *name) {
    char dir[4096], path[4096], weights[4096];
    snprintf(dir, sizeof dir, "%s", tz_source_path(name));
    snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
    ckpt_st_file *g = NULL, *after = NULL;
    snprintf(path, sizeof path, "%s/golden.safetensors", dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    snprintf(path, sizeof path, "%s/after_step.safetensors", dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &after));
    bert_model *m = load_model(be, dir, weights);
    if (!g || !after || !m) goto done;
    const bert_config *cfg = bert_model_config(m);
    const int NL = cfg->num_labels;
    TZ_EXPECT(cfg->roberta == (strstr(name, "roberta") != NULL), "%s: model_type", name);
    golden_batch gb;
    load_batch(g, cfg->roberta, NL, &gb);

    /* the encoder output without dropout, to localise a mismatch */
    float *hidden = rt_xmalloc((size_t)B * T * 64 * sizeof(float)),
          *ref_hidden = rt_xmalloc((size_t)B * T * 64 * sizeof(float));
    TZ_EXPECT_OK(bert_hidden(m, gb.ids, gb.mask, gb.batch.token_type_ids, B, T, hidden));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "hidden", ref_hidden, (size_t)B * T * 64));
    snprintf(path, sizeof path, "%s hidden", name);
    tz_check_close(path, hidden, ref_hidden, (size_t)B * T * 64, FWD_ATOL, FWD_RTOL);
    free(hidden);
    free(ref_hidden);

    /* forward, loss, gradients through the classifier vtable */
    mdl_classifier cls;
    TZ_EXPECT_OK(bert_classifier(m, &cls));
    TZ_EXPECT(cls.num_labels == NL, "vtable num_labels %d", cls.num_labels);
    rt_params *p = cls.params(cls.model);
    mdl_pass pass = {.seed = 1, .step = 0, .micro = 0, .training = true};
    float logits[B * MAX_NL], ref_logits[B * MAX_NL], ref_loss;
    double loss_sum = 0;
    rt_params_zero_grad(p);
    TZ_EXPECT_OK(cls.step(cls.model, &gb.batch, &pass, 1.0f / B, &loss_sum, logits));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "logits", ref_logits, (size_t)B * NL));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "loss", &ref_loss, 1));
    snprintf(path, sizeof path, "%s logits", name);
    tz_check_close(path, logits, ref_logits, (size_t)B * NL, FWD_ATOL, FWD_RTOL);
    float loss = (float)(loss_sum / B);
    snprintf(path, sizeof path, "%s loss", name);
    tz_check_close(path, &loss, &ref_loss, 1, FWD_ATOL, FWD_RTOL);
    compare_params(g, g, "grad.", p, cfg->roberta, 1, GRAD_ATOL, GRAD_RTOL);

    /* one AdamW step, no clipping */
    rt_adamw_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    TZ_EXPECT_OK(rt_adamw_step(p, &hp, 1.0f, 1));
    compare_params(after, g, "after_step.", p, cfg->roberta, 0, FWD_ATOL, FWD_RTOL);
    cls.free(cls.model);

    /* five clipped steps from the initial weights */
    m = load_model(be, dir, weights);
    if (!m) goto done;
    p = bert_model_params(m);
    float losses[5], norms[5], ref_losses[5], ref_norms[5];
    for (int s = 0; s < 5; s++) {
        rt_params_zero_grad(p);
        pass.step = s;
        TZ_EXPECT_OK(bert_cls_step(m, &gb.batch, &pass, 1.0f / B, &loss_sum, NULL));
        losses[s] = (float)(loss_sum / B);
        double norm = rt_grad_norm(p);
        norms[s] = (float)norm;
        TZ_EXPECT_OK(rt_adamw_step(p, &hp, rt_clip_factor(norm, 1.0), s + 1));
    }
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "losses5", ref_losses, 5));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "gradnorm5", ref_norms, 5));
    snprintf(path, sizeof path, "%s losses5", name);
    tz_check_close(path, losses, ref_losses, 5, FWD_ATOL, FWD_RTOL);
    snprintf(path, sizeof path, "%s gradnorm5", name);
    tz_check_close(path, norms, ref_norms, 5, GRAD_ATOL, GRAD_RTOL);
    bert_model_free(m);
    m = NULL;
done:
    bert_model_free(m);
    ckpt_safetensors_close(g);
    ckpt_safetensors_close(after);
}

/* bf16 against PyTorch's CPU bf16 autocast on the same model and batch (bf16_autocast.safetensors,
 * the band of testutil.h's tz_check_bf16_band; the figures are at the top of this file): the
 * logits, the loss and every gradient the file holds, each run at fp32 and at bf16. */
static void test_golden_bf16(rt_backend *be, const char *name) {
    char dir[4096], path[4096], weights[4096];
    snprintf(dir, sizeof dir, "%s", tz_source_path(name));
    snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
    ckpt_st_file *g = NULL, *a = NULL;
    snprintf(path, sizeof path, "%s/golden.safetensors", dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    snprintf(path, sizeof path, "%s/bf16_autocast.safetensors", dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &a));
    bert_model *m = g && a ? load_model(be, dir, weights) : NULL;
    if (!m) goto done;
    const bert_config *cfg = bert_model_config(m);
    const int NL = cfg->num_labels;
    golden_batch gb;
    load_batch(g, cfg->roberta, NL, &gb);
    rt_params *p = bert_model_params(m);
    mdl_pass pass = {.seed = 1, .step = 0, .micro = 0, .training = true};
    float logits[2][B * 2], loss[2], *grads[2];
    for (int k = 0; k < 2; k++) { /* 0: fp32, 1: bf16 */
        double loss_sum = 0;
        TZ_EXPECT_OK(rt_set_precision(be, k ? RT_BF16 : RT_F32));
        rt_params_zero_grad(p);
        TZ_EXPECT_OK(bert_cls_step(m, &gb.batch, &pass, 1.0f / B, &loss_sum, logits[k]));
        loss[k] = (float)(loss_sum / B);
        grads[k] = rt_xmalloc(p->numel * sizeof(float));
        memcpy(grads[k], p->grad, p->numel * sizeof(float));
    }
    TZ_EXPECT_OK(rt_set_precision(be, RT_F32));
    char what[300];
    snprintf(what, sizeof what, "%s ", strrchr(name, '/') + 1);
    tz_check_bf16_golden(g, a, what, "logits", logits[1], logits[0], (size_t)B * NL);
    tz_check_bf16_golden(g, a, what, "loss", &loss[1], &loss[0], 1);
    int compared = 0;
    for (int i = 0; i < p->n; i++) { /* compare_params' walk over HF's names */
        const rt_param_spec *s = &p->specs[i];
        char names[3][256];
        int parts = hf_names(s, cfg->roberta, "grad.", names);
        for (int k = 0; k < parts; k++) {
            ckpt_st_tensor t;
            if (!ckpt_safetensors_has(a, names[k])) continue;
            TZ_EXPECT_OK(ckpt_safetensors_find(a, names[k], &t));
            size_t part_n = s->tp == RT_TP_VOCAB ? t.numel : s->numel / (size_t)parts;
            TZ_EXPECT(t.numel == part_n, "%s: %zu values, %zu here", names[k], t.numel, part_n);
            if (t.numel != part_n) continue;
            size_t at = s->offset + (size_t)k * part_n;
            tz_check_bf16_golden(g, a, what, names[k], grads[1] + at, grads[0] + at, part_n);
            compared++;
        }
    }
    TZ_EXPECT(compared > 0 && compared == tz_count_prefixed(a, "grad."), "compared %d of the %d gradients in %s",
              compared, tz_count_prefixed(a, "grad."), path);
    free(grads[0]), free(grads[1]);
done:
    bert_model_free(m);
    ckpt_safetensors_close(g);
    ckpt_safetensors_close(a);
}

/* Reads every tensor of `src` and returns them as write entries (data owned by the caller). */
static size_t copy_entries(const ckpt_st_file *f, ckpt_st_write_entry *e, char (*names)[256], float **bufs) {
    size_t n = ckpt_safetensors_count(f);
    for (size_t i = 0; i < n; i++) {
        ckpt_st_tensor t;
        ckpt_safetensors_tensor(f, i, &t);
        bufs[i] = rt_xmalloc(t.numel * sizeof(float));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, t.name, bufs[i], t.numel));
        snprintf(names[i], 256, "%s", t.name);
        e[i] = (ckpt_st_write_entry){.name = names[i], .ndim = t.ndim, .shape = NULL, .data = bufs[i]};
    }
    return n;
}

/* The export writes HF's names, shapes and values: reloading it (and a variant with the old
 * gamma/beta names, no prefix and a cls.* head) gives the same parameters. */
static void test_export_and_legacy_names(rt_backend *be, const char *name) {
    char dir[4096], weights[4096];
    snprintf(dir, sizeof dir, "%s", tz_source_path(name));
    snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
    bert_model *m = load_model(be, dir, weights);
    if (!m) return;
    const char *out = tz_tmpdir();
    char exported[4096], legacy[4096], cfg_path[4096];
    snprintf(exported, sizeof exported, "%s/export", out);
    TZ_EXPECT_OK(bert_save_hf(m, exported));
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", exported);
    bert_config c2;
    TZ_EXPECT_OK(bert_config_load(cfg_path, &c2));
    TZ_EXPECT(c2.roberta == bert_model_config(m)->roberta && c2.num_labels == bert_model_config(m)->num_labels &&
                  c2.vocab_size == bert_model_config(m)->vocab_size,
              "exported config differs");
    snprintf(exported, sizeof exported, "%s/export/model.safetensors", out);
    char line[256] = "";
    TZ_EXPECT_OK(bert_load_hf(m, exported, line, sizeof line));
    TZ_EXPECT(strstr(line, "tensors loaded") && !strstr(line, "newly") && !strstr(line, "no parameter"),
              "load report: %s", line);

    /* byte-equal tensors: the export has exactly the HF file's names and values */
    ckpt_st_file *a = NULL, *b = NULL;
    TZ_EXPECT_OK(ckpt_safetensors_open(weights, &a));
    TZ_EXPECT_OK(ckpt_safetensors_open(exported, &b));
    if (a && b) {
        TZ_EXPECT(ckpt_safetensors_count(a) == ckpt_safetensors_count(b), "export has %zu tensors, HF %zu",
                  ckpt_safetensors_count(b), ckpt_safetensors_count(a));
        for (size_t i = 0; i < ckpt_safetensors_count(a); i++) {
            ckpt_st_tensor ta, tb;
            ckpt_safetensors_tensor(a, i, &ta);
            if (!ckpt_safetensors_has(b, ta.name)) {
                TZ_EXPECT(0, "export lacks '%s'", ta.name);
                continue;
            }
            TZ_EXPECT_OK(ckpt_safetensors_find(b, ta.name, &tb));
            TZ_EXPECT(ta.nbytes == tb.nbytes && memcmp(ta.data, tb.data, ta.nbytes) == 0, "export '%s' differs",
                      ta.name);
        }
    }

    /* old names: LayerNorm.gamma/beta, no model prefix, plus a cls.* head to skip */
    if (a) {
        size_t n = ckpt_safetensors_count(a);
        ckpt_st_write_entry *e = rt_xcalloc(n + 1, sizeof *e);
        char(*names)[256] = rt_xcalloc(n + 1, sizeof *names);
        float **bufs = rt_xcalloc(n + 1, sizeof *bufs);
        size_t(*shapes)[CKPT_MAX_DIMS] = rt_xcalloc(n + 1, sizeof *shapes);
        copy_entries(a, e, names, bufs);
        for (size_t i = 0; i < n; i++) {
            ckpt_st_tensor t;
            ckpt_safetensors_tensor(a, i, &t);
            memcpy(shapes[i], t.shape, sizeof shapes[i]);
            e[i].shape = shapes[i];
            char *nm = names[i], tmp[256];
            if (strncmp(nm, "bert.", 5) == 0 || strncmp(nm, "roberta.", 8) == 0) {
                snprintf(tmp, sizeof tmp, "%s", strchr(nm, '.') + 1);
                snprintf(nm, 256, "%s", tmp);
            }
            size_t len = strlen(nm);
            if (len > 16 && strcmp(nm + len - 16, "LayerNorm.weight") == 0) strcpy(nm + len - 6, "gamma");
            if (len > 14 && strcmp(nm + len - 14, "LayerNorm.bias") == 0) strcpy(nm + len - 4, "beta");
        }
        static float cls_bias[100];
        shapes[n][0] = 100;
        snprintf(names[n], 256, "cls.predictions.bias");
        e[n] = (ckpt_st_write_entry){.name = names[n], .ndim = 1, .shape = shapes[n], .data = cls_bias};
        snprintf(legacy, sizeof legacy, "%s/legacy.safetensors", out);
        TZ_EXPECT_OK(ckpt_safetensors_write(legacy, n + 1, e, NULL));
        for (size_t i = 0; i < n; i++) free(bufs[i]);
        free(bufs), free(shapes), free(names), free(e);

        bert_model *m2 = load_model(be, dir, legacy);
        if (m2) {
            rt_params *p1 = bert_model_params(m), *p2 = bert_model_params(m2);
            TZ_EXPECT(p1->numel == p2->numel, "slab sizes");
            if (p1->numel == p2->numel) tz_check_close("legacy-name load", p2->param, p1->param, p1->numel, 0.0f, 0.0f);
        }
        bert_model_free(m2);
    }
    ckpt_safetensors_close(a);
    ckpt_safetensors_close(b);
    bert_model_free(m);
}

/* ---- tensor parallelism: tp = 2 ranks on threads ---- */
enum { TP_MAX_PARAMS = 64, TP_STEPS = 5 };

typedef struct {
    float logits[B * MAX_NL], loss, losses[TP_STEPS], norms[TP_STEPS];
    float *grads[TP_MAX_PARAMS]; /* full tensors (vocab unpadded), rank 0 */
} tp_result;

typedef struct {
    rt_comm *comm;
    const char *dir, *export_dir;
    const rt_batch *batch;
    bool dropout;
    tp_result *res; /* rank 0 only */
} tp_rank_arg;

static rt_status tp_rank_run(tp_rank_arg *a) {
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    bert_model *m = NULL;
    bert_config cfg;
    ckpt_load_report rep;
    ckpt_tp_scratch scr = {0};
    char path[4096];
    rt_comm *tp = a->comm;
    tp_result *res = tp->rank == 0 ? a->res : NULL;
    rt_adamw_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    double loss_sum = 0, norm = 0;
    RT_TRY(rt_backend_init("cpu", 1, &be));
    snprintf(path, sizeof path, "%s/config.json", a->dir);
    RT_TRY(bert_config_load(path, &cfg));
    if (a->dropout) cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = cfg.classifier_dropout = 0.1f;
    RT_TRY(bert_model_init(&cfg, be, tp, B, T, 7, &m));
    snprintf(path, sizeof path, "%s/model.safetensors", a->dir);
    RT_TRY(ckpt_load_hf(path, cfg.roberta ? &ckpt_map_roberta : &ckpt_map_bert, bert_model_params(m), cfg.vocab_size,
                        cfg.num_attention_heads, tp->rank, tp->size, NULL, &rep));
    if (rep.missing || rep.unused)
        RT_FAIL(RT_ERR_FORMAT, "rank %d: %d missing (%s), %d unused", tp->rank, rep.missing, rep.first_missing,
                rep.unused);
    if (a->export_dir) RT_TRY(bert_save_hf(m, a->export_dir));
    rt_params *p = bert_model_params(m);
    RT_CHECK(p->n <= TP_MAX_PARAMS, "%d params", p->n);
    mdl_pass pass = {.seed = 1, .training = true};
    for (int s = 0; s < TP_STEPS; s++) {
        rt_params_zero_grad(p);
        pass.step = s;
        RT_TRY(bert_cls_step(m, a->batch, &pass, 1.0f / B, &loss_sum, s == 0 && res ? res->logits : NULL));
        if (s == 0) {
            for (int i = 0; i < p->n; i++) { /* step 0's gradients, gathered to full tensors */
                ckpt_tp_desc d;
                ckpt_tp_param_desc(&p->specs[i], cfg.vocab_size, tp->rank, tp->size, &d);
                float *full = res ? rt_xmalloc(ckpt_tp_full_numel(&d) * sizeof(float)) : NULL;
                if (res) res->grads[i] = full;
                RT_TRY(ckpt_tp_gather_param(be, tp, &d, p->grad + p->specs[i].offset, p->specs[i].numel, &scr, full));
            }
        }
        RT_TRY(rt_grad_norm_tp(p, tp, &norm));
        RT_TRY(rt_adamw_step(p, &hp, rt_clip_factor(norm, 1.0), s + 1));
        if (res) {
            res->losses[s] = (float)(loss_sum / B);
            res->norms[s] = (float)norm;
        }
    }
    if (res) res->loss = res->losses[0];
fail:
    ckpt_tp_scratch_free(be, &scr);
    bert_model_free(m);
    rt_backend_free(be);
    return st;
}

/* tz_run_ranks' rank: its comm goes into its arguments */
static rt_status tp_rank_main(rt_comm *comm, void *arg) {
    tp_rank_arg *a = arg;
    a->comm = comm;
    return tp_rank_run(a);
}

static int tp_run(int n, const char *dir, const char *export_dir, const rt_batch *batch, bool dropout, tp_result *res) {
    tp_rank_arg args[2];
    memset(res, 0, sizeof *res);
    for (int r = 0; r < n; r++)
        args[r] = (tp_rank_arg){.dir = dir, .export_dir = export_dir, .batch = batch, .dropout = dropout, .res = res};
    const rt_status st = tz_run_ranks(n, 30.0, tp_rank_main, args, sizeof *args);
    TZ_EXPECT(st == RT_OK, "tp=%d: %s", n, rt_status_name(st));
    return st == RT_OK;
}

static void tp_free(tp_result *res) {
    for (int i = 0; i < TP_MAX_PARAMS; i++) free(res->grads[i]);
}

static void test_tp2(rt_backend *be, const char *name) {
    char dir[4096], path[4096], weights[4096], export_dir[4096], what[300];
    snprintf(dir, sizeof dir, "%s", tz_source_path(name));
    snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
    snprintf(export_dir, sizeof export_dir, "%s/export-tp2", tz_tmpdir());
    snprintf(path, sizeof path, "%s/golden.safetensors", dir);
    ckpt_st_file *g = NULL, *a = NULL, *b = NULL;
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    bert_model *ref = load_model(be, dir, weights); /* tp = 1: the layout the gathered grads go into */
    if (!g || !ref) goto done;
    const bert_config *cfg = bert_model_config(ref);
    const int NL = cfg->num_labels;
    golden_batch gb;
    load_batch(g, cfg->roberta, NL, &gb);
    tp_result res;
    if (tp_run(2, dir, export_dir, &gb.batch, false, &res)) {
        float ref_logits[B * MAX_NL], ref_loss, ref_losses[5], ref_norms[5];
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "logits", ref_logits, (size_t)B * NL));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "loss", &ref_loss, 1));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "losses5", ref_losses, 5));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "gradnorm5", ref_norms, 5));
        snprintf(what, sizeof what, "tp=2 %s logits", name);
        tz_check_close(what, res.logits, ref_logits, (size_t)B * NL, FWD_ATOL, FWD_RTOL);
        snprintf(what, sizeof what, "tp=2 %s loss", name);
        tz_check_close(what, &res.loss, &ref_loss, 1, FWD_ATOL, FWD_RTOL);
        snprintf(what, sizeof what, "tp=2 %s losses5", name);
        tz_check_close(what, res.losses, ref_losses, 5, FWD_ATOL, FWD_RTOL);
        snprintf(what, sizeof what, "tp=2 %s gradnorm5", name);
        tz_check_close(what, res.norms, ref_norms, 5, GRAD_ATOL, GRAD_RTOL);
        /* the full gradients into the tp = 1 slab (the vocab rows past vocab_size stay 0) */
        rt_params *p = bert_model_params(ref);
        for (int i = 0; i < p->n; i++) {
            const rt_param_spec *s = &p->specs[i];
            size_t n = s->tp == RT_TP_VOCAB ? (size_t)cfg->vocab_size * (size_t)s->shape[1] : s->numel;
            memcpy(p->grad + s->offset, res.grads[i], n * sizeof(float));
        }
        compare_params(g, g, "grad.", p, cfg->roberta, 1, GRAD_ATOL, GRAD_RTOL);
        /* the collective export is HF's file */
        snprintf(path, sizeof path, "%s/model.safetensors", export_dir);
        TZ_EXPECT_OK(ckpt_safetensors_open(weights, &a));
        TZ_EXPECT_OK(ckpt_safetensors_open(path, &b));
        for (size_t i = 0; a && b && i < ckpt_safetensors_count(a); i++) {
            ckpt_st_tensor ta, tb;
            ckpt_safetensors_tensor(a, i, &ta);
            TZ_EXPECT(ckpt_safetensors_has(b, ta.name), "tp=2 export lacks '%s'", ta.name);
            if (!ckpt_safetensors_has(b, ta.name)) continue;
            TZ_EXPECT_OK(ckpt_safetensors_find(b, ta.name, &tb));
            TZ_EXPECT(ta.nbytes == tb.nbytes && memcmp(ta.data, tb.data, ta.nbytes) == 0, "tp=2 export '%s' differs",
                      ta.name);
        }
    }
    tp_free(&res);
    /* dropout 0.1 everywhere: tp = 2 draws the masks tp = 1 draws */
    tp_result r1 = {0}, r2 = {0};
    if (tp_run(1, dir, NULL, &gb.batch, true, &r1) && tp_run(2, dir, NULL, &gb.batch, true, &r2)) {
        snprintf(what, sizeof what, "dropout tp=2 vs tp=1 %s losses", name);
        tz_check_close(what, r2.losses, r1.losses, TP_STEPS, 1e-5f, 1e-5f);
        float nodrop = 0;
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "loss", &nodrop, 1));
        TZ_EXPECT(fabsf(r1.losses[0] - nodrop) > 1e-4f, "dropout had no effect (%g vs %g)", r1.losses[0], nodrop);
    }
    tp_free(&r1);
    tp_free(&r2);
done:
    bert_model_free(ref);
    ckpt_safetensors_close(g);
    ckpt_safetensors_close(a);
    ckpt_safetensors_close(b);
}

/* Config errors name the field. */
static void test_config_errors(void) {
    const char *dir = tz_tmpdir();
    char path[4096];
    bert_config c;
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs("{\"model_type\": \"gpt2\"}", f);
    fclose(f);
    TZ_EXPECT(bert_config_load(path, &c) == RT_ERR_CONFIG && strstr(rt_error_message(), "model_type"),
              "wrong model_type: %s", rt_error_message());
    f = fopen(path, "w");
    fputs("{\"model_type\": \"bert\", \"hidden_size\": 65, \"num_attention_heads\": 4}", f);
    fclose(f);
    TZ_EXPECT(bert_config_load(path, &c) == RT_ERR_CONFIG && strstr(rt_error_message(), "hidden_size"), "bad heads: %s",
              rt_error_message());
    f = fopen(path, "w");
    fputs("{\"model_type\": \"roberta\", \"position_embedding_type\": \"relative_key\"}", f);
    fclose(f);
    TZ_EXPECT(bert_config_load(path, &c) == RT_ERR_CONFIG && strstr(rt_error_message(), "position_embedding_type"),
              "relative positions: %s", rt_error_message());
    f = fopen(path, "w");
    fputs("{\"model_type\": \"roberta\"}", f);
    fclose(f);
    TZ_EXPECT_OK(bert_config_load(path, &c));
    TZ_EXPECT(c.roberta && c.pad_token_id == 1 && c.num_labels == 2 && c.act == RT_ACT_GELU_ERF, "roberta defaults");
}

int main(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 2, &be));
    if (!be) return tz_test_result("test_golden_bert");
    test_golden(be, "tests/golden/bert-tiny-cls");
    test_golden(be, "tests/golden/bert-tiny-reg");
    test_golden(be, "tests/golden/roberta-tiny-cls");
    test_golden(be, "tests/golden/roberta-tiny-reg");
    test_golden(be, "tests/golden/bert-tiny-ml");
    test_golden_bf16(be, "tests/golden/bert-tiny-cls");
    test_export_and_legacy_names(be, "tests/golden/bert-tiny-cls");
    test_export_and_legacy_names(be, "tests/golden/roberta-tiny-reg");
    test_tp2(be, "tests/golden/bert-tiny-cls");
    test_tp2(be, "tests/golden/roberta-tiny-reg");
    test_tp2(be, "tests/golden/bert-tiny-ml");
    test_config_errors();
    rt_backend_free(be);
    return tz_test_result("test_golden_bert");
}
