#include "runtime/engine/transfer_tier.h"
#include "kernels/bf16.h"
#include "runtime/base/base.h"
#include "shm/syscheck.h"
#include <fcntl.h>
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

void transfer_tier_init(transfer *t) {
    mt_job *job = t->job;
    if (!job->cfg.storage_master) return;
    t->copy_fd = malloc(job->n_shards * sizeof *t->copy_fd);
    if (!t->copy_fd) mt_die("out of memory");
    for (int k = 0; k < job->n_shards; k++) t->copy_fd[k] = -1;
    void *p;
    if (posix_memalign(&p, ALIGN, round_up(transfer_tier_largest_piece(job) * sizeof(bf16))))
        mt_die("out of memory");
    t->copy_bounce = p;
}

void transfer_tier_free(transfer *t) {
    if (!t->copy_fd) return;
    if (getenv("MT_STORAGE_INFO"))
        fprintf(stderr,
                "storage: compute: %lld pieces fetched from the weight ring, %lld from the "
                "bf16 copy\n",
                (long long)t->ring_hits, (long long)t->copy_reads);
    for (int k = 0; k < t->job->n_shards; k++)
        if (t->copy_fd[k] >= 0) SYS_CHECK(close(t->copy_fd[k]));
    free(t->copy_fd), free(t->copy_bounce);
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

// The copy file has no name; its owner, on this node, says which process and descriptor hold it.
static int copy_fd(transfer *t, int k) {
    if (t->copy_fd[k] >= 0) return t->copy_fd[k];
    shm_control_block *cb = job_control_block(t->job, k);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)cb->copy_pid, (int)cb->copy_fd);
    t->copy_fd[k] = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (t->copy_fd[k] < 0)
        mt_die("storage.master: the compute rank cannot open shard %d's bf16 copy (%s): %s", k,
               path, strerror(errno));
    return t->copy_fd[k];
}

void transfer_tier_read_copy(transfer *t, int k, int g, int i, uint16_t *out, uint64_t n) {
    const shard_layout *lay = &t->job->layouts[k];
    size_t bytes = round_up(n * sizeof(bf16));
    ssize_t got = pread(copy_fd(t, k), out, bytes, (off_t)shard_copy_offset(lay, g, i));
    if (got != (ssize_t)bytes)
        mt_die("storage.master: reading group %d's bf16 copy of shard %d: %s", g, k,
               got < 0 ? strerror(errno) : "short read");
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
