/* Big models' parameter slabs, laid out but never allocated (issue 32, item 5): T5-3B (t5-3b),
 * T5-v1.1-XL, T5-11B and GLM-10B are read from their config.json, then declared and laid out by
 * the code t5_model_init and glm_model_init run (t5_params_layout, glm_params_layout, through
 * rt_params_layout, which rt_params_alloc also calls), at tp 1 to 8. Each slab is past
 * INT32_MAX floats (T5-11B's and GLM-10B's past UINT32_MAX), which a 32-bit count or offset
 * would wrap. Checks:
 *   - the config passes the start-up validation (limits, parameter count, tp divisibility);
 *   - the parameters add up to a count computed here from the architecture, independently of
 *     the models' code (tp shards and vocab padding included), and at tp 1 to HF's
 *     model.num_parameters() for the T5s and to 9,879,633,920 for GLM-10B (the formula worked
 *     by hand: 12 C^2 + 13 C per layer, two 1025-row position tables);
 *   - every offset is 16-float aligned, at or after the previous parameter's end and less than
 *     16 floats past it, every numel is its shape's product, the last parameter ends inside
 *     the slab, the slab is that end rounded up to 16 floats, and its bytes fit size_t;
 *   - ZeRO-3's cut of the slab (rt_zero3_cut, what rt_zero_init runs) at dp 2 and 8: the blocks
 *     tile the parameters in order, each block's dp pieces cover it exactly on the ranks, and
 *     the shard is the sum of the pieces;
 *   - GLM-10B with LoRA (issue 36): the adapters are the trainable floats and the base frozen,
 *     and ZeRO-3 at dp 8 cuts both (each block a trainable and a frozen span).
 * Nothing here allocates a slab: the whole test runs in a few MB. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/glm/glm.h"
#include "models/t5/t5.h"
#include "runtime/comm/rt_launch.h"
#include "runtime/train/rt_zero.h"
#include "tests/testutil.h"

static char dir[64];

static const char *write_config(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tz_write_text(path, text);
    return path;
}

/* The vocab rows one tp rank holds: the table padded to a multiple of 128 x tp rows, split. */
static uint64_t local_vocab(uint64_t vocab, uint64_t tp) {
    const uint64_t m = 128 * tp;
    return (vocab + m - 1) / m * m / tp;
}

/* T5's parameters on one tp rank, from the architecture (HF's T5ForConditionalGeneration): per
 * encoder block q, k, v, o (inner = heads x d_kv, split by heads) and the FFN (wi or wi_0 and
 * wi_1, and wo, split by d_ff) and two RMSNorms; per decoder block also cross-attention and a
 * third norm; block 0 of each stack a relative bias (buckets x heads, split by heads); a final
 * norm per stack; `shared`, and lm_head when not tied (vocab rows, padded and split). */
typedef struct {
    uint64_t d_model, d_ff, d_kv, heads, layers, vocab, buckets;
    bool gated, tied;
} t5_arch;

static uint64_t t5_expected(const t5_arch *a, uint64_t tp) {
    const uint64_t C = a->d_model, inner = a->heads * a->d_kv / tp, ff = a->d_ff / tp;
    const uint64_t ffn = (a->gated ? 3 : 2) * ff * C;
    const uint64_t enc = 4 * inner * C + ffn + 2 * C;
    const uint64_t dec = 8 * inner * C + ffn + 3 * C;
    const uint64_t tables = (a->tied ? 1 : 2) * local_vocab(a->vocab, tp) * C;
    return tables + a->layers * (enc + dec) + 2 * (a->buckets * (a->heads / tp)) + 2 * C;
}

/* GLM's (FlagAI's GLMModel, pre-LN, 4 x hidden MLP): per layer qkv (3 C / tp x C, bias 3 C / tp),
 * dense (C x C / tp, bias C), h_to_4h (4 C / tp x C, bias 4 C / tp), 4h_to_h (C x 4 C / tp, bias
 * C), two LayerNorms (2 C each); word_embeddings (vocab padded and split); position and block
 * position tables (max_sequence_length + 1 rows each, replicated); the final LayerNorm. */
typedef struct {
    uint64_t hidden, layers, vocab, max_seq;
} glm_arch;

static uint64_t glm_expected(const glm_arch *a, uint64_t tp) {
    const uint64_t C = a->hidden;
    const uint64_t layer =
        (3 * C / tp) * C + 3 * C / tp + C * (C / tp) + C + (4 * C / tp) * C + 4 * C / tp + C * (4 * C / tp) + C + 4 * C;
    return local_vocab(a->vocab, tp) * C + 2 * (a->max_seq + 1) * C + a->layers * layer + 2 * C;
}

/* The layout's invariants; returns the sum of the parameters' sizes. */
static uint64_t check_layout(const char *what, const rt_params *p) {
    uint64_t sum = 0;
    size_t prev_end = 0;
    TZ_EXPECT(p->n > 0 && p->param == NULL && p->grad == NULL, "%s: %d parameters, slab %p (expected none)", what, p->n,
              (void *)p->param);
    for (int i = 0; i < p->n; i++) {
        const rt_param_spec *s = &p->specs[i];
        uint64_t prod = 1;
        for (int d = 0; d < s->ndim; d++) prod *= (uint64_t)s->shape[d];
        TZ_EXPECT(prod == s->numel, "%s: %s has %zu floats, its shape %llu", what, s->name, s->numel,
                  (unsigned long long)prod);
        TZ_EXPECT(s->offset % 16 == 0, "%s: %s at %zu, not 16-float aligned", what, s->name, s->offset);
        TZ_EXPECT(s->offset >= prev_end && s->offset - prev_end < 16, "%s: %s at %zu, the previous one ends at %zu",
                  what, s->name, s->offset, prev_end);
        TZ_EXPECT(!__builtin_add_overflow(s->offset, s->numel, &prev_end), "%s: %s's end overflows", what, s->name);
        sum += s->numel;
    }
    const size_t aligned = (prev_end + 15) & ~(size_t)15;
    TZ_EXPECT(p->numel == aligned, "%s: slab of %zu floats, the last parameter ends at %zu", what, p->numel, prev_end);
    size_t bytes = 0;
    TZ_EXPECT(!__builtin_mul_overflow(p->numel, sizeof(float), &bytes), "%s: %zu floats overflow in bytes", what,
              p->numel);
    return sum;
}

/* One span of ZeRO-3's blocks (rt_zero_block's train or frozen) against the layout: its dp
 * pieces cover it exactly on the ranks, each at most a piece long. */
static void check_span(const char *what, rt_zero *z, rt_comm **comms, int dp, int k, const rt_zero_span *s) {
    TZ_EXPECT(s->piece * (size_t)dp >= s->n && (s->n == 0 || (s->piece - 1) * (size_t)dp < s->n),
              "%s dp %d: block %d's span of %zu floats in pieces of %zu", what, dp, k, s->n, s->piece);
    size_t covered = s->off;
    for (int r = 0; r < dp; r++) {
        z->dp = comms[r];
        size_t lo = 0, hi = 0;
        rt_zero3_piece(z, s, &lo, &hi);
        TZ_EXPECT(lo == covered && hi >= lo && hi - lo <= s->piece,
                  "%s dp %d: block %d rank %d holds [%zu, %zu), expected from %zu", what, dp, k, r, lo, hi, covered);
        covered = hi;
    }
    z->dp = comms[0];
    TZ_EXPECT(covered == s->off + s->n, "%s dp %d: block %d's pieces end at %zu, its span at %zu", what, dp, k, covered,
              s->off + s->n);
}

/* ZeRO-3's blocks over the slab at dp ranks (rt_zero3_cut, as rt_zero_init runs it), checked
 * against the layout on every rank: the blocks take the parameters in declaration order; a
 * block's trainable span tiles its trainable parameters, in slab order from the previous
 * block's, and its frozen span (LoRA's base) its frozen ones, each span's pieces cover it, and
 * the shards are the sums of the pieces. Returns this rank's trainable and frozen shard floats. */
static void check_zero3(const char *what, rt_params *p, int dp, size_t *shard, size_t *frozen_shard) {
    rt_comm *comms[8];
    TZ_EXPECT_OK(rt_comm_threads_create(dp, 10.0, comms));
    rt_zero z = {.p = p, .dp = comms[0]};
    rt_zero3_cut(&z);
    size_t next[2] = {0, p->train_numel}, at[2] = {0, 0}; /* trainable, frozen */
    int first = 0;
    for (int k = 0; k < z.n_blocks; k++) {
        const rt_zero_block *b = &z.blocks[k];
        TZ_EXPECT(b->first == first, "%s dp %d: block %d starts at parameter %d, expected %d", what, dp, k, b->first,
                  first);
        int last = b->first;
        while (last + 1 < p->n && z.block_of[last + 1] == k) last++;
        for (int f = 0; f < 2; f++) {
            const rt_zero_span *s = f ? &b->frozen : &b->train;
            size_t end = s->off; /* the block's parameters of this kind, in order, from the span's start */
            for (int i = b->first; i <= last; i++) {
                if (p->specs[i].frozen != (f == 1)) continue;
                TZ_EXPECT(p->specs[i].offset >= end && p->specs[i].offset - end < 16,
                          "%s dp %d: %s at %zu, block %d's %s span reaches %zu", what, dp, p->specs[i].name,
                          p->specs[i].offset, k, f ? "frozen" : "trainable", end);
                end = p->specs[i].offset + p->specs[i].numel;
            }
            /* an empty span gathers nothing; the trainable ones' starts still never decrease,
             * which the backward's flushes rely on (rt_zero_grads_ready) */
            const bool placed = s->n == 0 ? f == 1 || s->off >= next[f] : s->off >= next[f] && s->off - next[f] < 16;
            TZ_EXPECT(end == s->off + s->n && placed,
                      "%s dp %d: block %d's %s span [%zu, +%zu), its parameters end at %zu, the previous span at %zu",
                      what, dp, k, f ? "frozen" : "trainable", s->off, s->n, end, next[f]);
            TZ_EXPECT(s->at == at[f], "%s dp %d: block %d's piece at %zu of the shard, expected %zu", what, dp, k,
                      s->at, at[f]);
            check_span(what, &z, comms, dp, k, s);
            if (s->n) next[f] = s->off + s->n;
            at[f] += s->piece;
        }
        first = last + 1;
    }
    TZ_EXPECT(first == p->n, "%s dp %d: the blocks hold %d of %d parameters", what, dp, first, p->n);
    TZ_EXPECT(z.shard == at[0] && z.frozen_shard == at[1] && z.shard * (size_t)dp >= next[0] &&
                  z.frozen_shard * (size_t)dp >= next[1] - p->train_numel,
              "%s dp %d: shards of %zu and %zu floats, the pieces %zu and %zu, the spans end at %zu and %zu", what, dp,
              z.shard, z.frozen_shard, at[0], at[1], next[0], next[1]);
    printf("%s dp %d: %d ZeRO-3 blocks, %zu trainable and %zu frozen floats per rank, the largest gathered block %zu\n",
           what, dp, z.n_blocks, z.shard, z.frozen_shard, z.max_gathered);
    if (shard) *shard = z.shard;
    if (frozen_shard) *frozen_shard = z.frozen_shard;
    free(z.blocks);
    free(z.block_of);
    for (int r = 0; r < dp; r++) rt_comm_free(comms[r]);
}

typedef struct {
    const char *name, *json;
    t5_arch arch;
    uint64_t hf_count; /* HF's model.num_parameters() */
    int max_tp;
} t5_case;

/* The hub's config.json for each (the fields that size the model; the rest at HF's defaults). */
/* clang-format off */
static const t5_case t5_cases[] = {
    {"t5-3b",
     "{\"model_type\": \"t5\", \"architectures\": [\"T5ForConditionalGeneration\"], \"d_ff\": 16384, "
     "\"d_kv\": 128, \"d_model\": 1024, \"decoder_start_token_id\": 0, \"dropout_rate\": 0.1, \"eos_token_id\": 1, "
     "\"initializer_factor\": 1.0, \"is_encoder_decoder\": true, \"layer_norm_epsilon\": 1e-06, \"n_positions\": 512, "
     "\"num_heads\": 32, \"num_layers\": 24, \"output_past\": true, \"pad_token_id\": 0, "
     "\"relative_attention_num_buckets\": 32, \"vocab_size\": 32128}",
     {1024, 16384, 128, 32, 24, 32128, 32, false, true}, 2851598336ull, 8},
    {"t5-v1_1-xl",
     "{\"model_type\": \"t5\", \"architectures\": [\"T5ForConditionalGeneration\"], \"d_ff\": 5120, \"d_kv\": 64, "
     "\"d_model\": 2048, \"decoder_start_token_id\": 0, \"dropout_rate\": 0.1, \"eos_token_id\": 1, "
     "\"feed_forward_proj\": \"gated-gelu\", \"initializer_factor\": 1.0, \"is_encoder_decoder\": true, "
     "\"layer_norm_epsilon\": 1e-06, \"num_decoder_layers\": 24, \"num_heads\": 32, \"num_layers\": 24, "
     "\"output_past\": true, \"pad_token_id\": 0, \"relative_attention_num_buckets\": 32, "
     "\"tie_word_embeddings\": false, \"vocab_size\": 32128}",
     {2048, 5120, 64, 32, 24, 32128, 32, true, false}, 2849757184ull, 8},
    {"t5-11b",
     "{\"model_type\": \"t5\", \"architectures\": [\"T5ForConditionalGeneration\"], \"d_ff\": 65536, "
     "\"d_kv\": 128, \"d_model\": 1024, \"decoder_start_token_id\": 0, \"dropout_rate\": 0.1, \"eos_token_id\": 1, "
     "\"initializer_factor\": 1.0, \"is_encoder_decoder\": true, \"layer_norm_epsilon\": 1e-06, \"n_positions\": 512, "
     "\"num_heads\": 128, \"num_layers\": 24, \"output_past\": true, \"pad_token_id\": 0, "
     "\"relative_attention_num_buckets\": 32, \"vocab_size\": 32128}",
     {1024, 65536, 128, 128, 24, 32128, 32, false, true}, 11307321344ull, 8},
};
/* clang-format on */

static void test_t5(rt_backend *be) {
    for (size_t i = 0; i < sizeof t5_cases / sizeof *t5_cases; i++) {
        const t5_case *tc = &t5_cases[i];
        char name[64];
        snprintf(name, sizeof name, "%s.json", tc->name);
        t5_config c;
        TZ_EXPECT_OK(t5_config_load(write_config(name, tc->json), &c));
        TZ_EXPECT(t5_expected(&tc->arch, 1) == tc->hf_count, "%s: the formula gives %llu, HF %llu", tc->name,
                  (unsigned long long)t5_expected(&tc->arch, 1), (unsigned long long)tc->hf_count);
        for (int tp = 1; tp <= tc->max_tp; tp *= 2) {
            rt_comm *comms[8];
            TZ_EXPECT_OK(rt_comm_threads_create(tp, 10.0, comms));
            for (int r = 0; r<tp; r += tp> 1 ? tp - 1 : 1) { /* the first rank and the last */
                char what[96];
                snprintf(what, sizeof what, "%s tp %d rank %d", tc->name, tp, r);
                rt_params p;
                rt_status st = t5_params_layout(&c, be, comms[r], &p);
                TZ_EXPECT_OK(st);
                if (st != RT_OK) continue;
                const uint64_t sum = check_layout(what, &p), want = t5_expected(&tc->arch, (uint64_t)tp);
                TZ_EXPECT(sum == want, "%s: the layout holds %llu parameters, the architecture %llu", what,
                          (unsigned long long)sum, (unsigned long long)want);
                if (tp == 1) {
                    /* a 32-bit count or offset wraps here */
                    const rt_param_spec *last = &p.specs[p.n - 1];
                    TZ_EXPECT(p.numel > (size_t)INT32_MAX && last->offset > (size_t)INT32_MAX,
                              "%s: slab %zu, last offset %zu: not past INT32_MAX", what, p.numel, last->offset);
                    TZ_EXPECT(sum == tc->hf_count, "%s: %llu parameters, HF's count %llu", what,
                              (unsigned long long)sum, (unsigned long long)tc->hf_count);
                    printf("%s: %d parameters, %llu floats (HF: %llu), slab %zu floats = %.2f GiB, the last (%s) at "
                           "%zu\n",
                           what, p.n, (unsigned long long)sum, (unsigned long long)tc->hf_count, p.numel,
                           (double)p.numel * 4 / (1u << 30), last->name, last->offset);
                    check_zero3(tc->name, &p, 2, NULL, NULL);
                    check_zero3(tc->name, &p, 8, NULL, NULL);
                }
                rt_params_free(&p);
            }
            for (int r = 0; r < tp; r++) rt_comm_free(comms[r]);
        }
    }
    /* a tp that does not divide the heads is refused by the same validation, before any layout */
    t5_config c;
    TZ_EXPECT_OK(t5_config_load(write_config("t5-3b.json", t5_cases[0].json), &c));
    rt_comm *comms[8];
    TZ_EXPECT_OK(rt_comm_threads_create(3, 10.0, comms));
    rt_params p;
    rt_status st = t5_params_layout(&c, be, comms[0], &p);
    TZ_EXPECT(st == RT_ERR_CONFIG && strstr(rt_error_message(), "--tp 3") && p.n == 0 && p.specs == NULL,
              "t5-3b at tp 3: %s: %s", rt_status_name(st), rt_error_message());
    for (int r = 0; r < 3; r++) rt_comm_free(comms[r]);
}

/* GLM-10B as FlagAI ships it for Chinese (GLM-10b-ch: ChineseSPTokenizer, vocab 50048) and THUDM's
 * config_tasks/model_blocklm_10B.sh sizes it: 48 layers, hidden 4096, 64 heads, 1024 positions. */
static const char glm_10b_json[] =
    "{\"num_layers\": 48, \"vocab_size\": 50048, \"hidden_size\": 4096, \"num_attention_heads\": 64, "
    "\"embedding_dropout_prob\": 0.1, \"attention_dropout_prob\": 0.1, \"output_dropout_prob\": 0.1, "
    "\"max_sequence_length\": 1024, \"max_memory_length\": 0, \"checkpoint_activations\": false, "
    "\"checkpoint_num_layers\": 1, \"parallel_output\": true, \"relative_encoding\": false, "
    "\"block_position_encoding\": true, \"output_predict\": true, \"spell_length\": null, \"spell_func\": \"lstm\", "
    "\"attention_scale\": 1.0}";

static void test_glm(rt_backend *be) {
    const char *json = glm_10b_json;
    const glm_arch arch = {4096, 48, 50048, 1024};
    /* 50048 x 4096 + 2 x 1025 x 4096 + 48 x (12 x 4096^2 + 13 x 4096) + 2 x 4096 */
    const uint64_t count = 9879633920ull;
    glm_config c;
    TZ_EXPECT_OK(glm_config_load(write_config("glm-10b.json", json), &c));
    TZ_EXPECT(glm_expected(&arch, 1) == count, "glm-10b: the formula gives %llu, expected %llu",
              (unsigned long long)glm_expected(&arch, 1), (unsigned long long)count);
    for (int tp = 1; tp <= 8; tp *= 2) {
        rt_comm *comms[8];
        TZ_EXPECT_OK(rt_comm_threads_create(tp, 10.0, comms));
        for (int r = 0; r<tp; r += tp> 1 ? tp - 1 : 1) {
            char what[96];
            snprintf(what, sizeof what, "glm-10b tp %d rank %d", tp, r);
            rt_params p;
            rt_status st = glm_params_layout(&c, be, comms[r], &p);
            TZ_EXPECT_OK(st);
            if (st != RT_OK) continue;
            const uint64_t sum = check_layout(what, &p), want = glm_expected(&arch, (uint64_t)tp);
            TZ_EXPECT(sum == want, "%s: the layout holds %llu parameters, the architecture %llu", what,
                      (unsigned long long)sum, (unsigned long long)want);
            if (tp == 1) {
                const rt_param_spec *last = &p.specs[p.n - 1];
                TZ_EXPECT(p.numel > (size_t)UINT32_MAX && last->offset > (size_t)UINT32_MAX,
                          "%s: slab %zu, last offset %zu: not past UINT32_MAX", what, p.numel, last->offset);
                printf("%s: %d parameters, %llu floats, slab %zu floats = %.2f GiB, the last (%s) at %zu\n", what, p.n,
                       (unsigned long long)sum, p.numel, (double)p.numel * 4 / (1u << 30), last->name, last->offset);
                check_zero3("glm-10b", &p, 2, NULL, NULL);
                check_zero3("glm-10b", &p, 8, NULL, NULL);
            }
            rt_params_free(&p);
        }
        for (int r = 0; r < tp; r++) rt_comm_free(comms[r]);
    }
}

/* GLM-10B with LoRA r 8 on query_key_value (PEFT's default for it) at tp 1: the adapters, A
 * (8 x C) and B (3 C x 8) per layer, are the trainable floats, laid out first, and the base is
 * frozen after them; ZeRO-3 over 8 ranks cuts both, so a rank holds an eighth of the base's
 * weights and of the adapters' weights, gradients and moments (rt_zero.h). */
static void test_glm_lora(rt_backend *be) {
    glm_config c;
    TZ_EXPECT_OK(glm_config_load(write_config("glm-10b.json", glm_10b_json), &c));
    char *targets[] = {"query_key_value"};
    const ckpt_peft_config lora = {.r = 8, .alpha = 16, .n_targets = 1, .targets = targets};
    c.lora = &lora;
    rt_params p;
    rt_status st = glm_params_layout(&c, be, rt_comm_self(), &p);
    TZ_EXPECT_OK(st);
    if (st != RT_OK) return;
    const uint64_t C = 4096, adapters = 48 * (8 * C + 3 * C * 8), base = 9879633920ull;
    uint64_t train = 0, frozen = 0;
    for (int i = 0; i < p.n; i++) {
        if (p.specs[i].frozen)
            frozen += p.specs[i].numel;
        else
            train += p.specs[i].numel;
    }
    TZ_EXPECT(train == adapters && frozen == base && p.train_numel >= train && p.train_numel < train + 16 * 96,
              "glm-10b LoRA: %llu trainable floats (expected %llu) in %zu, %llu frozen (expected %llu)",
              (unsigned long long)train, (unsigned long long)adapters, p.train_numel, (unsigned long long)frozen,
              (unsigned long long)base);
    size_t shard = 0, frozen_shard = 0;
    check_zero3("glm-10b LoRA", &p, 8, &shard, &frozen_shard);
    TZ_EXPECT(shard * 8 >= adapters && shard * 8 < adapters + 8 * 16 * 96 && frozen_shard * 8 >= base &&
                  frozen_shard * 8 < base + 8 * 16 * (uint64_t)p.n,
              "glm-10b LoRA dp 8: %zu trainable and %zu frozen floats per rank", shard, frozen_shard);
    rt_params_free(&p);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s", tz_tmpdir());
    rt_backend *be = NULL;
    TZ_EXPECT_OK(rt_backend_init("cpu", 1, &be));
    if (be) {
        test_t5(be);
        test_glm(be);
        test_glm_lora(be);
        rt_backend_free(be);
    }
    return tz_test_result("test_big_layouts");
}
