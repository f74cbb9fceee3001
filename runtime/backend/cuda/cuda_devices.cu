/* CUDA's devices, absent or broken (see cuda_devices.h). */
#include "runtime/backend/cuda/cuda_devices.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

static bool nvidia_driver_present(void) {
    return access("/proc/driver/nvidia/version", F_OK) == 0 || access("/dev/nvidiactl", F_OK) == 0;
}

extern "C" rt_status rt_cuda_device_count(int *count) {
    *count = 0;
    cudaError_t e = cudaGetDeviceCount(count);
    (void)cudaGetLastError();
    if (e == cudaSuccess && *count > 0) return RT_OK;
    const int n = *count;
    *count = 0;
    if (e == cudaSuccess || e == cudaErrorNoDevice)
        return rt_errorf(RT_ERR_UNSUPPORTED, "no CUDA device is visible (%s)",
                         e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    if (!nvidia_driver_present())
        return rt_errorf(RT_ERR_UNSUPPORTED, "no CUDA device: this machine has no NVIDIA driver (%s)",
                         cudaGetErrorString(e));
    return rt_errorf(RT_ERR_RUNTIME,
                     "the NVIDIA driver is present but CUDA cannot use it: cudaGetDeviceCount: %s (%d devices); "
                     "is the driver older than this CUDA runtime needs? (nvidia-smi shows its version)",
                     cudaGetErrorString(e), n);
}
