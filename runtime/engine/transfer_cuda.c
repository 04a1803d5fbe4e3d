// CUDA transfers: the shared regions are registered with CUDA so DMA reads the fp32 master
// weights and writes the gradient slots in place. The master lands in a small staging area
// and is rounded to bf16 on the GPU; bf16 gradient slots are filled from pieces rounded on the
// GPU (grads_out_cuda.c, the gradients' way out), so each direction moves what the host keeps
// and nothing more. The host thread only issues copies and records events; it blocks on the GPU
// only when a gradient buffer is reused or an offload must be announced.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernels_cuda.h"
#include "runtime/engine/transfer_cuda.h"
#include "runtime/engine/transfer_cuda_state.h"
#include "runtime/engine/transfer_tier.h"
#include "shm/syscheck.h"
#include <stdlib.h>
#include <string.h>

static void pool_init(timing_pool *p, int track) {
    memset(p, 0, sizeof *p);
    p->track = track;
    for (int i = 0; i < TIMING_PAIRS; i++) {
        CUDA_CHECK(cudaEventCreate(&p->begin[i]));
        CUDA_CHECK(cudaEventCreate(&p->end[i]));
    }
}

static void pool_destroy(timing_pool *p) {
    for (int i = 0; i < TIMING_PAIRS; i++) {
        CUDA_CHECK(cudaEventDestroy(p->begin[i]));
        CUDA_CHECK(cudaEventDestroy(p->end[i]));
    }
}

static double host_us(const transfer_cuda *x, cudaEvent_t ev) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, x->ref, ev));
    return x->ref_host_us + ms * 1e3;
}

// Reads every recorded pair, and hands those that are trace spans to the trace in host time;
// the caller has synchronized the device.
static void pool_fold(const transfer_cuda *x, timing_pool *p) {
    for (int i = 0; i < p->used; i++) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, p->begin[i], p->end[i]));
        p->seconds += ms * 1e-3;
        p->total_bytes += p->bytes[i];
        if (p->tag[i].name && x->ref_valid)
            trace_record(p->track, p->tag[i], host_us(x, p->begin[i]), host_us(x, p->end[i]));
    }
    p->used = 0;
}

// The pool is full only in long non-training phases (sampling text), or in a step of a model
// with hundreds of layers: fold it early.
static double opt_stall(const transfer_cuda *x);

int xfer_cuda_pool_slot(transfer_cuda *x, timing_pool *p) {
    if (p->used == TIMING_PAIRS) {
        CUDA_CHECK(cudaDeviceSynchronize());
        if (p == &x->busy_t) {
            x->opt_stall_seconds += opt_stall(x);
            CUDA_CHECK(cudaEventRecord(x->carry, x->compute)); // the stream is idle: runs now
            CUDA_CHECK(cudaEventSynchronize(x->carry));
            CUDA_CHECK(cudaEventElapsedTime(&x->carry_ms, p->end[p->used - 1], x->carry));
            x->carry_valid = 1;
        }
        pool_fold(x, p);
    }
    return p->used;
}

static void segment_end(transfer_cuda *x);

static void segment_begin(transfer_cuda *x) {
    segment_end(x);
    int i = xfer_cuda_pool_slot(x, &x->busy_t);
    x->busy_t.tag[i].name = NULL;
    x->busy_t.bytes[i] = x->open_marked = x->optimizer_waited; // a mark, read by opt_stall
    x->optimizer_waited = 0;
    CUDA_CHECK(cudaEventRecord(x->busy_t.begin[i], x->compute));
    x->segment_open = 1;
}

static void segment_end(transfer_cuda *x) {
    if (!x->segment_open) return;
    CUDA_CHECK(cudaEventRecord(x->busy_t.end[x->busy_t.used++], x->compute));
    x->segment_open = 0;
}

// The host is about to block (on the optimizers or the device): what the compute stream does
// until the host issues more work is not busy time, so the segment ends here.
void xfer_cuda_host_blocks(transfer_cuda *x, int blocking) {
    if (blocking)
        segment_end(x);
    else
        segment_begin(x);
}

void xfer_cuda_optimizer_blocks(transfer_cuda *x, int blocking) {
    x->optimizer_waited = !blocking;
    xfer_cuda_host_blocks(x, blocking);
}

// The compute stream's idle time while the host waited on the optimizers: from the end of the
// work queued before the wait to the start of the first work queued after it (a weight copy
// that could only start once the optimizer was done included: fetch_wait passes the mark on).
// When the queue outlasted the wait, the second event follows the first at once and the gap
// is zero; this is the stall the optimizers cause, which the host's own wait overstates.
static double opt_stall(const transfer_cuda *x) {
    const timing_pool *busy = &x->busy_t;
    double seconds = 0;
    for (int i = 0; i < busy->used; i++) {
        if (!busy->bytes[i] || (i == 0 && !x->carry_valid)) continue;
        float ms = 0;
        if (i == 0) {
            CUDA_CHECK(cudaEventElapsedTime(&ms, x->carry, busy->begin[0]));
            ms += x->carry_ms;
        } else {
            CUDA_CHECK(cudaEventElapsedTime(&ms, busy->end[i - 1], busy->begin[i]));
        }
        seconds += ms * 1e-3;
    }
    return seconds;
}
transfer_stats xfer_cuda_take_stats(transfer_cuda *x) {
    segment_end(x);
    CUDA_CHECK(cudaDeviceSynchronize());
    transfer_stats st = {0};
    // The span runs from the first segment's start to the last one's end.
    if (x->busy_t.used > 0) {
        float ms = 0;
        CUDA_CHECK(
            cudaEventElapsedTime(&ms, x->busy_t.begin[0], x->busy_t.end[x->busy_t.used - 1]));
        st.compute_span_seconds = ms * 1e-3;
    }
    st.opt_stall_seconds = x->opt_stall_seconds + opt_stall(x);
    x->opt_stall_seconds = 0, x->carry_valid = 0;
    timing_pool *pools[] = {&x->h2d_t, &x->d2h_t, &x->busy_t, &x->span_t};
    for (int i = 0; i < 4; i++) pool_fold(x, pools[i]);
    st.h2d_seconds = x->h2d_t.seconds, st.h2d_bytes = x->h2d_t.total_bytes;
    st.d2h_seconds = x->d2h_t.seconds, st.d2h_bytes = x->d2h_t.total_bytes;
    st.compute_busy_seconds = x->busy_t.seconds;
    for (int i = 0; i < 3; i++) pools[i]->seconds = pools[i]->total_bytes = 0;
    segment_begin(x);
    return st;
}

void *xfer_cuda_pinned_pages(size_t bytes) {
    void *p;
    bytes = (bytes + 4095) & ~(size_t)4095;
    if (posix_memalign(&p, 4096, bytes)) mt_die("out of memory");
    CUDA_CHECK(cudaHostRegister(p, bytes, cudaHostRegisterDefault));
    return p;
}

void xfer_cuda_pinned_pages_free(void *p) {
    CUDA_CHECK(cudaHostUnregister(p));
    free(p);
}

transfer_cuda *xfer_cuda_new(mt_job *job, void *compute_stream) {
    transfer_cuda *x = calloc(1, sizeof *x);
    if (!x) mt_die("out of memory");
    x->compute = (cudaStream_t)compute_stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&x->h2d, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&x->d2h, cudaStreamNonBlocking));
    CUDA_CHECK(cudaMalloc(&x->reduce_scratch, cuda_sum_squares_scratch_bytes()));
    CUDA_CHECK(cudaMalloc((void **)&x->stage, STAGE_ELEMS * sizeof(float)));
    if (job->cfg.storage_master)
        x->copy_pinned = xfer_cuda_pinned_pages(transfer_tier_largest_piece(job) * 2);
    pool_init(&x->h2d_t, TRACE_H2D);
    pool_init(&x->d2h_t, TRACE_D2H);
    pool_init(&x->busy_t, 0);
    pool_init(&x->span_t, TRACE_COMPUTE);
    CUDA_CHECK(cudaEventCreate(&x->ref));
    CUDA_CHECK(cudaEventCreate(&x->carry));
    segment_begin(x);
    for (int k = 0; k < job->n_shards; k++)
        CUDA_CHECK(
            cudaHostRegister(job->regions[k].base, job->regions[k].size, cudaHostRegisterDefault));
    return x;
}

void xfer_cuda_free(transfer_cuda *x, mt_job *job) {
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int k = 0; k < job->n_shards; k++) CUDA_CHECK(cudaHostUnregister(job->regions[k].base));
    CUDA_CHECK(cudaFree(x->reduce_scratch));
    CUDA_CHECK(cudaFree(x->stage));
    if (x->copy_pinned) xfer_cuda_pinned_pages_free(x->copy_pinned);
    pool_destroy(&x->h2d_t);
    pool_destroy(&x->d2h_t);
    pool_destroy(&x->busy_t);
    CUDA_CHECK(cudaEventDestroy(x->carry));
    pool_destroy(&x->span_t);
    CUDA_CHECK(cudaEventDestroy(x->ref));
    CUDA_CHECK(cudaStreamDestroy(x->h2d));
    CUDA_CHECK(cudaStreamDestroy(x->d2h));
    free(x);
}

static void *new_event(void) {
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    return ev;
}

void xfer_cuda_weight_init(weight_buffer *buf) {
    buf->ready = new_event();
    buf->free = new_event();
}

void xfer_cuda_grad_init(grad_buffer *buf) {
    buf->done = new_event();
    CUDA_CHECK(cudaMalloc((void **)&buf->sumsq_dev, sizeof(double)));
    CUDA_CHECK(cudaMallocHost((void **)&buf->sumsq_host, sizeof(double)));
}

void xfer_cuda_buffers_free(weight_buffer *w, int nw, grad_buffer *g, int ng) {
    for (int i = 0; i < nw; i++) {
        CUDA_CHECK(cudaEventDestroy((cudaEvent_t)w[i].ready));
        CUDA_CHECK(cudaEventDestroy((cudaEvent_t)w[i].free));
    }
    for (int i = 0; i < ng; i++) {
        CUDA_CHECK(cudaEventDestroy((cudaEvent_t)g[i].done));
        CUDA_CHECK(cudaFree(g[i].sumsq_dev));
        if (g[i].staged) CUDA_CHECK(cudaFreeHost(g[i].staged));
        CUDA_CHECK(cudaFreeHost(g[i].sumsq_host));
    }
}

// The buffer may still be read by compute that was issued earlier: its copies wait for it.
void xfer_cuda_fetch_begin(transfer *t, weight_buffer *buf) {
    CUDA_CHECK(cudaStreamWaitEvent(t->cuda->h2d, (cudaEvent_t)buf->free, 0));
}

// Shard k's slice, issued as soon as that shard has published it: the slices of the shards
// that finished first travel while the host waits for the others, so only the last one's copy
// follows the slowest optimizer rank. Each slice is timed on its own, so the waits between
// them do not count as copy time.
void xfer_cuda_fetch_shard(transfer *t, weight_buffer *buf, int k) {
    transfer_cuda *x = t->cuda;
    mt_job *job = t->job;
    size_t n = job->layouts[k].len[buf->group];
    if (n == 0) return;
    int slot = xfer_cuda_pool_slot(x, &x->h2d_t);
    CUDA_CHECK(cudaEventRecord(x->h2d_t.begin[slot], x->h2d));
    x->h2d_t.bytes[slot] = (double)n * sizeof(float);
    x->h2d_t.tag[slot] = trace_tag_of("h2d", TRACE_ARG_GROUP, buf->group);
    bf16 *dst = (bf16 *)buf->dst + job->layouts[k].lo[buf->group];
    const float *src = job_master(job, k, buf->group);
    for (size_t i = 0; i < n; i += STAGE_ELEMS) {
        size_t len = n - i < STAGE_ELEMS ? n - i : STAGE_ELEMS;
        CUDA_CHECK(cudaMemcpyAsync(x->stage, src + i, len * sizeof(float), cudaMemcpyHostToDevice,
                                   x->h2d));
        cuda_float_to_bf16(dst + i, x->stage, (long)len, x->h2d);
    }
    CUDA_CHECK(cudaEventRecord(x->h2d_t.end[x->h2d_t.used++], x->h2d));
}

// storage.master (transfer_tier.h's protocol): each piece from its shard's weight ring, staged
// and rounded on the device; the host waits for that copy to land to learn whether the entry
// stayed the same through it, else (or when the ring no longer holds the piece) the piece comes
// from the bf16 copy on disk, once the shard has announced the version, straight into the buffer.
static int piece_from_ring(transfer *t, int k, int g, int i, bf16 *dst, uint64_t n, int64_t v) {
    transfer_cuda *x = t->cuda;
    int64_t seq;
    const float *src = transfer_tier_ring_find(t, k, g, i, v, &seq);
    if (!src) return 0;
    CUDA_CHECK(cudaMemcpyAsync(x->stage, src, n * sizeof(float), cudaMemcpyHostToDevice, x->h2d));
    cuda_float_to_bf16(dst, x->stage, (long)n, x->h2d);
    CUDA_CHECK(cudaStreamSynchronize(x->h2d));
    return transfer_tier_ring_kept(t, k, src, seq);
}

static void piece_from_copy(transfer *t, int k, int g, int i, bf16 *dst, uint64_t n) {
    transfer_cuda *x = t->cuda;
    transfer_tier_read_copy(t, k, g, i, x->copy_pinned, n);
    CUDA_CHECK(
        cudaMemcpyAsync(dst, x->copy_pinned, n * sizeof(bf16), cudaMemcpyHostToDevice, x->h2d));
    CUDA_CHECK(cudaStreamSynchronize(x->h2d)); // the pinned piece is read into again next
}

void xfer_cuda_fetch_tier(transfer *t, weight_buffer *buf) {
    mt_job *job = t->job;
    int g = buf->group;
    for (int k = 0; k < job->n_shards; k++) {
        const shard_layout *lay = &job->layouts[k];
        uint64_t piece = lay->weight_ring; // at most STAGE_ELEMS (MT_STATE_PIECE)
        for (uint64_t at = 0; at < lay->len[g]; at += piece) {
            uint64_t n = lay->len[g] - at < piece ? lay->len[g] - at : piece;
            int i = (int)(at / piece);
            bf16 *dst = (bf16 *)buf->dst + lay->lo[g] + at;
            for (;;) {
                if (piece_from_ring(t, k, g, i, dst, n, buf->version)) {
                    t->ring_hits++;
                    break;
                }
                if (transfer_tier_announced(t, k, g, buf->version)) {
                    piece_from_copy(t, k, g, i, dst, n);
                    t->copy_reads++;
                    break;
                }
                transfer_tier_pause();
            }
        }
    }
}

void xfer_cuda_fetch_end(weight_buffer *buf) {
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)buf->ready, buf->t->cuda->h2d));
}

// A wait is where the compute stream may stall: close the busy segment before it. Right after
// a wait on the optimizers the copy waited for could not start earlier: its wait is theirs.
void xfer_cuda_fetch_wait(weight_buffer *buf) {
    transfer_cuda *x = buf->t->cuda;
    int theirs = x->segment_open && x->open_marked;
    segment_end(x);
    CUDA_CHECK(cudaStreamWaitEvent(x->compute, (cudaEvent_t)buf->ready, 0));
    x->optimizer_waited = theirs;
    segment_begin(x);
    x->open_marked = 0; // the layer's compute follows: later waits are not the optimizers'
}

void xfer_cuda_buffer_done(weight_buffer *buf) {
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)buf->free, buf->t->cuda->compute));
}

// The device is idle first, so the reference event runs as soon as it is recorded: its GPU
// time lies between the two host readings, and their midpoint is off by at most half the
// (microseconds-long) round trip. Only traced steps pay for this, between steps.
void xfer_cuda_trace_calibrate(transfer_cuda *x) {
    xfer_cuda_host_blocks(x, 1); // the idle wait is not compute-stream busy time
    CUDA_CHECK(cudaDeviceSynchronize());
    double before = trace_now_us();
    CUDA_CHECK(cudaEventRecord(x->ref, x->compute));
    CUDA_CHECK(cudaEventSynchronize(x->ref));
    x->ref_host_us = 0.5 * (before + trace_now_us());
    x->ref_valid = 1;
    xfer_cuda_host_blocks(x, 0);
}

// Spans never nest and take_stats (the only other fold of span_t) runs between them, so the
// open span's begin stays in slot `used` until its end is recorded there.
void xfer_cuda_span_begin(transfer_cuda *x) {
    int i = xfer_cuda_pool_slot(x, &x->span_t);
    CUDA_CHECK(cudaEventRecord(x->span_t.begin[i], x->compute));
    x->span_open = 1;
}

void xfer_cuda_span_end(transfer_cuda *x, trace_tag tag) {
    if (!x->span_open) return;
    int i = x->span_t.used++;
    CUDA_CHECK(cudaEventRecord(x->span_t.end[i], x->compute));
    x->span_t.tag[i] = tag, x->span_t.bytes[i] = 0;
    x->span_open = 0;
}
