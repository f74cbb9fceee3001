/* oneDNN's matmul on the CPU, the engine PyTorch's CPU path uses, for the GEMMs where it beats
 * OpenBLAS: bf16 inputs (Debian's OpenBLAS has no bf16 GEMM) on CPUs with AVX-512 BF16 or AMX,
 * and whatever fp32 shapes measure faster (scripts/bench/bench_gemm.py). Built when CMake finds
 * oneDNN (libdnnl-dev, USE_DNNL); without it every call is RT_ERR_UNSUPPORTED.
 *
 * C = alpha op(A) op(B) + beta C, row-major with leading dimensions, as the backend's gemm:
 * A (M x K, or K x M when trans_a) and B (K x N, or N x K when trans_b) hold fp32 or bf16
 * (`type`), C is fp32 and the products accumulate in fp32. oneDNN picks the kernel for this CPU
 * (with AVX-512 but no native bf16 it emulates, correctly and slower; with less, it has none:
 * cpu_dnnl_has); cpu_dnnl_kernel names it. It
 * runs on the OpenMP thread pool OpenBLAS and the backend share. Safe to call from several
 * threads at once (the thread comm's ranks). */
#ifndef CPU_DNNL_H
#define CPU_DNNL_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/base/rt_status.h"

typedef enum { CPU_DNNL_F32, CPU_DNNL_BF16 } cpu_dnnl_type;

/* Whether oneDNN has a matmul for these inputs on this CPU: false without oneDNN in the build,
 * and for bf16 on a CPU without AVX-512 (oneDNN 2.6 has no bf16 matmul for AVX2 alone), where
 * callers use fp32 GEMMs over bf16-rounded values. Probed once per type. */
bool cpu_dnnl_has(cpu_dnnl_type type);
rt_status cpu_dnnl_gemm(cpu_dnnl_type type, bool trans_a, bool trans_b, int M, int N, int K, float alpha, const void *A,
                        int lda, const void *B, int ldb, float beta, float *C, int ldc);
/* The implementation oneDNN picks for such a GEMM ("brg:avx512_core_bf16", "gemm:jit", ...) into
 * out (size bytes); RT_ERR_UNSUPPORTED without oneDNN. */
rt_status cpu_dnnl_kernel(cpu_dnnl_type type, int M, int N, int K, char *out, size_t size);

#endif
