/* GPT-2 text generation with a key/value cache (see gpt2.h). The prompt runs through the model
 * once and each block's keys and values of it fill the block's cache (rows 0 .. n-1); then each
 * step runs the newest token alone through the blocks against the caches (row n + t). The next
 * token is chosen from the newest position's logits as HF's generate chooses it: the first argmax
 * (temperature 0), or a draw after HF's logits warpers in HF's order (temperature, top-k, top-p)
 * from the softmax, with the counter RNG (draw t of stream RT_STREAM_SAMPLE). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt2/gpt2_internal.h"
#include "runtime/base/rt_rng.h"

/* The draws' stream: apart from init, shuffling and dropout. */
#define RT_STREAM_SAMPLE 4

typedef struct {
    float logit;
    int32_t id;
} gpt2_cand;

static int by_logit_desc(const void *a, const void *b) {
    const gpt2_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id; /* ties in id order: the same draw on every run */
}

/* The token after logits (v floats) under o at step t; c has room for v candidates. */
static int32_t gpt2_choose(const float *logits, int v, const gpt2_sample_opts *o, int t, gpt2_cand *c) {
    int best = 0;
    for (int i = 1; i < v; i++)
        if (logits[i] > logits[best]) best = i;
    if (!(o->temperature > 0)) return best; /* greedy: the first argmax, as torch.argmax */
    for (int i = 0; i < v; i++) c[i] = (gpt2_cand){logits[i] / o->temperature, i};
    qsort(c, (size_t)v, sizeof *c, by_logit_desc);
    int keep = v;
    if (o->top_k > 0 && o->top_k < v) { /* HF: below the k-th largest is removed; ties with it stay */
        keep = o->top_k;
        while (keep < v && c[keep].logit == c[o->top_k - 1].logit) keep++;
    }
    /* softmax over the kept ones (the largest first, so max = c[0]) */
    double z = 0;
    for (int i = 0; i < keep; i++) z += exp((double)c[i].logit - c[0].logit);
    if (o->top_p < 1) { /* HF removes a token when the ascending cumulative mass up to it is <= 1 - top_p,
                         * i.e. keeps it while the tokens more likely than it hold less than top_p */
        double mass = 0;
        int n = 0;
        while (n < keep && mass < o->top_p) mass += exp((double)c[n++].logit - c[0].logit) / z;
        keep = n;
        z = 0;
        for (int i = 0; i < keep; i++) z += exp((double)c[i].logit - c[0].logit);
    }
    const double u = (double)rt_rng_uniform(o->seed, RT_STREAM(RT_STREAM_SAMPLE, 0), (uint64_t)t) * z;
    double acc = 0;
    for (int i = 0; i < keep; i++) {
        acc += exp((double)c[i].logit - c[0].logit);
        if (u < acc) return c[i].id;
    }
    return c[keep - 1].id;
}

rt_status gpt2_generate(gpt2_model *m, const int32_t *prompt, int n, const gpt2_sample_opts *o, int32_t *out,
                        int *n_out, float *step_logits) {
    rt_status st = RT_OK;
    rt_backend *be = m->be;
    const int L = m->cfg.n_layer, Il = m->blocks.I_local, C = m->C, V = m->cfg.vocab_size, HS = m->blocks.HS;
    const int Tmax = n + o->max_new_tokens;
    void *block = NULL;
    float **k = NULL, **v = NULL, *logits = NULL, *h_mask = NULL;
    gpt2_cand *cand = NULL;
    *n_out = 0;
    if (n < 1 || o->max_new_tokens < 1)
        return rt_errorf(RT_ERR_USAGE, "GPT-2 generation: a prompt of %d tokens and %d new tokens (both must be >= 1)",
                         n, o->max_new_tokens);
    if (Tmax > m->max_T)
        return rt_errorf(RT_ERR_USAGE,
                         "GPT-2 generation: %d prompt tokens + %d new ones exceed the %d positions the "
                         "model was sized for (the block size)",
                         n, o->max_new_tokens, m->max_T);
    const size_t cache = (size_t)Tmax * Il;
    RT_TRY(
        rt_backend_alloc(be, (2 * (size_t)L * cache + Tmax) * sizeof(float) + 64, "GPT-2 generation caches", &block));
    k = rt_xcalloc((size_t)L, sizeof *k);
    v = rt_xcalloc((size_t)L, sizeof *v);
    float *f = block;
    for (int l = 0; l < L; l++, f += 2 * cache) k[l] = f, v[l] = f + cache;
    float *key_mask = f;
    int32_t *at_idx = (int32_t *)(key_mask + Tmax);
    logits = rt_xmalloc((size_t)V * sizeof(float));
    h_mask = rt_xmalloc((size_t)Tmax * sizeof(float));
    cand = rt_xmalloc((size_t)V * sizeof *cand);

    /* the prompt through the model; its keys and values into rows 0 .. n-1 of each cache */
    mdl_pass pass = {0};
    RT_TRY(gpt2_upload(m, prompt, NULL, 1, n, false));
    RT_TRY(gpt2_forward_body(m, 1, n, &pass));
    for (int l = 0; l < L; l++)
        mdl_stack_kv(&m->blocks, l, mdl_stack_norm1(&m->blocks, l, (size_t)n), (size_t)n, k[l], v[l]);
    const float *last = m->blocks.out + (size_t)(n - 1) * C;
    for (int t = 0;; t++) {
        RT_TRY(mdl_lm_head_logits_rows(&m->head, 1));
        mdl_col_linear_fwd(be, rt_xf(m->head.logits), rt_xf(last), P(m->wte), NULL, 1, C, m->vocab.local);
        RT_TRY(mdl_lm_head_to_host(&m->head, 1, logits));
        if (step_logits) memcpy(step_logits + (size_t)t * V, logits, (size_t)V * sizeof(float));
        const int32_t tok = gpt2_choose(logits, V, o, t, cand);
        out[(*n_out)++] = tok;
        if (tok == o->eos_token_id || t + 1 == o->max_new_tokens) break;
        /* the new token at position n + t: its key and value go to cache row n + t */
        const int32_t posn = n + t;
        for (int j = 0; j < Tmax; j++) h_mask[j] = j <= posn ? 0.0f : GPT2_MASKED;
        rt_to_device(be, m->ids, &tok, sizeof tok);
        rt_to_device(be, m->pos, &posn, sizeof posn);
        rt_to_device(be, at_idx, &posn, sizeof posn);
        rt_to_device(be, key_mask, h_mask, (size_t)Tmax * sizeof(float));
        float *x = m->head.rows;
        RT_TRY(mdl_vocab_embedding_fwd(be, m->tp, x, m->ids, P(m->wte), 1, C, m->vocab.start, m->vocab.local));
        rt_embedding_fwd(be, x, m->pos, P(m->wpe), 1, C, 0, m->cfg.n_positions, true);
        const mdl_decode_caches caches = {.k = k,
                                          .v = v,
                                          .at_idx = at_idx,
                                          .self = {.B = 1,
                                                   .NH = m->blocks.NH_local,
                                                   .Tq = 1,
                                                   .Tk = Tmax,
                                                   .HS = HS,
                                                   .ldq = (size_t)Il,
                                                   .ldk = (size_t)Il,
                                                   .ldv = (size_t)Il,
                                                   .ldo = (size_t)Il,
                                                   .scale = 1.0f / sqrtf((float)HS),
                                                   .key_mask = key_mask,
                                                   .head_offset = m->blocks.head_offset,
                                                   .heads_total = m->cfg.n_head}};
        const mdl_decode_scratch scratch = mdl_stack_decode_scratch(&m->blocks, 1, Tmax);
        RT_TRY(mdl_stack_decode(&m->blocks, 1, x, &caches, &scratch));
        mdl_stack_final_norm(&m->blocks, m->blocks.out, m->blocks.out_mean, m->blocks.out_rstd, x, 1);
        last = m->blocks.out;
    }
fail:
    if (block) rt_free_device(be, block);
    free(k);
    free(v);
    free(logits);
    free(h_mask);
    free(cand);
    return st;
}
