/* Launch detection from the launcher's environment, and the choice of world communicator.
 *
 * Reading the variables ourselves (rather than asking MPI) lets a program know it is one of
 * many before MPI is initialized, and lets it catch the classic mistake of a binary built
 * against one MPI started by another launcher: every rank would then think it is alone and
 * train the whole model by itself. */
#include "runtime/comm/rt_launch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *rt_launch_source_name(rt_launch_source s) {
    switch (s) {
    case RT_LAUNCH_NONE: return "none";
    case RT_LAUNCH_OPENMPI: return "OpenMPI mpirun";
    case RT_LAUNCH_PMI: return "MPICH/PMI mpiexec";
    case RT_LAUNCH_SLURM: return "Slurm srun";
    case RT_LAUNCH_TORCHRUN: return "torchrun-style env";
    }
    return "unknown";
}

/* Parses a non-negative int from the variable `name`; *found = 0 when it is unset. */
static rt_status env_int(const char *name, int *out, int *found) {
    const char *s = getenv(name);
    *found = s != NULL;
    if (!s) return RT_OK;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < 0 || v > 1000000000L)
        return rt_errorf(RT_ERR_CONFIG, "environment variable %s='%s': expected a non-negative integer", name, s);
    *out = (int)v;
    return RT_OK;
}

/* Reads one launcher's triple. size_name may list two variables "A|B": the first set wins.
 * local_name may be NULL or unset (then local rank 0). */
static rt_status read_triple(rt_launch_info *info, rt_launch_source src, const char *rank_name, const char *size_name,
                             const char *size_alt, const char *local_name) {
    rt_status st = RT_OK;
    int have_rank = 0, have_size = 0, have_local = 0;
    const char *size_used = size_name;
    RT_TRY(env_int(rank_name, &info->rank, &have_rank));
    RT_TRY(env_int(size_name, &info->world_size, &have_size));
    if (!have_size && size_alt) {
        size_used = size_alt;
        RT_TRY(env_int(size_alt, &info->world_size, &have_size));
    }
    if (local_name) RT_TRY(env_int(local_name, &info->local_rank, &have_local));
    if (!have_rank)
        RT_FAIL(RT_ERR_CONFIG, "environment: %s is set but %s is not (%s launch)", size_used, rank_name,
                rt_launch_source_name(src));
    if (!have_size)
        RT_FAIL(RT_ERR_CONFIG, "environment: %s is set but %s is not (%s launch)", rank_name, size_name,
                rt_launch_source_name(src));
    if (info->world_size < 1)
        RT_FAIL(RT_ERR_CONFIG, "environment variable %s=%d: expected at least 1", size_used, info->world_size);
    if (info->rank >= info->world_size)
        RT_FAIL(RT_ERR_CONFIG, "environment: %s=%d is not below %s=%d", rank_name, info->rank, size_used,
                info->world_size);
    if (!have_local) info->local_rank = 0;
    if (info->local_rank >= info->world_size)
        RT_FAIL(RT_ERR_CONFIG, "environment: %s=%d is not below %s=%d", local_name, info->local_rank, size_used,
                info->world_size);
    info->source = src;
fail:
    return st;
}

rt_status rt_launch_detect(rt_launch_info *out) {
    rt_status st = RT_OK;
    rt_launch_info info;
    memset(&info, 0, sizeof info);
    info.world_size = 1;
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("OMPI_COMM_WORLD_RANK")) {
        RT_TRY(read_triple(&info, RT_LAUNCH_OPENMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", NULL,
                           "OMPI_COMM_WORLD_LOCAL_RANK"));
    } else if (getenv("PMI_RANK") || getenv("PMI_SIZE")) {
        RT_TRY(read_triple(&info, RT_LAUNCH_PMI, "PMI_RANK", "PMI_SIZE", NULL, "MPI_LOCALRANKID"));
    } else if (getenv("SLURM_PROCID") && (getenv("SLURM_STEP_NUM_TASKS") || getenv("SLURM_NTASKS"))) {
        /* the step's task count, not the job's: a batch script's own step has SLURM_NTASKS
         * of the allocation but is a single process */
        RT_TRY(read_triple(&info, RT_LAUNCH_SLURM, "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",
                           "SLURM_LOCALID"));
    } else if (getenv("RANK") || getenv("WORLD_SIZE")) {
        RT_TRY(read_triple(&info, RT_LAUNCH_TORCHRUN, "RANK", "WORLD_SIZE", NULL, "LOCAL_RANK"));
        const char *addr = getenv("MASTER_ADDR");
        if (addr) {
            if (!addr[0] || strlen(addr) >= sizeof info.master_addr)
                RT_FAIL(RT_ERR_CONFIG, "environment variable MASTER_ADDR='%s': expected a host name or address", addr);
            strcpy(info.master_addr, addr);
        }
        int have_port = 0;
        RT_TRY(env_int("MASTER_PORT", &info.master_port, &have_port));
        if (have_port && (info.master_port < 1 || info.master_port > 65535))
            RT_FAIL(RT_ERR_CONFIG, "environment variable MASTER_PORT=%d: expected a port in 1..65535",
                    info.master_port);
    }
    *out = info;
fail:
    return st;
}

rt_status rt_launch_device_name(const char *opt, char *out, size_t size) {
    rt_status st = RT_OK;
    rt_launch_info li;
    int n = 0;
    if (opt && strcmp(opt, "cuda") == 0) {
        RT_TRY(rt_launch_detect(&li));
        n = snprintf(out, size, "cuda:%d", li.local_rank);
    } else {
        n = snprintf(out, size, "%s", opt ? opt : "");
    }
    if (n < 0 || (size_t)n >= size) RT_FAIL(RT_ERR_USAGE, "--device %s: too long", opt ? opt : "");
fail:
    return st;
}

rt_status rt_comm_world_init(int *argc, char ***argv, double timeout_s, rt_comm **world) {
    rt_status st = RT_OK;
    rt_launch_info info;
    rt_comm *c = NULL;
    *world = NULL;
    RT_TRY(rt_launch_detect(&info));
    if (info.world_size == 1) {
        *world = rt_comm_self();
        return RT_OK;
    }
    if (info.source == RT_LAUNCH_TORCHRUN)
        RT_FAIL(RT_ERR_UNSUPPORTED,
                "RANK=%d WORLD_SIZE=%d: a plain torchrun-style launch needs a rendezvous tunezoo does not "
                "implement (it bootstraps over MPI); use mpirun or srun",
                info.rank, info.world_size);
    st = rt_comm_mpi_init(argc, argv, timeout_s, &c);
    if (st == RT_ERR_UNSUPPORTED)
        RT_FAIL(RT_ERR_UNSUPPORTED, "started as rank %d of %d by %s, but %s", info.rank, info.world_size,
                rt_launch_source_name(info.source), rt_error_message());
    RT_TRY(st);
    if (c->size != info.world_size || c->rank != info.rank)
        RT_FAIL(RT_ERR_CONFIG,
                "started as rank %d of %d by %s, but MPI says rank %d of %d: the program's MPI library is not "
                "the launcher's (use the mpirun of the MPI tunezoo was built with)",
                info.rank, info.world_size, rt_launch_source_name(info.source), c->rank, c->size);
    *world = c;
    return RT_OK;
fail:
    rt_comm_free(c);
    return st;
}
