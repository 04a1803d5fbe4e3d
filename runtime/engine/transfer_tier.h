// storage.master: the fp32 master lives in the optimizer ranks' NVMe tier, and the region of each
// shard has no master to stream, only a ring of the last few pieces its rank updated (shm.h's
// weight ring). A fetch takes each piece of a group's slice from that ring when it is still there
// at the version wanted (the fresh update, still in memory: the forward after an update), else
// from the rank's bf16 copy of the weights on disk (the backward, evaluations, sampling, a
// forward that fell behind), once the rank has announced the version. Same bits either way: the
// copy is the update's round-to-nearest-even of the piece, which a fetch from the ring computes.
//
// storage.grads: the compute rank writes each group's gradients straight into the optimizer
// ranks' gradient files (opened through /proc/<pid>/fd/<fd> of the owner, as the copy is), a
// piece at a time through a buffer of a piece, and announces the group once every piece is on
// disk. No staging area in between scales with the largest group: the host holds a piece or two.
#ifndef MT_TRANSFER_TIER_H
#define MT_TRANSFER_TIER_H

#include "runtime/engine/buffers.h"

void transfer_tier_init(transfer *t);
// The largest piece any shard's ring or copy holds (a piece, or the largest slice if smaller).
uint64_t transfer_tier_largest_piece(const mt_job *job);
void transfer_tier_free(transfer *t);
// CPU backend: buf's group at buf's version into buf->dst (fp32 holding bf16 values), on the
// h2d copy stream; it waits for the pieces, so the caller has not waited for the version.
void transfer_tier_fetch(transfer *t, weight_buffer *buf);

// The steps of a fetch, for the CUDA backend (transfer_cuda.c). Piece i of group g at version v
// in shard k's ring: its floats, and the entry's sequence number, or NULL when the ring does not
// hold it; after copying it, transfer_tier_ring_kept says whether the entry stayed the same
// (else the copy is torn: take the piece from the bf16 copy). transfer_tier_announced: shard k
// has announced version v of group g, so its bf16 copy is on disk; transfer_tier_read_copy reads
// piece i of it into `out` (4 KiB-aligned, a page-rounded piece of bf16); between looks at the
// ring, transfer_tier_pause.
const float *transfer_tier_ring_find(transfer *t, int k, int g, int i, int64_t v, int64_t *seq);
int transfer_tier_ring_kept(transfer *t, int k, const float *src, int64_t seq);
int transfer_tier_announced(transfer *t, int k, int g, int64_t v);
void transfer_tier_read_copy(transfer *t, int k, int g, int i, uint16_t *out, uint64_t n);
void transfer_tier_pause(void);

// storage.grads. The elements of a piece written at once (the state's piece, or the largest
// slice if smaller); group g's gradients of `step` from host memory (fp32, the whole group:
// rounded to the slots' dtype here); elements [at, at + n) of shard k's slice of group g, already
// in the slots' dtype in a page-aligned buffer of at least a page-rounded n elements.
uint64_t transfer_tier_grads_piece(const mt_job *job);
// The metrics: what every rank of the node read from and wrote to storage.dir since the last
// call, into st's disk fields (-1 without a tier).
void transfer_tier_take_disk(transfer *t, transfer_stats *st);
void transfer_tier_write_grads(transfer *t, int g, int64_t step, const float *src);
void transfer_tier_write_piece(transfer *t, int k, int g, uint64_t at, uint64_t n, int64_t step,
                               const void *piece);

#endif
