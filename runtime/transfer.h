// Moving weights in and gradients out for the compute rank. A fetch gathers a group's bf16
// wire slices from every shard region into one buffer of the backend; an offload scatters a
// group's fp32 gradients into the shards' slots, with the group's squared norm measured on
// the way. Both overlap compute: on the CPU backend they run on copy-stream threads (with the
// bf16 -> fp32 conversion), on the CUDA backend as DMA on the H2D and D2H streams, ordered
// against the compute stream with events.
#ifndef MT_TRANSFER_H
#define MT_TRANSFER_H

#include "runtime/job.h"
#include "runtime/stream.h"

typedef struct transfer_cuda transfer_cuda;

typedef struct {
    mt_job *job;
    copy_stream *h2d, *d2h; // CPU backend
    transfer_cuda *cuda;    // CUDA backend (NULL on the CPU backend)
    int64_t *version;       // [n_shards * n_groups]: wire version each shard announced
    unsigned char *taken;   // [n_shards]: scratch of wait_version, shards already copied
    uint64_t tickets;       // offloads issued, for announcing them in order
    double opt_wait_seconds;
    double *group_sumsq;                 // [n_groups]: each group's last announced squared norm
    double cpu_h2d_bytes, cpu_d2h_bytes; // CPU backend: bytes copied since the last stats
    double span_begin_us;                // CPU backend: start of the open compute span
} transfer;

// What the copy engines and the compute stream did since the last call (CUDA backend; on the
// CPU backend only the copy times are known; compute_busy_seconds and opt_stall_seconds are
// negative).
typedef struct {
    double h2d_seconds, h2d_bytes, d2h_seconds, d2h_bytes;
    double compute_busy_seconds, compute_span_seconds;
    double opt_stall_seconds; // compute-stream idle while the host waited on the optimizers
} transfer_stats;

// Waits for the device, then returns and resets the counters.
transfer_stats transfer_take_stats(transfer *t);

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
    int stays;  // a group the compute rank updates itself: only its norm is measured and announced
    void *done; // CUDA event: the offload landed
    double *sumsq_dev, *sumsq_host;
} grad_buffer;

// compute_stream: the CUDA backend's compute stream (cudaStream_t), or NULL for the CPU.
void transfer_init(transfer *t, mt_job *job, void *compute_stream);
void transfer_free(transfer *t);
void weight_buffer_init(transfer *t, weight_buffer *buf, void *dst);
void grad_buffer_init(transfer *t, grad_buffer *buf, float *src);
void buffers_free(transfer *t, weight_buffer *w, int nw, grad_buffer *g, int ng);

// Ensures buf holds group g at version v, queueing a fetch if it does not. Waits (counted as
// optimizer wait) until every shard has announced that version.
void fetch_async(transfer *t, weight_buffer *buf, int g, int64_t v);
// Blocks for the optimizers' next announcement and records it; how many groups every shard
// has announced at version v (for the progress of the optimizers' start).
void transfer_receive(transfer *t);
int transfer_groups_ready(transfer *t, int64_t v);
// Compute may use the buffer from here on (CPU: waits; CUDA: orders the compute stream).
void fetch_wait(weight_buffer *buf);
// Compute has issued its last use of the buffer; a later fetch may overwrite it.
void buffer_done(weight_buffer *buf);

// Waits for the buffer's previous offload (and announces it), so it can be refilled.
void offload_reuse(grad_buffer *buf);
void offload_async(transfer *t, grad_buffer *buf, int g, int64_t step);
// Tells the optimizers about every offload that has finished; with wait, waits for all.
void offload_announce(grad_buffer *bufs, int n, int wait);

// ---- the trace (runtime/trace.h) ----

// At the start of every step, after trace_set_step: on CUDA, a traced step first ties the
// GPU's clock to the host's, so its GPU spans can be placed on the host timeline.
void transfer_trace_step(transfer *t);
// A compute span around work the host issues: host clock on the CPU backend; on CUDA, events
// on the compute stream, read (as GPU times) when transfer_take_stats has synchronized.
// Spans do not nest; both do nothing when the step is not traced.
void transfer_span_begin(transfer *t);
void transfer_span_end(transfer *t, trace_tag tag);

#endif
