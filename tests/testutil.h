/* Shared test helpers: tolerance checks that report the worst element, and the paths of the
 * fixtures, all inside the repository (TZ_SOURCE_DIR, which ctest passes in with TZ_BIN_DIR).
 * Every check counts a failure; a test returns tz_test_result() so it exits non-zero when
 * anything mismatched. */
#ifndef TZ_TESTUTIL_H
#define TZ_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/data_dataset.h"
#include "runtime/rt_comm.h"
#include "runtime/rt_dtype.h"
#include "runtime/rt_status.h"

extern int tz_test_failures;
extern int tz_test_checks;

/* |a-b| <= atol + rtol*|ref| per element; prints the worst element on failure. Returns 1 ok. */
int tz_check_close(const char *what, const float *got, const float *ref, size_t n, float atol, float rtol);
/* A uniform float in [-1, 1) from a 32-bit LCG state (deterministic test data). */
float tz_uniform(unsigned *state);
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
/* Prints and counts a failure unless cond. */
#define TZ_EXPECT(cond, ...)                                                                   \
    do {                                                                                       \
        tz_test_checks++;                                                                      \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond);                 \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
            tz_test_failures++;                                                                \
        }                                                                                      \
    } while (0)
/* Fails the test (and prints the message) unless st == RT_OK. */
#define TZ_EXPECT_OK(expr)                                                                     \
    do {                                                                                       \
        rt_status tz_st_ = (expr);                                                             \
        TZ_EXPECT(tz_st_ == RT_OK, "%s: %s", rt_status_name(tz_st_), rt_error_message());      \
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

/* n synthetic labelled sentence pairs of 5..18 tokens with ids in [0, vocab - 1) shifted by
 * id_offset (the loop and parallel tests train on them; vocab - 1 is left for padding). */
data_tokenized tz_synthetic_pairs(int n, int vocab, int id_offset);

/* Runs fn(comm of rank r, args + r * arg_size) for r < n on n threads, the ranks of one
 * in-process threads communicator (timeout_s), and waits for all; the comms are freed after.
 * Returns RT_OK, or the first failing rank's status (its message printed). Checks belong on
 * the calling thread, after it returns. */
rt_status tz_run_ranks(int n, double timeout_s, rt_status (*fn)(rt_comm *comm, void *arg), void *args,
                       size_t arg_size);

/* Prints "name: N passed, M failed" (checks made) and returns the exit code, 0 or 1. */
int tz_test_result(const char *name);

#endif
