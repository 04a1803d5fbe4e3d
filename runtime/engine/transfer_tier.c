#include "runtime/engine/transfer_tier.h"
#include "kernels/bf16.h"
#include "runtime/base/base.h"
#include "runtime/model/model.h"
#include "shm/syscheck.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ALIGN 4096

static uint64_t round_up(uint64_t x) {
    return (x + ALIGN - 1) / ALIGN * ALIGN;
}

uint64_t transfer_tier_largest_piece(const mt_job *job) {
    uint64_t most = 0;
    for (int k = 0; k < job->n_shards; k++)
        if (job->layouts[k].ring_entry > most) most = job->layouts[k].ring_entry;
    return most;
}

uint64_t transfer_tier_grads_piece(const mt_job *job) {
    uint64_t most = 0;
    for (int k = 0; k < job->n_shards; k++)
        for (int g = job->device_groups; g < job->n_groups; g++)
            if (job->layouts[k].len[g] > most) most = job->layouts[k].len[g];
    return shard_grads_piece(most, model_state_piece());
}

static void *alloc_aligned(uint64_t bytes) {
    void *p;
    if (posix_memalign(&p, ALIGN, round_up(bytes))) mt_die("out of memory");
    return p;
}

static int *closed_fds(int n) {
    int *fd = malloc(n * sizeof *fd);
    if (!fd) mt_die("out of memory");
    for (int k = 0; k < n; k++) fd[k] = -1;
    return fd;
}

// The CPU backend (and CUDA over nodes, from its pinned sums) rounds into the bounce; CUDA on
// one node copies from the device into pinned pieces of its own (transfer_cuda.c).
static void grads_init(transfer *t) {
    mt_job *job = t->job;
    const char *full = getenv("MT_TEST_STORAGE_FULL_AT_STEP"); // 1-based, as the progress shows
    const char *kill9 = getenv("MT_TEST_STORAGE_KILL_COMPUTE_AT_STEP");
    t->full_at_step = full && job->node == 0 ? atoi(full) - 1 : -1;
    t->kill_at_step = kill9 && job->node == 0 ? atoi(kill9) - 1 : -1;
    t->grads_fd = closed_fds(job->n_shards);
    if (!t->cuda || job->nodes > 1)
        t->grads_bounce = alloc_aligned(transfer_tier_grads_piece(job) * job->grad_bytes);
}

void transfer_tier_init(transfer *t) {
    mt_job *job = t->job;
    if (job->cfg.storage_grads) grads_init(t);
    if (!job->cfg.storage_master) return;
    t->copy_fd = closed_fds(job->n_shards);
    if (!t->cuda) // CUDA reads the copy into pinned memory of its own (transfer_cuda.c)
        t->copy_bounce = alloc_aligned(transfer_tier_largest_piece(job) * sizeof(bf16));
}

static void close_all(int *fd, int n) {
    for (int k = 0; k < n && fd; k++)
        if (fd[k] >= 0) SYS_CHECK(close(fd[k]));
    free(fd);
}

void transfer_tier_free(transfer *t) {
    close_all(t->grads_fd, t->job->n_shards);
    free(t->grads_bounce);
    t->grads_fd = NULL, t->grads_bounce = NULL;
    if (!t->copy_fd) return;
    if (getenv("MT_STORAGE_INFO"))
        fprintf(stderr,
                "storage: compute: %lld pieces fetched from the weight ring, %lld from the "
                "bf16 copy\n",
                (long long)t->ring_hits, (long long)t->copy_reads);
    close_all(t->copy_fd, t->job->n_shards);
    free(t->copy_bounce);
    t->copy_fd = NULL;
}

const float *transfer_tier_ring_find(transfer *t, int k, int g, int i, int64_t v, int64_t *seq) {
    mt_job *job = t->job;
    const shard_layout *lay = &job->layouts[k];
    shm_control_block *cb = job_control_block(job, k);
    for (int e = 0; e < SHM_WEIGHT_RING; e++) {
        shm_ring_tag *tag = &cb->ring[e];
        *seq = __atomic_load_n(&tag->seq, __ATOMIC_ACQUIRE);
        if ((*seq & 1) || tag->group != g || tag->piece != i || tag->version != v) continue;
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&tag->seq, __ATOMIC_ACQUIRE) != *seq) continue; // torn tag
        return (const float *)((const char *)job->regions[k].base + lay->ring_offset) +
               (uint64_t)e * lay->ring_entry;
    }
    return NULL;
}

int transfer_tier_ring_kept(transfer *t, int k, const float *src, int64_t seq) {
    const shard_layout *lay = &t->job->layouts[k];
    const float *ring = (const float *)((const char *)t->job->regions[k].base + lay->ring_offset);
    int e = (int)((uint64_t)(src - ring) / lay->ring_entry);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return __atomic_load_n(&job_control_block(t->job, k)->ring[e].seq, __ATOMIC_ACQUIRE) == seq;
}

int transfer_tier_announced(transfer *t, int k, int g, int64_t v) {
    return job_control_block(t->job, k)->weights_version[g] >= v;
}

// Piece i of group g at version v from shard k's ring into dst, rounded to bf16 as the GPU
// computes; 0 if the ring no longer (or not yet) holds it, or it was rewritten during the copy.
static int from_ring(transfer *t, int k, int g, int i, int64_t v, float *dst, uint64_t n) {
    int64_t seq;
    const float *src = transfer_tier_ring_find(t, k, g, i, v, &seq);
    if (!src) return 0;
    for (uint64_t j = 0; j < n; j++) dst[j] = bf16_to_float(bf16_from_float(src[j]));
    return transfer_tier_ring_kept(t, k, src, seq);
}

void transfer_tier_pause(void) {
    struct timespec pause = {0, 20000};
    nanosleep(&pause, NULL);
}

// The tier's files have no name; their owner, on this node, says which process and descriptor
// hold them. *fd: where the opened descriptor is kept.
static int owner_fd(int *fd, int pid, int owner_fd, int flags, int k, const char *what) {
    if (*fd >= 0) return *fd;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, owner_fd);
    *fd = open(path, flags | O_DIRECT | O_CLOEXEC);
    if (*fd < 0)
        mt_die_now("storage.dir: the compute rank cannot open shard %d's %s (%s): %s", k, what,
                   path, strerror(errno));
    return *fd;
}

static int copy_fd(transfer *t, int k) {
    shm_control_block *cb = job_control_block(t->job, k);
    return owner_fd(&t->copy_fd[k], cb->tier_pid, cb->copy_fd, O_RDONLY, k,
                    "bf16 copy of the weights");
}

void transfer_tier_read_copy(transfer *t, int k, int g, int i, uint16_t *out, uint64_t n) {
    const shard_layout *lay = &t->job->layouts[k];
    size_t bytes = round_up(n * sizeof(bf16));
    ssize_t got = pread(copy_fd(t, k), out, bytes, (off_t)shard_copy_offset(lay, g, i));
    if (got != (ssize_t)bytes)
        mt_die_now("storage.master: reading group %d's bf16 copy of shard %d: %s", g, k,
                   got < 0 ? strerror(errno) : "short read");
    __atomic_fetch_add(&t->tier_bytes[0], (uint64_t)bytes, __ATOMIC_RELAXED);
}

static void from_copy(transfer *t, int k, int g, int i, float *dst, uint64_t n) {
    transfer_tier_read_copy(t, k, g, i, t->copy_bounce, n);
    for (uint64_t j = 0; j < n; j++) dst[j] = bf16_to_float(t->copy_bounce[j]);
}

// Each piece from the ring if it is there; else from the copy once the shard has announced the
// version (its copy is then on disk); else it is still to come: look again shortly.
void transfer_tier_fetch(transfer *t, weight_buffer *buf) {
    mt_job *job = t->job;
    int g = buf->group;
    int64_t v = buf->version;
    for (int k = 0; k < job->n_shards; k++) {
        const shard_layout *lay = &job->layouts[k];
        uint64_t piece = lay->weight_ring;
        for (uint64_t at = 0; at < lay->len[g]; at += piece) {
            uint64_t n = lay->len[g] - at < piece ? lay->len[g] - at : piece;
            int i = (int)(at / piece);
            float *dst = (float *)buf->dst + lay->lo[g] + at;
            for (;;) {
                if (from_ring(t, k, g, i, v, dst, n)) {
                    t->ring_hits++;
                    break;
                }
                if (transfer_tier_announced(t, k, g, v)) {
                    from_copy(t, k, g, i, dst, n);
                    t->copy_reads++;
                    break;
                }
                transfer_tier_pause();
            }
        }
    }
}

// ---- storage.grads ----

static void write_fully(transfer *t, int k, int g, int64_t step, const void *buf, uint64_t bytes,
                        uint64_t off) {
    shm_control_block *cb = job_control_block(t->job, k);
    int fd = owner_fd(&t->grads_fd[k], cb->tier_pid, cb->grads_fd, O_WRONLY, k, "gradients");
    for (uint64_t done = 0; done < bytes;) {
        ssize_t n = pwrite(fd, (const char *)buf + done, bytes - done, (off_t)(off + done));
        int err = n < 0 ? errno : n == 0 ? EIO : 0;
        if (k == 0 && step == t->full_at_step) err = ENOSPC; // tests: a disk that fills
        if (err == EINTR) continue;
        if (err)
            mt_die_now("storage.dir: writing group %d's gradients to %s failed: %s%s", g,
                       t->job->cfg.storage_dir, strerror(err),
                       err == ENOSPC || err == EDQUOT ? " (the disk is full)" : "");
        done += (uint64_t)n;
    }
    __atomic_fetch_add(&t->tier_bytes[1], bytes, __ATOMIC_RELAXED);
    if (step == t->kill_at_step) SYS_CHECK(kill(getpid(), SIGKILL)); // tests: mid-step, a piece in
}

void transfer_tier_write_piece(transfer *t, int k, int g, uint64_t at, uint64_t n, int64_t step,
                               const void *piece) {
    const shard_layout *lay = &t->job->layouts[k];
    uint64_t es = (uint64_t)t->job->grad_bytes;
    write_fully(t, k, g, step, piece, round_up(n * es), shard_grads_file_offset(lay, g) + at * es);
}

// Shard by shard, piece by piece, rounded into the bounce (whose tail past the piece, up to the
// block, is whatever the last piece left: no one reads it).
void transfer_tier_write_grads(transfer *t, int g, int64_t step, const float *src) {
    mt_job *job = t->job;
    uint64_t piece = transfer_tier_grads_piece(job);
    for (int k = 0; k < job->n_shards; k++) {
        const shard_layout *lay = &job->layouts[k];
        const float *part = src + lay->lo[g];
        for (uint64_t at = 0; at < lay->len[g]; at += piece) {
            uint64_t n = lay->len[g] - at < piece ? lay->len[g] - at : piece;
            if (job->grad_bytes == 2)
                for (uint64_t i = 0; i < n; i++)
                    ((bf16 *)t->grads_bounce)[i] = bf16_from_float(part[at + i]);
            else
                memcpy(t->grads_bounce, part + at, n * sizeof(float));
            transfer_tier_write_piece(t, k, g, at, n, step, t->grads_bounce);
        }
    }
}

// ---- the metrics ----

void transfer_tier_take_disk(transfer *t, transfer_stats *st) {
    mt_job *job = t->job;
    st->disk_read_bytes = st->disk_write_bytes = -1;
    if (!job->cfg.storage_grads && !job->cfg.storage_adam) return;
    double now[2];
    for (int w = 0; w < 2; w++) {
        now[w] = (double)__atomic_load_n(&t->tier_bytes[w], __ATOMIC_RELAXED);
        for (int k = 0; k < job->n_shards; k++) now[w] += job_control_block(job, k)->tier_bytes[w];
    }
    st->disk_read_bytes = now[0] - t->disk_seen[0];
    st->disk_write_bytes = now[1] - t->disk_seen[1];
    t->disk_seen[0] = now[0], t->disk_seen[1] = now[1];
}
