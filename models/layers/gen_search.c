/* Greedy and beam search over an incremental model (see gen_search.h). */
#include "models/layers/gen_search.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* One finished hypothesis of a source row. */
typedef struct {
    float score; /* sum of log-probs / len^length_penalty */
    int len;     /* generated tokens, eos included */
    int32_t *tokens;
} gen_hyp;

/* The beam search of one source row. */
typedef struct {
    gen_hyp *fin; /* (num_beams) best first */
    int n_fin;
    bool improvable; /* HF's is_early_stop_heuristic_unsatisfied */
    bool done;
} gen_beam_row;

/* A candidate continuation within its source row. */
typedef struct {
    float score;
    int beam, token;
} gen_cand;

struct gen_search {
    int max_B, max_beams, max_new, max_rows, V;
    float *h_logits;   /* (max_rows, V) */
    float *h_logprobs; /* (V) */
    int32_t *h_ids, *h_src;
    int32_t *h_parent, *h_tokens; /* (max_rows) after a step: each new row's old row and its token */
    float *h_new_scores;          /* (max_rows) and its running score (beam) */
    int32_t *h_keep;              /* (max_B) the source rows that go on */
    float *h_sums;                /* (max_B) greedy: sum of the chosen tokens' log-probs */
    int32_t *h_seq[2];            /* (max_rows, max_new + 1) each row's inputs; swapped on reorder */
    float *h_score[2];            /* (max_rows) running scores */
    int32_t *h_active;            /* (max_B) original index of each source row still searching */
    gen_beam_row *rows;           /* (max_B) */
    int32_t *h_hyp_tokens;        /* (max_B, max_beams, max_new) */
    gen_cand *cands;              /* (2 * max_beams) */
};

rt_status gen_search_init(int max_B, int max_beams, int max_new, int vocab, gen_search **out) {
    *out = NULL;
    if (max_B < 1 || max_beams < 1 || max_new < 1 || vocab < 1)
        return rt_errorf(RT_ERR_CONFIG, "generation: %d rows, %d beams, %d new tokens, vocab %d (each must be >= 1)",
                         max_B, max_beams, max_new, vocab);
    if (max_beams > 1 && vocab < 2 * max_beams)
        return rt_errorf(RT_ERR_CONFIG,
                         "generation: beam search keeps 2 * num_beams = %d candidates, more than the %d "
                         "tokens of the vocab",
                         2 * max_beams, vocab);
    gen_search *s = rt_xcalloc(1, sizeof *s);
    s->max_B = max_B;
    s->max_beams = max_beams;
    s->max_new = max_new;
    s->max_rows = max_B * max_beams;
    s->V = vocab;
    const size_t R = (size_t)s->max_rows, T = (size_t)max_new, V = (size_t)vocab;
    s->h_logits = rt_xmalloc(R * V * sizeof(float));
    s->h_logprobs = rt_xmalloc(V * sizeof(float));
    s->h_ids = rt_xmalloc(R * sizeof(int32_t));
    s->h_src = rt_xmalloc(R * sizeof(int32_t));
    s->h_parent = rt_xmalloc(R * sizeof(int32_t));
    s->h_tokens = rt_xmalloc(R * sizeof(int32_t));
    s->h_new_scores = rt_xmalloc(R * sizeof(float));
    s->h_keep = rt_xmalloc((size_t)max_B * sizeof(int32_t));
    s->h_sums = rt_xmalloc((size_t)max_B * sizeof(float));
    for (int b = 0; b < 2; b++) {
        s->h_seq[b] = rt_xmalloc(R * (T + 1) * sizeof(int32_t));
        s->h_score[b] = rt_xmalloc(R * sizeof(float));
    }
    s->h_active = rt_xmalloc((size_t)max_B * sizeof(int32_t));
    s->rows = rt_xcalloc((size_t)max_B, sizeof *s->rows);
    s->h_hyp_tokens = rt_xmalloc(R * T * sizeof(int32_t));
    for (int b = 0; b < max_B; b++) {
        s->rows[b].fin = rt_xcalloc((size_t)max_beams, sizeof(gen_hyp));
        for (int k = 0; k < max_beams; k++)
            s->rows[b].fin[k].tokens = s->h_hyp_tokens + ((size_t)b * max_beams + k) * T;
    }
    s->cands = rt_xmalloc(2 * (size_t)max_beams * sizeof(gen_cand));
    *out = s;
    return RT_OK;
}

void gen_search_free(gen_search *s) {
    if (!s) return;
    free(s->h_logits);
    free(s->h_logprobs);
    free(s->h_ids);
    free(s->h_src);
    free(s->h_parent);
    free(s->h_tokens);
    free(s->h_new_scores);
    free(s->h_keep);
    free(s->h_sums);
    for (int b = 0; b < 2; b++) {
        free(s->h_seq[b]);
        free(s->h_score[b]);
    }
    free(s->h_active);
    if (s->rows)
        for (int b = 0; b < s->max_B; b++) free(s->rows[b].fin);
    free(s->rows);
    free(s->h_hyp_tokens);
    free(s->cands);
    free(s);
}

/* log_softmax of a row as torch computes it (x - max - log(sum exp(x - max))), the sum in
 * double, so the result is within an ulp or so of torch's float32 one. */
static void gen_log_softmax(const float *x, int V, float *out) {
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp((double)x[v] - (double)mx);
    const double lse = (double)mx + log(sum);
    for (int v = 0; v < V; v++) out[v] = (float)((double)x[v] - lse);
}

/* One entry of gen_log_softmax. */
static float gen_log_prob(const float *x, int V, int y) {
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp((double)x[v] - (double)mx);
    return (float)((double)x[y] - ((double)mx + log(sum)));
}

static int gen_argmax(const float *x, int V) {
    int best = 0;
    for (int v = 1; v < V; v++)
        if (x[v] > x[best]) best = v; /* the first of equal maxima, as torch.argmax */
    return best;
}

static void gen_observe(gen_search *s, gen_observer obs, void *user, int t, int R, int beams) {
    if (!obs) return;
    for (int r = 0; r < R; r++) s->h_src[r] = s->h_active[r / beams];
    gen_step info = {.step = t,
                     .n_rows = R,
                     .src_row = s->h_src,
                     .prefix = s->h_seq[0],
                     .prefix_stride = s->max_new + 1,
                     .logits = s->h_logits};
    obs(user, &info);
}

/* Runs step t of the model on the rows' newest inputs. */
static rt_status gen_forward(gen_search *s, const gen_model *m, int t, int n_src, int beams) {
    const size_t stride = (size_t)s->max_new + 1;
    const int R = n_src * beams;
    for (int r = 0; r < R; r++) s->h_ids[r] = s->h_seq[0][(size_t)r * stride + (size_t)t];
    return m->forward(m->ctx, t, n_src, beams, s->h_ids, s->h_logits);
}

/* Drops the rows whose parent is not kept and renumbers: seq and scores follow parent[]. */
static void gen_move_rows(gen_search *s, int t, int R_new, const int32_t *parent, const int32_t *tokens,
                          const float *scores) {
    const size_t stride = (size_t)s->max_new + 1;
    int32_t *src = s->h_seq[0], *dst = s->h_seq[1];
    for (int r = 0; r < R_new; r++) {
        memcpy(dst + r * stride, src + (size_t)parent[r] * stride, (size_t)(t + 1) * sizeof(int32_t));
        dst[r * stride + (size_t)t + 1] = tokens[r];
        s->h_score[1][r] = scores ? scores[r] : 0.0f;
    }
    int32_t *q = s->h_seq[0];
    s->h_seq[0] = s->h_seq[1];
    s->h_seq[1] = q;
    float *f = s->h_score[0];
    s->h_score[0] = s->h_score[1];
    s->h_score[1] = f;
}

static rt_status gen_greedy(gen_search *s, const gen_model *m, int B, const gen_options *o, gen_observer obs,
                            void *user, int32_t *out_ids, int *out_len, float *out_scores) {
    rt_status st = RT_OK;
    const int V = s->V, T = o->max_new_tokens;
    int R = B;
    for (int b = 0; b < B; b++) s->h_sums[b] = 0.0f;
    for (int t = 0; t < T && R > 0; t++) {
        RT_TRY(gen_forward(s, m, t, R, 1));
        gen_observe(s, obs, user, t, R, 1);
        int kept = 0;
        for (int r = 0; r < R; r++) {
            const int b = s->h_active[r];
            const float *x = s->h_logits + (size_t)r * V;
            const int y = gen_argmax(x, V);
            if (out_scores) s->h_sums[b] += gen_log_prob(x, V, y);
            out_ids[(size_t)b * T + (size_t)t] = y;
            out_len[b] = t + 1;
            if (y == o->eos_token_id) continue; /* the row is finished and leaves */
            s->h_parent[kept] = r;
            s->h_tokens[kept] = y;
            s->h_active[kept] = b; /* kept <= r: an entry already read */
            kept++;
        }
        if (t + 1 == T || kept == 0) break;
        if (kept < R) {
            m->reorder(m->ctx, t, R, kept, s->h_parent);
            m->squeeze(m->ctx, s->h_parent, kept);
        }
        gen_move_rows(s, t, kept, s->h_parent, s->h_tokens, NULL);
        R = kept;
    }
    if (out_scores)
        for (int b = 0; b < B; b++) out_scores[b] = s->h_sums[b];
fail:
    return st;
}

/* The row's best 2*num_beams continuations over its live beams, best first (ties: the lower
 * beam, then the lower token). */
static int gen_topk(gen_search *s, int r0, int beams, int K) {
    const int V = s->V;
    gen_cand *c = s->cands;
    int n = 0;
    for (int k = 0; k < beams; k++) {
        const float base = s->h_score[0][r0 + k];
        gen_log_softmax(s->h_logits + (size_t)(r0 + k) * V, V, s->h_logprobs);
        for (int v = 0; v < V; v++) {
            const float sc = s->h_logprobs[v] + base;
            if (n == K && !(sc > c[K - 1].score)) continue;
            int i = n < K ? n++ : K - 1;
            while (i > 0 && sc > c[i - 1].score) {
                c[i] = c[i - 1];
                i--;
            }
            c[i] = (gen_cand){.score = sc, .beam = k, .token = v};
        }
    }
    return n;
}

/* Offers a finished hypothesis to the row's num_beams best (kept best first; an equal score
 * stays behind the ones already there). */
static void gen_offer(gen_beam_row *row, int num_beams, float score, const int32_t *prefix, int len, int32_t last) {
    if (row->n_fin == num_beams && !(score > row->fin[num_beams - 1].score)) return;
    int i = row->n_fin < num_beams ? row->n_fin++ : num_beams - 1;
    int32_t *spare = row->fin[i].tokens; /* the slot that falls off (or the empty one) */
    while (i > 0 && score > row->fin[i - 1].score) {
        row->fin[i] = row->fin[i - 1];
        i--;
    }
    row->fin[i] = (gen_hyp){.score = score, .len = len, .tokens = spare};
    memcpy(spare, prefix, (size_t)(len - 1) * sizeof(int32_t));
    spare[len - 1] = last;
}

static rt_status gen_beam(gen_search *s, const gen_model *m, int B, const gen_options *o, gen_observer obs, void *user,
                          int32_t *out_ids, int *out_len, float *out_scores) {
    rt_status st = RT_OK;
    const int T = o->max_new_tokens, NB = o->num_beams, K = 2 * NB;
    const size_t stride = (size_t)s->max_new + 1;
    const double lp = o->length_penalty;
    int n_src = B, beams = 1; /* step 0: only beam 0 is live (HF gives the others -1e9) */
    int32_t *tokens = s->h_tokens, *keep = s->h_keep;
    float *scores = s->h_new_scores;
    for (int b = 0; b < B; b++) {
        s->rows[b].n_fin = 0;
        s->rows[b].improvable = true;
        s->rows[b].done = false;
    }
    for (int t = 0; t < T; t++) {
        const int R = n_src * beams;
        RT_TRY(gen_forward(s, m, t, n_src, beams));
        gen_observe(s, obs, user, t, R, beams);
        const bool last = t + 1 == T; /* every continuation reaches max_new_tokens */
        /* HF divides float32 scores by Python floats (int ** float): the divisor rounds to float */
        const float len_div = (float)pow((double)(t + 1), lp);
        const double best_len = o->early_stopping == GEN_EARLY_STOP_NEVER && lp > 0 ? (double)T : (double)(t + 1);
        const float best_div = (float)pow(best_len, lp);
        int R_new = 0, kept_src = 0;
        for (int i = 0; i < n_src; i++) {
            gen_beam_row *row = &s->rows[s->h_active[i]];
            const int r0 = i * beams;
            const int n = gen_topk(s, r0, beams, K);
            RT_CHECK(n == K, "beam search: %d candidates of %d", n, K);
            /* finished among the top num_beams: offered unless the row takes no more */
            const bool open = row->improvable && !(o->early_stopping == GEN_EARLY_STOP_TRUE && row->n_fin == NB);
            for (int c = 0; c < NB && open; c++) {
                const gen_cand *cd = &s->cands[c];
                if (cd->token == o->eos_token_id || last)
                    gen_offer(row, NB, cd->score / len_div, s->h_seq[0] + (size_t)(r0 + cd->beam) * stride + 1, t + 1,
                              cd->token);
            }
            if (last) continue;
            /* the best num_beams unfinished ones run on */
            int running = 0;
            float best_running = 0;
            for (int c = 0; c < K && running < NB; c++) {
                const gen_cand *cd = &s->cands[c];
                if (cd->token == o->eos_token_id) continue;
                if (running == 0) best_running = cd->score;
                s->h_parent[R_new + running] = r0 + cd->beam;
                tokens[R_new + running] = cd->token;
                scores[R_new + running] = cd->score;
                running++;
            }
            RT_CHECK(running == NB, "beam search: %d of %d beams left to run", running, NB);
            /* HF's _check_early_stop_heuristic: can the best running beam still beat the worst
             * of num_beams finished ones? */
            if (row->n_fin == NB && !(best_running / best_div > row->fin[NB - 1].score)) row->improvable = false;
            row->done = !row->improvable || (o->early_stopping == GEN_EARLY_STOP_TRUE && row->n_fin == NB);
            if (row->done) continue; /* its rows leave the batch */
            keep[kept_src] = i;
            s->h_active[kept_src] = s->h_active[i]; /* kept_src <= i */
            kept_src++;
            R_new += NB;
        }
        if (last || kept_src == 0) break;
        bool same = R_new == R;
        for (int r = 0; r < R_new && same; r++) same = s->h_parent[r] == r;
        if (!same) m->reorder(m->ctx, t, R, R_new, s->h_parent);
        m->squeeze(m->ctx, keep, kept_src);
        gen_move_rows(s, t, R_new, s->h_parent, tokens, scores);
        n_src = kept_src;
        beams = NB;
    }
    for (int b = 0; b < B; b++) {
        const gen_beam_row *row = &s->rows[b];
        RT_CHECK(row->n_fin > 0, "beam search: source row %d finished no hypothesis", b);
        const gen_hyp *h = &row->fin[0];
        memcpy(out_ids + (size_t)b * T, h->tokens, (size_t)h->len * sizeof(int32_t));
        out_len[b] = h->len;
        if (out_scores) out_scores[b] = h->score;
    }
fail:
    return st;
}

rt_status gen_search_run(gen_search *s, const gen_model *m, int B, int32_t start_token, int32_t pad_token,
                         const gen_options *o, gen_observer obs, void *user, int32_t *out_ids, int *out_len,
                         float *out_scores) {
    const int T = o->max_new_tokens;
    if (B < 1 || B > s->max_B || o->num_beams < 1 || o->num_beams > s->max_beams || T < 1 || T > s->max_new)
        return rt_errorf(RT_ERR_CONFIG,
                         "generation: %d rows, num_beams %d and max_new_tokens %d must be in [1, %d], "
                         "[1, %d] and [1, %d]",
                         B, o->num_beams, T, s->max_B, s->max_beams, s->max_new);
    if (o->eos_token_id < 0 || o->eos_token_id >= s->V)
        return rt_errorf(RT_ERR_CONFIG, "generation: eos_token_id %d is outside the vocab [0, %d)", o->eos_token_id,
                         s->V);
    if (!isfinite(o->length_penalty))
        return rt_errorf(RT_ERR_CONFIG, "generation: length_penalty %g is not finite", o->length_penalty);
    for (size_t i = 0; i < (size_t)B * T; i++) out_ids[i] = pad_token;
    for (int b = 0; b < B; b++) {
        s->h_active[b] = b;
        s->h_seq[0][(size_t)b * (s->max_new + 1)] = start_token;
        s->h_score[0][b] = 0.0f;
    }
    return o->num_beams == 1 ? gen_greedy(s, m, B, o, obs, user, out_ids, out_len, out_scores)
                             : gen_beam(s, m, B, o, obs, user, out_ids, out_len, out_scores);
}
