// The state that transfer.c and its CUDA half, transfer_cuda.c, share: the transfer itself and
// the streaming buffers, which remember what they hold. Types only, so that the two halves
// depend on this and not on each other.
#ifndef MT_BUFFERS_H
#define MT_BUFFERS_H

#include "runtime/engine/stream.h"
#include "runtime/job/job.h"
#include "runtime/observe/observe.h"

typedef struct transfer_cuda transfer_cuda;

typedef struct {
    mt_job *job;
    copy_stream *h2d, *d2h; // CPU backend; d2h also on CUDA over nodes (the sums over nodes)
    transfer_cuda *cuda;    // CUDA backend (NULL on the CPU backend)
    int64_t *version;       // [n_shards * n_groups]: weights version each shard announced
    unsigned char *taken;   // [n_shards]: scratch of wait_version, shards already copied
    uint64_t tickets;       // offloads issued, for announcing them in order
    double opt_wait_seconds;
    double *group_sumsq;                 // [n_groups]: each group's last announced squared norm
    double cpu_h2d_bytes, cpu_d2h_bytes; // CPU backend: bytes copied since the last stats
    double span_begin_us;                // CPU backend: start of the open compute span
    float *node_scratch;                 // CPU backend over nodes: the largest group, for sums
    struct grad_buffer **grads;          // [n_grads]: every gradient buffer, for the ring's waits
    int n_grads;
    // storage.master (transfer_tier.c): each shard's bf16 copy, opened when first needed; a
    // piece to read it through; the pieces taken from the weight ring and from the copy
    int *copy_fd;
    uint16_t *copy_bounce;
    int64_t ring_hits, copy_reads;
    // storage.grads (transfer_tier.c): each shard's gradients file, opened when first written; a
    // piece in the slots' dtype to write from (host sources); tests (-1: none):
    // MT_TEST_STORAGE_FULL_AT_STEP's step, MT_TEST_STORAGE_KILL_COMPUTE_AT_STEP's
    int *grads_fd;
    void *grads_bounce;
    int64_t full_at_step, kill_at_step;
    // the compute rank's own bytes read [0] (the copy) and written [1] (gradients) in
    // storage.dir, added to by the copy threads; and every rank's totals at the last stats
    uint64_t tier_bytes[2];
    double disk_seen[2];
} transfer;

typedef struct weight_buffer { // a buffer remembers which group and version it holds
    transfer *t;
    void *dst;
    int group;
    int64_t version;
    uint64_t ticket;    // CPU: copy-stream ticket; CUDA: nonzero once filled
    void *ready, *free; // CUDA events: fetch landed / compute done with the buffer
} weight_buffer;

typedef struct grad_buffer {
    transfer *t;
    float *src;
    int group;
    int64_t step;
    double sumsq;
    uint64_t ticket, order;
    int announced;
    int ready;  // CUDA: offload_ready queued the norm and the event the copy out waits for
    int stays;  // a group the compute rank updates itself: only its norm is measured and announced
    void *done; // CUDA event: the offload landed
    double *sumsq_dev, *sumsq_host;
    float *staged; // CUDA over nodes: the group's fp32 sums in pinned host memory
} grad_buffer;

#endif
