/* The shared GLUE fine-tuning driver (see glue_app.h): everything gpt2-classify and
 * bert-classify have in common, with the model family plugged in. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "apps/common/glue_app.h"
#include "apps/common/glue_files.h"
#include "apps/common/train_app.h"
#include "apps/common/train_lora.h"
#include "checkpoints/ckpt_safetensors.h"
#include "checkpoints/ckpt_source.h"
#include "checkpoints/ckpt_train.h"
#include "data/data_cache.h"
#include "data/data_collate.h"
#include "data/data_dataset.h"
#include "data/data_glue.h"
#include "data/data_loader.h"
#include "metrics/metric_glue.h"
#include "models/layers/hf_config.h"
#include "runtime/base/rt_args.h"
#include "runtime/base/rt_atomic.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/comm/rt_grid.h"
#include "runtime/comm/rt_launch.h"
#include "runtime/base/rt_log.h"
#include "runtime/train/rt_trainer.h"
#include "tokenizers/tok.h"

typedef struct {
    const char *dataset, *model, *arch, *tokenizer, *data_dir, *predict, *predict_out, *save_hf;
    const char *train_file, *validation_file, *test_file, *data_format, *text_columns, *label_column, *label_names,
        *positive_label, *label_separator;
    int64_t max_len;
    train_app_opts t; /* the options every training program shares */
} gc_opts;

static gc_opts O;

/* This program's own options; main appends the shared training ones (train_app.h). */
/* clang-format off */
static const rt_opt gc_own_options[] = {
    {"dataset", RT_OPT_CHOICE, &O.dataset, "mrpc", NULL, "GLUE task (tasks other than mrpc need --data-dir)",
     "cola|sst2|mrpc|qqp|stsb|mnli|qnli|rte|wnli", 0, 0},
    {"model", RT_OPT_STRING, &O.model, NULL, "DIR",
     "HF model directory (config.json, model.safetensors or pytorch_model.bin, tokenizer files) or a tz-convert "
     "folder at any tp; default: the HF cache when the program names a model there, else a small model from scratch",
     NULL, 0, 0},
    {"arch", RT_OPT_STRING, &O.arch, NULL, "FILE", "HF config.json to build that model from scratch (no weights)", NULL, 0,
     0},
    {"tokenizer", RT_OPT_STRING, &O.tokenizer, NULL, "PATH",
     "tokenizer directory or file when --model has none (default: the one shipped for the model family)", NULL, 0, 0},
    {"data-dir", RT_OPT_STRING, &O.data_dir, NULL, "DIR", "folder with the task's GLUE files (default: the shipped MRPC copy)",
     NULL, 0, 0},
    {"train-file", RT_OPT_STRING, &O.train_file, NULL, "FILE",
     "your own training data instead of --dataset: CSV, TSV, JSON Lines or a JSON array of records, with a header "
     "or keys naming the columns", NULL, 0, 0},
    {"validation-file", RT_OPT_STRING, &O.validation_file, NULL, "FILE",
     "with --train-file: the rows scored at each evaluation (its labels must be among the train file's)", NULL, 0, 0},
    {"test-file", RT_OPT_STRING, &O.test_file, NULL, "FILE",
     "with --train-file: after training, predict every row into SAVE_DIR/predictions.csv (.tsv, .jsonl as the file "
     "is), its columns then prediction and prob_CLASS", NULL, 0, 0},
    TRAIN_APP_DATA_FORMAT_OPT(&O.data_format),
    {"text-columns", RT_OPT_STRING, &O.text_columns, NULL, "A[,B]",
     "the text column, or two for a pair (default: sentence1,sentence2 when both exist, else text, else the first "
     "two text columns)", NULL, 0, 0},
    {"label-column", RT_OPT_STRING, &O.label_column, "label", "NAME",
     "the label column: text or whole numbers are classes (sorted), numbers with a fraction mean regression, a "
     "JSON list of classes means multi-label", NULL, 0, 0},
    {"label-separator", RT_OPT_STRING, &O.label_separator, NULL, "SEP",
     "multi-label: split each text label into classes at SEP (e.g. '|' for sports|politics)", NULL, 0, 0},
    {"label-names", RT_OPT_STRING, &O.label_names, NULL, "A,B,...",
     "the classes in id order (default: the train file's labels, sorted)", NULL, 0, 0},
    {"positive-label", RT_OPT_STRING, &O.positive_label, NULL, "NAME",
     "two classes: the one whose F1 is reported (default: the second)", NULL, 0, 0},
    {"max-len", RT_OPT_INT, &O.max_len, "128", NULL, "truncate each pair to N tokens (longest first)", NULL, 1, 1 << 20},
    {"predict", RT_OPT_STRING, &O.predict, NULL, "FILE.tsv", "after training, predict every row of a GLUE-format TSV",
     NULL, 0, 0},
    {"predict-out", RT_OPT_STRING, &O.predict_out, NULL, "FILE",
     "where --predict writes (default: SAVE_DIR/predictions.tsv)", NULL, 0, 0},
    {"save-hf", RT_OPT_STRING, &O.save_hf, NULL, "DIR",
     NULL /* the family's class: glue_app_main */, NULL, 0, 0},
};
/* clang-format on */
#define GC_N_OWN ((int)(sizeof gc_own_options / sizeof gc_own_options[0]))
static rt_opt gc_options[GC_N_OWN + TRAIN_APP_N_OPTS + TRAIN_APP_N_CHECKPOINT_OPTS + TRAIN_APP_N_LORA_OPTS];

static rt_args_spec gc_spec = {
    .prog = "glue",
    .opts = gc_options,
};

/* The model family of this program (glue_app_main sets it). */
static const glue_app_model *F;

/* ---- where the weights come from ---- */

typedef struct {
    train_app_source files;
    const char *what; /* for the log line */
    char what_buf[256];
} gc_source;

/* ~/.cache/huggingface/hub/models--<repo>/snapshots/<rev>/ with config.json and weights. */
static int gc_find_hf_cache(const char *repo, char *dir, size_t size) {
    const char *hf_home = getenv("HF_HOME"), *home = getenv("HOME");
    char hub[4096];
    if (!repo) return 0;
    if (hf_home && *hf_home)
        snprintf(hub, sizeof hub, "%s/hub/models--%s/snapshots", hf_home, repo);
    else if (home && *home)
        snprintf(hub, sizeof hub, "%s/.cache/huggingface/hub/models--%s/snapshots", home, repo);
    else
        return 0;
    DIR *d = opendir(hub);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char cfg[4096 + 300], w[4096 + 300];
        snprintf(cfg, sizeof cfg, "%s/%s/config.json", hub, e->d_name);
        snprintf(w, sizeof w, "%s/%s/model.safetensors", hub, e->d_name);
        if (train_app_exists(cfg) && train_app_exists(w)) {
            snprintf(dir, size, "%s/%s", hub, e->d_name);
            found = 1;
        }
    }
    closedir(d);
    return found;
}

/* --model, --arch, or the model from the local HF cache, else a small model from scratch. */
static rt_status gc_resolve_source(gc_source *s) {
    char cached[4096] = "";
    memset(s, 0, sizeof *s);
    if (O.model) {
        s->what = "pretrained weights from --model";
    } else if (O.arch) {
        s->what = "random init (HF's scheme) with the architecture from --arch";
    } else if (gc_find_hf_cache(F->hf_cache_repo, cached, sizeof cached)) {
        snprintf(s->what_buf, sizeof s->what_buf, "pretrained %s from the local HF cache", F->hf_cache_repo);
        s->what = s->what_buf;
    } else {
        snprintf(s->what_buf, sizeof s->what_buf, "random init of %s (no --model%s%s%s)", F->scratch_desc,
                 F->hf_cache_repo ? ", and no HF '" : "", F->hf_cache_repo ? F->hf_cache_repo : "",
                 F->hf_cache_repo ? "' in the local cache" : "");
        s->what = s->what_buf;
    }
    return train_app_resolve_source(O.model     ? O.model
                                    : cached[0] ? cached
                                                : NULL,
                                    O.arch, O.tokenizer, F->default_tokenizer, F->family, &s->files);
}

/* ---- evaluation ---- */

typedef struct {
    const mdl_classifier *model;
    const data_tokenized *ds;
    const data_glue_task *task; /* a GLUE task's scoring, or */
    const data_user_task *user; /* a user's classes or regression (--train-file) */
    int batch_size;
    int32_t pad_id;
    const data_pad *pad;
    rt_batch batch;
    int32_t *pred; /* (n) */
    float *probs;  /* (n, num_labels) */
    float *logits; /* (batch_size, num_labels) */
    int32_t *idx;
    float *reduce; /* (n * (num_labels + 1) + 1) results assembled over dp */
    rt_comm *dp;
    const char *prefix; /* the split's name in metric names, when the task has several */
    int n_splits;       /* in the first of an array of splits: how many there are */
    char names[RT_MAX_METRICS][48];
} gc_eval;

/* Runs the model over every row; fills pred and probs; returns the summed loss. Each dp rank
 * takes a contiguous share of the rows, and one all-reduce assembles the full results on
 * every rank (rows outside a rank's share are zero there). */
static rt_status gc_predict_all(gc_eval *e, double *loss_sum) {
    rt_status st = RT_OK;
    const int NL = e->model->num_labels;
    const bool multi = e->user && e->user->type == DATA_TASK_MULTI_LABEL;
    const size_t n = e->ds->n, w = (size_t)e->dp->size, r = (size_t)e->dp->rank;
    const size_t lo = n * r / w, hi = n * (r + 1) / w;
    float *red = e->reduce; /* (n*NL) probs, (n) predictions, (1) loss */
    mdl_pass pass = {.training = false};
    memset(red, 0, (n * (size_t)(NL + 1) + 1) * sizeof(float));
    double local_loss = 0;
    for (size_t start = lo; start < hi; start += (size_t)e->batch_size) {
        int count = (int)((hi - start) < (size_t)e->batch_size ? hi - start : (size_t)e->batch_size);
        for (int i = 0; i < count; i++) e->idx[i] = (int32_t)(start + (size_t)i);
        RT_TRY(data_collate_classification(e->ds, e->idx, count, e->pad_id, e->pad, &e->batch));
        double l = 0;
        RT_TRY(e->model->step(e->model->model, &e->batch, &pass, 0.0f, &l, e->logits));
        local_loss += l;
        for (int i = 0; i < count; i++) {
            const float *z = e->logits + (size_t)i * NL;
            float *p = red + (start + (size_t)i) * NL;
            if (NL == 1) { /* regression: the output itself is the prediction */
                p[0] = z[0];
                continue;
            }
            if (multi) { /* each class its own sigmoid; a class is predicted above 0.5 (gc_multi_pred) */
                for (int k = 0; k < NL; k++) p[k] = (float)(1.0 / (1.0 + exp(-(double)z[k])));
                continue;
            }
            double mx = z[0], sum = 0;
            int arg = 0;
            for (int k = 1; k < NL; k++)
                if (z[k] > mx) mx = z[arg = k];
            for (int k = 0; k < NL; k++) sum += exp((double)z[k] - mx);
            for (int k = 0; k < NL; k++) p[k] = (float)(exp((double)z[k] - mx) / sum);
            red[n * NL + start + (size_t)i] = (float)arg;
        }
    }
    red[n * (size_t)(NL + 1)] = (float)local_loss;
    if (w > 1) RT_TRY(e->dp->ops->all_reduce(e->dp->ctx, red, n * (size_t)(NL + 1) + 1, RT_REDUCE_SUM));
    memcpy(e->probs, red, n * (size_t)NL * sizeof(float));
    for (size_t i = 0; i < n; i++) e->pred[i] = (int32_t)red[n * NL + i];
    *loss_sum = w > 1 ? (double)red[n * (size_t)(NL + 1)] : local_loss;
fail:
    return st;
}

/* Adds one metric, prefixed with the split's name when the task has several dev sets. */
static void gc_metric(gc_eval *e, rt_metrics *out, const char *name, double value) {
    if (out->n >= RT_MAX_METRICS) return;
    char *slot = e->names[out->n];
    if (e->prefix)
        snprintf(slot, sizeof e->names[0], "%s_%s", e->prefix, name);
    else
        snprintf(slot, sizeof e->names[0], "%s", name);
    out->names[out->n] = slot;
    out->values[out->n++] = value;
}

/* Pearson, Spearman (and MSE for a user's regression). */
static rt_status gc_score_regression(gc_eval *e, rt_metrics *out, bool mse) {
    double spearman;
    const data_tokenized *ds = e->ds;
    gc_metric(e, out, "pearson", metric_pearson(e->probs, ds->targets, ds->n));
    rt_status st = metric_spearman(e->probs, ds->targets, ds->n, &spearman);
    if (st != RT_OK) return st;
    gc_metric(e, out, "spearman", spearman);
    if (mse) gc_metric(e, out, "mse", metric_mse(e->probs, ds->targets, ds->n));
    return RT_OK;
}

/* Multi-label predictions as 0/1 a class (n, NL): a probability above 0.5, which is HF's logit
 * above 0 but for logits within 2.4e-7 of 0 that round to 0.5 in float. */
static uint8_t *gc_multi_pred(const gc_eval *e) {
    const size_t cells = e->ds->n * (size_t)e->model->num_labels;
    uint8_t *pred = rt_xmalloc(cells ? cells : 1);
    for (size_t i = 0; i < cells; i++) pred[i] = e->probs[i] > 0.5f;
    return pred;
}

/* A user's task: accuracy, macro-F1 and, with two classes, the positive class's F1; multi-label's
 * micro-F1, macro-F1 and exact match; or regression's correlations and MSE. */
static rt_status gc_score_user(gc_eval *e, rt_metrics *out) {
    const data_tokenized *ds = e->ds;
    if (e->user->type == DATA_TASK_REGRESSION) return gc_score_regression(e, out, true);
    if (e->user->type == DATA_TASK_MULTI_LABEL) {
        uint8_t *pred = gc_multi_pred(e);
        metric_multilabel_scores m = metric_multilabel(pred, ds->targets, ds->n, e->user->n_labels);
        free(pred);
        gc_metric(e, out, "f1_micro", m.f1_micro);
        gc_metric(e, out, "f1_macro", m.f1_macro);
        gc_metric(e, out, "exact_match", m.exact_match);
        return RT_OK;
    }
    gc_metric(e, out, "accuracy", metric_accuracy(e->pred, ds->labels, ds->n));
    gc_metric(e, out, "f1_macro", metric_f1_macro(e->pred, ds->labels, ds->n, e->user->n_labels));
    if (e->user->positive >= 0) gc_metric(e, out, "f1", metric_f1_class(e->pred, ds->labels, ds->n, e->user->positive));
    return RT_OK;
}

/* Scores one dev set as GLUE does: accuracy (+ F1 or MCC), or Pearson and Spearman. */
static rt_status gc_evaluate_split(gc_eval *e, rt_metrics *out) {
    double loss_sum;
    rt_status st = gc_predict_all(e, &loss_sum);
    if (st != RT_OK) return st;
    const data_tokenized *ds = e->ds;
    size_t labelled = 0;
    for (size_t i = 0; i < ds->n; i++)
        labelled += ds->targets ? !isnan(ds->targets[i * (size_t)ds->target_width]) : ds->labels[i] != DATA_LABEL_NONE;
    gc_metric(e, out, "loss", labelled ? loss_sum / (double)labelled : 0.0);
    if (e->user) return gc_score_user(e, out);
    if (e->task->metric == DATA_METRIC_PEARSON_SPEARMAN) return gc_score_regression(e, out, false);
    gc_metric(e, out, "accuracy", metric_accuracy(e->pred, ds->labels, ds->n));
    if (e->task->metric == DATA_METRIC_ACC_F1) gc_metric(e, out, "f1", metric_f1_binary(e->pred, ds->labels, ds->n));
    if (e->task->metric == DATA_METRIC_MCC) gc_metric(e, out, "mcc", metric_mcc_binary(e->pred, ds->labels, ds->n));
    return RT_OK;
}

/* The loop's evaluation: every dev set of the task (MNLI: matched and mismatched). */
static rt_status gc_evaluate(void *ctx, rt_metrics *out) {
    gc_eval *splits = ctx;
    out->n = 0;
    for (int k = 0; k < splits[0].n_splits; k++) {
        rt_status st = gc_evaluate_split(&splits[k], out);
        if (st != RT_OK) return st;
    }
    return RT_OK;
}

static void gc_eval_init(gc_eval *e, const mdl_classifier *m, const data_tokenized *ds, const data_glue_task *task,
                         int32_t pad, rt_comm *dp) {
    int NL = m->num_labels;
    memset(e, 0, sizeof *e);
    e->model = m;
    e->ds = ds;
    e->task = task;
    e->batch_size = (int)O.t.batch_size;
    e->pad_id = pad;
    e->pad = &O.t.pad;
    e->pred = rt_xcalloc(ds->n + 1, sizeof(int32_t));
    e->probs = rt_xcalloc((ds->n + 1) * (size_t)NL, sizeof(float));
    e->logits = rt_xcalloc((size_t)O.t.batch_size * (size_t)NL, sizeof(float));
    e->idx = rt_xcalloc((size_t)O.t.batch_size, sizeof(int32_t));
    e->reduce = rt_xcalloc(ds->n * (size_t)(NL + 1) + 1, sizeof(float));
    e->dp = dp;
}

static void gc_eval_free(gc_eval *e) {
    data_batch_free(&e->batch);
    free(e->pred);
    free(e->probs);
    free(e->logits);
    free(e->idx);
    free(e->reduce);
}

/* ---- training callbacks ---- */

static rt_status gc_step(void *model, const rt_batch *b, const mdl_pass *pass, float grad_scale, double *loss_sum) {
    const mdl_classifier *m = model;
    return m->step(m->model, b, pass, grad_scale, loss_sum, NULL);
}

static rt_status gc_pipeline_step(void *model, const rt_batch *b, int n, uint64_t seed, int64_t step, float grad_scale,
                                  double *loss_sum) {
    const mdl_classifier *m = model;
    return m->pipeline_step(m->model, b, n, seed, step, grad_scale, loss_sum);
}

static double gc_flops(void *model, const rt_batch *b) {
    const mdl_classifier *m = model;
    return m->train_flops ? m->train_flops(m->model, b->B, b->T) : 0;
}

/* ---- --comm-stats ---- */

/* The classifiers' tp and pp formulas, after train_app_comm_count_print's table and dp
 * formulas: Megatron tp all-reduces B x T x C activations once for the vocab-parallel embedding
 * and four times per layer (two row-parallel outputs forward, two column-parallel input
 * gradients backward); the first pipeline stage sends each micro-batch's B x T x C output
 * forward (the later stages also send as much back, as gradients). */
static void gc_print_comm_formulas(const glue_model *m, const rt_grid *grid, int64_t steps, double padded_tokens) {
    if (grid->world->rank != 0 || steps <= 0) return;
    double tp_formula = grid->tp_size > 1 ? 4.0 * m->tp_floats_per_token * padded_tokens / (double)steps + 4.0 : 0.0;
    rt_log_info("  formula tp all_reduce: 4 B x %.0f floats per token (C x (4 L + 1) for GPT-2) x B*T %.1f per step "
                "+ 4 B stop flag = %.4f MB",
                m->tp_floats_per_token, padded_tokens / (double)steps, tp_formula / 1e6);
    if (grid->pp_size > 1)
        rt_log_info(
            "  formula pp p2p (the first stage): 4 B x C %d x B*T %.1f per step = %.4f MB (a middle stage sends "
            "twice that: activations on, gradients back)",
            m->hidden, padded_tokens / (double)steps, 4.0 * m->hidden * padded_tokens / (double)steps / 1e6);
}

/* ---- --predict ---- */

/* What the train and dev sets are made from, for the tokenized cache. */
typedef struct {
    const data_glue_task *task;
    const char *data_dir, *train_path;
    const tok_tokenizer *tok;
} gc_build_ctx;

/* The cache key: the task, its train and dev files, the tokenizer's files and --max-len. */
static rt_status gc_cache_key(const gc_build_ctx *b, const char *tokenizer_path, data_cache_key *key) {
    rt_status st = RT_OK;
    data_cache_key_init(key, "glue-pairs");
    data_cache_key_int(key, DATA_CACHE_TOKENS_REVISION);
    data_cache_key_str(key, b->task->name);
    data_cache_key_int(key, O.max_len);
    RT_TRY(data_cache_key_tokenizer(key, tokenizer_path));
    RT_TRY(data_cache_key_file(key, b->train_path));
    for (int k = 0; k < b->task->n_dev; k++)
        for (int f = 0; f < DATA_GLUE_MAX_FILES && b->task->dev[k].files[f]; f++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", b->data_dir, b->task->dev[k].files[f]);
            RT_TRY(data_cache_key_file(key, path));
        }
fail:
    return st;
}

/* data_cache_build_fn: sets[0] = train, sets[1 + k] = dev split k. */
static rt_status gc_build_sets(void *ctx, data_tokenized *sets, int n_sets) {
    const gc_build_ctx *b = ctx;
    rt_status st = RT_OK;
    data_examples ex = {0};
    for (int s = 0; s < n_sets; s++) {
        if (s == 0)
            RT_TRY(data_glue_load(b->task, b->train_path, true, &ex));
        else
            RT_TRY(data_glue_load_split(b->task, b->data_dir, &b->task->dev[s - 1], true, &ex));
        RT_TRY(data_tokenize_pairs(&ex, b->tok, (int)O.max_len, &sets[s]));
        data_examples_free(&ex);
    }
fail:
    data_examples_free(&ex);
    return st;
}

static rt_status gc_predict_file(const mdl_classifier *m, const tok_tokenizer *tok, const data_glue_task *task,
                                 int32_t pad, const rt_grid *grid) {
    rt_status st = RT_OK;
    data_examples ex = {0};
    data_tokenized ds = {0};
    gc_eval e = {0};
    rt_atomic_file *f = NULL;
    char out_path[4096];
    /* a labelled split (train/dev) or the unlabelled test layout */
    if (data_glue_load(task, O.predict, true, &ex) != RT_OK) {
        char first[1024];
        snprintf(first, sizeof first, "%s", rt_error_message());
        data_examples_free(&ex);
        memset(&ex, 0, sizeof ex);
        if (data_glue_load(task, O.predict, false, &ex) != RT_OK) RT_FAIL(RT_ERR_FORMAT, "--predict: %s", first);
    }
    RT_TRY(data_tokenize_pairs(&ex, tok, (int)O.max_len, &ds));
    gc_eval_init(&e, m, &ds, task, pad, grid->dp_host);
    double loss;
    RT_TRY(gc_predict_all(&e, &loss));
    if (grid->world->rank != 0) goto fail; /* every rank has the results; one writes them */
    if (O.predict_out)
        snprintf(out_path, sizeof out_path, "%s", O.predict_out);
    else
        snprintf(out_path, sizeof out_path, "%s/predictions.tsv", O.t.save_dir);
    /* written whole or not at all: a full disk leaves the old file, not half of a new one */
    RT_TRY(rt_atomic_begin(out_path, &f));
    int NL = m->num_labels;
    char row[1024]; /* one row: an index, the label and 15 bytes per probability */
    RT_CHECK(NL >= 1 && NL <= 60, "num_labels %d", NL);
    int n = snprintf(row, sizeof row, "index\tprediction");
    for (int k = 0; k < NL && NL > 1; k++) n += snprintf(row + n, sizeof row - (size_t)n, "\tprob_%d", k);
    n += snprintf(row + n, sizeof row - (size_t)n, "\n");
    RT_TRY(rt_atomic_write(f, row, (size_t)n));
    for (size_t i = 0; i < ds.n; i++) {
        if (NL == 1) { /* regression: the predicted score */
            n = snprintf(row, sizeof row, "%zu\t%.6f\n", i, e.probs[i]);
        } else {
            n = snprintf(row, sizeof row, "%zu\t%d", i, e.pred[i]);
            for (int k = 0; k < NL; k++) n += snprintf(row + n, sizeof row - (size_t)n, "\t%.6f", e.probs[i * NL + k]);
            n += snprintf(row + n, sizeof row - (size_t)n, "\n");
        }
        RT_TRY(rt_atomic_write(f, row, (size_t)n));
    }
    st = rt_atomic_commit(f);
    f = NULL;
    RT_TRY(st);
    rt_log_info("wrote %zu predictions to %s", ds.n, out_path);
fail:
    rt_atomic_abort(f);
    gc_eval_free(&e);
    data_tokenized_free(&ds);
    data_examples_free(&ex);
    return st;
}

/* ---- --save-hf ---- */

/* An HF folder Transformers loads with from_pretrained: config.json, model.safetensors and
 * the tokenizer files under HF's names (encoder.json/vocab.bpe are the same bytes as
 * vocab.json/merges.txt). */
typedef struct {
    const mdl_classifier *m;
    const char *tokenizer_path;
    const rt_grid *grid;
    const char *const *names; /* the classes' names for config.json; NULL: as the model wrote them */
    int n_names;
    bool multi_label; /* problem_type multi_label_classification */
} gc_export;

static rt_status gc_write_hf(void *ctx, const char *folder) {
    const gc_export *x = ctx;
    /* config.json and the weights (gathered over tp); the first replica's tp group does it */
    rt_status st = x->grid->dp_rank == 0 ? x->m->save_hf(x->m->model, folder) : RT_OK;
    if (st == RT_OK && x->grid->world->rank == 0) st = train_app_copy_tokenizer(x->tokenizer_path, folder);
    if (st == RT_OK && x->grid->world->rank == 0 && x->names) {
        char config[4096];
        snprintf(config, sizeof config, "%s/config.json", folder);
        st = glue_files_label_config(config, x->n_names, x->names, x->multi_label);
    }
    return st;
}

/* --save-hf: the model (with LoRA, merged) as an HF folder. */
static rt_status gc_save_hf(const mdl_classifier *m, const char *tokenizer_path, const rt_grid *grid,
                            const char *const *names, int n_names, bool multi_label, const ckpt_peft_config *lora,
                            const ckpt_map *map, rt_params *params) {
    gc_export x = {m, tokenizer_path, grid, names, n_names, multi_label};
    return train_app_export_model(O.save_hf, grid, lora, map, params, gc_write_hf, &x);
}

/* ---- a user's files ---- */

/* --train-file and the options that go with it, checked against the GLUE ones. */
static rt_status gc_files_options(glue_files_opts *o) {
    memset(o, 0, sizeof *o);
    const char *needs_train[] = {"validation-file", "test-file",      "text-columns",
                                 "label-names",     "positive-label", "label-separator"};
    if (!O.train_file) {
        const char *stray = train_app_first_given(&gc_spec, needs_train, sizeof needs_train / sizeof needs_train[0]);
        return stray ? rt_errorf(RT_ERR_USAGE, "--%s goes with --train-file (your own data files)", stray) : RT_OK;
    }
    const char *glue_only[] = {"dataset", "data-dir", "predict"};
    const char *given = train_app_first_given(&gc_spec, glue_only, sizeof glue_only / sizeof glue_only[0]);
    if (given)
        return rt_errorf(RT_ERR_USAGE, "--%s is for GLUE tasks; with --train-file %s", given,
                         strcmp(given, "predict") == 0 ? "use --test-file" : "leave it out");
    o->train = O.train_file;
    o->validation = O.validation_file;
    o->test = O.test_file;
    o->format = (data_format)data_format_parse(O.data_format);
    o->user = (data_user_opts){.text_columns = O.text_columns,
                               .label_column = O.label_column,
                               .label_names = O.label_names,
                               .positive_label = O.positive_label,
                               .label_separator = O.label_separator};
    if (O.label_separator && !*O.label_separator) return rt_errorf(RT_ERR_USAGE, "--label-separator: it is empty");
    return RT_OK;
}

/* The model's own class names (its config's id2label, when it names them), as HF's run_glue
 * weighs them: the train file's classes take the model's order when they are the same set;
 * otherwise the file's classes stand and the model's names are dropped, with a warning. Returns
 * the --label-names to resolve the task with (NULL: as it is). */
static const char *gc_model_order(const glue_files *files, char *const *model_names, int n_model, char *buf,
                                  size_t cap) {
    const data_user_task *t = &files->task;
    if (!model_names || O.label_names || t->type == DATA_TASK_REGRESSION) return NULL;
    bool same = n_model == t->n_labels; /* every model name is one of the file's classes (no name twice) */
    for (int i = 0; same && i < n_model; i++) {
        bool found = false;
        for (int k = 0; k < t->n_labels; k++) found |= strcmp(model_names[i], t->label_names[k]) == 0;
        same = found && strchr(model_names[i], ',') == NULL;
        for (int j = 0; same && j < i; j++) same = strcmp(model_names[i], model_names[j]) != 0;
    }
    if (!same) {
        rt_log_warn("the model's classes (id2label: %d, the first '%s') are not the train file's; the head learns the "
                    "file's classes",
                    n_model, model_names[0]);
        return NULL;
    }
    size_t n = 0;
    for (int i = 0; i < n_model && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? "," : "", model_names[i]);
    if (n >= cap) return NULL;
    rt_log_info("classes in the model's id2label order: %s", buf);
    return buf;
}

/* Each class's precision, recall and F1 on the validation set, after the last evaluation. */
static void gc_log_classes(const gc_eval *e) {
    const data_user_task *u = e->user;
    const int shown = u->n_labels < 20 ? u->n_labels : 20;
    uint8_t *multi = u->type == DATA_TASK_MULTI_LABEL ? gc_multi_pred(e) : NULL;
    for (int k = 0; k < shown; k++) {
        metric_class_scores c = multi ? metric_multilabel_class(multi, e->ds->targets, e->ds->n, u->n_labels, k)
                                      : metric_class_score(e->pred, e->ds->labels, e->ds->n, k);
        rt_log_info("  class '%s': precision %.4f recall %.4f f1 %.4f (%zu rows)", u->label_names[k], c.precision,
                    c.recall, c.f1, c.support);
    }
    if (shown < u->n_labels) rt_log_info("  (and %d more classes)", u->n_labels - shown);
    free(multi);
}

/* --test-file: every row predicted, written beside the input's columns. */
static rt_status gc_predict_test_file(const glue_files *files, const mdl_classifier *m, const tok_tokenizer *tok,
                                      int32_t pad, const rt_grid *grid) {
    rt_status st = RT_OK;
    data_table table = {0};
    data_tokenized ds = {0};
    gc_eval e = {0};
    RT_TRY(glue_files_read_test(files, tok, (int)O.max_len, &table, &ds));
    gc_eval_init(&e, m, &ds, NULL, pad, grid->dp_host);
    e.user = &files->task;
    double loss;
    RT_TRY(gc_predict_all(&e, &loss));
    if (grid->world->rank == 0) { /* every rank has the results; one writes them */
        char written[4096];
        RT_TRY(glue_files_write_predictions(&files->task, &table, O.t.save_dir, O.predict_out, e.pred, e.probs, written,
                                            sizeof written));
        rt_log_info("wrote %zu predictions to %s", ds.n, written);
    }
fail:
    gc_eval_free(&e);
    data_tokenized_free(&ds);
    data_table_free(&table);
    return st;
}

/* ---- main ---- */

/* ---- LoRA ---- */

/* The run's LoRA settings (apps/common/train_lora.h); *on false: full fine-tuning. */
static rt_status gc_lora_config(ckpt_peft_config *lora, bool *on) {
    memset(lora, 0, sizeof *lora);
    *on = false;
    if (!F->lora) return RT_OK; /* the family has no --lora options */
    /* PEFT's SEQ_CLS keeps the heads it knows by these names trainable */
    const train_app_lora_family fam = {.default_targets = F->lora_default_targets,
                                       .task_type = "SEQ_CLS",
                                       .modules_to_save = "classifier,score",
                                       .base_model = O.model,
                                       .fan_in_fan_out = F->lora_fan_in_fan_out};
    return train_app_lora_config(&O.t, &gc_spec, &fam, lora, on);
}

static rt_status gc_run(int argc, char **argv, rt_comm *world, int *signal_out) {
    rt_status st = RT_OK;
    const char *pos[1];
    int n_pos = 0;
    gc_source source;
    tok_tokenizer *tok = NULL;
    rt_backend *be = NULL;
    glue_model gm = {0};
    data_tokenized train = {0}, dev[DATA_GLUE_MAX_SPLITS] = {{0}};
    data_loader *loader = NULL;
    gc_eval ev[DATA_GLUE_MAX_SPLITS] = {{0}};
    int n_dev = 0;
    char *options_json = NULL;
    bool ev_ready = false;
    glue_files files = {0};
    glue_files_opts files_opts;
    char **model_names = NULL; /* the model's id2label, when it names its classes */
    int n_model_names = 0;
    ckpt_peft_config lora = {0};
    bool lora_on = false;

    /* what the model, the loop and evaluation use: the grid's comms, or with --comm-stats
     * counting views of them (comm_count keeps the owned ones) */
    rt_grid grid_storage = {0};
    const rt_grid *grid = &grid_storage;
    train_app_comm_count comm_count = {0};
    RT_TRY(rt_args_parse(&gc_spec, argc, argv, pos, &n_pos));
    RT_TRY(gc_files_options(&files_opts));
    const train_app_input inputs[] = {
        {O.train_file, "--train-file"}, {O.validation_file, "--validation-file"}, {O.test_file, "--test-file"}};
    RT_TRY(train_app_check_paths(inputs, sizeof inputs / sizeof inputs[0], rt_check_readable));
    const train_app_input outputs[] = {
        {O.save_hf, "--save-hf"}, {O.t.save_lora, "--save-lora"}, {O.predict_out, "--predict-out"}};
    RT_TRY(train_app_check_paths(outputs, sizeof outputs / sizeof outputs[0], rt_check_creatable));
    RT_TRY(train_app_setup(&O.t, &gc_spec, F->prog, world, &grid_storage));
    RT_TRY(gc_lora_config(&lora, &lora_on));
    const bool user_files = O.train_file != NULL;
    const data_glue_task *task = user_files ? NULL : data_glue_task_find(O.dataset);
    RT_CHECK(user_files || task != NULL, "dataset %s passed the choice check", O.dataset);
    RT_TRY(gc_resolve_source(&source));
    if (source.files.config[0]) RT_TRY(mdl_hf_label_names(source.files.config, &model_names, &n_model_names));
    if (user_files) { /* the classes come from the train file, before the model is made */
        RT_TRY(glue_files_open(&files_opts, &files));
        char order[4096];
        const char *model_order = gc_model_order(&files, model_names, n_model_names, order, sizeof order);
        if (model_order) RT_TRY(glue_files_reorder(&files, model_order)); /* the model's order */
        char desc[512];
        data_user_task_describe(&files.task, desc, sizeof desc);
        rt_log_info("task: %s; text %s%s%s; from %s", desc, files.task.text_col[0], files.task.n_text > 1 ? " + " : "",
                    files.task.n_text > 1 ? files.task.text_col[1] : "", O.train_file);
    }
    const int num_labels = user_files ? files.task.n_labels : task->n_labels;
    const char *data_name = user_files ? (O.validation_file ? O.validation_file : O.train_file) : task->name;

    RT_TRY(tok_load(source.files.tokenizer, &tok));
    RT_TRY(data_pad_check_covers(&O.t.pad, (int)O.max_len, "length-buckets", "--max-len"));
    int max_T = data_pad_length(&O.t.pad, (int)O.max_len);

    /* the device, then the model: a config or layout that cannot work fails here, before the
     * data is read and tokenized */
    char device[32];
    RT_TRY(train_app_device(&O.t, &grid_storage, device, sizeof device, &be));
    train_app_comm_count_begin(&O.t, &comm_count, &grid_storage);
    glue_model_args ma = {.config_path = source.files.config[0] ? source.files.config : NULL,
                          .num_labels = num_labels,
                          .tok = tok,
                          .be = be,
                          .tp = grid->tp,
                          .pp = grid->pp,
                          .max_micro = (int)O.t.grad_accum,
                          .max_B = (int)O.t.batch_size,
                          .max_T = max_T,
                          .seed = (uint64_t)O.t.seed,
                          .checkpoint_layers = train_app_checkpoint_layers(&O.t),
                          .pp_recompute = O.t.pp_recompute,
                          .lora = lora_on ? &lora : NULL};
    RT_TRY(F->create(&ma, &gm));
    const int32_t pad = gm.pad_id;
    rt_params *params = gm.cls.params(gm.cls.model);
    if (source.files.weights[0]) {
        char report[512];
        RT_TRY(F->load_hf(&gm, source.files.weights, report, sizeof report));
        rt_log_info("weights: %s (%s): %s", source.what, source.files.weights, report);
    } else {
        rt_log_info("weights: %s", source.what);
    }
    if (lora_on) RT_TRY(train_app_lora_ready(&O.t, &lora, gm.map, F->family, F->lora_modules, params, grid));
    rt_log_info("model: %s, %zu parameters%s; tokenizer %s; device %s", gm.desc, params->numel,
                train_app_params_scope(grid->tp, grid->pp), source.files.tokenizer, device);

    size_t dev_rows = 0;
    if (user_files) {
        RT_TRY(glue_files_tokenize(&files, tok, source.files.tokenizer, (int)O.max_len, train_app_cache_dir(&O.t),
                                   &train, &dev[0]));
        glue_files_drop_tables(&files);
        n_dev = O.validation_file ? 1 : 0;
        dev_rows = dev[0].n;
        rt_log_info("data: train %zu rows (%zu truncated to %lld tokens), validation %zu rows, from %s%s%s", train.n,
                    train.n_truncated, (long long)O.max_len, dev_rows, O.train_file, n_dev ? " and " : "",
                    n_dev ? O.validation_file : "");
        if (!n_dev) rt_log_info("no --validation-file: training without evaluation");
    } else {
        char train_path[4096];
        const char *data_dir = O.data_dir ? O.data_dir : TZ_SOURCE_DIR "/assets/glue-mrpc";
        if (!O.data_dir && strcmp(task->name, "mrpc") != 0)
            RT_FAIL(RT_ERR_USAGE, "--dataset %s needs --data-dir: only MRPC ships with tunezoo", task->name);
        task = data_glue_task_for_dir(task, data_dir); /* CoLA: its release layout or GLUE's */
        RT_TRY(data_glue_check_dir(task, data_dir));
        snprintf(train_path, sizeof train_path, "%s/%s", data_dir, task->train_file);
        /* train and every dev split, tokenized, or read back from the cache */
        data_tokenized sets[1 + DATA_GLUE_MAX_SPLITS] = {{0}};
        gc_build_ctx bc = {task, data_dir, train_path, tok};
        data_cache_key key;
        RT_TRY(gc_cache_key(&bc, source.files.tokenizer, &key));
        st = data_cache_load_or_build(train_app_cache_dir(&O.t), &key, task->name, 1 + task->n_dev, 1, gc_build_sets,
                                      &bc, sets);
        train = sets[0];
        for (int k = 0; k < task->n_dev; k++) dev[k] = sets[1 + k];
        if (st != RT_OK) goto fail;
        for (n_dev = 0; n_dev < task->n_dev; n_dev++) dev_rows += dev[n_dev].n;
        rt_log_info("data: %s train %zu rows (%zu truncated to %lld tokens), dev %zu rows%s, from %s", task->name,
                    train.n, train.n_truncated, (long long)O.max_len, dev_rows, n_dev > 1 ? " in 2 sets" : "",
                    data_dir);
    }
    /* --batch-size is the global batch: each dp rank collates its slice of it */
    data_sampler_opts sopts = {.seed = (uint64_t)O.t.seed,
                               .shuffle = true,
                               .drop_last = false,
                               .rank = grid->dp_rank,
                               .world = grid->dp_size,
                               .lengths = train.lengths,
                               .group_by = train_app_group_by(&O.t)};
    RT_TRY(data_loader_init(&train, &sopts, (int)O.t.batch_size, pad, &O.t.pad, &loader));
    for (int k = 0; k < n_dev; k++) {
        gc_eval_init(&ev[k], &gm.cls, &dev[k], task, pad, grid->dp_host);
        ev[k].user = user_files ? &files.task : NULL;
        ev[k].prefix = n_dev > 1 ? task->dev[k].name : NULL;
    }
    ev[0].n_splits = n_dev;
    ev_ready = true;

    options_json = rt_args_to_json(&gc_spec);
    rt_train_opts to = train_app_loop_opts(&O.t, F->prog, grid, options_json);
    train_app_model train_ctx = {.m = {.model = &gm.cls,
                                       .params = params,
                                       .step = gc_step,
                                       .flops = gc_flops,
                                       .pipeline_step = gm.cls.pipeline_step ? gc_pipeline_step : NULL}};
    rt_train_model tm = train_app_loop_model(&train_ctx);
    rt_train_data td = data_loader_train_data(loader);
    rt_train_eval te = {.ctx = ev, .evaluate = n_dev ? gc_evaluate : NULL};
    rt_train_result res;
    RT_TRY(rt_train(&to, &tm, &td, &te, ckpt_train_io(), &res));
    train_app_comm_count_print(&O.t, &comm_count, grid, params, res.steps);
    if (comm_count.on) gc_print_comm_formulas(&gm, grid, res.steps, train_ctx.padded_tokens);
    *signal_out = res.signal;
    if (res.signal) goto fail;
    if (res.last_eval.n) {
        char line[512];
        int n = snprintf(line, sizeof line, "dev results (%s, %zu examples, step %lld):", data_name, dev_rows,
                         (long long)res.steps);
        for (int i = 0; i < res.last_eval.n && n < (int)sizeof line; i++)
            n += snprintf(line + n, sizeof line - (size_t)n, " %s %.4f", res.last_eval.names[i],
                          res.last_eval.values[i]);
        rt_log_info("%s", line);
        if (user_files && files.task.type != DATA_TASK_REGRESSION) gc_log_classes(&ev[0]);
    }
    if (O.predict) RT_TRY(gc_predict_file(&gm.cls, tok, task, pad, grid));
    if (O.test_file) RT_TRY(gc_predict_test_file(&files, &gm.cls, tok, pad, grid));
    if (O.save_hf) { /* the file's classes by name; a GLUE task keeps the names the model came with */
        const bool named = user_files ? files.task.type != DATA_TASK_REGRESSION : n_model_names == num_labels;
        const char *const *names =
            user_files ? (const char *const *)files.task.label_names : (const char *const *)model_names;
        RT_TRY(gc_save_hf(&gm.cls, source.files.tokenizer, grid, named || user_files ? names : NULL, num_labels,
                          user_files && files.task.type == DATA_TASK_MULTI_LABEL, lora_on ? &lora : NULL, gm.map,
                          params));
    }
    if (lora_on) RT_TRY(train_app_save_lora(&O.t, grid, &lora, gm.map, params, NULL));
fail:
    free(options_json);
    for (int k = 0; k < n_dev && ev_ready; k++) gc_eval_free(&ev[k]);
    data_loader_free(loader);
    if (gm.cls.free) gm.cls.free(gm.cls.model);
    rt_backend_free(be);
    data_tokenized_free(&train);
    for (int k = 0; k < DATA_GLUE_MAX_SPLITS; k++) data_tokenized_free(&dev[k]);
    tok_free(tok);
    train_app_comm_count_end(&comm_count, &grid_storage);
    rt_grid_free(&grid_storage);
    glue_files_free(&files);
    for (int k = 0; k < n_model_names; k++) free(model_names[k]);
    free(model_names);
    ckpt_peft_config_free(&lora);
    return st;
}

int glue_app_main(const glue_app_model *family, int argc, char **argv) {
    F = family;
    gc_spec.prog = family->prog;
    train_app_defaults defaults = {0};
    memcpy(gc_options, gc_own_options, sizeof gc_own_options);
    static char save_hf_help[200];
    snprintf(save_hf_help, sizeof save_hf_help,
             "after training, write an HF %s folder (config, safetensors, tokenizer)", family->hf_class);
    for (int k = 0; k < GC_N_OWN; k++)
        if (strcmp(gc_options[k].name, "save-hf") == 0) gc_options[k].help = save_hf_help;
    gc_spec.n_opts = GC_N_OWN;
    train_app_add_options(&O.t, &defaults, &gc_spec, gc_options);
    train_app_add_checkpoint_options(&O.t, gc_options, &gc_spec.n_opts);
    if (family->lora) train_app_add_lora_options(&O.t, gc_options, &gc_spec.n_opts);
    gc_spec.summary = family->summary;
    gc_spec.epilog = family->epilog;
    return train_app_main(argc, argv, family->prog, gc_run);
}
