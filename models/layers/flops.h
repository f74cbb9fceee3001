/* Model FLOPs of training, the count MFU is measured against (PaLM's appendix B): forward plus
 * backward is 3 x the forward, a matmul of (m x k) by (k x n) is 2mkn, attention adds its two
 * T x T products, and recomputation (activation checkpointing) is not counted. */
#ifndef MDL_FLOPS_H
#define MDL_FLOPS_H

/* One transformer layer's training FLOPs over `rows` sequences of `len` tokens: projections of
 * width C into I = heads x head size (q, k, v, out), an MLP of width F (gated: three matrices),
 * self-attention over keys_len keys, plus cross-attention over cross_len keys when > 0. */
static inline double mdl_layer_train_flops(double rows, double len, double C, double I, double F, int gated,
                                           double keys_len, double cross_len) {
    double per_token = 4 * C * I + (gated ? 3 : 2) * C * F; /* weights touched per token */
    double fwd = 2 * per_token * len + 4 * len * keys_len * I;
    if (cross_len > 0) /* q and out per target token, k and v per source token, the two products */
        fwd += 2 * (2 * C * I) * len + 2 * (2 * C * I) * cross_len + 4 * len * cross_len * I;
    return 3 * rows * fwd;
}

/* An output layer of V columns on n rows (a tied LM head). */
static inline double mdl_head_train_flops(double n, double C, double V) { return 3 * 2 * n * C * V; }

#endif
