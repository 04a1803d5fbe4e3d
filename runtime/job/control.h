// The control plane: small per-layer event messages between the compute rank and the
// optimizer ranks, over UCX active messages (UCX picks shared-memory transports on one node,
// network transports across nodes). Bulk data never travels here: it stays in shared memory.
// Part of job/'s face (job.h includes it), in a file of its own so that a test can build
// control.c alone.
#ifndef MT_CONTROL_H
#define MT_CONTROL_H

#include <mpi.h>
#include <stdint.h>

enum {
    CONTROL_GRADS_READY = 1, // compute -> optimizer: gradients of `group` for `step` are in
                             // shm (storage.grads: in the optimizer's gradients file)
    CONTROL_WEIGHTS_READY,   // optimizer -> compute: master weights of `group` are at `step`
    CONTROL_STOP,            // compute -> optimizer: end the job after step `step` (a request)
};

typedef struct {
    int32_t kind;
    int32_t group;
    int64_t step;
    double value; // CONTROL_GRADS_READY: the group's squared gradient norm
} control_msg;

typedef struct mt_control mt_control;

// Collective over comm: every rank creates a UCP worker, the worker addresses are exchanged
// over MPI, and rank 0 gets an endpoint to every other rank and each of them one to rank 0.
mt_control *control_init(MPI_Comm comm);
// Queues msg for dest; returns at once (the message is copied). Messages from one sender to
// one receiver arrive in the order sent.
void control_send(mt_control *ctl, int dest, const control_msg *msg);
// Blocks until a message arrives, sleeping in the kernel rather than spinning, so that idle
// ranks leave the cores to busy ones. Returns the sender's rank.
int control_recv(mt_control *ctl, control_msg *msg);
// Like control_recv, but -1 when nothing has arrived within `seconds` (the watchdog's wait).
int control_recv_within(mt_control *ctl, control_msg *msg, double seconds);
// Like control_recv but returns -1 at once when nothing has arrived.
int control_try_recv(mt_control *ctl, control_msg *msg);
// Collective: waits for outstanding sends, closes endpoints and frees everything.
void control_finalize(mt_control *ctl);

#endif
