/* The pipeline executor (runtime/train/rt_pipe.h) across processes: every rank is one stage of the
 * toy pipeline (tests/pipe_toy.h) over the grid's pp comm, with activations of 128 KiB to
 * 384 KiB, past OpenMPI's eager limit, so a send waits for its receive: the batching of each
 * send with the next receive is what keeps neighbours that send to each other at once from
 * deadlocking. Each stage must end with the gradients of running the whole pipeline in one
 * process, bit for bit, and the last stage with its loss. */
#include <stdio.h>
#include <string.h>

#include "runtime/comm/rt_grid.h"
#include "runtime/comm/rt_launch.h"
#include "runtime/train/rt_pipe.h"
#include "tests/pipe_toy.h"
#include "tests/testutil.h"

enum { K = 32768, M = 6 };

int main(int argc, char **argv) {
    rt_comm *w = NULL;
    TZ_EXPECT_OK(rt_comm_world_init(&argc, &argv, 60.0, &w));
    if (!w) return tz_test_result("test_mpi_pipe");
    rt_grid g;
    TZ_EXPECT_OK(rt_grid_init(w, 1, w->size, &g));
    const int P = g.pp_size, s = g.pp_rank;
    toy_stage *ref = malloc((size_t)P * sizeof *ref), mine;
    for (int k = 0; k < P; k++) toy_init(&ref[k], k, P, K);
    toy_reference(ref, P, M);
    toy_init(&mine, s, P, K);
    rt_pipe_stage st = toy_pipe_stage(&mine);
    const size_t bytes = (size_t)3 * K * sizeof(float);
    rt_pipe_buffers b = {malloc(bytes), malloc(bytes), malloc(bytes), malloc(bytes)};
    TZ_EXPECT_OK(rt_pipe_run(g.pp, M, &st, &b));
    TZ_EXPECT(mine.forwards == M && mine.backwards == M, "stage %d: %d forwards, %d backwards", s, mine.forwards,
              mine.backwards);
    TZ_EXPECT(memcmp(mine.dw, ref[s].dw, K * sizeof(float)) == 0, "stage %d: gradients differ from one process's", s);
    if (s == P - 1)
        TZ_EXPECT(mine.loss == ref[s].loss, "last stage: loss %.17g, one process %.17g", mine.loss, ref[s].loss);
    free(b.in), free(b.out), free(b.dout), free(b.din);
    toy_free(&mine);
    for (int k = 0; k < P; k++) toy_free(&ref[k]);
    free(ref);
    rt_grid_free(&g);
    rt_comm_free(w);
    rt_comm_mpi_finalize();
    return tz_test_result("test_mpi_pipe");
}
