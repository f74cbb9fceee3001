/* The point-to-point exercise both communicator tests run (test_comm_threads on threads,
 * test_mpi_comm under mpirun): the ranks form a pipeline, and in every round each rank sends a
 * message to both neighbours and receives one from each in a single batch, as 1F1B's steady
 * state does (activations forward, gradients back), which deadlocks if sends wait for their
 * receives. Two messages to one neighbour in a batch must arrive in the order posted, sizes
 * change from round to round, and every byte is checked against its sender's pattern. */
#ifndef TESTS_COMM_P2P_EXERCISE_H
#define TESTS_COMM_P2P_EXERCISE_H

#include <stdio.h>
#include <string.h>

#include "runtime/comm/rt_comm.h"

/* Byte i of message k (0 or 1 of a pair) of round `round` from rank `from`. */
static inline unsigned char p2p_byte(int from, int round, int k, size_t i) {
    return (unsigned char)(from * 31 + round * 7 + k * 101 + (int)(i % 251));
}

/* Runs the rounds; RT_OK with err "" when all arrived right, else the comm's error or a
 * description of the first wrong byte in err. */
static inline rt_status p2p_exercise(rt_comm *c, int rounds, char *err, size_t err_len) {
    enum { MAXB = 3000 };
    static _Thread_local unsigned char out[2][2][MAXB], in[2][2][MAXB]; /* [neighbour][k] */
    const int r = c->rank, n = c->size;
    err[0] = 0;
    for (int round = 0; round < rounds; round++) {
        rt_p2p ops[8];
        int m = 0;
        const size_t bytes = 1 + (size_t)(round * 977) % MAXB;
        for (int side = 0; side < 2; side++) { /* 0: the previous stage, 1: the next */
            const int peer = side ? r + 1 : r - 1;
            if (peer < 0 || peer >= n) continue;
            for (int k = 0; k < 2; k++) {
                for (size_t i = 0; i < bytes; i++) out[side][k][i] = p2p_byte(r, round, k, i);
                ops[m++] = (rt_p2p){.send = true, .peer = peer, .buf = out[side][k], .bytes = bytes};
                ops[m++] = (rt_p2p){.send = false, .peer = peer, .buf = in[side][k], .bytes = bytes};
            }
        }
        rt_status st = rt_comm_p2p(c, ops, m);
        if (st != RT_OK) return st;
        for (int side = 0; side < 2; side++) {
            const int peer = side ? r + 1 : r - 1;
            if (peer < 0 || peer >= n) continue;
            for (int k = 0; k < 2; k++)
                for (size_t i = 0; i < bytes; i++)
                    if (in[side][k][i] != p2p_byte(peer, round, k, i)) {
                        snprintf(err, err_len, "rank %d round %d: byte %zu of message %d from rank %d is %d, want %d",
                                 r, round, i, k, peer, in[side][k][i], p2p_byte(peer, round, k, i));
                        return RT_OK;
                    }
        }
    }
    return RT_OK;
}

#endif
