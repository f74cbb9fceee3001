/* Backend selection: turns the device string a user typed ("cpu", "cuda:N") into a backend,
 * so programs never name a backend's init directly and a CPU-only build still parses
 * "cuda:0" and says clearly that it has no CUDA, instead of failing as a typo would. */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/cpu/cpu_internal.h"
#include "runtime/backend/rt_backend.h"

/* Parses the N of "cuda:N": decimal digits only, no sign or spaces. */
static int rt_parse_device_index(const char *s, int *out) {
    if (*s < '0' || *s > '9') return 0;
    errno = 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < 0 || v > INT_MAX) return 0;
    *out = (int)v;
    return 1;
}

rt_status rt_backend_init(const char *device, int threads, rt_backend **out) {
    rt_status st = RT_OK;
    *out = NULL;
    if (!device) RT_FAIL(RT_ERR_USAGE, "--device: expected \"cpu\" or \"cuda:N\", got nothing");
    if (strcmp(device, "cpu") == 0) return rt_cpu_backend_init(threads, out);
    if (strncmp(device, "cuda:", 5) == 0) {
        int index = 0;
        if (!rt_parse_device_index(device + 5, &index))
            RT_FAIL(RT_ERR_USAGE, "--device %s: expected \"cuda:N\" with N a GPU index >= 0", device);
#ifdef TZ_USE_CUDA
        return rt_cuda_backend_init(index, out);
#else
        RT_FAIL(RT_ERR_UNSUPPORTED,
                "--device %s: this build has no CUDA backend (rebuild with "
                "USE_CUDA=ON on a machine with the CUDA toolkit, or use --device cpu)",
                device);
#endif
    }
    RT_FAIL(RT_ERR_USAGE, "--device %s: expected \"cpu\" or \"cuda:N\"", device);
fail:
    return st;
}

void rt_backend_free(rt_backend *be) {
    if (!be) return;
    rt_backend_free(be->params_staging);
    if (be->device < 0) {
        rt_cpu_backend_free(be);
        return;
    }
#ifdef TZ_USE_CUDA
    rt_cuda_backend_free(be);
#else
    RT_CHECK(be->device < 0, "device %d backend in a build without CUDA", be->device);
#endif
}

rt_status rt_set_precision(rt_backend *be, rt_dtype dtype) {
    if (dtype != RT_F32 && dtype != RT_BF16 && dtype != RT_F16)
        return rt_errorf(RT_ERR_UNSUPPORTED, "%s is not a compute precision (fp32, bf16 or fp16)",
                         rt_dtype_name(dtype));
    rt_status st = RT_OK;
    if (be->ops->set_matmul_precision)
        st = be->ops->set_matmul_precision(be->ctx, dtype);
    else if (dtype != RT_F32) /* a backend without the op computes in fp32 only */
        st = rt_errorf(RT_ERR_UNSUPPORTED, "the %s backend has fp32 matmuls only, not %s", be->ops->name,
                       rt_dtype_name(dtype));
    if (st == RT_OK) be->compute = dtype;
    return st;
}

rt_status rt_backend_alloc(rt_backend *be, size_t bytes, const char *what, void **out) {
    rt_status st = RT_OK;
    be->traffic.allocs++;
    *out = be->ops->alloc(be->ctx, bytes);
    if (!*out)
        RT_FAIL(RT_ERR_NOMEM, "%s: out of %s memory allocating %zu bytes (%.1f MiB; %.1f MiB allocated before it)",
                what ? what : "buffer", be->ops->name, bytes, (double)bytes / (1024.0 * 1024.0),
                (double)be->bytes_allocated / (1024.0 * 1024.0));
    be->bytes_allocated += bytes;
fail:
    return st;
}

void rt_attn_check(const rt_attn_desc *d) {
    RT_CHECK(d->B > 0 && d->NH > 0 && d->Tq > 0 && d->Tk > 0 && d->HS > 0, "B=%d NH=%d Tq=%d Tk=%d HS=%d", d->B, d->NH,
             d->Tq, d->Tk, d->HS);
    const size_t row = (size_t)d->NH * d->HS;
    RT_CHECK(d->ldq >= row && d->ldk >= row && d->ldv >= row && d->ldo >= row,
             "ldq=%zu ldk=%zu ldv=%zu ldo=%zu must each be >= NH*HS=%zu", d->ldq, d->ldk, d->ldv, d->ldo, row);
    /* the per-head products are GEMMs, whose leading dimensions are ints */
    RT_CHECK(d->ldq <= INT32_MAX && d->ldk <= INT32_MAX && d->ldv <= INT32_MAX && d->ldo <= INT32_MAX,
             "ldq=%zu ldk=%zu ldv=%zu ldo=%zu exceed INT_MAX", d->ldq, d->ldk, d->ldv, d->ldo);
    RT_CHECK(!d->causal || d->Tq == d->Tk, "causal attention needs Tq == Tk (Tq=%d Tk=%d)", d->Tq, d->Tk);
    RT_CHECK(d->dropout_p >= 0.0f && d->dropout_p < 1.0f, "attention dropout p=%g", (double)d->dropout_p);
    RT_CHECK(d->head_offset >= 0 &&
                 (d->heads_total == 0 ? d->head_offset == 0 : d->head_offset + d->NH <= d->heads_total),
             "head_offset=%d NH=%d heads_total=%d", d->head_offset, d->NH, d->heads_total);
    RT_CHECK(d->probs_dtype == RT_F32 || d->probs_dtype == RT_BF16 || d->probs_dtype == RT_F16,
             "attention probabilities as %s", rt_dtype_name(d->probs_dtype));
}
