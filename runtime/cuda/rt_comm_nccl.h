/* NCCL communicators over GPU buffers (runtime/cuda/rt_comm_nccl.cu): the comm for tensor
 * and data parallelism on CUDA. Every buffer passed to its ops is a device pointer on the
 * communicator's device. Bootstrapped over any CPU communicator (MPI in a real run, threads
 * in a test with several GPUs): rank 0 makes the NCCL unique id and broadcasts it.
 *
 * Each collective is enqueued on the communicator's own stream, which is a blocking stream,
 * so it is ordered after the work the CUDA backend queued on the legacy default stream and
 * before what it queues next. The call returns when the collective has completed, or fails
 * with RT_ERR_RUNTIME after the timeout, having aborted the NCCL communicator (ncclCommAbort)
 * so no kernel keeps waiting for a dead peer. */
#ifndef RT_COMM_NCCL_H
#define RT_COMM_NCCL_H

#include "runtime/rt_comm.h"
#include "runtime/rt_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over bootstrap (size and rank are taken from it). device is the CUDA device
 * this rank uses (typically its local rank). The bootstrap must outlive the result (splits
 * may use it). RT_ERR_UNSUPPORTED in a build without NCCL. */
rt_status rt_comm_nccl_init(rt_comm *bootstrap, int device, double timeout_s, rt_comm **out);

#ifdef __cplusplus
}
#endif

#endif
