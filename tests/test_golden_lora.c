/* LoRA against HF PEFT (issue 36): the tiny GPT-2 classifier of tests/golden/gpt2-tiny-cls as the
 * base, with the PEFT folder tests/golden/gpt2-tiny-lora/adapter (r 4, alpha 8, c_attn, c_proj and
 * c_fc, SEQ_CLS so score is saved whole; random A and B) loaded over it, must give PEFT's logits,
 * loss, the gradient of every adapter and of score, each one after one AdamW step, and the losses
 * and gradient norms of five clipped steps (scripts/golden/gen_lora_golden.py, versions in the
 * file's metadata). Tolerances are test_golden_gpt2's (docs/architecture.md, "Numerical truth").
 * Those checks, bf16's, tp's and the folder's are the ones every family makes (tests/lora_family.h),
 * here over GPT-2's classifier; the BERT and RoBERTa cases below make theirs in place.
 *
 * bf16 is in the band of PEFT under torch's CPU bf16 autocast (the full models' band).
 *
 * Also: only the adapters and score train (train_numel, no gradient for the base, whose weights
 * stay bit for bit); PEFT's initialisation (A within +-1/sqrt(in), B zero); the folder
 * --save-lora writes loads back to the same logits bit for bit, and in PEFT to the same logits; an
 * adapter of another rank is refused; and the language model's decoding with a key/value cache
 * gives its full forward's logits.
 *
 * Tensor parallelism (models/layers/lora.h's rule): at tp = 2 and 4 over the threads communicator, each
 * rank loading its shards of the base and of the adapters, the logits, the loss and every
 * trainable gradient (gathered to full tensors) are PEFT's; with LoRA dropout 0.2 on, tp = 2 and
 * 4 give tp = 1's losses over three AdamW steps (the masks drawn at the whole matrix's indices,
 * the row-parallel adapters' t and the column-parallel ones' u summed over the ranks). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/ckpt_map.h"
#include "checkpoints/ckpt_peft.h"
#include "checkpoints/ckpt_peft_weights.h"
#include "checkpoints/ckpt_safetensors.h"
#include "checkpoints/ckpt_weights.h"
#include "models/bert/bert.h"
#include "models/gpt2/gpt2.h"
#include "models/layers/lora.h"
#include "runtime/base/rt_fs.h"
#include "runtime/train/rt_optim.h"
#include "tests/lora_family.h"
#include "tests/loratest.h"
#include "tests/testutil.h"

#define FWD_ATOL TZL_FWD_ATOL
#define FWD_RTOL TZL_FWD_RTOL
#define GRAD_ATOL TZL_GRAD_ATOL
#define GRAD_RTOL TZL_GRAD_RTOL

enum { B = 3, T = 16, NL = 2, N_ADAPTED = 2 * 4 }; /* 2 blocks x (c_attn, attn.c_proj, c_fc, mlp.c_proj) */

/* The golden folders, found once by main (tz_source_path's slots are not for rank threads). */
static char base_path[4096], lora_path[4096], adapter_path[4096];
static const char *base_dir(void) { return base_path; }
static const char *lora_dir(void) { return lora_path; }
static const char *peft_adapter(void) { return adapter_path; }

/* The base model with the adapters of `adapter` (a PEFT folder, or NULL: our own init), this
 * rank's shards over tp; a status and no checks, so rank threads can call it. */
static rt_status load_lora_tp(rt_backend *be, rt_comm *tp, const ckpt_peft_config *peft, const char *adapter,
                              gpt2_model **out) {
    rt_status st = RT_OK;
    char path[4096];
    gpt2_config cfg;
    ckpt_load_report rep;
    *out = NULL;
    snprintf(path, sizeof path, "%s/config.json", base_dir());
    RT_TRY(gpt2_config_load(path, &cfg));
    cfg.lora = peft;
    RT_TRY(gpt2_model_init(&cfg, be, tp, B, T, 7, out));
    snprintf(path, sizeof path, "%s/model.safetensors", base_dir());
    RT_TRY(ckpt_load_hf(path, &ckpt_map_gpt2, gpt2_model_params(*out), cfg.vocab_size, cfg.n_head, tp->rank, tp->size,
                        NULL, &rep));
    if (rep.missing != 0 || rep.adapters != 2 * N_ADAPTED || rep.unused != 0)
        RT_FAIL(RT_ERR_FORMAT, "base: missing %d (%s), %d adapters, unused %d", rep.missing, rep.first_missing,
                rep.adapters, rep.unused);
    if (adapter)
        RT_TRY(ckpt_peft_load_weights(adapter, &ckpt_map_gpt2, gpt2_model_params(*out), tp->rank, tp->size, NULL));
    return RT_OK;
fail:
    gpt2_model_free(*out);
    *out = NULL;
    return st;
}

/* The same on one rank, checked. */
static gpt2_model *load_lora(rt_backend *be, const ckpt_peft_config *peft, const char *adapter) {
    gpt2_model *m = NULL;
    TZ_EXPECT_OK(load_lora_tp(be, rt_comm_self(), peft, adapter, &m));
    return m;
}

/* The golden file, and the PEFT folder PEFT wrote. */
static ckpt_st_file *open_golden(void) {
    char path[4096];
    ckpt_st_file *g = NULL;
    snprintf(path, sizeof path, "%s/golden.safetensors", lora_dir());
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    return g;
}

typedef struct {
    int32_t ids[B * T], mask[B * T], labels[B], lengths[B], index[B];
    rt_batch batch;
} cls_batch;

static void load_batch(const ckpt_st_file *g, cls_batch *cb) {
    memset(cb, 0, sizeof *cb);
    const char *names[3] = {"input_ids", "attention_mask", "labels"};
    int32_t *dst[3] = {cb->ids, cb->mask, cb->labels};
    const size_t n[3] = {B * T, B * T, B};
    for (int k = 0; k < 3; k++) {
        ckpt_st_tensor t;
        TZ_EXPECT_OK(ckpt_safetensors_find(g, names[k], &t));
        TZ_EXPECT(t.dtype == RT_I32 && t.numel == n[k], "%s: not %zu int32s", names[k], n[k]);
        if (t.dtype == RT_I32 && t.numel == n[k]) memcpy(dst[k], t.data, n[k] * sizeof(int32_t));
    }
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
                           .n_targets = B};
}

/* A step's logits and mean loss against the golden file's. */
static void check_logits_loss(const ckpt_st_file *g, const char *fam, const float *logits, double loss_sum) {
    float ref_logits[B * NL], ref_loss, loss = (float)(loss_sum / B);
    char what[64];
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "logits", ref_logits, B * NL));
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "loss", &ref_loss, 1));
    snprintf(what, sizeof what, "%s logits", fam);
    tz_check_close(what, logits, ref_logits, B * NL, FWD_ATOL, FWD_RTOL);
    snprintf(what, sizeof what, "%s loss", fam);
    tz_check_close(what, &loss, &ref_loss, 1, FWD_ATOL, FWD_RTOL);
}

/* GPT-2's classifier as a tzlf_family (tests/lora_family.h): the golden batch, loaded by main. */
static cls_batch g_batch;

static rt_status gpt2_load(rt_backend *be, rt_comm *tp, const ckpt_peft_config *peft, const char *adapter, void **out) {
    gpt2_model *m = NULL;
    rt_status st = load_lora_tp(be, tp, peft, adapter, &m);
    *out = m;
    return st;
}
static void gpt2_free(void *m) { gpt2_model_free(m); }
static rt_params *gpt2_params(void *m) { return gpt2_model_params(m); }

static rt_status gpt2_golden_step(void *model, bool train, int64_t step, float *logits, float *loss) {
    gpt2_model *m = model;
    const mdl_pass pass = {.seed = 1, .step = step, .training = train};
    double loss_sum = 0;
    if (train) rt_params_zero_grad(gpt2_model_params(m));
    rt_status st = gpt2_cls_step(m, &g_batch.batch, &pass, train ? 1.0f / B : 0.0f, &loss_sum, logits);
    *loss = (float)(loss_sum / B);
    return st;
}

/* An adapter folder of another rank is refused, naming the tensor: PEFT's r 4 adapters into an
 * r 8 model. */
static void test_other_rank(rt_backend *be, const ckpt_peft_config *peft) {
    ckpt_peft_config r8;
    ckpt_peft_config_copy(&r8, peft);
    r8.r = 8;
    gpt2_model *m = load_lora(be, &r8, NULL);
    if (m) {
        rt_status st = ckpt_peft_load_weights(peft_adapter(), &ckpt_map_gpt2, gpt2_model_params(m), 0, 1, NULL);
        TZ_EXPECT(st == RT_ERR_FORMAT &&
                      strstr(rt_error_message(), "lora_A.weight' has shape [4, 64], expected [8, 64]"),
                  "another rank's adapter: status %d, %s", st, rt_error_message());
        gpt2_model_free(m);
    }
    ckpt_peft_config_free(&r8);
}

/* Our own initialisation, as PEFT's: A uniform within +-1/sqrt(in), spread over the range (PEFT's
 * own draw of the same model has its largest |A| near the bound too), and B zero, so the model
 * starts as the base. */
static void test_init(rt_backend *be, const ckpt_peft_config *peft) {
    gpt2_model *m = load_lora(be, peft, NULL);
    if (!m) return;
    rt_params *p = gpt2_model_params(m);
    char path[4096];
    ckpt_st_file *ref = NULL;
    snprintf(path, sizeof path, "%s/peft_default_init.safetensors", lora_dir());
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &ref));
    int checked = 0;
    for (int i = 0; ref && i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        if (!mdl_lora_is_adapter(s->name)) continue;
        const float *v = p->param + s->offset;
        const bool is_a = strstr(s->name, ".lora_A.") != NULL;
        double max_ours = 0, max_peft = 0;
        for (size_t j = 0; j < s->numel; j++) max_ours = fmax(max_ours, fabs(v[j]));
        char peft_name[256];
        TZ_EXPECT(ckpt_peft_param_name(&ckpt_map_gpt2, s->name, peft_name, sizeof peft_name), "%s", s->name);
        float *pv = rt_xmalloc(s->numel * sizeof(float));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(ref, peft_name, pv, s->numel));
        for (size_t j = 0; j < s->numel; j++) max_peft = fmax(max_peft, fabs(pv[j]));
        free(pv);
        if (is_a) {
            const double bound = 1.0 / sqrt((double)s->shape[1]);
            TZ_EXPECT(max_ours <= bound && max_ours > 0.9 * bound && max_peft <= bound && max_peft > 0.9 * bound,
                      "%s: max |A| %g (PEFT's %g), bound %g", s->name, max_ours, max_peft, bound);
        } else {
            TZ_EXPECT(max_ours == 0 && max_peft == 0, "%s: B not zero (%g, PEFT's %g)", s->name, max_ours, max_peft);
        }
        checked++;
    }
    TZ_EXPECT(checked == 2 * N_ADAPTED, "%d adapters checked", checked);
    ckpt_safetensors_close(ref);
    gpt2_model_free(m);
}

/* ---- BERT and RoBERTa ---- */

/* The tiny BERT (or RoBERTa) classifier with PEFT's adapters (tests/golden/FAMILY-tiny-lora): BERT's
 * on query, key and value (three adapters over tunezoo's one fused projection, each writing its
 * third) and on the three dense layers; RoBERTa's on query and value with its whole classifier
 * head saved (modules_to_save "classifier" holds classifier.dense). PEFT's logits, loss, every
 * trainable gradient and one AdamW step; the pooler and the rest frozen; and the folder written
 * after that step loads in PEFT to the logits it gives here. */
static void test_bert_family(rt_backend *be, bool roberta) {
    const char *fam = roberta ? "roberta" : "bert";
    const ckpt_map *map = roberta ? &ckpt_map_roberta : &ckpt_map_bert;
    const int expected = roberta ? 2 * 2 * 2 + 4 : 2 * 6 * 2 + 2; /* adapters of 2 layers, and the head */
    char base[4096], lora[4096], path[4200];
    snprintf(base, sizeof base, "%s",
             tz_source_path(roberta ? "tests/golden/roberta-tiny-cls" : "tests/golden/bert-tiny-cls"));
    snprintf(lora, sizeof lora, "%s",
             tz_source_path(roberta ? "tests/golden/roberta-tiny-lora" : "tests/golden/bert-tiny-lora"));
    bert_config cfg;
    ckpt_peft_config peft;
    ckpt_st_file *g = NULL;
    bert_model *m = NULL;
    snprintf(path, sizeof path, "%s/config.json", base);
    TZ_EXPECT_OK(bert_config_load(path, &cfg));
    snprintf(path, sizeof path, "%s/adapter", lora);
    TZ_EXPECT_OK(ckpt_peft_config_read(path, &peft));
    cfg.lora = &peft;
    TZ_EXPECT_OK(bert_model_init(&cfg, be, rt_comm_self(), B, T, 7, &m));
    snprintf(path, sizeof path, "%s/golden.safetensors", lora);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &g));
    if (!m || !g) {
        bert_model_free(m);
        ckpt_safetensors_close(g);
        ckpt_peft_config_free(&peft);
        return;
    }
    rt_params *p = bert_model_params(m);
    ckpt_load_report rep;
    snprintf(path, sizeof path, "%s/model.safetensors", base);
    TZ_EXPECT_OK(ckpt_load_hf(path, map, p, cfg.vocab_size, cfg.num_attention_heads, 0, 1, NULL, &rep));
    TZ_EXPECT(rep.missing == 0 && rep.adapters == expected - (roberta ? 4 : 2) && rep.unused == 0,
              "%s base: missing %d, %d adapters, unused %d", fam, rep.missing, rep.adapters, rep.unused);
    snprintf(path, sizeof path, "%s/adapter", lora);
    TZ_EXPECT_OK(ckpt_peft_load_weights(path, map, p, 0, 1, NULL));
    tzl_check_merged(lora, p, &peft, map, cfg.vocab_size, cfg.num_attention_heads, roberta ? 2 * 2 : 2 * 6);
    for (int i = 0; i < p->n; i++) { /* the pooler is no saved module: frozen, as in PEFT */
        const char *n = p->specs[i].name;
        const bool trains = mdl_lora_is_adapter(n) || strncmp(n, "classifier.", 11) == 0;
        TZ_EXPECT(p->specs[i].frozen == !trains, "%s %s: frozen %d", fam, n, p->specs[i].frozen);
    }

    cls_batch cb;
    load_batch(g, &cb);
    int32_t types[B * T];
    ckpt_st_tensor tt;
    if (!roberta && ckpt_safetensors_find(g, "token_type_ids", &tt) == RT_OK && tt.numel == B * T) {
        memcpy(types, tt.data, sizeof types);
        cb.batch.token_type_ids = types;
    }
    TZ_EXPECT(roberta || cb.batch.token_type_ids, "%s: no token_type_ids", fam);
    mdl_pass pass = {.seed = 1, .training = true};
    float logits[B * NL];
    double loss_sum = 0;
    rt_params_zero_grad(p);
    TZ_EXPECT_OK(bert_cls_step(m, &cb.batch, &pass, 1.0f / B, &loss_sum, logits));
    check_logits_loss(g, fam, logits, loss_sum);
    tzl_compare_trainable(g, "grad", p, true, map, expected);
    rt_adamw_hparams hp = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    TZ_EXPECT_OK(rt_adamw_step(p, &hp, 1.0f, 1));
    tzl_compare_trainable(g, "after_step", p, false, map, expected);

    /* the stepped adapters as a folder (TZ_LORA_EXPORT_BERT or _ROBERTA keeps it: how
     * FAMILY-tiny-lora/from-tunezoo was made); the committed one gives, loaded over the base here,
     * the logits PEFT gives with it (from_tunezoo.safetensors, gen_lora_golden.py --from-tunezoo) */
    char env[32];
    snprintf(env, sizeof env, "TZ_LORA_EXPORT_%s", roberta ? "ROBERTA" : "BERT");
    const char *keep = getenv(env);
    if (keep && *keep) {
        TZ_EXPECT_OK(rt_make_dirs(keep, "the adapter folder"));
        TZ_EXPECT_OK(ckpt_peft_config_write(keep, &peft));
        TZ_EXPECT_OK(ckpt_peft_save_weights(keep, map, p, rt_comm_self()));
    }
    bert_model_free(m);
    m = NULL;
    ckpt_peft_config back;
    snprintf(path, sizeof path, "%s/from-tunezoo", lora);
    TZ_EXPECT_OK(ckpt_peft_config_read(path, &back));
    cfg.lora = &back;
    TZ_EXPECT_OK(bert_model_init(&cfg, be, rt_comm_self(), B, T, 7, &m));
    ckpt_st_file *ref = NULL;
    snprintf(path, sizeof path, "%s/from_tunezoo.safetensors", lora);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &ref));
    if (m && ref) {
        p = bert_model_params(m);
        snprintf(path, sizeof path, "%s/model.safetensors", base);
        TZ_EXPECT_OK(ckpt_load_hf(path, map, p, cfg.vocab_size, cfg.num_attention_heads, 0, 1, NULL, &rep));
        snprintf(path, sizeof path, "%s/from-tunezoo", lora);
        TZ_EXPECT_OK(ckpt_peft_load_weights(path, map, p, 0, 1, NULL));
        float peft_logits[B * NL];
        const mdl_pass eval = {.seed = 1};
        TZ_EXPECT_OK(bert_cls_step(m, &cb.batch, &eval, 0.0f, &loss_sum, logits));
        TZ_EXPECT_OK(ckpt_safetensors_read_f32(ref, "logits", peft_logits, B * NL));
        char what[96];
        snprintf(what, sizeof what, "%s logits of the folder written here, in PEFT", fam);
        tz_check_close(what, logits, peft_logits, B * NL, FWD_ATOL, FWD_RTOL);
    }
    ckpt_safetensors_close(ref);
    ckpt_peft_config_free(&back);
    bert_model_free(m);
    ckpt_safetensors_close(g);
    ckpt_peft_config_free(&peft);
}

/* bf16 against PEFT under torch's CPU bf16 autocast, in the band the full models' bf16 tests use
 * (tests/loratest.h). */
/* ---- the language model: decoding with a key/value cache ---- */

/* GPT-2 as a language model with adapters on every linear and B non-zero: each step's logits of
 * greedy decoding (the caches filled after a full forward, then one token at a time through
 * mdl_stack_decode) are the full forward's at that position, and differ from the base model's. */
static void test_decode(rt_backend *be, const ckpt_peft_config *peft) {
    enum { P = 5, NEW = 6, TT = P + NEW };
    char path[4096];
    gpt2_config cfg;
    snprintf(path, sizeof path, "%s/config.json", base_dir());
    TZ_EXPECT_OK(gpt2_config_load(path, &cfg));
    cfg.num_labels = 0;
    ckpt_peft_config lm;
    ckpt_peft_config_copy(&lm, peft);
    lm.n_save = 0; /* a language model saves no head */
    const int V = cfg.vocab_size;
    float *steps[2], *full = rt_xmalloc((size_t)TT * V * sizeof(float));
    int32_t prompt[P] = {17, 250, 3, 999, 42}, out[2][NEW], ids[TT];
    for (int with = 0; with < 2; with++) {
        cfg.lora = with ? &lm : NULL;
        gpt2_model *m = NULL;
        TZ_EXPECT_OK(gpt2_model_init(&cfg, be, rt_comm_self(), 1, TT, 5, &m));
        if (!m) break;
        rt_params *p = gpt2_model_params(m);
        for (int i = 0; i < p->n; i++) /* B from PEFT's zeros to values that move the logits */
            if (strstr(p->specs[i].name, ".lora_B."))
                for (size_t j = 0; j < p->specs[i].numel; j++)
                    p->param[p->specs[i].offset + j] = 0.05f * sinf(0.37f * (float)(j + 7 * (size_t)i));
        steps[with] = rt_xmalloc((size_t)NEW * V * sizeof(float));
        const gpt2_sample_opts so = {
            .max_new_tokens = NEW, .temperature = 0, .top_k = 0, .top_p = 1, .eos_token_id = -1};
        int n_out = 0;
        TZ_EXPECT_OK(gpt2_generate(m, prompt, P, &so, out[with], &n_out, steps[with]));
        TZ_EXPECT(n_out == NEW, "%d tokens generated", n_out);
        memcpy(ids, prompt, sizeof prompt);
        memcpy(ids + P, out[with], sizeof out[with]);
        TZ_EXPECT_OK(gpt2_lm_logits(m, ids, 1, TT, full, NULL));
        /* step k's logits come from position P - 1 + k */
        tz_check_close(with ? "LoRA: decoding's logits vs the full forward's" : "base: decoding vs the full forward",
                       steps[with], full + (size_t)(P - 1) * V, (size_t)NEW * V, FWD_ATOL, FWD_RTOL);
        gpt2_model_free(m);
    }
    double diff = 0;
    for (size_t j = 0; j < (size_t)V; j++) diff = fmax(diff, fabs(steps[0][j] - steps[1][j]));
    TZ_EXPECT(diff > 1e-3, "the adapters did not change the first step's logits (max difference %g)", diff);
    free(steps[0]), free(steps[1]), free(full);
    ckpt_peft_config_free(&lm);
}

/* ---- tensor parallelism ---- */

enum { DROP_STEPS = 3 };

typedef struct {
    const ckpt_peft_config *peft;
    float losses[DROP_STEPS]; /* rank 0's */
} tp_arg;

static rt_status lora_rank(rt_comm *tp, void *arg) {
    tp_arg *a = arg;
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    gpt2_model *m = NULL;
    RT_TRY(rt_backend_init("cpu", 1, &be));
    RT_TRY(load_lora_tp(be, tp, a->peft, peft_adapter(), &m));
    rt_params *p = gpt2_model_params(m);
    mdl_pass pass = {.seed = 11, .training = true};
    double loss_sum = 0;
    const rt_adamw_hparams hp = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
    for (int s = 0; s < DROP_STEPS; s++) {
        rt_params_zero_grad(p);
        pass.step = s;
        RT_TRY(gpt2_cls_step(m, &g_batch.batch, &pass, 1.0f / B, &loss_sum, NULL));
        a->losses[s] = (float)(loss_sum / B);
        RT_TRY(rt_adamw_step(p, &hp, 1.0f, s + 1));
    }
fail:
    gpt2_model_free(m);
    rt_backend_free(be);
    return st;
}

/* LoRA dropout at tp 1, 2 and 4: every tp size drops the same elements, so the losses of three
 * AdamW steps agree, and differ from the golden loss without dropout. */
static void test_tp_dropout(const ckpt_peft_config *peft) {
    ckpt_st_file *g = open_golden();
    if (!g) return;
    float loss_without;
    TZ_EXPECT_OK(ckpt_safetensors_read_f32(g, "loss", &loss_without, 1));
    ckpt_safetensors_close(g);
    ckpt_peft_config dropped;
    ckpt_peft_config_copy(&dropped, peft);
    dropped.dropout = 0.2;
    float ref[DROP_STEPS];
    for (int tp = 1; tp <= 4; tp *= 2) {
        tp_arg args[4];
        for (int r = 0; r < tp; r++) args[r] = (tp_arg){.peft = &dropped};
        TZ_EXPECT_OK(tz_run_ranks(tp, 120, lora_rank, args, sizeof args[0]));
        if (tp == 1) { /* the first step's loss is the golden one's, but for the dropout */
            memcpy(ref, args[0].losses, sizeof ref);
            TZ_EXPECT(fabsf(ref[0] - loss_without) > 1e-3f, "LoRA dropout changed nothing: loss %g, %g without", ref[0],
                      loss_without);
            continue;
        }
        char what[64];
        snprintf(what, sizeof what, "LoRA dropout losses at tp %d", tp);
        tz_check_close(what, args[0].losses, ref, DROP_STEPS, FWD_ATOL, FWD_RTOL);
    }
    ckpt_peft_config_free(&dropped);
}

int main(void) {
    snprintf(base_path, sizeof base_path, "%s", tz_source_path("tests/golden/gpt2-tiny-cls"));
    snprintf(lora_path, sizeof lora_path, "%s", tz_source_path("tests/golden/gpt2-tiny-lora"));
    snprintf(adapter_path, sizeof adapter_path, "%s", tz_source_path("tests/golden/gpt2-tiny-lora/adapter"));
    /* adapters on 2 blocks x (c_attn, attn.c_proj, c_fc, mlp.c_proj), and the score head saved */
    tzlf_family f = {.name = "gpt2",
                     .map = &ckpt_map_gpt2,
                     .n_logits = B * NL,
                     .n_adapters = 2 * N_ADAPTED,
                     .n_saved = 1,
                     .n_heads = 4,
                     .vocab = 1000,
                     .load = gpt2_load,
                     .free = gpt2_free,
                     .params = gpt2_params,
                     .step = gpt2_golden_step};
    snprintf(f.dir, sizeof f.dir, "%s", lora_path);
    ckpt_st_file *g = open_golden();
    if (g) load_batch(g, &g_batch);
    ckpt_safetensors_close(g);
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 2, &be));
    ckpt_peft_config peft;
    TZ_EXPECT_OK(ckpt_peft_config_read(peft_adapter(), &peft));
    if (!be) return tz_test_result("test_golden_lora");
    tzlf_against_peft(&f, be, &peft);
    tzlf_bf16(&f, be, &peft);
    tzlf_tp(&f, &peft);
    tzlf_round_trip(&f, be, &peft);
    tzlf_loads_in_peft(&f, be);
    test_other_rank(be, &peft);
    test_init(be, &peft);
    test_decode(be, &peft);
    test_bert_family(be, false);
    test_bert_family(be, true);
    test_tp_dropout(&peft);
    ckpt_peft_config_free(&peft);
    rt_backend_free(be);
    return tz_test_result("test_golden_lora");
}
