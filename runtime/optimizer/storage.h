// The NVMe tier of one optimizer rank (storage.*): the gradient slots (storage.grads), Adam's m
// and v (storage.adam) and the fp32 master with a bf16 copy of the weights (storage.master) of
// its shard live in files in storage.dir instead of host memory. They
// move with io_uring, O_DIRECT and several requests in flight, through windows of a few pieces
// in NUMA-local memory that run ahead of the update in its order.
//
// The files are created with O_EXCL and mode 0600 under a job-unique name, given their full size
// at once (a full disk is refused at the start, not mid-run), and unlinked as soon as they are
// open: no name is left behind by any end of the job, kill -9 included, and the kernel frees the
// blocks when the rank's last descriptor closes.
#ifndef MT_STORAGE_H
#define MT_STORAGE_H

#include "kernels/bf16.h"
#include "runtime/io/io.h"
#include "runtime/job/job.h"

typedef struct storage storage;

// Groups move in pieces of storage_piece() floats (the last one of a group shorter), so that no
// window scales with the largest tensor: the embedding, the head and a large layer are read,
// updated and written a piece at a time.
size_t storage_piece(void);
int storage_pieces(uint64_t n); // the pieces of n elements

// NULL when the config puts nothing in storage.dir. [part_lo[g], part_lo[g] + part_n[g]): the
// elements of group g's slice whose moments this rank keeps and updates (job_moment_part).
storage *storage_open(mt_job *job, int shard, const uint64_t *part_lo, const uint64_t *part_n);
void storage_close(storage *s);

// A pass over the pieces of the groups in `order` (n of them), each piece taken and given back
// once, in that order: the moments window starts reading at once (it may start before the
// gradients are in), the gradients window once they all are. storage_end waits for every write
// of the pass.
void storage_begin_moments(storage *s, const int *order, int n);
void storage_begin_grads(storage *s, const int *order, int n);
// Piece k of group g's m (v follows at storage_v_of), read and ready; NULL without storage.adam.
float *storage_take_moments(storage *s, int g, int k);
float *storage_v_of(storage *s, float *m);
// storage.master: the master's piece beside m's (storage_has_master), read with it and written
// back with it at storage_give. Outside a pass, piece k of group g's master moves on its own
// (the start, resumes, exports). The bf16 copy of the weights, which the compute rank reads for
// the fetches the weight ring cannot serve: fill storage_copy_buffer with piece k of group g,
// then storage_write_copy; storage_copy_wait: every piece written so far is on disk.
int storage_has_master(const storage *s);
float *storage_master_of(storage *s, float *m);
void storage_store_master(storage *s, int g, int k, const float *piece);
void storage_load_master(storage *s, int g, int k, float *piece);
// Elements [at, at + n) of this rank's slice of group g's master, across pieces.
void storage_read_master(storage *s, int g, uint64_t at, uint64_t n, float *out);
bf16 *storage_copy_buffer(storage *s);
void storage_write_copy(storage *s, int g, int k);
void storage_copy_wait(storage *s);
// Piece k of group g's gradients as the compute rank wrote them (its first element: part_lo[g] +
// k x the piece); NULL without storage.grads.
const void *storage_take_grads(storage *s, int g, int k);
// Done with the piece taken last: its moments are written back (at `step`), its buffers reused.
void storage_give(storage *s, int step);
void storage_end(storage *s);

// Where group g's moments are, for checkpoints (group_state's tier fields).
void storage_describe(const storage *s, int g, group_state *state);

#endif
