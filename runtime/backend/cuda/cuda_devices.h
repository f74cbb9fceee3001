/* How many CUDA devices this machine has, telling "no GPU here" (a reason to skip or to run on
 * the CPU) from "a GPU that CUDA cannot use" (a broken setup, which must fail loudly): a driver
 * too old for this CUDA runtime otherwise looks like an absent device, and tests on a GPU
 * machine would report "skipped" instead of failing. Plain C, for the tests and the backends. */
#ifndef CUDA_DEVICES_H
#define CUDA_DEVICES_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" { /* rt_status.h is C: its functions keep C names when CUDA code includes this */
#endif

#include "runtime/base/rt_status.h"

/* *count = the visible devices (at least 1) and RT_OK; RT_ERR_UNSUPPORTED when the machine has
 * no NVIDIA driver or no device; RT_ERR_RUNTIME naming CUDA's error when a driver is present
 * (/proc/driver/nvidia or /dev/nvidiactl) but CUDA fails. */
rt_status rt_cuda_device_count(int *count);

#ifdef __cplusplus
}
#endif

#endif
