// The state shared by transfer_cuda.c (the weights in, the timing) and grads_out_cuda.c (the
// gradients out): private to those two files.
#ifndef MT_TRANSFER_CUDA_STATE_H
#define MT_TRANSFER_CUDA_STATE_H

#include "kernels/bf16.h"
#include "runtime/engine/buffers.h"
#include "runtime/observe/observe.h"
#include <cuda_runtime.h>
#include <stdint.h>

// Timing events, recorded as work is issued and read once per step (after the device has
// caught up), so that measuring never makes the host wait mid-step.
#define TIMING_PAIRS 2048 // a pair per shard copy: a 7B step with 16 shards needs about 1100

typedef struct {
    cudaEvent_t begin[TIMING_PAIRS], end[TIMING_PAIRS];
    double bytes[TIMING_PAIRS];
    trace_tag tag[TIMING_PAIRS]; // a pair that is also a trace span (name != NULL)
    int used, track;             // track: where its spans go in the trace
    double seconds, total_bytes; // folded from pairs already read
} timing_pool;

// fp32 master elements staged at a time on the way to a bf16 buffer: a few milliseconds of PCIe,
// so the conversion between chunks costs about 1% of the copy.
#define STAGE_ELEMS ((size_t)16 << 20)

struct transfer_cuda {
    cudaStream_t compute, h2d, d2h;
    void *reduce_scratch;
    float *stage;                     // [STAGE_ELEMS], used in stream order on h2d
    uint16_t *copy_pinned;            // storage.master: a page-rounded bf16 piece, read from disk
    timing_pool h2d_t, d2h_t, busy_t; // busy_t: compute-stream segments between waits
    timing_pool span_t;               // the trace's compute spans (traced steps only)
    int segment_open, span_open;
    int optimizer_waited; // the next busy segment begins after a wait on the optimizers
    int open_marked;      // the open segment began right after one (no compute queued in it)
    double opt_stall_seconds;
    // When the busy pool is folded mid-step, `carry` stands in for the last folded segment's
    // end, carry_ms after it, so that slot 0's gap can still be measured.
    cudaEvent_t carry;
    float carry_ms;
    int carry_valid;
    // A reference event and the host time it ran at: a GPU event's host time is ref_host_us
    // plus the GPU time elapsed from ref to it. Set at the start of each traced step.
    cudaEvent_t ref;
    double ref_host_us;
    int ref_valid;
    // storage.grads on one node: the device (the tier's thread sets it), the stream its copies
    // go on, two pinned pieces in the slots' dtype, each with the event of its copy's landing
    int device;
    cudaStream_t tier;
    void *tier_pinned[2];
    cudaEvent_t tier_landed[2];
    // bf16 gradient slots: the gradients that leave are rounded a piece at a time, on their own
    // stream, into two device pieces of out_numel (plan_grad_out_piece), each copied out on d2h
    // while the other is rounded: never a whole layer's bf16 copy beside its fp32 sums. A
    // piece's events: rounded (on `round`) and copied (on d2h), before it is rounded into again.
    cudaStream_t round;
    bf16 *out_piece[2];
    cudaEvent_t rounded[2], copied[2];
    uint64_t out_numel;
    unsigned out_next; // the piece the next round goes into (alternating)
};

// A free timing pair of the pool (folding it first when it is full).
int xfer_cuda_pool_slot(transfer_cuda *x, timing_pool *p);
// Pinned host memory for the tier's O_DIRECT reads and writes: page-aligned and page-rounded
// (cudaMallocHost promises 256 bytes of alignment only), then registered with CUDA.
void *xfer_cuda_pinned_pages(size_t bytes);
void xfer_cuda_pinned_pages_free(void *p);

#endif
