// The CUDA side of transfer.c: registered shared regions, DMA on the H2D/D2H streams, events.
#ifndef MT_TRANSFER_CUDA_H
#define MT_TRANSFER_CUDA_H

#include "runtime/engine/buffers.h"

transfer_cuda *xfer_cuda_new(mt_job *job, void *compute_stream);
void xfer_cuda_free(transfer_cuda *x, mt_job *job);
// The gradients' way out (grads_out_cuda.c): the pieces bf16 slots are rounded through and the
// tier's, made right after xfer_cuda_new and freed before xfer_cuda_free.
void xfer_cuda_out_init(transfer_cuda *x, mt_job *job);
void xfer_cuda_out_free(transfer_cuda *x);
void xfer_cuda_weight_init(weight_buffer *buf);
void xfer_cuda_grad_init(grad_buffer *buf);
void xfer_cuda_buffers_free(weight_buffer *w, int nw, grad_buffer *g, int ng);
// A fetch: begin (after the buffer's last reader), one copy per shard as it becomes ready, end.
void xfer_cuda_fetch_begin(transfer *t, weight_buffer *buf);
void xfer_cuda_fetch_shard(transfer *t, weight_buffer *buf, int k);
// storage.master: the whole group, a piece at a time (transfer_tier.h), in place of the shards'
// slices; it waits for the pieces itself.
void xfer_cuda_fetch_tier(transfer *t, weight_buffer *buf);
void xfer_cuda_fetch_end(weight_buffer *buf);
void xfer_cuda_fetch_wait(weight_buffer *buf);
void xfer_cuda_buffer_done(weight_buffer *buf);
void xfer_cuda_offload_ready(transfer *t, grad_buffer *buf);
void xfer_cuda_offload(transfer *t, grad_buffer *buf);
// Data parallel: the group's fp32 sums leave whole for buf->staged (pinned, made at the buffer's
// first offload), where the copy thread sums them over nodes; staged_wait waits for them there.
void xfer_cuda_stage(transfer *t, grad_buffer *buf);
void xfer_cuda_staged_wait(grad_buffer *buf);
// storage.grads on one node, on the tier's copy thread: the group's gradients (after
// xfer_cuda_offload_ready) into the optimizer ranks' files a piece at a time, and its norm.
void xfer_cuda_offload_tier(transfer *t, grad_buffer *buf);
// 1 when the offload has landed (with wait: after waiting for it); sumsq is then valid.
int xfer_cuda_offload_landed(grad_buffer *buf, int wait);
transfer_stats xfer_cuda_take_stats(transfer_cuda *x);
// blocking = 1 before the host thread blocks, 0 after: brackets the compute-stream timing.
void xfer_cuda_host_blocks(transfer_cuda *x, int blocking);
// The same around a wait on the optimizers' weights, whose compute-stream stall is counted.
void xfer_cuda_optimizer_blocks(transfer_cuda *x, int blocking);
// The trace: tie the GPU clock to the host's (device idle), and compute-stream spans.
void xfer_cuda_trace_calibrate(transfer_cuda *x);
void xfer_cuda_span_begin(transfer_cuda *x);
void xfer_cuda_span_end(transfer_cuda *x, trace_tag tag);

#endif
