/* NCCL communicators over GPU buffers (runtime/comm/rt_comm_nccl.cu): the comm for tensor
 * and data parallelism on CUDA (rt_grid_init_device builds them). Bootstrapped over any CPU
 * communicator (MPI in a real run, threads in a test with several GPUs): rank 0 makes the
 * NCCL unique id and broadcasts it. That bootstrap is the group's host comm, with the same
 * ranks, and it stays linked: a buffer in host memory (pageable or pinned) passed to an op
 * goes over the bootstrap instead of NCCL, as a CUDA-aware MPI routes by pointer. Call sites
 * that know they hold host data use the grid's host comm directly (rt_grid.h); this is the net
 * for the few that take one comm for both kinds (a checkpoint writer gathers device shards,
 * then agrees on the outcome in a host int). A split also splits the bootstrap, so the child
 * keeps a host twin of its own.
 *
 * Each collective is enqueued on the communicator's own stream, which first waits (on the
 * GPU) for the work the CUDA backend on this thread queued on its stream; the call returns once
 * the collective is done, so it also comes before what the backend queues next. The call returns when the collective has completed, or fails
 * with RT_ERR_RUNTIME after the timeout, having aborted the NCCL communicator (ncclCommAbort)
 * so no kernel keeps waiting for a dead peer. */
#ifndef RT_COMM_NCCL_H
#define RT_COMM_NCCL_H

#include "runtime/comm/rt_comm.h"
#include "runtime/base/rt_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over bootstrap (size and rank are taken from it). device is the CUDA device
 * this rank uses (typically its local rank). The bootstrap must outlive the result (host
 * buffers and splits use it). RT_ERR_UNSUPPORTED in a build without NCCL. */
rt_status rt_comm_nccl_init(rt_comm *bootstrap, int device, double timeout_s, rt_comm **out);
/* Whether this process could make an NCCL communicator on device, with no communication:
 * RT_OK; RT_ERR_UNSUPPORTED (a build without NCCL, or no CUDA device) or RT_ERR_CONFIG (no
 * such device), with a message. A group checks this and agrees before the collective init,
 * so one rank without a GPU fails every rank at once instead of leaving them waiting. */
rt_status rt_comm_nccl_probe(int device);

#ifdef __cplusplus
}
#endif

#endif
