/* The CUDA element kernels' packed loads and stores (runtime/backend/cuda/cuda_pack.h), checked
 * on the CPU: the header's host side moves the same packs through memcpy, so here a pack must
 * read and write the values the one-at-a-time path does (rt_dtype.h's conversions, the CPU
 * backend's rounding) at the places it does, for fp32, bf16 and fp16 handles: value j of a pack
 * in its j-th slot, a store rounding each value once (fp16 overflowing to inf), nothing written
 * past the pack, and a walk's whole packs and tail covering n values once each, with no packs
 * where a handle is not 16-byte aligned; a pack's dropout uniforms are the CPU's draws for its
 * values. The GPU's own loads and conversions are not checked here: test_cuda_ops and
 * test_cuda_typed run the kernels against the CPU backend on a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/cuda/cuda_pack.h"
#include "tests/testutil.h"

static const rt_dtype TYPES[] = {RT_F32, RT_BF16, RT_F16};
enum { N_VALUES = 45 }; /* five whole packs and a tail of five */

/* Value k of a handle as the one-at-a-time path reads it. */
static float scalar_load(rt_x x, size_t k) {
    if (x.t == RT_F32) return ((const float *)x.p)[k];
    const uint16_t h = ((const uint16_t *)x.p)[k];
    return x.t == RT_BF16 ? rt_bf16_to_f32(h) : rt_f16_to_f32(h);
}

/* Values whose rounding is not trivial: fractions, negatives, a tie, fp16's overflow and
 * subnormals. */
static float value_at(size_t k) {
    const float special[] = {1.0f + 1.0f / 256.0f, -3.3333333f, 65520.0f, 1e-6f, -0.0f, 1e30f, 0.1f, 2.5f};
    return k % 3 == 0 ? special[(k / 3) % 8] : (float)k * 0.7310585f - 11.0f;
}

/* A buffer of N_VALUES values of type t plus a guard pack, 16-byte aligned; with skew 1 the
 * handle starts one value in, so no pack of it is aligned. */
static rt_x fill(void *buf, rt_dtype t, size_t skew) {
    const size_t size = rt_x_size(t);
    memset(buf, 0x5a, (N_VALUES + 2 * RT_PACK) * size);
    rt_x x = rt_x_of((char *)buf + skew * size, t);
    for (size_t k = 0; k < N_VALUES; k++) {
        const float v = value_at(k);
        if (t == RT_F32)
            ((float *)x.p)[k] = v;
        else
            ((uint16_t *)x.p)[k] = t == RT_BF16 ? rt_f32_to_bf16(v) : rt_f32_to_f16(v);
    }
    return x;
}

static bool same_float(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void test_load(rt_dtype t, void *buf) {
    const rt_x x = fill(buf, t, 0);
    TZ_EXPECT(rt_pack_aligned(x), "%s: an aligned buffer", rt_dtype_name(t));
    for (size_t i = 0; i + RT_PACK <= N_VALUES; i += RT_PACK) {
        const rt_pack p = rt_pack_load(x, i), q = rt_pack_load_n(x, i, RT_PACK);
        for (int j = 0; j < RT_PACK; j++) {
            const float want = scalar_load(x, i + (size_t)j);
            TZ_EXPECT(same_float(p.v[j], want), "%s: pack at %zu, slot %d: %g, one at a time %g", rt_dtype_name(t), i,
                      j, p.v[j], want);
            TZ_EXPECT(same_float(q.v[j], want), "%s: load_n of a whole pack at %zu, slot %d", rt_dtype_name(t), i, j);
        }
    }
    const rt_pack one = rt_pack_load_n(x, N_VALUES - 1, 1);
    TZ_EXPECT(same_float(one.v[0], scalar_load(x, N_VALUES - 1)), "%s: a tail value", rt_dtype_name(t));
    for (int j = 1; j < RT_PACK; j++)
        TZ_EXPECT(one.v[j] == 0.0f, "%s: a tail load leaves slot %d 0", rt_dtype_name(t), j);
}

/* Stores the fp32 values (unrounded) in packs up to the last whole one and the tail one at a
 * time: each must hold what rounding that value once gives, and the guard must be untouched. */
static void test_store(rt_dtype t, void *buf, void *want_buf) {
    const size_t size = rt_x_size(t);
    const rt_x x = fill(buf, t, 0);
    memset(x.p, 0, N_VALUES * size);
    const size_t packs = rt_pack_count(N_VALUES, rt_pack_aligned(x));
    TZ_EXPECT(packs == N_VALUES / RT_PACK, "%s: %zu whole packs of %d values", rt_dtype_name(t), packs, N_VALUES);
    for (size_t k = 0; k < packs; k++) {
        rt_pack p;
        for (int j = 0; j < RT_PACK; j++) p.v[j] = value_at(k * RT_PACK + (size_t)j);
        if (k % 2)
            rt_pack_store(x, k * RT_PACK, &p);
        else
            rt_pack_store_n(x, k * RT_PACK, RT_PACK, &p);
    }
    for (size_t i = packs * RT_PACK; i < N_VALUES; i++) {
        rt_pack p = {{0}};
        p.v[0] = value_at(i);
        rt_pack_store_n(x, i, 1, &p);
    }
    const rt_x want = fill(want_buf, t, 0); /* fill rounds each value once, as the scalar store */
    TZ_EXPECT(memcmp(x.p, want.p, N_VALUES * size) == 0, "%s: stored packs and tail differ from one-at-a-time stores",
              rt_dtype_name(t));
    const unsigned char *guard = (const unsigned char *)x.p + N_VALUES * size;
    bool untouched = true;
    for (size_t b = 0; b < RT_PACK * size; b++) untouched = untouched && guard[b] == 0x5a;
    TZ_EXPECT(untouched, "%s: nothing written past the last value", rt_dtype_name(t));
    if (t == RT_F16) {
        rt_pack big = {{65520.0f, -65520.0f, 65504.0f}};
        rt_pack_store(x, 0, &big);
        const rt_pack back = rt_pack_load(x, 0);
        TZ_EXPECT(isinf(back.v[0]) && back.v[0] > 0 && isinf(back.v[1]) && back.v[1] < 0 && back.v[2] == 65504.0f,
                  "fp16: 65520 overflows to inf on store, 65504 stays (%g %g %g)", back.v[0], back.v[1], back.v[2]);
    }
}

/* A walk's whole packs and its tail visit every value once; a handle starting off a 16-byte
 * boundary gets no packs. */
static void test_walk(void *buf) {
    for (size_t n = 0; n <= 3 * RT_PACK + 1; n++) {
        for (int aligned = 0; aligned < 2; aligned++) {
            int seen[4 * RT_PACK] = {0};
            const size_t packs = rt_pack_count(n, aligned);
            for (size_t k = 0; k < packs; k++)
                for (int j = 0; j < RT_PACK; j++) seen[k * RT_PACK + (size_t)j]++;
            for (size_t i = packs * RT_PACK; i < n; i++) seen[i]++;
            bool once = true;
            for (size_t i = 0; i < 4 * RT_PACK; i++) once = once && seen[i] == (i < n);
            TZ_EXPECT(once, "n=%zu aligned=%d: every value once, none past n", n, aligned);
            TZ_EXPECT(rt_pack_threads(n) * RT_PACK >= n && rt_pack_threads(n) <= n / RT_PACK + 1, "n=%zu: %zu threads",
                      n, rt_pack_threads(n));
        }
    }
    for (size_t t = 0; t < 3; t++) {
        TZ_EXPECT(!rt_pack_aligned(fill(buf, TYPES[t], 1)), "%s: a handle one value in is not aligned",
                  rt_dtype_name(TYPES[t]));
    }
    TZ_EXPECT(rt_pack_aligned(rt_pack_xf(NULL)), "a NULL handle moves nothing and counts as aligned");
    TZ_EXPECT(rt_pack_aligned(rt_pack_x((char *)buf + 16, RT_BF16)), "16 bytes in is aligned");
}

/* A pack's dropout uniforms are the CPU's draws for its values: two Philox blocks for a whole
 * pack on a block boundary, a value's own draw in the tail (the rest left 0). */
static void test_uniforms(void) {
    const uint64_t seed = 1234, stream = 77;
    const uint64_t whole[] = {0, 4, 8, 36, 1000, ((uint64_t)1 << 33) + 12};
    for (size_t k = 0; k < sizeof whole / sizeof whole[0]; k++) {
        const rt_pack u = rt_pack_uniforms(seed, stream, whole[k], RT_PACK);
        for (int j = 0; j < RT_PACK; j++) {
            const float want = rt_rng_uniform(seed, stream, whole[k] + (uint64_t)j);
            TZ_EXPECT(same_float(u.v[j], want), "uniforms of a pack at %llu, slot %d: %g, the CPU's %g",
                      (unsigned long long)whole[k], j, u.v[j], want);
        }
    }
    const uint64_t tail[] = {3, 37, 1001};
    for (size_t k = 0; k < sizeof tail / sizeof tail[0]; k++) {
        const rt_pack u = rt_pack_uniforms(seed, stream, tail[k], 1);
        TZ_EXPECT(same_float(u.v[0], rt_rng_uniform(seed, stream, tail[k])), "the uniform of a tail value at %llu",
                  (unsigned long long)tail[k]);
        bool rest = true;
        for (int j = 1; j < RT_PACK; j++) rest = rest && u.v[j] == 0.0f;
        TZ_EXPECT(rest, "a tail value's uniforms leave slots 1.. at 0");
    }
}

int main(void) {
    const size_t bytes = (N_VALUES + 2 * RT_PACK) * sizeof(float);
    void *buf = aligned_alloc(64, bytes), *want = aligned_alloc(64, bytes);
    TZ_EXPECT(buf && want, "buffers");
    if (!buf || !want) return tz_test_result("test_packed_loads");
    for (size_t t = 0; t < 3; t++) {
        test_load(TYPES[t], buf);
        test_store(TYPES[t], buf, want);
    }
    test_walk(buf);
    test_uniforms();
    free(buf);
    free(want);
    return tz_test_result("test_packed_loads");
}
