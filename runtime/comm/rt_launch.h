/* How a process learns its place in a parallel run and gets its communicators.
 *
 * A program is started by mpirun (OpenMPI or MPICH), by srun, or directly; each launcher
 * leaves rank, world size and local rank in its own environment variables, so
 * rt_launch_detect reads them without initializing anything. rt_comm_world_init then picks
 * the communicator that fits: one rank needs nothing (rt_comm_self), an MPI or Slurm launch
 * gets MPI. The constructors of the concrete communicators live here too, so rt_comm.h stays
 * the interface every layer sees and only set-up code includes this header.
 *
 *     rt_comm *world = NULL;
 *     RT_TRY(rt_comm_world_init(&argc, &argv, 300.0, &world));
 *     ...
 *     rt_comm_free(world);
 *     rt_comm_mpi_finalize();
 */
#ifndef RT_LAUNCH_H
#define RT_LAUNCH_H

#include "runtime/comm/rt_comm.h"
#include "runtime/base/rt_status.h"

typedef enum {
    RT_LAUNCH_NONE = 0, /* no launcher variables: one process */
    RT_LAUNCH_OPENMPI,  /* OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK */
    RT_LAUNCH_PMI,      /* MPICH / Intel MPI (Hydra): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID */
    RT_LAUNCH_SLURM,    /* srun: SLURM_PROCID, SLURM_STEP_NUM_TASKS or SLURM_NTASKS, SLURM_LOCALID */
    RT_LAUNCH_TORCHRUN  /* RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT */
} rt_launch_source;

typedef struct {
    rt_launch_source source;
    int rank, world_size, local_rank;
    char master_addr[256]; /* torchrun-style only, else "" */
    int master_port;       /* torchrun-style only, else 0 */
} rt_launch_info;

/* Reads the launcher's environment (checked in the order of the enum: an mpirun inside a
 * Slurm job is an MPI launch). Malformed or inconsistent values are RT_ERR_CONFIG naming
 * the variable. */
rt_status rt_launch_detect(rt_launch_info *out);
const char *rt_launch_source_name(rt_launch_source s);

/* The backend device string for --device: "cuda" means the GPU numbered by this rank's local
 * rank on its node (one process per GPU, as mpirun and srun place them), so it becomes
 * "cuda:<local rank>"; anything else ("cpu", "cuda:N", a typo for rt_backend_init to reject)
 * is copied as it is. Reads the launcher's environment (rt_launch_detect's errors). After the
 * backend exists, rt_grid_init_device(grid, be->device, ...) gives a multi-rank run NCCL. */
rt_status rt_launch_device_name(const char *opt, char *out, size_t size);

/* The world communicator for this launch: rt_comm_self() for one rank, MPI for mpirun or
 * srun (checking that MPI agrees with the launcher's world size), RT_ERR_UNSUPPORTED for a
 * torchrun-style launch or an MPI launch of a build without MPI. timeout_s bounds every
 * collective. Free with rt_comm_free, then call rt_comm_mpi_finalize. */
rt_status rt_comm_world_init(int *argc, char ***argv, double timeout_s, rt_comm **world);

/* MPI over CPU buffers (runtime/comm/rt_comm_mpi.c). Initializes MPI if nobody has (asking for
 * MPI_THREAD_SERIALIZED) and wraps a duplicate of MPI_COMM_WORLD. RT_ERR_UNSUPPORTED in a
 * build without MPI (TZ_USE_MPI undefined). */
rt_status rt_comm_mpi_init(int *argc, char ***argv, double timeout_s, rt_comm **world);
/* Finalizes MPI if rt_comm_mpi_init initialized it; a no-op otherwise (and without MPI). */
void rt_comm_mpi_finalize(void);
/* A program's last MPI call: finalizes, or, when a collective timed out on a silent rank (which
 * MPI_Finalize would wait for forever), aborts the whole job with exit_code so that the
 * launcher stops every rank. Print the error first. */
void rt_comm_mpi_end(int exit_code);

/* n in-process communicators sharing one group (runtime/comm/rt_comm_threads.c): comms[i] is rank
 * i of n and is used by one thread. Reductions run in rank order, so every rank gets the
 * same bits whatever the thread timing. Free each with rt_comm_free. */
rt_status rt_comm_threads_create(int n, double timeout_s, rt_comm **comms);

#endif
