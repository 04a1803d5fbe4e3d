// Moving weights in and gradients out for the compute rank. A fetch gathers a group's fp32
// master slices from every shard region into one buffer of the backend, rounded to bf16; an
// offload scatters a group's gradients into the shards' slots (fp32, or rounded once to bf16),
// with the group's squared norm measured (in fp32) on the way. Both overlap compute: on the CPU
// backend they run on copy-stream threads (with the roundings), on the CUDA backend as DMA on
// the H2D and D2H streams, ordered against the compute stream with events.
#ifndef MT_TRANSFER_H
#define MT_TRANSFER_H

#include "runtime/engine/buffers.h"

// Waits for the device, then returns and resets the counters (transfer_stats: observe.h).
transfer_stats transfer_take_stats(transfer *t);

// compute_stream: the CUDA backend's compute stream (cudaStream_t), or NULL for the CPU.
void transfer_init(transfer *t, mt_job *job, void *compute_stream);
void transfer_free(transfer *t);
void weight_buffer_init(transfer *t, weight_buffer *buf, void *dst);
void grad_buffer_init(transfer *t, grad_buffer *buf, float *src);
void buffers_free(transfer *t, weight_buffer *w, int nw, grad_buffer *g, int ng);

// Ensures buf holds group g at version v, queueing a fetch if it does not. Waits (counted as
// optimizer wait) until every shard has announced that version.
void fetch_async(transfer *t, weight_buffer *buf, int g, int64_t v);
// Blocks for the optimizers' next announcement and records it (the watchdog names `what` and
// rank `from`, -1 for any, should none come); how many groups every shard has announced at
// version v (for the progress of the optimizers' start).
void transfer_receive(transfer *t, const char *what, int from);
int transfer_groups_ready(transfer *t, int64_t v);
// Compute may use the buffer from here on (CPU: waits; CUDA: orders the compute stream).
void fetch_wait(weight_buffer *buf);
// Compute has issued its last use of the buffer; a later fetch may overwrite it.
void buffer_done(weight_buffer *buf);

// Waits for the buffer's previous offload (and announces it, after every offload issued
// before it), so it can be refilled.
void offload_reuse(grad_buffer *buf);
// The compute that fills buf with group g's gradients is queued; on CUDA, what the copy out
// waits for goes right behind it, so that a later offload_async (after more compute is queued)
// still starts the copy as soon as these gradients are done. Optional: offload_async does it
// otherwise.
void offload_ready(transfer *t, grad_buffer *buf, int g);
void offload_async(transfer *t, grad_buffer *buf, int g, int64_t step);
// Tells the optimizers about the offloads that have finished, in the order they were issued
// (the backward's, on every node): up to the first one still in flight.
void offload_announce(transfer *t);

// ---- the trace (runtime/observe/observe.h) ----

// At the start of every step, after trace_set_step: on CUDA, a traced step first ties the
// GPU's clock to the host's, so its GPU spans can be placed on the host timeline.
void transfer_trace_step(transfer *t);
// A compute span around work the host issues: host clock on the CPU backend; on CUDA, events
// on the compute stream, read (as GPU times) when transfer_take_stats has synchronized.
// Spans do not nest; both do nothing when the step is not traced.
void transfer_span_begin(transfer *t);
void transfer_span_end(transfer *t, trace_tag tag);

#endif
