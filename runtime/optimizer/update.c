// An optimizer rank's AdamW over its part of a group's shard slice, with moments in memory or in
// the NVMe tier's windows, and the announcement that the GPU may stream the result.
#include "runtime/optimizer/optimizer_parts.h"
#include "runtime/base/base.h"
#include "runtime/model/model.h"
#include "runtime/observe/observe.h"
#include "shm/syscheck.h"
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <time.h>

// The master in the shard's region is at `version`: the compute rank may stream it (a group it
// updates itself has no master there, only the version, for the start's progress count).
void opt_publish_weights(optimizer *o, int g, int version) {
    mt_job *job = o->job;
    job_control_block(job, o->shard)->weights_version[g] = version;
    control_msg msg = {CONTROL_WEIGHTS_READY, g, version, 0};
    control_send(job->ctl, 0, &msg);
}

// Piece k of group g at `version`, fresh, into the next entry of the region's weight ring: the
// compute rank takes it from there if it comes for it before the entry is reused, else from the
// bf16 copy on disk. The writer never waits for the reader (shm_ring_tag's seqlock).
void opt_ring_put(optimizer *o, int g, int k, int64_t version, const float *src, uint64_t n) {
    mt_job *job = o->job;
    const shard_layout *lay = &job->layouts[o->shard];
    int e = (int)(o->ring_next++ % SHM_WEIGHT_RING);
    shm_ring_tag *t = &job_control_block(job, o->shard)->ring[e];
    float *dst = (float *)((char *)job->regions[o->shard].base + lay->ring_offset) +
                 (uint64_t)e * lay->ring_entry;
    int64_t seq = t->seq;
    __atomic_store_n(&t->seq, seq + 1, __ATOMIC_RELAXED); // odd: being written
    __atomic_thread_fence(__ATOMIC_RELEASE); // ... before any byte of the entry changes
    t->group = g, t->piece = k, t->version = version;
    memcpy(dst, src, n * sizeof(float));
    __atomic_store_n(&t->seq, seq + 2, __ATOMIC_RELEASE);
}

// State split across nodes: every node updated its part of the shard slice; each gathers the
// others' parts of the master (same-shard ranks of all nodes, in node order).
static void gather_master_parts(optimizer *o, int g) {
    mt_job *job = o->job;
    if (!job_moments_split(job)) return;
    int counts[job->nodes], displs[job->nodes];
    for (int n = 0; n < job->nodes; n++) {
        uint64_t lo, len;
        job_moment_part(job, g, job->layouts[o->shard].len[g], n, &lo, &len);
        if (lo + len > INT_MAX) mt_die("optimizer %d: a shard part over 2^31 floats", o->shard);
        counts[n] = (int)len, displs[n] = (int)lo;
    }
    MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, o->state[g].master, counts, displs,
                             MPI_FLOAT, job->dp_comm));
}

// MT_FAULT_SLOW_ADAMW_MS's pause: a stop request (SIGUSR1) that lands in it cuts it short, and
// the rest is slept.
static void sleep_through_signals(int ms) {
    struct timespec left = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&left, &left) != 0)
        if (errno != EINTR) SYS_CHECK(-1);
}

// AdamW over n elements that start at element `first` of group g, around its frozen tensors
// (model_frozen_spans): their master, m and v stay as they are, and copy (NULL: none) gets the
// master's bf16 bits as the update would have written them.
static void adamw_trainable(const mt_model *model, int g, uint64_t first, float *master, float *m,
                            float *v, bf16 *copy, const char *grads, int grad_bytes, uint64_t n,
                            const adamw_params *hp) {
    uint64_t lo[MODEL_MAX_FROZEN], hi[MODEL_MAX_FROZEN];
    int spans = model_frozen_spans(model, g, lo, hi), frozen;
    for (uint64_t a = 0, b; a < n; a = b) {
        b = model_frozen_run(lo, hi, spans, first + a, first + n, &frozen) - first;
        bf16 *cp = copy ? copy + a : NULL;
        const char *gr = grads + a * grad_bytes;
        if (frozen) {
            for (uint64_t i = a; cp && i < b; i++) copy[i] = bf16_from_float(master[i]);
        } else if (grad_bytes == 2) { // bf16 slots: rounded once on the compute rank
            adamw_update_bf16_grads(master + a, m + a, v + a, cp, (const bf16 *)gr, b - a, hp);
        } else {
            adamw_update(master + a, m + a, v + a, cp, (const float *)gr, b - a, hp);
        }
    }
}

// Elements [at, at + n) of this rank's part of group g (piece k of the tier's): AdamW from the
// gradients in its slot or the tier's window, with moments from memory or the tier's windows.
static void update_piece(optimizer *o, int g, int k, uint64_t at, uint64_t n, int step,
                         const adamw_params *hp) {
    mt_job *job = o->job;
    float *master = o->state[g].master, *m = o->state[g].m, *v = o->state[g].v;
    float *disk_m = storage_take_moments(o->tier, g, k);
    const char *disk_grads = storage_take_grads(o->tier, g, k);
    bf16 *copy = NULL; // storage.master: the update's bf16 copy of the piece, for the disk
    if (disk_m)
        m = disk_m, v = storage_v_of(o->tier, disk_m);
    else
        m += at, v += at;
    if (storage_has_master(o->tier))
        master = storage_master_of(o->tier, disk_m), copy = storage_copy_buffer(o->tier);
    else
        master += o->part_lo[g] + at;
    const char *grads =
        disk_grads ? disk_grads
                   : job_grad_slot(job, o->shard, g) + (o->part_lo[g] + at) * job->grad_bytes;
    uint64_t first = job->layouts[o->shard].lo[g] + o->part_lo[g] + at;
    adamw_trainable(&job->cfg.model, g, first, master, m, v, copy, grads, job->grad_bytes, n, hp);
    if (copy) { // fresh, still in the window: to the ring, and its copy to disk
        storage_write_copy(o->tier, g, k);
        opt_ring_put(o, g, k, step + 1, master, n);
    }
    storage_give(o->tier, step);
}

void opt_update_span(optimizer *o, int g, uint64_t at, uint64_t n, int step,
                     const adamw_params *hp) {
    update_piece(o, g, 0, at, n, step, hp);
}

void opt_finish_group(optimizer *o, int g, int step, double t0) {
    gather_master_parts(o, g);
    storage_copy_wait(o->tier); // announced only once the compute rank can read it from disk
    if (o->slow_ms > 0) sleep_through_signals(o->slow_ms);
    if (t0 >= 0)
        trace_record(TRACE_OPTIMIZER, trace_tag_of("adamw", TRACE_ARG_GROUP, g), t0,
                     trace_now_us());
    opt_publish_weights(o, g, step + 1);
}

// With the NVMe tier a group goes a piece at a time (storage_piece), through the tier's
// windows; in memory in one pass. The update is element-wise, so the bits are the same.
void opt_update_group(optimizer *o, int g, int step, const adamw_params *hp) {
    uint64_t n = o->part_n[g];
    double t0 = trace_now_us();
    if (!o->tier) {
        opt_update_span(o, g, 0, n, step, hp);
    } else {
        for (int k = 0; k < storage_pieces(n); k++) {
            uint64_t at = (uint64_t)k * storage_piece();
            update_piece(o, g, k, at, n - at < storage_piece() ? n - at : storage_piece(), step,
                         hp);
        }
    }
    opt_finish_group(o, g, step, t0);
}
