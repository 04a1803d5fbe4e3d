// Moving weights in and gradients out for the compute rank: the CPU backend's H2D and D2H.
// A fetch gathers a group's bf16 wire slices from every shard region into one fp32 buffer; an
// offload scatters a group's fp32 gradients into the shards' slots and measures their squared
// norm on the way. Both run on copy streams and overlap compute.
#ifndef MT_TRANSFER_H
#define MT_TRANSFER_H

#include "runtime/job.h"
#include "runtime/stream.h"

typedef struct {
    mt_job *job;
    copy_stream *h2d, *d2h;
    int64_t *version; // [n_shards * n_groups]: wire version each shard announced per group
    double opt_wait_seconds;
    double sumsq_announced; // squared gradient norm of the groups announced so far
} transfer;

typedef struct { // one in-flight fetch into a buffer; the buffer remembers what it holds
    transfer *t;
    float *dst;
    int group;
    int64_t version;
    uint64_t ticket;
} weight_buffer;

typedef struct { // one in-flight offload from a gradient buffer
    transfer *t;
    float *src;
    int group;
    int64_t step;
    double sumsq;
    uint64_t ticket;
    int announced;
} grad_buffer;

void transfer_init(transfer *t, mt_job *job);
void transfer_free(transfer *t);

// Ensures buf holds group g at version v, queueing a fetch if it does not. Waits (counted as
// optimizer wait) until every shard has announced that version.
void fetch_async(transfer *t, weight_buffer *buf, int g, int64_t v);
void fetch_wait(weight_buffer *buf);

// Waits for the buffer's previous offload (and announces it), so it can be refilled.
void offload_reuse(grad_buffer *buf);
void offload_async(transfer *t, grad_buffer *buf, int g, int64_t step);
// Tells the optimizers about every offload that has finished; with wait, waits for all.
void offload_announce(grad_buffer *bufs, int n, int wait);

#endif
