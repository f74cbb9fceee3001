/* Eight consecutive values of a typed activation (rt_x) at a time, as the CUDA element kernels
 * read and write them: a 16-bit handle's eight values are one 16-byte load or store, an fp32
 * handle's two, where a thread's scalar loads would move 2 or 4 bytes each (llm.c's Packed128).
 * The values are widened to fp32 in the pack and rounded once as they are stored, as
 * rt_cuda_xload/xstore do one at a time, so a kernel gives the same numbers either way.
 *
 * Written for two machines, as cuda_flash_tiles.h: on a GPU a pack moves as uint4/float4 words,
 * on the host through memcpy with rt_dtype.h's conversions, so a CPU test (tests/test_packed_loads.c)
 * checks the layout of the values in the words, the conversions and the split into whole packs and
 * a tail on machines without a GPU. Only the device's own loads and conversions are not. */
#ifndef RT_CUDA_PACK_H
#define RT_CUDA_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "runtime/backend/rt_x.h"
#include "runtime/base/rt_dtype.h"
#ifdef __cplusplus
}
#endif
#include "runtime/base/rt_rng.h"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define PK_HD __host__ __device__ __forceinline__
#else
#define PK_HD static inline
#endif

#ifdef __cplusplus
#define PK_ALIGN16 alignas(16)
#else
#define PK_ALIGN16 _Alignas(16)
#endif

#define RT_PACK 8 /* values a pack holds: 16 bytes of 16-bit ones */

typedef struct {
    float v[RT_PACK];
} rt_pack;

/* What a pack is in memory: the words one load or store moves. */
typedef struct {
    PK_ALIGN16 uint16_t h[RT_PACK];
} rt_pack_bits16;
typedef struct {
    PK_ALIGN16 float f[RT_PACK];
} rt_pack_bits32;

/* rt_x_of and rt_xf for device code (rt_x.h's are host functions). */
PK_HD rt_x rt_pack_x(void *p, rt_dtype t) {
    rt_x x;
    x.p = p;
    x.t = t;
    return x;
}
PK_HD rt_x rt_pack_xf(const float *p) { return rt_pack_x((void *)p, RT_F32); }

/* Whether packs of x start on 16-byte boundaries from value 0 on (a NULL handle is: it moves
 * nothing). Every handle a kernel reads or writes in packs must be, else it walks one value at a
 * time: a view into a buffer (a ZeRO shard, a column slice) may start anywhere. */
PK_HD bool rt_pack_aligned(rt_x x) { return ((uintptr_t)x.p & 15u) == 0; }

/* The whole packs of a walk over n values: none unless every handle is aligned; the tail,
 * n - RT_PACK * packs values, goes one at a time. */
PK_HD size_t rt_pack_count(size_t n, bool aligned) { return aligned ? n / RT_PACK : 0; }

PK_HD float rt_pack_widen16(rt_dtype t, uint16_t h) {
#ifdef __CUDA_ARCH__
    return t == RT_BF16 ? __uint_as_float((uint32_t)h << 16) : __half2float(__ushort_as_half(h));
#else
    return t == RT_BF16 ? rt_bf16_to_f32(h) : rt_f16_to_f32(h);
#endif
}

/* To nearest even, fp16 overflowing to inf: rt_cuda_xstore's rounding. */
PK_HD uint16_t rt_pack_narrow16(rt_dtype t, float v) {
#ifdef __CUDA_ARCH__
    return t == RT_BF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(v)) : __half_as_ushort(__float2half_rn(v));
#else
    return t == RT_BF16 ? rt_f32_to_bf16(v) : rt_f32_to_f16(v);
#endif
}

/* Threads for a walk over n values: one a pack (the tail's values share them). */
PK_HD size_t rt_pack_threads(size_t n) { return (n + RT_PACK - 1) / RT_PACK; }

/* Values i .. i + RT_PACK - 1 of x, widened; i is a multiple of RT_PACK and x aligned. */
PK_HD rt_pack rt_pack_load(rt_x x, size_t i) {
    rt_pack p;
    if (x.t == RT_F32) {
#ifdef __CUDA_ARCH__
        const rt_pack_bits32 w = *(const rt_pack_bits32 *)((const float *)x.p + i);
#else
        rt_pack_bits32 w;
        memcpy(&w, (const float *)x.p + i, sizeof w);
#endif
        for (int j = 0; j < RT_PACK; j++) p.v[j] = w.f[j];
        return p;
    }
#ifdef __CUDA_ARCH__
    const rt_pack_bits16 w = *(const rt_pack_bits16 *)((const uint16_t *)x.p + i);
#else
    rt_pack_bits16 w;
    memcpy(&w, (const uint16_t *)x.p + i, sizeof w);
#endif
    for (int j = 0; j < RT_PACK; j++) p.v[j] = rt_pack_widen16(x.t, w.h[j]);
    return p;
}

/* Stores p at values i .. i + RT_PACK - 1 of x, each rounded once to x's type. */
PK_HD void rt_pack_store(rt_x x, size_t i, const rt_pack *p) {
    if (x.t == RT_F32) {
        rt_pack_bits32 w;
        for (int j = 0; j < RT_PACK; j++) w.f[j] = p->v[j];
#ifdef __CUDA_ARCH__
        *(rt_pack_bits32 *)((float *)x.p + i) = w;
#else
        memcpy((float *)x.p + i, &w, sizeof w);
#endif
        return;
    }
    rt_pack_bits16 w;
    for (int j = 0; j < RT_PACK; j++) w.h[j] = rt_pack_narrow16(x.t, p->v[j]);
#ifdef __CUDA_ARCH__
    *(rt_pack_bits16 *)((uint16_t *)x.p + i) = w;
#else
    memcpy((uint16_t *)x.p + i, &w, sizeof w);
#endif
}

/* The first w values from i (w is RT_PACK, on a pack's start, or 1, in the tail): how a walk's
 * body reads a handle whatever part of the walk it is in. The rest of the pack is left as 0. */
PK_HD rt_pack rt_pack_load_n(rt_x x, size_t i, int w) {
    if (w == RT_PACK) return rt_pack_load(x, i);
    rt_pack p;
    for (int j = 0; j < RT_PACK; j++) p.v[j] = 0.0f;
    for (int j = 0; j < w; j++) {
        const size_t k = i + (size_t)j;
        p.v[j] = x.t == RT_F32 ? ((const float *)x.p)[k] : rt_pack_widen16(x.t, ((const uint16_t *)x.p)[k]);
    }
    return p;
}

PK_HD void rt_pack_store_n(rt_x x, size_t i, int w, const rt_pack *p) {
    if (w == RT_PACK) {
        rt_pack_store(x, i, p);
        return;
    }
    for (int j = 0; j < w; j++) {
        const size_t k = i + (size_t)j;
        if (x.t == RT_F32)
            ((float *)x.p)[k] = p->v[j];
        else
            ((uint16_t *)x.p)[k] = rt_pack_narrow16(x.t, p->v[j]);
    }
}

/* Dropout's uniforms for the w values from stream index g (rt_rng.h; w as in rt_pack_load_n): a
 * whole pack's are two Philox blocks, so g must be a multiple of 4 there; a tail value's is its
 * own draw. Either way value j gets rt_rng_uniform(seed, stream, g + j), the CPU's mask. */
PK_HD rt_pack rt_pack_uniforms(uint64_t seed, uint64_t stream, uint64_t g, int w) {
    rt_pack u;
    for (int j = 0; j < RT_PACK; j++) u.v[j] = 0.0f;
    if (w == RT_PACK) {
        rt_rng_uniform4(seed, stream, g >> 2, u.v);
        rt_rng_uniform4(seed, stream, (g >> 2) + 1, u.v + 4);
    } else {
        u.v[0] = rt_rng_uniform(seed, stream, g);
    }
    return u;
}

#ifdef __CUDACC__
/* A strided walk over n values: f(i, RT_PACK) at every step-th whole pack from pack `first`, then
 * f(i, 1) at every step-th value of the tail from value packs * RT_PACK + first. Every caller that
 * shares the walk (first = 0 .. step - 1) visits each value once. f is inlined at both calls, so
 * its loops over w values unroll. */
template <typename F>
__device__ __forceinline__ void rt_cuda_pack_walk_from(size_t n, bool aligned, size_t first, size_t step, F f) {
    const size_t packs = rt_pack_count(n, aligned);
    for (size_t k = first; k < packs; k += step) f(k * RT_PACK, RT_PACK);
    for (size_t i = packs * RT_PACK + first; i < n; i += step) f(i, 1);
}

/* The walk over n values by a whole grid: launch over rt_pack_threads(n) threads. */
template <typename F> __device__ __forceinline__ void rt_cuda_pack_walk(size_t n, bool aligned, F f) {
    rt_cuda_pack_walk_from(n, aligned, (size_t)blockIdx.x * blockDim.x + threadIdx.x, (size_t)gridDim.x * blockDim.x,
                           f);
}

/* The walk over one row of n values by the 32 lanes of a warp (the row kernels: norms, the
 * residual step). aligned: every handle the body moves starts the row on a 16-byte boundary. */
template <typename F> __device__ __forceinline__ void rt_cuda_pack_row_walk(int n, bool aligned, int lane, F f) {
    rt_cuda_pack_walk_from((size_t)n, aligned, (size_t)lane, 32, f);
}
#endif

#endif
