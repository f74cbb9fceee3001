/* The shared training loop (see rt_trainer.h). */
#define _GNU_SOURCE
#include "runtime/train/rt_trainer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/base/rt_buf.h"
#include "runtime/base/rt_fs.h"
#include "runtime/base/rt_jsonl.h"
#include "runtime/base/rt_log.h"
#include "runtime/base/rt_rng.h"
#include "runtime/train/rt_optim.h"
#include "runtime/train/rt_sched.h"
#include "runtime/train/rt_step_graphs.h"
#include "runtime/train/rt_pipe.h"
#include "runtime/base/rt_signal.h"
#include "runtime/train/rt_zero.h"

static double rt_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

rt_status rt_train_prepare_dir(const char *dir) {
    rt_status st = rt_make_dirs(dir, "--save-dir");
    if (st != RT_OK) return st;
    if (access(dir, W_OK | X_OK) != 0)
        return rt_errorf(RT_ERR_IO, "--save-dir %s: not writable: %s", dir, strerror(errno));
    return RT_OK;
}

typedef struct {
    const rt_train_opts *o;
    rt_comm *dp, *tp, *pp;                /* device comms: gradient buckets, checkpoint shards */
    rt_comm *dp_host, *tp_host, *pp_host; /* host comms: counts, loss, norm, stop flag (rt_grid.h) */
    bool lead;                            /* the first rank of the grid: it alone prints progress and writes files */
    rt_jsonl *metrics;                    /* metrics.jsonl, first rank only */
    bool tty;
    int64_t total_steps;
    rt_zero *zero; /* ZeRO sharding of the optimizer state over dp (NULL: off) */
    bool scaling;  /* dynamic loss scaling is on */
    rt_loss_scaler scaler;
    int tied;              /* pipeline stages: the weight this stage shares with others (rt_param_spec.tied), or -1 */
    uint64_t tied_members; /* the stages holding it */
    float *tied_scratch;   /* the first of them: the others' gradients arrive here */
    /* The step's norm, clipping and update on the backend, with no host round trip between the
     * backward and AdamW (rt_train_update), where one rank's gradients are the whole norm; NULL:
     * the norm comes back to the host first. */
    rt_step_state *step_dev;
    double *loss_sink; /* &step_dev->loss where the model's heads add their losses there, else NULL */
    bool graph_mode;   /* TZ_STEP_GRAPHS=plan or on: the step-graph policy (rt_train_init_graphs) */
    rt_step_graphs graphs;
} rt_train_state;

/* Graphs kept at once: a fixed-shape run needs one, --length-buckets a few */
#define RT_TRAIN_GRAPHS 8

/* The tied weight's gradient summed over the stages holding it: the whole gradient before the
 * data-parallel reduction (linear, so the order does not matter), or under ZeRO-3, whose blocks
 * are reduce-scattered as the backward goes, this rank's piece after it. */
static rt_status rt_train_sum_tied(rt_train_state *s, rt_params *p) {
    float *grad = NULL;
    size_t n = 0;
    if (s->o->zero == 3) {
        rt_zero3_grad_piece(s->zero, s->tied, &grad, &n);
    } else {
        grad = rt_params_grad(p, s->tied);
        n = p->specs[s->tied].numel;
    }
    return rt_pipe_sum_tied(s->pp, s->tied_members, p->be, grad, n, s->tied_scratch);
}

/* The step's gradient norm (over the loss scale S, a power of two: exact), clipping and AdamW
 * update (the applied-th of the run, at rate lr); overflow when the norm or the loss is not
 * finite, and then no update. With s->step_dev the backend computes the norm, the clip factor
 * and the skip decision and AdamW reads them there, and the host reads the record back after the
 * update is queued; else the norm comes back to the host first (ZeRO's, or one summed over
 * ranks). The same numbers either way (runtime/backend/rt_step_state.h); the unscaling rides on
 * the clip factor. */
static rt_status rt_train_update(rt_train_state *s, rt_params *p, rt_adamw_hparams *hp, double lr, int64_t applied,
                                 double loss, double S, double *norm, bool *overflow, double *sink_loss) {
    rt_status st = RT_OK;
    *sink_loss = 0;
    if (s->step_dev) { /* its scalars went up as the step began (rt_train_step_begin) */
        rt_step_state h;
        p->be->ops->sumsq_into(p->be->ctx, s->step_dev, p->grad, p->train_numel);
        p->be->ops->step_finish(p->be->ctx, s->step_dev, s->o->clip, S);
        if (isfinite(loss)) RT_TRY(rt_adamw_step_on(p, s->step_dev));
        rt_to_host(p->be, &h, s->step_dev, sizeof h);
        *norm = h.norm;
        *overflow = h.skip || !isfinite(loss);
        *sink_loss = h.loss;
    } else {
        if (s->zero) { /* a stage's ZeRO norm, then every stage's */
            RT_TRY(rt_zero_grad_norm(s->zero, norm));
            if (s->pp->size > 1) RT_TRY(rt_norm_over(s->pp_host, norm));
        } else {
            RT_TRY(rt_grad_norm_grid(p, s->tp_host, s->pp_host, norm));
        }
        *norm /= S;
        *overflow = !isfinite(*norm) || !isfinite(loss);
        if (!*overflow) {
            const float coef = (float)(rt_clip_factor(*norm, s->o->clip) / S);
            hp->lr = lr;
            RT_TRY(s->zero ? rt_zero_step(s->zero, hp, coef, applied + 1) : rt_adamw_step(p, hp, coef, applied + 1));
        }
    }
    if (!*overflow) hp->lr = lr; /* the step line's rate: the last update's */
fail:
    return st;
}

/* With the step on the backend: the record of the step making update applied + 1 at rate lr,
 * uploaded before its micro-batches (its loss and squared norm 0, for the heads and the norm to
 * add to). */
static void rt_train_step_begin(rt_train_state *s, rt_params *p, const rt_adamw_hparams *hp, double lr, int64_t applied,
                                int64_t step) {
    rt_step_state h;
    rt_adamw_hparams next = *hp;
    next.lr = lr;
    rt_step_scalars(&h, &next, applied + 1);
    h.stream_step[0] = RT_STREAM_STEP_DROPOUT(step);
    h.stream_step[1] = RT_STREAM_STEP_LORA(step);
    rt_to_device(p->be, s->step_dev, &h, sizeof h);
}

/* Sums n host floats over the data-parallel group in place. */
static rt_status rt_train_dp_sum(rt_train_state *s, float *v, size_t n) {
    if (s->dp_host->size == 1) return RT_OK;
    return s->dp_host->ops->all_reduce(s->dp_host->ctx, v, n, RT_REDUCE_SUM);
}

/* The step's loss from this rank's sum: summed over dp (as floats, every rank the same bits),
 * over the targets; not finite stops the run unless loss scaling skips the step. */
static rt_status rt_train_loss(rt_train_state *s, double loss_sum, double targets, int64_t step, double *loss) {
    rt_status st = RT_OK;
    float lsum = (float)loss_sum;
    if (s->dp_host->size > 1) {
        RT_TRY(rt_train_dp_sum(s, &lsum, 1));
        loss_sum = lsum;
    }
    *loss = targets > 0 ? loss_sum / targets : 0.0;
    if (!isfinite(*loss) && !s->scaling)
        RT_FAIL(RT_ERR_RUNTIME, "the training loss is %g at step %lld; stopping (the last checkpoint is kept)", *loss,
                (long long)step + 1);
fail:
    return st;
}

/* Sums gradients over dp in buckets, so a reduction never needs a second slab-sized buffer
 * and (on GPU, later) buckets can go out while backward still runs. */
/* The data-parallel gradient all-reduce, in buckets taken from the top of the slab down (the
 * order a backward finishes them in). During the last micro-batch's backward the model reports
 * how far its gradients are final (rt_grads_hook); each full bucket above that mark starts at
 * once, asynchronously where the comm can, and the rest starts after the backward. All are
 * waited for in start order. An all-reduce is elementwise, so the buckets do not change the
 * sums. */
typedef struct {
    rt_comm *dp;
    float *grad;
    size_t bucket;
    size_t next;           /* gradients at offsets >= next have their all-reduce started */
    void **req;            /* (n_req) started requests, NULL where the comm finished at once */
    size_t n_req, cap_req; /* a slab over 2^31 floats in small buckets (dp_bucket) is past an int */
    int64_t early;         /* buckets started inside a backward */
    rt_status st;          /* the first failure, reported once the backward is over */
} rt_grad_reduce;

static size_t rt_grad_bucket(const rt_train_opts *o, size_t numel) {
    if (o->dp_bucket > 0) return (size_t)o->dp_bucket;
    size_t b = numel / 4 + 1;
    return b < ((size_t)1 << 22) ? b : (size_t)1 << 22; /* at most 16 MiB of floats */
}

static void rt_grad_reduce_begin(rt_grad_reduce *r, rt_train_state *s, rt_params *p, bool overlap) {
    r->dp = s->dp;
    r->grad = p->grad;
    /* after the backward, fewer and larger all-reduces are cheaper */
    r->bucket = overlap ? rt_grad_bucket(s->o, p->train_numel) : (size_t)1 << 22;
    r->next = p->train_numel;
    r->n_req = 0;
    r->st = RT_OK;
}

/* Starts [from, r->next) in buckets from the top. */
static void rt_grad_reduce_start(rt_grad_reduce *r, size_t from) {
    while (r->st == RT_OK && r->next > from) {
        size_t n = r->next - from < r->bucket ? r->next - from : r->bucket;
        RT_GROW(r->req, r->cap_req, r->n_req + 1);
        r->next -= n;
        r->st = rt_comm_all_reduce_start(r->dp, r->grad + r->next, n, RT_REDUCE_SUM, &r->req[r->n_req++]);
    }
}

/* rt_grads_hook.ready: full buckets above the mark go now; a partial one waits for more. */
static void rt_grad_reduce_ready(void *user, size_t first) {
    rt_grad_reduce *r = user;
    if (r->st != RT_OK || first >= r->next || r->next - first < r->bucket) return;
    size_t full = (r->next - first) / r->bucket * r->bucket;
    size_t before = r->n_req;
    rt_grad_reduce_start(r, r->next - full);
    r->early += (int64_t)(r->n_req - before);
}

/* After the backward: the rest starts, then everything completes. */
static rt_status rt_grad_reduce_finish(rt_grad_reduce *r) {
    rt_grad_reduce_start(r, 0);
    rt_status st = r->st;
    for (size_t i = 0; i < r->n_req; i++) {
        rt_status w = rt_comm_wait(r->dp, r->req[i]); /* wait even after a failure: no request is left */
        if (st == RT_OK) st = w;
    }
    r->n_req = 0;
    return st;
}

/* A record that cannot be written stops the run: a metrics file with silent gaps is worse
 * than a clear error, and the last checkpoint is intact either way. */
static rt_status rt_train_metrics_line(rt_train_state *s, cJSON *obj) {
    if (!s->metrics) return RT_OK;
    char *line = cJSON_PrintUnformatted(obj);
    RT_CHECK(line != NULL, "cJSON_PrintUnformatted");
    rt_status st = rt_jsonl_append(s->metrics, line);
    cJSON_free(line);
    return st;
}

static void rt_train_clear_bar(rt_train_state *s) {
    if (s->tty && s->lead) {
        fputs("\r\033[K", stdout);
        fflush(stdout);
    }
}

static rt_status rt_train_evaluate(rt_train_state *s, rt_train_eval *eval, int64_t step, double epoch,
                                   rt_train_result *result) {
    if (!eval || !eval->evaluate) return RT_OK;
    rt_metrics m = {0};
    double t0 = rt_now_ms();
    /* ZeRO-3: dp ranks evaluate different numbers of batches, so the gathers cannot follow the
     * model's calls; the whole parameters are gathered for the evaluation instead */
    rt_status st = rt_zero_gather_params(s->zero);
    if (st != RT_OK) return st;
    st = eval->evaluate(eval->ctx, &m);
    rt_zero_shard_params(s->zero, false);
    if (st != RT_OK) return st;
    char line[512];
    int n = snprintf(line, sizeof line, "eval  step %lld | epoch %.2f", (long long)step, epoch);
    cJSON *obj = cJSON_CreateObject();
    cJSON_AddStringToObject(obj, "type", "eval");
    cJSON_AddNumberToObject(obj, "step", (double)step);
    cJSON_AddNumberToObject(obj, "epoch", epoch);
    for (int i = 0; i < m.n && n < (int)sizeof line; i++) {
        n += snprintf(line + n, sizeof line - (size_t)n, " | %s %.4f", m.names[i], m.values[i]);
        cJSON_AddNumberToObject(obj, m.names[i], m.values[i]);
    }
    if (n < (int)sizeof line) snprintf(line + n, sizeof line - (size_t)n, " | %.1f s", (rt_now_ms() - t0) / 1e3);
    rt_train_clear_bar(s);
    rt_log_info("%s", line);
    st = rt_train_metrics_line(s, obj);
    cJSON_Delete(obj);
    result->last_eval = m;
    return st;
}

static rt_status rt_train_save_io(rt_train_state *s, const rt_train_io *io, rt_train_model *model, rt_train_data *data,
                                  int64_t step) {
    rt_status st = RT_OK;
    char path[4096];
    char *meta = NULL;
    int64_t epoch, pos;
    /* dp replicas hold identical weights and optimizer state: the first replica's tp group
     * saves (collectively: its tp rank 0 writes full tensors, loadable at any tp) */
    if (s->dp->rank != 0) return RT_OK;
    data->get_state(data->ctx, &epoch, &pos);
    cJSON *obj = cJSON_CreateObject();
    cJSON_AddStringToObject(obj, "format", "tunezoo-train");
    cJSON_AddNumberToObject(obj, "step", (double)step);
    cJSON_AddNumberToObject(obj, "data_epoch", (double)epoch);
    cJSON_AddNumberToObject(obj, "data_position", (double)pos);
    cJSON_AddNumberToObject(obj, "seed", (double)s->o->seed);
    if (s->scaling) { /* the scaler's state, for a resume that goes on as this run would */
        cJSON *ls = cJSON_AddObjectToObject(obj, "loss_scale");
        cJSON_AddNumberToObject(ls, "scale", s->scaler.scale);
        cJSON_AddNumberToObject(ls, "hysteresis", s->scaler.cur_hysteresis);
        cJSON_AddNumberToObject(ls, "iter", (double)s->scaler.iter);
        cJSON_AddNumberToObject(ls, "last_overflow_iter", (double)s->scaler.last_overflow_iter);
        cJSON_AddNumberToObject(ls, "skipped", (double)s->scaler.skipped);
    }
    if (s->o->options_json) {
        cJSON *opts = cJSON_Parse(s->o->options_json);
        if (opts) cJSON_AddItemToObject(obj, "options", opts);
    }
    meta = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    RT_TRY(io->step_path(s->o->save_dir, (long long)step, path, sizeof path));
    /* device comm: it gathers the shards from the slab (its agreement on the outcome is a host
     * int, which an NCCL comm hands to its host twin) */
    RT_TRY(io->save(path, model->params, s->tp, s->pp, meta));
    if (s->lead) {
        if (s->o->keep > 0) RT_TRY(io->prune(s->o->save_dir, (size_t)s->o->keep));
        rt_train_clear_bar(s);
        rt_log_info("saved checkpoint %s", path);
    }
fail:
    cJSON_free(meta);
    return st;
}

/* With ZeRO the moments are sharded over dp: they are gathered into full slabs (collective
 * over dp, so every rank takes part) for the ordinary checkpoint writer, then dropped. */
static rt_status rt_train_save(rt_train_state *s, const rt_train_io *io, rt_train_model *model, rt_train_data *data,
                               int64_t step) {
    if (!s->zero) return rt_train_save_io(s, io, model, data, step);
    rt_status st = rt_zero_gather_state(s->zero);
    if (st == RT_OK) st = rt_train_save_io(s, io, model, data, step);
    rt_zero_release_state(s->zero);
    return st;
}

/* *x becomes its maximum over every rank of the grid (the host groups dp, tp and pp in turn). */
static rt_status rt_train_grid_max(rt_train_state *s, float *x) {
    rt_comm *groups[3] = {s->dp_host, s->tp_host, s->pp_host};
    for (int g = 0; g < 3; g++)
        if (groups[g]->size > 1) {
            rt_status st = groups[g]->ops->all_reduce(groups[g]->ctx, x, 1, RT_REDUCE_MAX);
            if (st != RT_OK) return st;
        }
    return RT_OK;
}

/* Every rank has finished with the files a resume looked at. */
static rt_status rt_train_barrier(rt_train_state *s) {
    float x = 0;
    return rt_train_grid_max(s, &x);
}

/* Keeps a damaged checkpoint for inspection under NAME.corrupt (NAME.corrupt.K if taken): out
 * of the resume list, never deleted. */
static void rt_train_set_aside(const char *path, const char *loaded) {
    char to[4200];
    snprintf(to, sizeof to, "%s.corrupt", path);
    for (int k = 1; k < 100 && access(to, F_OK) == 0; k++) snprintf(to, sizeof to, "%s.corrupt.%d", path, k);
    if (rename(path, to) == 0)
        rt_log_warn("%s is damaged: kept as %s; resumed from %s instead", path, to, loaded);
    else
        rt_log_warn("%s is damaged and could not be renamed (%s); resumed from %s instead", path, strerror(errno),
                    loaded);
}

/* What a checkpoint's metadata may say of a count (steps, data positions, seeds): at most 2^52,
 * a whole number a double holds exactly, and far beyond any run. */
#define RT_TRAIN_META_MAX 4503599627370496.0 /* 2^52 */

/* obj's field key as a whole number in [lo, hi], or RT_ERR_FORMAT naming the file, the field and
 * what it holds: a checkpoint whose CRC holds may still carry a value no run wrote. */
static rt_status rt_train_meta_int(const cJSON *obj, const char *key, double lo, double hi, const char *path,
                                   int64_t *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(j))
        return rt_errorf(RT_ERR_FORMAT, "%s: metadata field %s is missing or not a number", path, key);
    const double v = j->valuedouble;
    if (!(v >= lo && v <= hi) || v != floor(v))
        return rt_errorf(RT_ERR_FORMAT, "%s: metadata field %s is %.17g, expected a whole number in %.0f..%.0f", path,
                         key, v, lo, hi);
    *out = (int64_t)v;
    return RT_OK;
}

/* --overwrite: the earlier run's checkpoints and metrics.jsonl go, now that this run starts (the
 * model and data loaded), so a run that fails before keeps them whole. */
static rt_status rt_train_start_over(const rt_train_opts *o, const rt_train_io *io) {
    rt_status st = RT_OK;
    char **paths = NULL, metrics[4096];
    size_t n = 0;
    RT_TRY(io->resume_list(o->save_dir, &paths, &n));
    for (size_t i = 0; i < n; i++)
        if (unlink(paths[i]) != 0 && errno != ENOENT)
            RT_FAIL(RT_ERR_IO, "--overwrite: cannot remove %s: %s", paths[i], strerror(errno));
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", o->save_dir);
    if (unlink(metrics) != 0 && errno != ENOENT)
        RT_FAIL(RT_ERR_IO, "--overwrite: cannot remove %s: %s", metrics, strerror(errno));
    if (n)
        rt_log_info("--overwrite: removed the earlier run's %zu checkpoint%s from %s", n, n == 1 ? "" : "s",
                    o->save_dir);
fail:
    for (size_t j = 0; j < n; j++) free(paths[j]);
    free(paths);
    return st;
}

/* --resume-from an older checkpoint of --save-dir: the newer ones there are another timeline's,
 * which this run's saves would mix with (pruned as older than them, taken by a later --resume).
 * Every rank lists the same folder, so every rank refuses alike. */
static rt_status rt_train_refuse_newer(const rt_train_opts *o, const rt_train_io *io, const char *from) {
    rt_status st = RT_OK;
    char **paths = NULL;
    size_t n = 0;
    RT_TRY(io->resume_list(o->save_dir, &paths, &n));
    char *want = realpath(from, NULL);
    for (size_t i = 0; want && i < n; i++) {
        char *have = realpath(paths[i], NULL);
        const bool same = have && strcmp(have, want) == 0;
        free(have);
        if (!same) continue;
        if (i > 0)
            st = rt_errorf(RT_ERR_USAGE,
                           "--resume-from %s: --save-dir %s holds %zu newer checkpoint%s (the newest: %s), which this "
                           "run's would mix with: move them away, or resume into another --save-dir",
                           from, o->save_dir, i, i == 1 ? "" : "s", paths[0]);
        break;
    }
    free(want);
fail:
    for (size_t j = 0; j < n; j++) free(paths[j]);
    free(paths);
    return st;
}

/* Loads the newest checkpoint that reads back whole. A damaged one (RT_ERR_FORMAT: truncated,
 * a flipped byte, bad metadata) is skipped with a warning naming it and, once every rank has
 * moved on, set aside as NAME.corrupt; any other failure, or a damaged --resume-from file,
 * stops the resume. Every rank reads the same files, so every rank skips the same ones. */
static rt_status rt_train_resume(rt_train_state *s, const rt_train_io *io, rt_train_model *model, rt_train_data *data,
                                 int64_t *step) {
    rt_status st = RT_OK;
    const char *source = s->o->resume_from ? s->o->resume_from : s->o->save_dir;
    char **paths = NULL, *meta = NULL;
    size_t n = 0, k = 0;
    cJSON *obj = NULL;
    RT_TRY(io->resume_list(source, &paths, &n));
    if (n == 0 && s->o->resume_from) /* exact: never a silent start from scratch */
        RT_FAIL(RT_ERR_IO, "--resume-from %s: no checkpoint there (a step-N.tzck file, or a folder holding one)",
                source);
    if (n == 0) {
        rt_log_info("--resume: no checkpoint in %s yet; starting from step 0", source);
        goto fail;
    }
    if (s->o->resume_from) RT_TRY(rt_train_refuse_newer(s->o, io, paths[0]));
    RT_TRY(rt_zero_gather_params(s->zero)); /* ZeRO-3: a whole slab for the reader to fill */
    for (k = 0; k < n; k++) {
        /* the reader fills the slab from the file itself; only its agreement crosses ranks, in
         * a host float */
        st = io->load(paths[k], model->params, s->tp_host, s->pp_host, &meta);
        if (st == RT_OK) break;
        if (st != RT_ERR_FORMAT || s->o->resume_from) goto fail;
        if (s->lead) rt_log_warn("%s; trying the next older checkpoint", rt_error_message());
        if (k + 1 == n)
            RT_FAIL(RT_ERR_FORMAT, "%s: every checkpoint there is damaged (the newest: %s)", source, paths[0]);
    }
    if (k > 0) { /* every rank skipped the same files: rename them once all have moved on */
        RT_TRY(rt_train_barrier(s));
        for (size_t j = 0; s->lead && j < k; j++) rt_train_set_aside(paths[j], paths[k]);
    }
    const char *path = paths[k];
    if (s->zero) RT_TRY(rt_zero_scatter_state(s->zero)); /* keep this rank's slice of the full state */
    obj = cJSON_Parse(meta);
    int64_t epoch = 0, pos = 0, seed = 0;
    RT_TRY(rt_train_meta_int(obj, "step", 0, RT_TRAIN_META_MAX, path, step));
    RT_TRY(rt_train_meta_int(obj, "data_epoch", 0, RT_TRAIN_META_MAX, path, &epoch));
    RT_TRY(rt_train_meta_int(obj, "data_position", 0, RT_TRAIN_META_MAX, path, &pos));
    RT_TRY(rt_train_meta_int(obj, "seed", 0, RT_TRAIN_META_MAX, path, &seed));
    if ((uint64_t)seed != s->o->seed)
        rt_log_warn("%s was trained with --seed %lld, this run has --seed %llu: the data order will differ", path,
                    (long long)seed, (unsigned long long)s->o->seed);
    RT_TRY(data->set_state(data->ctx, epoch, pos));
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(obj, "loss_scale");
    if (s->scaling && ls) {
        const cJSON *jscale = cJSON_GetObjectItemCaseSensitive(ls, "scale");
        if (!cJSON_IsNumber(jscale) || !(jscale->valuedouble > 0) || !isfinite(jscale->valuedouble))
            RT_FAIL(RT_ERR_FORMAT, "%s: metadata field loss_scale.scale is %s, expected a positive number", path,
                    cJSON_IsNumber(jscale) ? "not positive and finite" : "missing or not a number");
        int64_t hysteresis = 0;
        RT_TRY(rt_train_meta_int(ls, "hysteresis", 0, RT_TRAIN_META_MAX, path, &hysteresis));
        RT_TRY(rt_train_meta_int(ls, "iter", 0, RT_TRAIN_META_MAX, path, &s->scaler.iter));
        RT_TRY(rt_train_meta_int(ls, "last_overflow_iter", -1, RT_TRAIN_META_MAX, path, &s->scaler.last_overflow_iter));
        RT_TRY(rt_train_meta_int(ls, "skipped", 0, RT_TRAIN_META_MAX, path, &s->scaler.skipped));
        s->scaler.scale = jscale->valuedouble;
        s->scaler.cur_hysteresis = (int)hysteresis;
    }
    rt_log_info("resumed from %s (step %lld)", path, (long long)*step);
fail:
    cJSON_Delete(obj);
    free(meta);
    for (size_t j = 0; j < n; j++) free(paths[j]);
    free(paths);
    return st;
}

/* One device's dense peak at the compute precision, by model name: fp32 without TF32 (as the
 * CUDA backend's matmuls run at --precision fp32), else the bf16/fp16 tensor-core peak (the
 * SXM parts' datasheet figures; the PCIe H100's its own). The MFU denominator when
 * --peak-tflops is not given. 0: unknown (the CPU). */
static double rt_train_peak_tflops(const rt_backend *be) {
    static const struct {
        const char *name;
        double fp32, half;
    } table[] = {{"H100 PCIe", 51.2, 756.0},
                 {"H100", 66.9, 989.4},
                 {"H200", 66.9, 989.4},
                 {"A100", 19.5, 312.0},
                 {"L40S", 91.6, 362.1}};
    const char *model = be->ops->device_model ? be->ops->device_model(be->ctx) : NULL;
    for (size_t i = 0; model && i < sizeof table / sizeof *table; i++)
        if (strstr(model, table[i].name)) return be->compute == RT_F32 ? table[i].fp32 : table[i].half;
    return 0;
}

/* Before step 1: what this rank holds on its device, and what is left. Everything the
 * model, the loop and the optimizer allocated goes through rt_backend_alloc, so the part that
 * is not weights, gradients or AdamW state is activations and work buffers (sized for the
 * largest batch the program set up), plus the ZeRO shard when sharding is on. */
static void rt_train_log_memory(const rt_params *p, const rt_zero *zero) {
    const double mib = 1024.0 * 1024.0, slab = (double)p->numel * sizeof(float) / mib;
    const double train = (double)(p->train_numel ? p->train_numel : 16) * sizeof(float) / mib; /* frozen: none */
    const rt_backend *be = p->be;
    double total = (double)rt_bytes_held(be) / mib, moments = p->m ? 2 * train : 0;
    double rest = total - slab - train - moments;
    size_t avail = be->ops->free_memory ? rt_free_memory(be) : 0;
    char free_txt[64] = "";
    if (avail) snprintf(free_txt, sizeof free_txt, "; %.1f GiB free", (double)avail / (1024.0 * mib));
    if (be->ops->device_model) rt_log_info("device %s: %s", be->ops->name, be->ops->device_model(be->ctx));
    if (zero) {
        /* stage 3 keeps only shards (the blocks are gathered at use; frozen parameters have a
         * weight shard only); stages 1-2 the whole weights (padded, unless some are frozen) and
         * the (padded) trainable gradient plus the gradient shard the reduce-scatter fills.
         * Offloaded: the master weights (with offload_params the weights themselves, frozen ones
         * too), a gradient copy, m and v in host memory, which on the CPU backend is this
         * backend's memory too. */
        const double f = sizeof(float) / mib, shard = (double)zero->shard * f, padded = (double)zero->padded * f;
        const double weights = zero->stage == 3 ? shard + (double)zero->frozen_shard * f
                                                : (double)(p->numel > zero->padded ? p->numel : zero->padded) * f;
        const double w = zero->stage == 3 && zero->offload_params ? 0 : weights;
        const double g = zero->stage == 3 ? shard : padded + shard, opt = zero->offload ? 0 : 2 * shard;
        const double host = zero->offload ? 3 * shard + (zero->offload_params ? weights : shard) : 0;
        const double here = w + g + opt + (be->device < 0 ? host : 0);
        char host_txt[96] = "";
        if (zero->offload) snprintf(host_txt, sizeof host_txt, ", offloaded to host memory %.1f", host);
        rt_log_info("memory on %s: %.1f MiB (ZeRO-%d: weights %.1f, gradients %.1f, AdamW state %.1f%s; activations "
                    "and buffers %.1f)%s",
                    be->ops->name, total, zero->stage, w, g, opt, host_txt, total - here > 0 ? total - here : 0.0,
                    free_txt);
        return;
    }
    rt_log_info("memory on %s: %.1f MiB (weights %.1f, gradients %.1f, AdamW state %.1f, activations and buffers "
                "%.1f)%s",
                be->ops->name, total, slab, train, moments, rest > 0 ? rest : 0.0, free_txt);
}

/* Every pipeline stage's memory, which differs by stage (its blocks, the embeddings or heads,
 * the in-flight activations), in one line from the first rank, which prints only its own
 * memory line otherwise. Collective over pp. */
static rt_status rt_train_log_stage_memory(rt_train_state *s, const rt_params *p) {
    const double mib = 1024.0 * 1024.0;
    const int P = s->pp_host->size;
    /* the stage's weights, or under ZeRO-3 the rank's shard of them (offloaded: none on the device) */
    const rt_zero *z = s->zero;
    const size_t weights = z && z->stage == 3 ? (z->offload_params ? 0 : z->shard + z->frozen_shard) : p->numel;
    float mine[2] = {(float)((double)weights * sizeof(float) / mib), (float)((double)rt_bytes_held(p->be) / mib)};
    float *all = rt_xmalloc(2 * sizeof(float) * (size_t)P);
    rt_status st = s->pp_host->ops->all_gather(s->pp_host->ctx, all, mine, 2);
    if (st == RT_OK && s->lead) {
        char line[1024];
        size_t n = (size_t)snprintf(line, sizeof line, "memory per pipeline stage:");
        for (int k = 0; k < P && n < sizeof line; k++)
            n += (size_t)snprintf(line + n, sizeof line - n, " %d: %.1f MiB (weights %.1f)%s", k + 1, all[2 * k + 1],
                                  all[2 * k], k + 1 < P ? "," : "");
        rt_log_info("%s", line);
    }
    free(all);
    return st;
}

/* rt_grads_hook.ready under ZeRO-3: the blocks the backward has finished are reduce-scattered. */
static void rt_train_zero3_ready(void *user, size_t first) { rt_zero_grads_ready(user, first); }

/* A batch for a ZeRO-3 rank whose micro-batch is empty: one of this step's own, else the one
 * kept from an earlier step; NULL when this rank never had one. */
static const rt_batch *rt_train_standin(const rt_batch *win, int nb, const rt_batch *kept) {
    for (int i = 0; i < nb; i++)
        if (win[i].B > 0) return &win[i];
    return kept->B > 0 ? kept : NULL;
}

/* The error for a ZeRO-3 rank that has no batch to stand in for an empty micro-batch. */
static rt_status rt_train_no_standin(const rt_train_state *s, int64_t step) {
    return rt_errorf(RT_ERR_CONFIG,
                     "--zero 3: data-parallel rank %d has no examples in step %lld and none earlier to "
                     "stand in for them (a smaller --batch-size or fewer ranks avoids it)",
                     s->dp->rank, (long long)step + 1);
}

/* Makes a pipeline's stand-in add nothing: every label ignored (-100), every target missing
 * (NaN), every seq2seq target ignored; its forward and backward still run. */
static void rt_train_mute(rt_batch *b) {
    for (int i = 0; i < b->B; i++) {
        if (b->labels) b->labels[i] = -100;
        for (int k = 0; b->targets && k < b->target_width; k++) b->targets[(size_t)i * b->target_width + k] = NAN;
    }
    for (size_t i = 0; b->dec_labels && i < (size_t)b->B * (size_t)b->T_dec; i++) b->dec_labels[i] = -100;
    b->n_targets = 0;
}

/* Keeps this step's last non-empty micro-batch as the stand-in by swapping it with the kept one
 * (each struct owns its buffers; the loader refills whichever lands in the window). */
static void rt_train_keep_standin(rt_batch *win, int nb, rt_batch *kept) {
    for (int i = nb - 1; i >= 0; i--)
        if (win[i].B > 0) {
            rt_batch t = win[i];
            win[i] = *kept;
            *kept = t;
            return;
        }
}

/* TZ_STEP_GRAPHS: off; plan (the step-graph policy, rt_step_graphs.h, runs beside the eager steps
 * and reports at the end); on (a backend with graphs captures and replays the steps it picks).
 * The run's own reasons to stay eager are known before its first step. */
static void rt_train_free_graph(void *user, void *graph) {
    rt_backend *be = user;
    be->ops->graph_free(be->ctx, graph);
}

static rt_status rt_train_init_graphs(rt_train_state *s, rt_backend *be) {
    rt_step_graphs_mode mode;
    const rt_status st = rt_step_graphs_mode_of(be, &mode);
    if (st != RT_OK || mode == RT_STEP_GRAPHS_OFF) return st;
    const bool plan = mode == RT_STEP_GRAPHS_PLAN;
    s->graph_mode = true;
    rt_step_graphs_init(&s->graphs, RT_TRAIN_GRAPHS, 1, 8 * RT_TRAIN_GRAPHS);
    s->graphs.planning = plan;
    if (!plan) {
        s->graphs.free_graph = rt_train_free_graph;
        s->graphs.user = be;
    }
    if (!s->step_dev)
        rt_step_graphs_refuse_run(&s->graphs, "the optimizer step reads the gradient norm on the host (ZeRO, tp > 1 "
                                              "or a pipeline)");
    if (s->scaling) rt_step_graphs_refuse_run(&s->graphs, "loss scaling reads each step's loss before its update");
    if (s->dp->size > 1) rt_step_graphs_refuse_run(&s->graphs, "the data-parallel all-reduce is not in a graph yet");
    return RT_OK;
}

/* One micro-batch's forward and backward: eagerly, or through its key's graph, captured now or
 * rehearsed and replayed. A capture or rehearsal that fails has run nothing on the device, and the
 * step then runs eagerly. */
static rt_status rt_train_micro_step(rt_train_state *s, rt_train_model *model, const rt_batch *b, int64_t step,
                                     int micro, float scale, double *loss) {
    rt_backend *be = model->params->be;
    const uint64_t seed = s->o->seed;
    if (!s->graph_mode) return model->forward_backward(model->ctx, b, seed, step, micro, scale, loss);
    const int padding = model->padding_kind ? model->padding_kind(model->ctx, b) : -1;
    rt_graph_entry *e = NULL;
    const rt_graph_action action =
        rt_step_graphs_plan(&s->graphs, rt_step_graphs_key(b, scale, padding), rt_memory_epoch(be), &e);
    const rt_backend_traffic before = be->traffic;
    void *graph = NULL;
    rt_status st = RT_OK;
    bool ran = false;
    if (!s->graphs.planning && action == RT_GRAPH_CAPTURE) {
        if (be->ops->graph_capture_begin(be->ctx, e->uploads, e->upload_bytes)) {
            st = model->forward_backward(model->ctx, b, seed, step, micro, scale, loss);
            graph = be->ops->graph_capture_end(be->ctx);
            if (graph && st == RT_OK) be->ops->graph_launch(be->ctx, graph);
            ran = graph != NULL;
        }
    } else if (!s->graphs.planning && action == RT_GRAPH_REPLAY) {
        rt_graph_rehearse_begin(be, e->graph);
        st = model->forward_backward(model->ctx, b, seed, step, micro, scale, loss);
        ran = rt_graph_rehearse_end(be);
        if (ran && st == RT_OK) be->ops->graph_launch(be->ctx, e->graph);
    } else {
        ran = true; /* eager, or planning */
        st = model->forward_backward(model->ctx, b, seed, step, micro, scale, loss);
    }
    if (st != RT_OK) { /* a bad batch: its error, whatever ran */
        if (graph) be->ops->graph_free(be->ctx, graph);
        return st;
    }
    if (!ran) { /* nothing ran on the device: the step eagerly, and its key stays eager */
        rt_step_graphs_failed(&s->graphs, e, action);
        return model->forward_backward(model->ctx, b, seed, step, micro, scale, loss);
    }
    const rt_backend_traffic delta = rt_backend_traffic_since(&be->traffic, &before);
    rt_step_graphs_observed(&s->graphs, e, action, &delta, rt_memory_epoch(be), graph);
    return RT_OK;
}

rt_status rt_train(const rt_train_opts *o, rt_train_model *model, rt_train_data *data, rt_train_eval *eval,
                   const rt_train_io *io, rt_train_result *result) {
    rt_status st = RT_OK;
    rt_train_state s = {.o = o, .dp = o->dp ? o->dp : rt_comm_self(), .tp = o->tp ? o->tp : rt_comm_self()};
    s.dp_host = o->dp_host ? o->dp_host : s.dp;
    s.tp_host = o->tp_host ? o->tp_host : s.tp;
    s.pp = o->pp ? o->pp : rt_comm_self();
    s.pp_host = o->pp_host ? o->pp_host : s.pp;
    const bool pipeline = s.pp->size > 1;
    const bool in_step = o->zero == 3; /* every dp rank makes the same model calls (ZeRO-3's gathers) */
    RT_CHECK(s.dp_host->size == s.dp->size && s.dp_host->rank == s.dp->rank && s.tp_host->size == s.tp->size &&
                 s.tp_host->rank == s.tp->rank,
             "host comms dp %d/%d tp %d/%d, device comms dp %d/%d tp %d/%d", s.dp_host->rank, s.dp_host->size,
             s.tp_host->rank, s.tp_host->size, s.dp->rank, s.dp->size, s.tp->rank, s.tp->size);
    s.lead = s.dp->rank == 0 && s.tp->rank == 0 && s.pp->rank == 0;
    rt_batch *win = NULL, *pwin = NULL; /* pwin: the pipeline's non-empty micro-batches (views of win's) */
    rt_grad_reduce reduce = {0};
    const rt_grads_hook reduce_hook = {.ready = rt_grad_reduce_ready, .user = &reduce};
    rt_batch standin = {0}; /* ZeRO-3: a batch this rank ran before, for a micro-batch it has none of */
    int accum = (int)o->grad_accum;
    rt_grads_hook zero3_hook = {.ready = rt_train_zero3_ready};
    rt_signal_guard signals;
    bool handlers = false;
    bool weight_copy = false; /* the backend holds the weights' low-precision copy */
    memset(result, 0, sizeof *result);
    RT_CHECK(o->batch_size >= 1 && o->grad_accum >= 1, "batch %lld accum %lld", (long long)o->batch_size,
             (long long)o->grad_accum);
    if (data->batches_per_epoch < 1) RT_FAIL(RT_ERR_CONFIG, "the training set is empty");
    if (pipeline && !model->pipeline_step)
        RT_FAIL(RT_ERR_UNSUPPORTED, "%d pipeline stages: this model has no pipelined step", s.pp->size);

    int64_t steps_per_epoch = (data->batches_per_epoch + accum - 1) / accum;
    s.total_steps = o->max_steps > 0 ? o->max_steps : o->epochs * steps_per_epoch;
    rt_sched sched;
    RT_TRY(rt_sched_init(&sched, o->schedule, o->lr, o->warmup, s.total_steps));
    rt_adamw_hparams hp = {.beta1 = o->beta1, .beta2 = o->beta2, .eps = o->adam_eps, .weight_decay = o->weight_decay};
    if (o->loss_scale) {
        RT_TRY(rt_loss_scaler_init(&s.scaler, o->loss_scale));
        s.scaling = true;
    }
    if (o->zero > 0 || o->offload_optimizer || o->offload_params) {
        const rt_zero_opts zo = {
            .stage = o->zero, .offload_optimizer = o->offload_optimizer, .offload_params = o->offload_params};
        RT_TRY(rt_zero_init(model->params, s.dp, s.tp, &zo, &s.zero));
        zero3_hook.user = s.zero;
        rt_zero_set_host_comms(s.zero, s.dp_host, s.tp_host);
    } else
        RT_TRY(rt_params_alloc_moments(model->params));

    s.tied = pipeline ? rt_params_tied(model->params) : -1;
    if (s.tied >= 0 && model->params->specs[s.tied].frozen) s.tied = -1; /* LoRA's base: no gradient to sum */
    if (pipeline) RT_TRY(rt_pipe_tied_members(s.pp_host, s.tied >= 0, &s.tied_members));
    if (s.tied >= 0 && !(s.tied_members & (((uint64_t)1 << s.pp->rank) - 1))) /* the first holder */
        RT_TRY(rt_backend_alloc(model->params->be, model->params->specs[s.tied].numel * sizeof(float),
                                "pipeline: the tied weight's gradients from the other stages",
                                (void **)&s.tied_scratch));

    const rt_backend_ops *ops = model->params->be->ops;
    if (!s.zero && s.tp_host->size == 1 && !pipeline && ops->sumsq_into && ops->step_finish && ops->adamw_step)
        RT_TRY(rt_backend_alloc(model->params->be, sizeof(rt_step_state), "the optimizer step's scalars",
                                (void **)&s.step_dev));
    /* loss scaling decides on the loss before the update: it reads the loss back first */
    if (s.step_dev && !s.scaling && ops->loss_into && model->set_loss_sink) {
        s.loss_sink = &s.step_dev->loss; /* a device address: never dereferenced here */
        model->set_loss_sink(model->ctx, s.loss_sink);
    }
    /* the dropout streams' step from the record, so a replayed step graph draws its own masks */
    if (s.step_dev && model->set_stream_step) model->set_stream_step(model->ctx, s.step_dev->stream_step);

    RT_TRY(rt_train_init_graphs(&s, model->params->be));

    RT_TRY(rt_train_prepare_dir(o->save_dir));
    s.tty = isatty(STDOUT_FILENO) == 1;

    int64_t step = 0;
    if (o->resume) RT_TRY(rt_train_resume(&s, io, model, data, &step));
    if (s.lead && o->start_over && !o->resume) RT_TRY(rt_train_start_over(o, io));
    if (s.lead) {
        /* a resumed run replays the steps after its checkpoint: their old records go first */
        char mpath[4096];
        snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", o->save_dir);
        RT_TRY(rt_jsonl_open(mpath, o->resume ? step : -1, &s.metrics));
    }
    rt_log_info("training: %lld steps (%lld per epoch), batch %lld x %lld accumulation, lr %g %s, warmup %lld steps",
                (long long)s.total_steps, (long long)steps_per_epoch, (long long)o->batch_size,
                (long long)o->grad_accum, o->lr, o->schedule, (long long)sched.warmup_steps);
    if (pipeline)
        rt_log_info("pipeline: stage %d of %d, 1F1B over %d micro-batches per step (bubble (P-1)/(M+P-1) = %.1f%% with "
                    "equal stages)",
                    s.pp->rank + 1, s.pp->size, accum, 100.0 * (s.pp->size - 1) / (double)(accum + s.pp->size - 1));
    rt_train_log_memory(model->params, s.zero);
    if (pipeline) RT_TRY(rt_train_log_stage_memory(&s, model->params));
    if (s.dp->size > 1 && !s.zero) {
        const bool ov = o->dp_bucket >= 0 && model->set_grads_hook;
        rt_log_info("gradients: all-reduced over %d data-parallel ranks in buckets of %zu floats, %s", s.dp->size,
                    ov ? rt_grad_bucket(o, model->params->numel) : (size_t)1 << 22,
                    ov ? "each started as the backward finishes it" : "after the backward");
    }

    rt_signal_catch_stop(&signals);
    handlers = true;

    win = rt_xcalloc((size_t)accum, sizeof *win);
    pwin = rt_xcalloc((size_t)accum, sizeof *pwin);
    double log_loss = 0, log_ms = 0, log_tokens = 0, log_flops = 0, last_norm = 0;
    /* every rank of the grid holds a device; MFU is the job's FLOPs over all of their peaks */
    const double peak = o->peak_tflops > 0 ? o->peak_tflops : rt_train_peak_tflops(model->params->be);
    const double devices = (double)s.dp->size * (double)s.tp->size * (double)s.pp->size;
    int64_t log_steps = 0, log_loss_steps = 0, last_eval_step = -1, last_save_step = -1;
    /* the weights are final for the loop (loaded, resumed): from here the optimizer keeps their
     * low-precision copy, and nothing after the loop reads it */
    if (!in_step) { /* ZeRO-3 has no whole slab: its matmuls round the gathered weights at each use */
        RT_TRY(rt_weight_copy_set(model->params->be, model->params->param, model->params->numel));
        weight_copy = true;
    }
    while (step < s.total_steps) {
        int nb = 0;
        bool epoch_end = false;
        while (nb < accum) {
            RT_TRY(data->next(data->ctx, &win[nb], &epoch_end));
            if (epoch_end) break;
            nb++;
        }
        if (nb > 0) {
            double t0 = rt_now_ms();
            /* counts over the whole global batch: every dp rank sees only its slice */
            float counts[3] = {0, 0, 0}; /* targets, tokens, model FLOPs (this rank's share of the batch) */
            for (int i = 0; i < nb; i++) {
                counts[0] += (float)win[i].n_targets;
                counts[1] += (float)win[i].n_tokens;
                if (model->flops && win[i].B > 0) counts[2] += (float)model->flops(model->ctx, &win[i]);
            }
            RT_TRY(rt_train_dp_sum(&s, counts, 3));
            double targets = counts[0], tokens = counts[1], flops = counts[2];
            if (s.zero)
                RT_TRY(rt_zero_begin_step(s.zero));
            else
                rt_params_zero_grad(model->params);
            double loss_sum = 0;
            const int64_t applied = step - (s.scaling ? s.scaler.skipped : 0); /* updates made so far */
            const double lr = rt_sched_lr(&sched, applied);
            if (s.step_dev) rt_train_step_begin(&s, model->params, &hp, lr, applied, step);
            /* overlap the dp all-reduce with the last micro-batch's backward */
            const bool overlap = !s.zero && !pipeline && s.dp->size > 1 && o->dp_bucket >= 0 && model->set_grads_hook;
            rt_grad_reduce_begin(&reduce, &s, model->params, overlap);
            /* the loss is the mean over every target of the accumulated global batch, not a
             * mean of per-micro-batch (or per-rank) means */
            float scale = targets > 0 ? (float)(1.0 / targets) : 0.0f;
            const double S = s.scaling ? s.scaler.scale : 1.0; /* the loss scale of this step */
            scale *= (float)S;
            if (pipeline) {
                /* every stage has the same micro-batches; this dp rank's non-empty ones go through
                 * (ZeRO-3: all of them, an empty one as a stand-in that adds nothing, since every
                 * dp rank must make the same gathers; in the 1F1B order its gradients mix with the
                 * others', so its labels are ignored instead of its gradients discarded) */
                int n = 0;
                for (int i = 0; i < nb; i++) {
                    if (win[i].B > 0) {
                        pwin[n++] = win[i];
                    } else if (in_step) {
                        if (standin.B == 0) RT_TRY(rt_train_no_standin(&s, step));
                        rt_train_mute(&standin);
                        pwin[n++] = standin;
                    }
                }
                if (n > 0) RT_TRY(model->pipeline_step(model->ctx, pwin, n, o->seed, step, scale, &loss_sum));
                /* the last stage's sum, to every stage, exactly */
                RT_TRY(s.pp_host->ops->broadcast(s.pp_host->ctx, &loss_sum, sizeof loss_sum, s.pp->size - 1));
                if (s.tied >= 0 && !in_step) RT_TRY(rt_train_sum_tied(&s, model->params));
            }
            for (int i = 0; !pipeline && i < nb; i++) {
                double l = 0;
                const rt_batch *b = &win[i];
                if (b->B == 0) { /* this rank's slice of a short last batch is empty */
                    if (!in_step) continue;
                    /* ZeRO-3's gathers need this rank's calls too: a stand-in that adds nothing */
                    b = rt_train_standin(win, nb, &standin);
                    if (!b) RT_TRY(rt_train_no_standin(&s, step));
                    rt_zero_discard_grads(s.zero);
                }
                const rt_grads_hook *hook = in_step ? &zero3_hook : overlap && i == nb - 1 ? &reduce_hook : NULL;
                if (hook && model->set_grads_hook) model->set_grads_hook(model->ctx, hook);
                rt_status fb = rt_train_micro_step(&s, model, b, step, i, scale, &l);
                if (hook && model->set_grads_hook) model->set_grads_hook(model->ctx, NULL);
                RT_TRY(fb);
                RT_TRY(rt_zero_micro_done(s.zero));
                if (b == &win[i]) loss_sum += l;
            }
            if (in_step) rt_train_keep_standin(win, nb, &standin);
            /* ZeRO: each rank gets only its slice of the summed gradient */
            if (s.zero)
                RT_TRY(rt_zero_reduce_grads(s.zero));
            else if (s.dp->size > 1)
                RT_TRY(rt_grad_reduce_finish(&reduce));
            if (s.tied >= 0 && in_step) RT_TRY(rt_train_sum_tied(&s, model->params));
            /* the loss: what the micro-batches reported, and with a sink what their heads added on
             * the device, which comes back with the step's record after the update */
            double loss = 0, norm, sink_loss;
            bool overflow;
            if (!s.loss_sink) RT_TRY(rt_train_loss(&s, loss_sum, targets, step, &loss));
            RT_TRY(rt_train_update(&s, model->params, &hp, lr, applied, loss, S, &norm, &overflow, &sink_loss));
            if (s.loss_sink) RT_TRY(rt_train_loss(&s, loss_sum + sink_loss, targets, step, &loss));
            if (overflow && !s.scaling)
                RT_FAIL(RT_ERR_RUNTIME, "the gradient norm is %g at step %lld; stopping (the last checkpoint is kept)",
                        norm, (long long)step + 1);
            if (s.scaling) RT_TRY(rt_loss_scaler_update(&s.scaler, overflow));
            step++;
            /* a GPU may still be running the step's kernels: wait, or ms/step only counts their launch */
            rt_sync(model->params->be);
            double ms = rt_now_ms() - t0;
            if (isfinite(loss)) {
                log_loss += loss;
                log_loss_steps++;
            }
            log_ms += ms;
            log_tokens += tokens;
            log_flops += flops;
            log_steps++;
            last_norm = norm;
            result->last_train_loss = loss;

            int64_t ep;
            int64_t pos;
            data->get_state(data->ctx, &ep, &pos);
            double epoch = (double)(step) / (double)steps_per_epoch;
            if (s.tty && s.lead) {
                int width = 24, done = (int)((double)width * (double)step / (double)s.total_steps);
                char bar[32];
                for (int i = 0; i < width; i++) bar[i] = i < done ? '#' : '-';
                bar[width] = '\0';
                printf("\r\033[K[%s] %lld/%lld | loss %.4f | %.0f ms/step", bar, (long long)step,
                       (long long)s.total_steps, loss, ms);
                fflush(stdout);
            }
            if (o->log_interval > 0 && (step % o->log_interval == 0 || step == s.total_steps)) {
                double avg_ms = log_ms / (double)log_steps;
                double tps = log_tokens / (log_ms / 1e3);
                /* overflowed steps (loss scaling) have no loss to average */
                double avg_loss = log_loss_steps ? log_loss / (double)log_loss_steps : NAN;
                char scaling[96] = "", perf[64] = "";
                if (s.scaling)
                    snprintf(scaling, sizeof scaling, " | loss scale %g | skipped %lld", s.scaler.scale,
                             (long long)s.scaler.skipped);
                const double tflops = log_flops / (log_ms / 1e3) / 1e12, mfu = peak > 0 ? tflops / (peak * devices) : 0;
                if (log_flops > 0 && mfu > 0)
                    snprintf(perf, sizeof perf, " | %.3g TFLOP/s | MFU %.1f%%", tflops, 100 * mfu);
                else if (log_flops > 0)
                    snprintf(perf, sizeof perf, " | %.3g TFLOP/s", tflops);
                char norm[32] = "overflow"; /* a skipped step's norm is inf or nan */
                if (isfinite(last_norm)) snprintf(norm, sizeof norm, "%.3f", last_norm);
                rt_train_clear_bar(&s);
                rt_log_info("step %lld/%lld | epoch %.2f | loss %.4f | lr %.3e | grad_norm %s | %.1f ms/step | %.0f "
                            "tokens/s%s%s",
                            (long long)step, (long long)s.total_steps, epoch, avg_loss, hp.lr, norm, avg_ms, tps, perf,
                            scaling);
                cJSON *obj = cJSON_CreateObject();
                cJSON_AddStringToObject(obj, "type", "train");
                cJSON_AddNumberToObject(obj, "step", (double)step);
                cJSON_AddNumberToObject(obj, "epoch", epoch);
                cJSON_AddNumberToObject(obj, "loss", avg_loss);
                if (log_flops > 0) cJSON_AddNumberToObject(obj, "tflops", tflops);
                if (log_flops > 0 && mfu > 0) cJSON_AddNumberToObject(obj, "mfu", mfu);
                if (s.scaling) {
                    cJSON_AddNumberToObject(obj, "loss_scale", s.scaler.scale);
                    cJSON_AddNumberToObject(obj, "skipped_steps", (double)s.scaler.skipped);
                }
                cJSON_AddNumberToObject(obj, "lr", hp.lr);
                cJSON_AddNumberToObject(obj, "grad_norm", last_norm);
                cJSON_AddNumberToObject(obj, "ms_per_step", avg_ms);
                cJSON_AddNumberToObject(obj, "tokens_per_s", tps);
                int shape[2] = {win[nb - 1].B, win[nb - 1].T};
                cJSON_AddItemToObject(obj, "batch_shape", cJSON_CreateIntArray(shape, 2));
                st = rt_train_metrics_line(&s, obj);
                cJSON_Delete(obj);
                RT_TRY(st);
                log_loss = log_ms = log_tokens = log_flops = 0;
                log_steps = log_loss_steps = 0;
            }
            if (o->eval_interval > 0 && step % o->eval_interval == 0) {
                RT_TRY(rt_train_evaluate(&s, eval, step, epoch, result));
                last_eval_step = step;
            }
            /* every rank stops at the same step, whichever got the signal */
            float stop = (float)rt_signal_stop_requested();
            RT_TRY(rt_train_grid_max(&s, &stop)); /* the signal reaches every rank of a launch */
            if (stop > 0) {
                int sig = (int)stop;
                rt_train_clear_bar(&s);
                rt_log_info("%s received at step %lld: saving a checkpoint and stopping",
                            sig == SIGINT ? "SIGINT" : "SIGTERM", (long long)step);
                RT_TRY(rt_train_save(&s, io, model, data, step));
                result->signal = sig;
                break;
            }
            if (o->save_interval > 0 && step % o->save_interval == 0) {
                RT_TRY(rt_train_save(&s, io, model, data, step));
                last_save_step = step;
            }
        }
        if (epoch_end && last_eval_step != step && o->eval_interval >= 0) {
            RT_TRY(rt_train_evaluate(&s, eval, step, (double)step / (double)steps_per_epoch, result));
            last_eval_step = step;
        }
    }
    result->steps = step;
    result->skipped_steps = s.scaling ? s.scaler.skipped : 0;
    result->loss_scale = s.scaling ? s.scaler.scale : 0.0;
    result->early_buckets = reduce.early;
    if (!result->signal) {
        if (last_eval_step != step && o->eval_interval >= 0)
            RT_TRY(rt_train_evaluate(&s, eval, step, (double)step / (double)steps_per_epoch, result));
        /* a run that trained nothing (--epochs 0) leaves no checkpoint behind */
        if (o->save_interval >= 0 && step > 0 && last_save_step != step)
            RT_TRY(rt_train_save(&s, io, model, data, step));
    }
    RT_TRY(rt_zero_gather_params(s.zero)); /* ZeRO-3: the caller gets the whole model back */
    if (s.graph_mode && s.lead) rt_step_graphs_report(&s.graphs);
fail:
    if (s.graph_mode) rt_step_graphs_free(&s.graphs);
    if (weight_copy) rt_weight_copy_set(model->params->be, NULL, 0);
    if (handlers) rt_signal_release(&signals);
    rt_train_clear_bar(&s);
    if (win) {
        for (int i = 0; i < accum; i++)
            if (data->batch_free) data->batch_free(&win[i]);
        free(win);
    }
    free(pwin);
    if (data->batch_free) data->batch_free(&standin);
    rt_status closed = rt_jsonl_close(s.metrics);
    if (st == RT_OK) st = closed;
    rt_zero_free(s.zero);
    if (s.tied_scratch) rt_free_device(model->params->be, s.tied_scratch);
    if (s.loss_sink) model->set_loss_sink(model->ctx, NULL);
    if (s.step_dev && model->set_stream_step) model->set_stream_step(model->ctx, NULL);
    if (s.step_dev) rt_free_device(model->params->be, s.step_dev);
    free(reduce.req); /* after a failure requests may be left: the run is over */
    return st;
}
