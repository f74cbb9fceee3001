/* Launch detection: each launcher's variables (OpenMPI, MPICH/PMI, Slurm, torchrun-style)
 * set with setenv, the precedence when several are present (mpirun inside a Slurm job),
 * malformed and inconsistent values that must fail naming the variable, and the world
 * communicator chosen for one rank and for a torchrun-style launch. */
#include <stdlib.h>
#include <string.h>

#include "runtime/comm/rt_launch.h"
#include "tests/testutil.h"

static const char *const all_vars[] = {"OMPI_COMM_WORLD_RANK",
                                       "OMPI_COMM_WORLD_SIZE",
                                       "OMPI_COMM_WORLD_LOCAL_RANK",
                                       "PMI_RANK",
                                       "PMI_SIZE",
                                       "MPI_LOCALRANKID",
                                       "SLURM_PROCID",
                                       "SLURM_NTASKS",
                                       "SLURM_STEP_NUM_TASKS",
                                       "SLURM_LOCALID",
                                       "RANK",
                                       "WORLD_SIZE",
                                       "LOCAL_RANK",
                                       "MASTER_ADDR",
                                       "MASTER_PORT"};

static void clear_env(void) {
    for (size_t i = 0; i < sizeof all_vars / sizeof all_vars[0]; i++) unsetenv(all_vars[i]);
}

static void expect_info(const char *what, rt_launch_source src, int rank, int world, int local) {
    rt_launch_info info;
    rt_status st = rt_launch_detect(&info);
    TZ_EXPECT(st == RT_OK, "%s: %s", what, rt_error_message());
    if (st != RT_OK) return;
    TZ_EXPECT(info.source == src, "%s: source %s, expected %s", what, rt_launch_source_name(info.source),
              rt_launch_source_name(src));
    TZ_EXPECT(info.rank == rank && info.world_size == world && info.local_rank == local,
              "%s: rank %d world %d local %d, expected %d %d %d", what, info.rank, info.world_size, info.local_rank,
              rank, world, local);
}

static void expect_error(const char *what, const char *needle) {
    rt_launch_info info;
    rt_status st = rt_launch_detect(&info);
    TZ_EXPECT(st == RT_ERR_CONFIG, "%s: got %s", what, rt_status_name(st));
    TZ_EXPECT(strstr(rt_error_message(), needle) != NULL, "%s: message '%s' lacks '%s'", what, rt_error_message(),
              needle);
}

int main(void) {
    clear_env();
    expect_info("no launcher", RT_LAUNCH_NONE, 0, 1, 0);

    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    expect_info("openmpi", RT_LAUNCH_OPENMPI, 3, 4, 1);
    /* mpirun inside a Slurm allocation: MPI's variables win */
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "8", 1);
    expect_info("openmpi inside slurm", RT_LAUNCH_OPENMPI, 3, 4, 1);
    setenv("OMPI_COMM_WORLD_RANK", "4", 1);
    expect_error("openmpi rank == size", "OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4");
    setenv("OMPI_COMM_WORLD_RANK", "2x", 1);
    expect_error("openmpi junk rank", "OMPI_COMM_WORLD_RANK='2x'");
    setenv("OMPI_COMM_WORLD_RANK", "-1", 1);
    expect_error("openmpi negative rank", "OMPI_COMM_WORLD_RANK='-1'");
    unsetenv("OMPI_COMM_WORLD_RANK");
    expect_error("openmpi size without rank", "OMPI_COMM_WORLD_RANK is not");

    clear_env();
    setenv("PMI_RANK", "1", 1);
    setenv("PMI_SIZE", "2", 1);
    setenv("MPI_LOCALRANKID", "1", 1);
    expect_info("mpich", RT_LAUNCH_PMI, 1, 2, 1);
    setenv("PMI_SIZE", "0", 1);
    expect_error("mpich size 0", "PMI_SIZE=0: expected at least 1");
    setenv("PMI_SIZE", "", 1);
    expect_error("mpich empty size", "PMI_SIZE=''");

    clear_env();
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_NTASKS", "8", 1);
    setenv("SLURM_LOCALID", "1", 1);
    expect_info("slurm", RT_LAUNCH_SLURM, 5, 8, 1);
    /* srun's step size wins over the allocation's task count */
    setenv("SLURM_STEP_NUM_TASKS", "6", 1);
    expect_info("slurm step", RT_LAUNCH_SLURM, 5, 6, 1);
    setenv("SLURM_LOCALID", "9", 1);
    expect_error("slurm local rank too big", "SLURM_LOCALID=9 is not below SLURM_STEP_NUM_TASKS=6");
    /* a batch script's own process has SLURM_PROCID but no task count: one process */
    clear_env();
    setenv("SLURM_PROCID", "0", 1);
    expect_info("slurm batch step", RT_LAUNCH_NONE, 0, 1, 0);

    clear_env();
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("MASTER_ADDR", "node0", 1);
    setenv("MASTER_PORT", "29500", 1);
    expect_info("torchrun", RT_LAUNCH_TORCHRUN, 1, 2, 1);
    {
        rt_launch_info info;
        TZ_EXPECT_OK(rt_launch_detect(&info));
        TZ_EXPECT(strcmp(info.master_addr, "node0") == 0 && info.master_port == 29500, "master %s:%d", info.master_addr,
                  info.master_port);
        /* a plain env launch of more than one rank is refused with the way out */
        rt_comm *w = NULL;
        rt_status st = rt_comm_world_init(NULL, NULL, 5.0, &w);
        TZ_EXPECT(st == RT_ERR_UNSUPPORTED && w == NULL, "torchrun world init: %s", rt_status_name(st));
        TZ_EXPECT(strstr(rt_error_message(), "use mpirun or srun") != NULL, "message: %s", rt_error_message());
    }
    setenv("MASTER_PORT", "70000", 1);
    expect_error("torchrun bad port", "MASTER_PORT=70000");
    setenv("MASTER_PORT", "http", 1);
    expect_error("torchrun junk port", "MASTER_PORT='http'");
    unsetenv("MASTER_PORT");
    unsetenv("WORLD_SIZE");
    expect_error("torchrun rank without size", "WORLD_SIZE is not");

    /* one rank, whatever launched it, is rt_comm_self and needs no MPI */
    clear_env();
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    rt_comm *w = NULL;
    TZ_EXPECT_OK(rt_comm_world_init(NULL, NULL, 5.0, &w));
    TZ_EXPECT(w == rt_comm_self(), "world of 1 should be rt_comm_self");
    rt_comm_free(w);
    clear_env();
    TZ_EXPECT_OK(rt_comm_world_init(NULL, NULL, 5.0, &w));
    TZ_EXPECT(w == rt_comm_self(), "no launcher should give rt_comm_self");
    return tz_test_result("test_comm_launch");
}
