/* Shared test helpers: tolerance checks that report the worst element, and the paths of the
 * fixtures, all inside the repository (TZ_SOURCE_DIR, which ctest passes in with TZ_BIN_DIR).
 * Every check counts a failure; a test returns tz_test_result() so it exits non-zero when
 * anything mismatched, or when no check ran at all. */
#ifndef TZ_TESTUTIL_H
#define TZ_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoints/ckpt_safetensors.h"
#include "data/data_dataset.h"
#include "runtime/backend/rt_backend.h"
#include "runtime/comm/rt_comm.h"
#include "runtime/train/rt_params.h"
#include "runtime/train/rt_trainer.h"
#include "runtime/base/rt_dtype.h"
#include "runtime/base/rt_status.h"

extern int tz_test_failures;
extern int tz_test_checks;

/* |a-b| <= atol + rtol*|ref| per element; prints the worst element on failure. Returns 1 ok. */
int tz_check_close(const char *what, const float *got, const float *ref, size_t n, float atol, float rtol);
/* The finite-difference check of a backward op: central differences (step h) of loss(st) over
 * every element of x (restored after each), compared with the analytic gradient through
 * tz_check_close; prints the worst absolute error either way. Returns 1 ok. */
typedef double (*tz_loss_fn)(void *st);
int tz_fd_check(const char *what, float *x, size_t nx, const float *analytic, tz_loss_fn loss, void *st, float h,
                float atol, float rtol);
/* n floats as 2-byte values of t (RT_BF16 or RT_F16), to nearest even: a 16-bit activation
 * buffer of them (rt_convert_to_f32 widens it back). Caller frees. */
uint16_t *tz_narrow16(rt_dtype t, const float *x, size_t n);
/* A uniform float in [-1, 1) from a 32-bit LCG state (deterministic test data). */
float tz_uniform(unsigned *state);
/* An attention key mask (B, Tk), additive, as the attention tests use it: every key of batch row
 * masked_batch (-1: none) at -inf; else -1e9 (HF's large negative) where j % 5 == 3, -inf where
 * j % 7 == 6, 0 elsewhere. Caller frees. */
float *tz_attention_key_mask(int B, int Tk, int masked_batch);
/* How many elements of C = alpha op(A) op(B) + beta C0 (row-major, leading dimensions as rt_gemm
 * takes them) are off a double-precision reference by more than fp32 accumulation's bound,
 * (K + 2) ulps of the sum of |terms|. inputs: the reference reads A and B rounded to that type
 * (RT_BF16, RT_F16; RT_F32 reads them as they are).
 * The first few misses are printed with `what` unless quiet. */
int tz_gemm_misses(const char *what, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, const float *C0, const float *C, int ldc, rt_dtype inputs,
                   bool quiet);
/* Weights after the first AdamW step (lr 1e-3) against a reference. An element whose reference
 * gradient is at noise level (|ref_grad| < 1e-7, e.g. the key bias, whose exact gradient is 0:
 * softmax ignores it) moves by lr * g / (|g| + eps) with g noise, i.e. anywhere in [-lr, lr] in
 * either framework: it is checked against that bound (got is set to ref there); the others with
 * tz_check_close. */
int tz_check_after_adamw(const char *what, float *got, const float *ref, const float *ref_grad, size_t n, float atol,
                         float rtol);
/* bf16 against PyTorch's CPU bf16 autocast (tests/golden/<model>/bf16_autocast.safetensors from
 * scripts/golden/gen_bf16_autocast_golden.py). Two bf16 implementations round at different points
 * (autocast: matmul inputs and outputs and most ops' outputs, in its own op lists; ours: matmul
 * inputs and every stored activation and activation gradient), so they cannot agree to fp32
 * tolerances. The band is measured from the goldens instead. With d(x, y) = ||x - y||_2 /
 * ||hf_fp32||_2 (relative L2, always over the fp32 reference's norm):
 *   d_ref   = d(hf_autocast, hf_fp32)   how far bf16 rounding moves HF;
 *   d_ours  = d(ours_bf16, hf_autocast);
 *   d_round = d(ours_bf16, ours_fp32)   how far bf16 rounding moves ours.
 * Two independent roundings of sizes e1, e2 land about sqrt(e1^2 + e2^2) apart (e1 + e2 at
 * worst), and d_ours >= d_round - d_ref, so the band d_ours <= TZ_BF16_MULT * d_ref + TZ_BF16_FLOOR
 * says: ours is off fp32 by at most about MULT times what autocast is. Ours rounds at more points
 * (the goldens measure d_round up to 2.3 d_ref), hence 3. The floor, 2^-8 relative, is one bf16
 * rounding step, for values such as a scalar loss whose d_ref is small by chance. And ours must
 * really have rounded: d_round >= TZ_BF16_MIN_ROUND * d_ref, between bf16's measured 0.44 d_ref
 * (its lowest) and fp16's (8x finer rounding) ~0.15 d_ref; an fp32 run gives ~1e-6. Checked for
 * tensors (n > 1) only: a scalar can stay put by chance (GPT-2's loss moved 7.5e-6 while its
 * logits moved 1.6e-3). NaN fails. Prints one line with the three figures and returns 1 when the
 * checks hold (a failure is counted). */
#define TZ_BF16_MULT 3.0
#define TZ_BF16_FLOOR 0.00390625 /* 2^-8 */
#define TZ_BF16_MIN_ROUND 0.25
int tz_check_bf16_band(const char *what, const float *ours_bf16, const float *ours_fp32, const float *hf_autocast,
                       const float *hf_fp32, size_t n);
/* The same for tensor `name` (n values, HF's layout): HF's fp32 value read from the fp32 golden
 * file, its autocast value from the bf16_autocast file; `what` prefixes the name in the output. */
int tz_check_bf16_golden(const ckpt_st_file *fp32_golden, const ckpt_st_file *autocast, const char *what,
                         const char *name, const float *ours_bf16, const float *ours_fp32, size_t n);
/* How many tensors of f are named prefix... (e.g. "grad."), to check that a loop saw them all. */
int tz_count_prefixed(const ckpt_st_file *f, const char *prefix);
/* Prints and counts a failure unless cond. */
#define TZ_EXPECT(cond, ...)                                                   \
    do {                                                                       \
        tz_test_checks++;                                                      \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            tz_test_failures++;                                                \
        }                                                                      \
    } while (0)
/* Fails the test (and prints the message) unless st == RT_OK. */
#define TZ_EXPECT_OK(expr)                                                                \
    do {                                                                                  \
        rt_status tz_st_ = (expr);                                                        \
        TZ_EXPECT(tz_st_ == RT_OK, "%s: %s", rt_status_name(tz_st_), rt_error_message()); \
    } while (0)

/* Paths of files the tests read, all inside the repository: $TZ_SOURCE_DIR/rel, its
 * tests/data/rel (test-only fixtures) and its assets/rel (what the programs ship). A path that
 * does not exist or cannot be read ends the test at once with one line naming it (exit 1):
 * a missing fixture is a failure, never a crash or a skip. The result lives in one of 16
 * static slots, reused in turn: copy it to keep it longer. */
const char *tz_source_path(const char *rel);
const char *tz_data_path(const char *rel);
const char *tz_asset_path(const char *rel);
/* The folder holding a SuperGLUE task's split: COPA's train and val ship in assets/, every other
 * split is a fixture in tests/data/. */
const char *tz_superglue_dir(const char *task, const char *split);
/* Writes n bytes to path (a failure is counted and printed). */
void tz_write_file(const char *path, const void *data, size_t n);
/* The same for a NUL-terminated text. */
void tz_write_text(const char *path, const char *text);
/* A fresh temporary directory under /tmp (mkdtemp), removed with its contents when the test
 * exits, unless a check failed (then it stays for a look). */
const char *tz_tmpdir(void);
/* The loop's options the loop tests share: one epoch of at most max_steps steps of batch_size x
 * grad_accum, AdamW at lr 1e-3 with weight decay 0.01 and PyTorch's betas and eps, a linear
 * schedule with one warm-up step, clipping at 1, seed 3, no evaluation, logging or checkpoints, with
 * its run folder in save_dir (tz_tmpdir() for a fresh one; rank threads pass theirs, made before
 * they start); a test sets what it is about on top (comms, buckets, intervals, resume). */
rt_train_opts tz_train_opts(int64_t max_steps, int64_t batch_size, int64_t grad_accum, const char *save_dir);

/* n synthetic labelled sentence pairs of 5..18 tokens with ids in [0, vocab - 1) shifted by
 * id_offset (the loop and parallel tests train on them; vocab - 1 is left for padding). */
data_tokenized tz_synthetic_pairs(int n, int vocab, int id_offset);

/* Runs fn(comm of rank r, args + r * arg_size) for r < n on n threads, the ranks of one
 * in-process threads communicator (timeout_s), and waits for all; the comms are freed after.
 * Returns RT_OK, or the first failing rank's status (its message printed). Checks belong on
 * the calling thread, after it returns. */
rt_status tz_run_ranks(int n, double timeout_s, rt_status (*fn)(rt_comm *comm, void *arg), void *args, size_t arg_size);

/* Pipeline stages against the whole model (tests/test_pipe_*.c). A parameter's values or
 * gradient on the host (malloc'd). */
float *tz_fetch_param(rt_backend *be, const rt_params *p, int i, bool grad);
/* Each of a stage's parameters against the whole model's same-named one: their values (grads
 * false), or their gradients bit for bit, except the one named tied (NULL: none), whose
 * copies' gradients the stages sum in another order than one process: within 1e-6 + 1e-5 |want|,
 * and its gradient goes to *tied_grad (malloc'd; NULL when the stage has none). Returns the
 * mismatches, the first described in msg; *compared (may be NULL) gets the stage's own
 * parameters, copies left out. */
int tz_stage_params_differ(rt_backend *be, const rt_params *stage, rt_backend *whole_be, const rt_params *whole,
                           bool grads, const char *tied, float **tied_grad, int *compared, char *msg, size_t msg_size);

/* What the training loop does after a pipeline step: the tied weight's gradient (if this stage
 * holds one) summed over the stages holding it (rt_pipe_sum_tied). Collective over pp. */
rt_status tz_stage_sum_tied(rt_comm *pp, rt_params *p);

/* Prints "name: N passed, M failed" (checks made) and returns the exit code, 0 or 1: 1 also
 * when no check ran at all (a test that checked nothing is a failure, and says so). */
int tz_test_result(const char *name);

#endif
