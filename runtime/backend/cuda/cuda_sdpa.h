/* cuDNN's fused scaled-dot-product attention (flash attention) through cudnn-frontend's graph API:
 * one C++ translation unit (cuda_sdpa.cc) behind this C interface, for TZ_CUDA_ATTENTION=cudnn.
 * Which calls it takes, and what it keeps for the backward, is cuda_sdpa_plan.h.
 *
 * Execution plans are built once per rt_sdpa_key and cached (building one takes a good part of a
 * second; --length-buckets bounds how many a run needs). Built without cudnn-frontend's headers
 * (scripts/setup.sh installs them where nvcc is) or without cuDNN, rt_sdpa_create says so and
 * the backend keeps its own attention. */
#ifndef CUDA_SDPA_H
#define CUDA_SDPA_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" { /* C++ (cuda_sdpa.cc, the .cu files) sees the C declarations as C */
#endif
#include "runtime/backend/rt_backend.h"
#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_sdpa rt_sdpa;

/* At least bytes of device memory, kept by the caller between calls (the backend's scratch). */
typedef void *(*rt_sdpa_workspace_fn)(void *ctx, size_t bytes);

/* A cuDNN handle and an empty plan cache; NULL with the reason in why when this build or this
 * machine has no cuDNN SDPA. */
rt_sdpa *rt_sdpa_create(char *why, size_t why_size);
void rt_sdpa_destroy(rt_sdpa *s);
/* The cuDNN library's version (cudnnGetVersion: 90500 is 9.5.0); 0 without one. */
long rt_sdpa_version(const rt_sdpa *s);

/* Attention d (rt_sdpa_unsupported(d, io, ...) == NULL) on stream, io being the 16-bit type of
 * q, k, v, out, dout, dq, dk and dv (strides as in d). fwd writes out and, into kept (the
 * probabilities buffer, rt_sdpa_kept_row bytes a query row), the output again and the softmax's
 * log-sum-exp; bwd reads those and writes dq, dk and dv. With d->key_len (padding on the right),
 * q_len is a device array of B values Tq (every query row kept). Where rt_sdpa_bias_of(d) names a
 * bias, bias is it at type io, laid out as that kind says; bwd writes the position bias's gradient
 * there (same layout and type, summed over the batch) when dbias is not NULL. Each returns RT_OK, or an error naming
 * what cuDNN refused (a shape its engines do not take). A forward is refused too where cuDNN would
 * not build its backward (the first forward of a shape builds both plans). A refused forward is remembered:
 * the same call is refused again at once (RT_ERR_UNSUPPORTED, no message), and rt_sdpa_took says
 * false for it, so that its backward takes the same other path. */
bool rt_sdpa_took(const rt_sdpa *s, const rt_attn_desc *d, rt_dtype io);
rt_status rt_sdpa_fwd(rt_sdpa *s, cudaStream_t stream, const rt_attn_desc *d, rt_dtype io, void *out, void *kept,
                      const void *q, const void *k, const void *v, const int32_t *q_len, const void *bias,
                      rt_sdpa_workspace_fn workspace, void *ws_ctx);
rt_status rt_sdpa_bwd(rt_sdpa *s, cudaStream_t stream, const rt_attn_desc *d, rt_dtype io, void *dq, void *dk, void *dv,
                      const void *dout, const void *kept, const void *q, const void *k, const void *v,
                      const int32_t *q_len, const void *bias, void *dbias, rt_sdpa_workspace_fn workspace,
                      void *ws_ctx);

#ifdef __cplusplus
}
#endif

#endif
