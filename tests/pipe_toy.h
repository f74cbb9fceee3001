/* A toy pipeline stage for the executor's tests (test_pipe on threads, test_mpi_pipe under
 * mpirun): stage s maps each row x of K values to y = tanh(w_s * x), elementwise; the last
 * stage's loss is the sum of its y. Micro-batch m has 1 + m % 3 rows, so transfer sizes change
 * from one micro-batch to the next. toy_reference runs every stage in one thread, one
 * micro-batch after another (forward through the stages, then backward), which is what a
 * pipeline must reproduce bit for bit: each stage sees the same inputs and accumulates its
 * gradient over micro-batches in the same order. */
#ifndef TESTS_PIPE_TOY_H
#define TESTS_PIPE_TOY_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/train/rt_pipe.h"

#define TOY_MAXM 8

typedef struct {
    int stage, stages, K;
    float *w, *dw;                    /* (K) */
    float *x[TOY_MAXM], *y[TOY_MAXM]; /* each micro-batch's input and output, kept for backward */
    double loss;                      /* the last stage's */
    int forwards, backwards;
} toy_stage;

static inline int toy_rows(int m) { return 1 + m % 3; }

static inline void toy_init(toy_stage *t, int stage, int stages, int K) {
    memset(t, 0, sizeof *t);
    t->stage = stage, t->stages = stages, t->K = K;
    t->w = calloc((size_t)K, sizeof(float));
    t->dw = calloc((size_t)K, sizeof(float));
    for (int j = 0; j < K; j++) t->w[j] = 0.5f + 0.25f * (float)((stage * 7 + j * 3) % 11) / 11.0f;
    for (int m = 0; m < TOY_MAXM; m++) {
        t->x[m] = calloc((size_t)3 * K, sizeof(float));
        t->y[m] = calloc((size_t)3 * K, sizeof(float));
    }
}

static inline void toy_free(toy_stage *t) {
    free(t->w), free(t->dw);
    for (int m = 0; m < TOY_MAXM; m++) free(t->x[m]), free(t->y[m]);
}

static inline size_t toy_bytes(void *ctx, int m) { return (size_t)toy_rows(m) * ((toy_stage *)ctx)->K * sizeof(float); }

static inline rt_status toy_forward(void *ctx, int m, const void *in, void *out) {
    toy_stage *t = ctx;
    const size_t n = (size_t)toy_rows(m) * t->K;
    for (size_t i = 0; i < n; i++)
        t->x[m][i] = in ? ((const float *)in)[i] : sinf(0.01f * (float)(i + 1) * (float)(m + 1));
    for (size_t i = 0; i < n; i++) t->y[m][i] = tanhf(t->w[i % t->K] * t->x[m][i]);
    if (out)
        memcpy(out, t->y[m], n * sizeof(float));
    else
        for (size_t i = 0; i < n; i++) t->loss += t->y[m][i];
    t->forwards++;
    return RT_OK;
}

static inline rt_status toy_backward(void *ctx, int m, const void *dout, void *din) {
    toy_stage *t = ctx;
    const size_t n = (size_t)toy_rows(m) * t->K;
    for (size_t i = 0; i < n; i++) {
        const float dy = dout ? ((const float *)dout)[i] : 1.0f, y = t->y[m][i];
        const float g = dy * (1.0f - y * y);
        t->dw[i % t->K] += g * t->x[m][i];
        if (din) ((float *)din)[i] = g * t->w[i % t->K];
    }
    t->backwards++;
    return RT_OK;
}

static inline rt_pipe_stage toy_pipe_stage(toy_stage *t) {
    return (rt_pipe_stage){
        .ctx = t, .out_bytes = toy_bytes, .in_bytes = toy_bytes, .forward = toy_forward, .backward = toy_backward};
}

/* Every stage in one thread: micro-batch after micro-batch, forward then backward. */
static inline void toy_reference(toy_stage *t, int stages, int micro) {
    float *a = calloc((size_t)3 * t[0].K, sizeof(float)), *b = calloc((size_t)3 * t[0].K, sizeof(float));
    for (int m = 0; m < micro; m++) {
        for (int s = 0; s < stages; s++) {
            memcpy(a, b, (size_t)3 * t[0].K * sizeof(float));
            toy_forward(&t[s], m, s ? a : NULL, s < stages - 1 ? b : NULL);
        }
        for (int s = stages - 1; s >= 0; s--) {
            memcpy(a, b, (size_t)3 * t[0].K * sizeof(float));
            toy_backward(&t[s], m, s < stages - 1 ? a : NULL, s ? b : NULL);
        }
    }
    free(a), free(b);
}

#endif
