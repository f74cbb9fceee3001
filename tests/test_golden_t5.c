/* T5 against Hugging Face Transformers: tiny random T5ForConditionalGeneration models saved
 * by scripts/golden/gen_t5_golden.py (versions in the files' metadata), v1.0 (relu FFN, head
 * tied to `shared`, decoder output scaled by d_model^-0.5) and v1.1 (gated gelu_new FFN, own
 * lm_head, no rescale), on a batch with right- and left-padded sources and -100-padded
 * targets. Each must give HF's encoder output, logits, loss, every parameter gradient, the
 * weights after one AdamW step and the losses and gradient norms of 5 clipped training steps,
 * with the fp32 tolerances (docs/architecture.md). Also: the relative-position buckets equal torch's over
 * -300..300; labels padded with pad_token_id instead of -100, and explicit decoder inputs,
 * give the same loss; the HF export is HF's file byte for byte and reloads; older checkpoint
 * layouts (embed_tokens aliases, a tied lm_head copy) load to the same weights and an untied
 * head into a tied model is an error; tp = 2 (two threads over the threads communicator, HF
 * weights sharded on load) gives HF's numbers and, with dropout on, tp = 1's losses; config
 * errors name their field.
 *
 * bf16 (test_golden_bf16): the same model and batch at rt_set_precision(be, RT_BF16) against
 * PyTorch's CPU bf16 autocast (tests/golden/t5-tiny-v1_{0,1}/bf16_autocast.safetensors,
 * scripts/golden/gen_bf16_autocast_golden.py, torch 1.13 / transformers 4.46.3; the fp32 goldens
 * are torch 2.15's, reproduced by 1.13 to 1e-5). Band (testutil.h, tz_check_bf16_band), with d the
 * relative L2 distance over ||HF fp32||: d_ours = d(ours bf16, HF autocast) <= 3 d_ref + 2^-8
 * where d_ref = d(HF fp32, HF autocast), and d_round = d(ours bf16, ours fp32) >= d_ref / 4
 * (tensors only).
 * Measured (d_ref / d_ours / d_round):
 *   v1.0: logits 0.00506 / 0.00728 / 0.00655; loss 6.5e-5 / 3.3e-4 / 2.6e-4; grad shared 0.0184 / 0.0326 / 0.0282
 *     encoder.block.0 SelfAttention.o 0.0203 / 0.0412 / 0.037, relative_attention_bias 0.0191 / 0.0426 / 0.0343
 *     encoder.final_layer_norm 0.0163 / 0.0383 / 0.0321 (the closest to its band, 0.0529); decoder.block.1
 *     EncDecAttention.q 0.0107 / 0.0159 / 0.0157, wo 0.00656 / 0.00829 / 0.00741; decoder.final_layer_norm
 *     0.00584 / 0.00542 / 0.00682
 *   v1.1: logits 0.00942 / 0.0122 / 0.0112; loss 9.8e-4 / 4.6e-4 / 1.4e-3; grad shared 0.0161 / 0.0266 / 0.021
 *     lm_head 0.0117 / 0.0189 / 0.0154; encoder.block.0 SelfAttention.o 0.0194 / 0.0285 / 0.0232,
 *     relative_attention_bias 0.0206 / 0.0326 / 0.0275; encoder.final_layer_norm 0.0147 / 0.0237 / 0.0206;
 *     decoder.block.1 EncDecAttention.q 0.0227 / 0.0336 / 0.0241, wi_0 0.0176 / 0.0262 / 0.0233;
 *     decoder.final_layer_norm 0.00904 / 0.0155 / 0.0132
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
#include "models/t5/t5.h"
#include "runtime/comm/rt_launch.h"
#include "runtime/train/rt_optim.h"
#include "tests/testutil.h"

#define FWD_ATOL 1e-5f
#define FWD_RTOL 1e-4f
#define GRAD_ATOL 1e-4f
#define GRAD_RTOL 1e-3f

enum { B = 3, S = 12, T = 7, V = 100, D = 32, STEPS = 5, MAX_PARAMS = 96 };

typedef struct {
    int32_t ids[B * S], mask[B * S], labels[B * T], dec_ids[B * T];
    t5_batch batch;
    int n_targets;
} golden_batch;

/* tz_check_close, and a line with the worst element's share of its tolerance, so the log
 * shows how close each comparison comes (the report quotes these). */
static void check(const char *what, const float *got, const float *ref, size_t n, float atol, float rtol) {
    double worst_abs = 0, worst_share = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        double share = d / (atol + rtol * fabs((double)ref[i]));
        if (d > worst_abs) worst_abs = d;
        if (share > worst_share) worst_share = share;
    }
    printf("  %-64s n=%-5zu max |diff| %.3g, worst %.3f of tolerance (atol %g rtol %g)\n", what, n, worst_abs,
           worst_share, atol, rtol);
    tz_check_close(what, got, ref, n, atol, rtol);
}

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
    read_i32(g, "decoder_input_ids", gb->dec_ids, B * T);
    for (int i = 0; i < B * T; i++) gb->n_targets += gb->labels[i] != -100;
    gb->batch = (t5_batch){.B = B, .S = S, .T = T, .src_ids = gb->ids, .src_mask = gb->mask, .labels = gb->labels};
}

static const char *golden_dir(const char *name) {
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s", tz_source_path(name));
    return dir;
}

static t5_model *load_model(rt_backend *be, const char *dir) {
    t5_model *m = NULL;
    char report[256] = "";
    TZ_EXPECT_OK(t5_model_from_hf(dir, be, rt_comm_self(), B, S, T, &m, report, sizeof report));
    if (m) TZ_EXPECT(strstr(report, "tensors loaded") && !strstr(report, "no parameter"), "report: %s", report);
    return m;
}

/* Compares every parameter (gradients or weights) with the golden file under `prefix` + its
 * name; the vocab tables are compared over their real rows. After the AdamW step, elements
 * whose HF gradient is at noise level may move by up to lr in either framework: those are
 * checked against that bound (test_golden_bert.c's rule). */
static void compare_params(const ckpt_st_file *f, const ckpt_st_file *grad_file, const char *prefix, rt_params *p,
                           int use_grad, float atol, float rtol) {
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        char name[256], gname[256];
        snprintf(name, sizeof name, "%s%s", prefix, s->name);
        ckpt_st_tensor t;
        TZ_EXPECT_OK(ckpt_safetensors_find(f, name, &t));
        if (!ckpt_safetensors_has(f, name)) continue;
        size_t n = s->tp == RT_TP_VOCAB ? t.numel : s->numel;
        TZ_EXPECT(t.numel == n, "%s: %zu elements in the golden file, %zu here", name, t.numel, n);
        if (t.numel != n) continue;
        float *ref = rt_xmalloc(n * sizeof(float)), *got = rt_xmalloc(n * sizeof(float));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, name, ref, n));
        memcpy(got, (use_grad ? p->grad : p->param) + s->offset, n * sizeof(float));
        if (!use_grad) {
            snprintf(gname, sizeof gname, "grad.%s", s->name);
            float *g = rt_xmalloc(n * sizeof(float));
            TZ_EXPECT_OK(ckpt_safetensors_read_f32(grad_file, gname, g, n));
            tz_check_after_adamw(name, got, ref, g, n, atol, rtol);
            free(g);
        } else {
            check(name, got, ref, n, atol, rtol);
        }
        free(ref);
        free(got);
    }
}

/* The slab holds exactly HF's parameters (names and count). */
static void check_param_names(const ckpt_st_file *g, rt_params *p) {
    int in_file = 0;
    for (size_t i = 0; i < ckpt_safetensors_count(g); i++)
        in_file += strncmp(ckpt_safetensors_name(g, i), "grad.", 5) == 0;
    TZ_EXPECT(in_file == p->n, "HF has %d parameters, the model %d", in_file, p->n);
    for (int i = 0; i < p->n; i++) {
        char name[256];
        snprintf(name, sizeof name, "grad.%s", p->specs[i].name);
        TZ_EXPECT(ckpt_safetensors_has(g, name), "HF has no parameter '%s'", p->specs[i].name);
    }
}

static void test_buckets(const ckpt_st_file *g) {
    enum { N = 601 };
    int32_t rel[N], ref[N];
    read_i32(g, "bucket_relpos", rel, N);
    static const int cfgs[2][2] = {{8, 16}, {32, 128}};
    for (int c = 0; c < 2; c++)
        for (int bidir = 0; bidir < 2; bidir++) {
            char name[64];
            snprintf(name, sizeof name, "buckets.%s.%d.%d", bidir ? "bidir" : "causal", cfgs[c][0], cfgs[c][1]);
            read_i32(g, name, ref, N);
            int bad = 0;
            for (int i = 0; i < N; i++) {
                int b = t5_relative_bucket(rel[i], bidir, cfgs[c][0], cfgs[c][1]);
                if (b != ref[i] && bad++ == 0)
                    TZ_EXPECT(0, "%s: relative position %d gives bucket %d, torch %d", name, (int)rel[i], b,
                              (int)ref[i]);
            }
            TZ_EXPECT(bad == 0, "%s: %d of %d buckets differ", name, bad, N);
        }
}

static void test_golden(rt_backend *be, const char *name, bool v1_1) {
    const char *dir = golden_dir(name);
    char path[4096], what[300];
    ckpt_st_file *g = NULL, *after = NULL;
    snprintf(path, sizeof path, "%s/golden.safetensors", dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    snprintf(path, sizeof path, "%s/after_step.safetensors", dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &after));
    t5_model *m = load_model(be, dir);
    if (!g || !after || !m) goto done;
    const t5_config *cfg = t5_model_config(m);
    TZ_EXPECT(cfg->d_model == D && cfg->num_layers == 2 && cfg->num_decoder_layers == 2 && cfg->vocab_size == V &&
                  cfg->relative_attention_num_buckets == 8 && cfg->relative_attention_max_distance == 16,
              "%s: config fields", name);
    TZ_EXPECT(cfg->gated == v1_1 && cfg->act == (v1_1 ? RT_ACT_GELU_TANH : RT_ACT_RELU), "%s: FFN kind", name);
    TZ_EXPECT(cfg->tie_word_embeddings == !v1_1 && cfg->scale_decoder_outputs == !v1_1,
              "%s: tie %d scale %d (HF's config says tie_word_embeddings true for both)", name,
              cfg->tie_word_embeddings, cfg->scale_decoder_outputs);
    rt_params *p = t5_model_params(m);
    check_param_names(g, p);
    if (!v1_1) test_buckets(g);
    golden_batch gb;
    load_batch(g, &gb);
    for (int i = 0; i < B * T; i++) /* the shift the model does equals HF's */
        TZ_EXPECT(gb.dec_ids[i] == (i % T == 0                 ? 0
                                    : gb.labels[i - 1] == -100 ? 0
                                                               : gb.labels[i - 1]),
                  "decoder_input_ids[%d]", i);

    /* the encoder output alone, to localise a mismatch */
    float *enc = rt_xmalloc((size_t)B * S * D * sizeof(float)),
          *ref_enc = rt_xmalloc((size_t)B * S * D * sizeof(float));
    TZ_EXPECT_OK(t5_encode(m, gb.ids, gb.mask, B, S, enc));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "encoder_hidden", ref_enc, (size_t)B * S * D));
    snprintf(what, sizeof what, "%s encoder_hidden", name);
    check(what, enc, ref_enc, (size_t)B * S * D, FWD_ATOL, FWD_RTOL);
    free(enc);
    free(ref_enc);

    /* forward, loss, every gradient */
    float *logits = rt_xmalloc((size_t)B * T * V * sizeof(float)),
          *ref_logits = rt_xmalloc((size_t)B * T * V * sizeof(float));
    mdl_pass pass = {.seed = 1, .step = 0, .micro = 0, .training = true};
    double loss_sum = 0;
    int n = 0;
    rt_params_zero_grad(p);
    TZ_EXPECT_OK(t5_step(m, &gb.batch, &pass, 1.0f / (float)gb.n_targets, &loss_sum, &n, logits));
    TZ_EXPECT(n == gb.n_targets, "%d targets counted, %d in the labels", n, gb.n_targets);
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "logits", ref_logits, (size_t)B * T * V));
    snprintf(what, sizeof what, "%s logits", name);
    check(what, logits, ref_logits, (size_t)B * T * V, FWD_ATOL, FWD_RTOL);
    float loss = (float)(loss_sum / n), ref_loss = 0;
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "loss", &ref_loss, 1));
    snprintf(what, sizeof what, "%s loss", name);
    check(what, &loss, &ref_loss, 1, FWD_ATOL, FWD_RTOL);
    compare_params(g, g, "grad.", p, 1, GRAD_ATOL, GRAD_RTOL);

    /* the same loss from labels padded with pad_token_id, and from explicit decoder inputs */
    {
        golden_batch alt = gb;
        for (int i = 0; i < B * T; i++)
            if (alt.labels[i] == -100) alt.labels[i] = cfg->pad_token_id;
        alt.batch.labels = alt.labels;
        alt.batch.decoder_input_ids = gb.dec_ids;
        double alt_sum = 0;
        int alt_n = 0;
        TZ_EXPECT_OK(t5_step(m, &alt.batch, &pass, 0.0f, &alt_sum, &alt_n, NULL));
        TZ_EXPECT(alt_n == n && alt_sum == loss_sum, "pad-padded labels: loss %.9g over %d, -100: %.9g over %d",
                  alt_sum, alt_n, loss_sum, n);
    }

    /* one AdamW step, no clipping */
    rt_adamw_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    TZ_EXPECT_OK(rt_adamw_step(p, &hp, 1.0f, 1));
    compare_params(after, g, "after_step.", p, 0, FWD_ATOL, FWD_RTOL);
    t5_model_free(m);

    /* five clipped steps from the initial weights */
    m = load_model(be, dir);
    if (!m) goto done;
    p = t5_model_params(m);
    float losses[STEPS], norms[STEPS], ref_losses[STEPS], ref_norms[STEPS];
    for (int s = 0; s < STEPS; s++) {
        rt_params_zero_grad(p);
        pass.step = s;
        TZ_EXPECT_OK(t5_step(m, &gb.batch, &pass, 1.0f / (float)gb.n_targets, &loss_sum, &n, NULL));
        losses[s] = (float)(loss_sum / n);
        double norm = rt_grad_norm(p);
        norms[s] = (float)norm;
        TZ_EXPECT_OK(rt_adamw_step(p, &hp, rt_clip_factor(norm, 1.0), s + 1));
    }
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "losses5", ref_losses, STEPS));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "gradnorm5", ref_norms, STEPS));
    snprintf(what, sizeof what, "%s losses5", name);
    check(what, losses, ref_losses, STEPS, FWD_ATOL, FWD_RTOL);
    snprintf(what, sizeof what, "%s gradnorm5", name);
    check(what, norms, ref_norms, STEPS, GRAD_ATOL, GRAD_RTOL);
    free(logits);
    free(ref_logits);
done:
    t5_model_free(m);
    ckpt_safetensors_close(g);
    ckpt_safetensors_close(after);
}

/* bf16 against PyTorch's CPU bf16 autocast on the same model and batch (bf16_autocast.safetensors,
 * the band of testutil.h's tz_check_bf16_band; the figures are at the top of this file): the
 * logits, the loss and every gradient the file holds, each run at fp32 and at bf16. */
static void test_golden_bf16(rt_backend *be, const char *name) {
    const char *dir = golden_dir(name);
    char path[4096], what[300];
    ckpt_st_file *g = NULL, *a = NULL;
    snprintf(path, sizeof path, "%s/golden.safetensors", dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    snprintf(path, sizeof path, "%s/bf16_autocast.safetensors", dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &a));
    t5_model *m = g && a ? load_model(be, dir) : NULL;
    if (!m) goto done;
    golden_batch gb;
    load_batch(g, &gb);
    rt_params *p = t5_model_params(m);
    mdl_pass pass = {.seed = 1, .step = 0, .micro = 0, .training = true};
    float *logits[2], loss[2], *grads[2];
    for (int k = 0; k < 2; k++) { /* 0: fp32, 1: bf16 */
        double loss_sum = 0;
        int n = 0;
        TZ_EXPECT_OK(rt_set_precision(be, k ? RT_BF16 : RT_F32));
        rt_params_zero_grad(p);
        logits[k] = rt_xmalloc((size_t)B * T * V * sizeof(float));
        TZ_EXPECT_OK(t5_step(m, &gb.batch, &pass, 1.0f / (float)gb.n_targets, &loss_sum, &n, logits[k]));
        loss[k] = (float)(loss_sum / n);
        grads[k] = rt_xmalloc(p->numel * sizeof(float));
        memcpy(grads[k], p->grad, p->numel * sizeof(float));
    }
    TZ_EXPECT_OK(rt_set_precision(be, RT_F32));
    snprintf(what, sizeof what, "%s ", strrchr(name, '/') + 1);
    tz_check_bf16_golden(g, a, what, "logits", logits[1], logits[0], (size_t)B * T * V);
    tz_check_bf16_golden(g, a, what, "loss", &loss[1], &loss[0], 1);
    int compared = 0;
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        char gname[256];
        ckpt_st_tensor t;
        snprintf(gname, sizeof gname, "grad.%s", s->name);
        if (!ckpt_safetensors_has(a, gname)) continue;
        TZ_EXPECT_OK(ckpt_safetensors_find(a, gname, &t));
        size_t n = s->tp == RT_TP_VOCAB ? t.numel : s->numel; /* the vocab tables' real rows */
        TZ_EXPECT(t.numel == n, "%s: %zu values, %zu here", gname, t.numel, n);
        if (t.numel != n) continue;
        tz_check_bf16_golden(g, a, what, gname, grads[1] + s->offset, grads[0] + s->offset, n);
        compared++;
    }
    TZ_EXPECT(compared > 0 && compared == tz_count_prefixed(a, "grad."), "compared %d of the %d gradients in %s",
              compared, tz_count_prefixed(a, "grad."), path);
    for (int k = 0; k < 2; k++) free(logits[k]), free(grads[k]);
done:
    t5_model_free(m);
    ckpt_safetensors_close(g);
    ckpt_safetensors_close(a);
}

/* The export is HF's file (same names, shapes and bytes) and reloads to the same model. */
static void test_export(rt_backend *be, const char *name) {
    const char *dir = golden_dir(name);
    char weights[4096], out_dir[4096], exported[4096];
    snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
    t5_model *m = load_model(be, dir);
    if (!m) return;
    snprintf(out_dir, sizeof out_dir, "%s/export", tz_tmpdir());
    TZ_EXPECT_OK(t5_save_hf(m, out_dir));
    snprintf(exported, sizeof exported, "%s/model.safetensors", out_dir);
    ckpt_st_file *a = NULL, *b = NULL;
    TZ_EXPECT_OK(ckpt_safetensors_open(weights, &a));
    TZ_EXPECT_OK(ckpt_safetensors_open(exported, &b));
    if (a && b) {
        TZ_EXPECT(ckpt_safetensors_count(a) == ckpt_safetensors_count(b), "%s: export has %zu tensors, HF %zu", name,
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
    ckpt_safetensors_close(a);
    ckpt_safetensors_close(b);
    t5_model *m2 = load_model(be, out_dir);
    if (m2) {
        const t5_config *c1 = t5_model_config(m), *c2 = t5_model_config(m2);
        TZ_EXPECT(c1->gated == c2->gated && c1->act == c2->act && c1->tie_word_embeddings == c2->tie_word_embeddings &&
                      c1->scale_decoder_outputs == c2->scale_decoder_outputs && c1->d_ff == c2->d_ff,
                  "%s: exported config differs", name);
        rt_params *p1 = t5_model_params(m), *p2 = t5_model_params(m2);
        TZ_EXPECT(p1->numel == p2->numel, "slab sizes");
        if (p1->numel == p2->numel) check("export reload", p2->param, p1->param, p1->numel, 0.0f, 0.0f);
    }
    t5_model_free(m2);
    t5_model_free(m);
}

/* Older layouts of a tied checkpoint: `shared` only as encoder/decoder.embed_tokens, plus an
 * lm_head.weight copy and HF's ignored cross-attention bias table. And an untied head cannot
 * be loaded into a tied model. */
static void test_legacy_layouts(rt_backend *be) {
    const char *dir = golden_dir("tests/golden/t5-tiny-v1_0");
    char weights[4096], legacy_dir[4096], path[4096];
    snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
    t5_model *m = load_model(be, dir);
    ckpt_st_file *a = NULL;
    TZ_EXPECT_OK(ckpt_safetensors_open(weights, &a));
    if (!m || !a) goto done;
    size_t n = ckpt_safetensors_count(a);
    ckpt_st_write_entry *e = rt_xcalloc(n + 4, sizeof *e);
    float **bufs = rt_xcalloc(n + 4, sizeof *bufs);
    size_t(*shapes)[CKPT_MAX_DIMS] = rt_xcalloc(n + 4, sizeof *shapes);
    size_t ne = 0;
    const float *shared = NULL;
    for (size_t i = 0; i < n; i++) {
        ckpt_st_tensor t;
        ckpt_safetensors_tensor(a, i, &t);
        bufs[ne] = rt_xmalloc(t.numel * sizeof(float));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(a, t.name, bufs[ne], t.numel));
        memcpy(shapes[ne], t.shape, sizeof shapes[ne]);
        const char *nm = t.name;
        if (strcmp(nm, "shared.weight") == 0) {
            nm = "encoder.embed_tokens.weight";
            shared = bufs[ne];
        }
        e[ne] = (ckpt_st_write_entry){.name = nm, .ndim = t.ndim, .shape = shapes[ne], .data = bufs[ne]};
        ne++;
    }
    shapes[ne][0] = V, shapes[ne][1] = D;
    e[ne] =
        (ckpt_st_write_entry){.name = "decoder.embed_tokens.weight", .ndim = 2, .shape = shapes[ne], .data = shared};
    ne++;
    e[ne] = (ckpt_st_write_entry){.name = "lm_head.weight", .ndim = 2, .shape = shapes[ne - 1], .data = shared};
    ne++;
    static float cross_bias[8 * 4];
    shapes[ne][0] = 8, shapes[ne][1] = 4;
    e[ne] = (ckpt_st_write_entry){.name = "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",
                                  .ndim = 2,
                                  .shape = shapes[ne],
                                  .data = cross_bias};
    ne++;
    snprintf(legacy_dir, sizeof legacy_dir, "%s", tz_tmpdir());
    snprintf(path, sizeof path, "%s/model.safetensors", legacy_dir);
    TZ_EXPECT_OK(ckpt_safetensors_write(path, ne, e, NULL));
    char cfg_src[4096], cfg_dst[4096];
    snprintf(cfg_src, sizeof cfg_src, "%s/config.json", dir);
    snprintf(cfg_dst, sizeof cfg_dst, "%s/config.json", legacy_dir);
    t5_config cfg;
    TZ_EXPECT_OK(t5_config_load(cfg_src, &cfg));
    TZ_EXPECT_OK(t5_config_save(&cfg, cfg_dst));
    t5_model *m2 = load_model(be, legacy_dir);
    if (m2) {
        rt_params *p1 = t5_model_params(m), *p2 = t5_model_params(m2);
        TZ_EXPECT(p1->numel == p2->numel && t5_model_config(m2)->tie_word_embeddings, "legacy layout: tied model");
        if (p1->numel == p2->numel) check("legacy layout load", p2->param, p1->param, p1->numel, 0.0f, 0.0f);
    }
    t5_model_free(m2);
    /* a different lm_head.weight is an untied head: a tied model refuses it */
    float *other = rt_xmalloc((size_t)V * D * sizeof(float));
    for (int i = 0; i < V * D; i++) other[i] = shared[i] + 1.0f;
    e[ne - 2].data = other;
    TZ_EXPECT_OK(ckpt_safetensors_write(path, ne, e, NULL));
    char line[256];
    rt_status st = t5_load_hf(m, path, line, sizeof line);
    TZ_EXPECT(st == RT_ERR_FORMAT && strstr(rt_error_message(), "lm_head.weight"), "untied head into a tied model: %s",
              rt_error_message());
    free(other);
    for (size_t i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(shapes);
    free(e);
done:
    ckpt_safetensors_close(a);
    t5_model_free(m);
}

/* ---- tensor parallelism: tp = 2 ranks on threads ---- */

typedef struct {
    float logits[B * T * V], losses[STEPS], norms[STEPS];
    float *grads[MAX_PARAMS]; /* full tensors (vocab unpadded), rank 0 */
} tp_result;

typedef struct {
    rt_comm *comm;
    const char *dir;
    const golden_batch *gb;
    bool dropout;
    tp_result *res; /* rank 0 only */
} tp_rank_arg;

static rt_status tp_rank_run(tp_rank_arg *a) {
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    t5_model *m = NULL;
    ckpt_tp_scratch scr = {0};
    rt_comm *tp = a->comm;
    tp_result *res = tp->rank == 0 ? a->res : NULL;
    rt_adamw_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    double loss_sum = 0, norm = 0;
    int n = 0;
    float *logits = rt_xmalloc((size_t)B * T * V * sizeof(float));
    RT_TRY(rt_backend_init("cpu", 1, &be));
    RT_TRY(t5_model_from_hf(a->dir, be, tp, B, S, T, &m, NULL, 0));
    if (a->dropout) RT_TRY(t5_set_dropout(m, 0.1f));
    rt_params *p = t5_model_params(m);
    RT_CHECK(p->n <= MAX_PARAMS, "%d params", p->n);
    const int Vreal = t5_model_config(m)->vocab_size;
    mdl_pass pass = {.seed = 1, .training = true};
    for (int s = 0; s < STEPS; s++) {
        rt_params_zero_grad(p);
        pass.step = s;
        /* the logits are a collective with tp > 1: every rank asks for them */
        RT_TRY(t5_step(m, &a->gb->batch, &pass, 1.0f / (float)a->gb->n_targets, &loss_sum, &n, s == 0 ? logits : NULL));
        if (s == 0 && res) memcpy(res->logits, logits, sizeof res->logits);
        if (s == 0)
            for (int i = 0; i < p->n; i++) { /* step 0's gradients, gathered to full tensors */
                ckpt_tp_desc d;
                ckpt_tp_param_desc(&p->specs[i], Vreal, tp->rank, tp->size, &d);
                float *full = res ? rt_xmalloc(ckpt_tp_full_numel(&d) * sizeof(float)) : NULL;
                if (res) res->grads[i] = full;
                RT_TRY(ckpt_tp_gather_param(be, tp, &d, p->grad + p->specs[i].offset, p->specs[i].numel, &scr, full));
            }
        RT_TRY(rt_grad_norm_tp(p, tp, &norm));
        RT_TRY(rt_adamw_step(p, &hp, rt_clip_factor(norm, 1.0), s + 1));
        if (res) {
            res->losses[s] = (float)(loss_sum / n);
            res->norms[s] = (float)norm;
        }
    }
fail:
    free(logits);
    ckpt_tp_scratch_free(be, &scr);
    t5_model_free(m);
    rt_backend_free(be);
    return st;
}

/* tz_run_ranks' rank: its comm goes into its arguments */
static rt_status tp_rank_main(rt_comm *comm, void *arg) {
    tp_rank_arg *a = arg;
    a->comm = comm;
    return tp_rank_run(a);
}

static int tp_run(int n, const char *dir, const golden_batch *gb, bool dropout, tp_result *res) {
    tp_rank_arg args[2];
    memset(res, 0, sizeof *res);
    for (int r = 0; r < n; r++) args[r] = (tp_rank_arg){.dir = dir, .gb = gb, .dropout = dropout, .res = res};
    const rt_status st = tz_run_ranks(n, 60.0, tp_rank_main, args, sizeof *args);
    TZ_EXPECT(st == RT_OK, "tp=%d: %s", n, rt_status_name(st));
    return st == RT_OK;
}

static void tp_free(tp_result *res) {
    for (int i = 0; i < MAX_PARAMS; i++) free(res->grads[i]);
}

static void test_tp2(rt_backend *be, const char *name) {
    const char *dir = golden_dir(name);
    char path[4096], what[300], dir_copy[4096];
    snprintf(dir_copy, sizeof dir_copy, "%s", dir);
    snprintf(path, sizeof path, "%s/golden.safetensors", dir_copy);
    ckpt_st_file *g = NULL;
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    t5_model *ref = load_model(be, dir_copy); /* tp = 1: the layout the gathered grads go into */
    static tp_result res, r1, r2;
    if (!g || !ref) goto done;
    golden_batch gb;
    load_batch(g, &gb);
    if (tp_run(2, dir_copy, &gb, false, &res)) {
        float *ref_logits = rt_xmalloc((size_t)B * T * V * sizeof(float)), ref_losses[STEPS], ref_norms[STEPS];
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "logits", ref_logits, (size_t)B * T * V));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "losses5", ref_losses, STEPS));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "gradnorm5", ref_norms, STEPS));
        snprintf(what, sizeof what, "tp=2 %s logits", name);
        check(what, res.logits, ref_logits, (size_t)B * T * V, FWD_ATOL, FWD_RTOL);
        snprintf(what, sizeof what, "tp=2 %s losses5", name);
        check(what, res.losses, ref_losses, STEPS, FWD_ATOL, FWD_RTOL);
        snprintf(what, sizeof what, "tp=2 %s gradnorm5", name);
        check(what, res.norms, ref_norms, STEPS, GRAD_ATOL, GRAD_RTOL);
        free(ref_logits);
        /* the full gradients into the tp = 1 slab (the vocab rows past vocab_size stay 0) */
        rt_params *p = t5_model_params(ref);
        rt_params_zero_grad(p);
        for (int i = 0; i < p->n; i++) {
            const rt_param_spec *s = &p->specs[i];
            size_t n = s->tp == RT_TP_VOCAB ? (size_t)V * (size_t)s->shape[1] : s->numel;
            memcpy(p->grad + s->offset, res.grads[i], n * sizeof(float));
        }
        compare_params(g, g, "grad.", p, 1, GRAD_ATOL, GRAD_RTOL);
    }
    tp_free(&res);
    /* dropout 0.1 everywhere: tp = 2 draws the masks tp = 1 draws */
    if (tp_run(1, dir_copy, &gb, true, &r1) && tp_run(2, dir_copy, &gb, true, &r2)) {
        snprintf(what, sizeof what, "dropout tp=2 vs tp=1 %s losses", name);
        check(what, r2.losses, r1.losses, STEPS, 1e-5f, 1e-5f);
        float nodrop = 0;
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "loss", &nodrop, 1));
        TZ_EXPECT(fabsf(r1.losses[0] - nodrop) > 1e-4f, "dropout had no effect (%g vs %g)", r1.losses[0], nodrop);
    }
    tp_free(&r1);
    tp_free(&r2);
done:
    t5_model_free(ref);
    ckpt_safetensors_close(g);
}

/* Config parsing: HF's defaults and the head rules, and errors that name their field. */

static void test_config(void) {
    char path[4096];
    t5_config c;
    snprintf(path, sizeof path, "%s/config.json", tz_tmpdir());
    tz_write_text(path, "{\"model_type\": \"t5\"}");
    TZ_EXPECT_OK(t5_config_load(path, &c));
    TZ_EXPECT(c.d_model == 512 && c.num_decoder_layers == 6 && !c.gated && c.act == RT_ACT_RELU &&
                  c.tie_word_embeddings && c.scale_decoder_outputs && c.decoder_start_token_id == 0,
              "t5-small defaults");
    /* flan-t5's config.json */
    tz_write_text(path,
                  "{\"model_type\": \"t5\", \"feed_forward_proj\": \"gated-gelu\", \"tie_word_embeddings\": false, "
                  "\"num_layers\": 8, \"num_decoder_layers\": null, \"d_ff\": 1024}");
    TZ_EXPECT_OK(t5_config_load(path, &c));
    TZ_EXPECT(c.gated && c.act == RT_ACT_GELU_TANH && !c.tie_word_embeddings && !c.scale_decoder_outputs &&
                  c.num_decoder_layers == 8,
              "flan-t5 config");
    tz_write_text(path, "{\"model_type\": \"t5\", \"feed_forward_proj\": \"gelu\"}");
    TZ_EXPECT_OK(t5_config_load(path, &c));
    TZ_EXPECT(!c.gated && c.act == RT_ACT_GELU_ERF, "plain gelu is the erf one");
    tz_write_text(path, "{\"model_type\": \"bart\"}");
    TZ_EXPECT(t5_config_load(path, &c) == RT_ERR_CONFIG && strstr(rt_error_message(), "model_type"), "model_type: %s",
              rt_error_message());
    tz_write_text(path, "{\"model_type\": \"t5\", \"feed_forward_proj\": \"gated-swish\"}");
    TZ_EXPECT(t5_config_load(path, &c) == RT_ERR_CONFIG && strstr(rt_error_message(), "feed_forward_proj"),
              "feed_forward_proj: %s", rt_error_message());
    tz_write_text(path, "{\"model_type\": \"t5\", \"relative_attention_num_buckets\": 2}");
    TZ_EXPECT(t5_config_load(path, &c) == RT_ERR_CONFIG && strstr(rt_error_message(), "num_buckets"), "buckets: %s",
              rt_error_message());
    t5_config_default(&c);
    c.num_heads = 6;
    TZ_EXPECT(t5_config_validate(&c, 4) == RT_ERR_CONFIG && strstr(rt_error_message(), "num_heads"), "tp: %s",
              rt_error_message());
}

int main(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 2, &be));
    if (!be) return tz_test_result("test_golden_t5");
    test_golden(be, "tests/golden/t5-tiny-v1_0", false);
    test_golden(be, "tests/golden/t5-tiny-v1_1", true);
    test_golden_bf16(be, "tests/golden/t5-tiny-v1_0");
    test_golden_bf16(be, "tests/golden/t5-tiny-v1_1");
    test_export(be, "tests/golden/t5-tiny-v1_0");
    test_export(be, "tests/golden/t5-tiny-v1_1");
    test_legacy_layouts(be);
    test_tp2(be, "tests/golden/t5-tiny-v1_0");
    test_tp2(be, "tests/golden/t5-tiny-v1_1");
    test_config();
    rt_backend_free(be);
    return tz_test_result("test_golden_t5");
}
