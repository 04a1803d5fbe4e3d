// The gradients' way out of the device (transfer_cuda.c brings the weights in): into the shards'
// slots on the d2h stream, rounded a piece at a time for bf16 slots; over nodes, staged whole for
// the copy thread's sum; with storage.grads on one node, a piece at a time into the tier's files.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"
#include "runtime/engine/transfer_cuda.h"
#include "runtime/engine/transfer_cuda_state.h"
#include "runtime/engine/transfer_tier.h"
#include "runtime/plan/plan.h"
#include "shm/syscheck.h"
#include <stdlib.h>

// Two pinned pieces; their events block rather than spin: the thread waits on each piece's copy.
static void tier_init(transfer_cuda *x, mt_job *job) {
    CUDA_CHECK(cudaGetDevice(&x->device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&x->tier, cudaStreamNonBlocking));
    for (int i = 0; i < 2; i++) {
        x->tier_pinned[i] =
            xfer_cuda_pinned_pages(transfer_tier_grads_piece(job) * job->grad_bytes);
        CUDA_CHECK(cudaEventCreateWithFlags(&x->tier_landed[i],
                                            cudaEventDisableTiming | cudaEventBlockingSync));
    }
}

static void tier_free(transfer_cuda *x) {
    if (!x->tier) return;
    for (int i = 0; i < 2; i++) {
        xfer_cuda_pinned_pages_free(x->tier_pinned[i]);
        CUDA_CHECK(cudaEventDestroy(x->tier_landed[i]));
    }
    CUDA_CHECK(cudaStreamDestroy(x->tier));
}

// bf16 slots: the two rounding pieces, made before anything else takes the device's memory (the
// plan counts them among the transfer's buffers); not over nodes, whose sums are rounded on the
// host (plan_leaving_bytes).
void xfer_cuda_out_init(transfer_cuda *x, mt_job *job) {
    if (plan_leaving_bytes(job->grad_bytes, job->nodes) == 2) {
        x->out_numel = plan_grad_out_piece(&job->cfg.model, job->device_groups);
        CUDA_CHECK(cudaStreamCreateWithFlags(&x->round, cudaStreamNonBlocking));
        for (int i = 0; i < 2; i++) {
            CUDA_CHECK(cudaMalloc((void **)&x->out_piece[i], x->out_numel * sizeof(bf16)));
            CUDA_CHECK(cudaEventCreateWithFlags(&x->rounded[i], cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreateWithFlags(&x->copied[i], cudaEventDisableTiming));
        }
    }
    if (job->cfg.storage_grads && job->nodes == 1) tier_init(x, job);
}

void xfer_cuda_out_free(transfer_cuda *x) {
    CUDA_CHECK(cudaDeviceSynchronize());
    tier_free(x);
    if (!x->round) return;
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaFree(x->out_piece[i]));
        CUDA_CHECK(cudaEventDestroy(x->rounded[i]));
        CUDA_CHECK(cudaEventDestroy(x->copied[i]));
    }
    CUDA_CHECK(cudaStreamDestroy(x->round));
}

// A timed stretch of the D2H stream: what it copies of `group`, `bytes` in all.
static void d2h_timed_begin(transfer_cuda *x, int group, double bytes) {
    int slot = xfer_cuda_pool_slot(x, &x->d2h_t);
    CUDA_CHECK(cudaEventRecord(x->d2h_t.begin[slot], x->d2h));
    x->d2h_t.bytes[slot] = bytes;
    x->d2h_t.tag[slot] = trace_tag_of("d2h", TRACE_ARG_GROUP, group);
}
static void d2h_timed_end(transfer_cuda *x) {
    CUDA_CHECK(cudaEventRecord(x->d2h_t.end[x->d2h_t.used++], x->d2h));
}

// Piece j of the leaving gradients [from, from + n) of the device's fp32 sums: rounded on the
// round stream into device piece j % 2 (once its last copy has left), then copied to `to` on
// d2h, so that the rounding of one piece runs beside the copy of the other.
static void round_and_copy(transfer_cuda *x, const float *from, uint64_t n, void *to) {
    unsigned j = x->out_next++ % 2;
    CUDA_CHECK(cudaStreamWaitEvent(x->round, x->copied[j], 0));
    cuda_float_to_bf16(x->out_piece[j], from, (long)n, x->round);
    CUDA_CHECK(cudaEventRecord(x->rounded[j], x->round));
    CUDA_CHECK(cudaStreamWaitEvent(x->d2h, x->rounded[j], 0));
    CUDA_CHECK(
        cudaMemcpyAsync(to, x->out_piece[j], n * sizeof(bf16), cudaMemcpyDeviceToHost, x->d2h));
    CUDA_CHECK(cudaEventRecord(x->copied[j], x->d2h));
}

// Shard k's slice of the group into its slot: as it is (fp32 slots), or a piece at a time
// through the rounding pieces (bf16).
static void copy_slice_out(transfer_cuda *x, mt_job *job, const grad_buffer *buf, int k) {
    int g = buf->group;
    const float *from = buf->src + job->layouts[k].lo[g];
    uint64_t n = job->layouts[k].len[g];
    char *slot = job_grad_slot(job, k, g);
    if (job->grad_bytes == 4) {
        CUDA_CHECK(cudaMemcpyAsync(slot, from, n * sizeof(float), cudaMemcpyDeviceToHost, x->d2h));
        return;
    }
    for (uint64_t at = 0; at < n; at += x->out_numel) {
        uint64_t len = n - at < x->out_numel ? n - at : x->out_numel;
        round_and_copy(x, from + at, len, slot + at * sizeof(bf16));
    }
}

// Right behind the compute that makes the gradients: their norm (from the fp32 sums, before any
// rounding; a group that stays is rounded in place for its bf16 slots), and the event the copy
// out waits for, which so waits for nothing queued after them.
void xfer_cuda_offload_ready(transfer *t, grad_buffer *buf) {
    transfer_cuda *x = t->cuda;
    mt_job *job = t->job;
    long numel = (long)job->group_numel[buf->group];
    cuda_sum_squares(buf->sumsq_dev, buf->src, numel, x->reduce_scratch, x->compute);
    if (job->grad_bytes == 2 && buf->stays) cuda_round_bf16(buf->src, numel, x->compute);
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)buf->done, x->compute));
}

// The gradients into the shards' slots, timed; the buffer's event then follows the last copy
// (and so every rounding, which read the sums before it).
void xfer_cuda_offload(transfer *t, grad_buffer *buf) {
    transfer_cuda *x = t->cuda;
    mt_job *job = t->job;
    CUDA_CHECK(cudaStreamWaitEvent(x->d2h, (cudaEvent_t)buf->done, 0));
    if (!buf->stays) {
        if (job->grad_bytes == 2)
            CUDA_CHECK(cudaStreamWaitEvent(x->round, (cudaEvent_t)buf->done, 0));
        d2h_timed_begin(x, buf->group, (double)job->group_numel[buf->group] * job->grad_bytes);
        for (int k = 0; k < job->n_shards; k++) copy_slice_out(x, job, buf, k);
        d2h_timed_end(x);
    }
    CUDA_CHECK(cudaMemcpyAsync(buf->sumsq_host, buf->sumsq_dev, sizeof(double),
                               cudaMemcpyDeviceToHost, x->d2h));
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)buf->done, x->d2h));
}

void xfer_cuda_stage(transfer *t, grad_buffer *buf) {
    transfer_cuda *x = t->cuda;
    size_t bytes = t->job->group_numel[buf->group] * sizeof(float);
    if (!buf->staged) CUDA_CHECK(cudaMallocHost((void **)&buf->staged, bytes));
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)buf->done, x->compute));
    CUDA_CHECK(cudaStreamWaitEvent(x->d2h, (cudaEvent_t)buf->done, 0));
    d2h_timed_begin(x, buf->group, (double)bytes);
    CUDA_CHECK(cudaMemcpyAsync(buf->staged, buf->src, bytes, cudaMemcpyDeviceToHost, x->d2h));
    d2h_timed_end(x);
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)buf->done, x->d2h));
}

// The pieces of group g's shard slices, in shard order: shard k's elements [at, at + n).
typedef struct {
    int k;
    uint64_t at, n;
} tier_piece;

static tier_piece *tier_pieces(const mt_job *job, int g, int *count) {
    uint64_t piece = transfer_tier_grads_piece(job);
    int n = 0;
    for (int k = 0; k < job->n_shards; k++)
        n += (int)((job->layouts[k].len[g] + piece - 1) / piece);
    tier_piece *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    if (!p) mt_die("out of memory");
    n = 0;
    for (int k = 0; k < job->n_shards; k++)
        for (uint64_t at = 0, len = job->layouts[k].len[g]; at < len; at += piece)
            p[n++] = (tier_piece){k, at, len - at < piece ? len - at : piece};
    *count = n;
    return p;
}

// Piece j's copy from the device into pinned piece j % 2, on the tier's stream: fp32 as it is,
// or rounded into device piece j % 2 first (the tier's pieces are no larger than those: one
// stream orders a device piece's rounding after its last copy).
static void tier_copy(transfer_cuda *x, const mt_job *job, const float *from, int g,
                      const tier_piece *p, int j) {
    const float *src = from + job->layouts[p[j].k].lo[g] + p[j].at;
    size_t es = (size_t)job->grad_bytes;
    const void *out = src;
    if (es == 2) {
        cuda_float_to_bf16(x->out_piece[j % 2], src, (long)p[j].n, x->tier);
        out = x->out_piece[j % 2];
    }
    CUDA_CHECK(
        cudaMemcpyAsync(x->tier_pinned[j % 2], out, p[j].n * es, cudaMemcpyDeviceToHost, x->tier));
    CUDA_CHECK(cudaEventRecord(x->tier_landed[j % 2], x->tier));
}

// Each piece is written to its shard's file while the next one crosses PCIe. The norm was
// measured on the device (xfer_cuda_offload_ready), as without the tier: the same bits.
void xfer_cuda_offload_tier(transfer *t, grad_buffer *buf) {
    transfer_cuda *x = t->cuda;
    mt_job *job = t->job;
    int g = buf->group, n = 0;
    CUDA_CHECK(cudaSetDevice(x->device)); // this thread's calls go to the engine's device
    CUDA_CHECK(cudaStreamWaitEvent(x->tier, (cudaEvent_t)buf->done, 0));
    if (!buf->stays) {
        const float *from = buf->src;
        tier_piece *p = tier_pieces(job, g, &n);
        if (n > 0) tier_copy(x, job, from, g, p, 0);
        for (int j = 0; j < n; j++) {
            CUDA_CHECK(cudaEventSynchronize(x->tier_landed[j % 2]));
            if (j + 1 < n) tier_copy(x, job, from, g, p, j + 1);
            transfer_tier_write_piece(t, p[j].k, g, p[j].at, p[j].n, buf->step,
                                      x->tier_pinned[j % 2]);
        }
        free(p);
    }
    CUDA_CHECK(cudaMemcpyAsync(buf->sumsq_host, buf->sumsq_dev, sizeof(double),
                               cudaMemcpyDeviceToHost, x->tier));
    CUDA_CHECK(cudaStreamSynchronize(x->tier));
    buf->sumsq = *buf->sumsq_host;
}

void xfer_cuda_staged_wait(grad_buffer *buf) {
    CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)buf->done));
}

int xfer_cuda_offload_landed(grad_buffer *buf, int wait) {
    cudaEvent_t ev = (cudaEvent_t)buf->done;
    if (wait) {
        xfer_cuda_host_blocks(buf->t->cuda, 1);
        CUDA_CHECK(cudaEventSynchronize(ev));
        xfer_cuda_host_blocks(buf->t->cuda, 0);
    } else {
        cudaError_t rc = cudaEventQuery(ev);
        if (rc == cudaErrorNotReady) return 0;
        CUDA_CHECK(rc);
    }
    buf->sumsq = *buf->sumsq_host;
    return 1;
}
