#include "shm/shm.h"

static uint64_t round_up(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

void shard_range(uint64_t n, int k, int K, uint64_t *lo, uint64_t *hi) {
    uint64_t a = round_up(n * (uint64_t)k / (uint64_t)K, SHM_ALIGN_ELEMS);
    uint64_t b = round_up(n * (uint64_t)(k + 1) / (uint64_t)K, SHM_ALIGN_ELEMS);
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}

void shard_layout_init(shard_layout *lay, const uint64_t *group_numel, int n_groups, int shard,
                       int n_shards, int first_shared, int grad_bytes) {
    lay->n_groups = n_groups;
    lay->shard = shard;
    lay->n_shards = n_shards;
    lay->first_shared = first_shared;
    lay->grad_bytes = grad_bytes;
    uint64_t off = SHM_HEADER_BYTES;
    for (int g = 0; g < n_groups; g++) {
        uint64_t lo, hi;
        shard_range(group_numel[g], shard, n_shards, &lo, &hi);
        lay->lo[g] = lo;
        lay->len[g] = hi - lo;
        lay->master_offset[g] = g < first_shared ? 0 : off;
        if (g >= first_shared) off = round_up(off + lay->len[g] * 4, 64);
    }
    // Gradients after all weights: the two directions of DMA touch separate pages.
    off = round_up(off, 4096);
    lay->masters_bytes = off - SHM_HEADER_BYTES;
    uint64_t grads = off;
    for (int g = 0; g < n_groups; g++) {
        lay->grad_offset[g] = g < first_shared ? 0 : off;
        if (g >= first_shared) off = round_up(off + lay->len[g] * (uint64_t)grad_bytes, 64);
    }
    lay->total_bytes = round_up(off, 4096);
    lay->grads_bytes = lay->total_bytes - grads;
}
