/* Counter-based random numbers: every draw is a pure function of (seed, stream, index), so
 * CPU and CUDA produce the same bits, any element can be drawn in any order, and resume
 * needs no generator state beyond the seed and the step. Philox-4x32-10 (Salmon et al.,
 * "Parallel random numbers: as easy as 1, 2, 3", SC'11), the generator cuRAND and PyTorch
 * use for dropout; the helpers are inline so the CUDA backend includes this same header. */
#ifndef RT_RNG_H
#define RT_RNG_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define RT_HD __host__ __device__ __forceinline__
#else
#define RT_HD static inline
#endif

typedef struct {
    uint32_t v[4];
} rt_philox_out;

RT_HD rt_philox_out rt_philox4x32(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32);
    uint32_t c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    rt_philox_out o = {{c0, c1, c2, c3}};
    return o;
}

/* 32 random bits for element i of a stream. Four consecutive i share one Philox block. */
RT_HD uint32_t rt_rng_u32(uint64_t seed, uint64_t stream, uint64_t i) {
    rt_philox_out o = rt_philox4x32(seed, stream, i >> 2);
    return o.v[i & 3];
}

/* Uniform in [0, 1) with 24 bits of precision. */
RT_HD float rt_rng_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
    return (float)(rt_rng_u32(seed, stream, i) >> 8) * (1.0f / 16777216.0f);
}

/* The uniforms of elements 4 blk .. 4 blk + 3: one Philox block's four words, each what
 * rt_rng_uniform gives for its element. A loop that draws a block at a time does a quarter of
 * the Philox work of one that draws an element at a time. */
RT_HD void rt_rng_uniform4(uint64_t seed, uint64_t stream, uint64_t blk, float u[4]) {
    const rt_philox_out o = rt_philox4x32(seed, stream, blk);
    for (int w = 0; w < 4; w++) u[w] = (float)(o.v[w] >> 8) * (1.0f / 16777216.0f);
}

/* A row of n elements whose element j draws stream index g0 + j, a block at a time: its blocks
 * are first .. first + count - 1, and block first + k holds the row's elements j0 .. j0 + 3
 * (j0 = rt_rng_row_j0, possibly below 0 at the start; keep those in [0, n)). A GPU lane takes
 * every lanes-th k; the row's elements are drawn once each. */
RT_HD void rt_rng_row_blocks(uint64_t g0, uint64_t n, uint64_t *first, uint64_t *count) {
    *first = g0 >> 2;
    *count = n ? ((g0 + n - 1) >> 2) - *first + 1 : 0;
}
RT_HD int64_t rt_rng_row_j0(uint64_t g0, uint64_t first, uint64_t k) {
    return (int64_t)((first + k) << 2) - (int64_t)g0;
}

/* Standard normal by Box-Muller over two draws (2i, 2i+1). */
RT_HD float rt_rng_normal(uint64_t seed, uint64_t stream, uint64_t i) {
    float u1 = ((float)(rt_rng_u32(seed, stream, 2 * i) >> 8) + 1.0f) * (1.0f / 16777217.0f);
    float u2 = (float)(rt_rng_u32(seed, stream, 2 * i + 1) >> 8) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

/* Uniform integer in [0, n) (n > 0); the tiny modulo bias is irrelevant for shuffling. */
RT_HD uint64_t rt_rng_below(uint64_t seed, uint64_t stream, uint64_t i, uint64_t n) {
    uint64_t r = ((uint64_t)rt_rng_u32(seed, stream, 2 * i) << 32) | rt_rng_u32(seed, stream, 2 * i + 1);
    return r % n;
}

/* Streams: each use of randomness has its own kind in the top byte, so they never overlap:
 * init: detail = parameter index; shuffle: detail = epoch;
 * dropout: detail = (step << 20) | (micro-batch << 12) | site. */
enum { RT_STREAM_INIT = 1, RT_STREAM_SHUFFLE = 2, RT_STREAM_DROPOUT = 3, RT_STREAM_LORA = 4 };
#define RT_STREAM(kind, detail) (((uint64_t)(kind) << 56) | ((uint64_t)(detail)&0x00FFFFFFFFFFFFFFull))
/* A training step's part of its dropout streams (models/layers/pass.h): a stream made at step 0
 * plus this is the step's own. The step's record keeps it on the device, so a step graph's replay
 * draws the step's masks (runtime/train/rt_step_graphs.h). */
#define RT_STREAM_STEP_DROPOUT(step) (((uint64_t)(step) << 20) & 0x00FFFFFFFFFFFFFFull)
#define RT_STREAM_STEP_LORA(step) (((uint64_t)(step) << 28) & 0x00FFFFFFFFFFFFFFull)
/* stream with its step part added from the device (step: its address; NULL: stream is whole) */
RT_HD uint64_t rt_stream_at_step(uint64_t stream, const uint64_t *step) { return step ? stream + *step : stream; }

#endif
