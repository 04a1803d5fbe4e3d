// Shared host memory: one region per optimizer shard, holding that shard's fp32 master weights
// (the GPU streams them and rounds to bf16 itself; with the master on disk, a ring of the last
// pieces updated instead), its gradient slots and a control block. The
// owner (an optimizer rank) creates it on its NUMA node; the compute rank maps every region.
// Nothing here knows about models: a "group" is just a flat array of parameters (one decoder layer,
// the embedding, ...).
#ifndef MT_SHM_H
#define MT_SHM_H

#include <stddef.h>
#include <stdint.h>

#define SHM_MAX_GROUPS 1024
#define SHM_ALIGN_ELEMS 64 // shard boundaries fall on multiples of this many elements

// The slice [lo, hi) of a group of n elements owned by shard k of K. Boundaries are aligned so
// every shard's slice starts on a cache line and a vector boundary, whatever K is.
void shard_range(uint64_t n, int k, int K, uint64_t *lo, uint64_t *hi);

// Where each group's slice lives inside shard k's region. Groups below first_shared are
// updated elsewhere (on the compute rank's device) and have no slots: their offsets are 0.
// Gradient slots are one per group (ring_depth 0), or a ring of ring_depth entries, each the
// size of the largest slice, that the groups take in turns in the order their gradients
// arrive: the group `order` lists i-th among those with slots takes entry i % ring_depth,
// after ring_prev[g], which a writer must wait to see consumed (-1: the first in its entry).
typedef struct {
    int n_groups, shard, n_shards, first_shared, grad_bytes, ring_depth;
    uint64_t lo[SHM_MAX_GROUPS], len[SHM_MAX_GROUPS];
    uint64_t master_offset[SHM_MAX_GROUPS]; // fp32 [len]
    uint64_t grad_offset[SHM_MAX_GROUPS];   // grad_bytes (4: fp32, 2: bf16) x [len]
    int32_t ring_prev[SHM_MAX_GROUPS];
    // weight_ring > 0 (the master on disk): the pieces' floats; no master area, instead
    // SHM_WEIGHT_RING entries of ring_entry floats (a piece, or the largest slice if smaller) at
    // ring_offset, the freshly updated pieces the compute rank may take
    uint64_t weight_ring, ring_entry, ring_offset;
    uint64_t masters_bytes, grads_bytes; // the two areas (the ring in place of the masters)
    uint64_t total_bytes;
} shard_layout;

// order: every group once (ring_depth > 0); NULL with ring_depth 0.
// weight_ring: 0, or the floats of an entry of the weight ring (no master area then).
void shard_layout_init(shard_layout *lay, const uint64_t *group_numel, int n_groups, int shard,
                       int n_shards, int first_shared, int grad_bytes, int ring_depth,
                       const int *order, uint64_t weight_ring);

#define SHM_WEIGHT_RING 4

// storage.grads: the gradients go from the compute rank straight into the owner's gradients
// file, so the region keeps no slots (grads_bytes 0). Group g's slice is at this byte offset of
// that file, each group's area rounded to 4 KiB (O_DIRECT); grads_file_bytes: the file's size.
void shard_layout_grads_elsewhere(shard_layout *lay);
// The pieces of the tier, from the largest slice any shard holds of a group it updates (one
// rule for the regions, the compute rank and the plan): an entry of the weight ring (a piece of
// `piece` floats, or the largest slice if smaller, rounded to 16), and a piece of gradients the
// compute rank writes at once (the piece rounded to whole 4 KiB blocks in bf16 too, so that
// every one starts on a block of the file; a shorter slice is one piece).
uint64_t shard_ring_entry(uint64_t largest_slice, uint64_t piece);
uint64_t shard_grads_piece(uint64_t largest_slice, uint64_t piece);
uint64_t shard_grads_file_offset(const shard_layout *lay, int g);
uint64_t shard_grads_file_bytes(const shard_layout *lay);

// The bf16 copy of the weights (weight_ring > 0): piece i of group g's slice (weight_ring
// elements, the last one shorter) at this byte offset of the owner's copy file, each piece on its
// own 4 KiB-rounded area, so that O_DIRECT writes it alone. copy_bytes: the file's size.
uint64_t shard_copy_offset(const shard_layout *lay, int g, uint64_t i);
uint64_t shard_copy_bytes(const shard_layout *lay);

// An entry of the weight ring, a seqlock: the writer makes seq odd, writes the piece and its
// tag, makes seq even again; a reader copies the piece and keeps it only if seq was even and
// unchanged around its copy and the tag is the piece it wants. The writer never waits.
typedef struct {
    volatile int64_t seq, version;
    volatile int32_t group, piece;
} shm_ring_tag;

// The control block at the start of every region. The sequence numbers mirror the control
// messages, so either side can assert what it was told against what is in memory.
typedef struct {
    uint64_t magic;
    uint64_t total_bytes;
    int32_t n_groups, shard, n_shards, pad;
    volatile int64_t weights_version[SHM_MAX_GROUPS]; // step whose update is in the master
    volatile int64_t grads_step[SHM_MAX_GROUPS];      // step whose gradients are in the slot
    shm_ring_tag ring[SHM_WEIGHT_RING];               // the weight ring's entries
    // the master on disk: where the owner's bf16 copy of the weights is (its process and
    // descriptor: the file has no name), for the fetches the ring cannot serve; storage.grads:
    // the descriptor of its gradients file, which the compute rank writes
    volatile int32_t tier_pid, copy_fd, grads_fd;
    // the NVMe tier: the bytes the owner has read [0] and written [1] in storage.dir so far, for
    // the compute rank's per-step metrics
    volatile double tier_bytes[2];
} shm_control_block;

#define SHM_MAGIC 0x4d54432d53484d31ull // "MTC-SHM1"
#define SHM_HEADER_BYTES ((sizeof(shm_control_block) + 4095) & ~(size_t)4095)

typedef struct {
    char name[96];
    void *base;
    size_t size;
} shm_region;

// "/mtc-<job>-s<shard>-<random>": the random part is new at each call, so that another user who
// knows the job id still cannot take the name first.
void shm_region_name(char *out, size_t cap, const char *job, int shard);
// Creates (O_EXCL, mode 0600), sizes and maps a region whose pages live on numa_node
// (-1: no preference). Pages are touched here so they are placed before anyone else maps them.
void shm_region_create(shm_region *r, const char *name, size_t size, int numa_node);
// Maps an existing region read-write.
void shm_region_open(shm_region *r, const char *name, size_t size);
// Removes the name; the mapping stays valid until unmapped. Safe to call twice.
void shm_region_unlink(shm_region *r);
void shm_region_close(shm_region *r);

#endif
