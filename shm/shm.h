// Shared host memory: one region per optimizer shard, holding that shard's fp32 master weights
// (the GPU streams them and rounds to bf16 itself), its gradient slots and a control block. The
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
    uint64_t masters_bytes, grads_bytes; // the two areas, page-rounded
    uint64_t total_bytes;
} shard_layout;

// order: every group once (ring_depth > 0); NULL with ring_depth 0.
void shard_layout_init(shard_layout *lay, const uint64_t *group_numel, int n_groups, int shard,
                       int n_shards, int first_shared, int grad_bytes, int ring_depth,
                       const int *order);

// The control block at the start of every region. The sequence numbers mirror the control
// messages, so either side can assert what it was told against what is in memory.
typedef struct {
    uint64_t magic;
    uint64_t total_bytes;
    int32_t n_groups, shard, n_shards, pad;
    volatile int64_t weights_version[SHM_MAX_GROUPS]; // step whose update is in the master
    volatile int64_t grads_step[SHM_MAX_GROUPS];      // step whose gradients are in the slot
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
