/* T5 generation (models/t5/t5_generate.h) against Hugging Face's generate() on the tiny random
 * models of tests/golden/t5-tiny-v1_0 and t5-tiny-v1_1 (generate.safetensors, written by
 * scripts/golden/gen_t5_generate_golden.py; versions in its metadata), on the batch of 3
 * padded sources: greedy and beam search (3 beams, length_penalty 1.0 and 0.6, early_stopping
 * True, False and "never"), 12 or 5 new tokens, eos the real one or a token the model emits.
 *
 * For every case: the ids equal HF's exactly (without the start token, up to and including
 * the eos that ended a row); beam search's score equals HF's sequences_scores; greedy's
 * logits at every step equal HF's output_scores for each row still running, and its score is
 * the sum of the chosen tokens' log-softmax of those; the rows of a step are the ones still
 * running (finished rows leave the batch). The incremental decoder equals a full recompute:
 * t5_step over each row's whole prefix gives, at the last position, the logits the cached
 * step gave. The same cases run on sub-batches (row 0 alone, rows 1-2) give the same rows,
 * and tp = 2 (two threads) gives the same ids. Bad options are errors that name them. Where a
 * CUDA device is present the cases run on the CUDA backend too (not checked on a machine
 * without one; the test says so). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_safetensors.h"
#include "models/t5/t5.h"
#include "models/t5/t5_generate.h"
#include "runtime/comm/rt_launch.h"
#include "tests/testutil.h"

#define FWD_ATOL 1e-5f
#define FWD_RTOL 1e-4f

enum { B = 3, S = 12, V = 100, NB = 3, MAXT = 12, MAXR = B * NB, MAX_CASES = 32 };

typedef struct {
    int num_beams, eos, max_new;
    gen_early_stopping early;
    double length_penalty;
    int32_t hf_ids[B][MAXT];     /* HF's tokens without the start token */
    int hf_len[B];               /* up to and including the first eos */
    int hf_steps;                /* greedy: the steps HF ran (scores recorded) */
    float hf_scores[MAXT][B][V]; /* greedy: output_scores */
    float hf_seq_scores[B];      /* beam: sequences_scores */
} golden_case;

typedef struct {
    int32_t ids[B * S], mask[B * S];
    golden_case cases[MAX_CASES];
    int n_cases;
} golden_file;

/* What the observer saw. */
typedef struct {
    int n_steps;
    int n_rows[MAXT];
    int32_t src[MAXT][MAXR];
    int32_t prefix[MAXT][MAXR][MAXT + 1];
    float logits[MAXT][MAXR][V];
} recording;

static void record_step(void *user, const gen_step *s) {
    recording *rec = user;
    TZ_EXPECT(s->step == rec->n_steps && s->step < MAXT && s->n_rows <= MAXR, "step %d (expected %d), %d rows", s->step,
              rec->n_steps, s->n_rows);
    if (s->step != rec->n_steps || s->step >= MAXT || s->n_rows > MAXR) return;
    rec->n_rows[s->step] = s->n_rows;
    for (int r = 0; r < s->n_rows; r++) {
        rec->src[s->step][r] = s->src_row[r];
        memcpy(rec->prefix[s->step][r], s->prefix + (size_t)r * s->prefix_stride,
               (size_t)(s->step + 1) * sizeof(int32_t));
        memcpy(rec->logits[s->step][r], s->logits + (size_t)r * V, V * sizeof(float));
    }
    rec->n_steps++;
}

static bool read_i32(const ckpt_st_file *f, const char *name, int32_t *dst, size_t n, size_t *shape0, size_t *shape1) {
    ckpt_st_tensor t;
    TZ_EXPECT_OK(ckpt_safetensors_find(f, name, &t));
    bool ok = t.dtype == RT_I32 && t.numel <= n;
    TZ_EXPECT(ok, "%s: dtype %d numel %zu (room for %zu)", name, (int)t.dtype, t.numel, n);
    if (!ok) return false;
    memcpy(dst, t.data, t.numel * sizeof(int32_t));
    if (shape0) *shape0 = t.shape[0];
    if (shape1) *shape1 = t.ndim > 1 ? t.shape[1] : 1;
    return true;
}

static bool load_golden(const char *dir, golden_file *gf) {
    char path[4096], name[64];
    ckpt_st_file *f = NULL;
    memset(gf, 0, sizeof *gf);
    snprintf(path, sizeof path, "%s/generate.safetensors", dir);
    TZ_EXPECT_OK(ckpt_safetensors_open(path, &f));
    if (!f) return false;
    bool ok = read_i32(f, "input_ids", gf->ids, B * S, NULL, NULL) &&
              read_i32(f, "attention_mask", gf->mask, B * S, NULL, NULL);
    for (int c = 0; ok && c < MAX_CASES; c++) {
        snprintf(name, sizeof name, "case%d.config", c);
        if (!ckpt_safetensors_has(f, name)) break;
        golden_case *gc = &gf->cases[gf->n_cases++];
        int32_t cfg[5], seq[B * (MAXT + 1)];
        size_t rows = 0, cols = 0;
        ok = read_i32(f, name, cfg, 5, NULL, NULL);
        if (!ok) break;
        gc->num_beams = cfg[0];
        gc->early = cfg[1] == 0 ? GEN_EARLY_STOP_HEURISTIC : cfg[1] == 1 ? GEN_EARLY_STOP_TRUE : GEN_EARLY_STOP_NEVER;
        gc->eos = cfg[2];
        gc->max_new = cfg[3];
        gc->length_penalty = cfg[4] / 1000.0;
        snprintf(name, sizeof name, "case%d.sequences", c);
        ok = read_i32(f, name, seq, sizeof seq / sizeof *seq, &rows, &cols) && rows == B && cols >= 2;
        if (!ok) break;
        for (int b = 0; b < B; b++) { /* drop the start token; cut after the first eos */
            gc->hf_len[b] = (int)cols - 1;
            for (int t = 0; t + 1 < (int)cols; t++) {
                gc->hf_ids[b][t] = seq[(size_t)b * cols + (size_t)t + 1];
                if (gc->hf_ids[b][t] == gc->eos) {
                    gc->hf_len[b] = t + 1;
                    break;
                }
            }
        }
        ckpt_st_tensor t;
        if (gc->num_beams == 1) {
            snprintf(name, sizeof name, "case%d.scores", c);
            TZ_EXPECT_OK(ckpt_safetensors_find(f, name, &t));
            gc->hf_steps = (int)t.shape[0];
            ok = t.ndim == 3 && t.shape[0] <= MAXT && t.shape[1] == B && t.shape[2] == V;
            TZ_EXPECT(ok, "%s: shape", name);
            if (ok) TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, name, &gc->hf_scores[0][0][0], t.numel));
        } else {
            snprintf(name, sizeof name, "case%d.sequences_scores", c);
            TZ_EXPECT_OK(ckpt_safetensors_read_f32(f, name, gc->hf_seq_scores, B));
        }
    }
    TZ_EXPECT(gf->n_cases >= 10, "%s: %d cases", path, gf->n_cases);
    ckpt_safetensors_close(f);
    return ok;
}

static void case_name(char *buf, size_t size, const char *model, int c, const golden_case *gc, const char *what) {
    static const char *early[] = {"False", "True", "never"};
    snprintf(buf, size, "%s case%d (beams %d eos %d max_new %d lp %.1f early %s) %s", model, c, gc->num_beams, gc->eos,
             gc->max_new, gc->length_penalty, early[gc->early], what);
}

static gen_options case_options(const golden_case *gc) {
    return (gen_options){.max_new_tokens = gc->max_new,
                         .num_beams = gc->num_beams,
                         .length_penalty = gc->length_penalty,
                         .early_stopping = gc->early,
                         .eos_token_id = gc->eos};
}

/* Our rows first..first+n against HF's. */
static void check_ids(const char *what, const golden_case *gc, int first, int n, const int32_t *ids, const int *len) {
    for (int i = 0; i < n; i++) {
        const int b = first + i;
        bool same = len[i] == gc->hf_len[b] &&
                    memcmp(ids + (size_t)i * gc->max_new, gc->hf_ids[b], (size_t)gc->hf_len[b] * sizeof(int32_t)) == 0;
        for (int t = len[i]; t < gc->max_new; t++) same &= ids[(size_t)i * gc->max_new + t] == 0; /* pad */
        TZ_EXPECT(same, "%s: row %d: %d tokens [%d %d %d %d ...], HF %d [%d %d %d %d ...]", what, b, len[i],
                  ids[(size_t)i * gc->max_new], ids[(size_t)i * gc->max_new + 1], ids[(size_t)i * gc->max_new + 2],
                  ids[(size_t)i * gc->max_new + 3], gc->hf_len[b], gc->hf_ids[b][0], gc->hf_ids[b][1], gc->hf_ids[b][2],
                  gc->hf_ids[b][3]);
    }
}

static void log_softmax(const float *x, float *out) {
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    for (int v = 0; v < V; v++) sum += exp(x[v] - mx);
    for (int v = 0; v < V; v++) out[v] = (float)(x[v] - mx - log(sum));
}

/* The greedy path's logits against HF's output_scores, row by row as long as it ran, and the
 * score as the sum of the chosen tokens' log-probs from HF's numbers. */
static void check_greedy(const char *what, const golden_case *gc, const recording *rec, const float *scores) {
    char buf[400];
    int max_len = 0;
    for (int b = 0; b < B; b++) max_len = gc->hf_len[b] > max_len ? gc->hf_len[b] : max_len;
    TZ_EXPECT(rec->n_steps == max_len && gc->hf_steps == max_len, "%s: %d steps, HF %d, longest row %d", what,
              rec->n_steps, gc->hf_steps, max_len);
    double worst = 0;
    for (int t = 0; t < rec->n_steps; t++) {
        int running = 0;
        for (int b = 0; b < B; b++) running += gc->hf_len[b] > t;
        TZ_EXPECT(rec->n_rows[t] == running, "%s: step %d ran %d rows, %d still unfinished", what, t, rec->n_rows[t],
                  running);
        for (int r = 0; r < rec->n_rows[t]; r++) {
            const int b = rec->src[t][r];
            for (int v = 0; v < V; v++) {
                double d = fabs((double)rec->logits[t][r][v] - gc->hf_scores[t][b][v]);
                worst = d > worst ? d : worst;
            }
            snprintf(buf, sizeof buf, "%s: step %d row %d logits", what, t, b);
            tz_check_close(buf, rec->logits[t][r], gc->hf_scores[t][b], V, FWD_ATOL, FWD_RTOL);
        }
    }
    printf("  %-90s max |logit - HF| %.3g\n", what, worst);
    float lp[V], ref[B] = {0};
    for (int b = 0; b < B; b++)
        for (int t = 0; t < gc->hf_len[b]; t++) {
            log_softmax(gc->hf_scores[t][b], lp);
            ref[b] += lp[gc->hf_ids[b][t]];
        }
    snprintf(buf, sizeof buf, "%s: sum of log-probs", what);
    tz_check_close(buf, scores, ref, B, FWD_ATOL, FWD_RTOL);
}

/* Each recorded step's logits against t5_step over the row's whole prefix (last position). */
static void check_recompute(const char *what, t5_model *m, const golden_file *gf, const recording *rec) {
    static int32_t src[MAXR * S], mask[MAXR * S], dec[MAXR * MAXT], labels[MAXR * MAXT];
    static float logits[MAXR * MAXT * V];
    double worst = 0;
    for (int t = 0; t < rec->n_steps; t++) {
        const int n = rec->n_rows[t], T = t + 1;
        for (int r = 0; r < n; r++) {
            const int b = rec->src[t][r];
            memcpy(src + (size_t)r * S, gf->ids + (size_t)b * S, S * sizeof(int32_t));
            memcpy(mask + (size_t)r * S, gf->mask + (size_t)b * S, S * sizeof(int32_t));
            memcpy(dec + (size_t)r * T, rec->prefix[t][r], (size_t)T * sizeof(int32_t));
        }
        memset(labels, 0, sizeof labels); /* pad: no targets, forward only */
        t5_batch batch = {
            .B = n, .S = S, .T = T, .src_ids = src, .src_mask = mask, .labels = labels, .decoder_input_ids = dec};
        mdl_pass pass = {0};
        double loss = 0;
        int n_targets = 0;
        TZ_EXPECT_OK(t5_step(m, &batch, &pass, 0.0f, &loss, &n_targets, logits));
        for (int r = 0; r < n; r++) {
            const float *full = logits + ((size_t)r * T + (size_t)t) * V;
            for (int v = 0; v < V; v++) {
                double d = fabs((double)rec->logits[t][r][v] - full[v]);
                worst = d > worst ? d : worst;
            }
            char buf[400];
            snprintf(buf, sizeof buf, "%s: step %d row %d cached vs recomputed", what, t, r);
            tz_check_close(buf, rec->logits[t][r], full, V, FWD_ATOL, FWD_RTOL);
        }
    }
    char steps[128] = "";
    for (int t = 0, n = 0; t < rec->n_steps && n < (int)sizeof steps - 4; t++)
        n += snprintf(steps + n, sizeof steps - (size_t)n, " %d", rec->n_rows[t]);
    printf("  %-90s max |cached - recomputed| %.3g; rows per step:%s\n", what, worst, steps);
}

static void test_model(rt_backend *be, const char *name) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", tz_source_path(name));
    static golden_file gf;
    static recording rec;
    char what[400];
    t5_model *m = NULL;
    t5_generator *g = NULL;
    if (!load_golden(dir, &gf)) return;
    /* max_B covers the recompute batches (every beam of every row); max_tgt the longest prefix */
    TZ_EXPECT_OK(t5_model_from_hf(dir, be, rt_comm_self(), MAXR, S, MAXT, &m, NULL, 0));
    if (m) TZ_EXPECT_OK(t5_generator_init(m, B, S, NB, MAXT, &g));
    if (!g) goto done;
    for (int c = 0; c < gf.n_cases; c++) {
        const golden_case *gc = &gf.cases[c];
        gen_options o = case_options(gc);
        int32_t ids[B * MAXT];
        int len[B];
        float scores[B];
        memset(&rec, 0, sizeof rec);
        TZ_EXPECT_OK(t5_generate(g, gf.ids, gf.mask, B, S, &o, record_step, &rec, ids, len, scores));
        case_name(what, sizeof what, name + strlen("tests/golden/"), c, gc, "");
        check_ids(what, gc, 0, B, ids, len);
        if (gc->num_beams == 1) {
            check_greedy(what, gc, &rec, scores);
        } else {
            char buf[500];
            snprintf(buf, sizeof buf, "%s sequences_scores", what);
            tz_check_close(buf, scores, gc->hf_seq_scores, B, FWD_ATOL, FWD_RTOL);
            TZ_EXPECT(rec.n_rows[0] == B, "%s: step 0 ran %d rows (one per source)", what, rec.n_rows[0]);
            for (int t = 1; t < rec.n_steps; t++)
                TZ_EXPECT(rec.n_rows[t] % NB == 0 && rec.n_rows[t] <= rec.n_rows[t - 1] * NB, "%s: step %d ran %d rows",
                          what, t, rec.n_rows[t]);
        }
        check_recompute(what, m, &gf, &rec);

        /* sub-batches: row 0 alone, then rows 1 and 2 */
        int32_t ids1[B * MAXT];
        int len1[B];
        TZ_EXPECT_OK(t5_generate(g, gf.ids, gf.mask, 1, S, &o, NULL, NULL, ids1, len1, NULL));
        case_name(what, sizeof what, name + strlen("tests/golden/"), c, gc, "row 0 alone");
        check_ids(what, gc, 0, 1, ids1, len1);
        TZ_EXPECT_OK(t5_generate(g, gf.ids + S, gf.mask + S, 2, S, &o, NULL, NULL, ids1, len1, NULL));
        case_name(what, sizeof what, name + strlen("tests/golden/"), c, gc, "rows 1-2");
        check_ids(what, gc, 1, 2, ids1, len1);
    }
done:
    t5_generator_free(g);
    t5_model_free(m);
}

/* ---- tp = 2 on threads: every rank generates, and gets HF's ids ---- */

typedef struct {
    rt_comm *comm;
    const char *dir;
    const golden_file *gf;
    int32_t ids[MAX_CASES][B * MAXT];
    int len[MAX_CASES][B];
} tp_rank_arg;

static rt_status tp_rank_run(tp_rank_arg *a) {
    rt_status st = RT_OK;
    rt_backend *be = NULL;
    t5_model *m = NULL;
    t5_generator *g = NULL;
    RT_TRY(rt_backend_init("cpu", 1, &be));
    RT_TRY(t5_model_from_hf(a->dir, be, a->comm, B, S, MAXT, &m, NULL, 0));
    RT_TRY(t5_generator_init(m, B, S, NB, MAXT, &g));
    for (int c = 0; c < a->gf->n_cases; c++) {
        gen_options o = case_options(&a->gf->cases[c]);
        RT_TRY(t5_generate(g, a->gf->ids, a->gf->mask, B, S, &o, NULL, NULL, a->ids[c], a->len[c], NULL));
    }
fail:
    t5_generator_free(g);
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

static void test_tp2(const char *name) {
    static golden_file gf;
    static tp_rank_arg args[2];
    const char *dir = tz_source_path(name);
    char dir_copy[4096], what[400];
    snprintf(dir_copy, sizeof dir_copy, "%s", dir);
    if (!load_golden(dir_copy, &gf)) return;
    for (int r = 0; r < 2; r++) {
        memset(&args[r], 0, sizeof args[r]);
        args[r].dir = dir_copy;
        args[r].gf = &gf;
    }
    const rt_status st = tz_run_ranks(2, 60.0, tp_rank_main, args, sizeof *args);
    TZ_EXPECT(st == RT_OK, "tp=2: %s", rt_status_name(st));
    for (int r = 0; r < 2 && st == RT_OK; r++)
        for (int c = 0; c < gf.n_cases; c++) {
            char tag[32];
            snprintf(tag, sizeof tag, "tp=2 rank %d", r);
            case_name(what, sizeof what, name + strlen("tests/golden/"), c, &gf.cases[c], tag);
            check_ids(what, &gf.cases[c], 0, B, args[r].ids[c], args[r].len[c]);
        }
    printf("  %s: tp=2 generated %d cases on both ranks\n", name, gf.n_cases);
}

/* Options outside what the generator was sized for, or nonsense, are errors naming them. */
static void test_errors(rt_backend *be) {
    const char *dir = tz_source_path("tests/golden/t5-tiny-v1_0");
    t5_model *m = NULL;
    t5_generator *g = NULL;
    TZ_EXPECT_OK(t5_model_from_hf(dir, be, rt_comm_self(), B, S, MAXT, &m, NULL, 0));
    if (!m) return;
    TZ_EXPECT(t5_generator_init(m, B + 1, S, NB, MAXT, &g) == RT_ERR_CONFIG && !g, "more rows than the model");
    TZ_EXPECT(t5_generator_init(m, B, S, 51, MAXT, &g) == RT_ERR_CONFIG && strstr(rt_error_message(), "vocab"),
              "2 * beams > vocab: %s", rt_error_message());
    TZ_EXPECT_OK(t5_generator_init(m, B, S, NB, 4, &g));
    int32_t ids[B * S] = {0}, out[B * MAXT];
    int len[B];
    for (int i = 0; i < B * S; i++) ids[i] = 2 + i;
    gen_options o;
    t5_gen_options_default(t5_model_config(m), &o);
    TZ_EXPECT(o.num_beams == 1 && o.eos_token_id == 1 && o.max_new_tokens == 20 && o.length_penalty == 1.0, "defaults");
    o.max_new_tokens = 5;
    TZ_EXPECT(t5_generate(g, ids, NULL, B, S, &o, NULL, NULL, out, len, NULL) == RT_ERR_CONFIG &&
                  strstr(rt_error_message(), "max_new_tokens"),
              "max_new_tokens: %s", rt_error_message());
    o.max_new_tokens = 4;
    o.num_beams = NB + 1;
    TZ_EXPECT(t5_generate(g, ids, NULL, B, S, &o, NULL, NULL, out, len, NULL) == RT_ERR_CONFIG &&
                  strstr(rt_error_message(), "num_beams"),
              "num_beams: %s", rt_error_message());
    o.num_beams = 1;
    o.eos_token_id = V;
    TZ_EXPECT(t5_generate(g, ids, NULL, B, S, &o, NULL, NULL, out, len, NULL) == RT_ERR_CONFIG &&
                  strstr(rt_error_message(), "eos_token_id"),
              "eos: %s", rt_error_message());
    o.eos_token_id = 1;
    ids[5] = V;
    TZ_EXPECT(t5_generate(g, ids, NULL, B, S, &o, NULL, NULL, out, len, NULL) == RT_ERR_FORMAT, "source id %d", V);
    ids[5] = 7;
    TZ_EXPECT_OK(t5_generate(g, ids, NULL, B, S, &o, NULL, NULL, out, len, NULL));
    for (int b = 0; b < B; b++) TZ_EXPECT(len[b] >= 1 && len[b] <= 4, "row %d: %d tokens", b, len[b]);
    t5_generator_free(g);
    t5_model_free(m);
}

int main(void) {
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 2, &be));
    if (!be) return tz_test_result("test_golden_t5_generate");
    test_model(be, "tests/golden/t5-tiny-v1_0");
    test_model(be, "tests/golden/t5-tiny-v1_1");
    test_tp2("tests/golden/t5-tiny-v1_0");
    test_tp2("tests/golden/t5-tiny-v1_1");
    test_errors(be);
    rt_backend_free(be);
    /* the same cases on the CUDA backend where there is one (generation uses only backend ops) */
    rt_backend *gpu = NULL;
    rt_status st = rt_backend_init("cuda:0", 0, &gpu);
    if (st == RT_ERR_UNSUPPORTED) {
        printf("  CUDA: not checked here: %s\n", rt_error_message());
    } else {
        TZ_EXPECT_OK(st);
        if (gpu) {
            test_model(gpu, "tests/golden/t5-tiny-v1_0");
            test_model(gpu, "tests/golden/t5-tiny-v1_1");
        }
        rt_backend_free(gpu);
    }
    return tz_test_result("test_golden_t5_generate");
}
