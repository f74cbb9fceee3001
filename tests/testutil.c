/* Implementation of the shared test helpers (see testutil.h). */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/testutil.h"

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/base/rt_dtype.h"
#include "runtime/comm/rt_launch.h"
#include "runtime/train/rt_pipe.h"

int tz_test_failures = 0;
int tz_test_checks = 0;

int tz_check_close(const char *what, const float *got, const float *ref, size_t n, float atol, float rtol) {
    size_t worst = 0;
    double worst_excess = -1.0;
    size_t bad = 0;
    tz_test_checks++;
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)got[i] - (double)ref[i]);
        double tol = atol + rtol * fabs((double)ref[i]);
        double excess = isfinite(diff) ? diff - tol : INFINITY;
        if (!(diff <= tol)) bad++;
        if (excess > worst_excess) {
            worst_excess = excess;
            worst = i;
        }
    }
    if (bad) {
        fprintf(stderr,
                "FAILED %s: %zu of %zu elements out of tolerance (atol %g rtol %g); worst [%zu] got %.8g ref %.8g\n",
                what, bad, n, atol, rtol, worst, got[worst], ref[worst]);
        tz_test_failures++;
        return 0;
    }
    return 1;
}

/* ||a - b||_2 in double */
static double tz_l2_dist(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = b ? (double)a[i] - (double)b[i] : (double)a[i];
        s += d * d;
    }
    return sqrt(s);
}

int tz_check_bf16_band(const char *what, const float *ours_bf16, const float *ours_fp32, const float *hf_autocast,
                       const float *hf_fp32, size_t n) {
    double norm = tz_l2_dist(hf_fp32, NULL, n);
    if (!(norm > 0)) norm = 1; /* an all-zero reference: absolute distances */
    double d_ref = tz_l2_dist(hf_autocast, hf_fp32, n) / norm;
    double d_ours = tz_l2_dist(ours_bf16, hf_autocast, n) / norm;
    double d_round = tz_l2_dist(ours_bf16, ours_fp32, n) / norm;
    double band = TZ_BF16_MULT * d_ref + TZ_BF16_FLOOR, min_round = TZ_BF16_MIN_ROUND * d_ref;
    int ok_band = d_ours <= band, ok_round = n < 2 || d_round >= min_round;
    printf("  bf16 %-66s n=%-5zu d_ref %.3g  d_ours %.3g (band %.3g)  d_round %.3g (min %.3g)\n", what, n, d_ref,
           d_ours, band, d_round, n < 2 ? 0.0 : min_round);
    TZ_EXPECT(ok_band, "%s: ours bf16 is %.3g from HF's autocast, over %g x d_ref %.3g + %g", what, d_ours,
              TZ_BF16_MULT, d_ref, TZ_BF16_FLOOR);
    TZ_EXPECT(ok_round, "%s: ours bf16 is only %.3g from ours fp32, under %g x d_ref %.3g: did it round at all?", what,
              d_round, TZ_BF16_MIN_ROUND, d_ref);
    return ok_band && ok_round;
}

int tz_check_bf16_golden(const ckpt_st_file *fp32_golden, const ckpt_st_file *autocast, const char *what,
                         const char *name, const float *ours_bf16, const float *ours_fp32, size_t n) {
    char label[300];
    snprintf(label, sizeof label, "%s%s", what, name);
    float *ref = rt_xmalloc(n * sizeof(float)), *hf = rt_xmalloc(n * sizeof(float));
    rt_status st1 = ckpt_safetensors_read_f32(fp32_golden, name, ref, n);
    TZ_EXPECT(st1 == RT_OK, "%s: fp32 golden: %s", label, rt_error_message());
    rt_status st2 = ckpt_safetensors_read_f32(autocast, name, hf, n);
    TZ_EXPECT(st2 == RT_OK, "%s: bf16 autocast golden: %s", label, rt_error_message());
    int ok = st1 == RT_OK && st2 == RT_OK && tz_check_bf16_band(label, ours_bf16, ours_fp32, hf, ref, n);
    free(ref);
    free(hf);
    return ok;
}

int tz_count_prefixed(const ckpt_st_file *f, const char *prefix) {
    int n = 0;
    for (size_t i = 0; i < ckpt_safetensors_count(f); i++)
        n += strncmp(ckpt_safetensors_name(f, i), prefix, strlen(prefix)) == 0;
    return n;
}

static const char *tz_env_or(const char *var, const char *fallback) {
    const char *v = getenv(var);
    return v && *v ? v : fallback;
}

/* $TZ_SOURCE_DIR/dir/rel, or exit 1 with one line when it is not there to read. */
static const char *fixture_path(const char *dir, const char *rel) {
    static char buf[16][4096];
    static int slot = 0;
    char *b = buf[slot++ & 15];
    snprintf(b, 4096, "%s/%s%s", tz_env_or("TZ_SOURCE_DIR", TZ_SOURCE_DIR), dir, rel);
    if (access(b, R_OK) != 0) {
        fprintf(stderr, "FAILED: test fixture %s: %s (tests read only files inside the repository)\n", b,
                strerror(errno));
        exit(1);
    }
    return b;
}

const char *tz_source_path(const char *rel) { return fixture_path("", rel); }
const char *tz_data_path(const char *rel) { return fixture_path("tests/data/", rel); }
const char *tz_asset_path(const char *rel) { return fixture_path("assets/", rel); }

const char *tz_superglue_dir(const char *task, const char *split) {
    char rel[64];
    snprintf(rel, sizeof rel, "superglue-%s", task);
    return strcmp(task, "copa") == 0 && strcmp(split, "test") != 0 ? tz_asset_path(rel) : tz_data_path(rel);
}

void tz_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(data, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    TZ_EXPECT(ok, "cannot write %s", path);
}

void tz_write_text(const char *path, const char *text) { tz_write_file(path, text, strlen(text)); }

/* Every folder tz_tmpdir made, and the process that made them (a forked child's exit must
 * not take its parent's folders). */
static char **tmp_made;
static int n_tmp_made;
static pid_t tmp_owner;
static pthread_mutex_t tmp_lock = PTHREAD_MUTEX_INITIALIZER;

static int tmp_remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* At exit: the test's folders go, unless a check failed (then they stay for a look). */
static void tmp_cleanup(void) {
    if (getpid() != tmp_owner) return;
    for (int i = 0; i < n_tmp_made; i++) {
        if (tz_test_failures == 0) nftw(tmp_made[i], tmp_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        free(tmp_made[i]);
    }
    if (tz_test_failures > 0 && n_tmp_made > 0)
        fprintf(stderr, "kept the test's %d temporary folder(s) for inspection, e.g. %s\n", n_tmp_made,
                "/tmp/tz_test_*");
    free(tmp_made);
    n_tmp_made = 0;
}

rt_train_opts tz_train_opts(int64_t max_steps, int64_t batch_size, int64_t grad_accum, const char *save_dir) {
    return (rt_train_opts){.prog = "test",
                           .epochs = 1,
                           .max_steps = max_steps,
                           .batch_size = batch_size,
                           .grad_accum = grad_accum,
                           .lr = 1e-3,
                           .weight_decay = 0.01,
                           .warmup = 1,
                           .clip = 1.0,
                           .beta1 = 0.9,
                           .beta2 = 0.999,
                           .adam_eps = 1e-8,
                           .schedule = "linear",
                           .seed = 3,
                           .eval_interval = -1,
                           .log_interval = 0,
                           .save_interval = -1,
                           .keep = 1,
                           .save_dir = save_dir,
                           .options_json = "{}"};
}

const char *tz_tmpdir(void) {
    static char buf[8][64];
    static int slot = 0;
    pthread_mutex_lock(&tmp_lock);
    char *b = buf[slot++ & 7];
    snprintf(b, 64, "/tmp/tz_test_XXXXXX");
    if (!mkdtemp(b)) {
        perror("mkdtemp");
        exit(1);
    }
    if (n_tmp_made == 0 && !tmp_made) {
        tmp_owner = getpid();
        atexit(tmp_cleanup);
    }
    tmp_made = realloc(tmp_made, (size_t)(n_tmp_made + 1) * sizeof *tmp_made);
    tmp_made[n_tmp_made++] = strdup(b);
    pthread_mutex_unlock(&tmp_lock);
    return b;
}

int tz_check_after_adamw(const char *what, float *got, const float *ref, const float *ref_grad, size_t n, float atol,
                         float rtol) {
    for (size_t j = 0; j < n; j++) {
        if (fabsf(ref_grad[j]) >= 1e-7f) continue;
        TZ_EXPECT(fabsf(got[j] - ref[j]) <= 1.01e-3f, "%s[%zu]: %g vs %g beyond one AdamW step", what, j, got[j],
                  ref[j]);
        got[j] = ref[j];
    }
    return tz_check_close(what, got, ref, n, atol, rtol);
}

int tz_test_result(const char *name) {
    printf("%s: %d passed, %d failed\n", name, tz_test_checks - tz_test_failures, tz_test_failures);
    if (tz_test_checks == 0) { /* a test that checked nothing proved nothing (llm.c's warning) */
        printf("%s: FAILED: no check ran\n", name);
        return 1;
    }
    return tz_test_failures ? 1 : 0;
}

data_tokenized tz_synthetic_pairs(int n, int vocab, int id_offset) {
    int32_t *storage = rt_xcalloc((size_t)n * 18, sizeof(int32_t));
    const int32_t **rows = rt_xcalloc((size_t)n, sizeof *rows);
    int32_t *lengths = rt_xcalloc((size_t)n, sizeof(int32_t)), *len_a = rt_xcalloc((size_t)n, sizeof(int32_t));
    int32_t *labels = rt_xcalloc((size_t)n, sizeof(int32_t));
    for (int i = 0; i < n; i++) {
        lengths[i] = 5 + (i * 7) % 14;
        len_a[i] = lengths[i] / 2;
        labels[i] = (i * 5 + 3) % 2;
        for (int t = 0; t < lengths[i]; t++) storage[(size_t)i * 18 + t] = (i * 131 + t * 17 + id_offset) % (vocab - 1);
        rows[i] = storage + (size_t)i * 18;
    }
    data_tokenized d = {0};
    TZ_EXPECT_OK(data_tokenized_from_rows(rows, lengths, len_a, labels, (size_t)n, &d));
    free(storage);
    free(rows);
    free(lengths);
    free(len_a);
    free(labels);
    return d;
}

typedef struct {
    rt_status (*fn)(rt_comm *comm, void *arg);
    rt_comm *comm;
    void *arg;
    rt_status st;
    char msg[512];
} tz_rank;

static void *tz_rank_main(void *p) {
    tz_rank *r = p;
    r->st = r->fn(r->comm, r->arg);
    if (r->st != RT_OK) snprintf(r->msg, sizeof r->msg, "%s", rt_error_message());
    return NULL;
}

rt_status tz_run_ranks(int n, double timeout_s, rt_status (*fn)(rt_comm *comm, void *arg), void *args,
                       size_t arg_size) {
    rt_comm **comms = calloc((size_t)n, sizeof *comms);
    tz_rank *ranks = calloc((size_t)n, sizeof *ranks);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    rt_status st = rt_comm_threads_create(n, timeout_s, comms);
    for (int r = 0; st == RT_OK && r < n; r++) {
        ranks[r] = (tz_rank){.fn = fn, .comm = comms[r], .arg = (char *)args + (size_t)r * arg_size};
        if (pthread_create(&th[r], NULL, tz_rank_main, &ranks[r]) != 0) {
            /* the ranks already started would wait for this one until their timeout */
            fprintf(stderr, "tz_run_ranks: cannot start thread %d\n", r);
            abort();
        }
    }
    for (int r = 0; st == RT_OK && r < n; r++) pthread_join(th[r], NULL);
    for (int r = 0; comms && r < n; r++) rt_comm_free(comms[r]);
    for (int r = 0; st == RT_OK && r < n; r++)
        if (ranks[r].st != RT_OK) {
            fprintf(stderr, "rank %d of %d: %s\n", r, n, ranks[r].msg);
            st = ranks[r].st;
        }
    free(comms);
    free(ranks);
    free(th);
    return st;
}

int tz_fd_check(const char *what, float *x, size_t nx, const float *analytic, tz_loss_fn loss, void *st, float h,
                float atol, float rtol) {
    float *num = rt_xmalloc(nx * sizeof(float));
    double worst = 0;
    size_t worst_i = 0;
    for (size_t i = 0; i < nx; i++) {
        float save = x[i];
        float xp = save + h, xm = save - h;
        x[i] = xp;
        double lp = loss(st);
        x[i] = xm;
        double lm = loss(st);
        x[i] = save;
        num[i] = (float)((lp - lm) / ((double)xp - (double)xm));
        double e = fabs((double)num[i] - analytic[i]);
        if (e > worst) worst = e, worst_i = i;
    }
    printf("  %-48s n=%-4zu worst |analytic - numeric| = %.3g at [%zu] (%.6g vs %.6g)\n", what, nx, worst, worst_i,
           nx ? (double)analytic[worst_i] : 0.0, nx ? (double)num[worst_i] : 0.0);
    int ok = tz_check_close(what, analytic, num, nx, atol, rtol);
    free(num);
    return ok;
}

uint16_t *tz_narrow16(rt_dtype t, const float *x, size_t n) {
    uint16_t *y = rt_xmalloc((n ? n : 1) * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) y[i] = t == RT_BF16 ? rt_f32_to_bf16(x[i]) : rt_f32_to_f16(x[i]);
    return y;
}

float tz_uniform(unsigned *state) {
    *state = *state * 1103515245u + 12345u;
    return (float)((*state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

float *tz_attention_key_mask(int B, int Tk, int masked_batch) {
    float *m = rt_xmalloc((size_t)B * Tk * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int j = 0; j < Tk; j++)
            m[(size_t)b * Tk + j] = b == masked_batch ? -INFINITY : j % 5 == 3 ? -1e9f : j % 7 == 6 ? -INFINITY : 0.0f;
    return m;
}

int tz_gemm_misses(const char *what, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, const float *C0, const float *C, int ldc, rt_dtype inputs,
                   bool quiet) {
    int misses = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double ref = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                float b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                a = rt_round_to(inputs, a), b = rt_round_to(inputs, b);
                ref += (double)a * b;
                mag += fabs((double)a * b);
            }
            const size_t c = (size_t)i * ldc + j;
            ref = alpha * ref + beta * (double)C0[c];
            const double bound = (K + 2) * 1.2e-7 * (fabs(alpha) * mag + fabs(beta * (double)C0[c])) + 1e-30;
            if (!(fabs(C[c] - ref) <= bound) && misses++ < 3 && !quiet)
                fprintf(stderr,
                        "FAILED: %s %dx%dx%d ta=%d tb=%d alpha=%g beta=%g: C[%d,%d] = %.9g, want %.9g (bound "
                        "%.3g)\n",
                        what, M, N, K, ta, tb, alpha, beta, i, j, C[c], ref, bound);
        }
    return misses;
}

float *tz_fetch_param(rt_backend *be, const rt_params *p, int i, bool grad) {
    float *h = malloc(p->specs[i].numel * sizeof(float));
    rt_to_host(be, h, (grad ? p->grad : p->param) + p->specs[i].offset, p->specs[i].numel * sizeof(float));
    return h;
}

int tz_stage_params_differ(rt_backend *be, const rt_params *stage, rt_backend *whole_be, const rt_params *whole,
                           bool grads, const char *tied, float **tied_grad, int *compared, char *msg, size_t msg_size) {
    int bad = 0;
    if (compared) *compared = 0;
    if (tied_grad) *tied_grad = NULL;
    for (int i = 0; i < stage->n; i++) {
        const char *name = stage->specs[i].name;
        const int j = rt_params_find(whole, name);
        const size_t n = stage->specs[i].numel;
        if (j < 0 || whole->specs[j].numel != n) {
            if (bad++ == 0) snprintf(msg, msg_size, "%s is not the whole model's", name);
            continue;
        }
        float *got = tz_fetch_param(be, stage, i, grads), *want = tz_fetch_param(whole_be, whole, j, grads);
        bool same = memcmp(got, want, n * sizeof(float)) == 0;
        if (grads && tied && strcmp(name, tied) == 0) {
            same = true;
            for (size_t e = 0; e < n; e++) same &= fabsf(got[e] - want[e]) <= 1e-6f + 1e-5f * fabsf(want[e]);
            if (tied_grad) *tied_grad = got, got = NULL;
        }
        if (!same && bad++ == 0)
            snprintf(msg, msg_size, grads ? "%s's gradient differs" : "%s's random init differs from the whole model's",
                     name);
        if (compared) *compared += !stage->specs[i].copy;
        free(got);
        free(want);
    }
    return bad;
}

rt_status tz_stage_sum_tied(rt_comm *pp, rt_params *p) {
    const int tied = rt_params_tied(p);
    uint64_t members = 0;
    float *scratch = NULL;
    rt_status st = rt_pipe_tied_members(pp, tied >= 0, &members);
    if (st != RT_OK || tied < 0) return st;
    const size_t n = p->specs[tied].numel;
    if (!(members & (((uint64_t)1 << pp->rank) - 1))) /* the first holder */
        st = rt_backend_alloc(p->be, n * sizeof(float), "tied gradients", (void **)&scratch);
    if (st == RT_OK) st = rt_pipe_sum_tied(pp, members, p->be, rt_params_grad(p, tied), n, scratch);
    if (scratch) rt_free_device(p->be, scratch);
    return st;
}
