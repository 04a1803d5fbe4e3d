#include "runtime/engine/transfer.h"
#include "kernels/adamw.h"
#include "runtime/engine/transfer_tier.h"
#include "runtime/base/base.h"
#include "shm/syscheck.h"
#include <stdlib.h>
#include <string.h>
#ifdef MT_HAVE_CUDA
#include "runtime/engine/transfer_cuda.h"
#else // without CUDA these are never reached: t->cuda is always NULL
#define xfer_cuda_new(job, s) NULL
#define xfer_cuda_free(x, job) ((void)0)
#define xfer_cuda_out_init(x, job) ((void)0)
#define xfer_cuda_out_free(x) ((void)0)
#define xfer_cuda_weight_init(b) ((void)0)
#define xfer_cuda_grad_init(b) ((void)0)
#define xfer_cuda_buffers_free(w, nw, g, ng) ((void)0)
#define xfer_cuda_fetch_begin(t, b) ((void)0)
#define xfer_cuda_fetch_shard(t, b, k) ((void)0)
#define xfer_cuda_fetch_tier(t, b) ((void)0)
#define xfer_cuda_fetch_end(b) ((void)0)
#define xfer_cuda_fetch_wait(b) ((void)0)
#define xfer_cuda_buffer_done(b) ((void)0)
#define xfer_cuda_offload_ready(t, b) ((void)0)
#define xfer_cuda_offload(t, b) ((void)0)
#define xfer_cuda_stage(t, b) ((void)0)
#define xfer_cuda_staged_wait(b) ((void)0)
#define xfer_cuda_offload_tier(t, b) ((void)0)
#define xfer_cuda_host_blocks(x, b) ((void)0)
#define xfer_cuda_offload_landed(b, w) 1
#define xfer_cuda_take_stats(x) ((transfer_stats){0})
#define xfer_cuda_optimizer_blocks(x, b) ((void)0)
#define xfer_cuda_trace_calibrate(x) ((void)0)
#define xfer_cuda_span_begin(x) ((void)0)
#define xfer_cuda_span_end(x, tag) ((void)0)
#endif

void transfer_init(transfer *t, mt_job *job, void *compute_stream) {
    memset(t, 0, sizeof *t);
    t->job = job;
    if (compute_stream) {
        t->cuda = xfer_cuda_new(job, compute_stream);
        xfer_cuda_out_init(t->cuda, job);
        if (job->nodes > 1)
            t->d2h = stream_new("mt-nodes", TRACE_D2H); // the sums over nodes
        else if (job->cfg.storage_grads)
            t->d2h = stream_new("mt-tier", TRACE_D2H); // the disk
    } else {
        t->h2d = stream_new("mt-h2d", TRACE_H2D);
        t->d2h = stream_new("mt-d2h", TRACE_D2H);
    }
    if (job->nodes > 1) {
        uint64_t most = 0;
        for (int g = 0; g < job->n_groups; g++)
            if (job->group_numel[g] > most) most = job->group_numel[g];
        t->node_scratch = malloc(most * sizeof(float));
        if (!t->node_scratch) mt_die("out of memory");
    }
    t->version = malloc(sizeof(int64_t) * job->n_shards * job->n_groups);
    t->group_sumsq = calloc(job->n_groups, sizeof(double));
    t->taken = calloc(job->n_shards, 1);
    if (!t->version || !t->group_sumsq || !t->taken) mt_die("out of memory");
    for (int i = 0; i < job->n_shards * job->n_groups; i++) t->version[i] = -1;
    transfer_tier_init(t);
}

// The copy threads first: their jobs use the tier's descriptors and pinned pieces.
void transfer_free(transfer *t) {
    if (t->h2d) stream_free(t->h2d);
    if (t->d2h) stream_free(t->d2h);
    transfer_tier_free(t);
    if (t->cuda) xfer_cuda_out_free(t->cuda);
    if (t->cuda) xfer_cuda_free(t->cuda, t->job);
    free(t->version);
    free(t->group_sumsq);
    free(t->taken);
    free(t->node_scratch);
    free(t->grads);
}

void weight_buffer_init(transfer *t, weight_buffer *buf, void *dst) {
    memset(buf, 0, sizeof *buf);
    buf->t = t, buf->dst = dst, buf->group = -1;
    if (t->cuda) xfer_cuda_weight_init(buf);
}

void grad_buffer_init(transfer *t, grad_buffer *buf, float *src) {
    memset(buf, 0, sizeof *buf);
    buf->t = t, buf->src = src, buf->group = -1;
    if (t->cuda) xfer_cuda_grad_init(buf);
    grad_buffer **grown = realloc(t->grads, (size_t)(t->n_grads + 1) * sizeof *grown);
    if (!grown) mt_die("out of memory");
    t->grads = grown;
    t->grads[t->n_grads++] = buf;
}

void buffers_free(transfer *t, weight_buffer *w, int nw, grad_buffer *g, int ng) {
    if (t->cuda) xfer_cuda_buffers_free(w, nw, g, ng);
}

static int64_t *version_of(transfer *t, int shard, int g) {
    return &t->version[shard * t->job->n_groups + g];
}

static int version_ready(transfer *t, int g, int64_t v) {
    for (int k = 0; k < t->job->n_shards; k++)
        if (*version_of(t, k, g) < v) return 0;
    return 1;
}

void transfer_receive(transfer *t, const char *what, int from) {
    control_msg msg;
    int src = job_recv(t->job, &msg, what, from);
    if (msg.kind != CONTROL_WEIGHTS_READY || src < 1 || msg.group < 0 ||
        msg.group >= t->job->n_groups)
        mt_die("compute: unexpected control message kind %d from rank %d", msg.kind, src);
    *version_of(t, src - 1, msg.group) = msg.step;
}

int transfer_groups_ready(transfer *t, int64_t v) {
    int ready = 0;
    for (int g = 0; g < t->job->n_groups; g++) ready += version_ready(t, g, v);
    return ready;
}

// Shard k has announced version v of group g; the memory must say so too.
static int shard_ready(transfer *t, int k, int g, int64_t v) {
    if (*version_of(t, k, g) < v) return 0;
    if (job_control_block(t->job, k)->weights_version[g] < v)
        mt_die("compute: shard %d announced group %d at version %lld, memory disagrees", k, g,
               (long long)v);
    return 1;
}

// Waits until every shard has announced version v of group g. On CUDA, with buf, each shard's
// slice of the buffer is copied as soon as that shard is ready, in the order the shards
// finish, so that only the slowest shard's slice is copied after the wait.
static void wait_version(transfer *t, int g, int64_t v, weight_buffer *buf, const char *name) {
    double t0 = now_seconds();
    trace_tag tag = trace_tag_of(name, TRACE_ARG_GROUP, g);
    int blocks = !version_ready(t, g, v);
    if (blocks && t->cuda) xfer_cuda_optimizer_blocks(t->cuda, 1);
    memset(t->taken, 0, (size_t)t->job->n_shards);
    for (int left = t->job->n_shards;;) {
        for (int k = 0; k < t->job->n_shards; k++) {
            if (t->taken[k] || !shard_ready(t, k, g, v)) continue;
            t->taken[k] = 1, left--;
            if (buf && t->cuda) xfer_cuda_fetch_shard(t, buf, k);
        }
        if (left == 0) break;
        char what[64];
        int late = 0;
        while (late < t->job->n_shards && t->taken[late]) late++;
        snprintf(what, sizeof what, "group %d's weights at version %lld", g, (long long)v);
        transfer_receive(t, what, late + 1);
    }
    if (blocks && t->cuda) xfer_cuda_optimizer_blocks(t->cuda, 0);
    double t1 = now_seconds();
    if (blocks) trace_record(TRACE_HOST, tag, t0 * 1e6, t1 * 1e6); // a stall: show it
    t->opt_wait_seconds += t1 - t0;
}

static double group_bytes(const transfer *t, int g, size_t elem) {
    return (double)t->job->group_numel[g] * elem;
}

// CPU backend: gather the fp32 master and round it to bf16, as the GPU computes with it (kept in
// fp32 here, the reference's precision).
static void fetch_job(void *arg) {
    weight_buffer *buf = arg;
    mt_job *job = buf->t->job;
    if (job->cfg.storage_master) {
        transfer_tier_fetch(buf->t, buf);
        return;
    }
    for (int k = 0; k < job->n_shards; k++) {
        const float *src = job_master(job, k, buf->group);
        float *dst = (float *)buf->dst + job->layouts[k].lo[buf->group];
        size_t n = job->layouts[k].len[buf->group];
        for (size_t i = 0; i < n; i++) dst[i] = bf16_to_float(bf16_from_float(src[i]));
    }
}

void fetch_async(transfer *t, weight_buffer *buf, int g, int64_t v) {
    if (buf->group == g && buf->version == v) return; // still resident
    if (!t->cuda) stream_wait(t->h2d, buf->ticket);   // never refill under a running fetch
    buf->group = g, buf->version = v;
    if (t->cuda) {
        xfer_cuda_fetch_begin(t, buf);
        if (t->job->cfg.storage_master) xfer_cuda_fetch_tier(t, buf);
        wait_version(t, g, v, t->job->cfg.storage_master ? NULL : buf, "wait weights");
        xfer_cuda_fetch_end(buf);
        buf->ticket = 1;
    } else {
        // storage.master: the copy stream takes the pieces as they come (transfer_tier.c);
        // fetch_wait takes the announcement
        if (!t->job->cfg.storage_master) wait_version(t, g, v, NULL, "wait weights");
        trace_tag tag = trace_tag_of("h2d", TRACE_ARG_GROUP, g);
        buf->ticket = stream_submit_tagged(t->h2d, fetch_job, buf, tag);
        t->cpu_h2d_bytes += group_bytes(t, g, sizeof(float));
    }
}

void fetch_wait(weight_buffer *buf) {
    if (buf->t->cuda)
        xfer_cuda_fetch_wait(buf);
    else
        stream_wait(buf->t->h2d, buf->ticket);
    if (!buf->t->cuda && buf->t->job->cfg.storage_master)
        wait_version(buf->t, buf->group, buf->version, NULL, "wait weights");
}

void buffer_done(weight_buffer *buf) {
    if (buf->t->cuda) xfer_cuda_buffer_done(buf);
}

static void round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_to_float(bf16_from_float(x[i]));
}

// CPU backend. Over nodes the compute ranks first sum the group's gradients, in a tree fixed
// by the node indices (the offloads run in the same group order on every node, on this one
// thread). The norm is then always the fp32 gradients'; bf16 slots get them rounded once, and
// a group that stays (updated here) is rounded in place, so that it sees what a slot would hold.
// On CUDA over nodes the job runs on the group's fp32 sums as they landed in pinned memory.
static void to_slot(const mt_job *job, void *slot, const float *part, size_t n) {
    if (job->grad_bytes == 2)
        for (size_t i = 0; i < n; i++) ((bf16 *)slot)[i] = bf16_from_float(part[i]);
    else
        memcpy(slot, part, n * sizeof(float));
}

// storage.grads: the slots are the optimizer ranks' gradient files, which the group goes to
// a piece at a time (transfer_tier.c); on CUDA on one node straight from the device, its norm
// measured there as without the tier.
static void offload_job(void *arg) {
    grad_buffer *buf = arg;
    mt_job *job = buf->t->job;
    size_t numel = job->group_numel[buf->group];
    if (buf->t->cuda && job->nodes == 1) {
        xfer_cuda_offload_tier(buf->t, buf);
        return;
    }
    float *src = buf->t->cuda ? buf->staged : buf->src;
    if (buf->t->cuda) xfer_cuda_staged_wait(buf);
    if (job->nodes > 1) job_allreduce_tree(src, numel, buf->t->node_scratch, job->dp_comm);
    if (buf->stays) { // the same sum, in the same (index) order, as the copying loop below
        buf->sumsq = sum_of_squares(src, numel);
        if (job->grad_bytes == 2) round_bf16(src, numel);
        return;
    }
    double acc = 0;
    for (int k = 0; k < job->n_shards; k++) {
        const float *part = src + job->layouts[k].lo[buf->group];
        size_t n = job->layouts[k].len[buf->group];
        if (!job->cfg.storage_grads) to_slot(job, job_grad_slot(job, k, buf->group), part, n);
        for (size_t i = 0; i < n; i++) acc += (double)part[i] * part[i];
    }
    buf->sumsq = acc;
    if (job->cfg.storage_grads) transfer_tier_write_grads(buf->t, buf->group, buf->step, src);
}

static int landed(grad_buffer *buf, int wait) {
    transfer *t = buf->t;
    if (t->cuda && !t->d2h) return xfer_cuda_offload_landed(buf, wait);
    if (wait && t->cuda) xfer_cuda_host_blocks(t->cuda, 1); // not compute-stream busy time
    if (wait) stream_wait(t->d2h, buf->ticket);
    if (wait && t->cuda) xfer_cuda_host_blocks(t->cuda, 0);
    return stream_done(t->d2h, buf->ticket);
}

static void announce(grad_buffer *buf) {
    mt_job *job = buf->t->job;
    for (int k = 0; k < job->n_shards; k++)
        job_control_block(job, k)->grads_step[buf->group] = buf->step;
    control_msg msg = {CONTROL_GRADS_READY, buf->group, buf->step, buf->sumsq};
    for (int r = 1; r < job->world; r++) control_send(job->ctl, r, &msg);
    buf->announced = 1;
    buf->t->group_sumsq[buf->group] = buf->sumsq;
}

// The offload issued first of those not announced yet, or NULL.
static grad_buffer *first_unannounced(transfer *t) {
    grad_buffer *next = NULL;
    for (int i = 0; i < t->n_grads; i++) {
        grad_buffer *b = t->grads[i];
        if (b->ticket && !b->announced && (!next || b->order < next->order)) next = b;
    }
    return next;
}

// Offloads are announced strictly in the order they were issued, the backward's, the same on
// every node: over nodes with the state split (optimizer.shard_across_nodes) and the gradient
// ring, each optimizer rank gathers a group's master parts from the other nodes as soon as its
// gradients land, and those collectives pair up only when every node announces in one order.
// (Announcing a buffer as it was reused, ahead of an earlier one still in flight, once paired
// one node's gather of layer 1 with another's of layer 2: same sizes, silently wrong weights.)
// This announces every offload issued up to `last`, each once it has landed.
static void announce_through(transfer *t, const grad_buffer *last) {
    while (last->ticket && !last->announced) {
        grad_buffer *next = first_unannounced(t);
        landed(next, 1);
        announce(next);
    }
}

void offload_reuse(grad_buffer *buf) {
    announce_through(buf->t, buf);
}

// The host's slots are a ring: group g's entry held group prev's gradients before, which the
// optimizer ranks must have updated from (their update of prev, version step + 1, says so)
// before g's may go there. prev's were announced first (its offload and the ones before it, in
// order), or no optimizer rank would ever start on it.
static void wait_for_slot(transfer *t, int g, int64_t step) {
    int prev = t->job->layouts[0].ring_prev[g];
    if (prev < 0) return;
    for (int i = 0; i < t->n_grads; i++)
        if (t->grads[i]->group == prev && t->grads[i]->step == step)
            announce_through(t, t->grads[i]);
    wait_version(t, prev, step + 1, NULL, "wait slot");
}

void offload_ready(transfer *t, grad_buffer *buf, int g) {
    if (!t->cuda || t->job->nodes > 1) return; // the CPU's thread and the sums over nodes: later
    offload_reuse(buf);
    buf->group = g, buf->ready = 1;
    xfer_cuda_offload_ready(t, buf);
}

void offload_async(transfer *t, grad_buffer *buf, int g, int64_t step) {
    if (!buf->ready) offload_reuse(buf);
    if (t->job->layouts[0].ring_depth && !buf->stays) wait_for_slot(t, g, step);
    buf->group = g, buf->step = step, buf->announced = 0;
    buf->order = ++t->tickets;
    if (t->cuda && !t->d2h) {
        if (!buf->ready) xfer_cuda_offload_ready(t, buf);
        buf->ready = 0;
        xfer_cuda_offload(t, buf);
        buf->ticket = buf->order;
    } else {
        if (t->cuda && t->job->nodes > 1) {
            xfer_cuda_stage(t, buf);
        } else if (t->cuda) { // storage.grads: the norm, and the event the thread waits for
            if (!buf->ready) xfer_cuda_offload_ready(t, buf);
            buf->ready = 0;
        }
        trace_tag tag = trace_tag_of("d2h", TRACE_ARG_GROUP, g);
        buf->ticket = stream_submit_tagged(t->d2h, offload_job, buf, tag);
        if (!buf->stays) t->cpu_d2h_bytes += group_bytes(t, g, (size_t)t->job->grad_bytes);
    }
}

static transfer_stats take_copy_stats(transfer *t) {
    if (t->cuda && t->job->cfg.storage_grads && t->job->nodes == 1) {
        // the gradients leave through the tier's thread: its time is their way to the disk
        transfer_stats st = xfer_cuda_take_stats(t->cuda);
        st.d2h_seconds = stream_take_busy_seconds(t->d2h), st.d2h_bytes = t->cpu_d2h_bytes;
        t->cpu_d2h_bytes = 0;
        return st;
    }
    if (t->cuda) return xfer_cuda_take_stats(t->cuda);
    transfer_stats st = {0};
    st.h2d_seconds = stream_take_busy_seconds(t->h2d);
    st.d2h_seconds = stream_take_busy_seconds(t->d2h);
    st.h2d_bytes = t->cpu_h2d_bytes, st.d2h_bytes = t->cpu_d2h_bytes;
    st.compute_busy_seconds = st.opt_stall_seconds = -1;
    t->cpu_h2d_bytes = t->cpu_d2h_bytes = 0;
    return st;
}

transfer_stats transfer_take_stats(transfer *t) {
    transfer_stats st = take_copy_stats(t);
    transfer_tier_take_disk(t, &st);
    return st;
}

// In issue order (announce_through says why): up to the first offload still in flight, of all
// the buffers, the head's and the embedding's too.
void offload_announce(transfer *t) {
    grad_buffer *next;
    while ((next = first_unannounced(t)) && landed(next, 0)) announce(next);
}

void transfer_trace_step(transfer *t) {
    if (t->cuda && trace_active()) xfer_cuda_trace_calibrate(t->cuda);
}

void transfer_span_begin(transfer *t) {
    if (!trace_active()) return;
    if (t->cuda)
        xfer_cuda_span_begin(t->cuda);
    else
        t->span_begin_us = trace_now_us();
}

void transfer_span_end(transfer *t, trace_tag tag) {
    if (!tag.name) return;
    if (t->cuda)
        xfer_cuda_span_end(t->cuda, tag);
    else
        trace_record(TRACE_COMPUTE, tag, t->span_begin_us, trace_now_us());
}
